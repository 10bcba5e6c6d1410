/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Two facts about the runner process itself, for the harness to judge:
 *
 * - progress (PROTO: gates.hang): a "progress" event, at most one per
 *   job's progress_ms, from points outside every timed window (after each
 *   warm-up batch and timed round, after each correctness check): the
 *   harness's watchdog kills a runner that stops making progress long
 *   before the job's timeout.  A kernel that never returns stops them.
 *
 * - background work (PROTO: gates.background): over each timed group, the
 *   CPU time this process spent on threads other than the one that times
 *   (CLOCK_PROCESS_CPUTIME_ID minus CLOCK_THREAD_CPUTIME_ID: it keeps the
 *   time of threads that already exited), the CPU time of the other
 *   processes this one can see (in a fresh PID namespace every process but
 *   this one and its ancestors: the candidate's; otherwise its
 *   descendants; /proc/PID/schedstat's ns, else stat's ticks), counting
 *   what was reaped (cutime), and the threads and
 *   processes alive at the group's start and end.  A thread or process
 *   that burns CPU beside the timed calls slows the baseline arm and makes
 *   the candidate read faster; these numbers show it whether it sleeps
 *   while counted or exits before.
 *
 * Does not: judge (src/measure/gates.c does), or read anything inside a
 * timed window.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runner_int.h"
#include "util.h"
#include "banned.h"

/* ---- progress ----------------------------------------------------------- */

static int64_t progress_every_ns;  /* 0: no progress events */
static int64_t progress_last_ns;

void runner_progress_setup(int progress_ms)
{
	progress_every_ns = progress_ms > 0 ? (int64_t)progress_ms * 1000000 : 0;
	progress_last_ns = atbi_monotonic_ns();
}

void runner_progress_seen(void)
{
	if (progress_every_ns)
		progress_last_ns = atbi_monotonic_ns();
}

void runner_progress(void)
{
	int64_t now;

	if (!progress_every_ns)
		return;
	now = atbi_monotonic_ns();
	if (now - progress_last_ns < progress_every_ns)
		return;
	/* runner_emit sets progress_last_ns; a failed write ends the job elsewhere */
	(void)runner_emit(json_pack("{s:s}", "event", "progress"));
}

/* ---- background work ------------------------------------------------------ */

static int64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	if (clock_gettime(id, &ts))
		return -1;
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int count_tasks(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

/* In a PID namespace of its own (NSpid lists more than one pid)? */
static int in_pid_namespace(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	int fields = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "NSpid:", 6)) {
			char *p = line + 6, *end;

			for (;;) {
				(void)strtol(p, &end, 10);
				if (end == p)
					break;
				fields++;
				p = end;
			}
			break;
		}
	fclose(f);
	return fields > 1;
}

/* One process's stat fields that matter here, in ns. */
struct pstat {
	long pid, ppid;
	long long self_ns;      /* its CPU time: schedstat's (ns), else utime + stime */
	long long children_ns;  /* cutime + cstime: reaped children (10 ms ticks) */
};

static long long tick_ns = 10000000;  /* sysconf(_SC_CLK_TCK) in runner_background_setup */

static int read_stat(long pid, struct pstat *ps)
{
	char path[64], buf[1024], *p;
	FILE *f;
	size_t n;
	unsigned long long ut, st;
	long long cut, cst;
	int ppid;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* the command may hold spaces and parentheses: fields follow the last ')' */
	p = strrchr(buf, ')');
	if (!p)
		return -1;
	/* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime */
	if (sscanf(p + 1, " %*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld", &ppid,
		   &ut, &st, &cut, &cst) != 5)
		return -1;
	ps->pid = pid;
	ps->ppid = ppid;
	ps->self_ns = (long long)(ut + st) * tick_ns;
	ps->children_ns = (cut + cst) * tick_ns;
	/*
	 * The time on the CPU in ns where the kernel keeps it: stat's ticks are
	 * truncated at every reading, so k processes could each hide up to a
	 * tick a group; the reaped children's sum is converted once.
	 */
	snprintf(path, sizeof(path), "/proc/%ld/schedstat", pid);
	f = fopen(path, "r");
	if (f) {
		unsigned long long run_ns;

		if (fscanf(f, "%llu", &run_ns) == 1 && (long long)run_ns >= ps->self_ns - tick_ns)
			ps->self_ns = (long long)run_ns;
		fclose(f);
	}
	return 0;
}

#define MAX_PROCS 4096

/*
 * The other processes' CPU ticks and count.  In a PID namespace: every
 * process but this one and its ancestors, plus what this process and its
 * ancestors reaped (an orphan is reaped by the namespace's first process).
 * Outside one: this process's descendants, plus what it reaped.
 */
static void scan_processes(int pidns, long long *total_ns, int *count)
{
	static struct pstat ps[MAX_PROCS];
	long self = (long)getpid(), anc[64];
	size_t n = 0, i, j, nanc = 0;
	struct dirent *de;
	long long t = 0;
	int c = 0;
	DIR *d = opendir("/proc");

	*total_ns = -1;
	*count = -1;
	if (!d)
		return;
	while ((de = readdir(d)) && n < MAX_PROCS) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		if (!read_stat(strtol(de->d_name, NULL, 10), &ps[n]))
			n++;
	}
	closedir(d);
	/* this process and its ancestors, as far as the view goes */
	anc[nanc++] = self;
	for (j = 0; j < 64 && nanc < 64; j++) {
		long up = -1;

		for (i = 0; i < n; i++)
			if (ps[i].pid == anc[nanc - 1])
				up = ps[i].ppid;
		if (up <= 0)
			break;
		anc[nanc++] = up;
	}
	for (i = 0; i < n; i++) {
		int ancestor = 0, mine = 0;
		long p = ps[i].pid;
		size_t k;

		for (k = 0; k < nanc; k++)
			ancestor |= anc[k] == p;
		if (ancestor) {
			/* what they reaped, but not this process's own time (its
			   parent reaps it only when the job is over) */
			if (p == self || pidns)
				t += ps[i].children_ns;
			continue;
		}
		if (pidns) {
			mine = 1;
		} else {
			/* a descendant: the ppid chain reaches this process */
			long q = ps[i].ppid;

			for (k = 0; k < 64 && q > 1 && !mine; k++) {
				size_t m;
				long up = -1;

				if (q == self) {
					mine = 1;
					break;
				}
				for (m = 0; m < n; m++)
					if (ps[m].pid == q)
						up = ps[m].ppid;
				q = up;
			}
		}
		if (mine) {
			t += ps[i].self_ns + ps[i].children_ns;
			c++;
		}
	}
	*total_ns = t;
	*count = c;
}

static int base_threads = -1;
static int pidns = -1;
static long trusted[RUNNER_MAX_TRUSTED];
static size_t ntrusted;

void runner_background_trust(const long *tids, size_t n)
{
	for (ntrusted = 0; ntrusted < n && ntrusted < RUNNER_MAX_TRUSTED; ntrusted++)
		trusted[ntrusted] = tids[ntrusted];
}

/* The trusted threads' CPU (schedstat ns), the timing thread's left out; -1: none trusted. */
static long long trusted_cpu_ns(void)
{
	/* the timing thread, the process's first (its id is the pid): its own
	   time is not in "other"; were the timing done elsewhere, the first
	   thread's time would count as untrusted, the safe side */
	long self = (long)getpid();
	long long t = 0;
	size_t i;

	if (!ntrusted)
		return -1;
	for (i = 0; i < ntrusted; i++) {
		char path[64];
		unsigned long long ns;
		FILE *f;

		if (trusted[i] == self)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%ld/schedstat", trusted[i]);
		/* a trusted thread gone: its time since the start is counted as
		   untrusted (the safe side; PyTorch's pools live as long as it) */
		if (!(f = fopen(path, "re")))
			continue;
		if (fscanf(f, "%llu", &ns) == 1)
			t += (long long)ns;
		fclose(f);
	}
	return t;
}

static long worker_pids[RUNNER_MAX_WORKERS];
static size_t nworkers;

void runner_background_workers(const struct runner_worker *w, size_t n)
{
	for (nworkers = 0; nworkers < n && nworkers < RUNNER_MAX_WORKERS; nworkers++)
		worker_pids[nworkers] = (long)w[nworkers].pid;
}

/*
 * The workers' first threads' CPU (schedstat ns): each one runs its arm's
 * calls as the runner's first thread used to, so it is not "other"
 * processes' time.  Their other threads (the candidate's) still are.
 * -1: no workers.
 */
static long long workers_cpu_ns(void)
{
	long long t = 0;
	size_t i;

	if (!nworkers)
		return -1;
	for (i = 0; i < nworkers; i++) {
		char path[96];
		unsigned long long ns;
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%ld/task/%ld/schedstat", worker_pids[i],
			 worker_pids[i]);
		if (!(f = fopen(path, "re")))
			continue;
		if (fscanf(f, "%llu", &ns) == 1)
			t += (long long)ns;
		fclose(f);
	}
	return t;
}

void runner_background_setup(void)
{
	long hz = sysconf(_SC_CLK_TCK);

	if (hz > 0)
		tick_ns = 1000000000LL / hz;
	if (base_threads < 0)
		base_threads = count_tasks();
	if (pidns < 0)
		pidns = in_pid_namespace();
}

void runner_background_begin(struct runner_background *b)
{
	memset(b, 0, sizeof(*b));
	runner_background_setup();
	b->threads_start = count_tasks();
	scan_processes(pidns, &b->proc_ns0, &b->processes_start);
	b->wall0_ns = atbi_monotonic_ns();
	b->process0_ns = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	b->thread0_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	b->trusted_ns0 = trusted_cpu_ns();
	b->workers_ns0 = workers_cpu_ns();
	b->on = 1;
}

json_t *runner_background_end(struct runner_background *b, uint64_t seed, const char *group)
{
	int64_t wall = atbi_monotonic_ns(), proc = clock_ns(CLOCK_PROCESS_CPUTIME_ID),
		thr = clock_ns(CLOCK_THREAD_CPUTIME_ID), other = -1;
	long long ns1 = -1, oproc = -1, tr1 = trusted_cpu_ns(), wk1 = workers_cpu_ns(), wk = -1;
	int threads = count_tasks(), procs = -1;
	json_t *ev;

	if (!b->on)
		return NULL;
	scan_processes(pidns, &ns1, &procs);
	if (proc >= 0 && thr >= 0 && b->process0_ns >= 0 && b->thread0_ns >= 0)
		other = (proc - b->process0_ns) - (thr - b->thread0_ns);
	if (other < 0 && proc >= 0)
		other = 0;  /* the two clocks' rounding */
	if (ns1 >= 0 && b->proc_ns0 >= 0)
		oproc = ns1 - b->proc_ns0;
	if (b->workers_ns0 >= 0 && wk1 >= 0) {
		wk = wk1 - b->workers_ns0;
		if (oproc >= 0)
			oproc -= wk;
	}
	if (oproc < 0 && ns1 >= 0)
		oproc = 0;  /* a process gone with time not yet reaped into view */
	b->on = 0;
	ev = json_pack("{s:s, s:I, s:s, s:I, s:I, s:I, s:I, s:i, s:i, s:i, s:i, s:i, s:b}",
			 "event", "background", "seed", (json_int_t)seed, "group", group,
			 "wall_ns", (json_int_t)(wall - b->wall0_ns),
			 "timing_thread_cpu_ns", (json_int_t)(thr - b->thread0_ns),
			 "other_threads_cpu_ns", (json_int_t)other,
			 "other_processes_cpu_ns", (json_int_t)oproc,
			 "threads_at_start", base_threads, "threads_group_start", b->threads_start,
			 "threads_group_end", threads, "processes_group_start", b->processes_start,
			 "processes_group_end", procs, "pid_namespace", pidns > 0);
	/* PROTO: gates.background -- the torch backend: other threads less the
	   ones there before any candidate code */
	if (ev && ntrusted && b->trusted_ns0 >= 0 && tr1 >= 0 && other >= 0) {
		long long u = other - (tr1 - b->trusted_ns0);

		json_object_set_new(ev, "untrusted_threads_cpu_ns", json_integer(u > 0 ? u : 0));
		json_object_set_new(ev, "trusted_threads", json_integer((json_int_t)ntrusted));
	}
	if (ev && wk >= 0)
		json_object_set_new(ev, "worker_threads_cpu_ns", json_integer(wk));
	return ev;
}
