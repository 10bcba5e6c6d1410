/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The load generator: seeded workloads, precomputed arrival schedules, a
 * single-threaded streaming HTTP client for OpenAI-compatible servers, and
 * the serving metrics computed from its per-request records.
 *
 * A workload (prompts, output lengths, intended send times) is a pure
 * function of its configuration and seed: the same configuration gives a
 * byte-identical workload (atb_loadgen_workload_json) on every box, so a
 * paired A/B runs baseline and candidate on the identical workload.  The
 * prompts and the arrival times come from two GSL MT19937 streams derived
 * from the seed, so changing the rate does not change the prompts.
 *
 * The client runs on libcurl's multi interface in the calling thread (no
 * thread per request), reusing keep-alive connections.  It posts to
 * /v1/completions or /v1/chat/completions, streaming (server-sent events,
 * with stream_options.include_usage) or not, and records for every request
 * the intended and actual send times, the arrival time of every token
 * chunk, the end, tokens in and out, finish reason, HTTP status, failure
 * category and the full generated text.  A failed request is recorded and
 * the run goes on.
 *
 * Times in records are nanoseconds of CLOCK_MONOTONIC since the run began
 * (-1 where the event did not happen).  Metric times are milliseconds.
 *
 * Does not: start or stop engines (atb/engine.h does), decide verdicts,
 * touch the store, print, or read the protocol (the caller copies
 * engine.max_dispatch_lag_ms into the configuration).  Not thread-safe;
 * libcurl's global init is done on first use.
 */
#ifndef ATB_LOADGEN_H
#define ATB_LOADGEN_H

#include <stddef.h>
#include <stdint.h>

#include "atb/status.h"

enum atb_loadgen_endpoint {
	ATB_LOADGEN_COMPLETIONS = 0, /* POST /v1/completions, "prompt" */
	ATB_LOADGEN_CHAT = 1,        /* POST /v1/chat/completions, "messages" */
};

/* A length distribution, in tokens.  Draws are rounded and clipped to [min, max]. */
enum atb_loadgen_dist_kind {
	ATB_LOADGEN_DIST_FIXED = 0,     /* a */
	ATB_LOADGEN_DIST_UNIFORM = 1,   /* integers in [a, b] */
	ATB_LOADGEN_DIST_NORMAL = 2,    /* mean a, standard deviation b */
	ATB_LOADGEN_DIST_LOGNORMAL = 3, /* median a, sigma b (of the log) */
};

struct atb_loadgen_dist {
	enum atb_loadgen_dist_kind kind;
	double a, b;
	long min, max; /* clip bounds, 1 <= min <= max */
};

enum atb_loadgen_prompts {
	ATB_LOADGEN_PROMPTS_SYNTHETIC = 0,  /* seeded words from a word list */
	ATB_LOADGEN_PROMPTS_REPETITIVE = 1, /* a seeded phrase, repeated */
	ATB_LOADGEN_PROMPTS_RANDOM = 2,     /* seeded random letter strings */
	ATB_LOADGEN_PROMPTS_DATASET = 3,    /* JSONL file, sampled by the seed */
};

enum atb_loadgen_arrival {
	ATB_LOADGEN_ARRIVAL_POISSON = 0,  /* exponential gaps at rate_per_s */
	ATB_LOADGEN_ARRIVAL_GAMMA = 1,    /* gamma gaps, shape = burstiness, mean 1/rate */
	ATB_LOADGEN_ARRIVAL_CONSTANT = 2, /* gaps of exactly 1/rate */
	ATB_LOADGEN_ARRIVAL_CLOSED = 3,   /* closed loop at `concurrency` */
};

/* Why a request failed.  Names (atb_loadgen_failure_name) are stable. */
enum atb_loadgen_failure {
	ATB_LOADGEN_OK = 0,
	ATB_LOADGEN_FAIL_CONNECT = 1,    /* "connect": refused, unreachable, DNS */
	ATB_LOADGEN_FAIL_HTTP_4XX = 2,   /* "http_4xx" */
	ATB_LOADGEN_FAIL_HTTP_5XX = 3,   /* "http_5xx" */
	ATB_LOADGEN_FAIL_TIMEOUT = 4,    /* "timeout": timeout_s passed */
	ATB_LOADGEN_FAIL_RESET = 5,      /* "reset": connection closed or reset mid-response */
	ATB_LOADGEN_FAIL_MALFORMED = 6,  /* "malformed_event": bad SSE event or JSON body */
	ATB_LOADGEN_FAIL_TOO_LARGE = 7,  /* "too_large": response over max_response_bytes */
	ATB_LOADGEN_FAIL_HTTP_OTHER = 8, /* "http_other": 1xx/3xx or no status */
	ATB_LOADGEN_FAIL_OTHER = 9,      /* "other": any other transfer error */
	ATB_LOADGEN_FAIL_ABORTED = 10,   /* "aborted": unfinished when should_abort stopped the run */
	ATB_LOADGEN_FAIL_COUNT = 11
};

/* Stable lowercase name of a failure category ("ok", "connect", ...). */
const char *atb_loadgen_failure_name(enum atb_loadgen_failure f);

struct atb_loadgen_config {
	/* target */
	const char *url;     /* base URL, e.g. "http://127.0.0.1:8000"; required */
	enum atb_loadgen_endpoint endpoint; /* default completions */
	const char *model;   /* "model" field; default "default" */
	int stream;          /* bool; default 1 */

	/* workload (PROTO: engine.paired_order runs both arms on one workload) */
	uint64_t seed;       /* default 0 */
	size_t requests;     /* measured requests; default 100 */
	size_t warmup;       /* warm-up requests sent first, excluded; default 0 */
	enum atb_loadgen_prompts prompts; /* default synthetic */
	const char *dataset_path;         /* with ATB_LOADGEN_PROMPTS_DATASET */
	struct atb_loadgen_dist input_len;  /* default fixed 128 */
	struct atb_loadgen_dist output_len; /* default fixed 128 */
	int ignore_eos;      /* bool: send "ignore_eos": true; default 0 */
	double temperature;  /* default 0 (greedy) */

	/* arrivals */
	enum atb_loadgen_arrival arrival; /* default closed */
	double rate_per_s;   /* open-loop rate; > 0 for poisson/gamma/constant */
	double burstiness;   /* gamma shape; default 1 (= poisson) */
	size_t concurrency;  /* closed loop: requests in flight; default 1 */
	size_t max_concurrency; /* cap on requests in flight; 0 = none */

	/* client */
	double timeout_s;    /* per request, whole transfer; default 600 */
	size_t max_response_bytes; /* hard cap of a read buffer; default 64 MiB */
	/* bool; default 1: keep-alive connections are reused.  0: a fresh
	   connection for every request.  llama.cpp's llama-server closed
	   kept-alive connections under libcurl's reuse (1-5 of every 100
	   streamed requests failed as 'reset', "Connection died, tried 5
	   times"); with fresh connections none did.  A loopback connect costs
	   far less than one generated token. */
	int reuse_connections;

	/* metrics */
	double slo_ttft_ms;  /* goodput limits; 0 = no limit */
	double slo_tpot_ms;
	double slo_e2e_ms;
	/* PROTO: engine.max_dispatch_lag_ms.  0 = no check. */
	double max_dispatch_lag_ms;

	/* test hook: busy-wait this long before each dispatch (0 = off) */
	int64_t test_dispatch_delay_ns;

	/*
	 * Progress, for a line with an ETA: called from the run's thread about
	 * once a second and once at the end, with requests finished (warm-up
	 * included), their total, and seconds since the run began.  NULL = none.
	 * It must not call back into the load generator.
	 */
	void (*progress)(void *ctx, size_t done, size_t total, double elapsed_s);
	void *progress_ctx;

	/*
	 * Abort check, for a server that may die under load: called from the
	 * run's thread on every turn of the event loop, which then wakes at
	 * least every 50 ms while this is set.  Nonzero stops the run at once:
	 * transfers in flight are dropped and every unfinished request is
	 * recorded as failed with category "aborted"; the summary's `aborted`
	 * is set and the status is still ATB_OK.  It must be cheap and must
	 * not call back into the load generator.  NULL = never.
	 */
	int (*should_abort)(void *ctx);
	void *abort_ctx;
};

/* Fill *cfg with the defaults above (url NULL). */
void atb_loadgen_config_init(struct atb_loadgen_config *cfg);

/*
 * Parse a distribution: "N" or "fixed:N", "uniform:LO:HI",
 * "normal:MEAN:SD[:MIN:MAX]", "lognormal:MEDIAN:SIGMA[:MIN:MAX]" (default
 * clip [1, 1048576]).  ATB_ERR_USAGE with the text quoted on a bad one.
 */
enum atb_status atb_loadgen_dist_parse(const char *text, struct atb_loadgen_dist *out,
				       struct atb_error *err);

/* Parse names: "poisson"|"gamma"|"constant"|"closed"; "completions"|"chat";
 * "synthetic"|"repetitive"|"random" (anything else is not a prompt kind).
 * ATB_ERR_USAGE on an unknown name. */
enum atb_status atb_loadgen_arrival_parse(const char *text, enum atb_loadgen_arrival *out,
					  struct atb_error *err);
enum atb_status atb_loadgen_endpoint_parse(const char *text, enum atb_loadgen_endpoint *out,
					   struct atb_error *err);
enum atb_status atb_loadgen_prompts_parse(const char *text, enum atb_loadgen_prompts *out,
					  struct atb_error *err);

/* One request of a workload.  Warm-up requests come first. */
struct atb_loadgen_request {
	size_t index;        /* 0-based over warm-up and measured requests */
	int warmup;          /* bool */
	char *prompt;        /* the prompt (completions) or user message (chat) */
	long input_len;      /* target input tokens (dataset: words of the prompt) */
	long max_tokens;     /* drawn output length, sent as max_tokens */
	/* ns after the measured phase begins; -1 for warm-up and closed loop */
	int64_t intended_ns;
};

struct atb_loadgen_workload;

/*
 * Build the workload (prompts and schedule) of cfg: warmup + requests
 * entries.  Same configuration and seed -> identical workload.  Caller
 * owns *out (atb_loadgen_workload_free); NULL on failure.
 * ATB_ERR_USAGE: a bad configuration value (named in field).
 * ATB_ERR_NOT_FOUND / ATB_ERR_IO: the dataset cannot be read.
 * ATB_ERR_PARSE / ATB_ERR_SCHEMA: a bad dataset line, with file and line.
 * ATB_ERR_NOMEM.
 */
enum atb_status atb_loadgen_workload_new(const struct atb_loadgen_config *cfg,
					 struct atb_loadgen_workload **out,
					 struct atb_error *err);
void atb_loadgen_workload_free(struct atb_loadgen_workload *wl);

size_t atb_loadgen_workload_count(const struct atb_loadgen_workload *wl);
/* Entry i (< count); owned by wl. */
const struct atb_loadgen_request *atb_loadgen_workload_get(const struct atb_loadgen_workload *wl,
							   size_t i);

/*
 * Canonical JSON of the workload (every entry, and the configuration that
 * shaped it: seed, kinds, distributions, arrival) and its SHA-256.  Caller
 * owns *json (atb_free).  Two equal workloads give equal bytes.
 */
enum atb_status atb_loadgen_workload_json(const struct atb_loadgen_workload *wl, char **json,
					  struct atb_error *err);
enum atb_status atb_loadgen_workload_digest(const struct atb_loadgen_workload *wl,
					    char out[65], struct atb_error *err);

/* The per-request record of a run. */
struct atb_loadgen_record {
	size_t index;
	int warmup;             /* bool */
	int64_t intended_ns;    /* scheduled send; closed loop: when a slot freed */
	int64_t eligible_ns;    /* max(intended, a concurrency slot free) */
	int64_t sent_ns;        /* handed to libcurl */
	int64_t first_token_ns; /* first content chunk; not streaming: end_ns; -1 when none */
	int64_t end_ns;         /* transfer finished; -1 never */
	int64_t *token_ns;      /* arrival of every content chunk; owned */
	size_t ntoken_ns;
	long tokens_in;         /* server usage when given, else target input_len */
	long tokens_out;        /* server usage when given, else chunks counted */
	int usage_from_server;  /* bool */
	char finish_reason[32]; /* "stop", "length", ... ; "" when none */
	long http_status;       /* 0 when no response */
	enum atb_loadgen_failure failure;
	char error[256];        /* "" when ok */
	char *text;             /* full generated text; owned, never NULL */
};

/* Distribution of one metric over the measured successful requests, ms. */
struct atb_loadgen_latency {
	size_t n;
	double mean, median, p90, p95, p99, max; /* 0 when n == 0 */
};

struct atb_loadgen_summary {
	size_t requests;        /* measured requests (warm-up excluded) */
	size_t completed;       /* measured requests that succeeded */
	size_t failed;
	size_t failures[ATB_LOADGEN_FAIL_COUNT]; /* by category, measured only */
	double duration_s;      /* measured phase: first intended send to last end */
	long tokens_in;         /* totals over completed measured requests */
	long tokens_out;
	double requests_per_s;  /* completed / duration */
	double output_tokens_per_s;
	double total_tokens_per_s;
	struct atb_loadgen_latency ttft_ms;
	struct atb_loadgen_latency tpot_ms; /* (end - first) / (out - 1), out > 1 */
	struct atb_loadgen_latency itl_ms;  /* every gap between chunks */
	struct atb_loadgen_latency e2e_ms;  /* end - sent */
	struct atb_loadgen_latency queue_ms; /* sent - intended: client-side queueing */
	struct atb_loadgen_latency dispatch_lag_ms; /* sent - eligible: the client's own lag */
	size_t good;            /* completed within every SLO given */
	double goodput_per_s;   /* good / duration */
	size_t peak_in_flight;
	/*
	 * PROTO: engine.max_dispatch_lag_ms.  Set when the p99 dispatch lag
	 * exceeds the configured limit: the client, not the server, was
	 * measured, and the caller must refuse the run.
	 */
	int client_limited;     /* bool */
	double max_dispatch_lag_ms; /* the limit applied (0 = none) */
	/*
	 * PROTO: engine.client_lag.  How far the client's own lateness can
	 * have moved requests/s, as a share of the duration: TTFT, TPOT and
	 * e2e are timed from the send, so the dispatch lag reaches only the
	 * run's end.  Open loop: every send is at most the largest lag late,
	 * and a server taking requests in order ends each at most that much
	 * later.  Closed loop: a slot idles for its request's lag, so the
	 * slots lose the summed lag over the concurrency.  client_lag_ms is
	 * that time (the largest lag, or the summed lag / concurrency).
	 */
	double client_lag_ms;
	double client_lag_share;
	int aborted;            /* bool: cfg->should_abort stopped the run */
};

struct atb_loadgen_result;

/*
 * Generate cfg's workload and run it: atb_loadgen_workload_new then
 * atb_loadgen_run_workload.
 */
enum atb_status atb_loadgen_run(const struct atb_loadgen_config *cfg,
				struct atb_loadgen_result **out, struct atb_error *err);

/*
 * Run a prepared workload against cfg's server (cfg's workload fields are
 * ignored, its target, arrival, client and metric fields apply).  Warm-up
 * requests run first and are waited for; then the measured schedule
 * starts.  Failed requests are recorded and do not stop the run, so the
 * status is ATB_OK even when every request failed (see the summary).
 * Caller owns *out (atb_loadgen_result_free); NULL on failure.
 * ATB_ERR_USAGE: bad configuration (no url, rate <= 0 in an open loop,
 * concurrency 0).  ATB_ERR_NOMEM.  ATB_ERR_SYSTEM: libcurl could not start.
 */
enum atb_status atb_loadgen_run_workload(const struct atb_loadgen_config *cfg,
					 const struct atb_loadgen_workload *wl,
					 struct atb_loadgen_result **out,
					 struct atb_error *err);

size_t atb_loadgen_result_count(const struct atb_loadgen_result *res);
/* Record i (< count), in workload order; owned by res. */
const struct atb_loadgen_record *atb_loadgen_result_record(const struct atb_loadgen_result *res,
							   size_t i);
const struct atb_loadgen_summary *atb_loadgen_result_summary(const struct atb_loadgen_result *res);
/* Digest of the workload the run used (64 hex + NUL). */
const char *atb_loadgen_result_workload_digest(const struct atb_loadgen_result *res);

/*
 * The result as JSON: {"summary": {...}, "workload_digest": ...} and, when
 * with_records, "records": [...].  Caller owns *json (atb_free).
 */
enum atb_status atb_loadgen_result_json(const struct atb_loadgen_result *res, int with_records,
					char **json, struct atb_error *err);

/* One record as a one-line JSON object (no newline).  Caller owns *json. */
enum atb_status atb_loadgen_record_json(const struct atb_loadgen_record *rec, char **json,
					struct atb_error *err);

/*
 * Write every record, one JSON object a line, to path: written to a
 * temporary file beside it and renamed, so a failure leaves no partial
 * file.  ATB_ERR_IO names the path.
 */
enum atb_status atb_loadgen_result_write_records(const struct atb_loadgen_result *res,
						 const char *path, struct atb_error *err);

void atb_loadgen_result_free(struct atb_loadgen_result *res);

#endif
