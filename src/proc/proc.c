/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Start, wait for, kill and reap a child (include/atb/proc.h).  The child
 * leads its own process group, so a kill takes whatever it started with
 * it; sandboxed, it is bwrap, whose PID namespace ends every process left
 * inside when its first process dies.  An exec that fails is told through
 * a close-on-exec pipe (the errno), not guessed from an exit status.
 * bwrap reports a program killed by signal N as exit status 128 + N; that
 * is turned back into "killed by N" so callers see what the program did.
 * A kill takes the whole tree, also what left the group (from /proc's
 * parent links while the child is unreaped); a stop asks first.  A plain
 * child may get environment changes, a death signal and a hook run right
 * before the exec, all prepared before the fork; atb_proc_start_fn forks
 * atb itself for work that must not share its state.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/close_range.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "atb/alloc.h"
#include "atb/proc.h"
#include "proc_int.h"
#include "util.h"
#include "banned.h"

extern char **environ;

/* argv[0] as an absolute path: itself when it has a slash, else from path. */
static int resolve(const char *name, const char *path, char *out, size_t size)
{
	char list[8192], *save = NULL, *dir;

	if (strchr(name, '/')) {
		snprintf(out, size, "%s", name);
		return 0;
	}
	snprintf(list, sizeof(list), "%s", path && *path ? path : "/usr/bin:/bin");
	for (dir = strtok_r(list, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		snprintf(out, size, "%s/%s", dir, name);
		if (access(out, X_OK) == 0)
			return 0;
	}
	return -1;
}

/* The value of name in a NULL-ended KEY=VALUE list; NULL when absent. */
static const char *env_get(char *const *envp, const char *name)
{
	size_t k = strlen(name);

	for (; envp && *envp; envp++)
		if (!strncmp(*envp, name, k) && (*envp)[k] == '=')
			return *envp + k + 1;
	return NULL;
}

/*
 * The caller's environment with changes ("NAME=VALUE" sets, "NAME"
 * removes), made before the fork: the child only execs.  The strings are
 * the caller's and environ's; only the array is ours (atb_free).
 */
static char **env_with(const char *const *changes)
{
	size_t n = 0, m = 0, i, j, k;
	char **v;

	while (environ && environ[n])
		n++;
	while (changes[m])
		m++;
	v = atb_calloc(n + m + 1, sizeof(*v));
	if (!v)
		return NULL;
	for (i = 0; i < n; i++)
		v[i] = environ[i];
	for (j = 0; j < m; j++) {
		const char *c = changes[j];
		size_t kl = strcspn(c, "=");

		/* drop the old value(s), keep the order of the rest */
		for (i = 0, k = 0; v[i]; i++)
			if (strncmp(v[i], c, kl) || v[i][kl] != '=')
				v[k++] = v[i];
		v[k] = NULL;
		n = k;
		if (c[kl] == '=')
			v[n++] = (char *)c;
		v[n] = NULL;
	}
	return v;
}

enum atb_status atb_proc_start(const char *const *argv, int in, int out, int errfd,
			       struct atb_sandbox *sb, struct atb_proc *p, struct atb_error *err)
{
	return atb_proc_start_opts(argv, in, out, errfd, sb, NULL, p, err);
}

enum atb_status atb_proc_start_opts(const char *const *argv, int in, int out, int errfd,
				    struct atb_sandbox *sb, const struct atb_proc_opts *o,
				    struct atb_proc *p, struct atb_error *err)
{
	static const struct atb_proc_opts none;
	struct sb_exec x;
	char prog[PATH_MAX];
	const char *av0 = argv && argv[0] ? argv[0] : NULL;
	const char **args = NULL;
	char **envp = NULL;
	int ep[2] = {-1, -1}, devnull = -1, e = 0;
	enum atb_status st = ATB_OK;
	size_t n;
	ssize_t r;
	pid_t pid, parent = getpid();

	memset(p, 0, sizeof(*p));
	p->pid = -1;
	memset(&x, 0, sizeof(x));
	x.seccomp_fd = -1;
	x.cg_fd = -1;
	if (!o)
		o = &none;
	if (!av0)
		return atb_error_set(err, ATB_ERR_USAGE, "nothing to start");
	if (o->env && sb)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "cannot start '%s': a sandboxed child's environment is the "
				     "sandbox's (atb_sandbox_env)", av0);
	if (o->env && !(envp = env_with(o->env)))
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot start '%s': out of memory", av0);
	if (resolve(av0, envp ? env_get(envp, "PATH") : getenv("PATH"), prog, sizeof(prog))) {
		atb_free(envp);
		return atb_error_set(err, ATB_ERR_NOT_FOUND, "cannot find '%s' in PATH", av0);
	}
	/* sandboxed, bwrap would be the one to fail: say it here */
	if (sb && access(prog, X_OK))
		return atb_error_set(err, ATB_ERR_NOT_FOUND, "cannot execute '%s': %s", prog,
				     strerror(errno));
	for (n = 0; argv[n]; n++)
		;
	args = atb_calloc(n + 1, sizeof(*args));
	if (!args) {
		atb_free(envp);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot start '%s': out of memory", av0);
	}
	memcpy(args, argv, n * sizeof(*args));
	args[0] = prog;
	if (sb) {
		st = atbi_sandbox_prepare(sb, args, &x, err);
	} else {
		x.argv = NULL;
		x.level = SB_LEVEL_OFF;
	}
	if (st)
		goto out;
	if (pipe2(ep, O_CLOEXEC) || (devnull = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0) {
		st = atb_error_set(err, ATB_ERR_SYSTEM, "cannot start '%s': %s", av0,
				   strerror(errno));
		goto out;
	}
	pid = fork();
	if (pid < 0) {
		st = atb_error_set(err, ATB_ERR_SYSTEM, "cannot fork '%s': %s", av0,
				   strerror(errno));
		goto out;
	}
	if (pid == 0) {
		int fds[3] = {in >= 0 ? in : devnull, out >= 0 ? out : devnull,
			      errfd >= 0 ? errfd : devnull};
		int i, moved[3];

		setpgid(0, 0);
		signal(SIGPIPE, SIG_DFL);
		/* Move the three above 2 first, so that dup2 never closes one we still need. */
		for (i = 0; i < 3; i++) {
			moved[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
			if (moved[i] < 0)
				_exit(126);
		}
		for (i = 0; i < 3; i++)
			if (dup2(moved[i], i) < 0)
				_exit(126);
		/* nothing of the parent's but 0-2 (and bwrap's filter) crosses the exec */
		close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
		if (x.seccomp_fd >= 0)
			fcntl(x.seccomp_fd, F_SETFD, 0);
		if (o->death_signal) {
			(void)prctl(PR_SET_PDEATHSIG, o->death_signal);
			if (getppid() != parent)   /* it ended before the prctl */
				raise(o->death_signal);
		}
		if (o->before_exec) {
			int rc = o->before_exec(o->before_exec_arg);

			if (rc)
				_exit(rc > 0 && rc < 256 ? rc : 126);
		}
		if (sb) {
			atbi_sandbox_child_exec(&x, ep[1]);
		} else {
			if (envp)
				execve(prog, (char *const *)args, envp);
			else
				execv(prog, (char *const *)args);
			e = errno;
			if (write(ep[1], &e, sizeof(e)) < 0)
				_exit(127);
			_exit(127);
		}
	}
	setpgid(pid, pid);  /* both sides: no kill(-pid) can race the child's own */
	p->pid = pid;
	/* the job's pids cgroup is the child's now: removed at its reap */
	if (x.cg_dir[0]) {
		snprintf(p->cgroup, sizeof(p->cgroup), "%s", x.cg_dir);
		x.cg_dir[0] = '\0';
	}
	close(ep[1]);
	ep[1] = -1;
	/* The exec's outcome: EOF (it ran) or the errno. */
	do {
		r = read(ep[0], &e, sizeof(e));
	} while (r < 0 && errno == EINTR);
	if (r == (ssize_t)sizeof(e))
		p->exec_errno = e;
out:
	if (ep[0] >= 0)
		close(ep[0]);
	if (ep[1] >= 0)
		close(ep[1]);
	if (devnull >= 0)
		close(devnull);
	if (sb)
		atbi_sandbox_exec_release(&x);
	p->status = 0;
	p->reaped = 0;
	/* remember whether bwrap stands between us and the program */
	p->sandboxed = sb && x.level <= SB_LEVEL_NO_USERNS;
	atb_free(args);
	atb_free(envp);
	return st;
}

enum atb_status atb_proc_start_fn(int (*fn)(void *arg), void *arg,
				  const struct atb_proc_opts *o, struct atb_proc *p,
				  struct atb_error *err)
{
	pid_t pid, parent = getpid();

	memset(p, 0, sizeof(*p));
	p->pid = -1;
	if (!fn)
		return atb_error_set(err, ATB_ERR_USAGE, "nothing to start");
	if (o && (o->env || o->before_exec))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "a forked child takes no environment or exec hook");
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return atb_error_set(err, ATB_ERR_SYSTEM, "cannot fork: %s", strerror(errno));
	if (pid == 0) {
		int rc;

		setpgid(0, 0);
		if (o && o->death_signal) {
			(void)prctl(PR_SET_PDEATHSIG, o->death_signal);
			if (getppid() != parent)
				raise(o->death_signal);
		}
		rc = fn(arg);
		fflush(NULL);
		_exit(rc & 0xff);
	}
	setpgid(pid, pid);  /* both sides, as for a program */
	p->pid = pid;
	return ATB_OK;
}

static void normalize(struct atb_proc *p)
{
	/* bwrap: "exit 128 + N" is the program killed by signal N */
	if (p->sandboxed && WIFEXITED(p->status) && WEXITSTATUS(p->status) > 128 &&
	    WEXITSTATUS(p->status) < 128 + 65)
		p->status = (WEXITSTATUS(p->status) - 128) & 0x7f;
}

int atb_proc_wait(struct atb_proc *p, int64_t deadline_ns)
{
	for (;;) {
		int status = 0;
		pid_t w;
		struct timespec ts = {0, 2000000};

		if (p->reaped || p->pid <= 0)
			return 1;
		w = waitpid(p->pid, &status, WNOHANG);
		if (w == p->pid) {
			p->status = status;
			p->reaped = 1;
			normalize(p);
			return 1;
		}
		if (w < 0 && errno != EINTR) {
			p->reaped = 1;
			return 1;
		}
		if (deadline_ns == 0 || atbi_monotonic_ns() >= deadline_ns)
			return 0;
		nanosleep(&ts, NULL);
	}
}

#define TREE_MAX 4096

/*
 * Every process under root (root not included), from /proc's parent links,
 * into pids; how many.  A snapshot: what forks meanwhile can be missed, so
 * callers kill the groups too.
 */
static size_t descendants(pid_t root, pid_t *pids, size_t max)
{
	pid_t all[TREE_MAX], parent[TREE_MAX];
	size_t nall = 0, n = 0, i, j;
	struct dirent *de;
	DIR *d = opendir("/proc");

	if (!d)
		return 0;
	while ((de = readdir(d)) && nall < TREE_MAX) {
		char path[300], buf[512], *rp;
		int fd, ppid;
		ssize_t got;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		got = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (got <= 0)
			continue;
		buf[got] = '\0';
		/* "pid (comm) state ppid ...": comm may hold anything but the last ')' */
		if ((rp = strrchr(buf, ')')) && sscanf(rp + 1, " %*c %d", &ppid) == 1) {
			all[nall] = (pid_t)strtol(de->d_name, NULL, 10);
			parent[nall++] = (pid_t)ppid;
		}
	}
	closedir(d);
	for (i = 0; i <= n; i++) {
		pid_t up = i ? pids[i - 1] : root;

		for (j = 0; j < nall && n < max; j++)
			if (parent[j] == up)
				pids[n++] = all[j];
	}
	return n;
}

void atb_proc_kill(struct atb_proc *p)
{
	if (p->pid <= 0)
		return;
	/* Unreaped, the pid is still ours: what is under it can be found, also
	   what left the group (setsid, or a runner in a group of its own). */
	if (!p->reaped) {
		pid_t under[TREE_MAX];
		pid_t mine = getpgrp();
		size_t n = descendants(p->pid, under, TREE_MAX), i;

		for (i = 0; i < n; i++) {
			pid_t g = getpgid(under[i]);

			if (g > 1 && g != mine)
				kill(-g, SIGKILL);
			kill(under[i], SIGKILL);
		}
	}
	/* The child leads its group: this takes any children with it.  Sandboxed,
	   bwrap's death takes its PID namespace (--die-with-parent, pid 1). */
	if (kill(-p->pid, SIGKILL) && errno == ESRCH && !p->reaped)
		kill(p->pid, SIGKILL);
}

void atb_proc_stop(struct atb_proc *p, int sig, int64_t grace_ns)
{
	if (p->pid <= 0)
		return;
	if (!p->reaped && sig > 0) {
		kill(-p->pid, sig);
		atb_proc_wait(p, grace_ns > 0 ? atbi_monotonic_ns() + grace_ns : 0);
	}
	atb_proc_reap(p);
}

void atb_proc_reap(struct atb_proc *p)
{
	if (p->pid <= 0)
		return;
	if (!p->reaped) {
		int status = 0;

		atb_proc_kill(p);
		while (waitpid(p->pid, &status, 0) < 0 && errno == EINTR)
			;
		p->status = status;
		p->reaped = 1;
		normalize(p);
	}
	/* anything left in the group (a grandchild) goes too, and in the job's
	   pids cgroup whatever left the group and the tree */
	kill(-p->pid, SIGKILL);
	if (p->cgroup[0]) {
		atbi_cgroup_end(p->cgroup);
		p->cgroup[0] = '\0';
	}
}

enum atb_status atb_proc_scratch(const char *prefix, char *buf, size_t size,
				 struct atb_error *err)
{
	const char *tmp = getenv("TMPDIR");
	int w = snprintf(buf, size, "%s/%s-XXXXXX", tmp && tmp[0] == '/' ? tmp : "/tmp", prefix);

	if (w < 0 || (size_t)w >= size) {
		if (size)
			buf[0] = '\0';
		return atb_error_set(err, ATB_ERR_USAGE, "scratch folder path too long");
	}
	if (!mkdtemp(buf)) {
		enum atb_status st = atb_error_set(err, ATB_ERR_SYSTEM,
						   "cannot create a scratch folder '%s': %s", buf,
						   strerror(errno));

		buf[0] = '\0';
		return st;
	}
	return ATB_OK;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

void atb_proc_remove_tree(const char *dir)
{
	/* FTW_PHYS: a link is removed as a link, never followed */
	if (dir && dir[0] == '/')
		nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
