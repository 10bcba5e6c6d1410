/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Unit tests of the runner's output comparison (runner/check.c,
 * runner_compare / runner_compare_bounded: PROTO: correctness.tolerances,
 * correctness.reduction_tolerance) against the oracle in compare-oracle.h,
 * a plain copy of the rule as it was before it was made fast.  Every
 * result field must be bit-identical (max_abs, max_rel, bad_ref, bad_got by
 * memcmp; first_bad, nbad, nnan by ==) on every dtype, random data with
 * planted differences, each special value against each other one (NaN in
 * ref only, got only, both; +-Inf equal and unequal; -0.0 and 0.0; zero
 * against non-zero; subnormals; the largest finite numbers), int64 beyond
 * 2^53, with and without the extra allowance, at sizes 0, 1, odd and not a
 * multiple of any vector or block width.  The comparison is the project's
 * trust boundary: a faster rule that differs anywhere is a bug.
 */
#define _GNU_SOURCE  /* runner/check.c, included below, counts the CPUs it may use */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "atb/alloc.h"
#include "atb/cuda.h"
#include "atb/cuda_compare.h"
#include "atb/runner.h"
#include "runner-check-alone.h"
#include "compare-oracle.h"
#include "banned.h"

static const enum atb_dtype dtypes[] = {ATB_DTYPE_FP32, ATB_DTYPE_FP64, ATB_DTYPE_FP16,
					ATB_DTYPE_BF16, ATB_DTYPE_INT32, ATB_DTYPE_INT64};
#define NDTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

/* Tolerance pairs: the protocol's kind, none, loose, and the odd ones a
 * protocol could hold (infinite, negative) where the rule must not move. */
static const double tols[][2] = {
	{1e-5, 1e-5}, {0, 0}, {1e-2, 1e-2}, {0, 1e-3}, {1e-3, 0}, {INFINITY, 0},
	{0, INFINITY}, {-1, 0}, {1e-8, 1e-2},
};
#define NTOLS (sizeof(tols) / sizeof(tols[0]))

static const size_t sizes[] = {0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 127,
			       129, 255, 256, 257, 511, 1023, 1025, 4099};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static double unif(void)
{
	return (double)(rnd() >> 11) * 0x1p-53;
}

/* Store the double v as element k of p in dtype d (rounded as the dtype does). */
static void put(void *p, enum atb_dtype d, size_t k, double v)
{
	switch (d) {
	case ATB_DTYPE_FP32:
		((float *)p)[k] = (float)v;
		break;
	case ATB_DTYPE_FP64:
		((double *)p)[k] = v;
		break;
	case ATB_DTYPE_FP16:
		((uint16_t *)p)[k] = atb_fp16_from_float((float)v);
		break;
	case ATB_DTYPE_BF16:
		((uint16_t *)p)[k] = atb_bf16_from_float((float)v);
		break;
	case ATB_DTYPE_INT32:
		((int32_t *)p)[k] = (int32_t)fmax(fmin(v, 2147483647.0), -2147483648.0);
		break;
	case ATB_DTYPE_INT64:
		((int64_t *)p)[k] = (int64_t)fmax(fmin(v, 9.2e18), -9.2e18);
		break;
	}
}

/* Store the raw bit pattern (or integer) raw as element k of p. */
static void put_raw(void *p, enum atb_dtype d, size_t k, uint64_t raw)
{
	switch (atb_dtype_size(d)) {
	case 2:
		((uint16_t *)p)[k] = (uint16_t)raw;
		break;
	case 4:
		((uint32_t *)p)[k] = (uint32_t)raw;
		break;
	default:
		((uint64_t *)p)[k] = raw;
		break;
	}
}

/* Special values of each dtype, as raw patterns: zeros, ones and their
 * neighbours, subnormals, the largest finite, infinities, quiet and
 * signalling NaNs of both signs. */
static size_t specials(enum atb_dtype d, const uint64_t **out)
{
	static const uint64_t f32[] = {
		0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x3f800001, 0x00000001,
		0x80000001, 0x00800000, 0x007fffff, 0x7f7fffff, 0xff7fffff, 0x7f800000,
		0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001, 0x40490fdb, 0x3a83126f,
	};
	static const uint64_t f64[] = {
		0x0000000000000000ull, 0x8000000000000000ull, 0x3ff0000000000000ull,
		0xbff0000000000000ull, 0x3ff0000000000001ull, 0x0000000000000001ull,
		0x8000000000000001ull, 0x0010000000000000ull, 0x000fffffffffffffull,
		0x7fefffffffffffffull, 0xffefffffffffffffull, 0x7ff0000000000000ull,
		0xfff0000000000000ull, 0x7ff8000000000000ull, 0xfff8000000000000ull,
		0x7ff0000000000001ull, 0x400921fb54442d18ull, 0x3f50624dd2f1a9fcull,
	};
	static const uint64_t f16[] = {
		0x0000, 0x8000, 0x3c00, 0xbc00, 0x3c01, 0x0001, 0x8001, 0x0400, 0x03ff,
		0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0x4248, 0x1419,
	};
	static const uint64_t b16[] = {
		0x0000, 0x8000, 0x3f80, 0xbf80, 0x3f81, 0x0001, 0x8001, 0x0080, 0x007f,
		0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0x4049, 0x3a83,
	};
	static const uint64_t i32[] = {
		0, 1, 0xffffffffu, 2, 0x7fffffffu, 0x80000000u, 0x7ffffffeu, 1000, 0xfffffc18u,
	};
	static const uint64_t i64[] = {
		0, 1, 0xffffffffffffffffull, 1ull << 53, (1ull << 53) + 1, (1ull << 53) - 1,
		(1ull << 60) + 1, 1ull << 60, 0x7fffffffffffffffull, 0x7ffffffffffffffeull,
		0x8000000000000000ull, 0x8000000000000001ull, 1000,
	};

	static const struct {
		const uint64_t *v;
		size_t n;
	} tab[] = {
		[ATB_DTYPE_FP32] = {f32, sizeof(f32) / sizeof(f32[0])},
		[ATB_DTYPE_FP64] = {f64, sizeof(f64) / sizeof(f64[0])},
		[ATB_DTYPE_FP16] = {f16, sizeof(f16) / sizeof(f16[0])},
		[ATB_DTYPE_BF16] = {b16, sizeof(b16) / sizeof(b16[0])},
		[ATB_DTYPE_INT32] = {i32, sizeof(i32) / sizeof(i32[0])},
		[ATB_DTYPE_INT64] = {i64, sizeof(i64) / sizeof(i64[0])},
	};

	*out = tab[d].v;
	return tab[d].n;
}

/* A NaN of dtype d (for integers: an ordinary value). */
static uint64_t specials_nan(enum atb_dtype d)
{
	const uint64_t *sp;
	size_t ns = specials(d, &sp);

	return atb_dtype_is_real(d) ? sp[13] : sp[ns - 1];
}

/* A value of a random scale and sign, as a test's outputs have. */
static double draw(enum atb_dtype d)
{
	double v = (1 + unif()) * ldexp(1, (int)(rnd() % 21) - 10);

	if (d == ATB_DTYPE_INT64 && rnd() % 4 == 0)
		v = (double)(rnd() >> 2);     /* beyond 2^53 */
	else if (d == ATB_DTYPE_INT32 || d == ATB_DTYPE_INT64)
		v = floor(v * 1000);
	return rnd() & 1 ? -v : v;
}

/*
 * ref and got of n elements of dtype d: got is ref, or ref moved by up to
 * about twice the tolerance either way (some pass, some fail), or off by
 * much; a share plant_pct% of the pairs are replaced by special values.
 */
static void fill(void *ref, void *got, enum atb_dtype d, size_t n, unsigned plant_pct)
{
	const uint64_t *sp;
	size_t ns = specials(d, &sp), k;

	for (k = 0; k < n; k++) {
		double r = draw(d), g;
		unsigned how = (unsigned)(rnd() % 8);

		put(ref, d, k, r);
		r = oracle_elem(ref, d, k);
		if (how < 3)
			g = r;
		else if (how < 6)
			g = r + (unif() - 0.5) * 4e-5 * (1 + fabs(r));
		else if (how < 7)
			g = r * (1 + (unif() - 0.5) * 4e-2);
		else
			g = r + (unif() - 0.5) * 2 * (1 + fabs(r));
		if (d == ATB_DTYPE_INT64 && how == 3) {
			((int64_t *)got)[k] = ((int64_t *)ref)[k] + (rnd() & 1 ? 1 : -1);
		} else {
			put(got, d, k, g);
		}
		if (rnd() % 100 < plant_pct) {
			put_raw(ref, d, k, sp[rnd() % ns]);
			if (rnd() & 1)
				put_raw(got, d, k, sp[rnd() % ns]);
		}
	}
}

/* The extra allowance of a reduction: mostly small and finite, at times
 * zero, large, infinite or NaN (a NaN input makes a NaN bound). */
static void fill_extra(double *e, size_t n)
{
	size_t k;

	for (k = 0; k < n; k++) {
		unsigned how = (unsigned)(rnd() % 64);

		e[k] = how == 0 ? INFINITY : how == 1 ? NAN : how == 2 ? 0 : how == 3 ? 1e300 :
		       unif() * 1e-3;
	}
}

static int same_double(double a, double b)
{
	return !memcmp(&a, &b, sizeof(a));
}

static void expect_same(const void *ref, const void *got, enum atb_dtype d, size_t n,
			double atol, double rtol, const double *extra, const char *what)
{
	struct runner_cmp want, have;

	oracle_compare(ref, got, d, n, atol, rtol, extra, &want);
	runner_compare_bounded(ref, got, d, n, atol, rtol, extra, &have);
	cr_assert(same_double(want.max_abs, have.max_abs) &&
		  same_double(want.max_rel, have.max_rel) &&
		  want.first_bad == have.first_bad && same_double(want.bad_ref, have.bad_ref) &&
		  same_double(want.bad_got, have.bad_got) && want.nbad == have.nbad &&
		  want.nnan == have.nnan,
		  "%s: %s n=%zu atol=%g rtol=%g extra=%s: want max_abs %a max_rel %a first %lld "
		  "ref %a got %a nbad %zu nnan %zu; have %a %a %lld %a %a %zu %zu",
		  what, atb_dtype_name(d), n, atol, rtol, extra ? "yes" : "no", want.max_abs,
		  want.max_rel, want.first_bad, want.bad_ref, want.bad_got, want.nbad, want.nnan,
		  have.max_abs, have.max_rel, have.first_bad, have.bad_ref, have.bad_got,
		  have.nbad, have.nnan);
	if (!extra)
		return;
	/* runner_compare is runner_compare_bounded without extra */
	runner_compare(ref, got, d, n, atol, rtol, &have);
	oracle_compare(ref, got, d, n, atol, rtol, NULL, &want);
	cr_assert(!memcmp(&want, &have, sizeof(want)), "%s: runner_compare differs", what);
}

/* expect_same under every tolerance pair, without extra and with it. */
static void expect_same_all_tols(const void *ref, const void *got, enum atb_dtype d, size_t n,
				 const double *extra, const char *what)
{
	size_t ti;

	for (ti = 0; ti < NTOLS; ti++) {
		expect_same(ref, got, d, n, tols[ti][0], tols[ti][1], NULL, what);
		expect_same(ref, got, d, n, tols[ti][0], tols[ti][1], extra, what);
	}
}

struct pair {
	void *ref, *got;
	double *extra;
};

static void pair_alloc(struct pair *p, size_t n)
{
	p->ref = atb_calloc(n + 1, 8);
	p->got = atb_calloc(n + 1, 8);
	p->extra = atb_calloc(n + 1, sizeof(double));
	cr_assert(p->ref && p->got && p->extra);
}

static void pair_free(struct pair *p)
{
	atb_free(p->ref);
	atb_free(p->got);
	atb_free(p->extra);
}

/* Every dtype, size, tolerance pair and planted share, with and without extra. */
Test(compare, random_data_with_planted_differences_is_bit_identical)
{
	static const unsigned plants[] = {0, 1, 10, 50};
	struct pair p;
	size_t di, si, pi, rep;

	rng_state = 1;
	pair_alloc(&p, 4099);
	for (di = 0; di < NDTYPES; di++)
		for (si = 0; si < NSIZES; si++)
			for (pi = 0; pi < sizeof(plants) / sizeof(plants[0]); pi++)
				for (rep = 0; rep < 2; rep++) {
					fill(p.ref, p.got, dtypes[di], sizes[si], plants[pi]);
					fill_extra(p.extra, sizes[si]);
					expect_same_all_tols(p.ref, p.got, dtypes[di], sizes[si],
							     p.extra, "random");
				}
	pair_free(&p);
}

/* Each special value against each other one, at positions that land in
 * every lane of a vector and in a tail, among passing neighbours. */
Test(compare, each_special_against_each_special_is_bit_identical)
{
	static const size_t lens[] = {1, 6, 67, 300};
	struct pair p;
	size_t di, li, a, b;

	rng_state = 2;
	pair_alloc(&p, 300);
	for (di = 0; di < NDTYPES; di++) {
		const uint64_t *sp;
		size_t ns = specials(dtypes[di], &sp);

		for (li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
			size_t n = lens[li];

			for (a = 0; a < ns; a++)
				for (b = 0; b < ns; b++) {
					size_t at = (a * ns + b) % n;

					fill(p.ref, p.got, dtypes[di], n, 0);
					memcpy(p.got, p.ref, n * atb_dtype_size(dtypes[di]));
					put_raw(p.ref, dtypes[di], at, sp[a]);
					put_raw(p.got, dtypes[di], at, sp[b]);
					fill_extra(p.extra, n);
					expect_same_all_tols(p.ref, p.got, dtypes[di], n, p.extra,
							     "special");
				}
		}
	}
	pair_free(&p);
}

/*
 * max_rel is a maximum of quotients: many elements whose relative errors
 * tie or differ in the last bit, rising and falling, near zero references
 * (subnormal, where products underflow) and with zero references.
 */
Test(compare, max_rel_ties_and_tiny_references_are_bit_identical)
{
	static const double scales[] = {1, 1e-300, 0x1p-1060, 1e300, 1e-30};
	struct pair p;
	size_t si, k, n = 2053, d;

	rng_state = 3;
	pair_alloc(&p, n);
	for (si = 0; si < sizeof(scales) / sizeof(scales[0]); si++)
		for (d = 0; d < 4; d++) {
			for (k = 0; k < n; k++) {
				double r = scales[si] * (1 + unif()), e = 1e-6;

				if (d == 1)
					e *= 1 + (double)(k % 7) * 0x1p-52;
				else if (d == 2)
					e *= 1 + (double)k * 0x1p-40;
				else if (d == 3)
					e *= 1 + (double)(n - k) * 0x1p-40;
				((double *)p.ref)[k] = r;
				((double *)p.got)[k] = r * (1 + e);
				if (k % 97 == 5)
					((double *)p.ref)[k] = k % 2 ? 0x1p-1074 : 0;
				p.extra[k] = 0;
			}
			expect_same(p.ref, p.got, ATB_DTYPE_FP64, n, 0, 1e-5, NULL, "ties");
			expect_same(p.ref, p.got, ATB_DTYPE_FP64, n, 1e-3, 1e-5, p.extra, "ties");
			for (k = 0; k < n; k++) {
				/* in place: float k lies in double k/2, already read */
				((float *)p.ref)[k] = (float)((double *)p.ref)[k];
				((float *)p.got)[k] = (float)(((float *)p.ref)[k] * (1 + 1e-6 *
								(1 + (double)(k % 5) * 0x1p-23)));
			}
			expect_same(p.ref, p.got, ATB_DTYPE_FP32, n, 0, 1e-5, NULL, "ties");
		}
	pair_free(&p);
}

/* Equal int64 pass exactly; beyond 2^53 an off-by-one passes as doubles
 * (the known limit), below it fails: both as the oracle says. */
Test(compare, int64_beyond_2_53_is_bit_identical)
{
	int64_t ref[9], got[9];
	size_t k;

	for (k = 0; k < 9; k++) {
		ref[k] = ((int64_t)1 << 53) + (int64_t)k * ((int64_t)1 << 58);
		got[k] = ref[k];
	}
	expect_same(ref, got, ATB_DTYPE_INT64, 9, 0, 0, NULL, "int64 equal");
	got[3] += 1;
	got[7] -= 1;
	expect_same(ref, got, ATB_DTYPE_INT64, 9, 0, 0, NULL, "int64 off by one");
	ref[1] = got[1] = 5;
	got[1] = 6;
	expect_same(ref, got, ATB_DTYPE_INT64, 9, 0, 0, NULL, "int64 small off by one");
	expect_same(ref, got, ATB_DTYPE_INT64, 9, 1, 0, NULL, "int64 within atol");
}

/* The oracle is the rule: a few elements worked by hand. */
Test(compare, the_oracle_is_the_rule)
{
	float ref[7] = {1.0f, 100.0f, 0.0f, INFINITY, 5.0f, NAN, -0.0f};
	float got[7] = {1.0005f, 100.9f, 0.002f, INFINITY, NAN, NAN, 0.0f};
	struct runner_cmp c;

	oracle_compare(ref, got, ATB_DTYPE_FP32, 7, 0.001, 0.01, NULL, &c);
	cr_expect_eq(c.nbad, 2);         /* 0.002 off a zero, and the unwritten NaN */
	cr_expect_eq(c.first_bad, 2);
	cr_expect_eq(c.bad_ref, 0.0);
	cr_expect_eq(c.nnan, 1);
	cr_expect(isinf(c.max_rel));
	cr_expect(fabs(c.max_abs - 0.9) < 1e-5);
	got[3] = -INFINITY;
	oracle_compare(ref, got, ATB_DTYPE_FP32, 7, INFINITY, 0, NULL, &c);
	cr_expect_eq(c.nbad, 2);         /* unequal infinities fail at any tolerance */
	cr_expect(isinf(c.max_abs));
	oracle_compare(ref, got, ATB_DTYPE_FP32, 0, 0, 0, NULL, &c);
	cr_expect_eq(c.nbad, 0);
	cr_expect_eq(c.first_bad, -1);
	cr_expect_eq(c.max_abs, 0);
}

/* Larger arrays that take every path of a fast rule: all equal, all within
 * tolerance, one bad element at the very end, every element bad. */
Test(compare, large_arrays_all_pass_one_bad_all_bad_are_bit_identical)
{
	size_t n = 100003, di, k;
	struct pair p;

	rng_state = 4;
	pair_alloc(&p, n);
	for (di = 0; di < NDTYPES; di++) {
		enum atb_dtype d = dtypes[di];
		size_t es = atb_dtype_size(d);

		fill(p.ref, p.got, d, n, 0);
		memcpy(p.got, p.ref, n * es);
		fill_extra(p.extra, n);
		expect_same(p.ref, p.got, d, n, 0, 0, NULL, "all equal");
		/* equal bytes are not always a pass: a negative atol, or an
		 * infinite rtol at a zero reference, fails equal elements */
		put(p.ref, d, 5000, 0.0);
		put_raw(p.ref, d, 7000, specials_nan(d));
		memcpy(p.got, p.ref, n * es);
		expect_same_all_tols(p.ref, p.got, d, n, p.extra, "all equal");
		for (k = 0; k < n; k++)
			put(p.got, d, k, oracle_elem(p.ref, d, k) * (1 + 1e-6));
		expect_same(p.ref, p.got, d, n, 1e-5, 1e-5, NULL, "all within");
		expect_same(p.ref, p.got, d, n, 1e-5, 1e-5, p.extra, "all within");
		put(p.got, d, n - 1, 12345.0);
		expect_same(p.ref, p.got, d, n, 1e-5, 1e-5, NULL, "last bad");
		for (k = 0; k < n; k++)
			put(p.got, d, k, oracle_elem(p.ref, d, k) * 2 + 1);
		expect_same(p.ref, p.got, d, n, 1e-5, 1e-5, NULL, "all bad");
	}
	pair_free(&p);
}

/*
 * The hardest max_rel case for a rule that skips the division: a second
 * element whose quotient rounds above the maximum so far, while that
 * maximum times its |ref| rounds to exactly its |got - ref| (the product
 * rounded up).  The first element's quotient is exact (ref a power of two,
 * the difference a multiple of its ulp), so the maximum is known to the
 * bit; every element passes, so only max_rel can tell.
 */
Test(compare, a_quotient_just_above_the_maximum_is_seen)
{
	double cur = round(0.1 * 0x1p52) * 0x1p-52, *ref, *got;
	size_t n = 5003, k;
	unsigned found = 0, tries;

	rng_state = 5;
	ref = atb_calloc(n, sizeof(*ref));
	got = atb_calloc(n, sizeof(*got));
	cr_assert(ref && got);
	for (k = 0; k < n; k++)
		ref[k] = got[k] = 1;
	ref[0] = 0x1p10;
	got[0] = ref[0] + cur * ref[0];
	cr_assert_eq(fabs(got[0] - ref[0]) / ref[0], cur);
	/* far from the first (a later block of any blocked rule) */
	for (tries = 0; tries < 100000 && found < 50; tries++) {
		double r = 1 + unif() * 0.5, ad = cur * r, g = r + ad;
		struct runner_cmp c;

		if (g - r != ad || !(ad / r > cur))
			continue;
		found++;
		k = n - 1 - found % 3;
		ref[k] = r;
		got[k] = g;
		expect_same(ref, got, ATB_DTYPE_FP64, n, 200, 0, NULL, "just above");
		runner_compare(ref, got, ATB_DTYPE_FP64, n, 200, 0, &c);
		cr_assert_eq(c.max_rel, ad / r);
		cr_assert_eq(c.nbad, 0);
		ref[k] = got[k] = 1;
	}
	atb_free(ref);
	atb_free(got);
	cr_assert_gt(found, 0, "no such pair found: the test proves nothing");
}

/* ---- the same rule on the GPU (atb_cuda_compare) ------------------------ */

/*
 * The device comparison (src/cuda/compare.cu, PTX) held to the oracle bit
 * for bit, on the same planted data; skipped where no CUDA driver loads
 * (scripts/gpu-check runs these on the GPU machine, step u-cuda).
 */
static struct atb_cuda *gpu;
static uint64_t gpu_ref, gpu_got;
static size_t gpu_cap;

static void gpu_open_or_skip(void)
{
	struct atb_error err;

	atb_error_clear(&err);
	if (atb_cuda_load(&err) == ATB_ERR_NOT_FOUND)
		cr_skip_test("no cuda driver here: %s", err.msg);
	cr_assert_eq(atb_cuda_open(0, &gpu, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_cuda_compare_load(gpu, &err), ATB_OK, "%s", err.msg);
}

static void gpu_close(void)
{
	if (gpu_ref)
		atb_cuda_free(gpu, gpu_ref);
	if (gpu_got)
		atb_cuda_free(gpu, gpu_got);
	gpu_ref = gpu_got = 0;
	gpu_cap = 0;
	atb_cuda_close(gpu);
	gpu = NULL;
}

static void expect_same_gpu(const void *ref, const void *got, enum atb_dtype d, size_t n,
			    double atol, double rtol, const char *what)
{
	struct runner_cmp want;
	struct atb_cuda_cmp have;
	struct atb_error err;
	size_t bytes = n * atb_dtype_size(d);

	atb_error_clear(&err);
	if (bytes > gpu_cap) {
		if (gpu_ref)
			atb_cuda_free(gpu, gpu_ref);
		if (gpu_got)
			atb_cuda_free(gpu, gpu_got);
		cr_assert_eq(atb_cuda_alloc(gpu, bytes, &gpu_ref, &err), ATB_OK, "%s", err.msg);
		cr_assert_eq(atb_cuda_alloc(gpu, bytes, &gpu_got, &err), ATB_OK, "%s", err.msg);
		gpu_cap = bytes;
	}
	if (bytes) {
		cr_assert_eq(atb_cuda_h2d(gpu, gpu_ref, ref, bytes, &err), ATB_OK, "%s", err.msg);
		cr_assert_eq(atb_cuda_h2d(gpu, gpu_got, got, bytes, &err), ATB_OK, "%s", err.msg);
	}
	oracle_compare(ref, got, d, n, atol, rtol, NULL, &want);
	cr_assert_eq(atb_cuda_compare(gpu, gpu_ref, gpu_got, d, n, atol, rtol, &have, &err),
		     ATB_OK, "%s", err.msg);
	cr_assert(same_double(want.max_abs, have.max_abs) &&
		  same_double(want.max_rel, have.max_rel) &&
		  want.first_bad == have.first_bad &&
		  (want.first_bad < 0 || (same_double(want.bad_ref, have.bad_ref) &&
					  same_double(want.bad_got, have.bad_got))) &&
		  want.nbad == have.nbad && want.nnan == have.nnan,
		  "gpu %s: %s n=%zu atol=%g rtol=%g: want max_abs %a max_rel %a first %lld "
		  "ref %a got %a nbad %zu nnan %zu; have %a %a %lld %a %a %zu %zu",
		  what, atb_dtype_name(d), n, atol, rtol, want.max_abs, want.max_rel,
		  want.first_bad, want.bad_ref, want.bad_got, want.nbad, want.nnan, have.max_abs,
		  have.max_rel, have.first_bad, have.bad_ref, have.bad_got, have.nbad, have.nnan);
}

Test(compare, gpu_random_data_with_planted_differences_is_bit_identical)
{
	static const unsigned plants[] = {0, 1, 10, 50};
	struct pair p;
	size_t di, si, pi, ti;

	gpu_open_or_skip();
	rng_state = 11;
	pair_alloc(&p, 4099);
	for (di = 0; di < NDTYPES; di++)
		for (si = 0; si < NSIZES; si++)
			for (pi = 0; pi < sizeof(plants) / sizeof(plants[0]); pi++) {
				fill(p.ref, p.got, dtypes[di], sizes[si], plants[pi]);
				for (ti = 0; ti < NTOLS; ti++)
					expect_same_gpu(p.ref, p.got, dtypes[di], sizes[si],
							tols[ti][0], tols[ti][1], "random");
			}
	pair_free(&p);
	gpu_close();
}

Test(compare, gpu_each_special_against_each_special_is_bit_identical)
{
	struct pair p;
	size_t di, a, b, ti, n = 67;

	gpu_open_or_skip();
	rng_state = 12;
	pair_alloc(&p, n);
	for (di = 0; di < NDTYPES; di++) {
		const uint64_t *sp;
		size_t ns = specials(dtypes[di], &sp);

		for (a = 0; a < ns; a++)
			for (b = 0; b < ns; b++) {
				fill(p.ref, p.got, dtypes[di], n, 0);
				memcpy(p.got, p.ref, n * atb_dtype_size(dtypes[di]));
				put_raw(p.ref, dtypes[di], (a * ns + b) % n, sp[a]);
				put_raw(p.got, dtypes[di], (a * ns + b) % n, sp[b]);
				for (ti = 0; ti < NTOLS; ti++)
					expect_same_gpu(p.ref, p.got, dtypes[di], n, tols[ti][0],
							tols[ti][1], "special");
			}
	}
	pair_free(&p);
	gpu_close();
}

/* Many blocks and the grid's stride: 2^23 + 3 elements, bad ones far
 * apart (the first found by the lowest index, not by the first block to
 * finish), all equal, all bad. */
Test(compare, gpu_large_arrays_are_bit_identical)
{
	size_t n = ((size_t)1 << 23) + 3, di, k;
	struct pair p;

	gpu_open_or_skip();
	rng_state = 13;
	p.ref = atb_calloc(n, 8);
	p.got = atb_calloc(n, 8);
	cr_assert(p.ref && p.got);
	for (di = 0; di < NDTYPES; di++) {
		enum atb_dtype d = dtypes[di];

		fill(p.ref, p.got, d, n, 1);
		expect_same_gpu(p.ref, p.got, d, n, 1e-5, 1e-5, "large random");
		memcpy(p.got, p.ref, n * atb_dtype_size(d));
		expect_same_gpu(p.ref, p.got, d, n, 0, 0, "large equal");
		put(p.got, d, n - 1, 12345.0);
		put(p.got, d, 3000001, -777.0);
		expect_same_gpu(p.ref, p.got, d, n, 1e-5, 1e-5, "large two bad");
		for (k = 0; k < n; k += 4097)
			put(p.got, d, k, oracle_elem(p.ref, d, k) * 2 + 1);
		expect_same_gpu(p.ref, p.got, d, n, 1e-5, 1e-5, "large many bad");
	}
	atb_free(p.ref);
	atb_free(p.got);
	gpu_close();
}
