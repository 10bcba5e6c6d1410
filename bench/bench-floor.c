/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The CPU physical floor's caps under load.  The floor refuses a candidate
 * faster than the box's measured memory bandwidth allows, so a bandwidth
 * measured low (the box busy while it was measured) refuses honest work.
 * Measures the caps on the quiet box, then with one busy-looping process
 * per core beside it (a build's compilers, say), and prints each bandwidth
 * and the ratio loaded / quiet: the reference is the quiet measurement of
 * this run.  A ratio near 1 means load does not lower the floor's caps.
 *
 *   bench-floor [REPS]   (default 3 measurements per condition, best kept)
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "atb/status.h"
#include "atb/floor.h"
#include "banned.h"

static int measure(int reps, struct atb_floor_caps *best)
{
	struct atb_floor_caps c;
	struct atb_error err = {0};
	int r;

	best->mem_bw_bytes_per_s = best->peak_flops_per_s = 0;
	for (r = 0; r < reps; r++) {
		if (atb_floor_measure_cpu(0, &c, &err)) {
			fprintf(stderr, "bench-floor: %s\n", err.msg);
			return 1;
		}
		printf("    %.2f GB/s  %.1f GFLOP/s  (%s)\n", c.mem_bw_bytes_per_s / 1e9,
		       c.peak_flops_per_s / 1e9, c.method);
		if (c.mem_bw_bytes_per_s > best->mem_bw_bytes_per_s)
			best->mem_bw_bytes_per_s = c.mem_bw_bytes_per_s;
		if (c.peak_flops_per_s > best->peak_flops_per_s)
			best->peak_flops_per_s = c.peak_flops_per_s;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int reps = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 3, i, rc;
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	pid_t kids[256];
	struct atb_floor_caps quiet, loaded;

	if (reps < 1)
		reps = 1;
	if (n < 1 || n > 256)
		n = n < 1 ? 1 : 256;
	printf("quiet:\n");
	if (measure(reps, &quiet))
		return 1;
	for (i = 0; i < n; i++) {
		kids[i] = fork();
		if (kids[i] == 0) {
			volatile unsigned long x = 0;

			for (;;)
				x = x * 6364136223846793005ul + 1;
		}
	}
	printf("loaded (%ld busy-looping processes):\n", n);
	rc = measure(reps, &loaded);
	for (i = 0; i < n; i++)
		if (kids[i] > 0)
			kill(kids[i], SIGKILL);
	while (wait(NULL) > 0)
		;
	if (rc)
		return 1;
	printf("bandwidth: quiet %.2f GB/s, loaded %.2f GB/s, loaded/quiet %.3f\n",
	       quiet.mem_bw_bytes_per_s / 1e9, loaded.mem_bw_bytes_per_s / 1e9,
	       loaded.mem_bw_bytes_per_s / quiet.mem_bw_bytes_per_s);
	printf("fp32 peak: quiet %.1f GFLOP/s, loaded %.1f GFLOP/s, loaded/quiet %.3f\n",
	       quiet.peak_flops_per_s / 1e9, loaded.peak_flops_per_s / 1e9,
	       loaded.peak_flops_per_s / quiet.peak_flops_per_s);
	return 0;
}
