/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Engine configurations: parsing "name=value,..." against a spec, their
 * canonical JSON, checking a proposal against a task's search space (and
 * reading one from JSON), rendering the command line (docs/engine-spec.md, "How a
 * value renders"), and the seeded random proposals of a flag search.
 *
 * Does not: start engines (proc.c) or measure them (ab.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_rng.h>
#include <jansson.h>

#include "atb/alloc.h"
#include "engine_int.h"
#include "banned.h"

static enum atb_status nomem(struct atb_error *err)
{
	return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
}

static int flag_index(const struct atb_engine_spec *spec, const char *name)
{
	size_t i;

	for (i = 0; i < spec->nflags; i++)
		if (!strcmp(spec->flags[i].name, name))
			return (int)i;
	return -1;
}

/* Check value against f's type and domain; normalized copy into norm. */
static enum atb_status check_value(const struct atb_engine_flag *f, const char *value,
				   char norm[ATB_ENGINE_VALUE_MAX], struct atb_error *err)
{
	char *end;
	double d = 0;
	size_t i;

	if (strlen(value) >= ATB_ENGINE_VALUE_MAX)
		return atb_error_set(err, ATB_ERR_USAGE, "value of flag '%s' is too long", f->name);
	snprintf(norm, ATB_ENGINE_VALUE_MAX, "%s", value);
	switch (f->type) {
	case ATB_ENGINE_BOOL:
		if (!strcmp(value, "true") || !strcmp(value, "1") || !strcmp(value, "on"))
			snprintf(norm, ATB_ENGINE_VALUE_MAX, "true");
		else if (!strcmp(value, "false") || !strcmp(value, "0") || !strcmp(value, "off"))
			snprintf(norm, ATB_ENGINE_VALUE_MAX, "false");
		else
			return atb_error_set(err, ATB_ERR_USAGE,
					     "flag '%s' is a bool: '%s' is not true or false",
					     f->name, value);
		return ATB_OK;
	case ATB_ENGINE_INT:
	case ATB_ENGINE_FLOAT:
		d = f->type == ATB_ENGINE_INT ? (double)strtoll(value, &end, 10)
					      : strtod(value, &end);
		if (!*value || *end || !isfinite(d))
			return atb_error_set(err, ATB_ERR_USAGE, "flag '%s' is %s: '%s' is not one",
					     f->name, f->type == ATB_ENGINE_INT ? "an int" : "a float",
					     value);
		if (f->has_range && (d < f->min || d > f->max))
			return atb_error_set(err, ATB_ERR_USAGE,
					     "flag '%s': %s is outside its domain [%g, %g]", f->name,
					     value, f->min, f->max);
		break;
	default:
		break;
	}
	if (f->nvalues) {
		for (i = 0; i < f->nvalues; i++)
			if (!strcmp(f->values[i], value) ||
			    (f->type == ATB_ENGINE_FLOAT && strtod(f->values[i], NULL) == d) ||
			    (f->type == ATB_ENGINE_INT && strtoll(f->values[i], NULL, 10) == (long long)d))
				break;
		if (i == f->nvalues)
			return atb_error_set(err, ATB_ERR_USAGE,
					     "flag '%s': '%s' is not one of its %zu values", f->name,
					     value, f->nvalues);
	}
	return ATB_OK;
}

static int by_spec_order(const void *a, const void *b, void *spec)
{
	return flag_index(spec, ((const struct atb_engine_setting *)a)->name) -
	       flag_index(spec, ((const struct atb_engine_setting *)b)->name);
}

/* Insertion sort (n <= 64): qsort has no context argument in C17. */
static void sort_config(const struct atb_engine_spec *spec, struct atb_engine_config *c)
{
	size_t i, j;

	for (i = 1; i < c->n; i++)
		for (j = i; j > 0 && by_spec_order(&c->set[j - 1], &c->set[j], (void *)spec) > 0;
		     j--) {
			struct atb_engine_setting t = c->set[j];

			c->set[j] = c->set[j - 1];
			c->set[j - 1] = t;
		}
}

enum atb_status atb_engine_config_parse(const struct atb_engine_spec *spec, const char *text,
					struct atb_engine_config *out, struct atb_error *err)
{
	const char *p = text ? text : "";
	size_t i;

	memset(out, 0, sizeof(*out));
	if (!*p || !strcmp(p, "default"))
		return ATB_OK;
	while (*p) {
		const char *comma = strchr(p, ','), *eq;
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char pair[ATB_ENGINE_NAME_MAX + ATB_ENGINE_VALUE_MAX + 2];
		const struct atb_engine_flag *f;
		struct atb_engine_setting *s;
		enum atb_status st;

		if (len >= sizeof(pair))
			return atb_error_set(err, ATB_ERR_USAGE, "setting '%.*s' is too long",
					     (int)(len > 80 ? 80 : len), p);
		snprintf(pair, sizeof(pair), "%.*s", (int)len, p);
		eq = strchr(pair, '=');
		if (!eq || eq == pair)
			return atb_error_set(err, ATB_ERR_USAGE,
					     "setting '%s' is not name=value", pair);
		pair[eq - pair] = '\0';
		f = strlen(pair) < ATB_ENGINE_NAME_MAX ? atb_engine_spec_flag(spec, pair) : NULL;
		if (!f)
			return atb_error_set(err, ATB_ERR_USAGE, "engine '%s' has no flag '%s'",
					     spec->name, pair);
		for (i = 0; i < out->n; i++)
			if (!strcmp(out->set[i].name, pair))
				return atb_error_set(err, ATB_ERR_USAGE, "flag '%s' given twice",
						     pair);
		if (out->n >= ATB_ENGINE_MAX_FLAGS)
			return atb_error_set(err, ATB_ERR_USAGE, "too many settings");
		s = &out->set[out->n];
		memcpy(s->name, pair, strlen(pair) + 1);   /* < NAME_MAX: f matched */
		if ((st = check_value(f, eq + 1, s->value, err)))
			return st;
		out->n++;
		p += len;
		if (*p == ',')
			p++;
	}
	sort_config(spec, out);
	return ATB_OK;
}

enum atb_status atb_engine_config_json(const struct atb_engine_config *c, char **out,
				       struct atb_error *err)
{
	json_t *o;
	enum atb_status st;
	size_t i;

	*out = NULL;
	atb_alloc_install_json();
	o = json_object();
	for (i = 0; o && i < c->n; i++)
		if (json_object_set_new(o, c->set[i].name, json_string(c->set[i].value))) {
			json_decref(o);
			o = NULL;
		}
	if (!o)
		return nomem(err);
	st = atbi_json_canonical(o, out, err);
	json_decref(o);
	return st;
}

/* ---- checking a proposal ---- */

static int searched(const struct atb_engine_task *t, const char *name)
{
	size_t i;

	for (i = 0; i < t->nsearch; i++)
		if (!strcmp(t->search[i], name))
			return 1;
	return 0;
}

enum atb_status atb_engine_config_check(const struct atb_engine_task *t,
					struct atb_engine_config *c, struct atb_error *err)
{
	size_t i, j;

	if (c->n > ATB_ENGINE_MAX_FLAGS)
		return atb_error_set(err, ATB_ERR_USAGE, "too many settings");
	for (i = 0; i < c->n; i++) {
		struct atb_engine_setting *s = &c->set[i];
		const struct atb_engine_flag *f = atb_engine_spec_flag(t->spec, s->name);
		char norm[ATB_ENGINE_VALUE_MAX];
		enum atb_status st;

		if (!f)
			return atb_error_set(err, ATB_ERR_USAGE, "engine '%s' has no flag '%s'",
					     t->spec->name, s->name);
		/* the harness runs only the search the task declares (docs/engine-spec.md) */
		if (!searched(t, s->name))
			return atb_error_set(err, ATB_ERR_USAGE,
					     "flag '%s' is not among the search flags of task '%s'",
					     s->name, t->name);
		for (j = 0; j < i; j++)
			if (!strcmp(c->set[j].name, s->name))
				return atb_error_set(err, ATB_ERR_USAGE, "flag '%s' given twice",
						     s->name);
		if ((st = check_value(f, s->value, norm, err)))
			return st;
		/* a listed number in its listed spelling: 2 and 2.0 are one configuration */
		for (j = 0; f->type != ATB_ENGINE_BOOL && j < f->nvalues; j++)
			if (!strcmp(f->values[j], norm) ||
			    (f->type == ATB_ENGINE_FLOAT && strtod(f->values[j], NULL) == strtod(norm, NULL)) ||
			    (f->type == ATB_ENGINE_INT &&
			     strtoll(f->values[j], NULL, 10) == strtoll(norm, NULL, 10))) {
				snprintf(norm, sizeof(norm), "%s", f->values[j]);
				break;
			}
		snprintf(s->value, sizeof(s->value), "%s", norm);
	}
	sort_config(t->spec, c);
	return ATB_OK;
}

/* The shortest decimal text that reads back as d. */
static void real_text(double d, char *out, size_t size)
{
	int prec;

	for (prec = 1; prec < 17; prec++) {
		snprintf(out, size, "%.*g", prec, d);
		if (strtod(out, NULL) == d)
			return;
	}
	snprintf(out, size, "%.17g", d);
}

enum atb_status atb_engine_config_from_json(const struct atb_engine_task *t,
					    const struct json_t *obj,
					    struct atb_engine_config *out, struct atb_error *err)
{
	const char *name;
	json_t *v;

	memset(out, 0, sizeof(*out));
	if (!json_is_object(obj))
		return atb_error_set(err, ATB_ERR_USAGE, "a configuration is a JSON object");
	json_object_foreach((json_t *)obj, name, v) {
		struct atb_engine_setting *s;

		if (json_is_null(v))
			continue;   /* left at the engine's default, as an absent flag */
		if (strlen(name) >= ATB_ENGINE_NAME_MAX || !atb_engine_spec_flag(t->spec, name))
			return atb_error_set(err, ATB_ERR_USAGE, "engine '%s' has no flag '%.64s'",
					     t->spec->name, name);
		if (out->n >= ATB_ENGINE_MAX_FLAGS)
			return atb_error_set(err, ATB_ERR_USAGE, "too many settings");
		s = &out->set[out->n];
		snprintf(s->name, sizeof(s->name), "%s", name);
		if (json_is_string(v)) {
			if (strlen(json_string_value(v)) >= ATB_ENGINE_VALUE_MAX)
				return atb_error_set(err, ATB_ERR_USAGE,
						     "value of flag '%s' is too long", name);
			snprintf(s->value, sizeof(s->value), "%s", json_string_value(v));
		} else if (json_is_integer(v)) {
			snprintf(s->value, sizeof(s->value), "%" JSON_INTEGER_FORMAT,
				 json_integer_value(v));
		} else if (json_is_real(v)) {
			real_text(json_real_value(v), s->value, sizeof(s->value));
		} else if (json_is_boolean(v)) {
			snprintf(s->value, sizeof(s->value), "%s", json_is_true(v) ? "true" : "false");
		} else {
			return atb_error_set(err, ATB_ERR_USAGE,
					     "flag '%s': a value is a string, a number or a boolean,"
					     " not an %s", name, json_is_array(v) ? "array" : "object");
		}
		out->n++;
	}
	return atb_engine_config_check(t, out, err);
}

/* ---- rendering ---- */

struct argv_buf {
	char **v;
	size_t n, cap;
};

static enum atb_status push(struct argv_buf *a, const char *s, const struct atbi_subst *sub,
			    struct atb_error *err)
{
	char *x = NULL;
	enum atb_status st;

	if (a->n + 1 >= a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 32;
		char **nv = atb_realloc(a->v, cap * sizeof(char *));

		if (!nv)
			return nomem(err);
		a->v = nv;
		a->cap = cap;
	}
	if (sub) {
		if ((st = atbi_engine_expand(s, sub, &x, err)))
			return st;
	} else if (!(x = atb_strdup(s))) {
		return nomem(err);
	}
	a->v[a->n++] = x;
	a->v[a->n] = NULL;
	return ATB_OK;
}

void atb_engine_argv_free(char **argv, size_t argc)
{
	atbi_strv_free(argv, argc);
}

/* The JSON value of a member setting. */
static json_t *member_value(const struct atb_engine_flag *f, const char *v)
{
	json_t *a;
	char *end;

	switch (f->type) {
	case ATB_ENGINE_BOOL:
		return json_boolean(!strcmp(v, "true"));
	case ATB_ENGINE_INT:
		return json_integer(strtoll(v, NULL, 10));
	case ATB_ENGINE_FLOAT:
		return json_real(strtod(v, NULL));
	default:
		if (!f->as_int_list)
			return json_string(v);
		a = json_array();
		while (a && *v) {
			long long x = strtoll(v, &end, 10);

			if (end == v)
				break;
			if (json_array_append_new(a, json_integer(x))) {
				json_decref(a);
				return NULL;
			}
			v = end;
		}
		return a;
	}
}

static enum atb_status render_json_flags(const struct atb_engine_spec *spec,
					 const struct atb_engine_config *c, struct argv_buf *a,
					 struct atb_error *err)
{
	enum atb_status st = ATB_OK;
	size_t j, i;

	for (j = 0; j < spec->njson_flags && !st; j++) {
		json_t *o = NULL;
		char *text = NULL;
		int any = 0;

		atb_alloc_install_json();
		o = json_loads(spec->json_flags[j].fixed_json, 0, NULL);
		for (i = 0; o && i < c->n; i++) {
			const struct atb_engine_flag *f = atb_engine_spec_flag(spec, c->set[i].name);

			if (f->render != ATB_RENDER_JSON || strcmp(f->json_cli, spec->json_flags[j].cli))
				continue;
			any = 1;
			if (json_object_set_new(o, f->json_key, member_value(f, c->set[i].value))) {
				json_decref(o);
				o = NULL;
			}
		}
		if (!o)
			return nomem(err);
		if (any) {
			st = atbi_json_canonical(o, &text, err);
			if (!st)
				st = push(a, spec->json_flags[j].cli, NULL, err);
			if (!st)
				st = push(a, text, NULL, err);
		}
		atb_free(text);
		json_decref(o);
	}
	return st;
}

static enum atb_status render_flag(const struct atb_engine_flag *f, const char *v,
				   const struct atbi_subst *sub, struct argv_buf *a,
				   struct atb_error *err)
{
	enum atb_status st = ATB_OK;
	char joined[ATB_ENGINE_NAME_MAX + ATB_ENGINE_VALUE_MAX + 2];
	char word[ATB_ENGINE_VALUE_MAX];
	const char *p;
	int on = !strcmp(v, "true");

	switch (f->render) {
	case ATB_RENDER_VALUE:
		if (!(st = push(a, f->cli, NULL, err)))
			st = push(a, v, sub, err);
		return st;
	case ATB_RENDER_EQUALS:
		snprintf(joined, sizeof(joined), "%s=%s", f->cli, v);
		return push(a, joined, sub, err);
	case ATB_RENDER_SWITCH:
		return on ? push(a, f->cli, NULL, err) : ATB_OK;
	case ATB_RENDER_BOOL_PAIR:
		return push(a, on ? f->cli : f->negative, NULL, err);
	case ATB_RENDER_LIST:
		st = push(a, f->cli, NULL, err);
		for (p = v; !st && *p;) {
			size_t n = strcspn(p, " ");

			if (n) {
				snprintf(word, sizeof(word), "%.*s", (int)n, p);
				st = push(a, word, sub, err);
			}
			p += n;
			p += strspn(p, " ");
		}
		return st;
	case ATB_RENDER_JSON:
		return ATB_OK;   /* rendered with its JSON flag */
	}
	return ATB_OK;
}

enum atb_status atb_engine_render(const struct atb_engine_task *t,
				  const struct atb_engine_config *config, int port,
				  const char *run_dir, char ***argv, size_t *argc,
				  struct atb_error *err)
{
	const struct atb_engine_spec *spec = t->spec;
	struct atbi_subst sub = {NULL, "127.0.0.1", port, run_dir};
	struct argv_buf a = {NULL, 0, 0};
	char *model = NULL;
	enum atb_status st;
	size_t i;

	*argv = NULL;
	*argc = 0;
	if ((st = atbi_engine_expand(t->model, &sub, &model, err)))
		return st;
	sub.model = model;
	for (i = 0; !st && i < spec->argc; i++)
		st = push(&a, spec->argv[i], &sub, err);
	for (i = 0; !st && i < t->nextra_args; i++)
		st = push(&a, t->extra_args[i], &sub, err);
	for (i = 0; !st && config && i < config->n; i++) {
		const struct atb_engine_flag *f = atb_engine_spec_flag(spec, config->set[i].name);

		if (!f)
			st = atb_error_set(err, ATB_ERR_USAGE, "engine '%s' has no flag '%s'",
					   spec->name, config->set[i].name);
		else
			st = render_flag(f, config->set[i].value, &sub, &a, err);
	}
	if (!st && config)
		st = render_json_flags(spec, config, &a, err);
	atb_free(model);
	if (st) {
		atbi_strv_free(a.v, a.n);
		return st;
	}
	*argv = a.v;
	*argc = a.n;
	return ATB_OK;
}

/* ---- proposals ---- */

static void draw(const struct atb_engine_flag *f, gsl_rng *rng, char *out, size_t size)
{
	double u = gsl_rng_uniform(rng), x;

	if (f->type == ATB_ENGINE_BOOL) {
		snprintf(out, size, "%s", u < 0.5 ? "false" : "true");
	} else if (f->nvalues) {
		snprintf(out, size, "%s", f->values[(size_t)(u * (double)f->nvalues) % f->nvalues]);
	} else if (f->has_range) {
		x = f->log ? exp(log(f->min) + u * (log(f->max) - log(f->min)))
			   : f->min + u * (f->max - f->min);
		if (f->type == ATB_ENGINE_INT)
			snprintf(out, size, "%lld", (long long)llround(x));
		else
			snprintf(out, size, "%.4g", x);
	} else {
		out[0] = '\0';   /* a free string: not searchable */
	}
}

enum atb_status atb_engine_proposals(const struct atb_engine_task *t, int64_t seed, size_t n,
				     struct atb_engine_config *out, struct atb_error *err)
{
	gsl_rng *rng;
	size_t k, i;

	if (!n)
		return ATB_OK;
	rng = gsl_rng_alloc(gsl_rng_mt19937);
	if (!rng)
		return nomem(err);
	gsl_rng_set(rng, (unsigned long)seed);
	memset(&out[0], 0, sizeof(out[0]));
	for (k = 1; k < n; k++) {
		struct atb_engine_config *c = &out[k];

		memset(c, 0, sizeof(*c));
		/* Redraw an empty draw a few times: k >= 1 should change something. */
		for (int tries = 0; c->n == 0 && tries < 8; tries++)
			for (i = 0; i < t->nsearch; i++) {
				const struct atb_engine_flag *f = atb_engine_spec_flag(t->spec,
										      t->search[i]);
				struct atb_engine_setting *s = &c->set[c->n];

				if (gsl_rng_uniform(rng) < 0.5)
					continue;
				draw(f, rng, s->value, sizeof(s->value));
				if (!s->value[0] && f->type == ATB_ENGINE_STRING)
					continue;
				snprintf(s->name, sizeof(s->name), "%s", f->name);
				c->n++;
			}
		sort_config(t->spec, c);
	}
	gsl_rng_free(rng);
	return ATB_OK;
}
