/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb calibrate: the A/A self-test (include/atb/calibrate.h).  Copies of
 * each task's honest baseline go through the normal measurement path; the
 * report says how many were admitted, how many intervals contain 1, how far
 * the speedups are from 1 and what refused the others, and a one-line
 * verdict against targets.  A thin layer over atb_calibrate_start /
 * atb_calibrate_resume; the help text is the command's documentation
 * (docs/calibrate.md says the same at more length).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "atb/alloc.h"
#include "atb/calibrate.h"
#include "cli.h"
#include "banned.h"

static const char usage_text[] =
	"usage: atb calibrate --kind cpu|cuda [options]\n"
	"       atb calibrate TASK... [options]\n"
	"       atb calibrate --suite DIR [--filter GLOB] [--python PY] [--device cuda|cpu]\n"
	"                     [--timeout-per-task S] [options]\n"
	"       atb calibrate --resume RUN_ID [--suite DIR] [--python PY] [--runs-dir DIR]\n"
	"                     [--allow-other-box] [options]\n"
	"\n"
	"The A/A self-test: is this box, and this build of atb, fit to judge?  For\n"
	"every task of the set atb writes a candidate that is a copy of the task's\n"
	"honest baseline and measures it through the normal path (every gate, the\n"
	"store).  The truth is 1.00x: each copy should be admitted with an\n"
	"interval that contains 1.  Run it on a new box before trusting it, and\n"
	"after every change to the timing path.\n"
	"\n"
	"The task set, one of:\n"
	"  --kind cpu|cuda    every bundled task of that kind (tasks/)\n"
	"  TASK...            bundled task names or task folders (kinds cpu, cuda)\n"
	"  --suite DIR        a KernelBench-format folder, as 'atb suite' takes it\n"
	"\n"
	"The copies: for a cpu or cuda task, its baseline source (its local\n"
	"'#include \"X\"' files inlined) under the name of its surface file, built\n"
	"with the default knobs, measured by 'atb measure''s path; for a\n"
	"KernelBench file, the file with every identifier Model renamed to\n"
	"ModelNew (its class and its references), written to\n"
	"runs/calibrate-ID/copies/ and measured by 'atb suite' (static checks,\n"
	"one process per task, --timeout-per-task).  Every result or rejection\n"
	"is stored as usual, labelled 'calibrate copy'; the calibration is a run\n"
	"in the store (proposer 'calibrate', or a suite run for --suite), one row\n"
	"per task.\n"
	"\n"
	"Report, per task: the outcome (usable, or the refusing gate or reason),\n"
	"the speedup with its interval, whether the interval contains 1, and the\n"
	"reason of a refusal.  In total:\n"
	"  admitted        admitted / tasks, Wilson interval\n"
	"  coverage        admitted intervals that contain 1 / admitted, Wilson\n"
	"                  interval (the protocol's stats.ci_level, like the\n"
	"                  speedups' intervals)\n"
	"  of the seeds    the same count for the seeds' bootstrap intervals\n"
	"                  alone, before the protocol's stats.resolution_rel\n"
	"                  (version 10 on) widened them: what the resolution added\n"
	"  median |s-1|    the median of |speedup - 1| over the admitted, and the\n"
	"                  largest\n"
	"  false refusals  refused / tasks, and by reason: every refusal of a copy\n"
	"                  is false\n"
	"and the verdict, 'pass: ...' or 'fail: ...', against the targets\n"
	"(defaults: issue 15's 'done when').\n"
	"\n"
	"options:\n"
	"  --min-admitted R     target admitted rate (default 0.98); < 0: not checked\n"
	"  --min-coverage R     target coverage (default 0.90); < 0: not checked\n"
	"  --max-median-dev R   target median |speedup - 1| (default 0.003); < 0: not\n"
	"                       checked\n"
	"  --seeds N            paired seeds per task (default and minimum: the\n"
	"                       protocol's stats.min_paired_seeds)\n"
	"  --seed S             the first paired seed, an integer >= 0 (default 0)\n"
	"  --filter GLOB        (--suite) only tasks whose relative path or file name\n"
	"                       matches\n"
	"  --python PY          (--suite) the interpreter with PyTorch\n"
	"  --device cuda|cpu    (--suite) where tensors live (default: cuda when torch\n"
	"                       sees a GPU)\n"
	"  --timeout-per-task S (--suite) seconds one task may take (the suite's default)\n"
	"  --resume RUN_ID      continue an interrupted calibration (or show a done one),\n"
	"                       here or on another machine: copy the store's files\n"
	"                       (STORE, STORE-wal when there, STORE.audit.jsonl) and\n"
	"                       the runs folder there, anywhere; give --runs-dir when\n"
	"                       the runs folder is not runs/ beside the store, and for\n"
	"                       --suite the suite folder (--suite DIR) and the\n"
	"                       interpreter (--python) when they moved.  The copies\n"
	"                       are found in the runs folder; each KernelBench task\n"
	"                       still to run is matched by the SHA-256 of its file as\n"
	"                       planned (a changed one is refused, naming it); done\n"
	"                       copies are not measured again, the one in progress\n"
	"                       when it was killed is (docs/calibrate.md, \"Resuming\n"
	"                       elsewhere\")\n"
	"  --allow-other-box    (--resume) go on on a box other than the run's: each\n"
	"                       copy keeps its own box and the report says the run\n"
	"                       spans boxes (refused without it)\n"
	"  --runs-dir DIR       where copies and builds go (default: runs/ beside the\n"
	"                       store)\n"
	"  --runner PATH        the atb-runner binary (default: next to atb)\n"
	"  --quiet              no progress line\n"
	"  --json               the report as JSON on stdout (also 'atb --json calibrate')\n"
	"  -h, --help           this text\n"
	"\n"
	"Progress goes to stderr, a line per task: task k/N, its phase, the last\n"
	"outcome, admitted so far and an ETA.  The store is --db PATH, $ATB_DB or\n"
	"./atb.db (created when absent).\n"
	"exit codes: 0 it ran and every target is met (refusals are reported, not\n"
	"errors); 1 it ran and a target is missed; 2 bad usage, no such task,\n"
	"folder or run, a task of another kind, cuda work on a box with no CUDA\n"
	"driver (refused before anything is stored); 3 store, i/o or system failure\n"
	"(resumable); 130 interrupted (resumable)\n";

static void progress(void *vctx, const struct atb_calibrate_progress *p)
{
	char tail[64];
	struct cli_progress_line l = {.unit = "task", .k = p->k + 1, .n = p->ntasks,
				      .name = p->task, .phase = p->phase,
				      .outcome = p->last_outcome, .tail = tail, .eta_s = p->eta_s};

	if (p->covered >= 0)
		snprintf(tail, sizeof(tail), "admitted %" PRId64 "/%" PRId64 "  covers 1 %" PRId64,
			 p->admitted, p->done, p->covered);
	else
		snprintf(tail, sizeof(tail), "admitted %" PRId64 "/%" PRId64, p->admitted, p->done);
	cli_progress_draw(vctx, &l);
}

static int parse_num(const char *opt, const char *v, double lo, double hi, double *out)
{
	char *end = NULL;
	double x;

	errno = 0;
	x = strtod(v, &end);
	if (!*v || *end || errno || !isfinite(x) || x < lo || x > hi)
		return cli_usage_error("calibrate", "bad %s '%s': expected a number from %g to %g",
				       opt, v, lo, hi);
	*out = x;
	return 0;
}

static json_t *num_or_null(int has, double x)
{
	return has ? json_real(x) : json_null();
}

static int print_json(const struct atb_calibrate_report *r, const struct atb_calibrate_targets *t,
		      const struct atb_calibrate_verdict *v)
{
	const struct atb_calibrate_summary *s = &r->summary;
	json_t *o, *tasks = json_array(), *refusals = json_object();
	size_t i;

	for (i = 0; tasks && i < r->nrows; i++) {
		const struct atb_calibrate_row *w = &r->rows[i];

		json_array_append_new(
			tasks,
			json_pack("{s:I, s:s, s:s, s:s, s:b, s:o, s:o, s:o, s:o, s:o, s:f, s:o, s:o}",
				  "k", (json_int_t)w->k, "task", w->task, "kind", w->kind,
				  "outcome", w->outcome, "admitted", w->admitted, "speedup",
				  num_or_null(w->admitted, w->speedup), "ci_low",
				  num_or_null(w->admitted, w->ci_low), "ci_high",
				  num_or_null(w->admitted, w->ci_high), "covers_1",
				  w->admitted ? json_boolean(w->covers) : json_null(), "reason",
				  w->reason[0] ? json_string(w->reason) : json_null(), "wall_s",
				  w->wall_s, "result_id",
				  w->result_id > 0 ? json_integer(w->result_id) : json_null(),
				  "rejection_id",
				  w->rejection_id > 0 ? json_integer(w->rejection_id) : json_null()));
		if (w->admitted && json_array_size(tasks))
			json_object_set_new(json_array_get(tasks, json_array_size(tasks) - 1),
					    "bootstrap_interval",
					    json_pack("[f,f]", w->boot_low, w->boot_high));
	}
	for (i = 0; refusals && i < s->nrefusals; i++)
		json_object_set_new(refusals, s->refusals[i].reason,
				    json_pack("{s:I, s:f}", "count", (json_int_t)s->refusals[i].count,
					      "rate", s->refusals[i].rate));
	o = json_pack("{s:s, s:s, s:s, s:o, s:s, s:i, s:I, s:I, s:I, s:b, s:f, s:o, "
		      "s:{s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:o, s:o, s:o, s:o, s:o, s:f, "
		      "s:o}, s:{s:f, s:f, s:f}, s:{s:b, s:b, s:b, s:b, s:s}}",
		      "run", r->run_id, "mode", r->mode, "set", r->set, "copies",
		      r->copies_dir[0] ? json_string(r->copies_dir) : json_null(),
		      "protocol_digest", r->protocol_digest, "protocol_version",
		      r->protocol_version, "paired_seeds", (json_int_t)r->paired_seeds, "planned",
		      (json_int_t)r->planned, "done", (json_int_t)r->nrows, "interrupted",
		      r->interrupted, "wall_s", r->wall_s, "tasks", tasks,
		      "totals", "tasks", (json_int_t)s->ntasks, "admitted", (json_int_t)s->nadmitted,
		      "covered", (json_int_t)s->ncovered, "refused", (json_int_t)s->nrefused,
		      "ci_level", s->ci_level, "admitted_rate", s->admitted_rate, "admitted_ci_low",
		      s->admitted_lo, "admitted_ci_high", s->admitted_hi, "coverage",
		      num_or_null(s->has_coverage, s->coverage), "coverage_ci_low",
		      num_or_null(s->has_coverage, s->coverage_lo), "coverage_ci_high",
		      num_or_null(s->has_coverage, s->coverage_hi), "median_abs_dev",
		      num_or_null(s->has_dev, s->median_abs_dev), "max_abs_dev",
		      num_or_null(s->has_dev, s->max_abs_dev), "false_refusal_rate",
		      s->false_refusal_rate, "refusals", refusals,
		      "targets", "min_admitted", t->min_admitted, "min_coverage", t->min_coverage,
		      "max_median_dev", t->max_median_dev,
		      "verdict", "pass", v->pass, "admitted_ok", v->admitted_ok, "coverage_ok",
		      v->coverage_ok, "median_ok", v->median_ok, "line", v->line);
	if (o) {
		json_t *tot = json_object_get(o, "totals");

		/* PROTO: stats.resolution_rel: what the seeds' bootstrap alone covered */
		json_object_set_new(tot, "covered_bootstrap", json_integer((json_int_t)s->nboot_covered));
		json_object_set_new(tot, "coverage_bootstrap",
				    num_or_null(s->has_coverage, s->boot_coverage));
	}
	if (o) {
		json_t *boxes = json_array();

		for (i = 0; boxes && i < r->nboxes; i++)
			json_array_append_new(boxes, json_string(r->boxes[i]));
		json_object_set_new(o, "boxes", boxes);
	}
	return cli_print_json("calibrate", o);
}

/* A reason on one line of at most size - 1 bytes: newlines and tabs become spaces. */
static const char *one_line(const char *reason, char *buf, size_t size)
{
	size_t i, n = 0;

	for (i = 0; reason[i] && n + 1 < size; i++) {
		char c = reason[i] == '\n' || reason[i] == '\t' ? ' ' : reason[i];

		if (c == ' ' && (n == 0 || buf[n - 1] == ' '))
			continue;
		buf[n++] = c;
	}
	while (n && buf[n - 1] == ' ')
		n--;
	buf[n] = '\0';
	return n ? buf : "-";
}

static void print_table(const struct atb_calibrate_report *r,
			const struct atb_calibrate_verdict *v)
{
	const struct atb_calibrate_summary *s = &r->summary;
	double pct = 100.0 * s->ci_level;
	size_t i;

	printf("calibrate %s: %s, %zu of %" PRId64 " tasks done (protocol v%d, %" PRId64
	       " paired seeds)\n",
	       r->run_id, r->set, r->nrows, r->planned, r->protocol_version, r->paired_seeds);
	if (r->copies_dir[0])
		printf("copies in %s\n", r->copies_dir);
	if (r->nboxes > 1) {
		printf("the run spans %zu boxes:", r->nboxes);
		for (i = 0; i < r->nboxes; i++)
			printf(" %.12s", r->boxes[i]);
		printf(" (each copy's result records its own box; the totals pool them)\n");
	}
	printf("%4s  %-32s %-16s %9s  %-20s %-8s %s\n", "k", "task", "outcome", "speedup",
	       "interval", "covers 1", "reason");
	for (i = 0; i < r->nrows; i++) {
		const struct atb_calibrate_row *w = &r->rows[i];
		char sp[32] = "-", ci[48] = "-", why[240];

		if (w->admitted) {
			snprintf(sp, sizeof(sp), "%.4fx", w->speedup);
			snprintf(ci, sizeof(ci), "[%.4f, %.4f]", w->ci_low, w->ci_high);
		}
		printf("%4" PRId64 "  %-32s %-16s %9s  %-20s %-8s %s\n", w->k, w->task, w->outcome,
		       sp, ci, w->admitted ? (w->covers ? "yes" : "NO") : "-",
		       one_line(w->reason, why, sizeof(why)));
	}
	printf("totals over %zu tasks:\n", s->ntasks);
	printf("  admitted        %zu/%zu = %.1f%% [%.1f%%, %.1f%%]\n", s->nadmitted, s->ntasks,
	       100 * s->admitted_rate, 100 * s->admitted_lo, 100 * s->admitted_hi);
	if (s->has_coverage)
		printf("  coverage        %zu/%zu = %.1f%% [%.1f%%, %.1f%%] of the admitted "
		       "intervals contain 1\n",
		       s->ncovered, s->nadmitted, 100 * s->coverage, 100 * s->coverage_lo,
		       100 * s->coverage_hi);
	else
		printf("  coverage        n/a (no copy admitted)\n");
	if (s->has_coverage)
		printf("  of the seeds    %zu/%zu of the bootstrap intervals alone contain 1 (before "
		       "the protocol's stats.resolution_rel widened them)\n",
		       s->nboot_covered, s->nadmitted);
	if (s->has_dev)
		printf("  median |s-1|    %.3f%% (largest %.3f%%)\n", 100 * s->median_abs_dev,
		       100 * s->max_abs_dev);
	else
		printf("  median |s-1|    n/a (no copy admitted)\n");
	printf("  false refusals  %zu/%zu = %.1f%%", s->nrefused, s->ntasks,
	       100 * s->false_refusal_rate);
	for (i = 0; i < s->nrefusals; i++)
		printf("%s %s %zu", i ? "," : ":", s->refusals[i].reason, s->refusals[i].count);
	printf("\nintervals: %.0f%% (Wilson for the rates)\n", pct);
	printf("%s\n", v->line);
}

int cmd_calibrate(int argc, char **argv, struct cli_ctx *ctx)
{
	struct atb_calibrate_opts o;
	struct atb_calibrate_report rep;
	struct atb_calibrate_targets t = {ATB_CALIBRATE_MIN_ADMITTED, ATB_CALIBRATE_MIN_COVERAGE,
					  ATB_CALIBRATE_MAX_MEDIAN_DEV};
	struct atb_calibrate_verdict v;
	struct cli_progress pc;
	struct atb_error err;
	const char **names = NULL, *resume = NULL;
	size_t nnames = 0;
	int json = ctx->json, quiet = 0, i, rc;
	double x = 0;
	enum atb_status st;

	if (cli_wants_help(argc, argv)) {
		fputs(usage_text, stdout);
		return CLI_OK;
	}
	memset(&o, 0, sizeof(o));
	names = atb_calloc((size_t)argc, sizeof(*names));
	if (!names) {
		fprintf(stderr, "atb calibrate: out of memory\n");
		return CLI_RUNTIME;
	}
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--json")) {
			json = 1;
			continue;
		}
		if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
			quiet = 1;
			continue;
		}
		if (!strcmp(a, "--allow-other-box")) {
			o.allow_other_box = 1;
			continue;
		}
		if (a[0] != '-' || !a[1]) {
			names[nnames++] = a;
			continue;
		}
		if (strcmp(a, "--kind") && strcmp(a, "--suite") && strcmp(a, "--filter") &&
		    strcmp(a, "--python") && strcmp(a, "--device") && strcmp(a, "--seeds") &&
		    strcmp(a, "--seed") && strcmp(a, "--timeout-per-task") && strcmp(a, "--resume") &&
		    strcmp(a, "--runs-dir") && strcmp(a, "--runner") && strcmp(a, "--min-admitted") &&
		    strcmp(a, "--min-coverage") && strcmp(a, "--max-median-dev")) {
			rc = cli_usage_error("calibrate", "unknown option '%s'", a);
			goto out_names;
		}
		if (!val) {
			rc = cli_usage_error("calibrate", "option '%s' needs a value", a);
			goto out_names;
		}
		i++;
		rc = CLI_USAGE;
		if (!strcmp(a, "--kind")) {
			if (strcmp(val, "cpu") && strcmp(val, "cuda")) {
				rc = cli_usage_error("calibrate", "bad --kind '%s': cpu or cuda", val);
				goto out_names;
			}
			o.kind = val;
		} else if (!strcmp(a, "--suite"))
			o.suite_dir = val;
		else if (!strcmp(a, "--filter"))
			o.filter = val;
		else if (!strcmp(a, "--python"))
			o.python = val;
		else if (!strcmp(a, "--device")) {
			if (strcmp(val, "cuda") && strcmp(val, "cpu")) {
				rc = cli_usage_error("calibrate", "bad --device '%s': cuda or cpu", val);
				goto out_names;
			}
			o.device = val;
		} else if (!strcmp(a, "--seeds")) {
			if (cli_parse_int("calibrate", a, val, 1, 100000, &o.paired_seeds))
				goto out_names;
		} else if (!strcmp(a, "--seed")) {
			if (cli_parse_int("calibrate", a, val, 0, INT64_MAX, &o.seed))
				goto out_names;
		} else if (!strcmp(a, "--timeout-per-task")) {
			if (parse_num(a, val, 0.001, 1e7, &x))
				goto out_names;
			o.timeout_per_task_s = x;
		} else if (!strcmp(a, "--resume"))
			resume = val;
		else if (!strcmp(a, "--runs-dir"))
			o.runs_dir = val;
		else if (!strcmp(a, "--runner"))
			o.runner_path = val;
		else if (!strcmp(a, "--min-admitted")) {
			if (parse_num(a, val, -1, 1, &t.min_admitted))
				goto out_names;
		} else if (!strcmp(a, "--min-coverage")) {
			if (parse_num(a, val, -1, 1, &t.min_coverage))
				goto out_names;
		} else if (parse_num(a, val, -1, 1e6, &t.max_median_dev))
			goto out_names;
	}
	o.tasks = names;
	o.ntasks = nnames;
	if (resume && (o.kind || nnames)) {
		rc = cli_usage_error("calibrate", "give a task set or --resume RUN_ID, not both");
		goto out_names;
	}
	if (resume && (o.filter || o.device || o.timeout_per_task_s)) {
		rc = cli_usage_error("calibrate", "--filter, --device and --timeout-per-task are "
				     "the stored plan's on --resume");
		goto out_names;
	}
	if (!resume && o.allow_other_box) {
		rc = cli_usage_error("calibrate", "--allow-other-box is for --resume");
		goto out_names;
	}
	if (!resume && !o.kind && !nnames && !o.suite_dir) {
		rc = cli_usage_error("calibrate", "no task set: give --kind cpu|cuda, TASK... or "
				     "--suite DIR");
		goto out_names;
	}
	if (!resume && !!o.kind + !!nnames + !!o.suite_dir > 1) {
		rc = cli_usage_error("calibrate", "give one task set: --kind, TASK... or --suite, "
				     "not several");
		goto out_names;
	}
	if (!o.suite_dir && !resume && (o.filter || o.python || o.device || o.timeout_per_task_s)) {
		rc = cli_usage_error("calibrate", "--filter, --python, --device and "
				     "--timeout-per-task are for --suite");
		goto out_names;
	}

	if (!resume && ((o.kind && !strcmp(o.kind, "cuda")) ||
			(o.device && !strcmp(o.device, "cuda"))) &&
	    (rc = cli_need_cuda_driver("calibrate", o.kind ? "--kind cuda" : "--device cuda")))
		goto out_names;

	atb_error_clear(&err);
	cli_progress_init(&pc, quiet);
	o.progress = progress;
	o.progress_ctx = &pc;
	o.stop = cli_stop_catch();
	if (resume)
		st = atb_calibrate_resume(ctx->db_path, resume, &o, &rep, &err);
	else
		st = atb_calibrate_start(ctx->db_path, &o, &rep, &err);
	cli_stop_restore();
	cli_progress_end(&pc);
	if (st) {
		rc = cli_fail(&err);
		if (rep.run_id[0])
			fprintf(stderr, "atb: calibration %s stopped after %zu of %" PRId64 " tasks; "
				"continue it with 'atb calibrate --resume %s'\n",
				rep.run_id, rep.nrows, rep.planned, rep.run_id);
		atb_calibrate_report_release(&rep);
		goto out_names;
	}
	atb_calibrate_judge(&rep.summary, &t, &v);
	if (json)
		rc = print_json(&rep, &t, &v);
	else {
		print_table(&rep, &v);
		rc = CLI_OK;
	}
	if (!rc && !v.pass)
		rc = CLI_CHECK_FAILED;
	if (rep.interrupted) {
		fprintf(stderr, "atb: calibration %s interrupted after %zu of %" PRId64 " tasks; "
			"continue it with 'atb calibrate --resume %s'\n",
			rep.run_id, rep.nrows, rep.planned, rep.run_id);
		rc = 130;
	}
	atb_calibrate_report_release(&rep);
out_names:
	atb_free(names);
	return rc;
}
