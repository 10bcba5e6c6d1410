// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_merge_attn_states: the blend of one element, shared by the three
// sources so they differ only in how work is laid out.
#include <cuda_bf16.h>

struct merge_w {
	float wp, ws, lse;
};

__device__ __forceinline__ merge_w merge_weights(float lp, float ls)
{
	float m = fmaxf(lp, ls), a = __expf(lp - m), b = __expf(ls - m), s = a + b;
	merge_w w = {a / s, b / s, m + __logf(s)};
	return w;
}
