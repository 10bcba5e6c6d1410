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
 * holds the same values both ways (it must).  Not a test: the figures depend
 * on the box, its cores and its load.
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
	       "%zu threads for chunks of 1048576\n", n, n, REPS, gen_threads((size_t)-1));
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
	rc = same ? 0 : 1;
out:
	runner_bufs_free(&a);
	runner_bufs_free(&b);
	atb_runner_job_free(one);
	atb_runner_job_free(ch);
	return rc;
}
