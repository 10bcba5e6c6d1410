/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Internals of the child-process module shared by proc.c and sandbox.c,
 * and the hooks other modules call (the store registers its folder as one
 * the sandbox must never show).
 */
#ifndef ATB_PROC_INT_H
#define ATB_PROC_INT_H

#include <stddef.h>

#include "atb/proc.h"
#include "util.h"

/* Levels, strongest first (facts "level"). */
enum sb_level {
	SB_LEVEL_FULL = 0,      /* bwrap with a user namespace */
	SB_LEVEL_NO_USERNS,     /* bwrap as root without a user namespace */
	SB_LEVEL_SECCOMP_ONLY,  /* no bwrap: env, scratch, limits, seccomp, death signal */
	SB_LEVEL_OFF,           /* ATB_SANDBOX=off */
};

/*
 * The prepared child side of a sandbox: the argv to exec (bwrap's, or the
 * program's own at seccomp_only), the environment, the limits, the BPF
 * program for the child to load itself (seccomp_only) and the descriptor
 * bwrap reads it from (full levels).  Everything is allocated before fork:
 * the child only calls async-signal-safe functions.
 */
struct sb_exec {
	char **argv;
	char **envp;
	int seccomp_fd;            /* for bwrap --seccomp; -1 when none */
	void *bpf;                 /* struct sock_fprog for the child; NULL when none */
	int level;
	int no_new_privs;
	struct atb_sandbox_limits lim;
	const char *chdir_to;      /* seccomp_only: the scratch folder */
	int cg_fd;                 /* the job's pids cgroup's cgroup.procs; -1 when none */
	char cg_dir[512];          /* that cgroup (removed by release unless handed on) */
};

ATBI_FUNC enum atb_status atbi_sandbox_prepare(struct atb_sandbox *sb, const char *const *argv,
					       struct sb_exec *x, struct atb_error *err);
ATBI_FUNC void atbi_sandbox_exec_release(struct sb_exec *x);
/* In the child: limits, no_new_privs, the filter (seccomp_only), then exec. Never returns. */
ATBI_FUNC void atbi_sandbox_child_exec(const struct sb_exec *x, int errfd) __attribute__((noreturn));

/* Kill what is left in a job's pids cgroup and remove it (bounded wait). */
ATBI_FUNC void atbi_cgroup_end(const char *dir);

/* A folder that must never be bound into a sandbox (nor any folder above it). */
ATBI_FUNC void atbi_sandbox_forbid(const char *path);

#endif
