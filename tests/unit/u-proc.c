/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The child-process module and the sandbox (src/proc), with real bwrap and
 * real processes: every sandbox rule has an escape attempt here that it
 * must stop -- writes outside the scratch folder, a look at the store's
 * folder, the caller's environment, a socket to the network, ptrace and
 * unshare, processes left behind (also after setsid), a file over the size
 * limit -- and the plain mechanics (exit status, a signal through bwrap,
 * an exec that fails, the facts).  Escape attempts are shell, bash and perl
 * one-liners (perl's syscall() reaches calls no shell tool makes).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "atb/alloc.h"
#include "atb/proc.h"
#include "proc/proc_int.h"
#include "util.h"
#include "banned.h"

static char tmp[256], scratch[300], store_dir[300];

static void setup(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/u-proc.XXXXXX");
	cr_assert_not_null(mkdtemp(tmp));
	snprintf(scratch, sizeof(scratch), "%s/scratch", tmp);
	snprintf(store_dir, sizeof(store_dir), "%s/store", tmp);
	cr_assert_eq(mkdir(scratch, 0700), 0);
	cr_assert_eq(mkdir(store_dir, 0700), 0);
	unsetenv("ATB_BWRAP");
	unsetenv("ATB_SANDBOX");
}

static void teardown(void)
{
	char cmd[400];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", tmp);
}

TestSuite(proc, .init = setup, .fini = teardown, .timeout = 60);

/* Run `sh -c script` in sb; stdout+stderr into out; returns the wait status. */
static int run_sh(struct atb_sandbox *sb, const char *script, char *out, size_t size)
{
	const char *argv[] = {"/bin/sh", "-c", script, NULL};
	struct atb_proc p;
	struct atb_error e;
	int pp[2], have = 0;
	ssize_t n;

	cr_assert_eq(pipe2(pp, O_CLOEXEC), 0);
	atb_error_clear(&e);
	cr_assert_eq(atb_proc_start(argv, -1, pp[1], pp[1], sb, &p, &e), ATB_OK, "%s", e.msg);
	close(pp[1]);
	while ((n = read(pp[0], out + have, size - 1 - (size_t)have)) > 0)
		have += (int)n;
	out[have] = '\0';
	close(pp[0]);
	cr_assert_eq(atb_proc_wait(&p, INT64_MAX), 1);
	atb_proc_reap(&p);
	return p.status;
}

static struct atb_sandbox *new_sb(enum atb_sandbox_mode mode)
{
	struct atb_sandbox *sb = NULL;
	struct atb_error e;

	atb_error_clear(&e);
	cr_assert_eq(atb_sandbox_new(mode, scratch, &sb, &e), ATB_OK, "%s", e.msg);
	return sb;
}

static int file_exists(const char *dir, const char *name)
{
	char p[600];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return access(p, F_OK) == 0;
}

Test(proc, plain_child_exit_status_and_exec_failure)
{
	const char *bad[] = {"/nonexistent/prog", NULL};
	struct atb_proc p;
	struct atb_error e;
	char out[256];
	int st = run_sh(NULL, "exit 7", out, sizeof(out));

	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 7);
	atb_error_clear(&e);
	cr_expect_eq(atb_proc_start(bad, -1, -1, -1, NULL, &p, &e), ATB_OK);
	cr_expect_eq(p.exec_errno, ENOENT);
	atb_proc_reap(&p);
	{
		const char *none[] = {"no-such-program-atb", NULL};

		cr_expect_eq(atb_proc_start(none, -1, -1, -1, NULL, &p, &e), ATB_ERR_NOT_FOUND);
		cr_expect_str_eq(e.msg, "cannot find 'no-such-program-atb' in PATH");
	}
}

Test(proc, sandbox_is_full_here_and_says_so)
{
	struct atb_sandbox *sb = new_sb(ATB_SANDBOX_AUTO);
	char out[256], *text;
	json_t *f;
	int st = run_sh(sb, "id -u", out, sizeof(out));

	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", out);
	/* install-deps.sh installs bubblewrap: this box gives the full level */
	f = atb_sandbox_facts(sb);
	text = json_dumps(f, JSON_COMPACT);
	cr_expect_str_eq(json_string_value(json_object_get(f, "level")), "full", "%s", text);
	cr_expect_str_eq(out, "65534\n", "another uid inside: %s", out);
	cr_expect(strstr(text, "\"pid_namespace\"") && strstr(text, "\"filesystem_view\"") &&
		  strstr(text, "\"network_namespace\"") && strstr(text, "\"seccomp"), "%s",
		  text);
	free(text);
	json_decref(f);
	atb_sandbox_free(sb);
}

Test(proc, writes_outside_scratch_fail_and_change_nothing)
{
	struct atb_sandbox *sb = new_sb(ATB_SANDBOX_AUTO);
	char out[2048], script[1024];
	int st;

	snprintf(script, sizeof(script),
		 "echo ok > here; "
		 "echo x > ../escape 2>/dev/null; "  /* lands in the private /tmp at most */
		 "echo x > /tmp/u-proc-escape-%d 2>/dev/null; "
		 "echo x > /etc/u-proc-escape 2>/dev/null && echo ESCAPED-ETC; "
		 "echo x > /usr/u-proc-escape 2>/dev/null && echo ESCAPED-USR; "
		 "echo x > %s/planted 2>/dev/null && echo ESCAPED-STORE; true",
		 (int)getpid(), store_dir);
	st = run_sh(sb, script, out, sizeof(out));
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", out);
	cr_expect_null(strstr(out, "ESCAPED"), "%s", out);
	cr_expect(file_exists(scratch, "here"), "the scratch folder is read-write");
	cr_expect_not(file_exists(tmp, "escape"));
	{
		char t[64];

		snprintf(t, sizeof(t), "u-proc-escape-%d", (int)getpid());
		cr_expect_not(file_exists("/tmp", t), "/tmp inside is private");
	}
	cr_expect_not(file_exists("/etc", "u-proc-escape"));
	cr_expect_not(file_exists(store_dir, "planted"));
	atb_sandbox_free(sb);
}

Test(proc, the_store_folder_is_never_shown)
{
	struct atb_sandbox *sb;
	struct atb_error e;
	char out[1024], script[1024], db[400];
	json_t *f, *refused;
	FILE *fp;

	snprintf(db, sizeof(db), "%s/atb.db", store_dir);
	fp = fopen(db, "w");
	cr_assert_not_null(fp);
	fputs("secret rows", fp);
	fclose(fp);
	atbi_sandbox_forbid(store_dir);
	sb = new_sb(ATB_SANDBOX_AUTO);
	atb_error_clear(&e);
	/* the store's folder itself, and a folder above it, are refused; the file is fine */
	cr_expect_eq(atb_sandbox_ro(sb, store_dir, &e), ATB_OK);
	cr_expect_eq(atb_sandbox_ro(sb, tmp, &e), ATB_OK);
	snprintf(script, sizeof(script), "cat %s 2>&1 || echo HIDDEN; ls %s 2>&1 || echo NOTMP",
		 db, tmp);
	run_sh(sb, script, out, sizeof(out));
	cr_expect_null(strstr(out, "secret rows"), "%s", out);
	cr_expect(strstr(out, "HIDDEN"), "%s", out);
	f = atb_sandbox_facts(sb);
	refused = json_object_get(f, "refused_paths");
	cr_expect_eq(json_array_size(refused), 2);
	json_decref(f);
	atb_sandbox_free(sb);
}

Test(proc, the_environment_is_clean)
{
	struct atb_sandbox *sb = new_sb(ATB_SANDBOX_AUTO);
	struct atb_error e;
	static const char *const pass[] = {"U_PROC_PASSED", NULL};
	char out[4096];

	setenv("ATB_DB", "/somewhere/atb.db", 1);
	setenv("OPENAI_API_KEY", "sk-u-proc-secret", 1);
	setenv("U_PROC_PASSED", "yes", 1);
	atb_error_clear(&e);
	cr_assert_eq(atb_sandbox_pass_env(sb, pass, &e), ATB_OK);
	run_sh(sb, "env", out, sizeof(out));
	cr_expect_null(strstr(out, "ATB_DB"), "%s", out);
	cr_expect_null(strstr(out, "sk-u-proc-secret"), "%s", out);
	cr_expect(strstr(out, "U_PROC_PASSED=yes"), "%s", out);
	cr_expect(strstr(out, "HOME=/tmp/u-proc."), "HOME is the scratch folder: %s", out);
	cr_expect(strstr(out, "TMPDIR=/tmp\n"), "%s", out);
	atb_sandbox_free(sb);
}

Test(proc, no_network_no_ptrace_no_namespaces)
{
	struct atb_sandbox *sb = new_sb(ATB_SANDBOX_AUTO);
	char out[2048];

	/* bash's /dev/tcp opens an AF_INET socket */
	run_sh(sb,
	       "bash -c 'echo x > /dev/tcp/127.0.0.1/9' 2>/dev/null && echo NET-OPEN; "
	       "perl -e 'print syscall(41, 2, 1, 0) < 0 ? \"socket:$!\\n\" : \"SOCKET-OK\\n\"'; "
	       "perl -e 'print syscall(101, 0, 0, 0, 0) < 0 ? \"ptrace:$!\\n\" : \"PTRACE-OK\\n\"'; "
	       "perl -e 'print syscall(272, 0x10000000) < 0 ? \"unshare:$!\\n\" : \"UNSHARE-OK\\n\"'",
	       out, sizeof(out));
	cr_expect_null(strstr(out, "NET-OPEN"), "%s", out);
	cr_expect(strstr(out, "socket:Address family not supported"), "%s", out);
#if !defined(__SANITIZE_ADDRESS__)
	cr_expect(strstr(out, "ptrace:Operation not permitted"), "%s", out);
#endif
	cr_expect(strstr(out, "unshare:Operation not permitted"), "%s", out);
	atb_sandbox_free(sb);
}

/* 1 when a process whose command line holds marker is alive. */
static int alive(const char *marker)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int found = 0;

	cr_assert_not_null(d);
	while (!found && (de = readdir(d))) {
		char p[300], buf[512];
		ssize_t n;
		int fd;
		size_t i;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(p, sizeof(p), "/proc/%s/cmdline", de->d_name);
		fd = open(p, O_RDONLY);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		for (i = 0; i < (size_t)n; i++)
			if (!buf[i])
				buf[i] = ' ';
		buf[n] = '\0';
		if (strstr(buf, marker))
			found = 1;
	}
	closedir(d);
	return found;
}

/*
 * alive(marker) once it has settled to want, polled for up to 5 s: a
 * killed process needs the CPU to exit, and a started one to exec, which a
 * loaded box can delay past any fixed pause (200 ms was one).
 */
static int alive_settled(const char *marker, int want)
{
	int i, a = alive(marker);

	for (i = 0; i < 500 && a != want; i++) {
		usleep(10000);
		a = alive(marker);
	}
	return a;
}

Test(proc, nothing_outlives_the_child)
{
	struct atb_sandbox *sb = new_sb(ATB_SANDBOX_AUTO);
	char out[512];

	/* left behind in the background, and escaped from the group with setsid */
	run_sh(sb, "sleep 41.25 & setsid sleep 42.25 & sleep 0.2; echo started", out,
	       sizeof(out));
	cr_expect_not(alive_settled("sleep 41.25", 0), "a background child outlived the job");
	cr_expect_not(alive_settled("sleep 42.25", 0), "a setsid child outlived the job");
	atb_sandbox_free(sb);
}

Test(proc, limits_hold)
{
	struct atb_sandbox *sb = new_sb(ATB_SANDBOX_AUTO);
	struct atb_sandbox_limits l = {.fsize_bytes = 1 << 20, .cpu_s = 1};
	char out[512];
	int st;

	atb_sandbox_set_limits(sb, &l);
	st = run_sh(sb, "head -c 2000000 /dev/zero > big; echo rc=$?", out, sizeof(out));
	cr_expect(strstr(out, "rc=153") || strstr(out, "rc=1"), "%s", out);
	{
		struct stat s;
		char p[400];

		snprintf(p, sizeof(p), "%s/big", scratch);
		cr_expect(stat(p, &s) == 0 && s.st_size <= (1 << 20));
	}
	/* a busy loop ends at the CPU limit, by SIGXCPU/SIGKILL, seen as a signal */
	st = run_sh(sb, "exec perl -e 'while (1) {}'", out, sizeof(out));
	cr_expect(WIFSIGNALED(st) && (WTERMSIG(st) == SIGXCPU || WTERMSIG(st) == SIGKILL),
		  "status %d", st);
	atb_sandbox_free(sb);
}

/*
 * PROTO: sandbox -- the process limit holds whoever runs atb (a pids
 * cgroup of the job's own: RLIMIT_NPROC does not bind uid 0), forks past
 * it are counted, and the cgroup goes with the job; where none can be
 * made the facts say why.
 */
Test(proc, a_process_limit_holds_as_root_and_says_how)
{
	struct atb_sandbox *sb = new_sb(ATB_SANDBOX_AUTO);
	struct atb_sandbox_limits l = {.nproc = 24};
	const char *argv[] = {"/bin/sh", "-c",
			      "i=0; while [ $i -lt 60 ]; do sleep 30 >/dev/null 2>&1 & "
			      "i=$((i+1)); done; echo forked", NULL};
	struct atb_proc p;
	struct atb_error e;
	char out[4096], cg[512], *text;
	const char *how;
	int pp[2], have = 0;
	ssize_t n;
	json_t *f;

	atb_sandbox_set_limits(sb, &l);
	cr_assert_eq(pipe2(pp, O_CLOEXEC), 0);
	atb_error_clear(&e);
	cr_assert_eq(atb_proc_start(argv, -1, pp[1], pp[1], sb, &p, &e), ATB_OK, "%s", e.msg);
	close(pp[1]);
	while ((n = read(pp[0], out + have, sizeof(out) - 1 - (size_t)have)) > 0)
		have += (int)n;
	out[have] = '\0';
	close(pp[0]);
	cr_assert_eq(atb_proc_wait(&p, INT64_MAX), 1);
	f = atb_sandbox_facts(sb);
	text = json_dumps(f, JSON_COMPACT);
	how = json_string_value(json_object_get(json_object_get(f, "process_limit"), "how"));
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(f, "process_limit"),
							"max_tasks")), 24, "%s", text);
	snprintf(cg, sizeof(cg), "%s", p.cgroup);
	if (how && !strncmp(how, "cgroup", 6)) {
		cr_expect(p.cgroup[0], "the job's cgroup is kept until the reap");
		cr_expect_gt(atb_proc_limit_hits(&p), 0, "forks past 24 tasks refused: %s", out);
		cr_expect(strstr(text, "\"nproc_limit\""), "%s", text);
	} else if (!how) {
		cr_expect(strstr(text, "\"rule\":\"nproc_limit\""), "%s", text);
		cr_expect(json_string_value(json_object_get(json_object_get(f, "process_limit"),
							    "why")), "%s", text);
	}
	atb_proc_reap(&p);
	cr_expect_not(p.cgroup[0]);
	if (cg[0])
		cr_expect_neq(access(cg, F_OK), 0, "'%s' removed with the job", cg);
	free(text);
	json_decref(f);
	atb_sandbox_free(sb);
}

Test(proc, a_signal_through_bwrap_reads_as_the_signal)
{
	struct atb_sandbox *sb = new_sb(ATB_SANDBOX_AUTO);
	char out[64];
	int st = run_sh(sb, "kill -SEGV $$", out, sizeof(out));

	cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "status %d", st);
	st = run_sh(sb, "exit 3", out, sizeof(out));
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 3, "status %d", st);
	atb_sandbox_free(sb);
}

Test(proc, without_bwrap_auto_degrades_and_says_what_is_missing)
{
	struct atb_sandbox *sb;
	char out[1024], *text;
	json_t *f;

	setenv("ATB_BWRAP", "/nonexistent/bwrap", 1);
	setenv("U_PROC_SECRET", "hidden", 1);
	sb = new_sb(ATB_SANDBOX_AUTO);
	run_sh(sb, "env; pwd; perl -e 'print syscall(101, 0, 0, 0, 0) < 0 ? \"ptrace:$!\\n\" : "
		   "\"PTRACE-OK\\n\"'",
	       out, sizeof(out));
	cr_expect_null(strstr(out, "U_PROC_SECRET"), "%s", out);
	cr_expect(strstr(out, scratch), "runs in the scratch folder: %s", out);
#if !defined(__SANITIZE_ADDRESS__)
	cr_expect(strstr(out, "ptrace:Operation not permitted"), "%s", out);
#endif
	f = atb_sandbox_facts(sb);
	text = json_dumps(f, JSON_COMPACT);
	cr_expect_str_eq(json_string_value(json_object_get(f, "level")), "seccomp_only");
	cr_expect(strstr(text, "{\"rule\":\"filesystem_view\",\"why\":\"no bwrap (bubblewrap) "
			       "found in PATH or ATB_BWRAP\"}"),
		  "%s", text);
	free(text);
	json_decref(f);
	atb_sandbox_free(sb);
}

Test(proc, require_refuses_when_the_sandbox_cannot_be_had)
{
	const char *argv[] = {"/bin/true", NULL};
	struct atb_sandbox *sb;
	struct atb_proc p;
	struct atb_error e;

	setenv("ATB_BWRAP", "/nonexistent/bwrap", 1);
	sb = new_sb(ATB_SANDBOX_REQUIRE);
	atb_error_clear(&e);
	cr_expect_eq(atb_proc_start(argv, -1, -1, -1, sb, &p, &e), ATB_ERR_USAGE);
	cr_expect_str_eq(e.msg, "the sandbox is required (ATB_SANDBOX=require) but cannot be "
				"had here: no bwrap (bubblewrap) found in PATH or ATB_BWRAP");
	atb_sandbox_free(sb);
}

Test(proc, mode_from_env)
{
	enum atb_sandbox_mode m;
	struct atb_error e;

	setenv("ATB_SANDBOX", "require", 1);
	cr_expect_eq(atb_sandbox_mode_from_env(&m, &e), ATB_OK);
	cr_expect_eq(m, ATB_SANDBOX_REQUIRE);
	setenv("ATB_SANDBOX", "off", 1);
	cr_expect_eq(atb_sandbox_mode_from_env(&m, &e), ATB_OK);
	cr_expect_eq(m, ATB_SANDBOX_OFF);
	setenv("ATB_SANDBOX", "loose", 1);
	cr_expect_eq(atb_sandbox_mode_from_env(&m, &e), ATB_ERR_USAGE);
	cr_expect_str_eq(e.msg, "bad ATB_SANDBOX 'loose': expected auto, require or off");
}

/* ---- options, forked children, stop and tree kill ---- */

/* Run `sh -c script` as a plain child with opts; stdout+stderr into out; the wait status. */
static int run_sh_opts(const struct atb_proc_opts *o, const char *script, char *out,
		       size_t size)
{
	const char *argv[] = {"/bin/sh", "-c", script, NULL};
	struct atb_proc p;
	struct atb_error e;
	int pp[2], have = 0;
	ssize_t n;

	cr_assert_eq(pipe2(pp, O_CLOEXEC), 0);
	atb_error_clear(&e);
	cr_assert_eq(atb_proc_start_opts(argv, -1, pp[1], pp[1], NULL, o, &p, &e), ATB_OK, "%s",
		     e.msg);
	close(pp[1]);
	while ((n = read(pp[0], out + have, size - 1 - (size_t)have)) > 0)
		have += (int)n;
	out[have] = '\0';
	close(pp[0]);
	cr_assert_eq(atb_proc_wait(&p, INT64_MAX), 1);
	atb_proc_reap(&p);
	return p.status;
}

Test(proc, env_changes_set_and_remove_and_find_the_program_on_the_new_path)
{
	const char *env[] = {"ATB_U_NEW=n", "ATB_U_GONE", "ATB_U_KEEP=k2", NULL};
	struct atb_proc_opts o = {.env = env};
	char out[256], bin[400], prog[500], path[600];
	const char *argv[] = {"atb-u-prog", NULL};
	const char *penv[] = {path, NULL};
	struct atb_proc_opts po = {.env = penv};
	struct atb_sandbox *sb;
	struct atb_proc p;
	struct atb_error e;
	FILE *f;

	setenv("ATB_U_KEEP", "k", 1);
	setenv("ATB_U_GONE", "g", 1);
	run_sh_opts(&o, "echo \"$ATB_U_KEEP:${ATB_U_GONE-unset}:$ATB_U_NEW\"", out, sizeof(out));
	cr_expect_str_eq(out, "k2:unset:n\n");
	/* the caller's own environment is untouched */
	cr_expect_str_eq(getenv("ATB_U_GONE"), "g");
	run_sh_opts(NULL, "echo \"${ATB_U_GONE-unset}:${ATB_U_NEW-unset}\"", out, sizeof(out));
	cr_expect_str_eq(out, "g:unset\n");

	/* a name without a slash is looked up in the PATH the child gets */
	snprintf(bin, sizeof(bin), "%s/bin", tmp);
	cr_assert_eq(mkdir(bin, 0700), 0);
	snprintf(prog, sizeof(prog), "%s/atb-u-prog", bin);
	f = fopen(prog, "w");
	cr_assert_not_null(f);
	fputs("#!/bin/sh\nexit 5\n", f);
	fclose(f);
	cr_assert_eq(chmod(prog, 0700), 0);
	snprintf(path, sizeof(path), "PATH=%s:/usr/bin:/bin", bin);
	atb_error_clear(&e);
	cr_assert_eq(atb_proc_start_opts(argv, -1, -1, -1, NULL, &po, &p, &e), ATB_OK, "%s",
		     e.msg);
	cr_expect_eq(atb_proc_wait(&p, INT64_MAX), 1);
	atb_proc_reap(&p);
	cr_expect(WIFEXITED(p.status) && WEXITSTATUS(p.status) == 5, "status %d", p.status);
	cr_expect_eq(atb_proc_start_opts(argv, -1, -1, -1, NULL, NULL, &p, &e),
		     ATB_ERR_NOT_FOUND);

	/* a sandbox has its own environment: changes through opts are refused */
	sb = new_sb(ATB_SANDBOX_AUTO);
	cr_expect_eq(atb_proc_start_opts(argv, -1, -1, -1, sb, &o, &p, &e), ATB_ERR_USAGE);
	atb_sandbox_free(sb);
}

static int pin_first_cpu(void *arg)
{
	cpu_set_t *set = arg;

	return sched_setaffinity(0, sizeof(*set), set) ? 100 : 0;
}

static int say_and_refuse(void *arg)
{
	(void)arg;
	if (write(2, "hook says no\n", 13) < 0)
		return 101;
	return 42;
}

Test(proc, before_exec_runs_in_the_child_and_can_stop_it)
{
	cpu_set_t mine, one;
	struct atb_proc_opts o = {.before_exec = pin_first_cpu, .before_exec_arg = &one};
	struct atb_proc_opts no = {.before_exec = say_and_refuse};
	char out[512], want[64];
	int cpu, st;

	cr_assert_eq(sched_getaffinity(0, sizeof(mine), &mine), 0);
	for (cpu = 0; cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &mine); cpu++)
		;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	/* the program (and all it makes) runs on the one CPU; this process does not */
	st = run_sh_opts(&o, "grep Cpus_allowed_list /proc/self/status", out, sizeof(out));
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	snprintf(want, sizeof(want), "Cpus_allowed_list:\t%d\n", cpu);
	cr_expect_str_eq(out, want);
	{
		cpu_set_t now;

		cr_assert_eq(sched_getaffinity(0, sizeof(now), &now), 0);
		cr_expect(CPU_EQUAL(&now, &mine), "the hook ran in the parent");
	}
	/* non-zero: that is the exit status, the program never runs */
	st = run_sh_opts(&no, "echo the program ran", out, sizeof(out));
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 42, "status %d", st);
	cr_expect_str_eq(out, "hook says no\n");
}

struct fn_arg {
	int fd;
	int with_death_signal;
};

/* Start a sleeper (with or without a death signal), tell its pid, end. */
static int start_sleeper(void *arg)
{
	const struct fn_arg *a = arg;
	const char *argv[] = {"/bin/sleep", "43.25", NULL};
	struct atb_proc_opts o = {.death_signal = a->with_death_signal ? SIGKILL : 0};
	struct atb_proc p;
	struct atb_error e;

	if (atb_proc_start_opts(argv, -1, -1, -1, NULL, &o, &p, &e))
		return 1;
	if (write(a->fd, &p.pid, sizeof(p.pid)) != (ssize_t)sizeof(p.pid))
		return 2;
	return 7;
}

/* 1 when pid is gone (or a zombie) within 2 s. */
static int gone(pid_t pid)
{
	int i;

	for (i = 0; i < 200; i++) {
		char path[64], buf[256], *rp;
		int fd;
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		fd = open(path, O_RDONLY);
		if (fd < 0)
			return 1;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		buf[n > 0 ? n : 0] = '\0';
		rp = strrchr(buf, ')');
		if (!rp || rp[1] == '\0' || rp[2] == 'Z' || rp[2] == 'X')
			return 1;
		usleep(10000);
	}
	return 0;
}

static pid_t sleeper_of_a_forked_child(int with_death_signal)
{
	struct fn_arg a = {-1, with_death_signal};
	struct atb_proc p;
	struct atb_error e;
	int pp[2];
	pid_t pid = -1;

	cr_assert_eq(pipe2(pp, O_CLOEXEC), 0);
	a.fd = pp[1];
	atb_error_clear(&e);
	cr_assert_eq(atb_proc_start_fn(start_sleeper, &a, NULL, &p, &e), ATB_OK, "%s", e.msg);
	close(pp[1]);
	cr_assert_eq(read(pp[0], &pid, sizeof(pid)), (ssize_t)sizeof(pid));
	close(pp[0]);
	cr_assert_eq(atb_proc_wait(&p, INT64_MAX), 1);
	atb_proc_reap(&p);
	cr_expect(WIFEXITED(p.status) && WEXITSTATUS(p.status) == 7, "status %d", p.status);
	return pid;
}

Test(proc, a_death_signal_ends_a_child_with_the_thread_that_started_it)
{
	pid_t pid = sleeper_of_a_forked_child(1);

	cr_expect(gone(pid), "the sleeper outlived the process that started it");
	/* without one, the sleeper (in a group of its own) stays: the control */
	pid = sleeper_of_a_forked_child(0);
	cr_expect_not(gone(pid), "the control sleeper died without a death signal");
	kill(pid, SIGKILL);
}

static int nothing(void *arg)
{
	(void)arg;
	return 0;
}

Test(proc, a_forked_child_does_not_write_what_the_parent_buffered)
{
	struct atb_proc_opts o = {.death_signal = SIGKILL};
	const char *env[] = {"A=1", NULL};
	struct atb_proc_opts bad = {.env = env};
	char path[400], buf[64];
	struct atb_proc p;
	struct atb_error e;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/buffered", tmp);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	cr_assert_eq(setvbuf(f, NULL, _IOFBF, 4096), 0);
	fputs("once", f);
	atb_error_clear(&e);
	cr_assert_eq(atb_proc_start_fn(nothing, NULL, &o, &p, &e), ATB_OK, "%s", e.msg);
	cr_expect_eq(atb_proc_wait(&p, INT64_MAX), 1);
	atb_proc_reap(&p);
	cr_expect(WIFEXITED(p.status) && WEXITSTATUS(p.status) == 0);
	fclose(f);
	f = fopen(path, "r");
	cr_assert_not_null(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	cr_expect_str_eq(buf, "once");
	cr_expect_eq(atb_proc_start_fn(nothing, NULL, &bad, &p, &e), ATB_ERR_USAGE);
}

/* Start `sh -c script` and wait for its first line (it is ready). */
static void start_ready(const char *script, struct atb_proc *p)
{
	const char *argv[] = {"/bin/sh", "-c", script, NULL};
	struct atb_error e;
	int pp[2];
	char c = 0;

	cr_assert_eq(pipe2(pp, O_CLOEXEC), 0);
	atb_error_clear(&e);
	cr_assert_eq(atb_proc_start(argv, -1, pp[1], -1, NULL, p, &e), ATB_OK, "%s", e.msg);
	close(pp[1]);
	while (read(pp[0], &c, 1) == 1 && c != '\n')
		;
	close(pp[0]);
	cr_assert_eq(c, '\n');
}

Test(proc, stop_asks_first_then_kills)
{
	struct atb_proc p;
	int64_t t0;

	start_ready("trap 'exit 3' TERM; echo ready; while :; do sleep 0.05; done", &p);
	atb_proc_stop(&p, SIGTERM, 10LL * 1000000000LL);
	cr_expect(WIFEXITED(p.status) && WEXITSTATUS(p.status) == 3, "status %d", p.status);

	/* one that ignores the request is killed once the grace is over */
	start_ready("trap '' TERM; echo ready; exec sleep 45.25", &p);
	t0 = atbi_monotonic_ns();
	atb_proc_stop(&p, SIGTERM, 300LL * 1000000LL);
	cr_expect(WIFSIGNALED(p.status) && WTERMSIG(p.status) == SIGKILL, "status %d", p.status);
	cr_expect_geq(atbi_monotonic_ns() - t0, 300LL * 1000000LL);
	cr_expect_not(alive("sleep 45.25"));
}

Test(proc, kill_takes_what_left_the_group)
{
	struct atb_proc p;

	/* a session of its own (setsid) and a group of its own (a job of sh -m) */
	start_ready("setsid sleep 46.25 & set -m; sleep 47.25 & echo ready; wait", &p);
	cr_assert(alive_settled("sleep 46.25", 1) && alive_settled("sleep 47.25", 1));
	atb_proc_kill(&p);
	atb_proc_reap(&p);
	cr_expect_not(alive_settled("sleep 46.25", 0), "a setsid child outlived the kill");
	cr_expect_not(alive_settled("sleep 47.25", 0),
		      "a child in a group of its own outlived the kill");
}
