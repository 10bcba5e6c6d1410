/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Internals of the model-call client shared by its files (client.c: config,
 * HTTP and parsing; record.c: the store's llm tables, alarms, replay) and
 * the unit tests.
 */
#ifndef ATB_LLM_INT_H
#define ATB_LLM_INT_H

#include <stdint.h>

#include <jansson.h>

#include "atb/llm.h"
#include "util.h"

/* The llm tables (CREATE ... IF NOT EXISTS: also run on stores made before them). */
ATBI_FUNC extern const char atbi_llm_schema_sql[];

/* One stored call, as replay needs it. */
struct atbi_llm_recorded {
	char request_hash[65];
	char *response;        /* NULL: no response arrived */
	char *error;           /* NULL: none */
	int http_status;
	int used;
	double latency_s;
};

/* Everything the store keeps of one call (strings borrowed). */
struct atbi_llm_row {
	const char *run;
	const char *transport;      /* "http" | "replay" */
	const char *request_hash;
	const char *request;
	const char *prompt;
	const char *model;
	const char *params;         /* JSON object */
	const struct atb_llm_result *r;
};

/*
 * Insert one call (row + "llm.call" audit entry, one transaction), then
 * judge the run's alarms; on an alarm insert the llm_halt row and its
 * "llm.infrastructure_defect" entry and return ATB_ERR_INFRA_DEFECT with
 * the evidence in *alarm (caller owns; atb_free).  secret (may be NULL) is
 * cut out of every stored string.  *id and *n receive the row's id and
 * number.
 */
ATBI_FUNC enum atb_status atbi_llm_record(struct atb_store *s, const struct atb_protocol *p,
					  const struct atbi_llm_row *row, const char *secret,
					  int64_t *id, int64_t *n, char **alarm,
					  struct atb_error *err);

/* The run's calls in order; caller owns *out (atbi_llm_recorded_free). */
ATBI_FUNC enum atb_status atbi_llm_load_run(struct atb_store *s, const char *run,
					    struct atbi_llm_recorded **out, size_t *n,
					    struct atb_error *err);
ATBI_FUNC void atbi_llm_recorded_free(struct atbi_llm_recorded *v, size_t n);

/*
 * Fill r's content, finish_reason, usage and outcome from a response body
 * (r->response).  A body that is not a chat completion makes the outcome
 * failed with r->error saying why.
 */
ATBI_FUNC void atbi_llm_parse_response(struct atb_llm_result *r, enum atb_llm_expect expect);

/* Delay before attempt k+1 (k >= 1 failed attempts), jitter u in [0, 1): ms. */
ATBI_FUNC double atbi_llm_backoff_ms(const struct atb_llm_config *cfg, int k, double u);

/* Retry-After's value (delta seconds or an HTTP date) in seconds; -1 unknown. */
ATBI_FUNC double atbi_llm_retry_after_s(const char *value, int64_t now_s);

/* Cost of r from a price table file's JSON; -1 when it has no price for model. */
ATBI_FUNC double atbi_llm_cost(const json_t *prices, const char *model,
			       const struct atb_llm_result *r);

/* A copy of s with every occurrence of secret (8+ chars) replaced by "[redacted]". */
ATBI_FUNC char *atbi_llm_redact(const char *s, const char *secret);

/* 1 when run is 1-64 of [0-9a-zA-Z-]. */
ATBI_FUNC int atbi_llm_valid_run(const char *run);

/* One file of a unified diff: its name (after "+++ ", a "b/" cut), its hunks. */
struct atbi_llm_diff_part {
	const char *name, *body;  /* into the diff's text */
	size_t nlen, blen;
	int create;                /* "--- /dev/null": a new file */
};

/*
 * The files of a unified diff's text (lines outside "--- X" / "+++ Y" and
 * their hunks are skipped: prose, "diff --git", "index").  A "+++ /dev/null"
 * (a deletion) is ATB_ERR_SCHEMA, as are more than max files or none.  The
 * names are not checked here: the caller's surface check does that.
 */
ATBI_FUNC enum atb_status atbi_llm_diff_split(const char *s, size_t len,
					      struct atbi_llm_diff_part *parts, size_t max,
					      size_t *n, struct atb_error *err);

/*
 * name's base text with the diff's hunks (diff: the part's body) applied,
 * strictly (diff.c says how); *out (caller owns, atb_free) is
 * NUL-terminated.  Errors: ATB_ERR_SCHEMA naming the hunk and the line,
 * ATB_ERR_NOMEM.
 */
ATBI_FUNC enum atb_status atbi_llm_diff_apply(const char *name, const char *base,
					      size_t base_len, const char *diff, size_t diff_len,
					      char **out, size_t *out_len, struct atb_error *err);

#endif
