/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Cost of the runner's output comparison (runner_compare, runner/check.c,
 * PROTO: correctness.tolerances) per dtype over N elements (default 2^26),
 * in three cases: "copy" (got is ref, bit for bit: a candidate that runs
 * the reference's kernel), "pass" (every element within tolerance: an
 * honest candidate, most elements a few ulps off, the rest equal) and
 * "1% bad".
 * Each is timed as the best of 5 against a reference measured in the same
 * run: a plain loop that reads both arrays and sums |got - ref| (the
 * memory-bound floor of the same data; for fp16 and bf16 on the bit
 * patterns, so it converts nothing).  Prints ns per element and the ratio
 * to the reference of the old rule (the oracle of tests/unit/u-compare.c,
 * one element at a time with a dtype switch) and of runner_compare, and
 * whether the two found the same (they must).  Not a test: the figures
 * depend on the box and its load.
 *
 *   bench-compare [-n ELEMENTS] [-d fp32|fp64|fp16|bf16|int32|int64]
 */
#define _GNU_SOURCE  /* runner/watch.c: the CPU-time clocks */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atb/alloc.h"
#include "atb/runner.h"
#include "../tests/unit/runner-check-alone.h"
#include "../tests/unit/compare-oracle.h"
#include "util.h"
#include "banned.h"

#define REPS 5

static double sink;

/* The floor: read both arrays, sum |got - ref| in the element type (four
 * partial sums, so the adds' latency does not hide the memory's speed). */
static void floor_loop(const void *ref, const void *got, enum atb_dtype d, size_t n)
{
	double s[4] = {0, 0, 0, 0};
	size_t k;

#define FLOOR(T, ABS)                                                               \
	for (k = 0; k < n; k++) {                                                   \
		T a = ((const T *)ref)[k], b = ((const T *)got)[k];                 \
		s[k & 3] += ABS;                                                    \
	}
	switch (d) {
	case ATB_DTYPE_FP16:
	case ATB_DTYPE_BF16:
		FLOOR(uint16_t, (double)abs((int)a - (int)b))
		break;
	case ATB_DTYPE_FP32:
		FLOOR(float, fabs((double)b - (double)a))
		break;
	case ATB_DTYPE_FP64:
		FLOOR(double, fabs(b - a))
		break;
	case ATB_DTYPE_INT32:
		FLOOR(int32_t, fabs((double)b - (double)a))
		break;
	case ATB_DTYPE_INT64:
		FLOOR(int64_t, (double)(a > b ? (uint64_t)a - (uint64_t)b : (uint64_t)b - (uint64_t)a))
		break;
	}
#undef FLOOR
	sink += s[0] + s[1] + s[2] + s[3];
}

enum which { FLOOR_LOOP, OLD_RULE, NEW_RULE };

static double best_ns(enum which w, const void *ref, const void *got, enum atb_dtype d,
		      size_t n, double atol, double rtol, struct runner_cmp *c)
{
	double best = INFINITY;
	int r;

	for (r = 0; r < REPS; r++) {
		uint64_t t0 = atbi_monotonic_ns();
		double t;

		if (w == FLOOR_LOOP)
			floor_loop(ref, got, d, n);
		else if (w == OLD_RULE)
			oracle_compare(ref, got, d, n, atol, rtol, NULL, c);
		else
			runner_compare(ref, got, d, n, atol, rtol, c);
		t = (double)(atbi_monotonic_ns() - t0);
		if (t < best)
			best = t;
	}
	return best;
}

static uint64_t rng = 12345;

static uint64_t next(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return rng >> 11;
}

/* An honest candidate's output: values of many scales; a third equal, the
 * rest a few units of the last place off (always within tolerance).  With
 * bad_pct, that share of elements is far off. */
static void fill(void *ref, void *got, enum atb_dtype d, size_t n, unsigned bad_pct)
{
	size_t k;

	for (k = 0; k < n; k++) {
		uint64_t u = next();
		double v = ((double)(u & 0xfffff) / 0x1p20 + 0.5) * ldexp(1, (int)(u >> 20) % 9 - 4);
		int bad = (u >> 30) % 100 < bad_pct;
		unsigned off = (unsigned)(u >> 40) % 3;

		if (u >> 50 & 1)
			v = -v;
		switch (d) {
		case ATB_DTYPE_FP32: {
			float r = (float)v;

			((float *)ref)[k] = r;
			((float *)got)[k] = bad ? r * 2 + 1 : nextafterf(r, off ? 1e30f : 0);
			if (!bad && !off)
				((float *)got)[k] = r;
			break;
		}
		case ATB_DTYPE_FP64:
			((double *)ref)[k] = v;
			((double *)got)[k] = bad ? v * 2 + 1 : v * (1 + 1e-12 * off);
			break;
		case ATB_DTYPE_FP16:
		case ATB_DTYPE_BF16: {
			uint16_t h = d == ATB_DTYPE_FP16 ? atb_fp16_from_float((float)v)
							 : atb_bf16_from_float((float)v);

			((uint16_t *)ref)[k] = h;
			((uint16_t *)got)[k] = bad ? (uint16_t)(h ^ 0x4000u) : (uint16_t)(h ^ (off & 1));
			break;
		}
		case ATB_DTYPE_INT32:
			((int32_t *)ref)[k] = (int32_t)(v * 1000);
			((int32_t *)got)[k] = (int32_t)(v * 1000) + (bad ? 7 : 0);
			break;
		case ATB_DTYPE_INT64:
			((int64_t *)ref)[k] = (int64_t)(v * 1e6);
			((int64_t *)got)[k] = (int64_t)(v * 1e6) + (bad ? 7 : 0);
			break;
		}
	}
}

static int bench_dtype(enum atb_dtype d, size_t n)
{
	static const struct {
		const char *name;
		unsigned bad_pct;
		int copy;
	} cases[] = {{"copy", 0, 1}, {"pass", 0, 0}, {"1% bad", 1, 0}};
	size_t es = atb_dtype_size(d), ci;
	void *ref = atb_malloc(n * es), *got = atb_malloc(n * es);
	/* the protocol's kind of tolerance for the dtype */
	double tol = d == ATB_DTYPE_FP16 || d == ATB_DTYPE_BF16 ? 1e-2
		     : atb_dtype_is_real(d) ? 1e-5 : 0;

	if (!ref || !got) {
		fprintf(stderr, "bench-compare: out of memory for %zu elements\n", n);
		atb_free(ref);
		atb_free(got);
		return 1;
	}
	for (ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		struct runner_cmp old_c, new_c;
		double fl, o, nw;

		fill(ref, got, d, n, cases[ci].bad_pct);
		if (cases[ci].copy)
			memcpy(got, ref, n * es);
		fl = best_ns(FLOOR_LOOP, ref, got, d, n, tol, tol, NULL);
		o = best_ns(OLD_RULE, ref, got, d, n, tol, tol, &old_c);
		nw = best_ns(NEW_RULE, ref, got, d, n, tol, tol, &new_c);
		printf("%-5s %-6s  floor %6.3f ns/el   old %6.3f ns/el (%5.2fx floor)   "
		       "new %6.3f ns/el (%5.2fx floor)   old/new %5.2f   same: %s (nbad %zu)\n",
		       atb_dtype_name(d), cases[ci].name, fl / (double)n, o / (double)n, o / fl,
		       nw / (double)n, nw / fl, o / nw,
		       memcmp(&old_c, &new_c, sizeof(old_c)) ? "NO" : "yes", new_c.nbad);
		fflush(stdout);
	}
	atb_free(ref);
	atb_free(got);
	return 0;
}

int main(int argc, char **argv)
{
	static const enum atb_dtype all[] = {ATB_DTYPE_FP32, ATB_DTYPE_FP64, ATB_DTYPE_FP16,
					     ATB_DTYPE_BF16, ATB_DTYPE_INT32, ATB_DTYPE_INT64};
	size_t n = (size_t)1 << 26, i;
	const char *only = NULL;
	int a;

	for (a = 1; a < argc; a++) {
		char *end;

		if (!strcmp(argv[a], "-n") && a + 1 < argc) {
			n = (size_t)strtoull(argv[++a], &end, 10);
			if (*end || !n) {
				fprintf(stderr, "bench-compare: bad element count '%s'\n", argv[a]);
				return 2;
			}
		} else if (!strcmp(argv[a], "-d") && a + 1 < argc) {
			only = argv[++a];
		} else {
			fprintf(stderr, "usage: bench-compare [-n ELEMENTS] [-d DTYPE]\n");
			return 2;
		}
	}
	printf("bench-compare: %zu elements, best of %d, tolerance 1e-5 (fp16/bf16 1e-2, "
	       "integers 0)\n", n, REPS);
	for (i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if ((!only || !strcmp(only, atb_dtype_name(all[i]))) && bench_dtype(all[i], n))
			return 1;
	return sink == 42.4242 ? 3 : 0;
}
