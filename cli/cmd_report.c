/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb report: a tuning run's trajectory, best candidate, usable iterations,
 * gate firings, box and protocol, as text, JSON or CSV; and the list of
 * runs.  A thin layer over include/atb/report.h; the help text below is the
 * command's documentation (docs/report.md says the same at more length).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "atb/report.h"
#include "atb/store.h"
#include "cli.h"
#include "banned.h"

static const char usage_text[] =
	"usage: atb report RUN_ID [--json] [--csv FILE]\n"
	"       atb report --last [--json] [--csv FILE]\n"
	"       atb report --list [--json]\n"
	"\n"
	"Report a tuning run ('atb run') from the store.  RUN_ID may be a prefix\n"
	"of the id that only one run has; a prefix several runs share is refused\n"
	"with their list.\n"
	"The report:\n"
	"  - the run: task, proposer, seed, iterations done of planned, paired\n"
	"    seeds per measurement, when it was created\n"
	"  - the protocol it ran under (version and SHA-256 digest) and the box\n"
	"    (fingerprint, and CPU, cores, memory and OS)\n"
	"  - the trajectory, one line per iteration: its outcome (usable, or the\n"
	"    gate that refused it: see 'atb run --help'), the speedup vs the honest\n"
	"    baseline with its 95% confidence interval, the speedup vs the naive\n"
	"    baseline with its interval, and the knobs.  Both speedups are\n"
	"    geometric means of per-seed ratios (> 1: the candidate is faster), and\n"
	"    always appear side by side with their labels: the honest one is the\n"
	"    claim, the naive one only shows how far a naive start would flatter it\n"
	"  - the best iteration (the usable one with the highest CI lower bound of\n"
	"    the honest speedup), with both speedups\n"
	"  - the usable-iteration count and rate (usable: built, correct, measured,\n"
	"    admitted; the protocol's loop.usable_iteration)\n"
	"  - gate firings: how many iterations each gate (or quarantine, or the\n"
	"    store's validator) stopped\n"
	"An incomplete run says how to resume it.\n"
	"\n"
	"An engine task's run ('atb run ENGINE_TASK', see 'atb engine --help'):\n"
	"the speedup is candidate requests/s / the engine's default requests/s,\n"
	"and one 'engine' line per measured iteration gives, read from the\n"
	"stored result's statistics (not from the iteration's note): the\n"
	"requests/s ratio with its 95% CI and each arm's median req/s over the\n"
	"seeds, then the latency ratios default / candidate (> 1: the candidate\n"
	"is faster) with 95% CIs: ttft_median_ms, tpot_median_ms, e2e_median_ms,\n"
	"e2e_p99_ms (one is missing when a seed had no value, e.g. TPOT of\n"
	"one-token answers).  With --json each such trajectory entry carries\n"
	"\"requests_per_s\": {\"ratio\", \"ci_low\", \"ci_high\", \"p_value\",\n"
	"\"baseline_median\", \"candidate_median\"} and \"latency\": {NAME:\n"
	"{\"ratio\", \"ci_low\", \"ci_high\", \"p_value\"}}.\n"
	"\n"
	"options:\n"
	"  --last        the most recently created run\n"
	"  --list        every run: id, task, proposer, seed, done/planned,\n"
	"                usable, created\n"
	"  --csv FILE    also write the trajectory as CSV (RFC 4180, CRLF lines, a\n"
	"                header) to FILE; '-' writes only the CSV, to stdout.\n"
	"                Columns: iteration, outcome, usable, honest_speedup,\n"
	"                honest_ci_low, honest_ci_high, naive_speedup, naive_ci_low,\n"
	"                naive_ci_high, knobs (a JSON object), job_uuid, wall_s,\n"
	"                reason; empty cells where nothing was measured\n"
	"  --json        the same content as JSON (also 'atb --json report'): run,\n"
	"                protocol, box, baselines, trajectory, best, usable,\n"
	"                gate_firings (docs/report.md lists every key)\n"
	"  -h, --help    this text\n"
	"\n"
	"The store is --db PATH, $ATB_DB or ./atb.db, opened read-only.\n"
	"exit codes: 0 ok; 2 bad usage, no such run, not a store; 3 store or i/o\n"
	"failure\n";

static int write_csv(const struct atb_report *r, const char *path)
{
	struct atb_error err;
	char *csv = NULL;
	FILE *f;
	int ok;

	atb_error_clear(&err);
	if (atb_report_csv(r, &csv, &err))
		return cli_fail(&err);
	f = strcmp(path, "-") ? fopen(path, "w") : stdout;
	if (!f) {
		atb_error_set(&err, ATB_ERR_IO, "cannot write csv '%s': %s", path, strerror(errno));
		atb_free(csv);
		return cli_fail(&err);
	}
	ok = fputs(csv, f) >= 0;
	if (f != stdout)
		ok = (fclose(f) == 0) && ok;
	else
		ok = (fflush(f) == 0) && ok;
	atb_free(csv);
	if (!ok) {
		atb_error_set(&err, ATB_ERR_IO, "cannot write csv '%s': %s", path, strerror(errno));
		return cli_fail(&err);
	}
	return CLI_OK;
}

/* ---- engine runs: figures from each result's stored stats ---- */

/* {"ratio", "ci_low", "ci_high", ...} of o, or NULL when o lacks them. */
static json_t *ratio_ci(json_t *o)
{
	json_t *v = json_object_get(o, "ratio");

	if (!json_is_number(v) || !json_is_number(json_object_get(o, "ci_low")) ||
	    !json_is_number(json_object_get(o, "ci_high")))
		return NULL;
	return o;
}

/*
 * One engine iteration's figures from its result (atb_store_result_stats):
 * {"requests_per_s": {"ratio", "ci_low", "ci_high", ...}, "latency":
 * {NAME: {"ratio", "ci_low", "ci_high", "p_value"}}}.  The requests/s
 * ratio is the result row's speedup and interval (the admitted record);
 * the stats add the p-value and each arm's median req/s where they hold
 * them (results stored before they did lack those).  Caller owns *out.
 */
static enum atb_status engine_figures(struct atb_store *s, int64_t result_id, json_t **out,
				      struct atb_error *err)
{
	json_t *res = NULL, *stats, *rps, *lat, *v, *o;
	const char *name;
	enum atb_status st;

	*out = NULL;
	st = atb_store_result_stats(s, result_id, &res, err);
	if (st)
		return st;
	stats = json_object_get(res, "stats");
	rps = json_deep_copy(json_object_get(stats, "requests_per_s"));
	if (!json_is_object(rps)) {
		json_decref(rps);
		rps = json_object();
	}
	json_object_set(rps, "ratio", json_object_get(res, "speedup"));
	json_object_set(rps, "ci_low", json_object_get(res, "ci_low"));
	json_object_set(rps, "ci_high", json_object_get(res, "ci_high"));
	lat = json_object();
	json_object_foreach(json_object_get(stats, "latency"), name, v)
		if (ratio_ci(v))
			json_object_set(lat, name, v);
	o = json_pack("{s:o, s:o}", "requests_per_s", rps, "latency", lat);
	json_decref(res);
	if (!o)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	*out = o;
	return ATB_OK;
}

/*
 * For an engine run: figs[i] holds iteration i's figures when it has a
 * stored result, else NULL.  Caller owns the array (engine_figures_free).
 */
static enum atb_status engine_collect(struct atb_store *s, const struct atb_report *r,
				      json_t ***figs, struct atb_error *err)
{
	json_t **f;
	enum atb_status st;
	size_t i;

	*figs = NULL;
	if (!r->engine || !r->niters)
		return ATB_OK;
	f = atb_calloc(r->niters, sizeof(*f));
	if (!f)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	for (i = 0; i < r->niters; i++) {
		if (r->iters[i].result_id <= 0)
			continue;
		st = engine_figures(s, r->iters[i].result_id, &f[i], err);
		if (st) {
			while (i--)
				json_decref(f[i]);
			atb_free(f);
			return st;
		}
	}
	*figs = f;
	return ATB_OK;
}

static void engine_figures_free(json_t **figs, size_t n)
{
	size_t i;

	for (i = 0; figs && i < n; i++)
		json_decref(figs[i]);
	atb_free(figs);
}

/* trajectory[i].requests_per_s and .latency from the stats (replacing the note's). */
static void engine_json(json_t *o, json_t **figs, size_t n)
{
	json_t *traj = json_object_get(o, "trajectory");
	size_t i;

	for (i = 0; figs && i < n && i < json_array_size(traj); i++) {
		json_t *it = json_array_get(traj, i);

		if (!figs[i])
			continue;
		json_object_set(it, "requests_per_s", json_object_get(figs[i], "requests_per_s"));
		json_object_set(it, "latency", json_object_get(figs[i], "latency"));
	}
}

static void print_ratio(const char *name, json_t *v, const char *sep)
{
	printf("%s%s %.4gx [%.4g, %.4g]", sep, name, json_number_value(json_object_get(v, "ratio")),
	       json_number_value(json_object_get(v, "ci_low")),
	       json_number_value(json_object_get(v, "ci_high")));
}

/* One "engine" line per measured iteration: requests/s, then latency ratios. */
static void engine_text(const struct atb_report *r, json_t **figs)
{
	static const char *const lat_order[] = {"ttft_median_ms", "tpot_median_ms",
						"e2e_median_ms", "e2e_p99_ms"};
	size_t i, k;

	for (i = 0; figs && i < r->niters && !figs[i]; i++)
		;
	if (!figs || i == r->niters)
		return;   /* no iteration has a stored result */
	printf("engine    figures from each result's stored stats (> 1: the candidate is faster;\n"
	       "          requests/s candidate / default, latency default / candidate, 95%% CIs)\n");
	for (i = 0; i < r->niters; i++) {
		json_t *rps, *lat, *v, *b, *c;
		const char *name;

		if (!figs[i])
			continue;
		rps = json_object_get(figs[i], "requests_per_s");
		lat = json_object_get(figs[i], "latency");
		printf("engine    iteration %" PRId64 ":", r->iters[i].k);
		print_ratio("requests/s", rps, " ");
		b = json_object_get(rps, "baseline_median");
		c = json_object_get(rps, "candidate_median");
		if (json_is_number(b) && json_is_number(c))
			printf(" (medians: candidate %.4g, default %.4g req/s)", json_number_value(c),
			       json_number_value(b));
		for (k = 0; k < sizeof(lat_order) / sizeof(lat_order[0]); k++)
			if ((v = json_object_get(lat, lat_order[k])))
				print_ratio(lat_order[k], v, "; ");
		json_object_foreach(lat, name, v) {
			for (k = 0; k < sizeof(lat_order) / sizeof(lat_order[0]); k++)
				if (!strcmp(name, lat_order[k]))
					break;
			if (k == sizeof(lat_order) / sizeof(lat_order[0]))
				print_ratio(name, v, "; ");
		}
		printf("\n");
	}
}

static int list_runs(struct atb_store *s, int json)
{
	struct atb_error err;
	char *text = NULL;
	json_t *a = NULL;

	atb_error_clear(&err);
	if (json) {
		if (atb_report_list_json(s, &a, &err))
			return cli_fail(&err);
		return cli_print_json("report", a);
	}
	if (atb_report_list_text(s, &text, &err))
		return cli_fail(&err);
	fputs(text, stdout);
	atb_free(text);
	return CLI_OK;
}

/*
 * RUN_ID as given or a unique prefix of one (the id printed by 'atb run' is
 * long): the whole id into out.  An id no run has and that starts none is
 * left as it is (the report says it is unknown); a prefix of several runs
 * is a usage error that lists them.
 */
static int resolve_prefix(struct atb_store *s, const char *given, char *out, size_t size)
{
	struct atb_run_row *runs = NULL;
	struct atb_error err;
	size_t n = 0, i, hits = 0, len = strlen(given), hit = 0;

	atb_error_clear(&err);
	snprintf(out, size, "%s", given);
	if (atb_store_list_runs(s, &runs, &n, &err))
		return cli_fail(&err);
	for (i = 0; i < n; i++) {
		if (!strcmp(runs[i].id, given)) {
			atb_free(runs);
			return CLI_OK;
		}
		if (len && !strncmp(runs[i].id, given, len)) {
			hits++;
			hit = i;
		}
	}
	if (hits == 1)
		snprintf(out, size, "%s", runs[hit].id);
	if (hits > 1) {
		fprintf(stderr, "atb report: run id prefix '%s' is ambiguous: %zu runs start with "
			"it:\n", given, hits);
		for (i = 0; i < n; i++)
			if (!strncmp(runs[i].id, given, len))
				fprintf(stderr, "  %s  %s\n", runs[i].id, runs[i].task);
		fprintf(stderr, "give more of the id; see 'atb report --list'\n");
	}
	atb_free(runs);
	return hits > 1 ? CLI_USAGE : CLI_OK;
}

int cmd_report(int argc, char **argv, struct cli_ctx *ctx)
{
	struct atb_store *s = NULL;
	struct atb_report *r = NULL;
	struct atb_error err;
	struct atb_run_row *runs = NULL;
	const char *run_id = NULL, *csv = NULL;
	char last[ATB_RUN_ID_MAX] = "";
	int json = ctx->json, list = 0, want_last = 0, i, rc = CLI_OK;
	size_t n = 0;
	json_t **figs = NULL;
	enum atb_status st;

	if (cli_wants_help(argc, argv)) {
		fputs(usage_text, stdout);
		return CLI_OK;
	}
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--list"))
			list = 1;
		else if (!strcmp(argv[i], "--last"))
			want_last = 1;
		else if (!strcmp(argv[i], "--csv")) {
			if (i + 1 >= argc)
				return cli_usage_error("report", "option '--csv' needs a value");
			csv = argv[++i];
		} else if (argv[i][0] == '-' && argv[i][1])
			return cli_usage_error("report", "unknown option '%s'", argv[i]);
		else if (!run_id)
			run_id = argv[i];
		else
			return cli_usage_error("report", "unexpected argument '%s'", argv[i]);
	}
	if (list + want_last + (run_id != NULL) != 1)
		return cli_usage_error("report", "give exactly one of RUN_ID, --last or --list");
	if (list && csv)
		return cli_usage_error("report", "--csv goes with RUN_ID or --last, not --list");

	atb_error_clear(&err);
	if (atb_store_open(ctx->db_path, ATB_STORE_READ_ONLY, &s, &err))
		return cli_fail(&err);
	if (list) {
		rc = list_runs(s, json);
		atb_store_close(s);
		return rc;
	}
	if (want_last) {
		if (atb_store_list_runs(s, &runs, &n, &err)) {
			atb_store_close(s);
			return cli_fail(&err);
		}
		if (n)
			snprintf(last, sizeof(last), "%s", runs[n - 1].id);
		atb_free(runs);
		if (!n) {
			atb_error_set(&err, ATB_ERR_NOT_FOUND, "no runs in store '%s'", ctx->db_path);
			atb_store_close(s);
			return cli_fail(&err);
		}
		run_id = last;
	}
	if (!want_last) {
		rc = resolve_prefix(s, run_id, last, sizeof(last));
		if (rc) {
			atb_store_close(s);
			return rc;
		}
		run_id = last;
	}
	if (atb_report_build(s, run_id, NULL, &r, &err)) {
		atb_store_close(s);
		return cli_fail(&err);
	}
	st = engine_collect(s, r, &figs, &err);
	atb_store_close(s);
	if (st) {
		atb_report_free(r);
		return cli_fail(&err);
	}
	if (!csv || strcmp(csv, "-")) {
		if (json) {
			json_t *o = NULL;

			if (atb_report_json(r, &o, &err)) {
				rc = cli_fail(&err);
			} else {
				engine_json(o, figs, r->niters);
				rc = cli_print_json("report", o);
			}
		} else {
			char *text = NULL;

			if (atb_report_text(r, &text, &err)) {
				rc = cli_fail(&err);
			} else {
				fputs(text, stdout);
				atb_free(text);
				engine_text(r, figs);
			}
		}
	}
	if (rc == CLI_OK && csv)
		rc = write_csv(r, csv);
	engine_figures_free(figs, r->niters);
	atb_report_free(r);
	return rc;
}
