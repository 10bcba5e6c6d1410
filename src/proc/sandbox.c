/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The sandbox for candidate code: the description (paths, environment,
 * limits), the probe of what this machine allows, the bwrap command line,
 * the seccomp filter (libseccomp) and the facts a result carries.
 *
 * Why bwrap and libseccomp: both are well-kept, small, and do exactly the
 * namespace and filter set-up a hand-written sandbox gets wrong.  The
 * filter denies what could reach outside the namespaces or forge what the
 * harness sees (ptrace and process_vm_*, mounts and new namespaces, kernel
 * modules and keyrings, bpf and perf, io_uring, clock setting, sockets
 * other than AF_UNIX) and is loaded by bwrap right before it execs the
 * program, so the program and all it starts run under it.
 *
 * Does not: fork or wait (proc.c does), decide what a job may see (the
 * harness and the build do).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>

#include "atb/alloc.h"
#include "atb/atb.h"
#include "atb/proc.h"
#include "proc_int.h"
#include "util.h"
#include "banned.h"

#define SB_MAX_PATHS 96
#define SB_MAX_ENV 48
#define SB_MAX_FORBID 16

enum { P_RO, P_RW, P_DEV };

struct sb_path {
	char *src;   /* realpath */
	char *dst;   /* as the caller named it (absolute) */
	int kind;
	int is_dir;
};

struct atb_sandbox {
	enum atb_sandbox_mode mode;
	char *scratch;
	struct sb_path paths[SB_MAX_PATHS];
	size_t npaths;
	char *env[SB_MAX_ENV];
	size_t nenv;
	struct atb_sandbox_limits lim;
	json_t *refused;   /* paths not bound because they hold the store (or above) */
	json_t *skipped;   /* paths that do not exist */
	int level;         /* set by prepare */
	const char *nproc_how;  /* what holds lim.nproc (set by prepare); NULL: nothing */
	char nproc_why[400];    /* why no pids cgroup could be made */
};

/* ---- folders never shown ------------------------------------------------ */

static char forbid[SB_MAX_FORBID][PATH_MAX];
static size_t nforbid;

void atbi_sandbox_forbid(const char *path)
{
	char real[PATH_MAX];
	size_t i;

	if (!path || !*path || !realpath(path, real))
		return;
	for (i = 0; i < nforbid; i++)
		if (!strcmp(forbid[i], real))
			return;
	if (nforbid < SB_MAX_FORBID)
		snprintf(forbid[nforbid++], PATH_MAX, "%s", real);
}

static void forbid_defaults(void)
{
	char db[PATH_MAX], *slash, cwd[PATH_MAX];

	if (getcwd(cwd, sizeof(cwd)))
		atbi_sandbox_forbid(cwd);
	atbi_sandbox_forbid(atb_home());
	snprintf(db, sizeof(db), "%s", atb_default_db_path());
	slash = strrchr(db, '/');
	if (slash) {
		*slash = '\0';
		atbi_sandbox_forbid(db[0] ? db : "/");
	} else {
		atbi_sandbox_forbid(".");
	}
}

/* 1 when dir is one of the forbidden folders or above one of them. */
static int holds_forbidden(const char *dir)
{
	size_t i, n = strlen(dir);

	for (i = 0; i < nforbid; i++) {
		const char *f = forbid[i];

		if (!strcmp(dir, "/") || !strcmp(f, dir) ||
		    (!strncmp(f, dir, n) && f[n] == '/'))
			return 1;
	}
	return 0;
}

/* ---- the description ---------------------------------------------------- */

enum atb_status atb_sandbox_mode_from_env(enum atb_sandbox_mode *mode, struct atb_error *err)
{
	const char *v = getenv("ATB_SANDBOX");

	*mode = ATB_SANDBOX_AUTO;
	if (!v || !*v || !strcmp(v, "auto"))
		return ATB_OK;
	if (!strcmp(v, "require")) {
		*mode = ATB_SANDBOX_REQUIRE;
		return ATB_OK;
	}
	if (!strcmp(v, "off")) {
		*mode = ATB_SANDBOX_OFF;
		return ATB_OK;
	}
	return atb_error_set(err, ATB_ERR_USAGE,
			     "bad ATB_SANDBOX '%.100s': expected auto, require or off", v);
}

enum atb_status atb_sandbox_new(enum atb_sandbox_mode mode, const char *scratch,
				struct atb_sandbox **out, struct atb_error *err)
{
	struct atb_sandbox *sb;

	*out = NULL;
	if (!scratch || scratch[0] != '/')
		return atb_error_set(err, ATB_ERR_USAGE,
				     "sandbox scratch folder '%s' is not an absolute path",
				     scratch ? scratch : "");
	sb = atb_calloc(1, sizeof(*sb));
	if (!sb || !(sb->scratch = atb_strdup(scratch)) || !(sb->refused = json_array()) ||
	    !(sb->skipped = json_array())) {
		atb_sandbox_free(sb);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot make a sandbox: out of memory");
	}
	sb->mode = mode;
	sb->level = mode == ATB_SANDBOX_OFF ? SB_LEVEL_OFF : -1;
	forbid_defaults();
	*out = sb;
	return ATB_OK;
}

void atb_sandbox_free(struct atb_sandbox *sb)
{
	size_t i;

	if (!sb)
		return;
	for (i = 0; i < sb->npaths; i++) {
		atb_free(sb->paths[i].src);
		atb_free(sb->paths[i].dst);
	}
	for (i = 0; i < sb->nenv; i++)
		atb_free(sb->env[i]);
	json_decref(sb->refused);
	json_decref(sb->skipped);
	atb_free(sb->scratch);
	atb_free(sb);
}

static int under_system(const char *real);

static enum atb_status add_path(struct atb_sandbox *sb, const char *path, int kind,
				struct atb_error *err)
{
	char real[PATH_MAX];
	struct stat st;
	size_t i;

	if (!path || path[0] != '/')
		return atb_error_set(err, ATB_ERR_USAGE, "sandbox path '%s' is not absolute",
				     path ? path : "");
	if (!realpath(path, real) || stat(real, &st)) {
		json_array_append_new(sb->skipped, json_string(path));
		return ATB_OK;
	}
	if (S_ISDIR(st.st_mode) && kind != P_DEV && holds_forbidden(real)) {
		json_array_append_new(sb->refused, json_string(path));
		return ATB_OK;
	}
	/* already seen read-only at the same place through /usr, /opt, ...: a
	   second bind under a read-only mount cannot even be made */
	if (kind == P_RO && under_system(real) && under_system(path))
		return ATB_OK;
	for (i = 0; i < sb->npaths; i++)
		if (!strcmp(sb->paths[i].dst, path)) {
			if (kind == P_RW)
				sb->paths[i].kind = P_RW;
			return ATB_OK;
		}
	if (sb->npaths >= SB_MAX_PATHS)
		return atb_error_set(err, ATB_ERR_USAGE, "too many sandbox paths (at most %d)",
				     SB_MAX_PATHS);
	sb->paths[sb->npaths].src = atb_strdup(real);
	sb->paths[sb->npaths].dst = atb_strdup(path);
	if (!sb->paths[sb->npaths].src || !sb->paths[sb->npaths].dst) {
		atb_free(sb->paths[sb->npaths].src);
		atb_free(sb->paths[sb->npaths].dst);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot add a sandbox path: out of memory");
	}
	sb->paths[sb->npaths].kind = kind;
	sb->paths[sb->npaths].is_dir = S_ISDIR(st.st_mode);
	sb->npaths++;
	return ATB_OK;
}

enum atb_status atb_sandbox_ro(struct atb_sandbox *sb, const char *path, struct atb_error *err)
{
	return add_path(sb, path, P_RO, err);
}

enum atb_status atb_sandbox_rw(struct atb_sandbox *sb, const char *path, struct atb_error *err)
{
	return add_path(sb, path, P_RW, err);
}

enum atb_status atb_sandbox_dev(struct atb_sandbox *sb, const char *path, struct atb_error *err)
{
	return add_path(sb, path, P_DEV, err);
}

enum atb_status atb_sandbox_ro_list(struct atb_sandbox *sb, const char *list,
				    struct atb_error *err)
{
	char buf[8192], *save = NULL, *d;
	enum atb_status st = ATB_OK;

	snprintf(buf, sizeof(buf), "%s", list ? list : "");
	for (d = strtok_r(buf, ":", &save); !st && d; d = strtok_r(NULL, ":", &save))
		if (d[0] == '/')
			st = atb_sandbox_ro(sb, d, err);
	return st;
}

enum atb_status atb_sandbox_python(struct atb_sandbox *sb, const json_t *info,
				   struct atb_error *err)
{
	static const char *const files[] = {"executable", "library"};
	enum atb_status st = ATB_OK;
	const json_t *p;
	size_t i;

	for (i = 0; !st && i < 2; i++) {
		const char *f = json_string_value(json_object_get(info, files[i]));

		if (f && f[0] == '/')
			st = atb_sandbox_ro(sb, f, err);
	}
	if (!st)
		st = atb_sandbox_ro_list(sb, json_string_value(json_object_get(info, "home")), err);
	json_array_foreach(json_object_get(info, "path"), i, p) {
		const char *d = json_string_value(p);

		if (!st && d && d[0] == '/')
			st = atb_sandbox_ro(sb, d, err);
	}
	return st;
}

enum atb_status atb_sandbox_env(struct atb_sandbox *sb, const char *key, const char *value,
				struct atb_error *err)
{
	size_t n = strlen(key) + strlen(value) + 2, i, kl = strlen(key);
	char *kv;

	if (!*key || strchr(key, '='))
		return atb_error_set(err, ATB_ERR_USAGE, "bad environment name '%s'", key);
	kv = atb_malloc(n);
	if (!kv)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot set '%s': out of memory", key);
	snprintf(kv, n, "%s=%s", key, value);
	for (i = 0; i < sb->nenv; i++)
		if (!strncmp(sb->env[i], key, kl) && sb->env[i][kl] == '=') {
			atb_free(sb->env[i]);
			sb->env[i] = kv;
			return ATB_OK;
		}
	if (sb->nenv >= SB_MAX_ENV) {
		atb_free(kv);
		return atb_error_set(err, ATB_ERR_USAGE, "too many sandbox variables (at most %d)",
				     SB_MAX_ENV);
	}
	sb->env[sb->nenv++] = kv;
	return ATB_OK;
}

enum atb_status atb_sandbox_pass_env(struct atb_sandbox *sb, const char *const *names,
				     struct atb_error *err)
{
	enum atb_status st;

	for (; names && *names; names++) {
		const char *v = getenv(*names);

		if (v && (st = atb_sandbox_env(sb, *names, v, err)))
			return st;
	}
	return ATB_OK;
}

void atb_sandbox_set_limits(struct atb_sandbox *sb, const struct atb_sandbox_limits *l)
{
	sb->lim = *l;
}

/* ---- the seccomp filter --------------------------------------------------- */

/* Sanitizer builds: LeakSanitizer stops the world with ptrace at exit. */
#if defined(__SANITIZE_ADDRESS__)
#define SB_ALLOW_PTRACE 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SB_ALLOW_PTRACE 1
#endif
#endif
#ifndef SB_ALLOW_PTRACE
#define SB_ALLOW_PTRACE 0
#endif

static const char *const denied_calls[] = {
	"process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "chroot",
	"unshare", "setns", "kexec_load", "kexec_file_load", "init_module", "finit_module",
	"delete_module", "reboot", "swapon", "swapoff", "acct", "bpf", "keyctl", "add_key",
	"request_key", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"open_by_handle_at", "name_to_handle_at", "fanotify_init", "perf_event_open",
	"seccomp", "mount_setattr", "move_mount", "open_tree", "fsopen", "fsmount", "fspick",
	"quotactl", "syslog", "vhangup", "iopl", "ioperm", "settimeofday", "clock_settime",
	"clock_adjtime", "adjtimex", "lookup_dcookie", "personality",
};

/* The filter as a BPF program (caller owns *bpf, *len bytes). */
static enum atb_status build_filter(void **bpf, size_t *len, struct atb_error *err)
{
	static const int ns_flags[] = {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET,
				       CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP};
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int rc = 0, fd = -1;
	size_t i;
	off_t size;

	*bpf = NULL;
	*len = 0;
	if (!ctx)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot make the seccomp filter");
	for (i = 0; !rc && i < sizeof(denied_calls) / sizeof(denied_calls[0]); i++) {
		int nr = seccomp_syscall_resolve_name(denied_calls[i]);

		if (nr != __NR_SCMP_ERROR)
			rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
	}
	if (!rc && !SB_ALLOW_PTRACE)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ptrace), 0);
	for (i = 0; !rc && i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
				      SCMP_A0(SCMP_CMP_MASKED_EQ, (scmp_datum_t)ns_flags[i],
					      (scmp_datum_t)ns_flags[i]));
	/* clone3's flags are behind a pointer: ENOSYS makes libc fall back to clone */
	if (!rc)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	if (!rc)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
				      SCMP_A0(SCMP_CMP_NE, AF_UNIX));
	if (!rc)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
				      SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI));
	if (!rc) {
		fd = memfd_create("atb-seccomp", MFD_CLOEXEC);
		rc = fd < 0 ? -errno : seccomp_export_bpf(ctx, fd);
	}
	if (!rc && (size = lseek(fd, 0, SEEK_END)) > 0) {
		*bpf = atb_malloc((size_t)size);
		if (*bpf && pread(fd, *bpf, (size_t)size, 0) == size)
			*len = (size_t)size;
		else
			rc = -ENOMEM;
	}
	if (fd >= 0)
		close(fd);
	seccomp_release(ctx);
	if (rc || !*len) {
		atb_free(*bpf);
		*bpf = NULL;
		return atb_error_set(err, ATB_ERR_SYSTEM, "cannot make the seccomp filter: %s",
				     strerror(rc < 0 ? -rc : EINVAL));
	}
	return ATB_OK;
}

/* ---- the probe ------------------------------------------------------------ */

static char bwrap_path[PATH_MAX];
static char bwrap_version[64];
static int probed_level = -1;
static char probe_why[512];

static const char *const system_ro[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
					"/libx32", "/opt"};
/* Of /etc only what loaders, compilers and interpreters read. */
static const char *const etc_ro[] = {"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
				     "/etc/alternatives", "/etc/localtime", "/etc/passwd",
				     "/etc/group", "/etc/nsswitch.conf", "/etc/hosts",
				     "/etc/nvidia", "/etc/OpenCL", "/etc/gcrypt"};

/* 1 when path lies under a system folder that system_binds() shows as it is. */
static int under_system(const char *path)
{
	size_t i;

	for (i = 0; i < sizeof(system_ro) / sizeof(system_ro[0]); i++) {
		size_t n = strlen(system_ro[i]);
		struct stat st;
		char real[PATH_MAX];

		if (strncmp(path, system_ro[i], n) || (path[n] != '/' && path[n] != '\0'))
			continue;
		/* a symlinked /lib is /usr/lib: covered when /usr is */
		if (lstat(system_ro[i], &st) || S_ISLNK(st.st_mode) ||
		    !realpath(system_ro[i], real) || holds_forbidden(real))
			continue;
		return 1;
	}
	return 0;
}

static int find_bwrap(void)
{
	const char *env = getenv("ATB_BWRAP"), *path = getenv("PATH");
	char buf[PATH_MAX], *save = NULL, *dir, list[8192];

	if (env && *env) {
		snprintf(bwrap_path, sizeof(bwrap_path), "%s", env);
		return access(bwrap_path, X_OK) == 0;
	}
	snprintf(list, sizeof(list), "%s", path && *path ? path : "/usr/bin:/bin");
	for (dir = strtok_r(list, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		snprintf(buf, sizeof(buf), "%s/bwrap", dir);
		if (access(buf, X_OK) == 0) {
			snprintf(bwrap_path, sizeof(bwrap_path), "%s", buf);
			return 1;
		}
	}
	return 0;
}

/* Run argv with stdout/stderr into buf; 0 when it exited 0. */
static int run_quiet(char *const *argv, char *buf, size_t size)
{
	int p[2], status = 0;
	size_t have = 0;
	pid_t pid;

	buf[0] = '\0';
	if (pipe2(p, O_CLOEXEC))
		return -1;
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);

		if (devnull >= 0)
			dup2(devnull, 0);
		dup2(p[1], 1);
		dup2(p[1], 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		ssize_t n = read(p[0], buf + have, size - 1 - have);

		if (n > 0 && have + (size_t)n < size - 1)
			have += (size_t)n;
		else if (n < 0 && errno == EINTR)
			continue;
		else
			break;
	}
	buf[have] = '\0';
	close(p[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

static int probe_level(int level)
{
	char out[512];
	char *argv[40];
	size_t n = 0, i;

	argv[n++] = bwrap_path;
	if (level == SB_LEVEL_FULL)
		argv[n++] = "--unshare-user";
	argv[n++] = "--unshare-pid";
	argv[n++] = "--unshare-net";
	argv[n++] = "--unshare-ipc";
	argv[n++] = "--unshare-uts";
	argv[n++] = "--die-with-parent";
	argv[n++] = "--new-session";
	argv[n++] = "--cap-drop";
	argv[n++] = "ALL";
	for (i = 0; i < 3; i++) {
		static char *const sys[] = {"/usr", "/lib", "/lib64"};
		struct stat st;

		if (lstat(sys[i], &st))
			continue;
		argv[n++] = S_ISLNK(st.st_mode) ? "--symlink" : "--ro-bind";
		argv[n++] = S_ISLNK(st.st_mode) ? (i == 1 ? "usr/lib" : "usr/lib64") : sys[i];
		argv[n++] = sys[i];
	}
	argv[n++] = "--proc";
	argv[n++] = "/proc";
	argv[n++] = "--dev";
	argv[n++] = "/dev";
	argv[n++] = "--";
	argv[n++] = access("/usr/bin/true", X_OK) == 0 ? "/usr/bin/true" : "/bin/true";
	argv[n] = NULL;
	if (run_quiet(argv, out, sizeof(out)) == 0)
		return 1;
	out[strcspn(out, "\n")] = '\0';
	snprintf(probe_why, sizeof(probe_why), "%s", out[0] ? out : "bwrap failed");
	return 0;
}

static void probe(void)
{
	char *argv[3];

	if (probed_level >= 0)
		return;
	if (!find_bwrap()) {
		probed_level = SB_LEVEL_SECCOMP_ONLY;
		snprintf(probe_why, sizeof(probe_why),
			 "no bwrap (bubblewrap) found in PATH or ATB_BWRAP");
		return;
	}
	argv[0] = bwrap_path;
	argv[1] = "--version";
	argv[2] = NULL;
	if (run_quiet(argv, bwrap_version, sizeof(bwrap_version)) == 0)
		bwrap_version[strcspn(bwrap_version, "\n")] = '\0';
	else
		snprintf(bwrap_version, sizeof(bwrap_version), "bwrap");
	if (probe_level(SB_LEVEL_FULL))
		probed_level = SB_LEVEL_FULL;
	else if (geteuid() == 0 && probe_level(SB_LEVEL_NO_USERNS))
		probed_level = SB_LEVEL_NO_USERNS;
	else
		probed_level = SB_LEVEL_SECCOMP_ONLY;
}

/* ---- the process limit: a pids cgroup of the job's own ------------------- */

/*
 * Why a cgroup and not only RLIMIT_NPROC: the kernel exempts uid 0 (and
 * CAP_SYS_RESOURCE) from RLIMIT_NPROC, and atb often runs as root (CI, the
 * GPU machines); bwrap's user namespace does not help, since it maps the
 * sandbox's uid onto the caller's, still uid 0 outside.  A pids cgroup
 * counts every task of the job, whoever it runs as, and only the job's:
 * RLIMIT_NPROC counts every process of the uid on the machine.
 */

static unsigned cg_serial;

static int has_token(const char *list, const char *tok)
{
	size_t n = strlen(tok);
	const char *p = list;

	while ((p = strstr(p, tok))) {
		if ((p == list || p[-1] == ',' || p[-1] == ' ') &&
		    (p[n] == '\0' || p[n] == ',' || p[n] == ' ' || p[n] == '\n'))
			return 1;
		p += n;
	}
	return 0;
}

static int write_text(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), e;
	ssize_t w;

	if (fd < 0)
		return -1;
	w = write(fd, text, strlen(text));
	e = errno;
	close(fd);
	errno = e;
	return w == (ssize_t)strlen(text) ? 0 : -1;
}

/* mnt + this process's path in the hierarchy (relative to the mount's root). */
static int cg_join(char *out, size_t size, const char *mnt, const char *root, const char *path)
{
	size_t n = strlen(root);
	int w;

	if (strcmp(root, "/") && !strncmp(path, root, n) && (path[n] == '/' || !path[n]))
		path += n;
	w = snprintf(out, size, "%s%s", mnt, strcmp(path, "/") ? path : "");
	return w < 0 || (size_t)w >= size ? -1 : 0;   /* a cut path names another cgroup */
}

/*
 * This process's cgroup folders where a pids limit can be set: v2's when
 * its subtree has pids enabled, v1's pids hierarchy; "" where none.
 */
static void pids_homes(char *v2, char *v1, size_t size)
{
	char line[4096], mnt2[1024] = "", root2[1024] = "", mnt1[1024] = "", root1[1024] = "";
	char path2[1024] = "", path1[1024] = "", ctl[1200];
	FILE *f = fopen("/proc/self/mountinfo", "re");

	v2[0] = v1[0] = '\0';
	while (f && fgets(line, sizeof(line), f)) {
		/* "id parent maj:min root mountpoint opts [optional...] - fstype source superopts" */
		char root[1024], mnt[1024], fstype[64], src[256], sopts[1024];
		const char *dash = strstr(line, " - ");

		if (!dash || sscanf(line, "%*s %*s %*s %1023s %1023s", root, mnt) != 2 ||
		    sscanf(dash + 3, "%63s %255s %1023s", fstype, src, sopts) != 3)
			continue;
		if (!strcmp(fstype, "cgroup2") && !mnt2[0]) {
			snprintf(mnt2, sizeof(mnt2), "%s", mnt);
			snprintf(root2, sizeof(root2), "%s", root);
		} else if (!strcmp(fstype, "cgroup") && has_token(sopts, "pids") && !mnt1[0]) {
			snprintf(mnt1, sizeof(mnt1), "%s", mnt);
			snprintf(root1, sizeof(root1), "%s", root);
		}
	}
	if (f)
		fclose(f);
	f = fopen("/proc/self/cgroup", "re");
	while (f && fgets(line, sizeof(line), f)) {
		/* "hierarchy:controllers:path" */
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;

		if (!c2)
			continue;
		*c2 = '\0';
		c2[1 + strcspn(c2 + 1, "\n")] = '\0';
		if (!strcmp(line, "0:") || (!strncmp(line, "0:", 2) && c1 + 1 == c2))
			snprintf(path2, sizeof(path2), "%s", c2 + 1);
		else if (has_token(c1 + 1, "pids"))
			snprintf(path1, sizeof(path1), "%s", c2 + 1);
	}
	if (f)
		fclose(f);
	if (mnt2[0] && path2[0]) {
		char sub[1100] = "";
		FILE *s;

		int w = cg_join(ctl, sizeof(ctl), mnt2, root2, path2) ? -1
			: snprintf(line, sizeof(line), "%s/cgroup.subtree_control", ctl);

		if (w >= 0 && (size_t)w < sizeof(line) && (s = fopen(line, "re"))) {
			if (fgets(sub, sizeof(sub), s) && has_token(sub, "pids") &&
			    (size_t)snprintf(v2, size, "%s", ctl) >= size)
				v2[0] = '\0';
			fclose(s);
		}
	}
	if (mnt1[0] && path1[0] && !cg_join(ctl, sizeof(ctl), mnt1, root1, path1) &&
	    (size_t)snprintf(v1, size, "%s", ctl) >= size)
		v1[0] = '\0';
}

/* A cgroup of its own under home with pids.max = max: its folder, its cgroup.procs open. */
static int cg_make(const char *home, uint64_t max, char *dir, size_t size, int *fd)
{
	char path[700], num[32];
	int e;

	snprintf(dir, size, "%s/atb-%ld-%u", home, (long)getpid(), cg_serial++);
	if (mkdir(dir, 0755))
		return -1;
	snprintf(path, sizeof(path), "%s/pids.max", dir);
	snprintf(num, sizeof(num), "%llu\n", (unsigned long long)max);
	if (write_text(path, num))
		goto fail;
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	if ((*fd = open(path, O_WRONLY | O_CLOEXEC)) < 0)
		goto fail;
	return 0;
fail:
	e = errno;
	rmdir(dir);
	dir[0] = '\0';
	errno = e;
	return -1;
}

/* The job's cgroup for x, or why there is none (sb->nproc_why). */
static void cg_prepare(struct atb_sandbox *sb, struct sb_exec *x)
{
	char v2[512], v1[512];

	sb->nproc_how = NULL;
	sb->nproc_why[0] = '\0';
	pids_homes(v2, v1, sizeof(v2));
	if (v2[0] && !cg_make(v2, sb->lim.nproc, x->cg_dir, sizeof(x->cg_dir), &x->cg_fd)) {
		sb->nproc_how = "cgroup v2 pids";
		return;
	}
	if (v2[0])
		snprintf(sb->nproc_why, sizeof(sb->nproc_why), "cannot make a cgroup under '%.150s': %s; ",
			 v2, strerror(errno));
	if (v1[0] && !cg_make(v1, sb->lim.nproc, x->cg_dir, sizeof(x->cg_dir), &x->cg_fd)) {
		sb->nproc_how = "cgroup v1 pids";
		return;
	}
	if (v1[0]) {
		size_t n = strlen(sb->nproc_why);

		snprintf(sb->nproc_why + n, sizeof(sb->nproc_why) - n,
			 "cannot make a cgroup under '%.150s': %s", v1, strerror(errno));
	} else if (!v2[0]) {
		snprintf(sb->nproc_why, sizeof(sb->nproc_why),
			 "no pids cgroup controller here (neither v2 with pids delegated nor v1's "
			 "pids hierarchy)");
	}
	x->cg_fd = -1;
	x->cg_dir[0] = '\0';
}

void atbi_cgroup_end(const char *dir)
{
	char path[700], buf[4096];
	int tries;

	if (!dir || !dir[0])
		return;
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	/* every task killed, then the folder; a fork bomb may still fork
	   between the read and the kill: again, up to about 2 s */
	for (tries = 0; tries < 400; tries++) {
		struct timespec ts = {0, 5000000};
		int fd;
		ssize_t n;

		if (!rmdir(dir) || errno == ENOENT)
			return;
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return;
		while ((n = read(fd, buf, sizeof(buf) - 1)) > 0) {
			char *p = buf, *end;

			buf[n] = '\0';
			for (;;) {
				long pid = strtol(p, &end, 10);

				if (end == p)
					break;
				if (pid > 1)
					kill((pid_t)pid, SIGKILL);
				p = end;
			}
		}
		close(fd);
		nanosleep(&ts, NULL);
	}
}

long atb_proc_limit_hits(const struct atb_proc *p)
{
	char path[700], line[128];
	long hits = 0;
	FILE *f;

	if (!p || !p->cgroup[0])
		return 0;
	snprintf(path, sizeof(path), "%s/pids.events", p->cgroup);
	if (!(f = fopen(path, "re")))
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "max %ld", &hits) == 1)
			break;
	fclose(f);
	return hits;
}

/* ---- the command line ------------------------------------------------------- */

struct argbuf {
	char **v;
	size_t n, cap;
	int oom;
};

static void arg(struct argbuf *a, const char *s)
{
	if (a->oom)
		return;
	if (a->n + 2 > a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 128;
		char **nv = atb_realloc(a->v, cap * sizeof(*nv));

		if (!nv) {
			a->oom = 1;
			return;
		}
		a->v = nv;
		a->cap = cap;
	}
	if (!(a->v[a->n] = atb_strdup(s))) {
		a->oom = 1;
		return;
	}
	a->v[++a->n] = NULL;
}

static void free_strv(char **v)
{
	size_t i;

	for (i = 0; v && v[i]; i++)
		atb_free(v[i]);
	atb_free(v);
}

static void add_bind(struct argbuf *a, const char *how, const char *src, const char *dst)
{
	arg(a, how);
	arg(a, src);
	arg(a, dst);
}

static void system_binds(struct argbuf *a)
{
	size_t i;

	for (i = 0; i < sizeof(system_ro) / sizeof(system_ro[0]); i++) {
		struct stat st;
		char target[PATH_MAX], real[PATH_MAX];
		ssize_t n;

		if (lstat(system_ro[i], &st))
			continue;
		if (S_ISLNK(st.st_mode)) {
			n = readlink(system_ro[i], target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = '\0';
			add_bind(a, "--symlink", target, system_ro[i]);
		} else if (S_ISDIR(st.st_mode) && realpath(system_ro[i], real) &&
			   !holds_forbidden(real)) {
			add_bind(a, "--ro-bind", system_ro[i], system_ro[i]);
		}
	}
	for (i = 0; i < sizeof(etc_ro) / sizeof(etc_ro[0]); i++)
		if (access(etc_ro[i], F_OK) == 0)
			add_bind(a, "--ro-bind", etc_ro[i], etc_ro[i]);
	/* interpreters' own configuration (Debian's /etc/python3.11, ...) */
	{
		static const char *const py[] = {"/etc/python3", "/etc/python3.11", "/etc/python3.12",
						 "/etc/python3.13"};

		for (i = 0; i < sizeof(py) / sizeof(py[0]); i++)
			if (access(py[i], F_OK) == 0)
				add_bind(a, "--ro-bind", py[i], py[i]);
	}
}

static const char *const base_env[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
				       "/sbin:/bin:/usr/local/cuda/bin",
				       "LANG=C.UTF-8"};

static char **make_env(const struct atb_sandbox *sb)
{
	struct argbuf e = {0};
	char kv[PATH_MAX + 16];
	size_t i, j;

	for (i = 0; i < sizeof(base_env) / sizeof(base_env[0]); i++) {
		size_t kl = strcspn(base_env[i], "=");
		int overridden = 0;

		for (j = 0; j < sb->nenv; j++)
			if (!strncmp(sb->env[j], base_env[i], kl + 1))
				overridden = 1;
		if (!overridden)
			arg(&e, base_env[i]);
	}
	snprintf(kv, sizeof(kv), "HOME=%s", sb->scratch);
	arg(&e, kv);
	arg(&e, "TMPDIR=/tmp");
	for (i = 0; i < sb->nenv; i++)
		arg(&e, sb->env[i]);
	if (e.oom) {
		free_strv(e.v);
		return NULL;
	}
	return e.v;
}

enum atb_status atbi_sandbox_prepare(struct atb_sandbox *sb, const char *const *argv,
				     struct sb_exec *x, struct atb_error *err)
{
	struct argbuf a = {0};
	enum atb_status st;
	size_t bpf_len = 0, i;
	void *bpf = NULL;

	memset(x, 0, sizeof(*x));
	x->seccomp_fd = -1;
	x->cg_fd = -1;
	x->lim = sb->lim;
	if (sb->mode == ATB_SANDBOX_OFF) {
		sb->level = SB_LEVEL_OFF;
		for (i = 0; argv[i]; i++)
			arg(&a, argv[i]);
		x->argv = a.v;
		x->level = SB_LEVEL_OFF;
		x->chdir_to = sb->scratch;
		if (a.oom) {
			free_strv(a.v);
			x->argv = NULL;
			return atb_error_set(err, ATB_ERR_NOMEM, "cannot start: out of memory");
		}
		return ATB_OK;
	}
	probe();
	sb->level = probed_level;
	x->level = probed_level;
	if (sb->mode == ATB_SANDBOX_REQUIRE && probed_level != SB_LEVEL_FULL)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "the sandbox is required (ATB_SANDBOX=require) but cannot be "
				     "had here: %s", probe_why);
	st = build_filter(&bpf, &bpf_len, err);
	if (st)
		return st;
	x->envp = make_env(sb);
	if (!x->envp) {
		atb_free(bpf);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot start: out of memory");
	}
	x->no_new_privs = 1;
	/* PROTO: sandbox -- the process limit: a pids cgroup where one can be
	   made, RLIMIT_NPROC (per uid, not for uid 0) only where none can */
	if (sb->lim.nproc) {
		cg_prepare(sb, x);
		if (x->cg_fd >= 0)
			x->lim.nproc = 0;
		else if (geteuid() != 0)
			sb->nproc_how = "RLIMIT_NPROC (per uid)";
	}
	if (probed_level == SB_LEVEL_SECCOMP_ONLY) {
		struct sock_fprog *prog = atb_malloc(sizeof(*prog));

		if (!prog) {
			atb_free(bpf);
			return atb_error_set(err, ATB_ERR_NOMEM, "cannot start: out of memory");
		}
		prog->len = (unsigned short)(bpf_len / sizeof(struct sock_filter));
		prog->filter = bpf;
		x->bpf = prog;
		x->chdir_to = sb->scratch;
		for (i = 0; argv[i]; i++)
			arg(&a, argv[i]);
	} else {
		char fdtext[16];
		int fd = memfd_create("atb-seccomp", 0);  /* inherited by bwrap */

		if (fd < 0 || write(fd, bpf, bpf_len) != (ssize_t)bpf_len ||
		    lseek(fd, 0, SEEK_SET) != 0) {
			if (fd >= 0)
				close(fd);
			atb_free(bpf);
			return atb_error_set(err, ATB_ERR_SYSTEM, "cannot pass the seccomp filter: %s",
					     strerror(errno));
		}
		atb_free(bpf);
		x->seccomp_fd = fd;
		snprintf(fdtext, sizeof(fdtext), "%d", fd);
		arg(&a, bwrap_path);
		if (probed_level == SB_LEVEL_FULL) {
			arg(&a, "--unshare-user");
			arg(&a, "--uid");
			arg(&a, "65534");
			arg(&a, "--gid");
			arg(&a, "65534");
		}
		arg(&a, "--unshare-pid");
		arg(&a, "--unshare-net");
		arg(&a, "--unshare-ipc");
		arg(&a, "--unshare-uts");
		arg(&a, "--unshare-cgroup-try");
		arg(&a, "--die-with-parent");
		arg(&a, "--new-session");
		arg(&a, "--cap-drop");
		arg(&a, "ALL");
		system_binds(&a);
		arg(&a, "--proc");
		arg(&a, "/proc");
		arg(&a, "--dev");
		arg(&a, "/dev");
		arg(&a, "--tmpfs");
		arg(&a, "/tmp");
		for (i = 0; i < sb->npaths; i++) {
			const struct sb_path *p = &sb->paths[i];

			add_bind(&a, p->kind == P_RW ? "--bind" : p->kind == P_DEV ? "--dev-bind"
									: "--ro-bind",
			     p->src, p->dst);
		}
		add_bind(&a, "--bind", sb->scratch, sb->scratch);
		/* the root bwrap made (and the folders it made for the binds) read-only */
		arg(&a, "--remount-ro");
		arg(&a, "/");
		arg(&a, "--chdir");
		arg(&a, sb->scratch);
		arg(&a, "--clearenv");
		for (i = 0; x->envp[i]; i++) {
			char key[256];
			size_t kl = strcspn(x->envp[i], "=");

			snprintf(key, sizeof(key), "%.*s", (int)(kl < 255 ? kl : 255), x->envp[i]);
			arg(&a, "--setenv");
			arg(&a, key);
			arg(&a, x->envp[i] + kl + 1);
		}
		arg(&a, "--seccomp");
		arg(&a, fdtext);
		arg(&a, "--");
		for (i = 0; argv[i]; i++)
			arg(&a, argv[i]);
	}
	x->argv = a.v;
	if (a.oom) {
		atbi_sandbox_exec_release(x);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot start: out of memory");
	}
	return ATB_OK;
}

void atbi_sandbox_exec_release(struct sb_exec *x)
{
	free_strv(x->argv);
	free_strv(x->envp);
	if (x->bpf) {
		atb_free(((struct sock_fprog *)x->bpf)->filter);
		atb_free(x->bpf);
	}
	if (x->seccomp_fd >= 0)
		close(x->seccomp_fd);
	if (x->cg_fd >= 0)
		close(x->cg_fd);
	/* not handed on to a started child: nothing is in it */
	if (x->cg_dir[0])
		rmdir(x->cg_dir);
	memset(x, 0, sizeof(*x));
	x->seccomp_fd = -1;
	x->cg_fd = -1;
}

static void set_limit(int res, uint64_t v)
{
	struct rlimit rl;

	if (!v)
		return;
	rl.rlim_cur = rl.rlim_max = (rlim_t)v;
	(void)setrlimit(res, &rl);
}

void atbi_sandbox_child_exec(const struct sb_exec *x, int errfd)
{
	struct rlimit core = {0, 0};
	int e;

	/* into the job's pids cgroup first: whatever it starts is counted */
	if (x->cg_fd >= 0) {
		char num[24];
		size_t k = sizeof(num);
		long me = (long)getpid();

		do {
			num[--k] = (char)('0' + me % 10);
			me /= 10;
		} while (me && k);
		if (write(x->cg_fd, num + k, sizeof(num) - k) < 0) {
			e = errno;
			if (write(errfd, &e, sizeof(e)) < 0)
				_exit(126);
			_exit(126);
		}
	}
	if (x->level != SB_LEVEL_OFF) {
		(void)setrlimit(RLIMIT_CORE, &core);
		set_limit(RLIMIT_CPU, x->lim.cpu_s);
		set_limit(RLIMIT_DATA, x->lim.data_bytes);
		set_limit(RLIMIT_FSIZE, x->lim.fsize_bytes);
		set_limit(RLIMIT_NOFILE, x->lim.nofile);
		set_limit(RLIMIT_NPROC, x->lim.nproc);
		(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	}
	if (x->chdir_to && chdir(x->chdir_to)) {
		e = errno;
		if (write(errfd, &e, sizeof(e)) < 0)
			_exit(126);
		_exit(126);
	}
	if (x->no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) {
		e = errno;
		if (write(errfd, &e, sizeof(e)) < 0)
			_exit(126);
		_exit(126);
	}
	if (x->bpf && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, x->bpf)) {
		e = errno;
		if (write(errfd, &e, sizeof(e)) < 0)
			_exit(126);
		_exit(126);
	}
	if (x->envp)
		execve(x->argv[0], x->argv, x->envp);
	else
		execv(x->argv[0], x->argv);
	e = errno;
	if (write(errfd, &e, sizeof(e)) < 0)
		_exit(127);
	_exit(127);
}

/* ---- facts ------------------------------------------------------------------ */

static void no(json_t *arr, const char *rule, const char *why)
{
	json_array_append_new(arr, json_pack("{s:s, s:s}", "rule", rule, "why", why));
}

json_t *atb_sandbox_facts(const struct atb_sandbox *sb)
{
	static const char *const names[] = {"full", "no_userns", "seccomp_only", "off"};
	json_t *yes = json_array(), *not = json_array(), *o;
	int lv = sb->level < 0 ? SB_LEVEL_OFF : sb->level;
	int bw = lv == SB_LEVEL_FULL || lv == SB_LEVEL_NO_USERNS;
	static const char *const bw_rules[] = {"filesystem_view", "private_tmp", "pid_namespace",
					       "network_namespace", "ipc_namespace",
					       "no_capabilities", "kill_tree"};
	size_t i;

	if (lv == SB_LEVEL_OFF) {
		no(not, "all", "ATB_SANDBOX=off");
	} else {
		for (i = 0; i < sizeof(bw_rules) / sizeof(bw_rules[0]); i++) {
			if (bw)
				json_array_append_new(yes, json_string(bw_rules[i]));
			else
				no(not, bw_rules[i], probe_why);
		}
		if (lv == SB_LEVEL_FULL)
			json_array_append_new(yes, json_string("user_namespace"));
		else
			no(not, "user_namespace", lv == SB_LEVEL_NO_USERNS
				? "bwrap could not make a user namespace here; root without one"
				: probe_why);
		json_array_append_new(yes, json_string("no_new_privs"));
		json_array_append_new(yes, json_string(SB_ALLOW_PTRACE ? "seccomp_but_ptrace"
								       : "seccomp"));
		json_array_append_new(yes, json_string("clean_env"));
		json_array_append_new(yes, json_string("scratch_cwd"));
		json_array_append_new(yes, json_string("rlimits"));
		json_array_append_new(yes, json_string("die_with_parent"));
		if (sb->lim.nproc && sb->nproc_how) {
			json_array_append_new(yes, json_string("nproc_limit"));
		} else if (sb->lim.nproc) {
			char why[600];

			snprintf(why, sizeof(why), "%s; the kernel exempts uid 0 from RLIMIT_NPROC: no "
				 "process count is enforced (the PID namespace still ends every "
				 "process with the job)", sb->nproc_why);
			no(not, "nproc_limit", why);
		} else {
			no(not, "nproc_limit", "no process limit was asked for");
		}
	}
	o = json_pack("{s:s, s:s, s:s?, s:o, s:o, s:O, s:O}", "mode",
		      sb->mode == ATB_SANDBOX_REQUIRE ? "require"
		      : sb->mode == ATB_SANDBOX_OFF  ? "off"
						     : "auto",
		      "level", names[lv], "tool", bw ? bwrap_version : NULL, "enforced", yes,
		      "not_enforced", not, "refused_paths", sb->refused, "skipped_paths",
		      sb->skipped);
	if (o && sb->lim.nproc && lv != SB_LEVEL_OFF)
		json_object_set_new(o, "process_limit",
				    sb->nproc_how
				    ? json_pack("{s:I, s:s}", "max_tasks", (json_int_t)sb->lim.nproc,
						"how", sb->nproc_how)
				    : json_pack("{s:I, s:n, s:s}", "max_tasks",
						(json_int_t)sb->lim.nproc, "how", "why",
						sb->nproc_why));
	return o;
}
