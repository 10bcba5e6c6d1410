/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The model-call client: an OpenAI-compatible chat client (POST
 * {base}/v1/chat/completions over libcurl, JSON with jansson) with retries,
 * the model-call audit (every call a row of the store's llm_call table and
 * an "llm.call" audit entry that hashes the row), the infrastructure-defect
 * alarms (truncated, empty, unparsable and failed calls of a run against the
 * protocol's thresholds) and record/replay (a run's calls answered again
 * from the store, byte for byte, without any server).
 *
 * The API key is read from the environment or the config file into the
 * config struct only: it goes into the Authorization header and nowhere
 * else (not the request body, the request hash, the store, the audit chain,
 * an error message or any output), and atb_llm_config_release wipes it.
 *
 * Does not: build prompts or parse candidates out of replies (the loop's
 * proposer does), stream, or measure anything.
 */
#ifndef ATB_LLM_H
#define ATB_LLM_H

#include <stddef.h>
#include <stdint.h>

#include "atb/protocol.h"
#include "atb/status.h"

struct atb_store;

/*
 * Where the model is and how to ask it.  atb_llm_config_load fills it from
 * a config file (JSON, optional) and then the environment, which wins:
 *   ATB_LLM_BASE_URL  e.g. http://127.0.0.1:8080 (without /v1)
 *   ATB_LLM_MODEL     the "model" of every request
 *   ATB_LLM_API_KEY   sent as "Authorization: Bearer KEY" (optional)
 *   ATB_LLM_PRICES    the price table file (optional)
 *   ATB_LLM_CONFIG    the config file when no path is given
 * The config file's keys: base_url, model, api_key, price_table,
 * timeout_s, max_attempts, backoff_base_ms, backoff_max_ms,
 * retry_after_max_s, max_tokens_field ("max_tokens", the default, or
 * "max_completion_tokens", which OpenAI's reasoning models require).  A file
 * holding api_key must not be readable by group or others (chmod 600).
 */
struct atb_llm_config {
	char base_url[512];
	char model[256];
	char api_key[512];        /* secret: never copied out, wiped on release */
	char price_table[1024];   /* path; "" none */
	double timeout_s;         /* per attempt; 0: the protocol's request_timeout_s */
	int max_attempts;         /* first try + retries (default 5) */
	double backoff_base_ms;   /* delay before retry k: base * 2^(k-1), capped (500) */
	double backoff_max_ms;    /* the cap (30000) */
	double retry_after_max_s; /* a Retry-After above this fails the call (120) */
	int max_completion_tokens; /* 1: send the limit as "max_completion_tokens" */
};

/*
 * Defaults, then the file (path, else $ATB_LLM_CONFIG, else none), then the
 * environment.  Errors: ATB_ERR_NOT_FOUND, ATB_ERR_IO, ATB_ERR_PARSE (with
 * line and column), ATB_ERR_SCHEMA (unknown key, wrong type, bad value, an
 * api_key in a file others can read).  Release with atb_llm_config_release.
 */
enum atb_status atb_llm_config_load(const char *path, struct atb_llm_config *cfg,
				    struct atb_error *err);
void atb_llm_config_release(struct atb_llm_config *cfg);

/* What the caller will do with the content: the "unparsable" alarm's test. */
enum atb_llm_expect {
	ATB_LLM_EXPECT_TEXT = 0,   /* any non-empty content */
	ATB_LLM_EXPECT_JSON = 1,   /* the content is one JSON value */
	ATB_LLM_EXPECT_FENCED = 2, /* the content holds a ``` fenced block */
	ATB_LLM_EXPECT_FILES = 3,  /* either: a proposer of files reads both */
};

struct atb_llm_request {
	const char *system;        /* NULL: no system message */
	const char *prompt;        /* the user message */
	double temperature;        /* sent as given (0: greedy) */
	int has_seed;
	int64_t seed;
	enum atb_llm_expect expect;
	/*
	 * NULL, or a JSON object text sent as the body's "response_format"
	 * (e.g. {"type":"json_schema","json_schema":{...}}: llama.cpp, vLLM,
	 * SGLang and OpenAI constrain the reply to the schema).  Part of the
	 * request, so of its hash.
	 */
	const char *response_format;
};

/* Outcome of one call, as stored (llm_call.outcome). */
enum atb_llm_outcome {
	ATB_LLM_OK = 0,
	ATB_LLM_TRUNCATED = 1,     /* finish_reason "length": the output limit cut it */
	ATB_LLM_EMPTY = 2,         /* no content (and not truncated) */
	ATB_LLM_UNPARSABLE = 3,    /* content not what the request expected */
	ATB_LLM_FAILED = 4,        /* no usable response after every attempt */
};
const char *atb_llm_outcome_name(enum atb_llm_outcome o);

/* One call's result; release with atb_llm_result_release. */
struct atb_llm_result {
	enum atb_llm_outcome outcome;
	char request_hash[65];     /* SHA-256 of the exact request body bytes */
	int64_t call_id;           /* llm_call row id; 0 when not recorded */
	int64_t n;                 /* call number within the run */
	int http_status;           /* last attempt's; 0 none */
	int attempts;              /* 0 for a replayed call */
	double latency_s;          /* all attempts and waits; the recorded one on replay */
	char *content;             /* choices[0].message.content; NULL none */
	char *response;            /* the raw response body; NULL none */
	char finish_reason[32];    /* "" none */
	int64_t prompt_tokens;     /* -1 when the server did not say */
	int64_t completion_tokens;
	int64_t reasoning_tokens;  /* completion_tokens_details.reasoning_tokens; -1 absent */
	double cost_usd;           /* -1 when the price table has no price */
	char error[512];           /* "" unless failed */
	char *alarm;               /* JSON evidence when this call halted the run; NULL */
};
void atb_llm_result_release(struct atb_llm_result *r);

struct atb_llm_client;

struct atb_llm_client_opts {
	const struct atb_llm_config *cfg;
	const struct atb_protocol *protocol; /* max_tokens, timeout, alarm thresholds */
	struct atb_store *store;   /* NULL: nothing recorded, no alarms, no replay */
	const char *run;           /* label of the recorded calls (1-64 of [0-9a-zA-Z-]) */
	const char *replay_run;    /* non-NULL: answer from this run's stored calls */
};

/*
 * A client.  With replay_run every call is answered from that run's
 * recorded calls (the k-th request with a given hash gets the k-th recorded
 * answer to it); no connection is made.  Errors: ATB_ERR_USAGE (no base URL
 * or model without replay, a bad run label), ATB_ERR_NOT_FOUND (replay run
 * has no calls), ATB_ERR_NOMEM, store errors.  Caller owns *out
 * (atb_llm_client_free).
 */
enum atb_status atb_llm_client_new(const struct atb_llm_client_opts *o,
				   struct atb_llm_client **out, struct atb_error *err);
void atb_llm_client_free(struct atb_llm_client *c);

/*
 * One chat completion: body {"max_tokens":PROTO llm.max_output_tokens,
 * "messages":[...],"model":M,"temperature":T[,"seed":S]} (canonical JSON),
 * retried on timeouts, connection failures, 429 and 5xx with exponential
 * backoff and jitter, honouring Retry-After.  With a store the call is
 * recorded (one transaction: llm_call row and its audit entry) and the
 * run's alarms are judged.  out is filled in every case but a usage error.
 * Returns ATB_OK when a response arrived (out->outcome may still be
 * truncated, empty or unparsable: that is data), ATB_ERR_LLM when the call
 * failed (recorded as failed), ATB_ERR_INFRA_DEFECT when this call put the
 * run over a threshold (out->alarm holds the evidence, the run is halted:
 * the store refuses its later calls), ATB_ERR_NOT_FOUND on replay of a
 * request that was not recorded, store errors.
 */
enum atb_status atb_llm_call(struct atb_llm_client *c, const struct atb_llm_request *rq,
			     struct atb_llm_result *out, struct atb_error *err);

/* A run's call counts (PROTO: llm.alarms). */
struct atb_llm_run_stats {
	int64_t calls, ok, truncated, empty, unparsable, failed;
	int64_t prompt_tokens, completion_tokens, reasoning_tokens;
	double cost_usd;           /* sum of the calls with a price */
	double latency_s;
	int halted;                /* an llm_halt row exists */
	char halt_reason[32];      /* "truncation", "empty", "unparsable", "failed" */
};
enum atb_status atb_llm_run_stats(struct atb_store *s, const char *run,
				  struct atb_llm_run_stats *out, struct atb_error *err);

/*
 * The model a run's first recorded call asked (llm_call.model) into model
 * (size bytes): a replay asks the same one, so its requests are the same
 * bytes.  ATB_ERR_NOT_FOUND when the run has no recorded call.
 */
enum atb_status atb_llm_run_model(struct atb_store *s, const char *run, char *model,
				  size_t size, struct atb_error *err);

/*
 * Re-derive every llm_call row's hash and compare it with the row's
 * row_hash and with its "llm.call" audit entry's: ATB_OK, or ATB_ERR_CHECK
 * naming the first call that differs or has no entry (problem, cut to
 * size).  *ncalls (may be NULL) counts the rows checked.
 */
enum atb_status atb_llm_check(struct atb_store *s, int64_t *ncalls, char *problem,
			      size_t size, struct atb_error *err);

/* ---- replies: what a model's content may write (the proposer's half) ---- */

#define ATB_LLM_REPLY_MAX_FILES 16
#define ATB_LLM_REPLY_MAX_FILE_BYTES ((size_t)1 << 20)
#define ATB_LLM_REPLY_NAME_MAX 128

enum atb_llm_reply_format {
	ATB_LLM_REPLY_FENCED = 0,  /* ```LANG NAME ... ``` blocks (NAME optional for one file) */
	ATB_LLM_REPLY_JSON = 1,    /* {"files": {"NAME": "TEXT", ...}} */
};

struct atb_llm_file {
	char name[ATB_LLM_REPLY_NAME_MAX];
	char *text;                /* owned: the file's text, or its hunks when diff */
	size_t len;
	int diff;                  /* text is a unified diff's hunks for the file as it stands */
	int create;                /* a diff from /dev/null: the file must not exist yet */
};

struct atb_llm_reply {
	struct atb_llm_file files[ATB_LLM_REPLY_MAX_FILES];
	size_t nfiles;
};

/*
 * The files a reply's content proposes.  Every name must be one of
 * allowed[0..nallowed-1] (the task's surface files), a plain file name
 * (1-127 of [A-Za-z0-9._-], not starting with '.'): no folder, no absolute
 * path, no "..", each at most once; each text at most
 * ATB_LLM_REPLY_MAX_FILE_BYTES and without NUL bytes.  A fenced block
 * without a name is the single allowed file when there is exactly one.  A
 * fenced block whose info string starts with "diff" or "patch" is a unified
 * diff: each of its files ("--- a/NAME", "+++ b/NAME", hunks) is one entry
 * with diff set, applied by atb_llm_reply_write to the file as it stands in
 * the candidate folder; a deletion ("+++ /dev/null") is refused.
 * Errors: ATB_ERR_SCHEMA naming the offending name or size (the whole reply
 * is refused), ATB_ERR_PARSE (no file found, bad JSON), ATB_ERR_NOMEM.
 * Release with atb_llm_reply_release.
 */
enum atb_status atb_llm_reply_parse(const char *content, enum atb_llm_reply_format fmt,
				    const char *const *allowed, size_t nallowed,
				    struct atb_llm_reply *out, struct atb_error *err);
void atb_llm_reply_release(struct atb_llm_reply *r);

/*
 * Write r's files into the existing folder dir and nowhere else: dir is
 * opened without following a final symlink, an existing entry of a file's
 * name that is not a regular file (a symlink, a folder) refuses the whole
 * reply, and every file is written to a temporary name first and renamed
 * into place only when all are written (a failure leaves dir as it was).
 * A diff entry is applied to dir's file of its name first, strictly (every
 * hunk's context and removed lines exactly, at its line or the nearest
 * place after the previous hunk; no fuzz): one that does not apply refuses
 * the whole reply, nothing written.
 * Errors: ATB_ERR_SCHEMA (a symlink or folder in the way, a diff that does
 * not apply or names a file dir lacks), ATB_ERR_IO.
 */
enum atb_status atb_llm_reply_write(const struct atb_llm_reply *r, const char *dir,
				    struct atb_error *err);

#endif
