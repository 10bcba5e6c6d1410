/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb suite: a KernelBench-format task set measured task by task against
 * the protocol's kernelbench bars (include/atb/suite.h), with a progress
 * line on stderr, Ctrl-C handling and --resume.  A thin layer over
 * atb_suite_start / atb_suite_resume; the help text below is the command's
 * documentation (docs/suite.md says the same at more length).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "atb/suite.h"
#include "cli.h"
#include "banned.h"

static const char usage_text[] =
	"usage: atb suite DIR --candidates DIR [--filter GLOB] [--python PY]\n"
	"                 [--device cuda|cpu] [--baseline eager|compile] [--seeds N]\n"
	"                 [--seed S] [--timeout-per-task S] [--runs-dir DIR]\n"
	"                 [--runner PATH] [--quiet] [--json]\n"
	"       atb suite --resume RUN_ID [--suite DIR] [--candidates DIR] [--python PY]\n"
	"                 [--runs-dir DIR] [--allow-other-box] [--runner PATH] [--quiet]\n"
	"                 [--json]\n"
	"\n"
	"Measure a KernelBench-format task set: every DIR/NN_Name.py and\n"
	"DIR/SUB/NN_Name.py (a PyTorch reference: class Model, get_inputs(),\n"
	"get_init_inputs(); SUB 'candidates' is skipped) against its candidate,\n"
	"CANDIDATES/NN_Name.py or CANDIDATES/SUB/NN_Name.py (class ModelNew with\n"
	"Model's interface).  atb's own tasks are in tasks/kernelbench/ (level1),\n"
	"with copy-the-reference candidates in tasks/kernelbench/candidates/copy;\n"
	"point DIR at a KernelBench checkout's KernelBench/ folder for theirs.\n"
	"\n"
	"Each task, in order, in a process of its own:\n"
	"  1. static checks, atb measure's first gate (python/atb_static.py,\n"
	"     Python's ast module, run with the interpreter PY): syntax_error,\n"
	"     no_modelnew, fallback_to_reference (try/except falling back to\n"
	"     torch, ModelNew subclassing or naming Model), dynamic_code (exec,\n"
	"     eval, __import__, importlib, ctypes, C++ calling into Python),\n"
	"     reflection (gc, inspect, sys.modules, frames, __subclasses__,\n"
	"     globals(), getattr with a computed name, assignments into torch)\n"
	"     and unanalysable refuse the candidate, stored as a rejection\n"
	"     'gate:static'; calls_replaced_op (the candidate calls a torch op\n"
	"     the reference's forward uses) only annotates.  Every finding is in\n"
	"     the audit chain ('measure.static') and in the table.\n"
	"  2. atb measure's whole path: fresh atb-runner processes (torch backend),\n"
	"     correctness on the task's inputs and the protocol's signed, normal,\n"
	"     large and tiny variants, paired seeds against PyTorch eager, every\n"
	"     gate, the store's validator.\n"
	"A task is killed with every process under it after --timeout-per-task\n"
	"seconds (outcome 'timeout', a rejection 'gate:runner'); a task without a\n"
	"candidate is 'no_candidate'.  Both count as incorrect; the suite goes on.\n"
	"\n"
	"Outcomes per task: usable (correct, measured, admitted), quarantined\n"
	"(10x or more: held for 'atb review'), static, no_candidate, timeout,\n"
	"task_error (the reference did not load), or the refusing gate (build,\n"
	"runner, correctness, input_mutation, result_reuse, side_stream,\n"
	"physical_floor, noise, baseline_drift) or store rule (rejected:RULE).\n"
	"Correct: usable, quarantined, noise, baseline_drift and rejected:RULE\n"
	"(correctness passed, the timing was refused).\n"
	"\n"
	"Totals, over ALL tasks of the suite (the protocol's kernelbench section):\n"
	"  correct rate     correct / tasks, Wilson interval, vs correct_rate_bar\n"
	"  fast_p           (admitted and speedup > p) / tasks for each p of the\n"
	"                   protocol's fast_p list (0, 1, 1.2, 2): incorrect,\n"
	"                   refused, missing and unadmitted tasks are not fast\n"
	"  median speedup   of the admitted tasks' speedups over PyTorch eager,\n"
	"                   percentile bootstrap interval, vs median_speedup_bar\n"
	"  geomean speedup  the same for the geometric mean\n"
	"Each is printed with 'meets' (the point value reaches the bar) and the\n"
	"interval's verdict: above (its low end reaches the bar), below (its high\n"
	"end is under it) or undecided.\n"
	"\n"
	"The suite is a run in the store (proposer 'suite'): one iteration row per\n"
	"task, written when the task ends, and its plan in the audit entry\n"
	"'suite.plan'.  Ctrl-C stops the task in progress without recording it\n"
	"(a second Ctrl-C or SIGTERM stops at once, as SIGKILL would);\n"
	"'atb suite --resume RUN_ID' skips the done tasks and continues under the\n"
	"stored plan, protocol and box.  'atb report RUN_ID' lists the rows too.\n"
	"\n"
	"Resuming on another machine: copy the store's files (STORE, STORE-wal\n"
	"when there: after a kill the last rows may be only in it, and the audit\n"
	"mirror STORE.audit.jsonl) and the runs folder there, anywhere.  The runs\n"
	"folder is runs/ beside the store unless --runs-dir says; the suite\n"
	"folder, the candidates folder and the interpreter are the stored ones\n"
	"unless --suite, --candidates and --python say where they are now (a\n"
	"calibration's copies are found in the runs folder).  Each task still to\n"
	"run is matched by the SHA-256 of its file and of its candidate as\n"
	"planned: a changed file is refused, naming it (exit 2), a moved task is\n"
	"found by its content.  The task that was in progress when the machine\n"
	"was lost left no row: it is measured again from a clean folder.  A\n"
	"resume is an audit entry 'suite.resume'.  A box other than the run's is\n"
	"refused unless --allow-other-box: each task's jobs keep their own box,\n"
	"and the report lists the run's boxes ('the run spans 2 boxes').\n"
	"\n"
	"options:\n"
	"  --candidates DIR       the candidates folder (required to start)\n"
	"  --filter GLOB          only tasks whose relative path or file name\n"
	"                         matches (fnmatch), e.g. 'level1/0[125]_*'\n"
	"  --python PY            the interpreter with PyTorch (default: $ATB_PYTHON,\n"
	"                         else python3)\n"
	"  --device cuda|cpu      where tensors live (default: cuda when torch sees a\n"
	"                         GPU, else cpu).  On cuda get_inputs() runs with the\n"
	"                         GPU as torch's default device (same seed and\n"
	"                         distribution as on the CPU, not the same numbers),\n"
	"                         falling back to the CPU path where the task pins\n"
	"                         the CPU or raises; each task's inputs_on (--json)\n"
	"                         says which (docs/torch.md, \"Inputs\")\n"
	"  --baseline eager|compile\n"
	"                         eager (default): speedups over PyTorch eager.\n"
	"                         compile: also time torch.compile(Model) (the\n"
	"                         reference, same seeded weights, mode default)\n"
	"                         as a third arm in the same interleaved rounds\n"
	"                         of the paired runner, labelled, never the\n"
	"                         headline (eager stays the baseline of record).\n"
	"                         Its first call (the compilation: tens of\n"
	"                         seconds per model on a CPU) runs before any\n"
	"                         check or timed trial and is reported as\n"
	"                         compile_s, not timed; its outputs are checked\n"
	"                         against eager with the protocol's tolerances.\n"
	"                         A model that does not compile or differs gets\n"
	"                         no compile speedup, with the reason in the row\n"
	"                         (the candidate's verdict is not affected).  Per\n"
	"                         task: 'vs compile' = compiled median / the\n"
	"                         candidate's (geomean of per-seed ratios) with\n"
	"                         its CI; totals: 'median vs compile' over the\n"
	"                         admitted tasks with one, bootstrap CI, against\n"
	"                         kernelbench.median_speedup_bar\n"
	"  --seeds N              paired seeds per task (default and minimum: the\n"
	"                         protocol's stats.min_paired_seeds)\n"
	"  --seed S               the first paired seed and the bootstrap seed, an\n"
	"                         integer >= 0 (default 0)\n"
	"  --timeout-per-task S   seconds one task may take, all of it (default 1800)\n"
	"  --resume RUN_ID        continue an interrupted suite (here or on another\n"
	"                         machine, see above)\n"
	"  --suite DIR            (--resume) the suite folder on this machine\n"
	"  --allow-other-box      (--resume) go on on a box other than the run's\n"
	"  --runs-dir DIR         where candidate folders go (default: runs/ beside\n"
	"                         the store)\n"
	"  --runner PATH          the atb-runner binary (default: next to atb)\n"
	"  --quiet                no progress line\n"
	"  --json                 the report as JSON on stdout (also 'atb --json suite')\n"
	"  -h, --help             this text\n"
	"\n"
	"Progress goes to stderr: task k/N, its phase, the last outcome, correct so\n"
	"far and an ETA from the mean task time.  The store is --db PATH, $ATB_DB\n"
	"or ./atb.db (created when absent).\n"
	"exit codes: 0 the suite finished (whatever its outcomes and bars); 2 bad\n"
	"usage, no such folder or run, no task matches, a suite of another box, a\n"
	"task or candidate changed since the suite was planned, --device cuda on a\n"
	"box with no CUDA driver (nothing stored);\n"
	"3 store, i/o or system failure (the suite stays resumable); 130\n"
	"interrupted (resumable)\n";

static void progress(void *vctx, const struct atb_suite_progress *p)
{
	char tail[64];
	struct cli_progress_line l = {.unit = "task", .k = p->k + 1, .n = p->ntasks,
				      .name = p->task, .phase = p->phase,
				      .outcome = p->last_outcome, .tail = tail, .eta_s = p->eta_s};

	snprintf(tail, sizeof(tail), "correct %" PRId64 "/%" PRId64, p->correct, p->done);
	cli_progress_draw(vctx, &l);
}

static int parse_num(const char *opt, const char *v, double lo, double hi, double *out)
{
	char *end = NULL;
	double x;

	errno = 0;
	x = strtod(v, &end);
	if (!*v || *end || errno || !isfinite(x) || x < lo || x > hi)
		return cli_usage_error("suite", "bad %s '%s': expected a number from %g to %g", opt,
				       v, lo, hi);
	*out = x;
	return 0;
}

static json_t *stat_json(const struct atb_suite_stat *s)
{
	if (!s->has)
		return json_null();
	return json_pack("{s:f, s:f, s:f, s:f, s:b, s:s}", "value", s->value, "ci_low", s->lo,
			 "ci_high", s->hi, "bar", s->bar, "meets", s->meets, "ci_verdict",
			 s->ci_verdict);
}

static int print_json(const struct atb_suite_report *r)
{
	const struct atb_suite_stats *st = &r->stats;
	json_t *o, *tasks = json_array(), *fast = json_array();
	size_t i;

	for (i = 0; tasks && i < r->nrows; i++) {
		const struct atb_suite_row *w = &r->rows[i];
		int cs = w->compile_speedup > 0;
		json_t *t;

		json_array_append_new(
			tasks, t = json_pack("{s:I, s:s, s:s, s:s, s:b, s:b, s:o, s:o, s:o, s:s, s:s, "
					 "s:f, s:I, s:I}",
					 "k", (json_int_t)w->k, "task", w->task, "candidate",
					 w->candidate, "outcome", w->outcome, "correct", w->correct,
					 "admitted", w->admitted, "speedup",
					 w->admitted ? json_real(w->speedup) : json_null(), "ci_low",
					 w->admitted ? json_real(w->ci_low) : json_null(), "ci_high",
					 w->admitted ? json_real(w->ci_high) : json_null(), "findings",
					 w->findings, "reason", w->reason, "wall_s", w->wall_s,
					 "result_id", (json_int_t)w->result_id, "rejection_id",
					 (json_int_t)w->rejection_id));
		if (t)
			json_object_update_new(
				t, json_pack("{s:s, s:o, s:o, s:o, s:o, s:o}", "inputs_on",
					     w->inputs_on, "compile_speedup",
					     cs ? json_real(w->compile_speedup) : json_null(),
					     "compile_ci_low",
					     cs ? json_real(w->compile_ci_low) : json_null(),
					     "compile_ci_high",
					     cs ? json_real(w->compile_ci_high) : json_null(),
					     "compile_s",
					     w->compile_s > 0 ? json_real(w->compile_s) : json_null(),
					     "compile_why",
					     w->compile_why[0] ? json_string(w->compile_why)
							       : json_null()));
	}
	for (i = 0; fast && i < st->nfast_p; i++) {
		json_t *f = stat_json(&st->fast_p[i]);

		if (json_is_object(f)) {
			json_object_set_new(f, "p", json_real(st->fast_p_threshold[i]));
			json_object_set_new(f, "count", json_integer((json_int_t)st->fast_p_count[i]));
		}
		json_array_append_new(fast, f);
	}
	o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:f, s:I, s:I, s:I, s:b, "
		      "s:o, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:f, s:i, "
		      "s:I}}",
		      "run", r->run_id, "suite", r->suite_dir, "candidates", r->candidates_dir,
		      "filter", r->filter, "device", r->device, "baseline", r->baseline, "python",
		      r->python, "protocol_digest", r->protocol_digest, "protocol_version",
		      r->protocol_version, "timeout_per_task_s", r->timeout_per_task_s,
		      "paired_seeds", (json_int_t)r->paired_seeds, "planned", (json_int_t)r->ntasks,
		      "done", (json_int_t)r->nrows, "interrupted", r->interrupted, "tasks", tasks,
		      "totals", "tasks", (json_int_t)st->ntasks, "correct", (json_int_t)st->ncorrect,
		      "admitted", (json_int_t)st->nadmitted, "static_refused",
		      (json_int_t)st->nstatic, "no_candidate", (json_int_t)st->nmissing, "timeout",
		      (json_int_t)st->ntimeout, "correct_rate", stat_json(&st->correct_rate),
		      "fast_p", fast, "median_speedup", stat_json(&st->median_speedup),
		      "geomean_speedup", stat_json(&st->geomean_speedup), "median_compile_speedup",
		      stat_json(&st->median_compile), "ci_level", st->ci_level,
		      "bootstrap_resamples", st->bootstrap_resamples, "bootstrap_seed",
		      (json_int_t)st->bootstrap_seed);
	if (o) {
		json_t *boxes = json_array();

		for (i = 0; boxes && i < r->nboxes; i++)
			json_array_append_new(boxes, json_string(r->boxes[i]));
		json_object_set_new(o, "boxes", boxes);
	}
	return cli_print_json("suite", o);
}

static void print_stat(const char *name, const struct atb_suite_stat *s, int percent,
		       const char *barname)
{
	double f = percent ? 100.0 : 1.0;
	const char *u = percent ? "%" : "x";

	if (!s->has) {
		printf("  %-16s n/a (nothing to compute it from)\n", name);
		return;
	}
	printf("  %-16s %.4g%s [%.4g%s, %.4g%s]", name, s->value * f, u, s->lo * f, u, s->hi * f,
	       u);
	if (barname && s->bar > 0)
		printf("  %s %.4g%s: %s, interval %s", barname, s->bar * f, u,
		       s->meets ? "meets" : "misses", s->ci_verdict);
	printf("\n");
}

static int print_table(const struct atb_suite_report *r)
{
	const struct atb_suite_stats *st = &r->stats;
	int compile = !strcmp(r->baseline, "compile");
	size_t i;

	printf("suite %s: %s, %" PRId64 " of %" PRId64 " tasks done (protocol v%d, device %s, "
	       "baseline %s, %" PRId64 " paired seeds)\n",
	       r->run_id, r->suite_dir, (int64_t)r->nrows, r->ntasks, r->protocol_version,
	       r->device, r->baseline, r->paired_seeds);
	if (r->nboxes > 1) {
		printf("the run spans %zu boxes:", r->nboxes);
		for (i = 0; i < r->nboxes; i++)
			printf(" %.12s", r->boxes[i]);
		printf(" (each task's result records its own box; the totals pool them)\n");
	}
	printf("%4s  %-32s %-16s %9s  %-20s %s\n", "k", "task", "outcome", "speedup", "95% CI",
	       "findings");
	for (i = 0; i < r->nrows; i++) {
		const struct atb_suite_row *w = &r->rows[i];
		char sp[32] = "-", ci[48] = "-";

		if (w->admitted) {
			snprintf(sp, sizeof(sp), "%.4fx", w->speedup);
			snprintf(ci, sizeof(ci), "[%.4f, %.4f]", w->ci_low, w->ci_high);
		}
		printf("%4" PRId64 "  %-32s %-16s %9s  %-20s %s\n", w->k, w->task, w->outcome, sp, ci,
		       w->findings[0] ? w->findings : "-");
		/* why it was refused, with the numbers the gate judged, in the table */
		if (!w->admitted && w->reason[0])
			printf("      why: %s\n", w->reason);
		if (compile && w->compile_speedup > 0)
			printf("      vs compile %.4fx [%.4f, %.4f] (compiled in %.1f s, not timed)\n",
			       w->compile_speedup, w->compile_ci_low, w->compile_ci_high,
			       w->compile_s);
		else if (compile && w->compile_why[0])
			printf("      vs compile n/a: %s\n", w->compile_why);
	}
	printf("totals over %zu tasks (%zu correct, %zu admitted, %zu refused by static checks, "
	       "%zu without a candidate, %zu timed out):\n",
	       st->ntasks, st->ncorrect, st->nadmitted, st->nstatic, st->nmissing, st->ntimeout);
	print_stat("correct rate", &st->correct_rate, 1, "bar");
	for (i = 0; i < st->nfast_p; i++) {
		char name[32];

		snprintf(name, sizeof(name), "fast_%g", st->fast_p_threshold[i]);
		print_stat(name, &st->fast_p[i], 1, NULL);
	}
	print_stat("median speedup", &st->median_speedup, 0, "bar");
	print_stat("geomean speedup", &st->geomean_speedup, 0, NULL);
	if (compile)
		print_stat("median vs compile", &st->median_compile, 0, "bar");
	printf("intervals: %.0f%%; speedups over PyTorch eager of the admitted tasks, bootstrap "
	       "of %d resamples, seed %" PRIu64 "\n",
	       st->ci_level * 100, st->bootstrap_resamples, st->bootstrap_seed);
	return CLI_OK;
}

int cmd_suite(int argc, char **argv, struct cli_ctx *ctx)
{
	struct atb_suite_opts o;
	struct atb_suite_report rep;
	struct cli_progress pc;
	int quiet = 0;
	struct atb_error err;
	const char *dir = NULL, *resume = NULL;
	int json = ctx->json, i, rc;
	double x = 0;
	enum atb_status st;

	if (cli_wants_help(argc, argv)) {
		fputs(usage_text, stdout);
		return CLI_OK;
	}
	memset(&o, 0, sizeof(o));
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

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
			if (dir)
				return cli_usage_error("suite", "unexpected argument '%s'", a);
			dir = a;
			continue;
		}
		if (strcmp(a, "--candidates") && strcmp(a, "--filter") && strcmp(a, "--python") &&
		    strcmp(a, "--device") && strcmp(a, "--baseline") && strcmp(a, "--seeds") &&
		    strcmp(a, "--seed") && strcmp(a, "--timeout-per-task") && strcmp(a, "--resume") &&
		    strcmp(a, "--runs-dir") && strcmp(a, "--runner") && strcmp(a, "--suite"))
			return cli_usage_error("suite", "unknown option '%s'", a);
		if (!v)
			return cli_usage_error("suite", "option '%s' needs a value", a);
		i++;
		if (!strcmp(a, "--candidates"))
			o.candidates_dir = v;
		else if (!strcmp(a, "--filter"))
			o.filter = v;
		else if (!strcmp(a, "--python"))
			o.python = v;
		else if (!strcmp(a, "--device")) {
			if (strcmp(v, "cuda") && strcmp(v, "cpu"))
				return cli_usage_error("suite", "bad --device '%s': cuda or cpu", v);
			o.device = v;
		} else if (!strcmp(a, "--baseline")) {
			if (strcmp(v, "eager") && strcmp(v, "compile"))
				return cli_usage_error("suite", "bad --baseline '%s': eager or compile",
						       v);
			o.baseline = v;
		} else if (!strcmp(a, "--seeds")) {
			if (cli_parse_int("suite", a, v, 1, 100000, &o.paired_seeds))
				return CLI_USAGE;
		} else if (!strcmp(a, "--seed")) {
			if (cli_parse_int("suite", a, v, 0, INT64_MAX, &o.seed))
				return CLI_USAGE;
		} else if (!strcmp(a, "--timeout-per-task")) {
			if (parse_num(a, v, 0.001, 1e7, &x))
				return CLI_USAGE;
			o.timeout_per_task_s = x;
		} else if (!strcmp(a, "--resume"))
			resume = v;
		else if (!strcmp(a, "--runs-dir"))
			o.runs_dir = v;
		else if (!strcmp(a, "--suite"))
			o.suite_dir = v;
		else
			o.runner_path = v;
	}
	if (!resume && (o.suite_dir || o.allow_other_box))
		return cli_usage_error("suite", "--suite and --allow-other-box are for --resume "
				       "(to start, the suite folder is DIR)");
	if (resume && dir)
		return cli_usage_error("suite", "give DIR or --resume RUN_ID, not both");
	if (!resume && !dir)
		return cli_usage_error("suite", "missing DIR (or --resume RUN_ID)");
	if (!resume && !o.candidates_dir)
		return cli_usage_error("suite", "missing --candidates DIR");
	if (!resume && o.device && !strcmp(o.device, "cuda") &&
	    cli_need_cuda_driver("suite", "--device cuda"))
		return CLI_USAGE;

	atb_error_clear(&err);
	cli_progress_init(&pc, quiet);
	o.progress = progress;
	o.progress_ctx = &pc;
	o.stop = cli_stop_catch();

	if (resume)
		st = atb_suite_resume(ctx->db_path, resume, &o, &rep, &err);
	else
		st = atb_suite_start(ctx->db_path, dir, &o, &rep, &err);

	cli_stop_restore();
	cli_progress_end(&pc);
	if (st) {
		rc = cli_fail(&err);
		if (rep.run_id[0])
			fprintf(stderr, "atb: suite %s stopped after %zu of %" PRId64 " tasks; "
				"continue it with 'atb suite --resume %s'\n",
				rep.run_id, rep.nrows, rep.ntasks, rep.run_id);
		atb_suite_report_release(&rep);
		return rc;
	}
	rc = json ? print_json(&rep) : print_table(&rep);
	if (rep.interrupted) {
		fprintf(stderr, "atb: suite %s interrupted after %zu of %" PRId64 " tasks; "
			"continue it with 'atb suite --resume %s'\n",
			rep.run_id, rep.nrows, rep.ntasks, rep.run_id);
		rc = 130;
	}
	atb_suite_report_release(&rep);
	return rc;
}
