/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb-runner: the measurement worker.  One fresh process per job: it reads
 * one job (a JSON object on one line) from stdin, and writes events, one
 * JSON object per line, flushed, to stdout: hello, env, correctness...,
 * samples..., done (or error).  docs/internals/runner.md is the reference.
 *
 * Candidate code runs in this process.  Before loading any, the event
 * channel is moved to a private descriptor and fd 1 is pointed at stderr, so
 * a kernel that prints cannot forge or corrupt an event.  A crash or hang
 * kills only this process; the harness reports it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "atb/atb.h"
#include "atb/kernel.h"
#include "runner_cuda.h"
#include "runner_int.h"
#include "runner_torch.h"
#include "util.h"
#include "banned.h"

static FILE *events;

int runner_emit(json_t *ev)
{
	char *s;
	int rc = 0;

	if (!ev)
		return -1;
	s = json_dumps(ev, JSON_COMPACT | JSON_REAL_PRECISION(17));
	json_decref(ev);
	if (!s)
		return -1;
	if (fputs(s, events) < 0 || fputc('\n', events) < 0 || fflush(events))
		rc = -1;
	atb_free(s);
	runner_progress_seen();
	return rc;
}

void runner_emit_error(const char *reason, const char *msg)
{
	if (runner_emit(json_pack("{s:s, s:s, s:s}", "event", "error", "reason", reason,
				  "message", msg)))
		fprintf(stderr, "atb-runner: %s: %s\n", reason, msg);
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: atb-runner < job.json\n"
		"       atb-runner --help | --version\n"
		"\n"
		"The atb measurement worker.  atb starts one fresh atb-runner per\n"
		"measurement job; you do not normally run it by hand.\n"
		"\n"
		"It reads one job, a JSON object on one line, from stdin: the backend\n"
		"(\"cpu\", the default, \"cuda\": device 0 through the CUDA driver, or\n"
		"\"torch\": KernelBench-format PyTorch models in an embedded python,\n"
		"docs/internals/torch.md),\n"
		"the arms (baseline, candidate, naive, baseline_alone) and their shared\n"
		"objects, the reference arm, the buffers, the correctness parameter sets\n"
		"and the timing one, the seeds, and the protocol's timing and correctness\n"
		"values.  It writes events to stdout, one JSON object per line, flushed:\n"
		"  hello        runner version, pid, kernel ABI version, backends\n"
		"  env          the backend, clock resolution, cpu affinity (cpu) or the\n"
		"               device and its NVML state (cuda), each arm's .so and its\n"
		"               SHA-256, the cache size and flush bytes\n"
		"  correctness  per arm, seed, parameter set and input distribution:\n"
		"               pass, max abs/rel error, first bad index, NaN count, and\n"
		"               the input-mutation, result-reuse and output-aliasing facts\n"
		"  side_stream  (cuda) per seed and arm: work left running on the device\n"
		"               after the call's event window\n"
		"  progress     (only with the job's progress_ms) a sign of life, sent\n"
		"               outside every timed window when progress_ms passed since\n"
		"               the last event\n"
		"  background   per timed group: the CPU time of the other threads and\n"
		"               processes beside it, the threads and processes counted\n"
		"  timed_begin  right before each timed group (seed, number of arms):\n"
		"               the harness times the group on its own clock from here;\n"
		"               when stdin is a socket the runner waits (at most 10 s) for\n"
		"               one byte, the harness's answer, before the group's clock\n"
		"               starts\n"
		"  samples      per seed and arm: raw per-trial times in ns, each trial's\n"
		"               round and place in it, why the seed stopped, the group's\n"
		"               span on this process's clock from its timed_begin\n"
		"               (span_ns); on cuda also whether NVML saw clock throttling\n"
		"               around the group\n"
		"  gpu_state    (cuda) per seed: clocks, throttle reasons, temperature and\n"
		"               power before and after the timing\n"
		"  error        a reason code and a message; the runner then exits\n"
		"  done         the end of a complete job\n"
		"It computes no verdict: atb's gates and statistics judge the events.\n"
		"Anything a kernel prints goes to stderr.\n"
		"\n"
		"exit status: 0 done, 2 the job was refused (bad_job), 3 the job failed\n"
		"(an error event says why).  A crashing kernel ends it by its signal.\n"
		"See docs/internals/runner.md for every field.\n");
}

/* Read stdin to the first newline or EOF, at most ATB_RUNNER_MAX_JOB_BYTES. */
static int read_job(char **out, size_t *len)
{
	size_t cap = 0, n = 0;
	char *buf = NULL;

	*out = NULL;
	for (;;) {
		ssize_t r;
		char *nl;

		if (n + 4096 + 1 > cap) {
			size_t ncap = cap ? cap * 2 : 65536;
			char *nb;

			if (ncap > ATB_RUNNER_MAX_JOB_BYTES + 1)
				ncap = ATB_RUNNER_MAX_JOB_BYTES + 1;
			if (ncap <= n + 1) {
				atb_free(buf);
				return -2;  /* too large */
			}
			nb = atb_realloc(buf, ncap);
			if (!nb) {
				atb_free(buf);
				return -1;
			}
			buf = nb;
			cap = ncap;
		}
		r = read(0, buf + n, cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			atb_free(buf);
			return -1;
		}
		if (r == 0)
			break;
		nl = memchr(buf + n, '\n', (size_t)r);
		n += (size_t)r;
		if (nl) {
			n = (size_t)(nl - buf);
			break;
		}
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
}

/*
 * After "done": wait until the harness closes its end of the channel (at
 * most 10 s), so that its reading of this process in /proc as the last
 * group's samples arrive is of a live process (gates.background, the
 * preemption bound of gate clock).  Run by hand, stdin ends at once.
 * Only after "done" (exit status OK): the harness closes its end when it
 * has read "done", so a runner that failed must not wait for it.
 */
static void linger_for_harness(void)
{
	int64_t until = atbi_monotonic_ns() + 10 * (int64_t)1000000000;
	char b[512];

	for (;;) {
		int64_t left = until - atbi_monotonic_ns();
		struct pollfd p = {.fd = 0, .events = POLLIN};
		int rc;
		ssize_t n;

		if (left <= 0)
			return;
		rc = poll(&p, 1, (int)(left / 1000000 + 1));
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc <= 0)
			return;
		n = read(0, b, sizeof(b));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
	}
}

int main(int argc, char **argv)
{
	struct atb_runner_job *job = NULL;
	struct atb_error err;
	char *text = NULL, msg[2048];
	size_t len = 0;
	int fd, rc;

	if (argc > 1) {
		if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
			usage(stdout);
			return 0;
		}
		/* an arm's worker (worker.c), started by a cpu job's runner */
		if (!strcmp(argv[1], "--worker"))
			return runner_worker_main(argc, argv);
		if (!strcmp(argv[1], "--version")) {
			printf("atb-runner %s (kernel abi %d)\n", atb_version(),
			       ATB_KERNEL_ABI_VERSION);
			return 0;
		}
		fprintf(stderr, "atb-runner: unknown argument '%s'\n", argv[1]);
		usage(stderr);
		return RUNNER_EXIT_BAD_JOB;
	}
	atb_alloc_install_json();
	/* PROTO: gates.background -- the threads before any candidate code */
	runner_background_setup();

	/* The event channel is private from here on: fd 1 belongs to stderr. */
	fflush(stdout);
	fd = dup(1);
	if (fd < 0 || dup2(2, 1) < 0 || !(events = fdopen(fd, "w"))) {
		fprintf(stderr, "atb-runner: cannot set up the event channel: %s\n",
			strerror(errno));
		return RUNNER_EXIT_FAILED;
	}

	if (runner_emit(json_pack("{s:s, s:s, s:s, s:i, s:i, s:[s,s,s]}", "event", "hello",
				  "runner", "atb-runner", "version", atb_version(),
				  "pid", (int)getpid(), "abi", ATB_KERNEL_ABI_VERSION,
				  "backends", "cpu", "cuda", "torch")))
		return RUNNER_EXIT_FAILED;

	atb_error_clear(&err);
	rc = read_job(&text, &len);
	if (rc) {
		runner_emit_error("bad_job", rc == -2 ? "job too large" : "cannot read the job");
		return RUNNER_EXIT_BAD_JOB;
	}
	if (runner_is_torch_job(text, len)) {
		rc = runner_torch_run(text, len);
		atb_free(text);
		fclose(events);
		if (rc == RUNNER_EXIT_OK)
			linger_for_harness();
		return rc;
	}
	if (atb_runner_job_parse(text, len, &job, &err)) {
		atb_error_format(&err, msg, sizeof(msg));
		runner_emit_error(err.status == ATB_ERR_NOMEM ? "nomem" : "bad_job", msg);
		atb_free(text);
		return err.status == ATB_ERR_NOMEM ? RUNNER_EXIT_FAILED : RUNNER_EXIT_BAD_JOB;
	}
	atb_free(text);
	runner_progress_setup(job->progress_ms);
	rc = job->backend == ATB_RUNNER_BACKEND_CUDA ? runner_cuda_run(job) : runner_cpu_run(job);
	atb_runner_job_free(job);
	fclose(events);
	if (rc == RUNNER_EXIT_OK)
		linger_for_harness();
	return rc;
}
