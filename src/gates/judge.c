/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The judge (atb/judge.h): statistics from raw samples, the refusals, the
 * re-run bound, the ingest.  measure/, engine/ab.c, suite/ and the CLI's
 * ingest-json call it; none of them calls the store's ingest or reject.
 *
 * Does not: run or time anything, or decide a gate whose facts only the
 * producer has (the runner's events stay with measure/gates.c): those
 * producers word the refusal and the judge records it.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "atb/alloc.h"
#include "atb/box.h"
#include "atb/judge.h"
#include "atb/protocol.h"
#include "atb/stats.h"
#include "atb/store.h"
#include "util.h"
#include "banned.h"

int atb_judge_max_runs(const struct atb_protocol *p)
{
	/* PROTO: gates.rerun.max_runs (version 5 on; before, the default) */
	return p && p->gates.has_rerun && p->gates.rerun_max_runs >= 1 ? p->gates.rerun_max_runs
									: ATB_JUDGE_DEFAULT_MAX_RUNS;
}

uint64_t atb_judge_bootstrap_seed(uint64_t seed_base, size_t nseeds)
{
	/* an LCG step of the seed range: two measurements on other seeds draw
	   other resamples, and the same one draws the same */
	return (seed_base * UINT64_C(6364136223846793005) + nseeds) & (UINT64_MAX >> 1);
}

enum atb_status atb_judge_init(struct atb_judge *j, struct atb_error *err)
{
	j->fingerprint[0] = '\0';
	if (j->attempts < 1)
		j->attempts = 1;
	j->detail = json_object();
	if (!j->detail)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot judge: out of memory");
	return ATB_OK;
}

void atb_judge_release(struct atb_judge *j)
{
	if (!j)
		return;
	json_decref(j->detail);
	j->detail = NULL;
}

enum atb_status atb_judge_register_box(struct atb_judge *j, const struct atb_box *box,
				       const char *fingerprint, struct atb_error *err)
{
	struct atb_box *probed = NULL;
	json_t *desc = NULL;
	char *text = NULL;
	enum atb_status st = ATB_OK;

	if (fingerprint) {
		snprintf(j->fingerprint, sizeof(j->fingerprint), "%s", fingerprint);
		return ATB_OK;
	}
	if (!box) {
		st = atb_box_probe_with_compiler(&probed, j->p->build.cpu_compiler, err);
		box = probed;
	}
	if (!st)
		st = atb_box_fingerprint(box, j->fingerprint, err);
	if (!st)
		st = atb_box_to_json(box, 0, &desc, err);
	if (!st)
		st = atbi_json_canonical(desc, &text, err);
	if (!st)
		st = atb_store_register_box(j->store, j->fingerprint, text, err);
	json_decref(desc);
	atb_free(text);
	atb_box_free(probed);
	return st;
}

enum atb_status atb_judge_refuse_job(struct atb_store *s, const char *job_uuid,
				     const char *protocol_digest, const char *gate,
				     enum atb_status status, const char *reason, json_t *detail,
				     int64_t *rejection_id, struct atb_error *err)
{
	const struct atb_judge_gate *g = atb_judge_gate(gate);
	char rule[64], *text = NULL;
	enum atb_status st;

	if (!g) {
		json_decref(detail);
		return atb_error_set(err, ATB_ERR_USAGE, "no gate '%s' in the judge's table",
				     gate ? gate : "(null)");
	}
	snprintf(rule, sizeof(rule), "gate:%s", g->id);
	if (detail && atbi_json_canonical(detail, &text, err)) {
		json_decref(detail);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot record rejection: out of memory");
	}
	json_decref(detail);
	st = atb_store_reject(s, job_uuid, protocol_digest, rule, status, reason, text,
			      rejection_id, err);
	atb_free(text);
	return st;
}

enum atb_status atb_judge_refuse(struct atb_judge *j, const char *gate, enum atb_status status,
				 const char *reason, json_t *extra, struct atb_error *err)
{
	const struct atb_judge_gate *g = atb_judge_gate(gate);
	json_t *d = json_deep_copy(j->detail);
	enum atb_status st;

	if (!g) {
		json_decref(extra);
		json_decref(d);
		return atb_error_set(err, ATB_ERR_USAGE, "no gate '%s' in the judge's table",
				     gate ? gate : "(null)");
	}
	if (!d) {
		json_decref(extra);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot record rejection: out of memory");
	}
	if (extra)
		json_object_update(d, extra);
	json_decref(extra);
	st = atb_judge_refuse_job(j->store, j->out->job_uuid[0] ? j->out->job_uuid : NULL,
				  j->p->digest, gate, status, reason, d, &j->out->rejection_id, err);
	j->out->verdict = ATB_MEASURE_REJECTED;
	snprintf(j->out->gate, sizeof(j->out->gate), "%s", gate);
	j->out->status = status;
	snprintf(j->out->reason, sizeof(j->out->reason), "%s", reason);
	return st;
}

int atb_judge_rerun(const struct atb_judge *j)
{
	return j->attempts < atb_judge_max_runs(j->p);
}

/* ---- statistics ---- */

enum atb_status atb_judge_stats_of(const struct atb_judge *j, const struct atb_paired_seed *ps,
				   size_t n, uint64_t bootstrap_seed,
				   struct atb_paired_result *res, struct atb_error *err)
{
	struct atb_paired_input in;

	memset(&in, 0, sizeof(in));
	in.seeds = ps;
	in.nseeds = n;
	in.ci_level = j->p->stats.ci_level;                      /* PROTO: stats.ci_level */
	in.bootstrap_resamples = j->p->stats.bootstrap_resamples; /* PROTO: stats.bootstrap_resamples */
	in.significance_alpha = j->p->stats.significance_alpha;  /* PROTO: stats.significance_alpha */
	in.cv_cap = j->p->stats.cv_cap;                          /* PROTO: stats.cv_cap */
	in.resolution_rel = j->p->stats.resolution_rel;          /* PROTO: stats.resolution_rel */
	in.bootstrap_seed = bootstrap_seed;
	in.higher_is_better = j->higher_is_better;
	/* PROTO: stats.cv_of (v2 on: the per-seed ratios; v1: per-arm medians) */
	in.cv_of_ratio = !strcmp(j->p->stats.cv_of, "per_seed_ratio");
	return atb_stats_paired(&in, res, err);
}

enum atb_status atb_judge_stats(const struct atb_judge *j, const struct atb_judge_facts *f,
				struct atb_paired_result *res, struct atb_error *err)
{
	struct atb_paired_seed *ps = atb_calloc(f->nseeds ? f->nseeds : 1, sizeof(*ps));
	enum atb_status st;
	size_t i;

	if (!ps)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot compute statistics: out of memory");
	for (i = 0; i < f->nseeds; i++) {
		ps[i].seed = f->seeds[i].seed;
		ps[i].baseline = f->seeds[i].v[ATB_ARM_BASELINE];
		ps[i].nbaseline = f->seeds[i].n[ATB_ARM_BASELINE];
		ps[i].candidate = f->seeds[i].v[ATB_ARM_CANDIDATE];
		ps[i].ncandidate = f->seeds[i].n[ATB_ARM_CANDIDATE];
	}
	st = atb_judge_stats_of(j, ps, f->nseeds, f->bootstrap_seed, res, err);
	atb_free(ps);
	return st;
}

static json_t *jreal(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

enum atb_status atb_judge_stats_json(const struct atb_judge *j,
				     const struct atb_paired_result *res, json_t *o,
				     struct atb_error *err)
{
	json_t *w = json_object(), *seeds = json_array();
	size_t i;

	if (!w || !seeds) {
		json_decref(w);
		json_decref(seeds);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot judge: out of memory");
	}
	for (i = 0; i < res->nseeds; i++)
		json_array_append_new(seeds, json_integer((json_int_t)res->seeds[i].seed));
	json_object_set_new(w, "n_used", json_integer((json_int_t)res->wilcoxon.n_used));
	json_object_set_new(w, "w_plus", jreal(res->wilcoxon.w_plus));
	json_object_set_new(w, "w_minus", jreal(res->wilcoxon.w_minus));
	json_object_set_new(w, "exact", json_boolean(res->wilcoxon.exact));
	json_object_set_new(w, "min_p_value", jreal(res->wilcoxon.min_p_value));
	json_object_set_new(o, "wilcoxon", w);
	json_object_set_new(o, "p_value", jreal(res->wilcoxon.p_value));
	json_object_set_new(o, "alpha", jreal(res->alpha));
	json_object_set_new(o, "verdict", json_string(atb_stats_verdict_name(res->verdict)));
	json_object_set_new(o, "mde_ratio", jreal(res->mde_ratio));
	json_object_set_new(o, "log_ratio_sd", jreal(res->log_ratio_sd));
	json_object_set_new(o, "cv_baseline", jreal(res->cv_baseline));
	json_object_set_new(o, "cv_candidate", jreal(res->cv_candidate));
	json_object_set_new(o, "cv_ratio", jreal(res->cv_ratio));
	json_object_set_new(o, "cv_of", json_string(j->p->stats.cv_of[0] ? j->p->stats.cv_of
								    : "per_seed_medians"));
	json_object_set_new(o, "cv_cap", jreal(res->cv_cap));
	json_object_set_new(o, "ci_level", jreal(res->ci_level));
	json_object_set_new(o, "bootstrap_resamples", json_integer(res->bootstrap_resamples));
	json_object_set_new(o, "bootstrap_seed", json_integer((json_int_t)res->bootstrap_seed));
	json_object_set_new(o, "bootstrap_within_seed", json_boolean(res->bootstrap_within_seed));
	if (res->resolution_rel > 0) {
		/* PROTO: stats.resolution_rel (v10 on): the interval before it was widened */
		json_object_set_new(o, "resolution_rel", jreal(res->resolution_rel));
		json_object_set_new(o, "bootstrap_interval",
				    json_pack("[f,f]", res->boot_lo, res->boot_hi));
	}
	json_object_set_new(o, "seeds", seeds);
	json_object_set_new(o, "attempts", json_integer(j->attempts));
	return ATB_OK;
}

/* ---- the ingest ---- */

/* Every sample of facts, in seed order then arm then trial. */
static enum atb_status samples_of(const struct atb_judge_facts *f, struct atb_sample **out,
				  size_t *n, struct atb_error *err)
{
	struct atb_sample *s;
	size_t total = 0, k = 0, i, t;
	int a;

	for (i = 0; i < f->nseeds; i++)
		for (a = 0; a < 4; a++)
			total += f->seeds[i].v[a] ? f->seeds[i].n[a] : 0;
	s = atb_calloc(total ? total : 1, sizeof(*s));
	if (!s)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot ingest: out of memory");
	for (a = 0; a < 4; a++)
		for (i = 0; i < f->nseeds; i++)
			for (t = 0; f->seeds[i].v[a] && t < f->seeds[i].n[a]; t++) {
				s[k].seed = (int64_t)f->seeds[i].seed;
				s[k].trial = f->seeds[i].trial[a] ? f->seeds[i].trial[a][t]
								  : f->trial_base + (int32_t)t;
				s[k].arm = (enum atb_arm)a;
				s[k].value = f->seeds[i].v[a][t];
				k++;
			}
	*out = s;
	*n = k;
	return ATB_OK;
}

/* Store in, with the outcome into j->out (a validator refusal is a verdict). */
static enum atb_status ingest(struct atb_judge *j, struct atb_ingest *in,
			      const struct atb_paired_result *res, struct atb_error *err)
{
	struct atb_ingest_outcome io;
	enum atb_status st;

	memset(&io, 0, sizeof(io));
	st = atb_store_ingest(j->store, in, &io, err);
	if (st == ATB_OK) {
		j->out->result_id = io.result_id;
		j->out->verdict = io.quarantined ? ATB_MEASURE_QUARANTINED : ATB_MEASURE_ADMITTED;
		if (io.quarantined)
			snprintf(j->out->reason, sizeof(j->out->reason),
				 "speedup %.3gx is at or over the anomaly factor %.3gx: quarantined "
				 "for review (PROTO: gates.anomaly_breaker.factor)",
				 res->geomean_ratio, j->p->gates.anomaly_factor);
		return ATB_OK;
	}
	if (ATB_PRIMARY(st) == ATB_ERR_REJECTED && io.rejection_id > 0) {
		/* the validator refused and recorded it */
		j->out->verdict = ATB_MEASURE_REJECTED;
		j->out->rejection_id = io.rejection_id;
		j->out->status = st;
		snprintf(j->out->gate, sizeof(j->out->gate), "validator");
		snprintf(j->out->reason, sizeof(j->out->reason), "%.500s", err->msg);
		atb_error_clear(err);
		return ATB_OK;
	}
	return st;
}

enum atb_status atb_judge_conclude(struct atb_judge *j, const struct atb_judge_facts *f,
				   json_t *stats, const struct atb_judge_noise *noise,
				   int *rerun, struct atb_paired_result *res_out,
				   struct atb_error *err)
{
	json_t *noise_detail = NULL;
	struct atb_paired_result r;
	struct atb_seed_result *sr = NULL;
	struct atb_sample *smp = NULL;
	struct atb_ingest in;
	char *stext = NULL;
	size_t nsmp = 0, i;
	enum atb_status st;

	memset(&r, 0, sizeof(r));
	if (rerun)
		*rerun = 0;
	st = atb_judge_stats(j, f, &r, err);
	if (st)
		goto out;
	if (!r.cv_within_cap && noise && rerun && atb_judge_rerun(j)) {
		/* PROTO: stats.cv_cap -- re-run within gates.rerun.max_runs: nothing kept */
		*rerun = 1;
		goto out;
	}
	j->out->nseeds = f->nseeds;
	j->out->speedup = r.geomean_ratio;
	j->out->ci_low = r.ci_lo;
	j->out->ci_high = r.ci_hi;
	j->out->p_value = r.wilcoxon.p_value;
	j->out->cv = r.cv;
	j->out->mde = r.mde_ratio;
	j->out->attempts = j->attempts;
	if (!r.cv_within_cap && noise) {
		/* PROTO: stats.cv_cap -- then refused, with the judge's numbers */
		char reason[1024];

		reason[0] = '\0';
		noise->words(noise->ctx, &r, reason, sizeof(reason), &noise_detail);
		st = atb_judge_refuse(j, ATB_GATE_NOISE, ATB_ERR_CHECK, reason, noise_detail, err);
		noise_detail = NULL;
		goto out;
	}
	if ((st = atb_judge_stats_json(j, &r, stats, err)))
		goto out;
	sr = atb_calloc(f->nseeds ? f->nseeds : 1, sizeof(*sr));
	if (!sr || (st = samples_of(f, &smp, &nsmp, err)) ||
	    (st = atbi_json_canonical(stats, &stext, err))) {
		st = st ? st : atb_error_set(err, ATB_ERR_NOMEM, "cannot ingest: out of memory");
		goto out;
	}
	for (i = 0; i < f->nseeds; i++)
		sr[i] = (struct atb_seed_result){(int64_t)r.seeds[i].seed, r.seeds[i].baseline_median,
						 r.seeds[i].candidate_median, r.seeds[i].ratio};
	memset(&in, 0, sizeof(in));
	in.job_uuid = j->out->job_uuid[0] ? j->out->job_uuid : NULL;  /* NULL: a fresh id */
	in.kind = j->kind;
	in.task = j->task;
	in.candidate = j->candidate;
	in.protocol_digest = j->p->digest;
	in.box_fingerprint = j->fingerprint;
	in.unit = j->unit;
	in.metric = j->metric;
	in.samples = smp;
	in.nsamples = nsmp;
	in.seeds = sr;
	in.nseeds = f->nseeds;
	in.speedup = r.geomean_ratio;
	in.ci_low = r.ci_lo;
	in.ci_high = r.ci_hi;
	in.cv = r.cv;
	in.stats_json = stext;
	st = ingest(j, &in, &r, err);
out:
	json_decref(noise_detail);
	atb_free(sr);
	atb_free(smp);
	atb_free(stext);
	if (res_out && st == ATB_OK)
		*res_out = r;
	else
		atb_stats_paired_release(&r);
	return st;
}

/* ---- atb db ingest-json ---- */

static int differs(double a, double b)
{
	/* as db check: the 17 digits of the canonical form, not bit identity */
	return !(fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)));
}

/* The samples of in grouped by seed, in first-seen order. */
struct grouped {
	struct atb_judge_seed *seeds;
	size_t n;
	double *v;
	int32_t *trial;
};

static enum atb_status group(const struct atb_ingest *in, struct grouped *g,
			     struct atb_error *err)
{
	size_t i, k, *count = NULL, *fill = NULL;
	enum atb_status st = ATB_OK;

	memset(g, 0, sizeof(*g));
	g->seeds = atb_calloc(in->nsamples ? in->nsamples : 1, sizeof(*g->seeds));
	g->v = atb_calloc(in->nsamples ? in->nsamples : 1, sizeof(*g->v));
	g->trial = atb_calloc(in->nsamples ? in->nsamples : 1, sizeof(*g->trial));
	count = atb_calloc(4 * (in->nsamples ? in->nsamples : 1), sizeof(*count));
	fill = atb_calloc(4 * (in->nsamples ? in->nsamples : 1), sizeof(*fill));
	if (!g->seeds || !g->v || !g->trial || !count || !fill) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot judge: out of memory");
		goto out;
	}
	/* seeds in first-seen order, then each (seed, arm)'s span of v */
	for (i = 0; i < in->nsamples; i++) {
		const struct atb_sample *s = &in->samples[i];

		for (k = 0; k < g->n && g->seeds[k].seed != (uint64_t)s->seed; k++)
			;
		if (k == g->n)
			g->seeds[g->n++].seed = (uint64_t)s->seed;
		if ((unsigned)s->arm < 4)
			count[4 * k + s->arm]++;
	}
	{
		size_t off = 0;

		for (k = 0; k < g->n; k++) {
			int a;

			for (a = 0; a < 4; a++) {
				fill[4 * k + a] = off;
				if (count[4 * k + a]) {
					g->seeds[k].v[a] = &g->v[off];
					g->seeds[k].trial[a] = &g->trial[off];
				}
				off += count[4 * k + a];
			}
		}
	}
	for (i = 0; i < in->nsamples; i++) {
		const struct atb_sample *s = &in->samples[i];
		size_t at;

		if ((unsigned)s->arm >= 4)
			continue;
		for (k = 0; g->seeds[k].seed != (uint64_t)s->seed; k++)
			;
		at = fill[4 * k + s->arm]++;
		g->v[at] = s->value;
		g->trial[at] = s->trial;
		g->seeds[k].n[s->arm]++;
	}
out:
	atb_free(count);
	atb_free(fill);
	return st;
}

static void grouped_release(struct grouped *g)
{
	atb_free(g->seeds);
	atb_free(g->v);
	atb_free(g->trial);
	memset(g, 0, sizeof(*g));
}

/* 1 when every claimed seed result agrees with a derived one (same seeds). */
static int seeds_agree(const struct atb_ingest *in, const struct atb_paired_result *r)
{
	size_t i, k;

	if (in->nseeds != r->nseeds)
		return 0;
	for (i = 0; i < in->nseeds; i++) {
		for (k = 0; k < r->nseeds && (int64_t)r->seeds[k].seed != in->seeds[i].seed; k++)
			;
		if (k == r->nseeds || differs(in->seeds[i].baseline_median,
					      r->seeds[k].baseline_median) ||
		    differs(in->seeds[i].candidate_median, r->seeds[k].candidate_median) ||
		    differs(in->seeds[i].ratio, r->seeds[k].ratio))
			return 0;
	}
	return 1;
}

enum atb_status atb_judge_ingest_samples(struct atb_store *s, const struct atb_protocol *p,
					 struct atb_ingest *in, unsigned claimed,
					 struct atb_ingest_outcome *io, struct atb_error *err)
{
	struct atb_measure_outcome out;
	struct atb_judge J;
	struct atb_paired_result r;
	struct atb_seed_result *sr = NULL;
	struct grouped g;
	struct atb_judge_facts f;
	json_t *stats = NULL;
	char *stext = NULL;
	enum atb_status st;
	struct atb_error serr;
	int agree;
	size_t i;

	memset(&r, 0, sizeof(r));
	memset(&g, 0, sizeof(g));
	memset(&out, 0, sizeof(out));
	memset(&J, 0, sizeof(J));
	memset(io, 0, sizeof(*io));
	if (!p)  /* nothing can be derived under a protocol not frozen here: the store refuses */
		return atb_store_ingest(s, in, io, err);
	J.store = s;
	J.p = p;
	J.out = &out;
	J.producer = ATB_JUDGE_INGEST;
	J.higher_is_better = in->kind && !strcmp(in->kind, "engine");
	if ((st = atb_judge_init(&J, err)))
		return st;
	if ((st = group(in, &g, err)))
		goto out;
	stats = in->stats_json ? json_loads(in->stats_json, 0, NULL) : json_object();
	if (!json_is_object(stats)) {
		st = atb_error_set(err, ATB_ERR_USAGE, "stats is not a JSON object");
		goto out;
	}
	memset(&f, 0, sizeof(f));
	f.seeds = g.seeds;
	f.nseeds = g.n;
	f.bootstrap_seed = json_is_integer(json_object_get(stats, "bootstrap_seed"))
				   ? (uint64_t)json_integer_value(json_object_get(stats,
										  "bootstrap_seed"))
				   : atb_judge_bootstrap_seed(g.n ? g.seeds[0].seed : 0, g.n);
	atb_error_clear(&serr);
	if (atb_judge_stats(&J, &f, &r, &serr)) {
		/* not comparable (one arm, a bad value): the store's rules say which */
		st = atb_store_ingest(s, in, io, err);
		goto out;
	}
	agree = (!(claimed & ATB_JUDGE_CLAIM_SEEDS) || seeds_agree(in, &r)) &&
		(!(claimed & ATB_JUDGE_CLAIM_SPEEDUP) || !differs(in->speedup, r.geomean_ratio)) &&
		(!(claimed & ATB_JUDGE_CLAIM_CV) || fabs(in->cv - r.cv) <= 1e-9);
	if (!agree) {
		/* The store re-derives these on insert and names the first that is
		   wrong (store:not_derived); its refusal is the precise one. */
		st = atb_store_ingest(s, in, io, err);
		goto out;
	}
	if ((claimed & ATB_JUDGE_CLAIM_INTERVAL) &&
	    (differs(in->ci_low, r.ci_lo) || differs(in->ci_high, r.ci_hi))) {
		char reason[512];
		json_t *d;

		snprintf(reason, sizeof(reason),
			 "atb-rule:not_derived: the interval [%.17g, %.17g] is not [%.17g, %.17g], "
			 "the bootstrap of its samples (seed %" PRIu64 ", %d resamples)",
			 in->ci_low, in->ci_high, r.ci_lo, r.ci_hi, r.bootstrap_seed,
			 r.bootstrap_resamples);
		d = json_pack("{s:s, s:s, s:s?, s:[f,f], s:[f,f], s:I, s:i}", "task", in->task,
			      "candidate", in->candidate, "box_fingerprint", in->box_fingerprint,
			      "claimed", in->ci_low, in->ci_high, "derived", r.ci_lo, r.ci_hi,
			      "bootstrap_seed", (json_int_t)r.bootstrap_seed, "bootstrap_resamples",
			      r.bootstrap_resamples);
		snprintf(out.job_uuid, sizeof(out.job_uuid), "%s", in->job_uuid ? in->job_uuid : "");
		st = atb_judge_refuse_job(s, in->job_uuid, p->digest, ATB_GATE_DERIVED,
					  ATB_REJECTED_NOT_DERIVED, reason, d, &io->rejection_id,
					  err);
		if (!st) {
			io->audit_seq = 0;
			st = atb_error_set(err, ATB_REJECTED_NOT_DERIVED, "%s", reason);
		}
		goto out;
	}
	/* Absent numbers are the derived ones; the statistics' keys are the judge's. */
	if (!(claimed & ATB_JUDGE_CLAIM_SEEDS)) {
		sr = atb_calloc(r.nseeds ? r.nseeds : 1, sizeof(*sr));
		if (!sr) {
			st = atb_error_set(err, ATB_ERR_NOMEM, "cannot ingest: out of memory");
			goto out;
		}
		for (i = 0; i < r.nseeds; i++)
			sr[i] = (struct atb_seed_result){(int64_t)r.seeds[i].seed,
							 r.seeds[i].baseline_median,
							 r.seeds[i].candidate_median, r.seeds[i].ratio};
		in->seeds = sr;
		in->nseeds = r.nseeds;
	}
	in->speedup = r.geomean_ratio;
	in->ci_low = r.ci_lo;
	in->ci_high = r.ci_hi;
	in->cv = r.cv;
	J.attempts = json_is_integer(json_object_get(stats, "attempts"))
			     ? (int)json_integer_value(json_object_get(stats, "attempts"))
			     : 1;
	if ((st = atb_judge_stats_json(&J, &r, stats, err)) ||
	    (st = atbi_json_canonical(stats, &stext, err)))
		goto out;
	in->stats_json = stext;
	st = atb_store_ingest(s, in, io, err);
	in->stats_json = NULL;
	if (sr)
		in->seeds = NULL;  /* freed below; nseeds stays for the caller's summary */
out:
	atb_stats_paired_release(&r);
	grouped_release(&g);
	atb_judge_release(&J);
	json_decref(stats);
	atb_free(stext);
	atb_free(sr);
	return st;
}
