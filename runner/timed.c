/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Timed checks (PROTO: gates.timed_correctness), shared by the backends:
 * between the timed rounds of one group, outside the timed window, every
 * arm's inputs change at a few positions and its outputs are poisoned
 * again, and on some rounds every arm's outputs are compared with the
 * reference arm's of the same round.  A candidate that skips work on timed
 * calls leaves the poison; one that caches results keyed on (a sample of)
 * the inputs serves stale outputs at the changed positions.
 *
 * Which rounds are checked and which elements change follow from the job's
 * timed_checks key, which the harness draws fresh per job from the
 * kernel's CSPRNG: a candidate cannot tell them from the round number or
 * the seed.  Every round gets the same preparation (perturbation and
 * poison, whether it is checked or not), so nothing a kernel can see before
 * its call tells a checked round from another.
 *
 * Does not: judge anything (the harness refuses on the counts), touch the
 * timed window (the timing core calls these hooks around it), or know how
 * a backend's buffers live (the backend's ops move data).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "atb/alloc.h"
#include "runner_int.h"
#include "banned.h"

/* A splitmix64 step (the same mixer the input seeds use, other constants' order). */
static uint64_t tmix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Streams of one plan: what a derived number is for. */
enum { T_CHECK = 1, T_FORCED = 2, T_PERTURB = 3 };

static uint64_t derive(uint64_t base, unsigned what, uint64_t n)
{
	return tmix(tmix(base ^ (uint64_t)what << 56) ^ n);
}

void runner_timed_plan_init(struct runner_timed_plan *pl, const struct atb_runner_timed *t,
			    int trials_min, uint64_t seed, unsigned group)
{
	int span = trials_min > 0 ? trials_min : 1, want, k;
	uint64_t n = 0;

	memset(pl, 0, sizeof(*pl));
	pl->base = tmix(tmix(tmix(t->key) ^ seed) ^ group);
	pl->check_share = t->check_share;
	pl->perturb_elements = t->perturb_elements;
	/* PROTO: gates.timed_correctness.min_checks_per_seed -- forced checks
	 * among the rounds that always run (trials.min, unless the seed's time
	 * budget ends it first), at key-chosen places. */
	want = t->min_checks_per_seed < span ? t->min_checks_per_seed : span;
	if (want > ATB_RUNNER_MAX_PERTURB)
		want = ATB_RUNNER_MAX_PERTURB;
	while (pl->nforced < want) {
		int r = (int)(derive(pl->base, T_FORCED, n++) % (uint64_t)span), dup = 0;

		for (k = 0; k < pl->nforced; k++)
			dup |= pl->forced[k] == r;
		if (!dup)
			pl->forced[pl->nforced++] = r;
	}
}

uint64_t runner_timed_round_key(const struct runner_timed_plan *pl, int round)
{
	/* the perturbation stream with a buffer index no job has */
	return derive(pl->base, T_PERTURB, (uint64_t)round << 8 | 0xffu);
}

int runner_timed_plan_is_check(const struct runner_timed_plan *pl, int round)
{
	double u = (double)(derive(pl->base, T_CHECK, (uint64_t)round) >> 11) * 0x1.0p-53;
	int k;

	for (k = 0; k < pl->nforced; k++)
		if (pl->forced[k] == round)
			return 1;
	return u < pl->check_share;
}

int runner_timed_perturb(struct runner_bufs *master, const struct atb_runner_job *job,
			 const struct atb_runner_set *set, const struct runner_timed_plan *pl,
			 int round, struct runner_perturb *where)
{
	gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
	size_t i, j;

	memset(where, 0, sizeof(*where));
	if (!r)
		return -1;
	for (i = 0; i < job->nbuffers; i++) {
		const struct atb_runner_buffer *bf = &job->buffers[i];
		const struct atb_runner_dist *d = &bf->dist;
		size_t n = set->counts[i];

		if (!runner_is_input(bf) || !n)
			continue;
		gsl_rng_set(r, (unsigned long)derive(pl->base, T_PERTURB,
						     (uint64_t)round << 8 | (uint64_t)i));
		/* PROTO: gates.timed_correctness.perturb_elements -- fresh values
		 * from the buffer's own generator, as the seed's inputs were drawn */
		for (j = 0; j < (size_t)pl->perturb_elements; j++) {
			size_t k = (size_t)gsl_rng_uniform_int(r, n > 0xffffffffUL ? 0xffffffffUL
									  : (unsigned long)n);
			double x = d->normal ? d->mean + gsl_ran_gaussian(r, d->stddev)
					     : d->low + (d->high - d->low) * gsl_rng_uniform(r);

			runner_store_elem(master->p[i], bf->dtype, k, x);
			where->pos[i][where->n[i]++] = k;
		}
	}
	gsl_rng_free(r);
	return 0;
}

void runner_timed_apply_host(struct runner_bufs *dst, const struct runner_bufs *master,
			     const struct atb_runner_job *job, const struct atb_runner_set *set,
			     const struct runner_perturb *where)
{
	size_t i, j;

	for (i = 0; i < job->nbuffers; i++) {
		const struct atb_runner_buffer *bf = &job->buffers[i];
		size_t es = atb_dtype_size(bf->dtype);

		if (bf->role == ATB_BUFFER_INOUT) {
			/* the call wrote it: the whole buffer again, so every arm's
			 * round starts from the same contents */
			memcpy(dst->p[i], master->p[i], master->bytes[i]);
		} else if (bf->role == ATB_BUFFER_IN) {
			for (j = 0; j < where->n[i]; j++)
				memcpy((char *)dst->p[i] + where->pos[i][j] * es,
				       (const char *)master->p[i] + where->pos[i][j] * es, es);
		}
	}
	runner_poison_outputs(dst, job, set);
}

/* ---- the hooks ---------------------------------------------------------- */

int runner_timed_init(struct runner_timed *t, const struct atb_runner_job *job,
		      const struct atb_runner_set *set, const struct runner_bufs *in,
		      uint64_t seed, unsigned group, size_t narms, size_t ref,
		      const struct runner_timed_ops *ops, void *ctx)
{
	size_t a;

	memset(t, 0, sizeof(*t));
	t->job = job;
	t->set = set;
	t->ops = ops;
	t->ctx = ctx;
	t->narms = narms;
	t->ref = ref;
	for (a = 0; a < ATB_RUNNER_MAX_ARMS; a++)
		t->st[a].first_failed_round = -1;
	runner_timed_plan_init(&t->plan, &job->timed, job->timing.trials_min, seed, group);
	t->round = -1;
	t->clock = runner_clock_hook();
	if (runner_bufs_alloc(&t->master, job, set) || runner_bufs_alloc_outputs(&t->refcopy, job, set))
		return -1;
	runner_copy_inputs(&t->master, in, job);
	return 0;
}

void runner_timed_release(struct runner_timed *t)
{
	runner_bufs_free(&t->master);
	runner_bufs_free(&t->refcopy);
}

int runner_timed_before(void *ctx, int round)
{
	struct runner_timed *t = ctx;
	struct runner_perturb where;
	size_t a;

	t->round = round;
	t->have_ref = 0;
	if (runner_timed_perturb(&t->master, t->job, t->set, &t->plan, round, &where)) {
		snprintf(t->msg, sizeof(t->msg), "cannot perturb the inputs of round %d: out of memory",
			 round);
		return -1;
	}
	for (a = 0; a < t->narms; a++)
		if (t->ops->prepare(t->ctx, a, &t->master, &where)) {
			if (!t->msg[0])
				snprintf(t->msg, sizeof(t->msg),
					 "cannot prepare arm %zu for round %d", a, round);
			return -1;
		}
	return 0;
}

/*
 * Right after the reference's call in a checked round (its time read,
 * before the next arm's flush), after the chained clock hook: its outputs
 * copied into t's own buffers.
 * The round's check compares every arm with that copy, so an arm that runs
 * after the reference and rewrites the reference's output buffers cannot
 * make the check agree (planted in u-runner,
 * timed_hooks_compare_with_the_copy_taken_after_the_reference; the torch
 * backend's Session.timed_ref is the same step, with relu01/skip_timed_ref).
 */
int runner_timed_call(void *ctx, size_t arm, size_t trial)
{
	struct runner_timed *t = ctx;
	const struct runner_bufs *ref;
	size_t i;

	/* the clock's sample first: it is read closest to the call */
	if (t->clock && t->clock(NULL, arm, trial))
		return -1;
	if (t->ref < t->narms && arm == t->ref && runner_timed_plan_is_check(&t->plan, t->round)) {
		if (t->ops->outputs(t->ctx, t->ref, &ref)) {
			if (!t->msg[0])
				snprintf(t->msg, sizeof(t->msg), "cannot read the reference's "
					 "outputs of round %d", t->round);
			return -1;
		}
		for (i = 0; i < t->job->nbuffers; i++)
			if (t->job->buffers[i].role != ATB_BUFFER_IN)
				memcpy(t->refcopy.p[i], ref->p[i], t->refcopy.bytes[i]);
		t->have_ref = 1;
	}
	return 0;
}

int runner_timed_after(void *ctx, int round)
{
	struct runner_timed *t = ctx;
	const struct runner_bufs *ref, *got;
	struct runner_bufs view;
	size_t a, i;

	if (t->ref >= t->narms || !runner_timed_plan_is_check(&t->plan, round))
		return 0;
	if (!t->have_ref || t->round != round) {
		snprintf(t->msg, sizeof(t->msg), "no copy of the reference's outputs of round %d",
			 round);
		return -1;
	}
	ref = &t->refcopy;
	/* The reference's outputs beside the round's inputs (the reduction
	 * bound is computed from the operands). */
	view = t->master;
	for (i = 0; i < t->job->nbuffers; i++)
		if (t->job->buffers[i].role != ATB_BUFFER_IN)
			view.p[i] = ref->p[i];
	t->st[t->ref].rounds_checked++;
	for (a = 0; a < t->narms; a++) {
		struct runner_timed_stats *s = &t->st[a];
		struct runner_cmp worst;
		const char *name = NULL;

		if (a == t->ref)
			continue;
		if (t->ops->outputs(t->ctx, a, &got))
			goto fail;
		s->rounds_checked++;
		if (runner_outputs_match(t->job, t->set, &view, got, NULL, &worst, &name))
			continue;
		s->failed++;
		s->bad_count += worst.nbad;
		s->nan_count += worst.nnan;
		if (worst.max_abs > s->max_abs || isnan(worst.max_abs))
			s->max_abs = worst.max_abs;
		if (s->first_failed_round < 0) {
			s->first_failed_round = round;
			s->first_bad_index = worst.first_bad;
			s->first_bad_ref = worst.bad_ref;
			s->first_bad_got = worst.bad_got;
			snprintf(s->first_bad_buffer, sizeof(s->first_bad_buffer), "%s",
				 name ? name : "");
		}
	}
	return 0;
fail:
	if (!t->msg[0])
		snprintf(t->msg, sizeof(t->msg), "cannot read the outputs of round %d", round);
	return -1;
}

json_t *runner_timed_json(const struct runner_timed *t, size_t arm)
{
	const struct runner_timed_stats *s = &t->st[arm];
	json_t *o = json_pack("{s:b, s:i, s:i, s:o, s:o, s:I, s:I}", "reference", arm == t->ref,
			      "rounds_checked", s->rounds_checked, "failed", s->failed,
			      "first_failed_round",
			      s->first_failed_round < 0 ? json_null()
							: json_integer(s->first_failed_round),
			      "max_abs_err", runner_real(s->max_abs),
			      "bad_count", (json_int_t)s->bad_count,
			      "nan_count", (json_int_t)s->nan_count);

	if (o && s->first_failed_round >= 0 &&
	    json_object_set_new(o, "first_bad",
				json_pack("{s:s, s:I, s:o, s:o}", "buffer", s->first_bad_buffer,
					  "index", (json_int_t)s->first_bad_index, "ref",
					  runner_real(s->first_bad_ref), "got",
					  runner_real(s->first_bad_got)))) {
		json_decref(o);
		return NULL;
	}
	if (o && json_object_set_new(o, "perturb_elements",
				     json_integer(t->plan.perturb_elements))) {
		json_decref(o);
		return NULL;
	}
	return o;
}
