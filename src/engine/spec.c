/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Engine specs and engine tasks from YAML (docs/engine-spec.md): every key
 * checked, unknown keys refused, errors at file:line:column with the field
 * path and the value.
 *
 * Does not: render command lines or draw configurations (config.c), start
 * engines (proc.c).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atb/alloc.h"
#include "atb/atb.h"
#include "engine_int.h"
#include "banned.h"

static enum atb_status nomem(struct atb_error *err)
{
	return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
}

static int is_ident(const char *s, int dash)
{
	if (!s || !*s)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' ||
		      (dash && *s == '-')))
			return 0;
	return 1;
}

static void flag_release(struct atb_engine_flag *f)
{
	atb_free(f->name);
	atb_free(f->cli);
	atb_free(f->negative);
	atb_free(f->json_cli);
	atb_free(f->json_key);
	atbi_strv_free(f->values, f->nvalues);
	atb_free(f->default_text);
}

void atb_engine_spec_free(struct atb_engine_spec *s)
{
	size_t i;

	if (!s)
		return;
	atb_free(s->path);
	atb_free(s->name);
	atbi_strv_free(s->argv, s->argc);
	atbi_strv_free(s->env, s->nenv);
	atb_free(s->ready_path);
	atb_free(s->completions_path);
	atb_free(s->chat_path);
	atb_free(s->metrics_path);
	atbi_strv_free(s->counters, s->ncounters);
	for (i = 0; i < s->njson_flags; i++) {
		atb_free(s->json_flags[i].cli);
		atb_free(s->json_flags[i].fixed_json);
	}
	atb_free(s->json_flags);
	for (i = 0; i < s->nflags; i++)
		flag_release(&s->flags[i]);
	atb_free(s->flags);
	atb_free(s);
}

const struct atb_engine_flag *atb_engine_spec_flag(const struct atb_engine_spec *spec,
						   const char *name)
{
	size_t i;

	for (i = 0; spec && i < spec->nflags; i++)
		if (!strcmp(spec->flags[i].name, name))
			return &spec->flags[i];
	return NULL;
}

/* A value's text fits the flag's type ("" ok); why in msg otherwise. */
static int value_typed(const struct atb_engine_flag *f, const char *v)
{
	char *end;

	switch (f->type) {
	case ATB_ENGINE_BOOL:
		return !strcmp(v, "true") || !strcmp(v, "false");
	case ATB_ENGINE_INT:
		if (!*v)
			return 0;
		(void)strtoll(v, &end, 10);
		return !*end;
	case ATB_ENGINE_FLOAT:
		if (!*v)
			return 0;
		return isfinite(strtod(v, &end)) && !*end;
	default:
		return 1;
	}
}

static const char *const type_names[] = {"bool", "int", "float", "enum", "string", NULL};
static const char *const render_names[] = {"value", "equals", "switch", "bool_pair", "list", NULL};

static int lookup(const char *const *names, const char *s)
{
	int i;

	for (i = 0; names[i]; i++)
		if (!strcmp(names[i], s))
			return i;
	return -1;
}

static enum atb_status load_render(struct atbi_ew *w, struct fy_node *fn, const char *fp,
				   struct atb_engine_flag *f)
{
	static const char *const rkeys[] = {"json", "key", "as", NULL};
	struct fy_node *rn = atbi_ew_get(fn, "render");
	char path[300], *s = NULL, *as = NULL;
	enum atb_status st;
	int r;

	snprintf(path, sizeof(path), "%s.render", fp);
	if (!rn)
		return atbi_ew_bad(w, fn, path, "missing required key 'render'");
	if (fy_node_get_type(rn) == FYNT_MAPPING) {
		if ((st = atbi_ew_keys(w, rn, path, rkeys)) ||
		    (st = atbi_ew_str(w, rn, path, "json", 1, &f->json_cli)) ||
		    (st = atbi_ew_str(w, rn, path, "key", 1, &f->json_key)) ||
		    (st = atbi_ew_str(w, rn, path, "as", 0, &as)))
			return st;
		f->render = ATB_RENDER_JSON;
		if (as && strcmp(as, "int_list")) {
			st = atbi_ew_bad(w, atbi_ew_get(rn, "as"), path,
					 "unknown 'as' value '%s'; the only one is int_list", as);
			atb_free(as);
			return st;
		}
		f->as_int_list = as != NULL;
		atb_free(as);
		return ATB_OK;
	}
	if ((st = atbi_ew_str(w, fn, fp, "render", 1, &s)))
		return st;
	r = lookup(render_names, s);
	if (r < 0) {
		st = atbi_ew_bad(w, rn, path,
				 "unknown render '%s'; the renders are value, equals, switch, "
				 "bool_pair, list, {json: CLI, key: K}", s);
		atb_free(s);
		return st;
	}
	atb_free(s);
	f->render = (enum atb_engine_render)r;
	return ATB_OK;
}

static enum atb_status load_domain(struct atbi_ew *w, struct fy_node *fn, const char *fp,
				   struct atb_engine_flag *f)
{
	static const char *const dkeys[] = {"min", "max", "log", "values", NULL};
	struct fy_node *dn = atbi_ew_get(fn, "domain");
	char path[300], ipath[320];
	enum atb_status st;
	size_t i;

	snprintf(path, sizeof(path), "%s.domain", fp);
	if (f->type == ATB_ENGINE_BOOL) {
		if (dn)
			return atbi_ew_bad(w, dn, path, "a bool flag has no domain");
		return ATB_OK;
	}
	if (!dn) {
		if (f->type == ATB_ENGINE_STRING)
			return ATB_OK;
		return atbi_ew_bad(w, fn, path, "missing required key 'domain'");
	}
	if ((st = atbi_ew_keys(w, dn, path, dkeys)) ||
	    (st = atbi_ew_strlist(w, dn, path, "values", 0, &f->values, &f->nvalues)))
		return st;
	if (f->nvalues > ATB_ENGINE_MAX_VALUES)
		return atbi_ew_bad(w, atbi_ew_get(dn, "values"), path,
				   "%zu values; at most %d", f->nvalues, ATB_ENGINE_MAX_VALUES);
	for (i = 0; i < f->nvalues; i++) {
		atbi_path_index(ipath, sizeof(ipath), path, i);
		if (!value_typed(f, f->values[i]) || strlen(f->values[i]) >= ATB_ENGINE_VALUE_MAX)
			return atbi_ew_bad(w, atbi_ew_get(dn, "values"), ipath,
					   "value '%s' is not a %s", f->values[i],
					   type_names[f->type]);
	}
	if (atbi_ew_get(dn, "min") || atbi_ew_get(dn, "max")) {
		if (f->type != ATB_ENGINE_INT && f->type != ATB_ENGINE_FLOAT)
			return atbi_ew_bad(w, dn, path, "only int and float flags have min and max");
		if ((st = atbi_ew_num(w, dn, path, "min", 1, &f->min)) ||
		    (st = atbi_ew_num(w, dn, path, "max", 1, &f->max)) ||
		    (st = atbi_ew_bool(w, dn, path, "log", &f->log)))
			return st;
		if (!(f->min <= f->max))
			return atbi_ew_bad(w, dn, path, "min %g is above max %g", f->min, f->max);
		if (f->log && f->min <= 0)
			return atbi_ew_bad(w, dn, path, "log needs min > 0, not %g", f->min);
		f->has_range = 1;
	}
	if (f->has_range && f->nvalues)
		return atbi_ew_bad(w, dn, path, "give either min and max or values, not both");
	if (!f->has_range && !f->nvalues)
		return atbi_ew_bad(w, dn, path, "needs min and max, or values");
	if (f->type == ATB_ENGINE_ENUM && !f->nvalues)
		return atbi_ew_bad(w, dn, path, "an enum flag needs values");
	return ATB_OK;
}

static enum atb_status load_flag(struct atbi_ew *w, struct fy_node *fn, const char *fp,
				 struct atb_engine_flag *f)
{
	static const char *const fkeys[] = {"name", "cli", "negative", "type", "domain",
					    "default", "render", "description", NULL};
	char path[300], *type = NULL, *desc = NULL;
	enum atb_status st;
	int t;

	if ((st = atbi_ew_keys(w, fn, fp, fkeys)) ||
	    (st = atbi_ew_str(w, fn, fp, "name", 1, &f->name)) ||
	    (st = atbi_ew_str(w, fn, fp, "cli", 0, &f->cli)) ||
	    (st = atbi_ew_str(w, fn, fp, "negative", 0, &f->negative)) ||
	    (st = atbi_ew_str(w, fn, fp, "description", 0, &desc)) ||
	    (st = atbi_ew_str(w, fn, fp, "type", 1, &type)))
		goto out;
	snprintf(path, sizeof(path), "%s.name", fp);
	if (!is_ident(f->name, 0) || strlen(f->name) >= ATB_ENGINE_NAME_MAX) {
		st = atbi_ew_bad(w, atbi_ew_get(fn, "name"), path,
				 "flag name '%s' is not [a-z0-9_]+ (at most %d characters)", f->name,
				 ATB_ENGINE_NAME_MAX - 1);
		goto out;
	}
	snprintf(path, sizeof(path), "%s.type", fp);
	t = lookup(type_names, type);
	if (t < 0) {
		st = atbi_ew_bad(w, atbi_ew_get(fn, "type"), path,
				 "unknown type '%s'; the types are bool, int, float, enum, string",
				 type);
		goto out;
	}
	f->type = (enum atb_engine_type)t;
	if ((st = load_render(w, fn, fp, f)) || (st = load_domain(w, fn, fp, f)) ||
	    (st = atbi_ew_str(w, fn, fp, "default", 0, &f->default_text)))
		goto out;
	snprintf(path, sizeof(path), "%s.default", fp);
	if (f->default_text && f->type == ATB_ENGINE_ENUM) {
		size_t i;

		for (i = 0; i < f->nvalues && strcmp(f->values[i], f->default_text); i++)
			;
		if (i == f->nvalues) {
			st = atbi_ew_bad(w, atbi_ew_get(fn, "default"), path,
					 "default '%s' is not one of the values", f->default_text);
			goto out;
		}
	}
	if (f->default_text && !value_typed(f, f->default_text)) {
		st = atbi_ew_bad(w, atbi_ew_get(fn, "default"), path, "default '%s' is not a %s",
				 f->default_text, type_names[f->type]);
		goto out;
	}
	snprintf(path, sizeof(path), "%s.render", fp);
	if (f->render != ATB_RENDER_JSON && !f->cli)
		st = atbi_ew_bad(w, fn, path, "render '%s' needs 'cli'", render_names[f->render]);
	else if (f->render == ATB_RENDER_JSON && f->cli)
		st = atbi_ew_bad(w, fn, path, "a json member has no 'cli' of its own");
	else if ((f->render == ATB_RENDER_SWITCH || f->render == ATB_RENDER_BOOL_PAIR) &&
		 f->type != ATB_ENGINE_BOOL)
		st = atbi_ew_bad(w, fn, path, "render '%s' is for bool flags, not %s",
				 render_names[f->render], type_names[f->type]);
	else if ((f->render == ATB_RENDER_BOOL_PAIR) != (f->negative != NULL))
		st = atbi_ew_bad(w, fn, path, "'negative' goes with render bool_pair and only there");
	else if (f->render == ATB_RENDER_LIST && f->type != ATB_ENGINE_ENUM &&
		 f->type != ATB_ENGINE_STRING)
		st = atbi_ew_bad(w, fn, path, "render 'list' is for enum and string flags");
	else if (f->as_int_list && f->type != ATB_ENGINE_ENUM && f->type != ATB_ENGINE_STRING)
		st = atbi_ew_bad(w, fn, path, "'as: int_list' is for enum and string flags");
out:
	atb_free(type);
	atb_free(desc);
	return st;
}

static enum atb_status load_flags(struct atbi_ew *w, struct fy_node *root,
				  struct atb_engine_spec *s)
{
	struct fy_node *seq = atbi_ew_get(root, "flags"), *fn;
	void *it = NULL;
	char fp[64];
	enum atb_status st;
	size_t i, j, cap;

	if (!seq)
		return ATB_OK;
	if (fy_node_get_type(seq) != FYNT_SEQUENCE)
		return atbi_ew_bad(w, seq, "flags", "expected a sequence");
	cap = (size_t)fy_node_sequence_item_count(seq);
	if (cap > ATB_ENGINE_MAX_FLAGS)
		return atbi_ew_bad(w, seq, "flags", "%zu flags; at most %d", cap,
				   ATB_ENGINE_MAX_FLAGS);
	s->flags = atb_calloc(cap + 1, sizeof(*s->flags));
	if (!s->flags)
		return nomem(w->err);
	while ((fn = fy_node_sequence_iterate(seq, &it))) {
		struct atb_engine_flag *f = &s->flags[s->nflags++];

		snprintf(fp, sizeof(fp), "flags[%zu]", s->nflags - 1);
		if ((st = load_flag(w, fn, fp, f)))
			return st;
		for (j = 0; j + 1 < s->nflags; j++)
			if (!strcmp(s->flags[j].name, f->name))
				return atbi_ew_bad(w, fn, fp, "flag name '%s' given twice", f->name);
		if (f->render == ATB_RENDER_JSON) {
			for (i = 0; i < s->njson_flags; i++)
				if (!strcmp(s->json_flags[i].cli, f->json_cli))
					break;
			if (i == s->njson_flags)
				return atbi_ew_bad(w, fn, fp,
						   "json flag '%s' is not listed in json_flags",
						   f->json_cli);
		}
	}
	return ATB_OK;
}

static enum atb_status load_json_flags(struct atbi_ew *w, struct fy_node *root,
				       struct atb_engine_spec *s)
{
	static const char *const jkeys[] = {"cli", "fixed", NULL};
	struct fy_node *seq = atbi_ew_get(root, "json_flags"), *jn, *fx;
	void *it = NULL;
	char fp[64];
	enum atb_status st;
	json_t *j;

	if (!seq)
		return ATB_OK;
	if (fy_node_get_type(seq) != FYNT_SEQUENCE)
		return atbi_ew_bad(w, seq, "json_flags", "expected a sequence");
	s->json_flags = atb_calloc((size_t)fy_node_sequence_item_count(seq) + 1,
				   sizeof(*s->json_flags));
	if (!s->json_flags)
		return nomem(w->err);
	while ((jn = fy_node_sequence_iterate(seq, &it))) {
		struct atb_engine_json_flag *jf = &s->json_flags[s->njson_flags++];

		snprintf(fp, sizeof(fp), "json_flags[%zu]", s->njson_flags - 1);
		if ((st = atbi_ew_keys(w, jn, fp, jkeys)) ||
		    (st = atbi_ew_str(w, jn, fp, "cli", 1, &jf->cli)))
			return st;
		fx = atbi_ew_get(jn, "fixed");
		if (fx && fy_node_get_type(fx) != FYNT_MAPPING)
			return atbi_ew_bad(w, fx, fp, "'fixed' must be a mapping");
		if (fx) {
			st = atbi_ew_json(w, fx, fp, &j);
		} else {
			atb_alloc_install_json();
			j = json_object();
			st = j ? ATB_OK : nomem(w->err);
		}
		if (st)
			return st;
		st = atbi_json_canonical(j, &jf->fixed_json, w->err);
		json_decref(j);
		if (st)
			return st;
	}
	return ATB_OK;
}

static enum atb_status load_env(struct atbi_ew *w, struct fy_node *launch,
				struct atb_engine_spec *s)
{
	struct fy_node *en = atbi_ew_get(launch, "env");
	struct fy_node_pair *p;
	void *it = NULL;
	enum atb_status st;

	if (!en)
		return ATB_OK;
	if (fy_node_get_type(en) != FYNT_MAPPING)
		return atbi_ew_bad(w, en, "launch.env", "expected a mapping");
	s->env = atb_calloc((size_t)fy_node_mapping_item_count(en) + 1, sizeof(char *));
	if (!s->env)
		return nomem(w->err);
	while ((p = fy_node_mapping_iterate(en, &it))) {
		const char *k;
		size_t klen = 0, vlen = 0;
		const char *v = NULL;
		char path[300];

		k = fy_node_get_type(fy_node_pair_key(p)) == FYNT_SCALAR
			    ? fy_node_get_scalar(fy_node_pair_key(p), &klen) : NULL;
		if (!k)
			return atbi_ew_bad(w, fy_node_pair_key(p), "launch.env", "bad key");
		atbi_path_key(path, sizeof(path), "launch.env", k, klen);
		if (fy_node_pair_value(p) && fy_node_get_type(fy_node_pair_value(p)) == FYNT_SCALAR)
			v = fy_node_get_scalar(fy_node_pair_value(p), &vlen);
		if (!v)
			return atbi_ew_bad(w, fy_node_pair_key(p), path, "expected a string value");
		if (asprintf(&s->env[s->nenv], "%.*s=%.*s", (int)klen, k, (int)vlen, v) < 0)
			return nomem(w->err);
		/* asprintf allocates with malloc: move it into our allocator. */
		{
			char *mine = atb_strdup(s->env[s->nenv]);

			free(s->env[s->nenv]);
			s->env[s->nenv] = mine;
			if (!mine)
				return nomem(w->err);
		}
		s->nenv++;
		if ((st = atbi_ew_template(w, fy_node_pair_value(p), path, s->env[s->nenv - 1])))
			return st;
	}
	return ATB_OK;
}

static enum atb_status load_spec_doc(struct atbi_ew *w, struct fy_node *root,
				     struct atb_engine_spec *s)
{
	static const char *const top[] = {"spec_version", "name", "description", "documented_from",
					  "run_here", "launch", "readiness", "api", "metrics",
					  "stop", "json_flags", "flags", NULL};
	static const char *const lkeys[] = {"argv", "env", NULL};
	static const char *const rkeys[] = {"path", "timeout_s", "interval_ms", NULL};
	static const char *const akeys[] = {"completions", "chat", NULL};
	static const char *const mkeys[] = {"path", "counters", NULL};
	static const char *const skeys[] = {"grace_s", NULL};
	struct fy_node *launch, *ready, *n;
	double version = 0, interval = 500;
	char *scratch = NULL, path[64];
	enum atb_status st;
	size_t i;

	if ((st = atbi_ew_keys(w, root, "", top)) ||
	    (st = atbi_ew_num(w, root, "", "spec_version", 1, &version)))
		return st;
	if (version != 1)
		return atbi_ew_bad(w, atbi_ew_get(root, "spec_version"), "spec_version",
				   "unknown spec_version %g; this atb reads 1", version);
	if ((st = atbi_ew_str(w, root, "", "name", 1, &s->name)))
		return st;
	if (!is_ident(s->name, 1))
		return atbi_ew_bad(w, atbi_ew_get(root, "name"), "name",
				   "engine name '%s' is not [a-z0-9_-]+", s->name);
	if ((st = atbi_ew_str(w, root, "", "description", 0, &scratch)))
		return st;
	atb_free(scratch);
	if ((st = atbi_ew_str(w, root, "", "documented_from", 0, &scratch)))
		return st;
	atb_free(scratch);
	if ((st = atbi_ew_bool(w, root, "", "run_here", &s->run_here)))
		return st;

	launch = atbi_ew_get(root, "launch");
	if (!launch)
		return atbi_ew_bad(w, root, "launch", "missing required key 'launch'");
	if ((st = atbi_ew_keys(w, launch, "launch", lkeys)) ||
	    (st = atbi_ew_strlist(w, launch, "launch", "argv", 1, &s->argv, &s->argc)) ||
	    (st = load_env(w, launch, s)))
		return st;
	for (i = 0; i < s->argc; i++) {
		snprintf(path, sizeof(path), "launch.argv[%zu]", i);
		if ((st = atbi_ew_template(w, atbi_ew_get(launch, "argv"), path, s->argv[i])))
			return st;
	}

	ready = atbi_ew_get(root, "readiness");
	if (!ready)
		return atbi_ew_bad(w, root, "readiness", "missing required key 'readiness'");
	if ((st = atbi_ew_keys(w, ready, "readiness", rkeys)) ||
	    (st = atbi_ew_str(w, ready, "readiness", "path", 1, &s->ready_path)) ||
	    (st = atbi_ew_num(w, ready, "readiness", "timeout_s", 1, &s->ready_timeout_s)) ||
	    (st = atbi_ew_num(w, ready, "readiness", "interval_ms", 0, &interval)))
		return st;
	if (s->ready_path[0] != '/')
		return atbi_ew_bad(w, atbi_ew_get(ready, "path"), "readiness.path",
				   "path '%s' must start with '/'", s->ready_path);
	if (!(s->ready_timeout_s > 0) || s->ready_timeout_s > 86400)
		return atbi_ew_bad(w, atbi_ew_get(ready, "timeout_s"), "readiness.timeout_s",
				   "timeout %g s is not in (0, 86400]", s->ready_timeout_s);
	if (!(interval >= 1 && interval <= 60000))
		return atbi_ew_bad(w, atbi_ew_get(ready, "interval_ms"), "readiness.interval_ms",
				   "interval %g ms is not in [1, 60000]", interval);
	s->ready_interval_ms = (int)interval;

	if ((n = atbi_ew_get(root, "api"))) {
		if ((st = atbi_ew_keys(w, n, "api", akeys)) ||
		    (st = atbi_ew_str(w, n, "api", "completions", 0, &s->completions_path)) ||
		    (st = atbi_ew_str(w, n, "api", "chat", 0, &s->chat_path)))
			return st;
	}
	if (!s->completions_path && !(s->completions_path = atb_strdup("/v1/completions")))
		return nomem(w->err);
	if (!s->chat_path && !(s->chat_path = atb_strdup("/v1/chat/completions")))
		return nomem(w->err);
	if ((n = atbi_ew_get(root, "metrics"))) {
		if ((st = atbi_ew_keys(w, n, "metrics", mkeys)) ||
		    (st = atbi_ew_str(w, n, "metrics", "path", 1, &s->metrics_path)) ||
		    (st = atbi_ew_strlist(w, n, "metrics", "counters", 0, &s->counters,
					  &s->ncounters)))
			return st;
	}
	s->grace_s = 10;
	if ((n = atbi_ew_get(root, "stop"))) {
		if ((st = atbi_ew_keys(w, n, "stop", skeys)) ||
		    (st = atbi_ew_num(w, n, "stop", "grace_s", 0, &s->grace_s)))
			return st;
		if (!(s->grace_s >= 0 && s->grace_s <= 600))
			return atbi_ew_bad(w, atbi_ew_get(n, "grace_s"), "stop.grace_s",
					   "grace %g s is not in [0, 600]", s->grace_s);
	}
	if ((st = load_json_flags(w, root, s)))
		return st;
	return load_flags(w, root, s);
}

enum atb_status atb_engine_spec_load(const char *path, struct atb_engine_spec **out,
				     struct atb_error *err)
{
	struct atbi_yaml y;
	struct atbi_ew w = {&y, err};
	struct atb_engine_spec *s;
	enum atb_status st;

	*out = NULL;
	s = atb_calloc(1, sizeof(*s));
	if (!s)
		return nomem(err);
	st = atbi_yaml_load(path, &y, err);
	if (!st && !y.root)
		st = atb_error_set_at(err, ATB_ERR_SCHEMA, path, 1, 1, NULL,
				      "empty engine spec");
	if (!st && !(s->path = atb_strdup(path)))
		st = nomem(err);
	if (!st)
		st = load_spec_doc(&w, y.root, s);
	atbi_yaml_release(&y);
	if (st) {
		atb_engine_spec_free(s);
		return st;
	}
	*out = s;
	return ATB_OK;
}

/* ---- tasks ---- */

json_t *atb_engine_task_cpus_json(const struct atb_engine_task *t)
{
	json_t *a;
	size_t i;

	if (!t->ncpus)
		return json_null();
	a = json_array();
	for (i = 0; a && i < t->ncpus; i++)
		if (json_array_append_new(a, json_integer(t->cpus[i]))) {
			json_decref(a);
			return NULL;
		}
	return a;
}

void atb_engine_task_free(struct atb_engine_task *t)
{
	if (!t)
		return;
	atb_free(t->path);
	atb_free(t->dir);
	atb_free(t->name);
	atb_engine_spec_free(t->spec);
	atb_free(t->model);
	atbi_strv_free(t->extra_args, t->nextra_args);
	atb_free(t->workload_json);
	atb_free((char *)t->workload.dataset_path);
	atb_free(t->probe_api);
	atbi_strv_free(t->probes, t->nprobes);
	atbi_strv_free(t->search, t->nsearch);
	atb_free(t->description);
	atb_free(t->cpus);
	atb_free(t);
}

int atb_engine_task_detect(const char *path)
{
	struct atbi_yaml y;
	struct fy_node *k;
	struct atb_error e;
	const char *s;
	size_t len = 0;
	int yes = 0;

	if (!path || strlen(path) < 5 || strcmp(path + strlen(path) - 5, ".yaml"))
		return 0;
	if (!atbi_yaml_load(path, &y, &e) && y.root) {
		k = atbi_ew_get(y.root, "kind");
		s = k && fy_node_get_type(k) == FYNT_SCALAR ? fy_node_get_scalar(k, &len) : NULL;
		yes = s && len == 6 && !memcmp(s, "engine", 6);
	}
	atbi_yaml_release(&y);
	return yes;
}

/* A count: a non-negative integer up to max. */
static enum atb_status get_count(struct atbi_ew *w, struct fy_node *map, const char *key,
				 double max, size_t *out, int *set)
{
	char path[64];
	double d = -1;
	enum atb_status st;

	snprintf(path, sizeof(path), "workload.%s", key);
	if ((st = atbi_ew_num(w, map, "workload", key, 0, &d)) || d == -1)
		return st;
	if (!(d >= 0 && d <= max) || d != floor(d))
		return atbi_ew_bad(w, atbi_ew_get(map, key), path,
				   "%g is not an integer in [0, %g]", d, max);
	*out = (size_t)d;
	if (set)
		*set = 1;
	return ATB_OK;
}

static enum atb_status get_real(struct atbi_ew *w, struct fy_node *map, const char *key,
				double *out)
{
	char path[64];
	enum atb_status st;
	double d = *out;

	snprintf(path, sizeof(path), "workload.%s", key);
	if ((st = atbi_ew_num(w, map, "workload", key, 0, &d)))
		return st;
	if (!(d >= 0 && isfinite(d)))
		return atbi_ew_bad(w, atbi_ew_get(map, key), path, "%g is not a finite number >= 0",
				   d);
	*out = d;
	return ATB_OK;
}

/* A loadgen name or distribution at key, parsed by loadgen's own parser. */
static enum atb_status get_parsed(struct atbi_ew *w, struct fy_node *map, const char *key,
				  int which, struct atb_loadgen_config *c)
{
	char *text = NULL, path[64];
	struct atb_error e;
	enum atb_status st;

	snprintf(path, sizeof(path), "workload.%s", key);
	if ((st = atbi_ew_str(w, map, "workload", key, 0, &text)) || !text)
		return st;
	atb_error_clear(&e);
	switch (which) {
	case 0: st = atb_loadgen_endpoint_parse(text, &c->endpoint, &e); break;
	case 1: st = atb_loadgen_arrival_parse(text, &c->arrival, &e); break;
	case 2:
		if (!strcmp(text, "dataset")) {
			c->prompts = ATB_LOADGEN_PROMPTS_DATASET;
			st = ATB_OK;
		} else {
			st = atb_loadgen_prompts_parse(text, &c->prompts, &e);
		}
		break;
	case 3: st = atb_loadgen_dist_parse(text, &c->input_len, &e); break;
	default: st = atb_loadgen_dist_parse(text, &c->output_len, &e); break;
	}
	if (st)
		st = atbi_ew_bad(w, atbi_ew_get(map, key), path, "%s", e.msg);
	atb_free(text);
	return st;
}

static enum atb_status load_workload(struct atbi_ew *w, struct fy_node *n,
				     struct atb_engine_task *t)
{
	static const char *const wkeys[] = {"api", "stream", "requests", "warmup", "prompts",
					    "dataset", "input_len", "output_len", "ignore_eos",
					    "temperature", "arrival", "rate_per_s", "burstiness",
					    "concurrency", "max_concurrency", "timeout_s",
					    "slo_ttft_ms", "slo_tpot_ms", "slo_e2e_ms", "keepalive",
					    NULL};
	struct atb_loadgen_config *c = &t->workload;
	char *ds = NULL, path[PATH_MAX];
	enum atb_status st;

	atb_loadgen_config_init(c);
	/* Engines get a fresh connection per request unless the task says
	   otherwise: llama-server dropped reused ones (loadgen.h). */
	c->reuse_connections = 0;
	if ((st = atbi_ew_keys(w, n, "workload", wkeys)) ||
	    (st = atbi_ew_bool(w, n, "workload", "keepalive", &c->reuse_connections)) ||
	    (st = get_parsed(w, n, "api", 0, c)) || (st = get_parsed(w, n, "arrival", 1, c)) ||
	    (st = get_parsed(w, n, "prompts", 2, c)) ||
	    (st = get_parsed(w, n, "input_len", 3, c)) ||
	    (st = get_parsed(w, n, "output_len", 4, c)) ||
	    (st = atbi_ew_bool(w, n, "workload", "stream", &c->stream)) ||
	    (st = atbi_ew_bool(w, n, "workload", "ignore_eos", &c->ignore_eos)) ||
	    (st = get_count(w, n, "requests", 1e7, &c->requests, NULL)) ||
	    (st = get_count(w, n, "warmup", 1e6, &c->warmup, &t->warmup_set)) ||
	    (st = get_count(w, n, "concurrency", 1e5, &c->concurrency, NULL)) ||
	    (st = get_count(w, n, "max_concurrency", 1e5, &c->max_concurrency, NULL)) ||
	    (st = get_real(w, n, "temperature", &c->temperature)) ||
	    (st = get_real(w, n, "rate_per_s", &c->rate_per_s)) ||
	    (st = get_real(w, n, "burstiness", &c->burstiness)) ||
	    (st = get_real(w, n, "timeout_s", &c->timeout_s)) ||
	    (st = get_real(w, n, "slo_ttft_ms", &c->slo_ttft_ms)) ||
	    (st = get_real(w, n, "slo_tpot_ms", &c->slo_tpot_ms)) ||
	    (st = get_real(w, n, "slo_e2e_ms", &c->slo_e2e_ms)) ||
	    (st = atbi_ew_str(w, n, "workload", "dataset", 0, &ds)))
		return st;
	if (c->requests < 2)
		return atbi_ew_bad(w, atbi_ew_get(n, "requests") ? atbi_ew_get(n, "requests") : n,
				   "workload.requests", "%zu requests; a rate needs at least 2",
				   c->requests);
	if ((c->prompts == ATB_LOADGEN_PROMPTS_DATASET) != (ds != NULL)) {
		atb_free(ds);
		return atbi_ew_bad(w, n, "workload.dataset",
				   "a dataset file goes with prompts: dataset, and only there");
	}
	if (ds) {
		snprintf(path, sizeof(path), "%s%s%s", ds[0] == '/' ? "" : t->dir,
			 ds[0] == '/' ? "" : "/", ds);
		atb_free(ds);
		if (!(c->dataset_path = atb_strdup(path)))
			return nomem(w->err);
	}
	if (c->arrival != ATB_LOADGEN_ARRIVAL_CLOSED && !(c->rate_per_s > 0))
		return atbi_ew_bad(w, n, "workload.rate_per_s", "an open-loop arrival needs "
				   "rate_per_s > 0");
	if (c->arrival == ATB_LOADGEN_ARRIVAL_CLOSED && c->concurrency < 1)
		return atbi_ew_bad(w, n, "workload.concurrency", "a closed loop needs "
				   "concurrency >= 1");
	return ATB_OK;
}

int atb_engine_task_find(const char *home, const char *name, char *path, size_t size)
{
	static const char *const files[] = {"engine.yaml", "task.yaml"};
	size_t i;

	if (!name || !size)
		return 0;
	if (atb_engine_task_detect(name))
		return snprintf(path, size, "%s", name) < (int)size;
	if (!is_ident(name, 1))
		return 0;
	for (i = 0; i < 2; i++)
		if (snprintf(path, size, "%s/tasks/%s/%s", home ? home : atb_home(), name,
			     files[i]) < (int)size && atb_engine_task_detect(path))
			return 1;
	return 0;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void atb_engine_task_list_free(char **names, size_t n)
{
	atbi_strv_free(names, n);
}

enum atb_status atb_engine_task_list(const char *home, char ***names, size_t *n,
				     struct atb_error *err)
{
	char dir[PATH_MAX], path[PATH_MAX], **v = NULL, **nv;
	size_t cap = 0;
	struct dirent *de;
	DIR *d;

	*names = NULL;
	*n = 0;
	home = home ? home : atb_home();
	if (snprintf(dir, sizeof(dir), "%s/tasks", home) >= (int)sizeof(dir))
		return atb_error_set(err, ATB_ERR_USAGE, "home '%s' is too long", home);
	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? ATB_OK :
		       atb_error_set(err, ATB_ERR_IO, "cannot read folder '%s': %s", dir,
				     strerror(errno));
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || !atb_engine_task_find(home, de->d_name, path,
								   sizeof(path)))
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 8;
			nv = atb_realloc(v, cap * sizeof(*v));
			if (!nv)
				goto nomem;
			v = nv;
		}
		if (!(v[*n] = atb_strdup(de->d_name)))
			goto nomem;
		(*n)++;
	}
	closedir(d);
	if (*n)
		qsort(v, *n, sizeof(*v), cmp_name);
	*names = v;
	return ATB_OK;
nomem:
	closedir(d);
	atbi_strv_free(v, *n);
	*n = 0;
	return nomem(err);
}

/* Probe prompts from a JSONL file of {"prompt": "..."} lines. */
static enum atb_status load_probe_file(struct atbi_ew *w, struct fy_node *n,
				       struct atb_engine_task *t, const char *file)
{
	char path[PATH_MAX], *text = NULL, *line, *save = NULL;
	size_t lineno = 0;
	enum atb_status st;

	if (snprintf(path, sizeof(path), "%s%s%s", file[0] == '/' ? "" : t->dir,
		     file[0] == '/' ? "" : "/", file) >= (int)sizeof(path))
		return atbi_ew_bad(w, n, "probes.file", "path '%s' is too long", file);
	if ((st = atbi_read_file(path, &text, NULL, w->err)))
		return st;
	t->probes = atb_calloc(strlen(text) / 2 + 2, sizeof(char *));
	if (!t->probes) {
		atb_free(text);
		return nomem(w->err);
	}
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		json_error_t je;
		json_t *j, *p;

		lineno++;
		if (!*line)
			continue;
		atb_alloc_install_json();
		j = json_loads(line, 0, &je);
		p = j ? json_object_get(j, "prompt") : NULL;
		if (!json_is_string(p)) {
			json_decref(j);
			atb_free(text);
			return atb_error_set_at(w->err, ATB_ERR_SCHEMA, path, (unsigned)lineno, 1,
						"prompt", "line is not a JSON object with a string "
						"'prompt'");
		}
		t->probes[t->nprobes] = atb_strdup(json_string_value(p));
		json_decref(j);
		if (!t->probes[t->nprobes++]) {
			atb_free(text);
			return nomem(w->err);
		}
	}
	atb_free(text);
	if (!t->nprobes)
		return atbi_ew_bad(w, n, "probes.file", "'%s' holds no prompt", file);
	return ATB_OK;
}

/*
 * cpus: [N, ...], the CPUs the engine is pinned to (isolation from the
 * load generator, docs/engine-spec.md): non-empty, integers in
 * [0, ATB_ENGINE_MAX_CPU], none twice.  Whether the box has them is known
 * only when the engine starts.
 */
static enum atb_status load_cpus(struct atbi_ew *w, struct fy_node *root,
				 struct atb_engine_task *t)
{
	struct fy_node *n = atbi_ew_get(root, "cpus");
	char **v = NULL, path[32], *end;
	size_t nv = 0, i, j;
	enum atb_status st;
	long c;

	if (!n)
		return ATB_OK;
	/* an empty flow sequence has no position of its own: point at its key */
	if (fy_node_get_type(n) == FYNT_SEQUENCE && fy_node_sequence_item_count(n) == 0)
		return atbi_ew_bad(w, fy_node_mapping_lookup_key_by_string(root, "cpus", FY_NT),
				   "cpus", "must not be empty");
	if ((st = atbi_ew_strlist(w, root, "", "cpus", 1, &v, &nv)))
		return st;
	if (!(t->cpus = atb_calloc(nv, sizeof(int)))) {
		atbi_strv_free(v, nv);
		return nomem(w->err);
	}
	for (i = 0; i < nv; i++) {
		snprintf(path, sizeof(path), "cpus[%zu]", i);
		errno = 0;
		c = strtol(v[i], &end, 10);
		if (!v[i][0] || *end || errno || c < 0 || c > ATB_ENGINE_MAX_CPU) {
			st = atbi_ew_bad(w, fy_node_sequence_get_by_index(n, (int)i), path,
					 "cpu '%s' is not an integer in [0, %d]", v[i],
					 ATB_ENGINE_MAX_CPU);
			break;
		}
		for (j = 0; j < i; j++)
			if (t->cpus[j] == (int)c)
				break;
		if (j < i) {
			st = atbi_ew_bad(w, fy_node_sequence_get_by_index(n, (int)i), path,
					 "cpu '%s' is given twice", v[i]);
			break;
		}
		t->cpus[i] = (int)c;
		t->ncpus = i + 1;
	}
	atbi_strv_free(v, nv);
	return st;
}

static enum atb_status load_task_doc(struct atbi_ew *w, struct fy_node *root, const char *home,
				     struct atb_engine_task *t)
{
	static const char *const top[] = {"kind", "name", "description", "engine", "model",
					  "extra_args", "workload", "probes", "search", "metric",
					  "cpus", NULL};
	static const char *const pkeys[] = {"api", "max_tokens", "prompts", "file", NULL};
	static const char *const skeys[] = {"flags", NULL};
	struct fy_node *n;
	char *kind = NULL, *engine = NULL, *scratch = NULL, *file = NULL, path[PATH_MAX];
	double maxtok = 0;
	json_t *wl = NULL;
	enum atb_status st;
	size_t i;

	if ((st = atbi_ew_keys(w, root, "", top)) ||
	    (st = atbi_ew_str(w, root, "", "kind", 1, &kind)))
		goto out;
	if (strcmp(kind, "engine")) {
		st = atbi_ew_bad(w, atbi_ew_get(root, "kind"), "kind",
				 "kind '%s' is not 'engine'", kind);
		goto out;
	}
	if ((st = atbi_ew_str(w, root, "", "name", 1, &t->name)) ||
	    (st = atbi_ew_str(w, root, "", "description", 0, &t->description)) ||
	    (st = atbi_ew_str(w, root, "", "engine", 1, &engine)) ||
	    (st = atbi_ew_str(w, root, "", "model", 1, &t->model)) ||
	    (st = atbi_ew_template(w, atbi_ew_get(root, "model"), "model", t->model)) ||
	    (st = atbi_ew_strlist(w, root, "", "extra_args", 0, &t->extra_args, &t->nextra_args)))
		goto out;
	for (i = 0; i < t->nextra_args; i++) {
		snprintf(path, sizeof(path), "extra_args[%zu]", i);
		if ((st = atbi_ew_template(w, atbi_ew_get(root, "extra_args"), path,
					   t->extra_args[i])))
			goto out;
	}
	if ((st = load_cpus(w, root, t)))
		goto out;
	atb_free(scratch);
	scratch = NULL;
	if ((st = atbi_ew_str(w, root, "", "metric", 0, &scratch)))
		goto out;
	if (scratch && strcmp(scratch, "requests_per_s")) {
		st = atbi_ew_bad(w, atbi_ew_get(root, "metric"), "metric",
				 "unknown metric '%s'; the only one is requests_per_s", scratch);
		goto out;
	}

	/* The workload is the load generator's to judge; kept as JSON. */
	n = atbi_ew_get(root, "workload");
	if (!n) {
		st = atbi_ew_bad(w, root, "workload", "missing required key 'workload'");
		goto out;
	}
	if (fy_node_get_type(n) != FYNT_MAPPING) {
		st = atbi_ew_bad(w, n, "workload", "expected a mapping");
		goto out;
	}
	if ((st = load_workload(w, n, t)) || (st = atbi_ew_json(w, n, "workload", &wl)) ||
	    (st = atbi_json_canonical(wl, &t->workload_json, w->err)))
		goto out;

	n = atbi_ew_get(root, "probes");
	if (!n) {
		st = atbi_ew_bad(w, root, "probes", "missing required key 'probes'");
		goto out;
	}
	if ((st = atbi_ew_keys(w, n, "probes", pkeys)) ||
	    (st = atbi_ew_str(w, n, "probes", "api", 0, &t->probe_api)) ||
	    (st = atbi_ew_num(w, n, "probes", "max_tokens", 1, &maxtok)) ||
	    (st = atbi_ew_str(w, n, "probes", "file", 0, &file)) ||
	    (st = atbi_ew_strlist(w, n, "probes", "prompts", 0, &t->probes, &t->nprobes)))
		goto out;
	if (!t->probe_api && !(t->probe_api = atb_strdup("completions"))) {
		st = nomem(w->err);
		goto out;
	}
	if (strcmp(t->probe_api, "completions") && strcmp(t->probe_api, "chat")) {
		st = atbi_ew_bad(w, atbi_ew_get(n, "api"), "probes.api",
				 "api '%s' is not completions or chat", t->probe_api);
		goto out;
	}
	if (!(maxtok >= 1 && maxtok <= 65536) || maxtok != floor(maxtok)) {
		st = atbi_ew_bad(w, atbi_ew_get(n, "max_tokens"), "probes.max_tokens",
				 "max_tokens %g is not an integer in [1, 65536]", maxtok);
		goto out;
	}
	t->probe_max_tokens = (int)maxtok;
	if (!!file == !!t->nprobes) {
		st = atbi_ew_bad(w, n, "probes", "give either prompts or file");
		goto out;
	}
	if (file && (st = load_probe_file(w, atbi_ew_get(n, "file"), t, file)))
		goto out;

	/* The spec, then the search subset against it. */
	if (strlen(engine) > 5 && !strcmp(engine + strlen(engine) - 5, ".yaml"))
		snprintf(path, sizeof(path), "%s%s%s", engine[0] == '/' ? "" : t->dir,
			 engine[0] == '/' ? "" : "/", engine);
	else if (is_ident(engine, 1))
		snprintf(path, sizeof(path), "%s/engines/%s.yaml", home, engine);
	else {
		st = atbi_ew_bad(w, atbi_ew_get(root, "engine"), "engine",
				 "engine '%s' is neither a name nor a path ending in .yaml", engine);
		goto out;
	}
	if ((st = atb_engine_spec_load(path, &t->spec, w->err))) {
		/* a spec that is not there is the task's error: name its field */
		if (ATB_PRIMARY(st) == ATB_ERR_NOT_FOUND)
			st = atbi_ew_bad(w, atbi_ew_get(root, "engine"), "engine",
					 "no engine spec '%s' (looked for '%s')", engine, path);
		goto out;
	}
	if ((n = atbi_ew_get(root, "search"))) {
		if ((st = atbi_ew_keys(w, n, "search", skeys)) ||
		    (st = atbi_ew_strlist(w, n, "search", "flags", 1, &t->search, &t->nsearch)))
			goto out;
		for (i = 0; i < t->nsearch; i++)
			if (!atb_engine_spec_flag(t->spec, t->search[i])) {
				snprintf(path, sizeof(path), "search.flags[%zu]", i);
				st = atbi_ew_bad(w, atbi_ew_get(n, "flags"), path,
						 "engine '%s' has no flag '%s'", t->spec->name,
						 t->search[i]);
				goto out;
			}
	} else {
		t->search = atb_calloc(t->spec->nflags + 1, sizeof(char *));
		if (!t->search) {
			st = nomem(w->err);
			goto out;
		}
		for (i = 0; i < t->spec->nflags; i++) {
			if (!(t->search[i] = atb_strdup(t->spec->flags[i].name))) {
				st = nomem(w->err);
				goto out;
			}
			t->nsearch = i + 1;
		}
	}
out:
	json_decref(wl);
	atb_free(kind);
	atb_free(engine);
	atb_free(scratch);
	atb_free(file);
	return st;
}

enum atb_status atb_engine_task_load(const char *home, const char *path,
				     struct atb_engine_task **out, struct atb_error *err)
{
	struct atbi_yaml y;
	struct atbi_ew w = {&y, err};
	struct atb_engine_task *t;
	char *abs, *slash;
	enum atb_status st;

	*out = NULL;
	if (!home)
		home = atb_home();
	t = atb_calloc(1, sizeof(*t));
	if (!t)
		return nomem(err);
	st = atbi_yaml_load(path, &y, err);
	if (!st && !y.root)
		st = atb_error_set_at(err, ATB_ERR_SCHEMA, path, 1, 1, NULL, "empty engine task");
	if (!st) {
		abs = realpath(path, NULL);
		t->path = atb_strdup(abs ? abs : path);
		free(abs);   /* realpath's malloc */
		t->dir = t->path ? atb_strdup(t->path) : NULL;
		if (!t->dir)
			st = nomem(err);
		else if ((slash = strrchr(t->dir, '/')))
			*slash = '\0';
		else
			t->dir[0] = '.', t->dir[1] = '\0';
	}
	if (!st)
		st = load_task_doc(&w, y.root, home, t);
	atbi_yaml_release(&y);
	if (st) {
		atb_engine_task_free(t);
		return st;
	}
	*out = t;
	return ATB_OK;
}
