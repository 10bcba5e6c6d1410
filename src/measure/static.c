/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The static checks of a KernelBench-format candidate (include/atb/
 * measure.h; the gate "static" of every path that measures one: atb
 * measure, atb suite, atb run, later atb submit): runs
 * python/atb_static.py with the configured interpreter (atb_proc, no shell,
 * killed whole at the timeout), reads its JSON findings with jansson, and
 * applies the refusal policy.  Python is parsed by Python's own `ast`
 * module, never here.
 *
 * The checker reads the candidate's source, so it runs in the sandbox
 * (include/atb/proc.h) like everything that touches candidate input: it
 * sees the system's folders, the interpreter (what it says of itself:
 * its executable, libpython, prefix and sys.path), atb's python/ folder,
 * the reference and the candidate, all read-only, and a scratch folder
 * removed after it.  The facts of that sandbox ride in its JSON
 * ("sandbox"), so the stored findings say what was enforced.
 *
 * Does not: store anything (measure.c stores the findings and the refusal).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "atb/alloc.h"
#include "atb/atb.h"
#include "atb/proc.h"
#include "atb/measure.h"
#include "task/task_int.h"
#include "util.h"
#include "banned.h"

#define STATIC_OUT_MAX (1u << 20)
#define STATIC_DEFAULT_TIMEOUT_S 60.0

int atb_measure_finding_refuses(const char *kind)
{
	return !strcmp(kind, "syntax_error") || !strcmp(kind, "no_modelnew") ||
	       !strcmp(kind, "fallback_to_reference") || !strcmp(kind, "dynamic_code") ||
	       !strcmp(kind, "reflection") || !strcmp(kind, "unanalysable");
}

struct capture {
	char *buf;
	size_t len;
};

static int append(struct capture *c, const char *data, size_t n)
{
	char *b;

	if (c->len + n > STATIC_OUT_MAX)
		n = STATIC_OUT_MAX - c->len;
	b = atb_realloc(c->buf, c->len + n + 1);
	if (!b)
		return -1;
	memcpy(b + c->len, data, n);
	c->len += n;
	b[c->len] = '\0';
	c->buf = b;
	return 0;
}

/* Run argv in sb, capturing stdout and stderr, killed (all of it) after timeout_s. */
static enum atb_status spawn(const char *const argv[], struct atb_sandbox *sb, double timeout_s,
			     struct capture *out, struct capture *errout, int *exit_status,
			     struct atb_error *err)
{
	int po[2] = {-1, -1}, pe[2] = {-1, -1}, open_fds = 2;
	int64_t deadline = atbi_monotonic_ns() + (int64_t)(timeout_s * 1e9);
	struct atb_proc proc;
	enum atb_status st;

	if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC)) {
		if (po[0] >= 0) {
			close(po[0]);
			close(po[1]);
		}
		return atb_error_set(err, ATB_ERR_SYSTEM, "cannot make a pipe: %s", strerror(errno));
	}
	st = atb_proc_start(argv, -1, po[1], pe[1], sb, &proc, err);
	close(po[1]);
	close(pe[1]);
	if (st) {
		close(po[0]);
		close(pe[0]);
		return st;
	}
	while (open_fds > 0) {
		struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
		int64_t left_ms = (deadline - atbi_monotonic_ns()) / 1000000;
		int i, r;

		if (left_ms <= 0) {
			atb_proc_reap(&proc);
			close(po[0]);
			close(pe[0]);
			return atb_error_set(err, ATB_ERR_SYSTEM,
					     "the static checker timed out after %g s: killed",
					     timeout_s);
		}
		r = poll(fds, 2, left_ms > 1000 ? 1000 : (int)left_ms);
		if (r < 0 && errno != EINTR)
			break;
		for (i = 0; r > 0 && i < 2; i++) {
			char buf[4096];
			ssize_t got;

			if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			got = read(fds[i].fd, buf, sizeof(buf));
			if (got > 0) {
				if (append(i ? errout : out, buf, (size_t)got)) {
					atb_proc_reap(&proc);
					close(po[0]);
					close(pe[0]);
					return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
				}
			} else if (got == 0 || errno != EINTR) {
				close(fds[i].fd);
				if (i)
					pe[0] = -1;
				else
					po[0] = -1;
				open_fds--;
			}
		}
		/* A closed pipe's fd is -1 now, which poll() ignores. */
	}
	if (po[0] >= 0)
		close(po[0]);
	if (pe[0] >= 0)
		close(pe[0]);
	/* its output is closed; it may still run: the deadline holds */
	if (!atb_proc_wait(&proc, deadline)) {
		atb_proc_reap(&proc);
		return atb_error_set(err, ATB_ERR_SYSTEM,
				     "the static checker timed out after %g s: killed", timeout_s);
	}
	atb_proc_reap(&proc);
	/* an exec that failed is the shell's 127, as an execvp's child had it */
	*exit_status = proc.exec_errno ? 127 << 8 : proc.status;
	return ATB_OK;
}

/* Each absolute folder of a ':' list, read-only. */
/*
 * path as the sandbox sees it: absolute (its working folder is the scratch
 * folder, not ours), links resolved where it exists.
 */
static enum atb_status absolute(const char *path, char *buf, size_t size,
				struct atb_error *err)
{
	char cwd[PATH_MAX], real[PATH_MAX];
	int w;

	if (realpath(path, real))
		w = snprintf(buf, size, "%s", real);
	else if (path[0] == '/')
		w = snprintf(buf, size, "%s", path);
	else if (getcwd(cwd, sizeof(cwd)))
		w = snprintf(buf, size, "%s/%s", cwd, path);
	else
		return atb_error_set(err, ATB_ERR_SYSTEM, "cannot find the working folder: %s",
				     strerror(errno));
	if (w < 0 || (size_t)w >= size)
		return atb_error_set(err, ATB_ERR_USAGE, "path too long '%.200s'", path);
	return ATB_OK;
}

/*
 * The checker's view: the interpreter and what it says it reads, atb's
 * python/ folder, the two files; the rest of the caller's files invisible.
 */
static enum atb_status checker_sandbox(const char *python, const char *info_text,
				       const char *script, const char *ref, const char *cand,
				       double timeout_s, const char *scratch,
				       struct atb_sandbox **out, struct atb_error *err)
{
	static const char *const pass_env[] = {"LD_LIBRARY_PATH", NULL};
	struct atb_sandbox_limits lim = {0};
	struct atb_sandbox *sb = NULL;
	enum atb_sandbox_mode mode;
	enum atb_status st;
	char dir[PATH_MAX], *slash;
	json_t *info = json_loads(info_text, 0, NULL);

	*out = NULL;
	if ((st = atb_sandbox_mode_from_env(&mode, err)) ||
	    (st = atb_sandbox_new(mode, scratch, &sb, err))) {
		json_decref(info);
		return st;
	}
	st = atb_sandbox_ro(sb, python, err);
	if (!st)
		st = atb_sandbox_python(sb, info, err);
	json_decref(info);
	if (!st)
		st = atb_sandbox_ro_list(sb, getenv("LD_LIBRARY_PATH"), err);
	snprintf(dir, sizeof(dir), "%s", script);
	slash = strrchr(dir, '/');
	if (slash && slash != dir)
		*slash = '\0';
	if (!st)
		st = atb_sandbox_ro(sb, dir, err);
	if (!st)
		st = atb_sandbox_ro(sb, ref, err);
	if (!st)
		st = atb_sandbox_ro(sb, cand, err);
	if (!st)
		st = atb_sandbox_pass_env(sb, pass_env, err);
	/* Backstops only: the timeout ends it first. */
	lim.cpu_s = (uint64_t)timeout_s + 10;
	lim.data_bytes = (uint64_t)4 << 30;
	lim.fsize_bytes = (uint64_t)1 << 20;
	lim.nofile = 256;
	atb_sandbox_set_limits(sb, &lim);
	if (st) {
		atb_sandbox_free(sb);
		return st;
	}
	*out = sb;
	return ATB_OK;
}

/* The checker's JSON with the sandbox's facts added (o->buf replaced). */
static enum atb_status add_facts(struct capture *o, const struct atb_sandbox *sb,
				 struct atb_error *err)
{
	json_t *root = json_loads(o->buf, 0, NULL), *facts = atb_sandbox_facts(sb);
	char *text = NULL;

	if (root && facts && !json_object_set_new(root, "sandbox", facts)) {
		facts = NULL;
		text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
	}
	json_decref(facts);
	json_decref(root);
	if (!text)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	atb_free(o->buf);
	o->buf = text;   /* jansson allocates with atb's allocator (atb_alloc_install_json) */
	o->len = strlen(o->buf);
	return ATB_OK;
}

static const char *tail(const struct capture *c)
{
	if (!c->buf)
		return "";
	return c->len > 400 ? c->buf + c->len - 400 : c->buf;
}

static enum atb_status parse_findings(const char *text, struct atb_measure_finding **out,
				      size_t *n, struct atb_error *err)
{
	json_error_t jerr;
	json_t *root, *arr, *f;
	size_t i;

	root = json_loads(text, 0, &jerr);
	arr = root ? json_object_get(root, "findings") : NULL;
	if (!json_is_array(arr)) {
		json_decref(root);
		return atb_error_set(err, ATB_ERR_PARSE,
				     "the static checker's output is not its JSON: %s",
				     root ? "no findings array" : jerr.text);
	}
	if (json_array_size(arr)) {
		*out = atb_calloc(json_array_size(arr), sizeof(**out));
		if (!*out) {
			json_decref(root);
			return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
		}
	}
	json_array_foreach(arr, i, f) {
		struct atb_measure_finding *x = &(*out)[i];
		const char *kind = json_string_value(json_object_get(f, "kind"));
		const char *detail = json_string_value(json_object_get(f, "detail"));

		if (!kind) {
			json_decref(root);
			atb_free(*out);
			*out = NULL;
			return atb_error_set(err, ATB_ERR_PARSE,
					     "the static checker's finding %zu has no kind", i);
		}
		snprintf(x->kind, sizeof(x->kind), "%s", kind);
		snprintf(x->detail, sizeof(x->detail), "%s", detail ? detail : "");
		x->line = (int)json_integer_value(json_object_get(f, "line"));
		x->refuses = atb_measure_finding_refuses(x->kind);
	}
	*n = json_array_size(arr);
	json_decref(root);
	return ATB_OK;
}

enum atb_status atb_measure_static_check(const char *home, const char *python,
				       const char *reference, const char *candidate,
				       double timeout_s, struct atb_measure_finding **out,
				       size_t *n, char **json, struct atb_error *err)
{
	struct capture o = {0}, e = {0};
	char script[4096], ref[PATH_MAX], cand[PATH_MAX], scratch[4096] = "", exe[PATH_MAX];
	const char *argv[6];
	char *py = NULL, *info = NULL;
	struct atb_sandbox *sb = NULL;
	int status = 0;
	enum atb_status st;
	struct atb_error why;

	*out = NULL;
	*n = 0;
	if (json)
		*json = NULL;
	atb_alloc_install_json();
	if (!python || !*python)
		python = getenv("ATB_PYTHON");
	if (!python || !*python)
		python = "python3";
	if (timeout_s <= 0)
		timeout_s = STATIC_DEFAULT_TIMEOUT_S;
	snprintf(script, sizeof(script), "%s/%s", home ? home : atb_home(),
		 ATB_MEASURE_STATIC_SCRIPT);
	if ((st = absolute(reference, ref, sizeof(ref), err)) ||
	    (st = absolute(candidate, cand, sizeof(cand), err)))
		return st;
	/* what of the interpreter to show its sandbox: what it says it reads */
	atb_error_clear(&why);
	st = atbi_task_python_resolve(python, &py, &why);
	if (!st)
		st = atbi_task_python_info(py, &info, &why);
	if (st) {
		st = ATB_PRIMARY(st) == ATB_ERR_NOMEM
			? atb_error_set(err, ATB_ERR_NOMEM, "out of memory")
			: atb_error_set(err, ATB_ERR_SYSTEM, "the static checker cannot run: %s",
					why.msg);
		goto out;
	}
	/*
	 * The interpreter it says it is (sys.executable), not a wrapper in
	 * front of it (a pyenv shim needs a tree of its own the sandbox does
	 * not show); as atb-runner embeds what the same answer names.
	 */
	{
		json_t *o_info = json_loads(info, 0, NULL);
		const char *x = json_string_value(json_object_get(o_info, "executable"));

		snprintf(exe, sizeof(exe), "%s", x && x[0] == '/' && !access(x, X_OK) ? x : "");
		json_decref(o_info);
	}
	/* PROTO: sandbox -- a fresh scratch folder, removed after the checker */
	if ((st = atb_proc_scratch("atb-static", scratch, sizeof(scratch), err)) ||
	    (st = checker_sandbox(py, info, script, ref, cand, timeout_s, scratch, &sb, err)))
		goto out;
	argv[0] = exe[0] ? exe : py;
	argv[1] = script;
	argv[2] = "--reference";
	argv[3] = ref;
	argv[4] = cand;
	argv[5] = NULL;
	st = spawn(argv, sb, timeout_s, &o, &e, &status, err);
	if (st)
		goto out;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {
		/* The checker's "cannot analyse the reference": a task problem. */
		st = atb_error_set(err, ATB_ERR_SCHEMA, "%s", tail(&e));
		goto out;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		st = atb_error_set(err, ATB_ERR_SYSTEM,
				   "the static checker '%s %s' failed (%s %d): %s", python, script,
				   WIFEXITED(status) ? "exit" : "signal",
				   WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
				   tail(&e));
		goto out;
	}
	st = parse_findings(o.buf ? o.buf : "", out, n, err);
	if (!st && json)
		st = add_facts(&o, sb, err);
	if (!st && json) {
		*json = o.buf;
		o.buf = NULL;
	}
	if (st && *out) {
		atb_free(*out);
		*out = NULL;
		*n = 0;
	}
out:
	atb_free(o.buf);
	atb_free(e.buf);
	atb_free(py);
	atb_free(info);
	atb_sandbox_free(sb);
	atb_proc_remove_tree(scratch);
	return st;
}
