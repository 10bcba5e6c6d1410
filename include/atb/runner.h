/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The measurement job and the harness side of atb-runner.
 *
 * A job is one JSON object (docs/internals/runner.md gives every field and
 * an example): the arms and their shared objects, the reference arm, the
 * buffers, the correctness parameter sets and the timing one, the seeds,
 * and the protocol's timing and correctness values.  atb_runner_job_parse
 * checks it and is used by both sides: by atb-runner on what it reads, and
 * by the harness before it sends.
 *
 * atb_runner_run starts one fresh atb-runner process per job in its own
 * process group, writes the job to its stdin, reads its events (one JSON
 * object per line) from its stdout, and kills the whole group at the
 * wall-clock timeout.  A runner that dies by a signal (a crashing candidate)
 * is reported with the signal's name.
 *
 * Does not: compute any statistic or verdict, or print.  The runner only
 * reports raw facts; the gates and stats in the harness judge them.
 */
#ifndef ATB_RUNNER_H
#define ATB_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "atb/status.h"
#include "atb/timing.h"

struct atb_protocol;

#define ATB_RUNNER_MAX_ARMS 4
#define ATB_RUNNER_MAX_BUFFERS 32
#define ATB_RUNNER_MAX_PARAMS 32
#define ATB_RUNNER_MAX_DISTS 16
#define ATB_RUNNER_MAX_DTYPES 16
#define ATB_RUNNER_MAX_SETS 32
#define ATB_RUNNER_MAX_SEEDS 1024
#define ATB_RUNNER_MAX_JOB_BYTES (16u << 20)

/*
 * A buffer's element type.  FP16 (IEEE binary16) and BF16 (bfloat16) are
 * 2-byte storage types: inputs are drawn in double, rounded to float, then
 * to the storage type with round-to-nearest-even; outputs are compared after
 * converting back to float.  The numbers are stored in no file: only the
 * names ("fp16") travel.
 */
enum atb_dtype {
	ATB_DTYPE_FP32 = 0,
	ATB_DTYPE_FP64,
	ATB_DTYPE_INT32,
	ATB_DTYPE_INT64,
	ATB_DTYPE_FP16,
	ATB_DTYPE_BF16,
};

/* "fp32", ...; atb_dtype_parse returns ATB_ERR_SCHEMA for others. */
const char *atb_dtype_name(enum atb_dtype d);
enum atb_status atb_dtype_parse(const char *name, enum atb_dtype *out, struct atb_error *err);
/* Bytes per element: 8, 4 or 2. */
size_t atb_dtype_size(enum atb_dtype d);
/* Is d a floating-point type (fp16, bf16, fp32, fp64)? */
int atb_dtype_is_real(enum atb_dtype d);
/*
 * Unit roundoff of a real dtype: 2^-53 fp64, 2^-24 fp32, 2^-11 fp16, 2^-8
 * bf16 (half the distance from 1 to the next number); 0 for integers.
 */
double atb_dtype_unit_roundoff(enum atb_dtype d);

/*
 * The 2-byte storage types, as bit patterns.  *_from_float rounds to
 * nearest, ties to even; values beyond the largest finite number become
 * infinities (fp16: |x| >= 65520); a NaN stays a NaN and is made quiet.
 * *_to_float is exact.  ATB_FP16_QNAN / ATB_BF16_QNAN are the quiet-NaN
 * patterns the poison uses (PROTO: correctness.poison).
 */
#define ATB_FP16_QNAN 0x7e00u
#define ATB_BF16_QNAN 0x7fc0u
uint16_t atb_fp16_from_float(float x);
float atb_fp16_to_float(uint16_t h);
uint16_t atb_bf16_from_float(float x);
float atb_bf16_to_float(uint16_t h);

enum atb_buffer_role { ATB_BUFFER_IN = 0, ATB_BUFFER_OUT, ATB_BUFFER_INOUT };

/* An input distribution (the task's generator or one of the protocol's). */
struct atb_runner_dist {
	char name[48];
	int normal;           /* 0: uniform [low, high); 1: normal(mean, stddev) */
	double low, high, mean, stddev;
};

/*
 * An output that is a sum of K products (or of K terms): "reduction" on a
 * job buffer, {"operands": ["A", "B"], "accumulate": "fp32"}.  Two
 * operands: A row-major [M, K], B row-major [K, N], this output [M, N];
 * one operand: X row-major [M, K], this output [M].  K is derived from the
 * counts of each set (the parser refuses counts that do not fit).  Used
 * only when the job's correctness has a reduction_tolerance (protocol v2).
 */
struct atb_runner_reduction {
	int noperands;            /* 0: not a reduction; 1 or 2 */
	size_t operand[2];        /* buffer indices (role in) */
	enum atb_dtype accumulate; /* whose unit roundoff; default the buffer's dtype */
};

struct atb_runner_buffer {
	char name[64];
	enum atb_dtype dtype;
	enum atb_buffer_role role;
	struct atb_runner_dist dist;  /* the task's own generator */
	int adversarial;  /* 1: also drawn from the protocol's distributions */
	struct atb_runner_reduction reduction;
};


/* One parameter point: scalars in declaration order, a count per buffer. */
struct atb_runner_set {
	char name[64];
	int64_t ints[ATB_RUNNER_MAX_PARAMS];
	double reals[ATB_RUNNER_MAX_PARAMS];
	size_t nints, nreals;
	size_t counts[ATB_RUNNER_MAX_BUFFERS];  /* elements, one per job buffer */
};

struct atb_runner_arm {
	char name[32];    /* "baseline" | "candidate" | "naive" | "baseline_alone" */
	char *so;         /* path of the shared object; owned */
};

/*
 * Where a job runs.  atb-runner has three backends: cpu, cuda and torch.
 * This parser's jobs name theirs in the top-level "backend", "cpu" when
 * absent.  cpu: shared objects built with cc, timed with CLOCK_MONOTONIC.
 * cuda: shared objects built with nvcc, run on device 0 through the driver
 * API, timed with CUDA events (docs/internals/runner.md, cuda.md).  torch:
 * KernelBench-format PyTorch models in an embedded Python, on CPU tensors
 * or device 0; a torch job has its own schema and atb-runner dispatches it
 * before this parser (runner/torch.c, docs/internals/torch.md), so it has
 * no value here.
 */
enum atb_runner_backend { ATB_RUNNER_BACKEND_CPU = 0, ATB_RUNNER_BACKEND_CUDA };

/* "cpu" or "cuda" ("?" for others). */
const char *atb_runner_backend_name(enum atb_runner_backend b);
/* The backend called name; ATB_ERR_SCHEMA (message names the choices) for others. */
enum atb_status atb_runner_backend_parse(const char *name, enum atb_runner_backend *out,
					 struct atb_error *err);

struct atb_runner_tolerance {
	char dtype[16];
	double atol, rtol;
};

/* A parsed job.  Handle: atb_runner_job_free. */
/* PROTO: timing.round_trip.position -- atb_runner_job.round_trip_position */
enum { ATB_RT_AFTER = 0, ATB_RT_KEYED = 1, ATB_RT_AFTER_REFERENCE = 2 };

struct atb_runner_job {
	char id[64];
	enum atb_runner_backend backend;  /* "backend"; cpu by default */
	struct atb_runner_arm arms[ATB_RUNNER_MAX_ARMS];
	size_t narms;
	size_t reference;   /* index into arms: the correctness reference */
	struct atb_runner_buffer buffers[ATB_RUNNER_MAX_BUFFERS];
	size_t nbuffers;
	struct atb_runner_set *sets;   /* correctness parameter sets; owned */
	size_t nsets;
	struct atb_runner_set timing_set;
	uint64_t *seeds;               /* owned */
	size_t nseeds;
	struct atb_timing_config timing;
	size_t cache_bytes;            /* the box's largest cache */
	double cache_flush_factor;
	size_t cache_flush_min_bytes;
	size_t cache_flush_cpu_max_bytes; /* a CPU timer's flush at most (0: no bound) */
	/*
	 * timing.placement, where each seed's timing puts the arms' device
	 * buffers (PROTO: timing.placement; docs/internals/runner.md):
	 * ATB_PLACEMENT_FIXED, every seed allocates them in arm order (the same
	 * addresses every seed); _ALTERNATE, odd-numbered seeds (by index in
	 * seeds) in reverse order; _SHUFFLED, each arm's buffers at offsets
	 * drawn from (seed, arm), so that what an address costs on this GPU is a
	 * per-seed random effect shared by both arms, not a constant one arm
	 * keeps (measured: scripts/aa-study); _KEYED (protocol v9), the same
	 * pads and offsets drawn from (placement_key, seed, arm, buffer), so
	 * that two measurements with the same seeds do not share one draw of
	 * that effect.
	 */
	int placement;
#define ATB_PLACEMENT_FIXED 0
#define ATB_PLACEMENT_ALTERNATE 1
#define ATB_PLACEMENT_SHUFFLED 2
#define ATB_PLACEMENT_KEYED 3
	/* timing.placement_key: 16 bytes the harness draws once per atb
	 * process (so the paired and the baseline-alone runners of one
	 * measurement place alike); has_placement_key 0: none was sent, and a
	 * keyed runner draws its own from getrandom */
	unsigned char placement_key[16];
	int has_placement_key;
	/* PROTO: timing.preemption -- 1: cpu timers take each trial's waits
	 * for a CPU out of it (atb_timer_cpu_subtract_preemption); 0: wall */
	int preemption;
	struct atb_runner_tolerance tolerances[ATB_RUNNER_MAX_DTYPES];
	size_t ntolerances;
	struct atb_runner_dist dists[ATB_RUNNER_MAX_DISTS];  /* protocol's adversarial ones */
	size_t ndists;
	int poison_nan;                /* "nan" poison: 1 */
	/*
	 * correctness.input_sets_per_seed: input sets per (seed, parameter set),
	 * the task's own plus input_sets_per_seed - 1 adversarial distributions
	 * by rotation over the seeds (docs/internals/runner.md); 0 when absent:
	 * every distribution on every seed (jobs from before the key).
	 */
	size_t input_sets_per_seed;
	/*
	 * PROTO: correctness.input_chunk_elements (protocol v8): a buffer of
	 * more elements is drawn in chunks of this many, each from a stream of
	 * its own (runner_gen_inputs); 0 when absent: one stream per buffer.
	 */
	size_t input_chunk_elements;
	/* correctness.reduction_tolerance (protocol v2): factor 0 when absent */
	double reduction_factor;
	int reduction_linear;          /* growth "length" (K); 0: "sqrt_length" */
	/* correctness.reference_precision.factor (version 14 on; 0: absent):
	 * the torch backend's allowance for its reference's own error, factor
	 * x the largest difference between the reference's output and the same
	 * output computed in float64 */
	double ref_precision_factor;
	double ref_precision_max_rel;  /* .max_relative (0 with factor 0) */
	int time_if_incorrect;         /* time even when correctness failed */
	int skip_timing;               /* correctness only */
	int skip_correctness;          /* timing only (the torch baseline-alone runner) */
	/*
	 * options.isolation (cpu backend): "process" runs each arm in a worker
	 * process of its own (runner/worker.c), so no candidate code shares the
	 * runner's address space; "none" (the default, for now) loads every arm
	 * into the runner.  1: process.
	 */
	int isolate;
	/*
	 * PROTO: timing.round_trip (version 12 on) -- with isolate: options
	 * "round_trip": {"every_rounds": N, "subtract": B, "quantile": Q}: a
	 * worker that loads nothing answers an empty call, timed as an arm's
	 * trial, after every N-th round; with subtract each seed group's
	 * Q-quantile of those times (Q in (0, 0.5]: a low one, which what only
	 * adds time -- an interrupt, a preemption -- does not move) is taken
	 * out of every arm's trials (at least 1 ns is left of a trial).  every
	 * 0 (absent): none.
	 */
	int round_trip_every;
	int round_trip_subtract;
	double round_trip_quantile;
	/*
	 * PROTO: timing.round_trip.position (version 13 on) -- options
	 * "round_trip" "position": where each round's empty call goes.
	 * ATB_RT_AFTER ("after", the default, version 12): after the round's
	 * arms.  ATB_RT_AFTER_REFERENCE ("after_reference"): right after the
	 * reference arm's call, so that no empty call ever follows another arm's
	 * (a candidate's call can slow only the call after it).  ATB_RT_KEYED
	 * ("keyed"): at a place among the round's calls drawn under the job's
	 * placement key (runner_round_trip_slot).
	 */
	int round_trip_position;
	int pin_cpu;                   /* -1: leave affinity alone */
	/*
	 * PROTO: gates.hang -- "progress_ms": the runner sends a "progress"
	 * event when this long has passed since its last event, at points
	 * outside every timed window, for the harness's watchdog; 0 (absent):
	 * none.
	 */
	int progress_ms;
	/*
	 * PROTO: gates.timed_correctness -- the job's "timed_checks" object
	 * (docs/internals/runner.md, "timed checks"): a per-job random key the
	 * harness drew, from which the runner derives which timed rounds are
	 * checked and which input elements change before every round.  on 0
	 * when the job has none (jobs from before the gate): no perturbation,
	 * no checks.
	 */
	struct atb_runner_timed {
		int on;
		uint64_t key;
		double check_share;        /* (0, 1]: each round's chance to be checked */
		int min_checks_per_seed;   /* forced checks in the first trials.min rounds */
		int perturb_elements;      /* elements of each input changed per round, 0..64 */
	} timed;
};

/* The most input elements one round may change, and the most forced checks
 * per seed and group (struct atb_runner_timed). */
#define ATB_RUNNER_MAX_PERTURB 64

/*
 * Parse and check a job (JSON text of len bytes).  Caller owns *out
 * (atb_runner_job_free); *out is NULL on failure.  Errors: ATB_ERR_PARSE
 * (not JSON; line and column set), ATB_ERR_SCHEMA (a missing or wrong field,
 * field path set; an unknown "backend" is refused with field "backend"),
 * ATB_ERR_NOMEM.
 */
enum atb_status atb_runner_job_parse(const char *text, size_t len,
				     struct atb_runner_job **out, struct atb_error *err);
/* As atb_runner_job_parse on a jansson object. */
enum atb_status atb_runner_job_from_json(const json_t *job, struct atb_runner_job **out,
					 struct atb_error *err);
void atb_runner_job_free(struct atb_runner_job *job);

/*
 * The reduction length K of buffer i in set (see struct
 * atb_runner_reduction): 0 when it is not a reduction or the output is
 * empty.
 */
size_t atb_runner_reduction_length(const struct atb_runner_job *job, size_t i,
				   const struct atb_runner_set *set);

/* Index of the arm called name, or -1. */
int atb_runner_job_arm(const struct atb_runner_job *job, const char *name);

/*
 * Set the job's "timing" and "correctness" objects from a loaded protocol
 * (replacing any already there), correctness.input_sets_per_seed included.
 * cache_bytes is the box's largest cache.
 * Errors: ATB_ERR_NOMEM.
 */
enum atb_status atb_runner_job_set_protocol(json_t *job, const struct atb_protocol *p,
					    size_t cache_bytes, struct atb_error *err);

/*
 * PROTO: gates.timed_correctness -- set the job's "timed_checks" object: a
 * fresh 64-bit key from the kernel's CSPRNG (getrandom), which the
 * candidate cannot know before the job starts, and the protocol's
 * check_share, min_checks_per_seed and perturb_elements (defaults 0.125, 2
 * and 4 when the protocol has no gates.timed_correctness: versions < 3).
 * Errors: ATB_ERR_SYSTEM (no random bytes), ATB_ERR_NOMEM.
 */
enum atb_status atb_runner_job_set_timed_checks(json_t *job, const struct atb_protocol *p,
						struct atb_error *err);

/* How a runner process ended. */
enum atb_runner_end {
	ATB_RUNNER_DONE = 0,     /* sent "done" and exited 0 */
	ATB_RUNNER_ERROR,        /* sent an "error" event (reason in outcome) */
	ATB_RUNNER_EXIT,         /* exited without "done" (status in exit_code) */
	ATB_RUNNER_SIGNALED,     /* killed by a signal it did not get from us */
	ATB_RUNNER_TIMEOUT,      /* we killed it at the wall-clock timeout */
	ATB_RUNNER_MALFORMED,    /* it wrote a line that is not an event */
	ATB_RUNNER_ABORTED,      /* the event callback asked to stop */
	ATB_RUNNER_SPAWN_FAILED, /* it never started */
	ATB_RUNNER_HANG,         /* we killed it when it stopped making progress (the watchdog) */
};

/* "done", "error", "exit", "signal", "timeout", "malformed", "aborted", "spawn_failed", "hang". */
const char *atb_runner_end_name(enum atb_runner_end e);

struct atb_runner_outcome {
	enum atb_runner_end end;
	int exit_code;          /* when it exited; -1 otherwise */
	int signal;             /* the signal that ended it; 0 when none */
	char signal_name[16];   /* "SIGSEGV"; "" when none */
	char reason[64];        /* reason code of its "error" event; "" when none */
	char detail[512];       /* message of the error event or the bad line (cut) */
	char stderr_tail[1024]; /* last bytes the runner wrote to stderr */
	size_t nevents;
	int64_t wall_ns;
	int pid;
	char sandbox_level[16]; /* "full", "no_userns", "seccomp_only", "off"; "" before start */
	/* the watchdog (atb_runner_run_watched): what it saw */
	size_t nprogress;       /* "progress" events (not given to the callback) */
	double longest_gap_s;   /* the longest silence between events since "env" */
	double stall_s;         /* ATB_RUNNER_HANG: the silence it was killed in */
	double stall_limit_s;   /* ... and the limit that silence passed */
	int stall_in_startup;   /* ... 1: before the candidate's first call returned */
	char stalled_after[160]; /* the last event before the silence: "timed_begin seed 7" */
};

/*
 * Called for every event, in order, with the parsed object (borrowed: valid
 * during the call only).  Returning non-OK kills the runner and ends the
 * run with ATB_RUNNER_ABORTED and that status.
 */
typedef enum atb_status (*atb_runner_event_fn)(const json_t *event, void *ctx);

/*
 * Run one job in a fresh runner process.  runner_path is the atb-runner
 * executable (atb_runner_find), job the job object (not modified),
 * timeout_s the wall-clock limit (<= 0: none; PROTO: timing.job_timeout_s).
 * on_event may be NULL.  *out is always filled.
 * Returns ATB_OK only when the runner sent "done" and exited 0.  Otherwise:
 * ATB_ERR_SYSTEM (spawn failed, timeout, a signal, a non-zero exit; out->end
 * says which and out->signal_name names the signal), ATB_ERR_PARSE (a
 * malformed event line), ATB_ERR_CHECK (the runner sent an error event;
 * out->reason has its code), or the callback's status.
 */
enum atb_status atb_runner_run(const char *runner_path, const json_t *job, double timeout_s,
			       atb_runner_event_fn on_event, void *ctx,
			       struct atb_runner_outcome *out, struct atb_error *err);

/*
 * PROTO: gates.hang -- a watchdog over the runner's progress.  The job
 * sent gets "progress_ms" (the runner then sends "progress" events at
 * least that often while it works; the harness drops them before the
 * callback).  Until the candidate's first call has returned (its first
 * correctness event; or the first timed_begin, samples or done event of a
 * job without one) the runner may be silent up to startup_s at a time: a
 * runtime starting, a first call that compiles.  After that, up to the
 * larger of min_s and factor x the longest silence seen since the "env"
 * event.  Longer, and the whole tree is killed: ATB_RUNNER_HANG.  A value
 * <= 0 leaves that limit out (the timeout still holds).
 */
struct atb_runner_watch {
	double startup_s;
	double min_s;
	double factor;
	int progress_ms;
};

/*
 * atb_runner_run with a watchdog (watch NULL: exactly atb_runner_run).
 * A hang is ATB_ERR_SYSTEM with out->end ATB_RUNNER_HANG and out->stall_*
 * set.
 */
enum atb_status atb_runner_run_watched(const char *runner_path, const json_t *job,
				       double timeout_s, const struct atb_runner_watch *watch,
				       atb_runner_event_fn on_event, void *ctx,
				       struct atb_runner_outcome *out, struct atb_error *err);

/*
 * The atb-runner to use: $ATB_RUNNER when set, else atb-runner in the folder
 * of the running executable.  Writes a path into buf.  Errors:
 * ATB_ERR_NOT_FOUND (not there or not executable), ATB_ERR_USAGE (buf too
 * small).
 */
enum atb_status atb_runner_find(char *buf, size_t size, struct atb_error *err);

/* Name of a signal ("SIGSEGV"), or "SIG<n>" for unnamed ones, into buf. */
void atb_runner_signal_name(int sig, char *buf, size_t size);

#endif
