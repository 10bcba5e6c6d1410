/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The tuning loop: propose a candidate, measure it, keep the best, count
 * every outcome (docs/design.md: "propose -> ... -> keep-best -> next proposal").
 *
 * A run is a row in the store (task, proposer, seed, planned iterations,
 * paired seeds, naive on/off, protocol digest, box fingerprint).  Iteration
 * k proposes knobs (k = 0: the task's default knobs; k >= 1: the k-th draw
 * of the seeded proposer, so the same seed gives the same proposals),
 * writes the candidate folder runs/<run-id>/iter-<k>/candidate, measures it
 * with atb_measure_candidate (which records the job, result or rejection
 * and their audit entries), classifies the outcome under the protocol's
 * loop.usable_iteration rule, and stores one iteration row in one
 * transaction.  An iteration interrupted before its row is stored (Ctrl-C,
 * SIGKILL, a store or i/o failure) leaves no row and is redone by
 * atb_loop_resume, which replays the proposer through the done iterations
 * and checks that it reproduces their stored knobs.
 *
 * Keep-best: the best iteration is the usable one with the highest lower
 * bound of the honest speedup's confidence interval (ties: the higher
 * speedup, then the earlier iteration).  The lower bound, not the geometric
 * mean, so that a noisy lucky draw does not displace a candidate that is
 * reliably faster.
 *
 * An engine task (atb/engine.h) runs through the same run and iteration
 * rows: proposal 0 is the engine's default configuration, proposal k a
 * seeded random draw over the task's search flags, each measured with
 * atb_engine_ab against the default on the run's paired seeds; a
 * configuration the engine refuses is an unusable iteration whose outcome
 * is the refusing gate (engine_start, ...) and whose reason holds the
 * engine's message.
 *
 * Does not: measure, judge or store measurements itself (measure/ and the
 * store do), print (the progress callback reports), or handle signals (the
 * caller sets *stop from its handler).  Not thread-safe.
 */
#ifndef ATB_LOOP_H
#define ATB_LOOP_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "atb/measure.h"
#include "atb/protocol.h"
#include "atb/status.h"
#include "atb/store.h"
#include "atb/task.h"

/* Uniform random over the knob space (gsl mt19937). */
#define ATB_LOOP_PROPOSER_RANDOM "random"
/*
 * A model over any OpenAI-compatible server (atb/llm.h) proposing a kernel
 * task's knobs from the run's history; its calls are recorded under the
 * run's id and judged by the infrastructure-defect alarms.  Iteration 0 is
 * still the task's default knobs.
 */
#define ATB_LOOP_PROPOSER_LLM "llm"
/*
 * A model writing the code of every iteration: a cpu or cuda task's
 * surface files (written over the task's template, built with the default
 * knobs), a torch task's model_new.py.  The prompt comes from a template file under tasks/prompts/;
 * the reply is parsed (JSON under a JSON schema, or fenced blocks) and
 * written only inside the candidate folder (atb_llm_reply_write); every
 * candidate then goes through atb_measure_candidate.  The iteration's
 * stored "knobs" holds the knobs and "files": {NAME: SHA-256}.
 */
#define ATB_LOOP_PROPOSER_LLM_CODE "llm-code"

/*
 * An outside agent (atb submit --run, atb serve --stdio): the run proposes
 * nothing itself; each candidate handed in is measured by atb measure's
 * path and stored as the run's next iteration (atb_loop_agent_record).
 * atb run --resume refuses such a run (there is no proposer to replay).
 */
#define ATB_LOOP_PROPOSER_AGENT "agent"

struct atb_llm_config;
struct atb_box;
/* The most iterations one run may plan. */
#define ATB_LOOP_MAX_ITERATIONS 100000

/* A measurement function: atb_measure_candidate, or a fake in tests. */
typedef enum atb_status (*atb_loop_measure_fn)(struct atb_store *store,
					      const struct atb_protocol *p,
					      const struct atb_task *task,
					      const char *candidate_dir,
					      const struct atb_knob_assignment *knobs,
					      const struct atb_measure_opts *opts,
					      struct atb_measure_outcome *out,
					      struct atb_error *err);

/* What the progress callback sees; valid during the call only. */
struct atb_loop_progress {
	const char *run_id;
	int64_t k;                 /* the iteration in progress (0-based) */
	int64_t planned;
	const char *phase;         /* "propose", measure's phases, "done" */
	const char *last_outcome;  /* of the last finished iteration; NULL before */
	int64_t done;              /* iterations stored, this run */
	int64_t usable;            /* of which usable */
	int have_best;
	int64_t best_k;
	double best_speedup, best_ci_low, best_ci_high;  /* vs the honest baseline */
	double mean_iteration_s;   /* over the iterations finished by this call; 0: none */
	/*
	 * The rest of the iteration in progress (from the measurement's
	 * fraction done and the time its attempt has taken) plus the iterations
	 * after it at the mean, or, before any finished, at the one in
	 * progress's estimate: it moves within an iteration and grows when an
	 * attempt is re-run.  < 0: unknown (nothing timed yet).
	 */
	double eta_s;
	int attempt, max_attempts; /* the measurement's attempt (atb_measure_progress); 0: none */
	const char *rerun_why;     /* non-NULL at the phase announcing a re-run: why */
	const char *last_reason;   /* the last finished iteration's reason ("" when usable) */
};

struct atb_loop_opts {
	const char *home;          /* NULL: atb_home() */
	const char *runner_path;   /* NULL: atb-runner as measure finds it */
	const char *runs_dir;      /* NULL: "runs" in the store's folder */
	const char *proposer;      /* NULL: "random" */
	const struct atb_llm_config *llm; /* the model, for proposer "llm" (start and resume) */
	int64_t iterations;        /* planned, 1..ATB_LOOP_MAX_ITERATIONS (start only) */
	int64_t seed;              /* >= 0 (start only) */
	int64_t paired_seeds;      /* 0: the protocol's stats.min_paired_seeds (start only) */
	int naive;                 /* -1: when the task has one; 0: off; 1: on (start only) */
	atb_loop_measure_fn measure; /* NULL: atb_measure_candidate */
	void (*progress)(void *ctx, const struct atb_loop_progress *p);
	void *progress_ctx;
	/* Non-zero: start no new iteration and do not record the current one. */
	volatile sig_atomic_t *stop;
	/*
	 * Budgets of this call (0: none), judged before each iteration after
	 * the first: the run's recorded model calls' tokens (prompt and
	 * completion) and cost, and this call's wall time.  A spent budget ends
	 * the run early, not interrupted (out->budget names it); budgets are
	 * not stored with the run, so --resume takes them again.
	 */
	int64_t token_budget;
	double cost_budget_usd;
	double wall_budget_s;
};

struct atb_loop_summary {
	char run_id[ATB_RUN_ID_MAX];
	char task[128];
	int64_t planned;
	int64_t first_k;           /* the first iteration this call ran */
	int64_t done;              /* iterations stored in all */
	int64_t usable;
	int interrupted;           /* *stop was set: resume with atb_loop_resume */
	int have_best;
	int64_t best_k;
	double best_speedup, best_ci_low, best_ci_high;
	double best_naive_speedup;  /* 0 when not measured */
	char budget[16];           /* the budget that ended the run: "tokens", "cost", "wall"; "" */
	int64_t tokens;            /* the run's model calls: prompt + completion tokens */
	double cost_usd;
	int64_t llm_calls;
	char replay_of[ATB_RUN_ID_MAX]; /* atb_loop_replay: the recorded run; "" otherwise */
};

/*
 * Start a run of task (a bundled task's name or a path) with o's plan and
 * run it to its end, or until *o->stop.  Creates the run row first (its id
 * is in out->run_id as soon as the row exists, and is reported to the
 * progress callback), syncing the frozen protocols into the store and
 * registering this box.  Returns ATB_OK when every iteration ran or when
 * stopped (out->interrupted); an error status when the run could not go
 * on (store, i/o; the run stays resumable).  Errors before the run row:
 * ATB_ERR_USAGE (bad plan: iterations, seed, paired seeds below the
 * protocol's minimum, unknown proposer, naive asked but the task has none),
 * ATB_ERR_NOT_FOUND (unknown task), the task's and protocol's load errors.
 */
enum atb_status atb_loop_start(struct atb_store *s, const char *task,
			       const struct atb_loop_opts *o, struct atb_loop_summary *out,
			       struct atb_error *err);

/*
 * Continue run_id from its first missing iteration, under the run's own
 * protocol, task, seed and plan (o's plan fields are ignored).  Replays the
 * proposer through the done iterations: their stored knobs must be the
 * replayed proposals (ATB_ERR_CHECK otherwise).  ATB_ERR_NOT_FOUND for an
 * unknown run; ATB_ERR_USAGE when this box is not the run's.  A complete run
 * returns ATB_OK at once with out filled.
 */
enum atb_status atb_loop_resume(struct atb_store *s, const char *run_id,
				const struct atb_loop_opts *o, struct atb_loop_summary *out,
				struct atb_error *err);

/*
 * Replay run_id, a run of a model proposer, as a new run (its id in
 * out->run_id, out->replay_of the recorded one) without any server: the
 * same task, protocol, seed and plan, every model call answered from
 * run_id's recorded calls (atb/llm.h replay: byte for byte, by request
 * hash) and recorded again under the new run (transport "replay"), and
 * every prompt's history taken from run_id's iterations, so that each
 * request is the bytes the model was asked.  The candidates are measured
 * again (their verdicts are this box's now); each iteration's proposal
 * (its knobs, and a code proposer's files by SHA-256) must equal
 * run_id's, else ATB_ERR_CHECK naming the iteration.  It runs as many
 * iterations as run_id stored (and the one its halt ended, which halts
 * the replay the same way: ATB_ERR_INFRA_DEFECT).  o's home, runner,
 * runs_dir, measure, progress and stop are used; its plan, model and
 * budgets are not.  Errors: ATB_ERR_NOT_FOUND (no such run, no recorded
 * calls, a request the run did not record: the message names its hash),
 * ATB_ERR_USAGE (a run of the random proposer, nothing to replay), those
 * of atb_loop_start.
 */
enum atb_status atb_loop_replay(struct atb_store *s, const char *run_id,
				const struct atb_loop_opts *o, struct atb_loop_summary *out,
				struct atb_error *err);

/*
 * The first n proposals of proposer for task with seed into out[0..n-1]:
 * out[0] the default knobs, out[k] the k-th draw (atb_task_sample_knobs on
 * gsl mt19937 seeded with seed).  ATB_ERR_USAGE for an unknown proposer.
 */
enum atb_status atb_loop_proposals(const struct atb_task *task, const char *proposer,
				   int64_t seed, size_t n, struct atb_knob_assignment *out,
				   struct atb_error *err);

/*
 * Classify a measurement outcome: *usable when it reached every step the
 * protocol's loop.usable_iteration lists (built, correct, measured,
 * admitted), and outcome (at least 64 bytes) "usable" or why not: the
 * refusing gate's id ("build", "correctness", "noise", ...),
 * "quarantined", or the store's refusal ("rejected:cv_over_cap").
 * ATB_ERR_PROTOCOL for a step the loop does not know.
 */
enum atb_status atb_loop_classify(const struct atb_protocol *p,
				  const struct atb_measure_outcome *o, char *outcome,
				  int *usable, struct atb_error *err);

/*
 * Load task as the loop would (a kernel task's name or folder, or an
 * engine task: a YAML file with kind: engine, see docs/engine-spec.md),
 * to refuse a bad one before anything is written.  The load's errors.
 */
enum atb_status atb_loop_check_task(const char *home, const char *task, struct atb_error *err);

/*
 * Judge a new run's plan as atb_loop_start would, without a store, so that
 * bad input is refused before anything is written: the proposer,
 * iterations, seed, paired seeds against the protocol's minimum, --naive
 * on a task without one, and the task's and protocol's load errors.
 */
enum atb_status atb_loop_check(const char *task, const struct atb_loop_opts *o,
			       struct atb_error *err);

/*
 * The first n proposals of a run of task as JSON object texts: a kernel
 * task's knobs ({"NAME":"VALUE",...,"cflags":"..."}) or an engine task's
 * configurations ({"FLAG":"VALUE",...}; {} is the engine's default).
 * Caller owns (*out)[0..n-1] and *out (atb_free each).  home NULL:
 * atb_home().  The task's load errors; ATB_ERR_USAGE (unknown proposer);
 * ATB_ERR_NOMEM.
 */
enum atb_status atb_loop_plan(const char *home, const char *task, const char *proposer,
			      int64_t seed, size_t n, char ***out, struct atb_error *err);

/* Knobs as a JSON object text {"NAME":"VALUE",...,"cflags":"..."}; caller owns *out. */
enum atb_status atb_loop_knobs_json(const struct atb_knob_assignment *a, char **out,
				    struct atb_error *err);

/* ---- runs of an outside agent (atb submit --run, atb serve --stdio) ---- */

/* A new agent run's plan: every iteration is measured on the same seeds. */
struct atb_loop_agent_plan {
	int64_t iterations;        /* planned, 1..ATB_LOOP_MAX_ITERATIONS */
	int64_t seed;              /* the paired seeds are seed, seed+1, ... (>= 0) */
	int64_t paired_seeds;      /* >= the protocol's stats.min_paired_seeds */
	int naive;                 /* 1: the naive baseline is timed too */
};

/*
 * The agent run run_id of task_ref (as the loop names a task: a bundled
 * name, else the absolute path of the folder, YAML or .py file) into *out,
 * ready for one more iteration under protocol p on box (this machine,
 * probed): it must be a run of proposer "agent" of the same task, protocol
 * and box, with an iteration left (out->done < out->iterations).  Absent
 * and plan given: it is created with that id and plan, box registered (the
 * frozen protocols must already be synced, as atb measure does); *created
 * says so (may be NULL).  Nothing is written when it
 * refuses.  Errors: ATB_ERR_USAGE (an id not 1-64 of [0-9a-zA-Z-]; a run of
 * another proposer, task, protocol or box; every planned iteration done; a
 * bad plan), ATB_ERR_NOT_FOUND (absent and plan NULL), the store's.
 */
enum atb_status atb_loop_agent_run(struct atb_store *s, const struct atb_protocol *p,
				   const char *run_id, const char *task_ref, const struct atb_box *box,
				   const struct atb_loop_agent_plan *plan, struct atb_run_row *out,
				   int *created, struct atb_error *err);

/*
 * Store outcome o (of atb_measure_candidate on the run's seeds) as the next
 * iteration of agent run run (from atb_loop_agent_run), classified as the
 * loop classifies (atb_loop_classify), with knobs (NULL: none) and wall_s;
 * the row as stored into *row when not NULL (its strings are NULL there).
 * The store's errors (an iteration stored meanwhile by another submission:
 * ATB_REJECTED_* "recorded in order").
 */
enum atb_status atb_loop_agent_record(struct atb_store *s, const struct atb_protocol *p,
				      const struct atb_run_row *run,
				      const struct atb_knob_assignment *knobs,
				      const struct atb_measure_outcome *o, double wall_s,
				      struct atb_iteration_row *row, struct atb_error *err);

/*
 * task_ref for a task argument as atb run and atb submit store it: a name
 * with a '/' or ending in .yaml or .py is made absolute (realpath), a bare
 * name is kept.  ATB_ERR_USAGE when it does not fit in size bytes.
 */
enum atb_status atb_loop_task_ref(const char *task, char *out, size_t size,
				  struct atb_error *err);

#endif
