/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The tuning loop (include/atb/loop.h): run rows, seeded proposals, one
 * measurement per iteration, the usable-iteration rule, keep-best, and
 * resume.  Everything a run decides is in the store before the next
 * iteration starts, so a kill at any point loses at most the iteration in
 * progress, which leaves no iteration row and is redone.
 *
 * Does not: build, run or judge candidates (atb_measure_candidate does),
 * print, or catch signals.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <gsl/gsl_rng.h>
#include <jansson.h>

#include "atb/atb.h"
#include "atb/box.h"
#include "atb/engine.h"
#include "atb/llm.h"
#include "atb/loop.h"
#include "loop/loop_int.h"
#include "util.h"
#include "loop/llm_proposer.h"
#include "banned.h"

/* ---- proposals ---- */

enum atb_status atb_loop_proposals(const struct atb_task *task, const char *proposer,
				   int64_t seed, size_t n, struct atb_knob_assignment *out,
				   struct atb_error *err)
{
	gsl_rng *rng;
	size_t k;

	if (proposer && strcmp(proposer, ATB_LOOP_PROPOSER_RANDOM))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "unknown proposer '%s'; the proposers are: random", proposer);
	if (n == 0)
		return ATB_OK;
	rng = gsl_rng_alloc(gsl_rng_mt19937);
	if (!rng)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot make the proposer: out of memory");
	gsl_rng_set(rng, (unsigned long)seed);
	atb_task_default_knobs(task, &out[0]);
	for (k = 1; k < n; k++)
		atb_task_sample_knobs(task, rng, &out[k]);
	gsl_rng_free(rng);
	return ATB_OK;
}

enum atb_status atb_loop_knobs_json(const struct atb_knob_assignment *a, char **out,
				    struct atb_error *err)
{
	json_t *o;
	enum atb_status st;
	size_t i;

	*out = NULL;
	atb_alloc_install_json();
	o = json_object();
	if (!o)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot format knobs: out of memory");
	for (i = 0; i < a->n; i++)
		if (json_object_set_new(o, a->knobs[i].name, json_string(a->knobs[i].value))) {
			json_decref(o);
			return atb_error_set(err, ATB_ERR_NOMEM, "cannot format knobs: out of memory");
		}
	if (json_object_set_new(o, "cflags", json_string(a->cflags))) {
		json_decref(o);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot format knobs: out of memory");
	}
	st = atbi_json_canonical(o, out, err);
	json_decref(o);
	return st;
}

/* ---- classification ---- */

static int gate_is(const struct atb_measure_outcome *o, const char *const *gates)
{
	for (; *gates; gates++)
		if (!strcmp(o->gate, *gates))
			return 1;
	return 0;
}

enum atb_status atb_loop_classify(const struct atb_protocol *p,
				  const struct atb_measure_outcome *o, char *outcome,
				  int *usable, struct atb_error *err)
{
	static const char *const not_built[] = {ATB_GATE_SURFACE, ATB_GATE_STATIC, ATB_GATE_BUILD,
						NULL};
	static const char *const not_correct[] = {ATB_GATE_CORRECTNESS, ATB_GATE_INPUT_MUTATION,
						  ATB_GATE_RESULT_REUSE, ATB_GATE_RUNNER, NULL};
	int rejected = o->verdict == ATB_MEASURE_REJECTED;
	int built, correct, measured, admitted, ok = 1;
	size_t i;

	/*
	 * The steps an iteration reached.  A runner failure (crash, hang) is
	 * counted as not correct: it may have happened during correctness.
	 */
	built = !(rejected && gate_is(o, not_built));
	correct = built && !(rejected && gate_is(o, not_correct));
	measured = correct && !rejected;
	admitted = measured && o->verdict == ATB_MEASURE_ADMITTED;

	/* PROTO: loop.usable_iteration */
	for (i = 0; i < p->loop.nusable_iteration; i++) {
		const char *step = p->loop.usable_iteration[i];

		if (!strcmp(step, "built"))
			ok = ok && built;
		else if (!strcmp(step, "correct"))
			ok = ok && correct;
		else if (!strcmp(step, "measured"))
			ok = ok && measured;
		else if (!strcmp(step, "admitted"))
			ok = ok && admitted;
		else
			return atb_error_set(err, ATB_ERR_PROTOCOL,
					     "protocol v%d: loop.usable_iteration step '%s' is not "
					     "one of built, correct, measured, admitted",
					     p->version, step);
	}
	*usable = ok;
	if (ok)
		snprintf(outcome, 64, "usable");
	else if (o->verdict == ATB_MEASURE_QUARANTINED)
		snprintf(outcome, 64, "quarantined");
	else if (o->verdict == ATB_MEASURE_ADMITTED)
		snprintf(outcome, 64, "admitted");   /* only under a stricter protocol */
	else if (o->gate[0])
		snprintf(outcome, 64, "%s", o->gate);
	else
		snprintf(outcome, 64, "%s", atb_status_name(o->status ? o->status : ATB_ERR_REJECTED));
	/* The schema allows [a-z0-9_:] only. */
	for (i = 0; outcome[i]; i++)
		if (!((outcome[i] >= 'a' && outcome[i] <= 'z') ||
		      (outcome[i] >= '0' && outcome[i] <= '9') || outcome[i] == '_' ||
		      outcome[i] == ':'))
			outcome[i] = '_';
	return ATB_OK;
}

/* ---- files ---- */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* Remove path and everything under it (not following links); absent is fine. */
static enum atb_status remove_tree(const char *path, struct atb_error *err)
{
	struct stat sb;

	if (lstat(path, &sb) != 0)
		return errno == ENOENT ? ATB_OK
				       : atb_error_set(err, ATB_ERR_IO, "cannot remove '%s': %s",
						       path, strerror(errno));
	if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
		return atb_error_set(err, ATB_ERR_IO, "cannot remove '%s': %s", path,
				     strerror(errno));
	return ATB_OK;
}

enum atb_status atbi_make_dir(const char *path, mode_t mode, struct atb_error *err)
{
	if (mkdir(path, mode) == 0 || errno == EEXIST)
		return ATB_OK;
	return atb_error_set(err, ATB_ERR_IO, "cannot create folder '%s': %s", path,
			     strerror(errno));
}

enum atb_status atbi_run_task_dirs(const char *runs_dir, const char *run_id, int64_t k,
				   char *cand, char *work, size_t size, struct atb_error *err)
{
	char dir[PATH_MAX];
	enum atb_status st;

	if (snprintf(dir, sizeof(dir), "%s/%s", runs_dir, run_id) >= (int)sizeof(dir))
		return atb_error_set(err, ATB_ERR_USAGE, "runs folder '%s' is too long", runs_dir);
	st = atbi_make_dir(dir, 0700, err);
	if (st)
		return st;
	snprintf(dir + strlen(dir), sizeof(dir) - strlen(dir), "/task-%" PRId64, k);
	if ((st = remove_tree(dir, err)))
		return st;
	if ((size_t)snprintf(cand, size, "%s/candidate", dir) >= size ||
	    (size_t)snprintf(work, size, "%s/work", dir) >= size)
		return atb_error_set(err, ATB_ERR_USAGE, "runs folder '%s' is too long", runs_dir);
	st = atbi_make_dir(dir, 0700, err);
	if (!st)
		st = atbi_make_dir(cand, 0700, err);
	if (!st)
		st = atbi_make_dir(work, 0700, err);
	return st;
}

/* ---- the loop ---- */

struct loop {
	struct atb_store *store;
	const struct atb_loop_opts *o;
	struct atb_protocol *proto;
	struct atb_task *task;
	struct atb_run_row run;
	char runs_dir[PATH_MAX];
	struct atb_knob_assignment *props;   /* run.iterations proposals */
	/* An engine task instead of a kernel task: task and props unused. */
	struct atb_engine_task *etask;
	struct atb_engine_config *eprops;    /* run.iterations configurations */
	struct atb_loop_summary *sum;
	struct atb_loop_progress prog;
	/* a model proposer's client (one per run: a replay uses each recording once) */
	struct atb_llm_client *client;
	const char *replay_of;               /* a replay: the recorded run; else NULL */
	struct atb_iteration_row *orig;      /* a replay: the recorded run's iterations */
	size_t norig;
	char last_outcome[64];
	char last_reason[512];
	double spent_s;                      /* this call's finished iterations */
	int64_t finished;                    /* by this call */
	/* the iteration in progress, for the ETA */
	int64_t iter_t0_ns, attempt_t0_ns;
	double last_attempt_s;               /* the attempt before, re-run; 0: none */
	int attempt;
	double fraction;
};

/*
 * Seconds left: the rest of the iteration in progress, then the iterations
 * after it at the mean of the finished ones (or, before any finished, at
 * what the one in progress is estimated to take in all).  The rest of the
 * one in progress: a re-run attempt at the pace of the one before; else
 * from its attempt's pace (time since the attempt began over the fraction
 * of its runners done) once a runner has finished; else the mean less the
 * time it has taken.  -1 when nothing is known yet.
 */
static double eta(const struct loop *L, int between)
{
	double mean = L->finished ? L->spent_s / (double)L->finished : -1;
	double now_s = (double)atbi_monotonic_ns() / 1e9, rest = -1, whole;
	double elapsed = L->iter_t0_ns ? now_s - (double)L->iter_t0_ns / 1e9 : 0;
	int64_t after = L->run.iterations - L->sum->done - (between ? 0 : 1);

	if (between)
		return mean >= 0 ? mean * (double)(after > 0 ? after : 0) : -1;
	if (L->last_attempt_s > 0)  /* a re-run: at the pace of the attempt before */
		rest = L->last_attempt_s * (1 - L->fraction);
	else if (L->fraction > 0 && L->attempt_t0_ns)
		rest = (now_s - (double)L->attempt_t0_ns / 1e9) * (1 - L->fraction) / L->fraction;
	else if (mean >= 0)
		rest = mean > elapsed ? mean - elapsed : 0;
	if (rest < 0)
		return -1;
	whole = mean >= 0 ? mean : elapsed + rest;
	return rest + whole * (double)(after > 0 ? after : 0);
}

static void report(struct loop *L, const char *phase)
{
	if (!L->o->progress)
		return;
	L->prog.run_id = L->run.id;
	L->prog.planned = L->run.iterations;
	L->prog.phase = phase;
	L->prog.last_outcome = L->last_outcome[0] ? L->last_outcome : NULL;
	L->prog.done = L->sum->done;
	L->prog.usable = L->sum->usable;
	L->prog.have_best = L->sum->have_best;
	L->prog.best_k = L->sum->best_k;
	L->prog.best_speedup = L->sum->best_speedup;
	L->prog.best_ci_low = L->sum->best_ci_low;
	L->prog.best_ci_high = L->sum->best_ci_high;
	L->prog.last_reason = L->last_reason;
	L->prog.mean_iteration_s = L->finished ? L->spent_s / (double)L->finished : 0.0;
	L->prog.eta_s = eta(L, !strcmp(phase, "done"));
	L->o->progress(L->o->progress_ctx, &L->prog);
	L->prog.rerun_why = NULL;
}

/* A measurement phase: where it is, for the progress line and the ETA. */
static void measure_detail(void *ctx, const struct atb_measure_progress *d)
{
	struct loop *L = ctx;

	if (d->attempt != L->attempt) {
		int64_t now = atbi_monotonic_ns();

		L->last_attempt_s = L->attempt_t0_ns ? (double)(now - L->attempt_t0_ns) / 1e9 : 0;
		L->attempt = d->attempt;
		L->attempt_t0_ns = now;
	}
	L->fraction = d->fraction;
	L->prog.attempt = d->attempt;
	L->prog.max_attempts = d->max_attempts;
	L->prog.rerun_why = d->rerun_why;
	report(L, d->phase);
}

/* An engine A/B's phases carry no fraction: the mean alone gives its ETA. */
static void measure_phase(void *ctx, const char *phase)
{
	report(ctx, phase);
}

/* Keep-best: the highest CI lower bound, then speedup, then the earlier k. */
static void consider(struct atb_loop_summary *sum, const struct atb_iteration_row *it)
{
	if (!it->usable)
		return;
	if (sum->have_best && (it->ci_low < sum->best_ci_low ||
			       (it->ci_low == sum->best_ci_low && it->speedup <= sum->best_speedup)))
		return;
	sum->have_best = 1;
	sum->best_k = it->k;
	sum->best_speedup = it->speedup;
	sum->best_ci_low = it->ci_low;
	sum->best_ci_high = it->ci_high;
	sum->best_naive_speedup = it->naive_speedup;
}

static int stopped(const struct loop *L)
{
	return L->o->stop && *L->o->stop;
}

/* Classify a measurement and store its iteration row (one transaction). */
static enum atb_status record(struct loop *L, int64_t k, const struct atb_measure_outcome *o,
			      char *knobs_json, int64_t t0, struct atb_error *err)
{
	struct atb_measure_outcome out = *o;
	struct atb_iteration_row it;
	enum atb_status st;

	memset(&it, 0, sizeof(it));
	snprintf(it.run, sizeof(it.run), "%s", L->run.id);
	it.k = k;
	st = atb_loop_classify(L->proto, &out, it.outcome, &it.usable, err);
	if (st)
		return st;
	it.knobs_json = knobs_json;
	snprintf(it.job_uuid, sizeof(it.job_uuid), "%s", out.job_uuid);
	it.result_id = out.result_id;
	it.rejection_id = out.rejection_id;
	if (out.verdict != ATB_MEASURE_REJECTED) {
		it.speedup = out.speedup;
		it.ci_low = out.ci_low;
		it.ci_high = out.ci_high;
		it.naive_speedup = out.naive_speedup;
		it.naive_ci_low = out.naive_ci_low;
		it.naive_ci_high = out.naive_ci_high;
	}
	/* A usable iteration has no refusal; keep measure's note (a naive arm dropped, say). */
	it.reason = out.reason[0] ? out.reason : out.note;
	it.wall_s = (double)(atbi_monotonic_ns() - t0) / 1e9;
	if (L->replay_of) {
		/* a replay proposes what the recorded run proposed, byte for byte */
		size_t i;

		for (i = 0; i < L->norig && L->orig[i].k != k; i++)
			;
		if (i == L->norig || strcmp(L->orig[i].knobs_json, knobs_json))
			return atb_error_set(err, ATB_ERR_CHECK,
					     "replay of run '%s': iteration %" PRId64 " proposed %.300s,"
					     " the recorded run %.300s", L->replay_of, k, knobs_json,
					     i == L->norig ? "nothing" : L->orig[i].knobs_json);
	}
	st = atb_store_add_iteration(L->store, &it, err);
	if (st)
		return st;
	L->sum->done = k + 1;
	L->sum->usable += it.usable;
	consider(L->sum, &it);
	snprintf(L->last_outcome, sizeof(L->last_outcome), "%s", it.outcome);
	snprintf(L->last_reason, sizeof(L->last_reason), "%s", it.usable ? "" : it.reason);
	L->spent_s += it.wall_s;
	L->finished++;
	report(L, "done");
	return ATB_OK;
}

/* A fresh iteration folder runs/<run>/iter-<k> (a leftover of an interrupted attempt removed). */
static enum atb_status iter_dir(struct loop *L, int64_t k, char *dir, size_t size,
				struct atb_error *err)
{
	enum atb_status st;

	if (snprintf(dir, size, "%s/%s/iter-%" PRId64, L->runs_dir, L->run.id, k) >= (int)size)
		return atb_error_set(err, ATB_ERR_USAGE, "runs folder '%s' is too long",
				     L->runs_dir);
	*strrchr(dir, '/') = '\0';
	st = atbi_make_dir(dir, 0700, err);
	dir[strlen(dir)] = '/';
	if (!st)
		st = remove_tree(dir, err);
	if (!st)
		st = atbi_make_dir(dir, 0700, err);
	return st;
}

static int is_code(const struct loop *L)
{
	return !strcmp(L->run.proposer, ATB_LOOP_PROPOSER_LLM_CODE);
}

static const char *home_of(const struct loop *L)
{
	return L->o->home ? L->o->home : atb_home();
}

/* A model's iteration that gave no usable proposal (the reason in out):
   stored unusable, gate "proposal", with no knobs or configuration. */
static enum atb_status record_unproposed(struct loop *L, int64_t k, struct atb_measure_outcome *out,
					 int64_t t0, struct atb_error *err)
{
	char *empty = atb_strdup("{}");
	enum atb_status st;

	if (!empty)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	out->verdict = ATB_MEASURE_REJECTED;
	snprintf(out->gate, sizeof(out->gate), "proposal");
	out->status = ATB_ERR_LLM;
	st = record(L, k, out, empty, t0, err);
	atb_free(empty);
	return st;
}

/*
 * An engine task's iteration: the paired A/B of proposal k (drawn, or for
 * the llm proposer asked of the model now) against the engine's default
 * configuration (atb_engine_ab stores the result or the
 * rejection; a configuration the engine refuses is an unusable iteration
 * with the engine's message and stays in the space).
 */
static enum atb_status engine_iteration(struct loop *L, int64_t k, int64_t t0,
					struct atb_error *err)
{
	struct atb_engine_ab_opts ao;
	struct atb_measure_outcome out;
	char dir[PATH_MAX], label[96], *cj = NULL;
	enum atb_status st;

	if (!strcmp(L->run.proposer, ATB_LOOP_PROPOSER_LLM) && k >= 1) {
		struct atbi_llm_proposer pp = {
			.store = L->store, .protocol = L->proto, .etask = L->etask,
			.client = L->client, .run_id = L->run.id, .history_run = L->replay_of,
			.home = home_of(L), .seed = L->run.seed,
		};
		int got = 0;

		memset(&out, 0, sizeof(out));
		st = atbi_llm_propose_engine(&pp, k, &L->eprops[k], &got, out.reason,
					     sizeof(out.reason), err);
		if (st)
			return st;   /* an infrastructure defect ends the run here, unrecorded */
		if (!got)  /* no configuration inside the search space: never started */
			return record_unproposed(L, k, &out, t0, err);
	}
	st = iter_dir(L, k, dir, sizeof(dir), err);
	if (st)
		return st;
	memset(&ao, 0, sizeof(ao));
	ao.work_dir = dir;
	ao.seed_base = (uint64_t)L->run.seed;   /* every iteration on the same paired seeds */
	ao.nseeds = (size_t)L->run.paired_seeds;
	snprintf(label, sizeof(label), "run %s iter %" PRId64, L->run.id, k);
	ao.candidate_label = label;
	ao.box_fingerprint = L->run.box_fingerprint;
	ao.progress = measure_phase;
	ao.progress_ctx = L;
	st = atb_engine_ab(L->store, L->proto, L->etask, &L->eprops[k], &ao, &out, err);
	if (st)
		return st;
	if (stopped(L))
		return ATB_OK;   /* not recorded: redone on resume */
	st = atb_engine_config_json(&L->eprops[k], &cj, err);
	if (!st)
		st = record(L, k, &out, cj, t0, err);
	atb_free(cj);
	return st;
}

/* The measurement options every kernel iteration shares. */
static void measure_opts(struct loop *L, int64_t k, const char *work, char *label,
			 size_t label_size, struct atb_measure_opts *mo)
{
	memset(mo, 0, sizeof(*mo));
	mo->home = L->o->home;
	mo->runner_path = L->o->runner_path;
	mo->work_dir = work;
	/* Every iteration is measured on the same paired seeds (same inputs). */
	mo->seed_base = (uint64_t)L->run.seed;
	mo->nseeds = (size_t)L->run.paired_seeds;
	mo->with_naive = L->run.naive;
	snprintf(label, label_size, "run %s iter %" PRId64, L->run.id, k);
	mo->candidate_label = label;
	mo->progress_detail = measure_detail;
	mo->progress_ctx = L;
}

/* The iteration's proposal: the default knobs and the candidate's files by SHA-256. */
static enum atb_status code_proposal_json(struct loop *L, const char *cand, char **out,
					  struct atb_error *err)
{
	json_t *o = NULL, *files = NULL;
	char *kj = NULL;
	enum atb_status st;

	*out = NULL;
	st = atb_loop_knobs_json(&L->props[0], &kj, err);
	if (!st && !(o = json_loads(kj, 0, NULL)))
		st = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	if (!st)
		st = atbi_candidate_hashes(L->task, cand, &files, err);
	if (!st && json_object_set_new(o, "files", files))
		st = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	if (!st)
		st = atbi_json_canonical(o, out, err);
	json_decref(o);
	atb_free(kj);
	return st;
}

/*
 * A code proposer's iteration (llm-code): the candidate folder starts as
 * the task's template (a surface file the reply leaves out keeps it), the
 * model's files are written over it inside the folder only, and
 * the candidate goes to atb_measure_candidate built with the default knobs,
 * through every gate atb measure applies.  A reply that writes nothing
 * usable (a traversal, a name off the surface) is an unusable iteration
 * with outcome "proposal"; nothing is built.
 */
static enum atb_status code_iteration(struct loop *L, int64_t k, int64_t t0,
				      struct atb_error *err)
{
	atb_loop_measure_fn measure = L->o->measure ? L->o->measure : atb_measure_candidate;
	struct atb_measure_opts mo;
	struct atb_measure_outcome out;
	char dir[PATH_MAX], cand[PATH_MAX], work[PATH_MAX], prev[PATH_MAX], label[96];
	char *pj = NULL;
	/* a torch task's candidate.path names the surface file, not a template */
	int has_template = L->task->candidate.path && strcmp(L->task->kind, ATB_TASK_KIND_TORCH),
	    got = 1;
	enum atb_status st;

	st = iter_dir(L, k, dir, sizeof(dir), err);
	if (st)
		return st;
	if (snprintf(cand, sizeof(cand), "%s/candidate", dir) >= (int)sizeof(cand) ||
	    snprintf(work, sizeof(work), "%s/work", dir) >= (int)sizeof(work) ||
	    snprintf(prev, sizeof(prev), "%s/%s/iter-%" PRId64 "/candidate", L->runs_dir,
		     L->run.id, k - 1) >= (int)sizeof(prev))
		return atb_error_set(err, ATB_ERR_USAGE, "runs folder '%s' is too long",
				     L->runs_dir);
	st = has_template ? atb_task_instantiate_candidate(L->task, &L->props[k], cand, err)
			  : atbi_make_dir(cand, 0700, err);
	if (!st)
		st = atbi_make_dir(work, 0700, err);
	if (st)
		return st;
	memset(&out, 0, sizeof(out));
	{
		struct atbi_llm_proposer pp = {
			.store = L->store, .protocol = L->proto, .task = L->task, .client = L->client,
			.run_id = L->run.id, .history_run = L->replay_of, .home = home_of(L),
			.seed = L->run.seed,
		};

		st = atbi_llm_propose_code(&pp, k, cand, k >= 1 ? prev : NULL, &got, out.reason,
					   sizeof(out.reason), err);
		if (st)
			return st;   /* an infrastructure defect ends the run here, unrecorded */
	}
	st = code_proposal_json(L, cand, &pj, err);
	if (st)
		return st;
	if (!got) {
		/* no usable reply: an unusable iteration, nothing built */
		out.verdict = ATB_MEASURE_REJECTED;
		snprintf(out.gate, sizeof(out.gate), "proposal");
		out.status = ATB_ERR_LLM;
		atb_free(pj);
		pj = atb_strdup("{}");
		if (!pj)
			return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	} else {
		measure_opts(L, k, work, label, sizeof(label), &mo);
		st = measure(L->store, L->proto, L->task, cand, &L->props[k], &mo, &out, err);
		if (st || stopped(L)) {
			atb_free(pj);
			return st;   /* stopped: not recorded, redone on resume */
		}
	}
	st = record(L, k, &out, pj, t0, err);
	atb_free(pj);
	return st;
}

static enum atb_status one_iteration(struct loop *L, int64_t k, struct atb_error *err)
{
	const struct atb_knob_assignment *knobs = &L->props[k];
	struct atb_measure_opts mo;
	struct atb_measure_outcome out;
	atb_loop_measure_fn measure = L->o->measure ? L->o->measure : atb_measure_candidate;
	char dir[PATH_MAX], cand[PATH_MAX], work[PATH_MAX], label[96];
	char *knobs_json = NULL;
	enum atb_status st;
	int64_t t0 = atbi_monotonic_ns();

	L->prog.k = k;
	L->iter_t0_ns = t0;
	L->attempt_t0_ns = 0;
	L->last_attempt_s = 0;
	L->attempt = 0;
	L->fraction = 0;
	L->prog.attempt = 0;
	report(L, "propose");
	if (L->etask)
		return engine_iteration(L, k, t0, err);
	if (is_code(L))
		return code_iteration(L, k, t0, err);
	if (!strcmp(L->run.proposer, ATB_LOOP_PROPOSER_LLM) && k >= 1) {
		struct atbi_llm_proposer pp = {
			.store = L->store, .protocol = L->proto, .task = L->task, .client = L->client,
			.run_id = L->run.id, .history_run = L->replay_of, .home = home_of(L),
			.seed = L->run.seed,
		};
		int got = 0;

		memset(&out, 0, sizeof(out));
		st = atbi_llm_propose_knobs(&pp, k, &L->props[k], &got, out.reason,
					    sizeof(out.reason), err);
		if (st)
			return st;   /* an infrastructure defect ends the run here, unrecorded */
		if (!got)  /* no proposal inside the knob space: nothing built */
			return record_unproposed(L, k, &out, t0, err);
	}
	/* A folder left by an interrupted attempt: the iteration is redone. */
	st = iter_dir(L, k, dir, sizeof(dir), err);
	if (st)
		return st;
	if (snprintf(cand, sizeof(cand), "%s/candidate", dir) >= (int)sizeof(cand) ||
	    snprintf(work, sizeof(work), "%s/work", dir) >= (int)sizeof(work))
		return atb_error_set(err, ATB_ERR_USAGE, "runs folder '%s' is too long",
				     L->runs_dir);
	if (!st)
		st = atb_task_instantiate_candidate(L->task, knobs, cand, err);
	if (!st)
		st = atbi_make_dir(work, 0700, err);
	if (st)
		return st;

	memset(&mo, 0, sizeof(mo));
	mo.home = L->o->home;
	mo.runner_path = L->o->runner_path;
	mo.work_dir = work;
	/* Every iteration is measured on the same paired seeds (same inputs). */
	mo.seed_base = (uint64_t)L->run.seed;
	mo.nseeds = (size_t)L->run.paired_seeds;
	mo.with_naive = L->run.naive;
	snprintf(label, sizeof(label), "run %s iter %" PRId64, L->run.id, k);
	mo.candidate_label = label;
	mo.progress_detail = measure_detail;
	mo.progress_ctx = L;
	memset(&out, 0, sizeof(out));
	st = measure(L->store, L->proto, L->task, cand, knobs, &mo, &out, err);
	if (st)
		return st;
	if (stopped(L))
		return ATB_OK;   /* not recorded: redone on resume */

	st = atb_loop_knobs_json(knobs, &knobs_json, err);
	if (st)
		return st;
	st = record(L, k, &out, knobs_json, t0, err);
	atb_free(knobs_json);
	return st;
}

/* The run's model calls into the summary; the budget spent, if any. */
static enum atb_status spent(struct loop *L, int64_t t0, const char **which, struct atb_error *err)
{
	struct atb_llm_run_stats rs;
	enum atb_status st;

	*which = NULL;
	st = atb_llm_run_stats(L->store, L->run.id, &rs, err);
	if (st)
		return st;
	L->sum->tokens = rs.prompt_tokens + rs.completion_tokens;
	L->sum->cost_usd = rs.cost_usd;
	L->sum->llm_calls = rs.calls;
	if (L->o->token_budget > 0 && L->sum->tokens >= L->o->token_budget)
		*which = "tokens";
	else if (L->o->cost_budget_usd > 0 && rs.cost_usd >= L->o->cost_budget_usd)
		*which = "cost";
	else if (L->o->wall_budget_s > 0 &&
		 (double)(atbi_monotonic_ns() - t0) / 1e9 >= L->o->wall_budget_s)
		*which = "wall";
	return ATB_OK;
}

static enum atb_status run_loop(struct loop *L, struct atb_error *err)
{
	enum atb_status st;
	int64_t k, t0 = atbi_monotonic_ns();
	const char *which;

	L->sum->first_k = L->sum->done;
	for (k = L->sum->done; k < L->run.iterations; k++) {
		if (stopped(L)) {
			L->sum->interrupted = 1;
			return ATB_OK;
		}
		st = spent(L, t0, &which, err);
		if (st)
			return st;
		if (which && k > L->sum->first_k) {
			snprintf(L->sum->budget, sizeof(L->sum->budget), "%s", which);
			return ATB_OK;
		}
		st = one_iteration(L, k, err);
		if (st) {
			(void)spent(L, t0, &which, NULL);
			return st;
		}
		if (stopped(L) && L->sum->done <= k) {
			L->sum->interrupted = 1;
			return ATB_OK;
		}
	}
	return spent(L, t0, &which, err);
}

enum atb_status atbi_runs_dir(const char *runs_dir, const char *db_path, char *out,
			      size_t size, struct atb_error *err)
{
	const char *slash = db_path ? strrchr(db_path, '/') : NULL;
	int n;

	if (runs_dir)
		n = snprintf(out, size, "%s", runs_dir);
	else if (slash)
		n = snprintf(out, size, "%.*s/runs", (int)(slash - db_path), db_path);
	else
		n = snprintf(out, size, "runs");
	if (n < 0 || (size_t)n >= size)
		return atb_error_set(err, ATB_ERR_USAGE, "runs folder path is too long");
	if (!out[0])
		snprintf(out, size, "/runs");
	return atbi_make_dir(out, 0755, err);
}

static enum atb_status runs_dir_of(struct loop *L, struct atb_error *err)
{
	return atbi_runs_dir(L->o->runs_dir, atb_store_path(L->store), L->runs_dir,
			     sizeof(L->runs_dir), err);
}

enum atb_status atbi_this_box(struct atb_store *s, const struct atb_protocol *p,
			      char fp[ATB_BOX_FINGERPRINT_LEN + 1], struct atb_box **keep,
			      struct atb_error *err)
{
	struct atb_box *box = NULL;
	json_t *j = NULL;
	char *desc = NULL;
	enum atb_status st;

	if (keep)
		*keep = NULL;
	st = atb_box_probe_with_compiler(&box, p->build.cpu_compiler, err);
	if (!st)
		st = atb_box_fingerprint(box, fp, err);
	if (!st && s)
		st = atb_box_to_json(box, 0, &j, err);
	if (!st && s)
		st = atbi_json_canonical(j, &desc, err);
	if (!st && s)
		st = atb_store_register_box(s, fp, desc, err);
	json_decref(j);
	atb_free(desc);
	if (keep && !st)
		*keep = box;
	else
		atb_box_free(box);
	return st;
}

/*
 * The run's model client: it records every call under the run's id and,
 * on a replay, answers from the recorded run's calls without any server.
 * None for the random proposer.
 */
static enum atb_status make_client(struct loop *L, struct atb_error *err)
{
	struct atb_llm_client_opts co;

	if (strcmp(L->run.proposer, ATB_LOOP_PROPOSER_LLM) && !is_code(L))
		return ATB_OK;
	memset(&co, 0, sizeof(co));
	co.cfg = L->o->llm;
	co.protocol = L->proto;
	co.store = L->store;
	co.run = L->run.id;
	co.replay_run = L->replay_of;
	return atb_llm_client_new(&co, &L->client, err);
}

/*
 * The store and the runs folder must lie outside the task's folder: the
 * surface gate hashes that folder before and after every runner, so a
 * store or candidate folder written inside it would refuse every
 * candidate at gate surface (a KernelBench file's folder is where it lies,
 * often the current one).
 */
static enum atb_status outside_task(const struct loop *L, const char *what, const char *path,
				    struct atb_error *err)
{
	char *t, *p;
	size_t n;
	int in;

	if (!L->task || !L->task->dir || !path)
		return ATB_OK;
	t = realpath(L->task->dir, NULL);
	p = realpath(path, NULL);
	n = t ? strlen(t) : 0;
	in = t && p && !strncmp(p, t, n) && (p[n] == '/' || p[n] == '\0' || (n == 1 && t[0] == '/'));
	free(t);   /* realpath's malloc, not ours */
	free(p);
	if (in)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "%s '%s' lies in the folder of task '%s' ('%s'): the surface gate "
				     "hashes that folder, so every candidate would be refused; put the "
				     "task in a folder of its own (or the store elsewhere, --runs-dir)",
				     what, path, L->task->name, L->task->dir);
	return ATB_OK;
}

static void loop_release(struct loop *L)
{
	atb_llm_client_free(L->client);
	atb_store_iterations_free(L->orig, L->norig);
	atb_free(L->props);
	atb_free(L->eprops);
	atb_task_free(L->task);
	atb_engine_task_free(L->etask);
	atb_protocol_free(L->proto);
}

static enum atb_status alloc_proposals(struct loop *L, struct atb_error *err)
{
	if (L->etask) {
		enum atb_status st;
		int64_t k;

		L->eprops = atb_calloc((size_t)L->run.iterations, sizeof(*L->eprops));
		if (!L->eprops)
			return atb_error_set(err, ATB_ERR_NOMEM, "cannot plan %" PRId64
					     " iterations: out of memory", L->run.iterations);
		/* llm: iteration 0 the default (all zero), the others asked for as the run goes */
		if (!strcmp(L->run.proposer, ATB_LOOP_PROPOSER_LLM))
			return ATB_OK;
		st = atb_engine_proposals(L->etask, L->run.seed, (size_t)L->run.iterations,
					  L->eprops, err);
		/* every configuration run passes the check a model's reply passes */
		for (k = 0; !st && k < L->run.iterations; k++)
			st = atb_engine_config_check(L->etask, &L->eprops[k], err);
		return st;
	}
	L->props = atb_calloc((size_t)L->run.iterations, sizeof(*L->props));
	if (!L->props)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot plan %" PRId64 " iterations: out of memory",
				     L->run.iterations);
	if (!strcmp(L->run.proposer, ATB_LOOP_PROPOSER_LLM)) {
		/* iteration 0 is the default; the others are asked for as the run goes */
		atb_task_default_knobs(L->task, &L->props[0]);
		return ATB_OK;
	}
	if (is_code(L)) {
		/* the model writes the code; it is built with the default knobs */
		int64_t k;

		for (k = 0; k < L->run.iterations; k++)
			atb_task_default_knobs(L->task, &L->props[k]);
		return ATB_OK;
	}
	return atb_loop_proposals(L->task, L->run.proposer, L->run.seed,
				  (size_t)L->run.iterations, L->props, err);
}

static void summary_init(struct atb_loop_summary *out, const struct atb_run_row *run)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->run_id, sizeof(out->run_id), "%s", run->id);
	snprintf(out->task, sizeof(out->task), "%s", run->task);
	out->planned = run->iterations;
	out->best_k = -1;
}

/*
 * A new run's row, for atb run and its replay alike: this box, the store
 * and the runs folder outside the task's folder (a file the measurement
 * changes there fails the surface gate), the proposals, the row, the
 * summary.
 */
static enum atb_status start_run(struct loop *L, struct atb_store *s,
				 struct atb_loop_summary *out, struct atb_error *err)
{
	enum atb_status st = atbi_this_box(s, L->proto, L->run.box_fingerprint, NULL, err);

	if (!st)
		st = outside_task(L, "store", atb_store_path(s), err);
	if (!st)
		st = runs_dir_of(L, err);
	if (!st)
		st = outside_task(L, "runs folder", L->runs_dir, err);
	if (!st)
		st = alloc_proposals(L, err);
	if (!st)
		st = atb_store_add_run(s, &L->run, err);
	if (!st)
		summary_init(out, &L->run);
	return st;
}

/* A kernel task (a name or a folder), a KernelBench-format file (TASK.py: kind torch)
   or an engine task (a YAML file with kind: engine, or a bundled one's name).  code:
   the proposer writes code, the only kind of proposal a torch task has. */
static enum atb_status open_task(struct loop *L, const char *home, const char *task, int code,
				 struct atb_error *err)
{
	char path[PATH_MAX];
	enum atb_status st;

	if (atb_engine_task_find(home, task, path, sizeof(path)))
		return atb_engine_task_load(home, path, &L->etask, err);
	/* TASK.py: the interpreter is $ATB_PYTHON, else python3 (atb measure's default) */
	st = atb_task_open(home, task, &L->task, err);
	if (!st && !code && L->task->kind && !strcmp(L->task->kind, ATB_TASK_KIND_TORCH))
		/* no knobs and no candidate template: nothing for a knob proposer to
		   draw (its candidates go through atb measure or atb suite, whose
		   gates, the static checks first, are the same) */
		return atb_error_set(err, ATB_ERR_USAGE,
				     "task '%s' is a KernelBench-format (torch) task: atb run has "
				     "nothing to propose for it but code (--proposer llm-code; it has no "
				     "knobs and no candidate template); or measure its candidates with "
				     "atb measure or atb suite",
				     L->task->name);
	return st;
}

/* The plan of a new run, judged before anything is written: L's task and
   protocol loaded (loop_release frees them whatever it returns). */
static enum atb_status check_plan(struct loop *L, const char *home, const char *task,
				  const struct atb_loop_opts *o, struct atb_error *err)
{
	const char *proposer = o->proposer ? o->proposer : ATB_LOOP_PROPOSER_RANDOM;
	int model = !strcmp(proposer, ATB_LOOP_PROPOSER_LLM) ||
		    !strcmp(proposer, ATB_LOOP_PROPOSER_LLM_CODE);
	enum atb_status st;

	if (strcmp(proposer, ATB_LOOP_PROPOSER_RANDOM) && !model)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "unknown proposer '%s'; the proposers are: random, llm, llm-code",
				     proposer);
	if (model && !o->llm)
		return atb_error_set(err, ATB_ERR_USAGE, "proposer %s needs a model (atb/llm.h config)",
				     proposer);
	if (o->iterations < 1 || o->iterations > ATB_LOOP_MAX_ITERATIONS)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "iterations must be 1 to %d, not %" PRId64,
				     ATB_LOOP_MAX_ITERATIONS, o->iterations);
	if (o->seed < 0)
		return atb_error_set(err, ATB_ERR_USAGE, "a seed is a non-negative integer");
	st = open_task(L, home, task, !strcmp(proposer, ATB_LOOP_PROPOSER_LLM_CODE), err);
	if (!st)
		st = atb_protocol_load_current(home, &L->proto, err);
	if (st)
		return st;
	if (o->paired_seeds != 0 && o->paired_seeds < L->proto->stats.min_paired_seeds)
		/* PROTO: stats.min_paired_seeds */
		return atb_error_set(err, ATB_ERR_USAGE,
				     "%" PRId64 " paired seeds is below the protocol's "
				     "stats.min_paired_seeds (%d)",
				     o->paired_seeds, L->proto->stats.min_paired_seeds);
	if (L->etask && !strcmp(proposer, ATB_LOOP_PROPOSER_LLM_CODE))
		return atb_error_set(err, ATB_ERR_USAGE, "proposer llm-code writes code, and engine"
				     " task '%s' has none: its proposals are launch configurations"
				     " (--proposer llm)", L->etask->name);
	if (o->naive > 0 && (L->etask || !L->task->has_naive))
		return atb_error_set(err, ATB_ERR_USAGE, "task '%s' has no naive baseline",
				     L->etask ? L->etask->name : L->task->name);
	return ATB_OK;
}

enum atb_status atb_loop_check(const char *task, const struct atb_loop_opts *o,
			       struct atb_error *err)
{
	struct loop L;
	enum atb_status st;

	memset(&L, 0, sizeof(L));
	st = check_plan(&L, o->home ? o->home : atb_home(), task, o, err);
	loop_release(&L);
	return st;
}

enum atb_status atb_loop_check_task(const char *home, const char *task, struct atb_error *err)
{
	struct loop L;
	enum atb_status st;

	memset(&L, 0, sizeof(L));
	st = open_task(&L, home ? home : atb_home(), task, 0, err);
	loop_release(&L);
	return st;
}

enum atb_status atb_loop_plan(const char *home, const char *task, const char *proposer,
			      int64_t seed, size_t n, char ***out, struct atb_error *err)
{
	struct loop L;
	enum atb_status st;
	size_t k;

	*out = NULL;
	memset(&L, 0, sizeof(L));
	if (proposer && (!strcmp(proposer, ATB_LOOP_PROPOSER_LLM) ||
			 !strcmp(proposer, ATB_LOOP_PROPOSER_LLM_CODE)))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "proposer %s has no plan: each proposal depends on the verdicts"
				     " before it", proposer);
	if (proposer && strcmp(proposer, ATB_LOOP_PROPOSER_RANDOM))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "unknown proposer '%s'; the proposers are: random, llm, llm-code",
				     proposer);
	L.run.iterations = (int64_t)n;
	L.run.seed = seed;
	snprintf(L.run.proposer, sizeof(L.run.proposer), "%s", ATB_LOOP_PROPOSER_RANDOM);
	st = open_task(&L, home ? home : atb_home(), task, 0, err);
	if (!st && !L.etask) {
		L.props = atb_calloc(n ? n : 1, sizeof(*L.props));
		st = L.props ? atb_loop_proposals(L.task, proposer, seed, n, L.props, err)
			     : atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	} else if (!st) {
		st = alloc_proposals(&L, err);
	}
	if (!st && !(*out = atb_calloc(n ? n : 1, sizeof(char *))))
		st = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	for (k = 0; !st && k < n; k++)
		st = L.etask ? atb_engine_config_json(&L.eprops[k], &(*out)[k], err)
			     : atb_loop_knobs_json(&L.props[k], &(*out)[k], err);
	if (st && *out) {
		for (k = 0; k < n; k++)
			atb_free((*out)[k]);
		atb_free(*out);
		*out = NULL;
	}
	loop_release(&L);
	return st;
}

enum atb_status atb_loop_start(struct atb_store *s, const char *task,
			       const struct atb_loop_opts *o, struct atb_loop_summary *out,
			       struct atb_error *err)
{
	struct loop L;
	struct atb_frozen_protocol *frozen = NULL;
	const char *home = o->home ? o->home : atb_home();
	const char *proposer = o->proposer ? o->proposer : ATB_LOOP_PROPOSER_RANDOM;
	char id[33];
	size_t nfrozen = 0;
	int current = 0;
	enum atb_status st;

	memset(&L, 0, sizeof(L));
	memset(out, 0, sizeof(*out));
	out->best_k = -1;
	L.store = s;
	L.o = o;
	L.sum = out;
	st = check_plan(&L, home, task, o, err);
	if (st)
		goto out;

	/* The plan. */
	st = atbi_random_id(id);
	if (st) {
		st = atb_error_set(err, st, "cannot make a run id");
		goto out;
	}
	snprintf(L.run.id, sizeof(L.run.id), "%.12s", id);
	if (strchr(task, '/') || (strlen(task) > 5 && !strcmp(task + strlen(task) - 5, ".yaml")) ||
	    (strlen(task) > 3 && !strcmp(task + strlen(task) - 3, ".py"))) {
		char *abs = realpath(task, NULL);
		int len = snprintf(L.run.task, sizeof(L.run.task), "%s", abs ? abs : task);

		free(abs);   /* realpath's malloc, not ours */
		if (len < 0 || (size_t)len >= sizeof(L.run.task)) {
			st = atb_error_set(err, ATB_ERR_USAGE, "task path '%s' is too long", task);
			goto out;
		}
	} else {
		snprintf(L.run.task, sizeof(L.run.task), "%s", task);
	}
	snprintf(L.run.proposer, sizeof(L.run.proposer), "%s", proposer);
	L.run.seed = o->seed;
	L.run.iterations = o->iterations;
	L.run.paired_seeds = o->paired_seeds ? o->paired_seeds : L.proto->stats.min_paired_seeds;
	L.run.naive = L.etask ? 0 : o->naive < 0 ? L.task->has_naive : o->naive;
	snprintf(L.run.protocol_digest, sizeof(L.run.protocol_digest), "%s", L.proto->digest);

	st = atb_protocol_frozen_list(home, &frozen, &nfrozen, &current, err);
	if (!st)
		st = atb_store_sync_protocols(s, frozen, nfrozen, NULL, err);
	atb_protocol_frozen_free(frozen, nfrozen);
	if (!st)
		st = start_run(&L, s, out, err);
	if (st)
		goto out;
	st = make_client(&L, err);
	if (!st)
		st = run_loop(&L, err);
out:
	loop_release(&L);
	return st;
}

enum atb_status atb_loop_resume(struct atb_store *s, const char *run_id,
				const struct atb_loop_opts *o, struct atb_loop_summary *out,
				struct atb_error *err)
{
	struct loop L;
	struct atb_iteration_row *rows = NULL;
	const char *home = o->home ? o->home : atb_home();
	char fp[ATB_BOX_FINGERPRINT_LEN + 1];
	size_t n = 0, i;
	enum atb_status st;

	memset(&L, 0, sizeof(L));
	memset(out, 0, sizeof(*out));
	out->best_k = -1;
	L.store = s;
	L.o = o;
	L.sum = out;
	st = atb_store_get_run(s, run_id, &L.run, err);
	if (st)
		return st;
	summary_init(out, &L.run);
	if (!strcmp(L.run.proposer, ATB_LOOP_PROPOSER_AGENT))
		return atb_error_set(err, ATB_ERR_USAGE, "run '%s' is an outside agent's: it has no "
				     "proposer to resume; hand its candidates in with 'atb submit "
				     "TASK CANDIDATE --run %s'", L.run.id, L.run.id);
	st = atb_protocol_load_digest(home, L.run.protocol_digest, &L.proto, err);
	if (!st)
		st = open_task(&L, home, L.run.task,
			       !strcmp(L.run.proposer, ATB_LOOP_PROPOSER_LLM_CODE), err);
	if (!st)
		st = atbi_this_box(NULL, L.proto, fp, NULL, err);
	if (st)
		goto out;
	if (strcmp(fp, L.run.box_fingerprint)) {
		st = atb_error_set(err, ATB_ERR_USAGE,
				   "run '%s' was started on box %.12s, this is box %.12s; "
				   "resume it on its own box",
				   L.run.id, L.run.box_fingerprint, fp);
		goto out;
	}
	if ((!strcmp(L.run.proposer, ATB_LOOP_PROPOSER_LLM) || is_code(&L)) && !o->llm) {
		st = atb_error_set(err, ATB_ERR_USAGE, "run '%s' was proposed by a model: resume"
				   " it with one (--proposer llm's options)", L.run.id);
		goto out;
	}
	st = alloc_proposals(&L, err);
	if (!st)
		st = atb_store_list_iterations(s, L.run.id, &rows, &n, err);
	if (st)
		goto out;
	/* Same seed, same proposals: the replay must reproduce what is stored. */
	for (i = 0; i < n; i++) {
		char *want = NULL;

		if ((!strcmp(L.run.proposer, ATB_LOOP_PROPOSER_LLM) && rows[i].k >= 1) || is_code(&L)) {
			/* a model's proposals are its recorded calls (atb llm show RUN) */
			out->usable += rows[i].usable;
			consider(out, &rows[i]);
			snprintf(L.last_outcome, sizeof(L.last_outcome), "%s", rows[i].outcome);
			continue;
		}

		st = L.etask ? atb_engine_config_json(&L.eprops[rows[i].k], &want, err)
			     : atb_loop_knobs_json(&L.props[rows[i].k], &want, err);
		if (st)
			goto out;
		if (strcmp(want, rows[i].knobs_json)) {
			st = atb_error_set(err, ATB_ERR_CHECK,
					   "run '%s': iteration %" PRId64 " stored knobs %s, but the "
					   "proposer replays %s (did the task's knob space change?)",
					   L.run.id, rows[i].k, rows[i].knobs_json, want);
			atb_free(want);
			goto out;
		}
		atb_free(want);
		out->usable += rows[i].usable;
		consider(out, &rows[i]);
		snprintf(L.last_outcome, sizeof(L.last_outcome), "%s", rows[i].outcome);
	}
	out->done = (int64_t)n;
	out->first_k = (int64_t)n;
	if (out->done >= L.run.iterations)
		goto out;
	st = runs_dir_of(&L, err);
	if (!st)
		st = make_client(&L, err);
	if (!st)
		st = run_loop(&L, err);
out:
	atb_store_iterations_free(rows, n);
	loop_release(&L);
	return st;
}

enum atb_status atb_loop_replay(struct atb_store *s, const char *run_id,
				const struct atb_loop_opts *o, struct atb_loop_summary *out,
				struct atb_error *err)
{
	struct loop L;
	struct atb_loop_opts lo = *o;
	struct atb_llm_config cfg;
	struct atb_llm_run_stats rs;
	const char *home = o->home ? o->home : atb_home();
	char orig[ATB_RUN_ID_MAX], id[33];
	enum atb_status st;

	memset(&L, 0, sizeof(L));
	memset(out, 0, sizeof(*out));
	memset(&cfg, 0, sizeof(cfg));
	out->best_k = -1;
	L.store = s;
	L.sum = out;
	st = atb_store_get_run(s, run_id, &L.run, err);
	if (st)
		return st;
	snprintf(orig, sizeof(orig), "%s", L.run.id);
	if (strcmp(L.run.proposer, ATB_LOOP_PROPOSER_LLM) && !is_code(&L))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "run '%s' was proposed by %s, not a model: its proposals are its"
				     " seed's ('atb run %s --seed %" PRId64 "' draws them again)",
				     orig, L.run.proposer, L.run.task, L.run.seed);
	/* the requests must be the recorded bytes: the same model name, protocol, task, seed */
	st = atb_llm_run_model(s, orig, cfg.model, sizeof(cfg.model), err);
	if (!st)
		st = atb_llm_run_stats(s, orig, &rs, err);
	if (!st)
		st = atb_store_list_iterations(s, orig, &L.orig, &L.norig, err);
	if (!st)
		st = atb_protocol_load_digest(home, L.run.protocol_digest, &L.proto, err);
	if (!st)
		st = open_task(&L, home, L.run.task, is_code(&L), err);
	if (st)
		goto out;
	/* what the recorded run did: its stored iterations, and the one its halt ended */
	L.run.iterations = (int64_t)L.norig + (rs.halted && (int64_t)L.norig < L.run.iterations);
	if (L.run.iterations < 1) {
		st = atb_error_set(err, ATB_ERR_USAGE, "run '%s' has no iteration to replay", orig);
		goto out;
	}
	L.replay_of = orig;
	lo.llm = &cfg;
	lo.token_budget = 0;
	lo.cost_budget_usd = 0;
	lo.wall_budget_s = 0;
	L.o = &lo;
	st = atbi_random_id(id);
	if (st) {
		st = atb_error_set(err, st, "cannot make a run id");
		goto out;
	}
	snprintf(L.run.id, sizeof(L.run.id), "%.12s", id);
	st = start_run(&L, s, out, err);
	if (st)
		goto out;
	snprintf(out->replay_of, sizeof(out->replay_of), "%s", orig);
	st = make_client(&L, err);
	if (!st)
		st = run_loop(&L, err);
out:
	loop_release(&L);
	atb_llm_config_release(&cfg);
	return st;
}
