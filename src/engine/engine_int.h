/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Internals of the engine module: the YAML walker shared by the spec and
 * task loaders, placeholder expansion, and the small HTTP helpers (libcurl
 * easy handles) used for readiness, probes and metrics.
 *
 * Does not: generate load (loadgen/ does) or judge results (ab.c does).
 */
#ifndef ATB_ENGINE_INT_H
#define ATB_ENGINE_INT_H

#include <stddef.h>

#include <jansson.h>
#include <libfyaml.h>

#include "atb/engine.h"
#include "protocol/protocol_int.h"
#include "util.h"

/* One file being read: where errors point. */
struct atbi_ew {
	const struct atbi_yaml *y;
	struct atb_error *err;
};

/* ATB_ERR_SCHEMA at node n (its position), with field and the message. */
ATBI_FUNC enum atb_status atbi_ew_bad(struct atbi_ew *w, struct fy_node *n, const char *field,
				      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Refuse keys of map not in allowed (NULL-terminated), and a non-mapping. */
ATBI_FUNC enum atb_status atbi_ew_keys(struct atbi_ew *w, struct fy_node *map, const char *field,
				       const char *const *allowed);
ATBI_FUNC struct fy_node *atbi_ew_get(struct fy_node *map, const char *key);
/* A scalar's text (any scalar, null refused unless allow_null: then *out NULL). */
ATBI_FUNC enum atb_status atbi_ew_str(struct atbi_ew *w, struct fy_node *map, const char *parent,
				      const char *key, int required, char **out);
ATBI_FUNC enum atb_status atbi_ew_num(struct atbi_ew *w, struct fy_node *map, const char *parent,
				      const char *key, int required, double *out);
ATBI_FUNC enum atb_status atbi_ew_bool(struct atbi_ew *w, struct fy_node *map, const char *parent,
				       const char *key, int *out);
/* A sequence of scalars; absent: *n = 0. */
ATBI_FUNC enum atb_status atbi_ew_strlist(struct atbi_ew *w, struct fy_node *map,
					  const char *parent, const char *key, int required,
					  char ***out, size_t *n);
/* A node as JSON (scalars typed as the protocol's YAML); caller owns *out. */
ATBI_FUNC enum atb_status atbi_ew_json(struct atbi_ew *w, struct fy_node *n, const char *field,
				       json_t **out);
/* Check a template's placeholders; ATB_ERR_SCHEMA at n naming the bad one. */
ATBI_FUNC enum atb_status atbi_ew_template(struct atbi_ew *w, struct fy_node *n,
					   const char *field, const char *s);
ATBI_FUNC void atbi_strv_free(char **v, size_t n);

/* Values for placeholders. */
struct atbi_subst {
	const char *model;
	const char *host;
	int port;
	const char *run_dir;
};
/* Expand s; caller owns *out.  ATB_ERR_USAGE for an unset {env:NAME}. */
ATBI_FUNC enum atb_status atbi_engine_expand(const char *s, const struct atbi_subst *sub,
					     char **out, struct atb_error *err);

/*
 * One HTTP request to url (POST body when not NULL, JSON), at most
 * timeout_ms.  *status 0 when no response (curl error in why); caller owns
 * *body (atb_free), NUL-terminated, at most 16 MiB kept.
 */
ATBI_FUNC enum atb_status atbi_engine_http(const char *url, const char *post_json,
					   long timeout_ms, long *status, char **body,
					   char *why, size_t why_size);

/* Sum of the values of metric `name` in a Prometheus text body; NAN when absent. */
ATBI_FUNC double atbi_prom_value(const char *text, const char *name);

#endif
