/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The child-process module: start a program (optionally inside the
 * sandbox), wait for it with a deadline, kill its whole tree, reap it.
 *
 * The sandbox is for everything that runs or compiles candidate code
 * (docs/design.md, "The trust boundary"): atb-runner and the compilers.  It is
 * bubblewrap (bwrap) with a seccomp filter made by libseccomp: new user,
 * PID, network, IPC and UTS namespaces; a filesystem view of the system's
 * read-only folders plus the paths the caller names; a private /tmp, /proc
 * and /dev; a scratch folder (read-write, the working folder, HOME and
 * TMPDIR); a clean environment; resource limits; no capabilities and
 * no_new_privs; and the PID namespace's end takes every process the child
 * left.  Where a part cannot be had on this machine (no bwrap, no user
 * namespaces) the child still gets what can be had here -- the clean
 * environment, the scratch folder, the limits, the seccomp filter, a
 * parent-death signal -- and atb_sandbox_facts() says, per rule, what was
 * enforced and what was not, for the result to carry.
 *
 * Does not: judge anything, read the child's output (the caller owns the
 * descriptors it hands in), or decide what a job may see (the runner's
 * harness and the build do, with atbi_sandbox_* calls).
 */
#ifndef ATB_PROC_H
#define ATB_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "atb/status.h"

/* How strictly the sandbox is asked for ($ATB_SANDBOX: auto, require, off). */
enum atb_sandbox_mode {
	ATB_SANDBOX_AUTO = 0,     /* the strongest level this machine allows; gaps recorded */
	ATB_SANDBOX_REQUIRE = 1,  /* refuse to start unless every rule is enforced */
	ATB_SANDBOX_OFF = 2,      /* no sandbox at all (recorded as such in every result) */
};

/* A sandbox description; make with atb_sandbox_new, free with atb_sandbox_free. */
struct atb_sandbox;

/*
 * A new sandbox description for the given mode, with a scratch folder
 * (must exist; read-write, the child's working folder, HOME and TMPDIR).
 * Caller owns *out (atb_sandbox_free); NULL on failure.  ATB_ERR_NOMEM,
 * ATB_ERR_USAGE (no scratch, relative scratch).
 */
enum atb_status atb_sandbox_new(enum atb_sandbox_mode mode, const char *scratch,
				struct atb_sandbox **out, struct atb_error *err);
void atb_sandbox_free(struct atb_sandbox *sb);

/*
 * Paths the child sees at the same place: read-only, read-write, or a
 * device node.  A path that does not exist is skipped (recorded).  A
 * folder that holds the store, the audit mirror, ATB_HOME or the caller's
 * working folder (an ancestor of, or equal to, any of them) is never bound:
 * it is skipped and recorded as refused, so a job cannot see the store
 * through a path the caller did not think about.  Files are always fine.
 * ATB_ERR_NOMEM, ATB_ERR_USAGE (relative path, too many paths).
 */
enum atb_status atb_sandbox_ro(struct atb_sandbox *sb, const char *path, struct atb_error *err);
enum atb_status atb_sandbox_rw(struct atb_sandbox *sb, const char *path, struct atb_error *err);
enum atb_status atb_sandbox_dev(struct atb_sandbox *sb, const char *path, struct atb_error *err);

/* Each absolute folder of a colon-separated list (LD_LIBRARY_PATH's form) read-only; NULL: none. */
enum atb_status atb_sandbox_ro_list(struct atb_sandbox *sb, const char *list,
				    struct atb_error *err);

/*
 * An interpreter as it describes itself (the task module's python info:
 * "executable", "library", "home" -- a colon list --, "path" [...]), each
 * absolute part read-only.  info may be NULL.
 */
enum atb_status atb_sandbox_python(struct atb_sandbox *sb, const json_t *info,
				   struct atb_error *err);

/*
 * One KEY=VALUE of the child's environment, which is otherwise only PATH,
 * HOME, TMPDIR and LANG.  atb_sandbox_pass_env copies the caller's value of
 * each listed name that is set (names only, e.g. "CUDA_VISIBLE_DEVICES").
 */
enum atb_status atb_sandbox_env(struct atb_sandbox *sb, const char *key, const char *value,
				struct atb_error *err);
enum atb_status atb_sandbox_pass_env(struct atb_sandbox *sb, const char *const *names,
				     struct atb_error *err);

/* Resource limits; 0 leaves one unset.  Defaults: none but core 0. */
struct atb_sandbox_limits {
	uint64_t cpu_s;          /* RLIMIT_CPU */
	uint64_t data_bytes;     /* RLIMIT_DATA (not for CUDA: it maps far more) */
	uint64_t fsize_bytes;    /* RLIMIT_FSIZE */
	uint64_t nofile;         /* RLIMIT_NOFILE */
	/* At most this many tasks (processes and threads) in the job at once:
	   a pids cgroup of the job's own where one can be made (cgroup v2 with
	   pids delegated, or v1's pids hierarchy: root), else RLIMIT_NPROC
	   when not uid 0 (which counts every process of the uid); uid 0 is
	   exempt from RLIMIT_NPROC, so without a cgroup nothing holds it and
	   the facts say so (nproc_limit in not_enforced). */
	uint64_t nproc;
};
void atb_sandbox_set_limits(struct atb_sandbox *sb, const struct atb_sandbox_limits *l);

/*
 * What the sandbox enforces on this machine, as JSON (caller owns it):
 * {"mode", "level" ("full", "no_userns", "seccomp_only", "off"), "tool"
 *  ("bwrap 0.8.0" or null), "enforced": [rule...], "not_enforced":
 *  [{"rule", "why"}...], "refused_paths": [...], "skipped_paths": [...]}.
 * Rules: filesystem_view, private_tmp, pid_namespace, network_namespace,
 * ipc_namespace, user_namespace, no_capabilities, no_new_privs, seccomp,
 * clean_env, scratch_cwd, rlimits, nproc_limit, kill_tree, die_with_parent.
 * With a process limit asked for: "process_limit": {"max_tasks", "how"
 * ("cgroup v2 pids", "cgroup v1 pids", "RLIMIT_NPROC (per uid)") or null
 * with "why" when nothing enforces it}.
 * Valid after atb_proc_start (the level is probed once per process).
 */
json_t *atb_sandbox_facts(const struct atb_sandbox *sb);

/* A started child.  Fill with atb_proc_start; end with atb_proc_reap. */
struct atb_proc {
	pid_t pid;              /* the child (bwrap when sandboxed); its group's leader */
	int status;             /* waitpid status once reaped */
	int reaped;
	int exec_errno;         /* the direct child's exec failed: its errno; else 0 */
	int sandboxed;          /* bwrap stands between us and the program */
	char cgroup[512];       /* the job's own pids cgroup (removed at reap); "" when none */
};

/*
 * Start argv (argv[0] an absolute path, or a name looked up in $PATH of
 * the caller) with fds in/out/err as its 0/1/2 (-1: /dev/null), in a new
 * process group, inside sb (NULL: a plain child that inherits the
 * environment: only for trusted programs).  Other descriptors are not
 * inherited.  ATB_ERR_SYSTEM (fork, pipe), ATB_ERR_USAGE (sandbox
 * required but not to be had here: the message says which rule),
 * ATB_ERR_NOMEM.
 */
enum atb_status atb_proc_start(const char *const *argv, int in, int out, int errfd,
			       struct atb_sandbox *sb, struct atb_proc *p,
			       struct atb_error *err);

/*
 * What else a child may need, for atb_proc_start_opts and atb_proc_start_fn
 * (git's struct child_process is the model).  All zero: nothing.
 */
struct atb_proc_opts {
	/*
	 * Plain children only (a sandbox has atb_sandbox_env): changes to the
	 * caller's environment, NULL-ended; "NAME=VALUE" sets, "NAME" removes.
	 * argv[0] without a slash is looked up in the PATH the child gets.
	 */
	const char *const *env;
	/*
	 * Run in the child once 0-2 are in place, right before the exec (and
	 * before a sandbox's limits and filter): what must hold for every
	 * thread the program makes, e.g. sched_setaffinity.  Returns 0 to go
	 * on; anything else is the child's exit status and the program does
	 * not run (the hook says why on fd 2 if it wants to).  The caller may
	 * have threads: only async-signal-safe calls.
	 */
	int (*before_exec)(void *arg);
	void *before_exec_arg;
	/*
	 * A plain child's signal when the thread that started it ends
	 * (PR_SET_PDEATHSIG); 0: none.  Sandboxed children always get SIGKILL.
	 */
	int death_signal;
};

/* atb_proc_start with opts (NULL: as atb_proc_start).  ATB_ERR_USAGE: env with a sandbox. */
enum atb_status atb_proc_start_opts(const char *const *argv, int in, int out, int errfd,
				    struct atb_sandbox *sb, const struct atb_proc_opts *opts,
				    struct atb_proc *p, struct atb_error *err);

/*
 * Run fn(arg) in a forked copy of this process, for atb's own work that
 * must not share its state (a suite's task; git's start_async): its own
 * process group, opts->death_signal, exit status fn's return (0-255).
 * The copy keeps every descriptor and signal handler of the parent (it is
 * atb's code: close or reset what it must not keep); stdio is flushed
 * before the fork so that nothing buffered is written twice.  Only
 * death_signal of opts is used (ATB_ERR_USAGE for env or before_exec).
 * ATB_ERR_SYSTEM (fork).
 */
enum atb_status atb_proc_start_fn(int (*fn)(void *arg), void *arg,
				  const struct atb_proc_opts *opts, struct atb_proc *p,
				  struct atb_error *err);

/*
 * Reap the child if it has exited, waiting until deadline_ns
 * (atbi_monotonic_ns clock; 0: do not wait; INT64_MAX: forever).
 * Returns 1 when reaped (p->status set), 0 when still running.
 */
int atb_proc_wait(struct atb_proc *p, int64_t deadline_ns);

/*
 * SIGKILL the child's whole tree: its process group, and, while it is not
 * reaped, every process under it (from /proc) with its group, so that
 * children that made groups or sessions of their own go too (a runner
 * that atb's child started; a setsid).  Sandboxed, bwrap's death also
 * takes its PID namespace.  Not this process's own group.
 */
void atb_proc_kill(struct atb_proc *p);

/*
 * Ask the child to end: sig (e.g. SIGTERM) to its group, up to grace_ns
 * for it to exit, then atb_proc_reap (SIGKILL to the tree, as above).
 * Sandboxed, bwrap gets sig and its end takes the namespace: the program
 * itself gets no grace.  p->status says how it ended.
 */
void atb_proc_stop(struct atb_proc *p, int sig, int64_t grace_ns);

/*
 * Kill whatever is left of the tree and reap the child (blocking).  Call
 * once per started child, also after atb_proc_wait returned 1: a process
 * the child left behind in its group goes too.
 */
void atb_proc_reap(struct atb_proc *p);

/*
 * How many forks (or thread creations) the job's process limit has
 * refused so far (its pids cgroup's "max" events); 0 when none, or when
 * the child has no cgroup.  Read it before atb_proc_reap, which removes
 * the cgroup.  A job that reaches its limit is a fork bomb contained.
 */
long atb_proc_limit_hits(const struct atb_proc *p);

/*
 * A fresh scratch folder "$TMPDIR/PREFIX-XXXXXX" (mode 0700) into buf.
 * ATB_ERR_SYSTEM (mkdtemp), ATB_ERR_USAGE (too long); buf is "" then.
 */
enum atb_status atb_proc_scratch(const char *prefix, char *buf, size_t size,
				 struct atb_error *err);

/* Remove dir and all below it, links as links (nothing outside it); "" is a no-op. */
void atb_proc_remove_tree(const char *dir);

/* The mode $ATB_SANDBOX asks for; an unknown value is ATB_ERR_USAGE naming it. */
enum atb_status atb_sandbox_mode_from_env(enum atb_sandbox_mode *mode, struct atb_error *err);

#endif
