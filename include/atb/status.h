/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb status codes and the caller-owned error record.
 *
 * Every fallible library function returns enum atb_status (ATB_OK = 0) and,
 * when given a struct atb_error, fills it with the precise cause.  Status
 * numbers are stored in the database and the audit chain, so a number is
 * never reused: a retired code stays as ATB_OBSOLETE<n>.  The primary code
 * lives in the low 8 bits; an extended code (a validator rule, say) adds a
 * detail in the high bits, as SQLite's extended result codes do:
 * ATB_PRIMARY(ATB_REJECTED_PAIRED_SEEDS) == ATB_ERR_REJECTED.
 *
 * The library never prints and never exits; cli/ maps statuses to messages
 * and exit codes.
 */
#ifndef ATB_STATUS_H
#define ATB_STATUS_H

#include <stddef.h>

enum atb_status {
	ATB_OK = 0,
	ATB_ERR_NOMEM = 1,       /* an allocation failed */
	ATB_ERR_IO = 2,          /* a file could not be read or written */
	ATB_ERR_PARSE = 3,       /* malformed YAML or JSON */
	ATB_ERR_SCHEMA = 4,      /* unknown key, wrong type, missing field, bad value */
	ATB_ERR_PROTOCOL = 5,    /* protocol not frozen, lock mismatch, unknown version */
	ATB_ERR_STORE = 6,       /* the database failed (SQLite error) */
	ATB_ERR_STORE_NEWER = 7, /* the store was written by a newer schema */
	ATB_ERR_NOT_A_STORE = 8, /* the file is not an atb store */
	ATB_ERR_LOCKED = 9,      /* the store is locked by another process */
	ATB_ERR_REJECTED = 10,   /* the ingest validator refused the row(s) */
	ATB_ERR_AUDIT = 11,      /* the audit chain does not verify */
	ATB_ERR_USAGE = 12,      /* a bad argument to a function or command */
	ATB_ERR_NOT_FOUND = 13,  /* a named thing does not exist */
	ATB_ERR_INTERNAL = 14,   /* a bug: an invariant did not hold */
	ATB_ERR_SYSTEM = 15,     /* a system call failed (fork, exec, signal) */
	ATB_ERR_CHECK = 16,      /* a consistency check found a problem */
	ATB_ERR_BUILD = 17,      /* a kernel source did not build (compile error, build timeout) */
	ATB_ERR_LLM = 18,        /* a model call failed (transport, HTTP status, malformed reply) */
	ATB_ERR_INFRA_DEFECT = 19, /* a run halted: its model calls crossed an alarm threshold */

	/*
	 * Extended codes for ATB_ERR_REJECTED: one per validator rule.  The
	 * rule ids are the names used in RAISE() messages in the schema.
	 */
	ATB_REJECTED_PAIRED_SEEDS = ATB_ERR_REJECTED | (1 << 8),
	ATB_REJECTED_UNFROZEN_PROTOCOL = ATB_ERR_REJECTED | (2 << 8),
	ATB_REJECTED_NO_BOX = ATB_ERR_REJECTED | (3 << 8),
	ATB_REJECTED_BASELINE_ELSEWHERE = ATB_ERR_REJECTED | (4 << 8),
	ATB_REJECTED_CV_OVER_CAP = ATB_ERR_REJECTED | (5 << 8),
	ATB_REJECTED_ANOMALY_NOT_QUARANTINED = ATB_ERR_REJECTED | (6 << 8),
	ATB_REJECTED_DUPLICATE_SEED = ATB_ERR_REJECTED | (7 << 8),
	ATB_REJECTED_BAD_TIME = ATB_ERR_REJECTED | (8 << 8),
	ATB_REJECTED_APPEND_ONLY = ATB_ERR_REJECTED | (9 << 8),
	ATB_REJECTED_AUDIT_CHAIN = ATB_ERR_REJECTED | (10 << 8),
	ATB_REJECTED_REVIEW = ATB_ERR_REJECTED | (11 << 8),
	ATB_REJECTED_MALFORMED = ATB_ERR_REJECTED | (12 << 8),
	/* a median, ratio, speedup or cv that does not follow from the rows below it */
	ATB_REJECTED_NOT_DERIVED = ATB_ERR_REJECTED | (13 << 8),
};

#define ATB_PRIMARY(s) ((enum atb_status)((unsigned)(s) & 0xffu))

/* Fixed-size detail for a failure (curl's error buffer).  Caller-owned. */
struct atb_error {
	enum atb_status status;
	char file[512];   /* input file, "" when none */
	unsigned line;    /* 1-based; 0 when unknown */
	unsigned column;  /* 1-based; 0 when unknown */
	char field[256];  /* field path, e.g. "timing.trials.max"; "" when none */
	char msg[1024];   /* lowercase, no final full stop, problem first */
};

/* Reset *err to "no error".  err may be NULL. */
void atb_error_clear(struct atb_error *err);

/*
 * Record status and a printf-style message in *err (err may be NULL) and
 * return status, so that `return atb_error_set(err, ...)` reads naturally.
 * Keeps file/line/field already set.
 */
enum atb_status atb_error_set(struct atb_error *err, enum atb_status status,
			      const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* As atb_error_set, also recording the input position and field path. */
enum atb_status atb_error_set_at(struct atb_error *err, enum atb_status status,
				 const char *file, unsigned line,
				 unsigned column, const char *field,
				 const char *fmt, ...)
	__attribute__((format(printf, 7, 8)));

/* Stable lowercase name of a status ("rejected", "rejected:paired_seeds"). */
const char *atb_status_name(enum atb_status status);

/*
 * Format *err as one line, "file:line:column: field: message" with the
 * absent parts left out, into buf (always NUL-terminated).
 */
void atb_error_format(const struct atb_error *err, char *buf, size_t size);

#endif
