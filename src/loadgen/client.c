/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The load generator's client: one thread, libcurl's multi interface.
 *
 * Requests are dispatched from the precomputed schedule (open loop) or as
 * slots free (closed loop), under an optional concurrency cap.  Between
 * events the thread sleeps in curl_multi_poll with a CLOCK_MONOTONIC
 * timerfd as an extra descriptor armed for the next intended send, so a
 * send is not late by poll's millisecond granularity.  Connections are
 * kept alive and reused through the multi handle's connection cache; easy
 * handles are pooled.  Request bodies are built before the clock starts.
 *
 * Every write callback takes one timestamp; each server-sent event that
 * completes in that piece is parsed with jansson, and a non-empty text
 * delta is one token chunk at that time.  Failures are classified
 * (connect, http_4xx, http_5xx, timeout, reset, malformed_event,
 * too_large, http_other, other) and the run goes on.
 *
 * Does not: generate workloads (workload.c) or compute metrics
 * (metrics.c).  Every libcurl setup call goes through CURL_CALL.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "atb/alloc.h"
#include "loadgen_int.h"
#include "banned.h"

/* Record the failing libcurl call with file and line, and fail the setup. */
#define CURL_CALL(err, call)                                                          \
	do {                                                                          \
		int rc_ = (int)(call);                                                \
		if (rc_)                                                              \
			return atb_error_set(err, ATB_ERR_SYSTEM,                     \
					     "libcurl call failed at %s:%d: %s: %d",  \
					     __FILE__, __LINE__, #call, rc_);         \
	} while (0)

#define ERROR_BODY_MAX 4096

struct run;

struct xfer {
	CURL *easy;
	struct run *run;
	struct atb_loadgen_record *rec;
	struct atbi_sse sse;
	struct atbi_buf text, body;
	size_t tokcap;
	int64_t now;          /* the current write callback's timestamp */
	int status_known, bad_status, done_seen;
	char curl_err[CURL_ERROR_SIZE];
	struct xfer *next_free;
	struct xfer *next_all;
};

struct run {
	const struct atb_loadgen_config *cfg;
	const struct atb_loadgen_workload *wl;
	struct atb_loadgen_record *recs;
	char **bodies;
	CURLM *multi;
	struct curl_slist *headers;
	char *url;
	struct xfer *all;     /* every transfer slot made, made as needed */
	struct xfer *free_list;
	int timer_fd;
	int64_t t0;           /* CLOCK_MONOTONIC at the run's start */
	size_t in_flight, peak;
	size_t done;          /* transfers finished, for progress */
	int64_t progress_ns;  /* when progress was last reported */
	int64_t timer_at;     /* what the timerfd is armed for; -1 disarmed */
	int aborted;          /* cfg->should_abort said stop */
};

static int64_t now_ns(const struct run *run)
{
	return atbi_monotonic_ns() - run->t0;
}

/* Record the first failure of a transfer; later ones are consequences. */
__attribute__((format(printf, 3, 4)))
static void fail(struct xfer *x, enum atb_loadgen_failure f, const char *fmt, ...)
{
	va_list ap;

	if (x->rec->failure != ATB_LOADGEN_OK)
		return;
	x->rec->failure = f;
	va_start(ap, fmt);
	vsnprintf(x->rec->error, sizeof(x->rec->error), fmt, ap);
	va_end(ap);
}

/* A buffer refused bytes: over its hard maximum, or out of memory. */
static void buffer_failed(struct xfer *x, int rc, const char *what)
{
	if (rc == -2)
		fail(x, ATB_LOADGEN_FAIL_OTHER, "out of memory holding the %s", what);
	else
		fail(x, ATB_LOADGEN_FAIL_TOO_LARGE, "%s over max_response_bytes (%zu)", what,
		     x->run->cfg->max_response_bytes);
}

static int push_token(struct xfer *x, int64_t t)
{
	struct atb_loadgen_record *r = x->rec;

	if (r->ntoken_ns == x->tokcap) {
		size_t cap = x->tokcap ? x->tokcap * 2 : 64;
		int64_t *q = atb_realloc(r->token_ns, cap * sizeof(*q));

		if (!q)
			return -1;
		r->token_ns = q;
		x->tokcap = cap;
	}
	r->token_ns[r->ntoken_ns++] = t;
	if (r->first_token_ns < 0)
		r->first_token_ns = t;
	return 0;
}

/* Take text, finish reason and usage from one completion object (streamed or not). */
static int take_choice(struct xfer *x, json_t *o, int stream)
{
	struct atb_loadgen_record *r = x->rec;
	json_t *choice = json_array_get(json_object_get(o, "choices"), 0);
	json_t *usage = json_object_get(o, "usage");
	json_t *text = NULL, *fr;
	int chat = x->run->cfg->endpoint == ATB_LOADGEN_CHAT;

	if (json_is_object(usage)) {
		json_t *pt = json_object_get(usage, "prompt_tokens");
		json_t *ct = json_object_get(usage, "completion_tokens");

		if (json_is_integer(pt) && json_is_integer(ct)) {
			r->tokens_in = (long)json_integer_value(pt);
			r->tokens_out = (long)json_integer_value(ct);
			r->usage_from_server = 1;
		}
	}
	if (!choice)
		return 0;
	if (!chat)
		text = json_object_get(choice, "text");
	else
		text = json_object_get(json_object_get(choice, stream ? "delta" : "message"),
				       "content");
	if (json_is_string(text) && json_string_length(text)) {
		int rc = atbi_buf_add(&x->text, json_string_value(text), json_string_length(text),
				 x->run->cfg->max_response_bytes);

		if (rc) {
			buffer_failed(x, rc, "generated text");
			return -1;
		}
		if (stream && push_token(x, x->now)) {
			fail(x, ATB_LOADGEN_FAIL_OTHER, "%s", "out of memory recording tokens");
			return -1;
		}
	}
	fr = json_object_get(choice, "finish_reason");
	if (json_is_string(fr))
		snprintf(r->finish_reason, sizeof(r->finish_reason), "%s", json_string_value(fr));
	return 0;
}

static void error_event(struct xfer *x, json_t *e)
{
	json_t *m = json_is_object(e) ? json_object_get(e, "message") : e;

	fail(x, ATB_LOADGEN_FAIL_OTHER, "server error event: %s",
	     json_is_string(m) ? json_string_value(m) : "no message");
}

static int on_event(void *ctx, const char *data, size_t len)
{
	struct xfer *x = ctx;
	json_error_t je;
	json_t *o;
	int rc;

	if (len == 6 && !memcmp(data, "[DONE]", 6)) {
		x->done_seen = 1;
		return 0;
	}
	o = json_loadb(data, len, 0, &je);
	if (!o && ATBI_JSON_OOM(&je)) {
		fail(x, ATB_LOADGEN_FAIL_OTHER, "out of memory parsing an event");
		return 1;
	}
	if (!json_is_object(o)) {
		char msg[160];

		snprintf(msg, sizeof(msg), "%.60s: %.80s", o ? "not an object" : je.text, data);
		json_decref(o);
		fail(x, ATB_LOADGEN_FAIL_MALFORMED, "malformed event: %s", msg);
		return 1;
	}
	if (json_object_get(o, "error")) {
		error_event(x, json_object_get(o, "error"));
		json_decref(o);
		return 1;
	}
	rc = take_choice(x, o, 1);
	json_decref(o);
	return rc ? 1 : 0;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct xfer *x = ud;
	size_t n = size * nmemb;

	x->now = now_ns(x->run);
	if (!x->status_known) {
		long code = 0;

		curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
		x->rec->http_status = code;
		x->bad_status = code < 200 || code >= 300;
		x->status_known = 1;
	}
	if (x->bad_status) {
		/* keep the head of an error body for the message */
		size_t room = x->body.len < ERROR_BODY_MAX ? ERROR_BODY_MAX - x->body.len : 0;

		atbi_buf_add(&x->body, ptr, n < room ? n : room, ERROR_BODY_MAX);
		return n;
	}
	if (!x->run->cfg->stream) {
		int rc = atbi_buf_add(&x->body, ptr, n, x->run->cfg->max_response_bytes);

		if (rc) {
			buffer_failed(x, rc, "response body");
			return 0;
		}
		return n;
	}
	if (atbi_sse_feed(&x->sse, ptr, n, on_event, x)) {
		/* an event's own failure was recorded first; else the buffer refused */
		buffer_failed(x, -1, "event");
		return 0;
	}
	return n;
}

static void classify_status(struct xfer *x)
{
	long code = x->rec->http_status;
	enum atb_loadgen_failure f = code >= 500 && code < 600 ? ATB_LOADGEN_FAIL_HTTP_5XX :
				     code >= 400 && code < 500 ? ATB_LOADGEN_FAIL_HTTP_4XX :
				     ATB_LOADGEN_FAIL_HTTP_OTHER;
	char msg[200];

	snprintf(msg, sizeof(msg), "%ld: %.180s", code, x->body.p ? x->body.p : "");
	fail(x, f, "http status %s", msg);
}

static void finish_body(struct xfer *x)
{
	json_error_t je;
	json_t *o = json_loadb(x->body.p ? x->body.p : "", x->body.len, 0, &je);

	if (!o && ATBI_JSON_OOM(&je)) {
		fail(x, ATB_LOADGEN_FAIL_OTHER, "out of memory parsing the response");
		return;
	}
	if (!json_is_object(o)) {
		json_decref(o);
		fail(x, ATB_LOADGEN_FAIL_MALFORMED, "malformed response body: %s", je.text);
		return;
	}
	if (json_object_get(o, "error"))
		error_event(x, json_object_get(o, "error"));
	else
		take_choice(x, o, 0);
	json_decref(o);
	if (x->rec->failure == ATB_LOADGEN_OK && x->text.len)
		x->rec->first_token_ns = x->rec->end_ns;
}

/* A transfer ended: classify it and complete its record. */
static void finish(struct xfer *x, CURLcode code)
{
	struct atb_loadgen_record *r = x->rec;
	const struct atb_loadgen_request *q = &x->run->wl->items[r->index];

	r->end_ns = now_ns(x->run);
	if (!x->status_known) {
		curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &r->http_status);
		x->bad_status = r->http_status && (r->http_status < 200 || r->http_status >= 300);
	}
	switch (code) {
	case CURLE_OK:
		if (x->bad_status || !r->http_status)
			classify_status(x);
		else if (!x->run->cfg->stream)
			finish_body(x);
		else if (atbi_sse_finish(&x->sse, on_event, x) == 0 && !x->done_seen &&
			 !r->finish_reason[0])
			fail(x, ATB_LOADGEN_FAIL_RESET, "%s", "stream ended before [DONE]");
		break;
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		fail(x, ATB_LOADGEN_FAIL_CONNECT, "cannot connect: %s",
		     x->curl_err[0] ? x->curl_err : curl_easy_strerror(code));
		break;
	case CURLE_OPERATION_TIMEDOUT:
		fail(x, ATB_LOADGEN_FAIL_TIMEOUT, "timed out: %s",
		     x->curl_err[0] ? x->curl_err : curl_easy_strerror(code));
		break;
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_PARTIAL_FILE:
	case CURLE_GOT_NOTHING:
		if (x->bad_status)
			classify_status(x);
		fail(x, ATB_LOADGEN_FAIL_RESET, "connection lost: %s",
		     x->curl_err[0] ? x->curl_err : curl_easy_strerror(code));
		break;
	default:
		/* a write-callback abort already holds its reason */
		fail(x, ATB_LOADGEN_FAIL_OTHER, "transfer failed: %s",
		     x->curl_err[0] ? x->curl_err : curl_easy_strerror(code));
		break;
	}
	if (!r->usage_from_server) {
		r->tokens_in = q->input_len;
		r->tokens_out = x->run->cfg->stream ? (long)r->ntoken_ns :
						      atbi_loadgen_count_words(x->text.p);
	}
	r->text = x->text.p ? x->text.p : atb_strdup("");
	x->text.p = NULL;
}

enum atb_status atbi_loadgen_replay_stream(const struct atb_loadgen_config *cfg,
					   const char *data, size_t len, size_t piece,
					   struct atb_loadgen_record *rec, struct atb_error *err)
{
	struct atb_loadgen_request q = {0};
	struct atb_loadgen_workload wl = {1, &q, NULL, ""};
	struct run run;
	struct xfer x;
	size_t i;

	memset(&run, 0, sizeof(run));
	memset(&x, 0, sizeof(x));
	memset(rec, 0, sizeof(*rec));
	rec->first_token_ns = rec->end_ns = -1;
	run.cfg = cfg;
	run.wl = &wl;
	run.t0 = atbi_monotonic_ns();
	x.run = &run;
	x.rec = rec;
	x.status_known = 1;
	rec->http_status = 200;
	atb_alloc_install_json();
	atbi_sse_init(&x.sse, cfg->max_response_bytes);
	for (i = 0; i < len && rec->failure == ATB_LOADGEN_OK; i += piece)
		if (on_write((char *)data + i, 1, len - i < piece ? len - i : piece, &x) == 0)
			break;
	finish(&x, CURLE_OK);
	atbi_sse_release(&x.sse);
	atb_free(x.body.p);
	if (!rec->text)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	return ATB_OK;
}

/* Options that stay the same for every transfer of a handle, set once. */
static enum atb_status configure(struct run *run, struct xfer *x, struct atb_error *err)
{
	const struct atb_loadgen_config *cfg = run->cfg;
	CURL *e = x->easy;
	long timeout_ms = (long)fmin(cfg->timeout_s * 1000.0, (double)LONG_MAX / 2);

	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_URL, run->url));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_HTTPHEADER, run->headers));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_WRITEDATA, x));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_PRIVATE, x));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->curl_err));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_NOPROXY, "*"));
	if (!cfg->reuse_connections)
		CURL_CALL(err, curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L));
	return ATB_OK;
}

static enum atb_status start(struct run *run, struct xfer *x, size_t i, struct atb_error *err)
{
	CURL *e = x->easy;

	atbi_sse_reset(&x->sse, run->cfg->max_response_bytes);
	x->body.len = 0;
	if (x->body.p)
		x->body.p[0] = '\0';
	atb_free(x->text.p);
	memset(&x->text, 0, sizeof(x->text));
	x->rec = &run->recs[i];
	x->tokcap = 0;
	x->status_known = x->bad_status = x->done_seen = 0;
	x->curl_err[0] = '\0';
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_POSTFIELDS, run->bodies[i]));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(run->bodies[i])));
	CURL_CALL(err, curl_multi_add_handle(run->multi, e));
	return ATB_OK;
}

static enum atb_status build_bodies(struct run *run, struct atb_error *err)
{
	const struct atb_loadgen_config *cfg = run->cfg;
	size_t i;

	run->bodies = atb_calloc(run->wl->n, sizeof(*run->bodies));
	if (!run->bodies)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory building requests");
	for (i = 0; i < run->wl->n; i++) {
		const struct atb_loadgen_request *q = &run->wl->items[i];
		json_t *o = json_pack("{s:s, s:I, s:f, s:b}", "model",
				      cfg->model ? cfg->model : "default",
				      "max_tokens", (json_int_t)q->max_tokens,
				      "temperature", cfg->temperature, "stream", cfg->stream != 0);
		int bad = !o;

		if (o && cfg->endpoint == ATB_LOADGEN_CHAT)
			bad |= json_object_set_new(o, "messages",
						   json_pack("[{s:s, s:s}]", "role", "user",
							     "content", q->prompt));
		else if (o)
			bad |= json_object_set_new(o, "prompt", json_string(q->prompt));
		if (o && cfg->stream)
			bad |= json_object_set_new(o, "stream_options",
						   json_pack("{s:b}", "include_usage", 1));
		if (o && cfg->ignore_eos)
			bad |= json_object_set_new(o, "ignore_eos", json_true());
		if (!bad)
			run->bodies[i] = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
		json_decref(o);
		if (!run->bodies[i])
			return atb_error_set(err, ATB_ERR_NOMEM, "out of memory building requests");
	}
	return ATB_OK;
}

static enum atb_status setup(struct run *run, size_t maxconn, struct atb_error *err)
{
	const struct atb_loadgen_config *cfg = run->cfg;
	const char *path = cfg->endpoint == ATB_LOADGEN_CHAT ? "/v1/chat/completions" :
			   "/v1/completions";
	size_t ulen = strlen(cfg->url);
	struct curl_slist *h;

	while (ulen && cfg->url[ulen - 1] == '/')
		ulen--;
	run->url = atb_malloc(ulen + strlen(path) + 1);
	if (!run->url)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	memcpy(run->url, cfg->url, ulen);
	memcpy(run->url + ulen, path, strlen(path) + 1);
	if (curl_global_init(CURL_GLOBAL_DEFAULT))
		return atb_error_set(err, ATB_ERR_SYSTEM, "libcurl could not initialize");
	run->multi = curl_multi_init();
	if (!run->multi)
		return atb_error_set(err, ATB_ERR_SYSTEM, "libcurl could not initialize");
	CURL_CALL(err, curl_multi_setopt(run->multi, CURLMOPT_MAXCONNECTS,
					 (long)(maxconn < 100000 ? maxconn : 100000)));
	h = curl_slist_append(NULL, "Content-Type: application/json");
	if (h)
		run->headers = h;
	h = h ? curl_slist_append(run->headers, "Expect:") : NULL;
	if (!h)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	run->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (run->timer_fd < 0)
		return atb_error_set(err, ATB_ERR_SYSTEM, "cannot create a timer: %s",
				     strerror(errno));
	return build_bodies(run, err);
}

static void teardown(struct run *run)
{
	size_t i;

	while (run->all) {
		struct xfer *x = run->all;

		run->all = x->next_all;
		if (x->easy) {
			if (run->multi)
				curl_multi_remove_handle(run->multi, x->easy);
			curl_easy_cleanup(x->easy);
		}
		atbi_sse_release(&x->sse);
		atb_free(x->body.p);
		atb_free(x->text.p);
		atb_free(x);
	}
	if (run->multi)
		curl_multi_cleanup(run->multi);
	curl_slist_free_all(run->headers);
	for (i = 0; run->bodies && i < run->wl->n; i++)
		atb_free(run->bodies[i]);
	atb_free(run->bodies);
	atb_free(run->url);
	if (run->timer_fd >= 0)
		close(run->timer_fd);
}

/* Report progress about once a second, or now when forced. */
static void progress(struct run *run, int force)
{
	int64_t now;

	if (!run->cfg->progress)
		return;
	now = now_ns(run);
	/* the last report is the forced one at the end, made once */
	if (!force && (now - run->progress_ns < 1000000000 || run->done == run->wl->n))
		return;
	run->progress_ns = now;
	run->cfg->progress(run->cfg->progress_ctx, run->done, run->wl->n, (double)now / 1e9);
}

/* A free transfer slot, or a new one: handles are made as concurrency needs them. */
static enum atb_status take_xfer(struct run *run, struct xfer **out, struct atb_error *err)
{
	struct xfer *x = run->free_list;
	enum atb_status s;

	if (x) {
		run->free_list = x->next_free;
		*out = x;
		return ATB_OK;
	}
	x = atb_calloc(1, sizeof(*x));
	if (!x)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	x->run = run;
	x->next_all = run->all;
	run->all = x;
	x->easy = curl_easy_init();
	if (!x->easy)
		return atb_error_set(err, ATB_ERR_SYSTEM, "libcurl could not make a handle");
	s = configure(run, x, err);
	if (s)
		return s;
	*out = x;
	return ATB_OK;
}

/* Arm the timer for `at` (run-relative ns), or disarm it with at < 0. */
static void arm_timer(struct run *run, int64_t at)
{
	struct itimerspec its;
	int64_t abs_ns = at < 0 ? 0 : run->t0 + at;

	/* a closed loop never arms it: no system call per turn for nothing */
	if (at == run->timer_at)
		return;
	run->timer_at = at;
	memset(&its, 0, sizeof(its));
	if (at >= 0) {
		its.it_value.tv_sec = (time_t)(abs_ns / 1000000000);
		its.it_value.tv_nsec = (long)(abs_ns % 1000000000);
		if (!its.it_value.tv_sec && !its.it_value.tv_nsec)
			its.it_value.tv_nsec = 1;
	}
	timerfd_settime(run->timer_fd, at >= 0 ? TFD_TIMER_ABSTIME : 0, &its, NULL);
}

/* Completed transfers: finish their records, free their slots. */
static size_t reap(struct run *run, int64_t *slot_free, size_t *nfree, size_t *head,
		   size_t ring, size_t limit, int64_t *last_free)
{
	CURLMsg *m;
	int left;
	size_t done = 0;

	while ((m = curl_multi_info_read(run->multi, &left))) {
		struct xfer *x = NULL;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
		finish(x, m->data.result);
		curl_multi_remove_handle(run->multi, x->easy);
		if (run->in_flight == limit)
			*last_free = x->rec->end_ns;
		if (slot_free && *nfree < ring)
			slot_free[(*head + (*nfree)++) % ring] = x->rec->end_ns;
		run->in_flight--;
		run->done++;
		x->next_free = run->free_list;
		run->free_list = x;
		done++;
	}
	return done;
}

/*
 * Run entries [first, first + count): closed loop at `limit` requests in
 * flight (intended = when the slot freed), or open loop from the schedule
 * offset by phase_start under a cap of `limit`.
 */
static enum atb_status run_phase(struct run *run, size_t first, size_t count, int closed,
				 size_t limit, int64_t phase_start, struct atb_error *err)
{
	const struct atb_loadgen_config *cfg = run->cfg;
	size_t next = first, end = first + count;
	size_t ring = closed ? (limit < count ? limit : count) : 0;
	size_t nfree = 0, head = 0, i;
	int64_t *slot_free = NULL, last_free = phase_start;
	enum atb_status s = ATB_OK;

	if (closed) {
		slot_free = atb_malloc(ring * sizeof(*slot_free));
		if (!slot_free)
			return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
		for (i = 0; i < ring; i++)
			slot_free[i] = phase_start;
		nfree = ring;
	}
	while (next < end || run->in_flight) {
		int64_t now = now_ns(run), wake = -1;
		int still;
		struct curl_waitfd wfd = {run->timer_fd, CURL_WAIT_POLLIN, 0};
		uint64_t ticks;
		int timeout_ms = cfg->should_abort ? 50 : 1000;

		/* A dead server is seen within one turn, not at the schedule's end. */
		if (cfg->should_abort && cfg->should_abort(cfg->abort_ctx)) {
			run->aborted = 1;
			break;
		}

		while (next < end && run->in_flight < limit) {
			struct atb_loadgen_record *r = &run->recs[next];
			struct xfer *x = NULL;

			if (closed) {
				r->intended_ns = slot_free[head];
				head = (head + 1) % ring;
				nfree--;
				r->eligible_ns = r->intended_ns;
			} else {
				r->intended_ns = phase_start + run->wl->items[next].intended_ns;
				if (r->intended_ns > now) {
					wake = r->intended_ns;
					break;
				}
				r->eligible_ns = r->intended_ns > last_free ? r->intended_ns :
									      last_free;
			}
			if (cfg->test_dispatch_delay_ns > 0) {
				int64_t until = now_ns(run) + cfg->test_dispatch_delay_ns;

				while (now_ns(run) < until)
					;
			}
			s = take_xfer(run, &x, err);
			if (s)
				goto out;
			r->sent_ns = now_ns(run);
			s = start(run, x, next, err);
			if (s)
				goto out;
			run->in_flight++;
			if (run->in_flight > run->peak)
				run->peak = run->in_flight;
			next++;
			now = now_ns(run);
		}
		if (curl_multi_perform(run->multi, &still) != CURLM_OK) {
			s = atb_error_set(err, ATB_ERR_SYSTEM, "libcurl multi perform failed");
			goto out;
		}
		if (reap(run, slot_free, &nfree, &head, ring, limit, &last_free)) {
			progress(run, 0);
			continue;
		}
		arm_timer(run, wake);
		if (wake >= 0) {
			int64_t d = wake - now_ns(run);

			d = d <= 0 ? 0 : d / 1000000 + 1;
			if (d < timeout_ms)
				timeout_ms = (int)d;
		}
		if (timeout_ms &&
		    curl_multi_poll(run->multi, &wfd, 1, timeout_ms, NULL) != CURLM_OK) {
			s = atb_error_set(err, ATB_ERR_SYSTEM, "libcurl multi poll failed");
			goto out;
		}
		if (wfd.revents) {
			/* fired: it is disarmed now, and read so poll stops reporting it */
			while (read(run->timer_fd, &ticks, sizeof(ticks)) > 0)
				;
			run->timer_at = -1;
		}
	}
out:
	atb_free(slot_free);
	return s;
}

/* After an abort: every request not finished failed as "aborted". */
static void mark_aborted(struct run *run)
{
	size_t i;

	for (i = 0; i < run->wl->n; i++) {
		struct atb_loadgen_record *r = &run->recs[i];

		if (r->end_ns >= 0 || r->failure != ATB_LOADGEN_OK)
			continue;
		r->failure = ATB_LOADGEN_FAIL_ABORTED;
		snprintf(r->error, sizeof(r->error), "%s",
			 r->sent_ns >= 0 ? "run aborted while in flight" : "run aborted before sending");
	}
}

enum atb_status atb_loadgen_run_workload(const struct atb_loadgen_config *cfg,
					 const struct atb_loadgen_workload *wl,
					 struct atb_loadgen_result **out, struct atb_error *err)
{
	struct run run;
	struct atb_loadgen_result *res;
	size_t nwarm = 0, i, limit, wlimit;
	int closed = cfg->arrival == ATB_LOADGEN_ARRIVAL_CLOSED;
	int64_t measured_start;
	enum atb_status s;

	*out = NULL;
	if (!cfg->url || strncmp(cfg->url, "http", 4))
		return atb_error_set_at(err, ATB_ERR_USAGE, "", 0, 0, "url",
					"need an http:// or https:// url, got '%s'",
					cfg->url ? cfg->url : "");
	if (closed && !cfg->concurrency)
		return atb_error_set_at(err, ATB_ERR_USAGE, "", 0, 0, "concurrency",
					"closed loop needs a concurrency >= 1");
	if (!closed && !(cfg->rate_per_s > 0))
		return atb_error_set_at(err, ATB_ERR_USAGE, "", 0, 0, "rate_per_s",
					"an open-loop arrival process needs a rate > 0");
	if (!(cfg->timeout_s > 0) || !cfg->max_response_bytes)
		return atb_error_set_at(err, ATB_ERR_USAGE, "", 0, 0, "timeout_s",
					"need timeout_s > 0 and max_response_bytes > 0");
	atb_alloc_install_json();
	while (nwarm < wl->n && wl->items[nwarm].warmup)
		nwarm++;
	limit = closed ? cfg->concurrency : cfg->max_concurrency ? cfg->max_concurrency : SIZE_MAX;
	if (closed && cfg->max_concurrency && cfg->max_concurrency < limit)
		limit = cfg->max_concurrency;
	wlimit = cfg->concurrency ? cfg->concurrency : 1;
	if (cfg->max_concurrency && cfg->max_concurrency < wlimit)
		wlimit = cfg->max_concurrency;
	res = atb_calloc(1, sizeof(*res));
	if (res)
		res->recs = atb_calloc(wl->n ? wl->n : 1, sizeof(*res->recs));
	if (!res || !res->recs) {
		atb_loadgen_result_free(res);
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	}
	res->n = wl->n;
	memcpy(res->workload_digest, wl->digest, sizeof(res->workload_digest));
	for (i = 0; i < wl->n; i++) {
		struct atb_loadgen_record *r = &res->recs[i];

		r->index = i;
		r->warmup = wl->items[i].warmup;
		r->intended_ns = r->eligible_ns = r->sent_ns = -1;
		r->first_token_ns = r->end_ns = -1;
	}
	memset(&run, 0, sizeof(run));
	run.cfg = cfg;
	run.wl = wl;
	run.recs = res->recs;
	run.timer_fd = -1;
	run.timer_at = -1;
	s = setup(&run, limit < wl->n ? (limit > wlimit ? limit : wlimit) : wl->n, err);
	run.t0 = atbi_monotonic_ns();
	if (!s && nwarm)
		s = run_phase(&run, 0, nwarm, 1, wlimit, 0, err);
	measured_start = now_ns(&run);
	run.peak = 0;
	if (!s && !run.aborted)
		s = run_phase(&run, nwarm, wl->n - nwarm, closed, limit, measured_start, err);
	if (!s)
		progress(&run, 1);
	teardown(&run);
	if (!s && run.aborted)
		mark_aborted(&run);
	if (!s)
		s = atbi_loadgen_summarize(cfg, res, measured_start, run.peak, err);
	if (!s)
		res->summary.aborted = run.aborted;
	for (i = 0; i < res->n; i++) {
		if (!res->recs[i].text)
			res->recs[i].text = atb_strdup("");
		if (!res->recs[i].text && !s)
			s = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	}
	if (s) {
		atb_loadgen_result_free(res);
		return s;
	}
	*out = res;
	return ATB_OK;
}

enum atb_status atb_loadgen_run(const struct atb_loadgen_config *cfg,
				struct atb_loadgen_result **out, struct atb_error *err)
{
	struct atb_loadgen_workload *wl;
	enum atb_status s;

	*out = NULL;
	s = atb_loadgen_workload_new(cfg, &wl, err);
	if (s)
		return s;
	s = atb_loadgen_run_workload(cfg, wl, out, err);
	atb_loadgen_workload_free(wl);
	return s;
}
