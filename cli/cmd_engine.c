/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb engine: serving-engine specs and the paired configuration A/B.
 * "show" checks and lists a spec or an engine task, "render" prints the
 * command line a configuration launches, "ab" measures a configuration
 * against the engine's default into the store (atb/engine.h).
 */
#define _GNU_SOURCE  /* mkdtemp */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "atb/engine.h"
#include "atb/protocol.h"
#include "atb/store.h"
#include "cli.h"
#include "banned.h"

static const char engine_help[] =
	"usage: atb engine show SPEC.yaml|ENGINE|TASK [--json]\n"
	"       atb engine render TASK [--candidate SETTINGS] [--port N]\n"
	"       atb engine ab TASK --candidate SETTINGS [--seeds N] [--seed-base S]\n"
	"                     [--work-dir DIR] [--label TEXT] [--json]\n"
	"\n"
	"Serving engines (vLLM, SGLang, llama.cpp's server, ...) described by an\n"
	"engine spec (engines/NAME.yaml) and measured through an engine task\n"
	"(kind: engine); both formats are in docs/engine-spec.md, the commands in\n"
	"docs/engine.md.  TASK is an engine task's YAML file or a bundled one's\n"
	"name (tasks/NAME/engine.yaml, e.g. engine-llamacpp-repeat); ENGINE is a\n"
	"bundled spec's name (engines/NAME.yaml: llamacpp, vllm, sglang).\n"
	"\n"
	"SETTINGS is 'name=value,name=value' over the spec's tunable flags, each\n"
	"value checked against the flag's type and domain; '' or 'default' is the\n"
	"engine's default configuration (no tunable flag passed), which is always\n"
	"the honest baseline.\n"
	"\n"
	"  show     load and check a spec or a task (every error names\n"
	"           file:line:column, field and value) and list the flags: type,\n"
	"           domain, default, how a value renders; for a task also the\n"
	"           model, the workload, the probes, the search flags and the\n"
	"           CPUs its engines are pinned to (the task's cpus: [N, ...],\n"
	"           applied to every engine it starts, both arms alike)\n"
	"  render   print the command line SETTINGS launches, one argument a line\n"
	"           ({port} is N, default 8000; nothing is started)\n"
	"  ab       the paired A/B, recorded in the store (--db PATH, $ATB_DB or\n"
	"           ./atb.db; created if absent), under the current protocol:\n"
	"           per seed S, S+1, ... the default configuration (A) and the\n"
	"           candidate (B) in ABBA order over consecutive seeds\n"
	"           (engine.paired_order), each on a freshly started engine\n"
	"           (engine.fresh_engine_per_arm) on a free loopback port, its\n"
	"           stdout and stderr in WORK_DIR/seed-S-ARM/, both arms on the\n"
	"           identical workload of the seed; engine.warmup_requests\n"
	"           requests first, excluded; the per-seed value is requests/s,\n"
	"           latency (TTFT, TPOT, end-to-end median and p99) kept beside it.\n"
	"           Per-seed ratios, their geometric mean with a bootstrap CI,\n"
	"           Wilcoxon and the cv come from atb's stats module.\n"
	"\n"
	"gates of 'ab' (each refusal stored as a rejection 'gate:ID' with its\n"
	"reason; the engine's log tail is part of it):\n"
	"  engine_baseline     the default configuration itself failed (start,\n"
	"                      probes, requests, death, or greedy outputs that\n"
	"                      differ across its restarts): not the candidate's fault\n"
	"  engine_start        the candidate's engine exited at start (a flag it\n"
	"                      refuses), never became ready within the spec's\n"
	"                      readiness timeout, or found its port taken\n"
	"  output_equivalence  greedy probes (temperature 0, the task's max_tokens,\n"
	"                      no ignore_eos) must match the default's text,\n"
	"                      completion-token count and finish_reason on every\n"
	"                      probe: stopping early, padding or one altered token\n"
	"                      fails (engine.output_equivalence); checked on every\n"
	"                      engine start, so outputs that change across\n"
	"                      restarts fail too\n"
	"  engine_died         the engine died while probed or measured: watched\n"
	"                      (waitpid) while the load runs, which then stops at\n"
	"                      once; the reason says how far into the load\n"
	"  engine_errors       requests failed (HTTP 4xx/5xx, resets, malformed\n"
	"                      events), by category\n"
	"  client_lag          the client's dispatch lag could have moved an arm's\n"
	"                      requests/s by over engine.client_lag.max_share of\n"
	"                      the load, or the arms' shares differ by over\n"
	"                      max_arm_difference (protocol version 6 on; before\n"
	"                      it: the p99 lag over engine.max_dispatch_lag_ms)\n"
	"  noise               cv of the per-seed ratios over stats.cv_cap after\n"
	"                      the first run and at most 2 re-runs of both arms\n"
	"                      on every seed, in the seed's paired order (stored\n"
	"                      pairs adjacent in time; logs in\n"
	"                      WORK_DIR/seed-S-ARM-rerunK/, each re-run kept in\n"
	"                      the stats' 'reruns')\n"
	"  then the store's validator (kind engine, unit req/s; a result without\n"
	"  paired seeds cannot enter; >= the anomaly factor is quarantined)\n"
	"\n"
	"options:\n"
	"  --candidate SETTINGS  the configuration to measure (ab, render)\n"
	"  --seeds N             paired seeds (default: the protocol's\n"
	"                        stats.min_paired_seeds; fewer cannot be stored)\n"
	"  --seed-base S         seeds are S, S+1, ... (default 1)\n"
	"  --work-dir DIR        the arms' folders and engine logs (default: a new\n"
	"                        folder engine-ab.XXXXXX beside the store, kept)\n"
	"  --label TEXT          the candidate's name in the store (default: the\n"
	"                        settings as JSON)\n"
	"  --port N              the port 'render' shows (default 8000)\n"
	"  --json                machine-readable output (also 'atb --json engine ...')\n"
	"  -h, --help            this text\n"
	"\n"
	"exit codes: 0 shown, rendered, admitted or quarantined; 2 bad input (a\n"
	"spec or task error, an unknown flag or a value outside its domain) or\n"
	"rejected by a gate; 3 runtime failure (store, i/o); 4 internal error\n";

static const char *const type_names[] = {"bool", "int", "float", "enum", "string"};
static const char *const render_names[] = {"value", "equals", "switch", "bool_pair", "list",
					   "json"};

static json_t *flag_json(const struct atb_engine_flag *f)
{
	json_t *o = json_object(), *vals = json_array();
	size_t i;

	for (i = 0; i < f->nvalues; i++)
		json_array_append_new(vals, json_string(f->values[i]));
	json_object_set_new(o, "name", json_string(f->name));
	json_object_set_new(o, "type", json_string(type_names[f->type]));
	json_object_set_new(o, "render", json_string(render_names[f->render]));
	json_object_set_new(o, "cli", f->cli ? json_string(f->cli) : json_string(f->json_cli));
	if (f->json_key)
		json_object_set_new(o, "json_key", json_string(f->json_key));
	if (f->has_range)
		json_object_set_new(o, "range", json_pack("[f,f]", f->min, f->max));
	json_object_set_new(o, "values", vals);
	json_object_set_new(o, "default", f->default_text ? json_string(f->default_text)
							   : json_null());
	return o;
}

static void print_flags(const struct atb_engine_spec *spec)
{
	size_t i, j;

	printf("engine %s (%s): %s\n", spec->name, spec->path,
	       spec->run_here ? "run for real here" : "written from its documentation, not run here");
	printf("  launch     ");
	for (i = 0; i < spec->argc; i++)
		printf("%s%s", i ? " " : "", spec->argv[i]);
	printf("\n  readiness  GET %s within %g s\n", spec->ready_path, spec->ready_timeout_s);
	if (spec->metrics_path)
		printf("  metrics    %s (%zu counters)\n", spec->metrics_path, spec->ncounters);
	printf("  flags      %zu\n", spec->nflags);
	for (i = 0; i < spec->nflags; i++) {
		const struct atb_engine_flag *f = &spec->flags[i];

		printf("    %-26s %-6s %-9s %s", f->name, type_names[f->type],
		       render_names[f->render], f->cli ? f->cli : f->json_cli);
		if (f->json_key)
			printf(" .%s", f->json_key);
		if (f->has_range)
			printf("  [%g, %g]%s", f->min, f->max, f->log ? " log" : "");
		for (j = 0; j < f->nvalues; j++)
			printf("%s%s", j ? "|" : "  {", f->values[j]);
		if (f->nvalues)
			printf("}");
		printf("  default %s\n", f->default_text ? f->default_text : "(engine's own)");
	}
}

/*
 * A bare name no file has that names a bundled spec (engines/NAME.yaml): 1
 * with its path in buf, else 0.
 */
static int bundled_spec(const char *name, char *buf, size_t size)
{
	struct stat st;

	return !strchr(name, '/') && stat(name, &st) != 0 &&
	       (size_t)snprintf(buf, size, "%s/engines/%s.yaml", atb_home(), name) < size &&
	       stat(buf, &st) == 0;
}

static int do_show(const char *path, int json)
{
	struct atb_engine_task *t = NULL;
	struct atb_engine_spec *spec = NULL;
	const struct atb_engine_spec *sp;
	struct atb_error err;
	size_t i;

	atb_error_clear(&err);
	if (atb_engine_task_detect(path)) {
		if (atb_engine_task_load(atb_home(), path, &t, &err))
			return cli_fail(&err);
		sp = t->spec;
	} else {
		char bundled[4096];

		if (bundled_spec(path, bundled, sizeof(bundled)))
			path = bundled;
		if (atb_engine_spec_load(path, &spec, &err))
			return cli_fail(&err);
		sp = spec;
	}
	if (json) {
		json_t *v = json_object(), *fl = json_array();

		for (i = 0; i < sp->nflags; i++)
			json_array_append_new(fl, flag_json(&sp->flags[i]));
		json_object_set_new(v, "engine", json_string(sp->name));
		json_object_set_new(v, "spec", json_string(sp->path));
		json_object_set_new(v, "run_here", json_boolean(sp->run_here));
		json_object_set_new(v, "flags", fl);
		if (t) {
			json_t *s = json_array();

			for (i = 0; i < t->nsearch; i++)
				json_array_append_new(s, json_string(t->search[i]));
			json_object_set_new(v, "task", json_string(t->name));
			json_object_set_new(v, "model", json_string(t->model));
			json_object_set_new(v, "workload", json_loads(t->workload_json, 0, NULL));
			json_object_set_new(v, "probes", json_integer((json_int_t)t->nprobes));
			json_object_set_new(v, "probe_max_tokens", json_integer(t->probe_max_tokens));
			json_object_set_new(v, "search", s);
			json_object_set_new(v, "cpus", atb_engine_task_cpus_json(t));
		}
		cli_print_json("engine", v);
	} else {
		print_flags(sp);
		if (t) {
			printf("task %s (%s)\n  model      %s\n  workload   %s\n", t->name, t->path,
			       t->model, t->workload_json);
			printf("  probes     %zu prompts, max_tokens %d, %s\n  search    ", t->nprobes,
			       t->probe_max_tokens, t->probe_api);
			for (i = 0; i < t->nsearch; i++)
				printf(" %s", t->search[i]);
			printf("\n  cpus      ");
			for (i = 0; i < t->ncpus; i++)
				printf(" %d", t->cpus[i]);
			printf("%s\n", t->ncpus ? "" : " any (not pinned)");
		}
	}
	atb_engine_task_free(t);
	atb_engine_spec_free(spec);
	return CLI_OK;
}

/*
 * A task whose model is "{env:NAME}" (the bundled llama.cpp tasks: a tiny
 * model the user writes) with NAME unset or naming no file: say how to make
 * one.  Unset: the usage error (render and ab cannot go on), returned;
 * set but missing: a note only when !fatal (render still prints the line),
 * else the usage error, before a store is opened.  0 when the model is
 * there or the template is not one variable.
 */
static int model_hint(const struct atb_engine_task *t, const char *cmd, int fatal)
{
	static const char how[] =
		"the bundled llama.cpp tasks run a tiny model written by a script: "
		"'. tools/engine/env.sh && \"$ENGINE_PY\" tools/engine/make-tiny-gguf.py "
		"/tmp/tiny.gguf && export ATB_TINY_GGUF=/tmp/tiny.gguf' (docs/engines-real.md)";
	char name[128];
	const char *m = t->model, *v;
	struct stat sb;
	size_t n = m ? strlen(m) : 0;

	if (n < 7 || strncmp(m, "{env:", 5) || m[n - 1] != '}' || n - 6 >= sizeof(name) ||
	    strchr(m + 5, '{'))
		return 0;
	snprintf(name, sizeof(name), "%.*s", (int)(n - 6), m + 5);
	v = getenv(name);
	if (!v || !*v)
		return cli_usage_error(cmd, "task '%s' takes its model from $%s, which is not "
				       "set; %s", t->name, name, how);
	if (stat(v, &sb) || !S_ISREG(sb.st_mode)) {
		if (fatal)
			return cli_usage_error(cmd, "task '%s' takes its model from $%s, but '%s' "
					       "is not a file; %s", t->name, name, v, how);
		fprintf(stderr, "atb %s: note: $%s is '%s', which is not a file; %s\n", cmd, name,
			v, how);
	}
	return 0;
}

static int do_render(const char *path, const char *cand, int port, int json)
{
	struct atb_engine_task *t = NULL;
	struct atb_engine_config c;
	struct atb_error err;
	char **argv = NULL;
	size_t argc = 0, i;
	int rc = CLI_OK;

	atb_error_clear(&err);
	if (atb_engine_task_load(atb_home(), path, &t, &err)) {
		rc = cli_fail(&err);
		goto out;
	}
	if ((rc = model_hint(t, "engine", 0)))
		goto out;
	if (atb_engine_config_parse(t->spec, cand, &c, &err) ||
	    atb_engine_render(t, &c, port, ".", &argv, &argc, &err)) {
		rc = cli_fail(&err);
		goto out;
	}
	if (json) {
		json_t *a = json_array();

		for (i = 0; i < argc; i++)
			json_array_append_new(a, json_string(argv[i]));
		cli_print_json("engine", a);
	} else {
		for (i = 0; i < argc; i++)
			printf("%s\n", argv[i]);
	}
out:
	atb_engine_argv_free(argv, argc);
	atb_engine_task_free(t);
	return rc;
}

static void on_progress(void *ctx, const char *phase)
{
	(void)ctx;
	fprintf(stderr, "atb engine ab: %s\n", phase);
}

static json_t *jnum(double x)
{
	return x == x ? json_real(x) : json_null();
}

static int print_outcome(const struct atb_engine_task *t, const struct atb_measure_outcome *o,
			 const char *work_dir, int json)
{
	if (json) {
		json_t *v = json_pack("{s:s,s:s,s:s,s:s,s:I,s:s}", "verdict",
				      atb_measure_verdict_name(o->verdict), "task", t->name,
				      "engine", t->spec->name, "job_uuid", o->job_uuid, "seeds",
				      (json_int_t)o->nseeds, "work_dir", work_dir);

		json_object_set_new(v, "gate", o->gate[0] ? json_string(o->gate) : json_null());
		json_object_set_new(v, "reason", o->reason[0] ? json_string(o->reason) : json_null());
		json_object_set_new(v, "result_id", o->result_id ? json_integer(o->result_id)
								  : json_null());
		json_object_set_new(v, "rejection_id",
				    o->rejection_id ? json_integer(o->rejection_id) : json_null());
		if (o->result_id) {
			json_object_set_new(v, "speedup", jnum(o->speedup));
			json_object_set_new(v, "ci_low", jnum(o->ci_low));
			json_object_set_new(v, "ci_high", jnum(o->ci_high));
			json_object_set_new(v, "p_value", jnum(o->p_value));
			json_object_set_new(v, "cv", jnum(o->cv));
			json_object_set_new(v, "mde", jnum(o->mde));
		}
		json_object_set_new(v, "run_s", jnum(o->run_s));
		cli_print_json("engine", v);
	} else {
		printf("%s: %s on %s\n", atb_measure_verdict_name(o->verdict), t->name,
		       t->spec->name);
		printf("  job             %s\n  logs            %s\n", o->job_uuid, work_dir);
		if (o->verdict == ATB_MEASURE_REJECTED) {
			printf("  gate            %s\n  reason          %s\n", o->gate, o->reason);
			printf("  rejection       #%" PRId64 "\n", o->rejection_id);
		} else {
			printf("  requests/s      %.4fx vs the engine's default configuration, "
			       "95%% CI [%.4f, %.4f]\n", o->speedup, o->ci_low, o->ci_high);
			printf("  p-value         %.4g (Wilcoxon, %zu paired seeds), MDE %.4fx\n",
			       o->p_value, o->nseeds, o->mde);
			printf("  cv              %.4f\n", o->cv);
			printf("  result          #%" PRId64 "%s\n", o->result_id,
			       o->verdict == ATB_MEASURE_QUARANTINED ? " (quarantined: see 'atb review')"
								     : "");
			printf("  (latency ratios: 'atb report' or the result's stats)\n");
		}
	}
	return o->verdict == ATB_MEASURE_REJECTED ? CLI_USAGE : CLI_OK;
}

static int do_ab(struct cli_ctx *ctx, const char *path, const char *cand, uint64_t seeds,
		 uint64_t seed_base, const char *work_dir, const char *label, int json)
{
	struct atb_engine_task *t = NULL;
	struct atb_engine_config c;
	struct atb_frozen_protocol *list = NULL;
	struct atb_protocol *p = NULL;
	struct atb_store *s = NULL;
	struct atb_engine_ab_opts opts;
	struct atb_measure_outcome out;
	struct atb_error err;
	char tmpl[4096];
	size_t nlist = 0;
	int cur = 0, rc;
	enum atb_status st;

	atb_error_clear(&err);
	st = atb_engine_task_load(atb_home(), path, &t, &err);
	if (!st && (rc = model_hint(t, "engine", 1)))
		goto out;
	if (!st)
		st = atb_engine_config_parse(t->spec, cand, &c, &err);
	if (!st)
		st = atb_protocol_frozen_list(atb_home(), &list, &nlist, &cur, &err);
	if (!st)
		st = atb_protocol_load_current(atb_home(), &p, &err);
	if (!st)
		st = atb_store_open(ctx->db_path, ATB_STORE_CREATE, &s, &err);
	if (!st)
		st = atb_store_sync_protocols(s, list, nlist, NULL, &err);
	if (!st && !work_dir) {
		const char *slash = strrchr(ctx->db_path, '/');

		snprintf(tmpl, sizeof(tmpl), "%.*sengine-ab.XXXXXX",
			 slash ? (int)(slash - ctx->db_path + 1) : 0, ctx->db_path);
		if (!mkdtemp(tmpl))
			st = atb_error_set(&err, ATB_ERR_IO, "cannot create a work folder '%s': %s",
					   tmpl, strerror(errno));
		work_dir = tmpl;
	}
	if (st) {
		rc = cli_fail(&err);
		goto out;
	}
	memset(&opts, 0, sizeof(opts));
	opts.work_dir = work_dir;
	opts.seed_base = seed_base;
	opts.nseeds = (size_t)seeds;
	opts.candidate_label = label;
	opts.progress = on_progress;
	st = atb_engine_ab(s, p, t, &c, &opts, &out, &err);
	rc = st ? cli_fail(&err) : print_outcome(t, &out, work_dir, json);
out:
	atb_store_close(s);
	atb_protocol_free(p);
	atb_protocol_frozen_free(list, nlist);
	atb_engine_task_free(t);
	return rc;
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;

	errno = 0;
	*out = strtoull(s, &end, 10);
	return errno || end == s || *end || s[0] == '-' ? -1 : 0;
}

int cmd_engine(int argc, char **argv, struct cli_ctx *ctx)
{
	const char *sub = NULL, *path = NULL, *cand = NULL, *work_dir = NULL, *label = NULL;
	uint64_t seeds = 0, seed_base = 1, port = 8000;
	char found[4096];
	int json = ctx->json, i;

	if (cli_wants_help(argc, argv) || argc < 2) {
		fputs(engine_help, argc < 2 ? stderr : stdout);
		return argc < 2 ? CLI_USAGE : CLI_OK;
	}
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--json"))
			json = 1;
		else if (!strcmp(a, "--candidate") && i + 1 < argc)
			cand = argv[++i];
		else if (!strcmp(a, "--work-dir") && i + 1 < argc)
			work_dir = argv[++i];
		else if (!strcmp(a, "--label") && i + 1 < argc)
			label = argv[++i];
		else if (!strcmp(a, "--seeds") && i + 1 < argc) {
			if (parse_u64(argv[++i], &seeds) || seeds < 2 || seeds > 1024)
				return cli_usage_error("engine", "--seeds must be 2 to 1024, not '%s'",
						       argv[i]);
		} else if (!strcmp(a, "--seed-base") && i + 1 < argc) {
			if (parse_u64(argv[++i], &seed_base) || seed_base > ((uint64_t)1 << 62))
				return cli_usage_error("engine", "--seed-base must be an integer "
						       ">= 0, not '%s'", argv[i]);
		} else if (!strcmp(a, "--port") && i + 1 < argc) {
			if (parse_u64(argv[++i], &port) || port < 1 || port > 65535)
				return cli_usage_error("engine", "--port must be 1 to 65535, not '%s'",
						       argv[i]);
		} else if (a[0] == '-' && a[1])
			return cli_usage_error("engine", "unknown option '%s'", a);
		else if (!sub)
			sub = a;
		else if (!path)
			path = a;
		else
			return cli_usage_error("engine", "unexpected argument '%s'", a);
	}
	if (!sub || (strcmp(sub, "show") && strcmp(sub, "render") && strcmp(sub, "ab")))
		return cli_usage_error("engine", "expected show, render or ab, not '%s'",
				       sub ? sub : "");
	if (!path)
		return cli_usage_error("engine", "%s needs a file", sub);
	/* A bundled engine task may be named: tasks/NAME/engine.yaml. */
	if (atb_engine_task_find(atb_home(), path, found, sizeof(found)))
		path = found;
	else if (strcmp(sub, "show")) {
		char spec[4096];

		/* render and ab take a task; a bare name that is a bundled spec's
		 * is the likeliest slip (the spec has no model and no workload) */
		if (bundled_spec(path, spec, sizeof(spec)))
			return cli_usage_error("engine", "'%s' is an engine spec (engines/%s.yaml); "
					       "%s takes an engine task, which names a spec, a "
					       "model and a workload: a task's YAML file or a "
					       "bundled one's name (see 'atb task list', e.g. "
					       "engine-llamacpp-repeat)", path, path, sub);
	}
	if (!strcmp(sub, "show"))
		return do_show(path, json);
	if (!strcmp(sub, "render"))
		return do_render(path, cand, (int)port, json);
	if (!cand)
		return cli_usage_error("engine", "ab needs --candidate SETTINGS");
	return do_ab(ctx, path, cand, seeds, seed_base, work_dir, label, json);
}
