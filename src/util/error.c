/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb_error: the caller-owned error record, and the stable status names that
 * go into the store, the audit chain and --json output.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "atb/status.h"
#include "banned.h"

void atb_error_clear(struct atb_error *err)
{
	if (!err)
		return;
	memset(err, 0, sizeof(*err));
}

static void set_msg(struct atb_error *err, const char *fmt, va_list ap)
{
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
}

enum atb_status atb_error_set(struct atb_error *err, enum atb_status status,
			      const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return status;
	err->status = status;
	va_start(ap, fmt);
	set_msg(err, fmt, ap);
	va_end(ap);
	return status;
}

enum atb_status atb_error_set_at(struct atb_error *err, enum atb_status status,
				 const char *file, unsigned line,
				 unsigned column, const char *field,
				 const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return status;
	err->status = status;
	snprintf(err->file, sizeof(err->file), "%s", file ? file : "");
	err->line = line;
	err->column = column;
	snprintf(err->field, sizeof(err->field), "%s", field ? field : "");
	va_start(ap, fmt);
	set_msg(err, fmt, ap);
	va_end(ap);
	return status;
}

const char *atb_status_name(enum atb_status status)
{
	switch (status) {
	case ATB_OK: return "ok";
	case ATB_ERR_NOMEM: return "nomem";
	case ATB_ERR_IO: return "io";
	case ATB_ERR_PARSE: return "parse";
	case ATB_ERR_SCHEMA: return "schema";
	case ATB_ERR_PROTOCOL: return "protocol";
	case ATB_ERR_STORE: return "store";
	case ATB_ERR_STORE_NEWER: return "store_newer";
	case ATB_ERR_NOT_A_STORE: return "not_a_store";
	case ATB_ERR_LOCKED: return "locked";
	case ATB_ERR_REJECTED: return "rejected";
	case ATB_ERR_AUDIT: return "audit";
	case ATB_ERR_USAGE: return "usage";
	case ATB_ERR_NOT_FOUND: return "not_found";
	case ATB_ERR_INTERNAL: return "internal";
	case ATB_ERR_SYSTEM: return "system";
	case ATB_ERR_CHECK: return "check";
	case ATB_ERR_BUILD: return "build";
	case ATB_ERR_LLM: return "llm";
	case ATB_ERR_INFRA_DEFECT: return "infrastructure_defect";
	case ATB_REJECTED_PAIRED_SEEDS: return "rejected:paired_seeds";
	case ATB_REJECTED_UNFROZEN_PROTOCOL: return "rejected:unfrozen_protocol";
	case ATB_REJECTED_NO_BOX: return "rejected:no_box";
	case ATB_REJECTED_BASELINE_ELSEWHERE: return "rejected:baseline_elsewhere";
	case ATB_REJECTED_CV_OVER_CAP: return "rejected:cv_over_cap";
	case ATB_REJECTED_ANOMALY_NOT_QUARANTINED: return "rejected:anomaly_not_quarantined";
	case ATB_REJECTED_DUPLICATE_SEED: return "rejected:duplicate_seed";
	case ATB_REJECTED_BAD_TIME: return "rejected:bad_time";
	case ATB_REJECTED_APPEND_ONLY: return "rejected:append_only";
	case ATB_REJECTED_AUDIT_CHAIN: return "rejected:audit_chain";
	case ATB_REJECTED_REVIEW: return "rejected:review";
	case ATB_REJECTED_MALFORMED: return "rejected:malformed";
	case ATB_REJECTED_NOT_DERIVED: return "rejected:not_derived";
	}
	return "unknown";
}

void atb_error_format(const struct atb_error *err, char *buf, size_t size)
{
	size_t n = 0;
	int w;

	if (!size)
		return;
	buf[0] = '\0';
	if (!err)
		return;
#define APPEND(...)                                                    \
	do {                                                           \
		if (n < size) {                                        \
			w = snprintf(buf + n, size - n, __VA_ARGS__);  \
			if (w > 0)                                     \
				n += (size_t)w;                        \
		}                                                      \
	} while (0)
	if (err->file[0]) {
		APPEND("%s", err->file);
		if (err->line) {
			APPEND(":%u", err->line);
			if (err->column)
				APPEND(":%u", err->column);
		}
		APPEND(": ");
	}
	if (err->field[0])
		APPEND("%s: ", err->field);
	APPEND("%s", err->msg[0] ? err->msg : atb_status_name(err->status));
#undef APPEND
}
