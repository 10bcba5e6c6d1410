// SPDX-License-Identifier: GPL-3.0-or-later
/*
 * gpu-xproc-probe: can a process that loads no candidate code time a
 * kernel launched by another process on the same GPU, and at what cost?
 * (issue 11 for the cuda and torch backends: today their arms share the
 * runner, so a candidate can rewrite the runner's event clock.)
 *
 * The design it tries, one timed call k:
 *   timer  (holds the clock; no candidate code):
 *          launch a blocking kernel on its stream that polls a host-mapped
 *          flag (nvbench's blocking kernel), so everything queued behind
 *          it starts only when the host releases it; record E0 (timing);
 *          record I0 (interprocess event); send "call k" to the worker;
 *   worker (the arm: would load the candidate):
 *          make its stream wait on I0; launch the kernel; record I1; reply;
 *   timer: make its stream wait on I1; [copy the output inside the
 *          window]; record E1; release the flag; E1 - E0 is the call.
 * The host round trip happens while the GPU is held by the blocking
 * kernel, so it is outside the GPU window; what the window adds is the
 * cross-context dependency (two processes, two contexts: the GPU
 * time-slices between them without MPS).
 *
 * Ways, each for a spin kernel of 0, 10 and 100 us (globaltimer):
 *   inproc    the timer launches the kernel itself between E0 and E1 (the
 *             runner today); inproc+cp with the copy below
 *   xproc     the worker launches it, as above
 *   xproc+cp  the same with an 8-byte device copy of the output between the
 *             wait on I1 and E1 (what bounds a worker's late work: the copy
 *             is what the timer checks)
 * and one attack: the worker records I1 and then, on a second stream of
 * its own, launches a kernel that spins 50 us and writes the output's
 * second word (late work after its "done").  Printed: whether the
 * in-window copy saw the late write, and whether the window grew by it.
 *
 * Every failure says which call failed and the CUDA error (gVisor's
 * nvproxy may not pass the IPC calls through).  Output: a table on stdout
 * and, with --json FILE, one JSON object.
 *
 * Build (scripts/gpu-check step xproc): nvcc -O2 -o P gpu-xproc-probe.cu
 * Usage: gpu-xproc-probe [--calls N] [--json FILE]
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <vector>

#define CK(x)                                                                          \
	do {                                                                           \
		cudaError_t e_ = (x);                                                  \
		if (e_ != cudaSuccess) {                                               \
			fprintf(stderr, "%s: %s failed: %s (%d) at line %d\n", who, #x,  \
				cudaGetErrorString(e_), (int)e_, __LINE__);            \
			exit(3);                                                       \
		}                                                                      \
	} while (0)

static const char *who = "gpu-xproc-probe";

__device__ static uint64_t gtime(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* hold the stream until the host sets *flag >= k (1 s at most) */
__global__ void block_until(volatile int *flag, int k)
{
	uint64_t end = gtime() + 1000000000ull;

	while (*flag < k && gtime() < end)
		;
}

/* the "arm": spin ns, then write k */
__global__ void work(unsigned long long *out, int k, long long ns)
{
	uint64_t end = gtime() + (uint64_t)ns;

	while (ns > 0 && gtime() < end)
		;
	out[0] = (unsigned long long)k;
}

/* the attack: late work after the worker's I1 */
__global__ void late(unsigned long long *out, int k, long long ns)
{
	uint64_t end = gtime() + (uint64_t)ns;

	while (gtime() < end)
		;
	out[1] = (unsigned long long)k;
}

struct msg {
	int op;  /* 1: call, 2: end */
	int k;
	long long ns;
	int late;
};

struct handles {
	cudaIpcEventHandle_t i0, i1;
	cudaIpcMemHandle_t out;
};

static void xfer(int fd, void *p, size_t n, int send)
{
	char *c = (char *)p;

	while (n) {
		ssize_t r = send ? write(fd, c, n) : read(fd, c, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			fprintf(stderr, "%s: the other process is gone\n", who);
			exit(3);
		}
		c += r;
		n -= (size_t)r;
	}
}

static int worker(int fd)
{
	struct handles h;
	cudaEvent_t i0, i1;
	cudaStream_t s, s2;
	unsigned long long *out;
	struct msg m;
	int ok = 0;

	who = "gpu-xproc-probe (worker)";
	xfer(fd, &h, sizeof(h), 0);
	CK(cudaSetDevice(0));
	CK(cudaIpcOpenEventHandle(&i0, h.i0));
	CK(cudaIpcOpenEventHandle(&i1, h.i1));
	CK(cudaIpcOpenMemHandle((void **)&out, h.out, cudaIpcMemLazyEnablePeerAccess));
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	xfer(fd, &ok, sizeof(ok), 1);
	for (;;) {
		xfer(fd, &m, sizeof(m), 0);
		if (m.op != 1)
			break;
		CK(cudaStreamWaitEvent(s, i0, 0));
		work<<<1, 1, 0, s>>>(out, m.k, m.ns);
		CK(cudaGetLastError());
		CK(cudaEventRecord(i1, s));
		if (m.late) {
			CK(cudaStreamWaitEvent(s2, i0, 0));
			late<<<1, 1, 0, s2>>>(out, m.k, 50000);
			CK(cudaGetLastError());
		}
		xfer(fd, &ok, sizeof(ok), 1);
	}
	CK(cudaDeviceSynchronize());
	return 0;
}

enum { INPROC, INPROC_CP, XPROC, XPROC_CP, LATE, NWAYS };
static const char *const way_name[NWAYS] = {"inproc", "inproc+cp", "xproc", "xproc+cp",
					    "late-attack"};

struct timer {
	int fd;
	cudaStream_t s;
	cudaEvent_t e0, e1, i0, i1;
	unsigned long long *out, *seen, *host_seen;
	volatile int *flag;
	int *flag_dev;
	int k;
};

/* one timed call; the window in us; *late_seen: the copy saw out[1] == k */
static double call(struct timer *t, int way, long long ns, int *late_seen)
{
	struct msg m = {1, 0, ns, way == LATE};
	int ok;
	float ms;

	m.k = ++t->k;
	block_until<<<1, 1, 0, t->s>>>(t->flag_dev, m.k);
	CK(cudaGetLastError());
	CK(cudaEventRecord(t->e0, t->s));
	if (way == INPROC || way == INPROC_CP) {
		work<<<1, 1, 0, t->s>>>(t->out, m.k, ns);
		CK(cudaGetLastError());
	} else {
		CK(cudaEventRecord(t->i0, t->s));
		xfer(t->fd, &m, sizeof(m), 1);
		xfer(t->fd, &ok, sizeof(ok), 0);
		CK(cudaStreamWaitEvent(t->s, t->i1, 0));
	}
	if (way == INPROC_CP || way == XPROC_CP || way == LATE)
		CK(cudaMemcpyAsync(t->seen, t->out, 2 * sizeof(*t->out), cudaMemcpyDeviceToDevice,
				   t->s));
	CK(cudaEventRecord(t->e1, t->s));
	__sync_synchronize();
	*t->flag = m.k;
	__sync_synchronize();
	CK(cudaEventSynchronize(t->e1));
	CK(cudaEventElapsedTime(&ms, t->e0, t->e1));
	CK(cudaMemcpy(t->host_seen, t->seen, 2 * sizeof(*t->out), cudaMemcpyDeviceToHost));
	if ((way == INPROC_CP || way == XPROC_CP || way == LATE) && t->host_seen[0] != (unsigned long long)m.k) {
		fprintf(stderr, "%s: %s: the copy in the window did not see the kernel's write"
			" (%llu, want %d)\n", who, way_name[way], t->host_seen[0], m.k);
		exit(4);
	}
	*late_seen = t->host_seen[1] == (unsigned long long)m.k;
	return ms * 1000.0;
}

static double q(std::vector<double> v, double p)
{
	std::sort(v.begin(), v.end());
	return v[(size_t)(p * (double)(v.size() - 1) + 0.5)];
}

int main(int argc, char **argv)
{
	const long long spins[] = {0, 10000, 100000};
	const int nspins = 3;
	int calls = 200, sv[2], ok, i, w, s;
	const char *json = NULL;
	struct handles h;
	struct timer t;
	pid_t pid;
	FILE *jf = NULL;
	double med[NWAYS][3];

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--calls") && i + 1 < argc)
			calls = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--json") && i + 1 < argc)
			json = argv[++i];
		else {
			fprintf(stderr, "usage: gpu-xproc-probe [--calls N] [--json FILE]\n");
			return 2;
		}
	}
	if (calls < 10)
		calls = 10;
	/* fork before any CUDA call: a CUDA context does not survive fork */
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 3;
	pid = fork();
	if (pid < 0)
		return 3;
	if (pid == 0) {
		close(sv[0]);
		_exit(worker(sv[1]));
	}
	close(sv[1]);
	memset(&t, 0, sizeof(t));
	t.fd = sv[0];
	CK(cudaSetDevice(0));
	CK(cudaSetDeviceFlags(cudaDeviceMapHost));
	CK(cudaStreamCreateWithFlags(&t.s, cudaStreamNonBlocking));
	CK(cudaEventCreate(&t.e0));
	CK(cudaEventCreate(&t.e1));
	CK(cudaEventCreateWithFlags(&t.i0, cudaEventDisableTiming | cudaEventInterprocess));
	CK(cudaEventCreateWithFlags(&t.i1, cudaEventDisableTiming | cudaEventInterprocess));
	CK(cudaMalloc((void **)&t.out, 2 * sizeof(*t.out)));
	CK(cudaMalloc((void **)&t.seen, 2 * sizeof(*t.out)));
	CK(cudaMemset(t.out, 0, 2 * sizeof(*t.out)));
	CK(cudaHostAlloc((void **)&t.host_seen, 2 * sizeof(*t.out), cudaHostAllocDefault));
	CK(cudaHostAlloc((void **)&t.flag, sizeof(int), cudaHostAllocMapped));
	*t.flag = 0;
	CK(cudaHostGetDevicePointer((void **)&t.flag_dev, (void *)t.flag, 0));
	CK(cudaIpcGetEventHandle(&h.i0, t.i0));
	CK(cudaIpcGetEventHandle(&h.i1, t.i1));
	CK(cudaIpcGetMemHandle(&h.out, t.out));
	CK(cudaDeviceSynchronize());
	xfer(t.fd, &h, sizeof(h), 1);
	xfer(t.fd, &ok, sizeof(ok), 0);

	if (json && !(jf = fopen(json, "w"))) {
		fprintf(stderr, "%s: cannot write %s\n", who, json);
		return 3;
	}
	printf("%-12s %10s %10s %10s %10s %12s\n", "way", "spin_us", "median_us", "p10_us",
	       "p90_us", "late_seen");
	if (jf)
		fprintf(jf, "{\"calls\": %d, \"rows\": [", calls);
	for (s = 0; s < nspins; s++) {
		/* the ways in turn, call by call, so a drift hits all alike */
		std::vector<double> v[NWAYS];
		int seen[NWAYS] = {0};

		for (i = 0; i < calls + 20; i++)
			for (w = 0; w < NWAYS; w++) {
				int ls = 0;
				double us = call(&t, w, spins[s], &ls);

				if (i >= 20) {
					v[w].push_back(us);
					seen[w] += ls;
				}
			}
		for (w = 0; w < NWAYS; w++) {
			med[w][s] = q(v[w], 0.5);
			printf("%-12s %10.1f %10.2f %10.2f %10.2f %8d/%d\n", way_name[w],
			       spins[s] / 1000.0, med[w][s], q(v[w], 0.1), q(v[w], 0.9), seen[w],
			       calls);
			if (jf)
				fprintf(jf, "%s{\"way\": \"%s\", \"spin_us\": %.1f, \"median_us\": %.3f,"
					" \"p10_us\": %.3f, \"p90_us\": %.3f, \"late_seen\": %d}",
					s || w ? ", " : "", way_name[w], spins[s] / 1000.0, med[w][s],
					q(v[w], 0.1), q(v[w], 0.9), seen[w]);
		}
	}
	for (s = 0; s < nspins; s++)
		printf("spin %5.1f us: xproc adds %.2f us a call to inproc's window, xproc+cp"
		       " %.2f us to inproc+cp's\n",
		       spins[s] / 1000.0, med[XPROC][s] - med[INPROC][s],
		       med[XPROC_CP][s] - med[INPROC_CP][s]);
	if (jf) {
		fprintf(jf, "]}\n");
		fclose(jf);
	}
	{
		struct msg end = {2, 0, 0, 0};

		xfer(t.fd, &end, sizeof(end), 1);
	}
	waitpid(pid, &ok, 0);
	return WIFEXITED(ok) && !WEXITSTATUS(ok) ? 0 : 3;
}
