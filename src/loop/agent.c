/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Runs of an outside agent (include/atb/loop.h, atb submit --run and atb
 * serve --stdio): the run row of proposer "agent" and its iterations.  The
 * agent hands in candidates; atb measure's path judges each
 * (atb_measure_candidate, called by the CLI), and the outcome is stored
 * here as the run's next iteration, classified by the loop's own rule, so
 * atb report shows an agent's run like any other.
 *
 * Does not: measure, propose, or write candidate files (the CLI writes an
 * inline submission with atb_llm_reply_write's rules).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "atb/atb.h"
#include "atb/box.h"
#include "atb/loop.h"
#include "util.h"
#include "banned.h"

enum atb_status atb_loop_task_ref(const char *task, char *out, size_t size,
				  struct atb_error *err)
{
	size_t n = strlen(task);
	int len;

	if (strchr(task, '/') || (n > 5 && !strcmp(task + n - 5, ".yaml")) ||
	    (n > 3 && !strcmp(task + n - 3, ".py"))) {
		char *abs = realpath(task, NULL);

		len = snprintf(out, size, "%s", abs ? abs : task);
		free(abs);   /* realpath's malloc, not ours */
	} else {
		len = snprintf(out, size, "%s", task);
	}
	if (len < 0 || (size_t)len >= size)
		return atb_error_set(err, ATB_ERR_USAGE, "task path '%s' is too long", task);
	return ATB_OK;
}

static int run_id_ok(const char *id)
{
	size_t n = strlen(id), i;

	if (n < 1 || n > 64)
		return 0;
	for (i = 0; i < n; i++)
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'z') ||
		      (id[i] >= 'A' && id[i] <= 'Z') || id[i] == '-'))
			return 0;
	return 1;
}

/* The box's fingerprint, registered in s (a known one changes nothing). */
static enum atb_status register_box(struct atb_store *s, const struct atb_box *box,
				    char fp[ATB_BOX_FINGERPRINT_LEN + 1], struct atb_error *err)
{
	json_t *j = NULL;
	char *desc = NULL;
	enum atb_status st;

	st = atb_box_fingerprint(box, fp, err);
	if (!st)
		st = atb_box_to_json(box, 0, &j, err);
	if (!st)
		st = atbi_json_canonical(j, &desc, err);
	if (!st)
		st = atb_store_register_box(s, fp, desc, err);
	json_decref(j);
	atb_free(desc);
	return st;
}

static enum atb_status check_plan(const struct atb_protocol *p,
				  const struct atb_loop_agent_plan *plan, struct atb_error *err)
{
	if (plan->iterations < 1 || plan->iterations > ATB_LOOP_MAX_ITERATIONS)
		return atb_error_set(err, ATB_ERR_USAGE, "iterations must be 1 to %d, not %" PRId64,
				     ATB_LOOP_MAX_ITERATIONS, plan->iterations);
	if (plan->seed < 0)
		return atb_error_set(err, ATB_ERR_USAGE, "a seed is a non-negative integer");
	/* PROTO: stats.min_paired_seeds (a run's every iteration must be admissible) */
	if (plan->paired_seeds < p->stats.min_paired_seeds)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "%" PRId64 " paired seeds is below the protocol's "
				     "stats.min_paired_seeds (%d)",
				     plan->paired_seeds, p->stats.min_paired_seeds);
	return ATB_OK;
}

enum atb_status atb_loop_agent_run(struct atb_store *s, const struct atb_protocol *p,
				   const char *run_id, const char *task_ref, const struct atb_box *box,
				   const struct atb_loop_agent_plan *plan, struct atb_run_row *out,
				   int *created, struct atb_error *err)
{
	char fp[ATB_BOX_FINGERPRINT_LEN + 1];
	struct atb_error e2;
	enum atb_status st;

	if (created)
		*created = 0;
	memset(out, 0, sizeof(*out));
	if (!run_id_ok(run_id))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "run id '%.80s' is not 1-64 of [0-9a-zA-Z-]", run_id);
	st = atb_box_fingerprint(box, fp, err);
	if (st)
		return st;
	atb_error_clear(&e2);
	st = atb_store_get_run(s, run_id, out, &e2);
	if (st == ATB_ERR_NOT_FOUND && plan) {
		st = check_plan(p, plan, err);
		if (!st)
			st = register_box(s, box, fp, err);
		if (st)
			return st;
		memset(out, 0, sizeof(*out));
		snprintf(out->id, sizeof(out->id), "%s", run_id);
		if (snprintf(out->task, sizeof(out->task), "%s", task_ref) >= (int)sizeof(out->task))
			return atb_error_set(err, ATB_ERR_USAGE, "task path '%s' is too long",
					     task_ref);
		snprintf(out->proposer, sizeof(out->proposer), "%s", ATB_LOOP_PROPOSER_AGENT);
		out->seed = plan->seed;
		out->iterations = plan->iterations;
		out->paired_seeds = plan->paired_seeds;
		out->naive = plan->naive ? 1 : 0;
		snprintf(out->protocol_digest, sizeof(out->protocol_digest), "%s", p->digest);
		snprintf(out->box_fingerprint, sizeof(out->box_fingerprint), "%s", fp);
		st = atb_store_add_run(s, out, err);
		if (!st && created)
			*created = 1;
		return st;
	}
	if (st) {
		*err = e2;
		return st;
	}
	if (strcmp(out->proposer, ATB_LOOP_PROPOSER_AGENT))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "run '%s' is proposed by '%s': only a run of proposer agent "
				     "takes handed-in candidates (name a new run id)",
				     out->id, out->proposer);
	if (strcmp(out->task, task_ref))
		return atb_error_set(err, ATB_ERR_USAGE, "run '%s' is of task '%s', not '%s'",
				     out->id, out->task, task_ref);
	if (strcmp(out->protocol_digest, p->digest))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "run '%s' runs under protocol %.12s, the current one is v%d "
				     "(%.12s): start a new run", out->id, out->protocol_digest,
				     p->version, p->digest);
	if (strcmp(out->box_fingerprint, fp))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "run '%s' was started on box %.12s, this is box %.12s; "
				     "hand its candidates in on its own box",
				     out->id, out->box_fingerprint, fp);
	if (out->done >= out->iterations)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "run '%s' has done all its %" PRId64 " planned iterations",
				     out->id, out->iterations);
	return ATB_OK;
}

enum atb_status atb_loop_agent_record(struct atb_store *s, const struct atb_protocol *p,
				      const struct atb_run_row *run,
				      const struct atb_knob_assignment *knobs,
				      const struct atb_measure_outcome *o, double wall_s,
				      struct atb_iteration_row *row, struct atb_error *err)
{
	struct atb_iteration_row it;
	struct atb_run_row now;
	struct atb_knob_assignment none;
	char *knobs_json = NULL;
	enum atb_status st;

	memset(&it, 0, sizeof(it));
	/* the next k as stored now, not as it was before the measurement */
	st = atb_store_get_run(s, run->id, &now, err);
	if (st)
		return st;
	snprintf(it.run, sizeof(it.run), "%s", run->id);
	it.k = now.done;
	st = atb_loop_classify(p, o, it.outcome, &it.usable, err);
	if (st)
		return st;
	if (!knobs) {
		memset(&none, 0, sizeof(none));
		knobs = &none;
	}
	st = atb_loop_knobs_json(knobs, &knobs_json, err);
	if (st)
		return st;
	it.knobs_json = knobs_json;
	snprintf(it.job_uuid, sizeof(it.job_uuid), "%s", o->job_uuid);
	it.result_id = o->result_id;
	it.rejection_id = o->rejection_id;
	if (o->verdict != ATB_MEASURE_REJECTED) {
		it.speedup = o->speedup;
		it.ci_low = o->ci_low;
		it.ci_high = o->ci_high;
		it.naive_speedup = o->naive_speedup;
		it.naive_ci_low = o->naive_ci_low;
		it.naive_ci_high = o->naive_ci_high;
	}
	/* as the loop keeps it: the refusal, or measure's note when usable */
	it.reason = (char *)(o->reason[0] ? o->reason : o->note);
	it.wall_s = wall_s > 0 ? wall_s : 0;
	st = atb_store_add_iteration(s, &it, err);
	atb_free(knobs_json);
	if (!st && row) {
		*row = it;
		row->knobs_json = NULL;
		row->reason = NULL;
	}
	return st;
}
