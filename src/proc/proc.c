/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Start, wait for, kill and reap a child (include/atb/proc.h).  The child
 * leads its own process group, so a kill takes whatever it started with
 * it; sandboxed, it is bwrap, whose PID namespace ends every process left
 * inside when its first process dies.  An exec that fails is told through
 * a close-on-exec pipe (the errno), not guessed from an exit status.
 * bwrap reports a program killed by signal N as exit status 128 + N; that
 * is turned back into "killed by N" so callers see what the program did.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/close_range.h>
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

/* argv[0] as an absolute path: itself when it has a slash, else from $PATH. */
static int resolve(const char *name, char *out, size_t size)
{
	const char *path = getenv("PATH");
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

enum atb_status atb_proc_start(const char *const *argv, int in, int out, int errfd,
			       struct atb_sandbox *sb, struct atb_proc *p, struct atb_error *err)
{
	struct sb_exec x;
	char prog[PATH_MAX];
	const char *av0 = argv && argv[0] ? argv[0] : NULL;
	const char **args = NULL;
	int ep[2] = {-1, -1}, devnull = -1, e = 0;
	enum atb_status st = ATB_OK;
	size_t n;
	ssize_t r;
	pid_t pid;

	memset(p, 0, sizeof(*p));
	p->pid = -1;
	p->errfd = -1;
	memset(&x, 0, sizeof(x));
	x.seccomp_fd = -1;
	if (!av0)
		return atb_error_set(err, ATB_ERR_USAGE, "nothing to start");
	if (resolve(av0, prog, sizeof(prog)))
		return atb_error_set(err, ATB_ERR_NOT_FOUND, "cannot find '%s' in PATH", av0);
	/* sandboxed, bwrap would be the one to fail: say it here */
	if (sb && access(prog, X_OK))
		return atb_error_set(err, ATB_ERR_NOT_FOUND, "cannot execute '%s': %s", prog,
				     strerror(errno));
	for (n = 0; argv[n]; n++)
		;
	args = atb_calloc(n + 1, sizeof(*args));
	if (!args)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot start '%s': out of memory", av0);
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
		if (sb) {
			atbi_sandbox_child_exec(&x, ep[1]);
		} else {
			execv(prog, (char *const *)args);
			e = errno;
			if (write(ep[1], &e, sizeof(e)) < 0)
				_exit(127);
			_exit(127);
		}
	}
	setpgid(pid, pid);  /* both sides: no kill(-pid) can race the child's own */
	p->pid = pid;
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
	p->errfd = -1;
	p->status = 0;
	p->reaped = 0;
	/* remember whether bwrap stands between us and the program */
	p->sandboxed = sb && x.level <= SB_LEVEL_NO_USERNS;
	atb_free(args);
	return st;
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

void atb_proc_kill(struct atb_proc *p)
{
	if (p->pid <= 0)
		return;
	/* The child leads its group: this takes any children with it.  Sandboxed,
	   bwrap's death takes its PID namespace (--die-with-parent, pid 1). */
	if (kill(-p->pid, SIGKILL) && errno == ESRCH && !p->reaped)
		kill(p->pid, SIGKILL);
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
	/* anything left in the group (a grandchild) goes too */
	kill(-p->pid, SIGKILL);
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
