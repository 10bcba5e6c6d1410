/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * task.yaml: parsing and validation with libfyaml.  Keys are looked up in a
 * fixed order (params before the shapes that use them), every unknown key,
 * wrong type and bad value is refused with ATB_ERR_SCHEMA at the node's
 * 1-based line:column and its field path, and every expression is evaluated
 * for every parameter set so that a loaded task instantiates without error.
 * Also: the list of bundled tasks and instantiation of a parameter set.
 * Does not: build or run anything (task_build.c).
 */
#define _GNU_SOURCE  /* strtok_r */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <libfyaml.h>

#include "atb/alloc.h"
#include "atb/task.h"
#include "task_int.h"
#include "banned.h"

struct loader {
	const char *file;
	struct atb_error *err;
	struct atb_task *t;
};

/* ---- helpers ---------------------------------------------------------- */

/*
 * 1-based position of a node.  libfyaml 0.7 has no node marks, so a
 * collection is placed at its first key or item (an empty one at 0:0).
 */
static void node_pos(struct fy_node *n, unsigned *line, unsigned *col)
{
	const struct fy_mark *m = NULL;
	struct fy_node_pair *pair;
	void *it = NULL;

	*line = *col = 0;
	if (!n)
		return;
	switch (fy_node_get_type(n)) {
	case FYNT_SCALAR:
		m = fy_token_start_mark(fy_node_get_scalar_token(n));
		break;
	case FYNT_MAPPING:
		if ((pair = fy_node_mapping_iterate(n, &it)))
			node_pos(fy_node_pair_key(pair), line, col);
		return;
	case FYNT_SEQUENCE:
		node_pos(fy_node_sequence_iterate(n, &it), line, col);
		return;
	}
	if (m) {
		*line = (unsigned)m->line + 1;
		*col = (unsigned)m->column + 1;
	}
}

__attribute__((format(printf, 4, 5)))
static enum atb_status bad(struct loader *L, struct fy_node *n, const char *field,
			   const char *fmt, ...)
{
	char msg[sizeof(L->err->msg)];
	unsigned line, col;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	node_pos(n, &line, &col);
	return atb_error_set_at(L->err, ATB_ERR_SCHEMA, L->file, line, col, field, "%s", msg);
}

static enum atb_status nomem(struct loader *L)
{
	return atb_error_set_at(L->err, ATB_ERR_NOMEM, L->file, 0, 0, NULL,
				"cannot load task '%s': out of memory", L->file);
}

static const char *type_name(struct fy_node *n)
{
	switch (fy_node_get_type(n)) {
	case FYNT_SCALAR: return "a scalar";
	case FYNT_SEQUENCE: return "a list";
	default: return "a mapping";
	}
}

static enum atb_status expect_type(struct loader *L, struct fy_node *n, const char *field,
				   enum fy_node_type type)
{
	static const char *const names[] = {"a scalar", "a list", "a mapping"};

	if (fy_node_get_type(n) != type)
		return bad(L, n, field, "wrong type: expected %s, found %s", names[type],
			   type_name(n));
	return ATB_OK;
}

/* Refuse keys that are not in allowed (NULL-terminated). */
static enum atb_status check_keys(struct loader *L, struct fy_node *map, const char *field,
				  const char *const *allowed)
{
	struct fy_node_pair *p;
	void *it = NULL;
	char path[256];

	while ((p = fy_node_mapping_iterate(map, &it))) {
		struct fy_node *k = fy_node_pair_key(p);
		const char *ks;
		size_t klen, i;
		int found = 0;

		if (!k || fy_node_get_type(k) != FYNT_SCALAR)
			return bad(L, k ? k : map, field, "keys must be scalars");
		ks = fy_node_get_scalar(k, &klen);
		for (i = 0; allowed[i]; i++)
			if (strlen(allowed[i]) == klen && !memcmp(allowed[i], ks, klen))
				found = 1;
		if (!found) {
			snprintf(path, sizeof(path), "%s%s%.*s", field, *field ? "." : "",
				 (int)klen, ks);
			return bad(L, k, path, "unknown key '%.*s'", (int)klen, ks);
		}
	}
	return ATB_OK;
}

static struct fy_node *get(struct fy_node *map, const char *key)
{
	return fy_node_mapping_lookup_by_string(map, key, FY_NT);
}

static enum atb_status require(struct loader *L, struct fy_node *map, const char *parent,
			       const char *key, struct fy_node **out)
{
	*out = get(map, key);
	if (!*out) {
		char path[256];

		snprintf(path, sizeof(path), "%s%s%s", parent, *parent ? "." : "", key);
		return bad(L, map, path, "missing field '%s'", key);
	}
	return ATB_OK;
}

/* The text of a scalar node into buf (NUL-terminated). */
static enum atb_status scalar_buf(struct loader *L, struct fy_node *n, const char *field,
				  char *buf, size_t size)
{
	const char *s;
	size_t len;
	enum atb_status st = expect_type(L, n, field, FYNT_SCALAR);

	if (st)
		return st;
	s = fy_node_get_scalar(n, &len);
	if (!s)
		s = "", len = 0;
	if (len >= size)
		return bad(L, n, field, "value too long: '%.40s...' (at most %zu characters)",
			   s, size - 1);
	if (memchr(s, '\0', len))
		return bad(L, n, field, "value contains a NUL character");
	memcpy(buf, s, len);
	buf[len] = '\0';
	return ATB_OK;
}

static enum atb_status scalar_dup(struct loader *L, struct fy_node *n, const char *field,
				  char **out)
{
	const char *s;
	size_t len;
	enum atb_status st = expect_type(L, n, field, FYNT_SCALAR);

	if (st)
		return st;
	s = fy_node_get_scalar(n, &len);
	if (!s)
		s = "", len = 0;
	*out = atb_strndup(s, len);
	return *out ? ATB_OK : nomem(L);
}

static int is_plain(struct fy_node *n)
{
	return fy_node_get_style(n) == FYNS_PLAIN;
}

static enum atb_status scalar_int(struct loader *L, struct fy_node *n, const char *field,
				  int64_t *v)
{
	char buf[64], *end;
	long long x;
	enum atb_status st = scalar_buf(L, n, field, buf, sizeof(buf));

	if (st)
		return bad(L, n, field, "wrong type: expected an integer, found %s",
			   type_name(n));
	errno = 0;
	x = strtoll(buf, &end, 10);
	if (!is_plain(n) || !*buf || *end || errno)
		return bad(L, n, field, "wrong type: expected an integer, found '%s'", buf);
	*v = x;
	return ATB_OK;
}

static enum atb_status scalar_real(struct loader *L, struct fy_node *n, const char *field,
				   double *v)
{
	char buf[64], *end;
	double x;
	enum atb_status st = scalar_buf(L, n, field, buf, sizeof(buf));

	if (st)
		return bad(L, n, field, "wrong type: expected a number, found %s", type_name(n));
	errno = 0;
	x = strtod(buf, &end);
	if (!is_plain(n) || !*buf || *end || errno || x != x || x - x != 0)
		return bad(L, n, field, "wrong type: expected a finite number, found '%s'", buf);
	*v = x;
	return ATB_OK;
}

static int is_ident(const char *s, int upper_only)
{
	size_t i;

	if (!(isalpha((unsigned char)s[0]) || s[0] == '_'))
		return 0;
	for (i = 0; s[i]; i++) {
		if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
			return 0;
		if (upper_only && islower((unsigned char)s[i]))
			return 0;
	}
	return 1;
}

/*
 * A file name inside the task folder or a candidate folder: relative, no
 * "..", no hidden files, only [A-Za-z0-9_.-].  The surface gate and the
 * build rely on this: a candidate can never name a file outside its folder.
 */
static enum atb_status check_file_name(struct loader *L, struct fy_node *n, const char *field,
				       const char *s)
{
	size_t i;

	if (!*s)
		return bad(L, n, field, "empty file name");
	if (s[0] == '/')
		return bad(L, n, field, "absolute path '%s': file names are relative to the "
			   "task folder", s);
	if (strstr(s, ".."))
		return bad(L, n, field, "'..' in file name '%s'", s);
	if (strchr(s, '/'))
		return bad(L, n, field, "file name '%s' has a folder: files must be at the "
			   "top of the task folder", s);
	if (s[0] == '.' || s[0] == '-')
		return bad(L, n, field, "file name '%s' may not start with '%c'", s, s[0]);
	for (i = 0; s[i]; i++)
		if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '.' || s[i] == '-'))
			return bad(L, n, field, "bad character in file name '%s'", s);
	return ATB_OK;
}

/* ---- sections --------------------------------------------------------- */

static int param_index(const struct atb_task *t, const char *name)
{
	size_t i;

	for (i = 0; i < t->nparams; i++)
		if (!strcmp(t->params[i].name, name))
			return (int)i;
	return -1;
}

static enum atb_status parse_params(struct loader *L, struct fy_node *seq)
{
	static const char *const keys[] = {"name", "type", "value", NULL};
	struct atb_task *t = L->t;
	struct fy_node *item, *n;
	void *it = NULL;
	enum atb_status st;
	char path[256];

	if ((st = expect_type(L, seq, "params", FYNT_SEQUENCE)))
		return st;
	if (fy_node_sequence_item_count(seq) < 1)
		return bad(L, seq, "params", "a task needs at least one parameter");
	while ((item = fy_node_sequence_iterate(seq, &it))) {
		struct atb_task_param *p;
		char type[16];
		size_t i = t->nparams;

		snprintf(path, sizeof(path), "params[%zu]", i);
		if (i >= ATB_TASK_MAX_PARAMS)
			return bad(L, item, path, "too many parameters (at most %d)",
				   ATB_TASK_MAX_PARAMS);
		if ((st = expect_type(L, item, path, FYNT_MAPPING)) ||
		    (st = check_keys(L, item, path, keys)))
			return st;
		p = &t->params[i];
		snprintf(path, sizeof(path), "params[%zu].name", i);
		if ((st = require(L, item, "", "name", &n)))
			return bad(L, item, path, "missing field 'name'");
		if ((st = scalar_buf(L, n, path, p->name, sizeof(p->name))))
			return st;
		if (!is_ident(p->name, 0))
			return bad(L, n, path, "bad parameter name '%s': must be a C identifier",
				   p->name);
		if (param_index(t, p->name) >= 0)
			return bad(L, n, path, "duplicate parameter '%s'", p->name);
		snprintf(path, sizeof(path), "params[%zu].type", i);
		if (!(n = get(item, "type")))
			return bad(L, item, path, "missing field 'type'");
		if ((st = scalar_buf(L, n, path, type, sizeof(type))))
			return st;
		if (!strcmp(type, "int"))
			p->is_real = 0;
		else if (!strcmp(type, "real"))
			p->is_real = 1;
		else
			return bad(L, n, path, "bad parameter type '%s': expected int or real",
				   type);
		snprintf(path, sizeof(path), "params[%zu].value", i);
		if (!(n = get(item, "value")))
			return bad(L, item, path, "missing field 'value'");
		st = p->is_real ? scalar_real(L, n, path, &t->sets[0].reals[i]) :
				  scalar_int(L, n, path, &t->sets[0].ints[i]);
		if (st)
			return st;
		if (!p->is_real && t->sets[0].ints[i] < 0)
			return bad(L, n, path, "negative value %lld for int parameter '%s'",
				   (long long)t->sets[0].ints[i], p->name);
		t->nparams++;
	}
	t->nsets = 1;
	return ATB_OK;
}

static enum atb_status parse_correctness(struct loader *L, struct fy_node *seq)
{
	struct atb_task *t = L->t;
	struct fy_node *item;
	void *it = NULL;
	enum atb_status st;
	char path[256];

	if ((st = expect_type(L, seq, "correctness_params", FYNT_SEQUENCE)))
		return st;
	while ((item = fy_node_sequence_iterate(seq, &it))) {
		struct atb_task_param_set *set;
		struct fy_node_pair *p;
		void *pit = NULL;
		size_t si = t->nsets;

		snprintf(path, sizeof(path), "correctness_params[%zu]", si - 1);
		if (si >= ATB_TASK_MAX_PARAM_SETS)
			return bad(L, item, path, "too many correctness parameter sets (at most %d)",
				   ATB_TASK_MAX_PARAM_SETS - 1);
		if ((st = expect_type(L, item, path, FYNT_MAPPING)))
			return st;
		set = &t->sets[si];
		*set = t->sets[0];
		while ((p = fy_node_mapping_iterate(item, &pit))) {
			struct fy_node *k = fy_node_pair_key(p), *v = fy_node_pair_value(p);
			char name[ATB_TASK_NAME_MAX], fpath[320];
			int pi;

			if ((st = scalar_buf(L, k, path, name, sizeof(name))))
				return st;
			snprintf(fpath, sizeof(fpath), "%s.%s", path, name);
			pi = param_index(t, name);
			if (pi < 0)
				return bad(L, k, fpath, "unknown key '%s': not a parameter", name);
			if (!v)
				return bad(L, k, fpath, "missing value");
			st = t->params[pi].is_real ? scalar_real(L, v, fpath, &set->reals[pi]) :
						     scalar_int(L, v, fpath, &set->ints[pi]);
			if (st)
				return st;
			if (!t->params[pi].is_real && set->ints[pi] < 0)
				return bad(L, v, fpath, "negative value %lld for int parameter '%s'",
					   (long long)set->ints[pi], name);
		}
		t->nsets++;
	}
	return ATB_OK;
}

/* Evaluate expr for every set; errors point at node. */
static enum atb_status check_expr(struct loader *L, struct fy_node *n, const char *field,
				  const char *expr, int64_t min)
{
	size_t si;

	for (si = 0; si < L->t->nsets; si++) {
		char msg[256], where[64];
		size_t off;
		int64_t v;

		if (si)
			snprintf(where, sizeof(where), " with correctness_params[%zu]", si - 1);
		else
			snprintf(where, sizeof(where), " with the timing params");
		if (atbi_task_eval(L->t, &L->t->sets[si], expr, &v, &off, msg, sizeof(msg)))
			return bad(L, n, field, "bad expression '%s': %s at offset %zu%s", expr,
				   msg, off, where);
		if (v < min)
			return bad(L, n, field, "expression '%s' evaluates to %lld%s: must be at "
				   "least %lld", expr, (long long)v, where, (long long)min);
	}
	return ATB_OK;
}

static const struct {
	const char *name;
	size_t bytes;
	int is_int;
} dtypes[] = {
	{"fp32", 4, 0}, {"fp64", 8, 0}, {"int32", 4, 1}, {"int64", 8, 1},
	{"int8", 1, 1}, {"uint8", 1, 1}, {"fp16", 2, 0}, {"bf16", 2, 0},
};

static enum atb_status parse_generator(struct loader *L, struct fy_node *map, const char *bpath,
				       struct atb_task_buffer *b)
{
	static const char *const keys[] = {"kind", "low", "high", "mean", "stddev", "value", NULL};
	struct atb_distribution *d = &b->generator;
	struct fy_node *n;
	enum atb_status st;
	char path[300], p2[340];

	snprintf(path, sizeof(path), "%s.generator", bpath);
	if ((st = expect_type(L, map, path, FYNT_MAPPING)) ||
	    (st = check_keys(L, map, path, keys)))
		return st;
	snprintf(p2, sizeof(p2), "%s.kind", path);
	if (!(n = get(map, "kind")))
		return bad(L, map, p2, "missing field 'kind'");
	if ((st = scalar_buf(L, n, p2, d->kind, sizeof(d->kind))))
		return st;
	snprintf(d->name, sizeof(d->name), "task:%.40s", b->name);
#define NEED(key, var)                                                              \
	do {                                                                        \
		snprintf(p2, sizeof(p2), "%s.%s", path, key);                       \
		if (!(n = get(map, key)))                                           \
			return bad(L, map, p2, "missing field '%s' for a %s generator", \
				   key, d->kind);                                   \
		if ((st = scalar_real(L, n, p2, &(var))))                           \
			return st;                                                  \
	} while (0)
#define NONE(key)                                                                    \
	do {                                                                         \
		snprintf(p2, sizeof(p2), "%s.%s", path, key);                        \
		if ((n = get(map, key)))                                             \
			return bad(L, n, p2, "key '%s' does not apply to a %s generator", \
				   key, d->kind);                                    \
	} while (0)
	if (!strcmp(d->kind, "uniform")) {
		NEED("low", d->low);
		NEED("high", d->high);
		NONE("mean"); NONE("stddev"); NONE("value");
		if (!(d->low < d->high))
			return bad(L, map, path, "uniform generator needs low < high");
	} else if (!strcmp(d->kind, "normal")) {
		NEED("mean", d->mean);
		NEED("stddev", d->stddev);
		NONE("low"); NONE("high"); NONE("value");
		if (!(d->stddev > 0))
			return bad(L, get(map, "stddev"), p2, "stddev must be positive");
	} else if (!strcmp(d->kind, "constant")) {
		NEED("value", d->low);
		NONE("high"); NONE("mean"); NONE("stddev");
		d->high = d->low;
	} else {
		return bad(L, n, p2, "bad generator kind '%s': expected uniform, normal or constant",
			   d->kind);
	}
#undef NEED
#undef NONE
	b->has_generator = 1;
	return ATB_OK;
}

static int is_real_dtype(const char *d)
{
	return !strcmp(d, "fp32") || !strcmp(d, "fp64") || !strcmp(d, "fp16") ||
	       !strcmp(d, "bf16");
}

/* PROTO: correctness.reduction_tolerance -- a buffer's "reduction" mapping. */
static enum atb_status parse_reduction(struct loader *L, struct fy_node *map, const char *bpath,
				       struct atb_task_buffer *b)
{
	static const char *const keys[] = {"length", "operands", "accumulate", NULL};
	struct atb_task *t = L->t;
	struct fy_node *n, *op;
	void *it = NULL;
	enum atb_status st;
	char path[300], p2[340];
	size_t k;

	snprintf(path, sizeof(path), "%s.reduction", bpath);
	if ((st = expect_type(L, map, path, FYNT_MAPPING)) || (st = check_keys(L, map, path, keys)))
		return st;
	if (b->role == ATB_ROLE_IN || !is_real_dtype(b->dtype))
		return bad(L, map, path, "a reduction is a real out or inout buffer");
	snprintf(p2, sizeof(p2), "%s.length", path);
	if (!(n = get(map, "length")))
		return bad(L, map, p2, "missing field 'length'");
	if ((st = scalar_dup(L, n, p2, &b->reduction.length)) ||
	    (st = check_expr(L, n, p2, b->reduction.length, 1)))
		return st;
	snprintf(p2, sizeof(p2), "%s.operands", path);
	if (!(n = get(map, "operands")))
		return bad(L, map, p2, "missing field 'operands'");
	if ((st = expect_type(L, n, p2, FYNT_SEQUENCE)))
		return st;
	if (fy_node_sequence_item_count(n) < 1 || fy_node_sequence_item_count(n) > 2)
		return bad(L, n, p2, "expected 1 or 2 operands");
	while ((op = fy_node_sequence_iterate(n, &it))) {
		char *name = b->reduction.operands[b->reduction.noperands];

		if ((st = scalar_buf(L, op, p2, name, ATB_TASK_NAME_MAX)))
			return st;
		for (k = 0; k + 1 < t->nbuffers; k++)
			if (!strcmp(t->buffers[k].name, name))
				break;
		if (k + 1 >= t->nbuffers || t->buffers[k].role != ATB_ROLE_IN ||
		    !is_real_dtype(t->buffers[k].dtype))
			return bad(L, op, p2, "bad operand '%s': expected a real in buffer "
				   "declared before '%s'", name, b->name);
		b->reduction.noperands++;
	}
	if ((n = get(map, "accumulate"))) {
		snprintf(p2, sizeof(p2), "%s.accumulate", path);
		if ((st = scalar_buf(L, n, p2, b->reduction.accumulate,
				     sizeof(b->reduction.accumulate))))
			return st;
		if (!is_real_dtype(b->reduction.accumulate))
			return bad(L, n, p2, "bad accumulate dtype '%s': expected fp64, fp32, "
				   "fp16 or bf16", b->reduction.accumulate);
	}
	b->reduction.has = 1;
	return ATB_OK;
}

static enum atb_status parse_buffers(struct loader *L, struct fy_node *seq)
{
	static const char *const keys[] = {"name", "dtype", "role", "shape", "generator",
					   "reduction", NULL};
	struct atb_task *t = L->t;
	struct fy_node *item, *n, *dim;
	void *it = NULL;
	enum atb_status st;
	char path[256], p2[300];
	size_t k, nout;

	if ((st = expect_type(L, seq, "buffers", FYNT_SEQUENCE)))
		return st;
	if (fy_node_sequence_item_count(seq) < 1)
		return bad(L, seq, "buffers", "a task needs at least one buffer");
	while ((item = fy_node_sequence_iterate(seq, &it))) {
		struct atb_task_buffer *b;
		char role[16];
		void *dit = NULL;
		size_t i = t->nbuffers;

		snprintf(path, sizeof(path), "buffers[%zu]", i);
		if (i >= ATB_TASK_MAX_BUFFERS)
			return bad(L, item, path, "too many buffers (at most %d)",
				   ATB_TASK_MAX_BUFFERS);
		if ((st = expect_type(L, item, path, FYNT_MAPPING)) ||
		    (st = check_keys(L, item, path, keys)))
			return st;
		b = &t->buffers[i];
		t->nbuffers++;  /* so atb_task_free sees its shape strings */
		snprintf(p2, sizeof(p2), "%s.name", path);
		if (!(n = get(item, "name")))
			return bad(L, item, p2, "missing field 'name'");
		if ((st = scalar_buf(L, n, p2, b->name, sizeof(b->name))))
			return st;
		if (!is_ident(b->name, 0))
			return bad(L, n, p2, "bad buffer name '%s': must be a C identifier", b->name);
		for (k = 0; k < i; k++)
			if (!strcmp(t->buffers[k].name, b->name))
				return bad(L, n, p2, "duplicate buffer '%s'", b->name);
		snprintf(p2, sizeof(p2), "%s.dtype", path);
		if (!(n = get(item, "dtype")))
			return bad(L, item, p2, "missing field 'dtype'");
		if ((st = scalar_buf(L, n, p2, b->dtype, sizeof(b->dtype))))
			return bad(L, n, p2, "bad dtype: expected fp32, fp64, fp16, bf16, int32, "
				   "int64, int8 or uint8");
		for (k = 0; k < sizeof(dtypes) / sizeof(dtypes[0]); k++)
			if (!strcmp(dtypes[k].name, b->dtype))
				b->elem_bytes = dtypes[k].bytes;
		if (!b->elem_bytes)
			return bad(L, n, p2, "bad dtype '%s': expected fp32, fp64, fp16, bf16, "
				   "int32, int64, int8 or uint8", b->dtype);
		snprintf(p2, sizeof(p2), "%s.role", path);
		if (!(n = get(item, "role")))
			return bad(L, item, p2, "missing field 'role'");
		if ((st = scalar_buf(L, n, p2, role, sizeof(role))))
			return st;
		if (!strcmp(role, "in"))
			b->role = ATB_ROLE_IN;
		else if (!strcmp(role, "out"))
			b->role = ATB_ROLE_OUT;
		else if (!strcmp(role, "inout"))
			b->role = ATB_ROLE_INOUT;
		else
			return bad(L, n, p2, "bad role '%s': expected in, out or inout", role);
		snprintf(p2, sizeof(p2), "%s.shape", path);
		if (!(n = get(item, "shape")))
			return bad(L, item, p2, "missing field 'shape'");
		if ((st = expect_type(L, n, p2, FYNT_SEQUENCE)))
			return st;
		if (fy_node_sequence_item_count(n) < 1)
			return bad(L, n, p2, "a shape needs at least one dimension");
		while ((dim = fy_node_sequence_iterate(n, &dit))) {
			char dpath[320];

			snprintf(dpath, sizeof(dpath), "%s.shape[%zu]", path, b->ndims);
			if (b->ndims >= ATB_TASK_MAX_DIMS)
				return bad(L, dim, dpath, "too many dimensions (at most %d)",
					   ATB_TASK_MAX_DIMS);
			if ((st = scalar_dup(L, dim, dpath, &b->shape[b->ndims])))
				return st;
			b->ndims++;
			if ((st = check_expr(L, dim, dpath, b->shape[b->ndims - 1], 1)))
				return st;
		}
		n = get(item, "generator");
		if (n && (st = parse_generator(L, n, path, b)))
			return st;
		snprintf(p2, sizeof(p2), "%s.generator", path);
		if (!n && b->role != ATB_ROLE_OUT)
			return bad(L, item, p2, "missing field 'generator' for an %s buffer", role);
		if (n && b->role == ATB_ROLE_OUT)
			return bad(L, n, p2, "an out buffer has no generator: its contents are "
				   "poisoned before every call");
		if ((n = get(item, "reduction")) && (st = parse_reduction(L, n, path, b)))
			return st;
	}
	for (k = 0, nout = 0; k < t->nbuffers; k++)
		nout += t->buffers[k].role != ATB_ROLE_IN;
	if (!nout)
		return bad(L, seq, "buffers", "a task needs at least one out or inout buffer");
	return ATB_OK;
}

static enum atb_status parse_source(struct loader *L, struct fy_node *map, const char *field,
				    const char *file_key, int want_label, int want_why,
				    struct atb_task_source *src)
{
	const char *keys[4] = {file_key, NULL, NULL, NULL};
	struct fy_node *n;
	enum atb_status st;
	char path[256];
	struct stat sb;
	size_t k = 1, len;

	if (want_label)
		keys[k++] = "label";
	if (want_why)
		keys[k++] = "why";
	if ((st = expect_type(L, map, field, FYNT_MAPPING)) ||
	    (st = check_keys(L, map, field, keys)))
		return st;
	if ((st = require(L, map, field, file_key, &n)))
		return st;
	snprintf(path, sizeof(path), "%s.%s", field, file_key);
	if ((st = scalar_dup(L, n, path, &src->file)) ||
	    (st = check_file_name(L, n, path, src->file)))
		return st;
	len = strlen(L->t->dir) + strlen(src->file) + 2;
	if (!(src->path = atb_malloc(len)))
		return nomem(L);
	snprintf(src->path, len, "%s/%s", L->t->dir, src->file);
	if (stat(src->path, &sb) || !S_ISREG(sb.st_mode))
		return bad(L, n, path, "source '%s' is not a file in the task folder", src->file);
	if (want_label) {
		if ((st = require(L, map, field, "label", &n)))
			return st;
		snprintf(path, sizeof(path), "%s.label", field);
		if ((st = scalar_dup(L, n, path, &src->label)))
			return st;
		if (!*src->label)
			return bad(L, n, path, "empty label");
	} else if (!(src->label = atb_strdup(""))) {
		return nomem(L);
	}
	if (want_why) {
		if ((st = require(L, map, field, "why", &n)))
			return st;
		snprintf(path, sizeof(path), "%s.why", field);
		if ((st = scalar_dup(L, n, path, &src->why)))
			return st;
		if (strlen(src->why) < 20)
			return bad(L, n, path, "'why' must say why this is the honest baseline "
				   "(at least 20 characters)");
	}
	return ATB_OK;
}

static enum atb_status parse_surface(struct loader *L, struct fy_node *seq)
{
	struct atb_task *t = L->t;
	struct fy_node *item;
	void *it = NULL;
	enum atb_status st;
	char path[64];

	if ((st = expect_type(L, seq, "surface", FYNT_SEQUENCE)))
		return st;
	if (fy_node_sequence_item_count(seq) < 1)
		return bad(L, seq, "surface", "the surface needs at least one file");
	while ((item = fy_node_sequence_iterate(seq, &it))) {
		size_t i = t->nsurface, k;

		snprintf(path, sizeof(path), "surface[%zu]", i);
		if (i >= ATB_TASK_MAX_SURFACE)
			return bad(L, item, path, "too many surface files (at most %d)",
				   ATB_TASK_MAX_SURFACE);
		if ((st = scalar_buf(L, item, path, t->surface[i], sizeof(t->surface[i]))) ||
		    (st = check_file_name(L, item, path, t->surface[i])))
			return st;
		for (k = 0; k < i; k++)
			if (!strcmp(t->surface[k], t->surface[i]))
				return bad(L, item, path, "duplicate surface file '%s'",
					   t->surface[i]);
		t->nsurface++;
	}
	return ATB_OK;
}

/*
 * Extra flags may only add optimisation and code-generation choices: -O2,
 * -O3, -f... and -m....  Nothing that changes what is compiled or linked
 * (-D, -U, -I, -include, -o, -fplugin, @file), nothing that lowers the
 * protocol's optimisation level.
 */
static enum atb_status check_flags(struct loader *L, struct fy_node *n, const char *field,
				   const char *flags)
{
	char buf[ATB_TASK_FLAGS_MAX], *tok, *save = NULL;

	snprintf(buf, sizeof(buf), "%s", flags);
	for (tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
		size_t i;
		int ok = !strcmp(tok, "-O2") || !strcmp(tok, "-O3") ||
			 ((!strncmp(tok, "-f", 2) || !strncmp(tok, "-m", 2)) && tok[2] &&
			  strncmp(tok, "-fplugin", 8) && strncmp(tok, "-fdump", 6) &&
			  strncmp(tok, "-fprofile", 9));

		for (i = 0; ok && tok[i]; i++)
			if (!(isalnum((unsigned char)tok[i]) || strchr("-_=.,+", tok[i])))
				ok = 0;
		if (!ok)
			return bad(L, n, field, "flag '%s' not allowed: a task may only add -O2, "
				   "-O3, -f... or -m... flags to the protocol's", tok);
	}
	if (strchr(flags, '\t') || strchr(flags, '\n'))
		return bad(L, n, field, "flags are separated by single spaces");
	return ATB_OK;
}

static enum atb_status parse_knobs(struct loader *L, struct fy_node *map)
{
	struct atb_task *t = L->t;
	struct fy_node_pair *p;
	void *it = NULL;
	enum atb_status st;

	if ((st = expect_type(L, map, "knobs", FYNT_MAPPING)))
		return st;
	while ((p = fy_node_mapping_iterate(map, &it))) {
		struct fy_node *k = fy_node_pair_key(p), *v = fy_node_pair_value(p), *item;
		char name[ATB_TASK_NAME_MAX], path[128], ipath[192];
		void *vit = NULL;
		int cflags;
		size_t i;

		if ((st = scalar_buf(L, k, "knobs", name, sizeof(name))))
			return st;
		snprintf(path, sizeof(path), "knobs.%s", name);
		cflags = !strcmp(name, "cflags");
		if (!cflags && !is_ident(name, 1))
			return bad(L, k, path, "bad knob name '%s': an upper-case C identifier "
				   "(the macro) or 'cflags'", name);
		if (!cflags && param_index(t, name) >= 0)
			return bad(L, k, path, "knob '%s' has the name of a parameter", name);
		if (!v || (st = expect_type(L, v, path, FYNT_SEQUENCE)))
			return v ? st : bad(L, k, path, "missing list of values");
		if (fy_node_sequence_item_count(v) < 1)
			return bad(L, v, path, "a knob needs at least one value");
		if (cflags) {
			while ((item = fy_node_sequence_iterate(v, &vit))) {
				i = t->nflag_choices;
				snprintf(ipath, sizeof(ipath), "%s[%zu]", path, i);
				if (i >= ATB_TASK_MAX_FLAG_CHOICES)
					return bad(L, item, ipath, "too many flag choices "
						   "(at most %d)", ATB_TASK_MAX_FLAG_CHOICES);
				if ((st = scalar_buf(L, item, ipath, t->flag_choices[i],
						     sizeof(t->flag_choices[i]))) ||
				    (st = check_flags(L, item, ipath, t->flag_choices[i])))
					return st;
				t->nflag_choices++;
			}
			continue;
		}
		i = t->nknobs;
		if (i >= ATB_TASK_MAX_KNOBS)
			return bad(L, k, path, "too many knobs (at most %d)", ATB_TASK_MAX_KNOBS);
		snprintf(t->knobs[i].name, sizeof(t->knobs[i].name), "%s", name);
		while ((item = fy_node_sequence_iterate(v, &vit))) {
			struct atb_task_knob *kb = &t->knobs[i];
			char *val;
			size_t j;

			snprintf(ipath, sizeof(ipath), "%s[%zu]", path, kb->nvalues);
			if (kb->nvalues >= ATB_TASK_MAX_KNOB_VALUES)
				return bad(L, item, ipath, "too many values (at most %d)",
					   ATB_TASK_MAX_KNOB_VALUES);
			val = kb->values[kb->nvalues];
			if ((st = scalar_buf(L, item, ipath, val, ATB_TASK_NAME_MAX)))
				return st;
			if (!*val)
				return bad(L, item, ipath, "empty knob value");
			for (j = 0; val[j]; j++)
				if (!(isalnum((unsigned char)val[j]) || strchr("_.+-", val[j])))
					return bad(L, item, ipath, "bad knob value '%s': letters, "
						   "digits and _ . + - only", val);
			for (j = 0; j < kb->nvalues; j++)
				if (!strcmp(kb->values[j], val))
					return bad(L, item, ipath, "duplicate knob value '%s'", val);
			kb->nvalues++;
		}
		t->nknobs++;
	}
	return ATB_OK;
}

/* ---- the document ----------------------------------------------------- */

/*
 * Every set's shapes must fit each reduction: one operand X with count
 * length x count(out); two, A and B with counts multiples of length and
 * count(A) count(B) = length^2 count(out).
 */
static enum atb_status check_reductions(struct loader *L, struct fy_node *root)
{
	struct atb_task *t = L->t;
	struct atb_task_instance in;
	size_t s, i, k, idx[2];

	for (i = 0; i < t->nbuffers; i++) {
		const struct atb_task_buffer *b = &t->buffers[i];
		char path[128];

		if (!b->reduction.has)
			continue;
		for (k = 0; k < b->reduction.noperands; k++)
			for (idx[k] = 0; strcmp(t->buffers[idx[k]].name, b->reduction.operands[k]);)
				idx[k]++;
		snprintf(path, sizeof(path), "buffers[%zu].reduction.length", i);
		for (s = 0; s < t->nsets; s++) {
			int64_t len, c = 0, a, bb;
			int ok;

			if (atb_task_instantiate(t, s, &in, L->err) ||
			    atb_task_eval(t, &t->sets[s], b->reduction.length, &len, L->err))
				return ATB_ERR_SCHEMA;
			c = in.buffers[i].count;
			a = in.buffers[idx[0]].count;
			if (!c)
				continue;
			if (b->reduction.noperands == 1) {
				ok = len > 0 && a == len * c;
			} else {
				bb = in.buffers[idx[1]].count;
				ok = len > 0 && a % len == 0 && bb % len == 0 &&
				     (a / len) * (bb / len) == c;
			}
			if (!ok)
				return bad(L, root, path, "reduction length '%s' does not fit the "
					   "shapes of buffer '%s' and its operands in parameter set %zu",
					   b->reduction.length, b->name, s);
		}
	}
	return ATB_OK;
}

static enum atb_status parse_root(struct loader *L, struct fy_node *root)
{
	static const char *const keys[] = {
		"name", "kind", "description", "params", "correctness_params", "buffers",
		"baseline", "naive", "surface", "candidate", "knobs", "floor", NULL};
	static const char *const floor_keys[] = {"bytes", "flops", NULL};
	struct atb_task *t = L->t;
	struct fy_node *n, *f;
	enum atb_status st;
	size_t i;

	if (!root)
		return atb_error_set_at(L->err, ATB_ERR_SCHEMA, L->file, 1, 1, "",
					"empty task file");
	if ((st = expect_type(L, root, "", FYNT_MAPPING)) || (st = check_keys(L, root, "", keys)))
		return st;
	if ((st = require(L, root, "", "name", &n)) || (st = scalar_dup(L, n, "name", &t->name)))
		return st;
	for (i = 0; t->name[i]; i++)
		if (!(islower((unsigned char)t->name[i]) || isdigit((unsigned char)t->name[i]) ||
		      t->name[i] == '_' || t->name[i] == '-'))
			return bad(L, n, "name", "bad task name '%s': lower-case letters, digits, "
				   "_ and - only", t->name);
	if (!*t->name || strlen(t->name) >= ATB_TASK_NAME_MAX)
		return bad(L, n, "name", "bad task name '%s'", t->name);
	if ((st = require(L, root, "", "kind", &n)) || (st = scalar_dup(L, n, "kind", &t->kind)))
		return st;
	if (strcmp(t->kind, "cpu") && strcmp(t->kind, "cuda"))
		return bad(L, n, "kind", "bad kind '%s': expected cpu or cuda", t->kind);
	if ((st = require(L, root, "", "description", &n)) ||
	    (st = scalar_dup(L, n, "description", &t->description)))
		return st;
	if ((st = require(L, root, "", "params", &n)) || (st = parse_params(L, n)))
		return st;
	if ((n = get(root, "correctness_params")) && (st = parse_correctness(L, n)))
		return st;
	if ((st = require(L, root, "", "buffers", &n)) || (st = parse_buffers(L, n)))
		return st;
	if ((st = require(L, root, "", "baseline", &n)) ||
	    (st = parse_source(L, n, "baseline", "source", 1, 1, &t->baseline)))
		return st;
	if ((n = get(root, "naive"))) {
		if ((st = parse_source(L, n, "naive", "source", 1, 0, &t->naive)))
			return st;
		t->has_naive = 1;
	}
	if ((st = require(L, root, "", "surface", &n)) || (st = parse_surface(L, n)))
		return st;
	if ((st = require(L, root, "", "candidate", &n)) ||
	    (st = parse_source(L, n, "candidate", "template", 0, 0, &t->candidate)))
		return st;
	if ((n = get(root, "knobs")) && (st = parse_knobs(L, n)))
		return st;
	if ((st = require(L, root, "", "floor", &f)))
		return st;
	if ((st = expect_type(L, f, "floor", FYNT_MAPPING)) ||
	    (st = check_keys(L, f, "floor", floor_keys)))
		return st;
	if ((st = require(L, f, "floor", "bytes", &n)) ||
	    (st = scalar_dup(L, n, "floor.bytes", &t->floor_bytes)) ||
	    (st = check_expr(L, n, "floor.bytes", t->floor_bytes, 0)))
		return st;
	if ((st = require(L, f, "floor", "flops", &n)) ||
	    (st = scalar_dup(L, n, "floor.flops", &t->floor_flops)) ||
	    (st = check_expr(L, n, "floor.flops", t->floor_flops, 0)))
		return st;
	return check_reductions(L, root);
}

static void silent_output(struct fy_diag *diag, void *user, const char *buf, size_t len)
{
	(void)diag; (void)user; (void)buf; (void)len;
}

/*
 * Parse text into a document; a YAML error becomes ATB_ERR_PARSE at its
 * position (libfyaml's collected errors are already 1-based).
 */
static enum atb_status build_doc(struct loader *L, const char *text, size_t len,
				 struct fy_document **out)
{
	struct fy_diag_cfg dcfg;
	struct fy_parse_cfg pcfg;
	struct fy_diag *diag;
	struct fy_document *doc;

	*out = NULL;
	if (atbi_yaml_prescan(L->file, text, len, L->err))
		return ATB_ERR_PARSE;
	fy_diag_cfg_default(&dcfg);
	dcfg.fp = NULL;
	dcfg.output_fn = silent_output;
	dcfg.colorize = false;
	diag = fy_diag_create(&dcfg);
	if (!diag)
		return nomem(L);
	fy_diag_set_collect_errors(diag, true);
	memset(&pcfg, 0, sizeof(pcfg));
	pcfg.flags = FYPCF_QUIET | FYPCF_COLLECT_DIAG;
	pcfg.diag = diag;
	doc = fy_document_build_from_string(&pcfg, text, len);
	if (!doc) {
		void *it = NULL;
		struct fy_diag_error *e = fy_diag_errors_iterate(diag, &it);
		enum atb_status st = atb_error_set_at(
			L->err, ATB_ERR_PARSE, L->file, e && e->line > 0 ? (unsigned)e->line : 0,
			e && e->column > 0 ? (unsigned)e->column : 0, NULL, "malformed yaml: %s",
			e && e->msg ? e->msg : "syntax error");

		fy_diag_destroy(diag);
		return st;
	}
	fy_diag_destroy(diag);
	*out = doc;
	return ATB_OK;
}

void atb_task_free(struct atb_task *t)
{
	size_t i, d;
	struct atb_task_source *srcs[3];

	if (!t)
		return;
	srcs[0] = &t->baseline, srcs[1] = &t->naive, srcs[2] = &t->candidate;
	for (i = 0; i < 3; i++) {
		atb_free(srcs[i]->file);
		atb_free(srcs[i]->path);
		atb_free(srcs[i]->label);
		atb_free(srcs[i]->why);
	}
	for (i = 0; i < t->nbuffers; i++) {
		for (d = 0; d < t->buffers[i].ndims; d++)
			atb_free(t->buffers[i].shape[d]);
		atb_free(t->buffers[i].reduction.length);
	}
	atb_free(t->name);
	atb_free(t->kind);
	atb_free(t->description);
	atb_free(t->dir);
	atb_free(t->yaml_path);
	atb_free(t->floor_bytes);
	atb_free(t->floor_flops);
	atb_free(t->python);
	atb_free(t->python_info);
	atb_free(t);
}

enum atb_status atb_task_load(const char *path, struct atb_task **out, struct atb_error *err)
{
	struct loader L = {path, err, NULL};
	struct fy_document *doc = NULL;
	struct stat sb;
	char *text = NULL, *slash;
	size_t len;
	enum atb_status st;

	*out = NULL;
	if (!path || !*path)
		return atb_error_set(err, ATB_ERR_USAGE, "no task path given");
	if (!(L.t = atb_calloc(1, sizeof(*L.t))))
		return nomem(&L);
	if (!stat(path, &sb) && S_ISDIR(sb.st_mode)) {
		len = strlen(path) + sizeof("/task.yaml");
		if (!(L.t->yaml_path = atb_malloc(len)) || !(L.t->dir = atb_strdup(path))) {
			st = nomem(&L);
			goto fail;
		}
		snprintf(L.t->yaml_path, len, "%s/task.yaml", path);
	} else {
		if (!(L.t->yaml_path = atb_strdup(path))) {
			st = nomem(&L);
			goto fail;
		}
		slash = strrchr(path, '/');
		L.t->dir = slash ? atb_strndup(path, (size_t)(slash - path) + (slash == path))
				 : atb_strdup(".");
		if (!L.t->dir) {
			st = nomem(&L);
			goto fail;
		}
	}
	L.file = L.t->yaml_path;
	if ((st = atbi_read_file(L.file, &text, &len, err)))
		goto fail;
	if ((st = build_doc(&L, text, len, &doc)))
		goto fail;
	st = parse_root(&L, fy_document_root(doc));
	fy_document_destroy(doc);
	if (st)
		goto fail;
	atb_free(text);
	*out = L.t;
	return ATB_OK;
fail:
	if (st == ATB_ERR_NOMEM && err && err->status != ATB_ERR_NOMEM)
		nomem(&L);
	atb_free(text);
	atb_task_free(L.t);
	return st;
}

static int has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);

	return n >= m && !strcmp(s + n - m, suf);
}

enum atb_status atb_task_open(const char *home, const char *name_or_path,
			      struct atb_task **out, struct atb_error *err)
{
	char path[4096];
	struct stat sb;

	*out = NULL;
	if (!name_or_path || !*name_or_path)
		return atb_error_set(err, ATB_ERR_USAGE, "no task name given");
	if (has_suffix(name_or_path, ".py"))
		return atb_task_load_kernelbench(name_or_path, NULL, out, err);
	if (strchr(name_or_path, '/') || has_suffix(name_or_path, ".yaml"))
		return atb_task_load(name_or_path, out, err);
	/* A bare name is a bundled task first, so that 'sgemm' means the same
	   task in every folder; only a name no bundled task has is then tried
	   as a folder in the current one ('./NAME' always means the folder). */
	if (is_ident(name_or_path, 0) || strchr(name_or_path, '-')) {
		snprintf(path, sizeof(path), "%s/tasks/%s", home, name_or_path);
		if (!stat(path, &sb) && S_ISDIR(sb.st_mode))
			return atb_task_load(path, out, err);
	}
	if (!stat(name_or_path, &sb) && S_ISDIR(sb.st_mode))
		return atb_task_load(name_or_path, out, err);
	return atb_error_set(err, ATB_ERR_NOT_FOUND,
			     "no task named '%s' in '%s/tasks' and no task folder '%s' here "
			     "(see 'atb task list')", name_or_path, home, name_or_path);
}

void atb_task_list_free(char **names, size_t n)
{
	size_t i;

	if (!names)
		return;
	for (i = 0; i < n; i++)
		atb_free(names[i]);
	atb_free(names);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

enum atb_status atb_task_list(const char *home, char ***names, size_t *n, struct atb_error *err)
{
	char dir[4096], yaml[4400];
	char **list = NULL, **nl;
	size_t cnt = 0, cap = 0;
	struct dirent *de;
	struct stat sb;
	DIR *d;

	*names = NULL;
	*n = 0;
	snprintf(dir, sizeof(dir), "%s/tasks", home);
	if (!(d = opendir(dir)))
		return atb_error_set_at(err, errno == ENOENT ? ATB_ERR_NOT_FOUND : ATB_ERR_IO, dir,
					0, 0, NULL, "cannot open tasks folder '%s': %s", dir,
					strerror(errno));
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(yaml, sizeof(yaml), "%s/%s/task.yaml", dir, de->d_name);
		if (stat(yaml, &sb) || !S_ISREG(sb.st_mode))
			continue;
		if (cnt == cap) {
			cap = cap ? cap * 2 : 16;
			if (!(nl = atb_realloc(list, cap * sizeof(*list))))
				goto oom;
			list = nl;
		}
		if (!(list[cnt] = atb_strdup(de->d_name)))
			goto oom;
		cnt++;
	}
	closedir(d);
	if (cnt)
		qsort(list, cnt, sizeof(*list), cmp_str);
	*names = list;
	*n = cnt;
	return ATB_OK;
oom:
	closedir(d);
	atb_task_list_free(list, cnt);
	return atb_error_set(err, ATB_ERR_NOMEM, "cannot list tasks: out of memory");
}

size_t atb_task_nsets(const struct atb_task *task)
{
	return task->nsets;
}

const char *atb_task_role_name(enum atb_task_role role)
{
	switch (role) {
	case ATB_ROLE_IN: return "in";
	case ATB_ROLE_OUT: return "out";
	default: return "inout";
	}
}

enum atb_status atb_task_instantiate(const struct atb_task *t, size_t set_index,
				     struct atb_task_instance *out, struct atb_error *err)
{
	const struct atb_task_param_set *set;
	enum atb_status st;
	size_t i, d;

	memset(out, 0, sizeof(*out));
	if (set_index >= t->nsets)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "no parameter set %zu in task '%s' (it has %zu)", set_index,
				     t->name, t->nsets);
	set = &t->sets[set_index];
	out->set_index = set_index;
	for (i = 0; i < t->nparams; i++) {
		if (t->params[i].is_real) {
			out->real_names[out->nreals] = t->params[i].name;
			out->reals[out->nreals++] = set->reals[i];
		} else {
			out->int_names[out->nints] = t->params[i].name;
			out->ints[out->nints++] = set->ints[i];
		}
	}
	for (i = 0; i < t->nbuffers; i++) {
		const struct atb_task_buffer *b = &t->buffers[i];
		struct atb_task_buffer_instance *bi = &out->buffers[i];
		int64_t count = 1;

		bi->name = b->name;
		bi->dtype = b->dtype;
		bi->elem_bytes = b->elem_bytes;
		bi->role = b->role;
		bi->ndims = b->ndims;
		bi->has_generator = b->has_generator;
		bi->generator = b->generator;
		for (d = 0; d < b->ndims; d++) {
			if ((st = atb_task_eval(t, set, b->shape[d], &bi->dims[d], err)))
				return st;
			if (__builtin_mul_overflow(count, bi->dims[d], &count) ||
			    __builtin_mul_overflow(count, (int64_t)b->elem_bytes, &(int64_t){0}))
				return atb_error_set(err, ATB_ERR_SCHEMA,
						     "buffer '%s' of task '%s' is too large", b->name,
						     t->name);
		}
		bi->count = count;
	}
	out->nbuffers = t->nbuffers;
	if ((st = atb_task_eval(t, set, t->floor_bytes, &out->floor_bytes, err)) ||
	    (st = atb_task_eval(t, set, t->floor_flops, &out->floor_flops, err)))
		return st;
	return ATB_OK;
}
