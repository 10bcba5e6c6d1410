/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Tasks of kind "cuda": the target architecture for nvcc.  A CUDA task's
 * sources are .cu files whose host function atb_kernel launches on
 * args->stream (the runner's CUstream); nvcc links the CUDA runtime
 * statically into the shared object, and the runtime attaches to the
 * primary context the runner made current (docs/internals/cuda.md).
 *
 * Does not: compile (task_build.c runs nvcc with the protocol's
 * build.cuda flags plus -arch and ATBI_TASK_CUDA_LIBS).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atb/cuda.h"
#include "task_cuda.h"
#include "banned.h"

static int arch_ok(const char *s)
{
	size_t i;

	if (strncmp(s, "sm_", 3) && strncmp(s, "compute_", 8))
		return 0;
	for (i = 0; s[i]; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return 0;
	return i < 24;
}

void atbi_task_cuda_arch(char *buf, size_t size)
{
	const char *env = getenv("ATB_CUDA_ARCH");
	int major = 0, minor = 0;

	if (env && arch_ok(env)) {
		snprintf(buf, size, "-arch=%s", env);
		return;
	}
	if (!atb_cuda_device_cc(0, &major, &minor, NULL) && major > 0) {
		/* sm_90a would enable wgmma but is not forward compatible: plain sm_XY. */
		snprintf(buf, size, "-arch=sm_%d%d", major, minor);
		return;
	}
	snprintf(buf, size, "-arch=sm_90");
}
