/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb run: the tuning loop on one task (include/atb/loop.h), with a
 * progress line on stderr, Ctrl-C handling and --resume.  A thin layer over
 * atb_loop_start / atb_loop_resume; the help text below is the command's
 * documentation (docs/run.md says the same at more length).
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <string.h>

#include <jansson.h>

#include "atb/loop.h"
#include "atb/llm.h"
#include "atb/store.h"
#include "atb/task.h"
#include "cli.h"
#include "banned.h"

static const char usage_text[] =
	"usage: atb run TASK [--proposer random] [--iterations N] [--seed S] [--seeds K]\n"
	"               [--naive | --no-naive] [--runs-dir DIR] [--runner PATH]\n"
	"               [--quiet] [--json]\n"
	"       atb run TASK --proposer llm|llm-code [--model M] [--base-url URL]\n"
	"               [--llm-config F] [--iterations N] ...\n"
	"       atb run --replay RUN_ID [--runs-dir DIR] [--runner PATH] [--quiet] [--json]\n"
	"       atb run TASK --plan [--iterations N] [--seed S] [--json]\n"
	"       atb run --resume RUN_ID [--runs-dir DIR] [--runner PATH] [--quiet] [--json]\n"
	"\n"
	"Run the tuning loop on TASK (a bundled task's name, see 'atb task list', or\n"
	"a path to a task folder or task.yaml): propose a knob setting, build and\n"
	"measure the candidate against the task's honest baseline under the frozen\n"
	"protocol (every gate live), record the outcome, keep the best, repeat.\n"
	"\n"
	"TASK may also be an engine task (a YAML file with kind: engine,\n"
	"docs/engine-spec.md): a flag search over a serving engine.  Iteration 0 is\n"
	"the engine's default configuration; iteration k >= 1 draws each of the\n"
	"task's search flags (left at the engine's default with probability 1/2,\n"
	"else uniformly from its domain).  Each is measured by the paired A/B of\n"
	"'atb engine ab' against the default on the run's K paired seeds (logs in\n"
	"DIR/<run-id>/iter-<k>/seed-S-ARM/).  A configuration the engine refuses\n"
	"(exits at start, never ready, dies, fails requests, changes greedy\n"
	"outputs) stays in the space and is an unusable iteration whose outcome is\n"
	"the gate (engine_start, engine_died, engine_errors, output_equivalence,\n"
	"client_lag, engine_baseline) and whose reason is the engine's message.\n"
	"'atb report RUN_ID' shows requests/s and latency ratios against the\n"
	"default with their intervals.  With --proposer llm the model proposes\n"
	"iterations k >= 1: the prompt (tasks/prompts/llm-engine-1.txt) holds the\n"
	"engine, model, extra arguments, workload, every search flag's type,\n"
	"domain and default, and the run's history with every verdict; the reply\n"
	"is JSON {\"config\": {\"FLAG\": VALUE}} (asked for under a JSON schema\n"
	"of the search flags) and passes the check every drawn configuration\n"
	"passes: an unknown flag, one outside the task's search, a wrong type or a\n"
	"value outside its domain makes another call (up to\n"
	"llm.max_calls_per_iteration), then the iteration is unusable with outcome\n"
	"'proposal' and the reason, and no engine is started.\n"
	"\n"
	"Proposals: iteration 0 is the task's default knobs; iteration k >= 1 is the\n"
	"k-th draw of the proposer.  'random' draws every knob and the flag choice\n"
	"uniformly (GSL mt19937 seeded with S): the same seed gives the same\n"
	"proposals, on any machine.  'llm' asks a model on an OpenAI-compatible\n"
	"server (docs/llm.md) for a kernel task's knobs: the prompt holds the knob\n"
	"space and the run's history with every verdict, the reply is JSON\n"
	"{\"knobs\": {...}, \"cflags\": \"...\"} and must lie inside the space (else\n"
	"another call, up to the protocol's llm.max_calls_per_iteration; then the\n"
	"iteration is unusable with outcome 'proposal').  Every call is recorded\n"
	"under the run's id ('atb llm show RUN_ID'); when the calls' truncation,\n"
	"empty, unparsable or failure rate crosses the protocol's alarm the run\n"
	"halts as an infrastructure defect (exit 1), never as a result of the model.\n"
	"\n"
	"'llm-code' asks the model for the code itself: a cpu or cuda task's\n"
	"surface files (over the task's template, built with the default knobs), or\n"
	"a KernelBench-format task's model_new.py (TASK.py, in a folder of its\n"
	"own: a store or runs folder inside the task's folder is refused), every\n"
	"iteration including the first.  The prompt is\n"
	"a template file under tasks/prompts/ (its SHA-256 is the first line of\n"
	"every call's system message) holding the reference, the surface and ABI,\n"
	"the starting candidate, the previous candidate and the run's history with\n"
	"every verdict.  The reply is JSON {\"files\": {\"NAME\": \"TEXT\"}} (asked for\n"
	"under a JSON schema) or ```LANG NAME fenced blocks; it may name only surface\n"
	"files (no folder, no '..', no absolute path, at most 1 MiB each) and is\n"
	"written inside the candidate folder only, all files or none.  A reply\n"
	"that writes nothing makes another call (up to llm.max_calls_per_iteration),\n"
	"then the iteration is unusable with outcome 'proposal'.  Every candidate\n"
	"then goes through the same gates and static checks as 'atb measure'.  The\n"
	"iteration's knobs hold \"files\": {NAME: SHA-256}.\n"
	"\n"
	"Replay: 'atb run --replay RUN_ID' runs a model proposer's run again as a\n"
	"new run, without any server: every call is answered from RUN_ID's recorded\n"
	"calls, byte for byte by request hash (the prompts' history is RUN_ID's, so\n"
	"each request is what the model was asked), and its proposals (knobs, the\n"
	"files' SHA-256) must be RUN_ID's, else exit 1 naming the iteration.  The\n"
	"candidates are measured again on this box.  A request RUN_ID did not\n"
	"record (a changed prompt template, task or protocol) is an error naming\n"
	"its hash (exit 2).\n"
	"\n"
	"Each iteration writes its candidate to DIR/<run-id>/iter-<k>/candidate\n"
	"(builds and logs in .../work), measures it with the honest baseline (and\n"
	"the naive one, labelled) on K paired seeds, and stores one iteration row\n"
	"with its outcome:\n"
	"  usable          built, correct, measured and admitted to the store (the\n"
	"                  protocol's loop.usable_iteration)\n"
	"  surface, build, runner, correctness, input_mutation, result_reuse,\n"
	"  physical_floor, baseline_drift, noise\n"
	"                  the gate that refused it (the rejection and its reason\n"
	"                  are in the store)\n"
	"  quarantined     10x or more over the honest baseline: held for review\n"
	"  rejected:RULE   the store's validator refused the result\n"
	"The best iteration is the usable one with the highest lower bound of the\n"
	"honest speedup's 95% confidence interval (not the highest mean: a lucky\n"
	"noisy draw does not displace a reliably faster candidate).\n"
	"\n"
	"Progress goes to stderr: iteration k/N, its phase (with the attempt when\n"
	"a measurement is re-run: 'attempt 2 of 3', announced on a line of its own\n"
	"with the reason), the best honest speedup with its interval, the usable\n"
	"count and an ETA (the iteration in progress from its pace, the rest at\n"
	"the mean iteration time); a refused iteration adds a line with its\n"
	"reason and the numbers it was refused on.  Redrawn in place on a\n"
	"terminal; otherwise one line per iteration and one every 30 s in\n"
	"between ($ATB_PROGRESS_INTERVAL_S).  At the end a summary goes to\n"
	"stdout; 'atb report RUN_ID' shows the whole trajectory.\n"
	"\n"
	"Interrupting: Ctrl-C (or SIGTERM) stops after the measurement in progress\n"
	"without recording it; a second one stops at once, as SIGKILL would (exit\n"
	"128 + the signal); SIGKILL or a crash loses only that iteration.  Every\n"
	"finished iteration is one transaction in the store, so the store is always\n"
	"consistent.  'atb run --resume RUN_ID' redoes the unfinished iteration and\n"
	"continues to the planned count with the run's own task, seed, protocol and\n"
	"plan; it replays the proposer and checks that the stored knobs are its\n"
	"proposals.  A run resumes only on the box it started on.\n"
	"\n"
	"options:\n"
	"  --proposer NAME   the proposer: random (default), llm (a kernel task's\n"
	"                    knobs, an engine task's configuration) or llm-code\n"
	"                    (the code: cpu, cuda, torch tasks)\n"
	"  --replay RUN_ID   run a model proposer's run again from its recorded calls\n"
	"  --model M, --base-url URL, --llm-config F\n"
	"                    llm: the model and server (else $ATB_LLM_MODEL,\n"
	"                    $ATB_LLM_BASE_URL, $ATB_LLM_CONFIG; the key only from\n"
	"                    $ATB_LLM_API_KEY or the config); also for --resume\n"
	"  --iterations N    iterations to run, 1 to 100000 (default 10)\n"
	"  --token-budget N, --cost-budget USD, --wall-budget S\n"
	"                    end the run early, before an iteration, once its model\n"
	"                    calls used N tokens (prompt + completion) or USD (with\n"
	"                    a price table), or this command ran S seconds; not\n"
	"                    stored: --resume takes them again\n"
	"  --baseline-proposer random\n"
	"                    after the run, a run of the seeded random proposer on\n"
	"                    the same task, seed, seeds and as many iterations as\n"
	"                    the first one finished; usable iterations of both are\n"
	"                    printed side by side (JSON: \"baseline\")\n"
	"  --seed S          the proposer's seed and the first paired seed, an\n"
	"                    integer >= 0 (default 0)\n"
	"  --seeds K         paired seeds per measurement (default and minimum: the\n"
	"                    protocol's stats.min_paired_seeds)\n"
	"  --naive           also time the task's naive baseline (default when the\n"
	"                    task has one); --no-naive: do not\n"
	"  --resume RUN_ID   continue an interrupted run\n"
	"  --plan            print the proposals the run would make, one line per\n"
	"                    iteration ('K KNOBS-JSON'; with --json an array), and\n"
	"                    measure nothing (the store is not opened)\n"
	"  --runs-dir DIR    where candidate folders go (default: runs/ beside the\n"
	"                    store)\n"
	"  --runner PATH     the atb-runner binary (default: next to atb)\n"
	"  --quiet           no progress line\n"
	"  --json            the summary as JSON on stdout (also 'atb --json run')\n"
	"  -h, --help        this text\n"
	"\n"
	"The store is --db PATH, $ATB_DB or ./atb.db; 'atb run' creates it when it\n"
	"does not exist and copies the frozen protocols into it.\n"
	"exit codes: 0 the run finished (whatever its outcomes); 1 the run halted\n"
	"as an infrastructure defect (llm), or a replay proposed other than the\n"
	"recorded run; 2 bad usage, a replayed request that was not recorded,\n"
	"unknown task or run, a run of another box; 3 store, i/o or system\n"
	"failure (the run stays resumable); 130 interrupted (resumable)\n";

static void progress(void *vctx, const struct atb_loop_progress *p)
{
	char best[96], tail[160], phase[160];
	struct cli_progress_line l = {.unit = "iter", .k = p->k + 1, .n = p->planned,
				      .phase = phase, .outcome = p->last_outcome,
				      .tail = tail, .eta_s = p->eta_s};
	int done = !strcmp(p->phase, "done");

	if (p->rerun_why) {
		/* the announcement is a line of its own; the line shows the attempt */
		cli_progress_note(vctx, "iter %" PRId64 "/%" PRId64 " %s", p->k + 1, p->planned,
				  p->phase);
		snprintf(phase, sizeof(phase), "attempt %d of %d", p->attempt, p->max_attempts);
	} else if (!done && p->attempt > 1) {
		snprintf(phase, sizeof(phase), "attempt %d of %d, %s", p->attempt,
			 p->max_attempts, p->phase);
	} else {
		snprintf(phase, sizeof(phase), "%s", p->phase);
	}

	if (p->have_best)
		snprintf(best, sizeof(best), "%.3gx [%.3g, %.3g] (iter %" PRId64 ")",
			 p->best_speedup, p->best_ci_low, p->best_ci_high, p->best_k);
	else
		snprintf(best, sizeof(best), "none yet");
	snprintf(tail, sizeof(tail), "best %s  usable %" PRId64 "/%" PRId64, best, p->usable,
		 p->done);
	cli_progress_draw(vctx, &l);
	/* a refused iteration: its reason holds the numbers the gate judged */
	if (done && p->last_reason && p->last_reason[0])
		cli_progress_note(vctx, "iter %" PRId64 "/%" PRId64 " %s: %s", p->k + 1,
				  p->planned, p->last_outcome ? p->last_outcome : "-",
				  p->last_reason);
}

static int print_summary(const struct atb_loop_summary *sum, int json, json_t *base)
{
	if (json) {
		json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:b}", "run", sum->run_id,
				      "task", sum->task, "planned", (json_int_t)sum->planned,
				      "first_iteration", (json_int_t)sum->first_k, "done",
				      (json_int_t)sum->done, "usable", (json_int_t)sum->usable,
				      "interrupted", sum->interrupted);

		if (o) {
			json_object_set_new(o, "budget", sum->budget[0] ? json_string(sum->budget)
									 : json_null());
			json_object_set_new(o, "llm_calls", json_integer((json_int_t)sum->llm_calls));
			json_object_set_new(o, "tokens", json_integer((json_int_t)sum->tokens));
			json_object_set_new(o, "cost_usd", json_real(sum->cost_usd));
			json_object_set_new(o, "replay_of", sum->replay_of[0] ?
					    json_string(sum->replay_of) : json_null());
		}
		if (o && sum->have_best)
			json_object_set_new(o, "best",
					    json_pack("{s:I, s:f, s:f, s:f, s:f}", "iteration",
						      (json_int_t)sum->best_k, "speedup",
						      sum->best_speedup, "ci_low", sum->best_ci_low,
						      "ci_high", sum->best_ci_high, "naive_speedup",
						      sum->best_naive_speedup));
		else if (o)
			json_object_set_new(o, "best", json_null());
		if (base && o)
			json_object_set_new(o, "baseline", base);
		else
			json_decref(base);
		return cli_print_json("run", o);
	}
	printf("run %s: task %s, %" PRId64 " of %" PRId64 " iterations, %" PRId64 " usable\n",
	       sum->run_id, sum->task, sum->done, sum->planned, sum->usable);
	if (sum->replay_of[0])
		printf("a replay of run %s: its %" PRId64 " proposals reproduced from its recorded"
		       " calls, measured again\n", sum->replay_of, sum->done);
	if (sum->budget[0])
		printf("stopped early: the %s budget is spent\n", sum->budget);
	if (sum->llm_calls)
		printf("model calls: %" PRId64 ", %" PRId64 " tokens, $%.6f\n", sum->llm_calls,
		       sum->tokens, sum->cost_usd);
	if (sum->have_best) {
		printf("best: iteration %" PRId64 ", %.3gx [%.3g, %.3g] vs the honest baseline",
		       sum->best_k, sum->best_speedup, sum->best_ci_low, sum->best_ci_high);
		if (sum->best_naive_speedup > 0)
			printf(" (%.3gx vs the naive baseline)", sum->best_naive_speedup);
		printf("\n");
	} else {
		printf("best: none (no usable iteration)\n");
	}
	printf("the whole trajectory: atb report %s\n", sum->run_id);
	return CLI_OK;
}

/* The proposals of a run, without running it. */
static int print_plan(const char *task_name, const struct atb_loop_opts *o, int json)
{
	struct atb_error err;
	char **props = NULL;
	json_t *a = NULL;
	int64_t k;
	int rc = CLI_OK;

	atb_error_clear(&err);
	if (atb_loop_plan(atb_home(), task_name, o->proposer, o->seed, (size_t)o->iterations,
			  &props, &err))
		return cli_fail(&err);
	if (json)
		a = json_array();
	for (k = 0; k < o->iterations; k++) {
		if (a)
			json_array_append_new(a, json_loads(props[k], 0, NULL));
		else if (!json)
			printf("%" PRId64 " %s\n", k, props[k]);
	}
	if (json) {
		char *s = a ? json_dumps(a, JSON_INDENT(2)) : NULL;

		if (!s) {
			fprintf(stderr, "atb run: out of memory\n");
			rc = CLI_RUNTIME;
		} else {
			printf("%s\n", s);
			atb_free(s);
		}
	}
	json_decref(a);
	for (k = 0; k < o->iterations; k++)
		atb_free(props[k]);
	atb_free(props);
	return rc;
}

int cmd_run(int argc, char **argv, struct cli_ctx *ctx)
{
	struct atb_loop_opts o;
	struct atb_loop_summary sum;
	struct cli_progress pc;
	struct atb_store *s = NULL;
	struct atb_error err;
	const char *task_name = NULL, *resume = NULL, *model = NULL, *base_url = NULL;
	const char *llm_config = NULL, *baseline = NULL, *replay = NULL;
	json_t *base = NULL;
	struct atb_llm_config lcfg;
	int json = ctx->json, plan = 0, quiet = 0, wants_model, i, rc;
	enum atb_status st;

	if (cli_wants_help(argc, argv)) {
		fputs(usage_text, stdout);
		return CLI_OK;
	}
	memset(&o, 0, sizeof(o));
	o.iterations = 10;
	o.naive = -1;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--json")) {
			json = 1;
		} else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
			quiet = 1;
		} else if (!strcmp(a, "--naive")) {
			o.naive = 1;
		} else if (!strcmp(a, "--no-naive")) {
			o.naive = 0;
		} else if (!strcmp(a, "--plan")) {
			plan = 1;
		} else if (!strcmp(a, "--proposer") || !strcmp(a, "--iterations") ||
			   !strcmp(a, "--seed") || !strcmp(a, "--seeds") || !strcmp(a, "--resume") ||
			   !strcmp(a, "--replay") ||
			   !strcmp(a, "--runs-dir") || !strcmp(a, "--runner") ||
			   !strcmp(a, "--model") || !strcmp(a, "--base-url") ||
			   !strcmp(a, "--llm-config") || !strcmp(a, "--baseline-proposer") ||
			   !strcmp(a, "--token-budget") || !strcmp(a, "--cost-budget") ||
			   !strcmp(a, "--wall-budget")) {
			if (!v)
				return cli_usage_error("run", "option '%s' needs a value", a);
			i++;
			if (!strcmp(a, "--proposer"))
				o.proposer = v;
			else if (!strcmp(a, "--iterations")) {
				if (cli_parse_int("run", a, v, 1, ATB_LOOP_MAX_ITERATIONS, &o.iterations))
					return CLI_USAGE;
			} else if (!strcmp(a, "--seed")) {
				if (cli_parse_int("run", a, v, 0, INT64_MAX, &o.seed))
					return CLI_USAGE;
			} else if (!strcmp(a, "--seeds")) {
				if (cli_parse_int("run", a, v, 1, 100000, &o.paired_seeds))
					return CLI_USAGE;
			} else if (!strcmp(a, "--resume"))
				resume = v;
			else if (!strcmp(a, "--replay"))
				replay = v;
			else if (!strcmp(a, "--runs-dir"))
				o.runs_dir = v;
			else if (!strcmp(a, "--model"))
				model = v;
			else if (!strcmp(a, "--base-url"))
				base_url = v;
			else if (!strcmp(a, "--llm-config"))
				llm_config = v;
			else if (!strcmp(a, "--baseline-proposer")) {
				if (strcmp(v, ATB_LOOP_PROPOSER_RANDOM))
					return cli_usage_error("run", "--baseline-proposer is random, not '%s'", v);
				baseline = v;
			} else if (!strcmp(a, "--token-budget")) {
				if (cli_parse_int("run", a, v, 1, INT64_MAX, &o.token_budget))
					return CLI_USAGE;
			} else if (!strcmp(a, "--cost-budget") || !strcmp(a, "--wall-budget")) {
				char *end = NULL;
				double x = strtod(v, &end);

				if (!*v || *end || !(x > 0) || x > 1e15)
					return cli_usage_error("run", "bad %s '%s': expected a number > 0", a, v);
				if (!strcmp(a, "--cost-budget"))
					o.cost_budget_usd = x;
				else
					o.wall_budget_s = x;
			}
			else
				o.runner_path = v;
		} else if (a[0] == '-' && a[1]) {
			return cli_usage_error("run", "unknown option '%s'", a);
		} else if (!task_name) {
			task_name = a;
		} else {
			return cli_usage_error("run", "unexpected argument '%s'", a);
		}
	}
	if (replay && (task_name || resume || plan || baseline || model || base_url || llm_config ||
		       o.proposer))
		return cli_usage_error("run", "--replay RUN_ID takes no TASK, --resume, --plan, "
				       "--baseline-proposer, proposer or model: the run's own are used");
	if (resume && task_name)
		return cli_usage_error("run", "give TASK or --resume RUN_ID, not both");
	if (!resume && !task_name && !replay)
		return cli_usage_error("run", "missing TASK (or --resume RUN_ID, --replay RUN_ID)");
	if (plan && resume)
		return cli_usage_error("run", "--plan goes with TASK, not --resume");
	if (plan)
		return print_plan(task_name, &o, json);
	if (baseline && resume)
		return cli_usage_error("run", "--baseline-proposer goes with TASK, not --resume");

	atb_error_clear(&err);
	memset(&lcfg, 0, sizeof(lcfg));
	wants_model = o.proposer && (!strcmp(o.proposer, ATB_LOOP_PROPOSER_LLM) ||
				     !strcmp(o.proposer, ATB_LOOP_PROPOSER_LLM_CODE));
	if (wants_model || resume || model || base_url || llm_config) {
		if (atb_llm_config_load(llm_config, &lcfg, &err))
			return cli_fail(&err);
		if ((model && strlen(model) >= sizeof(lcfg.model)) ||
		    (base_url && strlen(base_url) >= sizeof(lcfg.base_url))) {
			atb_llm_config_release(&lcfg);
			return cli_usage_error("run", "--model or --base-url is too long");
		}
		if (model)
			snprintf(lcfg.model, sizeof(lcfg.model), "%s", model);
		if (base_url)
			snprintf(lcfg.base_url, sizeof(lcfg.base_url), "%s", base_url);
		/* a resume of a random run ignores it; an llm run needs both */
		if (lcfg.model[0] && lcfg.base_url[0])
			o.llm = &lcfg;
		else if (wants_model) {
			atb_llm_config_release(&lcfg);
			return cli_usage_error("run", "--proposer %s needs a model and a server:"
					       " --model and --base-url (or $ATB_LLM_MODEL, $ATB_LLM_BASE_URL)",
					       o.proposer);
		}
	}
	if (baseline && task_name) {
		/* the baseline's plan too (a torch task has nothing for random to draw) */
		struct atb_loop_opts bo = o;

		bo.proposer = baseline;
		bo.llm = NULL;
		if (atb_loop_check(task_name, &bo, &err)) {
			atb_llm_config_release(&lcfg);
			return cli_fail(&err);
		}
	}
	/* A bad plan or task is refused before the store is created or touched. */
	if ((task_name && atb_loop_check(task_name, &o, &err)) ||
	    atb_store_open(ctx->db_path, resume || replay ? ATB_STORE_READ_WRITE : ATB_STORE_CREATE,
			   &s, &err)) {
		atb_llm_config_release(&lcfg);
		return cli_fail(&err);
	}

	cli_progress_init(&pc, quiet);
	o.progress = progress;
	o.progress_ctx = &pc;
	o.stop = cli_stop_catch();

	if (replay)
		st = atb_loop_replay(s, replay, &o, &sum, &err);
	else if (resume)
		st = atb_loop_resume(s, resume, &o, &sum, &err);
	else
		st = atb_loop_start(s, task_name, &o, &sum, &err);

	cli_stop_restore();
	atb_store_close(s);
	atb_llm_config_release(&lcfg);
	cli_progress_end(&pc);
	if (st) {
		rc = cli_fail(&err);
		if (st == ATB_ERR_INFRA_DEFECT)
			fprintf(stderr, "atb: run %s halted as an infrastructure defect at iteration %"
				PRId64 " (not a result of the model); 'atb llm show %s' has the counts\n",
				sum.run_id, sum.done, sum.run_id);
		else if (sum.run_id[0] && replay)
			fprintf(stderr, "atb: replay %s of run %s stopped at iteration %" PRId64 "\n",
				sum.run_id, replay, sum.done);
		else if (sum.run_id[0])
			fprintf(stderr, "atb: run %s stopped at iteration %" PRId64
				"; continue it with 'atb run --resume %s'\n",
				sum.run_id, sum.done, sum.run_id);
		return rc;
	}
	if (baseline && !sum.interrupted) {
		/* PROTO: loop.usable_iteration -- both proposers on one budget, side by side */
		struct atb_loop_opts bo = o;
		struct atb_loop_summary bsum;

		bo.proposer = baseline;
		bo.llm = NULL;
		bo.iterations = sum.done;
		bo.token_budget = 0;
		bo.cost_budget_usd = 0;
		if (!json)
			print_summary(&sum, 0, NULL);
		if (atb_store_open(ctx->db_path, ATB_STORE_READ_WRITE, &s, &err))
			return cli_fail(&err);
		cli_progress_init(&pc, quiet);
		bo.progress_ctx = &pc;
		bo.stop = cli_stop_catch();
		st = atb_loop_start(s, task_name, &bo, &bsum, &err);
		cli_stop_restore();
		atb_store_close(s);
		cli_progress_end(&pc);
		if (st)
			return cli_fail(&err);
		if (json) {
			base = json_pack("{s:s, s:s, s:I, s:I, s:b}", "run", bsum.run_id, "proposer",
					 baseline, "done", (json_int_t)bsum.done, "usable",
					 (json_int_t)bsum.usable, "interrupted", bsum.interrupted);
			if (base && bsum.have_best)
				json_object_set_new(base, "best", json_pack("{s:I, s:f, s:f, s:f}",
						    "iteration", (json_int_t)bsum.best_k, "speedup",
						    bsum.best_speedup, "ci_low", bsum.best_ci_low,
						    "ci_high", bsum.best_ci_high));
			return print_summary(&sum, 1, base);
		}
		printf("usable iterations: %s %" PRId64 "/%" PRId64 " (run %s), %s %" PRId64
		       "/%" PRId64 " (run %s)\n", o.proposer ? o.proposer : "random", sum.usable,
		       sum.done, sum.run_id, baseline, bsum.usable, bsum.done, bsum.run_id);
		return CLI_OK;
	}
	rc = print_summary(&sum, json, NULL);
	if (sum.interrupted && replay) {
		fprintf(stderr, "atb: replay %s of run %s interrupted after %" PRId64 " of %" PRId64
			" iterations; replay it again with 'atb run --replay %s'\n", sum.run_id,
			replay, sum.done, sum.planned, replay);
		return 130;
	}
	if (sum.interrupted) {
		fprintf(stderr, "atb: run %s interrupted after %" PRId64 " of %" PRId64
			" iterations; continue it with 'atb run --resume %s'\n",
			sum.run_id, sum.done, sum.planned, sum.run_id);
		return 130;
	}
	return rc;
}
