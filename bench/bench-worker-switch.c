/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * bench-worker-switch: what the arm workers' call pattern (protocol v11,
 * runner/worker.c) costs a kernel of milliseconds, outside atb, in one run.
 *
 * Under v11 sgemm's best configuration of `make run` read about 1.89x in
 * workers against 1.92x in process, both arms 60-90 us longer a call
 * (docs/protocol.md "Version 11"), four times the round trip bench-sandbox
 * times on a 4 us kernel.  This bench times tasks/sgemm's baseline and that
 * configuration (192^3, the protocol's -O2 -march=native) with nothing of
 * atb around them, the process pinned to the CPU it starts on, the 64 MiB
 * flush before every call, three ways, in turn:
 *   inproc   the kernel called in this process
 *   worker   a forked child pinned with it, stopped between calls: continue,
 *            a byte on a SOCK_SEQPACKET pair, the call, a byte back, stop;
 *            the first switch to the child comes after the flush, inside
 *            the timed window, as in runner/worker.c
 *   warmed   the same, with a no-op round trip to the child after the flush
 *            and before the window (what runner/worker.c must not do: a
 *            hijacked worker could compute its outputs there, out of time)
 * Printed: each way's median per kernel and the speedup it gives.
 * Usage: bench-worker-switch [rounds]   (default 5 x 200 calls per way;
 * needs cc; run from the source tree or with ATB_SOURCE_DIR set)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "atb/kernel.h"
#include "atb/proc.h"
#include "atb/stats.h"
#include "util.h"

#define CALLS 200
enum { INPROC, WORKER, WARMED, NWAYS };
static const char *const ways[NWAYS] = {"inproc", "worker", "warmed"};

static double median(const double *v, size_t n)
{
	struct atb_error err;
	double m;

	if (atb_stats_median(v, n, &m, &err)) {
		fprintf(stderr, "bench-worker-switch: %s\n", err.msg);
		exit(3);
	}
	return m;
}

static void *shared(size_t n)
{
	int fd = memfd_create("bench-buffer", 0);
	void *p;

	if (fd < 0 || ftruncate(fd, (off_t)n))
		exit(3);
	p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (p == MAP_FAILED)
		exit(3);
	return p;
}

static void ping(pid_t child, int sock, char op)
{
	char b = op;

	if (kill(child, SIGCONT) || write(sock, &b, 1) != 1 || read(sock, &b, 1) != 1 ||
	    kill(child, SIGSTOP))
		exit(3);
}

/* One way, CALLS calls: the median in ns. */
static double run_way(int way, atb_kernel_fn fn, const struct atb_kernel_args *a, char *flush,
		      size_t flush_bytes, pid_t child, int sock)
{
	static double t[CALLS];
	int r;

	for (r = 0; r < CALLS; r++) {
		int64_t t0;

		memset(flush, r, flush_bytes);
		if (way == WARMED) {
			ping(child, sock, 'n');
			waitpid(child, NULL, WUNTRACED);
		}
		t0 = atbi_monotonic_ns();
		if (way == INPROC)
			fn(a);
		else
			ping(child, sock, 'k');
		t[r] = (double)(atbi_monotonic_ns() - t0);
		if (way != INPROC)
			waitpid(child, NULL, WUNTRACED);
	}
	return median(t, CALLS);
}

int main(int argc, char **argv)
{
	const char *srcdir = getenv("ATB_SOURCE_DIR") ? getenv("ATB_SOURCE_DIR") : ".";
	static const char *const names[2] = {"baseline", "best"};
	static const char *const defs[2] = {"", "-DLOOP_ORDER=0 -DTILE_I=16 -DTILE_J=256 -DTILE_K=128 -DUNROLL=8"};
	static const char *const srcs[2] = {"baseline.c", "tunable.c"};
	long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 5;
	char tmp[] = "/tmp/bench-worker-switch.XXXXXX", so[2][600], cmd[2048];
	static int64_t ints[3] = {192, 192, 192};
	size_t flush_bytes = (size_t)64 << 20;
	double *med[2][NWAYS];
	cpu_set_t set;
	int k, w;
	long r;

	if (rounds < 1)
		rounds = 5;
	if (!mkdtemp(tmp))
		return 3;
	for (k = 0; k < 2; k++) {
		snprintf(so[k], sizeof(so[k]), "%s/%s.so", tmp, names[k]);
		snprintf(cmd, sizeof(cmd), "cc -O2 -march=native -fPIC -shared -I'%s/include' %s -o '%s' '%s/tasks/sgemm/%s'",
			 srcdir, defs[k], so[k], srcdir, srcs[k]);
		if (system(cmd)) {
			fprintf(stderr, "bench-worker-switch: cannot build tasks/sgemm/%s (run from the source tree or set ATB_SOURCE_DIR)\n",
				srcs[k]);
			return 3;
		}
		for (w = 0; w < NWAYS; w++)
			if (!(med[k][w] = calloc((size_t)rounds, sizeof(double))))
				return 3;
	}
	CPU_ZERO(&set);
	CPU_SET(sched_getcpu(), &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		return 3;
	for (k = 0; k < 2; k++) {
		float *A = shared(192 * 192 * 4), *B = shared(192 * 192 * 4), *C = shared(192 * 192 * 4);
		void *bufs[3] = {A, B, C};
		struct atb_kernel_args a = {.buffers = bufs, .ints = ints, .nbuffers = 3, .nints = 3};
		char *flush = malloc(flush_bytes);
		void *h = dlopen(so[k], RTLD_NOW | RTLD_LOCAL);
		atb_kernel_fn fn = h ? (atb_kernel_fn)dlsym(h, "atb_kernel") : NULL;
		int sv[2], i;
		pid_t child;

		if (!fn || !flush || socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv))
			return 3;
		for (i = 0; i < 192 * 192; i++) {
			A[i] = (float)(((int64_t)i * 7919) % 2001 - 1000) / 1000.0f;
			B[i] = (float)(((int64_t)i * 104729) % 2001 - 1000) / 1000.0f;
		}
		child = fork();
		if (child < 0)
			return 3;
		if (child == 0) {   /* the worker: its own load of the object */
			void *hc = dlopen(so[k], RTLD_NOW | RTLD_LOCAL);
			atb_kernel_fn fc = hc ? (atb_kernel_fn)dlsym(hc, "atb_kernel") : NULL;
			char b;

			while (fc && read(sv[1], &b, 1) == 1) {
				if (b == 'k')
					fc(&a);
				if (write(sv[1], &b, 1) != 1)
					break;
			}
			_exit(0);
		}
		ping(child, sv[0], 'n');
		waitpid(child, NULL, WUNTRACED);
		for (r = 0; r < rounds; r++)
			for (w = 0; w < NWAYS; w++) {
				int way = (int)((r + w) % NWAYS);   /* each way first in turn */

				med[k][way][r] = run_way(way, fn, &a, flush, flush_bytes, child, sv[0]);
			}
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		free(flush);
	}
	printf("sgemm 192^3, %ld rounds of %d calls per way, pinned to one CPU, 64 MiB flush per call\n",
	       rounds, CALLS);
	for (w = 0; w < NWAYS; w++) {
		double m[2];

		for (k = 0; k < 2; k++)
			m[k] = median(med[k][w], (size_t)rounds);
		printf("%-7s baseline %8.0f ns   best %8.0f ns   speedup %.4f\n", ways[w], m[0], m[1],
		       m[0] / m[1]);
	}
	atb_proc_remove_tree(tmp);
	return 0;
}
