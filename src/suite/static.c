/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The static checks of a candidate (include/atb/suite.h): runs
 * python/atb_static.py with the configured interpreter (fork/execvp, no
 * shell, its own process group killed whole at the timeout), reads its JSON
 * findings with jansson, and applies the refusal policy.  Python is parsed
 * by Python's own `ast` module, never here.
 *
 * Does not: store anything (suite.c stores findings and refusals).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "atb/alloc.h"
#include "atb/atb.h"
#include "atb/suite.h"
#include "util.h"
#include "banned.h"

#define STATIC_OUT_MAX (1u << 20)
#define STATIC_DEFAULT_TIMEOUT_S 60.0

int atb_suite_finding_refuses(const char *kind)
{
	return !strcmp(kind, "syntax_error") || !strcmp(kind, "no_modelnew") ||
	       !strcmp(kind, "fallback_to_reference");
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

/* Run argv, capturing stdout and stderr, killed after timeout_s. */
static enum atb_status spawn(char *const argv[], double timeout_s, struct capture *out,
			     struct capture *errout, int *exit_status, struct atb_error *err)
{
	int po[2] = {-1, -1}, pe[2] = {-1, -1}, status = 0, open_fds = 2;
	int64_t deadline = atbi_monotonic_ns() + (int64_t)(timeout_s * 1e9);
	pid_t pid;

	if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC)) {
		if (po[0] >= 0) {
			close(po[0]);
			close(po[1]);
		}
		return atb_error_set(err, ATB_ERR_SYSTEM, "cannot make a pipe: %s", strerror(errno));
	}
	pid = fork();
	if (pid < 0) {
		close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
		return atb_error_set(err, ATB_ERR_SYSTEM, "cannot fork: %s", strerror(errno));
	}
	if (pid == 0) {
		setpgid(0, 0);
		dup2(po[1], STDOUT_FILENO);
		dup2(pe[1], STDERR_FILENO);
		execvp(argv[0], argv);
		_exit(127);
	}
	setpgid(pid, pid);
	close(po[1]);
	close(pe[1]);
	while (open_fds > 0) {
		struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
		int64_t left_ms = (deadline - atbi_monotonic_ns()) / 1000000;
		int i, r;

		if (left_ms <= 0) {
			kill(-pid, SIGKILL);
			waitpid(pid, &status, 0);
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
					kill(-pid, SIGKILL);
					waitpid(pid, &status, 0);
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
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	*exit_status = status;
	return ATB_OK;
}

static const char *tail(const struct capture *c)
{
	if (!c->buf)
		return "";
	return c->len > 400 ? c->buf + c->len - 400 : c->buf;
}

static enum atb_status parse_findings(const char *text, struct atb_suite_finding **out,
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
		struct atb_suite_finding *x = &(*out)[i];
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
		x->refuses = atb_suite_finding_refuses(x->kind);
	}
	*n = json_array_size(arr);
	json_decref(root);
	return ATB_OK;
}

enum atb_status atb_suite_static_check(const char *home, const char *python,
				       const char *reference, const char *candidate,
				       double timeout_s, struct atb_suite_finding **out,
				       size_t *n, char **json, struct atb_error *err)
{
	struct capture o = {0}, e = {0};
	char script[4096];
	char *argv[6];
	int status = 0;
	enum atb_status st;

	*out = NULL;
	*n = 0;
	if (json)
		*json = NULL;
	atb_alloc_install_json();
	if (!python || !*python)
		python = getenv("ATB_PYTHON");
	if (!python || !*python)
		python = "python3";
	snprintf(script, sizeof(script), "%s/%s", home ? home : atb_home(),
		 ATB_SUITE_STATIC_SCRIPT);
	argv[0] = (char *)python;
	argv[1] = script;
	argv[2] = "--reference";
	argv[3] = (char *)reference;
	argv[4] = (char *)candidate;
	argv[5] = NULL;
	st = spawn(argv, timeout_s > 0 ? timeout_s : STATIC_DEFAULT_TIMEOUT_S, &o, &e, &status,
		   err);
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
	if (!st && json) {
		*json = o.buf;
		o.buf = NULL;
		/* One line of JSON: drop the newline. */
		if ((*json)[0] && (*json)[strlen(*json) - 1] == '\n')
			(*json)[strlen(*json) - 1] = '\0';
	}
out:
	atb_free(o.buf);
	atb_free(e.buf);
	return st;
}
