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
 *   heavy+cp  xproc+cp through a second worker whose context holds 4 GiB
 *             (touched) and 32 streams: whether the cross-context cost
 *             depends on the other context's state (a trusted empty worker's
 *             round trip can stand for an arm's only if it does not)
 *   noblock+cp xproc+cp without the blocking kernel: the host round trip
 *             inside the window
 * and two attacks.  late-attack: the worker records I1 and then, on a
 * second stream of its own made to wait on I0, launches a kernel that spins
 * 50 us and writes the output's second word (work beside the arm's).
 * early-attack: after its reply the worker launches that kernel on its
 * second stream with no dependency, so it may run while the timer's
 * blocking kernel holds the timer's stream, before E0 (work outside the
 * window).  Printed: whether the in-window copy saw the second word, and
 * what the blocking kernel saw of the GPU being taken away from it: it
 * reads %globaltimer in its loop, and every step longer than 2 us is time
 * the timer's context did not run ("stolen"; the largest step "maxgap").
 * A timer that watches those steps can tell a worker that computes outside
 * its window, if the honest ways show none.
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

/*
 * hold the stream until the host sets *flag >= k (1 s at most); st[0] the
 * time between loop steps longer than 2 us (the context not running), st[1]
 * the longest step, in ns
 */
__global__ void block_until(volatile int *flag, int k, unsigned long long *st)
{
	uint64_t prev = gtime(), end = prev + 1000000000ull, stolen = 0, maxgap = 0;

	for (;;) {
		uint64_t now = gtime(), d = now - prev;

		if (d > 2000)
			stolen += d;
		if (d > maxgap)
			maxgap = d;
		prev = now;
		if (*flag >= k || now >= end)
			break;
	}
	st[0] = stolen;
	st[1] = maxgap;
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
	int op;  /* 1: call, 2: end, 3: synchronize the context and answer */
	int k;
	long long ns;
	int late;  /* 0 none, 1 beside the arm (waits on I0), 2 after the reply */
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

/* heavy: hold 4 GiB (touched) and 32 streams more than a plain worker */
static int worker(int fd, int heavy)
{
	struct handles h;
	cudaEvent_t i0, i1;
	cudaStream_t s, s2, extra[32];
	unsigned long long *out;
	struct msg m;
	int ok = 0;

	who = heavy ? "gpu-xproc-probe (heavy worker)" : "gpu-xproc-probe (worker)";
	xfer(fd, &h, sizeof(h), 0);
	CK(cudaSetDevice(0));
	CK(cudaIpcOpenEventHandle(&i0, h.i0));
	CK(cudaIpcOpenEventHandle(&i1, h.i1));
	CK(cudaIpcOpenMemHandle((void **)&out, h.out, cudaIpcMemLazyEnablePeerAccess));
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	if (heavy) {
		void *big;

		CK(cudaMalloc(&big, (size_t)4 << 30));
		CK(cudaMemset(big, 1, (size_t)4 << 30));
		for (int j = 0; j < 32; j++)
			CK(cudaStreamCreateWithFlags(&extra[j], cudaStreamNonBlocking));
		CK(cudaDeviceSynchronize());
	}
	xfer(fd, &ok, sizeof(ok), 1);
	for (;;) {
		xfer(fd, &m, sizeof(m), 0);
		if (m.op == 3) {
			CK(cudaDeviceSynchronize());
			xfer(fd, &ok, sizeof(ok), 1);
			continue;
		}
		if (m.op != 1)
			break;
		CK(cudaStreamWaitEvent(s, i0, 0));
		work<<<1, 1, 0, s>>>(out, m.k, m.ns);
		CK(cudaGetLastError());
		CK(cudaEventRecord(i1, s));
		if (m.late == 1) {
			CK(cudaStreamWaitEvent(s2, i0, 0));
			late<<<1, 1, 0, s2>>>(out, m.k, 50000);
			CK(cudaGetLastError());
		}
		xfer(fd, &ok, sizeof(ok), 1);
		if (m.late == 2) {
			late<<<1, 1, 0, s2>>>(out, m.k, 50000);
			CK(cudaGetLastError());
		}
	}
	CK(cudaDeviceSynchronize());
	return 0;
}

enum { INPROC, INPROC_CP, XPROC, XPROC_CP, HEAVY_CP, NOBLOCK_CP, LATE, EARLY, NWAYS };
static const char *const way_name[NWAYS] = {"inproc",     "inproc+cp",  "xproc",
					    "xproc+cp",   "heavy+cp",   "noblock+cp",
					    "late-attack", "early-attack"};
/* which worker a way's call goes to (-1: none, the timer launches it) */
static const int way_worker[NWAYS] = {-1, -1, 0, 0, 1, 0, 0, 0};
static const int way_copy[NWAYS] = {0, 1, 0, 1, 1, 1, 1, 1};

struct timer {
	int fd[2];
	cudaStream_t s;
	cudaEvent_t e0, e1, i0, i1;
	unsigned long long *out, *seen, *host_seen, *st, *st_dev;
	volatile int *flag;
	int *flag_dev;
	int k;
};

struct obs {
	double us;       /* the window */
	int late_seen;   /* the copy saw out[1] == k */
	double stolen_us, maxgap_us;  /* what the blocking kernel saw */
};

/* one timed call */
static struct obs call(struct timer *t, int way, long long ns)
{
	struct msg m = {1, 0, ns, way == LATE ? 1 : way == EARLY ? 2 : 0};
	int ok, wk = way_worker[way], block = way != NOBLOCK_CP;
	struct obs o;
	float ms;

	m.k = ++t->k;
	if (block) {
		block_until<<<1, 1, 0, t->s>>>(t->flag_dev, m.k, t->st_dev);
		CK(cudaGetLastError());
	}
	CK(cudaEventRecord(t->e0, t->s));
	if (wk < 0) {
		work<<<1, 1, 0, t->s>>>(t->out, m.k, ns);
		CK(cudaGetLastError());
	} else {
		CK(cudaEventRecord(t->i0, t->s));
		xfer(t->fd[wk], &m, sizeof(m), 1);
		xfer(t->fd[wk], &ok, sizeof(ok), 0);
		CK(cudaStreamWaitEvent(t->s, t->i1, 0));
	}
	if (way_copy[way])
		CK(cudaMemcpyAsync(t->seen, t->out, 2 * sizeof(*t->out), cudaMemcpyDeviceToDevice,
				   t->s));
	CK(cudaEventRecord(t->e1, t->s));
	__sync_synchronize();
	*t->flag = m.k;
	__sync_synchronize();
	CK(cudaEventSynchronize(t->e1));
	CK(cudaEventElapsedTime(&ms, t->e0, t->e1));
	CK(cudaMemcpy(t->host_seen, t->seen, 2 * sizeof(*t->out), cudaMemcpyDeviceToHost));
	if (way_copy[way] && t->host_seen[0] != (unsigned long long)m.k) {
		fprintf(stderr, "%s: %s: the copy in the window did not see the kernel's write"
			" (%llu, want %d)\n", who, way_name[way], t->host_seen[0], m.k);
		exit(4);
	}
	o.us = ms * 1000.0;
	o.late_seen = t->host_seen[1] == (unsigned long long)m.k;
	o.stolen_us = block ? t->st[0] / 1000.0 : 0;
	o.maxgap_us = block ? t->st[1] / 1000.0 : 0;
	return o;
}

static double q(std::vector<double> v, double p)
{
	std::sort(v.begin(), v.end());
	return v[(size_t)(p * (double)(v.size() - 1) + 0.5)];
}

/* every worker's context idle again, outside any window (an early-attack
 * kernel must not run into the next way's call) */
static void drain(struct timer *t)
{
	struct msg m = {3, 0, 0, 0};
	int ok;

	for (int w = 0; w < 2; w++) {
		xfer(t->fd[w], &m, sizeof(m), 1);
		xfer(t->fd[w], &ok, sizeof(ok), 0);
	}
	CK(cudaStreamSynchronize(t->s));
}

int main(int argc, char **argv)
{
	const long long spins[] = {0, 10000, 100000};
	const int nspins = 3;
	int calls = 200, ok, i, w, s;
	const char *json = NULL;
	struct handles h;
	struct timer t;
	pid_t pid[2];
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
	memset(&t, 0, sizeof(t));
	/* fork before any CUDA call: a CUDA context does not survive fork */
	for (w = 0; w < 2; w++) {
		int sv[2];

		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
			return 3;
		pid[w] = fork();
		if (pid[w] < 0)
			return 3;
		if (pid[w] == 0) {
			close(sv[0]);
			for (int j = 0; j < w; j++)
				close(t.fd[j]);
			_exit(worker(sv[1], w == 1));
		}
		close(sv[1]);
		t.fd[w] = sv[0];
	}
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
	CK(cudaHostAlloc((void **)&t.st, 2 * sizeof(*t.st), cudaHostAllocMapped));
	CK(cudaHostGetDevicePointer((void **)&t.st_dev, (void *)t.st, 0));
	CK(cudaIpcGetEventHandle(&h.i0, t.i0));
	CK(cudaIpcGetEventHandle(&h.i1, t.i1));
	CK(cudaIpcGetMemHandle(&h.out, t.out));
	CK(cudaDeviceSynchronize());
	for (w = 0; w < 2; w++) {
		xfer(t.fd[w], &h, sizeof(h), 1);
		xfer(t.fd[w], &ok, sizeof(ok), 0);
	}

	if (json && !(jf = fopen(json, "w"))) {
		fprintf(stderr, "%s: cannot write %s\n", who, json);
		return 3;
	}
	printf("%-12s %7s %9s %9s %9s %9s %10s %10s %10s\n", "way", "spin_us", "median_us",
	       "p10_us", "p90_us", "late_seen", "stolen_med", "stolen_p90", "maxgap_p90");
	if (jf)
		fprintf(jf, "{\"calls\": %d, \"rows\": [", calls);
	for (s = 0; s < nspins; s++) {
		/* the ways in turn, call by call, so a drift hits all alike */
		std::vector<double> v[NWAYS], st[NWAYS], mg[NWAYS];
		int seen[NWAYS] = {0};

		for (i = 0; i < calls + 20; i++)
			for (w = 0; w < NWAYS; w++) {
				struct obs o = call(&t, w, spins[s]);

				drain(&t);
				if (i >= 20) {
					v[w].push_back(o.us);
					st[w].push_back(o.stolen_us);
					mg[w].push_back(o.maxgap_us);
					seen[w] += o.late_seen;
				}
			}
		for (w = 0; w < NWAYS; w++) {
			med[w][s] = q(v[w], 0.5);
			printf("%-12s %7.1f %9.2f %9.2f %9.2f %5d/%-3d %10.2f %10.2f %10.2f\n",
			       way_name[w], spins[s] / 1000.0, med[w][s], q(v[w], 0.1),
			       q(v[w], 0.9), seen[w], calls, q(st[w], 0.5), q(st[w], 0.9),
			       q(mg[w], 0.9));
			if (jf)
				fprintf(jf, "%s{\"way\": \"%s\", \"spin_us\": %.1f, \"median_us\": %.3f,"
					" \"p10_us\": %.3f, \"p90_us\": %.3f, \"late_seen\": %d,"
					" \"stolen_median_us\": %.3f, \"stolen_p90_us\": %.3f,"
					" \"maxgap_p90_us\": %.3f}",
					s || w ? ", " : "", way_name[w], spins[s] / 1000.0, med[w][s],
					q(v[w], 0.1), q(v[w], 0.9), seen[w], q(st[w], 0.5),
					q(st[w], 0.9), q(mg[w], 0.9));
		}
	}
	for (s = 0; s < nspins; s++)
		printf("spin %5.1f us: xproc adds %.2f us a call to inproc's window, xproc+cp"
		       " %.2f us to inproc+cp's; heavy+cp - xproc+cp %.2f us\n",
		       spins[s] / 1000.0, med[XPROC][s] - med[INPROC][s],
		       med[XPROC_CP][s] - med[INPROC_CP][s], med[HEAVY_CP][s] - med[XPROC_CP][s]);
	if (jf) {
		fprintf(jf, "]}\n");
		fclose(jf);
	}
	for (w = 0; w < 2; w++) {
		struct msg end = {2, 0, 0, 0};

		xfer(t.fd[w], &end, sizeof(end), 1);
	}
	for (w = 0; w < 2; w++) {
		int st;

		waitpid(pid[w], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			ok = -1;
	}
	return ok == -1 ? 3 : 0;
}
