/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The box probe: reads /proc, /sys and /etc/os-release, calls uname, sysconf
 * and sysinfo, runs the C compiler's --version, and asks NVML (nvml.c) about
 * GPUs.  A source that is missing leaves its field unknown: a box without
 * /sys caches or without a compiler is still a box.  Only allocation failure
 * and a failed uname() are errors.  Does not hash or format (json.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "atb/alloc.h"
#include "atb/proc.h"
#include "box_int.h"
#include "banned.h"

extern char **environ;

/* How long `cc --version` may take before it is killed. */
#define COMPILER_TIMEOUT_NS (10LL * 1000000000LL)

void atb_box_free(struct atb_box *box)
{
	size_t i;

	if (!box)
		return;
	atb_free(box->cpu_model);
	atb_free(box->os);
	atb_free(box->kernel);
	atb_free(box->arch);
	atb_free(box->compiler_version);
	atb_free(box->gpu_driver_version);
	for (i = 0; i < box->ngpus; i++) {
		atb_free(box->gpus[i].name);
		atb_free(box->gpus[i].uuid);
	}
	atb_free(box->gpus);
	atb_free(box->compiler);
	atb_free(box->gpu_probe);
	atb_free(box);
}

static enum atb_status nomem(struct atb_error *err, const char *what)
{
	return atb_error_set(err, ATB_ERR_NOMEM, "cannot probe %s: out of memory", what);
}

/*
 * Read an optional file.  *text is NULL when it cannot be read for any
 * reason but memory, which is the only failure passed up.
 */
static enum atb_status read_optional(const char *path, char **text)
{
	struct atb_error scratch;
	enum atb_status st;

	atb_error_clear(&scratch);
	st = atbi_read_file(path, text, NULL, &scratch);
	if (st == ATB_ERR_NOMEM)
		return st;
	if (st != ATB_OK)
		*text = NULL;
	return ATB_OK;
}

static enum atb_status probe_cpu(struct atb_box *box)
{
	char *text;
	enum atb_status st;

	st = read_optional("/proc/cpuinfo", &text);
	if (st || !text)
		return st;
	st = atbi_box_parse_cpuinfo(text, &box->cpu_model, &box->physical_cores);
	atb_free(text);
	return st;
}

static enum atb_status probe_memory(struct atb_box *box)
{
	struct sysinfo si;
	char *text;
	enum atb_status st;

	if (sysinfo(&si) == 0)
		box->memory_total_bytes = (uint64_t)si.totalram * si.mem_unit;
	st = read_optional("/proc/meminfo", &text);
	if (st || !text)
		return st;
	box->memory_available_bytes = atbi_box_parse_meminfo(text, "MemAvailable");
	if (!box->memory_total_bytes)
		box->memory_total_bytes = atbi_box_parse_meminfo(text, "MemTotal");
	atb_free(text);
	return ATB_OK;
}

static enum atb_status probe_os(struct atb_box *box)
{
	static const char *const paths[] = {"/etc/os-release", "/usr/lib/os-release"};
	size_t i;
	char *text;
	enum atb_status st;

	for (i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		st = read_optional(paths[i], &text);
		if (st)
			return st;
		if (!text)
			continue;
		st = atbi_box_parse_os_release(text, &box->os);
		atb_free(text);
		return st;
	}
	return ATB_OK;
}

/* PROTO: timing.cache_flush sizes its buffer from the largest CPU cache. */
static enum atb_status probe_caches(struct atb_box *box)
{
	char path[128], *text;
	enum atb_status st;
	int i;

	for (i = 0; i < 64; i++) {
		uint64_t b;

		snprintf(path, sizeof(path),
			 "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
		st = read_optional(path, &text);
		if (st)
			return st;
		if (!text)
			break;
		b = atbi_box_parse_cache_size(text);
		atb_free(text);
		if (b > box->cache_largest_bytes)
			box->cache_largest_bytes = b;
	}
	return ATB_OK;
}

/*
 * The environment for the compiler: ours with the locale forced to C, so
 * that the version line (an identity field) does not depend on LANG.  As
 * changes for atb_proc ("NAME" removes, "NAME=VALUE" sets; atb_free_env).
 */
static char **c_locale_env(void)
{
	size_t n = 0, i, j = 0;
	char **env;

	while (environ && environ[n])
		n++;
	env = atb_calloc(n + 2, sizeof(*env));
	if (!env)
		return NULL;
	for (i = 0; i < n; i++) {
		if (strncmp(environ[i], "LC_", 3) && strncmp(environ[i], "LANG=", 5) &&
		    strncmp(environ[i], "LANGUAGE=", 9))
			continue;
		if (!(env[j++] = atb_strndup(environ[i], strcspn(environ[i], "="))))
			goto oom;
	}
	if (!(env[j++] = atb_strdup("LC_ALL=C")))
		goto oom;
	env[j] = NULL;
	return env;
oom:
	for (i = 0; env[i]; i++)
		atb_free(env[i]);
	atb_free(env);
	return NULL;
}

static void free_env(char **env)
{
	size_t i;

	for (i = 0; env && env[i]; i++)
		atb_free(env[i]);
	atb_free(env);
}

/*
 * Run `compiler --version` (no shell) and keep its first line (PROTO:
 * build.cpu.compiler names the compiler; callers pass it).  Whatever
 * goes wrong short of memory leaves compiler_version NULL.  The compiler
 * is the caller's (trusted) and reads no candidate file: a plain child.
 */
static enum atb_status probe_compiler(struct atb_box *box, const char *compiler)
{
	const char *argv[] = {compiler, "--version", NULL};
	struct atb_proc_opts o = {0};
	struct atb_proc proc;
	struct atb_error err;
	char buf[4096], drain[4096];
	char **env;
	size_t n = 0;
	int fds[2], rc, timed_out = 0;
	enum atb_status st;
	int64_t deadline;

	env = c_locale_env();
	if (!env)
		return ATB_ERR_NOMEM;
	if (pipe2(fds, O_CLOEXEC) != 0) {
		free_env(env);
		return ATB_OK;
	}
	o.env = (const char *const *)env;
	st = atb_proc_start_opts(argv, -1, fds[1], -1, NULL, &o, &proc, &err);
	free_env(env);
	close(fds[1]);
	if (st) {
		close(fds[0]);
		return ATB_PRIMARY(st) == ATB_ERR_NOMEM ? ATB_ERR_NOMEM : ATB_OK;
	}
	if (proc.exec_errno) {
		close(fds[0]);
		atb_proc_reap(&proc);
		return ATB_OK;
	}

	deadline = atbi_monotonic_ns() + COMPILER_TIMEOUT_NS;
	for (;;) {
		struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
		int64_t left_ms = (deadline - atbi_monotonic_ns()) / 1000000;
		ssize_t r;

		if (left_ms <= 0) {
			timed_out = 1;
			break;
		}
		rc = poll(&pfd, 1, (int)left_ms);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc <= 0) {
			timed_out = rc == 0;
			break;
		}
		/* keep the first 4 KiB, drain the rest so the child can finish */
		if (n < sizeof(buf) - 1)
			r = read(fds[0], buf + n, sizeof(buf) - 1 - n);
		else
			r = read(fds[0], drain, sizeof(drain));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (n < sizeof(buf) - 1)
			n += (size_t)r;
	}
	close(fds[0]);
	if (!timed_out)
		atb_proc_wait(&proc, INT64_MAX);
	atb_proc_reap(&proc);   /* killed (with what it started) when it timed out */
	if (timed_out || !WIFEXITED(proc.status) || WEXITSTATUS(proc.status) != 0)
		return ATB_OK;
	buf[n] = '\0';
	return atbi_box_clean(buf, strcspn(buf, "\r\n"), &box->compiler_version);
}

enum atb_status atb_box_probe(struct atb_box **out, struct atb_error *err)
{
	return atb_box_probe_with_compiler(out, NULL, err);
}

enum atb_status atb_box_probe_with_compiler(struct atb_box **out,
					    const char *compiler,
					    struct atb_error *err)
{
	struct atb_box *box;
	struct utsname u;
	double load[1];
	enum atb_status st;

	if (!out)
		return atb_error_set(err, ATB_ERR_USAGE, "cannot probe box: no output given");
	*out = NULL;
	if (!compiler)
		compiler = "cc";
	if (!compiler[0] || compiler[0] == '-')
		return atb_error_set(err, ATB_ERR_USAGE,
				     "bad compiler '%s': must be a program name or path",
				     compiler);

	box = atb_calloc(1, sizeof(*box));
	if (!box)
		return nomem(err, "box");
	box->probed_at_ns = atbi_realtime_ns();
	box->loadavg_1m = getloadavg(load, 1) == 1 ? load[0] : -1.0;
	box->compiler = atb_strdup(compiler);
	if (!box->compiler) {
		atb_box_free(box);
		return nomem(err, "compiler");
	}

	if (uname(&u) != 0) {
		atb_box_free(box);
		return atb_error_set(err, ATB_ERR_SYSTEM, "cannot probe box: uname failed: %s",
				     strerror(errno));
	}
	st = atbi_box_clean(u.release, sizeof(u.release), &box->kernel);
	if (!st)
		st = atbi_box_clean(u.machine, sizeof(u.machine), &box->arch);
	if (st) {
		atb_box_free(box);
		return nomem(err, "kernel");
	}

	box->logical_cores = sysconf(_SC_NPROCESSORS_ONLN);
	if (box->logical_cores < 0)
		box->logical_cores = 0;

	if ((st = probe_cpu(box)) != ATB_OK) {
		atb_box_free(box);
		return nomem(err, "cpu");
	}
	if ((st = probe_memory(box)) != ATB_OK) {
		atb_box_free(box);
		return nomem(err, "memory");
	}
	if ((st = probe_os(box)) != ATB_OK) {
		atb_box_free(box);
		return nomem(err, "os");
	}
	if ((st = probe_caches(box)) != ATB_OK) {
		atb_box_free(box);
		return nomem(err, "caches");
	}
	if ((st = probe_compiler(box, compiler)) != ATB_OK) {
		atb_box_free(box);
		return nomem(err, "compiler");
	}
	if ((st = atbi_box_probe_gpus(box, err)) != ATB_OK) {
		atb_box_free(box);
		return st;
	}
	*out = box;
	return ATB_OK;
}
