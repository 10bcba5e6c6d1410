/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Knobs and builds: default, sampled and checked knob assignments, candidate
 * folders, and the compiler run that turns a kernel source into a shared
 * object.  The compiler runs through the child-process module with no shell
 * (a knob value can never become a command), sandboxed (PROTO: sandbox), in
 * its own process group so that a hung build is killed whole at the
 * protocol's timeout (PROTO: build.timeout_s),
 * with the protocol's flags first and the task's extra flags only added
 * after them (PROTO: build.cpu.flags).
 * Does not: load or run the shared object (atb-runner does).
 */
#define _GNU_SOURCE  /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gsl/gsl_rng.h>

#include "atb/alloc.h"
#include "atb/atb.h"
#include "atb/proc.h"
#include "atb/task.h"
#include "task_cuda.h"
#include "task_int.h"
#include "banned.h"

#define BUILD_MAX_ARGS 96

void atb_task_default_knobs(const struct atb_task *t, struct atb_knob_assignment *out)
{
	size_t i;

	memset(out, 0, sizeof(*out));
	for (i = 0; i < t->nknobs; i++) {
		snprintf(out->knobs[i].name, sizeof(out->knobs[i].name), "%s", t->knobs[i].name);
		snprintf(out->knobs[i].value, sizeof(out->knobs[i].value), "%s",
			 t->knobs[i].values[0]);
	}
	out->n = t->nknobs;
	if (t->nflag_choices)
		snprintf(out->cflags, sizeof(out->cflags), "%s", t->flag_choices[0]);
}

void atb_task_sample_knobs(const struct atb_task *t, gsl_rng *rng,
			   struct atb_knob_assignment *out)
{
	size_t i;

	atb_task_default_knobs(t, out);
	for (i = 0; i < t->nknobs; i++) {
		unsigned long k = gsl_rng_uniform_int(rng, t->knobs[i].nvalues);

		snprintf(out->knobs[i].value, sizeof(out->knobs[i].value), "%s",
			 t->knobs[i].values[k]);
	}
	if (t->nflag_choices) {
		unsigned long k = gsl_rng_uniform_int(rng, t->nflag_choices);

		snprintf(out->cflags, sizeof(out->cflags), "%s", t->flag_choices[k]);
	}
}

enum atb_status atb_task_check_knobs(const struct atb_task *t,
				     const struct atb_knob_assignment *a, struct atb_error *err)
{
	char allowed[400] = "";
	size_t i, j, v, used = 0;
	int ok;

	if (a->n != t->nknobs)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "knob assignment has %zu knobs, task '%s' has %zu", a->n,
				     t->name, t->nknobs);
	for (i = 0; i < t->nknobs; i++) {
		const struct atb_task_knob *k = &t->knobs[i];

		for (j = 0; j < a->n; j++)
			if (!strcmp(a->knobs[j].name, k->name))
				break;
		if (j == a->n)
			return atb_error_set(err, ATB_ERR_USAGE, "knob '%s' has no value",
					     k->name);
		for (v = 0, ok = 0; v < k->nvalues; v++)
			ok |= !strcmp(k->values[v], a->knobs[j].value);
		if (!ok) {
			/* the allowed values in the message: the fix is one of them */
			for (v = 0; v < k->nvalues && used < sizeof(allowed); v++)
				used += (size_t)snprintf(allowed + used, sizeof(allowed) - used,
							 "%s%s", v ? ", " : "", k->values[v]);
			return atb_error_set(err, ATB_ERR_USAGE,
					     "value '%s' is not one of knob '%s''s values (%s)",
					     a->knobs[j].value, k->name, allowed);
		}
	}
	if (!t->nflag_choices)
		ok = !a->cflags[0];
	else
		for (v = 0, ok = 0; v < t->nflag_choices; v++)
			ok |= !strcmp(t->flag_choices[v], a->cflags);
	if (!ok) {
		for (v = 0; v < t->nflag_choices && used < sizeof(allowed); v++)
			used += (size_t)snprintf(allowed + used, sizeof(allowed) - used, "%s'%s'",
						 v ? ", " : "", t->flag_choices[v]);
		return atb_error_set(err, ATB_ERR_USAGE,
				     "flags '%s' are not one of task '%s''s flag choices (%s)",
				     a->cflags, t->name, t->nflag_choices ? allowed : "none: no --cflags");
	}
	return ATB_OK;
}

void atb_task_format_knobs(const struct atb_knob_assignment *a, char *buf, size_t size)
{
	size_t i, used = 0;

	if (!size)
		return;
	buf[0] = '\0';
	for (i = 0; i < a->n && used < size; i++) {
		int r = snprintf(buf + used, size - used, "%s%s=%s", i ? " " : "",
				 a->knobs[i].name, a->knobs[i].value);

		if (r < 0)
			break;
		used += (size_t)r;
	}
	if (a->cflags[0] && used < size)
		snprintf(buf + used, size - used, "%scflags='%s'", a->n ? " " : "", a->cflags);
}

static enum atb_status write_file(const char *path, const char *data, size_t len,
				  struct atb_error *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	size_t done = 0;

	if (fd < 0)
		return atb_error_set_at(err, ATB_ERR_IO, path, 0, 0, NULL,
					"cannot create '%s': %s", path, strerror(errno));
	while (done < len) {
		ssize_t w = write(fd, data + done, len - done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = errno;

			close(fd);
			return atb_error_set_at(err, ATB_ERR_IO, path, 0, 0, NULL,
						"cannot write '%s': %s", path, strerror(e));
		}
		done += (size_t)w;
	}
	if (close(fd))
		return atb_error_set_at(err, ATB_ERR_IO, path, 0, 0, NULL,
					"cannot write '%s': %s", path, strerror(errno));
	return ATB_OK;
}

enum atb_status atb_task_instantiate_candidate(const struct atb_task *t,
					       const struct atb_knob_assignment *knobs,
					       const char *dir, struct atb_error *err)
{
	char path[4096];
	char *text = NULL;
	size_t len;
	enum atb_status st;

	if (knobs && (st = atb_task_check_knobs(t, knobs, err)))
		return st;
	if (mkdir(dir, 0700))
		return atb_error_set_at(err, ATB_ERR_IO, dir, 0, 0, NULL,
					"cannot create candidate folder '%s': %s", dir,
					strerror(errno));
	if ((st = atbi_read_file(t->candidate.path, &text, &len, err)))
		return st;
	snprintf(path, sizeof(path), "%s/%s", dir, t->surface[0]);
	st = write_file(path, text, len, err);
	atb_free(text);
	return st;
}

/* ---- the compiler run ------------------------------------------------- */

struct logbuf {
	char *data;
	size_t len, cap;
	int truncated;
	int oom;
};

static void log_append(struct logbuf *b, const char *p, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n > ATB_TASK_BUILD_LOG_MAX) {
		n = ATB_TASK_BUILD_LOG_MAX - b->len;
		b->truncated = 1;
	}
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *nd;

		while (cap < b->len + n + 1)
			cap *= 2;
		if (!(nd = atb_realloc(b->data, cap))) {
			b->oom = 1;
			return;
		}
		b->data = nd;
		b->cap = cap;
	}
	memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
}

static enum atb_status add_arg(const char **argv, size_t *argc, const char *a,
			       struct atb_error *err)
{
	if (*argc + 2 >= BUILD_MAX_ARGS)
		return atb_error_set(err, ATB_ERR_USAGE, "too many compiler arguments");
	argv[(*argc)++] = a;
	argv[*argc] = NULL;
	return ATB_OK;
}

static int64_t now_ns(void)
{
	return atbi_monotonic_ns();
}

/* The folder part of path ("." when none) into buf. */
static void dir_of(const char *path, char *buf, size_t size)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		snprintf(buf, size, ".");
	else if (slash == path)
		snprintf(buf, size, "/");
	else
		snprintf(buf, size, "%.*s", (int)(slash - path), path);
}

/* path made absolute against the working folder (the compiler runs
   elsewhere); a result that does not fit is an error, never a cut path */
static enum atb_status absolute(const char *path, char *buf, size_t size, struct atb_error *err)
{
	char cwd[4096];
	int n;

	if (path[0] == '/' || !getcwd(cwd, sizeof(cwd)))
		n = snprintf(buf, size, "%s", path);
	else
		n = snprintf(buf, size, "%s/%s", cwd, path);
	if (n < 0 || (size_t)n >= size)
		return atb_error_set(err, ATB_ERR_USAGE, "path too long to build from (%zu bytes at "
				     "most): '%s'", size - 1, path);
	return ATB_OK;
}

static enum atb_status build_sandbox(const char *source_path, const char *out_so_path,
				     char *scratch, size_t size, struct atb_sandbox **out,
				     struct atb_error *err)
{
	static const char *const pass[] = {"LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH",
					   "C_INCLUDE_PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS",
					   "LSAN_OPTIONS", NULL};
	static const char *const dirs[] = {"LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH",
					   "C_INCLUDE_PATH", NULL};
	size_t k;
	/* PROTO: sandbox -- a compiler driver starts a handful of tasks */
	struct atb_sandbox_limits lim = {.fsize_bytes = (uint64_t)1 << 30, .nofile = 4096,
					 .nproc = 1024};
	char dir[4096], abs[4096], inc[4200];
	enum atb_sandbox_mode mode;
	enum atb_status st;

	*out = NULL;
	if ((st = atb_sandbox_mode_from_env(&mode, err)) ||
	    (st = atb_proc_scratch("atb-build", scratch, size, err)) ||
	    (st = atb_sandbox_new(mode, scratch, out, err)))
		return st;
	/* relative paths are the caller's: name them absolutely inside */
	if ((st = absolute(source_path, abs, sizeof(abs), err)))
		return st;
	dir_of(abs, dir, sizeof(dir));
	/* the file itself too: its folder is not bound when it holds the store */
	st = atb_sandbox_ro(*out, dir, err);
	if (!st)
		st = atb_sandbox_ro(*out, abs, err);
	if (!st) {
		snprintf(inc, sizeof(inc), "%s/include", atb_home());
		st = atb_sandbox_ro(*out, inc, err);
	}
	/* atb's bundled tasks are public sources a candidate may build on
	   (several cheat fixtures include a task's baseline through ../tasks) */
	if (!st) {
		snprintf(inc, sizeof(inc), "%s/tasks", atb_home());
		st = atb_sandbox_ro(*out, inc, err);
	}
	if (!st)
		st = absolute(out_so_path, abs, sizeof(abs), err);
	if (!st) {
		dir_of(abs, dir, sizeof(dir));
		st = atb_sandbox_rw(*out, dir, err);
	}
	if (!st)
		st = atb_sandbox_pass_env(*out, pass, err);
	/* the folders those variables name (the toolkit's, a pip-installed cuBLAS) */
	for (k = 0; !st && dirs[k]; k++)
		st = atb_sandbox_ro_list(*out, getenv(dirs[k]), err);
	atb_sandbox_set_limits(*out, &lim);
	return st;
}

enum atb_status atb_task_build(const struct atb_task *t, const char *source_path,
			       const struct atb_knob_assignment *knobs,
			       const struct atb_protocol *proto, const char *out_so_path,
			       char **build_log, struct atb_error *err)
{
	const char *argv[BUILD_MAX_ARGS] = {NULL};
	char defs[ATB_TASK_MAX_KNOBS][2 * ATB_TASK_NAME_MAX + 4];
	char flags[ATB_TASK_FLAGS_MAX], incdir[4200], arch[32], *tok, *save = NULL;
	char abs_src[4096], abs_out[4096];
	struct logbuf log = {0};
	int outp[2] = {-1, -1};
	size_t argc = 0, i;
	enum atb_status st = ATB_OK;
	int64_t deadline;
	int status = 0, timed_out = 0, exec_errno = 0, eof = 0, exited = 0, cuda;
	struct atb_sandbox *sb = NULL;
	struct atb_proc proc = {.pid = -1};
	char scratch[4096] = "";

	if (build_log)
		*build_log = NULL;
	if ((st = absolute(source_path, abs_src, sizeof(abs_src), err)) ||
	    (st = absolute(out_so_path, abs_out, sizeof(abs_out), err)))
		return st;
	/* Kind "cuda": the protocol's build.cuda (nvcc) plus -arch (task_cuda.c). */
	cuda = t->kind && !strcmp(t->kind, "cuda");
	if (!(cuda ? proto->build.cuda_compiler : proto->build.cpu_compiler)[0])
		return atb_error_set(err, ATB_ERR_USAGE, "the protocol names no %s compiler",
				     cuda ? "CUDA" : "CPU");
	if (knobs && (st = atb_task_check_knobs(t, knobs, err)))
		return st;
	if ((st = add_arg(argv, &argc, cuda ? proto->build.cuda_compiler
					    : proto->build.cpu_compiler, err)))
		return st;
	for (i = 0; i < (cuda ? proto->build.ncuda_flags : proto->build.ncpu_flags); i++)
		if ((st = add_arg(argv, &argc, cuda ? proto->build.cuda_flags[i]
						    : proto->build.cpu_flags[i], err)))
			return st;
	if (cuda) {
		atbi_task_cuda_arch(arch, sizeof(arch));
		if ((st = add_arg(argv, &argc, arch, err)))
			return st;
	}
	snprintf(flags, sizeof(flags), "%s", knobs ? knobs->cflags : "");
	for (tok = strtok_r(flags, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
		if ((st = add_arg(argv, &argc, tok, err)))
			return st;
	for (i = 0; knobs && i < knobs->n; i++) {
		snprintf(defs[i], sizeof(defs[i]), "-D%s=%s", knobs->knobs[i].name,
			 knobs->knobs[i].value);
		if ((st = add_arg(argv, &argc, defs[i], err)))
			return st;
	}
	snprintf(incdir, sizeof(incdir), "-I%s/include", atb_home());
	if ((st = add_arg(argv, &argc, incdir, err)) ||
	    (st = add_arg(argv, &argc, "-o", err)) ||
	    (st = add_arg(argv, &argc, abs_out, err)) ||
	    (st = add_arg(argv, &argc, abs_src, err)) ||
	    (st = add_arg(argv, &argc, "-lm", err)) ||
	    (cuda && (st = add_arg(argv, &argc, ATBI_TASK_CUDA_LIBS, err))))
		return st;

	if (pipe2(outp, O_CLOEXEC)) {
		st = atb_error_set(err, ATB_ERR_SYSTEM, "cannot build '%s': pipe: %s",
				   source_path, strerror(errno));
		goto done;
	}
	/* PROTO: sandbox -- the compiler sees the system, the source's folder and
	   atb's headers read-only, the output's folder read-write; nothing else
	   (an #include of the store or of another candidate finds nothing) */
	st = build_sandbox(source_path, out_so_path, scratch, sizeof(scratch), &sb, err);
	if (!st)
		st = atb_proc_start(argv, -1, outp[1], outp[1], sb, &proc, err);
	close(outp[1]);
	outp[1] = -1;
	if (st) {
		if (st == ATB_ERR_NOT_FOUND)
			st = atb_error_set(err, ATB_ERR_SYSTEM, "cannot run compiler '%s': %s",
					   argv[0], strerror(ENOENT));
		goto done;
	}
	exec_errno = proc.exec_errno;
	deadline = now_ns() + (int64_t)(proto->build.timeout_s * 1e9);
	while (!exited) {
		int64_t left_ns = deadline - now_ns();
		int pr;

		if (left_ns <= 0) {
			timed_out = 1;
			atb_proc_reap(&proc);
			break;
		}
		if (!eof) {
			struct pollfd pfd = {outp[0], POLLIN, 0};
			int ms = (int)(left_ns / 1000000) + 1;

			pr = poll(&pfd, 1, ms > 100 ? 100 : ms);
			if (pr > 0) {
				char buf[4096];
				ssize_t r = read(outp[0], buf, sizeof(buf));

				if (r > 0)
					log_append(&log, buf, (size_t)r);
				else if (r == 0 || errno != EINTR)
					eof = 1;
			}
		} else {
			struct timespec ts = {0, 5000000};

			nanosleep(&ts, NULL);
		}
		if (atb_proc_wait(&proc, 0))
			exited = 1;
	}
	/* Drain what the compiler wrote before it exited. */
	while (!timed_out && !eof) {
		char buf[4096];
		struct pollfd pfd = {outp[0], POLLIN, 0};
		ssize_t r;

		if (poll(&pfd, 1, 0) <= 0)
			break;
		r = read(outp[0], buf, sizeof(buf));
		if (r <= 0)
			break;
		log_append(&log, buf, (size_t)r);
	}
	atb_proc_reap(&proc);  /* leftovers of the group, if any */
	status = proc.status;
	if (log.truncated)
		log_append(&log, "", 0);
	if (log.oom) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot build '%s': out of memory",
				   source_path);
	} else if (timed_out) {
		st = atb_error_set(err, ATB_ERR_BUILD,
				   "build timed out: '%s' did not finish within %g s (killed)",
				   source_path, proto->build.timeout_s);
	} else if (exec_errno) {
		st = atb_error_set(err, ATB_ERR_SYSTEM, "cannot run compiler '%s': %s",
				   argv[0], strerror(exec_errno));
	} else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		if (WIFSIGNALED(status))
			st = atb_error_set(err, ATB_ERR_BUILD,
					   "build failed: '%s' killed by signal %d compiling '%s'",
					   argv[0], WTERMSIG(status), source_path);
		else
			st = atb_error_set(err, ATB_ERR_BUILD,
					   "build failed: '%s' exited with %d compiling '%s'",
					   argv[0], WEXITSTATUS(status), source_path);
	}
done:
	for (i = 0; i < 2; i++)
		if (outp[i] >= 0)
			close(outp[i]);
	atb_sandbox_free(sb);
	atb_proc_remove_tree(scratch);
	if (build_log && !log.oom) {
		*build_log = log.data ? log.data : atb_strdup("");
		if (!*build_log && st == ATB_OK)
			st = atb_error_set(err, ATB_ERR_NOMEM, "cannot build: out of memory");
	} else {
		atb_free(log.data);
	}
	return st;
}
