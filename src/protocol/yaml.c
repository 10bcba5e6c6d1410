/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Protocol files as YAML: load one document with libfyaml, its diagnostics
 * collected instead of printed, type its plain scalars (YAML 1.2 core, a
 * subset: decimal integers, decimal and exponent reals, true/false,
 * null/~), and convert it to jansson for the canonical form and digest.
 *
 * Does not: validate the protocol schema (schema.c) or read the lock.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atb/alloc.h"
#include "protocol_int.h"
#include "banned.h"

void atbi_path_key(char *buf, size_t size, const char *parent, const char *key,
		   size_t keylen)
{
	int k = keylen > 200 ? 200 : (int)keylen;

	if (parent && parent[0])
		snprintf(buf, size, "%s.%.*s", parent, k, key);
	else
		snprintf(buf, size, "%.*s", k, key);
}

void atbi_path_index(char *buf, size_t size, const char *parent, size_t i)
{
	snprintf(buf, size, "%s[%zu]", parent ? parent : "", i);
}

static void diag_discard(struct fy_diag *diag, void *user, const char *buf, size_t len)
{
	(void)diag; (void)user; (void)buf; (void)len;
}

/* The first collected libfyaml error as ATB_ERR_PARSE, if there is one. */
static int first_diag_error(struct atbi_yaml *y, struct atb_error *err)
{
	void *it = NULL;
	struct fy_diag_error *e = fy_diag_errors_iterate(y->diag, &it);

	if (!e)
		return 0;
	atb_error_set_at(err, ATB_ERR_PARSE, y->path, e->line > 0 ? (unsigned)e->line : 0,
			 e->column > 0 ? (unsigned)e->column : 0, NULL,
			 "malformed yaml: %s", e->msg ? e->msg : "syntax error");
	return 1;
}

enum atb_status atbi_yaml_load(const char *path, struct atbi_yaml *y, struct atb_error *err)
{
	struct fy_diag_cfg dcfg;
	struct fy_parse_cfg pcfg;
	struct fy_document *extra;
	enum atb_status st;

	memset(y, 0, sizeof(*y));
	y->path = path;
	st = atbi_read_file(path, &y->text, &y->len, err);
	if (st)
		return st;
	st = atbi_yaml_prescan(path, y->text, y->len, err);
	if (st)
		return st;

	fy_diag_cfg_default(&dcfg);
	dcfg.fp = NULL;
	dcfg.output_fn = diag_discard;
	dcfg.colorize = false;
	y->diag = fy_diag_create(&dcfg);
	if (!y->diag)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot parse '%s': out of memory", path);
	fy_diag_set_collect_errors(y->diag, true);

	memset(&pcfg, 0, sizeof(pcfg));
	/*
	 * Duplicate keys are let through libfyaml so that the converter can
	 * refuse them with the field path, which libfyaml's message lacks.
	 */
	pcfg.flags = FYPCF_QUIET | FYPCF_COLLECT_DIAG | FYPCF_ALLOW_DUPLICATE_KEYS |
		     FYPCF_DEFAULT_VERSION_1_2 | FYPCF_JSON_NONE;
	pcfg.diag = y->diag;
	y->fyp = fy_parser_create(&pcfg);
	if (!y->fyp)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot parse '%s': out of memory", path);
	if (fy_parser_set_string(y->fyp, y->text, y->len))
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot parse '%s': out of memory", path);

	y->doc = fy_parse_load_document(y->fyp);
	if (first_diag_error(y, err))
		return ATB_ERR_PARSE;
	if (!y->doc)
		return ATB_OK;  /* an empty stream */
	y->root = fy_document_root(y->doc);

	extra = fy_parse_load_document(y->fyp);
	if (extra) {
		unsigned line = 0, col = 0;

		atbi_yaml_mark(fy_document_root(extra), &line, &col);
		fy_parse_document_destroy(y->fyp, extra);
		return atb_error_set_at(err, ATB_ERR_PARSE, path, line, col, NULL,
					"more than one yaml document; a protocol file holds one");
	}
	if (first_diag_error(y, err))
		return ATB_ERR_PARSE;
	return ATB_OK;
}

void atbi_yaml_release(struct atbi_yaml *y)
{
	if (!y)
		return;
	if (y->doc)
		fy_parse_document_destroy(y->fyp, y->doc);
	if (y->fyp)
		fy_parser_destroy(y->fyp);
	if (y->diag)
		fy_diag_destroy(y->diag);
	atb_free(y->text);
	memset(y, 0, sizeof(*y));
}

void atbi_yaml_mark(struct fy_node *n, unsigned *line, unsigned *column)
{
	const struct fy_mark *m;
	struct fy_node_pair *pair;
	void *it = NULL;

	if (!n)
		return;
	switch (fy_node_get_type(n)) {
	case FYNT_SCALAR:
		m = fy_token_start_mark(fy_node_get_scalar_token(n));
		if (m) {
			*line = (unsigned)m->line + 1;
			*column = (unsigned)m->column + 1;
		}
		return;
	case FYNT_MAPPING:
		pair = fy_node_mapping_iterate(n, &it);
		if (pair)
			atbi_yaml_mark(fy_node_pair_key(pair), line, column);
		return;
	case FYNT_SEQUENCE:
		atbi_yaml_mark(fy_node_sequence_iterate(n, &it), line, column);
		return;
	}
}

static int is_digits(const char *s, size_t n)
{
	size_t i;

	if (!n)
		return 0;
	for (i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return 0;
	return 1;
}

/* [-+]?[0-9]+ */
static int looks_int(const char *s, size_t n)
{
	if (n && (s[0] == '-' || s[0] == '+'))
		s++, n--;
	return is_digits(s, n);
}

/* [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? with a '.' or an exponent */
static int looks_real(const char *s, size_t n)
{
	size_t i = 0, d0;
	int digits = 0, point = 0, expo = 0;

	if (i < n && (s[i] == '-' || s[i] == '+'))
		i++;
	d0 = i;
	while (i < n && s[i] >= '0' && s[i] <= '9')
		i++;
	digits = i > d0;
	if (i < n && s[i] == '.') {
		point = 1;
		i++;
		d0 = i;
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
		digits |= i > d0;
	}
	if (!digits)
		return 0;
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		expo = 1;
		i++;
		if (i < n && (s[i] == '-' || s[i] == '+'))
			i++;
		if (!is_digits(s + i, n - i))
			return 0;
		i = n;
	}
	return i == n && (point || expo);
}

static int text_is(const char *s, size_t n, const char *word)
{
	return strlen(word) == n && !memcmp(s, word, n);
}

enum atb_status atbi_yaml_scalar(const struct atbi_yaml *y, struct fy_node *n,
				 const char *field, struct atbi_scalar *out,
				 struct atb_error *err)
{
	unsigned line = 0, col = 0;
	size_t taglen = 0;
	char num[64];
	char *end;

	memset(out, 0, sizeof(*out));
	atbi_yaml_mark(n, &line, &col);
	if (fy_node_is_alias(n))
		return atb_error_set_at(err, ATB_ERR_PARSE, y->path, line, col, field,
					"aliases are not allowed in a protocol file");
	if (fy_node_get_tag(n, &taglen))
		return atb_error_set_at(err, ATB_ERR_PARSE, y->path, line, col, field,
					"tags are not allowed in a protocol file");
	out->text = fy_node_get_scalar(n, &out->len);
	if (!out->text) {
		out->text = "";
		out->len = 0;
	}
	out->type = ATBI_SCALAR_STRING;
	if (fy_node_get_style(n) != FYNS_PLAIN) {
		out->quoted = 1;
		return ATB_OK;
	}
	if (!out->len || text_is(out->text, out->len, "~") ||
	    text_is(out->text, out->len, "null") || text_is(out->text, out->len, "Null") ||
	    text_is(out->text, out->len, "NULL")) {
		out->type = ATBI_SCALAR_NULL;
	} else if (text_is(out->text, out->len, "true") ||
		   text_is(out->text, out->len, "True") ||
		   text_is(out->text, out->len, "TRUE")) {
		out->type = ATBI_SCALAR_BOOL;
		out->b = 1;
	} else if (text_is(out->text, out->len, "false") ||
		   text_is(out->text, out->len, "False") ||
		   text_is(out->text, out->len, "FALSE")) {
		out->type = ATBI_SCALAR_BOOL;
	} else if (looks_int(out->text, out->len) || looks_real(out->text, out->len)) {
		int is_int = looks_int(out->text, out->len);

		if (out->len >= sizeof(num))
			return atb_error_set_at(err, ATB_ERR_PARSE, y->path, line, col, field,
						"number too long, got '%.40s...'", out->text);
		memcpy(num, out->text, out->len);
		num[out->len] = '\0';
		errno = 0;
		if (is_int) {
			out->i = strtoll(num, &end, 10);
			if (errno == ERANGE || *end)
				return atb_error_set_at(err, ATB_ERR_PARSE, y->path, line, col,
							field, "integer out of range, got '%s'",
							num);
			out->type = ATBI_SCALAR_INT;
			out->d = (double)out->i;
		} else {
			out->d = strtod(num, &end);
			if (*end || !isfinite(out->d) ||
			    (errno == ERANGE && out->d != 0.0))
				return atb_error_set_at(err, ATB_ERR_PARSE, y->path, line, col,
							field, "number out of range, got '%s'",
							num);
			out->type = ATBI_SCALAR_REAL;
		}
	}
	return ATB_OK;
}

static enum atb_status to_json(const struct atbi_yaml *y, struct fy_node *n,
			       const char *path, json_t **out, struct atb_error *err);

static enum atb_status map_to_json(const struct atbi_yaml *y, struct fy_node *n,
				   const char *path, json_t **out, struct atb_error *err)
{
	struct fy_node_pair *pair;
	void *it = NULL;
	json_t *obj = json_object(), *v;
	enum atb_status st;

	if (!obj)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot convert '%s': out of memory",
				     y->path);
	while ((pair = fy_node_mapping_iterate(n, &it))) {
		struct fy_node *kn = fy_node_pair_key(pair);
		unsigned line = 0, col = 0;
		char sub[256];
		char *key;
		const char *ks;
		size_t klen = 0;

		atbi_yaml_mark(kn, &line, &col);
		if (!kn || !fy_node_is_scalar(kn) || fy_node_is_alias(kn)) {
			json_decref(obj);
			return atb_error_set_at(err, ATB_ERR_PARSE, y->path, line, col, path,
						"mapping keys must be strings");
		}
		ks = fy_node_get_scalar(kn, &klen);
		if (!ks)
			ks = "";
		atbi_path_key(sub, sizeof(sub), path, ks, klen);
		if (memchr(ks, '\0', klen)) {
			json_decref(obj);
			return atb_error_set_at(err, ATB_ERR_PARSE, y->path, line, col, sub,
						"mapping keys must not contain nul");
		}
		key = atb_strndup(ks, klen);
		if (!key) {
			json_decref(obj);
			return atb_error_set(err, ATB_ERR_NOMEM,
					     "cannot convert '%s': out of memory", y->path);
		}
		if (json_object_get(obj, key)) {
			json_decref(obj);
			atb_error_set_at(err, ATB_ERR_PARSE, y->path, line, col, sub,
					 "duplicate key '%s'", key);
			atb_free(key);
			return ATB_ERR_PARSE;
		}
		st = to_json(y, fy_node_pair_value(pair), sub, &v, err);
		if (st) {
			atb_free(key);
			json_decref(obj);
			return st;
		}
		if (json_object_set_new(obj, key, v)) {
			atb_free(key);
			json_decref(obj);
			return atb_error_set(err, ATB_ERR_NOMEM,
					     "cannot convert '%s': out of memory", y->path);
		}
		atb_free(key);
	}
	*out = obj;
	return ATB_OK;
}

static enum atb_status to_json(const struct atbi_yaml *y, struct fy_node *n,
			       const char *path, json_t **out, struct atb_error *err)
{
	struct atbi_scalar sc;
	enum atb_status st;
	json_t *v = NULL;

	*out = NULL;
	if (!n) {
		*out = json_null();
		return ATB_OK;
	}
	if (fy_node_is_mapping(n))
		return map_to_json(y, n, path, out, err);
	if (fy_node_is_sequence(n)) {
		struct fy_node *item;
		void *it = NULL;
		size_t i = 0;
		json_t *arr = json_array(), *e;

		if (!arr)
			goto nomem;
		while ((item = fy_node_sequence_iterate(n, &it))) {
			char sub[256];

			atbi_path_index(sub, sizeof(sub), path, i++);
			st = to_json(y, item, sub, &e, err);
			if (st) {
				json_decref(arr);
				return st;
			}
			if (json_array_append_new(arr, e)) {
				json_decref(arr);
				goto nomem;
			}
		}
		*out = arr;
		return ATB_OK;
	}
	st = atbi_yaml_scalar(y, n, path, &sc, err);
	if (st)
		return st;
	switch (sc.type) {
	case ATBI_SCALAR_NULL: v = json_null(); break;
	case ATBI_SCALAR_BOOL: v = json_boolean(sc.b); break;
	case ATBI_SCALAR_INT: v = json_integer((json_int_t)sc.i); break;
	case ATBI_SCALAR_REAL: v = json_real(sc.d); break;
	case ATBI_SCALAR_STRING: v = json_stringn_nocheck(sc.text, sc.len); break;
	}
	if (!v)
		goto nomem;
	*out = v;
	return ATB_OK;
nomem:
	return atb_error_set(err, ATB_ERR_NOMEM, "cannot convert '%s': out of memory", y->path);
}

enum atb_status atbi_yaml_to_json(const struct atbi_yaml *y, json_t **out,
				  struct atb_error *err)
{
	atb_alloc_install_json();
	return to_json(y, y->root, "", out, err);
}

enum atb_status atbi_yaml_canonical(const struct atbi_yaml *y, json_t **json,
				    char **canonical, char digest[65], struct atb_error *err)
{
	json_t *v = NULL;
	enum atb_status st;

	*canonical = NULL;
	digest[0] = '\0';
	if (json)
		*json = NULL;
	if (!y->root)
		return atb_error_set_at(err, ATB_ERR_SCHEMA, y->path, 1, 1, NULL,
					"empty protocol file; expected a mapping");
	st = atbi_yaml_to_json(y, &v, err);
	if (st)
		return st;
	/* atbi_json_canonical reads its text back and compares it with the tree */
	st = atbi_json_canonical(v, canonical, err);
	if (!st)
		st = atbi_sha256_hex(*canonical, strlen(*canonical), digest);
	if (st) {
		if (st == ATB_ERR_INTERNAL)
			atb_error_set(err, st, "cannot hash '%s': sha-256 failed", y->path);
		atb_free(*canonical);
		*canonical = NULL;
		json_decref(v);
		return st;
	}
	if (json)
		*json = v;
	else
		json_decref(v);
	return ATB_OK;
}
