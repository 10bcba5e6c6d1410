/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Serving metrics from the per-request records of a run: throughput,
 * TTFT, TPOT, ITL, end-to-end latency, client-side queueing and dispatch
 * lag (mean, median, p90, p95, p99, max through GSL's sort and quantile
 * functions), goodput under SLOs, failures by category, and the
 * client_limited flag of PROTO: engine.max_dispatch_lag_ms.  Also the
 * result's accessors, its JSON and the JSONL records file.
 *
 * Does not: send requests (client.c) or build workloads (workload.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <jansson.h>

#include "atb/alloc.h"
#include "loadgen_int.h"
#include "banned.h"

/* A growable array of doubles for one metric. */
struct samples {
	double *v;
	size_t n, cap;
};

static int push(struct samples *s, double x)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		double *q = atb_realloc(s->v, cap * sizeof(*q));

		if (!q)
			return -1;
		s->v = q;
		s->cap = cap;
	}
	s->v[s->n++] = x;
	return 0;
}

static void describe(struct samples *s, struct atb_loadgen_latency *out)
{
	memset(out, 0, sizeof(*out));
	out->n = s->n;
	if (!s->n)
		return;
	gsl_sort(s->v, 1, s->n);
	out->mean = gsl_stats_mean(s->v, 1, s->n);
	out->median = gsl_stats_quantile_from_sorted_data(s->v, 1, s->n, 0.5);
	out->p90 = gsl_stats_quantile_from_sorted_data(s->v, 1, s->n, 0.90);
	out->p95 = gsl_stats_quantile_from_sorted_data(s->v, 1, s->n, 0.95);
	out->p99 = gsl_stats_quantile_from_sorted_data(s->v, 1, s->n, 0.99);
	out->max = s->v[s->n - 1];
}

enum { M_TTFT, M_TPOT, M_ITL, M_E2E, M_QUEUE, M_LAG, M_COUNT };

#define NS_TO_MS(x) ((double)(x) / 1e6)

enum atb_status atbi_loadgen_summarize(const struct atb_loadgen_config *cfg,
				       struct atb_loadgen_result *res, int64_t measured_start_ns,
				       size_t peak_in_flight, struct atb_error *err)
{
	struct atb_loadgen_summary *sum = &res->summary;
	struct samples m[M_COUNT];
	int64_t last_end = measured_start_ns;
	size_t i, j;
	int oom = 0;

	memset(m, 0, sizeof(m));
	memset(sum, 0, sizeof(*sum));
	sum->peak_in_flight = peak_in_flight;
	sum->max_dispatch_lag_ms = cfg->max_dispatch_lag_ms;
	for (i = 0; i < res->n; i++) {
		const struct atb_loadgen_record *r = &res->recs[i];
		double ttft = 0, tpot = 0, e2e;
		int good;

		if (r->warmup)
			continue;
		sum->requests++;
		if (r->sent_ns >= 0) {
			oom |= push(&m[M_QUEUE], NS_TO_MS(r->sent_ns - r->intended_ns));
			oom |= push(&m[M_LAG], NS_TO_MS(r->sent_ns - r->eligible_ns));
		}
		if (r->end_ns > last_end)
			last_end = r->end_ns;
		if (r->failure != ATB_LOADGEN_OK) {
			sum->failed++;
			sum->failures[(unsigned)r->failure < ATB_LOADGEN_FAIL_COUNT ?
				      r->failure : ATB_LOADGEN_FAIL_OTHER]++;
			continue;
		}
		sum->completed++;
		sum->tokens_in += r->tokens_in;
		sum->tokens_out += r->tokens_out;
		e2e = NS_TO_MS(r->end_ns - r->sent_ns);
		oom |= push(&m[M_E2E], e2e);
		if (r->first_token_ns >= 0) {
			ttft = NS_TO_MS(r->first_token_ns - r->sent_ns);
			oom |= push(&m[M_TTFT], ttft);
		}
		/* TPOT needs a streamed first token and more than one token */
		if (r->ntoken_ns && r->tokens_out > 1) {
			tpot = NS_TO_MS(r->end_ns - r->first_token_ns) /
			       (double)(r->tokens_out - 1);
			oom |= push(&m[M_TPOT], tpot);
		}
		for (j = 1; j < r->ntoken_ns; j++)
			oom |= push(&m[M_ITL], NS_TO_MS(r->token_ns[j] - r->token_ns[j - 1]));
		good = (cfg->slo_ttft_ms <= 0 ||
			(r->first_token_ns >= 0 && ttft <= cfg->slo_ttft_ms)) &&
		       (cfg->slo_tpot_ms <= 0 || tpot <= cfg->slo_tpot_ms) &&
		       (cfg->slo_e2e_ms <= 0 || e2e <= cfg->slo_e2e_ms);
		sum->good += (size_t)good;
	}
	if (oom) {
		for (i = 0; i < M_COUNT; i++)
			atb_free(m[i].v);
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory computing metrics");
	}
	describe(&m[M_TTFT], &sum->ttft_ms);
	describe(&m[M_TPOT], &sum->tpot_ms);
	describe(&m[M_ITL], &sum->itl_ms);
	describe(&m[M_E2E], &sum->e2e_ms);
	describe(&m[M_QUEUE], &sum->queue_ms);
	describe(&m[M_LAG], &sum->dispatch_lag_ms);
	for (i = 0; i < M_COUNT; i++)
		atb_free(m[i].v);
	sum->duration_s = (double)(last_end - measured_start_ns) / 1e9;
	if (sum->duration_s > 0) {
		sum->requests_per_s = (double)sum->completed / sum->duration_s;
		sum->output_tokens_per_s = (double)sum->tokens_out / sum->duration_s;
		sum->total_tokens_per_s =
			(double)(sum->tokens_in + sum->tokens_out) / sum->duration_s;
		sum->goodput_per_s = (double)sum->good / sum->duration_s;
	}
	/* PROTO: engine.client_lag: what the lag can have done to requests/s (loadgen.h) */
	if (cfg->arrival == ATB_LOADGEN_ARRIVAL_CLOSED)
		sum->client_lag_ms = sum->dispatch_lag_ms.mean * (double)sum->dispatch_lag_ms.n /
				     (double)(cfg->concurrency ? cfg->concurrency : 1);
	else
		sum->client_lag_ms = sum->dispatch_lag_ms.max;
	if (sum->duration_s > 0)
		sum->client_lag_share = sum->client_lag_ms / (sum->duration_s * 1000.0);
	/* PROTO: engine.max_dispatch_lag_ms: the p99, so one hiccup does not refuse a run */
	sum->client_limited = cfg->max_dispatch_lag_ms > 0 &&
			      sum->dispatch_lag_ms.p99 > cfg->max_dispatch_lag_ms;
	return ATB_OK;
}

void atbi_loadgen_record_release(struct atb_loadgen_record *rec)
{
	atb_free(rec->token_ns);
	atb_free(rec->text);
	rec->token_ns = NULL;
	rec->text = NULL;
}

size_t atb_loadgen_result_count(const struct atb_loadgen_result *res)
{
	return res ? res->n : 0;
}

const struct atb_loadgen_record *atb_loadgen_result_record(const struct atb_loadgen_result *res,
							   size_t i)
{
	return res && i < res->n ? &res->recs[i] : NULL;
}

const struct atb_loadgen_summary *atb_loadgen_result_summary(const struct atb_loadgen_result *res)
{
	return res ? &res->summary : NULL;
}

const char *atb_loadgen_result_workload_digest(const struct atb_loadgen_result *res)
{
	return res ? res->workload_digest : "";
}

void atb_loadgen_result_free(struct atb_loadgen_result *res)
{
	size_t i;

	if (!res)
		return;
	for (i = 0; res->recs && i < res->n; i++)
		atbi_loadgen_record_release(&res->recs[i]);
	atb_free(res->recs);
	atb_free(res);
}

static json_t *latency_json(const struct atb_loadgen_latency *l)
{
	return json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f}", "n", (json_int_t)l->n,
			 "mean", l->mean, "median", l->median, "p90", l->p90, "p95", l->p95,
			 "p99", l->p99, "max", l->max);
}

static json_t *summary_json(const struct atb_loadgen_summary *s)
{
	json_t *o, *f;
	size_t i;

	f = json_object();
	for (i = 1; f && i < ATB_LOADGEN_FAIL_COUNT; i++)
		if (s->failures[i] &&
		    json_object_set_new(f, atb_loadgen_failure_name(i),
					json_integer((json_int_t)s->failures[i]))) {
			json_decref(f);
			return NULL;
		}
	o = json_pack("{s:I, s:I, s:I, s:o, s:f, s:I, s:I, s:f, s:f, s:f,"
		      " s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:f, s:I, s:b, s:f, s:f, s:f}",
		      "requests", (json_int_t)s->requests, "completed", (json_int_t)s->completed,
		      "failed", (json_int_t)s->failed, "failures", f,
		      "duration_s", s->duration_s, "tokens_in", (json_int_t)s->tokens_in,
		      "tokens_out", (json_int_t)s->tokens_out, "requests_per_s", s->requests_per_s,
		      "output_tokens_per_s", s->output_tokens_per_s,
		      "total_tokens_per_s", s->total_tokens_per_s,
		      "ttft_ms", latency_json(&s->ttft_ms), "tpot_ms", latency_json(&s->tpot_ms),
		      "itl_ms", latency_json(&s->itl_ms), "e2e_ms", latency_json(&s->e2e_ms),
		      "queue_ms", latency_json(&s->queue_ms),
		      "dispatch_lag_ms", latency_json(&s->dispatch_lag_ms),
		      "good", (json_int_t)s->good, "goodput_per_s", s->goodput_per_s,
		      "peak_in_flight", (json_int_t)s->peak_in_flight,
		      "client_limited", s->client_limited,
		      "max_dispatch_lag_ms", s->max_dispatch_lag_ms, "client_lag_ms",
		      s->client_lag_ms, "client_lag_share", s->client_lag_share);
	return o;
}

static json_t *record_json(const struct atb_loadgen_record *r)
{
	json_t *o, *t = json_array();
	size_t i;

	for (i = 0; t && i < r->ntoken_ns; i++)
		if (json_array_append_new(t, json_integer((json_int_t)r->token_ns[i]))) {
			json_decref(t);
			return NULL;
		}
	o = json_pack("{s:I, s:b, s:I, s:I, s:I, s:I, s:I, s:o, s:I, s:I, s:b, s:s, s:I, s:s,"
		      " s:s, s:s}",
		      "index", (json_int_t)r->index, "warmup", r->warmup,
		      "intended_ns", (json_int_t)r->intended_ns,
		      "eligible_ns", (json_int_t)r->eligible_ns, "sent_ns", (json_int_t)r->sent_ns,
		      "first_token_ns", (json_int_t)r->first_token_ns,
		      "end_ns", (json_int_t)r->end_ns, "token_ns", t,
		      "tokens_in", (json_int_t)r->tokens_in,
		      "tokens_out", (json_int_t)r->tokens_out,
		      "usage_from_server", r->usage_from_server, "finish_reason", r->finish_reason,
		      "http_status", (json_int_t)r->http_status,
		      "failure", atb_loadgen_failure_name(r->failure), "error", r->error,
		      "text", r->text ? r->text : "");
	return o;
}

static enum atb_status dump(json_t *o, char **out, struct atb_error *err)
{
	*out = NULL;
	if (o) {
		*out = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
		json_decref(o);
	}
	if (!*out)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory writing JSON");
	return ATB_OK;
}

enum atb_status atb_loadgen_record_json(const struct atb_loadgen_record *rec, char **json,
					struct atb_error *err)
{
	atb_alloc_install_json();
	return dump(record_json(rec), json, err);
}

enum atb_status atb_loadgen_result_json(const struct atb_loadgen_result *res, int with_records,
					char **json, struct atb_error *err)
{
	json_t *o;
	size_t i;

	atb_alloc_install_json();
	o = json_pack("{s:o, s:s}", "summary", summary_json(&res->summary),
		      "workload_digest", res->workload_digest);
	if (o && with_records) {
		json_t *a = json_array();

		if (json_object_set_new(o, "records", a))
			a = NULL;
		for (i = 0; a && i < res->n; i++)
			if (json_array_append_new(a, record_json(&res->recs[i])))
				a = NULL;
		if (!a) {
			json_decref(o);
			o = NULL;
		}
	}
	return dump(o, json, err);
}

enum atb_status atb_loadgen_result_write_records(const struct atb_loadgen_result *res,
						 const char *path, struct atb_error *err)
{
	char tmp[4096];
	FILE *f;
	size_t i;
	enum atb_status s = ATB_OK;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= sizeof(tmp))
		return atb_error_set(err, ATB_ERR_USAGE, "records path too long '%s'", path);
	f = fopen(tmp, "w");
	if (!f)
		return atb_error_set(err, ATB_ERR_IO, "cannot write records '%s': %s", path,
				     strerror(errno));
	for (i = 0; !s && i < res->n; i++) {
		char *line;

		s = atb_loadgen_record_json(&res->recs[i], &line, err);
		if (!s && fprintf(f, "%s\n", line) < 0)
			s = atb_error_set(err, ATB_ERR_IO, "cannot write records '%s': %s", path,
					  strerror(errno));
		atb_free(line);
	}
	if (fclose(f) && !s)
		s = atb_error_set(err, ATB_ERR_IO, "cannot write records '%s': %s", path,
				  strerror(errno));
	if (!s && rename(tmp, path))
		s = atb_error_set(err, ATB_ERR_IO, "cannot write records '%s': %s", path,
				  strerror(errno));
	if (s)
		unlink(tmp);
	return s;
}
