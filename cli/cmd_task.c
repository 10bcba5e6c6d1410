/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb task: list, show and check tasks.  Parsing, evaluation and builds are
 * the library's (atb/task.h); this file parses options and prints, as text
 * or as JSON (jansson, through atb's allocator).
 */
#define _GNU_SOURCE  /* mkdtemp */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "atb/engine.h"
#include "atb/protocol.h"
#include "atb/task.h"
#include "cli.h"
#include "banned.h"

static const char task_help[] =
	"usage: atb task list [--json]\n"
	"       atb task show NAME|PATH [--json]\n"
	"       atb task check NAME|PATH [--json] [--protocol FILE] [--keep]\n"
	"\n"
	"Tasks are what atb tunes: a folder with a task.yaml (see\n"
	"docs/task-format.md) and its kernel sources.  Bundled tasks live under\n"
	"$ATB_HOME/tasks/; NAME is a folder there or, when no bundled task has\n"
	"that name, the folder NAME in the current folder (a bundled name wins:\n"
	"write ./NAME for a local folder of the same name); PATH (anything with a\n"
	"'/' or ending in .yaml) is a task folder or task.yaml anywhere.  Engine tasks\n"
	"(kind engine: a folder with an engine.yaml, or a task.yaml of kind\n"
	"engine; see docs/engine-spec.md) are listed and shown beside kernel\n"
	"tasks; 'atb engine' and 'atb run' measure them, 'check' is for kernel\n"
	"tasks only.\n"
	"\n"
	"  list    the bundled tasks, one a line: name, kind, description\n"
	"          (kernel and engine tasks, sorted by name; an engine task\n"
	"          whose file does not load is listed with its error)\n"
	"  show    everything a task declares: parameters and correctness\n"
	"          parameter sets, buffers with their element counts and input\n"
	"          generators for each set, the honest baseline and why it is the\n"
	"          honest one, the naive starting point, the modification surface,\n"
	"          the candidate template, its knobs and flag choices, and the\n"
	"          physical floor (bytes, flops) of each set; for an engine\n"
	"          task: its description and file, the engine spec (name, file,\n"
	"          whether it runs here), the model, the workload, the probe set\n"
	"          and the search space (each search flag's type, domain, default\n"
	"          and how it renders on the command line)\n"
	"  check   validate task.yaml, then build the honest baseline, the naive\n"
	"          baseline and the candidate template with its default knobs,\n"
	"          each with the protocol's compiler and flags, into a temporary\n"
	"          folder; report each build and print the compiler's output of\n"
	"          any that failed\n"
	"\n"
	"options:\n"
	"  --json           machine-readable output (also `atb --json task ...`);\n"
	"                   show --json gives, per parameter set, the scalar values\n"
	"                   in kernel ABI order and each buffer's dtype, role,\n"
	"                   dims, element count and generator; for an engine\n"
	"                   task the same fields as the text, with the workload as\n"
	"                   an object and the probe prompts in full\n"
	"  --protocol FILE  check: build with this protocol file instead of the\n"
	"                   current frozen protocol of $ATB_HOME/protocol/\n"
	"  --keep           check: keep the build folder and print its path\n"
	"  -h, --help       this text\n"
	"\n"
	"A task file that does not validate is reported as\n"
	"'atb: FILE:LINE:COLUMN: FIELD: MESSAGE'.\n"
	"\n"
	"exit codes: 0 ok, 1 check: a build failed or timed out, 2 bad usage,\n"
	"no such task or a task file that does not validate, 3 runtime failure\n"
	"(the compiler could not be run, i/o)\n";

struct opts {
	int json;
	int keep;
	const char *protocol;
	const char *target;
};

static int parse_opts(const char *sub, int argc, char **argv, struct opts *o, int want_target)
{
	int i;

	for (i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			o->json = 1;
		} else if (!strcmp(argv[i], "--keep")) {
			o->keep = 1;
		} else if (!strcmp(argv[i], "--protocol") && i + 1 < argc) {
			o->protocol = argv[++i];
		} else if (!strncmp(argv[i], "--protocol=", 11)) {
			o->protocol = argv[i] + 11;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			return cli_usage_error("task", "unknown option '%s' for '%s'", argv[i], sub);
		} else if (want_target && !o->target) {
			o->target = argv[i];
		} else {
			return cli_usage_error("task", "unexpected argument '%s'", argv[i]);
		}
	}
	if (want_target && !o->target)
		return cli_usage_error("task", "'%s' needs a task name or path", sub);
	if (!strcmp(sub, "check") ? 0 : (o->keep || o->protocol))
		return cli_usage_error("task", "--keep and --protocol are for 'check' only");
	return CLI_OK;
}

static void json_print(json_t *j)
{
	json_dumpf(j, stdout, JSON_INDENT(2) | JSON_SORT_KEYS);
	putchar('\n');
	json_decref(j);
}

/* One engine task's row of 'list': its description, or why it does not load. */
static json_t *engine_row(const char *name, char *desc, size_t size)
{
	struct atb_engine_task *t = NULL;
	struct atb_error err = {0};
	char path[4096];
	json_t *row;

	if (!atb_engine_task_find(atb_home(), name, path, sizeof(path)))
		return NULL;
	if (atb_engine_task_load(atb_home(), path, &t, &err))
		snprintf(desc, size, "(does not load: %s)", err.msg);
	else
		snprintf(desc, size, "%s", t->description ? t->description : "");
	row = json_pack("{s:s, s:s, s:s, s:s}", "name", name, "kind", "engine", "description",
			desc, "path", path);
	if (row && !t)
		json_object_set_new(row, "error", json_string(err.msg));
	atb_engine_task_free(t);
	return row;
}

static int cmp_row(const void *a, const void *b)
{
	return strcmp(json_string_value(json_object_get(*(json_t *const *)a, "name")),
		      json_string_value(json_object_get(*(json_t *const *)b, "name")));
}

static int task_list(struct opts *o)
{
	struct atb_error err = {0};
	char **names = NULL, **enames = NULL, desc[1200];
	size_t n = 0, en = 0, i, nrows = 0, wname = 4;
	json_t *rows = json_array(), *arr, *row, **sorted;
	int rc = CLI_OK;

	if (atb_task_list(atb_home(), &names, &n, &err) ||
	    atb_engine_task_list(atb_home(), &enames, &en, &err)) {
		atb_task_list_free(names, n);
		json_decref(rows);
		return cli_fail(&err);
	}
	for (i = 0; i < en; i++)
		if ((row = engine_row(enames[i], desc, sizeof(desc))))
			json_array_append_new(rows, row);
	for (i = 0; i < n; i++) {
		struct atb_task *t;

		if (atb_engine_task_find(atb_home(), names[i], desc, sizeof(desc)))
			continue;   /* a task.yaml of kind engine: listed above */
		if (atb_task_open(atb_home(), names[i], &t, &err)) {
			rc = cli_fail(&err);
			goto out;
		}
		json_array_append_new(rows, json_pack("{s:s, s:s, s:s, s:s}", "name", t->name,
						      "kind", t->kind, "description",
						      t->description, "path", t->dir));
		atb_task_free(t);
	}
	nrows = json_array_size(rows);
	sorted = atb_calloc(nrows ? nrows : 1, sizeof(*sorted));
	if (!sorted) {
		fprintf(stderr, "atb: out of memory\n");
		rc = CLI_RUNTIME;
		goto out;
	}
	json_array_foreach(rows, i, row)
		sorted[i] = row;
	qsort(sorted, nrows, sizeof(*sorted), cmp_row);
	arr = json_array();
	for (i = 0; i < nrows; i++) {   /* the columns as wide as their longest entry */
		size_t l = strlen(json_string_value(json_object_get(sorted[i], "name")));

		if (l > wname)
			wname = l;
	}
	for (i = 0; i < nrows; i++) {
		if (o->json)
			json_array_append(arr, sorted[i]);
		else
			printf("%-*s  %-6s  %s\n", (int)wname,
			       json_string_value(json_object_get(sorted[i], "name")),
			       json_string_value(json_object_get(sorted[i], "kind")),
			       json_string_value(json_object_get(sorted[i], "description")));
	}
	atb_free(sorted);
	if (o->json)
		json_print(json_pack("{s:o}", "tasks", arr));
	else
		json_decref(arr);
out:
	atb_task_list_free(names, n);
	atb_engine_task_list_free(enames, en);
	json_decref(rows);
	return rc;
}

static json_t *generator_json(const struct atb_distribution *d)
{
	if (!strcmp(d->kind, "uniform"))
		return json_pack("{s:s, s:f, s:f}", "kind", d->kind, "low", d->low, "high", d->high);
	if (!strcmp(d->kind, "normal"))
		return json_pack("{s:s, s:f, s:f}", "kind", d->kind, "mean", d->mean, "stddev",
				 d->stddev);
	return json_pack("{s:s, s:f}", "kind", d->kind, "value", d->low);
}

static void generator_text(const struct atb_distribution *d, char *buf, size_t size)
{
	if (!strcmp(d->kind, "uniform"))
		snprintf(buf, size, "uniform [%g, %g)", d->low, d->high);
	else if (!strcmp(d->kind, "normal"))
		snprintf(buf, size, "normal (mean %g, stddev %g)", d->mean, d->stddev);
	else
		snprintf(buf, size, "constant %g", d->low);
}

static json_t *instance_json(const struct atb_task_instance *in)
{
	json_t *ints = json_array(), *reals = json_array(), *bufs = json_array();
	size_t i, d;

	for (i = 0; i < in->nints; i++)
		json_array_append_new(ints, json_pack("{s:s, s:I}", "name", in->int_names[i],
						      "value", (json_int_t)in->ints[i]));
	for (i = 0; i < in->nreals; i++)
		json_array_append_new(reals, json_pack("{s:s, s:f}", "name", in->real_names[i],
						       "value", in->reals[i]));
	for (i = 0; i < in->nbuffers; i++) {
		const struct atb_task_buffer_instance *b = &in->buffers[i];
		json_t *dims = json_array(), *jb;

		for (d = 0; d < b->ndims; d++)
			json_array_append_new(dims, json_integer((json_int_t)b->dims[d]));
		jb = json_pack("{s:s, s:s, s:s, s:o, s:I, s:I}", "name", b->name, "dtype", b->dtype,
			       "role", atb_task_role_name(b->role), "dims", dims, "count",
			       (json_int_t)b->count, "elem_bytes", (json_int_t)b->elem_bytes);
		if (b->has_generator)
			json_object_set_new(jb, "generator", generator_json(&b->generator));
		json_array_append_new(bufs, jb);
	}
	return json_pack("{s:I, s:s, s:o, s:o, s:o, s:I, s:I}", "index", (json_int_t)in->set_index,
			 "use", in->set_index ? "correctness" : "timing", "ints", ints, "reals",
			 reals, "buffers", bufs, "floor_bytes", (json_int_t)in->floor_bytes,
			 "floor_flops", (json_int_t)in->floor_flops);
}

static json_t *source_json(const struct atb_task_source *s)
{
	json_t *j = json_pack("{s:s, s:s}", "file", s->file, "path", s->path);

	if (s->label && *s->label)
		json_object_set_new(j, "label", json_string(s->label));
	if (s->why)
		json_object_set_new(j, "why", json_string(s->why));
	return j;
}

static int show_json(const struct atb_task *t)
{
	struct atb_error err = {0};
	json_t *params = json_array(), *sets = json_array(), *surface = json_array();
	json_t *knobs = json_array(), *flags = json_array(), *j, *shapes = json_array();
	size_t i, v;

	for (i = 0; i < t->nparams; i++)
		json_array_append_new(params, json_pack("{s:s, s:s}", "name", t->params[i].name,
							"type", t->params[i].is_real ? "real" : "int"));
	for (i = 0; i < t->nsets; i++) {
		struct atb_task_instance in;

		if (atb_task_instantiate(t, i, &in, &err)) {
			json_decref(params);
			json_decref(sets);
			json_decref(surface);
			json_decref(knobs);
			json_decref(flags);
			json_decref(shapes);
			return cli_fail(&err);
		}
		json_array_append_new(sets, instance_json(&in));
	}
	for (i = 0; i < t->nbuffers; i++) {
		json_t *dims = json_array();

		for (v = 0; v < t->buffers[i].ndims; v++)
			json_array_append_new(dims, json_string(t->buffers[i].shape[v]));
		json_array_append_new(shapes, json_pack("{s:s, s:o}", "name", t->buffers[i].name,
							"shape", dims));
	}
	for (i = 0; i < t->nsurface; i++)
		json_array_append_new(surface, json_string(t->surface[i]));
	for (i = 0; i < t->nknobs; i++) {
		json_t *vals = json_array();

		for (v = 0; v < t->knobs[i].nvalues; v++)
			json_array_append_new(vals, json_string(t->knobs[i].values[v]));
		/* An array: declaration order is the order knobs are sampled in. */
		json_array_append_new(knobs, json_pack("{s:s, s:o}", "name", t->knobs[i].name,
						       "values", vals));
	}
	for (i = 0; i < t->nflag_choices; i++)
		json_array_append_new(flags, json_string(t->flag_choices[i]));
	j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:{s:s, s:s}}",
		      "name", t->name, "kind", t->kind, "description", t->description, "path",
		      t->dir, "yaml", t->yaml_path, "params", params, "param_sets", sets,
		      "shapes", shapes, "baseline", source_json(&t->baseline), "candidate_template",
		      source_json(&t->candidate), "surface", surface, "knobs", knobs, "cflags",
		      flags, "floor", "bytes", t->floor_bytes, "flops", t->floor_flops);
	if (t->has_naive)
		json_object_set_new(j, "naive", source_json(&t->naive));
	json_print(j);
	return CLI_OK;
}

static void print_set(const struct atb_task *t, size_t si)
{
	size_t i;

	for (i = 0; i < t->nparams; i++) {
		if (t->params[i].is_real)
			printf(" %s=%g", t->params[i].name, t->sets[si].reals[i]);
		else
			printf(" %s=%lld", t->params[i].name, (long long)t->sets[si].ints[i]);
	}
}

static int show_text(const struct atb_task *t)
{
	struct atb_task_instance in;
	struct atb_error err = {0};
	size_t i, v;

	if (atb_task_instantiate(t, 0, &in, &err))
		return cli_fail(&err);
	printf("task         %s (%s)\n", t->name, t->kind);
	printf("description  %s\n", t->description);
	printf("file         %s\n", t->yaml_path);
	printf("timing set  ");
	print_set(t, 0);
	printf("\n");
	for (i = 1; i < t->nsets; i++) {
		printf("%s", i == 1 ? "correctness " : "            ");
		print_set(t, i);
		printf("\n");
	}
	printf("buffers      (element counts for the timing set)\n");
	for (i = 0; i < t->nbuffers; i++) {
		const struct atb_task_buffer *b = &t->buffers[i];
		char gen[128] = "poisoned before each call";

		if (b->has_generator)
			generator_text(&b->generator, gen, sizeof(gen));
		printf("  %-8s %-5s %-5s [", b->name, b->dtype, atb_task_role_name(b->role));
		for (v = 0; v < b->ndims; v++)
			printf("%s%s", v ? ", " : "", b->shape[v]);
		printf("] = %lld elements, %s\n", (long long)in.buffers[i].count, gen);
	}
	printf("baseline     %s  \"%s\" (honest)\n", t->baseline.file, t->baseline.label);
	printf("  why        %s\n", t->baseline.why);
	if (t->has_naive)
		printf("naive        %s  \"%s\" (reported beside, never instead)\n", t->naive.file,
		       t->naive.label);
	printf("surface     ");
	for (i = 0; i < t->nsurface; i++)
		printf(" %s", t->surface[i]);
	printf("\ntemplate     %s (written as %s)\n", t->candidate.file, t->surface[0]);
	printf("knobs\n");
	for (i = 0; i < t->nknobs; i++) {
		printf("  %-12s", t->knobs[i].name);
		for (v = 0; v < t->knobs[i].nvalues; v++)
			printf(" %s", t->knobs[i].values[v]);
		printf("\n");
	}
	if (t->nflag_choices) {
		printf("  %-12s", "cflags");
		for (i = 0; i < t->nflag_choices; i++)
			printf(" \"%s\"", t->flag_choices[i]);
		printf("\n");
	}
	printf("floor        bytes %s = %lld, flops %s = %lld\n", t->floor_bytes,
	       (long long)in.floor_bytes, t->floor_flops, (long long)in.floor_flops);
	return CLI_OK;
}

static const char *const flag_types[] = {"bool", "int", "float", "enum", "string"};
static const char *const flag_renders[] = {"value", "equals", "switch", "bool_pair", "list",
					   "json"};

/* A search flag's domain as text: "[1, 64] log", "{a|b|c}", "true|false", "any". */
static void domain_text(const struct atb_engine_flag *f, char *buf, size_t size)
{
	size_t i, k = 0;

	buf[0] = '\0';
	if (f->has_range)
		k += (size_t)snprintf(buf, size, "[%g, %g]%s", f->min, f->max, f->log ? " log" : "");
	for (i = 0; i < f->nvalues && k < size; i++)
		k += (size_t)snprintf(buf + k, size - k, "%s%s", i ? "|" : k ? " {" : "{",
				      f->values[i]);
	if (f->nvalues && k < size)
		snprintf(buf + k, size - k, "}");
	if (!buf[0])
		snprintf(buf, size, "%s", f->type == ATB_ENGINE_BOOL ? "true|false" : "any");
}

static void flag_cli_text(const struct atb_engine_flag *f, char *buf, size_t size)
{
	if (f->render == ATB_RENDER_JSON)
		snprintf(buf, size, "%s {\"%s\": ...}", f->json_cli, f->json_key);
	else if (f->render == ATB_RENDER_BOOL_PAIR)
		snprintf(buf, size, "%s / %s", f->cli, f->negative);
	else
		snprintf(buf, size, "%s", f->cli ? f->cli : "");
}

static int show_engine(const char *path, int json)
{
	struct atb_engine_task *t = NULL;
	struct atb_error err = {0};
	char dom[1024], cli[300];
	size_t i;

	if (atb_engine_task_load(atb_home(), path, &t, &err))
		return cli_fail(&err);
	if (json) {
		json_t *space = json_array(), *probes = json_array();

		for (i = 0; i < t->nsearch; i++) {
			const struct atb_engine_flag *f = atb_engine_spec_flag(t->spec, t->search[i]);

			domain_text(f, dom, sizeof(dom));
			flag_cli_text(f, cli, sizeof(cli));
			json_array_append_new(space, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s?}",
							       "name", f->name, "type",
							       flag_types[f->type], "domain", dom,
							       "render", flag_renders[f->render],
							       "cli", cli, "default",
							       f->default_text));
		}
		for (i = 0; i < t->nprobes; i++)
			json_array_append_new(probes, json_string(t->probes[i]));
		json_print(json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s, s:b}, s:s, s:o, s:{s:s, "
				     "s:i, s:o}, s:o}",
				     "name", t->name, "kind", "engine", "description",
				     t->description ? t->description : "", "yaml", t->path,
				     "engine", "name", t->spec->name, "path", t->spec->path,
				     "run_here", t->spec->run_here, "model", t->model, "workload",
				     json_loads(t->workload_json, 0, NULL), "probes", "api",
				     t->probe_api, "max_tokens", t->probe_max_tokens, "prompts",
				     probes, "search", space));
	} else {
		printf("task         %s (engine)\n", t->name);
		printf("description  %s\n", t->description ? t->description : "");
		printf("file         %s\n", t->path);
		printf("engine       %s (%s)%s\n", t->spec->name, t->spec->path,
		       t->spec->run_here ? "" : ", specified from its documentation, not run here");
		printf("model        %s\n", t->model);
		printf("workload     %s\n", t->workload_json);
		printf("probes       %zu prompts, %s, max_tokens %d, greedy\n", t->nprobes,
		       t->probe_api, t->probe_max_tokens);
		printf("search       %zu flags (the baseline is the engine's default: none passed)\n",
		       t->nsearch);
		for (i = 0; i < t->nsearch; i++) {
			const struct atb_engine_flag *f = atb_engine_spec_flag(t->spec, t->search[i]);

			domain_text(f, dom, sizeof(dom));
			flag_cli_text(f, cli, sizeof(cli));
			printf("  %-22s %-6s %s  default %s  (%s %s)\n", f->name, flag_types[f->type],
			       dom, f->default_text ? f->default_text : "(engine's own)",
			       flag_renders[f->render], cli);
		}
	}
	atb_engine_task_free(t);
	return CLI_OK;
}

static int task_show(struct opts *o)
{
	struct atb_error err = {0};
	struct atb_task *t;
	char path[4096];
	int rc;

	if (atb_engine_task_find(atb_home(), o->target, path, sizeof(path)))
		return show_engine(path, o->json);
	if (atb_task_open(atb_home(), o->target, &t, &err))
		return cli_fail(&err);
	rc = o->json ? show_json(t) : show_text(t);
	atb_task_free(t);
	return rc;
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void remove_dir(const char *dir)
{
	char path[4200];
	struct dirent *de;
	DIR *d = opendir(dir);

	if (!d)
		return;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

static int task_check(struct opts *o)
{
	struct atb_error err = {0};
	struct atb_protocol *p = NULL;
	struct atb_task *t;
	struct atb_knob_assignment k;
	char tmp[256], so[4400], kbuf[512];
	const char *tmpbase = getenv("TMPDIR");
	json_t *builds = NULL;
	int failed = 0, rc = CLI_OK, step;
	enum atb_status worst = ATB_OK;

	if (atb_engine_task_find(atb_home(), o->target, so, sizeof(so)))
		return cli_usage_error("task", "'%s' is an engine task: 'check' builds kernel tasks "
				       "('atb engine show %s' checks an engine task)", o->target,
				       o->target);
	if (atb_task_open(atb_home(), o->target, &t, &err))
		return cli_fail(&err);
	if (o->protocol ? atb_protocol_load_file(o->protocol, &p, &err)
			: atb_protocol_load_current(atb_home(), &p, &err)) {
		atb_task_free(t);
		return cli_fail(&err);
	}
	snprintf(tmp, sizeof(tmp), "%s/atb-task-check.XXXXXX",
		 tmpbase && *tmpbase ? tmpbase : "/tmp");
	if (!mkdtemp(tmp)) {
		fprintf(stderr, "atb: cannot create a build folder in '%s'\n", tmp);
		atb_protocol_free(p);
		atb_task_free(t);
		return CLI_RUNTIME;
	}
	atb_task_default_knobs(t, &k);
	atb_task_format_knobs(&k, kbuf, sizeof(kbuf));
	if (o->json)
		builds = json_array();
	else
		printf("task %s: %s valid, %zu parameter sets; protocol v%d %.12s\n", t->name,
		       t->yaml_path, t->nsets, p->version, p->digest);
	for (step = 0; step < 3; step++) {
		static const char *const what[] = {"baseline", "naive", "template"};
		const struct atb_task_source *src = step == 0 ? &t->baseline :
						    step == 1 ? &t->naive : &t->candidate;
		char *log = NULL;
		double t0;
		enum atb_status s;

		if (step == 1 && !t->has_naive)
			continue;
		snprintf(so, sizeof(so), "%s/%s.so", tmp, what[step]);
		atb_error_clear(&err);
		t0 = mono_s();
		s = atb_task_build(t, src->path, step == 2 ? &k : NULL, p, so, &log, &err);
		if (s) {
			failed++;
			if (ATB_PRIMARY(s) != ATB_ERR_BUILD || !worst)
				worst = s;
		}
		if (o->json) {
			json_t *b = json_pack("{s:s, s:s, s:b, s:s, s:f, s:s}", "build", what[step],
					      "source", src->path, "ok", s == ATB_OK, "status",
					      atb_status_name(s), "seconds", mono_s() - t0, "log",
					      log ? log : "");

			if (s)
				json_object_set_new(b, "error", json_string(err.msg));
			if (step == 2)
				json_object_set_new(b, "knobs", json_string(kbuf));
			json_array_append_new(builds, b);
		} else {
			printf("  %-9s %-14s %s (%.2f s)%s%s\n", what[step], src->file,
			       s ? "FAILED" : "ok", mono_s() - t0, step == 2 ? "  " : "",
			       step == 2 ? kbuf : "");
			if (s) {
				printf("    %s\n", err.msg);
				if (log && *log)
					printf("%s", log);
			}
		}
		atb_free(log);
	}
	if (o->json)
		json_print(json_pack("{s:s, s:s, s:b, s:i, s:s, s:o}", "task", t->name, "yaml",
				     t->yaml_path, "ok", !failed, "protocol_version", p->version,
				     "protocol_digest", p->digest, "builds", builds));
	else
		printf("%s\n", failed ? "check FAILED" : "check ok");
	if (o->keep)
		fprintf(stderr, "atb task check: builds kept in %s\n", tmp);
	else
		remove_dir(tmp);
	if (failed)
		rc = cli_exit_code(worst);
	atb_protocol_free(p);
	atb_task_free(t);
	return rc;
}

int cmd_task(int argc, char **argv, struct cli_ctx *ctx)
{
	struct opts o = {0};
	const char *sub;
	int rc;

	if (cli_wants_help(argc, argv) || argc < 2) {
		fputs(task_help, argc < 2 ? stderr : stdout);
		return argc < 2 ? CLI_USAGE : CLI_OK;
	}
	atb_alloc_install_json();
	o.json = ctx->json;
	sub = argv[1];
	if (!strcmp(sub, "list")) {
		if ((rc = parse_opts(sub, argc, argv, &o, 0)))
			return rc;
		return task_list(&o);
	}
	if (!strcmp(sub, "show")) {
		if ((rc = parse_opts(sub, argc, argv, &o, 1)))
			return rc;
		return task_show(&o);
	}
	if (!strcmp(sub, "check")) {
		if ((rc = parse_opts(sub, argc, argv, &o, 1)))
			return rc;
		return task_check(&o);
	}
	return cli_usage_error("task", "unknown subcommand '%s'", sub);
}
