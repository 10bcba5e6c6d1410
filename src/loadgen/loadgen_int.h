/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Internals of the load generator shared by its files: the workload and
 * result structures, the server-sent-events splitter, and the summary
 * computation.  Not part of the public API.
 */
#ifndef ATB_LOADGEN_INT_H
#define ATB_LOADGEN_INT_H

#include <stddef.h>
#include <stdint.h>

#include "atb/loadgen.h"
#include "util.h"

struct atb_loadgen_workload {
	size_t n;
	struct atb_loadgen_request *items;
	char *json;      /* canonical JSON, built once */
	char digest[65];
};

struct atb_loadgen_result {
	size_t n;
	struct atb_loadgen_record *recs;
	struct atb_loadgen_summary summary;
	char workload_digest[65];
};

/* A growable byte string, NUL-terminated, with a hard maximum per call. */
struct atbi_buf {
	char *p;
	size_t len, cap;
};

/* Append n bytes: 0, -1 when len would pass max, -2 when out of memory. */
ATBI_FUNC int atbi_buf_add(struct atbi_buf *b, const char *s, size_t n, size_t max);

/*
 * Incremental server-sent-events parser: bytes go in as they arrive, in
 * pieces of any size; each complete event's data (its "data:" lines joined
 * with '\n') is handed to the callback.  Lines end in \n, \r\n or \r;
 * comments (":") and the fields event/id/retry are skipped.  The pending
 * bytes are bounded by max_bytes (hard maximum of the buffer).
 */
typedef int (*atbi_sse_event_fn)(void *ctx, const char *data, size_t len);

struct atbi_sse {
	char *line;          /* the line being assembled */
	size_t line_len, line_cap;
	char *data;          /* the event's data being assembled */
	size_t data_len, data_cap;
	int has_data;
	size_t max_bytes;
	int last_cr;         /* the previous byte was \r (for \r\n) */
};

ATBI_FUNC void atbi_sse_init(struct atbi_sse *p, size_t max_bytes);
/* Forget any pending bytes, keeping the buffers for the next stream. */
ATBI_FUNC void atbi_sse_reset(struct atbi_sse *p, size_t max_bytes);
ATBI_FUNC void atbi_sse_release(struct atbi_sse *p);
/*
 * Feed len bytes.  Returns 0, or the callback's non-zero value (parsing
 * stops), or -1 when the pending bytes would pass max_bytes or memory ran
 * out.
 */
ATBI_FUNC int atbi_sse_feed(struct atbi_sse *p, const char *buf, size_t len,
			    atbi_sse_event_fn fn, void *ctx);
/* End of stream: dispatch a final event not followed by a blank line. */
ATBI_FUNC int atbi_sse_finish(struct atbi_sse *p, atbi_sse_event_fn fn, void *ctx);

/*
 * Fill res->summary from res->recs: throughput over the measured phase
 * (measured_start_ns to the last end), latency distributions, goodput under
 * cfg's SLOs, failures, queueing and dispatch lag, client_limited.
 */
ATBI_FUNC enum atb_status atbi_loadgen_summarize(const struct atb_loadgen_config *cfg,
						 struct atb_loadgen_result *res,
						 int64_t measured_start_ns, size_t peak_in_flight,
						 struct atb_error *err);

/*
 * True when json_loadb failed for memory: jansson reports that with
 * json_error_out_of_memory, or (when its lexer cannot start) with no text.
 */
#define ATBI_JSON_OOM(je) (json_error_code(je) == json_error_out_of_memory || !(je)->text[0])

/* Whitespace-separated words in s (NULL: 0): the fallback token count. */
ATBI_FUNC long atbi_loadgen_count_words(const char *s);

/* Release what a record owns (token times, text). */
ATBI_FUNC void atbi_loadgen_record_release(struct atb_loadgen_record *rec);

/*
 * Run the client's receive path (timestamp, SSE, JSON, text, token times,
 * classification) over a canned response body fed in pieces of `piece`
 * bytes, without a socket: for bench-loadgen's per-event cost and for
 * tests.  cfg->stream and cfg->endpoint select the format.  Caller
 * releases rec with atbi_loadgen_record_release.
 */
ATBI_FUNC enum atb_status atbi_loadgen_replay_stream(const struct atb_loadgen_config *cfg,
						     const char *data, size_t len, size_t piece,
						     struct atb_loadgen_record *rec,
						     struct atb_error *err);

#endif
