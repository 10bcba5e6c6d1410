/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The YAML walker of engine specs and tasks: typed reads of mapping keys
 * with errors at the node (file:line:column, field path, the value), unknown
 * keys refused, node-to-JSON for free-form sections (workload), placeholder
 * checks and expansion.  Loading and scalar typing are the protocol
 * module's (protocol_int.h), so every YAML file of atb reads alike.
 *
 * Does not: know what a spec or task means (spec.c does).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atb/alloc.h"
#include "engine_int.h"
#include "banned.h"

enum atb_status atbi_ew_bad(struct atbi_ew *w, struct fy_node *n, const char *field,
			    const char *fmt, ...)
{
	unsigned line = 0, col = 0;
	char msg[sizeof(w->err->msg)];
	va_list ap;

	atbi_yaml_mark(n, &line, &col);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return atb_error_set_at(w->err, ATB_ERR_SCHEMA, w->y->path, line, col, field, "%s", msg);
}

struct fy_node *atbi_ew_get(struct fy_node *map, const char *key)
{
	if (!map || fy_node_get_type(map) != FYNT_MAPPING)
		return NULL;
	return fy_node_mapping_lookup_by_string(map, key, FY_NT);
}

enum atb_status atbi_ew_keys(struct atbi_ew *w, struct fy_node *map, const char *field,
			     const char *const *allowed)
{
	struct fy_node_pair *p;
	void *it = NULL;

	if (!map || fy_node_get_type(map) != FYNT_MAPPING)
		return atbi_ew_bad(w, map, field, "expected a mapping");
	while ((p = fy_node_mapping_iterate(map, &it))) {
		struct fy_node *k = fy_node_pair_key(p);
		const char *const *a;
		const char *ks;
		size_t klen = 0;
		char path[300];

		ks = k && fy_node_get_type(k) == FYNT_SCALAR ? fy_node_get_scalar(k, &klen) : NULL;
		if (!ks)
			return atbi_ew_bad(w, k, field, "a key must be a plain string");
		for (a = allowed; *a; a++)
			if (strlen(*a) == klen && !memcmp(*a, ks, klen))
				break;
		if (!*a) {
			atbi_path_key(path, sizeof(path), field, ks, klen);
			return atbi_ew_bad(w, k, path, "unknown key '%.*s'", (int)(klen > 80 ? 80 : klen),
					   ks);
		}
	}
	return ATB_OK;
}

static void join(char *buf, size_t size, const char *parent, const char *key)
{
	atbi_path_key(buf, size, parent, key, strlen(key));
}

static enum atb_status need(struct atbi_ew *w, struct fy_node *map, const char *parent,
			    const char *key, int required, struct fy_node **out)
{
	char path[300];

	*out = atbi_ew_get(map, key);
	if (!*out && required) {
		join(path, sizeof(path), parent, key);
		return atbi_ew_bad(w, map, path, "missing required key '%s'", key);
	}
	return ATB_OK;
}

static enum atb_status scalar_of(struct atbi_ew *w, struct fy_node *n, const char *field,
				 struct atbi_scalar *sc)
{
	if (fy_node_get_type(n) != FYNT_SCALAR)
		return atbi_ew_bad(w, n, field, "expected a scalar, not a %s",
				   fy_node_get_type(n) == FYNT_MAPPING ? "mapping" : "sequence");
	return atbi_yaml_scalar(w->y, n, field, sc, w->err);
}

/* The scalar at map.key into *sc and its node into *n (NULL when absent and optional). */
static enum atb_status scalar_at(struct atbi_ew *w, struct fy_node *map, const char *parent,
				 const char *key, int required, struct fy_node **n,
				 struct atbi_scalar *sc, char path[300])
{
	enum atb_status st;

	join(path, 300, parent, key);
	if ((st = need(w, map, parent, key, required, n)) || !*n)
		return st;
	return scalar_of(w, *n, path, sc);
}

enum atb_status atbi_ew_str(struct atbi_ew *w, struct fy_node *map, const char *parent,
			    const char *key, int required, char **out)
{
	struct atbi_scalar sc;
	struct fy_node *n;
	char path[300];
	enum atb_status st;

	*out = NULL;
	if ((st = scalar_at(w, map, parent, key, required, &n, &sc, path)) || !n)
		return st;
	if (sc.type == ATBI_SCALAR_NULL) {
		if (required)
			return atbi_ew_bad(w, n, path, "must not be null");
		return ATB_OK;
	}
	if (required && sc.len == 0)
		return atbi_ew_bad(w, n, path, "must not be empty");
	*out = atb_strndup(sc.text, sc.len);
	return *out ? ATB_OK : atb_error_set(w->err, ATB_ERR_NOMEM, "out of memory");
}

enum atb_status atbi_ew_num(struct atbi_ew *w, struct fy_node *map, const char *parent,
			    const char *key, int required, double *out)
{
	struct atbi_scalar sc;
	struct fy_node *n;
	char path[300];
	enum atb_status st;

	if ((st = scalar_at(w, map, parent, key, required, &n, &sc, path)) || !n)
		return st;
	if (sc.type != ATBI_SCALAR_INT && sc.type != ATBI_SCALAR_REAL)
		return atbi_ew_bad(w, n, path, "expected a number, not '%.*s'",
				   (int)(sc.len > 80 ? 80 : sc.len), sc.text);
	*out = sc.d;
	return ATB_OK;
}

enum atb_status atbi_ew_bool(struct atbi_ew *w, struct fy_node *map, const char *parent,
			     const char *key, int *out)
{
	struct atbi_scalar sc;
	struct fy_node *n;
	char path[300];
	enum atb_status st;

	if ((st = scalar_at(w, map, parent, key, 0, &n, &sc, path)) || !n)
		return st;
	if (sc.type != ATBI_SCALAR_BOOL)
		return atbi_ew_bad(w, n, path, "expected true or false, not '%.*s'",
				   (int)(sc.len > 80 ? 80 : sc.len), sc.text);
	*out = sc.b;
	return ATB_OK;
}

void atbi_strv_free(char **v, size_t n)
{
	size_t i;

	if (!v)
		return;
	for (i = 0; i < n; i++)
		atb_free(v[i]);
	atb_free(v);
}

enum atb_status atbi_ew_strlist(struct atbi_ew *w, struct fy_node *map, const char *parent,
				const char *key, int required, char ***out, size_t *nout)
{
	struct fy_node *n, *e;
	char path[300], ipath[320];
	void *it = NULL;
	size_t i = 0, cap;
	enum atb_status st;

	*out = NULL;
	*nout = 0;
	join(path, sizeof(path), parent, key);
	if ((st = need(w, map, parent, key, required, &n)) || !n)
		return st;
	if (fy_node_get_type(n) != FYNT_SEQUENCE)
		return atbi_ew_bad(w, n, path, "expected a sequence");
	cap = (size_t)fy_node_sequence_item_count(n);
	if (required && cap == 0)
		return atbi_ew_bad(w, n, path, "must not be empty");
	*out = atb_calloc(cap + 1, sizeof(char *));
	if (!*out)
		return atb_error_set(w->err, ATB_ERR_NOMEM, "out of memory");
	while ((e = fy_node_sequence_iterate(n, &it))) {
		struct atbi_scalar sc;

		atbi_path_index(ipath, sizeof(ipath), path, i);
		if ((st = scalar_of(w, e, ipath, &sc)))
			goto fail;
		if (sc.type == ATBI_SCALAR_NULL) {
			st = atbi_ew_bad(w, e, ipath, "must not be null");
			goto fail;
		}
		(*out)[i] = atb_strndup(sc.text, sc.len);
		if (!(*out)[i]) {
			st = atb_error_set(w->err, ATB_ERR_NOMEM, "out of memory");
			goto fail;
		}
		*nout = ++i;
	}
	return ATB_OK;
fail:
	atbi_strv_free(*out, *nout);
	*out = NULL;
	*nout = 0;
	return st;
}

enum atb_status atbi_ew_json(struct atbi_ew *w, struct fy_node *n, const char *field,
			     json_t **out)
{
	struct fy_node_pair *p;
	struct fy_node *e;
	void *it = NULL;
	char path[320];
	json_t *v, *c;
	enum atb_status st;
	size_t i = 0;

	*out = NULL;
	atb_alloc_install_json();
	switch (fy_node_get_type(n)) {
	case FYNT_SCALAR: {
		struct atbi_scalar sc;

		if ((st = atbi_yaml_scalar(w->y, n, field, &sc, w->err)))
			return st;
		switch (sc.type) {
		case ATBI_SCALAR_INT: v = json_integer(sc.i); break;
		case ATBI_SCALAR_REAL: v = json_real(sc.d); break;
		case ATBI_SCALAR_BOOL: v = json_boolean(sc.b); break;
		case ATBI_SCALAR_NULL: v = json_null(); break;
		default: v = json_stringn(sc.text, sc.len); break;
		}
		break;
	}
	case FYNT_SEQUENCE:
		v = json_array();
		while (v && (e = fy_node_sequence_iterate(n, &it))) {
			atbi_path_index(path, sizeof(path), field, i++);
			if ((st = atbi_ew_json(w, e, path, &c))) {
				json_decref(v);
				return st;
			}
			if (json_array_append_new(v, c)) {
				json_decref(v);
				v = NULL;
			}
		}
		break;
	default:
		v = json_object();
		while (v && (p = fy_node_mapping_iterate(n, &it))) {
			const char *ks;
			size_t klen = 0;
			char *key;

			ks = fy_node_get_type(fy_node_pair_key(p)) == FYNT_SCALAR
				     ? fy_node_get_scalar(fy_node_pair_key(p), &klen) : NULL;
			if (!ks) {
				json_decref(v);
				return atbi_ew_bad(w, fy_node_pair_key(p), field,
						   "a key must be a plain string");
			}
			atbi_path_key(path, sizeof(path), field, ks, klen);
			if ((st = atbi_ew_json(w, fy_node_pair_value(p), path, &c))) {
				json_decref(v);
				return st;
			}
			key = atb_strndup(ks, klen);
			if (!key)
				json_decref(c);
			if (!key || json_object_set_new(v, key, c)) {
				json_decref(v);
				v = NULL;
			}
			atb_free(key);
		}
		break;
	}
	if (!v)
		return atb_error_set(w->err, ATB_ERR_NOMEM, "out of memory");
	*out = v;
	return ATB_OK;
}

/* The placeholder starting at s[0] == '{': its length (to '}') or 0 when bad. */
static size_t placeholder(const char *s, char *name, size_t size)
{
	const char *e = strchr(s, '}');
	size_t n;

	if (!e)
		return 0;
	n = (size_t)(e - s - 1);
	snprintf(name, size, "%.*s", (int)n, s + 1);
	return n + 2;
}

static int known_placeholder(const char *name)
{
	static const char *const known[] = {"model", "host", "port", "run_dir", NULL};
	const char *const *k;
	size_t i;

	for (k = known; *k; k++)
		if (!strcmp(name, *k))
			return 1;
	if (strncmp(name, "env:", 4) || !name[4])
		return 0;
	for (i = 4; name[i]; i++)
		if (!(name[i] == '_' || (name[i] >= 'A' && name[i] <= 'Z') ||
		      (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9')))
			return 0;
	return 1;
}

enum atb_status atbi_ew_template(struct atbi_ew *w, struct fy_node *n, const char *field,
				 const char *s)
{
	char name[128];
	size_t len;

	for (; *s; s++) {
		if ((s[0] == '{' && s[1] == '{') || (s[0] == '}' && s[1] == '}')) {
			s++;
			continue;
		}
		if (*s == '}')
			return atbi_ew_bad(w, n, field, "unmatched '}' in '%s'", s);
		if (*s != '{')
			continue;
		len = placeholder(s, name, sizeof(name));
		if (!len || !known_placeholder(name))
			return atbi_ew_bad(w, n, field,
					   "unknown placeholder '%.*s'; the placeholders are "
					   "{model} {host} {port} {run_dir} {env:NAME}",
					   len ? (int)len : 40, s);
		s += len - 1;
	}
	return ATB_OK;
}

enum atb_status atbi_engine_expand(const char *s, const struct atbi_subst *sub, char **out,
				   struct atb_error *err)
{
	size_t cap = strlen(s) + 64, n = 0;
	char *buf = atb_malloc(cap), name[128], num[16];
	const char *val;

	*out = NULL;
	if (!buf)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	for (; *s; s++) {
		size_t len = 1, vlen;

		val = NULL;
		if ((s[0] == '{' && s[1] == '{') || (s[0] == '}' && s[1] == '}')) {
			val = s[0] == '{' ? "{" : "}";
			len = 2;
		} else if (*s == '{' && (len = placeholder(s, name, sizeof(name)))) {
			if (!strcmp(name, "model"))
				val = sub->model ? sub->model : "";
			else if (!strcmp(name, "host"))
				val = sub->host ? sub->host : "127.0.0.1";
			else if (!strcmp(name, "port")) {
				snprintf(num, sizeof(num), "%d", sub->port);
				val = num;
			} else if (!strcmp(name, "run_dir"))
				val = sub->run_dir ? sub->run_dir : ".";
			else if (!strncmp(name, "env:", 4)) {
				val = getenv(name + 4);
				if (!val) {
					atb_free(buf);
					return atb_error_set(err, ATB_ERR_USAGE,
							     "environment variable '%s' is not set "
							     "(placeholder {%s})", name + 4, name);
				}
			}
		} else {
			len = 1;
		}
		if (!val) {
			num[0] = *s;
			num[1] = '\0';
			val = num;
			len = 1;
		}
		vlen = strlen(val);
		if (n + vlen + 1 > cap) {
			char *nb;

			cap = (n + vlen + 1) * 2;
			nb = atb_realloc(buf, cap);
			if (!nb) {
				atb_free(buf);
				return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
			}
			buf = nb;
		}
		memcpy(buf + n, val, vlen);
		n += vlen;
		s += len - 1;
	}
	buf[n] = '\0';
	*out = buf;
	return ATB_OK;
}
