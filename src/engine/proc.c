/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Engine lifecycle: spawn (atb_proc: a plain child, the engine being the
 * user's program) in its own process group on a free loopback port with
 * stdout and stderr in files, readiness polled with libcurl, death
 * detection without waiting, stop with SIGTERM to the group then SIGKILL
 * after the grace period, and the log's tail for every reason.
 *
 * Does not: decide what a failure means for a measurement (ab.c does).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "atb/alloc.h"
#include "atb/proc.h"
#include "engine_int.h"
#include "banned.h"

struct atb_engine_proc {
	struct atb_proc proc;      /* its pid is also the process group id */
	int port;
	double grace_s;
	char url[64];
	char out_path[PATH_MAX];
	char err_path[PATH_MAX];
};

const char *atb_engine_base_url(const struct atb_engine_proc *p)
{
	return p->url;
}

pid_t atb_engine_pid(const struct atb_engine_proc *p)
{
	return p->proc.pid;
}

/* A port the kernel just handed out on 127.0.0.1; 0 on failure. */
static int free_port(void)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = 0;

	if (fd < 0)
		return 0;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

/* The last size-1 bytes of path, newlines and tabs as spaces, trimmed. */
static void file_tail(const char *path, char *buf, size_t size)
{
	FILE *f = fopen(path, "rb");
	long end;
	size_t n = 0, i, j;

	buf[0] = '\0';
	if (!f)
		return;
	if (fseek(f, 0, SEEK_END) == 0 && (end = ftell(f)) > 0) {
		long from = end > (long)size - 1 ? end - ((long)size - 1) : 0;

		if (fseek(f, from, SEEK_SET) == 0)
			n = fread(buf, 1, size - 1, f);
	}
	fclose(f);
	buf[n] = '\0';
	/* One line, runs of blanks squeezed (argparse indents its usage). */
	for (i = 0, j = 0; i < n; i++) {
		char c = buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t' || buf[i] == '\0'
				 ? ' ' : buf[i];

		if (c == ' ' && (j == 0 || buf[j - 1] == ' '))
			continue;
		buf[j++] = c;
	}
	while (j && buf[j - 1] == ' ')
		j--;
	buf[j] = '\0';
}

void atb_engine_log_tail(const struct atb_engine_proc *p, char *buf, size_t size)
{
	file_tail(p->err_path, buf, size);
	if (!buf[0])
		file_tail(p->out_path, buf, size);
}

static void describe_exit(int ws, char *buf, size_t size)
{
	if (WIFEXITED(ws))
		snprintf(buf, size, "exited with status %d", WEXITSTATUS(ws));
	else if (WIFSIGNALED(ws))
		snprintf(buf, size, "was killed by signal %d (%s)", WTERMSIG(ws),
			 strsignal(WTERMSIG(ws)));
	else
		snprintf(buf, size, "stopped (wait status %d)", ws);
}

int atb_engine_alive(struct atb_engine_proc *p, char *why, size_t why_size)
{
	char how[96], tail[400];

	if (!atb_proc_wait(&p->proc, 0))
		return 1;
	if (why && why_size) {
		describe_exit(p->proc.status, how, sizeof(how));
		atb_engine_log_tail(p, tail, sizeof(tail));
		snprintf(why, why_size, "engine %s: %s", how, tail[0] ? tail : "(empty log)");
	}
	return 0;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

void atb_engine_stop(struct atb_engine_proc *p)
{
	if (!p)
		return;
	/* SIGTERM to the group, the grace period, then SIGKILL to what is left
	   (children of the engine that outlived it too) */
	atb_proc_stop(&p->proc, SIGTERM, (int64_t)(p->grace_s * 1e9));
	atb_free(p);
}

/* ---- http ---- */

struct body {
	char *buf;
	size_t n, cap;
	int over;
};

#define BODY_MAX ((size_t)16 << 20)

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct body *b = ud;
	size_t len = size * nmemb;

	if (b->over || b->n + len + 1 > BODY_MAX) {
		b->over = 1;
		return len;
	}
	if (b->n + len + 1 > b->cap) {
		size_t cap = (b->n + len + 1) * 2;
		char *nb = atb_realloc(b->buf, cap);

		if (!nb)
			return 0;
		b->buf = nb;
		b->cap = cap;
	}
	memcpy(b->buf + b->n, ptr, len);
	b->n += len;
	b->buf[b->n] = '\0';
	return len;
}

/* Every libcurl call goes through here: file, line and the call on failure. */
#define CURL_CALL(rc, call, why, size)                                                   \
	do {                                                                             \
		CURLcode c_ = (call);                                                    \
		if (c_ != CURLE_OK && (rc) == CURLE_OK) {                                \
			(rc) = c_;                                                       \
			snprintf((why), (size), "%s:%d: %s: %s", __FILE__, __LINE__, #call, \
				 curl_easy_strerror(c_));                                \
		}                                                                        \
	} while (0)

enum atb_status atbi_engine_http(const char *url, const char *post_json, long timeout_ms,
				 long *status, char **body, char *why, size_t why_size)
{
	struct body b = {NULL, 0, 0, 0};
	struct curl_slist *hdr = NULL;
	CURLcode rc = CURLE_OK;
	CURL *c;

	*status = 0;
	*body = NULL;
	if (why_size)
		why[0] = '\0';
	c = curl_easy_init();
	if (!c)
		return ATB_ERR_NOMEM;
	CURL_CALL(rc, curl_easy_setopt(c, CURLOPT_URL, url), why, why_size);
	CURL_CALL(rc, curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L), why, why_size);
	CURL_CALL(rc, curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms), why, why_size);
	CURL_CALL(rc, curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data), why, why_size);
	CURL_CALL(rc, curl_easy_setopt(c, CURLOPT_WRITEDATA, &b), why, why_size);
	CURL_CALL(rc, curl_easy_setopt(c, CURLOPT_PROXY, ""), why, why_size);
	if (post_json) {
		hdr = curl_slist_append(NULL, "Content-Type: application/json");
		CURL_CALL(rc, curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr), why, why_size);
		CURL_CALL(rc, curl_easy_setopt(c, CURLOPT_POSTFIELDS, post_json), why, why_size);
	}
	if (rc == CURLE_OK) {
		rc = curl_easy_perform(c);
		if (rc != CURLE_OK)
			snprintf(why, why_size, "%s", curl_easy_strerror(rc));
		else
			curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	}
	curl_slist_free_all(hdr);
	curl_easy_cleanup(c);
	if (rc == CURLE_WRITE_ERROR && !b.over) {
		atb_free(b.buf);
		return ATB_ERR_NOMEM;
	}
	*body = b.buf ? b.buf : atb_strdup("");
	return *body ? ATB_OK : ATB_ERR_NOMEM;
}

double atbi_prom_value(const char *text, const char *name)
{
	size_t nlen = strlen(name);
	const char *line = text;
	double sum = 0;
	int found = 0;

	while (line && *line) {
		const char *next = strchr(line, '\n');

		if (line[0] != '#' && !strncmp(line, name, nlen) &&
		    (line[nlen] == ' ' || line[nlen] == '{')) {
			const char *v = line + nlen;

			if (*v == '{')
				v = strchr(v, '}');
			if (v) {
				sum += strtod(v + 1, NULL);
				found = 1;
			}
		}
		line = next ? next + 1 : NULL;
	}
	return found ? sum : NAN;
}

/* ---- start ---- */

static int port_taken(const char *log)
{
	return strstr(log, "ddress already in use") || strstr(log, "EADDRINUSE") ||
	       strstr(log, "port is already") || strstr(log, "port already");
}

/* The CPUs to pin to, and the list as the refusal names it. */
struct pin {
	cpu_set_t set;
	char list[256];
};

static void pin_prepare(const int *cpus, size_t ncpus, struct pin *pin)
{
	size_t i, len = 0;

	CPU_ZERO(&pin->set);
	pin->list[0] = '\0';
	for (i = 0; i < ncpus; i++) {
		CPU_SET((size_t)cpus[i], &pin->set);
		if (len < sizeof(pin->list))
			len += (size_t)snprintf(pin->list + len, sizeof(pin->list) - len, "%s%d",
						i ? ", " : "", cpus[i]);
	}
}

/*
 * Child side, right before the exec (atb_proc's hook): pin to the task's
 * CPUs, so every thread the engine makes inherits it; the refusal goes to
 * the engine's log (fd 2 is already the log) and is exit status 126.
 */
static int pin_child(void *arg)
{
	const struct pin *pin = arg;

	if (sched_setaffinity(0, sizeof(pin->set), &pin->set) != 0) {
		dprintf(2, "atb: cannot pin engine to cpus [%s]: %s\n", pin->list, strerror(errno));
		return 126;
	}
	return 0;
}

enum atb_status atb_engine_start(const struct atb_engine_task *t,
				 const struct atb_engine_config *config, const char *run_dir,
				 struct atb_engine_proc **out, struct atb_error *err)
{
	const struct atb_engine_spec *spec = t->spec;
	struct atbi_subst sub = {t->model, "127.0.0.1", 0, run_dir};
	struct atb_engine_proc *p;
	char **argv = NULL, **env = NULL, url[PATH_MAX], tail[600], why[200];
	size_t argc = 0, nenv = 0, i;
	enum atb_status st;
	int64_t deadline;
	int fo = -1, fe = -1;
	struct atb_proc_opts po = {0};
	struct pin pin;

	*out = NULL;
	p = atb_calloc(1, sizeof(*p));
	if (!p)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	p->grace_s = spec->grace_s;
	p->port = free_port();
	if (!p->port) {
		atb_free(p);
		return atb_error_set(err, ATB_ERR_SYSTEM, "cannot find a free loopback port: %s",
				     strerror(errno));
	}
	sub.port = p->port;
	snprintf(p->url, sizeof(p->url), "http://127.0.0.1:%d", p->port);
	snprintf(p->out_path, sizeof(p->out_path), "%s/engine.stdout", run_dir);
	snprintf(p->err_path, sizeof(p->err_path), "%s/engine.stderr", run_dir);
	st = atb_engine_render(t, config, p->port, run_dir, &argv, &argc, err);
	if (!st && spec->nenv) {
		env = atb_calloc(spec->nenv + 1, sizeof(char *));
		if (!env)
			st = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
		for (i = 0; !st && i < spec->nenv; i++, nenv++)
			st = atbi_engine_expand(spec->env[i], &sub, &env[i], err);
	}
	if (st)
		goto fail;
	fo = open(p->out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	fe = open(p->err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fo < 0 || fe < 0) {
		st = atb_error_set(err, ATB_ERR_IO, "cannot create engine logs in '%s': %s",
				   run_dir, strerror(errno));
		goto fail;
	}
	/* An engine outliving a SIGKILLed atb would hold its port and GPU. */
	po.death_signal = SIGTERM;
	po.env = (const char *const *)env;
	if (t->ncpus) {
		pin_prepare(t->cpus, t->ncpus, &pin);
		po.before_exec = pin_child;
		po.before_exec_arg = &pin;
	}
	st = atb_proc_start_opts((const char *const *)argv, -1, fo, fe, NULL, &po, &p->proc, err);
	if (st == ATB_ERR_NOT_FOUND) {
		/* as an exec that failed: said in the log, a start failure */
		dprintf(fe, "atb: cannot run engine '%s': %s\n", argv[0], strerror(ENOENT));
		atb_engine_log_tail(p, tail, sizeof(tail));
		st = atb_error_set(err, ATB_ERR_CHECK, "engine could not start: %s", tail);
		goto fail;
	}
	if (st)
		goto fail;
	if (p->proc.exec_errno)   /* the child exits 127; the log says why */
		dprintf(fe, "atb: cannot run engine '%s': %s\n", argv[0],
			strerror(p->proc.exec_errno));
	close(fo);
	close(fe);
	fo = fe = -1;

	/* Readiness: GET ready_path until 200, death, or the timeout. */
	snprintf(url, sizeof(url), "%s%s", p->url, spec->ready_path);
	deadline = atbi_monotonic_ns() + (int64_t)(spec->ready_timeout_s * 1e9);
	for (;;) {
		long status = 0;
		char *body = NULL;

		if (!atb_engine_alive(p, NULL, 0)) {
			atb_engine_log_tail(p, tail, sizeof(tail));
			describe_exit(p->proc.status, why, sizeof(why));
			if (port_taken(tail))
				st = atb_error_set(err, ATB_ERR_CHECK, "port %d already taken: engine %s: %s",
						   p->port, why, tail);
			else
				st = atb_error_set(err, ATB_ERR_CHECK, "engine %s at start: %s", why,
						   tail[0] ? tail : "(empty log)");
			goto fail_started;
		}
		if (atbi_engine_http(url, NULL, 2000, &status, &body, why, sizeof(why)) ==
		    ATB_ERR_NOMEM) {
			st = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
			goto fail_started;
		}
		atb_free(body);
		if (status == 200)
			break;
		if (atbi_monotonic_ns() >= deadline) {
			atb_engine_log_tail(p, tail, sizeof(tail));
			st = atb_error_set(err, ATB_ERR_CHECK,
					   "engine not ready after %g s (GET %s: %s): %s",
					   spec->ready_timeout_s, spec->ready_path,
					   status ? "not 200" : why, tail[0] ? tail : "(empty log)");
			goto fail_started;
		}
		sleep_ms(spec->ready_interval_ms);
	}
	atbi_strv_free(argv, argc);
	atbi_strv_free(env, nenv);
	*out = p;
	return ATB_OK;

fail_started:
	atbi_strv_free(argv, argc);
	atbi_strv_free(env, nenv);
	atb_engine_stop(p);
	return st;
fail:
	if (fo >= 0)
		close(fo);
	if (fe >= 0)
		close(fe);
	atbi_strv_free(argv, argc);
	atbi_strv_free(env, nenv);
	atb_free(p);
	return st;
}
