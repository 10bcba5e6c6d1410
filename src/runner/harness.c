/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The harness side of atb-runner: spawn one fresh runner per job in its own
 * process group, hand it the job over a socket (send with MSG_NOSIGNAL, so a
 * runner that dies early cannot kill the harness with SIGPIPE), read its
 * events line by line under poll() with the wall-clock timeout, kill the
 * whole group when the time is up or anything goes wrong, and reap it.
 * Judges nothing: events go to the caller's callback as they come.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "atb/alloc.h"
#include "atb/proc.h"
#include "atb/runner.h"
#include "util.h"
#include "banned.h"

#define MAX_EVENT_LINE_BYTES (64u << 20)

const char *atb_runner_end_name(enum atb_runner_end e)
{
	static const char *const names[] = {"done", "error", "exit", "signal",
					    "timeout", "malformed", "aborted",
					    "spawn_failed", "hang"};

	return (unsigned)e < sizeof(names) / sizeof(names[0]) ? names[e] : "?";
}

void atb_runner_signal_name(int sig, char *buf, size_t size)
{
	static const struct { int sig; const char *name; } names[] = {
		{SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"}, {SIGFPE, "SIGFPE"},
		{SIGILL, "SIGILL"}, {SIGABRT, "SIGABRT"}, {SIGKILL, "SIGKILL"},
		{SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"}, {SIGPIPE, "SIGPIPE"},
		{SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"},
		{SIGTRAP, "SIGTRAP"}, {SIGHUP, "SIGHUP"}, {SIGQUIT, "SIGQUIT"},
		{SIGALRM, "SIGALRM"}, {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"},
	};
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].sig == sig) {
			snprintf(buf, size, "%s", names[i].name);
			return;
		}
	snprintf(buf, size, "SIG%d", sig);
}

enum atb_status atb_runner_find(char *buf, size_t size, struct atb_error *err)
{
	const char *env = getenv("ATB_RUNNER");
	char self[PATH_MAX];
	ssize_t n;
	char *slash;
	int w;

	if (env && *env) {
		w = snprintf(buf, size, "%s", env);
		if (w < 0 || (size_t)w >= size)
			return atb_error_set(err, ATB_ERR_USAGE, "runner path too long");
		if (access(buf, X_OK))
			return atb_error_set(err, ATB_ERR_NOT_FOUND,
					     "cannot run atb-runner '%s' (from ATB_RUNNER): %s",
					     buf, strerror(errno));
		return ATB_OK;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return atb_error_set(err, ATB_ERR_NOT_FOUND,
				     "cannot find atb-runner: /proc/self/exe unreadable; set ATB_RUNNER");
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	w = snprintf(buf, size, "%s/atb-runner", slash ? self : ".");
	if (w < 0 || (size_t)w >= size)
		return atb_error_set(err, ATB_ERR_USAGE, "runner path too long");
	if (access(buf, X_OK))
		return atb_error_set(err, ATB_ERR_NOT_FOUND,
				     "cannot find atb-runner '%s': %s; set ATB_RUNNER",
				     buf, strerror(errno));
	return ATB_OK;
}

/* A growable line buffer with a hard maximum. */
struct linebuf {
	char *p;
	size_t len, cap;
};

static int linebuf_add(struct linebuf *b, const char *data, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *np;

		while (cap < b->len + n + 1)
			cap *= 2;
		if (cap > MAX_EVENT_LINE_BYTES)
			return -1;
		np = atb_realloc(b->p, cap);
		if (!np)
			return -1;
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

struct run {
	struct atb_runner_outcome *out;
	atb_runner_event_fn on_event;
	void *ctx;
	struct linebuf lines;
	int got_done;
	int got_error;
	enum atb_status cb_status;
	json_t *sandbox_facts;  /* what the job's sandbox enforced (the harness's word) */
	FILE *events_log;       /* $ATB_RUNNER_EVENTS_LOG: every event line, a diagnostic */
	/* PROTO: gates.hang -- the watchdog's view */
	int64_t last_ns;        /* when the last event came */
	int seen_env;           /* the runtime is up: silences count from here */
	int started;            /* the candidate's first call returned: startup is over */
	/* PROTO: gates.background -- the job tree's CPU time, read from outside */
	pid_t root;             /* the child we started (bwrap, or the runner itself) */
	long runner_nspid;      /* the runner's pid in its namespace (its hello, before any candidate code) */
	pid_t runner_pid;       /* ... and here; 0: not found yet */
	/* the cpu backend's arm workers (runner/worker.c): the runner names
	   them; no candidate code runs in a cpu job's runner, so its word
	   stands.  Each one's first thread times like the runner's. */
	int cpu_job;            /* a cpu job with workers: a "workers" event is believed */
	/* the arms' and the round trip's (PROTO: timing.round_trip) */
	long worker_nspid[ATB_RUNNER_MAX_ARMS + 1];
	pid_t worker_pid[ATB_RUNNER_MAX_ARMS + 1];    /* ... and here; 0: not found yet */
	int nworkers;
	int in_group;           /* a timed_begin came and no samples yet */
	int answer_fd;          /* the runner's stdin: a byte per timed_begin (gates.clock) */
	int64_t recv_ns;        /* when the bytes that ended the line being handled came */
	struct tree_cpu { int64_t wall_ns; long long total_ns, main_ns; int procs; int ok; } tb;
};

/* ---- the job tree's CPU time, from outside it (PROTO: gates.background) ---- */

#define TREE_MAX 4096

struct tstat {
	long pid, ppid, nspid;
	long long ns;  /* utime + stime + cutime + cstime */
};

static int tree_stat(long pid, struct tstat *t, long long tick_ns)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	long long cut, cst;
	int ppid;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	if (!(f = fopen(path, "r")))
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	if (!(p = strrchr(buf, ')')) ||
	    sscanf(p + 1, " %*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld", &ppid,
		   &ut, &st, &cut, &cst) != 5)
		return -1;
	t->pid = pid;
	t->ppid = ppid;
	t->ns = ((long long)(ut + st) + cut + cst) * tick_ns;
	t->nspid = -1;
	return 0;
}

/* The last pid of NSpid in /proc/PID/status: the pid in its own namespace. */
static long ns_pid(long pid)
{
	char path[64], line[256];
	long last = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/status", pid);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "NSpid:", 6)) {
			char *q = line + 6, *end;
			long v;

			for (;;) {
				v = strtol(q, &end, 10);
				if (end == q)
					break;
				last = v;
				q = end;
			}
			break;
		}
	fclose(f);
	return last;
}

static long long thread_ns(pid_t pid)
{
	char path[96];
	unsigned long long ns = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int)pid, (int)pid);
	if (!(f = fopen(path, "r")))
		return -1;
	if (fscanf(f, "%llu", &ns) != 1)
		ns = 0;
	fclose(f);
	return (long long)ns;
}

/* Push the children of every thread of pid (/proc/PID/task/TID/children). */
static size_t push_children(long pid, long *q, size_t n, size_t cap)
{
	char path[96];
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%ld/task", pid);
	if (!(d = opendir(path)))
		return n;
	while ((de = readdir(d)) && n < cap) {
		char cpath[160];
		FILE *f;
		long c;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(cpath, sizeof(cpath), "/proc/%ld/task/%.20s/children", pid, de->d_name);
		if (!(f = fopen(cpath, "r")))
			continue;
		while (n < cap && fscanf(f, "%ld", &c) == 1)
			q[n++] = c;
		fclose(f);
	}
	closedir(d);
	return n;
}

/*
 * Every process under r->root (and it), walked down through the kernel's
 * children lists (a few files, not all of /proc: this runs between the
 * events the clock gate stamps): their CPU time (reaped children's
 * included, so none is lost when one exits), their count, and the runner's
 * timing (main) thread's CPU time.  ok 0 when /proc cannot tell.
 */
static void tree_read(struct run *r, struct tree_cpu *t)
{
	static long q[TREE_MAX];
	long hz = sysconf(_SC_CLK_TCK);
	long long tick_ns = hz > 0 ? 1000000000LL / hz : 10000000;
	size_t n = 0, i;

	memset(t, 0, sizeof(*t));
	t->wall_ns = atbi_monotonic_ns();
	if (r->root <= 0)
		return;
	q[n++] = (long)r->root;
	for (i = 0; i < n; i++) {
		struct tstat ps;

		if (tree_stat(q[i], &ps, tick_ns))
			continue;
		t->total_ns += ps.ns;
		t->procs++;
		/* the runner: the process whose own pid is the one its hello
		   gave (a forked copy has another; bwrap's init is pid 1) */
		if (!r->runner_pid && r->runner_nspid > 1 && ns_pid(q[i]) == r->runner_nspid)
			r->runner_pid = (pid_t)q[i];
		for (int w = 0; w < r->nworkers; w++)
			if (!r->worker_pid[w] && (long)q[i] != (long)r->runner_pid &&
			    ns_pid(q[i]) == r->worker_nspid[w])
				r->worker_pid[w] = (pid_t)q[i];
		n = push_children(q[i], q, n, TREE_MAX);
	}
	if (r->runner_pid > 0) {
		t->main_ns = thread_ns(r->runner_pid);
		t->ok = t->main_ns >= 0;
		/* a worker's first thread: a gone worker's time stays "other" */
		for (int w = 0; t->ok && w < r->nworkers; w++) {
			long long ns = r->worker_pid[w] > 0 ? thread_ns(r->worker_pid[w]) : -1;

			if (ns >= 0)
				t->main_ns += ns;
		}
	}
}

static const char *jsonp_str(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

/* The last event, for the watchdog's message: "correctness seed 3 arm candidate set 'small'". */
static void note_event(struct run *r, const json_t *ev, const char *kind)
{
	char *o = r->out->stalled_after;
	size_t size = sizeof(r->out->stalled_after), n;
	const json_t *seed = json_object_get(ev, "seed");
	const char *arm = json_string_value(json_object_get(ev, "arm"));
	const char *set = json_string_value(json_object_get(ev, "set"));

	n = (size_t)snprintf(o, size, "%.40s", kind);
	if (json_is_integer(seed) && n < size)
		n += (size_t)snprintf(o + n, size - n, " seed %lld",
				      (long long)json_integer_value(seed));
	if (arm && n < size)
		n += (size_t)snprintf(o + n, size - n, " arm %.32s", arm);
	if (set && n < size)
		snprintf(o + n, size - n, " set '%.32s'", set);
}

static void keep_tail(char *tail, size_t size, const char *data, size_t n)
{
	size_t have = strlen(tail), keep;

	if (n >= size - 1) {
		memcpy(tail, data + n - (size - 1), size - 1);
		tail[size - 1] = '\0';
		return;
	}
	keep = have + n < size ? have : size - 1 - n;
	memmove(tail, tail + have - keep, keep);
	memcpy(tail + keep, data, n);
	tail[keep + n] = '\0';
}

/*
 * Handle every complete line in the buffer.  Returns 0 to go on, or the
 * end to stop with (malformed or aborted).
 */
static int take_lines(struct run *r, struct atb_error *err, enum atb_status *st)
{
	char *start = r->lines.p, *nl;

	while (r->lines.len && (nl = memchr(start, '\n', r->lines.len - (size_t)(start - r->lines.p)))) {
		json_error_t je;
		json_t *ev, *kind;
		size_t n = (size_t)(nl - start);

		if (n == 0) {
			start = nl + 1;
			continue;
		}
		if (r->events_log) {
			fwrite(start, 1, n, r->events_log);
			fputc('\n', r->events_log);
		}
		ev = json_loadb(start, n, JSON_REJECT_DUPLICATES, &je);
		kind = ev ? json_object_get(ev, "event") : NULL;
		if (!ev || !json_is_object(ev) || !json_is_string(kind)) {
			snprintf(r->out->detail, sizeof(r->out->detail), "%.*s",
				 (int)(n > 200 ? 200 : n), start);
			json_decref(ev);
			*st = atb_error_set(err, ATB_ERR_PARSE,
					    "malformed event line %zu from atb-runner: %s",
					    r->out->nevents + 1,
					    ev ? "not an event object" : je.text);
			return ATB_RUNNER_MALFORMED;
		}
		/* PROTO: gates.hang -- a sign of life, the watchdog's only */
		if (!strcmp(json_string_value(kind), "progress")) {
			r->out->nprogress++;
			json_decref(ev);
			start = nl + 1;
			continue;
		}
		/* startup ends when the candidate's first call has returned (a
		   first call may compile or build a library: torch.compile, cuBLAS,
		   a JIT), or timing begins (a job without a candidate) */
		if (!strcmp(json_string_value(kind), "env"))
			r->seen_env = 1;
		/* PROTO: gates.background -- hello comes before any candidate code */
		if (!strcmp(json_string_value(kind), "hello") && !r->runner_nspid)
			r->runner_nspid = (long)json_integer_value(json_object_get(ev, "pid"));
		if (!strcmp(json_string_value(kind), "workers") && r->cpu_job && !r->nworkers &&
		    !r->in_group) {
			const json_t *pids = json_object_get(ev, "pids");
			size_t k;

			for (k = 0; k < json_array_size(pids) && k < ATB_RUNNER_MAX_ARMS + 1; k++) {
				r->worker_nspid[k] = (long)json_integer_value(json_array_get(pids, k));
				r->worker_pid[k] = 0;
			}
			r->nworkers = (int)k;
		}
		/* PROTO: gates.clock -- the arrival, stamped before anything this
		   harness does with the line (the /proc reading below) */
		if ((!strcmp(json_string_value(kind), "timed_begin") ||
		     !strcmp(json_string_value(kind), "samples")) &&
		    json_object_set_new(ev, "harness_received_ns", json_integer(r->recv_ns))) {
			json_decref(ev);
			*st = atb_error_set(err, ATB_ERR_NOMEM, "cannot stamp an event: out of memory");
			return ATB_RUNNER_ABORTED;
		}
		if (!strcmp(json_string_value(kind), "timed_begin")) {
			tree_read(r, &r->tb);
			r->in_group = 1;
			/* PROTO: gates.clock -- stamped and read: the runner starts
			   the group's span on this byte (runner/check.c
			   wait_for_harness), so this span holds the runner's */
			if (r->answer_fd >= 0)
				(void)send(r->answer_fd, "\n", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
		}
		if (!strcmp(json_string_value(kind), "samples") && r->in_group) {
			struct tree_cpu now;

			tree_read(r, &now);
			r->in_group = 0;
			if (r->tb.ok) {
				int64_t wall = now.wall_ns - r->tb.wall_ns;
				/* the runner already gone (its time is in its reaper's
				   cutime): its timing thread had at most the wall time,
				   so the rest is a lower bound of the others' */
				long long main = now.ok ? now.main_ns - r->tb.main_ns : (long long)wall;
				long long other = (now.total_ns - r->tb.total_ns) - main;

				json_object_set_new(ev, "harness_background",
						    json_pack("{s:I, s:I, s:I, s:i, s:b}", "wall_ns",
							      (json_int_t)wall, "other_cpu_ns",
							      (json_int_t)(other > 0 ? other : 0),
							      "timing_thread_cpu_ns", (json_int_t)main,
							      "job_processes", now.procs,
							      "runner_gone", !now.ok));
			}
		}
		if ((!strcmp(json_string_value(kind), "correctness") &&
		     !strcmp(jsonp_str(ev, "arm"), "candidate")) ||
		    !strcmp(json_string_value(kind), "timed_begin") ||
		    !strcmp(json_string_value(kind), "samples") ||
		    !strcmp(json_string_value(kind), "done"))
			r->started = 1;
		note_event(r, ev, json_string_value(kind));
		r->out->nevents++;
		/* the sandbox facts are the harness's, over anything the runner says */
		if (!strcmp(json_string_value(kind), "env") && r->sandbox_facts)
			json_object_set(ev, "sandbox", r->sandbox_facts);
		/* and where the arms ran, as the harness asked (issue 11): a cpu
		   job's workers, or the runner's own process */
		if (!strcmp(json_string_value(kind), "env"))
			json_object_set_new(ev, "isolation",
					    json_string(r->cpu_job ? "process" : "none"));
		if (!strcmp(json_string_value(kind), "done"))
			r->got_done = 1;
		if (!strcmp(json_string_value(kind), "error")) {
			const char *reason = json_string_value(json_object_get(ev, "reason"));
			const char *msg = json_string_value(json_object_get(ev, "message"));

			r->got_error = 1;
			snprintf(r->out->reason, sizeof(r->out->reason), "%s", reason ? reason : "");
			snprintf(r->out->detail, sizeof(r->out->detail), "%s", msg ? msg : "");
		}
		if (r->on_event) {
			enum atb_status cs = r->on_event(ev, r->ctx);

			if (cs) {
				json_decref(ev);
				r->cb_status = cs;
				*st = cs;
				if (err && err->status != cs)
					atb_error_set(err, cs, "event callback stopped the runner");
				return ATB_RUNNER_ABORTED;
			}
		}
		json_decref(ev);
		start = nl + 1;
	}
	/* Keep the incomplete tail at the front. */
	if (start != r->lines.p) {
		size_t rest = r->lines.len - (size_t)(start - r->lines.p);

		memmove(r->lines.p, start, rest);
		r->lines.len = rest;
		r->lines.p[rest] = '\0';
	}
	return 0;
}

/* ---- the sandbox a job runs in ---------------------------------------- */

/* What of the caller's environment a runner may see (no store, no keys). */
static const char *const pass_env[] = {
	"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES",
	"NVIDIA_DRIVER_CAPABILITIES", "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
	"OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "ASAN_OPTIONS",
	"UBSAN_OPTIONS", "LSAN_OPTIONS", "ATB_RUNNER_PHASES_LOG", "PYTORCH_CUDA_ALLOC_CONF",
	"CUBLAS_WORKSPACE_CONFIG", NULL,
};

/*
 * The view of one job: the runner itself, each arm's object (or python
 * file), the job's interpreter for kind torch, the GPU's device nodes for
 * cuda and torch, read-only; a fresh scratch folder read-write.  Nothing
 * else of the caller's files: not the store, not ATB_HOME, not the task.
 */
/*
 * PROTO: sandbox -- the tasks (processes and threads) a job may have at
 * once.  Far above what an honest job needs (the runner, PyTorch's thread
 * pools, torch.compile's worker processes on a 128-core host: some
 * hundreds) and far below what starves the machine (pid_max is 32768 by
 * default): a fork bomb stops here, and the job is ended as soon as the
 * harness sees a fork refused (process_limit).
 */
#define RUNNER_MAX_TASKS 4096

/* ATB_SANDBOX_MAX_TASKS, when set: another limit (the tests' fork bomb). */
static enum atb_status max_tasks_from_env(uint64_t *n, struct atb_error *err)
{
	const char *v = getenv("ATB_SANDBOX_MAX_TASKS");
	char *end = NULL;
	unsigned long long x;

	if (!v || !*v)
		return ATB_OK;
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || *end || x < 16 || x > 1000000)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "bad ATB_SANDBOX_MAX_TASKS '%.40s': expected 16 to 1000000", v);
	*n = x;
	return ATB_OK;
}

static enum atb_status job_sandbox(const char *runner_path, const json_t *job,
				   double timeout_s, const char *scratch, struct atb_sandbox **out,
				   struct atb_error *err)
{
	const json_t *arms = json_object_get(job, "arms"), *a, *torch, *py;
	const char *backend = json_string_value(json_object_get(job, "backend"));
	int gpu = backend && (!strcmp(backend, "cuda") || !strcmp(backend, "torch"));
	const char *phases = getenv("ATB_RUNNER_PHASES_LOG"), *ldp = getenv("LD_LIBRARY_PATH");
	struct atb_sandbox_limits lim = {0};
	struct atb_sandbox *sb = NULL;
	enum atb_sandbox_mode mode;
	enum atb_status st;
	size_t i;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

	*out = NULL;
	if ((st = atb_sandbox_mode_from_env(&mode, err)) ||
	    (st = atb_sandbox_new(mode, scratch, &sb, err)))
		return st;
	st = atb_sandbox_ro(sb, runner_path, err);
	/* a runner carried with its libraries (scripts/gpu-check: RPATH $ORIGIN/../lib) */
	if (!st) {
		char lib[4200], *slash;

		snprintf(lib, sizeof(lib), "%s", runner_path);
		slash = strrchr(lib, '/');
		if (slash) {
			snprintf(slash, sizeof(lib) - (size_t)(slash - lib), "/../lib");
			if (access(lib, F_OK) == 0)
				st = atb_sandbox_ro(sb, lib, err);
		}
	}
	/* "so": a shared object; "py": kind torch's python file */
	json_array_foreach(arms, i, a) {
		const char *so = json_string_value(json_object_get(a, "so"));
		const char *py_file = json_string_value(json_object_get(a, "py"));

		if (!st && so && so[0] == '/')
			st = atb_sandbox_ro(sb, so, err);
		if (!st && py_file && py_file[0] == '/')
			st = atb_sandbox_ro(sb, py_file, err);
	}
	torch = json_object_get(job, "torch");
	py = json_object_get(torch, "python");
	if (!st && py) {
		const char *mod = json_string_value(json_object_get(torch, "module_path"));

		st = atb_sandbox_python(sb, py, err);
		if (!st && mod && mod[0] == '/')
			st = atb_sandbox_ro(sb, mod, err);
	}
	if (!st)
		st = atb_sandbox_ro(sb, "/sys", err);
	if (!st && gpu) {
		glob_t g;

		if (glob("/dev/nvidia*", 0, NULL, &g) == 0) {
			for (i = 0; !st && i < g.gl_pathc; i++)
				st = atb_sandbox_dev(sb, g.gl_pathv[i], err);
			globfree(&g);
		}
	}
	if (!st)
		st = atb_sandbox_ro_list(sb, ldp, err);
	if (!st && phases && phases[0] == '/') {
		char dir[4096], *slash;

		snprintf(dir, sizeof(dir), "%s", phases);
		slash = strrchr(dir, '/');
		if (slash && slash != dir) {
			*slash = '\0';
			st = atb_sandbox_rw(sb, dir, err);
		}
	}
	if (!st)
		st = atb_sandbox_pass_env(sb, pass_env, err);
	/* Backstops only: the harness's deadline ends the job first. */
	lim.cpu_s = (uint64_t)((timeout_s > 0 ? timeout_s : 600) * (double)(ncpu > 0 ? ncpu : 1)) + 60;
	lim.fsize_bytes = (uint64_t)1 << 30;
	lim.nofile = 8192;
	lim.nproc = RUNNER_MAX_TASKS;
	if (!st)
		st = max_tasks_from_env(&lim.nproc, err);
	atb_sandbox_set_limits(sb, &lim);
	if (st) {
		atb_sandbox_free(sb);
		return st;
	}
	*out = sb;
	return ATB_OK;
}

/* A copy of the job whose arms' objects and module path are absolute (NULL: memory). */
static json_t *absolute_job(const json_t *job)
{
	json_t *j = json_deep_copy(job), *a, *torch;
	char cwd[4096], path[8200];
	size_t i;

	if (!j || !getcwd(cwd, sizeof(cwd)))
		return j;
	json_array_foreach(json_object_get(j, "arms"), i, a) {
		static const char *const keys[] = {"so", "py"};
		size_t k;

		for (k = 0; k < 2; k++) {
			const char *f = json_string_value(json_object_get(a, keys[k]));

			if (f && f[0] != '/') {
				snprintf(path, sizeof(path), "%s/%s", cwd, f);
				json_object_set_new(a, keys[k], json_string(path));
			}
		}
	}
	torch = json_object_get(j, "torch");
	if (json_is_string(json_object_get(torch, "module_path"))) {
		const char *m = json_string_value(json_object_get(torch, "module_path"));

		if (m[0] != '/') {
			snprintf(path, sizeof(path), "%s/%s", cwd, m);
			json_object_set_new(torch, "module_path", json_string(path));
		}
	}
	return j;
}

enum atb_status atb_runner_run(const char *runner_path, const json_t *job, double timeout_s,
			       atb_runner_event_fn on_event, void *ctx,
			       struct atb_runner_outcome *out, struct atb_error *err)
{
	return atb_runner_run_watched(runner_path, job, timeout_s, NULL, on_event, ctx, out, err);
}

/*
 * PROTO: gates.hang -- the silence allowed now: startup_s until startup is
 * over (the candidate's first call returned, or timing began), then
 * max(min_s, factor x the longest silence so far, every silence after the
 * "env" event counted, startup's too); INT64_MAX: none.
 */
static int64_t watch_limit_ns(const struct atb_runner_watch *w, const struct run *r)
{
	double lim;

	if (!w)
		return INT64_MAX;
	if (!r->started)
		return w->startup_s > 0 ? (int64_t)(w->startup_s * 1e9) : INT64_MAX;
	if (!(w->min_s > 0) && !(w->factor > 0))
		return INT64_MAX;
	lim = w->min_s > 0 ? w->min_s : 0;
	if (w->factor > 0 && w->factor * r->out->longest_gap_s > lim)
		lim = w->factor * r->out->longest_gap_s;
	return (int64_t)(lim * 1e9);
}

/*
 * PROTO: timing.placement -- the key the torch runner draws its pads from
 * (python/atb_torch/runner.py): one per atb process, from the kernel's
 * CSPRNG, so the candidate cannot know its pads before the job, while
 * the paired and the baseline-alone runners of one measurement draw the
 * same pads for the same (seed, model).  A job that has one keeps it.
 */
static int add_placement_key(json_t *job)
{
	static char hex[33];
	json_t *t = json_object_get(job, "timing");

	if (!json_is_object(t) || json_object_get(t, "placement_key"))
		return 0;
	if (!hex[0]) {
		unsigned char k[16];
		size_t i;

		if (getrandom(k, sizeof(k), 0) != (ssize_t)sizeof(k))
			return 0;  /* the runner draws its own (os.urandom) */
		for (i = 0; i < sizeof(k); i++)
			snprintf(hex + 2 * i, 3, "%02x", k[i]);
	}
	return json_object_set_new(t, "placement_key", json_string(hex)) ? -1 : 0;
}

/* The job reached its process limit: an error "process_limit" (gate runner). */
static int limit_reached(struct atb_runner_outcome *out, long hits, enum atb_status *st,
			 struct atb_error *err)
{
	uint64_t max = RUNNER_MAX_TASKS;
	struct atb_error ignored;

	(void)max_tasks_from_env(&max, &ignored);
	snprintf(out->reason, sizeof(out->reason), "process_limit");
	snprintf(out->detail, sizeof(out->detail),
		 "the job reached its process limit (%llu tasks at once, PROTO: sandbox): %ld "
		 "fork%s refused, the job killed; a fork bomb", (unsigned long long)max, hits,
		 hits == 1 ? "" : "s");
	*st = atb_error_set(err, ATB_ERR_CHECK, "atb-runner reported '%s': %s", out->reason,
			    out->detail);
	return ATB_RUNNER_ERROR;
}

enum atb_status atb_runner_run_watched(const char *runner_path, const json_t *job,
				       double timeout_s, const struct atb_runner_watch *watch,
				       atb_runner_event_fn on_event, void *ctx,
				       struct atb_runner_outcome *out, struct atb_error *err)
{
	struct run r = {0};
	const char *job_backend = json_string_value(json_object_get(job, "backend"));
	const json_t *job_opt = json_object_get(job, "options");
	int sv[2] = {-1, -1}, ep[2] = {-1, -1};
	char *text = NULL, scratch[4096] = "";
	size_t text_len, sent = 0;
	int64_t t0 = atbi_monotonic_ns(), deadline;
	enum atb_status st = ATB_OK;
	int end = -1, status = 0, sock_open = 1, err_open = 1, wr_open = 1, wr_shut = 0;
	struct atb_sandbox *sb = NULL;
	struct atb_proc proc = {.pid = -1};
	json_t *sent_job = NULL;
	char runner_abs[4200];
	const char *argv[2] = {runner_path, NULL};
	pid_t pid;
	long hits;
	int64_t limit_seen_ns = 0;

	memset(out, 0, sizeof(*out));
	out->exit_code = -1;
	out->end = ATB_RUNNER_SPAWN_FAILED;
	r.out = out;
	r.on_event = on_event;
	r.ctx = ctx;
	atb_alloc_install_json();
	/* A diagnostic (docs/internals/runner.md): the runner's raw events as they
	 * came, for studies of the timing (positions, clocks) no result keeps. */
	{
		const char *lp = getenv("ATB_RUNNER_EVENTS_LOG");

		if (lp && *lp)
			r.events_log = fopen(lp, "ae");
		/* a line at a time: a reader stamping arrivals (a FIFO) sees each event
		 * when it came, not when a buffer filled */
		if (r.events_log)
			setvbuf(r.events_log, NULL, _IOLBF, 0);
	}

	/* the runner works in its scratch folder: every path it is sent is absolute */
	sent_job = absolute_job(job);
	if (sent_job && add_placement_key(sent_job)) {
		json_decref(sent_job);
		sent_job = NULL;
	}
	if (sent_job && watch && watch->progress_ms > 0 &&
	    json_object_set_new(sent_job, "progress_ms", json_integer(watch->progress_ms))) {
		json_decref(sent_job);
		sent_job = NULL;
	}
	text = sent_job ? json_dumps(sent_job, JSON_COMPACT) : NULL;
	if (!text) {
		json_decref(sent_job);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot encode job: out of memory");
	}
	text_len = strlen(text);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) ||
	    pipe2(ep, O_CLOEXEC)) {
		st = atb_error_set(err, ATB_ERR_SYSTEM, "cannot create runner channel: %s",
				   strerror(errno));
		goto out_fds;
	}
	/* inside the sandbox bwrap would exec it: say so here, plainly */
	if (runner_path[0] != '/') {
		char cwd[2048];

		if (getcwd(cwd, sizeof(cwd)))
			snprintf(runner_abs, sizeof(runner_abs), "%s/%s", cwd, runner_path);
		argv[0] = runner_path = runner_abs;
	}
	if (access(runner_path, X_OK)) {
		out->exit_code = 127;
		st = atb_error_set(err, ATB_ERR_SYSTEM, "cannot execute atb-runner '%s': %s",
				   runner_path, strerror(errno));
		goto out_fds;
	}
	/* PROTO: sandbox -- a fresh scratch folder per runner, removed after it */
	if ((st = atb_proc_scratch("atb-runner", scratch, sizeof(scratch), err)))
		goto out_fds;
	st = job_sandbox(runner_path, sent_job, timeout_s, scratch, &sb, err);
	if (!st)
		st = atb_proc_start(argv, sv[1], sv[1], ep[1], sb, &proc, err);
	close(sv[1]);
	close(ep[1]);
	sv[1] = ep[1] = -1;
	if (st)
		goto out_fds;
	if (proc.exec_errno) {
		out->exit_code = 127;
		st = atb_error_set(err, ATB_ERR_SYSTEM, "cannot execute atb-runner '%s': %s",
				   runner_path, strerror(proc.exec_errno));
		atb_proc_reap(&proc);
		goto out_fds;
	}
	r.sandbox_facts = atb_sandbox_facts(sb);
	if (r.sandbox_facts) {
		const char *lv = json_string_value(json_object_get(r.sandbox_facts, "level"));

		snprintf(out->sandbox_level, sizeof(out->sandbox_level), "%s", lv ? lv : "");
	}
	pid = proc.pid;
	out->pid = (int)pid;
	r.root = pid;
	r.answer_fd = sv[0];
	r.cpu_job = (!job_backend || !strcmp(job_backend, "cpu")) &&
		    !strcmp(jsonp_str(job_opt, "isolation"), "process");
	fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
	fcntl(ep[0], F_SETFL, fcntl(ep[0], F_GETFL) | O_NONBLOCK);
	deadline = timeout_s > 0 ? t0 + (int64_t)(timeout_s * 1e9) : INT64_MAX;
	r.last_ns = t0;

	/* The job is one line; the runner reads it to the newline or EOF. */
	while (sock_open || err_open) {
		struct pollfd pf[2];
		int nf = 0, si = -1, ei = -1, rc, wait_ms;
		int64_t now = atbi_monotonic_ns();

		if (now >= deadline) {
			end = ATB_RUNNER_TIMEOUT;
			st = atb_error_set(err, ATB_ERR_SYSTEM,
					   "atb-runner timed out after %.3g s: killed", timeout_s);
			break;
		}
		/* PROTO: gates.hang -- silent too long: a call that does not return */
		{
			int64_t lim = watch_limit_ns(watch, &r);

			if (lim != INT64_MAX && now - r.last_ns > lim) {
				end = ATB_RUNNER_HANG;
				out->stall_s = (double)(now - r.last_ns) / 1e9;
				out->stall_limit_s = (double)lim / 1e9;
				out->stall_in_startup = !r.started;
				st = atb_error_set(err, ATB_ERR_SYSTEM,
						   "atb-runner made no progress for %.1f s (limit %.1f s) "
						   "after '%s': killed", out->stall_s,
						   out->stall_limit_s, out->stalled_after);
				break;
			}
		}
		if (sock_open) {
			pf[nf].fd = sv[0];
			pf[nf].events = POLLIN | (wr_open ? POLLOUT : 0);
			si = nf++;
		}
		if (err_open) {
			pf[nf].fd = ep[0];
			pf[nf].events = POLLIN;
			ei = nf++;
		}
		wait_ms = deadline == INT64_MAX ? 1000
			: (int)((deadline - now) / 1000000 + 1 > 1000 ? 1000
				: (deadline - now) / 1000000 + 1);
		rc = poll(pf, (nfds_t)nf, wait_ms);
		if (rc < 0) {
			if (errno == EINTR)
				continue;
			st = atb_error_set(err, ATB_ERR_SYSTEM, "poll failed: %s", strerror(errno));
			end = ATB_RUNNER_EXIT;
			break;
		}
		if (si >= 0 && wr_open && (pf[si].revents & (POLLOUT | POLLERR | POLLHUP))) {
			if (sent < text_len + 1) {
				const char *p = sent < text_len ? text + sent : "\n";
				size_t n = sent < text_len ? text_len - sent : 1;
				ssize_t w = send(sv[0], p, n, MSG_NOSIGNAL);

				if (w > 0)
					sent += (size_t)w;
				else if (w < 0 && errno != EAGAIN && errno != EINTR)
					sent = text_len + 1;  /* it went away; its end says why */
			}
			/* the channel stays open: the runner waits for its end
			   after "done" (below) */
			if (sent >= text_len + 1)
				wr_open = 0;
		}
		if (si >= 0 && (pf[si].revents & (POLLIN | POLLHUP | POLLERR))) {
			char buf[65536];
			ssize_t n = recv(sv[0], buf, sizeof(buf), 0);

			if (n > 0) {
				int e;
				int64_t got_ns = atbi_monotonic_ns();

				/* PROTO: gates.hang -- the silence that ended here (a
				   line may come in pieces: any byte is progress) */
				if (r.seen_env && (double)(got_ns - r.last_ns) / 1e9 > out->longest_gap_s)
					out->longest_gap_s = (double)(got_ns - r.last_ns) / 1e9;
				r.last_ns = got_ns;
				r.recv_ns = got_ns;
				if (linebuf_add(&r.lines, buf, (size_t)n)) {
					end = ATB_RUNNER_MALFORMED;
					st = atb_error_set(err, ATB_ERR_PARSE,
							   "event line from atb-runner too long or out of memory");
					break;
				}
				e = take_lines(&r, err, &st);
				if (e) {
					end = e;
					break;
				}
				/* PROTO: gates.background, timing.preemption -- the
				   runner stays alive after "done" until this end closes,
				   so the last group's /proc reading (taken as its samples
				   arrived, before "done") is never of a process gone */
				if (r.got_done && !wr_shut) {
					shutdown(sv[0], SHUT_WR);
					wr_shut = 1;
				}
			} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
				sock_open = 0;
			}
		}
		if (ei >= 0 && (pf[ei].revents & (POLLIN | POLLHUP | POLLERR))) {
			char buf[4096];
			ssize_t n = read(ep[0], buf, sizeof(buf));

			if (n > 0)
				keep_tail(out->stderr_tail, sizeof(out->stderr_tail), buf, (size_t)n);
			else if (n == 0 || (errno != EAGAIN && errno != EINTR))
				err_open = 0;
		}
		/* PROTO: sandbox -- a fork the process limit refused: a fork bomb,
		   contained; the job ends now (it would only go on forking).  After
		   the reads (their events are stamped first), at most every 50 ms. */
		if (proc.cgroup[0] && atbi_monotonic_ns() - limit_seen_ns > 50000000) {
			limit_seen_ns = atbi_monotonic_ns();
			if ((hits = atb_proc_limit_hits(&proc)) > 0) {
				end = limit_reached(out, hits, &st, err);
				break;
			}
		}
	}
	if (end >= 0)
		atb_proc_kill(&proc);
	/* Its channels closed, but it may still run (or hang): wait to the deadline. */
	if (!atb_proc_wait(&proc, end >= 0 ? INT64_MAX : deadline)) {
		end = ATB_RUNNER_TIMEOUT;
		st = atb_error_set(err, ATB_ERR_SYSTEM,
				   "atb-runner timed out after %.3g s: killed", timeout_s);
	}
	/* a fork refused after the last look (a bomb that gave up, then done) */
	if (end < 0 && (hits = atb_proc_limit_hits(&proc)) > 0)
		end = limit_reached(out, hits, &st, err);
	/* Anything left (a grandchild; sandboxed, the whole PID namespace) goes too. */
	atb_proc_reap(&proc);
	status = proc.status;
	out->wall_ns = atbi_monotonic_ns() - t0;

	if (end < 0 && r.lines.len) {
		end = ATB_RUNNER_MALFORMED;
		snprintf(out->detail, sizeof(out->detail), "%.200s", r.lines.p);
		st = atb_error_set(err, ATB_ERR_PARSE,
				   "malformed event from atb-runner: unterminated last line");
	}
	if (WIFEXITED(status))
		out->exit_code = WEXITSTATUS(status);
	if (end >= 0) {
		out->end = (enum atb_runner_end)end;
	} else if (WIFSIGNALED(status)) {
		out->end = ATB_RUNNER_SIGNALED;
		out->signal = WTERMSIG(status);
		atb_runner_signal_name(out->signal, out->signal_name, sizeof(out->signal_name));
		st = atb_error_set(err, ATB_ERR_SYSTEM, "atb-runner killed by %s%s",
				   out->signal_name,
				   r.got_done ? " after done" : " (the kernel crashed?)");
	} else if (r.got_error) {
		out->end = ATB_RUNNER_ERROR;
		st = atb_error_set(err, ATB_ERR_CHECK, "atb-runner reported '%s': %s",
				   out->reason, out->detail);
	} else if (!r.got_done || out->exit_code != 0) {
		out->end = ATB_RUNNER_EXIT;
		if (out->exit_code == 127)
			st = atb_error_set(err, ATB_ERR_SYSTEM,
					   "cannot execute atb-runner '%s'", runner_path);
		else
			st = atb_error_set(err, ATB_ERR_SYSTEM,
					   "atb-runner exited with status %d %s",
					   out->exit_code, r.got_done ? "after done" : "before done");
	} else {
		out->end = ATB_RUNNER_DONE;
		st = ATB_OK;
	}
	if (out->end == ATB_RUNNER_TIMEOUT && WIFSIGNALED(status)) {
		out->signal = WTERMSIG(status);
		atb_runner_signal_name(out->signal, out->signal_name, sizeof(out->signal_name));
	}

out_fds:
	if (sv[0] >= 0)
		close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	if (ep[0] >= 0)
		close(ep[0]);
	if (ep[1] >= 0)
		close(ep[1]);
	if (r.events_log)
		fclose(r.events_log);
	atb_free(r.lines.p);
	atb_free(text);
	json_decref(r.sandbox_facts);
	json_decref(sent_job);
	atb_sandbox_free(sb);
	atb_proc_remove_tree(scratch);
	return st;
}
