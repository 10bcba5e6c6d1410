// SPDX-License-Identifier: GPL-3.0-or-later
//
// The output comparison on the device: runner_compare's rule (runner/check.c,
// PROTO: correctness.tolerances), element for element, over two device
// arrays, so a torch job on the GPU compares its multi-GiB outputs where
// they are instead of copying both to the host (68% of an atb measure's
// wall on KernelBench 19_ReLU on the H200 went to those copies).
//
// Not compiled by the build: scripts/gen-cuda-ptx turns it into PTX
// (compare_ptx.inc, committed), which the driver JIT-compiles at run time,
// as the spin kernel in cuda.c, so atb needs no nvcc to build or run.  Edit
// this file, run scripts/gen-cuda-ptx, commit both; t2300 checks the two
// agree wherever nvcc is installed.
//
// Bit-identical to the host rule: every double operation is an explicitly
// rounded intrinsic (__dsub_rn, __dmul_rn, __dadd_rn, __ddiv_rn), which ptxas
// never contracts into a fused multiply-add (the host build is ISO C17, where
// gcc does not contract either), and fp16 and bf16 widen to float exactly.
// The results are maxima, a minimum and counts, so the order the threads
// meet the elements in changes nothing.
//
// Result (struct atb_dcmp, 5 x u64, set up by the caller): max_abs and
// max_rel as the bits of non-negative doubles (whose unsigned order is their
// numeric order, +infinity included, so atomicMax on the bits is the max),
// first_bad (ULLONG_MAX when none), nbad, nnan.

struct atb_dcmp {
	unsigned long long max_abs, max_rel, first_bad, nbad, nnan;
};

struct acc {
	double mabs, mrel;
	unsigned long long fb, nb, nn;
};

// The rule for one element, as cmp_exact in runner/check.c with allow 0.
__device__ __forceinline__ void rule(acc &a, unsigned long long k, double r, double g,
				     double atol, double rtol)
{
	double ad, rd;
	bool ok, rn = isnan(r), gn = isnan(g);

	if (gn && !rn)
		a.nn++;
	if (rn || gn) {
		ok = rn && gn;
		ad = rd = 0.0;
	} else if (isinf(r) || isinf(g)) {
		ok = r == g;
		ad = rd = ok ? 0.0 : __longlong_as_double(0x7ff0000000000000LL);
	} else {
		double ar = fabs(r);

		ad = fabs(__dsub_rn(g, r));
		rd = r != 0.0 ? __ddiv_rn(ad, ar)
			      : (ad != 0.0 ? __longlong_as_double(0x7ff0000000000000LL) : 0.0);
		// host: ad <= atol + rtol * fabs(r) + allow, allow 0 (x + 0 compares as x)
		ok = ad <= __dadd_rn(atol, __dmul_rn(rtol, ar));
	}
	if (ad > a.mabs)
		a.mabs = ad;
	if (rd > a.mrel)
		a.mrel = rd;
	if (!ok) {
		if (k < a.fb)
			a.fb = k;
		a.nb++;
	}
}

__device__ __forceinline__ double widen_f16(unsigned short x)
{
	float f;

	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
	return f;
}

__device__ __forceinline__ double widen_bf16(unsigned short x)
{
	return __uint_as_float((unsigned)x << 16);
}

__device__ __forceinline__ void flush(acc &a, atb_dcmp *out)
{
	unsigned mask = 0xffffffffu;
	int o;

	for (o = 16; o > 0; o >>= 1) {
		double m1 = __shfl_down_sync(mask, a.mabs, o);
		double m2 = __shfl_down_sync(mask, a.mrel, o);
		unsigned long long f = __shfl_down_sync(mask, a.fb, o);
		unsigned long long b = __shfl_down_sync(mask, a.nb, o);
		unsigned long long n = __shfl_down_sync(mask, a.nn, o);

		if (m1 > a.mabs)
			a.mabs = m1;
		if (m2 > a.mrel)
			a.mrel = m2;
		if (f < a.fb)
			a.fb = f;
		a.nb += b;
		a.nn += n;
	}
	if ((threadIdx.x & 31) == 0) {
		if (a.mabs > 0.0)
			atomicMax(&out->max_abs, (unsigned long long)__double_as_longlong(a.mabs));
		if (a.mrel > 0.0)
			atomicMax(&out->max_rel, (unsigned long long)__double_as_longlong(a.mrel));
		if (a.fb != ~0ull)
			atomicMin(&out->first_bad, a.fb);
		if (a.nb)
			atomicAdd(&out->nbad, a.nb);
		if (a.nn)
			atomicAdd(&out->nnan, a.nn);
	}
}

// One entry point per dtype: a grid-stride loop, every thread of a block
// to the end (the warp shuffles need the whole warp), then one atomic per
// warp and result.
#define ATB_DCMP(NAME, T, WIDEN, SKIP_EQUAL)                                          \
extern "C" __global__ void NAME(const T *ref, const T *got, unsigned long long n,      \
				 double atol, double rtol, atb_dcmp *out)               \
{                                                                                       \
	acc a = {0.0, 0.0, ~0ull, 0ull, 0ull};                                          \
	unsigned long long k = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; \
	unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;           \
                                                                                        \
	for (; k < n; k += step) {                                                      \
		T r = ref[k], g = got[k];                                               \
		if (SKIP_EQUAL && r == g)                                               \
			continue;                                                       \
		rule(a, k, WIDEN(r), WIDEN(g), atol, rtol);                             \
	}                                                                               \
	flush(a, out);                                                                  \
}

#define W_PLAIN(x) ((double)(x))

ATB_DCMP(atb_dcmp_fp32, float, W_PLAIN, 0)
ATB_DCMP(atb_dcmp_fp64, double, W_PLAIN, 0)
ATB_DCMP(atb_dcmp_int32, int, W_PLAIN, 0)
// int64: equal elements are skipped by the host rule (exactly equal, even
// beyond 2^53); unequal ones are compared as doubles, as there
ATB_DCMP(atb_dcmp_int64, long long, W_PLAIN, 1)
ATB_DCMP(atb_dcmp_fp16, unsigned short, widen_f16, 0)
ATB_DCMP(atb_dcmp_bf16, unsigned short, widen_bf16, 0)
