/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Reports of tuning runs (include/atb/report.h): read the run and its
 * iterations back from the store, count usable iterations and gate
 * firings, pick the best, and render text, JSON or CSV.  The honest and
 * naive speedups are always rendered side by side with their labels.
 *
 * Does not: recompute any statistic (the stored numbers are shown), touch
 * candidates, or print.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "atb/atb.h"
#include "atb/engine.h"
#include "atb/loop.h"
#include "atb/report.h"
#include "atb/task.h"
#include "util.h"
#include "banned.h"

/* ---- a growable string with a hard maximum (curl's dynbuf) ---- */

#define SB_MAX_BYTES (64u << 20)

struct sb {
	char *p;
	size_t len, cap;
	int failed;
};

static void sb_printf(struct sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(struct sb *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->failed)
		return;
	for (;;) {
		size_t room = b->cap - b->len;

		va_start(ap, fmt);
		n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->failed = 1;
			return;
		}
		if ((size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		{
			size_t cap = b->cap ? b->cap : 1024;
			char *np;

			while (cap < b->len + (size_t)n + 1)
				cap *= 2;
			if (cap > SB_MAX_BYTES) {
				b->failed = 1;
				return;
			}
			np = atb_realloc(b->p, cap);
			if (!np) {
				b->failed = 1;
				return;
			}
			b->p = np;
			b->cap = cap;
		}
	}
}

static enum atb_status sb_finish(struct sb *b, char **out, const char *what,
				 struct atb_error *err)
{
	*out = NULL;
	if (b->failed || !b->p) {
		atb_free(b->p);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot render the %s: out of memory", what);
	}
	*out = b->p;
	return ATB_OK;
}

/* ---- building ---- */

void atb_report_free(struct atb_report *r)
{
	if (!r)
		return;
	atb_store_iterations_free(r->iters, r->niters);
	atb_free(r->box_json);
	atb_free(r);
}

static void box_summary(struct atb_report *r)
{
	json_t *b, *id;
	json_error_t je;
	const char *cpu, *os;
	json_int_t cores = 0, gib = 0;

	snprintf(r->box_summary, sizeof(r->box_summary), "unknown box");
	atb_alloc_install_json();
	b = json_loads(r->box_json, 0, &je);
	if (!b)
		return;
	id = json_object_get(b, "identity");
	cpu = json_string_value(json_object_get(id, "cpu_model"));
	os = json_string_value(json_object_get(id, "os"));
	cores = json_integer_value(json_object_get(id, "logical_cores"));
	gib = json_integer_value(json_object_get(id, "memory_total_gib"));
	if (cpu || os)
		snprintf(r->box_summary, sizeof(r->box_summary),
			 "%s, %" JSON_INTEGER_FORMAT " cores, %" JSON_INTEGER_FORMAT " GiB, %s",
			 cpu ? cpu : "unknown cpu", cores, gib, os ? os : "unknown os");
	json_decref(b);
}

static void count_firing(struct atb_report *r, const char *outcome)
{
	size_t i;

	for (i = 0; i < r->nfirings; i++)
		if (!strcmp(r->firings[i].outcome, outcome)) {
			r->firings[i].count++;
			return;
		}
	if (r->nfirings < ATB_REPORT_MAX_FIRINGS) {
		snprintf(r->firings[r->nfirings].outcome, sizeof(r->firings[0].outcome), "%s",
			 outcome);
		r->firings[r->nfirings++].count = 1;
	}
}

static int firing_cmp(const void *a, const void *b)
{
	const struct atb_report_firing *x = a, *y = b;

	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	return strcmp(x->outcome, y->outcome);
}

enum atb_status atb_report_build(struct atb_store *s, const char *run_id, const char *home,
				 struct atb_report **out, struct atb_error *err)
{
	struct atb_report *r;
	struct atb_task *task = NULL;
	struct atb_error terr;
	enum atb_status st;
	char path[4096];
	size_t i;

	*out = NULL;
	r = atb_calloc(1, sizeof(*r));
	if (!r)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot build the report: out of memory");
	r->best = -1;
	st = atb_store_get_run(s, run_id, &r->run, err);
	if (!st)
		st = atb_store_list_iterations(s, r->run.id, &r->iters, &r->niters, err);
	if (st)
		goto fail;
	if (atb_store_protocol_version(s, r->run.protocol_digest, &r->protocol_version, &terr))
		r->protocol_version = 0;
	if (atb_store_get_box(s, r->run.box_fingerprint, &r->box_json, &terr)) {
		r->box_json = atb_strdup("{}");
		if (!r->box_json) {
			st = atb_error_set(err, ATB_ERR_NOMEM, "cannot build the report: out of memory");
			goto fail;
		}
	}
	box_summary(r);

	for (i = 0; i < r->niters; i++) {
		const struct atb_iteration_row *it = &r->iters[i];

		if (it->usable) {
			const struct atb_iteration_row *b = r->best >= 0 ? &r->iters[r->best] : NULL;

			r->usable++;
			/* Keep-best as the loop: CI lower bound, then speedup, then earlier. */
			if (!b || it->ci_low > b->ci_low ||
			    (it->ci_low == b->ci_low && it->speedup > b->speedup))
				r->best = (int64_t)i;
		} else {
			count_firing(r, it->outcome);
		}
	}
	qsort(r->firings, r->nfirings, sizeof(r->firings[0]), firing_cmp);
	r->usable_rate = r->niters ? (double)r->usable / (double)r->niters : 0.0;

	snprintf(r->honest_label, sizeof(r->honest_label), "honest baseline");
	snprintf(r->naive_label, sizeof(r->naive_label), "naive baseline");
	atb_error_clear(&terr);
	if (atb_engine_task_find(home, r->run.task, path, sizeof(path))) {
		r->engine = 1;
		snprintf(r->honest_label, sizeof(r->honest_label),
			 "the engine's default configuration, requests/s");
	} else if (atb_task_open(home ? home : atb_home(), r->run.task, &task, &terr) == ATB_OK) {
		if (task->baseline.label && task->baseline.label[0])
			snprintf(r->honest_label, sizeof(r->honest_label), "%s",
				 task->baseline.label);
		if (task->has_naive && task->naive.label && task->naive.label[0])
			snprintf(r->naive_label, sizeof(r->naive_label), "%s", task->naive.label);
		atb_task_free(task);
	}
	*out = r;
	return ATB_OK;
fail:
	atb_report_free(r);
	return st;
}

/* ---- text ---- */

static void fmt_speedup(char *buf, size_t size, double x, double lo, double hi)
{
	if (x > 0)
		snprintf(buf, size, "%.3gx [%.3g, %.3g]", x, lo, hi);
	else
		snprintf(buf, size, "-");
}

/*
 * A list of strings as "a,b" ("none" when empty): a suite row's
 * "findings" (the static finding kinds, src/suite/suite.c task_row_json).
 */
static const char *fmt_list(char *buf, size_t size, const json_t *a)
{
	const json_t *e;
	size_t i, len = 0;
	int n;

	buf[0] = '\0';
	json_array_foreach(a, i, e) {
		n = snprintf(buf + len, size - len, "%s%s", len ? "," : "",
			     json_is_string(e) ? json_string_value(e) : "?");
		if (n < 0 || (size_t)n >= size - len)
			break;
		len += (size_t)n;
	}
	return len ? buf : "none";
}

/*
 * Knobs JSON {"A":"1","cflags":""} as "A=1" (cflags only when set).  A
 * suite row's knobs are {"task", "candidate", "findings": [...],
 * "measured": {...}}: the findings as a list, "measured" left out (its
 * figures are the row's speedup columns).
 */
static void fmt_knobs(char *buf, size_t size, const char *knobs_json)
{
	json_t *o;
	json_error_t je;
	const char *key;
	json_t *v;
	size_t len = 0;
	char list[160];

	buf[0] = '\0';
	atb_alloc_install_json();
	o = json_loads(knobs_json, 0, &je);
	if (!o) {
		snprintf(buf, size, "%s", knobs_json);
		return;
	}
	json_object_foreach(o, key, v) {
		const char *val = json_string_value(v);
		int n;

		if ((!strcmp(key, "cflags") && (!val || !*val)) || json_is_object(v))
			continue;
		if (json_is_array(v))
			val = fmt_list(list, sizeof(list), v);
		n = snprintf(buf + len, size - len, "%s%s=%s", len ? " " : "", key,
			     val ? val : "?");
		if (n < 0 || (size_t)n >= size - len)
			break;
		len += (size_t)n;
	}
	json_decref(o);
}

enum atb_status atb_report_text(const struct atb_report *r, char **out, struct atb_error *err)
{
	struct sb b = {0};
	char hon[64], nai[64], knobs[512];
	size_t i;

	sb_printf(&b, "run %s: task %s, proposer %s, seed %" PRId64 ", %" PRId64 " of %" PRId64
		  " iterations, %" PRId64 " paired seeds per measurement\n",
		  r->run.id, r->run.task, r->run.proposer, r->run.seed, (int64_t)r->niters,
		  r->run.iterations, r->run.paired_seeds);
	sb_printf(&b, "protocol  v%d %s\n", r->protocol_version, r->run.protocol_digest);
	sb_printf(&b, "box       %.16s (%s)\n", r->run.box_fingerprint, r->box_summary);
	sb_printf(&b, "created   %s\n", r->run.created);
	sb_printf(&b, "honest:   speedup vs the honest baseline '%s' (the claim)\n",
		  r->honest_label);
	if (r->engine)
		sb_printf(&b, "engine:   speedup = candidate requests/s / default requests/s\n");
	if (r->run.naive)
		sb_printf(&b, "naive:    speedup vs the naive baseline '%s' (for reference only)\n",
			  r->naive_label);
	sb_printf(&b, "speedups: geometric mean of per-seed ratios [95%% CI]; > 1 is faster\n\n");

	sb_printf(&b, "%5s  %-22s  %-26s  %-26s  %s\n", "iter", "outcome", "honest", "naive",
		  "knobs");
	for (i = 0; i < r->niters; i++) {
		const struct atb_iteration_row *it = &r->iters[i];

		fmt_speedup(hon, sizeof(hon), it->speedup, it->ci_low, it->ci_high);
		fmt_speedup(nai, sizeof(nai), it->naive_speedup, it->naive_ci_low, it->naive_ci_high);
		fmt_knobs(knobs, sizeof(knobs), it->knobs_json);
		sb_printf(&b, "%5" PRId64 "  %-22s  %-26s  %-26s  %s%s\n", it->k, it->outcome, hon,
			  nai, knobs, (int64_t)i == r->best ? "  <- best" : "");
	}
	sb_printf(&b, "\n");
	if (r->best >= 0) {
		const struct atb_iteration_row *it = &r->iters[r->best];

		fmt_knobs(knobs, sizeof(knobs), it->knobs_json);
		fmt_speedup(hon, sizeof(hon), it->speedup, it->ci_low, it->ci_high);
		sb_printf(&b, "best      iteration %" PRId64 " (%s)\n", it->k, knobs);
		sb_printf(&b, "          %s vs the honest baseline '%s'\n", hon, r->honest_label);
		if (it->naive_speedup > 0) {
			fmt_speedup(nai, sizeof(nai), it->naive_speedup, it->naive_ci_low,
				    it->naive_ci_high);
			sb_printf(&b, "          %s vs the naive baseline '%s'\n", nai,
				  r->naive_label);
		}
	} else {
		sb_printf(&b, "best      none: no usable iteration\n");
	}
	for (i = 0; i < r->niters; i++) {
		const struct atb_iteration_row *it = &r->iters[i];

		if (it->reason && it->reason[0])
			sb_printf(&b, "%s iteration %" PRId64 ", %s: %s\n",
				  it->usable ? "note     " : "why      ", it->k, it->outcome,
				  it->reason);
	}
	sb_printf(&b, "usable    %" PRId64 " of %zu iterations (%.0f%%)\n", r->usable, r->niters,
		  100.0 * r->usable_rate);
	sb_printf(&b, "gates     ");
	if (!r->nfirings)
		sb_printf(&b, "none fired");
	for (i = 0; i < r->nfirings; i++)
		sb_printf(&b, "%s%s %" PRId64, i ? ", " : "", r->firings[i].outcome,
			  r->firings[i].count);
	sb_printf(&b, "\n");
	if (r->niters < (size_t)r->run.iterations && !strcmp(r->run.proposer, ATB_LOOP_PROPOSER_AGENT))
		/* an outside agent's run: nothing to resume, it grows by submissions */
		sb_printf(&b, "status    open: an agent hands in more with 'atb submit TASK CANDIDATE "
			  "--run %s'\n", r->run.id);
	else if (r->niters < (size_t)r->run.iterations)
		sb_printf(&b, "status    incomplete: continue with 'atb run --resume %s'\n", r->run.id);
	return sb_finish(&b, out, "report", err);
}

/* ---- JSON ---- */

static json_t *speedup_json(double x, double lo, double hi, const char *label)
{
	if (!(x > 0))
		return json_null();
	return json_pack("{s:f, s:f, s:f, s:s}", "speedup", x, "ci_low", lo, "ci_high", hi,
			 "label", label);
}

static json_t *iteration_json(const struct atb_report *r, const struct atb_iteration_row *it)
{
	json_t *knobs;
	json_error_t je;

	json_t *o;

	knobs = json_loads(it->knobs_json, 0, &je);
	if (!knobs)
		return NULL;
	o = json_pack("{s:I, s:o, s:s, s:b, s:o, s:o, s:s?, s:I, s:I, s:f, s:s, s:s}",
			 "iteration", (json_int_t)it->k, "knobs", knobs, "outcome", it->outcome,
			 "usable", it->usable, "honest",
			 speedup_json(it->speedup, it->ci_low, it->ci_high, r->honest_label),
			 "naive",
			 speedup_json(it->naive_speedup, it->naive_ci_low, it->naive_ci_high,
				      r->naive_label),
			 "job_uuid", it->job_uuid[0] ? it->job_uuid : NULL, "result_id",
			 (json_int_t)it->result_id, "rejection_id", (json_int_t)it->rejection_id,
			 "wall_s", it->wall_s, "reason", it->reason ? it->reason : "", "created",
			 it->created);
	return o;
}

enum atb_status atb_report_json(const struct atb_report *r, json_t **out, struct atb_error *err)
{
	json_t *o = NULL, *traj, *firings, *box, *x;
	json_error_t je;
	size_t i;

	*out = NULL;
	atb_alloc_install_json();
	traj = json_array();
	firings = json_object();
	box = json_loads(r->box_json, 0, &je);
	if (!traj || !firings || !box)
		goto nomem;
	for (i = 0; i < r->niters; i++) {
		x = iteration_json(r, &r->iters[i]);
		if (!x || json_array_append_new(traj, x))
			goto nomem;
	}
	for (i = 0; i < r->nfirings; i++)
		if (json_object_set_new(firings, r->firings[i].outcome,
					json_integer(r->firings[i].count)))
			goto nomem;
	o = json_pack("{s:{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:b, s:b, s:s},"
		      " s:{s:i, s:s}, s:{s:s, s:s, s:o},"
		      " s:{s:{s:s}, s:{s:s, s:b}},"
		      " s:o, s:{s:I, s:I, s:f}, s:o}",
		      "run", "id", r->run.id, "task", r->run.task, "proposer", r->run.proposer,
		      "seed", (json_int_t)r->run.seed, "iterations", (json_int_t)r->run.iterations,
		      "done", (json_int_t)r->niters, "paired_seeds", (json_int_t)r->run.paired_seeds,
		      "naive", r->run.naive, "complete", r->niters >= (size_t)r->run.iterations,
		      "created", r->run.created,
		      "protocol", "version", r->protocol_version, "digest", r->run.protocol_digest,
		      "box", "fingerprint", r->run.box_fingerprint, "summary", r->box_summary,
		      "description", box,
		      "baselines", "honest", "label", r->honest_label, "naive", "label",
		      r->naive_label, "measured", r->run.naive,
		      "trajectory", traj,
		      "usable", "count", (json_int_t)r->usable, "of", (json_int_t)r->niters, "rate",
		      r->usable_rate,
		      "gate_firings", firings);
	box = traj = firings = NULL;  /* stolen by "o" (or freed on failure) */
	if (!o)
		goto nomem;
	if (r->best >= 0) {
		x = iteration_json(r, &r->iters[r->best]);
		if (!x || json_object_set_new(o, "best", x))
			goto nomem;
	} else if (json_object_set_new(o, "best", json_null())) {
		goto nomem;
	}
	if (json_object_set_new(o, "engine", json_boolean(r->engine)))
		goto nomem;
	*out = o;
	return ATB_OK;
nomem:
	json_decref(o);
	json_decref(traj);
	json_decref(firings);
	json_decref(box);
	return atb_error_set(err, ATB_ERR_NOMEM, "cannot render the report: out of memory");
}

/* ---- CSV ---- */

/* One RFC 4180 field: quoted when it holds a comma, quote or line break. */
static void csv_field(struct sb *b, const char *s, int last)
{
	const char *p;

	if (strpbrk(s, ",\"\r\n")) {
		sb_printf(b, "\"");
		for (p = s; *p; p++)
			sb_printf(b, *p == '"' ? "\"\"" : "%c", *p);
		sb_printf(b, "\"");
	} else {
		sb_printf(b, "%s", s);
	}
	sb_printf(b, last ? "\r\n" : ",");
}

static void csv_real(struct sb *b, double x)
{
	if (x > 0)
		sb_printf(b, "%.17g,", x);
	else
		sb_printf(b, ",");
}

enum atb_status atb_report_csv(const struct atb_report *r, char **out, struct atb_error *err)
{
	struct sb b = {0};
	size_t i;

	sb_printf(&b, "iteration,outcome,usable,honest_speedup,honest_ci_low,honest_ci_high,"
		      "naive_speedup,naive_ci_low,naive_ci_high,knobs,job_uuid,wall_s,reason\r\n");
	for (i = 0; i < r->niters; i++) {
		const struct atb_iteration_row *it = &r->iters[i];

		sb_printf(&b, "%" PRId64 ",", it->k);
		csv_field(&b, it->outcome, 0);
		sb_printf(&b, "%d,", it->usable);
		csv_real(&b, it->speedup);
		csv_real(&b, it->ci_low);
		csv_real(&b, it->ci_high);
		csv_real(&b, it->naive_speedup);
		csv_real(&b, it->naive_ci_low);
		csv_real(&b, it->naive_ci_high);
		csv_field(&b, it->knobs_json, 0);
		csv_field(&b, it->job_uuid, 0);
		sb_printf(&b, "%.3f,", it->wall_s);
		csv_field(&b, it->reason ? it->reason : "", 1);
	}
	return sb_finish(&b, out, "csv", err);
}

/* ---- the list of runs ---- */

enum atb_status atb_report_list_text(struct atb_store *s, char **out, struct atb_error *err)
{
	struct atb_run_row *runs = NULL;
	struct sb b = {0};
	enum atb_status st;
	size_t n = 0, i;

	*out = NULL;
	st = atb_store_list_runs(s, &runs, &n, err);
	if (st)
		return st;
	sb_printf(&b, "%-12s  %-12s  %-8s  %6s  %11s  %8s  %s\n", "run", "task", "proposer", "seed",
		  "iterations", "usable", "created");
	for (i = 0; i < n; i++)
		sb_printf(&b, "%-12s  %-12s  %-8s  %6" PRId64 "  %5" PRId64 "/%-5" PRId64
			  "  %8" PRId64 "  %s\n", runs[i].id, runs[i].task, runs[i].proposer,
			  runs[i].seed, runs[i].done, runs[i].iterations, runs[i].usable,
			  runs[i].created);
	if (!n)
		sb_printf(&b, "(no runs yet: start one with 'atb run TASK')\n");
	atb_free(runs);
	return sb_finish(&b, out, "list of runs", err);
}

enum atb_status atb_report_list_json(struct atb_store *s, json_t **out, struct atb_error *err)
{
	struct atb_run_row *runs = NULL;
	enum atb_status st;
	json_t *a;
	size_t n = 0, i;

	*out = NULL;
	st = atb_store_list_runs(s, &runs, &n, err);
	if (st)
		return st;
	atb_alloc_install_json();
	a = json_array();
	for (i = 0; a && i < n; i++) {
		json_t *x = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:b, s:s, s:s, s:s}",
				      "id", runs[i].id, "task", runs[i].task, "proposer",
				      runs[i].proposer, "seed", (json_int_t)runs[i].seed,
				      "iterations", (json_int_t)runs[i].iterations, "done",
				      (json_int_t)runs[i].done, "usable", (json_int_t)runs[i].usable,
				      "paired_seeds", (json_int_t)runs[i].paired_seeds, "naive",
				      runs[i].naive, "protocol_digest", runs[i].protocol_digest,
				      "box_fingerprint", runs[i].box_fingerprint, "created",
				      runs[i].created);

		if (!x || json_array_append_new(a, x)) {
			json_decref(a);
			a = NULL;
		}
	}
	atb_free(runs);
	if (!a)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot list runs: out of memory");
	*out = a;
	return ATB_OK;
}
