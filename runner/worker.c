/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The cpu backend's arm workers (issue 11: timing the candidate cannot
 * forge).  Each arm's shared object is loaded, and its kernel called, in a
 * process of its own: a fresh exec of atb-runner ("--worker"), not in the
 * runner.  So no code of the candidate ever runs in the process that holds
 * the clock, the timed-check key, the reference's outputs and the event
 * channel; it cannot redirect the clock, rewrite a sample, patch the
 * comparison or learn which trials are checked, whatever it does to its own
 * address space.
 *
 * How a call goes (runner side, runner_worker_call):
 *   the timing core reads its clock; the runner continues the worker
 *   (SIGCONT), sends the call, reads the reply and stops the worker
 *   (SIGSTOP); the timing core reads its clock again.  The worker is
 *   stopped, every thread of it, from then until its next call, and the
 *   runner waits for it to be stopped before the next trial's window opens
 *   (runner_worker_settle, the timing core's after-call hook).  So the
 *   candidate's code runs only inside its own timed windows: it cannot work
 *   ahead before its clock starts, go on writing its outputs after the
 *   reply, or steal the CPU during another arm's trials.
 *
 * Buffers are shared memory: each one a memfd of its own, mapped in the
 * runner and, at the same address, in the worker of the arm it is handed
 * to (a range of address space both processes reserve, so the pointers in
 * atb_kernel_args mean the same thing in both).  A worker maps only the
 * buffers of its own calls: the reference's outputs, the master inputs and
 * the other arms' buffers are not in its address space.  A buffer another
 * worker has seen is never handed out again (runner_shm_exposed).
 *
 * The worker (runner_worker_main) gives up what it could use against the
 * runner or another arm before it loads anything: no capabilities, not
 * dumpable (so no other process of the job can open its /proc/PID/mem),
 * and a seccomp filter: no new processes (threads only: a process would
 * not be stopped with it), no signal to another process, no ptrace, no
 * process_vm_*.  The runner makes itself non-dumpable before it starts a
 * worker.
 *
 * Does not: time anything or judge; cpu.c calls through it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "atb/alloc.h"
#include "runner_int.h"
#include "util.h"
#include "banned.h"

/* The reserved range: 4 TiB of address space, no memory until mapped. */
#define SHM_REGION ((size_t)1 << 42)
#define SHM_PAGE ((size_t)4096)

enum { W_LOAD = 1, W_MAP, W_UNMAP, W_CALL, W_NULL };

struct wmsg {
	uint32_t op;
	int32_t nbuf, nints, nreals;
	uint64_t addr[ATB_RUNNER_MAX_BUFFERS];   /* MAP, UNMAP: addr[0], size[0] */
	uint64_t size[ATB_RUNNER_MAX_BUFFERS];
	int64_t ints[ATB_RUNNER_MAX_PARAMS];
	double reals[ATB_RUNNER_MAX_PARAMS];
	char path[PATH_MAX];                     /* LOAD only */
};

struct wreply {
	int32_t rc;       /* the kernel's status (CALL), 0 or an errno (others) */
	int32_t ok;       /* 1: the op was carried out */
	char msg[496];
};

/* ---- shared buffers (runner side) ---------------------------------------- */

struct shm_block {
	char *p;
	size_t size;      /* mapped bytes, whole pages */
	int fd;
	unsigned mapped;  /* bit w: mapped in worker w */
};

static char *shm_base;
static size_t shm_next;
static struct shm_block *blocks;
static size_t nblocks, capblocks;
static struct runner_worker *workers[RUNNER_MAX_WORKERS];

int runner_shm_on(void)
{
	return shm_base != NULL;
}

int runner_shm_setup(char *why, size_t why_size)
{
	/*
	 * Far from where a process's heap, objects and mappings go (x86-64 and
	 * arm64 with 48-bit addresses: PIE near 0x5555..., mappings below
	 * 0x7f...), so a fresh worker finds the same range free.
	 */
	static const uintptr_t hints[] = {(uintptr_t)1 << 45, (uintptr_t)3 << 44,
					  (uintptr_t)1 << 44};
	void *p = MAP_FAILED;
	size_t i;

	if (shm_base)
		return 0;
	for (i = 0; p == MAP_FAILED && i < sizeof(hints) / sizeof(hints[0]); i++)
		p = mmap((void *)hints[i], SHM_REGION, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
	if (p == MAP_FAILED) {
		snprintf(why, why_size, "cannot reserve %zu GiB of address space for the arms' "
			 "buffers: %s", SHM_REGION >> 30, strerror(errno));
		return -1;
	}
	shm_base = p;
	shm_next = SHM_PAGE;  /* a guard page first */
	return 0;
}

static struct shm_block *shm_find(const void *p)
{
	size_t i;

	for (i = 0; i < nblocks; i++)
		if (blocks[i].p == p)
			return &blocks[i];
	return NULL;
}

void *runner_shm_alloc(size_t bytes)
{
	size_t size = ((bytes ? bytes : 1) + SHM_PAGE - 1) / SHM_PAGE * SHM_PAGE;
	struct shm_block *b;
	void *p;
	int fd;

	/* never reused: a worker may still hold an old block's pages */
	if (!shm_base || size > SHM_REGION - SHM_PAGE || shm_next > SHM_REGION - SHM_PAGE - size)
		return NULL;
	if (nblocks == capblocks) {
		size_t ncap = capblocks ? 2 * capblocks : 64;
		struct shm_block *nb = atb_realloc(blocks, ncap * sizeof(*nb));

		if (!nb)
			return NULL;
		blocks = nb;
		capblocks = ncap;
	}
	fd = memfd_create("atb-buffer", MFD_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (ftruncate(fd, (off_t)size)) {
		close(fd);
		return NULL;
	}
	p = mmap(shm_base + shm_next, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return NULL;
	}
	shm_next += size + SHM_PAGE;  /* a guard page after each block */
	b = &blocks[nblocks++];
	b->p = p;
	b->size = size;
	b->fd = fd;
	b->mapped = 0;
	return p;
}

static int worker_op(struct runner_worker *w, const struct wmsg *m, size_t len, int fd,
		     struct wreply *r);

int runner_shm_exposed(const void *p)
{
	const struct shm_block *b = shm_find(p);

	return b && b->mapped;
}

void runner_shm_free(void *p)
{
	struct shm_block *b = shm_find(p);
	size_t w;

	if (!b)
		return;
	/* the workers that hold it let it go (outside every timed window) */
	for (w = 0; w < ATB_RUNNER_MAX_ARMS; w++)
		if ((b->mapped & (1u << w)) && workers[w] && workers[w]->pid > 0) {
			struct wmsg m = {.op = W_UNMAP};
			struct wreply r;

			m.addr[0] = (uint64_t)(uintptr_t)b->p;
			m.size[0] = b->size;
			(void)worker_op(workers[w], &m, offsetof(struct wmsg, path), -1, &r);
		}
	/* back to reserved, inaccessible address space */
	(void)mmap(b->p, b->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
		   -1, 0);
	close(b->fd);
	*b = blocks[--nblocks];
}

/* ---- the runner's side of a worker ----------------------------------------- */

static struct runner_worker *pending_stop;  /* stopped, its stop not yet seen */

static int worker_gone(struct runner_worker *w, const siginfo_t *si)
{
	char msg[256];

	w->pid = -1;
	if (si->si_code == CLD_KILLED || si->si_code == CLD_DUMPED) {
		/* a crashing kernel ends the job by its signal, as it did in
		   process: the harness reads the runner's end */
		fflush(NULL);
		signal(si->si_status, SIG_DFL);
		raise(si->si_status);
	}
	snprintf(msg, sizeof(msg), "the worker of arm '%s' exited with status %d",
		 w->name, si->si_status);
	runner_emit_error("worker_exited", msg);
	return -1;
}

/* Wait until w is stopped (or report its end). */
static int worker_wait_stopped(struct runner_worker *w)
{
	for (;;) {
		siginfo_t si;

		memset(&si, 0, sizeof(si));
		if (waitid(P_PID, (id_t)w->pid, &si, WSTOPPED | WEXITED) < 0) {
			if (errno == EINTR)
				continue;
			runner_emit_error("worker", "cannot wait for an arm's worker");
			return -1;
		}
		if (si.si_code == CLD_STOPPED || si.si_code == CLD_TRAPPED) {
			w->stopped = 1;
			return 0;
		}
		if (si.si_code == CLD_EXITED || si.si_code == CLD_KILLED ||
		    si.si_code == CLD_DUMPED)
			return worker_gone(w, &si);
	}
}

int runner_worker_settle(void)
{
	struct runner_worker *w = pending_stop;

	if (!w)
		return 0;
	pending_stop = NULL;
	return w->pid > 0 ? worker_wait_stopped(w) : -1;
}

static int send_msg(int sock, const void *m, size_t len, int fd)
{
	struct iovec iov = {.iov_base = (void *)m, .iov_len = len};
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} c;
	struct msghdr h = {.msg_iov = &iov, .msg_iovlen = 1};
	ssize_t n;

	if (fd >= 0) {
		struct cmsghdr *ch;

		memset(&c, 0, sizeof(c));
		h.msg_control = c.b;
		h.msg_controllen = sizeof(c.b);
		ch = CMSG_FIRSTHDR(&h);
		ch->cmsg_level = SOL_SOCKET;
		ch->cmsg_type = SCM_RIGHTS;
		ch->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(ch), &fd, sizeof(int));
	}
	do
		n = sendmsg(sock, &h, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)len ? 0 : -1;
}

static int recv_reply(struct runner_worker *w, struct wreply *r)
{
	ssize_t n;

	do
		n = recv(w->sock, r, sizeof(*r), 0);
	while (n < 0 && errno == EINTR);
	if (n == (ssize_t)sizeof(*r))
		return 0;
	/* the worker is gone: say how */
	if (w->pid > 0) {
		siginfo_t si;

		memset(&si, 0, sizeof(si));
		while (waitid(P_PID, (id_t)w->pid, &si, WEXITED) < 0 && errno == EINTR)
			;
		if (si.si_pid)
			return worker_gone(w, &si);
	}
	runner_emit_error("worker", "an arm's worker closed its channel");
	return -1;
}

/* Continue w (settling any earlier stop first). */
static int worker_continue(struct runner_worker *w)
{
	if (pending_stop && runner_worker_settle())
		return -1;
	if (w->pid <= 0)
		return -1;
	if (w->stopped) {
		w->stopped = 0;
		if (kill(w->pid, SIGCONT))
			return -1;
	}
	return 0;
}

/* One op outside every timed window: continue, send, reply, stopped again. */
static int worker_op(struct runner_worker *w, const struct wmsg *m, size_t len, int fd,
		     struct wreply *r)
{
	if (worker_continue(w) || send_msg(w->sock, m, len, fd))
		return -1;
	if (recv_reply(w, r))
		return -1;
	if (kill(w->pid, SIGSTOP))
		return -1;
	return worker_wait_stopped(w);
}

int runner_worker_map(struct runner_worker *w, const struct runner_bufs *b)
{
	size_t i;

	for (i = 0; i < b->n; i++) {
		struct shm_block *k = b->p[i] ? shm_find(b->p[i]) : NULL;
		struct wmsg m = {.op = W_MAP};
		struct wreply r;

		if (!b->p[i])
			continue;
		if (!k) {
			runner_emit_error("worker", "a buffer handed to a worker is not shared memory");
			return -1;
		}
		if (k->mapped & (1u << w->id))
			continue;
		m.addr[0] = (uint64_t)(uintptr_t)k->p;
		m.size[0] = k->size;
		if (worker_op(w, &m, offsetof(struct wmsg, path), k->fd, &r))
			return -1;
		if (!r.ok) {
			char msg[700];

			snprintf(msg, sizeof(msg), "the worker of arm '%s' cannot map a buffer: %s",
				 w->name, r.msg);
			runner_emit_error("worker", msg);
			return -1;
		}
		k->mapped |= 1u << w->id;
	}
	return 0;
}

/*
 * A call that did not come back: the worker is gone or its channel broke,
 * and the error event is out.  The job ends here, as it did when the
 * kernel ended the runner in process (a kernel's status is not a stand-in).
 */
static _Noreturn void call_failed(void)
{
	fflush(NULL);
	exit(RUNNER_EXIT_FAILED);
}

void runner_worker_call(struct runner_worker *w, const struct runner_bufs *b,
			const struct atb_runner_set *set, int timed, int *kstatus)
{
	struct wmsg m = {.op = W_CALL};
	struct wreply r;
	size_t i;

	/* the buffers are mapped before the window opens; a late one here */
	if (runner_worker_map(w, b))
		call_failed();
	m.nbuf = (int32_t)b->n;
	for (i = 0; i < b->n; i++)
		m.addr[i] = (uint64_t)(uintptr_t)b->p[i];
	m.nints = (int32_t)set->nints;
	m.nreals = (int32_t)set->nreals;
	memcpy(m.ints, set->ints, set->nints * sizeof(m.ints[0]));
	memcpy(m.reals, set->reals, set->nreals * sizeof(m.reals[0]));
	/* PROTO: timing -- inside the window: continue, call, reply, stop */
	if (worker_continue(w) || send_msg(w->sock, &m, offsetof(struct wmsg, path), -1) ||
	    recv_reply(w, &r) || kill(w->pid, SIGSTOP))
		call_failed();
	if (timed)
		pending_stop = w;  /* seen stopped before the next window opens */
	else if (worker_wait_stopped(w))
		call_failed();
	*kstatus = r.rc;
}

int runner_worker_null_ready(struct runner_worker *w, char *why, size_t why_size)
{
	struct wmsg m = {.op = W_NULL};
	struct wreply r;

	if (worker_op(w, &m, offsetof(struct wmsg, path), -1, &r)) {
		snprintf(why, why_size, "no answer to its first empty call");
		return -1;
	}
	if (!r.ok) {
		snprintf(why, why_size, "%s", r.msg[0] ? r.msg : "its first empty call failed");
		return -1;
	}
	return 0;
}

int runner_worker_null_call(struct runner_worker *w)
{
	/* the call's message, as long as a kernel call's; no buffers */
	struct wmsg m = {.op = W_NULL};
	struct wreply r;

	/* PROTO: timing.round_trip -- inside the window: continue, ask, reply, stop */
	if (worker_continue(w) || send_msg(w->sock, &m, offsetof(struct wmsg, path), -1) ||
	    recv_reply(w, &r) || kill(w->pid, SIGSTOP))
		return -1;
	pending_stop = w;
	return r.ok ? 0 : -1;
}

int runner_worker_spawn(struct runner_worker *w, int id, const char *name, char *why,
			size_t why_size)
{
	int sv[2];
	pid_t pid;
	char base[32], size[32], parent[32];

	memset(w, 0, sizeof(*w));
	w->pid = -1;
	w->sock = -1;
	w->id = id;
	snprintf(w->name, sizeof(w->name), "%s", name);
	if (!shm_base && runner_shm_setup(why, why_size))
		return -1;
	/* no worker may open this process's memory or descriptors */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) {
		snprintf(why, why_size, "cannot make the runner non-dumpable: %s", strerror(errno));
		return -1;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		snprintf(why, why_size, "cannot make a channel for a worker: %s", strerror(errno));
		return -1;
	}
	snprintf(base, sizeof(base), "%llu", (unsigned long long)(uintptr_t)shm_base);
	snprintf(size, sizeof(size), "%llu", (unsigned long long)SHM_REGION);
	snprintf(parent, sizeof(parent), "%ld", (long)getpid());
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		snprintf(why, why_size, "cannot start a worker: %s", strerror(errno));
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	if (pid == 0) {
		char *const argv[] = {"atb-runner", "--worker", base, size, parent, NULL};
		int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

		/* the channel on fd 3, stdin empty, stdout to stderr, nothing else */
		if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(2, 1) < 0 || dup2(sv[1], 3) < 0)
			_exit(127);
		syscall(SYS_close_range, 4U, ~0U, 0U);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(sv[1]);
	w->sock = sv[0];
	w->pid = pid;
	w->stopped = 0;
	workers[id] = w;
	return 0;
}

int runner_worker_load(struct runner_worker *w, const char *so, char *why, size_t why_size)
{
	struct wmsg m = {.op = W_LOAD};
	struct wreply r;

	if (strlen(so) >= sizeof(m.path)) {
		snprintf(why, why_size, "path too long: '%.200s...'", so);
		return -1;
	}
	snprintf(m.path, sizeof(m.path), "%s", so);
	if (worker_op(w, &m, sizeof(m), -1, &r)) {
		snprintf(why, why_size, "its worker did not answer");
		return -1;
	}
	if (!r.ok) {
		snprintf(why, why_size, "%s", r.msg);
		return r.rc == ENOENT ? -2 : -1;
	}
	return 0;
}

void runner_worker_end(struct runner_worker *w)
{
	if (pending_stop == w)
		pending_stop = NULL;
	if (w->pid > 0) {
		kill(w->pid, SIGKILL);
		while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	if (w->sock >= 0)
		close(w->sock);
	if (w->id >= 0 && w->id < RUNNER_MAX_WORKERS && workers[w->id] == w)
		workers[w->id] = NULL;
	w->pid = -1;
	w->sock = -1;
}

/* ---- the worker ------------------------------------------------------------- */

/* What a worker gives up before any arm's code is loaded. */
static int worker_confine(pid_t parent, char *why, size_t why_size)
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct data[2];
	/* and no timer: one armed before the reply expires while the worker is
	   stopped, in interrupt context on the runner's CPU, inside another
	   arm's window (relu/rt-burst: a timerfd with 200 epoll waiters, about
	   37 us an expiry, lengthened the round trip's empty calls) */
	static const char *const denied[] = {"fork", "vfork", "tkill", "pidfd_open",
		"pidfd_send_signal", "pidfd_getfd", "ptrace", "process_vm_readv",
		"process_vm_writev", "kcmp", "timerfd_create", "timerfd_settime",
		"timer_create", "timer_settime", "setitimer", "alarm"};
	/* calls whose first argument is a pid (0: the caller) */
	static const char *const own_only[] = {"sched_setaffinity", "sched_setscheduler",
		"sched_setparam", "sched_setattr", "prlimit64", "migrate_pages", "move_pages"};
	scmp_datum_t self = (scmp_datum_t)getpid();
	scmp_filter_ctx ctx;
	struct sock_fprog prog;
	void *bpf = NULL;
	off_t len = 0;
	int rc = 0, fd = -1;
	size_t i;

	/* dies with the runner; the runner gone already (its pid in the arguments) */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) || getppid() != parent) {
		snprintf(why, why_size, "the runner is gone");
		return -1;
	}
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) {
		snprintf(why, why_size, "cannot make the worker non-dumpable: %s", strerror(errno));
		return -1;
	}
	memset(data, 0, sizeof(data));
	if (syscall(SYS_capset, &hdr, data)) {
		snprintf(why, why_size, "cannot drop capabilities: %s", strerror(errno));
		return -1;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) {
		snprintf(why, why_size, "cannot set no_new_privs: %s", strerror(errno));
		return -1;
	}
	ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx) {
		snprintf(why, why_size, "cannot make the worker's seccomp filter");
		return -1;
	}
	for (i = 0; !rc && i < sizeof(denied) / sizeof(denied[0]); i++) {
		int nr = seccomp_syscall_resolve_name(denied[i]);

		if (nr != __NR_SCMP_ERROR)
			rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
	}
	/* threads only: a new process would not be stopped with the worker */
	if (!rc)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
				      SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
	if (!rc)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	/* signals to itself only: not to the runner, not to another arm */
	if (!rc)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(kill), 1,
				      SCMP_A0(SCMP_CMP_NE, self));
	if (!rc)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(tgkill), 1,
				      SCMP_A0(SCMP_CMP_NE, self));
	if (!rc)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(rt_sigqueueinfo), 1,
				      SCMP_A0(SCMP_CMP_NE, self));
	if (!rc)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(rt_tgsigqueueinfo), 1,
				      SCMP_A0(SCMP_CMP_NE, self));
	/* the scheduling of no other process: a lower priority, class, CPU or
	   limit set on the baseline's worker (or the runner) would outlast the
	   candidate's own trials.  Its own (pid 0) only; by process group or
	   user it would reach them too */
	for (i = 0; !rc && i < sizeof(own_only) / sizeof(own_only[0]); i++) {
		int nr = seccomp_syscall_resolve_name(own_only[i]);

		if (nr != __NR_SCMP_ERROR)
			rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1,
					      SCMP_A0(SCMP_CMP_NE, 0));
	}
	if (!rc)   /* which: PRIO_PROCESS (0) only; who: 0 only */
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(setpriority), 1,
				      SCMP_A0(SCMP_CMP_NE, PRIO_PROCESS));
	if (!rc)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(setpriority), 1,
				      SCMP_A1(SCMP_CMP_NE, 0));
	if (!rc)   /* which: IOPRIO_WHO_PROCESS (1) only; who: 0 only */
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioprio_set), 1,
				      SCMP_A0(SCMP_CMP_NE, 1));
	if (!rc)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioprio_set), 1,
				      SCMP_A1(SCMP_CMP_NE, 0));
	if (!rc) {
		fd = memfd_create("atb-worker-seccomp", MFD_CLOEXEC);
		rc = fd < 0 ? -errno : seccomp_export_bpf(ctx, fd);
	}
	if (!rc && (len = lseek(fd, 0, SEEK_END)) > 0 && (bpf = atb_malloc((size_t)len)) &&
	    pread(fd, bpf, (size_t)len, 0) == len) {
		prog.len = (unsigned short)((size_t)len / sizeof(struct sock_filter));
		prog.filter = bpf;
		/* prctl, not seccomp(2): the job's own filter denies the latter */
		if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0))
			rc = -errno;
	} else if (!rc) {
		rc = -ENOMEM;
	}
	if (fd >= 0)
		close(fd);
	atb_free(bpf);
	seccomp_release(ctx);
	if (rc) {
		snprintf(why, why_size, "cannot load the worker's seccomp filter: %s",
			 strerror(-rc));
		return -1;
	}
	return 0;
}

static void reply(int sock, int rc, int ok, const char *msg)
{
	struct wreply r;

	memset(&r, 0, sizeof(r));
	r.rc = rc;
	r.ok = ok;
	if (msg)
		snprintf(r.msg, sizeof(r.msg), "%.*s", (int)sizeof(r.msg) - 1, msg);
	(void)send_msg(sock, &r, sizeof(r), -1);
}

int runner_worker_main(int argc, char **argv)
{
	static struct wmsg m;
	char *base, *end;
	unsigned long long b, s;
	atb_kernel_fn fn = NULL;
	char why[512];
	int sock = 3;

	if (argc != 5)
		return RUNNER_EXIT_BAD_JOB;
	b = strtoull(argv[2], &end, 10);
	s = strtoull(argv[3], &end, 10);
	/* the same range as the runner's, so the buffers' addresses agree */
	base = mmap((void *)(uintptr_t)b, (size_t)s, PROT_NONE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
	if (base == MAP_FAILED || base != (char *)(uintptr_t)b) {
		snprintf(why, sizeof(why), "cannot reserve the buffers' address range: %s",
			 strerror(errno));
		reply(sock, ENOMEM, 0, why);
		return RUNNER_EXIT_FAILED;
	}
	if (worker_confine((pid_t)strtol(argv[4], &end, 10), why, sizeof(why))) {
		reply(sock, EPERM, 0, why);
		return RUNNER_EXIT_FAILED;
	}
	for (;;) {
		struct msghdr h;
		struct iovec iov = {.iov_base = &m, .iov_len = sizeof(m)};
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(sizeof(int))];
		} c;
		struct cmsghdr *ch;
		ssize_t n;
		int fd = -1;

		memset(&h, 0, sizeof(h));
		h.msg_iov = &iov;
		h.msg_iovlen = 1;
		h.msg_control = c.b;
		h.msg_controllen = sizeof(c.b);
		n = recvmsg(sock, &h, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return RUNNER_EXIT_OK;  /* the runner is done */
		for (ch = CMSG_FIRSTHDR(&h); ch; ch = CMSG_NXTHDR(&h, ch))
			if (ch->cmsg_level == SOL_SOCKET && ch->cmsg_type == SCM_RIGHTS)
				memcpy(&fd, CMSG_DATA(ch), sizeof(int));
		if (m.op == W_CALL && fn && m.nbuf >= 0 && m.nbuf <= ATB_RUNNER_MAX_BUFFERS &&
		    m.nints >= 0 && m.nints <= ATB_RUNNER_MAX_PARAMS && m.nreals >= 0 &&
		    m.nreals <= ATB_RUNNER_MAX_PARAMS) {
			void *bufs[ATB_RUNNER_MAX_BUFFERS];
			struct atb_kernel_args args = {
				.buffers = bufs, .ints = m.ints, .reals = m.reals,
				.nbuffers = m.nbuf, .nints = m.nints, .nreals = m.nreals,
			};
			int i;

			for (i = 0; i < m.nbuf; i++)
				bufs[i] = (void *)(uintptr_t)m.addr[i];
			reply(sock, fn(&args), 1, NULL);
		} else if (m.op == W_NULL && !fn) {
			/* PROTO: timing.round_trip -- the round trip's worker: nothing loaded */
			reply(sock, 0, 1, NULL);
		} else if (m.op == W_MAP && fd >= 0) {
			void *p = mmap((void *)(uintptr_t)m.addr[0], (size_t)m.size[0],
				       PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE,
				       fd, 0);

			reply(sock, p == MAP_FAILED ? errno : 0, p != MAP_FAILED,
			      p == MAP_FAILED ? strerror(errno) : NULL);
		} else if (m.op == W_UNMAP) {
			(void)mmap((void *)(uintptr_t)m.addr[0], (size_t)m.size[0], PROT_NONE,
				   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
			reply(sock, 0, 1, NULL);
		} else if (m.op == W_LOAD && !fn) {
			void *dl, *sym;

			m.path[sizeof(m.path) - 1] = '\0';
			dl = dlopen(m.path, RTLD_NOW | RTLD_LOCAL);
			sym = dl ? dlsym(dl, ATB_KERNEL_SYMBOL) : NULL;
			if (!dl) {
				reply(sock, 0, 0, dlerror());
			} else if (!sym) {
				snprintf(why, sizeof(why), "no symbol '%s'", ATB_KERNEL_SYMBOL);
				reply(sock, ENOENT, 0, why);
			} else {
				memcpy(&fn, &sym, sizeof(fn));
				reply(sock, 0, 1, NULL);
			}
		} else {
			reply(sock, EINVAL, 0, "unknown or out-of-order request");
		}
		if (fd >= 0)
			close(fd);
	}
}
