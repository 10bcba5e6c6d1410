/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Internals of the protocol module: loading a YAML file with libfyaml into a
 * document whose diagnostics are collected (never printed), typing its plain
 * scalars, converting it to a jansson tree for the canonical form, and
 * validating it against the protocol schema.
 *
 * Does not: read the lock (protocol.c), or know about the store.
 */
#ifndef ATB_PROTOCOL_INT_H
#define ATB_PROTOCOL_INT_H

#include <stddef.h>

#include <jansson.h>
#include <libfyaml.h>

#include "atb/protocol.h"
#include "util.h"

/* One loaded YAML file: the text and the document built over it. */
struct atbi_yaml {
	const char *path;          /* not owned: the caller's */
	char *text;                /* file contents; owned (atb_free) */
	size_t len;
	struct fy_diag *diag;      /* collects libfyaml's errors */
	struct fy_parser *fyp;     /* owns doc */
	struct fy_document *doc;
	struct fy_node *root;      /* NULL for an empty document */
};

/* What a scalar is, by the rules of docs/internals/protocol.md. */
enum atbi_scalar_type {
	ATBI_SCALAR_STRING,
	ATBI_SCALAR_INT,
	ATBI_SCALAR_REAL,
	ATBI_SCALAR_BOOL,
	ATBI_SCALAR_NULL,
};

struct atbi_scalar {
	enum atbi_scalar_type type;
	long long i;
	double d;          /* set for INT too */
	int b;
	const char *text;  /* raw content, not NUL-terminated; in the document */
	size_t len;
	int quoted;        /* not a plain scalar */
};

/*
 * Read path and build its single YAML document.  Errors: ATB_ERR_NOT_FOUND,
 * ATB_ERR_IO, ATB_ERR_NOMEM, ATB_ERR_PARSE (malformed YAML, more than one
 * document, with file:line:column).  An empty document loads with
 * y->root == NULL.  Release with atbi_yaml_release even on failure.
 */
ATBI_FUNC enum atb_status atbi_yaml_load(const char *path, struct atbi_yaml *y,
					 struct atb_error *err);
ATBI_FUNC void atbi_yaml_release(struct atbi_yaml *y);

/*
 * 1-based position of a node: a scalar's own token; a collection's first
 * scalar (libfyaml 0.7.12 exposes no node marks); for an empty collection
 * or NULL, the fallback values passed in.
 */
ATBI_FUNC void atbi_yaml_mark(struct fy_node *n, unsigned *line, unsigned *column);

/*
 * Type a scalar node.  Errors (ATB_ERR_PARSE, at the node, with field):
 * an alias, a tag, an integer that does not fit 64 bits.
 */
ATBI_FUNC enum atb_status atbi_yaml_scalar(const struct atbi_yaml *y, struct fy_node *n,
					   const char *field, struct atbi_scalar *out,
					   struct atb_error *err);

/*
 * The whole document as JSON: caller owns *out (json_decref).  Errors:
 * ATB_ERR_NOMEM; ATB_ERR_PARSE for a duplicate key, a non-scalar key, an
 * alias or a tag, at the node, with field path.
 */
ATBI_FUNC enum atb_status atbi_yaml_to_json(const struct atbi_yaml *y, json_t **out,
					    struct atb_error *err);

/*
 * Canonical JSON text and its SHA-256 for a loaded document; an empty
 * document is ATB_ERR_SCHEMA.  Caller owns *canonical (atb_free); *json
 * (json_decref) when json is not NULL.
 */
ATBI_FUNC enum atb_status atbi_yaml_canonical(const struct atbi_yaml *y, json_t **json,
					      char **canonical, char digest[65],
					      struct atb_error *err);

/*
 * Check the document against the protocol schema and fill *p's values
 * (not digest, canonical_json or path).  ATB_ERR_SCHEMA with file, line,
 * column and field for the first failure.
 */
ATBI_FUNC enum atb_status atbi_protocol_validate(const struct atbi_yaml *y,
						 struct atb_protocol *p,
						 struct atb_error *err);

/* Join a field path: "a" + "b" -> "a.b"; index -> "a[2]". */
ATBI_FUNC void atbi_path_key(char *buf, size_t size, const char *parent,
			     const char *key, size_t keylen);
ATBI_FUNC void atbi_path_index(char *buf, size_t size, const char *parent, size_t i);

/* Write data to path through path.tmp, fsync and rename (the lock's way). */
ATBI_FUNC enum atb_status atbi_protocol_write_file(const char *path, const char *data,
						   size_t len, struct atb_error *err);

#endif
