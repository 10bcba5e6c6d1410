/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Running a calibration (include/atb/calibrate.h): the copies of each
 * task's honest baseline, their measurement through the normal path, the
 * run in the store and its resume, and the report read back.
 *
 * Bundled and named tasks (kinds cpu and cuda) are measured here, one
 * atb_measure_candidate a task in this process (it starts its own fresh
 * runners, and the runner's own timeout bounds a hung job), each outcome an
 * iteration row of a run of proposer "calibrate".  A KernelBench-format
 * folder goes to atb suite (src/suite/) with a candidates folder of copies,
 * so the static checks, the child process per task and its timeout are
 * the suite's own, not a second copy of them.
 *
 * Does not: print, catch signals (the caller sets *stop), compute the
 * summary (report.c) or judge a measurement (measure/).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "atb/alloc.h"
#include "atb/atb.h"
#include "atb/audit.h"
#include "atb/box.h"
#include "atb/calibrate.h"
#include "atb/engine.h"
#include "atb/loop.h"
#include "atb/measure.h"
#include "atb/protocol.h"
#include "atb/store.h"
#include "atb/suite.h"
#include "atb/task.h"
#include "loop/loop_int.h"
#include "util.h"
#include "banned.h"

#define PLAN_KIND "calibrate.plan"
/* The folder of a suite calibration's copies, under the runs folder. */
#define COPIES_PREFIX "calibrate-"

/* ---- the copies ---- */

static int ident_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_';
}

/* Does text define `class Model` at the start of a line? */
static int defines_model(const char *text)
{
	const char *p = text;

	while ((p = strstr(p, "class Model"))) {
		if ((p == text || p[-1] == '\n') && !ident_char(p[11]))
			return 1;
		p += 11;
	}
	return 0;
}

enum atb_status atb_calibrate_torch_copy(const char *text, char **out, size_t *count,
					 struct atb_error *err)
{
	const char *p;
	size_t n = 0, len = strlen(text), at = 0;
	char *buf;

	*out = NULL;
	if (count)
		*count = 0;
	if (!defines_model(text))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "no 'class Model' to copy: not a KernelBench-format task");
	for (p = text; (p = strstr(p, "Model")); p += 5)
		if ((p == text || !ident_char(p[-1])) && !ident_char(p[5]))
			n++;
	buf = atb_malloc(len + 3 * n + 1);
	if (!buf)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	for (p = text; *p;) {
		if (!strncmp(p, "Model", 5) && (p == text || !ident_char(p[-1])) &&
		    !ident_char(p[5])) {
			memcpy(buf + at, "ModelNew", 8);
			at += 8;
			p += 5;
		} else {
			buf[at++] = *p++;
		}
	}
	buf[at] = '\0';
	*out = buf;
	if (count)
		*count = n;
	return ATB_OK;
}

/* The file a '#include "X"' line names, when X is a plain file in dir; else 0. */
static int local_include(const char *line, size_t len, const char *dir, char *path,
			 size_t size)
{
	const char *p = line, *end = line + len, *q;
	struct stat sb;

	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	if (p == end || *p++ != '#')
		return 0;
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	if ((size_t)(end - p) < 7 || strncmp(p, "include", 7))
		return 0;
	p += 7;
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	if (p == end || *p++ != '"')
		return 0;
	q = memchr(p, '"', (size_t)(end - p));
	if (!q || q == p)
		return 0;
	if ((size_t)snprintf(path, size, "%s/%.*s", dir, (int)(q - p), p) >= size)
		return 0;
	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static enum atb_status write_file(const char *path, const char *text, size_t len,
				  struct atb_error *err)
{
	FILE *f = fopen(path, "wb");

	if (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0) {
		int e = errno;

		if (f)
			fclose(f);
		return atb_error_set(err, ATB_ERR_IO, "cannot write '%s': %s", path, strerror(e));
	}
	return ATB_OK;
}

enum atb_status atb_calibrate_kernel_copy(const struct atb_task *task, const char *dir,
					  struct atb_error *err)
{
	char *src = NULL, *inc = NULL, *out = NULL, *slash, folder[PATH_MAX], path[PATH_MAX];
	char dest[PATH_MAX];
	size_t len = 0, ilen = 0, cap, at = 0;
	const char *p, *nl;
	enum atb_status st;

	if (strcmp(task->kind, ATB_TASK_KIND_CPU) && strcmp(task->kind, ATB_TASK_KIND_CUDA))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "task '%s' is of kind %s: a copy of its baseline is written "
				     "for kinds cpu and cuda", task->name, task->kind);
	if (!task->nsurface)
		return atb_error_set(err, ATB_ERR_USAGE, "task '%s' has no surface file", task->name);
	if ((size_t)snprintf(dest, sizeof(dest), "%s/%s", dir, task->surface[0]) >= sizeof(dest))
		return atb_error_set(err, ATB_ERR_USAGE, "path too long: '%s'", dir);
	snprintf(folder, sizeof(folder), "%s", task->baseline.path);
	slash = strrchr(folder, '/');
	if (slash)
		*slash = '\0';
	else
		snprintf(folder, sizeof(folder), ".");
	st = atbi_read_file(task->baseline.path, &src, &len, err);
	if (st)
		return st;
	/* the source, then room for each inlined file as it comes */
	cap = len + 1;
	out = atb_malloc(cap);
	if (!out) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
		goto done;
	}
	for (p = src; p < src + len; p = nl) {
		const char *piece = p;
		size_t plen;

		nl = memchr(p, '\n', (size_t)(src + len - p));
		nl = nl ? nl + 1 : src + len;
		plen = (size_t)(nl - p);
		/* the baseline as compiled: its local headers come with it, since a
		   candidate folder holds only the surface file */
		if (local_include(p, plen, folder, path, sizeof(path))) {
			atb_free(inc);
			inc = NULL;
			st = atbi_read_file(path, &inc, &ilen, err);
			if (st)
				goto done;
			piece = inc;
			plen = ilen;
		}
		if (at + plen + 2 > cap) {
			char *grown;

			cap = (at + plen + 2) * 2;
			grown = atb_realloc(out, cap);
			if (!grown) {
				st = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
				goto done;
			}
			out = grown;
		}
		memcpy(out + at, piece, plen);
		at += plen;
		if (piece == inc && plen && inc[plen - 1] != '\n')
			out[at++] = '\n';
	}
	st = write_file(dest, out, at, err);
done:
	atb_free(src);
	atb_free(inc);
	atb_free(out);
	return st;
}

/* ---- a calibration run ---- */

struct plan_task {
	char *task;       /* a name, or an absolute task folder */
	char kind[16];
};

struct cal {
	const char *db_path;
	const struct atb_calibrate_opts *o;
	const char *home;
	struct atb_protocol *proto;
	struct atb_box *box;
	struct atb_run_row run;
	char set[1024];
	struct plan_task *tasks;
	size_t ntasks;
	char runs_dir[PATH_MAX];
	struct atb_calibrate_report *rep;
	int64_t k, done;
	char last_outcome[64];
	double spent_s;
	int64_t finished;
	int64_t task_t0_ns;   /* when the task in progress began */
	char boxes[ATB_SUITE_MAX_BOXES][65];
	size_t nboxes;
};

#define RESUME_KIND "calibrate.resume"

static int add_box(struct cal *C, const char *fp)
{
	return atb_suite_boxes_add(C->boxes, &C->nboxes, fp);
}

static void plan_free(struct cal *C)
{
	size_t i;

	for (i = 0; i < C->ntasks; i++)
		atb_free(C->tasks[i].task);
	atb_free(C->tasks);
	C->tasks = NULL;
	C->ntasks = 0;
}

static int stopped(const struct atb_calibrate_opts *o)
{
	return o->stop && *o->stop;
}

static double ci_level_of(const struct atb_calibrate_opts *o, const struct atb_protocol *p)
{
	if (o && o->ci_level > 0 && o->ci_level < 1)
		return o->ci_level;
	return p && p->stats.ci_level > 0 && p->stats.ci_level < 1 ? p->stats.ci_level : 0.95;
}

static void report(struct cal *C, const char *phase)
{
	struct atb_calibrate_progress pr;
	const struct atb_calibrate_summary *s = &C->rep->summary;

	if (!C->o->progress)
		return;
	memset(&pr, 0, sizeof(pr));
	pr.run_id = C->run.id;
	pr.k = C->k;
	pr.ntasks = (int64_t)C->ntasks;
	pr.task = C->k < (int64_t)C->ntasks ? C->tasks[C->k].task : "";
	pr.phase = phase;
	pr.last_outcome = C->last_outcome[0] ? C->last_outcome : NULL;
	pr.done = C->done;
	pr.admitted = (int64_t)s->nadmitted;
	pr.covered = (int64_t)s->ncovered;
	/* the tasks left at the mean so far, less what the one in progress has
	   already taken (so the ETA moves while a long task runs), never < 0 */
	if (C->finished) {
		double in_task = C->task_t0_ns ? (double)(atbi_monotonic_ns() - C->task_t0_ns) / 1e9
					       : 0;
		double mean = C->spent_s / (double)C->finished;

		if (in_task > mean)
			in_task = mean;
		pr.eta_s = mean * (double)((int64_t)C->ntasks - C->done) - in_task;
		if (pr.eta_s < 0)
			pr.eta_s = 0;   /* the last task done: nothing left */
	} else {
		pr.eta_s = -1.0;
	}
	C->o->progress(C->o->progress_ctx, &pr);
}

static void measure_phase(void *ctx, const char *phase)
{
	report(ctx, phase);
}


static enum atb_status row_json(const struct plan_task *t, char **out, struct atb_error *err)
{
	json_t *o = json_pack("{s:s, s:s, s:s}", "task", t->task, "kind", t->kind, "candidate",
			      ATB_CALIBRATE_LABEL);
	enum atb_status st;

	if (!o)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	st = atbi_json_canonical(o, out, err);
	json_decref(o);
	return st;
}

/* One task: its copy, its measurement, its iteration row. */
static enum atb_status one_task(struct cal *C, struct atb_store *s, struct atb_error *err)
{
	const struct plan_task *t = &C->tasks[C->k];
	struct atb_task *task = NULL;
	struct atb_knob_assignment knobs;
	struct atb_iteration_row it;
	struct atb_measure_opts mo;
	struct atb_measure_outcome out;
	char cand[PATH_MAX], work[PATH_MAX], label[400], reason[512] = "", *kj = NULL;
	int64_t t0 = atbi_monotonic_ns();
	enum atb_status st;

	memset(&it, 0, sizeof(it));
	memset(&out, 0, sizeof(out));
	C->task_t0_ns = t0;
	report(C, "start");
	st = atb_task_open(C->home, t->task, &task, err);
	if (!st)
		st = atbi_run_task_dirs(C->runs_dir, C->run.id, C->k, cand, work, sizeof(cand), err);
	if (!st)
		st = atb_calibrate_kernel_copy(task, cand, err);
	if (st)
		goto out;
	atb_task_default_knobs(task, &knobs);
	memset(&mo, 0, sizeof(mo));
	mo.home = C->home;
	mo.runner_path = C->o->runner_path;
	mo.work_dir = work;
	mo.seed_base = (uint64_t)C->run.seed;
	mo.nseeds = (size_t)C->run.paired_seeds;
	mo.box = C->box;
	snprintf(label, sizeof(label), "%s %s %.300s", ATB_CALIBRATE_LABEL, C->run.id, task->name);
	mo.candidate_label = label;
	mo.progress = measure_phase;
	mo.progress_ctx = C;
	st = atb_measure_candidate(s, C->proto, task, cand, &knobs, &mo, &out, err);
	if (!st)
		st = atb_loop_classify(C->proto, &out, it.outcome, &it.usable, err);
	if (st)
		goto out;
	snprintf(it.job_uuid, sizeof(it.job_uuid), "%s", out.job_uuid);
	it.result_id = out.result_id;
	it.rejection_id = out.rejection_id;
	if (out.verdict != ATB_MEASURE_REJECTED) {
		it.speedup = out.speedup;
		it.ci_low = out.ci_low;
		it.ci_high = out.ci_high;
	}
	snprintf(reason, sizeof(reason), "%s", out.reason[0] ? out.reason : out.note);
	st = row_json(t, &kj, err);
	if (st)
		goto out;
	snprintf(it.run, sizeof(it.run), "%s", C->run.id);
	it.k = C->k;
	it.knobs_json = kj;
	it.reason = reason;
	it.wall_s = (double)(atbi_monotonic_ns() - t0) / 1e9;
	st = atb_store_add_iteration(s, &it, err);
	if (!st) {
		C->done = C->k + 1;
		C->spent_s += it.wall_s;
		C->finished++;
		snprintf(C->last_outcome, sizeof(C->last_outcome), "%s", it.outcome);
	}
out:
	atb_free(kj);
	atb_task_free(task);
	return st;
}

static void row_from_iteration(const struct atb_iteration_row *it, struct atb_calibrate_row *r)
{
	json_t *o = json_loads(it->knobs_json, 0, NULL);
	const char *v;

	memset(r, 0, sizeof(*r));
	r->k = it->k;
	v = json_string_value(json_object_get(o, "task"));
	snprintf(r->task, sizeof(r->task), "%s", v ? v : "");
	v = json_string_value(json_object_get(o, "kind"));
	snprintf(r->kind, sizeof(r->kind), "%s", v ? v : "");
	json_decref(o);
	snprintf(r->outcome, sizeof(r->outcome), "%s", it->outcome);
	r->admitted = !strcmp(it->outcome, "usable");
	if (r->admitted) {
		r->speedup = it->speedup;
		r->ci_low = it->ci_low;
		r->ci_high = it->ci_high;
	} else {
		snprintf(r->reason, sizeof(r->reason), "%s", it->reason ? it->reason : "");
	}
	r->result_id = it->result_id;
	r->rejection_id = it->rejection_id;
	r->wall_s = it->wall_s;
}

/*
 * Each admitted row's bootstrap interval from its result's stats (PROTO:
 * stats.resolution_rel, version 10 on: "bootstrap_interval"); a row
 * without one keeps 0 and the summary takes its interval.  Best effort: a
 * result that cannot be read leaves its row so.
 */
static void boot_intervals(struct atb_store *s, struct atb_calibrate_row *rows, size_t n)
{
	size_t i;

	for (i = 0; s && i < n; i++) {
		struct atb_error e;
		json_t *o = NULL, *b;

		if (!rows[i].admitted || rows[i].result_id <= 0 ||
		    atb_store_result_stats(s, rows[i].result_id, &o, &e))
			continue;
		b = json_object_get(json_object_get(o, "stats"), "bootstrap_interval");
		if (json_is_array(b) && json_array_size(b) == 2) {
			rows[i].boot_low = json_number_value(json_array_get(b, 0));
			rows[i].boot_high = json_number_value(json_array_get(b, 1));
		}
		json_decref(o);
	}
}

static enum atb_status fill_report(struct cal *C, struct atb_store *s, struct atb_error *err)
{
	struct atb_calibrate_report *R = C->rep;
	struct atb_iteration_row *rows = NULL;
	size_t n = 0, i;
	enum atb_status st;

	snprintf(R->run_id, sizeof(R->run_id), "%s", C->run.id);
	snprintf(R->mode, sizeof(R->mode), "tasks");
	snprintf(R->set, sizeof(R->set), "%s", C->set);
	snprintf(R->protocol_digest, sizeof(R->protocol_digest), "%s", C->run.protocol_digest);
	R->protocol_version = C->proto ? C->proto->version : 0;
	R->paired_seeds = C->run.paired_seeds;
	R->planned = C->run.iterations;
	memcpy(R->boxes, C->boxes, sizeof(R->boxes));
	R->nboxes = C->nboxes;
	atb_free(R->rows);
	R->rows = NULL;
	R->nrows = 0;
	st = atb_store_list_iterations(s, C->run.id, &rows, &n, err);
	if (st)
		return st;
	if (n && !(R->rows = atb_calloc(n, sizeof(*R->rows)))) {
		atb_store_iterations_free(rows, n);
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	}
	for (i = 0; i < n; i++)
		row_from_iteration(&rows[i], &R->rows[i]);
	R->nrows = n;
	atb_store_iterations_free(rows, n);
	boot_intervals(s, R->rows, R->nrows);
	return atb_calibrate_summarize(R->rows, R->nrows, ci_level_of(C->o, C->proto), &R->summary,
				       err);
}

static enum atb_status run_tasks(struct cal *C, struct atb_store *s, struct atb_error *err)
{
	enum atb_status st = ATB_OK;

	for (C->k = C->done; C->k < (int64_t)C->ntasks; C->k++) {
		if (stopped(C->o))
			break;
		st = one_task(C, s, err);
		if (!st)
			st = fill_report(C, s, err);
		if (st)
			break;
		report(C, "done");
	}
	C->rep->interrupted = C->done < (int64_t)C->ntasks && stopped(C->o);
	return st;
}

static enum atb_status plan_json(const struct cal *C, char **out, struct atb_error *err)
{
	json_t *o, *tasks = json_array();
	enum atb_status st;
	size_t i;

	for (i = 0; tasks && i < C->ntasks; i++)
		json_array_append_new(tasks, json_pack("{s:s, s:s}", "task", C->tasks[i].task,
						       "kind", C->tasks[i].kind));
	o = json_pack("{s:s, s:s, s:o}", "run", C->run.id, "set", C->set, "tasks", tasks);
	if (!o)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	st = atbi_json_canonical(o, out, err);
	json_decref(o);
	return st;
}

static enum atb_status plan_load(struct cal *C, struct atb_store *s, struct atb_error *err)
{
	struct atb_audit_entry *e = NULL;
	size_t n = 0, i, j;
	enum atb_status st;

	st = atb_audit_list(s, 0, &e, &n, err);
	if (st)
		return st;
	st = atb_error_set(err, ATB_ERR_NOT_FOUND, "run '%s' has no calibration plan in store '%s'",
			   C->run.id, atb_store_path(s));
	for (i = 0; i < n; i++) {
		json_t *o, *tasks, *t;
		const char *run, *set;

		if (strcmp(e[i].kind, PLAN_KIND))
			continue;
		o = json_loads(e[i].payload, 0, NULL);
		run = json_string_value(json_object_get(o, "run"));
		if (!run || strcmp(run, C->run.id)) {
			json_decref(o);
			continue;
		}
		atb_error_clear(err);
		st = ATB_OK;
		set = json_string_value(json_object_get(o, "set"));
		snprintf(C->set, sizeof(C->set), "%s", set ? set : "");
		tasks = json_object_get(o, "tasks");
		C->tasks = atb_calloc(json_array_size(tasks) + 1, sizeof(*C->tasks));
		if (!C->tasks)
			st = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
		json_array_foreach(tasks, j, t) {
			const char *name = json_string_value(json_object_get(t, "task"));
			const char *kind = json_string_value(json_object_get(t, "kind"));

			if (st)
				break;
			if (!name || !kind) {
				st = atb_error_set(err, ATB_ERR_CHECK,
						   "calibration plan of run '%s' is malformed", C->run.id);
				break;
			}
			C->tasks[j].task = atb_strdup(name);
			snprintf(C->tasks[j].kind, sizeof(C->tasks[j].kind), "%s", kind);
			C->ntasks = j + 1;
			if (!C->tasks[j].task)
				st = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
		}
		json_decref(o);
		break;
	}
	atb_audit_entries_free(e, n);
	if (!st && C->ntasks != (size_t)C->run.iterations)
		st = atb_error_set(err, ATB_ERR_CHECK,
				   "calibration '%s' plans %" PRId64 " tasks but its plan lists %zu",
				   C->run.id, C->run.iterations, C->ntasks);
	return st;
}

static enum atb_status add_task(struct cal *C, const char *name, const char *kind,
				size_t cap, struct atb_error *err)
{
	if (C->ntasks == cap)
		return atb_error_set(err, ATB_ERR_INTERNAL, "calibration plan overflow");
	C->tasks[C->ntasks].task = atb_strdup(name);
	if (!C->tasks[C->ntasks].task)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	snprintf(C->tasks[C->ntasks].kind, sizeof(C->tasks[0].kind), "%s", kind);
	C->ntasks++;
	return ATB_OK;
}

/* The plan's task list: the bundled tasks of o->kind, or o->tasks, each loaded once. */
static enum atb_status plan_tasks(struct cal *C, struct atb_error *err)
{
	const struct atb_calibrate_opts *o = C->o;
	char **names = NULL, path[PATH_MAX];
	size_t n = 0, i, cap, at;
	enum atb_status st = ATB_OK;

	if (o->kind) {
		st = atb_task_list(C->home, &names, &n, err);
		if (st)
			return st;
	}
	cap = o->kind ? n : o->ntasks;
	C->tasks = atb_calloc(cap + 1, sizeof(*C->tasks));
	if (!C->tasks) {
		atb_task_list_free(names, n);
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	}
	for (i = 0; !st && i < cap; i++) {
		const char *name = o->kind ? names[i] : o->tasks[i];
		struct atb_task *t = NULL;
		char *abs = NULL;

		if (o->kind && atb_engine_task_find(C->home, name, path, sizeof(path)))
			continue;   /* an engine task: not a kernel to copy */
		if (!o->kind && atb_engine_task_find(C->home, name, path, sizeof(path))) {
			st = atb_error_set(err, ATB_ERR_USAGE,
					   "task '%s' is an engine task: calibrate copies kernel "
					   "tasks (kinds cpu and cuda)", name);
			break;
		}
		st = atb_task_open(C->home, name, &t, err);
		if (st)
			break;
		if (o->kind && strcmp(t->kind, o->kind)) {
			atb_task_free(t);
			continue;
		}
		if (strcmp(t->kind, ATB_TASK_KIND_CPU) && strcmp(t->kind, ATB_TASK_KIND_CUDA)) {
			st = atb_error_set(err, ATB_ERR_USAGE,
					   "task '%s' is of kind %s: give a KernelBench-format folder "
					   "with --suite", name, t->kind);
			atb_task_free(t);
			break;
		}
		/* a folder is kept as its absolute path, so a resume finds it anywhere */
		if (strchr(name, '/') && !(abs = realpath(name, NULL)))
			st = atb_error_set(err, ATB_ERR_NOT_FOUND, "no such task '%s'", name);
		if (!st)
			st = add_task(C, abs ? abs : name, t->kind, cap, err);
		free(abs);   /* realpath's malloc, not ours */
		atb_task_free(t);
	}
	atb_task_list_free(names, n);
	if (!st && !C->ntasks)
		st = atb_error_set(err, ATB_ERR_USAGE, "no bundled task of kind %s", o->kind);
	if (st)
		return st;
	at = (size_t)snprintf(C->set, sizeof(C->set), o->kind ? "kind %s" : "tasks",
			      o->kind ? o->kind : "");
	for (i = 0; !o->kind && i < C->ntasks && at < sizeof(C->set); i++)
		at += (size_t)snprintf(C->set + at, sizeof(C->set) - at, " %s", C->tasks[i].task);
	return ATB_OK;
}

static enum atb_status check_opts(const struct atb_calibrate_opts *o, struct atb_error *err)
{
	int sets = !!o->kind + !!o->ntasks + !!o->suite_dir;

	if (sets == 0)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "no task set: give --kind cpu|cuda, task names, or --suite DIR");
	if (sets > 1)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "give one task set: --kind, task names or --suite, not several");
	if (o->kind && strcmp(o->kind, ATB_TASK_KIND_CPU) && strcmp(o->kind, ATB_TASK_KIND_CUDA))
		return atb_error_set(err, ATB_ERR_USAGE, "kind must be cpu or cuda, not '%s'",
				     o->kind);
	if (o->seed < 0)
		return atb_error_set(err, ATB_ERR_USAGE, "a seed is a non-negative integer");
	if (o->paired_seeds < 0)
		return atb_error_set(err, ATB_ERR_USAGE, "paired seeds must be positive");
	return ATB_OK;
}

/* ---- a KernelBench-format folder, through atb suite ---- */

struct suite_ctx {
	const struct atb_calibrate_opts *o;
	int64_t admitted;
};

static void suite_progress(void *vctx, const struct atb_suite_progress *p)
{
	struct suite_ctx *x = vctx;
	struct atb_calibrate_progress pr;

	if (!strcmp(p->phase, "done") && p->last_outcome && !strcmp(p->last_outcome, "usable"))
		x->admitted++;
	if (!x->o->progress)
		return;
	memset(&pr, 0, sizeof(pr));
	pr.run_id = p->run_id;
	pr.k = p->k;
	pr.ntasks = p->ntasks;
	pr.task = p->task;
	pr.phase = p->phase;
	pr.last_outcome = p->last_outcome;
	pr.done = p->done;
	pr.admitted = x->admitted;
	pr.covered = -1;   /* the suite's progress has no interval */
	pr.eta_s = p->eta_s;
	x->o->progress(x->o->progress_ctx, &pr);
}

static enum atb_status from_suite(const struct atb_suite_report *sr, const char *db_path,
				  const struct atb_calibrate_opts *o, const struct atb_protocol *p,
				  struct atb_calibrate_report *out, struct atb_error *err)
{
	size_t i;

	snprintf(out->run_id, sizeof(out->run_id), "%s", sr->run_id);
	snprintf(out->mode, sizeof(out->mode), "suite");
	snprintf(out->set, sizeof(out->set), "%s", sr->suite_dir);
	snprintf(out->copies_dir, sizeof(out->copies_dir), "%s", sr->candidates_dir);
	snprintf(out->protocol_digest, sizeof(out->protocol_digest), "%s", sr->protocol_digest);
	out->protocol_version = sr->protocol_version;
	out->paired_seeds = sr->paired_seeds;
	out->planned = sr->ntasks;
	out->interrupted = sr->interrupted;
	out->wall_s = sr->wall_s;
	for (i = 0; i < sr->nboxes && i < sizeof(out->boxes) / sizeof(out->boxes[0]); i++)
		snprintf(out->boxes[i], sizeof(out->boxes[0]), "%s", sr->boxes[i]);
	out->nboxes = i;
	atb_free(out->rows);
	out->rows = NULL;
	out->nrows = 0;
	if (sr->nrows && !(out->rows = atb_calloc(sr->nrows, sizeof(*out->rows))))
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	for (i = 0; i < sr->nrows; i++) {
		const struct atb_suite_row *w = &sr->rows[i];
		struct atb_calibrate_row *r = &out->rows[i];

		r->k = w->k;
		snprintf(r->task, sizeof(r->task), "%s", w->task);
		snprintf(r->kind, sizeof(r->kind), ATB_TASK_KIND_TORCH);
		snprintf(r->outcome, sizeof(r->outcome), "%s", w->outcome);
		r->admitted = !strcmp(w->outcome, "usable");
		if (r->admitted) {
			r->speedup = w->speedup;
			r->ci_low = w->ci_low;
			r->ci_high = w->ci_high;
		} else {
			snprintf(r->reason, sizeof(r->reason), "%s", w->reason);
		}
		r->result_id = w->result_id;
		r->rejection_id = w->rejection_id;
		r->wall_s = w->wall_s;
	}
	out->nrows = sr->nrows;
	if (db_path) {
		struct atb_store *s = NULL;
		struct atb_error e;

		if (!atb_store_open(db_path, ATB_STORE_READ_ONLY, &s, &e)) {
			boot_intervals(s, out->rows, out->nrows);
			atb_store_close(s);
		}
	}
	return atb_calibrate_summarize(out->rows, out->nrows, ci_level_of(o, p), &out->summary,
				       err);
}

/* Make every folder of path's parent chain under base (path relative to base). */
static enum atb_status make_parents(const char *base, const char *rel, struct atb_error *err)
{
	char path[PATH_MAX];
	const char *p;
	enum atb_status st;

	for (p = strchr(rel, '/'); p; p = strchr(p + 1, '/')) {
		if ((size_t)snprintf(path, sizeof(path), "%s/%.*s", base, (int)(p - rel), rel) >=
		    sizeof(path))
			return atb_error_set(err, ATB_ERR_USAGE, "path too long: '%s'", rel);
		st = atbi_make_dir(path, 0700, err);
		if (st)
			return st;
	}
	return ATB_OK;
}

/* runs/calibrate-ID/copies/REL for every task of the folder: Model renamed to ModelNew. */
static enum atb_status write_copies(const char *db_path, const struct atb_calibrate_opts *o,
				    char *copies, size_t size, struct atb_error *err)
{
	struct atb_suite_task *t = NULL;
	char runs[PATH_MAX], id[33], path[PATH_MAX];
	size_t n = 0, i;
	enum atb_status st;

	st = atb_suite_discover(o->suite_dir, NULL, o->filter, &t, &n, err);
	if (!st)
		st = atbi_runs_dir(o->runs_dir, db_path, runs, sizeof(runs), err);
	if (!st && (st = atbi_random_id(id)))
		atb_error_set(err, st, "cannot make an id");
	if (!st && (size_t)snprintf(path, sizeof(path), "%s/" COPIES_PREFIX "%.12s", runs, id) >=
			   sizeof(path))
		st = atb_error_set(err, ATB_ERR_USAGE, "runs folder '%s' is too long", runs);
	if (!st)
		st = atbi_make_dir(path, 0700, err);
	if (!st && (size_t)snprintf(copies, size, "%s/copies", path) >= size)
		st = atb_error_set(err, ATB_ERR_USAGE, "runs folder '%s' is too long", runs);
	if (!st)
		st = atbi_make_dir(copies, 0700, err);
	for (i = 0; !st && i < n; i++) {
		char *text = NULL, *copy = NULL;
		size_t len = 0;

		st = make_parents(copies, t[i].rel, err);
		if (!st)
			st = atbi_read_file(t[i].path, &text, &len, err);
		if (!st && atb_calibrate_torch_copy(text, &copy, NULL, err)) {
			/* a task without class Model gets no copy: the suite reports it
			   (no_candidate), a refusal like any other */
			atb_error_clear(err);
			st = ATB_OK;
		} else if (!st) {
			if ((size_t)snprintf(path, sizeof(path), "%s/%s", copies, t[i].rel) >=
			    sizeof(path))
				st = atb_error_set(err, ATB_ERR_USAGE, "path too long: '%s'", t[i].rel);
			else
				st = write_file(path, copy, strlen(copy), err);
		}
		atb_free(text);
		atb_free(copy);
	}
	atb_suite_tasks_free(t, n);
	return st;
}

static enum atb_status suite_start(const char *db_path, const struct atb_calibrate_opts *o,
				   struct atb_calibrate_report *out, struct atb_error *err)
{
	struct atb_suite_opts so;
	struct atb_suite_report sr;
	struct suite_ctx x = {o, 0};
	struct atb_protocol *p = NULL;
	char copies[PATH_MAX];
	enum atb_status st;

	memset(&sr, 0, sizeof(sr));
	st = write_copies(db_path, o, copies, sizeof(copies), err);
	if (st)
		return st;
	memset(&so, 0, sizeof(so));
	so.home = o->home;
	so.runner_path = o->runner_path;
	so.runs_dir = o->runs_dir;
	so.candidates_dir = copies;
	so.filter = o->filter;
	so.python = o->python;
	so.device = o->device;
	so.seed = o->seed;
	so.paired_seeds = o->paired_seeds;
	so.timeout_per_task_s = o->timeout_per_task_s;
	so.progress = suite_progress;
	so.progress_ctx = &x;
	so.stop = o->stop;
	st = atb_suite_start(db_path, o->suite_dir, &so, &sr, err);
	if (sr.run_id[0]) {
		struct atb_error rerr;

		atb_error_clear(&rerr);
		if (!atb_protocol_load_current(o->home ? o->home : atb_home(), &p, &rerr) &&
		    from_suite(&sr, db_path, o, p, out, &rerr) && !st)
			st = atb_error_set(err, rerr.status, "%s", rerr.msg);
	}
	atb_protocol_free(p);
	atb_suite_report_release(&sr);
	return st;
}

/* A suite run is a calibration when its candidates are a folder of copies. */
static int is_copies_dir(const char *dir)
{
	const char *end = dir + strlen(dir), *p;

	if ((size_t)(end - dir) < 7 || strcmp(end - 7, "/copies"))
		return 0;
	for (p = end - 8; p > dir && *p != '/'; p--)
		;
	return !strncmp(p + 1, COPIES_PREFIX, strlen(COPIES_PREFIX));
}

/* The candidates folder of suite run_id's plan (its "suite.plan" audit entry) into out. */
static enum atb_status suite_candidates(struct atb_store *s, const char *run_id, char *out,
					size_t size, struct atb_error *err)
{
	struct atb_audit_entry *e = NULL;
	size_t n = 0, i;
	enum atb_status st;

	out[0] = '\0';
	st = atb_audit_list(s, 0, &e, &n, err);
	if (st)
		return st;
	for (i = 0; i < n && !out[0]; i++) {
		json_t *o;
		const char *run, *cands;

		if (strcmp(e[i].kind, "suite.plan"))
			continue;
		o = json_loads(e[i].payload, 0, NULL);
		run = json_string_value(json_object_get(o, "run"));
		cands = json_string_value(json_object_get(o, "candidates"));
		if (run && cands && !strcmp(run, run_id))
			snprintf(out, size, "%s", cands);
		json_decref(o);
	}
	atb_audit_entries_free(e, n);
	return ATB_OK;
}

static enum atb_status suite_resume(const char *db_path, const char *run_id,
				    const struct atb_calibrate_opts *o,
				    struct atb_calibrate_report *out, struct atb_error *err)
{
	struct atb_suite_opts so;
	struct atb_suite_report sr;
	struct suite_ctx x = {o, 0};
	struct atb_protocol *p = NULL;
	enum atb_status st;

	memset(&so, 0, sizeof(so));
	so.home = o->home;
	so.runner_path = o->runner_path;
	so.runs_dir = o->runs_dir;
	so.suite_dir = o->suite_dir;
	so.python = o->python;
	so.allow_other_box = o->allow_other_box;
	so.progress = suite_progress;
	so.progress_ctx = &x;
	so.stop = o->stop;
	st = atb_suite_resume(db_path, run_id, &so, &sr, err);
	if (sr.run_id[0]) {
		struct atb_error rerr;

		atb_error_clear(&rerr);
		if (atb_protocol_load_digest(o->home ? o->home : atb_home(), sr.protocol_digest, &p,
					     &rerr) ||
		    from_suite(&sr, db_path, o, p, out, &rerr)) {
			if (!st)
				st = atb_error_set(err, rerr.status, "%s", rerr.msg);
		}
	}
	atb_protocol_free(p);
	atb_suite_report_release(&sr);
	return st;
}

/* ---- start, resume ---- */


/* The "calibrate.resume" audit entry: where the runs folder and the box are now. */
static enum atb_status resume_entry(struct cal *C, struct atb_store *s, const char *fp,
				    struct atb_error *err)
{
	char *payload = NULL, *runs = realpath(C->runs_dir, NULL);
	json_t *o;
	enum atb_status st;

	o = json_pack("{s:s, s:I, s:I, s:s, s:s, s:s, s:b}", "run", C->run.id, "k",
		      (json_int_t)C->done, "planned", (json_int_t)C->ntasks, "task",
		      C->tasks[C->done].task, "runs", runs ? runs : C->runs_dir, "box", fp,
		      "other_box", strcmp(fp, C->run.box_fingerprint) != 0);
	free(runs);   /* realpath's malloc, not ours */
	if (!o)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	st = atbi_json_canonical(o, &payload, err);
	json_decref(o);
	if (!st)
		st = atb_store_audit_event(s, RESUME_KIND, payload, NULL, err);
	atb_free(payload);
	return st;
}

static void cal_init(struct cal *C, const char *db_path, const struct atb_calibrate_opts *o,
		     struct atb_calibrate_report *out)
{
	memset(C, 0, sizeof(*C));
	memset(out, 0, sizeof(*out));
	C->db_path = db_path;
	C->o = o;
	C->rep = out;
	C->home = o->home ? o->home : atb_home();
}

static enum atb_status cal_finish(struct cal *C, struct atb_store *s, enum atb_status st,
				  int64_t t0, struct atb_error *err)
{
	if (s && C->run.id[0] && C->proto) {
		struct atb_error rerr;
		int interrupted = C->rep->interrupted;

		atb_error_clear(&rerr);
		if (fill_report(C, s, &rerr) && !st)
			st = atb_error_set(err, rerr.status, "%s", rerr.msg);
		C->rep->interrupted = interrupted;
	}
	C->rep->wall_s = (double)(atbi_monotonic_ns() - t0) / 1e9;
	atb_store_close(s);
	plan_free(C);
	atb_box_free(C->box);
	atb_protocol_free(C->proto);
	return st;
}

enum atb_status atb_calibrate_start(const char *db_path, const struct atb_calibrate_opts *o,
				    struct atb_calibrate_report *out, struct atb_error *err)
{
	struct cal C;
	struct atb_frozen_protocol *frozen = NULL;
	struct atb_store *s = NULL;
	char id[33], *plan = NULL;
	size_t nfrozen = 0;
	int current = 0;
	int64_t t0 = atbi_monotonic_ns();
	enum atb_status st;

	cal_init(&C, db_path, o, out);
	st = check_opts(o, err);
	if (st)
		return st;
	if (o->suite_dir) {
		st = suite_start(db_path, o, out, err);
		out->wall_s = (double)(atbi_monotonic_ns() - t0) / 1e9;
		return st;
	}
	st = atb_protocol_load_current(C.home, &C.proto, err);
	if (!st && o->paired_seeds && o->paired_seeds < C.proto->stats.min_paired_seeds)
		/* PROTO: stats.min_paired_seeds */
		st = atb_error_set(err, ATB_ERR_USAGE,
				   "%" PRId64 " paired seeds is below the protocol's "
				   "stats.min_paired_seeds (%d)",
				   o->paired_seeds, C.proto->stats.min_paired_seeds);
	if (!st)
		st = plan_tasks(&C, err);
	if (!st && (st = atbi_random_id(id)))
		atb_error_set(err, st, "cannot make a run id");
	if (st)
		return cal_finish(&C, NULL, st, t0, err);
	snprintf(C.run.id, sizeof(C.run.id), "%.12s", id);
	snprintf(C.run.task, sizeof(C.run.task), "%.*s", (int)sizeof(C.run.task) - 1,
		 o->kind ? C.set : "calibrate tasks");
	snprintf(C.run.proposer, sizeof(C.run.proposer), ATB_CALIBRATE_PROPOSER);
	C.run.seed = o->seed;
	C.run.iterations = (int64_t)C.ntasks;
	C.run.paired_seeds = o->paired_seeds ? o->paired_seeds : C.proto->stats.min_paired_seeds;
	snprintf(C.run.protocol_digest, sizeof(C.run.protocol_digest), "%s", C.proto->digest);

	st = atb_store_open(db_path, ATB_STORE_CREATE, &s, err);
	if (!st)
		st = atb_protocol_frozen_list(C.home, &frozen, &nfrozen, &current, err);
	if (!st)
		st = atb_store_sync_protocols(s, frozen, nfrozen, NULL, err);
	atb_protocol_frozen_free(frozen, nfrozen);
	if (!st)
		st = atbi_this_box(s, C.proto, C.run.box_fingerprint, &C.box, err);
	if (!st)
		st = atbi_runs_dir(o->runs_dir, db_path, C.runs_dir, sizeof(C.runs_dir), err);
	if (!st)
		st = plan_json(&C, &plan, err);
	if (!st)
		st = atb_store_add_run(s, &C.run, err);
	if (!st)
		st = atb_store_audit_event(s, PLAN_KIND, plan, NULL, err);
	atb_free(plan);
	if (st) {
		C.run.id[0] = '\0';   /* nothing of the run to report */
		return cal_finish(&C, s, st, t0, err);
	}
	add_box(&C, C.run.box_fingerprint);
	st = fill_report(&C, s, err);
	if (!st)
		st = run_tasks(&C, s, err);
	return cal_finish(&C, s, st, t0, err);
}

enum atb_status atb_calibrate_resume(const char *db_path, const char *run_id,
				     const struct atb_calibrate_opts *o,
				     struct atb_calibrate_report *out, struct atb_error *err)
{
	struct cal C;
	struct atb_store *s = NULL;
	char fp[ATB_BOX_FINGERPRINT_LEN + 1];
	int64_t t0 = atbi_monotonic_ns();
	enum atb_status st;

	cal_init(&C, db_path, o, out);
	st = atb_store_open(db_path, ATB_STORE_READ_WRITE, &s, err);
	if (!st)
		st = atb_store_get_run(s, run_id, &C.run, err);
	if (!st && !strcmp(C.run.proposer, ATB_SUITE_PROPOSER)) {
		char cands[1024];

		st = suite_candidates(s, run_id, cands, sizeof(cands), err);
		atb_store_close(s);
		if (!st && !is_copies_dir(cands))
			return atb_error_set(err, ATB_ERR_NOT_FOUND,
					     "run '%s' is a suite of candidates '%s', not a "
					     "calibration; resume it with 'atb suite --resume'",
					     run_id, cands);
		if (!st)
			st = suite_resume(db_path, run_id, o, out, err);
		out->wall_s = (double)(atbi_monotonic_ns() - t0) / 1e9;
		return st;
	}
	if (!st && strcmp(C.run.proposer, ATB_CALIBRATE_PROPOSER))
		st = atb_error_set(err, ATB_ERR_NOT_FOUND,
				   "run '%s' is not a calibration (proposer '%s')", run_id,
				   C.run.proposer);
	if (!st && (o->suite_dir || o->python))
		st = atb_error_set(err, ATB_ERR_USAGE,
				   "calibration '%s' is of bundled or named tasks: --suite and "
				   "--python are for a calibration of a KernelBench-format folder",
				   run_id);
	if (!st)
		st = plan_load(&C, s, err);
	if (!st)
		st = atb_protocol_load_digest(C.home, C.run.protocol_digest, &C.proto, err);
	if (!st)
		st = atb_suite_boxes_load(s, C.run.id, C.run.box_fingerprint, RESUME_KIND, C.boxes,
					  &C.nboxes, err);
	if (!st)
		st = atbi_this_box(NULL, C.proto, fp, &C.box, err);   /* registered once allowed */
	if (!st)
		st = fill_report(&C, s, err);
	C.done = (int64_t)C.rep->nrows;
	if (!st && C.done < C.run.iterations && strcmp(fp, C.run.box_fingerprint) &&
	    !o->allow_other_box)
		/* the summary pools the copies: one box unless asked */
		st = atb_error_set(err, ATB_ERR_USAGE,
				   "calibration '%s' was started on box %.12s, this is box %.12s; "
				   "resume it on its own box, or give --allow-other-box (each copy "
				   "keeps its own box; the report then says the run spans boxes)",
				   run_id, C.run.box_fingerprint, fp);
	if (!st && C.done < C.run.iterations && add_box(&C, fp))
		st = atb_error_set(err, ATB_ERR_USAGE,
				   "calibration '%s' already spans %d boxes, the most one run may",
				   run_id, ATB_SUITE_MAX_BOXES);
	if (!st && C.done < C.run.iterations)
		st = atbi_runs_dir(o->runs_dir, db_path, C.runs_dir, sizeof(C.runs_dir), err);
	if (!st && C.done < C.run.iterations && strcmp(fp, C.run.box_fingerprint))
		st = atbi_this_box(s, C.proto, fp, NULL, err);
	if (!st && C.done < C.run.iterations)
		st = resume_entry(&C, s, fp, err);
	if (st) {
		C.run.id[0] = '\0';   /* nothing ran: no "continue it" hint */
		return cal_finish(&C, s, st, t0, err);
	}
	st = run_tasks(&C, s, err);
	return cal_finish(&C, s, st, t0, err);
}

void atb_calibrate_report_release(struct atb_calibrate_report *r)
{
	if (!r)
		return;
	atb_free(r->rows);
	memset(r, 0, sizeof(*r));
}
