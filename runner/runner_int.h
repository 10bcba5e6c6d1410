/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb-runner's internals, shared by its files: the event writer (runner.c),
 * the arms' shared objects (arms.c), the host-side checking layer both
 * backends use (check.c: seeded inputs, poison, comparison with the
 * protocol's tolerances, input hashes, result-reuse steps, the correctness
 * and samples events), and the cpu backend (cpu.c).  The cuda backend's
 * entry point is in runner_cuda.h, the torch backend's in runner_torch.h.
 *
 * The runner reports raw facts as events and computes no verdict.  Nothing
 * here is a public API: atb-runner is one executable, so these names are
 * runner_ and not exported.
 */
#ifndef ATB_RUNNER_INT_H
#define ATB_RUNNER_INT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "atb/kernel.h"
#include "atb/runner.h"
#include "atb/status.h"
#include "atb/timing.h"
#include "util.h"

/* Exit statuses of atb-runner. */
enum { RUNNER_EXIT_OK = 0, RUNNER_EXIT_BAD_JOB = 2, RUNNER_EXIT_FAILED = 3 };

/* ---- runner.c: the event channel ---------------------------------------- */

/*
 * Write one event (steals ev) as a line on the event channel and flush it.
 * Returns 0, or -1 when it could not be encoded or written (ev NULL included).
 */
int runner_emit(json_t *ev);

/* Emit {"event":"error","reason":reason,"message":msg}. */
void runner_emit_error(const char *reason, const char *msg);

/* ---- watch.c: progress and background work -------------------------------- */

/*
 * PROTO: gates.hang -- "progress" events at most every progress_ms (the
 * job's key; <= 0: none).  runner_progress() is called from points outside
 * every timed window; runner_progress_seen() notes that an event went out
 * (any event is progress).
 */
void runner_progress_setup(int progress_ms);
void runner_progress(void);
void runner_progress_seen(void);

/*
 * PROTO: gates.background -- the CPU time and the threads and processes
 * beside one timed group.  setup counts the threads before any candidate
 * code is loaded (runner.c calls it first); begin right before a group's
 * marker, end after its samples: a "background" event (caller emits it;
 * NULL when no group was begun or out of memory).
 */
struct runner_background {
	int on;
	int threads_start, processes_start;
	long long proc_ns0;
	int64_t wall0_ns, process0_ns, thread0_ns;
	long long trusted_ns0;   /* the trusted threads' CPU at the start; -1: none */
	long long workers_ns0;   /* the workers' first threads' CPU at the start; -1: none */
};
void runner_background_setup(void);
/*
 * The threads that were there before any candidate code (the torch
 * backend: the interpreter's and PyTorch's thread pools, warmed before
 * the candidate's import): their CPU over a group is the runner's own, so
 * the background event adds "untrusted_threads_cpu_ns", the other
 * threads' CPU less theirs.  At most RUNNER_MAX_TRUSTED are kept.
 */
#define RUNNER_MAX_TRUSTED 512
void runner_background_trust(const long *tids, size_t n);
/* The cpu backend's workers: each one's first thread times like the runner's (not "other"). */
struct runner_worker;
void runner_background_workers(const struct runner_worker *w, size_t n);
void runner_background_begin(struct runner_background *b);
json_t *runner_background_end(struct runner_background *b, uint64_t seed, const char *group);

/* ---- arms.c: each arm's shared object ------------------------------------ */

/* One arm, loaded: its kernel entry point and the SHA-256 of its file. */
struct runner_arm {
	const struct atb_runner_arm *arm;   /* borrowed from the job */
	void *dl;                           /* stays open until exit */
	atb_kernel_fn fn;                   /* NULL when it runs in a worker */
	char sha256[ATB_SHA256_HEX_LEN + 1];
	struct runner_worker *worker;       /* the cpu backend's worker, or NULL */
};

/*
 * Hash and dlopen every arm of job into arms[0..narms).  Returns 0, or -1
 * after emitting an error event ("dlopen" or "no_symbol", the arm named).
 */
int runner_load_arms(const struct atb_runner_job *job, struct runner_arm *arms);
/* The same, hashing only: the objects are loaded elsewhere (the workers). */
int runner_hash_arms(const struct atb_runner_job *job, struct runner_arm *arms);

/* The env event's "arms": [{name, so, sha256}...].  NULL when out of memory. */
json_t *runner_arms_json(const struct atb_runner_job *job, const struct runner_arm *arms);

/* ---- check.c: the host-side checking layer -------------------------------- */

/* One set of host buffers, one per job buffer: every buffer its own allocation. */
struct runner_bufs {
	void *p[ATB_RUNNER_MAX_BUFFERS];
	size_t bytes[ATB_RUNNER_MAX_BUFFERS];
	size_t n;
};

/*
 * While on, runner_bufs_free keeps large host blocks (1 MiB and more, up
 * to 32) and runner_bufs_alloc hands them out again for a buffer of the
 * same size, as they were left (not zeroed); off frees every kept block
 * and stops keeping.  runner_check_phase keeps them for its input sets;
 * timing never does.
 */
void runner_keep_buffers(int on);
/* How many blocks are kept now (for the tests). */
size_t runner_kept_blocks(void);

/* Allocate b for set (counts x dtype size each).  0, or -1 (nothing left held). */
int runner_bufs_alloc(struct runner_bufs *b, const struct atb_runner_job *job,
		      const struct atb_runner_set *set);
/* The same for the buffers that are not inputs only (out, inout): an in
 * buffer gets no memory (p NULL, bytes 0).  0, or -1. */
int runner_bufs_alloc_outputs(struct runner_bufs *b, const struct atb_runner_job *job,
			      const struct atb_runner_set *set);
/* Free every buffer of b and zero it; a zeroed b is fine. */
void runner_bufs_free(struct runner_bufs *b);

/* An input is any buffer the kernel reads: role in or inout. */
int runner_is_input(const struct atb_runner_buffer *b);
/* Does any input take the protocol's adversarial distributions? */
int runner_any_adversarial(const struct atb_runner_job *job);

/*
 * PROTO: correctness.input_sets_per_seed, correctness.distributions -- the
 * input sets of the seed at index seed_index of the job, into out (room
 * for ATB_RUNNER_MAX_DISTS + 1): -1 (the task's own generator) first, then
 * protocol distribution indices.  With input_sets_per_seed n (n - 1 = p
 * adversarial sets per seed), 0 < p < ndists and nseeds * p >= ndists,
 * seed index i takes distributions (i * p + j) mod ndists, j < p: the
 * rotation uses every distribution across the job's seeds.  Otherwise
 * (the key absent, p >= ndists, p == 0, or too few seeds for every
 * distribution to be used) every distribution, on every seed.  Only the
 * task's generator when no input takes adversarial distributions.
 * Returns the count.
 */
size_t runner_seed_inputs(const struct atb_runner_job *job, size_t seed_index, int *out);

/* Does the job rotate distributions over its seeds (see runner_seed_inputs)? */
int runner_rotates(const struct atb_runner_job *job);

/*
 * The env event's "correctness_inputs": {"input_sets_per_seed": n or null,
 * "rule": "rotation" | "all", "distributions_per_seed": p}.  NULL when out
 * of memory.
 */
json_t *runner_inputs_json(const struct atb_runner_job *job);

/* The name of input set dist: "task" for -1, else the distribution's. */
const char *runner_input_name(const struct atb_runner_job *job, int dist);

/* Copy the inputs of src into dst (same set). */
void runner_copy_inputs(struct runner_bufs *dst, const struct runner_bufs *src,
			const struct atb_runner_job *job);

/* PROTO: correctness.poison -- every out buffer of b: NaN for reals (fp16
 * and bf16: their quiet-NaN patterns), the type's minimum for integers. */
void runner_poison_outputs(struct runner_bufs *b, const struct atb_runner_job *job,
			   const struct atb_runner_set *set);

/*
 * The same poison as one 32-bit word to repeat over a device buffer
 * (cuMemsetD32): 0x7fc00000 fp32, 0x7ff80000 fp64 (the pair is a NaN),
 * 0x7e007e00 fp16, 0x7fc07fc0 bf16, 0x80000000 integers.  A 2-byte buffer
 * with an odd count has a last element the word does not cover: the
 * caller must write it (or round the allocation up to 4 bytes).
 */
uint32_t runner_poison_word32(enum atb_dtype d);

/*
 * Element k of a buffer of dtype d set from a drawn value x: real types
 * rounded to the type (fp16 and bf16 to nearest even), integers floored.
 * Every input the runner draws, and every timed perturbation, goes through
 * here, so both hold the same values for the same draws.
 */
static inline void runner_store_elem(void *p, enum atb_dtype d, size_t k, double x)
{
	switch (d) {
	case ATB_DTYPE_FP32:
		((float *)p)[k] = (float)x;
		break;
	case ATB_DTYPE_FP64:
		((double *)p)[k] = x;
		break;
	case ATB_DTYPE_INT32:
		((int32_t *)p)[k] = (int32_t)floor(x);
		break;
	case ATB_DTYPE_INT64:
		((int64_t *)p)[k] = (int64_t)floor(x);
		break;
	case ATB_DTYPE_FP16:
		((uint16_t *)p)[k] = atb_fp16_from_float((float)x);
		break;
	case ATB_DTYPE_BF16:
		((uint16_t *)p)[k] = atb_bf16_from_float((float)x);
		break;
	}
}

/* Input streams: the correctness inputs, the result-reuse second inputs, timing. */
enum { RUNNER_STREAM_CHECK = 0, RUNNER_STREAM_REUSE = 1, RUNNER_STREAM_TIMING = 2 };

/*
 * The GSL mt19937 seed of one input buffer: splitmix64 steps over the seed,
 * the set index, the input (dist + 1) and (stream << 32 | buffer).  Fixed
 * forever: stored results name their seeds, and the inputs must follow.
 */
uint64_t runner_input_seed(uint64_t seed, size_t set_index, int dist, unsigned stream,
			   size_t buffer);

/*
 * PROTO: correctness.input_chunk_elements -- the mt19937 seed of chunk
 * `chunk` of a buffer whose stream is buffer_seed: buffer_seed itself for
 * chunk 0 (so the first chunk, and a buffer of one chunk, hold the values of
 * the one-stream derivation), a splitmix64 step over both otherwise.  Fixed
 * forever, as runner_input_seed.
 */
uint64_t runner_chunk_seed(uint64_t buffer_seed, size_t chunk);

/*
 * PROTO: timing.placement (keyed) -- the job's key, or when the job came
 * without one (a bare runner) one drawn once per runner from getrandom;
 * NULL when getrandom failed.
 */
const unsigned char *runner_placement_key(const struct atb_runner_job *job);

/* The "buffer" index of runner_arm_order's draws: no task has so many buffers. */
#define RUNNER_ORDER_BUFFER ((size_t)0xffff)

/*
 * PROTO: timing.placement (keyed, cpu and cuda backends: version 10 on) -- the
 * order in which the backend allocates the arms' timing buffers on seed `seed`:
 * order[0..narms-1] the arms rotated by (d + seed) mod narms, where d is
 * runner_placement_keyed's draw (pad << 13 | off) for (0, 0,
 * RUNNER_ORDER_BUFFER) under the job's key: one arm further each seed, so
 * that over a measurement's consecutive seeds each arm is first equally
 * often (the first allocated arm read up to 6% faster on the 2-core box),
 * and where the rotation starts is the measurement's own.  The identity
 * under any other placement.  0, or -1 when the key or libcrypto failed.
 */
int runner_arm_order(const struct atb_runner_job *job, uint64_t seed, size_t *order);

/*
 * runner_arm_order for a seed about to be timed (cpu and cuda backends), and
 * under keyed its placement event, {"event":"placement","seed":S,"order":
 * [ARM...]}.  0, or -1 after a timing error event (or a failed emit).
 */
int runner_arm_order_announce(const struct atb_runner_job *job, uint64_t seed, size_t *order);

/* The arms' names in that order, as a new JSON array (NULL: out of memory). */
json_t *runner_arm_order_names(const struct atb_runner_job *job, const size_t *order);

/*
 * PROTO: timing.placement (keyed, version 9) -- where buffer `buffer` of arm
 * `arm` goes on seed `seed`: *pad a pad of 0 to 15 units of 2 MiB allocated
 * before it, *off 0 to 8191 units of 256 bytes into its own allocation, the
 * ranges of `shuffled`.  Both from HMAC-SHA256 under the job's 16-byte key
 * over "atb-placement", seed, arm and buffer (64-bit little-endian each):
 * pad the low 4 bits of the first byte, off the low 13 bits of the next
 * two (exactly uniform).  0, or -1 when libcrypto failed.
 */
int runner_placement_keyed(const unsigned char key[16], uint64_t seed, size_t arm,
			   size_t buffer, unsigned *pad, unsigned *off);

/*
 * Host-side work of the correctness phase on the host's cores: drawing a
 * chunked input set, comparing large outputs, their reduction bounds and
 * the input hashes.  At most RUNNER_MAX_THREADS threads.
 */
#define RUNNER_MAX_THREADS 16

/* How many threads nitems items get: the CPUs this process may run on, at
 * most RUNNER_MAX_THREADS and nitems, at least 1. */
size_t runner_threads(size_t nitems);

/* One item of runner_parallel's work: 0, or non-zero when it failed. */
typedef int runner_item_fn(void *ctx, size_t item);

/*
 * fn(ctx, i) for every i in [0, n), on up to runner_threads(n) threads, the
 * caller among them; a thread that cannot be started (a sandbox's process
 * limit) leaves its share to the others, so every item always runs, in no
 * set order.  Returns when all have: 0, or -1 when any returned non-zero.
 */
int runner_parallel(size_t n, runner_item_fn *fn, void *ctx);

/*
 * Fill the inputs of b for (seed, set_index, dist, stream) deterministically,
 * one mt19937 per buffer (runner_input_seed); with the job's
 * input_chunk_elements (protocol v8), a buffer of more elements than that is
 * drawn in chunks, chunk c from runner_chunk_seed(its stream, c), the chunks
 * by up to RUNNER_MAX_THREADS threads (the values do not depend on how
 * many).  dist -1 is the task's own
 * generator; otherwise the protocol's distribution dist for buffers marked
 * adversarial.  Both backends draw through here, so a seed gives the same
 * inputs on cpu and cuda.  0, or -1 when GSL cannot allocate.
 */
int runner_gen_inputs(struct runner_bufs *b, const struct atb_runner_job *job,
		      const struct atb_runner_set *set, uint64_t seed, size_t set_index,
		      int dist, unsigned stream);

/*
 * The two input sets of one correctness check of set set_index, in fresh
 * allocations: a (RUNNER_STREAM_CHECK) and b (RUNNER_STREAM_REUSE, the
 * result-reuse step's other inputs).  0, or -1 with both freed.
 */
int runner_gen_input_pair(const struct atb_runner_job *job, size_t set_index, uint64_t seed,
			  int dist, struct runner_bufs *a, struct runner_bufs *b);

/* Is arm i checked against the reference?  Not the reference, not baseline_alone. */
int runner_arm_is_checked(const struct atb_runner_job *job, size_t i);

/*
 * Is any arm checked?  When none is (the reference and baseline_alone only,
 * as in atb measure's drift job), the backends run no correctness phase:
 * there is nothing to compare, and the reference was checked in the job
 * that had the candidate.
 */
int runner_any_checked(const struct atb_runner_job *job);

/* Element k of an array of dtype d, as a double (int64 may round). */
double runner_elem(const void *p, enum atb_dtype d, size_t k);

/* What a comparison found. */
struct runner_cmp {
	double max_abs, max_rel;
	long long first_bad;     /* -1 when none */
	double bad_ref, bad_got;
	size_t nbad, nnan;
};

/*
 * PROTO: correctness.tolerances -- compare n elements: |got - ref| <= atol +
 * rtol * |ref|; NaN where the reference is not NaN fails (an unwritten,
 * poisoned element), infinities must be equal.  Equal int64 elements pass
 * exactly; unequal ones are compared as doubles (beyond 2^53 that rounds).
 */
void runner_compare(const void *ref, const void *got, enum atb_dtype d, size_t n,
		    double atol, double rtol, struct runner_cmp *c);

/*
 * As runner_compare, with extra[k] (when not NULL) added to element k's
 * allowance: |got - ref| <= atol + rtol * |ref| + extra[k].  *c is filled
 * in full (max_abs, max_rel: the largest over elements, NaN elements as 0,
 * unequal infinities as infinity; first_bad with its ref and got, nbad,
 * nnan: a NaN got where ref is not NaN).  The results are bit-identical to
 * the plain loop kept as the oracle in tests/unit/compare-oracle.h
 * (u-compare holds it to that); only the time differs.  Reads ref, got
 * and extra and writes only *c: safe to call from several threads at once
 * on any ranges (compare_parallel in torch.c does).  An unknown d compares
 * nothing (*c as for n = 0).
 */
void runner_compare_bounded(const void *ref, const void *got, enum atb_dtype d, size_t n,
			    double atol, double rtol, const double *extra, struct runner_cmp *c);

/* runner_compare_parallel's piece: elements per item of work. */
#define RUNNER_CMP_PIECE ((size_t)1 << 22)

/*
 * runner_compare_bounded over pieces of RUNNER_CMP_PIECE elements on the
 * host's cores (runner_parallel), merged as one pass would have found it:
 * the maxima, the sums, and the first bad element of the lowest piece that
 * has one.  Each piece is runner_compare_bounded on its range, and that
 * rule judges each element on its own (the maxima only decide which
 * elements it may pass over), so *c is bit-identical to one call's
 * (u-runner holds it to that).  Below two pieces, on one CPU, or out of
 * memory: one call on the calling thread.
 */
void runner_compare_parallel(const void *ref, const void *got, enum atb_dtype d, size_t n,
			     double atol, double rtol, const double *extra,
			     struct runner_cmp *c);

/*
 * PROTO: correctness.reduction_tolerance -- the extra allowance of each
 * element of output buffer i when it is a reduction and the job has the
 * protocol's reduction_tolerance: factor * g(K) * u(accumulate) * B_ij, with
 * g(K) = sqrt(K) or K, B_ij = ||A(i,:)||_2 ||B(:,j)||_2 for two operands
 * (A [M,K], B [K,N] row-major) and sum_k |X(i,k)| for one, computed from the
 * operands in `in`.  Caller frees the array (atb_free); NULL (and *length
 * 0 when it is not a reduction) when there is none or no memory.
 */
double *runner_reduction_bound(const struct atb_runner_job *job, const struct atb_runner_set *set,
			       const struct runner_bufs *in, size_t i, size_t *length);

/* The job's tolerance for dtype d (the last entry naming it); 0, 0 when none. */
void runner_tolerance_for(const struct atb_runner_job *job, enum atb_dtype d, double *atol,
			  double *rtol);

/*
 * One output's comparison as the correctness event's per-buffer object
 * (name, dtype, pass, errors, counts, atol, rtol).  NULL when out of memory.
 */
json_t *runner_buffer_json(const char *name, enum atb_dtype d, const struct runner_cmp *c,
			   double atol, double rtol);

/* Fold c (of the output named name) into worst: largest errors, summed
 * counts, the first bad element with its buffer's name in *worst_name. */
void runner_cmp_merge(struct runner_cmp *worst, const char **worst_name,
		      const struct runner_cmp *c, const char *name);

/* worst set to "nothing compared yet" (first_bad -1). */
void runner_cmp_init(struct runner_cmp *worst);

/*
 * Does every output (out and inout) of got match ref?  When arr is given,
 * appends one object per output (name, dtype, pass, errors, counts, atol,
 * rtol); when worst is given, fills the largest errors, the summed counts
 * and the first bad element with its buffer's name in *worst_name.
 */
int runner_outputs_match(const struct atb_runner_job *job, const struct atb_runner_set *set,
			 const struct runner_bufs *ref, const struct runner_bufs *got,
			 json_t *arr, struct runner_cmp *worst, const char **worst_name);

/*
 * A digest of every in buffer of b into out[i] (others untouched), hex:
 * SHA-256 of a buffer of at most RUNNER_HASH_PIECE bytes; of a longer one,
 * SHA-256 of its pieces' SHA-256 hex digests, in order, the pieces hashed
 * on the host's cores (runner_parallel).  Compared only with another
 * digest of the same buffer in the same run (the input-mutation fact), so
 * the tree form needs no compatibility.  0 or -1.
 */
#define RUNNER_HASH_PIECE ((size_t)64 << 20)
int runner_hash_inputs(const struct atb_runner_job *job, const struct runner_bufs *b,
		       char (*out)[ATB_SHA256_HEX_LEN + 1]);

/* PROTO: gates input_mutation -- names of the in buffers whose hashes differ. */
json_t *runner_mutated_inputs(const struct atb_runner_job *job,
			      char (*before)[ATB_SHA256_HEX_LEN + 1],
			      char (*after)[ATB_SHA256_HEX_LEN + 1]);

/*
 * The result-reuse facts of one arm.  When the outputs were wrong with
 * the second inputs in the old buffers and wrong again with them in fresh
 * buffers (and not the first inputs' stale result), the kernel is simply
 * wrong on those inputs: wrong_fresh is 1, follows stays 1, and the
 * mismatch of the fresh call is kept for the correctness event.
 */
struct runner_reuse {
	int follows;               /* 1: the outputs followed the inputs */
	const char *failed_step;   /* static text; NULL when none failed */
	int wrong_fresh;           /* 1: wrong in fresh buffers too: correctness */
	int kernel_status;         /* the fresh call's, when wrong_fresh */
	struct runner_cmp worst;   /* the fresh call's mismatch, when wrong_fresh */
	const char *worst_name;
	json_t *buffers;           /* per-output objects, owned; NULL unless wrong_fresh */
	/* the failed step's mismatch (step_cmp_set: 1 when a step's outputs
	   were compared and failed), for the event: how far off, not only where */
	int step_cmp_set;
	struct runner_cmp step_cmp;
	const char *step_cmp_name;
};

/* The failed step's mismatch for the correctness event, or json null. */
json_t *runner_reuse_step_json(const struct runner_reuse *r);


/*
 * Run the arm with inputs `in` in buffer slot `slot` (0 or 1, each kept
 * alive by the backend for the whole check): poison the outputs, call, and
 * point *got at host buffers holding the outputs.  *kernel_status is what
 * the kernel returned.  Returns 0, or -1 on a runner failure (the backend
 * keeps the message).
 */
typedef int (*runner_reuse_run_fn)(void *ctx, int slot, const struct runner_bufs *in,
				   const struct runner_bufs **got, int *kernel_status);

/*
 * Result reuse (PROTO: gates result_reuse): the arm on inputs A in slot 0,
 * on different inputs B in slot 1 while slot 0 is alive (other pointers,
 * other contents), then on B in slot 0 (same pointers, new contents).  Each
 * output must match the reference for its inputs; a kernel that caches
 * results keyed on anything but the full input contents fails one step:
 * fresh_inputs_a, fresh_inputs_b, same_buffers_new_inputs, or kernel_failed.
 * Returns 0 with *res filled, or -1 when run failed.
 */
int runner_check_reuse(const struct atb_runner_job *job, const struct atb_runner_set *set,
		       const struct runner_bufs *in_a, const struct runner_bufs *ref_a,
		       const struct runner_bufs *in_b, const struct runner_bufs *ref_b,
		       runner_reuse_run_fn run, void *ctx, struct runner_reuse *res);

/* Everything one correctness event says about one arm on one input set. */
struct runner_facts {
	uint64_t seed;
	const char *arm;
	size_t set_index;
	int dist;                  /* -1: the task's own inputs */
	int pass, kernel_status;
	struct runner_cmp worst;
	const char *worst_name;
	json_t *buffers;           /* runner_outputs_match's array; stolen */
	json_t *mutated;           /* runner_mutated_inputs; stolen */
	/*
	 * PROTO: gates result_reuse -- checked once per (seed, parameter set,
	 * arm), on the first input set whose outputs were right: reuse_checked
	 * is 1 on that one; reuse_checked_on names the input set it was checked
	 * on (this one or an earlier one), NULL when not yet.
	 */
	struct runner_reuse reuse;
	int reuse_checked;
	const char *reuse_checked_on;
	json_t *aliasing;          /* the output_aliasing fact; stolen; NULL: null */
};

/* Did any fact fail: outputs, an input mutated, reuse, or an aliasing overlap? */
int runner_facts_failed(const struct runner_facts *f);

/*
 * After the reuse steps of f's arm: a reuse result that was a wrong kernel
 * (wrong_fresh) becomes f's correctness failure (pass 0, the fresh call's
 * mismatch and buffers, reuse not counted as checked, *reuse_on left NULL
 * so a later input set checks again); otherwise reuse is marked checked
 * on f's input set, named in *reuse_on.
 */
void runner_reuse_settle(const struct atb_runner_job *job, struct runner_facts *f,
			 const char **reuse_on);

/*
 * The correctness event of f (docs/internals/runner.md), stealing its json
 * members (set to NULL).  NULL when out of memory.
 */
json_t *runner_correctness_event(const struct atb_runner_job *job, struct runner_facts *f);

struct atb_cuda;

/* What the done event reports beside the job's own numbers. */
/*
 * Where the correctness phase's time goes, a diagnostic (docs/internals/
 * runner.md, "The done event"): wall time spent in each part, summed over
 * the phase, reported in the done event's "correctness_parts_ns".  Written
 * by the runner's own code in the candidate's address space, so never
 * judged: it only tells a developer what to make faster.
 */
enum runner_part {
	RUNNER_PART_GEN,        /* drawing inputs (runner_gen_inputs), host buffers first touched */
	RUNNER_PART_REFERENCE,  /* the reference's calls: buffers, copies, the call */
	RUNNER_PART_ARM,        /* the checked arms' calls, likewise */
	RUNNER_PART_HASH,       /* SHA-256 of the inputs before and after a call */
	RUNNER_PART_COMPARE,    /* outputs against the reference's */
	RUNNER_PART_REUSE,      /* the result-reuse steps (their calls and comparisons) */
	RUNNER_NPARTS
};

/* PROTO: correctness.reference_precision -- what the torch runner allowed
 * for its reference's own precision (runner_done, the "done" event). */
struct runner_ref_precision {
	double factor;        /* the protocol's; 0: no rule (before version 14) */
	size_t compared;      /* reference outputs whose two runs were compared */
	size_t differed;      /* those whose two runs differed */
	double largest;       /* the largest allowance (factor x difference) */
	char largest_of[64];  /* the reference slot it was for */
	size_t unbounded;     /* non-finite differences: no allowance made */
	char unavailable[240];  /* why the float64 reference could not be run; "" */
};

struct runner_done {
	size_t nevents, failures;  /* correctness events, and those with a failed fact */
	int64_t t0_ns;             /* when the run began (CLOCK_MONOTONIC) */
	int64_t check_ns;          /* time spent on correctness */
	int64_t parts_ns[RUNNER_NPARTS];  /* check_ns's parts (enum runner_part) */
	size_t escapes;            /* side-stream escapes, counted by time_seed */
	int has_escapes;           /* cuda, torch: report side_stream_escapes */
	const size_t *skipped;     /* torch: inputs_skipped_undefined; NULL: absent */
	/* torch: reference_copies_unprotected, the reference outputs compared
	   from PyTorch's own tensor because the runner's copy could not be
	   allocated; NULL: absent */
	const size_t *ref_direct;
	/* torch, protocol version 14 on: the reference's precision allowance
	   (reference_precision: the reruns compared, the largest allowance and
	   the output it was for); NULL: absent */
	const struct runner_ref_precision *ref_precision;
};

/*
 * A backend's side of the correctness phase (runner_check_phase): how to
 * run the reference, a checked arm and the result-reuse steps on its own
 * buffers (host memory, device allocations).  Each returns 0, or -1 after
 * it has emitted the error event (reason and message are the backend's).
 */
struct runner_check_ops {
	/* The reference's outputs for inputs `in`: allocate *out (host) for set and fill it. */
	int (*reference)(void *ctx, const struct atb_runner_set *set, const struct runner_bufs *in,
			 struct runner_bufs *out);
	/*
	 * Checked arm ai on a fresh copy of `in` with poisoned outputs: every
	 * buffer as the call left it into got (host, allocated by the caller
	 * for set), what the kernel returned in *kernel_status and the
	 * output_aliasing fact in *aliasing (owned by the caller; NULL: null).
	 */
	int (*arm)(void *ctx, size_t ai, const struct atb_runner_set *set,
		   const struct runner_bufs *in, struct runner_bufs *got, int *kernel_status,
		   json_t **aliasing);
	/* runner_check_reuse for arm ai on the backend's buffers. */
	int (*reuse)(void *ctx, size_t ai, const struct atb_runner_set *set,
		     const struct runner_bufs *in_a, const struct runner_bufs *ref_a,
		     const struct runner_bufs *in_b, const struct runner_bufs *ref_b,
		     struct runner_reuse *res);
};

/*
 * The correctness phase of the cpu and cuda backends (PROTO:
 * correctness.distributions, correctness.input_sets_per_seed, odd_shapes;
 * gates input_mutation, result_reuse): for every seed, parameter set and
 * input set of the seed (runner_seed_inputs), the inputs from the seed
 * (RUNNER_STREAM_CHECK), the reference once, then every checked arm: input
 * hashes before and after, outputs against the reference's, result reuse
 * once per (seed, set, arm) on the first input set whose outputs were
 * right (the second inputs, RUNNER_STREAM_REUSE, and their reference made
 * then), one correctness event each.  Nothing when no arm is checked.
 * Counts events and failed ones into d, and d->check_ns.  0, or -1 after
 * an error event (or a correctness event that could not be written).
 */
int runner_check_phase(const struct atb_runner_job *job, const struct runner_check_ops *ops,
		       void *ctx, struct runner_done *d);

/* Time one seed: 0, or -1 after an error event.  d->escapes is the backend's to add to. */
typedef int (*runner_time_seed_fn)(void *ctx, struct atb_timer *timer, uint64_t seed,
				   size_t *escapes);

/*
 * The end of every backend's run: timing "skipped" (the job says so),
 * "skipped_incorrect" (a correctness fact failed and the job does not time
 * anyway), or every seed through time_seed; then the done event, its keys
 * in the order the harness has always read.  0, or -1 when a seed failed
 * (its error emitted) or the done event could not be written.
 */
int runner_time_and_done(const struct atb_runner_job *job, struct atb_timer *timer,
			 runner_time_seed_fn time_seed, void *ctx, struct runner_done *d);

/*
 * PROTO: timing.side_stream -- one call of the arm (call(ctx)) between a
 * pair of events on the runner's stream after a device-wide sync, then a
 * device-wide sync timed on the host: work the call left on another
 * stream shows as device time past the event window.  Emits the
 * side_stream event.  1 when the call escaped the window, 0 when not, -1
 * on a driver failure (err filled, nothing emitted) or when the event
 * could not be written (err empty).
 */
int runner_side_stream(struct atb_cuda *cu, uint64_t seed, const char *arm,
		       int (*call)(void *ctx), void *ctx, struct atb_error *err);

/*
 * PROTO: gates.side_stream.timed -- after a group's timed trials, for every
 * arm of the group but the reference (ref; >= s->narms: none, nothing is
 * emitted): a side_stream event with phase "timed", the medians over its
 * trials of the trial time and of how long the device stayed busy after
 * the stop event (the timer's device_extra_ns), and the reference's median
 * of the latter.  The harness judges it (src/measure/gates.c).  Nothing
 * when the timer does not measure it.  0, or -1 (out of memory, or the
 * channel failed).
 */
int runner_emit_timed_side_stream(const struct atb_timing_seed *s, const char *const *names,
				  size_t ref);

/*
 * PROTO: gates.clock -- emit the "timed_begin" marker of a timed group (seed,
 * arms) and note this process's clock: the next samples event's span_ns
 * counts from here.  Every path that times a group calls it right before
 * the timing core (runner_time_group_timed does; torch's own group too).
 * 0, or -1 (the channel failed).
 */
int runner_mark_group(uint64_t seed, size_t narms);

/*
 * Time one group of arms (paired, or baseline_alone by itself) for seed
 * through the one timing core.  Returns 0 with *res filled (the caller
 * releases it), or -1 after an error event, res released: "kernel_failed"
 * when a call failed, "timing" otherwise, with the core's message, or
 * timer_why(timer) when that is given and not empty (a timer's own cause).
 * First it emits a "timed_begin" marker (seed, arms) and notes its clock, from
 * which runner_emit_samples measures the group's span_ns (PROTO: gates.clock).
 */
int runner_time_group(const struct atb_runner_job *job, struct atb_timer *timer,
		      uint64_t seed, size_t narms, atb_timing_call_fn call, void *ctx,
		      const char *(*timer_why)(const struct atb_timer *),
		      struct atb_timing_seed *res);

/*
 * Emit one samples event per arm of s (names[i] is arm i of the timing
 * core's run; group "paired" or "alone"), each with span_ns, the runner's
 * clock since the group's timed_begin marker.  throttled >= 0 adds the cuda
 * backend's "throttled" flag; -1 leaves it out.  0, or -1 when an event
 * could not be built or written.
 */
int runner_emit_samples(const struct atb_timing_seed *s, const char *group,
			const char *const *names, size_t narms, int throttled);

/* A finite number as a json real, or null (jansson has no NaN or infinity). */
json_t *runner_real(double x);

/* ---- timed.c: checks between timed rounds (PROTO: gates.timed_correctness) -- */

/*
 * What the job's key says about one (seed, group): base, the stream every
 * draw comes from (splitmix64 steps over the key, the seed and the group:
 * 0 paired, 1 alone), and the forced checks.
 */
struct runner_timed_plan {
	uint64_t base;
	double check_share;
	int perturb_elements;
	int nforced;
	int forced[ATB_RUNNER_MAX_PERTURB];  /* rounds always checked, distinct */
};

/*
 * The plan of (seed, group) under t: min(min_checks_per_seed, trials_min)
 * distinct rounds below trials_min are forced checks (the rounds that
 * always run), each other round is checked with probability check_share.
 * The same key, seed and group give the same plan; another key another.
 */
void runner_timed_plan_init(struct runner_timed_plan *pl, const struct atb_runner_timed *t,
			    int trials_min, uint64_t seed, unsigned group);

/* Is round (0-based) of this plan a checked one? */
int runner_timed_plan_is_check(const struct runner_timed_plan *pl, int round);

/* A 64-bit number for round's perturbation where the backend draws it itself (torch). */
uint64_t runner_timed_round_key(const struct runner_timed_plan *pl, int round);

/* Where one round changed the inputs: per buffer, the element indices. */
struct runner_perturb {
	size_t n[ATB_RUNNER_MAX_BUFFERS];
	size_t pos[ATB_RUNNER_MAX_BUFFERS][ATB_RUNNER_MAX_PERTURB];
};

/*
 * Change perturb_elements elements (positions and values from the plan and
 * the round) of every input buffer of master with values from the buffer's
 * own distribution; *where gets the positions.  Deterministic.  0, or -1
 * when GSL cannot allocate.
 */
int runner_timed_perturb(struct runner_bufs *master, const struct atb_runner_job *job,
			 const struct atb_runner_set *set, const struct runner_timed_plan *pl,
			 int round, struct runner_perturb *where);

/*
 * A host arm's round preparation: the changed elements of master's in
 * buffers, master's inout buffers whole, the out buffers poisoned.
 */
void runner_timed_apply_host(struct runner_bufs *dst, const struct runner_bufs *master,
			     const struct atb_runner_job *job, const struct atb_runner_set *set,
			     const struct runner_perturb *where);

/* How a backend moves one group arm's data (arm: index in the group). */
struct runner_timed_ops {
	/* Before a round: runner_timed_apply_host's work on the arm's buffers. */
	int (*prepare)(void *ctx, size_t arm, const struct runner_bufs *master,
		       const struct runner_perturb *where);
	/* After a checked round: *got points at host buffers whose out and inout
	 * buffers hold the arm's outputs (valid until the next call for the arm). */
	int (*outputs)(void *ctx, size_t arm, const struct runner_bufs **got);
};

/* One arm's timed checks over a group. */
struct runner_timed_stats {
	int rounds_checked, failed, first_failed_round;  /* -1: none failed */
	double max_abs;
	size_t bad_count, nan_count;
	long long first_bad_index;
	double first_bad_ref, first_bad_got;
	char first_bad_buffer[64];
};

/* The hooks' state for one group of one seed. */
struct runner_timed {
	const struct atb_runner_job *job;
	const struct atb_runner_set *set;
	const struct runner_timed_ops *ops;
	void *ctx;
	size_t narms, ref;   /* ref: the reference's index in the group; >= narms: no checks */
	struct runner_bufs master;  /* the round's inputs; owned */
	struct runner_bufs refcopy; /* the reference's outputs of a checked round,
				       copied right after its call (out and inout
				       buffers only: runner_bufs_alloc_outputs); owned */
	int round, have_ref;        /* the round under way; refcopy holds its outputs */
	int (*clock)(void *, size_t, size_t);  /* the clock's trial hook, called first */
	struct runner_timed_plan plan;
	struct runner_timed_stats st[ATB_RUNNER_MAX_ARMS];
	char msg[1400];      /* why a hook failed */
};

/*
 * Make t for a group of narms arms timed on inputs `in` (copied).  0, or -1
 * when out of memory (release it either way).
 */
int runner_timed_init(struct runner_timed *t, const struct atb_runner_job *job,
		      const struct atb_runner_set *set, const struct runner_bufs *in,
		      uint64_t seed, unsigned group, size_t narms, size_t ref,
		      const struct runner_timed_ops *ops, void *ctx);
void runner_timed_release(struct runner_timed *t);

/* The timing core's hooks (struct atb_timing_hooks) on a struct runner_timed. */
int runner_timed_before(void *ctx, int round);
int runner_timed_after(void *ctx, int round);
/* The trial hook (after_call, call_ctx t): t->clock, then the reference's
 * outputs copied right after its call in a checked round. */
int runner_timed_call(void *ctx, size_t arm, size_t trial);

/* The samples event's "timed_checks" of group arm `arm`.  NULL when out of memory. */
json_t *runner_timed_json(const struct runner_timed *t, size_t arm);

/*
 * runner_time_group with t's hooks between rounds (t NULL: none); a hook's
 * failure is an error event "timed_checks" with its message.
 */
int runner_time_group_timed(const struct atb_runner_job *job, struct atb_timer *timer,
			    uint64_t seed, size_t narms, atb_timing_call_fn call, void *ctx,
			    const char *(*timer_why)(const struct atb_timer *),
			    struct runner_timed *t, struct atb_timing_seed *res);

/* runner_emit_samples, each arm's event with its "timed_checks" when t is given. */
int runner_emit_samples_timed(const struct atb_timing_seed *s, const char *group,
			      const char *const *names, size_t narms, int throttled,
			      const struct runner_timed *t);

/*
 * The GPU's SM clock after every timed trial (PROTO: gates.clocks), as a
 * raw fact beside each time: a backend on a GPU names its reader once
 * (runner_clock_reader); every timed group then records, per arm and trial,
 * the clock read right after the trial's time (outside its window), and its
 * samples events carry them as "sm_mhz" (0: a read that failed) with the
 * clock-event reasons seen, OR-ed, as "clock_reasons".
 */
typedef int (*runner_clock_fn)(void *ctx, unsigned *mhz, unsigned long long *reasons);
void runner_clock_reader(runner_clock_fn fn, void *ctx);
/* Before a group of narms arms of at most trials_max trials each.  0, or -1 (out of memory). */
int runner_clock_begin(size_t narms, size_t trials_max);
/*
 * struct atb_timing_hooks' after_call (call_ctx unused): the settle step
 * (runner_settle), then the clock reader; NULL when neither is set.
 */
int (*runner_clock_hook(void))(void *call_ctx, size_t arm, size_t trial);
/*
 * A step after every timed call, before the next trial's window opens
 * (the cpu backend's workers: wait until the called worker is stopped).
 * 0, or -1 to abort the group.  NULL: none.
 */
void runner_settle(int (*fn)(void));
/*
 * PROTO: timing.round_trip -- the cpu backend's empty call (a round trip to
 * a worker that loaded nothing): timed after every `every`-th round of each
 * group (runner_time_group_timed); its q-quantile and median put in the
 * samples events ("round_trip") and, with subtract, the q-quantile taken
 * out of every trial.  call NULL: none.  job: its round_trip_position
 * (PROTO: timing.round_trip.position, version 13 on) says where in each
 * round the empty call goes, its reference arm and placement key how.
 */
void runner_round_trip(int (*call)(void), int every, int subtract, double q,
		       const struct atb_runner_job *job);

/* The "buffer" index of runner_round_trip_slot's draws (one past the order's). */
#define RUNNER_RT_BUFFER ((size_t)0x10000)

/*
 * PROTO: timing.round_trip.position (keyed) -- where the empty call goes in
 * round `round` of seed `seed`: before the arm at position 0..narms-1 of the
 * round, or narms after them, drawn as runner_placement_keyed's (pad << 13 |
 * off) for (seed, round, RUNNER_RT_BUFFER) under the job's key, mod narms + 1
 * (a bias of at most narms / 2^17).  SIZE_MAX when the key or libcrypto
 * failed (the timing core then stops the group).
 */
size_t runner_round_trip_slot(const struct atb_runner_job *job, uint64_t seed, int round,
			      size_t narms);
/*
 * Where the host buffers come from: NULL, NULL for the process's heap
 * (page-aligned), else alloc/release (the workers' shared memory).  A
 * block for which exposed() is true is never kept for reuse.
 */
void runner_host_memory(void *(*alloc)(size_t bytes), void (*release)(void *p),
			int (*exposed)(const void *p));

/* ---- cpu.c ------------------------------------------------------------------ */

/*
 * Run a parsed job on the cpu backend: env, correctness, timing, done.
 * Returns an exit status; on failure an error event has been emitted.
 */
int runner_cpu_run(const struct atb_runner_job *job);

/* ---- worker.c: the cpu backend's arm workers ------------------------------- */

/* The arms' workers and the round trip's (PROTO: timing.round_trip), which loads nothing. */
#define RUNNER_MAX_WORKERS (ATB_RUNNER_MAX_ARMS + 1)

/*
 * Each arm's shared object in a process of its own (worker.c's comment
 * says why and how).  A worker is stopped between its calls.
 */
struct runner_worker {
	pid_t pid;        /* -1: none, or gone */
	int sock;         /* the channel, SOCK_SEQPACKET */
	int id;           /* 0 .. RUNNER_MAX_WORKERS - 1: its bit in a buffer's mask */
	int stopped;      /* seen stopped */
	char name[32];    /* the arm's */
};

/* The shared buffers' address range, reserved once.  0, or -1 with why. */
int runner_shm_setup(char *why, size_t why_size);
int runner_shm_on(void);
void *runner_shm_alloc(size_t bytes);
void runner_shm_free(void *p);
/* Has any worker mapped p? */
int runner_shm_exposed(const void *p);

/* Start worker id for arm `name` (makes the runner non-dumpable first).  0, or -1 with why. */
int runner_worker_spawn(struct runner_worker *w, int id, const char *name, char *why,
			size_t why_size);
/* dlopen so in the worker and find atb_kernel.  0, or -1 with why (-2: no atb_kernel). */
int runner_worker_load(struct runner_worker *w, const char *so, char *why, size_t why_size);
/* Map every buffer of b in w (outside timed windows).  0, or -1 (error event sent). */
int runner_worker_map(struct runner_worker *w, const struct runner_bufs *b);
/*
 * Call the arm's kernel on b with set's parameters: *kstatus its return.
 * timed: leave the stop to runner_worker_settle (after the window).
 * A call that does not come back ends the runner (exit 3 after
 * the error event, or the worker's signal when one killed it).
 */
void runner_worker_call(struct runner_worker *w, const struct runner_bufs *b,
			const struct atb_runner_set *set, int timed, int *kstatus);
/*
 * PROTO: timing.round_trip -- an empty call to w (a worker that loaded
 * nothing): the same continue, message, reply and stop as a timed call,
 * with no kernel; the stop left to runner_worker_settle.  0, or -1 (the
 * caller reports it; a worker that is gone has its own error event).
 */
int runner_worker_null_call(struct runner_worker *w);
/* The same, untimed, once after its start: it answers and is stopped.  0, or -1 with why. */
int runner_worker_null_ready(struct runner_worker *w, char *why, size_t why_size);
/* Wait until the last called worker is stopped.  0, or -1. */
int runner_worker_settle(void);
void runner_worker_end(struct runner_worker *w);
/* atb-runner --worker BASE SIZE RUNNER_PID: a worker's whole life (fd 3 the channel). */
int runner_worker_main(int argc, char **argv);

#endif
