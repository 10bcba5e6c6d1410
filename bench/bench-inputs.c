/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Cost of drawing one input set (runner_gen_inputs, runner/check.c, PROTO:
 * correctness.input_chunk_elements): a bf16 buffer from a normal
 * distribution (cuda_layernorm's X) and an fp32 buffer from a uniform one,
 * N elements each (default 16384 x 8192, cuda_layernorm's bundled shape),
 * drawn as protocol versions 1 to 7 draw them (one mt19937 stream per
 * buffer: the reference, measured in the same run) and as version 8 does
 * (chunks of 1 Mi elements on the CPUs this process may use).  Prints the
 * best of 3 for each, the ratio, the threads, and whether the first chunk
 * holds the same values both ways (it must).  Then the correctness phase's
 * other host work on that set, each against its one-thread form in the same
 * run: the input digests (one SHA-256 per buffer, against runner_hash_inputs'
 * pieces on threads), one output comparison (runner_compare_bounded against
 * runner_compare_parallel, the U buffer against a copy with one element
 * off), and a buffer's allocation and first touch (fresh, against a block
 * kept by runner_keep_buffers).  Not a test: the figures depend on the box,
 * its cores and its load.
 *
 *   bench-inputs [-n ELEMENTS]
 */
#define _GNU_SOURCE  /* runner/check.c: sched_getaffinity; runner/watch.c: CPU-time clocks */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atb/alloc.h"
#include "atb/runner.h"
#include "../tests/unit/runner-check-alone.h"
#include "util.h"
#include "banned.h"

#define REPS 3

static double since_s(int64_t t0)
{
	return (double)(atbi_monotonic_ns() - t0) / 1e9;
}

static void keep_min(double *best, int64_t t0)
{
	if (since_s(t0) < *best)
		*best = since_s(t0);
}

static void line(const char *what, double ref, double now)
{
	printf("%-32s one thread %8.3f s  now %8.3f s  ratio %.3f (%.1fx faster)\n", what, ref,
	       now, now / ref, ref / now);
}

/*
 * The rest of the correctness phase's host work on b (drawn by ch):
 * digests, a comparison, allocation with first touch.  0, or 1 when the
 * two forms disagree or memory runs out.
 */
static int host_work(const struct atb_runner_job *ch, struct runner_bufs *b, size_t n)
{
	char one[ATB_RUNNER_MAX_BUFFERS][ATB_SHA256_HEX_LEN + 1];
	char par[ATB_RUNNER_MAX_BUFFERS][ATB_SHA256_HEX_LEN + 1];
	double h1 = INFINITY, hp = INFINITY, c1 = INFINITY, cp = INFINITY;
	double a1 = INFINITY, ak = INFINITY;
	struct runner_cmp x, y;
	float *got = atb_malloc(n * sizeof(float));
	size_t i, r;
	int rc = 1;

	if (!got)
		return 1;
	memcpy(got, b->p[1], n * sizeof(float));
	got[n / 2] += 1;
	for (r = 0; r < REPS; r++) {
		int64_t t0 = atbi_monotonic_ns();

		for (i = 0; i < 2; i++)
			if (atbi_sha256_hex(b->p[i], b->bytes[i], one[i]))
				goto out;
		keep_min(&h1, t0);
		t0 = atbi_monotonic_ns();
		if (runner_hash_inputs(ch, b, par))
			goto out;
		keep_min(&hp, t0);
		t0 = atbi_monotonic_ns();
		runner_compare_bounded(b->p[1], got, ATB_DTYPE_FP32, n, 1e-5, 1e-5, NULL, &x);
		keep_min(&c1, t0);
		t0 = atbi_monotonic_ns();
		runner_compare_parallel(b->p[1], got, ATB_DTYPE_FP32, n, 1e-5, 1e-5, NULL, &y);
		keep_min(&cp, t0);
		if (x.nbad != 1 || y.nbad != 1 || x.first_bad != y.first_bad ||
		    x.max_abs != y.max_abs || x.max_rel != y.max_rel) {
			fprintf(stderr, "bench-inputs: the two comparisons disagree\n");
			goto out;
		}
	}
	/* a buffer the size of U, allocated and written whole: fresh each time
	 * (timing's way), then kept between uses (the correctness phase's) */
	for (i = 0; i < 2; i++) {
		runner_keep_buffers((int)i);
		for (r = 0; r < REPS + 1; r++) {
			struct runner_bufs t = {0};
			int64_t t0 = atbi_monotonic_ns();

			if (runner_bufs_alloc(&t, ch, &ch->timing_set))
				goto out;
			memset(t.p[1], 0x3f, t.bytes[1]);
			if (r)  /* the first use of a kept block is a fresh one */
				keep_min(i ? &ak : &a1, t0);
			runner_bufs_free(&t);
		}
	}
	runner_keep_buffers(0);
	line("input digests", h1, hp);
	line("one comparison", c1, cp);
	printf("%-32s fresh      %8.3f s  kept %8.3f s  ratio %.3f\n",
	       "allocation and first touch", a1, ak, ak / a1);
	rc = 0;
out:
	runner_keep_buffers(0);
	atb_free(got);
	return rc;
}

static struct atb_runner_job *job_for(size_t n, int chunked)
{
	struct atb_runner_job *job = NULL;
	struct atb_error err;
	char text[1600];
	int len;

	len = snprintf(text, sizeof(text),
		       "{\"abi\":1,\"arms\":[{\"name\":\"baseline\",\"so\":\"x\"}],\"buffers\":["
		       "{\"name\":\"X\",\"dtype\":\"bf16\",\"role\":\"in\",\"dist\":{\"name\":\"t\","
		       "\"kind\":\"normal\",\"mean\":0.5,\"stddev\":2}},"
		       "{\"name\":\"U\",\"dtype\":\"fp32\",\"role\":\"in\",\"dist\":{\"name\":\"t\","
		       "\"kind\":\"uniform\",\"low\":-1,\"high\":1}},"
		       "{\"name\":\"Y\",\"dtype\":\"fp32\",\"role\":\"out\"}],"
		       "\"sets\":[{\"name\":\"s\",\"counts\":[%zu,%zu,1]}],"
		       "\"timing_set\":{\"name\":\"t\",\"counts\":[%zu,%zu,1]},\"seeds\":[1],"
		       "\"correctness\":{%s\"tolerances\":{}}}",
		       n, n, n, n, chunked ? "\"input_chunk_elements\":1048576," : "");
	if (len < 0 || (size_t)len >= sizeof(text) ||
	    atb_runner_job_parse(text, (size_t)len, &job, &err)) {
		fprintf(stderr, "bench-inputs: cannot build the job: %s\n", err.msg);
		return NULL;
	}
	return job;
}

/* Best of REPS wall times of one input set's draw, in seconds; -1 on failure. */
static double best_s(const struct atb_runner_job *job, struct runner_bufs *b)
{
	double best = INFINITY;
	int r;

	for (r = 0; r < REPS; r++) {
		int64_t t0 = atbi_monotonic_ns();

		if (runner_gen_inputs(b, job, &job->timing_set, 1, 0, -1, RUNNER_STREAM_TIMING))
			return -1;
		if ((double)(atbi_monotonic_ns() - t0) / 1e9 < best)
			best = (double)(atbi_monotonic_ns() - t0) / 1e9;
	}
	return best;
}

int main(int argc, char **argv)
{
	size_t n = (size_t)16384 * 8192;
	struct atb_runner_job *one, *ch;
	struct runner_bufs a = {0}, b = {0};
	double t_one, t_ch;
	int same, rc = 1;

	if (argc == 3 && !strcmp(argv[1], "-n")) {
		char *end;

		n = (size_t)strtoull(argv[2], &end, 10);
		if (*end || !n) {
			fprintf(stderr, "bench-inputs: bad element count '%s'\n", argv[2]);
			return 2;
		}
	} else if (argc != 1) {
		fprintf(stderr, "usage: bench-inputs [-n ELEMENTS]\n");
		return 2;
	}
	one = job_for(n, 0);
	ch = job_for(n, 1);
	if (!one || !ch || runner_bufs_alloc(&a, one, &one->timing_set) ||
	    runner_bufs_alloc(&b, ch, &ch->timing_set)) {
		fprintf(stderr, "bench-inputs: out of memory\n");
		goto out;
	}
	printf("bench-inputs: %zu bf16 normal + %zu fp32 uniform elements, best of %d, "
	       "%zu threads for chunks of 1048576\n", n, n, REPS, runner_threads((size_t)-1));
	t_one = best_s(one, &a);
	t_ch = best_s(ch, &b);
	if (t_one < 0 || t_ch < 0) {
		fprintf(stderr, "bench-inputs: a draw failed\n");
		goto out;
	}
	same = !memcmp(a.p[0], b.p[0], (n < 1048576 ? n : 1048576) * 2) &&
	       !memcmp(a.p[1], b.p[1], (n < 1048576 ? n : 1048576) * 4);
	printf("one stream per buffer (versions 1-7, the reference)  %8.3f s\n", t_one);
	printf("chunks on threads (version 8)                        %8.3f s  ratio %.3f "
	       "(%.1fx faster)\n", t_ch, t_ch / t_one, t_one / t_ch);
	printf("first chunk identical both ways: %s\n", same ? "yes" : "NO");
	rc = same ? host_work(ch, &b, n) : 1;
out:
	runner_bufs_free(&a);
	runner_bufs_free(&b);
	atb_runner_job_free(one);
	atb_runner_job_free(ch);
	return rc;
}
