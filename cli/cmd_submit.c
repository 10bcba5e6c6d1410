/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb submit: an outside agent hands in one candidate and gets the verdict
 * as JSON.  It is atb measure (cli_measure, the same options, checks, gates,
 * audit and store) with the verdict always as JSON and, with --run, the
 * outcome stored as the next iteration of an agent run (atb/loop.h), which
 * atb report shows like any run.
 *
 * Does not: judge anything itself (measure's path does), or write the
 * candidate (the agent's folder or file is measured where it is).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "atb/atb.h"
#include "atb/box.h"
#include "atb/loop.h"
#include "atb/measure.h"
#include "atb/protocol.h"
#include "atb/store.h"
#include "atb/task.h"
#include "cli.h"
#include "banned.h"

static const char submit_help[] =
	"usage: atb submit TASK CANDIDATE [--run RUN_ID [--iterations N]]\n"
	"                  [atb measure's options: --knob, --cflags, --seeds, --seed-base,\n"
	"                   --naive | --no-naive, --label, --python, --device, --baseline,\n"
	"                   --work-dir]\n"
	"\n"
	"Hand in one candidate for TASK and get the verdict as JSON on stdout:\n"
	"an outside agent's way in (docs/serve.md; 'atb serve --stdio' offers the\n"
	"same as a tool).  TASK and CANDIDATE are what atb measure takes: a bundled\n"
	"task name or a task folder (kind cpu or cuda) with a folder holding only\n"
	"its surface files, or a KernelBench-format TASK.py with a file or folder\n"
	"defining class ModelNew.  The candidate goes through atb measure's one\n"
	"path: the same surface, static, build, runner and result gates, the same\n"
	"store and audit chain, the same JSON verdict ('atb measure --help' lists\n"
	"the gates and options; a bad option's message names atb measure).\n"
	"\n"
	"options:\n"
	"  --run RUN_ID     record the outcome as the next iteration of the agent\n"
	"                   run RUN_ID (1-64 of [0-9a-zA-Z-]), which 'atb report\n"
	"                   RUN_ID' then shows.  A new id starts the run (proposer\n"
	"                   agent) with this box, the current protocol and this\n"
	"                   submission's --seeds, --seed-base and naive setting,\n"
	"                   which every later submission to it is measured with\n"
	"                   (giving others is refused).  Only an agent run of the\n"
	"                   same task, protocol and box takes submissions\n"
	"  --iterations N   a new run's planned iterations (default 100; 1 to\n"
	"                   100000): a run takes that many submissions\n"
	"  -h, --help       this text\n"
	"\n"
	"output: atb measure's --json verdict (verdict, gate, reason, speedup,\n"
	"ci_low, ci_high, result_id or rejection_id, ...) and, with --run, \"run\",\n"
	"\"iteration\" (its k, from 0), \"outcome\" (usable or why not, as atb\n"
	"report counts it) and \"usable\".  Progress and errors go to stderr.\n"
	"\n"
	"exit codes: as atb measure: 0 admitted or quarantined; 2 rejected by a\n"
	"gate, or bad usage (a run of another task, proposer, protocol or box; a\n"
	"run with every iteration done); 3 runtime failure; 4 internal error\n";

#define SUBMIT_DEFAULT_ITERATIONS 100

struct submit {
	const char *run_id;          /* NULL: no run */
	int64_t iterations;
	int iterations_given, seeds_given, seed_base_given, naive_given;
	struct atb_run_row run;
	char label[128];
	int64_t t0_ns;
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int before(void *arg, struct atb_store *s, const struct atb_protocol *p,
		  const struct atb_task *task, const char *task_arg, const struct atb_box *box,
		  struct atb_measure_opts *o)
{
	struct submit *S = arg;
	struct atb_loop_agent_plan plan;
	struct atb_error err;
	char ref[sizeof(S->run.task)];
	int created = 0;

	(void)task;
	S->t0_ns = now_ns();
	if (!S->run_id)
		return CLI_OK;
	atb_error_clear(&err);
	if (atb_loop_task_ref(task_arg, ref, sizeof(ref), &err))
		return cli_fail(&err);
	memset(&plan, 0, sizeof(plan));
	plan.iterations = S->iterations;
	plan.seed = (int64_t)o->seed_base;
	plan.paired_seeds = o->nseeds ? (int64_t)o->nseeds : p->stats.min_paired_seeds;
	plan.naive = o->with_naive;
	if (atb_loop_agent_run(s, p, S->run_id, ref, box, &plan, &S->run, &created, &err))
		return cli_fail(&err);
	if (!created) {
		/* a run measures every iteration alike: its plan, not this call's */
		if (S->seeds_given && (int64_t)o->nseeds != S->run.paired_seeds)
			return cli_usage_error("submit", "run '%s' measures on %" PRId64 " paired "
					       "seeds, not %zu: leave --seeds out", S->run.id,
					       S->run.paired_seeds, o->nseeds);
		if (S->seed_base_given && (int64_t)o->seed_base != S->run.seed)
			return cli_usage_error("submit", "run '%s' has seed base %" PRId64 ", not "
					       "%" PRIu64 ": leave --seed-base out", S->run.id,
					       S->run.seed, o->seed_base);
		if (S->naive_given && !o->with_naive != !S->run.naive)
			return cli_usage_error("submit", "run '%s' times the naive baseline %s: "
					       "leave --naive and --no-naive out", S->run.id,
					       S->run.naive ? "too" : "not");
		if (S->iterations_given && S->iterations != S->run.iterations)
			return cli_usage_error("submit", "run '%s' plans %" PRId64 " iterations, "
					       "not %" PRId64 ": --iterations is for a new run",
					       S->run.id, S->run.iterations, S->iterations);
	}
	o->seed_base = (uint64_t)S->run.seed;
	o->nseeds = (size_t)S->run.paired_seeds;
	o->with_naive = S->run.naive;
	if (!o->candidate_label) {
		snprintf(S->label, sizeof(S->label), "run %s iter %" PRId64, S->run.id, S->run.done);
		o->candidate_label = S->label;
	}
	fprintf(stderr, "atb submit: run %s iteration %" PRId64 " of %" PRId64 "%s\n", S->run.id,
		S->run.done, S->run.iterations, created ? " (a new agent run)" : "");
	return CLI_OK;
}

static int after(void *arg, struct atb_store *s, const struct atb_protocol *p,
		 const struct atb_knob_assignment *knobs, const struct atb_measure_outcome *out,
		 json_t **extra)
{
	struct submit *S = arg;
	struct atb_iteration_row row;
	struct atb_error err;
	double wall_s = (double)(now_ns() - S->t0_ns) / 1e9;

	*extra = NULL;
	if (!S->run_id)
		return CLI_OK;
	atb_error_clear(&err);
	if (atb_loop_agent_record(s, p, &S->run, knobs, out, wall_s, &row, &err)) {
		fprintf(stderr, "atb submit: the verdict is stored (job %s), but not as an "
			"iteration of run '%s'\n", out->job_uuid, S->run.id);
		return cli_fail(&err);
	}
	*extra = json_pack("{s:s, s:I, s:s, s:b}", "run", S->run.id, "iteration",
			   (json_int_t)row.k, "outcome", row.outcome, "usable", row.usable);
	return *extra ? CLI_OK : CLI_RUNTIME;
}

static int run_id_ok(const char *id)
{
	size_t n = strlen(id), i;

	for (i = 0; i < n; i++)
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'z') ||
		      (id[i] >= 'A' && id[i] <= 'Z') || id[i] == '-'))
			return 0;
	return n >= 1 && n <= 64;
}

int cmd_submit(int argc, char **argv, struct cli_ctx *ctx)
{
	struct submit S;
	struct cli_measure_hook h;
	char **av;
	int i, n = 0, rc;

	if (cli_wants_help(argc, argv)) {
		fputs(submit_help, stdout);
		return CLI_OK;
	}
	memset(&S, 0, sizeof(S));
	S.iterations = SUBMIT_DEFAULT_ITERATIONS;
	av = calloc((size_t)argc + 1, sizeof(*av));
	if (!av) {
		fprintf(stderr, "atb submit: out of memory\n");
		return CLI_RUNTIME;
	}
	/* --run and --iterations are ours; the rest is atb measure's */
	av[n++] = argv[0];
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--run")) {
			if (i + 1 >= argc) {
				free(av);
				return cli_usage_error("submit", "--run needs a run id");
			}
			S.run_id = argv[++i];
			if (!run_id_ok(S.run_id)) {
				free(av);
				return cli_usage_error("submit", "--run '%s': a run id is 1-64 of "
						       "[0-9a-zA-Z-]", S.run_id);
			}
		} else if (!strcmp(a, "--iterations")) {
			int64_t v;

			if (i + 1 >= argc) {
				free(av);
				return cli_usage_error("submit", "--iterations needs a number");
			}
			if (cli_parse_int("submit", "--iterations", argv[++i], 1,
					  ATB_LOOP_MAX_ITERATIONS, &v)) {
				free(av);
				return CLI_USAGE;
			}
			S.iterations = v;
			S.iterations_given = 1;
		} else {
			if (!strcmp(a, "--seeds"))
				S.seeds_given = 1;
			else if (!strcmp(a, "--seed-base"))
				S.seed_base_given = 1;
			else if (!strcmp(a, "--naive") || !strcmp(a, "--no-naive"))
				S.naive_given = 1;
			av[n++] = argv[i];
		}
	}
	if (S.iterations_given && !S.run_id) {
		free(av);
		return cli_usage_error("submit", "--iterations is a new run's plan: give --run too");
	}
	memset(&h, 0, sizeof(h));
	h.help = submit_help;
	h.json = 1;
	h.before = before;
	h.after = after;
	h.arg = &S;
	rc = cli_measure(n, av, ctx, &h);
	free(av);
	return rc;
}
