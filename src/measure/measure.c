/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The measurement pipeline (docs/design.md, "the path every number takes"):
 * surface gate -> builds -> job 1 in fresh atb-runners (correctness, then
 * baseline and candidate interleaved on the paired seeds) and job 2 in
 * others (the baseline alone; run_interleaved says how they alternate) ->
 * correctness gates -> physical floor (re-measured once on the cpu when
 * beaten) -> paired statistics, cv cap with bounded re-runs, baseline drift
 * -> the store's ingest validator (which quarantines anomalies) or a stored
 * rejection.  Every outcome is in the store and its audit chain on return.
 *
 * Does not: propose candidates, print, or judge what the store judges again.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "atb/alloc.h"
#include "atb/atb.h"
#include "atb/box.h"
#include "atb/floor.h"
#include "atb/judge.h"
#include "atb/measure.h"
#include "atb/protocol.h"
#include "atb/runner.h"
#include "atb/stats.h"
#include "atb/store.h"
#include "atb/suite.h"
#include "atb/task.h"
#include "measure/measure_int.h"
#include "banned.h"

#define SEED_MAX (UINT64_C(1) << 62)

/* A_COMPILE: torch.compile of a torch task's reference, timed in the paired
   runner beside the others; the store has no arm for it (its samples are
   summarised in the stats, never ingested as samples). */
enum { A_BASE = 0, A_CAND, A_NAIVE, A_ALONE, A_COMPILE, NARMS };
static const char *const arm_label[NARMS] = {"baseline", "candidate", "naive", "baseline_alone",
					     "compile"};
static const enum atb_arm store_arm[NARMS] = {ATB_ARM_BASELINE, ATB_ARM_CANDIDATE, ATB_ARM_NAIVE,
					      ATB_ARM_BASELINE_ALONE, ATB_ARM_BASELINE};

const char *atb_measure_verdict_name(enum atb_measure_verdict v)
{
	switch (v) {
	case ATB_MEASURE_ADMITTED:
		return "admitted";
	case ATB_MEASURE_QUARANTINED:
		return "quarantined";
	case ATB_MEASURE_REJECTED:
		return "rejected";
	}
	return "unknown";
}

struct seed_times {
	double *t;
	size_t n, cap;
};

/* The share of a job's timed groups its timing thread spent off the CPU, as
   the harness read it (-1 when no group was read). */
static double load_share(const struct atbi_clock_state *c)
{
	return c->load_wall_ns > 0 ? (double)c->load_offcpu_ns / (double)c->load_wall_ns : -1;
}

/* What one runner job reported. */
struct job_result {
	size_t nseeds;
	struct seed_times *arm[NARMS];   /* nseeds each, or NULL when the arm did not run */
	double *median[NARMS];           /* per-seed medians, filled after the run */
	struct atbi_correctness_state corr;
	json_t *env, *done;
	struct atb_runner_outcome ro;
	/* cuda: timed trials, those NVML saw throttled, the candidate's first
	   side-stream escape (owned copy) */
	size_t trials, throttled_trials;
	struct atbi_clocks_state clocks; /* PROTO: gates.clocks -- the SM clock per trial */
	json_t *side_event;
	json_t *compile_event;           /* torch: the runner's "compile" event (owned copy) */
	struct atbi_clock_state clock;   /* the timed groups' spans, both clocks (gate clock) */
	json_t *tamper_event;            /* torch: the runner's first "tamper" event (owned copy) */
	/* PROTO: gates.timed_correctness -- the candidate's first samples event
	   with a failed timed check (owned copy), and its checked rounds */
	json_t *timed_event;
	size_t timed_rounds;
	/* torch: the runner's first "outputs" event (owned copy): the
	   reference's output bytes (PROTO: gates.physical_floor) */
	json_t *outputs_event;
	/* PROTO: gates.background -- the first group over the limits by the
	   runner's facts, and by the harness's own reading (owned copies) */
	json_t *background_event;
	json_t *background_outside;
	/* PROTO: timing.round_trip -- per seed, what was taken out of each
	   trial (the samples events' subtracted_ns; NaN none); nseeds or NULL */
	double *round_trip_ns;
	/* PROTO: timing.round_trip.max_share_under -- the group (seed, arm)
	   whose trials the subtraction left at or under 0 ns most surely:
	   the highest Wilson 95% lower bound of that share, the share, its
	   counts, seed and arm (rt_under_arm NULL: none) */
	double rt_under_lo, rt_under_share;
	size_t rt_under, rt_under_trials;
	uint64_t rt_under_seed;
	double rt_under_sub_ns;
	const char *rt_under_arm;
	enum atb_status st;              /* the runner's status */
	enum atb_status cb_st;           /* a failure inside our callback (memory) */
};

struct measure {
	struct atb_store *store;
	const struct atb_protocol *p;
	const struct atb_task *task;
	const struct atb_measure_opts *o;
	struct atb_measure_outcome *out;
	struct atb_knob_assignment knobs;
	char knobs_text[512];
	char candidate_label[1024];
	char fingerprint[65];
	const struct atb_box *box;
	char runner[4096];
	char dir[4096];                 /* work_dir/<job uuid> */
	char so[4][4200];               /* baseline, candidate, naive, baseline twin */
	int twin;                       /* so[3] is a copy of so[0] (the alone job's candidate) */
	int with_naive;
	uint64_t *seeds;
	size_t nseeds;
	/* the seeds of the runner process being built: seeds[seed_lo .. seed_hi) */
	size_t seed_lo, seed_hi;
	struct atbi_hash_set before;
	json_t *build_info;
	size_t cur_seed_done;           /* for progress */
	int cuda;                       /* task kind cuda: the runner's cuda backend */
	int torch;                      /* task kind torch: the runner's torch backend */
	int with_compile;               /* torch: time torch.compile of the reference too */
	/* where a cpu task's arms run and what of their round trip is taken
	   out, decided once (decide_isolation): every runner job says so */
	int isolate, rt_every, rt_subtract;
	const char *rt_position;  /* PROTO: timing.round_trip.position; NULL: after */
	double rt_quantile;
	double rt_max_under;  /* PROTO: timing.round_trip.max_share_under; < 0: no rule */
	const char *compile_mode;
	double drift_spread;            /* cv of the per-seed drift ratios */
	size_t slots_done, nslots;      /* runner processes of this attempt (progress) */
	const char *rerun_why;          /* set for the one announcing call */
	char floor_why[256];            /* why a floor re-measure did not happen; "" */
	int floor_gpu;                  /* the floor's caps are the GPU's (no cpu re-measure) */
	struct atb_judge judge;         /* the refusals, statistics and ingest (gates/) */
};

static void progress(struct measure *m, const char *phase)
{
	struct atb_measure_progress d;

	if (m->o->progress)
		m->o->progress(m->o->progress_ctx, phase);
	if (!m->o->progress_detail)
		return;
	d.phase = phase;
	d.attempt = m->out->attempts > 0 ? m->out->attempts : 1;
	d.max_attempts = atb_judge_max_runs(m->p);  /* PROTO: gates.rerun.max_runs */
	d.fraction = m->nslots ? (double)m->slots_done / (double)m->nslots : 0.0;
	d.rerun_why = m->rerun_why;
	m->o->progress_detail(m->o->progress_ctx, &d);
}

/* Announce attempt > 1 and why the last one is re-run (progress and logs). */
static void progress_rerun(struct measure *m, const char *why)
{
	char ph[600];

	snprintf(ph, sizeof(ph), "attempt %d of %d: re-running because %s", m->out->attempts,
		 atb_judge_max_runs(m->p), why);
	m->rerun_why = why;
	progress(m, ph);
	m->rerun_why = NULL;
}

static json_t *jreal(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

/* The range over seeds of num[k] / den[k] (seeds with den 0 left out). */
static void seed_range(const double *num, const double *den, size_t n, double *lo, double *hi)
{
	size_t k;

	*lo = *hi = 0;
	for (k = 0; num && den && k < n; k++) {
		double q;

		if (!(den[k] > 0))
			continue;
		q = num[k] / den[k];
		if (*hi == 0 || q < *lo)
			*lo = q;
		if (*hi == 0 || q > *hi)
			*hi = q;
	}
}

/* ---- recording a refusal ---- */

static enum atb_status reject(struct measure *m, const char *gate, enum atb_status status,
			      const char *reason, json_t *extra, struct atb_error *err)
{
	json_t *detail = json_object();

	if (!detail) {
		json_decref(extra);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot record rejection: out of memory");
	}
	json_object_set_new(detail, "gate", json_string(gate));
	json_object_set_new(detail, "task", json_string(m->task->name));
	json_object_set_new(detail, "candidate", json_string(m->candidate_label));
	json_object_set_new(detail, "knobs", json_string(m->knobs_text));
	json_object_set_new(detail, "protocol_digest", json_string(m->p->digest));
	if (m->fingerprint[0])
		json_object_set_new(detail, "box_fingerprint", json_string(m->fingerprint));
	if (m->out->note[0])
		json_object_set_new(detail, "note", json_string(m->out->note));
	if (extra)
		json_object_update(detail, extra);
	json_decref(extra);
	return atb_judge_refuse(&m->judge, gate, status, reason, detail, err);
}

/* ---- the static gate (kind torch) ---- */

#define STATIC_TIMEOUT_S 60.0

/*
 * PROTO: gates static -- the copied candidate's source against the task's,
 * read by python/atb_static.py (atb_measure_static_check): every finding
 * is in the audit entry "measure.static" and out->findings; the first
 * refusing one refuses the candidate with its file, line and rule before
 * any runner starts (*refused 1).  A checker that cannot run is an error,
 * never an admission: nothing is measured unchecked.
 */
static enum atb_status static_gate(struct measure *m, const char *csrc, const char *shown,
				   int *refused, struct atb_error *err)
{
	struct atb_measure_finding *f = NULL;
	char *json = NULL, *payload = NULL, why[1024];
	json_t *o = NULL;
	size_t nf = 0, i, len;
	enum atb_status st;
	const struct atb_measure_finding *first = NULL;

	*refused = 0;
	progress(m, "static");
	st = atb_measure_static_check(m->o->home, m->task->python, m->task->baseline.path, csrc,
				      STATIC_TIMEOUT_S, &f, &nf, &json, err);
	if (st)
		return st;
	for (i = 0; i < nf; i++) {
		len = strlen(m->out->findings);
		snprintf(m->out->findings + len, sizeof(m->out->findings) - len, "%s%s",
			 len ? "," : "", f[i].kind);
		if (f[i].refuses && !first)
			first = &f[i];
	}
	if (nf) {
		o = json_pack("{s:s, s:s, s:s, s:o}", "job", m->out->job_uuid, "task", m->task->name,
			      "candidate", m->candidate_label, "checker",
			      json_loads(json, 0, NULL));
		if (!o)
			st = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
		if (!st)
			st = atbi_json_canonical(o, &payload, err);
		if (!st)
			st = atb_store_audit_event(m->store, "measure.static", payload, NULL, err);
	}
	if (!st && first) {
		*refused = 1;
		/* a long detail is cut in the reason only: the rejection's detail
		   (below) and the audit entry "measure.static" keep it whole */
		if (snprintf(why, sizeof(why), "static: %s at line %d of '%s': %s", first->kind,
			     first->line, shown, first->detail) >= (int)sizeof(why))
			memcpy(why + sizeof(why) - 4, "...", 4);
		st = reject(m, ATB_GATE_STATIC, ATB_ERR_CHECK, why,
			    json_pack("{s:s, s:i, s:s, s:s, s:o?}", "rule", first->kind, "line",
				      first->line, "file", shown, "findings", m->out->findings,
				      "checker", json_loads(json, 0, NULL)),
			    err);
	}
	json_decref(o);
	atb_free(payload);
	atb_free(json);
	atb_free(f);
	return st;
}

/* ---- job building ---- */

static json_t *set_json(const struct atb_task_instance *in, const char *name)
{
	json_t *o = json_object(), *ints = json_array(), *reals = json_array(),
	       *counts = json_array();
	size_t i;

	if (!o || !ints || !reals || !counts) {
		json_decref(o);
		json_decref(ints);
		json_decref(reals);
		json_decref(counts);
		return NULL;
	}
	for (i = 0; i < in->nints; i++)
		json_array_append_new(ints, json_integer(in->ints[i]));
	for (i = 0; i < in->nreals; i++)
		json_array_append_new(reals, json_real(in->reals[i]));
	for (i = 0; i < in->nbuffers; i++)
		json_array_append_new(counts, json_integer(in->buffers[i].count));
	json_object_set_new(o, "name", json_string(name));
	json_object_set_new(o, "ints", ints);
	json_object_set_new(o, "reals", reals);
	json_object_set_new(o, "counts", counts);
	return o;
}

static void set_name(const struct atb_task_instance *in, char *buf, size_t size)
{
	size_t i, k = 0;

	buf[0] = '\0';
	if (in->set_index == 0)
		k += (size_t)snprintf(buf, size, "timing:");
	for (i = 0; i < in->nints && k < size; i++)
		k += (size_t)snprintf(buf + k, size - k, "%s%s=%" PRId64, i ? "," : "",
				      in->int_names[i], in->ints[i]);
	if (!buf[0])
		snprintf(buf, size, "set%zu", in->set_index);
}

static json_t *dist_json(const struct atb_distribution *d)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	json_object_set_new(o, "name", json_string("task"));
	if (!strcmp(d->kind, "normal")) {
		json_object_set_new(o, "kind", json_string("normal"));
		json_object_set_new(o, "mean", json_real(d->mean));
		json_object_set_new(o, "stddev", json_real(d->stddev));
	} else if (!strcmp(d->kind, "constant")) {
		/* the runner knows uniform and normal: a constant is a range too narrow to vary */
		json_object_set_new(o, "kind", json_string("uniform"));
		json_object_set_new(o, "low", json_real(d->low));
		json_object_set_new(o, "high", json_real(nextafter(d->low, INFINITY)));
	} else {
		json_object_set_new(o, "kind", json_string("uniform"));
		json_object_set_new(o, "low", json_real(d->low));
		json_object_set_new(o, "high", json_real(d->high));
	}
	return o;
}

/*
 * A task buffer's reduction as the job carries it: {"operands": [...],
 * "accumulate": ...}, accumulate left out when the task gives none (the
 * runner then uses the buffer's dtype).  PROTO: correctness.reduction_tolerance
 */
static json_t *reduction_json(const struct atb_task_buffer *b)
{
	json_t *o = json_object(), *ops = json_array();
	size_t k;

	if (!o || !ops) {
		json_decref(o);
		json_decref(ops);
		return NULL;
	}
	if (json_object_set_new(o, "operands", ops)) {  /* steals ops even on failure */
		json_decref(o);
		return NULL;
	}
	for (k = 0; k < b->reduction.noperands; k++)
		if (json_array_append_new(ops, json_string(b->reduction.operands[k]))) {
			json_decref(o);
			return NULL;
		}
	if (b->reduction.accumulate[0] &&
	    json_object_set_new(o, "accumulate", json_string(b->reduction.accumulate))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/*
 * Kind torch: "backend": "torch" and the "torch" object -- the task's
 * interpreter as it described itself when the task was loaded (libpython,
 * home, sys.path), where atb_torch lives (home/python), and the device
 * ($ATB_TORCH_DEVICE: auto, the default, cpu or cuda).
 */
static enum atb_status torch_job(struct measure *m, json_t *job, int alone,
				 struct atb_error *err)
{
	const char *home = m->o->home ? m->o->home : atb_home();
	const char *dev = getenv("ATB_TORCH_DEVICE");
	json_t *info = m->task->python_info ? json_loads(m->task->python_info, 0, NULL) : NULL;
	char mod[4200];

	if (!info)
		return atb_error_set(err, ATB_ERR_SCHEMA, "task '%s' of kind torch has no python",
				     m->task->name);
	snprintf(mod, sizeof(mod), "%s/python", home);
	if (json_object_set_new(job, "backend", json_string("torch")) ||
	    json_object_set_new(job, "torch", json_pack("{s:o, s:s, s:s, s:b}", "python", info,
							"module_path", mod, "device",
							dev && *dev ? dev : "auto",
							/* PROTO: gates tamper -- the
							   collector's lists refused */
							"gc_guard", 1)))
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot build the runner job: out of memory");
	/* the compiled reference rides in the paired runner only */
	if (m->with_compile && !alone &&
	    json_object_set_new(json_object_get(job, "torch"), "compile",
				json_pack("{s:s}", "mode", m->compile_mode)))
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot build the runner job: out of memory");
	return ATB_OK;
}

/*
 * PROTO: timing.isolation, timing.round_trip -- where a cpu task's arms run
 * (worker processes from version 11) and what of their round trip is timed
 * and taken out (version 12), as the protocol says or as the debugging
 * overrides $ATB_ISOLATION=process|none and $ATB_ROUND_TRIP=none|time|
 * subtract say; once per measurement, before anything is built.  Fills
 * m->isolate and m->rt_* and out->isolation, round_trip and deviation (the
 * cuda and torch backends' arms share the runner: "none", no deviation).
 * Errors: ATB_ERR_USAGE for a bad override, naming it and its value.
 */
static enum atb_status decide_isolation(struct measure *m, struct atb_error *err)
{
	const struct atb_protocol *p = m->p;
	struct atb_measure_outcome *out = m->out;
	const char *iso = getenv("ATB_ISOLATION"), *rt = getenv("ATB_ROUND_TRIP");
	const char *want_iso = p->timing.isolation[0] ? p->timing.isolation : "none";
	int want_every = p->timing.has_round_trip ? p->timing.round_trip_every : 0;
	int want_sub = p->timing.has_round_trip && p->timing.round_trip_subtract;

	if (iso && strcmp(iso, "process") && strcmp(iso, "none"))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "bad ATB_ISOLATION '%.40s': expected process or none", iso);
	if (rt && strcmp(rt, "none") && strcmp(rt, "time") && strcmp(rt, "subtract"))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "bad ATB_ROUND_TRIP '%.40s': expected none, time or subtract",
				     rt);
	snprintf(out->isolation, sizeof(out->isolation), "none");
	snprintf(out->round_trip, sizeof(out->round_trip), "none");
	if (m->cuda || m->torch)
		return ATB_OK;
	if (!iso)
		iso = want_iso;
	if (strcmp(iso, want_iso))
		snprintf(out->deviation, sizeof(out->deviation),
			 "ATB_ISOLATION=%s: the arms ran %s; protocol version %d says "
			 "timing.isolation %s", iso,
			 strcmp(iso, "process") ? "in the runner" : "in workers", p->version,
			 want_iso);
	if (strcmp(iso, "process"))
		return ATB_OK;
	m->isolate = 1;
	m->rt_every = want_every;
	m->rt_subtract = want_sub;
	/* an override under a version without the map: every round, 0.1 */
	m->rt_quantile = p->timing.has_round_trip ? p->timing.round_trip_quantile : 0.1;
	/* version 13: where the empty call goes, and the share it may leave under */
	m->rt_position = p->timing.round_trip_position[0] &&
				 strcmp(p->timing.round_trip_position, "after")
			 ? p->timing.round_trip_position
			 : NULL;
	m->rt_max_under = p->timing.round_trip_position[0] ? p->timing.round_trip_max_share_under
							 : -1;
	if (rt && !strcmp(rt, "none")) {
		m->rt_every = 0;
	} else if (rt) {
		m->rt_every = m->rt_every > 0 ? m->rt_every : 1;
		m->rt_subtract = !strcmp(rt, "subtract");
	}
	snprintf(out->isolation, sizeof(out->isolation), "process");
	snprintf(out->round_trip, sizeof(out->round_trip), "%s",
		 m->rt_every <= 0 ? "none" : m->rt_subtract ? "subtract" : "time");
	if (!out->deviation[0] && ((m->rt_every > 0) != (want_every > 0) ||
				   (m->rt_every > 0 && m->rt_subtract != want_sub)))
		snprintf(out->deviation, sizeof(out->deviation),
			 "ATB_ROUND_TRIP=%s: the workers' round trip was %s; protocol version %d "
			 "says %s", rt,
			 m->rt_every <= 0 ? "not timed"
			 : m->rt_subtract ? "taken out" : "timed, not taken out",
			 p->version, !want_every ? "none" : want_sub ? "subtract" : "time");
	return ATB_OK;
}

/* arms: indices into A_*; sos: their shared objects (kind torch: python files). */
static enum atb_status build_job(struct measure *m, const int *arms, size_t narms, int alone,
				 json_t **out, struct atb_error *err)
{
	json_t *job = json_object(), *ja = json_array(), *jb = json_array(), *js = json_array(),
	       *seeds = json_array(), *opt = json_object();
	struct atb_task_instance in;
	char name[64], id[80];
	enum atb_status st;
	size_t i, nsets = atb_task_nsets(m->task);

	*out = NULL;
	if (!job || !ja || !jb || !js || !seeds || !opt)
		goto nomem;
	for (i = 0; i < narms; i++) {
		json_t *a = json_pack("{s:s, s:s}", "name", arm_label[arms[i]],
				      m->torch ? "py" : "so",
				      m->so[arms[i] == A_ALONE ? A_BASE : arms[i] == A_NAIVE ? 2
					    : arms[i] != A_CAND ? 0 : alone && m->twin ? 3 : 1]);

		if (!a || json_array_append_new(ja, a))
			goto nomem;
	}
	if (m->torch)
		nsets = 0;  /* the runner's torch backend draws inputs from get_inputs() */
	for (i = 0; i < m->task->nbuffers; i++) {
		const struct atb_task_buffer *b = &m->task->buffers[i];
		json_t *o = json_pack("{s:s, s:s, s:s}", "name", b->name, "dtype", b->dtype, "role",
				      atb_task_role_name(b->role));

		if (!o || json_array_append_new(jb, o))
			goto nomem;
		if (b->role != ATB_ROLE_OUT && b->has_generator)
			json_object_set_new(o, "dist", dist_json(&b->generator));
		if (b->reduction.has && json_object_set_new(o, "reduction", reduction_json(b)))
			goto nomem;
	}
	for (i = 0; i < nsets; i++) {
		json_t *s;

		st = atb_task_instantiate(m->task, i, &in, err);
		if (st) {
			json_decref(job);
			json_decref(ja);
			json_decref(jb);
			json_decref(js);
			json_decref(seeds);
			json_decref(opt);
			return st;
		}
		set_name(&in, name, sizeof(name));
		s = set_json(&in, name);
		if (!s)
			goto nomem;
		if (i == 0 && json_object_set(job, "timing_set", s)) {
			json_decref(s);
			goto nomem;
		}
		if (json_array_append_new(js, s))
			goto nomem;
	}
	for (i = m->seed_lo; i < m->seed_hi; i++)
		json_array_append_new(seeds, json_integer((json_int_t)m->seeds[i]));
	json_object_set_new(opt, "time_if_incorrect", json_false());
	json_object_set_new(opt, "skip_timing", json_false());
	/* kind torch: the alone runner's twin is the reference itself, so its
	   correctness phase (seconds at GiB shapes) would check nothing */
	json_object_set_new(opt, "skip_correctness", json_boolean(alone && m->torch));
	json_object_set_new(opt, "pin_cpu", json_integer(-1));
	/* issue 11: each cpu arm in a worker process of its own, and the
	   workers' round trip timed and taken out, as decide_isolation decided
	   (the stored stats say which ran: runner.isolation, runner.round_trip) */
	if (m->isolate) {
		json_object_set_new(opt, "isolation", json_string("process"));
		if (m->rt_every > 0) {
			json_t *o = json_pack("{s:i, s:b, s:f}", "every_rounds", m->rt_every,
					      "subtract", m->rt_subtract, "quantile",
					      m->rt_quantile);

			/* version 13: where in the round the empty call goes */
			if (o && m->rt_position)
				json_object_set_new(o, "position", json_string(m->rt_position));
			json_object_set_new(opt, "round_trip", o);
		}
	}
	snprintf(id, sizeof(id), "%.32s-%s%zu", m->out->job_uuid, alone ? "alone" : "seed",
		 m->seed_lo);
	json_object_set_new(job, "id", json_string(id));
	json_object_set_new(job, "abi", json_integer(1));
	if (m->cuda)
		json_object_set_new(job, "backend", json_string("cuda"));
	json_object_set_new(job, "reference", json_string("baseline"));
	json_object_set_new(job, "arms", ja);
	json_object_set_new(job, "buffers", jb);
	json_object_set_new(job, "sets", js);
	json_object_set_new(job, "seeds", seeds);
	json_object_set_new(job, "options", opt);
	st = atb_runner_job_set_protocol(job, m->p, m->box ? (size_t)m->box->cache_largest_bytes : 0,
					 err);
	/* PROTO: gates.timed_correctness -- a fresh key per job, drawn here */
	if (!st)
		st = atb_runner_job_set_timed_checks(job, m->p, err);
	if (!st && m->torch)
		st = torch_job(m, job, alone, err);
	if (st) {
		json_decref(job);
		return st;
	}
	*out = job;
	return ATB_OK;
nomem:
	json_decref(job);
	json_decref(ja);
	json_decref(jb);
	json_decref(js);
	json_decref(seeds);
	json_decref(opt);
	return atb_error_set(err, ATB_ERR_NOMEM, "cannot build the runner job: out of memory");
}

/* ---- running a job ---- */

struct job_ctx {
	struct measure *m;
	struct job_result *r;
	int alone;
	size_t samples_seen;
	size_t arms_timed;
};

static enum atb_status on_event(const json_t *ev, void *vctx)
{
	struct job_ctx *c = vctx;
	const char *kind = json_string_value(json_object_get(ev, "event"));
	struct job_result *r = c->r;
	/* PROTO: gates.clock -- the harness's clock when the line arrived: its
	   stamp (taken at the read, before it reads /proc for gates.background),
	   else now (the harness calls back as each line is read) */
	const json_t *rx = json_object_get(ev, "harness_received_ns");
	int64_t now_ns = json_is_integer(rx) && json_integer_value(rx) > 0
				 ? (int64_t)json_integer_value(rx) : atbi_monotonic_ns();

	if (!kind)
		return ATB_OK;
	if (!strcmp(kind, "timed_begin")) {
		atbi_clock_mark(&r->clock, ev, now_ns, atbi_clock_rel_tolerance(c->m->p),
				atbi_clock_slack_ns(c->m->p));
	} else if (!strcmp(kind, "env")) {
		json_decref(r->env);
		r->env = json_deep_copy(ev);
	} else if (!strcmp(kind, "done")) {
		json_decref(r->done);
		r->done = json_deep_copy(ev);
	} else if (!strcmp(kind, "correctness")) {
		atbi_gate_correctness_event(&r->corr, ev);
	} else if (!strcmp(kind, "compile")) {
		json_decref(r->compile_event);
		r->compile_event = json_deep_copy(ev);
	} else if (!strcmp(kind, "outputs")) {
		if (!r->outputs_event && !(r->outputs_event = json_deep_copy(ev)))
			return r->cb_st = ATB_ERR_NOMEM;
	} else if (!strcmp(kind, "tamper")) {
		if (!r->tamper_event)
			r->tamper_event = json_deep_copy(ev);
	} else if (!strcmp(kind, "gpu_state")) {
		atbi_clocks_gpu_state(&r->clocks, ev);
	} else if (!strcmp(kind, "background")) {
		struct atbi_background_limits lim;
		char why[8];

		atbi_background_limits(c->m->p, &lim);
		if (!r->background_event && atbi_gate_background(ev, &lim, why, sizeof(why)) &&
		    !(r->background_event = json_deep_copy(ev)))
			return r->cb_st = ATB_ERR_NOMEM;
	} else if (!strcmp(kind, "side_stream")) {
		char why[8];

		if (!r->side_event && atbi_gate_side_stream(ev, c->m->p, why, sizeof(why)))
			r->side_event = json_deep_copy(ev);
	} else if (!strcmp(kind, "samples")) {
		const char *arm = json_string_value(json_object_get(ev, "arm"));
		const json_t *t = json_object_get(ev, "times_ns");
		uint64_t seed = (uint64_t)json_integer_value(json_object_get(ev, "seed"));
		struct seed_times *sd;
		size_t i, k;
		int a = -1;

		atbi_clock_samples(&r->clock, ev, now_ns, atbi_clock_rel_tolerance(c->m->p),
				   atbi_clock_slack_ns(c->m->p));
		/* PROTO: gates.background -- the harness's own reading of the job's
		   CPU time over the group (the runner's facts can be forged inside it) */
		if (json_is_object(json_object_get(ev, "harness_background")) &&
		    !r->background_outside) {
			const json_t *hb = json_object_get(ev, "harness_background");
			struct atbi_background_limits lim;
			char why[8];
			json_t *b = json_pack(
				"{s:s, s:s, s:I, s:s, s:O, s:O, s:I, s:O, s:O}", "event", "background",
				"seen_from", "harness", "seed", (json_int_t)seed, "group",
				json_string_value(json_object_get(ev, "group"))
					? json_string_value(json_object_get(ev, "group")) : "?",
				"wall_ns", json_object_get(hb, "wall_ns"), "other_threads_cpu_ns",
				json_object_get(hb, "other_cpu_ns"), "other_processes_cpu_ns",
				(json_int_t)0, "timing_thread_cpu_ns",
				json_object_get(hb, "timing_thread_cpu_ns"), "job_processes",
				json_object_get(hb, "job_processes"));

			if (!b)
				return r->cb_st = ATB_ERR_NOMEM;
			atbi_background_limits(c->m->p, &lim);
			if (atbi_gate_background(b, &lim, why, sizeof(why)))
				r->background_outside = b;
			else
				json_decref(b);
		}
		for (k = 0; arm && k < NARMS; k++)
			if (!strcmp(arm, arm_label[k]))
				a = (int)k;
		if (c->alone && a == A_BASE)
			a = A_ALONE;
		if (a < 0 || !r->arm[a] || !json_is_array(t))
			return ATB_OK;  /* not ours: the seed check below refuses */
		/* PROTO: gates.clocks -- job 1's arms compared, every reading floored */
		if (atbi_clocks_add(&r->clocks, ev,
				    c->alone ? -1 : a == A_BASE ? 0 : a == A_CAND ? 1 : -1))
			return r->cb_st = ATB_ERR_NOMEM;
		if (!c->alone && a == A_CAND) {
			char why[8];

			r->timed_rounds += (size_t)json_integer_value(
				json_object_get(json_object_get(ev, "timed_checks"), "rounds_checked"));
			if (!r->timed_event && atbi_gate_timed_checks(ev, why, sizeof(why)) &&
			    !(r->timed_event = json_deep_copy(ev)))
				return r->cb_st = ATB_ERR_NOMEM;
		}
		for (k = 0; k < c->m->nseeds && c->m->seeds[k] != seed; k++)
			;
		if (k == c->m->nseeds)
			return ATB_OK;
		sd = &r->arm[a][k];
		/* PROTO: timing.round_trip -- the group's subtracted figure, kept per seed */
		if (json_is_object(json_object_get(ev, "round_trip"))) {
			size_t j;

			if (!r->round_trip_ns) {
				r->round_trip_ns = atb_malloc(r->nseeds * sizeof(*r->round_trip_ns));
				if (!r->round_trip_ns)
					return r->cb_st = ATB_ERR_NOMEM;
				for (j = 0; j < r->nseeds; j++)
					r->round_trip_ns[j] = NAN;
			}
			r->round_trip_ns[k] = json_number_value(json_object_get(
				json_object_get(ev, "round_trip"), "subtracted_ns"));
			/* PROTO: timing.round_trip.max_share_under -- the worst group
			   of the baseline's and the candidate's (the naive kernel
			   is not judged): by the Wilson 95% lower bound of its
			   share, so that 3 of a 10-trial group are not enough */
			if (json_array_size(t) && (a == A_BASE || a == A_CAND || a == A_ALONE)) {
				json_int_t under = json_integer_value(json_object_get(
					json_object_get(ev, "round_trip"), "under"));
				double share = (double)under / (double)json_array_size(t), lo, hi;

				atb_suite_wilson((size_t)(under > 0 ? under : 0), json_array_size(t),
						 0.95, &lo, &hi);
				if (!r->rt_under_arm || lo > r->rt_under_lo) {
					r->rt_under_lo = lo;
					r->rt_under_share = share;
					r->rt_under = (size_t)under;
					r->rt_under_trials = json_array_size(t);
					r->rt_under_seed = seed;
					r->rt_under_arm = arm_label[a];
					r->rt_under_sub_ns = r->round_trip_ns[k];
				}
			}
		}
		/* PROTO: timing (cuda) -- NVML saw a throttle reason around this group */
		r->trials += json_array_size(t);
		if (json_is_true(json_object_get(ev, "throttled")))
			r->throttled_trials += json_array_size(t);
		for (i = 0; i < json_array_size(t); i++) {
			double v = json_number_value(json_array_get(t, i));

			if (sd->n == sd->cap) {
				size_t cap = sd->cap ? sd->cap * 2 : 64;
				double *p = atb_realloc(sd->t, cap * sizeof(*p));

				if (!p)
					return r->cb_st = ATB_ERR_NOMEM;
				sd->t = p;
				sd->cap = cap;
			}
			sd->t[sd->n++] = v;
		}
		if (a != A_COMPILE)  /* progress counts the job's own arms */
			c->samples_seen++;
		if (a != A_COMPILE && c->arms_timed && c->samples_seen % c->arms_timed == 0) {
			char ph[64];

			snprintf(ph, sizeof(ph), "%s seed %zu/%zu", c->alone ? "drift" : "timing",
				 k + 1, c->m->nseeds);
			progress(c->m, ph);
		}
	}
	return ATB_OK;
}

static void job_result_release(struct job_result *r)
{
	size_t a, i;

	for (a = 0; a < NARMS; a++) {
		if (r->arm[a])
			for (i = 0; i < r->nseeds; i++)
				atb_free(r->arm[a][i].t);
		atb_free(r->arm[a]);
		atb_free(r->median[a]);
	}
	atbi_correctness_release(&r->corr);
	atbi_clocks_release(&r->clocks);
	json_decref(r->env);
	json_decref(r->done);
	json_decref(r->side_event);
	json_decref(r->compile_event);
	json_decref(r->tamper_event);
	json_decref(r->timed_event);
	json_decref(r->outputs_event);
	json_decref(r->background_event);
	json_decref(r->background_outside);
	atb_free(r->round_trip_ns);
	memset(r, 0, sizeof(*r));
}

/* Empty result slots for the given arms over every seed (release it). */
static enum atb_status job_result_init(struct measure *m, const int *arms, size_t narms,
				       int alone, struct job_result *r, struct atb_error *err)
{
	size_t i;

	memset(r, 0, sizeof(*r));
	r->nseeds = m->nseeds;
	for (i = 0; i < narms; i++) {
		int a = alone && arms[i] == A_BASE ? A_ALONE : arms[i];

		r->arm[a] = atb_calloc(m->nseeds, sizeof(struct seed_times));
		if (!r->arm[a])
			return atb_error_set(err, ATB_ERR_NOMEM, "cannot run job: out of memory");
	}
	if (m->with_compile && !alone &&
	    !(r->arm[A_COMPILE] = atb_calloc(m->nseeds, sizeof(struct seed_times))))
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot run job: out of memory");
	return ATB_OK;
}

/*
 * One fresh runner process on seeds[lo .. hi) with the given arms; its
 * samples and facts go into r (made by job_result_init), its end into
 * r->st and r->ro.  Error only for memory.
 */
static enum atb_status run_job(struct measure *m, const int *arms, size_t narms, int alone,
			       size_t lo, size_t hi, struct job_result *r, struct atb_error *err)
{
	/* the alone job stores only the baseline's samples (its twin and a naive
	   arm run for the same work, unrecorded): one per seed */
	struct job_ctx c = {m, r, alone, 0, alone ? 1 : narms};
	struct atb_runner_watch watch;
	struct atb_error rerr;
	json_t *job = NULL;
	enum atb_status st;

	m->seed_lo = lo;
	m->seed_hi = hi;
	st = build_job(m, arms, narms, alone, &job, err);
	if (st)
		return st;
	atb_error_clear(&rerr);
	memset(&r->ro, 0, sizeof(r->ro));
	/* PROTO: timing.job_timeout_s, gates.hang */
	atbi_hang_watch(m->p, &watch);
	r->st = atb_runner_run_watched(m->runner, job, m->p->timing.job_timeout_s, &watch,
				       on_event, &c, &r->ro, &rerr);
	json_decref(job);
	if (r->cb_st)
		return atb_error_set(err, r->cb_st, "cannot collect runner events: out of memory");
	return ATB_OK;
}

static enum atb_status surface_recheck(struct measure *m, int *refused, struct atb_error *err);
static enum atb_status reject_tamper(struct measure *m, const struct job_result *r, int *refused,
				     struct atb_error *err);
static enum atb_status runner_gate(struct measure *m, struct job_result *r, const char *which,
				   int *refused, struct atb_error *err);

/*
 * Gate "clock" after a runner that ended well: every timed group's span by
 * the runner's clock agrees with the harness's, and its trials fit in it
 * (src/measure/clock.c).  PROTO: gates.clock
 */
static enum atb_status clock_gate(struct measure *m, struct job_result *r, const char *which,
				  int *refused, struct atb_error *err)
{
	double rel = atbi_clock_rel_tolerance(m->p);
	int64_t slack_ns = atbi_clock_slack_ns(m->p);
	const struct atbi_clock_group *g = &r->clock.bad;
	char reason[1024];

	*refused = atbi_clock_finish(&r->clock, rel, slack_ns);
	if (!*refused)
		return ATB_OK;
	snprintf(reason, sizeof(reason), "%s (%s)", r->clock.why, which);
	return reject(m, ATB_GATE_CLOCK, ATB_ERR_CHECK, reason,
		      json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:f}", "job", which, "seed",
				(json_int_t)g->seed, "arms", (json_int_t)g->arms, "runner_span_ns",
				(json_int_t)g->runner_ns, "harness_span_ns",
				(json_int_t)g->harness_ns, "trials_ns", (json_int_t)g->trials_ns,
				"rel_tolerance", rel, "abs_slack_ms", (double)slack_ns / 1e6),
		      err);
}

/*
 * Gate "background" after the paired runner (PROTO: gates.background): a
 * timed group beside which other threads or processes burned CPU.  The cpu backend only: the CUDA runtime and PyTorch run
 * threads of their own (torch's intra-op pool works during the
 * reference's calls too), so there the facts are recorded, not judged.
 */
static enum atb_status background_gate(struct measure *m, struct job_result *r,
				       const char *which, int *refused, struct atb_error *err)
{
	struct atbi_background_limits lim;
	char why[1024], reason[1100];
	/* the runner's facts say more; the harness's cannot be forged from
	   inside the runner, and stand when the runner's say nothing */
	const json_t *ev = r->background_event ? r->background_event : r->background_outside;
	const char *dev = json_string_value(json_object_get(r->env, "device"));
	/* PROTO: gates.background.torch_cpu (version 5 on) -- torch on the cpu
	   device, on the runner's facts only: they count the threads made
	   after PyTorch's pools (untrusted_threads_cpu_ns), where the harness's
	   reading from /proc cannot tell PyTorch's pool from a burner */
	int torch_cpu = m->torch && m->p->gates.has_background_torch_cpu &&
			m->p->gates.background_torch_cpu && dev && !strcmp(dev, "cpu");

	*refused = 0;
	if (torch_cpu)
		ev = r->background_event;
	if (m->cuda || (m->torch && !torch_cpu) || !ev)
		return ATB_OK;
	atbi_background_limits(m->p, &lim);
	if (!atbi_gate_background(ev, &lim, why, sizeof(why)))
		return ATB_OK;
	snprintf(reason, sizeof(reason), "%s (%s)", why, which);
	*refused = 1;
	return reject(m, ATB_GATE_BACKGROUND, ATB_ERR_CHECK, reason,
		      json_pack("{s:s, s:O, s:f, s:f}", "job", which, "event",
				ev, "max_cpu_share", lim.max_cpu_share,
				"abs_slack_ms", (double)lim.slack_ns / 1e6),
		      err);
}

/*
 * PROTO: gates.baseline_drift.tolerance -- how the paired job and the
 * baseline-alone job are run (docs/internals/gates.md, "baseline drift").
 * One fresh runner per seed for each: the paired arms (correctness on that
 * seed, then timing) into j1, the baseline alone (no candidate loaded; a
 * copy of the baseline's object in the candidate's slot, so the runner does
 * the same work in the same order) into j2, in the order P A, A P, P A, ... over the seeds, so each seed's
 * baseline beside the candidate and alone are timed seconds apart and a
 * drift of the box that is linear in time cancels over each pair of seeds.
 * Tasks of kind cuda and torch run all seeds in one runner per side
 * (atbi_measure_seeds_per_runner: a cuda runner costs seconds to start, a
 * torch one imports torch).  After every paired process the surface is rechecked; a
 * runner that does not end well, a correctness fact against the candidate,
 * or a wrong naive baseline stops the sequence (the caller judges j1 and j2
 * as it would one job each).  *refused: a rejection was stored here.
 */
static enum atb_status run_interleaved(struct measure *m, const int *arms, size_t narms,
				       struct job_result *j1, struct job_result *j2, int *refused,
				       struct atb_error *err)
{
	static const int alone_arm[1] = {A_BASE};
	/* the alone runner mirrors the paired one, the baseline's twin in the
	   candidate's slot: only the candidate's code is missing from it */
	const int *aarms = m->twin ? arms : alone_arm;
	size_t naarms = m->twin ? narms : 1, ns, k;
	struct atbi_run_slot slots[2 * ATB_RUNNER_MAX_SEEDS];
	const char *reason;
	const json_t *ev;
	enum atb_status st;

	*refused = 0;
	ns = atbi_measure_layout(m->nseeds, atbi_measure_seeds_per_runner(m->task->kind, m->nseeds),
				 slots);
	st = job_result_init(m, arms, narms, 0, j1, err);
	if (!st)
		st = job_result_init(m, alone_arm, 1, 1, j2, err);
	m->nslots = ns;
	for (k = 0; !st && k < ns; k++) {
		int paired = slots[k].paired;
		struct job_result *r = paired ? j1 : j2;

		m->slots_done = k;
		progress(m, paired ? "correctness" : "drift");
		st = paired ? run_job(m, arms, narms, 0, slots[k].lo, slots[k].hi, j1, err)
			    : run_job(m, aarms, naarms, 1, slots[k].lo, slots[k].hi, j2, err);
		m->slots_done = k + 1;
		if (!st)
			st = surface_recheck(m, refused, err);
		/* PROTO: gates tamper -- before the runner gate: the watch ends the
		   job with an error event after it, and the change is the cause */
		if (!st && !*refused && paired && j1->tamper_event)
			st = reject_tamper(m, j1, refused, err);
		if (!st && !*refused)
			st = runner_gate(m, r, paired ? "job 1" : "job 2, baseline alone", refused,
					 err);
		if (!st && !*refused)
			st = clock_gate(m, r, paired ? "job 1" : "job 2, baseline alone", refused,
					err);
		if (!st && !*refused && paired)
			st = background_gate(m, r, "job 1", refused, err);
		if (st || *refused)
			return st;
		if (paired && (j1->corr.naive_wrong ||
			       atbi_gate_correctness_verdict(&j1->corr, &reason, &ev)))
			return ATB_OK;
	}
	return st;
}

static enum atb_status hash_roots(struct measure *m, struct atbi_hash_set *hs,
				  struct atb_error *err)
{
	char protodir[4096];
	enum atb_status st;

	snprintf(protodir, sizeof(protodir), "%s", m->p->path);
	st = atbi_hash_add(hs, dirname(protodir), err);
	if (!st)
		st = atbi_hash_add(hs, m->task->dir, err);
	if (!st)
		st = atbi_hash_add(hs, m->runner, err);
	if (!st)
		st = atbi_hash_add(hs, m->so[0], err);
	if (!st && m->with_naive)
		st = atbi_hash_add(hs, m->so[2], err);
	if (!st && m->twin)
		st = atbi_hash_add(hs, m->so[3], err);
	atbi_hash_sort(hs);
	return st;
}

/* Gate "surface" after a runner: has anything outside the candidate changed? */
static enum atb_status surface_recheck(struct measure *m, int *refused, struct atb_error *err)
{
	struct atbi_hash_set after = {0};
	char what[4200], reason[4400];
	enum atb_status st;

	*refused = 0;
	st = hash_roots(m, &after, err);
	if (st) {
		/* a root vanished or became unreadable: that is a change too */
		snprintf(reason, sizeof(reason), "something outside the candidate changed: %s",
			 err->msg);
		atbi_hash_release(&after);
		*refused = 1;
		return reject(m, ATB_GATE_SURFACE, ATB_ERR_CHECK, reason, NULL, err);
	}
	if (atbi_hash_diff(&m->before, &after, what, sizeof(what))) {
		snprintf(reason, sizeof(reason), "the candidate touched a file outside its surface: %s",
			 what);
		atbi_hash_release(&after);
		*refused = 1;
		return reject(m, ATB_GATE_SURFACE, ATB_ERR_CHECK, reason,
			      json_pack("{s:s}", "changed", what), err);
	}
	atbi_hash_release(&after);
	return ATB_OK;
}

/*
 * Gate "tamper" (torch): the paired runner's watch saw the interpreter the
 * reference runs in change after the candidate was imported (the runner's
 * "tamper" event; docs/internals/torch.md, "The tamper watch").
 */
static enum atb_status reject_tamper(struct measure *m, const struct job_result *r, int *refused,
				     struct atb_error *err)
{
	char why[1024];

	*refused = 1;
	atbi_gate_tamper(r->tamper_event, why, sizeof(why));
	return reject(m, ATB_GATE_TAMPER, ATB_ERR_CHECK, why,
		      json_pack("{s:O}", "event", r->tamper_event), err);
}

/* Gate "runner": the job did not end with "done". */
static enum atb_status runner_gate(struct measure *m, struct job_result *r, const char *which,
				   int *refused, struct atb_error *err)
{
	const struct atb_runner_outcome *o = &r->ro;
	char reason[1024];

	*refused = 0;
	if (r->st == ATB_OK && o->end == ATB_RUNNER_DONE)
		return ATB_OK;
	switch (o->end) {
	case ATB_RUNNER_SIGNALED:
		snprintf(reason, sizeof(reason), "the runner (%s) died of %s: a crashing kernel", which,
			 o->signal_name);
		break;
	case ATB_RUNNER_TIMEOUT:
		snprintf(reason, sizeof(reason),
			 "the runner (%s) timed out after %g s (PROTO: timing.job_timeout_s)", which,
			 m->p->timing.job_timeout_s);
		break;
	case ATB_RUNNER_HANG: {
		struct atb_runner_watch w;

		/* PROTO: gates.hang -- its own gate: a call that never returns */
		atbi_hang_watch(m->p, &w);
		snprintf(reason, sizeof(reason),
			 "the runner (%s) made no progress for %.1f s after '%s' and was killed: "
			 "limit %.1f s (%s); a kernel call that does not return", which, o->stall_s,
			 o->stalled_after, o->stall_limit_s,
			 o->stall_in_startup
				 ? "gates.hang.startup_s, before the candidate's first call returned"
				 : "max of gates.hang.min_s and factor x the longest silence before");
		*refused = 1;
		return reject(m, ATB_GATE_HANG, ATB_ERR_CHECK, reason,
			      json_pack("{s:s, s:s, s:f, s:f, s:b, s:f, s:f, s:f, s:f, s:I, s:s, s:I}",
					"job", which, "stalled_after", o->stalled_after,
					"stall_s", o->stall_s, "limit_s", o->stall_limit_s,
					"in_startup", o->stall_in_startup,
					"longest_gap_s", o->longest_gap_s, "startup_s", w.startup_s,
					"min_s", w.min_s, "factor", w.factor,
					"progress_events", (json_int_t)o->nprogress,
					"stderr_tail", o->stderr_tail, "wall_ns", (json_int_t)o->wall_ns),
			      err);
	}
	case ATB_RUNNER_ERROR:
		snprintf(reason, sizeof(reason), "the runner (%s) reported '%s': %s", which, o->reason,
			 o->detail);
		break;
	case ATB_RUNNER_MALFORMED:
		snprintf(reason, sizeof(reason), "the runner (%s) wrote a malformed event: %.200s",
			 which, o->detail);
		break;
	case ATB_RUNNER_EXIT:
		snprintf(reason, sizeof(reason), "the runner (%s) exited with status %d before 'done'",
			 which, o->exit_code);
		break;
	default:
		snprintf(reason, sizeof(reason), "the runner (%s) failed: %s", which,
			 atb_runner_end_name(o->end));
		break;
	}
	*refused = 1;
	return reject(m, ATB_GATE_RUNNER, r->st ? r->st : ATB_ERR_SYSTEM, reason,
		      json_pack("{s:s, s:s, s:i, s:s, s:s, s:s, s:s, s:I}", "job", which, "end",
				atb_runner_end_name(o->end), "exit_code", o->exit_code, "signal",
				o->signal_name, "reason", o->reason, "message", o->detail,
				"stderr_tail", o->stderr_tail, "wall_ns", (json_int_t)o->wall_ns),
		      err);
}

/*
 * PROTO: timing.round_trip.max_share_under (version 13 on) -- 1 when a seed
 * group of job r had an arm whose trials the round trip's subtraction left
 * at or under 0 ns more often than the protocol allows: that arm's calls are
 * within the round trip's spread, so its time is not resolved.
 */
static int rt_unresolved(const struct measure *m, const struct job_result *r)
{
	return m->isolate && m->rt_every > 0 && m->rt_subtract && m->rt_max_under >= 0 &&
	       r->rt_under_arm && r->rt_under_lo > m->rt_max_under;
}

/* rt_unresolved's words: the worst group, for a re-run's reason or a refusal */
static void rt_unresolved_words(const struct measure *m, const struct job_result *r,
				char *why, size_t size)
{
	snprintf(why, size,
		 "the round trip's subtraction (%.0f ns) left %zu of the %s's %zu trials on seed %"
		 PRIu64 " (%.1f%%, at least %.1f%% at 95%%) at or under 0 ns (at most %.0f%%)",
		 r->rt_under_sub_ns, r->rt_under, r->rt_under_arm, r->rt_under_trials,
		 r->rt_under_seed, 100 * r->rt_under_share, 100 * r->rt_under_lo,
		 100 * m->rt_max_under);
}

/* Gate "noise" for a job with a group not resolved against the round trip. */
static enum atb_status reject_unresolved(struct measure *m, const char *which,
					 const struct job_result *r, struct atb_error *err)
{
	char why[640], words[400];

	rt_unresolved_words(m, r, words, sizeof(words));
	snprintf(why, sizeof(why),
		 "%s in %s after %d runs: the calls are not resolved against the workers' "
		 "round trip (they are shorter than its spread; measure larger inputs)", words,
		 which, m->out->attempts);
	return reject(m, ATB_GATE_NOISE, ATB_ERR_CHECK, why,
		      json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:i}", "cause",
				"round_trip_unresolved", "job", which, "arm", r->rt_under_arm,
				"seed", (json_int_t)r->rt_under_seed, "under",
				(json_int_t)r->rt_under, "trials", (json_int_t)r->rt_under_trials,
				"share", r->rt_under_share, "share_low", r->rt_under_lo,
				"max_share_under", m->rt_max_under,
				"subtracted_ns", r->rt_under_sub_ns, "attempts", m->out->attempts),
		      err);
}

/* Gate "noise" for a job whose timed trials NVML saw throttled too often. */
static enum atb_status reject_throttled(struct measure *m, const char *which,
					const struct job_result *r, double share,
					struct atb_error *err)
{
	char why[512];

	snprintf(why, sizeof(why),
		 "the gpu was throttled during %.1f%% of the timed trials of %s (%zu of %zu; "
		 "at most %.0f%%) after %d runs: clocks changed under the measurement",
		 100 * share, which, r->throttled_trials, r->trials, 100 * atbi_throttle_max_share(m->p),
		 m->out->attempts);
	return reject(m, ATB_GATE_NOISE, ATB_ERR_CHECK, why,
		      json_pack("{s:s, s:s, s:f, s:I, s:I, s:f, s:i}", "cause", "throttling", "job",
				which, "throttled_share", share, "throttled_trials",
				(json_int_t)r->throttled_trials, "trials", (json_int_t)r->trials,
				"max_share", atbi_throttle_max_share(m->p), "attempts", m->out->attempts),
		      err);
}

/*
 * PROTO: gates.clocks (version 4 on) -- the rule on one job's readings:
 * 0 fine or nothing to judge, 1 clocks under the floor too often, 2 the
 * arms at different clocks.  Job 1's facts go to the outcome.
 */
static int clocks_rule(struct measure *m, const struct job_result *r, int job1,
		       struct atbi_clocks_facts *f)
{
	const struct atb_protocol *p = m->p;
	int rc = atbi_gate_clocks(&r->clocks, p->gates.clocks_floor_ratio,
				  p->gates.clocks_max_share_below,
				  p->gates.clocks_max_arm_rel_difference, f);

	if (job1 && rc >= 0) {
		m->out->clocks.judged = 1;
		m->out->clocks.share_below = f->share_below;
		m->out->clocks.rel_difference = f->rel_difference;
		m->out->clocks.mean_base_mhz = f->mean_base_mhz;
		m->out->clocks.mean_cand_mhz = f->mean_cand_mhz;
		m->out->clocks.max_mhz = f->max_mhz;
		m->out->clocks.floor_mhz = f->floor_mhz;
		m->out->clocks.readings = f->total;
	}
	return rc > 0 ? rc : 0;
}

/* Gate "noise" for a job whose SM clocks broke gates.clocks (rule rc). */
static enum atb_status reject_clocks(struct measure *m, const char *which, int rc,
				     const struct atbi_clocks_facts *f, struct atb_error *err)
{
	const struct atb_protocol *p = m->p;
	char why[512];

	if (rc == 1)
		snprintf(why, sizeof(why),
			 "the gpu's SM clock was below %u MHz (%.0f%% of its maximum %u MHz) "
			 "during %.1f%% of the timed trials of %s (%zu of %zu; at most %.0f%%) "
			 "after %d runs: clocks changed under the measurement",
			 f->floor_mhz, 100 * p->gates.clocks_floor_ratio, f->max_mhz,
			 100 * f->share_below, which, f->below, f->total,
			 100 * p->gates.clocks_max_share_below, m->out->attempts);
	else
		snprintf(why, sizeof(why),
			 "the arms of %s ran at different SM clocks: baseline %.0f MHz, candidate "
			 "%.0f MHz on average (%.1f%% apart; at most %.1f%%) after %d runs",
			 which, f->mean_base_mhz, f->mean_cand_mhz, 100 * f->rel_difference,
			 100 * p->gates.clocks_max_arm_rel_difference, m->out->attempts);
	return reject(m, ATB_GATE_NOISE, ATB_ERR_CHECK, why,
		      json_pack("{s:s, s:s, s:I, s:I, s:f, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:i}",
				"cause", rc == 1 ? "clock_below_floor" : "clocks_differ", "job",
				which, "readings", (json_int_t)f->total, "below",
				(json_int_t)f->below, "share_below", f->share_below, "max_mhz",
				(int)f->max_mhz, "floor_mhz", (int)f->floor_mhz,
				"max_share_below", p->gates.clocks_max_share_below,
				"mean_base_mhz", f->mean_base_mhz, "mean_cand_mhz",
				f->mean_cand_mhz, "rel_difference", f->rel_difference,
				"max_arm_rel_difference", p->gates.clocks_max_arm_rel_difference,
				"attempts", m->out->attempts),
		      err);
}

/* Per-seed medians of every arm that ran; refuses a seed without samples. */
static int medians(struct measure *m, struct job_result *r, char *why, size_t size)
{
	size_t a, i;

	for (a = 0; a < NARMS; a++) {
		if (!r->arm[a])
			continue;
		r->median[a] = atb_calloc(m->nseeds, sizeof(double));
		if (!r->median[a]) {
			snprintf(why, size, "out of memory");
			return -1;
		}
		for (i = 0; i < m->nseeds; i++) {
			if (!r->arm[a][i].n && a == A_COMPILE) {
				/* the runner stopped timing it (compile_event says why) */
				atb_free(r->median[a]);
				r->median[a] = NULL;
				break;
			}
			if (!r->arm[a][i].n) {
				snprintf(why, size, "the runner sent no samples of arm '%s' for seed %" PRIu64,
					 arm_label[a], m->seeds[i]);
				return 1;
			}
			r->median[a][i] = atbi_median_of(r->arm[a][i].t, r->arm[a][i].n);
		}
	}
	return 0;
}

/* ---- the physical floor's caps: cached per box ---- */

static void gpu_kind(char *buf, size_t size, const char *fmt, int ordinal)
{
	/* fmt is one of the ATB_FLOOR_GPU_KIND_* literals: a single %d */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	snprintf(buf, size, fmt, ordinal);
#pragma GCC diagnostic pop
}

/*
 * The GPU's caps (device 0: the runner's), from the store or measured here
 * on first use and stored.  No cuda driver in the harness: the floor stays
 * unknown (0) and the runner's own no_cuda refusal says why.  A box without
 * cuBLAS stores no GEMM rates: the flops term is off (never a made-up peak).
 */
static enum atb_status gpu_floor_caps(struct measure *m, struct atb_floor_caps *caps,
				      struct atb_error *err)
{
	static const char *const kinds[4] = {ATB_FLOOR_GPU_KIND_MEM_BW, ATB_FLOOR_GPU_KIND_FP32,
					     ATB_FLOOR_GPU_KIND_FP16, ATB_FLOOR_GPU_KIND_BF16};
	struct atb_floor_gpu g;
	struct atb_error e2;
	double v[4] = {0, 0, 0, 0};
	char kind[64];
	enum atb_status st;
	int i;

	memset(&g, 0, sizeof(g));
	atb_error_clear(&e2);
	for (i = 0; i < 4; i++) {
		gpu_kind(kind, sizeof(kind), kinds[i], 0);
		st = atb_store_capability_get(m->store, m->fingerprint, kind, &v[i],
					      i ? NULL : g.method, i ? 0 : sizeof(g.method), &e2);
		if (st == ATB_ERR_NOT_FOUND && i == 0)
			break;
		if (st && st != ATB_ERR_NOT_FOUND) {
			*err = e2;
			return st;
		}
	}
	if (v[0] > 0) {
		/* the stored copy rate already is the larger of copy and attributes */
		g.copy_bw_bytes_per_s = v[0];
		g.gemm_flops_per_s_fp32 = v[1];
		g.gemm_flops_per_s_fp16 = v[2];
		g.gemm_flops_per_s_bf16 = v[3];
		atb_floor_gpu_caps(&g, caps);
		return ATB_OK;
	}
	progress(m, "floor (gpu)");
	st = atb_floor_measure_gpu(0, 0, &g, &e2);
	if (st == ATB_ERR_NOT_FOUND || st == ATB_ERR_SYSTEM) {
		snprintf(caps->method, sizeof(caps->method), "no gpu floor: %.140s", e2.msg);
		return ATB_OK;
	}
	if (st) {
		*err = e2;
		return st;
	}
	atb_floor_gpu_caps(&g, caps);
	v[0] = caps->mem_bw_bytes_per_s;
	v[1] = g.gemm_flops_per_s_fp32;
	v[2] = g.gemm_flops_per_s_fp16;
	v[3] = g.gemm_flops_per_s_bf16;
	for (i = 0; i < 4; i++) {
		if (!(v[i] > 0))
			continue;
		gpu_kind(kind, sizeof(kind), kinds[i], 0);
		if ((st = atb_store_capability_put(m->store, m->fingerprint, kind, v[i], g.method,
						   err)))
			return st;
	}
	return ATB_OK;
}

static enum atb_status floor_caps(struct measure *m, struct atb_floor_caps *caps,
				  struct atb_error *err)
{
	struct atb_error e2;
	enum atb_status st, s2;

	memset(caps, 0, sizeof(*caps));
	if (m->cuda)
		return gpu_floor_caps(m, caps, err);
	atb_error_clear(&e2);
	st = atb_store_capability_get(m->store, m->fingerprint, ATB_CAPABILITY_CPU_MEM_BW,
				      &caps->mem_bw_bytes_per_s, caps->method, sizeof(caps->method),
				      &e2);
	s2 = st ? st : atb_store_capability_get(m->store, m->fingerprint,
					       ATB_CAPABILITY_CPU_PEAK_FLOPS,
					       &caps->peak_flops_per_s, NULL, 0, &e2);
	if (s2 == ATB_OK)
		return ATB_OK;
	if (s2 != ATB_ERR_NOT_FOUND) {
		*err = e2;
		return s2;
	}
	progress(m, "floor");
	st = atb_floor_measure_cpu(0, caps, err);
	if (!st)
		st = atb_store_capability_put(m->store, m->fingerprint, ATB_CAPABILITY_CPU_MEM_BW,
					      caps->mem_bw_bytes_per_s, caps->method, err);
	if (!st)
		st = atb_store_capability_put(m->store, m->fingerprint, ATB_CAPABILITY_CPU_PEAK_FLOPS,
					      caps->peak_flops_per_s, caps->method, err);
	return st;
}

/*
 * PROTO: gates.physical_floor.margin -- a cpu candidate beat the floor
 * computed from the cached caps, which may have been measured while the box
 * was busy (a low bandwidth makes a high floor).  Measure again, longer
 * (atb_floor_remeasure_cpu only raises the caps), store what it raised as
 * the box's caps in force, and recompute the floor.  Once per measurement.
 * A re-measure that fails leaves the cached caps and says why in
 * m->floor_why; only a store failure is an error.
 */
static enum atb_status floor_remeasure(struct measure *m, struct atb_floor_caps *caps,
				       const struct atb_task_instance *t0, struct atb_error *err)
{
	struct atb_floor_caps before = *caps;
	struct atb_error e2;
	enum atb_status st;

	m->out->floor_remeasured = 1;
	m->out->floor_cached_ns = m->out->floor_ns;
	progress(m, "floor (re-measure)");
	atb_error_clear(&e2);
	st = atb_floor_remeasure_cpu(0, caps, &e2);
	if (st) {
		snprintf(m->floor_why, sizeof(m->floor_why), "re-measure failed: %.200s", e2.msg);
		*caps = before;
		return st == ATB_ERR_NOMEM ? (*err = e2, st) : ATB_OK;
	}
	if (caps->mem_bw_bytes_per_s > before.mem_bw_bytes_per_s &&
	    (st = atb_store_capability_put(m->store, m->fingerprint, ATB_CAPABILITY_CPU_MEM_BW,
					   caps->mem_bw_bytes_per_s, caps->method, err)))
		return st;
	if (caps->peak_flops_per_s > before.peak_flops_per_s &&
	    (st = atb_store_capability_put(m->store, m->fingerprint, ATB_CAPABILITY_CPU_PEAK_FLOPS,
					   caps->peak_flops_per_s, caps->method, err)))
		return st;
	m->out->floor_ns = atb_floor_ns(caps, t0->floor_bytes, t0->floor_flops);
	return ATB_OK;
}

/*
 * PROTO: gates.physical_floor, gates.physical_floor.cache_allowance -- the
 * floor of a torch task, which declares no bytes or flops: the bytes of the
 * reference's outputs (not aliasing its inputs, not overlapping
 * themselves) that a correct candidate must write on every call, as the
 * baseline-alone runner reported them (it never imports the candidate),
 * less what the caches can hold (allowance x the CPU's data caches, or the
 * GPU's L2 when the runner's device was cuda): one write of the rest at the
 * box's measured bandwidth.  Sets t0->floor_bytes (flops 0) and
 * out->floor_ns; an unknown byte count or cache size leaves the floor 0
 * (not applied), never a guess.
 */
static enum atb_status torch_floor(struct measure *m, const struct job_result *j2,
				   struct atb_floor_caps *caps,
				   struct atb_task_instance *t0, struct atb_error *err)
{
	const json_t *o = json_object_get(j2->outputs_event, "outputs");
	const json_t *bytes = json_object_get(o, "bytes");
	/* the device and its L2 from the alone runner too: the paired one has
	   the candidate inside (a "cpu" claimed on a GPU would pick caps that
	   are not there, and no floor) */
	const char *dev = json_string_value(json_object_get(j2->env, "device"));
	double factor = m->p->gates.floor_cache_allowance > 0 ? m->p->gates.floor_cache_allowance
							      : ATBI_FLOOR_CACHE_ALLOWANCE;
	uint64_t cache = 0;
	int64_t out_bytes;
	enum atb_status st;

	m->out->output_bytes = -1;
	t0->floor_bytes = 0;
	t0->floor_flops = 0;
	m->out->floor_ns = 0;
	if (!json_is_integer(bytes) || json_integer_value(bytes) < 0)
		return ATB_OK;
	out_bytes = (int64_t)json_integer_value(bytes);
	m->out->output_bytes = out_bytes;
	m->floor_gpu = dev && !strcmp(dev, "cuda");
	if (m->floor_gpu) {
		const json_t *l2 = json_object_get(json_object_get(j2->env, "gpu_device"),
						   "l2_bytes");

		cache = json_is_integer(l2) && json_integer_value(l2) > 0
				? (uint64_t)json_integer_value(l2)
				: 0;
	} else {
		cache = atb_floor_cpu_cache_bytes(NULL);
		/* no sysfs: the largest cache four times over bounds every
		   level of every core on the CPUs seen (docs/torch.md) */
		if (!cache && m->box && m->box->cache_largest_bytes)
			cache = 4 * m->box->cache_largest_bytes;
	}
	if (!cache)
		return ATB_OK;
	m->out->floor_allowance_bytes = (int64_t)(factor * (double)cache);
	if (out_bytes <= m->out->floor_allowance_bytes)
		return ATB_OK;
	t0->floor_bytes = out_bytes - m->out->floor_allowance_bytes;
	/* m->cuda picks the caps: the GPU's for a cuda torch runner */
	{
		int was = m->cuda;

		m->cuda = m->floor_gpu;
		st = floor_caps(m, caps, err);
		m->cuda = was;
	}
	if (st)
		return st;
	m->out->floor_ns = atb_floor_ns(caps, t0->floor_bytes, 0);
	return ATB_OK;
}

/* ---- statistics ---- */

static enum atb_status paired(struct measure *m, struct seed_times *base, struct seed_times *cand,
			      uint64_t bseed, struct atb_paired_result *res, struct atb_error *err)
{
	struct atb_paired_seed *ps = atb_calloc(m->nseeds, sizeof(*ps));
	enum atb_status st;
	size_t i;

	if (!ps)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot compute statistics: out of memory");
	for (i = 0; i < m->nseeds; i++) {
		ps[i].seed = m->seeds[i];
		ps[i].baseline = base[i].t;
		ps[i].nbaseline = base[i].n;
		ps[i].candidate = cand[i].t;
		ps[i].ncandidate = cand[i].n;
	}
	/* PROTO: stats.* -- the judge's statistics, whoever compares */
	st = atb_judge_stats_of(&m->judge, ps, m->nseeds, bseed, res, err);
	atb_free(ps);
	return st;
}

/* ---- ingest ---- */

static json_t *medians_array(const double *v, size_t n)
{
	json_t *a;
	size_t i;

	if (!v)
		return json_null();
	a = json_array();
	for (i = 0; a && i < n; i++)
		json_array_append_new(a, jreal(v[i]));
	return a;
}

/*
 * Per-seed medians of every arm (ns, in seed order) and the per-seed drift
 * ratios: what the noise and drift judgements were made from.
 */
static json_t *per_seed_json(const struct measure *m, const struct job_result *j1,
			     const struct job_result *j2)
{
	int both = j1->median[A_BASE] && j2->median[A_ALONE];
	double *q = both ? atb_calloc(m->nseeds, sizeof(*q)) : NULL;
	json_t *o;
	size_t k;

	for (k = 0; q && k < m->nseeds; k++)
		q[k] = j2->median[A_ALONE][k] > 0 ? j1->median[A_BASE][k] / j2->median[A_ALONE][k]
						  : NAN;
	o = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o}", "compile",
		      medians_array(j1->median[A_COMPILE], m->nseeds), "baseline",
		      medians_array(j1->median[A_BASE], m->nseeds), "candidate",
		      medians_array(j1->median[A_CAND], m->nseeds), "naive",
		      medians_array(j1->median[A_NAIVE], m->nseeds), "baseline_alone",
		      medians_array(j2->median[A_ALONE], m->nseeds), "drift_ratio",
		      medians_array(q, m->nseeds));
	atb_free(q);
	return o;
}

/*
 * stats.compile: torch.compile of the reference beside the candidate
 * (labelled, never the headline), or why it is absent; null when not asked.
 */
static json_t *compile_json(const struct measure *m, const struct atb_paired_result *cres,
			    const struct job_result *j1)
{
	const struct atb_measure_outcome *o = m->out;
	json_t *c;

	if (!m->with_compile)
		return json_null();
	c = json_pack("{s:s, s:s, s:b, s:o, s:o, s:o, s:o, s:o, s:o, s:s, s:O?, s:O?, s:s}",
		      "label", "torch.compile(Model), the task's reference compiled", "mode",
		      o->compile_mode, "measured", o->compile_measured, "speedup",
		      cres ? jreal(cres->geomean_ratio) : json_null(), "ci_low",
		      cres ? jreal(cres->ci_lo) : json_null(), "ci_high",
		      cres ? jreal(cres->ci_hi) : json_null(), "p_value",
		      cres ? jreal(cres->wilcoxon.p_value) : json_null(), "median_ns",
		      o->compile_measured ? jreal(o->compile_median_ns) : json_null(), "compile_s",
		      o->compile_s > 0 ? jreal(o->compile_s) : json_null(), "why", o->compile_why,
		      "checks", json_object_get(j1->compile_event, "checks"), "failed",
		      json_object_get(j1->compile_event, "failed"), "note",
		      "vs torch.compile of the reference, timed in the same rounds: labelled, "
		      "never the headline (the eager reference is the baseline of record); "
		      "compile_s is its first call (the compilation), not timed");
	return c ? c : json_null();
}

/*
 * The measurement's own keys of the result's stats; the statistics' keys
 * (p_value, cv_*, bootstrap_*, seeds, attempts: atb_judge_stats_json) are
 * the judge's, set when it concludes.
 */
static json_t *stats_json(struct measure *m, const struct atb_paired_result *naive,
			  const struct atb_paired_result *cres, const struct atb_floor_caps *caps,
			  const struct atb_task_instance *t0, double min_cand_ns,
			  const struct job_result *j1, const struct job_result *j2)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	json_object_set_new(o, "baseline", json_pack("{s:s, s:s, s:f}", "label", m->task->baseline.label,
						     "source", m->task->baseline.file, "median_ns",
						     m->out->baseline_median_ns));
	if (naive) {
		json_object_set_new(o, "naive",
				    json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:s}", "label",
					      m->task->naive.label, "source", m->task->naive.file,
					      "speedup", jreal(naive->geomean_ratio), "ci_low",
					      jreal(naive->ci_lo), "ci_high", jreal(naive->ci_hi),
					      "p_value", jreal(naive->wilcoxon.p_value), "median_ns",
					      jreal(m->out->naive_median_ns), "note",
					      "vs the naive starting point: labelled, never the headline"));
	} else {
		json_object_set_new(o, "naive", json_null());
	}
	json_object_set_new(o, "compile", compile_json(m, cres, j1));
	json_object_set_new(o, "floor",
			    json_pack("{s:o, s:I, s:I, s:o, s:o, s:o, s:o, s:s, s:b, s:o, s:s}",
				      "floor_ns", jreal(m->out->floor_ns), "bytes",
				      (json_int_t)t0->floor_bytes, "flops", (json_int_t)t0->floor_flops,
				      "mem_bw_bytes_per_s", jreal(caps->mem_bw_bytes_per_s),
				      "peak_flops_per_s", jreal(caps->peak_flops_per_s), "margin",
				      jreal(m->p->gates.floor_margin), "min_candidate_median_ns",
				      jreal(min_cand_ns), "method", caps->method, "remeasured",
				      m->out->floor_remeasured, "floor_cached_ns",
				      m->out->floor_remeasured ? jreal(m->out->floor_cached_ns)
							       : json_null(),
				      "remeasure_note", m->floor_why));
	if (m->torch) {
		/* PROTO: gates.physical_floor.cache_allowance -- where bytes came from */
		json_t *fl = json_object_get(o, "floor");

		json_object_set_new(fl, "output_bytes",
				    m->out->output_bytes >= 0 ? json_integer(m->out->output_bytes)
							      : json_null());
		json_object_set_new(fl, "cache_allowance_bytes",
				    json_integer(m->out->floor_allowance_bytes));
		json_object_set_new(fl, "outputs",
				    json_deep_copy(json_object_get(j2->outputs_event, "outputs")));
		json_object_set_new(fl, "caps", json_string(m->floor_gpu ? "gpu" : "cpu"));
	}
	json_object_set_new(o, "drift",
			    json_pack("{s:o, s:o, s:o, s:o, s:o, s:s}", "ratio",
				      jreal(m->out->drift_ratio), "tolerance",
				      jreal(m->p->gates.drift_tolerance), "baseline_median_ns",
				      jreal(m->out->baseline_median_ns), "baseline_alone_median_ns",
				      jreal(m->out->baseline_alone_median_ns), "spread",
				      jreal(m->drift_spread), "rule",
				      atbi_measure_seeds_per_runner(m->task->kind, m->nseeds) == 1
					      ? "median over seeds of baseline beside / alone, one "
						"runner per seed and side, alternated"
					      : "median over seeds of baseline beside / alone, one "
						"runner per side covering every seed"));
	json_object_set_new(o, "per_seed_medians_ns", per_seed_json(m, j1, j2));
	/* PROTO: timing.round_trip -- per seed, what was taken out of every
	   trial of the paired group and of the baseline alone (null: nothing) */
	json_object_set_new(o, "round_trip_subtracted_ns",
			    json_pack("{s:o, s:o}", "paired",
				      medians_array(j1->round_trip_ns, m->nseeds), "alone",
				      medians_array(j2->round_trip_ns, m->nseeds)));
	/* PROTO: gates.timed_correctness -- how many timed rounds were checked */
	json_object_set_new(o, "timed_checks",
			    json_pack("{s:I, s:i}", "candidate_rounds_checked",
				      (json_int_t)j1->timed_rounds, "failed", 0));
	/* PROTO: correctness.reference_precision (version 14 on, torch) -- what
	   the paired runner allowed for its reference's own error; and the
	   reference outputs it compared from PyTorch's own tensor because its
	   copy could not be made (absent: not a torch job) */
	if (j1->done && json_object_get(j1->done, "reference_precision"))
		json_object_set(o, "reference_precision",
				json_object_get(j1->done, "reference_precision"));
	if (j1->done && json_object_get(j1->done, "reference_copies_unprotected"))
		json_object_set(o, "reference_copies_unprotected",
				json_object_get(j1->done, "reference_copies_unprotected"));
	json_object_set(o, "build", m->build_info);
	if (m->cuda)
		json_object_set_new(o, "gpu",
				    json_pack("{s:f, s:f, s:O?}", "throttled_share",
					      m->out->throttled_share, "throttled_max_share",
					      atbi_throttle_max_share(m->p), "side_stream_escapes",
					      json_object_get(j1->done, "side_stream_escapes")));
	/* PROTO: gates.clocks -- what the rule saw */
	if (m->out->clocks.judged)
		json_object_set_new(
			o, "clocks",
			json_pack("{s:I, s:f, s:i, s:i, s:f, s:f, s:f}", "readings",
				  (json_int_t)m->out->clocks.readings, "share_below",
				  m->out->clocks.share_below, "max_mhz", (int)m->out->clocks.max_mhz,
				  "floor_mhz", (int)m->out->clocks.floor_mhz, "mean_base_mhz",
				  m->out->clocks.mean_base_mhz, "mean_cand_mhz",
				  m->out->clocks.mean_cand_mhz, "rel_difference",
				  m->out->clocks.rel_difference));
	json_object_set_new(o, "runner", j1->env ? json_deep_copy(j1->env) : json_null());
	json_object_set_new(o, "runner_alone", j2->env ? json_deep_copy(j2->env) : json_null());
	if (m->out->note[0])
		json_object_set_new(o, "note", json_string(m->out->note));
	return o;
}

/* The noise gate's wording (PROTO: stats.cv_cap), from the judge's statistics. */
struct noise_ctx {
	struct measure *m;
	const struct job_result *j1, *j2;
};

static void noise_words(void *vctx, const struct atb_paired_result *res, char *why, size_t size,
			json_t **detail)
{
	struct noise_ctx *c = vctx;
	struct measure *m = c->m;
	struct atb_measure_outcome *out = m->out;

	snprintf(why, size,
		 "cross-run cv %.4f is over the cap %.3g after %d runs "
		 "(per-seed ratios %.4f; per-seed medians: baseline %.4f, "
		 "candidate %.4f; medians baseline %.0f ns, candidate %.0f ns; "
		 "per-seed speedups %.3g to %.3g)",
		 res->cv, res->cv_cap, out->attempts, res->cv_ratio, res->cv_baseline,
		 res->cv_candidate, out->baseline_median_ns, out->candidate_median_ns,
		 out->seed_speedup_min, out->seed_speedup_max);
	*detail = json_pack("{s:f, s:f, s:f, s:f, s:f, s:i, s:o}", "cv", res->cv, "cv_cap",
			    res->cv_cap, "cv_ratio", res->cv_ratio, "cv_baseline", res->cv_baseline,
			    "cv_candidate", res->cv_candidate, "attempts", out->attempts,
			    "per_seed_medians_ns", per_seed_json(m, c->j1, c->j2));
}

/*
 * The raw facts to the judge: every arm's samples per seed (the store has
 * no arm for A_COMPILE); it computes the statistics, applies the noise gate
 * and ingests.  *rerun 1: measure again (nothing stored).
 */
static enum atb_status conclude(struct measure *m, const struct job_result *j1,
				const struct job_result *j2, uint64_t bseed, json_t *stats,
				int *rerun, struct atb_error *err)
{
	struct atb_judge_seed *js = atb_calloc(m->nseeds, sizeof(*js));
	struct atb_judge_facts f;
	struct noise_ctx nc = {m, j1, j2};
	struct atb_judge_noise noise = {noise_words, &nc};
	enum atb_status st;
	size_t a, i;

	if (!js)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot ingest: out of memory");
	for (i = 0; i < m->nseeds; i++) {
		js[i].seed = m->seeds[i];
		for (a = 0; a < A_COMPILE; a++) {
			const struct job_result *r = a == A_ALONE ? j2 : j1;

			if (r->arm[a]) {
				js[i].v[store_arm[a]] = r->arm[a][i].t;
				js[i].n[store_arm[a]] = r->arm[a][i].n;
			}
		}
	}
	memset(&f, 0, sizeof(f));
	f.seeds = js;
	f.nseeds = m->nseeds;
	f.bootstrap_seed = bseed;
	progress(m, "ingest");
	m->judge.attempts = m->out->attempts;
	st = atb_judge_conclude(&m->judge, &f, stats, &noise, rerun, NULL, err);
	atb_free(js);
	return st;
}

/* ---- the pipeline ---- */

/* dir/name into buf; 1 when it does not fit. */
static int path_join(char *buf, size_t size, const char *dir, const char *name)
{
	int n = snprintf(buf, size, "%s/%s", dir, name);

	return n < 0 || (size_t)n >= size;
}

/* The bytes of from into a new file to. */
static enum atb_status copy_file(const char *from, const char *to, struct atb_error *err)
{
	char *data = NULL;
	size_t len = 0;
	enum atb_status st = atbi_read_file(from, &data, &len, err);
	FILE *f;

	if (st)
		return st;
	f = fopen(to, "wb");
	st = f && fwrite(data, 1, len, f) == len ? ATB_OK : ATB_ERR_IO;
	if (f && fclose(f) != 0)
		st = ATB_ERR_IO;
	atb_free(data);
	return st ? atb_error_set(err, st, "cannot write '%s'", to) : ATB_OK;
}

static enum atb_status copy_surface(struct measure *m, const char *cand, const char *src,
				    struct atb_error *err)
{
	char from[4200], to[4200];
	size_t i;

	if (mkdir(src, 0700) != 0)
		return atb_error_set(err, ATB_ERR_IO, "cannot create '%s': %s", src, strerror(errno));
	for (i = 0; i < m->task->nsurface; i++) {
		enum atb_status st;

		if (path_join(from, sizeof(from), cand, m->task->surface[i]) ||
		    path_join(to, sizeof(to), src, m->task->surface[i]))
			return atb_error_set(err, ATB_ERR_USAGE, "candidate path '%.200s' is too long",
					     cand);
		if (access(from, F_OK) != 0)
			continue;
		st = copy_file(from, to, err);
		if (st)
			return st;
	}
	return ATB_OK;
}

static json_t *log_tail(const char *log)
{
	size_t n = log ? strlen(log) : 0;

	return json_string(n > 2000 ? log + n - 2000 : log ? log : "");
}

static enum atb_status build_one(struct measure *m, const char *what, const char *src,
				 const struct atb_knob_assignment *knobs, const char *so,
				 int *refused, struct atb_error *err)
{
	struct atb_error be;
	char *log = NULL, reason[1024];
	enum atb_status st;

	*refused = 0;
	atb_error_clear(&be);
	st = atb_task_build(m->task, src, knobs, m->p, so, &log, &be);
	if (st == ATB_OK) {
		atb_free(log);
		return ATB_OK;
	}
	if (st == ATB_ERR_NOMEM) {
		atb_free(log);
		*err = be;
		return st;
	}
	*refused = 1;
	snprintf(reason, sizeof(reason), "%s%s does not build: %.900s",
		 strcmp(what, "candidate") ? "the task's " : "the ", what, be.msg);
	st = reject(m, ATB_GATE_BUILD, st == ATB_ERR_BUILD ? ATB_ERR_BUILD : st, reason,
		    json_pack("{s:s, s:s, s:o}", "arm", what, "source", src, "compiler_log_tail",
			      log_tail(log)),
		    err);
	atb_free(log);
	return st;
}

static double median_of_medians(const double *v, size_t n)
{
	return v ? atbi_median_of(v, n) : 0;
}

/*
 * The candidate against torch.compile of the reference (kind torch,
 * opts.with_compile): per-seed ratios compiled / candidate from the paired
 * runner's samples, the same statistics as the honest baseline's.  Absent,
 * with out->compile_why, when the runner did not time it (it did not
 * compile, or differs from eager: its "compile" event says which).  Never
 * a refusal: only memory is an error.
 */
static enum atb_status compile_speedup(struct measure *m, const struct job_result *j1,
				       uint64_t bseed, struct atb_paired_result *cres, int *have,
				       struct atb_error *err)
{
	struct atb_measure_outcome *o = m->out;
	const json_t *ev = j1->compile_event;
	enum atb_status st;

	*have = 0;
	o->compile_s = (double)json_integer_value(json_object_get(ev, "compile_ns")) / 1e9;
	if (!ev) {
		snprintf(o->compile_why, sizeof(o->compile_why),
			 "the runner sent no compile event (torch.compile was not tried)");
		return ATB_OK;
	}
	if (!json_is_true(json_object_get(ev, "ok")) || !j1->median[A_COMPILE]) {
		const char *why = json_string_value(json_object_get(ev, "why"));

		snprintf(o->compile_why, sizeof(o->compile_why), "%s",
			 why && *why ? why : "the runner did not time the compiled reference");
		if (!o->note[0])
			snprintf(o->note, sizeof(o->note), "no speedup vs torch.compile: %.480s",
				 o->compile_why);
		return ATB_OK;
	}
	st = paired(m, j1->arm[A_COMPILE], j1->arm[A_CAND], bseed, cres, err);
	if (st == ATB_ERR_USAGE) {
		snprintf(o->compile_why, sizeof(o->compile_why), "no statistics: %.480s", err->msg);
		atb_error_clear(err);
		return ATB_OK;
	}
	if (st)
		return st;
	*have = 1;
	o->compile_measured = 1;
	o->compile_speedup = cres->geomean_ratio;
	o->compile_ci_low = cres->ci_lo;
	o->compile_ci_high = cres->ci_hi;
	o->compile_median_ns = median_of_medians(j1->median[A_COMPILE], m->nseeds);
	return ATB_OK;
}

/*
 * Kind torch: where the paired runner made its inputs (its env event), and
 * a compile note when the compiled reference was asked for and is absent.
 */
static void torch_facts(struct measure *m, const struct job_result *j1)
{
	const json_t *t = json_object_get(j1->env, "torch");
	const char *on = json_string_value(json_object_get(t, "inputs_on"));
	const char *why = json_string_value(json_object_get(t, "inputs_why"));
	struct atb_measure_outcome *o = m->out;

	if (!m->torch)
		return;
	snprintf(o->inputs_on, sizeof(o->inputs_on), "%s", on ? on : "");
	snprintf(o->inputs_why, sizeof(o->inputs_why), "%s", why ? why : "");
	if (!m->with_compile)
		return;
	if (!(o->compile_s > 0))  /* its compilation happened, whatever came after */
		o->compile_s = (double)json_integer_value(json_object_get(j1->compile_event,
									  "compile_ns")) / 1e9;
	if (o->compile_measured || o->compile_why[0])
		return;
	/* a compile that failed says so whatever the verdict (a noise refusal
	   must not hide that torch.compile broke on the task) */
	if (j1->compile_event && !json_is_true(json_object_get(j1->compile_event, "ok"))) {
		const char *cwhy = json_string_value(json_object_get(j1->compile_event, "why"));

		if (cwhy && *cwhy) {
			snprintf(o->compile_why, sizeof(o->compile_why), "%s", cwhy);
			return;
		}
	}
	if (o->verdict == ATB_MEASURE_REJECTED && o->gate[0])
		snprintf(o->compile_why, sizeof(o->compile_why),
			 "not compared: the candidate was rejected at gate '%s'", o->gate);
	else
		snprintf(o->compile_why, sizeof(o->compile_why),
			 "the measurement ended before the compiled reference was compared");
}

enum atb_status atb_measure_candidate(struct atb_store *store, const struct atb_protocol *p,
				      const struct atb_task *task, const char *candidate_dir,
				      const struct atb_knob_assignment *knobs,
				      const struct atb_measure_opts *opts,
				      struct atb_measure_outcome *out, struct atb_error *err)
{
	struct measure M, *m = &M;
	struct atb_box *probed = NULL;
	struct job_result j1, j2;
	struct atb_paired_result res, nres, cres;
	struct atb_floor_caps caps;
	struct atb_task_instance t0;
	char why[1024], src[4200], csrc[4400], rerun[512] = "";
	enum atb_status st;
	int refused = 0, have_nres = 0, have_cres = 0;
	int64_t t_start, t_build = 0;
	uint64_t bseed;
	size_t i;

	memset(m, 0, sizeof(*m));
	memset(&j1, 0, sizeof(j1));
	memset(&j2, 0, sizeof(j2));
	memset(&res, 0, sizeof(res));
	memset(&nres, 0, sizeof(nres));
	memset(&cres, 0, sizeof(cres));
	if (!out)
		return atb_error_set(err, ATB_ERR_USAGE, "measure needs an outcome");
	memset(out, 0, sizeof(*out));
	out->verdict = ATB_MEASURE_REJECTED;
	if (!store || !p || !task || !candidate_dir || !opts || !opts->work_dir)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "measure needs a store, protocol, task, candidate and work_dir");
	atb_alloc_install_json();
	m->store = store;
	m->p = p;
	m->task = task;
	m->out = out;
	m->cuda = task->kind && !strcmp(task->kind, "cuda");
	m->torch = task->kind && !strcmp(task->kind, ATB_TASK_KIND_TORCH);
	/* a bad override is refused before anything is built or measured */
	st = decide_isolation(m, err);
	if (st)
		return st;
	if (m->torch)
		out->output_bytes = -1;   /* unknown until the alone runner says */
	m->o = opts;
	m->nseeds = opts->nseeds ? opts->nseeds : (size_t)p->stats.min_paired_seeds;
	if (m->nseeds < 2 || m->nseeds > ATB_RUNNER_MAX_SEEDS || opts->seed_base >= SEED_MAX ||
	    m->nseeds > SEED_MAX - opts->seed_base)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "seeds must be 2 to %d, below 2^62 (got %zu from %" PRIu64 ")",
				     ATB_RUNNER_MAX_SEEDS, m->nseeds, opts->seed_base);
	out->nseeds = m->nseeds;
	if (knobs)
		m->knobs = *knobs;
	else
		atb_task_default_knobs(task, &m->knobs);
	st = atb_task_check_knobs(task, &m->knobs, err);
	if (st)
		return st;
	/*
	 * The trusted files of the home (headers, bundled tasks, python, the
	 * lock) against the manifest, before anything runs or is stored: a
	 * candidate that wrote into the home (issue 11: an append to
	 * include/atb/kernel.h slowed every later baseline) leaves a home that
	 * measures nothing until a maintainer restores it.
	 */
	st = atb_protocol_manifest_verify(opts->home ? opts->home : atb_home(), NULL, err);
	if (st)
		return st;
	atb_task_format_knobs(&m->knobs, m->knobs_text, sizeof(m->knobs_text));
	if (opts->candidate_label)
		snprintf(m->candidate_label, sizeof(m->candidate_label), "%s", opts->candidate_label);
	else {
		char tmp[4096];

		snprintf(tmp, sizeof(tmp), "%s", candidate_dir);
		snprintf(m->candidate_label, sizeof(m->candidate_label), "%.500s %.511s",
			 basename(tmp), m->knobs_text);
	}
	m->with_naive = opts->with_naive && task->has_naive;
	m->with_compile = opts->with_compile && m->torch;
	m->compile_mode = opts->compile_mode ? opts->compile_mode : "default";
	if (m->with_compile)
		snprintf(out->compile_mode, sizeof(out->compile_mode), "%s", m->compile_mode);
	if (opts->runner_path)
		snprintf(m->runner, sizeof(m->runner), "%s", opts->runner_path);
	else if ((st = atb_runner_find(m->runner, sizeof(m->runner), err)))
		return st;
	{
		char id[33];

		if (atbi_random_id(id))
			return atb_error_set(err, ATB_ERR_SYSTEM, "cannot draw a job id");
		snprintf(out->job_uuid, sizeof(out->job_uuid), "%s", id);
	}

	/* the box: identity for the store, largest cache for the flush */
	m->box = opts->box;
	if (!m->box) {
		st = atb_box_probe_with_compiler(&probed, p->build.cpu_compiler, err);
		if (st)
			return st;
		m->box = probed;
	}
	/* the judge: every refusal, the statistics and the ingest from here on */
	m->judge.store = store;
	m->judge.p = p;
	m->judge.out = out;
	m->judge.producer = ATB_JUDGE_KERNEL;
	m->judge.kind = "kernel";
	m->judge.task = task->name;
	m->judge.candidate = m->candidate_label;
	m->judge.unit = "ns";
	m->judge.metric = "time_ns/median";
	m->judge.higher_is_better = 0;
	st = atb_judge_init(&m->judge, err);
	if (!st)
		st = atb_judge_register_box(&m->judge, m->box, NULL, err);
	if (st)
		goto done;
	_Static_assert(sizeof(m->fingerprint) == sizeof(m->judge.fingerprint),
		       "the box fingerprint is copied whole");
	memcpy(m->fingerprint, m->judge.fingerprint, sizeof(m->fingerprint));
	m->fingerprint[sizeof(m->fingerprint) - 1] = '\0';

	m->seeds = atb_calloc(m->nseeds, sizeof(*m->seeds));
	if (!m->seeds) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot measure: out of memory");
		goto done;
	}
	for (i = 0; i < m->nseeds; i++)
		m->seeds[i] = opts->seed_base + i;
	if (path_join(m->dir, sizeof(m->dir), opts->work_dir, out->job_uuid) ||
	    path_join(m->so[3], sizeof(m->so[3]), m->dir, "baseline-twin.so") ||
	    path_join(m->so[0], sizeof(m->so[0]), m->dir, "baseline.so") ||
	    path_join(m->so[1], sizeof(m->so[1]), m->dir, "candidate.so") ||
	    path_join(m->so[2], sizeof(m->so[2]), m->dir, "naive.so") ||
	    path_join(src, sizeof(src), m->dir, "src") ||
	    path_join(csrc, sizeof(csrc), src, task->surface[0])) {
		st = atb_error_set(err, ATB_ERR_USAGE, "work folder path '%.200s' is too long",
				   opts->work_dir);
		goto done;
	}
	if (mkdir(m->dir, 0700) != 0) {
		st = atb_error_set(err, ATB_ERR_IO, "cannot create '%s': %s", m->dir, strerror(errno));
		goto done;
	}
	t_start = atbi_monotonic_ns();

	/* 1. the surface gate: only the task's surface files, regular, no links */
	progress(m, "surface");
	st = atbi_gate_surface_folder(task, candidate_dir, why, sizeof(why));
	if (st) {
		st = reject(m, ATB_GATE_SURFACE, st == ATB_ERR_IO ? ATB_ERR_IO : ATB_ERR_CHECK, why,
			    json_pack("{s:s}", "candidate_dir", candidate_dir), err);
		goto done;
	}
	st = copy_surface(m, candidate_dir, src, err);
	if (st)
		goto done;
	/* PROTO: gates static -- the bytes the runner will import, read before it does */
	if (m->torch) {
		char shown[1200];

		if (opts->candidate_file)
			snprintf(shown, sizeof(shown), "%.1000s", opts->candidate_file);
		else
			snprintf(shown, sizeof(shown), "%.500s/%.500s", candidate_dir,
				 task->surface[0]);
		st = static_gate(m, csrc, shown, &refused, err);
		if (st || refused)
			goto done;
	}

	/* 2. builds: honest baseline, naive, candidate (with its knobs) */
	progress(m, "build");
	if (m->torch) {
		/* Nothing to build: the runner imports the task and the copied candidate. */
		snprintf(m->so[0], sizeof(m->so[0]), "%s", task->baseline.path);
		snprintf(m->so[1], sizeof(m->so[1]), "%.*s", (int)sizeof(m->so[1]) - 1, csrc);
		/* the alone runner's twin: the task file itself in the candidate's
		   slot (the runner builds Model from it), so the alone runner
		   builds and times two models in the same rounds as the paired one */
		snprintf(m->so[3], sizeof(m->so[3]), "%s", task->baseline.path);
		m->twin = 1;
		refused = 0;
		st = ATB_OK;
	} else {
		st = build_one(m, "honest baseline", task->baseline.path, NULL, m->so[0], &refused,
			       err);
		if (!st && !refused && m->with_naive)
			st = build_one(m, "naive baseline", task->naive.path, NULL, m->so[2],
				       &refused, err);
		if (!st && !refused)
			st = build_one(m, "candidate", csrc, &m->knobs, m->so[1], &refused, err);
		if (!st && !refused)
			st = copy_file(m->so[0], m->so[3], err);
		m->twin = !st;
	}
	t_build = atbi_monotonic_ns();
	out->build_s = (double)(t_build - t_start) / 1e9;
	if (st || refused)
		goto done;
	{
		json_t *flags = json_array();

		for (i = 0; flags && i < (m->cuda ? p->build.ncuda_flags : p->build.ncpu_flags); i++)
			json_array_append_new(flags, json_string(m->cuda ? p->build.cuda_flags[i]
								       : p->build.cpu_flags[i]));
		m->build_info = json_pack("{s:s, s:o, s:s, s:s, s:f, s:s, s:s}", "compiler",
					  m->cuda ? p->build.cuda_compiler : p->build.cpu_compiler,
					  "flags", flags ? flags : json_null(),
					  "knobs", m->knobs_text, "cflags", m->knobs.cflags, "build_s",
					  out->build_s, "baseline_source", task->baseline.file,
					  "candidate_source", task->surface[0]);
	}
	st = hash_roots(m, &m->before, err);
	if (st)
		goto done;

	/* the physical floor of one call of the timing set */
	st = atb_task_instantiate(task, 0, &t0, err);
	memset(&caps, 0, sizeof(caps));
	if (!st && !m->torch)  /* kind torch: no bytes or flops are declared, floor unknown */
		st = floor_caps(m, &caps, err);
	if (st)
		goto done;
	out->floor_ns = m->torch ? 0 : atb_floor_ns(&caps, t0.floor_bytes, t0.floor_flops);

	out->cv_cap = p->stats.cv_cap;
	out->drift_tolerance = p->gates.drift_tolerance;
	for (out->attempts = 1;; out->attempts++) {
		int arms[3] = {A_BASE, A_CAND, A_NAIVE};
		const char *gate, *reason;
		const json_t *ev;
		long bad;
		double minc;

		m->slots_done = 0;
		m->nslots = 0;
		m->judge.attempts = out->attempts;
		if (out->attempts > 1 && rerun[0])
			progress_rerun(m, rerun);
		rerun[0] = '\0';

		job_result_release(&j1);
		job_result_release(&j2);
		atb_stats_paired_release(&res);
		st = run_interleaved(m, arms, m->with_naive ? 3 : 2, &j1, &j2, &refused, err);
		if (st || refused)
			goto done;
		gate = atbi_gate_correctness_verdict(&j1.corr, &reason, &ev);
		if (j1.corr.naive_wrong && !out->note[0])
			snprintf(out->note, sizeof(out->note), "%s", j1.corr.naive_reason);
		if (gate) {
			st = reject(m, gate, ATB_ERR_CHECK, reason,
				    json_pack("{s:O?, s:I, s:I}", "event", (json_t *)ev,
					      "candidate_failures", (json_int_t)j1.corr.failures,
					      "candidate_checks", (json_int_t)j1.corr.candidate_events),
				    err);
			goto done;
		}
		if (j1.corr.naive_wrong && m->with_naive) {
			/* a task bug: measure without the naive arm, do not blame the candidate */
			m->with_naive = 0;
			atbi_hash_release(&m->before);
			st = hash_roots(m, &m->before, err);
			if (st)
				goto done;
			out->attempts--;
			continue;
		}
		{
			const char *timing = json_string_value(json_object_get(j1.done, "timing"));
			int mr = medians(m, &j1, why, sizeof(why));

			if (mr < 0) {
				st = atb_error_set(err, ATB_ERR_NOMEM, "cannot measure: out of memory");
				goto done;
			}
			if (mr > 0 || !timing || strcmp(timing, "done")) {
				if (!mr)
					snprintf(why, sizeof(why), "the runner did not time the job ('%s')",
						 timing ? timing : "?");
				st = reject(m, ATB_GATE_RUNNER, ATB_ERR_CHECK, why, NULL, err);
				goto done;
			}
		}
		/* PROTO: gates side_stream -- work escaping the timed window (cuda) */
		if (j1.side_event) {
			atbi_gate_side_stream(j1.side_event, p, why, sizeof(why));
			st = reject(m, ATB_GATE_SIDE_STREAM, ATB_ERR_CHECK, why,
				    json_pack("{s:O, s:O?}", "event", j1.side_event,
					      "side_stream_escapes",
					      json_object_get(j1.done, "side_stream_escapes")),
				    err);
			goto done;
		}
		/* throttled samples: re-run within bounds, then refuse as noise */
		if (p->gates.has_clocks) {
			/* PROTO: gates.clocks -- the clocks themselves, not NVML's reasons
			 * (the throttled share is kept for the record) */
			struct atbi_clocks_facts cf;
			int over = clocks_rule(m, &j1, 1, &cf);
			double share;

			atbi_gate_throttle(j1.throttled_trials, j1.trials, 1, &share);
			if (share > out->throttled_share)
				out->throttled_share = share;
			if (over && atb_judge_rerun(&m->judge)) {
				if (over == 1)
					snprintf(rerun, sizeof(rerun), "the SM clock was below %u MHz "
						 "in %.1f%% of the timed trials (at most %.0f%%)",
						 cf.floor_mhz, 100 * cf.share_below,
						 100 * p->gates.clocks_max_share_below);
				else
					snprintf(rerun, sizeof(rerun), "the arms ran at SM clocks "
						 "%.1f%% apart (at most %.1f%%)",
						 100 * cf.rel_difference,
						 100 * p->gates.clocks_max_arm_rel_difference);
				continue;
			}
			if (over) {
				st = reject_clocks(m, "job 1", over, &cf, err);
				goto done;
			}
		} else {
			double share;
			int over = atbi_gate_throttle(j1.throttled_trials, j1.trials,
						      atbi_throttle_max_share(m->p), &share);

			if (share > out->throttled_share)
				out->throttled_share = share;
			if (over && atb_judge_rerun(&m->judge)) {
				snprintf(rerun, sizeof(rerun), "%.1f%% of the timed trials were "
					 "throttled (at most %.0f%%)", 100 * share,
					 100 * atbi_throttle_max_share(m->p));
				continue;
			}
			if (over) {
				st = reject_throttled(m, "job 1", &j1, share, err);
				goto done;
			}
		}
		/* PROTO: timing.round_trip.max_share_under -- re-run within bounds,
		   then refuse as noise (before the floor: a time the subtraction
		   left at 1 ns is not resolved, not impossible) */
		if (rt_unresolved(m, &j1) && !j1.timed_event) {
			/* (a candidate whose timed calls failed their checks is
			   left to gate timed_correctness: its refusal is the cheat's) */
			if (atb_judge_rerun(&m->judge)) {
				rt_unresolved_words(m, &j1, rerun, sizeof(rerun));
				continue;
			}
			st = reject_unresolved(m, "job 1", &j1, err);
			goto done;
		}
		out->candidate_median_ns = median_of_medians(j1.median[A_CAND], m->nseeds);
		out->baseline_median_ns = median_of_medians(j1.median[A_BASE], m->nseeds);
		out->naive_median_ns = m->with_naive ? median_of_medians(j1.median[A_NAIVE], m->nseeds)
						     : 0;
		seed_range(j1.median[A_BASE], j1.median[A_CAND], m->nseeds, &out->seed_speedup_min,
			   &out->seed_speedup_max);
		if (m->torch && (st = torch_floor(m, &j2, &caps, &t0, err)))
			goto done;

		/* 7. the physical floor (PROTO: gates.physical_floor.margin) */
		bad = atbi_gate_floor(j1.median[A_CAND], m->nseeds, out->floor_ns,
				      p->gates.floor_margin);
		if (bad >= 0 && !m->cuda && !m->floor_gpu && !out->floor_remeasured) {
			/* cached caps may be from a busy box: measure again, judge again */
			st = floor_remeasure(m, &caps, &t0, err);
			if (st)
				goto done;
			bad = atbi_gate_floor(j1.median[A_CAND], m->nseeds, out->floor_ns,
					      p->gates.floor_margin);
		}
		minc = j1.median[A_CAND][0];
		for (i = 1; i < m->nseeds; i++)
			minc = fmin(minc, j1.median[A_CAND][i]);
		if (bad >= 0) {
			snprintf(why, sizeof(why),
				 "the candidate's median on seed %" PRIu64 " is %.0f ns, below %.2f x the "
				 "physical floor %.0f ns (%" PRId64 " bytes at %.3g B/s, %" PRId64
				 " flops at %.3g flop/s): impossible",
				 m->seeds[bad], j1.median[A_CAND][bad], p->gates.floor_margin,
				 out->floor_ns, t0.floor_bytes, caps.mem_bw_bytes_per_s,
				 t0.floor_flops, caps.peak_flops_per_s);
			if (m->torch) {
				size_t n = strlen(why);

				snprintf(why + n, sizeof(why) - n,
					 " (the reference's outputs are %" PRId64 " bytes; the first %"
					 PRId64 " may stay in the caches; a candidate that returns "
					 "them without writing them, cached or precomputed, is this fast)",
					 out->output_bytes, out->floor_allowance_bytes);
			}
			if (out->floor_remeasured) {
				size_t n = strlen(why);

				snprintf(why + n, sizeof(why) - n,
					 " (floor re-measured: %.0f ns from the cached caps, %.0f ns "
					 "after%s%s)",
					 out->floor_cached_ns, out->floor_ns, m->floor_why[0] ? "; " : "",
					 m->floor_why);
			}
			st = reject(m, ATB_GATE_PHYSICAL_FLOOR, ATB_ERR_CHECK, why,
				    json_pack("{s:f, s:f, s:f, s:I, s:I, s:f, s:f, s:I, s:b, s:f, s:s}",
					      "floor_ns", out->floor_ns, "margin",
					      p->gates.floor_margin, "candidate_median_ns",
					      j1.median[A_CAND][bad], "bytes",
					      (json_int_t)t0.floor_bytes, "flops",
					      (json_int_t)t0.floor_flops, "mem_bw_bytes_per_s",
					      caps.mem_bw_bytes_per_s, "peak_flops_per_s",
					      caps.peak_flops_per_s, "seed", (json_int_t)m->seeds[bad],
					      "floor_remeasured", out->floor_remeasured,
					      "floor_cached_ns", out->floor_cached_ns, "floor_method",
					      m->floor_why[0] ? m->floor_why : caps.method),
				    err);
			goto done;
		}

		/* PROTO: gates.timed_correctness -- outputs compared after timed calls */
		if (j1.timed_event) {
			const json_t *tc = json_object_get(j1.timed_event, "timed_checks");

			atbi_gate_timed_checks(j1.timed_event, why, sizeof(why));
			st = reject(m, ATB_GATE_TIMED_CORRECTNESS, ATB_ERR_CHECK, why,
				    json_pack("{s:O, s:O?, s:O?, s:I}", "timed_checks", tc, "seed",
					      json_object_get(j1.timed_event, "seed"), "rounds",
					      json_object_get(j1.timed_event, "rounds"),
					      "candidate_rounds_checked", (json_int_t)j1.timed_rounds),
				    err);
			goto done;
		}

		/* 5. job 2: the baseline alone, one fresh runner per seed beside job 1's */
		{
			int mr;

			mr = medians(m, &j2, why, sizeof(why));
			if (mr) {
				st = mr < 0 ? atb_error_set(err, ATB_ERR_NOMEM, "out of memory")
					    : reject(m, ATB_GATE_RUNNER, ATB_ERR_CHECK, why, NULL, err);
				goto done;
			}
			out->baseline_alone_median_ns = median_of_medians(j2.median[A_ALONE],
									   m->nseeds);
			if (rt_unresolved(m, &j2)) {
				/* re-run within bounds as job 1 is (job 2 runs in every attempt) */
				if (atb_judge_rerun(&m->judge)) {
					rt_unresolved_words(m, &j2, rerun, sizeof(rerun));
					continue;
				}
				st = reject_unresolved(m, "job 2, baseline alone", &j2, err);
				goto done;
			}
			if (p->gates.has_clocks) {
				struct atbi_clocks_facts cf;
				int over = clocks_rule(m, &j2, 0, &cf);

				if (over == 1) {
					st = reject_clocks(m, "job 2, baseline alone", over, &cf,
							   err);
					goto done;
				}
			} else {
				double share;

				if (atbi_gate_throttle(j2.throttled_trials, j2.trials,
						       atbi_throttle_max_share(m->p), &share)) {
					st = reject_throttled(m, "job 2, baseline alone", &j2, share,
							      err);
					goto done;
				}
			}
		}

		/* 6. statistics: honest baseline vs candidate (the judge's) */
		bseed = atb_judge_bootstrap_seed(opts->seed_base, m->nseeds);
		st = paired(m, j1.arm[A_BASE], j1.arm[A_CAND], bseed, &res, err);
		if (st == ATB_ERR_USAGE) {
			st = reject(m, ATB_GATE_RUNNER, ATB_ERR_CHECK, err->msg, NULL, err);
			goto done;
		}
		if (st)
			goto done;
		out->cv = res.cv;
		m->judge.attempts = out->attempts;
		{
			/* PROTO: gates.baseline_drift.tolerance, judged per seed (run_interleaved) */
			int consistent, again = 0;
			int drift_ok = atbi_gate_drift_paired(j1.median[A_BASE], j2.median[A_ALONE],
							      m->nseeds, p->gates.drift_tolerance,
							      &out->drift_ratio, &m->drift_spread,
							      &consistent);

			out->drift_spread = m->drift_spread;
			seed_range(j1.median[A_BASE], j2.median[A_ALONE], m->nseeds, &out->drift_min,
				   &out->drift_max);
			/* PROTO: gates.rerun.max_runs: re-run a drifting measurement, within
			   bounds (a drift cheat drifts on every attempt); the cv is the
			   judge's to re-run (atb_judge_conclude) */
			if (!drift_ok && atb_judge_rerun(&m->judge)) {
				if (!res.cv_within_cap)
					snprintf(rerun, sizeof(rerun), "the cross-run cv %.4f is over "
						 "the cap %.3g (per-seed speedups %.3g to %.3g)",
						 res.cv, res.cv_cap, out->seed_speedup_min,
						 out->seed_speedup_max);
				else
					snprintf(rerun, sizeof(rerun), "the baseline drift %.4f "
						 "(beside / alone) is outside 1 +/- %.3g (per seed "
						 "%.3g to %.3g)", out->drift_ratio,
						 p->gates.drift_tolerance, out->drift_min,
						 out->drift_max);
				continue;
			}
			/* PROTO: gates.baseline_drift.tolerance -- a drift the box's
			   load explains (the harness saw the runners' timing threads off
			   the CPU that much more in one than the other) is the box's,
			   not the candidate's: refused as noise, naming both shares.
			   The cpu backend only: on a GPU the thread waits for the device. */
			if (!drift_ok && consistent && !m->cuda && !m->torch &&
			    atbi_drift_is_load(out->drift_ratio, load_share(&j1.clock),
					       load_share(&j2.clock))) {
				snprintf(why, sizeof(why),
					 "the baseline beside the candidate took %.4gx its time alone "
					 "(median of per-seed ratios; medians %.0f ns vs %.0f ns), "
					 "outside 1 +/- %.3g after %d runs, and the box's load changed "
					 "between the runners: the harness saw the timing thread off the "
					 "CPU for %.1f%% of the paired runner's timed groups and %.1f%% "
					 "of the alone runner's (which moves the ratio to about %.4g): "
					 "the box is too busy to judge baseline drift",
					 out->drift_ratio, out->baseline_median_ns,
					 out->baseline_alone_median_ns, p->gates.drift_tolerance,
					 out->attempts, 100 * load_share(&j1.clock),
					 100 * load_share(&j2.clock),
					 (1 - load_share(&j2.clock)) / (1 - load_share(&j1.clock)));
				st = reject(m, ATB_GATE_NOISE, ATB_ERR_CHECK, why,
					    json_pack("{s:s, s:o, s:f, s:f, s:f, s:i, s:o}", "cause",
						      "load_shift", "drift_ratio",
						      jreal(out->drift_ratio), "offcpu_share_paired",
						      load_share(&j1.clock), "offcpu_share_alone",
						      load_share(&j2.clock), "tolerance",
						      p->gates.drift_tolerance, "attempts", out->attempts,
						      "per_seed_medians_ns", per_seed_json(m, &j1, &j2)),
					    err);
				goto done;
			}
			if (!drift_ok && consistent) {
				snprintf(why, sizeof(why),
					 "the baseline beside the candidate took %.4gx its time alone "
					 "(median of per-seed ratios; medians %.0f ns vs %.0f ns), "
					 "outside 1 +/- %.3g after %d runs: the candidate changes the "
					 "baseline it is compared with",
					 out->drift_ratio, out->baseline_median_ns,
					 out->baseline_alone_median_ns, p->gates.drift_tolerance,
					 out->attempts);
				st = reject(m, ATB_GATE_BASELINE_DRIFT, ATB_ERR_CHECK, why,
					    json_pack("{s:o, s:f, s:f, s:f, s:o, s:i, s:o}", "ratio",
						      jreal(out->drift_ratio), "tolerance",
						      p->gates.drift_tolerance, "baseline_median_ns",
						      out->baseline_median_ns,
						      "baseline_alone_median_ns",
						      out->baseline_alone_median_ns, "spread",
						      jreal(m->drift_spread), "attempts", out->attempts,
						      "per_seed_medians_ns", per_seed_json(m, &j1, &j2)),
					    err);
				goto done;
			}
			if (!drift_ok) {
				/* some seeds within the band or beyond it on the other side:
				   this box cannot tell drift now */
				snprintf(why, sizeof(why),
					 "the baseline beside the candidate took %.4gx its time alone "
					 "(median of per-seed ratios, %.3g to %.3g; medians %.0f ns vs "
					 "%.0f ns; outside 1 +/- %.3g) but the seeds disagree (cv %.4f) "
					 "after %d runs: the box is too noisy to judge baseline drift",
					 out->drift_ratio, out->drift_min, out->drift_max,
					 out->baseline_median_ns, out->baseline_alone_median_ns,
					 p->gates.drift_tolerance, m->drift_spread, out->attempts);
				st = reject(m, ATB_GATE_NOISE, ATB_ERR_CHECK, why,
					    json_pack("{s:s, s:o, s:o, s:f, s:f, s:i, s:o}", "cause",
						      "drift_spread", "drift_ratio",
						      jreal(out->drift_ratio), "spread",
						      jreal(m->drift_spread), "cv_cap", p->stats.cv_cap,
						      "tolerance", p->gates.drift_tolerance, "attempts",
						      out->attempts, "per_seed_medians_ns",
						      per_seed_json(m, &j1, &j2)),
					    err);
				goto done;
			}
			if (!res.cv_within_cap && atb_judge_rerun(&m->judge))
				snprintf(rerun, sizeof(rerun), "the cross-run cv %.4f is over "
					 "the cap %.3g (per-seed speedups %.3g to %.3g)",
					 res.cv, res.cv_cap, out->seed_speedup_min,
					 out->seed_speedup_max);
			out->mde = res.mde_ratio;
			atb_stats_paired_release(&nres);
			atb_stats_paired_release(&cres);
			have_nres = have_cres = 0;
			if (m->with_naive) {
				/* vs the naive starting point: labelled, beside the honest one */
				st = paired(m, j1.arm[A_NAIVE], j1.arm[A_CAND], bseed, &nres, err);
				if (st && st != ATB_ERR_USAGE)
					goto done;
				if (st)
					atb_error_clear(err);
				have_nres = st == ATB_OK;
				st = ATB_OK;
				if (have_nres) {
					out->naive_speedup = nres.geomean_ratio;
					out->naive_ci_low = nres.ci_lo;
					out->naive_ci_high = nres.ci_hi;
				}
			}
			if (m->with_compile) {
				st = compile_speedup(m, &j1, bseed, &cres, &have_cres, err);
				if (st)
					goto done;
			}
			{
				json_t *stats = stats_json(m, have_nres ? &nres : NULL,
							   have_cres ? &cres : NULL, &caps, &t0,
							   atbi_median_of(j1.median[A_CAND],
									  m->nseeds),
							   &j1, &j2);

				if (!stats) {
					st = atb_error_set(err, ATB_ERR_NOMEM,
							   "cannot measure: out of memory");
					goto done;
				}
				/* the noise gate, its re-runs and the ingest: the judge's */
				st = conclude(m, &j1, &j2, bseed, stats, &again, err);
				json_decref(stats);
				if (st)
					goto done;
				if (again)
					continue;
			}
		}
		break;
	}
	out->nseeds = m->nseeds;
done:
	/* the measurement's wall time, whatever the verdict (bench-loop reads it) */
	if (t_build && out)
		out->run_s = (double)(atbi_monotonic_ns() - t_build) / 1e9;
	atb_stats_paired_release(&res);
	atb_stats_paired_release(&nres);
	atb_stats_paired_release(&cres);
	torch_facts(m, &j1);
	job_result_release(&j1);
	job_result_release(&j2);
	atbi_hash_release(&m->before);
	atb_judge_release(&m->judge);
	json_decref(m->build_info);
	atb_free(m->seeds);
	atb_box_free(probed);
	return st;
}
