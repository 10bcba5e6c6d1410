// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_transpose tunable template: the shared-memory tiled transpose (a
// TILE x TILE tile, padded by one column against bank conflicts; reads and
// writes coalesced).  Knobs: TILE edge; ROWS thread rows per tile (each
// thread moves TILE / ROWS elements; ROWS above TILE acts as TILE).
#include "atb/kernel.h"

#ifndef TILE
#define TILE 32
#endif
#ifndef ROWS
#define ROWS 8
#endif
#define TROWS (ROWS < TILE ? ROWS : TILE)

__global__ void __launch_bounds__(TILE * TROWS) transpose_tiled(const float *__restrict__ x,
								float *__restrict__ y,
								long long r, long long c)
{
	__shared__ float tile[TILE][TILE + 1];
	long long col = (long long)blockIdx.x * TILE + threadIdx.x;
	long long row0 = (long long)blockIdx.y * TILE;

	for (int j = threadIdx.y; j < TILE; j += TROWS)
		if (row0 + j < r && col < c)
			tile[j][threadIdx.x] = x[(row0 + j) * c + col];
	__syncthreads();
	long long ocol = row0 + threadIdx.x, orow0 = (long long)blockIdx.x * TILE;
	for (int j = threadIdx.y; j < TILE; j += TROWS)
		if (orow0 + j < c && ocol < r)
			y[(orow0 + j) * r + ocol] = tile[threadIdx.x][j];
}

extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	if (a->nbuffers != 2 || a->nints != 2)
		return 2;
	long long r = a->ints[0], c = a->ints[1];
	if (r <= 0 || c <= 0)
		return 0;
	dim3 grid((unsigned)((c + TILE - 1) / TILE), (unsigned)((r + TILE - 1) / TILE));
	dim3 block(TILE, TROWS);
	transpose_tiled<<<grid, block, 0, (cudaStream_t)a->stream>>>(
		(const float *)a->buffers[0], (float *)a->buffers[1], r, c);
	return cudaGetLastError() != cudaSuccess;
}
