/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Measuring the box's memory bandwidth and fp32 peak for the physical-floor
 * gate (PROTO: gates.physical_floor).  Both must be upper bounds on what a
 * candidate can reach, or the gate would refuse honest kernels: so every
 * core runs, the FMA loop is compiled for the widest ISA the CPU has (GCC's
 * target_clones resolves it at load time), and the best repetition counts.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "atb/alloc.h"
#include "atb/floor.h"
#include "util.h"
#include "banned.h"

/*
 * One FMA loop per ISA, each with as many independent accumulator chains as
 * its register file holds without spilling (latency x ports in flight):
 * AVX-512 12 x 16 lanes in zmm, AVX2+FMA 10 x 8 lanes in ymm, baseline
 * 8 x 4 lanes in xmm.  Without -ffast-math the compiler may not fold the
 * chain; fp-contract=fast makes a*x+b one FMA, as the protocol's build
 * flags (GNU C) do for candidates.
 */
#define DEFINE_FMA_LOOP(fname, tgt, vbytes, chains)                            \
	typedef float fname##_v __attribute__((vector_size(vbytes)));             \
	__attribute__((target(tgt), noinline, optimize("fp-contract=fast")))   \
	static double fname(long iters, float seed)                               \
	{                                                                         \
		enum { LANES = vbytes / 4 };                                      \
		fname##_v acc[chains], a, b;                                      \
		double s = 0;                                                     \
		long i;                                                           \
		int c, l;                                                         \
		for (c = 0; c < chains; c++)                                      \
			for (l = 0; l < LANES; l++)                               \
				acc[c][l] = seed + (float)(c * LANES + l) * 1e-3f; \
		for (l = 0; l < LANES; l++) {                                     \
			a[l] = 0.999999f;                                         \
			b[l] = 1e-7f;                                             \
		}                                                                 \
		for (i = 0; i < iters; i++)                                       \
			_Pragma("GCC unroll 16")                                  \
			for (c = 0; c < chains; c++)                              \
				acc[c] = acc[c] * a + b;                          \
		for (c = 0; c < chains; c++)                                      \
			for (l = 0; l < LANES; l++)                               \
				s += acc[c][l];                                   \
		return s;                                                         \
	}

DEFINE_FMA_LOOP(fma_avx512, "avx512f", 64, 12)
DEFINE_FMA_LOOP(fma_avx2, "avx2,fma", 32, 10)
DEFINE_FMA_LOOP(fma_base, "default", 16, 8)

/* Flops of one fma_loop iteration for the ISA in use. */
static double flops_per_iter(const char *isa)
{
	if (!strcmp(isa, "avx512f"))
		return 2.0 * 16 * 12;
	if (!strcmp(isa, "avx2"))
		return 2.0 * 8 * 10;
	return 2.0 * 4 * 8;
}

static double fma_loop(const char *isa, long iters, float seed)
{
	if (!strcmp(isa, "avx512f"))
		return fma_avx512(iters, seed);
	if (!strcmp(isa, "avx2"))
		return fma_avx2(iters, seed);
	return fma_base(iters, seed);
}

static const char *detect_isa(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f"))
		return "avx512f";
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return "avx2";
	return "baseline";
}

struct worker {
	pthread_t th;
	int kind;          /* 0: fma, 1: copy, 2: read */
	long iters;
	unsigned char *src, *dst;
	size_t bytes;
	pthread_barrier_t *start;
	const char *isa;
	volatile double sink;
	double sum;
	double rate;       /* the fastest piece of its share: flop/s or byte/s */
};

/*
 * A worker times its share in pieces and keeps the fastest piece's rate:
 * on a busy box the scheduler takes the core away for milliseconds at a
 * time, and a whole 128 MiB pass (tens of ms) almost always contains such
 * a gap, so its rate reads the load, not the memory.  A piece short enough
 * to fit between two preemptions (about 1 ms) reads the hardware.  Pieces
 * walk fresh addresses, so no piece finds its data in a cache; a piece
 * stays large (CHUNK) so the timer's cost and the prefetchers' ramp are
 * noise.
 */
#define CHUNK_MIB 8
#define CHUNK ((size_t)CHUNK_MIB << 20)
#define FMA_PIECES 16

/* A piece of amount (flops or bytes) began at t0: keep its rate if faster. */
static void keep_piece(struct worker *w, double amount, int64_t t0)
{
	int64_t ns = atbi_monotonic_ns() - t0;
	double r = ns > 0 ? amount / ((double)ns * 1e-9) : 0;

	if (r > w->rate)
		w->rate = r;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	size_t i, off, len;
	double s = 0;
	int64_t t0;
	int k;

	pthread_barrier_wait(w->start);
	w->rate = 0;
	switch (w->kind) {
	case 0:
		for (k = 0; k < FMA_PIECES; k++) {
			t0 = atbi_monotonic_ns();
			w->sink += fma_loop(w->isa, w->iters / FMA_PIECES, (float)(w->bytes + (size_t)k));
			keep_piece(w, flops_per_iter(w->isa) * (double)(w->iters / FMA_PIECES), t0);
		}
		break;
	case 1:
		/* a short last piece is timed but not kept (unless it is the only one) */
		for (off = 0; off < w->bytes; off += len) {
			len = w->bytes - off < CHUNK ? w->bytes - off : CHUNK;
			t0 = atbi_monotonic_ns();
			memcpy(w->dst + off, w->src + off, len);
			/* a copy moves each byte twice: read and write */
			if (len == CHUNK || off == 0)
				keep_piece(w, 2.0 * (double)len, t0);
		}
		break;
	default:
		for (off = 0; off < w->bytes; off += len) {
			len = w->bytes - off < CHUNK ? w->bytes - off : CHUNK;
			t0 = atbi_monotonic_ns();
			for (i = 0; i < len / sizeof(uint64_t); i += 8) {
				const uint64_t *p = (const uint64_t *)(w->src + off) + i;

				s += (double)(p[0] ^ p[1] ^ p[2] ^ p[3] ^ p[4] ^ p[5] ^ p[6] ^ p[7]);
			}
			if (len == CHUNK || off == 0)
				keep_piece(w, (double)len, t0);
		}
		w->sum = s;
		break;
	}
	return NULL;
}

/* Run nthreads workers of one kind at once (each keeps its own rate). */
static enum atb_status run_workers(struct worker *ws, int nthreads,
				   struct atb_error *err)
{
	pthread_barrier_t start;
	int i, started = 0;

	if (pthread_barrier_init(&start, NULL, (unsigned)nthreads + 1))
		return atb_error_set(err, ATB_ERR_SYSTEM, "cannot create a thread barrier");
	for (i = 0; i < nthreads; i++) {
		ws[i].start = &start;
		if (pthread_create(&ws[i].th, NULL, work, &ws[i]))
			break;
		started++;
	}
	if (started < nthreads) {
		/* Release the ones waiting; the barrier cannot complete otherwise. */
		pthread_barrier_destroy(&start);
		return atb_error_set(err, ATB_ERR_SYSTEM, "cannot start measurement threads");
	}
	pthread_barrier_wait(&start);
	for (i = 0; i < nthreads; i++)
		pthread_join(ws[i].th, NULL);
	pthread_barrier_destroy(&start);
	return ATB_OK;
}

/* Keep the higher of *best and r. */
static void keep_best(double *best, double r)
{
	if (r > *best)
		*best = r;
}

/*
 * How long a measurement repeats.  At least min_reps repetitions; then it
 * stops when two repetitions in a row raised no rate by more than 1 %, or
 * after budget_ns, or at max_reps.  On a loaded box (2 shared cores, other
 * builds running) every repetition is slowed by whatever ran beside it:
 * more of them, kept going while they still find a faster one, give the
 * quiet moment that bounds what a candidate can reach.
 */
struct reps {
	int min_reps, max_reps;
	int64_t budget_ns;
	const char *what;    /* "measured" or "re-measured" */
};

static const struct reps first_reps = {5, 20, 1500000000, "measured"};
static const struct reps again_reps = {10, 40, 4000000000, "re-measured"};

/* Did any per-worker best rate in new_ exceed old by more than 1 %? */
static int improved(const double *old, const double *new_, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (new_[i] > old[i] * 1.01)
			return 1;
	return 0;
}

static enum atb_status measure_cpu(uint64_t work_bytes, const struct reps *rp,
				   struct atb_floor_caps *out, struct atb_error *err)
{
	enum atb_status st = ATB_OK;
	struct worker *ws = NULL;
	unsigned char *src = NULL, *dst = NULL;
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	int nthreads = n > 0 ? (int)n : 1, i, rep;
	size_t per;
	double *best = NULL;  /* per worker: best fma, copy and read rates */
	double *prev = NULL;  /* best before this repetition */
	double peak = 0, copy_bw = 0, read_bw = 0;
	int64_t t_start = atbi_monotonic_ns();
	int flat = 0;
	const long fma_iters = 4000000;
	const char *isa = detect_isa();

	memset(out, 0, sizeof(*out));
	if (!work_bytes)
		work_bytes = 256ull << 20;
	per = (size_t)(work_bytes / (uint64_t)nthreads) & ~(size_t)63;
	ws = atb_calloc((size_t)nthreads, sizeof(*ws));
	best = atb_calloc((size_t)nthreads * 3, sizeof(*best));
	prev = atb_calloc((size_t)nthreads * 3, sizeof(*prev));
	src = atb_malloc(per * (size_t)nthreads);
	dst = atb_malloc(per * (size_t)nthreads);
	if (!ws || !best || !prev || !src || !dst) {
		st = atb_error_set(err, ATB_ERR_NOMEM,
				   "cannot allocate %llu bytes to measure memory bandwidth",
				   (unsigned long long)work_bytes * 2);
		goto out;
	}
	/* Touch every page first so page faults stay out of the timing. */
	memset(src, 1, per * (size_t)nthreads);
	memset(dst, 2, per * (size_t)nthreads);

	for (rep = 0; rep < rp->max_reps; rep++) {
		if (rep >= rp->min_reps &&
		    (flat >= 2 || atbi_monotonic_ns() - t_start > rp->budget_ns))
			break;
		memcpy(prev, best, (size_t)nthreads * 3 * sizeof(*best));
		for (i = 0; i < nthreads; i++) {
			ws[i].kind = 0;
			ws[i].isa = isa;
			ws[i].iters = fma_iters;
			ws[i].bytes = (size_t)rep;
		}
		if ((st = run_workers(ws, nthreads, err)))
			goto out;
		for (i = 0; i < nthreads; i++)
			keep_best(&best[3 * i], ws[i].rate);
		for (i = 0; i < nthreads; i++) {
			ws[i].kind = 1;
			ws[i].src = src + per * (size_t)i;
			ws[i].dst = dst + per * (size_t)i;
			ws[i].bytes = per;
		}
		if ((st = run_workers(ws, nthreads, err)))
			goto out;
		for (i = 0; i < nthreads; i++)
			keep_best(&best[3 * i + 1], ws[i].rate);
		for (i = 0; i < nthreads; i++)
			ws[i].kind = 2;
		if ((st = run_workers(ws, nthreads, err)))
			goto out;
		for (i = 0; i < nthreads; i++)
			keep_best(&best[3 * i + 2], ws[i].rate);
		flat = improved(prev, best, nthreads * 3) ? 0 : flat + 1;
	}
	out->threads = nthreads;
	snprintf(out->isa, sizeof(out->isa), "%s", isa);
	/*
	 * Each worker's best rate, summed: on a busy box another process slows
	 * some repetitions of some workers, and an overestimate only lowers the
	 * floor (never refuses an honest kernel), so the best of each counts.
	 * A copy moves each byte twice (read + write); a read moves it once.
	 */
	for (i = 0; i < nthreads; i++) {
		peak += best[3 * i];
		copy_bw += best[3 * i + 1];
		read_bw += best[3 * i + 2];
	}
	out->peak_flops_per_s = peak;
	out->mem_bw_bytes_per_s = copy_bw > read_bw ? copy_bw : read_bw;
	snprintf(out->method, sizeof(out->method),
		 "%s: best piece of %d passes per thread, summed: %d threads; fp32 fma %s; "
		 "memcpy and read over %llu MiB in %d MiB pieces", rp->what, rep, nthreads, out->isa,
		 (unsigned long long)(work_bytes >> 20), CHUNK_MIB);
out:
	atb_free(prev);
	atb_free(best);
	atb_free(ws);
	atb_free(src);
	atb_free(dst);
	return st;
}

enum atb_status atb_floor_measure_cpu(uint64_t work_bytes, struct atb_floor_caps *out,
				      struct atb_error *err)
{
	return measure_cpu(work_bytes, &first_reps, out, err);
}

void atb_floor_caps_merge(struct atb_floor_caps *caps, const struct atb_floor_caps *again)
{
	int raised = 0;

	if (again->mem_bw_bytes_per_s > caps->mem_bw_bytes_per_s) {
		caps->mem_bw_bytes_per_s = again->mem_bw_bytes_per_s;
		raised = 1;
	}
	if (again->peak_flops_per_s > caps->peak_flops_per_s) {
		caps->peak_flops_per_s = again->peak_flops_per_s;
		raised = 1;
	}
	if (again->threads > caps->threads)
		caps->threads = again->threads;
	if (!caps->isa[0])
		snprintf(caps->isa, sizeof(caps->isa), "%s", again->isa);
	if (raised)
		snprintf(caps->method, sizeof(caps->method), "%s", again->method);
}

enum atb_status atb_floor_remeasure_cpu(uint64_t work_bytes, struct atb_floor_caps *caps,
					struct atb_error *err)
{
	struct atb_floor_caps again;
	enum atb_status st = measure_cpu(work_bytes, &again_reps, &again, err);

	if (!st)
		atb_floor_caps_merge(caps, &again);
	return st;
}

double atb_floor_ns(const struct atb_floor_caps *caps, int64_t bytes, int64_t flops)
{
	double tb = 0, tf = 0;

	if (!caps)
		return 0;
	if (bytes > 0 && caps->mem_bw_bytes_per_s > 0)
		tb = (double)bytes / caps->mem_bw_bytes_per_s * 1e9;
	if (flops > 0 && caps->peak_flops_per_s > 0)
		tf = (double)flops / caps->peak_flops_per_s * 1e9;
	return tb > tf ? tb : tf;
}

/* ---- the caches an output may be written into ---- */

/* The first line of root/rel, without its newline; "" when unreadable. */
static void read_line(const char *path, char *buf, size_t size)
{
	FILE *f = fopen(path, "r");

	buf[0] = '\0';
	if (!f)
		return;
	if (!fgets(buf, (int)size, f))
		buf[0] = '\0';
	fclose(f);
	buf[strcspn(buf, "\n")] = '\0';
}

/* "32768K", "2M", "1024": bytes; 0 when it does not parse. */
static uint64_t size_bytes(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (end == s)
		return 0;
	if (*end == 'K')
		return v << 10;
	if (*end == 'M')
		return v << 20;
	if (*end == 'G')
		return v << 30;
	return *end ? 0 : v;
}

uint64_t atb_floor_cpu_cache_bytes(const char *sysfs_root)
{
	/* one entry per cache instance: its level, type and the cpus sharing it */
	struct seen {
		char key[160];
	} *seen = NULL;
	size_t nseen = 0, capseen = 0, i;
	uint64_t total = 0;
	char dir[512];
	DIR *d;
	struct dirent *e;

	snprintf(dir, sizeof(dir), "%s/devices/system/cpu", sysfs_root ? sysfs_root : "/sys");
	d = opendir(dir);
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		int idx;

		if (strncmp(e->d_name, "cpu", 3) || e->d_name[3] < '0' || e->d_name[3] > '9')
			continue;
		for (idx = 0; idx < 16; idx++) {
			char path[1024], level[16], type[32], size[32], shared[128], key[160];
			int found = 0;

			snprintf(path, sizeof(path), "%s/%s/cache/index%d/size", dir, e->d_name, idx);
			read_line(path, size, sizeof(size));
			if (!size[0])
				break;
			snprintf(path, sizeof(path), "%s/%s/cache/index%d/type", dir, e->d_name, idx);
			read_line(path, type, sizeof(type));
			if (!strcmp(type, "Instruction"))
				continue;
			snprintf(path, sizeof(path), "%s/%s/cache/index%d/level", dir, e->d_name, idx);
			read_line(path, level, sizeof(level));
			snprintf(path, sizeof(path), "%s/%s/cache/index%d/shared_cpu_list", dir,
				 e->d_name, idx);
			read_line(path, shared, sizeof(shared));
			/* a cache without a sharing list is the cpu's own */
			snprintf(key, sizeof(key), "%.8s/%.16s/%.120s", level, type,
				 shared[0] ? shared : e->d_name);
			for (i = 0; i < nseen && !found; i++)
				found = !strcmp(seen[i].key, key);
			if (found)
				continue;
			if (nseen == capseen) {
				size_t cap = capseen ? 2 * capseen : 64;
				struct seen *n = atb_realloc(seen, cap * sizeof(*seen));

				if (!n) {
					total = 0;   /* unknown rather than too small */
					goto out;
				}
				seen = n;
				capseen = cap;
			}
			snprintf(seen[nseen++].key, sizeof(seen[0].key), "%s", key);
			total += size_bytes(size);
		}
	}
out:
	closedir(d);
	atb_free(seen);
	return total;
}
