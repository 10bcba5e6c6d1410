/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Gate "clock": the runner's clock checked from outside its address space.
 * A candidate runs inside atb-runner and can redirect the clock the timing
 * core reads (issue 11: a constructor rewrote the runner's GOT entry for
 * clock_gettime and honest work read 1.97x).  So before each timed group
 * the runner sends a "timed_begin" marker and, in the group's samples
 * events, the group's span on its own clock; the harness stamps the
 * marker's and the first samples event's arrival on its clock, and the two
 * spans must agree within the protocol's tolerance.  The trials of the
 * group, being inside it, must also sum to no more than the runner's span.
 *
 * Does not: catch a clock that lies only inside trials and is honest
 * between them, nor a lie smaller than the tolerance; see
 * docs/internals/gates.md ("clock").  Judges facts only; measure.c stores.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "measure_int.h"
#include "banned.h"

int atbi_gate_clock(int64_t runner_ns, int64_t harness_ns, int64_t trials_ns, double rel,
		    int64_t slack_ns, char *why, size_t why_size)
{
	int64_t big = runner_ns > harness_ns ? runner_ns : harness_ns;
	int64_t diff = runner_ns > harness_ns ? runner_ns - harness_ns : harness_ns - runner_ns;
	double allowed = rel * (double)big + (double)slack_ns;

	if (runner_ns < 0) {
		snprintf(why, why_size, "the runner reported no span of its own for the group");
		return 1;
	}
	if ((double)diff > allowed) {
		snprintf(why, why_size,
			 "the runner's clock disagrees with the harness's: the timed span was %.3f ms "
			 "by the runner's clock and %.3f ms by the harness's (at most %.0f%% + "
			 "%.0f ms apart)", (double)runner_ns / 1e6, (double)harness_ns / 1e6,
			 100 * rel, (double)slack_ns / 1e6);
		return 1;
	}
	/* The trials are timed inside the group: they cannot add up to more. */
	if (trials_ns > runner_ns) {
		snprintf(why, why_size,
			 "the group's trials add up to %.3f ms, more than its whole span of %.3f ms "
			 "by the runner's clock", (double)trials_ns / 1e6, (double)runner_ns / 1e6);
		return 1;
	}
	return 0;
}

int atbi_gate_preemption(int64_t preempted_ns, int64_t offcpu_ns, int64_t slack_ns, char *why,
			 size_t why_size)
{
	if (preempted_ns <= 0)
		return 0;
	if (offcpu_ns < 0) {
		snprintf(why, why_size,
			 "the runner took %.3f ms out of its trials as waits for a CPU, which the "
			 "harness could not check (no reading of the runner's timing thread from "
			 "/proc)", (double)preempted_ns / 1e6);
		return 1;
	}
	if (preempted_ns > offcpu_ns + slack_ns) {
		snprintf(why, why_size,
			 "the runner took %.3f ms out of its trials as waits for a CPU, but from "
			 "outside its timing thread was off the CPU for only %.3f ms of the group "
			 "(at most %.0f ms more allowed)", (double)preempted_ns / 1e6,
			 (double)offcpu_ns / 1e6, (double)slack_ns / 1e6);
		return 1;
	}
	return 0;
}

/* Judge the open group, keeping the first refusal. */
static void finish_group(struct atbi_clock_state *s, double rel, int64_t slack_ns)
{
	struct atbi_clock_group *g = &s->cur;
	char why[512];

	if (!s->in_group)
		return;
	s->in_group = 0;
	s->ngroups++;
	if (g->runner_ns >= 0) {
		s->total_runner_ns += g->runner_ns;
		s->total_harness_ns += g->harness_ns;
	}
	if (g->preempted_ns > 0 && g->offcpu_ns >= 0) {
		s->total_preempted_ns += g->preempted_ns;
		s->total_offcpu_ns += g->offcpu_ns;
	}
	if (g->offcpu_ns >= 0 && g->wall_ns > 0) {
		s->load_wall_ns += g->wall_ns;
		s->load_offcpu_ns += g->offcpu_ns < g->wall_ns ? g->offcpu_ns : g->wall_ns;
	}
	if (!s->refused &&
	    (atbi_gate_clock(g->runner_ns, g->harness_ns, g->trials_ns, rel, slack_ns, why,
			     sizeof(why)) ||
	     atbi_gate_preemption(g->preempted_ns, g->offcpu_ns, slack_ns, why, sizeof(why)))) {
		s->refused = 1;
		s->bad = *g;
		snprintf(s->why, sizeof(s->why), "seed %" PRIu64 ", %zu arm%s: %s", g->seed,
			 g->arms, g->arms == 1 ? "" : "s", why);
	}
}

void atbi_clock_mark(struct atbi_clock_state *s, const json_t *ev, int64_t now_ns, double rel,
		     int64_t slack_ns)
{
	finish_group(s, rel, slack_ns);
	s->marked = 1;
	s->mark_ns = now_ns;
	s->mark_seed = (uint64_t)json_integer_value(json_object_get(ev, "seed"));
	s->mark_arms = (size_t)json_integer_value(json_object_get(ev, "arms"));
}

static int64_t preempted(const json_t *ev)
{
	const json_t *p = json_object_get(ev, "preempted_ns");

	return json_is_integer(p) && json_integer_value(p) > 0 ? (int64_t)json_integer_value(p) : 0;
}

/* The harness's wall over the group (harness_background), or -1. */
static int64_t hb_wall(const json_t *ev)
{
	const json_t *hb = json_object_get(ev, "harness_background");
	const json_t *w = json_object_get(hb, "wall_ns");

	if (!json_is_object(hb) || !json_is_integer(w) ||
	    json_is_true(json_object_get(hb, "runner_gone")))
		return -1;
	return (int64_t)json_integer_value(w);
}

int atbi_drift_is_load(double ratio, double share1, double share2)
{
	double load;

	if (!(share1 >= 0 && share1 < 1 && share2 >= 0 && share2 < 1 && ratio > 0) ||
	    ratio == 1)
		return 0;
	load = (1 - share2) / (1 - share1);
	/* in the drift's direction, and at least half of it (in logs) */
	return (ratio > 1) == (load > 1) && fabs(log(load)) >= 0.5 * fabs(log(ratio));
}

/* The harness's reading over the group: its wall less the timing thread's CPU. */
static int64_t offcpu(const json_t *ev)
{
	const json_t *hb = json_object_get(ev, "harness_background");
	const json_t *w = json_object_get(hb, "wall_ns"), *c = json_object_get(hb, "timing_thread_cpu_ns");

	if (!json_is_object(hb) || !json_is_integer(w) || !json_is_integer(c) ||
	    json_is_true(json_object_get(hb, "runner_gone")))
		return -1;
	return json_integer_value(w) > json_integer_value(c)
		? (int64_t)(json_integer_value(w) - json_integer_value(c)) : 0;
}

static int64_t trials_sum(const json_t *ev)
{
	const json_t *t = json_object_get(ev, "times_ns");
	int64_t sum = 0;
	size_t i;

	for (i = 0; i < json_array_size(t); i++)
		sum += (int64_t)json_number_value(json_array_get(t, i));
	return sum;
}

void atbi_clock_samples(struct atbi_clock_state *s, const json_t *ev, int64_t now_ns,
			double rel, int64_t slack_ns)
{
	const json_t *span = json_object_get(ev, "span_ns");
	uint64_t seed = (uint64_t)json_integer_value(json_object_get(ev, "seed"));
	int64_t runner_ns = json_is_integer(span) ? (int64_t)json_integer_value(span) : -1;

	if (s->marked) {
		/* the group's first samples event: the harness's span ends here */
		s->marked = 0;
		s->in_group = 1;
		s->cur.seed = s->mark_seed;
		s->cur.arms = s->mark_arms;
		s->cur.runner_ns = runner_ns;
		s->cur.harness_ns = now_ns - s->mark_ns;
		s->cur.trials_ns = trials_sum(ev);
		s->cur.preempted_ns = preempted(ev);
		s->cur.offcpu_ns = offcpu(ev);
		s->cur.wall_ns = hb_wall(ev);
		if (seed != s->mark_seed)
			s->cur.runner_ns = -1;  /* not the marked group: no span to trust */
		return;
	}
	if (s->in_group && seed == s->cur.seed && runner_ns == s->cur.runner_ns) {
		s->cur.trials_ns += trials_sum(ev);  /* the group's next arm */
		s->cur.preempted_ns += preempted(ev);
		return;
	}
	finish_group(s, rel, slack_ns);
	if (!s->refused) {
		s->refused = 1;
		memset(&s->bad, 0, sizeof(s->bad));
		s->bad.seed = seed;
		s->bad.runner_ns = runner_ns;
		s->bad.harness_ns = -1;
		snprintf(s->why, sizeof(s->why),
			 "seed %" PRIu64 ": the runner sent samples without a timed_begin marker, "
			 "so the harness could not time the group", seed);
	}
}

/*
 * The groups so far, summed: a lag too small for one group's slack (a
 * short kernel, a lie of a few ms a group) adds up over the seeds, while
 * the pipe's latency does not (it is as likely early as late, and never
 * more than one wake-up per end).  One slack for the whole sum.
 */
int atbi_clock_finish(struct atbi_clock_state *s, double rel, int64_t slack_ns)
{
	char why[512];

	finish_group(s, rel, slack_ns);
	s->marked = 0;
	if (!s->refused && s->ngroups > 1 &&
	    (atbi_gate_clock(s->total_runner_ns, s->total_harness_ns, 0, rel, slack_ns, why,
			     sizeof(why)) ||
	     atbi_gate_preemption(s->total_preempted_ns, s->total_offcpu_ns, slack_ns, why,
				  sizeof(why)))) {
		s->refused = 1;
		s->bad.seed = s->cur.seed;
		s->bad.arms = s->cur.arms;
		s->bad.runner_ns = s->total_runner_ns;
		s->bad.harness_ns = s->total_harness_ns;
		s->bad.trials_ns = 0;
		snprintf(s->why, sizeof(s->why), "over %zu groups to seed %" PRIu64 ": %s",
			 s->ngroups, s->cur.seed, why);
	}
	return s->refused;
}
