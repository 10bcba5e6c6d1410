/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The audit chain: an append-only, hash-chained log of every ingest,
 * rejection, review, frozen protocol and (through atb_store_audit_event)
 * model call or gate decision.
 *
 * An entry's body is the canonical JSON (sorted keys, compact, ASCII) of
 *   {"kind":K,"payload":P,"prev_hash":H,"seq":N,"time":T}
 * with T RFC 3339 UTC with nanoseconds; its hash is the SHA-256 of exactly
 * those bytes, and prev_hash is the previous entry's hash (64 zeros for
 * seq 1).  The chain is kept twice: in the store's audit table and in a
 * JSON-lines mirror beside the store, "<db>.audit.jsonl", one line
 *   {"entry":<body>,"hash":"<hex>"}
 * per entry.  The mirror line is written and fsync'ed before the SQLite
 * COMMIT, so a crash leaves at most one trailing mirror entry (or a partial
 * line) that the store never committed; the next read-write open truncates
 * it (the store is the record).
 *
 * Payload strings that equal or contain the value (8+ characters) of an
 * environment variable whose name contains KEY, TOKEN, SECRET or PASSWORD
 * are redacted to "[redacted]" before anything is written.
 *
 * Each entry that records rows (an ingest, a rejection, a review, a box, a
 * box capability, a frozen protocol, a run, an iteration) carries in its
 * payload "rows": the SHA-256 of those rows' canonical content (schema 3),
 * so an edited row breaks the entry that recorded it.  The head (seq and
 * hash of the last entry) can be kept elsewhere, and an optional witness
 * file outside the store's folder ($ATB_AUDIT_WITNESS) gets "seq:hash" per
 * append: truncation and a rewrite of the whole chain in both copies are
 * then found too.
 *
 * Does not: write entries itself (the store's writers do, in their own
 * transactions), or decide what is audited.
 */
#ifndef ATB_AUDIT_H
#define ATB_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include "atb/status.h"

struct atb_store;

#define ATB_AUDIT_GENESIS "0000000000000000000000000000000000000000000000000000000000000000"

struct atb_audit_entry {
	int64_t seq;
	char time[40];
	char kind[64];
	char *payload;     /* canonical JSON; owned by the array */
	char prev_hash[65];
	char hash[65];
};

/*
 * The store's entries with seq > since_seq, in order.  Caller owns *out
 * (atb_audit_entries_free).
 */
enum atb_status atb_audit_list(struct atb_store *s, int64_t since_seq,
			       struct atb_audit_entry **out, size_t *n,
			       struct atb_error *err);
void atb_audit_entries_free(struct atb_audit_entry *e, size_t n);

#define ATB_AUDIT_MAX_NOTES 4

struct atb_audit_report {
	int ok;                  /* both copies verify and agree */
	int64_t db_entries;
	int64_t mirror_entries;  /* complete lines */
	/* The first problem, when !ok. */
	int64_t bad_seq;         /* 0 when not about one entry */
	char bad_copy[16];       /* "db", "mirror", "both" or "store" */
	char problem[512];
	/* Things that are not errors (a crash's trailing uncommitted entry). */
	size_t nnotes;
	char notes[ATB_AUDIT_MAX_NOTES][256];
	/* Rows bound to the chain (schema 3): entries whose rows were re-hashed,
	 * and entries of a recording kind written before row hashes (legacy). */
	int64_t rows_checked;
	int64_t legacy_entries;
	/* The anchors checked: the --head entry's seq (0: none), witness lines. */
	int64_t head_seq;
	int64_t witness_lines;
};

/* What atb_audit_verify_with checks beyond both copies. */
struct atb_audit_verify_opts {
	const char *head;     /* "SEQ:HASH" published by atb audit head; NULL: none */
	const char *witness;  /* a witness file (seq:hash per line); NULL: none */
	int chain_only;       /* 1: do not re-hash the rows entries record */
};

/*
 * Verify both copies: each entry's hash over its body, seq continuity,
 * prev_hash links, that the mirror equals the store entry by entry, and that
 * every job, rejection and review row has its audit entry.  Finds the first
 * edited, deleted, inserted, reordered or truncated entry of either copy.
 * A trailing mirror entry whose subject is absent from the store (a crash
 * before COMMIT) and a partial last line are notes, not problems.
 * Returns ATB_OK when rep->ok, ATB_ERR_AUDIT (with rep filled and err naming
 * the problem) when not, other statuses when it could not run.
 */
enum atb_status atb_audit_verify(struct atb_store *s, struct atb_audit_report *rep,
				 struct atb_error *err);

/*
 * atb_audit_verify with anchors, and with the rows each entry records
 * re-hashed (schema 3; see src/audit/rows.c): an entry whose "rows" hash
 * differs from its rows' content now (edited, added or deleted rows) is a
 * problem naming the rows ("job 3"); an entry of a recording kind without
 * "rows" before the store's v2 -> v3 migration is counted as legacy (a
 * note), after it a problem.
 *
 * opts->head "SEQ:HASH": the store's entry SEQ must exist and have HASH
 * (a truncation or a rewrite of anything up to SEQ is found).
 * opts->witness: every "SEQ:HASH" line must match the store's entry SEQ,
 * and the chain must reach the witness's last seq (a trailing line one past
 * the store's last entry is a crash's leftover, a note).  A witness inside
 * the store's folder is refused (ATB_ERR_USAGE).  opts NULL: as
 * atb_audit_verify, which reads the witness from $ATB_AUDIT_WITNESS.
 * ATB_ERR_USAGE also for a malformed head.
 */
enum atb_status atb_audit_verify_with(struct atb_store *s, const struct atb_audit_verify_opts *opts,
				      struct atb_audit_report *rep, struct atb_error *err);

/*
 * The chain's head: the store's last entry's seq and hash (0 and the
 * genesis hash for an empty chain), to publish or keep outside the store.
 */
enum atb_status atb_audit_head(struct atb_store *s, int64_t *seq, char hash[65],
			       struct atb_error *err);

#endif
