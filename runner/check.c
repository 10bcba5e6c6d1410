/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The host-side checking layer of atb-runner, one copy for every backend:
 * seeded input generation, output poison on host buffers, element reading
 * and comparison under the protocol's tolerances, input hashes for the
 * input-mutation fact, the result-reuse steps (the backend supplies how to
 * run the arm), and the JSON of the correctness and samples events.
 *
 * The cpu backend runs kernels on these host buffers directly; the cuda
 * backend generates and compares here and copies to and from the device.
 * So a seed gives bit-identical inputs on both, and one comparison rule
 * judges both.  The correctness phase of both (runner_check_phase: seeds,
 * sets, input sets, arms, the correctness events) is here too; the
 * backend supplies how to run the reference, an arm and the reuse steps.
 * Does not: run kernels itself or touch a device.
 */
#define _GNU_SOURCE  /* sched_getaffinity, CPU_COUNT */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "atb/alloc.h"
#include "atb/cuda.h"
#include "atb/stats.h"
#include "runner_int.h"
#include "banned.h"

json_t *runner_real(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

/* ---- buffers ------------------------------------------------------------ */

/*
 * The correctness phase's host buffers are kept for the next input set of
 * the same size instead of going back to the system: glibc returns a large
 * block's pages on free, and a fresh block's first touch faults every page
 * in again (a second and more per GiB under gVisor, the GPU machine's
 * kernel).  Only blocks of at least RUNNER_KEEP_MIN bytes, at most
 * RUNNER_KEEP_SLOTS of them, and only while runner_keep_buffers(1) is in
 * force: the correctness phase, never timing, so the timed buffers' pages
 * come as they did before.  A kept block is handed out as it was left:
 * every user writes a buffer whole before reading it (drawn inputs, copied
 * inputs and poisoned outputs, a device download).
 */
#define RUNNER_KEEP_MIN ((size_t)1 << 20)
#define RUNNER_KEEP_SLOTS 32

static struct kept {
	void *p;
	size_t bytes;
} kept[RUNNER_KEEP_SLOTS];
static int keeping;
static void host_free(void *p);

void runner_keep_buffers(int on)
{
	size_t i;

	keeping = on;
	if (on)
		return;
	for (i = 0; i < RUNNER_KEEP_SLOTS; i++) {
		if (kept[i].p)
			host_free(kept[i].p);
		kept[i].p = NULL;
		kept[i].bytes = 0;
	}
}

size_t runner_kept_blocks(void)
{
	size_t i, n = 0;

	for (i = 0; i < RUNNER_KEEP_SLOTS; i++)
		n += kept[i].p != NULL;
	return n;
}

static void *(*host_alloc)(size_t bytes);
static void (*host_release)(void *p);
static int (*host_exposed)(const void *p);

void runner_host_memory(void *(*alloc)(size_t bytes), void (*release)(void *p),
			int (*exposed)(const void *p))
{
	host_alloc = alloc;
	host_release = release;
	host_exposed = exposed;
}

static void *buf_get(size_t bytes)
{
	size_t i;

	for (i = 0; keeping && bytes >= RUNNER_KEEP_MIN && i < RUNNER_KEEP_SLOTS; i++)
		if (kept[i].p && kept[i].bytes == bytes) {
			void *p = kept[i].p;

			kept[i].p = NULL;
			return p;
		}
	/*
	 * Page-aligned, so a buffer's offset within its pages (which sets
	 * 4K aliasing in the L1) is the same in every job and every arm:
	 * malloc's placement follows the process's allocation history,
	 * which differs between the paired job and the baseline-alone job
	 * of the drift gate.  (The workers' shared blocks are page-aligned too.)
	 */
	return host_alloc ? host_alloc(bytes) : atb_aligned_alloc(4096, bytes ? bytes : 1);
}

static void host_free(void *p)
{
	if (host_release)
		host_release(p);
	else
		atb_free(p);
}

static void buf_put(void *p, size_t bytes)
{
	size_t i;

	/* a block a worker has seen goes: that worker could still write it */
	for (i = 0; p && keeping && bytes >= RUNNER_KEEP_MIN && i < RUNNER_KEEP_SLOTS &&
		    !(host_exposed && host_exposed(p)); i++)
		if (!kept[i].p) {
			kept[i].p = p;
			kept[i].bytes = bytes;
			return;
		}
	if (p)
		host_free(p);
}

void runner_bufs_free(struct runner_bufs *b)
{
	size_t i;

	for (i = 0; i < b->n; i++)
		buf_put(b->p[i], b->bytes[i]);
	memset(b, 0, sizeof(*b));
}

static int bufs_alloc(struct runner_bufs *b, const struct atb_runner_job *job,
		      const struct atb_runner_set *set, int outputs_only)
{
	size_t i;

	memset(b, 0, sizeof(*b));
	for (i = 0; i < job->nbuffers; i++) {
		if (outputs_only && job->buffers[i].role == ATB_BUFFER_IN) {
			b->n = i + 1; /* no buffer: p[i] NULL, bytes[i] 0 */
			continue;
		}
		b->bytes[i] = set->counts[i] * atb_dtype_size(job->buffers[i].dtype);
		b->p[i] = buf_get(b->bytes[i]);
		b->n = i + 1;
		if (!b->p[i]) {
			runner_bufs_free(b);
			return -1;
		}
	}
	return 0;
}

int runner_bufs_alloc(struct runner_bufs *b, const struct atb_runner_job *job,
		      const struct atb_runner_set *set)
{
	return bufs_alloc(b, job, set, 0);
}

int runner_bufs_alloc_outputs(struct runner_bufs *b, const struct atb_runner_job *job,
			      const struct atb_runner_set *set)
{
	return bufs_alloc(b, job, set, 1);
}

int runner_is_input(const struct atb_runner_buffer *b)
{
	return b->role != ATB_BUFFER_OUT;
}

int runner_any_adversarial(const struct atb_runner_job *job)
{
	size_t i;

	for (i = 0; i < job->nbuffers; i++)
		if (runner_is_input(&job->buffers[i]) && job->buffers[i].adversarial)
			return 1;
	return 0;
}

/* ---- which input sets a seed gets ------------------------------------------ */

/* Adversarial sets per seed under rotation, or 0 when every distribution runs. */
static size_t rotation_per_seed(const struct atb_runner_job *job)
{
	size_t n = job->input_sets_per_seed, p;

	if (!n || !job->ndists || !runner_any_adversarial(job))
		return 0;
	p = n - 1;
	/* Too few seeds would leave a distribution unused: fall back to all. */
	if (!p || p >= job->ndists || job->nseeds * p < job->ndists)
		return 0;
	return p;
}

int runner_rotates(const struct atb_runner_job *job)
{
	return rotation_per_seed(job) > 0;
}

size_t runner_seed_inputs(const struct atb_runner_job *job, size_t seed_index, int *out)
{
	size_t p = rotation_per_seed(job), n = 0, j;

	out[n++] = -1;
	if (!runner_any_adversarial(job))
		return n;
	if (!p) {
		for (j = 0; j < job->ndists; j++)
			out[n++] = (int)j;
		return n;
	}
	for (j = 0; j < p; j++)
		out[n++] = (int)((seed_index * p + j) % job->ndists);
	return n;
}

json_t *runner_inputs_json(const struct atb_runner_job *job)
{
	size_t p = rotation_per_seed(job);

	return json_pack("{s:o, s:s, s:I}", "input_sets_per_seed",
			 job->input_sets_per_seed ? json_integer((json_int_t)job->input_sets_per_seed)
						  : json_null(),
			 "rule", p ? "rotation" : "all", "distributions_per_seed",
			 (json_int_t)(p ? p : runner_any_adversarial(job) ? job->ndists : 0));
}

const char *runner_input_name(const struct atb_runner_job *job, int dist)
{
	return dist < 0 ? "task" : job->dists[dist].name;
}

void runner_copy_inputs(struct runner_bufs *dst, const struct runner_bufs *src,
			const struct atb_runner_job *job)
{
	size_t i;

	for (i = 0; i < job->nbuffers; i++)
		if (runner_is_input(&job->buffers[i]))
			memcpy(dst->p[i], src->p[i], src->bytes[i]);
}

void runner_poison_outputs(struct runner_bufs *b, const struct atb_runner_job *job,
			   const struct atb_runner_set *set)
{
	size_t i, k;

	for (i = 0; i < job->nbuffers; i++) {
		if (job->buffers[i].role != ATB_BUFFER_OUT)
			continue;
		for (k = 0; k < set->counts[i]; k++) {
			switch (job->buffers[i].dtype) {
			case ATB_DTYPE_FP32:
				((float *)b->p[i])[k] = NAN;
				break;
			case ATB_DTYPE_FP64:
				((double *)b->p[i])[k] = NAN;
				break;
			case ATB_DTYPE_INT32:
				((int32_t *)b->p[i])[k] = INT32_MIN;
				break;
			case ATB_DTYPE_INT64:
				((int64_t *)b->p[i])[k] = INT64_MIN;
				break;
			case ATB_DTYPE_FP16:
				((uint16_t *)b->p[i])[k] = ATB_FP16_QNAN;
				break;
			case ATB_DTYPE_BF16:
				((uint16_t *)b->p[i])[k] = ATB_BF16_QNAN;
				break;
			}
		}
	}
}

uint32_t runner_poison_word32(enum atb_dtype d)
{
	switch (d) {
	case ATB_DTYPE_FP32:
		return 0x7fc00000u;
	case ATB_DTYPE_FP64:
		return 0x7ff80000u;  /* 0x7ff800007ff80000: exponent all ones, a NaN */
	case ATB_DTYPE_FP16:
		return ATB_FP16_QNAN << 16 | ATB_FP16_QNAN;
	case ATB_DTYPE_BF16:
		return ATB_BF16_QNAN << 16 | ATB_BF16_QNAN;
	default:
		return 0x80000000u;  /* int32 minimum; int64: 0x8000000080000000 */
	}
}

/* ---- seeded inputs ---------------------------------------------------------- */

/* A splitmix64 step: decorrelates the generator seeds of nearby inputs. */
static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

uint64_t runner_input_seed(uint64_t seed, size_t set_index, int dist, unsigned stream,
			   size_t buffer)
{
	return mix(mix(mix(mix(seed) ^ set_index) ^ (uint64_t)(dist + 1)) ^
		   ((uint64_t)stream << 32 | buffer));
}

uint64_t runner_chunk_seed(uint64_t buffer_seed, size_t chunk)
{
	return chunk ? mix(buffer_seed ^ mix((uint64_t)chunk)) : buffer_seed;
}

const unsigned char *runner_placement_key(const struct atb_runner_job *job)
{
	static unsigned char own[16];
	static int have;

	if (job->has_placement_key)
		return job->placement_key;
	if (!have && getrandom(own, sizeof(own), 0) == (ssize_t)sizeof(own))
		have = 1;
	return have ? own : NULL;
}

int runner_arm_order(const struct atb_runner_job *job, uint64_t seed, size_t *order)
{
	const unsigned char *key;
	unsigned pad = 0, off = 0;
	size_t i, phase;

	for (i = 0; i < job->narms; i++)
		order[i] = i;
	if (job->placement != ATB_PLACEMENT_KEYED || job->narms < 2)
		return 0;
	key = runner_placement_key(job);
	if (!key || runner_placement_keyed(key, 0, 0, RUNNER_ORDER_BUFFER, &pad, &off))
		return -1;
	/* rotated by one arm a seed: over any narms consecutive seeds (a
	   measurement's seeds are consecutive) every arm is allocated first
	   once; where the rotation starts is the key's */
	phase = (size_t)((((uint64_t)pad << 13 | off) + seed) % job->narms);
	for (i = 0; i < job->narms; i++)
		order[i] = (phase + i) % job->narms;
	return 0;
}

json_t *runner_arm_order_names(const struct atb_runner_job *job, const size_t *order)
{
	json_t *names = json_array();
	size_t k;

	for (k = 0; names && k < job->narms; k++)
		if (json_array_append_new(names, json_string(job->arms[order[k]].name))) {
			json_decref(names);
			return NULL;
		}
	return names;
}

int runner_arm_order_announce(const struct atb_runner_job *job, uint64_t seed, size_t *order)
{
	json_t *names;

	if (runner_arm_order(job, seed, order)) {
		runner_emit_error("timing", "cannot draw the arms' allocation order (HMAC-SHA256)");
		return -1;
	}
	if (job->placement != ATB_PLACEMENT_KEYED)
		return 0;
	if (!(names = runner_arm_order_names(job, order)))
		return -1;
	return runner_emit(json_pack("{s:s, s:I, s:o}", "event", "placement", "seed",
				     (json_int_t)seed, "order", names));
}

int runner_placement_keyed(const unsigned char key[16], uint64_t seed, size_t arm,
			   size_t buffer, unsigned *pad, unsigned *off)
{
	unsigned char msg[13 + 24], md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	uint64_t v[3] = {seed, (uint64_t)arm, (uint64_t)buffer};
	size_t i, b;

	memcpy(msg, "atb-placement", 13);
	for (i = 0; i < 3; i++)
		for (b = 0; b < 8; b++)
			msg[13 + 8 * i + b] = (unsigned char)(v[i] >> (8 * b));
	if (!HMAC(EVP_sha256(), key, 16, msg, sizeof(msg), md, &mdlen) || mdlen < 3)
		return -1;
	*pad = md[0] & 15u;
	*off = ((unsigned)md[1] | (unsigned)md[2] << 8) & 8191u;
	return 0;
}

/* Elements [from, to) of buffer bf (its distribution d) from r's stream. */
static void gen_range(gsl_rng *r, const struct atb_runner_buffer *bf,
		      const struct atb_runner_dist *d, void *p, size_t from, size_t to)
{
	size_t k;

	for (k = from; k < to; k++) {
		double x = d->normal ? d->mean + gsl_ran_gaussian(r, d->stddev)
				     : d->low + (d->high - d->low) * gsl_rng_uniform(r);

		runner_store_elem(p, bf->dtype, k, x);
	}
}

/* ---- work on the host's cores ------------------------------------------- */

size_t runner_threads(size_t nitems)
{
	cpu_set_t set;
	size_t n = 1;

	if (!sched_getaffinity(0, sizeof(set), &set))
		n = (size_t)CPU_COUNT(&set);
	if (n > RUNNER_MAX_THREADS)
		n = RUNNER_MAX_THREADS;
	if (n > nitems)
		n = nitems;
	return n ? n : 1;
}

struct par_work {
	runner_item_fn *fn;
	void *ctx;
	size_t n;
	size_t next;                    /* the next item to take (atomic) */
	int failed;                     /* an item returned non-zero (atomic) */
};

static void *par_worker(void *arg)
{
	struct par_work *w = arg;
	size_t i;

	while ((i = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED)) < w->n)
		if (w->fn(w->ctx, i))
			__atomic_store_n(&w->failed, 1, __ATOMIC_RELAXED);
	return NULL;
}

int runner_parallel(size_t n, runner_item_fn *fn, void *ctx)
{
	pthread_t th[RUNNER_MAX_THREADS];
	struct par_work w = {.fn = fn, .ctx = ctx, .n = n};
	size_t nt = runner_threads(n), started = 0, i;

	for (i = 1; i < nt; i++)
		if (!pthread_create(&th[started], NULL, par_worker, &w))
			started++;
	par_worker(&w);
	for (i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	return w.failed ? -1 : 0;
}

/*
 * The chunks of one input set.  A chunk's values depend on its own stream
 * only (runner_chunk_seed), so which thread draws it, and how many threads
 * there are, changes nothing.
 */
struct gen_chunk {
	const struct atb_runner_buffer *bf;
	const struct atb_runner_dist *d;
	void *p;
	uint64_t seed;                  /* the buffer's stream (chunk 0's) */
	size_t chunk, from, to;
};

/* PROTO: correctness.input_chunk_elements -- one chunk from its own stream. */
static int gen_chunk_run(void *ctx, size_t c)
{
	const struct gen_chunk *g = (const struct gen_chunk *)ctx + c;
	gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);

	if (!r)
		return -1;
	gsl_rng_set(r, (unsigned long)runner_chunk_seed(g->seed, g->chunk));
	gen_range(r, g->bf, g->d, g->p, g->from, g->to);
	gsl_rng_free(r);
	return 0;
}

int runner_gen_inputs(struct runner_bufs *b, const struct atb_runner_job *job,
		      const struct atb_runner_set *set, uint64_t seed, size_t set_index,
		      int dist, unsigned stream)
{
	size_t chunk = job->input_chunk_elements, nchunks = 0, i, c;
	struct gen_chunk *chunks = NULL;
	gsl_rng *r = NULL;
	int rc = -1;

	for (i = 0; chunk && i < job->nbuffers; i++)
		if (runner_is_input(&job->buffers[i]) && set->counts[i] > chunk)
			nchunks += (set->counts[i] + chunk - 1) / chunk;
	if (nchunks && !(chunks = atb_calloc(nchunks, sizeof(*chunks))))
		return -1;
	if (!(r = gsl_rng_alloc(gsl_rng_mt19937)))
		goto out;
	nchunks = 0;
	for (i = 0; i < job->nbuffers; i++) {
		const struct atb_runner_buffer *bf = &job->buffers[i];
		const struct atb_runner_dist *d = &bf->dist;
		uint64_t s;

		if (!runner_is_input(bf))
			continue;
		if (dist >= 0 && bf->adversarial)
			d = &job->dists[dist];
		s = runner_input_seed(seed, set_index, dist, stream, i);
		if (!chunk || set->counts[i] <= chunk) {
			/* one stream, as in every protocol version before chunks */
			gsl_rng_set(r, (unsigned long)s);
			gen_range(r, bf, d, b->p[i], 0, set->counts[i]);
			continue;
		}
		for (c = 0; c * chunk < set->counts[i]; c++) {
			size_t to = (c + 1) * chunk;

			chunks[nchunks++] = (struct gen_chunk){
				.bf = bf, .d = d, .p = b->p[i], .seed = s, .chunk = c,
				.from = c * chunk, .to = to < set->counts[i] ? to : set->counts[i]};
		}
	}
	rc = nchunks ? runner_parallel(nchunks, gen_chunk_run, chunks) : 0;
out:
	gsl_rng_free(r);
	atb_free(chunks);
	return rc;
}

int runner_gen_input_pair(const struct atb_runner_job *job, size_t set_index, uint64_t seed,
			  int dist, struct runner_bufs *a, struct runner_bufs *b)
{
	const struct atb_runner_set *set = &job->sets[set_index];

	memset(a, 0, sizeof(*a));
	memset(b, 0, sizeof(*b));
	if (runner_bufs_alloc(a, job, set) || runner_bufs_alloc(b, job, set) ||
	    runner_gen_inputs(a, job, set, seed, set_index, dist, RUNNER_STREAM_CHECK) ||
	    runner_gen_inputs(b, job, set, seed, set_index, dist, RUNNER_STREAM_REUSE)) {
		runner_bufs_free(a);
		runner_bufs_free(b);
		return -1;
	}
	return 0;
}

int runner_arm_is_checked(const struct atb_runner_job *job, size_t i)
{
	return !job->skip_correctness && i != job->reference &&
	       strcmp(job->arms[i].name, "baseline_alone");
}

int runner_any_checked(const struct atb_runner_job *job)
{
	size_t i;

	for (i = 0; i < job->narms; i++)
		if (runner_arm_is_checked(job, i))
			return 1;
	return 0;
}

/* ---- comparison --------------------------------------------------------- */

double runner_elem(const void *p, enum atb_dtype d, size_t k)
{
	switch (d) {
	case ATB_DTYPE_FP32:
		return ((const float *)p)[k];
	case ATB_DTYPE_FP64:
		return ((const double *)p)[k];
	case ATB_DTYPE_INT32:
		return ((const int32_t *)p)[k];
	case ATB_DTYPE_INT64:
		return (double)((const int64_t *)p)[k];
	case ATB_DTYPE_FP16:
		return atb_fp16_to_float(((const uint16_t *)p)[k]);
	case ATB_DTYPE_BF16:
		return atb_bf16_to_float(((const uint16_t *)p)[k]);
	}
	return NAN;
}

void runner_compare(const void *ref, const void *got, enum atb_dtype d, size_t n,
		    double atol, double rtol, struct runner_cmp *c)
{
	runner_compare_bounded(ref, got, d, n, atol, rtol, NULL, c);
}

/*
 * runner_reduction_bound's work in items of about RUNNER_CMP_PIECE elements
 * read: rows of the one operand's sums, rows of A's and columns of B's
 * squared norms, rows of the bound.  Each sum is one item's, in the order
 * of the plain loop, so the bound does not depend on the threads.
 */
struct bound_work {
	const void *xp, *bp;             /* the operands (one: xp only) */
	enum atb_dtype xd, bd;
	size_t k, m, nn, per;            /* per: rows (or columns) per item */
	double scale, *bound, *ra, *cb;
};

static int bound_sum_rows(void *ctx, size_t item)
{
	struct bound_work *w = ctx;
	size_t a, x, hi = (item + 1) * w->per < w->m ? (item + 1) * w->per : w->m;

	for (a = item * w->per; a < hi; a++) {
		double s = 0;

		for (x = 0; x < w->k; x++)
			s += fabs(runner_elem(w->xp, w->xd, a * w->k + x));
		w->bound[a] = w->scale * s;
	}
	return 0;
}

static int bound_norm_rows(void *ctx, size_t item)
{
	struct bound_work *w = ctx;
	size_t a, x, hi = (item + 1) * w->per < w->m ? (item + 1) * w->per : w->m;

	for (a = item * w->per; a < hi; a++)
		for (x = 0; x < w->k; x++) {
			double v = runner_elem(w->xp, w->xd, a * w->k + x);

			w->ra[a] += v * v;
		}
	return 0;
}

static int bound_norm_cols(void *ctx, size_t item)
{
	struct bound_work *w = ctx;
	size_t lo = item * w->per, b, x, hi = lo + w->per < w->nn ? lo + w->per : w->nn;

	for (x = 0; x < w->k; x++)
		for (b = lo; b < hi; b++) {
			double v = runner_elem(w->bp, w->bd, x * w->nn + b);

			w->cb[b] += v * v;
		}
	return 0;
}

static int bound_fill_rows(void *ctx, size_t item)
{
	struct bound_work *w = ctx;
	size_t a, b, hi = (item + 1) * w->per < w->m ? (item + 1) * w->per : w->m;

	for (a = item * w->per; a < hi; a++)
		for (b = 0; b < w->nn; b++)
			w->bound[a * w->nn + b] = w->scale * sqrt(w->ra[a]) * sqrt(w->cb[b]);
	return 0;
}

/* Items of about RUNNER_CMP_PIECE elements, `len` elements a line, over `lines` lines. */
static size_t bound_per(size_t len)
{
	return len && len < RUNNER_CMP_PIECE ? RUNNER_CMP_PIECE / len : 1;
}

static size_t bound_items(size_t lines, size_t per)
{
	return (lines + per - 1) / per;
}

double *runner_reduction_bound(const struct atb_runner_job *job, const struct atb_runner_set *set,
			       const struct runner_bufs *in, size_t i, size_t *length)
{
	const struct atb_runner_buffer *bf = &job->buffers[i];
	const struct atb_runner_reduction *r = &bf->reduction;
	size_t k = atb_runner_reduction_length(job, i, set), n = set->counts[i];
	struct bound_work w = {.k = k};

	*length = k;
	if (!k || !(job->reduction_factor > 0))
		return NULL;
	w.scale = job->reduction_factor * (job->reduction_linear ? (double)k : sqrt((double)k)) *
		  atb_dtype_unit_roundoff(r->accumulate);
	w.xp = in->p[r->operand[0]];
	w.xd = job->buffers[r->operand[0]].dtype;
	w.bound = atb_malloc(n * sizeof(*w.bound));
	if (!w.bound)
		return NULL;
	if (r->noperands == 1) {
		/* Exact: sum_k |x_ik|, the one-operand form of (|A||B|)_ij. */
		w.m = n;
		w.per = bound_per(k);
		runner_parallel(bound_items(n, w.per), bound_sum_rows, &w);
		return w.bound;
	}
	/* Two operands: (|A||B|)_ij <= ||A(i,:)||_2 ||B(:,j)||_2 (Cauchy-Schwarz),
	 * O(MK + KN) instead of the O(MNK) of the exact product. */
	w.m = set->counts[r->operand[0]] / k;
	w.nn = set->counts[r->operand[1]] / k;
	w.bp = in->p[r->operand[1]];
	w.bd = job->buffers[r->operand[1]].dtype;
	w.ra = atb_calloc(w.m + w.nn + 1, sizeof(*w.ra));
	if (!w.ra || w.m * w.nn != n) {
		atb_free(w.ra);
		atb_free(w.bound);
		return NULL;
	}
	w.cb = w.ra + w.m;
	w.per = bound_per(k);
	runner_parallel(bound_items(w.m, w.per), bound_norm_rows, &w);
	w.per = bound_per(k);
	runner_parallel(bound_items(w.nn, w.per), bound_norm_cols, &w);
	w.per = bound_per(w.nn);
	runner_parallel(bound_items(w.m, w.per), bound_fill_rows, &w);
	atb_free(w.ra);
	return w.bound;
}

/*
 * The fast rule (same results, bit for bit, as the plain one element at a
 * time: tests/unit/u-compare.c holds it to a copy of that loop).  Spans of
 * CMP_SPAN elements that are equal byte for byte are passed over whole
 * when equal elements cannot fail (see runner_compare_bounded: a copy
 * candidate's outputs are compared at memcmp's speed).  The other elements
 * go in blocks of CMP_BLOCK.  A first pass over a block, branch-
 * free and typed (no dtype switch, no division), asks one question: is any
 * element not plainly "within tolerance, finite, and raising neither
 * maximum"?  When none is, the block changes nothing but what the pass has
 * already proved, and is done.  Otherwise the block is gone through element
 * by element, and each element that fails the same question (asked with
 * the maxima as they are then) takes the exact rule (cmp_exact, the old
 * loop's body).  So every NaN, infinity, bad element and new maximum is
 * judged by the rule itself, in element order; the pass only skips elements
 * for which the rule would change nothing.
 *
 * Why a skipped element changes nothing: ad = |g - r| <= cap, cap =
 * min(max_abs, DBL_MAX), so g - r is finite (had either been NaN or
 * infinite, so would their difference) and max_abs does not rise; ad <=
 * atol + rtol |r| + extra, so it passes; and max_rel does not rise:
 * rounding is monotone and max_rel and ad are doubles, so fl(ad / |r|) >
 * max_rel implies ad / |r| > max_rel, so ad > max_rel |r|, so ad >=
 * fl(max_rel |r|), which the pass tests (at r == 0 that product is 0; when
 * max_rel is infinite it is NaN or infinite, and nothing can raise it).
 * int64 asks only "equal?": the rule skips equal int64 elements, and
 * unequal ones always take the exact rule.
 */
#define CMP_BLOCK 32
/* Spans of elements first compared as bytes, where equal ones pass. */
#define CMP_SPAN 1024
/* Inlined in every build: a Debug build's calls per element cost more than the rule. */
#define CMP_INLINE static inline __attribute__((always_inline))

/* The rule for one element (r, g its values as doubles, allow its extra). */
static inline void cmp_exact(struct runner_cmp *c, size_t k, double r, double g, double atol,
			     double rtol, double allow)
{
	double ad, rd;
	int ok;

	if (isnan(g) && !isnan(r))
		c->nnan++;
	if (isnan(r) || isnan(g)) {
		ok = isnan(r) && isnan(g);
		ad = rd = 0;
	} else if (isinf(r) || isinf(g)) {
		ok = r == g;
		ad = rd = ok ? 0 : INFINITY;
	} else {
		ad = fabs(g - r);
		rd = r != 0 ? ad / fabs(r) : (ad ? INFINITY : 0);
		ok = ad <= atol + rtol * fabs(r) + allow;
	}
	if (ad > c->max_abs)
		c->max_abs = ad;
	if (rd > c->max_rel)
		c->max_rel = rd;
	if (!ok) {
		if (c->first_bad < 0) {
			c->first_bad = (long long)k;
			c->bad_ref = r;
			c->bad_got = g;
		}
		c->nbad++;
	}
}

/* fp16 as float, exactly (atb_fp16_to_float), from a table built once. */
static float fp16_table[65536];
static pthread_once_t fp16_once = PTHREAD_ONCE_INIT;

static void fp16_table_fill(void)
{
	uint32_t h;

	for (h = 0; h < 65536; h++)
		fp16_table[h] = atb_fp16_to_float((uint16_t)h);
}

/* bf16 is the top half of a float: atb_bf16_to_float, inline. */
CMP_INLINE float bf16_float(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

CMP_INLINE double conv_fp32(float x) { return x; }
CMP_INLINE double conv_fp64(double x) { return x; }
CMP_INLINE double conv_int32(int32_t x) { return x; }
CMP_INLINE double conv_int64(int64_t x) { return (double)x; }
CMP_INLINE double conv_fp16(uint16_t x) { return fp16_table[x]; }
CMP_INLINE double conv_bf16(uint16_t x) { return bf16_float(x); }

/* max_abs as the pass's bound: no finite element is above DBL_MAX. */
CMP_INLINE double cmp_cap(const struct runner_cmp *c)
{
	return c->max_abs < DBL_MAX ? c->max_abs : DBL_MAX;
}

/*
 * 0 when the element (r, g, its extra allow) is plainly within tolerance,
 * finite and raises neither maximum (cap = cmp_cap, mr = max_rel, or
 * smaller), so the exact rule would change nothing; 1 otherwise.  Branch-
 * free; "+ allow" as the exact rule has it (x + 0 compares as x).
 */
CMP_INLINE int cmp_odd(double r, double g, double cap, double mr, double atol, double rtol,
		       double allow)
{
	double ad = fabs(g - r), ar = fabs(r);

	return (ad > cap) | !(ad <= atol + rtol * ar + allow) | ((ad > 0) & (ad >= mr * ar));
}

/*
 * cmp_<name>_plain and cmp_<name>_extra: the blocks of one dtype of element
 * type T, read as doubles by CONV; ODD(k) the pass's question for element
 * k (cmp_odd, or for int64 "not equal": equal int64 are skipped by the
 * rule); EXTRA(k) element k's allowance.  An odd block is gone through
 * element by element: the exact rule for the elements the same question,
 * asked with the maxima as they are then, cannot clear.
 */
#define CMP_DEFINE(name, T, CONV, ODD, EXTRA)                                              \
static void name(const void *refp, const void *gotp, size_t n, double atol, double rtol,   \
		 const double *extra, int equal_passes, struct runner_cmp *c)              \
{                                                                                         \
	const T *ref = refp, *got = gotp;                                                   \
	size_t so, sh, lo, k;                                                               \
                                                                                          \
	(void)extra;                                                                        \
	for (so = 0; so < n; so = sh) {                                                     \
		sh = n - so < CMP_SPAN ? n : so + CMP_SPAN;                                 \
		if (equal_passes && !memcmp(ref + so, got + so, (sh - so) * sizeof(T)))     \
			continue;                                                           \
		for (lo = so; lo < sh; lo += CMP_BLOCK) {                                   \
			size_t hi = sh - lo < CMP_BLOCK ? sh : lo + CMP_BLOCK;              \
			double cap = cmp_cap(c), mr = c->max_rel;                           \
			int odd = 0;                                                        \
                                                                                          \
			(void)cap; /* int64 asks neither */                                 \
			(void)mr;                                                           \
			for (k = lo; k < hi; k++)                                           \
				odd |= ODD(CONV, k);                                        \
			if (!odd)                                                           \
				continue;                                                   \
			for (k = lo; k < hi; k++) {                                         \
				cap = cmp_cap(c);                                           \
				mr = c->max_rel;                                            \
				if (ODD(CONV, k))                                           \
					cmp_exact(c, k, CONV(ref[k]), CONV(got[k]), atol,   \
						  rtol, EXTRA(k));                          \
			}                                                                   \
		}                                                                           \
	}                                                                                   \
}

#define CMP_NO_EXTRA(k) 0
#define CMP_EXTRA(k) extra[k]
#define CMP_ODD_PLAIN(CONV, k) cmp_odd(CONV(ref[k]), CONV(got[k]), cap, mr, atol, rtol, 0)
#define CMP_ODD_EXTRA(CONV, k) cmp_odd(CONV(ref[k]), CONV(got[k]), cap, mr, atol, rtol, extra[k])
#define CMP_ODD_EQ(CONV, k) (ref[k] != got[k])
#define CMP_DEFINE_BOTH(name, T, CONV, ODD_PLAIN, ODD_EXTRA)                               \
	CMP_DEFINE(cmp_##name##_plain, T, CONV, ODD_PLAIN, CMP_NO_EXTRA)                   \
	CMP_DEFINE(cmp_##name##_extra, T, CONV, ODD_EXTRA, CMP_EXTRA)

CMP_DEFINE_BOTH(fp32, float, conv_fp32, CMP_ODD_PLAIN, CMP_ODD_EXTRA)
CMP_DEFINE_BOTH(fp64, double, conv_fp64, CMP_ODD_PLAIN, CMP_ODD_EXTRA)
CMP_DEFINE_BOTH(int32, int32_t, conv_int32, CMP_ODD_PLAIN, CMP_ODD_EXTRA)
CMP_DEFINE_BOTH(fp16, uint16_t, conv_fp16, CMP_ODD_PLAIN, CMP_ODD_EXTRA)
CMP_DEFINE_BOTH(bf16, uint16_t, conv_bf16, CMP_ODD_PLAIN, CMP_ODD_EXTRA)
CMP_DEFINE_BOTH(int64, int64_t, conv_int64, CMP_ODD_EQ, CMP_ODD_EQ)

typedef void cmp_fn(const void *ref, const void *got, size_t n, double atol, double rtol,
		    const double *extra, int equal_passes, struct runner_cmp *c);

/* Per dtype: without extra, with extra. */
static cmp_fn *const cmp_fns[][2] = {
	[ATB_DTYPE_FP32] = {cmp_fp32_plain, cmp_fp32_extra},
	[ATB_DTYPE_FP64] = {cmp_fp64_plain, cmp_fp64_extra},
	[ATB_DTYPE_INT32] = {cmp_int32_plain, cmp_int32_extra},
	[ATB_DTYPE_INT64] = {cmp_int64_plain, cmp_int64_extra},
	[ATB_DTYPE_FP16] = {cmp_fp16_plain, cmp_fp16_extra},
	[ATB_DTYPE_BF16] = {cmp_bf16_plain, cmp_bf16_extra},
};

void runner_compare_bounded(const void *ref, const void *got, enum atb_dtype d, size_t n,
			    double atol, double rtol, const double *extra, struct runner_cmp *c)
{
	int eq;

	memset(c, 0, sizeof(*c));
	c->first_bad = -1;
	if ((size_t)d >= sizeof(cmp_fns) / sizeof(cmp_fns[0]))
		return;
	if (d == ATB_DTYPE_FP16)
		pthread_once(&fp16_once, fp16_table_fill);
	/* Bitwise-equal elements change nothing when 0 <= atol + rtol |r| for
	 * every r (and there is no extra, which may be NaN or negative):
	 * equal NaNs and infinities pass with 0 errors, equal finite elements
	 * are 0 apart.  Equal int64 are skipped by the rule itself. */
	eq = d == ATB_DTYPE_INT64 || (!extra && atol >= 0 && rtol >= 0 && rtol < INFINITY);
	cmp_fns[d][extra != NULL](ref, got, n, atol, rtol, extra, eq, c);
}

/* runner_compare_parallel's pieces: each runner_compare_bounded on its range. */
struct cmp_piece {
	const char *ref, *got;
	const double *extra;
	enum atb_dtype d;
	size_t n;
	double atol, rtol;
	struct runner_cmp c;
};

static int cmp_piece_run(void *ctx, size_t i)
{
	struct cmp_piece *p = (struct cmp_piece *)ctx + i;

	runner_compare_bounded(p->ref, p->got, p->d, p->n, p->atol, p->rtol, p->extra, &p->c);
	return 0;
}

void runner_compare_parallel(const void *ref, const void *got, enum atb_dtype d, size_t n,
			     double atol, double rtol, const double *extra,
			     struct runner_cmp *c)
{
	size_t es = atb_dtype_size(d), np = (n + RUNNER_CMP_PIECE - 1) / RUNNER_CMP_PIECE, i;
	struct cmp_piece *pc;

	if (np < 2 || !es || runner_threads(np) < 2 || !(pc = atb_calloc(np, sizeof(*pc)))) {
		runner_compare_bounded(ref, got, d, n, atol, rtol, extra, c);
		return;
	}
	for (i = 0; i < np; i++) {
		size_t lo = i * RUNNER_CMP_PIECE;

		pc[i] = (struct cmp_piece){.ref = (const char *)ref + lo * es,
					   .got = (const char *)got + lo * es,
					   .extra = extra ? extra + lo : NULL, .d = d,
					   .n = n - lo < RUNNER_CMP_PIECE ? n - lo : RUNNER_CMP_PIECE,
					   .atol = atol, .rtol = rtol};
	}
	runner_parallel(np, cmp_piece_run, pc);
	/* merged as one pass would have found it: maxima, sums, and the first
	 * bad element of the lowest piece that has one, at its whole index */
	memset(c, 0, sizeof(*c));
	c->first_bad = -1;
	for (i = 0; i < np; i++) {
		const struct runner_cmp *q = &pc[i].c;

		if (q->max_abs > c->max_abs)
			c->max_abs = q->max_abs;
		if (q->max_rel > c->max_rel)
			c->max_rel = q->max_rel;
		if (c->first_bad < 0 && q->first_bad >= 0) {
			c->first_bad = (long long)(i * RUNNER_CMP_PIECE) + q->first_bad;
			c->bad_ref = q->bad_ref;
			c->bad_got = q->bad_got;
		}
		c->nbad += q->nbad;
		c->nnan += q->nnan;
	}
	atb_free(pc);
}

void runner_tolerance_for(const struct atb_runner_job *job, enum atb_dtype d, double *atol,
			  double *rtol)
{
	size_t i;

	*atol = *rtol = 0;
	for (i = 0; i < job->ntolerances; i++)
		if (!strcmp(job->tolerances[i].dtype, atb_dtype_name(d))) {
			*atol = job->tolerances[i].atol;
			*rtol = job->tolerances[i].rtol;
		}
}

json_t *runner_buffer_json(const char *name, enum atb_dtype d, const struct runner_cmp *c,
			   double atol, double rtol)
{
	return json_pack("{s:s, s:s, s:b, s:o, s:o, s:I, s:I, s:I, s:f, s:f}",
			 "name", name, "dtype", atb_dtype_name(d),
			 "pass", !c->nbad, "max_abs_err", runner_real(c->max_abs),
			 "max_rel_err", runner_real(c->max_rel),
			 "first_bad_index", (json_int_t)c->first_bad,
			 "bad_count", (json_int_t)c->nbad, "nan_count", (json_int_t)c->nnan,
			 "atol", atol, "rtol", rtol);
}

void runner_cmp_init(struct runner_cmp *worst)
{
	memset(worst, 0, sizeof(*worst));
	worst->first_bad = -1;
}

void runner_cmp_merge(struct runner_cmp *worst, const char **worst_name,
		      const struct runner_cmp *c, const char *name)
{
	if (c->max_abs > worst->max_abs)
		worst->max_abs = c->max_abs;
	if (c->max_rel > worst->max_rel)
		worst->max_rel = c->max_rel;
	worst->nnan += c->nnan;
	worst->nbad += c->nbad;
	if (worst->first_bad < 0 && c->first_bad >= 0) {
		worst->first_bad = c->first_bad;
		worst->bad_ref = c->bad_ref;
		worst->bad_got = c->bad_got;
		*worst_name = name;
	}
}

int runner_outputs_match(const struct atb_runner_job *job, const struct atb_runner_set *set,
			 const struct runner_bufs *ref, const struct runner_bufs *got,
			 json_t *arr, struct runner_cmp *worst, const char **worst_name)
{
	size_t i;
	int pass = 1;

	if (worst)
		runner_cmp_init(worst);
	for (i = 0; i < job->nbuffers; i++) {
		const struct atb_runner_buffer *bf = &job->buffers[i];
		double atol, rtol, *extra;
		struct runner_cmp c;
		size_t klen = 0;

		if (bf->role == ATB_BUFFER_IN)
			continue;
		runner_tolerance_for(job, bf->dtype, &atol, &rtol);
		/* PROTO: correctness.reduction_tolerance -- from the reference's copy
		 * of the inputs; when it cannot be allocated the rule is only
		 * stricter. */
		extra = runner_reduction_bound(job, set, ref, i, &klen);
		runner_compare_parallel(ref->p[i], got->p[i], bf->dtype, set->counts[i], atol, rtol,
					extra, &c);
		atb_free(extra);
		if (c.nbad)
			pass = 0;
		if (arr) {
			json_t *o = runner_buffer_json(bf->name, bf->dtype, &c, atol, rtol);

			if (o && extra)
				json_object_set_new(o, "reduction_length", json_integer((json_int_t)klen));
			json_array_append_new(arr, o);
		}
		if (worst)
			runner_cmp_merge(worst, worst_name, &c, bf->name);
	}
	return pass;
}

/* ---- input mutation and result reuse -------------------------------------- */

/* runner_hash_inputs' items: one piece of one input buffer each. */
struct hash_piece {
	const unsigned char *p;
	size_t len;
	char hex[ATB_SHA256_HEX_LEN + 1];
};

static int hash_piece_run(void *ctx, size_t i)
{
	struct hash_piece *h = (struct hash_piece *)ctx + i;

	return atbi_sha256_hex(h->p, h->len, h->hex) ? -1 : 0;
}

static size_t hash_npieces(size_t bytes)
{
	return bytes > RUNNER_HASH_PIECE ? (bytes + RUNNER_HASH_PIECE - 1) / RUNNER_HASH_PIECE : 1;
}

int runner_hash_inputs(const struct atb_runner_job *job, const struct runner_bufs *b,
		       char (*out)[ATB_SHA256_HEX_LEN + 1])
{
	struct hash_piece *hp;
	size_t i, c, np = 0, at = 0;
	int rc = -1;

	for (i = 0; i < job->nbuffers; i++)
		if (job->buffers[i].role == ATB_BUFFER_IN)
			np += hash_npieces(b->bytes[i]);
	if (!np)
		return 0;
	if (!(hp = atb_calloc(np, sizeof(*hp))))
		return -1;
	for (i = 0; i < job->nbuffers; i++) {
		if (job->buffers[i].role != ATB_BUFFER_IN)
			continue;
		for (c = 0; c < hash_npieces(b->bytes[i]); c++) {
			size_t lo = c * RUNNER_HASH_PIECE;

			hp[at].p = (const unsigned char *)b->p[i] + lo;
			hp[at++].len = b->bytes[i] - lo < RUNNER_HASH_PIECE ? b->bytes[i] - lo
									    : RUNNER_HASH_PIECE;
		}
	}
	if (runner_parallel(np, hash_piece_run, hp))
		goto out;
	/* one piece: its digest; more: the digest of the pieces' hex digests */
	for (i = 0, at = 0; i < job->nbuffers; i++) {
		size_t n;

		if (job->buffers[i].role != ATB_BUFFER_IN)
			continue;
		n = hash_npieces(b->bytes[i]);
		if (n == 1) {
			memcpy(out[i], hp[at].hex, sizeof(out[i]));
		} else {
			char *cat = atb_malloc(n * ATB_SHA256_HEX_LEN);
			int bad;

			if (!cat)
				goto out;
			for (c = 0; c < n; c++)
				memcpy(cat + c * ATB_SHA256_HEX_LEN, hp[at + c].hex, ATB_SHA256_HEX_LEN);
			bad = atbi_sha256_hex(cat, n * ATB_SHA256_HEX_LEN, out[i]) != ATB_OK;
			atb_free(cat);
			if (bad)
				goto out;
		}
		at += n;
	}
	rc = 0;
out:
	atb_free(hp);
	return rc;
}

json_t *runner_mutated_inputs(const struct atb_runner_job *job,
			      char (*before)[ATB_SHA256_HEX_LEN + 1],
			      char (*after)[ATB_SHA256_HEX_LEN + 1])
{
	json_t *mutated = json_array();
	size_t i;

	for (i = 0; mutated && i < job->nbuffers; i++)
		if (job->buffers[i].role == ATB_BUFFER_IN && strcmp(before[i], after[i]))
			json_array_append_new(mutated, json_string(job->buffers[i].name));
	return mutated;
}

int runner_check_reuse(const struct atb_runner_job *job, const struct atb_runner_set *set,
		       const struct runner_bufs *in_a, const struct runner_bufs *ref_a,
		       const struct runner_bufs *in_b, const struct runner_bufs *ref_b,
		       runner_reuse_run_fn run, void *ctx, struct runner_reuse *res)
{
	static const struct {
		int slot, b;
		const char *step;
	} steps[] = {
		/*
		 * Same buffers with new contents comes right after the first
		 * call, so a cache keyed on the last call's pointers is hit (an
		 * allocator that never reuses addresses, e.g. ASan's, would
		 * otherwise let it through correctness and into timing).
		 */
		{0, 0, "fresh_inputs_a"},
		{0, 1, "same_buffers_new_inputs"},
		{1, 1, "fresh_inputs_b"},
	};
	size_t i;

	memset(res, 0, sizeof(*res));
	res->follows = 1;
	for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		const struct runner_bufs *got = NULL;
		int krc = 0;

		if (run(ctx, steps[i].slot, steps[i].b ? in_b : in_a, &got, &krc))
			return -1;
		if (krc) {
			res->failed_step = "kernel_failed";
		} else if (!runner_outputs_match(job, set, steps[i].b ? ref_b : ref_a, got, NULL,
						 &res->step_cmp, &res->step_cmp_name)) {
			res->failed_step = steps[i].step;
			res->step_cmp_set = 1;
		}
		if (res->failed_step) {
			res->follows = 0;
			break;
		}
	}
	if (res->follows || i != 1)
		return 0;
	/*
	 * PROTO: gates result_reuse -- wrong on B in A's old buffers.  A cache
	 * is right on B in buffers it has never seen; a kernel that is plainly
	 * wrong on B (precision lost, a bf16 tile) is wrong there too.  Slot 1
	 * has not been used yet: fresh allocations, poisoned by run.  Wrong
	 * there, and not A's result handed back (a cache keyed on the shape
	 * alone), it is a correctness failure on B, not result reuse.
	 */
	{
		const struct runner_bufs *got = NULL;
		int krc = 0;

		if (run(ctx, 1, in_b, &got, &krc))
			return -1;
		if (!krc && runner_outputs_match(job, set, ref_b, got, NULL, NULL, NULL))
			return 0;
		if (!krc && runner_outputs_match(job, set, ref_a, got, NULL, NULL, NULL))
			return 0;
		res->buffers = json_array();
		if (!res->buffers)
			return -1;
		runner_outputs_match(job, set, ref_b, got, res->buffers, &res->worst,
				     &res->worst_name);
		res->kernel_status = krc;
		res->wrong_fresh = 1;
		res->follows = 1;
		res->failed_step = NULL;
	}
	return 0;
}

void runner_reuse_settle(const struct atb_runner_job *job, struct runner_facts *f,
			 const char **reuse_on)
{
	if (!f->reuse.wrong_fresh) {
		f->reuse_checked = 1;
		*reuse_on = runner_input_name(job, f->dist);
		return;
	}
	f->pass = 0;
	f->kernel_status = f->reuse.kernel_status;
	f->worst = f->reuse.worst;
	f->worst_name = f->reuse.worst_name;
	json_decref(f->buffers);
	f->buffers = f->reuse.buffers;
	f->reuse.buffers = NULL;
}

/* ---- events ------------------------------------------------------------- */

/* A comparison's first bad element {buffer, index, ref, got}, or json null. */
static json_t *first_bad_json(const struct runner_cmp *c, const char *name)
{
	if (c->first_bad < 0)
		return json_null();
	return json_pack("{s:s, s:I, s:o, s:o}", "buffer", name, "index",
			 (json_int_t)c->first_bad, "ref", runner_real(c->bad_ref), "got",
			 runner_real(c->bad_got));
}

/*
 * The failed result-reuse step's mismatch, or null: its largest errors, the
 * count of elements over the tolerance, the first of them.  A reuse refusal
 * with errors at the tolerance's scale (a different rounding) reads apart
 * from a stale result (the poison's NaNs, or errors of the values' size).
 */
json_t *runner_reuse_step_json(const struct runner_reuse *r)
{
	const struct runner_cmp *c = &r->step_cmp;

	/* nothing compared (an output that could not be judged): null, not zeros */
	if (!r->step_cmp_set || r->follows || (!c->nbad && !c->nnan))
		return json_null();
	return json_pack("{s:o, s:o, s:I, s:I, s:o}",
			 "max_abs_err", runner_real(c->max_abs), "max_rel_err", runner_real(c->max_rel),
			 "bad_count", (json_int_t)c->nbad, "nan_count", (json_int_t)c->nnan,
			 "first_bad", first_bad_json(c, r->step_cmp_name ? r->step_cmp_name : "?"));
}

int runner_facts_failed(const struct runner_facts *f)
{
	json_t *overlaps = json_object_get(f->aliasing, "overlaps");

	return !f->pass || json_array_size(f->mutated) || !f->reuse.follows ||
	       json_array_size(overlaps) > 0;
}

json_t *runner_correctness_event(const struct atb_runner_job *job, struct runner_facts *f)
{
	const struct atb_runner_set *set = &job->sets[f->set_index];
	const struct runner_cmp *w = &f->worst;
	json_t *first_bad, *ev;

	first_bad = first_bad_json(w, f->worst_name);
	ev = json_pack("{s:s, s:I, s:s, s:s, s:i, s:s, s:i, s:b, s:i, s:o, s:o, s:o,"
		       " s:I, s:I, s:o,"
		       " s:{s:{s:b, s:o}, s:{s:b, s:b, s:o, s:o}, s:o}}",
		       "event", "correctness", "seed", (json_int_t)f->seed,
		       "arm", f->arm, "set", set->name, "set_index", (int)f->set_index,
		       "input", runner_input_name(job, f->dist),
		       "input_index", f->dist + 1,
		       "pass", f->pass, "kernel_status", f->kernel_status,
		       "max_abs_err", runner_real(w->max_abs),
		       "max_rel_err", runner_real(w->max_rel),
		       "first_bad", first_bad,
		       "bad_count", (json_int_t)w->nbad,
		       "nan_count", (json_int_t)w->nnan,
		       "buffers", f->buffers,
		       "gates",
		       "input_mutation", "checked", 1, "mutated", f->mutated,
		       "result_reuse", "checked", f->reuse_checked, "follows_inputs", f->reuse.follows,
		       "failed_step", f->reuse.failed_step ? json_string(f->reuse.failed_step)
							    : json_null(),
		       "failed_step_error", runner_reuse_step_json(&f->reuse),
		       "output_aliasing", f->aliasing ? f->aliasing : json_null());
	/* json_pack's "o" steals even when the pack fails. */
	f->buffers = f->mutated = f->aliasing = NULL;
	if (ev && (json_object_set_new(json_object_get(json_object_get(ev, "gates"),
						       "result_reuse"),
				       "checked_on", f->reuse_checked_on
					       ? json_string(f->reuse_checked_on) : json_null()) ||
		   json_object_set_new(json_object_get(json_object_get(ev, "gates"),
						       "result_reuse"),
				       "wrong_in_fresh_buffers",
				       json_boolean(f->reuse.wrong_fresh)))) {
		json_decref(ev);
		ev = NULL;
	}
	return ev;
}

/*
 * The runner's clock when the last "timed_begin" marker went out, read
 * through the same clock_gettime as the timing core: the group's span in
 * the samples events is measured from it (PROTO: gates.clock).  One group
 * is timed at a time, so one variable serves every backend.
 */
static int64_t group_mark_ns = -1;
/* PROTO: gates.background -- beside the group that is being timed */
static struct runner_background group_bg;

/*
 * PROTO: gates.clock -- the harness's answer to a "timed_begin": one byte on
 * stdin (its socket), sent once it has stamped the marker's arrival and read
 * the job tree in /proc.  The group's span and background reading start
 * after it, so the harness's span holds this one: a harness late to read
 * the marker (storing the events before it, or waiting for a CPU) made the
 * runner's span the longer, and an honest candidate was refused on a loaded
 * box (seed 2 of a baseline-alone job under AddressSanitizer in CI: 1777 ms
 * by the runner, 1704 ms by the harness).  stdin not a socket (run by hand:
 * a pipe, a file or a terminal): no harness, nothing to wait for.  At most
 * 10 s: a harness that does not answer has its span checked as it is.
 */
static void wait_for_harness(void)
{
	int64_t until = atbi_monotonic_ns() + 10 * (int64_t)1000000000;
	struct stat st;
	char c;

	if (fstat(0, &st) || !S_ISSOCK(st.st_mode))
		return;
	for (;;) {
		int64_t left = until - atbi_monotonic_ns();
		struct pollfd p = {.fd = 0, .events = POLLIN};
		int rc;

		if (left <= 0)
			return;
		rc = poll(&p, 1, (int)(left / 1000000 + 1));
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc <= 0)
			return;
		if (read(0, &c, 1) < 0 && errno == EINTR)
			continue;
		return;  /* the answer, the harness's end, or an error: go on */
	}
}

int runner_mark_group(uint64_t seed, size_t narms)
{
	/*
	 * The marker the harness stamps with its own clock on arrival: it
	 * compares the span it saw from here to the samples events with the
	 * span this process reports, so a clock forged inside this address
	 * space disagrees with one outside it.
	 */
	json_t *mark = json_pack("{s:s, s:I, s:I}", "event", "timed_begin", "seed",
				 (json_int_t)seed, "arms", (json_int_t)narms);
	int rc = runner_emit(mark);

	if (!rc)
		wait_for_harness();
	runner_background_begin(&group_bg);
	group_mark_ns = atbi_monotonic_ns();
	return rc;
}

int runner_time_group(const struct atb_runner_job *job, struct atb_timer *timer,
		      uint64_t seed, size_t narms, atb_timing_call_fn call, void *ctx,
		      const char *(*timer_why)(const struct atb_timer *),
		      struct atb_timing_seed *res)
{
	return runner_time_group_timed(job, timer, seed, narms, call, ctx, timer_why, NULL, res);
}

/* ---- the SM clock per timed trial (PROTO: gates.clocks) -------------------- */

static runner_clock_fn clock_fn;
static void *clock_ctx;
static unsigned *clock_mhz[ATB_RUNNER_MAX_ARMS];
static unsigned long long clock_reasons[ATB_RUNNER_MAX_ARMS];
static size_t clock_cap, clock_narms;

void runner_clock_reader(runner_clock_fn fn, void *ctx)
{
	clock_fn = fn;
	clock_ctx = ctx;
}

int runner_clock_begin(size_t narms, size_t trials_max)
{
	size_t a;

	clock_narms = 0;
	if (!clock_fn)
		return 0;
	if (narms > ATB_RUNNER_MAX_ARMS)
		return -1;
	if (trials_max > clock_cap) {
		for (a = 0; a < ATB_RUNNER_MAX_ARMS; a++) {
			unsigned *p = atb_realloc(clock_mhz[a], trials_max * sizeof(*p));

			if (!p)
				return -1;
			clock_mhz[a] = p;
		}
		clock_cap = trials_max;
	}
	for (a = 0; a < narms; a++) {
		memset(clock_mhz[a], 0, clock_cap * sizeof(*clock_mhz[a]));
		clock_reasons[a] = 0;
	}
	clock_narms = narms;
	return 0;
}

static int (*settle_fn)(void);

void runner_settle(int (*fn)(void))
{
	settle_fn = fn;
}

/*
 * Before each round's first flush: the last called worker seen stopped (the
 * warm-up's last call leaves its stop pending, which round 0's first window
 * would otherwise wait for), then the timed checks' preparation.
 */
static int settled_before_round(void *ctx, int round)
{
	if (settle_fn && settle_fn())
		return -1;
	return ctx ? runner_timed_before(ctx, round) : 0;
}

/* PROTO: timing.round_trip -- the empty call, how often, and whether it is taken out */
static int (*rt_call_fn)(void);
static int rt_every, rt_subtract;
static double rt_quantile;
static const struct atb_runner_job *rt_job;

void runner_round_trip(int (*call)(void), int every, int subtract, double q,
		       const struct atb_runner_job *job)
{
	rt_call_fn = call;
	rt_every = every;
	rt_subtract = subtract;
	rt_quantile = q;
	rt_job = job;
}

static int rt_call(void *ctx)
{
	(void)ctx;
	return rt_call_fn();
}

size_t runner_round_trip_slot(const struct atb_runner_job *job, uint64_t seed, int round,
			      size_t narms)
{
	const unsigned char *key = runner_placement_key(job);
	unsigned pad = 0, off = 0;

	if (!key || round < 0 ||
	    runner_placement_keyed(key, seed, (size_t)round, RUNNER_RT_BUFFER, &pad, &off))
		return SIZE_MAX;
	return (size_t)(((uint64_t)pad << 13 | off) % (narms + 1));
}

/* PROTO: timing.round_trip.position -- the empty call's place this round */
static size_t rt_slot(void *ctx, uint64_t seed, int round, const size_t *order, size_t narms)
{
	size_t p;

	(void)ctx;
	if (!rt_job || rt_job->round_trip_position == ATB_RT_AFTER)
		return narms;
	if (rt_job->round_trip_position == ATB_RT_KEYED)
		return runner_round_trip_slot(rt_job, seed, round, narms);
	/* after_reference: right after the reference arm's call */
	for (p = 0; p < narms; p++)
		if (order[p] == rt_job->reference)
			return p + 1;
	return SIZE_MAX;
}

/* after its window: seen stopped before anything else runs */
static int rt_done(void *ctx)
{
	(void)ctx;
	return settle_fn ? settle_fn() : 0;
}

static int clock_after_call(void *call_ctx, size_t arm, size_t trial)
{
	unsigned mhz = 0;
	unsigned long long why = 0;

	(void)call_ctx;
	if (settle_fn && settle_fn())
		return -1;
	if (!clock_fn || arm >= clock_narms || trial >= clock_cap)
		return 0;
	/* a failed read is a 0, not a failed seed: the gate counts it as unknown */
	if (!clock_fn(clock_ctx, &mhz, &why)) {
		clock_mhz[arm][trial] = mhz;
		clock_reasons[arm] |= why;
	}
	return 0;
}

int (*runner_clock_hook(void))(void *call_ctx, size_t arm, size_t trial)
{
	return clock_fn || settle_fn ? clock_after_call : NULL;
}

/* The samples event's "sm_mhz" and "clock_reasons" of group arm `arm`; 0, or -1. */
static int clock_json(json_t *ev, size_t arm, size_t ntrials)
{
	json_t *a;
	size_t k;

	if (arm >= clock_narms)
		return 0;
	a = json_array();
	for (k = 0; a && k < ntrials && k < clock_cap; k++)
		if (json_array_append_new(a, json_integer(clock_mhz[arm][k]))) {
			json_decref(a);
			a = NULL;
		}
	if (!a || json_object_set_new(ev, "sm_mhz", a) ||
	    json_object_set_new(ev, "clock_reasons", json_integer((json_int_t)clock_reasons[arm])))
		return -1;
	return 0;
}

int runner_time_group_timed(const struct atb_runner_job *job, struct atb_timer *timer,
			    uint64_t seed, size_t narms, atb_timing_call_fn call, void *ctx,
			    const char *(*timer_why)(const struct atb_timer *),
			    struct runner_timed *t, struct atb_timing_seed *res)
{
	struct atb_timing_hooks hooks = {settled_before_round,
					 t ? runner_timed_after : NULL, t,
					 t ? runner_timed_call : runner_clock_hook(), t,
					 runner_progress, rt_call_fn ? rt_call : NULL, rt_done, NULL,
					 rt_every, rt_slot};
	struct atb_error err;
	char msg[1400];

	memset(res, 0, sizeof(*res));
	if (runner_mark_group(seed, narms))
		return -1;
	if (runner_clock_begin(narms, (size_t)job->timing.trials_max)) {
		runner_emit_error("nomem", "cannot allocate the clock samples");
		return -1;
	}
	atb_error_clear(&err);
	if (!atb_timing_run_seed_hooked(&job->timing, timer, seed, narms, call, ctx, &hooks,
					res, &err))
		return 0;
	atb_error_format(&err, msg, sizeof(msg));
	if (timer_why && timer_why(timer)[0])
		snprintf(msg, sizeof(msg), "%s", timer_why(timer));
	if (t && t->msg[0]) {
		runner_emit_error("timed_checks", t->msg);
		atb_timing_seed_release(res);
		return -1;
	}
	runner_emit_error(err.status == ATB_ERR_CHECK ? "kernel_failed" : "timing", msg);
	atb_timing_seed_release(res);
	return -1;
}

int runner_emit_samples(const struct atb_timing_seed *s, const char *group,
			const char *const *names, size_t narms, int throttled)
{
	return runner_emit_samples_timed(s, group, names, narms, throttled, NULL);
}

int runner_emit_samples_timed(const struct atb_timing_seed *s, const char *group,
			      const char *const *names, size_t narms, int throttled,
			      const struct runner_timed *t)
{
	/* the group's span on this process's clock, marker to samples */
	int64_t span_ns = group_mark_ns >= 0 ? atbi_monotonic_ns() - group_mark_ns : -1;
	/* PROTO: gates.background -- read before the samples go out */
	json_t *bg = runner_background_end(&group_bg, s->seed, group);
	/* PROTO: timing.round_trip -- the group's empty calls: their
	   rt_quantile-quantile is what is taken out (version 12 a low one: an
	   interrupt or a preemption only adds time to some; version 13 the
	   median, of calls that never follow a candidate's), the median is
	   reported beside it */
	double rt_med = -1, rt_q = -1;
	int64_t rt_off = 0;
	size_t ai, k;

	if (s->nround_trip) {
		double *v = atb_malloc(s->nround_trip * sizeof(*v));
		struct atb_error err;

		if (!v) {
			json_decref(bg);
			return -1;
		}
		for (k = 0; k < s->nround_trip; k++)
			v[k] = (double)s->round_trip_ns[k];
		if (atb_stats_median(v, s->nround_trip, &rt_med, &err) ||
		    atb_stats_quantile(v, s->nround_trip, rt_quantile, &rt_q, &err)) {
			/* never a group with raw times among subtracted ones */
			atb_free(v);
			json_decref(bg);
			runner_emit_error("timing", "cannot take the round trip's quantile");
			return -1;
		}
		atb_free(v);
		if (rt_subtract && rt_q > 0)
			rt_off = (int64_t)llround(rt_q);
	}

	for (ai = 0; ai < narms; ai++) {
		const struct atb_timing_arm *a = &s->arms[ai];
		json_t *times = json_array(), *round = json_array(), *pos = json_array(),
		       *with = json_array(), *ev, *slots = NULL;
		json_int_t under = 0;

		if (!times || !round || !pos || !with)
			goto nomem;
		/* with subtract, every trial less the round trip, at least 1 ns
		   left; how many were at or under it (PROTO:
		   timing.round_trip.max_share_under judges that share) */
		for (k = 0; rt_off > 0 && k < a->ntrials; k++)
			under += a->times_ns[k] <= rt_off;
		for (k = 0; k < a->ntrials; k++)
			if (json_array_append_new(times,
						  json_integer(a->times_ns[k] - rt_off > 0
								       ? a->times_ns[k] - rt_off
								       : 1)) ||
			    json_array_append_new(round, json_integer(a->round[k])) ||
			    json_array_append_new(pos, json_integer(a->position[k])))
				goto nomem;
		for (k = 0; k < narms; k++)
			if (k != ai)
				json_array_append_new(with, json_string(names[k]));
		ev = json_pack("{s:s, s:I, s:s, s:s, s:o, s:s, s:I, s:i, s:o, s:o, s:o, s:i,"
			       " s:I, s:o, s:o, s:I}",
			       "event", "samples", "seed", (json_int_t)s->seed, "arm", names[ai],
			       "group", group, "paired_with", with,
			       "stop", atb_timing_stop_name(s->stop),
			       "trials", (json_int_t)a->ntrials, "rounds", s->rounds,
			       "times_ns", times, "round", round, "position", pos,
			       "warmup_iterations", a->warmup_iterations,
			       "warmup_ns", (json_int_t)a->warmup_ns,
			       "median_ns", runner_real(a->median_ns),
			       "ci_rel_halfwidth", runner_real(a->ci_rel_halfwidth),
			       "seed_elapsed_ns", (json_int_t)s->elapsed_ns);
		if (ev && json_object_set_new(ev, "span_ns", span_ns >= 0 ? json_integer(span_ns)
									: json_null())) {
			json_decref(ev);
			ev = NULL;
		}
		/* PROTO: timing.preemption -- the waits for a CPU taken out of the
		 * trials (gate clock bounds them by what the harness saw) */
		if (ev && a->preempted_trials &&
		    (json_object_set_new(ev, "preempted_ns", json_integer(a->preempted_ns)) ||
		     json_object_set_new(ev, "preempted_trials",
					 json_integer((json_int_t)a->preempted_trials)))) {
			json_decref(ev);
			ev = NULL;
		}
		/* PROTO: timing.round_trip -- what was timed and taken out; where
		   each empty call was in its round (narms: after the arms) */
		if (ev && rt_med > 0) {
			slots = json_array();
			for (k = 0; slots && k < s->nround_trip; k++)
				if (json_array_append_new(slots, json_integer(s->round_trip_slot
										? s->round_trip_slot[k]
										: (int)narms))) {
					json_decref(slots);
					slots = NULL;
				}
			if (!slots ||
			    json_object_set_new(ev, "round_trip",
						json_pack("{s:f, s:f, s:f, s:I, s:b, s:I, s:I, s:o}",
							  "median_ns", rt_med, "quantile", rt_quantile,
							  "quantile_ns", rt_q, "calls",
							  (json_int_t)s->nround_trip, "subtracted",
							  rt_off > 0, "subtracted_ns", (json_int_t)rt_off,
							  "under", under, "slots", slots))) {
				json_decref(ev);
				ev = NULL;
			}
		}
		/* PROTO: gates.timed_correctness -- what the checks between rounds saw */
		if (ev && t && json_object_set_new(ev, "timed_checks", runner_timed_json(t, ai))) {
			json_decref(ev);
			ev = NULL;
		}
		/* PROTO: gates.clocks -- the SM clock after each trial, when read */
		if (ev && clock_json(ev, ai, a->ntrials)) {
			json_decref(ev);
			ev = NULL;
		}
		/* The cuda backend's clock-throttle flag, last as it always was. */
		if (ev && throttled >= 0 &&
		    json_object_set_new(ev, "throttled", json_boolean(throttled))) {
			json_decref(ev);
			ev = NULL;
		}
		if (runner_emit(ev)) {
			json_decref(bg);
			return -1;
		}
		continue;
nomem:
		json_decref(times);
		json_decref(round);
		json_decref(pos);
		json_decref(with);
		json_decref(bg);
		return -1;
	}
	return bg ? runner_emit(bg) : 0;
}

/* ---- the correctness phase ------------------------------------------------ */

/* Fresh buffers for set set_index with inputs (seed, dist, stream).  0, or -1 (b freed). */
static int gen_input_set(struct runner_bufs *b, const struct atb_runner_job *job,
			 size_t set_index, uint64_t seed, int dist, unsigned stream,
			 struct runner_done *d)
{
	const struct atb_runner_set *set = &job->sets[set_index];
	int64_t t0 = atbi_monotonic_ns();
	int rc = -1;

	if (!runner_bufs_alloc(b, job, set) &&
	    !runner_gen_inputs(b, job, set, seed, set_index, dist, stream))
		rc = 0;
	else
		runner_bufs_free(b);
	d->parts_ns[RUNNER_PART_GEN] += atbi_monotonic_ns() - t0;
	return rc;
}

/* Time spent since *t0 goes to part p of d; *t0 moves to now. */
static void part_done(struct runner_done *d, enum runner_part p, int64_t *t0)
{
	int64_t now = atbi_monotonic_ns();

	d->parts_ns[p] += now - *t0;
	*t0 = now;
}

/* One input set of one (seed, parameter set): what every checked arm shares. */
struct check_set {
	const struct atb_runner_job *job;
	const struct runner_check_ops *ops;
	void *ctx;
	uint64_t seed;
	size_t si;
	int dist;
	struct runner_bufs in_a, ref_a;
	struct runner_bufs in_b, ref_b;   /* made when a reuse check needs them */
};

/*
 * The result-reuse step's other inputs (RUNNER_STREAM_REUSE) and the
 * reference's outputs for them, made once per input set, when an arm needs
 * them.
 */
static int reuse_inputs(struct check_set *c, struct runner_done *d)
{
	int64_t t0;
	int rc;

	if (c->in_b.n)
		return 0;
	if (gen_input_set(&c->in_b, c->job, c->si, c->seed, c->dist, RUNNER_STREAM_REUSE, d)) {
		runner_emit_error("nomem", "cannot allocate result-reuse inputs");
		return -1;
	}
	t0 = atbi_monotonic_ns();
	rc = c->ops->reference(c->ctx, &c->job->sets[c->si], &c->in_b, &c->ref_b);
	part_done(d, RUNNER_PART_REFERENCE, &t0);
	return rc;
}

/*
 * Checked arm ai on this input set: one correctness event.  *reuse_on: the
 * input set on which the arm's result reuse was checked for this (seed,
 * set), NULL until then (PROTO: gates result_reuse: once per seed and
 * parameter set, on the first input set whose outputs were right).
 */
static int check_arm(struct check_set *c, size_t ai, const char **reuse_on,
		     struct runner_done *d)
{
	const struct atb_runner_job *job = c->job;
	const struct atb_runner_set *set = &job->sets[c->si];
	char before[ATB_RUNNER_MAX_BUFFERS][ATB_SHA256_HEX_LEN + 1];
	char after[ATB_RUNNER_MAX_BUFFERS][ATB_SHA256_HEX_LEN + 1];
	struct runner_facts f = {.seed = c->seed, .arm = job->arms[ai].name, .set_index = c->si,
				 .dist = c->dist, .reuse = {.follows = 1}};
	struct runner_bufs got = {0};
	int64_t t0 = atbi_monotonic_ns();
	int r;

	memset(before, 0, sizeof(before));
	memset(after, 0, sizeof(after));
	/* PROTO: gates input_mutation -- the inputs as given, and as the call left them. */
	if (runner_hash_inputs(job, &c->in_a, before)) {
		runner_emit_error("internal", "sha-256 failed");
		return -1;
	}
	part_done(d, RUNNER_PART_HASH, &t0);
	f.buffers = json_array();
	if (!f.buffers || runner_bufs_alloc(&got, job, set)) {
		json_decref(f.buffers);
		runner_emit_error("nomem", "cannot allocate candidate buffers");
		return -1;
	}
	r = c->ops->arm(c->ctx, ai, set, &c->in_a, &got, &f.kernel_status, &f.aliasing);
	runner_progress();  /* PROTO: gates.hang -- a call that returned */
	part_done(d, RUNNER_PART_ARM, &t0);
	if (!r) {
		runner_hash_inputs(job, &got, after);
		f.mutated = runner_mutated_inputs(job, before, after);
		part_done(d, RUNNER_PART_HASH, &t0);
		f.pass = runner_outputs_match(job, set, &c->ref_a, &got, f.buffers, &f.worst,
					      &f.worst_name) && !f.kernel_status;
		part_done(d, RUNNER_PART_COMPARE, &t0);
	}
	runner_bufs_free(&got);
	if (r)
		goto fail;
	/* Reuse is only a question for outputs that were right the first time,
	 * and asked once per (seed, set): the steps cost three calls. */
	if (f.pass && !*reuse_on) {
		if (reuse_inputs(c, d))
			goto fail;
		t0 = atbi_monotonic_ns();
		if (c->ops->reuse(c->ctx, ai, set, &c->in_a, &c->ref_a, &c->in_b, &c->ref_b,
				  &f.reuse))
			goto fail;
		part_done(d, RUNNER_PART_REUSE, &t0);
		runner_reuse_settle(job, &f, reuse_on);
	}
	f.reuse_checked_on = *reuse_on;
	if (runner_facts_failed(&f))
		d->failures++;
	if (runner_emit(runner_correctness_event(job, &f))) {
		fprintf(stderr, "atb-runner: cannot write a correctness event\n");
		return -1;
	}
	d->nevents++;
	return 0;
fail:
	json_decref(f.buffers);
	json_decref(f.mutated);
	json_decref(f.aliasing);
	json_decref(f.reuse.buffers);
	return -1;
}

/* One input set: the reference once, then every checked arm. */
static int check_input_set(struct check_set *c, const char **reuse_on, struct runner_done *d)
{
	const struct atb_runner_job *job = c->job;
	size_t ai;
	int64_t t0;
	int rc = -1;

	if (gen_input_set(&c->in_a, job, c->si, c->seed, c->dist, RUNNER_STREAM_CHECK, d)) {
		runner_emit_error("nomem", "cannot allocate correctness inputs");
		goto out;
	}
	t0 = atbi_monotonic_ns();
	if (c->ops->reference(c->ctx, &job->sets[c->si], &c->in_a, &c->ref_a))
		goto out;
	part_done(d, RUNNER_PART_REFERENCE, &t0);
	runner_progress();
	for (ai = 0; ai < job->narms; ai++)
		if (runner_arm_is_checked(job, ai) && check_arm(c, ai, &reuse_on[ai], d))
			goto out;
	rc = 0;
out:
	runner_bufs_free(&c->in_a);
	runner_bufs_free(&c->in_b);
	runner_bufs_free(&c->ref_a);
	runner_bufs_free(&c->ref_b);
	return rc;
}

int runner_check_phase(const struct atb_runner_job *job, const struct runner_check_ops *ops,
		       void *ctx, struct runner_done *d)
{
	int inputs[ATB_RUNNER_MAX_DISTS + 1];
	int64_t t0 = atbi_monotonic_ns();
	size_t k, si, x;
	int rc = 0;

	runner_keep_buffers(1);
	for (k = 0; !rc && runner_any_checked(job) && k < job->nseeds; k++) {
		size_t ninputs = runner_seed_inputs(job, k, inputs);

		for (si = 0; si < job->nsets; si++) {
			const char *reuse_on[ATB_RUNNER_MAX_ARMS] = {0};

			for (x = 0; x < ninputs; x++) {
				struct check_set c = {.job = job, .ops = ops, .ctx = ctx,
						      .seed = job->seeds[k], .si = si,
						      .dist = inputs[x]};

				if (!rc && check_input_set(&c, reuse_on, d))
					rc = -1;
			}
		}
	}
	runner_keep_buffers(0);
	d->check_ns = atbi_monotonic_ns() - t0;
	return rc;
}

/* ---- the end of a run ---------------------------------------------------- */

int runner_time_and_done(const struct atb_runner_job *job, struct atb_timer *timer,
			 runner_time_seed_fn time_seed, void *ctx, struct runner_done *d)
{
	const char *timing = "done";
	json_t *ev;
	size_t k;

	if (job->skip_timing)
		timing = "skipped";
	else if (d->failures && !job->time_if_incorrect)
		timing = "skipped_incorrect";
	else
		for (k = 0; k < job->nseeds; k++)
			if (time_seed(ctx, timer, job->seeds[k], &d->escapes))
				return -1;
	ev = json_pack("{s:s, s:i, s:I, s:I}", "event", "done", "seeds", (int)job->nseeds,
		       "correctness_events", (json_int_t)d->nevents,
		       "correctness_failures", (json_int_t)d->failures);
	/* Key order as each backend always wrote it (the harness reads the line). */
	if (ev && d->skipped &&
	    json_object_set_new(ev, "inputs_skipped_undefined", json_integer((json_int_t)*d->skipped)))
		goto nomem;
	if (ev && json_object_set_new(ev, "timing", json_string(timing)))
		goto nomem;
	if (ev && d->ref_direct &&
	    json_object_set_new(ev, "reference_copies_unprotected",
				json_integer((json_int_t)*d->ref_direct)))
		goto nomem;
	if (ev && d->ref_precision && d->ref_precision->factor > 0 &&
	    json_object_set_new(ev, "reference_precision",
				json_pack("{s:f, s:I, s:I, s:f, s:s, s:I, s:s?}", "factor",
					  d->ref_precision->factor, "compared",
					  (json_int_t)d->ref_precision->compared, "differed",
					  (json_int_t)d->ref_precision->differed, "largest_allowance",
					  d->ref_precision->largest, "largest_for",
					  d->ref_precision->largest_of, "unbounded",
					  (json_int_t)d->ref_precision->unbounded, "unavailable",
					  d->ref_precision->unavailable[0]
						  ? d->ref_precision->unavailable : NULL)))
		goto nomem;
	if (ev && d->has_escapes &&
	    json_object_set_new(ev, "side_stream_escapes", json_integer((json_int_t)d->escapes)))
		goto nomem;
	if (ev && (json_object_set_new(ev, "elapsed_ns",
				       json_integer(atbi_monotonic_ns() - d->t0_ns)) ||
		   json_object_set_new(ev, "correctness_ns", json_integer(d->check_ns))))
		goto nomem;
	/* a diagnostic: where the correctness phase's time went (never judged) */
	if (ev && d->parts_ns[RUNNER_PART_GEN] > 0) {
		static const char *const names[RUNNER_NPARTS] = {"gen", "reference", "arm", "hash",
								   "compare", "reuse"};
		json_t *parts = json_object();
		size_t p;

		for (p = 0; parts && p < RUNNER_NPARTS; p++)
			if (json_object_set_new(parts, names[p], json_integer(d->parts_ns[p]))) {
				json_decref(parts);
				parts = NULL;
			}
		if (!parts || json_object_set_new(ev, "correctness_parts_ns", parts))
			goto nomem;
	}
	return runner_emit(ev) ? -1 : 0;
nomem:
	json_decref(ev);
	return -1;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* The median of v[0..n) (the lower middle for even n); -1 for n 0 or no memory. */
static int64_t median_i64(const int64_t *v, size_t n)
{
	int64_t *c, m;

	if (!n || !(c = atb_malloc(n * sizeof(*c))))
		return -1;
	memcpy(c, v, n * sizeof(*c));
	qsort(c, n, sizeof(*c), cmp_i64);
	m = c[(n - 1) / 2];
	atb_free(c);
	return m;
}

int runner_emit_timed_side_stream(const struct atb_timing_seed *s, const char *const *names,
				  size_t ref)
{
	int64_t ref_extra;
	size_t ai;

	if (ref >= s->narms || !s->arms[ref].device_extra_ns)
		return 0;
	ref_extra = median_i64(s->arms[ref].device_extra_ns, s->arms[ref].ntrials);
	for (ai = 0; ai < s->narms; ai++) {
		const struct atb_timing_arm *a = &s->arms[ai];
		int64_t t, x;

		if (ai == ref || !a->device_extra_ns || !a->ntrials)
			continue;
		t = median_i64(a->times_ns, a->ntrials);
		x = median_i64(a->device_extra_ns, a->ntrials);
		if (t < 0 || x < 0 || ref_extra < 0)
			return -1;
		if (runner_emit(json_pack("{s:s, s:s, s:I, s:s, s:s, s:I, s:I, s:I, s:I}", "event",
					  "side_stream", "phase", "timed", "seed",
					  (json_int_t)s->seed, "arm", names[ai], "reference",
					  names[ref], "trials", (json_int_t)a->ntrials, "event_ns",
					  (json_int_t)t, "device_extra_ns", (json_int_t)x,
					  "reference_extra_ns", (json_int_t)ref_extra)))
			return -1;
	}
	return 0;
}

int runner_side_stream(struct atb_cuda *cu, uint64_t seed, const char *arm,
		       int (*call)(void *ctx), void *ctx, struct atb_error *err)
{
	struct atb_cuda_events *e = NULL;
	int64_t event_ns = -1, t0, extra_ns;
	int krc, escaped;

	atb_error_clear(err);
	if (atb_cuda_ctx_sync(cu, err) || atb_cuda_events_new(cu, &e, err) ||
	    atb_cuda_events_record_start(e, err))
		goto fail;
	krc = call(ctx);
	if (atb_cuda_events_record_stop(e, err) || atb_cuda_events_elapsed_ns(e, &event_ns, err))
		goto fail;
	t0 = atbi_monotonic_ns();
	if (atb_cuda_ctx_sync(cu, err))
		goto fail;
	extra_ns = atbi_monotonic_ns() - t0;
	atb_cuda_events_free(e);
	/* A bare cuCtxSynchronize on an idle device takes a few microseconds. */
	escaped = extra_ns > 50000 && (double)extra_ns > 0.1 * (double)event_ns;
	return runner_emit(json_pack("{s:s, s:I, s:s, s:i, s:I, s:I, s:b}", "event", "side_stream",
				     "seed", (json_int_t)seed, "arm", arm,
				     "kernel_status", krc, "event_ns", (json_int_t)event_ns,
				     "device_extra_ns", (json_int_t)extra_ns, "escaped", escaped))
		       ? -1 : escaped;
fail:
	atb_cuda_events_free(e);
	if (!err->msg[0])
		snprintf(err->msg, sizeof(err->msg), "side-stream check failed");
	return -1;
}
