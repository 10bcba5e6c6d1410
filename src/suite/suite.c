/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Running a KernelBench-format suite (include/atb/suite.h): the run row and
 * the "suite.plan" audit entry, one child process per task (static checks,
 * then atb_measure_candidate; a forked copy of atb through atb_proc), the
 * per-task timeout that kills the child and every process under it, one
 * iteration row per task, resume, and the report read back from the store.
 *
 * The store is opened for each step and closed before every fork: an
 * SQLite connection must not cross a fork, so the child opens its own.
 * Everything a task decides is in the store (iteration row, rejection,
 * audit entries) before the next task starts.
 *
 * Does not: print, catch signals (the caller sets *stop), or compute
 * statistics (stats.c) or verdicts (measure/).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "atb/atb.h"
#include "atb/audit.h"
#include "atb/box.h"
#include "atb/loop.h"
#include "atb/judge.h"
#include "atb/measure.h"
#include "atb/proc.h"
#include "atb/store.h"
#include "atb/suite.h"
#include "atb/task.h"
#include "loop/loop_int.h"
#include "util.h"
#include "banned.h"

#define SUITE_DEFAULT_TIMEOUT_S 1800.0

/* A planned task's content: SHA-256 of its file and of its candidate ("" none). */
struct plan_sha {
	char task[ATB_SHA256_HEX_LEN + 1];
	char cand[ATB_SHA256_HEX_LEN + 1];
};

/* The plan of a suite, as stored in its "suite.plan" audit entry. */
struct plan {
	char run_id[ATB_RUN_ID_MAX];
	char suite_dir[1024];
	char candidates_dir[1024];
	/* the candidates folder relative to the runs folder when it is inside
	   it (a calibration's copies), so a copied runs folder carries it */
	char candidates_in_runs[1024];
	char filter[256];
	char device[16];
	char baseline[16];
	char python[1024];
	double timeout_s;
	struct atb_suite_task *tasks;
	struct plan_sha *sha;     /* ntasks; "" where the plan (an older one) has none */
	size_t ntasks;
};

struct suite {
	const char *db_path;
	const struct atb_suite_opts *o;
	const char *home;
	struct atb_protocol *proto;
	struct atb_box *box;
	struct atb_run_row run;
	struct plan plan;
	char runs_dir[PATH_MAX];
	struct atb_suite_report *rep;
	int64_t done, correct;
	int64_t k;                /* the task in progress */
	char last_outcome[64];
	double spent_s;           /* this call's finished tasks */
	int64_t finished;
	char boxes[ATB_SUITE_MAX_BOXES][65];   /* the run's boxes (atb_suite_report) */
	size_t nboxes;
};

static void plan_release(struct plan *p)
{
	atb_suite_tasks_free(p->tasks, p->ntasks);
	atb_free(p->sha);
	p->tasks = NULL;
	p->sha = NULL;
	p->ntasks = 0;
}

/* SHA-256 of the file at path, hex. */
static enum atb_status file_sha(const char *path, char out[ATB_SHA256_HEX_LEN + 1],
				struct atb_error *err)
{
	char *text = NULL;
	size_t len = 0;
	enum atb_status st;

	st = atbi_read_file(path, &text, &len, err);
	if (!st && (st = atbi_sha256_hex(text, len, out)))
		atb_error_set(err, st, "cannot hash '%s'", path);
	atb_free(text);
	return st;
}

/* Every planned task's and candidate's content digest, for a resume elsewhere. */
static enum atb_status plan_digest(struct plan *p, struct atb_error *err)
{
	enum atb_status st = ATB_OK;
	size_t i;

	p->sha = atb_calloc(p->ntasks + 1, sizeof(*p->sha));
	if (!p->sha)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	for (i = 0; !st && i < p->ntasks; i++) {
		st = file_sha(p->tasks[i].path, p->sha[i].task, err);
		if (!st && p->tasks[i].candidate)
			st = file_sha(p->tasks[i].candidate, p->sha[i].cand, err);
	}
	return st;
}

/* p->candidates_in_runs: the candidates folder relative to runs_dir, when inside it. */
static void plan_in_runs(struct plan *p, const char *runs_dir)
{
	char *abs = realpath(runs_dir, NULL);
	size_t n = abs ? strlen(abs) : 0;

	p->candidates_in_runs[0] = '\0';
	if (abs && !strncmp(p->candidates_dir, abs, n) && p->candidates_dir[n] == '/')
		snprintf(p->candidates_in_runs, sizeof(p->candidates_in_runs), "%s",
			 p->candidates_dir + n + 1);
	free(abs);   /* realpath's malloc, not ours */
}

/* ---- progress ---- */

static void report(struct suite *S, const char *phase)
{
	struct atb_suite_progress pr;

	if (!S->o->progress)
		return;
	memset(&pr, 0, sizeof(pr));
	pr.run_id = S->run.id;
	pr.k = S->k;
	pr.ntasks = (int64_t)S->plan.ntasks;
	pr.task = S->k < (int64_t)S->plan.ntasks ? S->plan.tasks[S->k].rel : "";
	pr.phase = phase;
	pr.last_outcome = S->last_outcome[0] ? S->last_outcome : NULL;
	pr.done = S->done;
	pr.correct = S->correct;
	pr.eta_s = S->finished ? S->spent_s / (double)S->finished *
					 (double)((int64_t)S->plan.ntasks - S->done)
			       : -1.0;
	S->o->progress(S->o->progress_ctx, &pr);
}

static void measure_phase(void *ctx, const char *phase)
{
	report(ctx, phase);
}

static int stopped(const struct suite *S)
{
	return S->o->stop && *S->o->stop;
}

/* ---- files ---- */


/* Copy the candidate file to cand_dir/model_new.py (the task's one surface file). */
static enum atb_status copy_candidate(const char *from, const char *cand_dir,
				      struct atb_error *err)
{
	char path[PATH_MAX];
	char *text = NULL;
	size_t len = 0;
	enum atb_status st;
	FILE *f;

	st = atbi_read_file(from, &text, &len, err);
	if (st)
		return st;
	if ((size_t)snprintf(path, sizeof(path), "%s/model_new.py", cand_dir) >= sizeof(path)) {
		atb_free(text);
		return atb_error_set(err, ATB_ERR_USAGE, "path too long: '%s'", cand_dir);
	}
	f = fopen(path, "wb");
	if (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0) {
		if (f)
			fclose(f);
		atb_free(text);
		return atb_error_set(err, ATB_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
	}
	atb_free(text);
	return ATB_OK;
}

static enum atb_status runs_dir_of(struct suite *S, struct atb_error *err)
{
	return atbi_runs_dir(S->o->runs_dir, S->db_path, S->runs_dir, sizeof(S->runs_dir), err);
}

/* ---- the plan ---- */

static enum atb_status plan_json(const struct plan *p, char **out, struct atb_error *err)
{
	json_t *o, *tasks;
	enum atb_status st;
	size_t i;

	atb_alloc_install_json();
	tasks = json_array();
	for (i = 0; tasks && i < p->ntasks; i++)
		json_array_append_new(
			tasks, json_pack("{s:s, s:o, s:s, s:o}", "task", p->tasks[i].rel, "candidate",
					 p->tasks[i].candidate ? json_string(p->tasks[i].candidate)
							       : json_null(),
					 "task_sha256", p->sha[i].task, "candidate_sha256",
					 p->sha[i].cand[0] ? json_string(p->sha[i].cand)
							   : json_null()));
	o = json_pack("{s:s, s:s, s:s, s:o, s:s, s:s, s:s, s:s, s:f, s:o}", "run", p->run_id,
		      "suite", p->suite_dir, "candidates", p->candidates_dir,
		      "candidates_in_runs",
		      p->candidates_in_runs[0] ? json_string(p->candidates_in_runs) : json_null(),
		      "filter", p->filter, "device", p->device, "baseline", p->baseline, "python",
		      p->python, "timeout_per_task_s", p->timeout_s, "tasks", tasks);
	if (!o)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot write the suite plan: out of memory");
	st = atbi_json_canonical(o, out, err);
	json_decref(o);
	return st;
}

static void copy_str(char *dst, size_t size, json_t *v)
{
	snprintf(dst, size, "%s", json_is_string(v) ? json_string_value(v) : "");
}

static enum atb_status plan_parse(const char *text, struct plan *p, struct atb_error *err)
{
	json_t *o = json_loads(text, 0, NULL), *tasks, *t;
	size_t i;

	tasks = o ? json_object_get(o, "tasks") : NULL;
	if (!json_is_array(tasks) || json_array_size(tasks) == 0) {
		json_decref(o);
		return atb_error_set(err, ATB_ERR_CHECK, "suite plan of run '%s' is malformed",
				     p->run_id);
	}
	copy_str(p->suite_dir, sizeof(p->suite_dir), json_object_get(o, "suite"));
	copy_str(p->candidates_dir, sizeof(p->candidates_dir), json_object_get(o, "candidates"));
	copy_str(p->candidates_in_runs, sizeof(p->candidates_in_runs),
		 json_object_get(o, "candidates_in_runs"));
	copy_str(p->filter, sizeof(p->filter), json_object_get(o, "filter"));
	copy_str(p->device, sizeof(p->device), json_object_get(o, "device"));
	copy_str(p->baseline, sizeof(p->baseline), json_object_get(o, "baseline"));
	copy_str(p->python, sizeof(p->python), json_object_get(o, "python"));
	p->timeout_s = json_number_value(json_object_get(o, "timeout_per_task_s"));
	p->tasks = atb_calloc(json_array_size(tasks), sizeof(*p->tasks));
	p->sha = atb_calloc(json_array_size(tasks), sizeof(*p->sha));
	if (!p->tasks || !p->sha) {
		json_decref(o);
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	}
	p->ntasks = json_array_size(tasks);
	json_array_foreach(tasks, i, t) {
		const char *rel = json_string_value(json_object_get(t, "task"));
		const char *cand = json_string_value(json_object_get(t, "candidate"));
		size_t len;

		if (!rel) {
			json_decref(o);
			return atb_error_set(err, ATB_ERR_CHECK,
					     "suite plan of run '%s': task %zu has no path", p->run_id, i);
		}
		p->tasks[i].rel = atb_strdup(rel);
		len = strlen(p->suite_dir) + strlen(rel) + 2;
		p->tasks[i].path = atb_malloc(len);
		if (p->tasks[i].path)
			snprintf(p->tasks[i].path, len, "%s/%s", p->suite_dir, rel);
		p->tasks[i].candidate = cand ? atb_strdup(cand) : NULL;
		copy_str(p->sha[i].task, sizeof(p->sha[i].task), json_object_get(t, "task_sha256"));
		copy_str(p->sha[i].cand, sizeof(p->sha[i].cand),
			 json_object_get(t, "candidate_sha256"));
		if (!p->tasks[i].rel || !p->tasks[i].path || (cand && !p->tasks[i].candidate)) {
			json_decref(o);
			return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
		}
	}
	json_decref(o);
	return ATB_OK;
}

/* The run's plan from its "suite.plan" audit entry. */
static enum atb_status plan_load(struct atb_store *s, struct plan *p, struct atb_error *err)
{
	struct atb_audit_entry *e = NULL;
	size_t n = 0, i;
	enum atb_status st;

	st = atb_audit_list(s, 0, &e, &n, err);
	if (st)
		return st;
	st = atb_error_set(err, ATB_ERR_NOT_FOUND, "run '%s' has no suite plan in store '%s'",
			   p->run_id, atb_store_path(s));
	for (i = 0; i < n; i++) {
		json_t *o;
		const char *run;

		if (strcmp(e[i].kind, "suite.plan"))
			continue;
		o = json_loads(e[i].payload, 0, NULL);
		run = o ? json_string_value(json_object_get(o, "run")) : NULL;
		if (run && !strcmp(run, p->run_id)) {
			json_decref(o);
			atb_error_clear(err);
			st = plan_parse(e[i].payload, p, err);
			break;
		}
		json_decref(o);
	}
	atb_audit_entries_free(e, n);
	return st;
}

/* ---- one task ---- */

/*
 * The measurement's torch facts for the row: where the inputs were made
 * and, under --baseline compile, the speedup vs torch.compile (with its
 * interval, mode and compile time) or why it is absent.
 */
static json_t *measured_json(const struct atb_measure_outcome *m, int compile)
{
	json_t *o = json_pack("{s:s, s:s}", "inputs_on", m->inputs_on, "inputs_why", m->inputs_why);

	if (o && compile)
		json_object_set_new(o, "compile",
				    m->compile_measured
					    ? json_pack("{s:f, s:f, s:f, s:f, s:f, s:s}", "speedup",
							m->compile_speedup, "ci_low", m->compile_ci_low,
							"ci_high", m->compile_ci_high, "median_ns",
							m->compile_median_ns, "compile_s", m->compile_s,
							"mode", m->compile_mode)
					    : json_pack("{s:s, s:f, s:s}", "why", m->compile_why,
							"compile_s", m->compile_s, "mode",
							m->compile_mode));
	return o;
}

static enum atb_status task_row_json(const struct atb_suite_task *t,
				     const struct atb_measure_outcome *m, int compile, char **out,
				     struct atb_error *err)
{
	json_t *o, *kinds = json_array();
	enum atb_status st;
	const char *p = m ? m->findings : "";

	/* the static checker's finding kinds (measure's gate static), in order */
	while (kinds && *p) {
		size_t n = strcspn(p, ",");

		json_array_append_new(kinds, json_stringn(p, n));
		p += n + (p[n] == ',');
	}
	o = json_pack("{s:s, s:s, s:o}", "task", t->rel, "candidate",
		      t->candidate ? t->candidate : "", "findings", kinds);
	if (o && m && m->gate[0] && !strcmp(m->gate, ATB_GATE_STATIC))
		m = NULL;   /* refused before anything ran: nothing measured */
	if (o && m && json_object_set_new(o, "measured", measured_json(m, compile))) {
		json_decref(o);
		o = NULL;
	}
	if (!o)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	st = atbi_json_canonical(o, out, err);
	json_decref(o);
	return st;
}

/* Store the task's iteration row (one transaction, with its audit entry). */
static enum atb_status store_row(struct atb_store *s, struct suite *S,
				 const struct atb_measure_outcome *m, struct atb_iteration_row *it,
				 double wall_s, struct atb_error *err)
{
	char *kj = NULL;
	enum atb_status st;

	st = task_row_json(&S->plan.tasks[S->k], m, !strcmp(S->plan.baseline, "compile"),
			   &kj, err);
	if (st)
		return st;
	snprintf(it->run, sizeof(it->run), "%s", S->run.id);
	it->k = S->k;
	it->knobs_json = kj;
	it->usable = !strcmp(it->outcome, "usable");
	it->wall_s = wall_s;
	if (!it->reason)
		it->reason = "";
	st = atb_store_add_iteration(s, it, err);
	atb_free(kj);
	return st;
}

/*
 * The task's work in the child: load, measurement (whose first gates are
 * the static checks), iteration row.
 */
static enum atb_status run_task(struct suite *S, struct atb_error *err)
{
	const struct atb_suite_task *t = &S->plan.tasks[S->k];
	struct atb_store *s = NULL;
	struct atb_task *task = NULL;
	struct atb_iteration_row it;
	struct atb_measure_opts mo;
	struct atb_measure_outcome out;
	char cand[PATH_MAX], work[PATH_MAX], label[160], reason[512] = "";
	int64_t t0 = atbi_monotonic_ns();
	int measured = 0;
	enum atb_status st;

	memset(&it, 0, sizeof(it));
	memset(&out, 0, sizeof(out));
	/* The torch backend's device (docs/torch.md); this process is the task's own. */
	if (strcmp(S->plan.device, "auto"))
		setenv("ATB_TORCH_DEVICE", S->plan.device, 1);
	st = atb_store_open(S->db_path, ATB_STORE_READ_WRITE, &s, err);
	if (st)
		goto out;

	report(S, "load");
	st = atb_task_load_kernelbench(t->path, S->plan.python, &task, err);
	if (st && ATB_PRIMARY(st) != ATB_ERR_NOMEM) {
		snprintf(it.outcome, sizeof(it.outcome), ATB_SUITE_TASK_ERROR);
		atb_error_format(err, reason, sizeof(reason));
		atb_error_clear(err);
		st = ATB_OK;
		goto row;
	}
	if (!st)
		st = atbi_run_task_dirs(S->runs_dir, S->run.id, S->k, cand, work, sizeof(cand), err);
	if (!st)
		st = copy_candidate(t->candidate, cand, err);
	if (st)
		goto out;

	memset(&mo, 0, sizeof(mo));
	mo.home = S->home;
	mo.runner_path = S->o->runner_path;
	mo.work_dir = work;
	mo.seed_base = (uint64_t)S->run.seed;
	mo.nseeds = (size_t)S->run.paired_seeds;
	mo.box = S->box;
	snprintf(label, sizeof(label), "suite %s %s", S->run.id, t->rel);
	mo.candidate_label = label;
	mo.candidate_file = t->candidate;
	mo.progress = measure_phase;
	mo.progress_ctx = S;
	/* --baseline compile: torch.compile of the reference, a third arm */
	mo.with_compile = !strcmp(S->plan.baseline, "compile");
	st = atb_measure_candidate(s, S->proto, task, cand, NULL, &mo, &out, err);
	if (ATB_PRIMARY(st) == ATB_ERR_SCHEMA) {
		/* The reference the static checker cannot read, or a task the
		   runner cannot run: a task bug, not the candidate's. */
		snprintf(it.outcome, sizeof(it.outcome), ATB_SUITE_TASK_ERROR);
		atb_error_format(err, reason, sizeof(reason));
		atb_error_clear(err);
		st = ATB_OK;
		goto row;
	}
	measured = 1;
	if (!st)
		st = atb_loop_classify(S->proto, &out, it.outcome, &it.usable, err);
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
row:
	it.reason = reason;
	st = store_row(s, S, measured ? &out : NULL, &it, (double)(atbi_monotonic_ns() - t0) / 1e9,
		       err);
out:
	atb_task_free(task);
	atb_store_close(s);
	return st;
}

/* ---- the child process and its timeout ---- */

/* Reap the orphans that came to us as the subreaper. */
static void reap_strays(void)
{
	int64_t until = atbi_monotonic_ns() + 2000000000LL;
	struct timespec ts = {0, 20000000};

	for (;;) {
		pid_t r = waitpid(-1, NULL, WNOHANG);

		if (r < 0)
			return;   /* ECHILD: none left */
		if (r == 0) {
			if (atbi_monotonic_ns() > until)
				return;
			nanosleep(&ts, NULL);
		}
	}
}

enum child_end { CHILD_DONE, CHILD_FAILED, CHILD_TIMEOUT, CHILD_STOPPED };

struct child_arg {
	struct suite *S;
	int fds[2];   /* the child's error goes back through fds[1] */
};

/* The task's process (atb_proc_start_fn): run_task, its error to the parent. */
static int task_child(void *arg)
{
	struct child_arg *a = arg;
	struct atb_error cerr;
	enum atb_status st;

	close(a->fds[0]);
	/* the parent's stop handlers are the parent's: here a signal ends the task */
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	atb_error_clear(&cerr);
	st = run_task(a->S, &cerr);
	if (st) {
		cerr.status = st;
		if (write(a->fds[1], &cerr, sizeof(cerr)) < 0)
			return 4;
	}
	return st ? 3 : 0;
}

static enum child_end run_child(struct suite *S, struct atb_error *err)
{
	struct timespec ts = {0, 20000000};
	struct child_arg a = {S, {-1, -1}};
	struct atb_proc_opts o = {.death_signal = SIGKILL};
	struct atb_proc proc;
	int status = 0;
	int64_t deadline;
	enum child_end end;

	if (pipe(a.fds)) {
		atb_error_set(err, ATB_ERR_SYSTEM, "cannot make a pipe: %s", strerror(errno));
		return CHILD_FAILED;
	}
	/* no store is open here (see the top): the child opens its own */
	if (atb_proc_start_fn(task_child, &a, &o, &proc, err)) {
		close(a.fds[0]);
		close(a.fds[1]);
		return CHILD_FAILED;
	}
	close(a.fds[1]);
	deadline = atbi_monotonic_ns() + (int64_t)(S->plan.timeout_s * 1e9);
	for (;;) {
		if (atb_proc_wait(&proc, 0)) {
			status = proc.status;
			end = WIFEXITED(status) && WEXITSTATUS(status) == 0 ? CHILD_DONE : CHILD_FAILED;
			break;
		}
		if (stopped(S) || atbi_monotonic_ns() > deadline) {
			end = stopped(S) ? CHILD_STOPPED : CHILD_TIMEOUT;
			/* the child, the runners it started (groups of their own), all */
			atb_proc_kill(&proc);
			atb_proc_wait(&proc, INT64_MAX);
			status = proc.status;
			break;
		}
		nanosleep(&ts, NULL);
	}
	if (end == CHILD_FAILED) {
		ssize_t got = read(a.fds[0], err, sizeof(*err));

		if (got != (ssize_t)sizeof(*err))
			atb_error_set(err, ATB_ERR_SYSTEM, "the task's process for '%s' ended by %s %d",
				      S->plan.tasks[S->k].rel,
				      WIFEXITED(status) ? "exit" : "signal",
				      WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
	}
	close(a.fds[0]);
	atb_proc_reap(&proc);   /* anything the child left behind in its group */
	reap_strays();
	return end;
}

/* A task with no candidate, or killed at its timeout: the parent writes its row. */
static enum atb_status parent_row(struct suite *S, const char *outcome, int timed_out,
				  double wall_s, struct atb_error *err)
{
	const struct atb_suite_task *t = &S->plan.tasks[S->k];
	struct atb_store *s = NULL;
	struct atb_iteration_row it;
	char reason[512];
	enum atb_status st;

	memset(&it, 0, sizeof(it));
	snprintf(it.outcome, sizeof(it.outcome), "%s", outcome);
	if (timed_out)
		snprintf(reason, sizeof(reason),
			 "task '%.300s' timed out after %g s (--timeout-per-task): its processes "
			 "were killed", t->rel, S->plan.timeout_s);
	else
		snprintf(reason, sizeof(reason), "no candidate for task '%.200s' in '%.250s'",
			 t->rel, S->plan.candidates_dir);
	it.reason = reason;
	st = atb_store_open(S->db_path, ATB_STORE_READ_WRITE, &s, err);
	if (!st && timed_out) {
		/* The detail says what was killed and under which plan (issue 12). */
		json_t *d = json_pack("{s:s, s:I, s:s, s:s?, s:f, s:s}", "run", S->run.id, "k",
				      (json_int_t)S->k, "task", t->rel, "candidate", t->candidate,
				      "timeout_s", S->plan.timeout_s, "protocol_digest",
				      S->run.protocol_digest);

		if (!d)
			st = atb_error_set(err, ATB_ERR_NOMEM, "cannot record rejection: out of memory");
		else
			st = atb_judge_refuse_job(s, NULL, S->run.protocol_digest, ATB_GATE_RUNNER,
						  ATB_ERR_SYSTEM, reason, d, &it.rejection_id, err);
	}
	if (!st)
		st = store_row(s, S, NULL, &it, wall_s, err);
	atb_store_close(s);
	return st;
}

static enum atb_status one_task(struct suite *S, struct atb_error *err)
{
	const struct atb_suite_task *t = &S->plan.tasks[S->k];
	int64_t t0 = atbi_monotonic_ns();
	enum atb_status st = ATB_OK;
	double wall_s;

	report(S, "start");
	if (!t->candidate) {
		st = parent_row(S, ATB_SUITE_NO_CANDIDATE, 0, 0.0, err);
	} else {
		switch (run_child(S, err)) {
		case CHILD_DONE:
			break;
		case CHILD_FAILED:
			return err->status ? err->status : ATB_ERR_SYSTEM;
		case CHILD_STOPPED:
			return ATB_OK;   /* not recorded: redone on resume */
		case CHILD_TIMEOUT:
			st = parent_row(S, ATB_SUITE_TIMEOUT, 1,
					(double)(atbi_monotonic_ns() - t0) / 1e9, err);
			break;
		}
	}
	if (st)
		return st;
	wall_s = (double)(atbi_monotonic_ns() - t0) / 1e9;
	S->done = S->k + 1;
	S->spent_s += wall_s;
	S->finished++;
	return ATB_OK;
}

/* ---- the report ---- */

static void row_from_iteration(const struct atb_iteration_row *it, struct atb_suite_row *r)
{
	json_t *o = json_loads(it->knobs_json, 0, NULL), *f;
	size_t i;

	memset(r, 0, sizeof(*r));
	r->k = it->k;
	copy_str(r->task, sizeof(r->task), json_object_get(o, "task"));
	copy_str(r->candidate, sizeof(r->candidate), json_object_get(o, "candidate"));
	{
		const json_t *ms = json_object_get(o, "measured");
		const json_t *c = json_object_get(ms, "compile");

		copy_str(r->inputs_on, sizeof(r->inputs_on), json_object_get(ms, "inputs_on"));
		copy_str(r->compile_why, sizeof(r->compile_why), json_object_get(c, "why"));
		r->compile_s = json_number_value(json_object_get(c, "compile_s"));
		if (!strcmp(it->outcome, "usable") || !strcmp(it->outcome, "admitted")) {
			r->compile_speedup = json_number_value(json_object_get(c, "speedup"));
			r->compile_ci_low = json_number_value(json_object_get(c, "ci_low"));
			r->compile_ci_high = json_number_value(json_object_get(c, "ci_high"));
		}
	}
	snprintf(r->job_uuid, sizeof(r->job_uuid), "%s", it->job_uuid);
	json_array_foreach(json_object_get(o, "findings"), i, f) {
		size_t len = strlen(r->findings);

		if (json_is_string(f))
			snprintf(r->findings + len, sizeof(r->findings) - len, "%s%s", len ? "," : "",
				 json_string_value(f));
	}
	json_decref(o);
	snprintf(r->outcome, sizeof(r->outcome), "%s", it->outcome);
	r->correct = atb_suite_outcome_correct(it->outcome);
	r->admitted = !strcmp(it->outcome, "usable") || !strcmp(it->outcome, "admitted");
	if (r->admitted) {
		r->speedup = it->speedup;
		r->ci_low = it->ci_low;
		r->ci_high = it->ci_high;
	}
	snprintf(r->reason, sizeof(r->reason), "%s", it->reason ? it->reason : "");
	r->wall_s = it->wall_s;
	r->result_id = it->result_id;
	r->rejection_id = it->rejection_id;
}

static enum atb_status fill_report(struct suite *S, struct atb_error *err)
{
	struct atb_suite_report *R = S->rep;
	struct atb_iteration_row *rows = NULL;
	struct atb_store *s = NULL;
	size_t n = 0, i;
	enum atb_status st;

	snprintf(R->run_id, sizeof(R->run_id), "%s", S->run.id);
	snprintf(R->suite_dir, sizeof(R->suite_dir), "%s", S->plan.suite_dir);
	snprintf(R->candidates_dir, sizeof(R->candidates_dir), "%s", S->plan.candidates_dir);
	snprintf(R->filter, sizeof(R->filter), "%s", S->plan.filter);
	snprintf(R->device, sizeof(R->device), "%s", S->plan.device);
	snprintf(R->baseline, sizeof(R->baseline), "%s", S->plan.baseline);
	snprintf(R->python, sizeof(R->python), "%s", S->plan.python);
	snprintf(R->protocol_digest, sizeof(R->protocol_digest), "%s", S->run.protocol_digest);
	R->protocol_version = S->proto ? S->proto->version : 0;
	R->timeout_per_task_s = S->plan.timeout_s;
	R->paired_seeds = S->run.paired_seeds;
	R->ntasks = S->run.iterations;
	memcpy(R->boxes, S->boxes, sizeof(R->boxes));
	R->nboxes = S->nboxes;
	atb_free(R->rows);
	R->rows = NULL;
	R->nrows = 0;
	st = atb_store_open(S->db_path, ATB_STORE_READ_ONLY, &s, err);
	if (!st)
		st = atb_store_list_iterations(s, S->run.id, &rows, &n, err);
	atb_store_close(s);
	if (st)
		return st;
	if (n) {
		R->rows = atb_calloc(n, sizeof(*R->rows));
		if (!R->rows) {
			atb_store_iterations_free(rows, n);
			return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
		}
	}
	for (i = 0; i < n; i++)
		row_from_iteration(&rows[i], &R->rows[i]);
	R->nrows = n;
	atb_store_iterations_free(rows, n);
	return atb_suite_aggregate(R->rows, R->nrows, S->proto, (uint64_t)S->run.seed, &R->stats,
				   err);
}

/* ---- start, resume ---- */

/* This box (kept in S->box for the measurements), registered in s when given. */
static enum atb_status this_box(struct suite *S, struct atb_store *s, char *fp,
				struct atb_error *err)
{
	atb_box_free(S->box);
	return atbi_this_box(s, S->proto, fp, &S->box, err);
}

static enum atb_status run_tasks(struct suite *S, struct atb_error *err)
{
	int was_reaper = 0;
	enum atb_status st = ATB_OK;

	prctl(PR_GET_CHILD_SUBREAPER, &was_reaper);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	for (S->k = S->done; S->k < (int64_t)S->plan.ntasks; S->k++) {
		if (stopped(S))
			break;
		st = one_task(S, err);
		if (st)
			break;
		if (stopped(S) && S->done <= S->k)
			break;
		S->correct = 0;
		if (!fill_report(S, err)) {
			S->correct = (int64_t)S->rep->stats.ncorrect;
			snprintf(S->last_outcome, sizeof(S->last_outcome), "%s",
				 S->rep->nrows ? S->rep->rows[S->rep->nrows - 1].outcome : "");
		}
		atb_error_clear(err);
		report(S, "done");
	}
	S->rep->interrupted = S->done < (int64_t)S->plan.ntasks && stopped(S);
	prctl(PR_SET_CHILD_SUBREAPER, was_reaper);
	return st;
}

static enum atb_status check_opts(const struct atb_suite_opts *o, struct atb_error *err)
{
	if (!o->candidates_dir || !*o->candidates_dir)
		return atb_error_set(err, ATB_ERR_USAGE, "a suite needs a candidates folder");
	if (o->device && strcmp(o->device, "cpu") && strcmp(o->device, "cuda"))
		return atb_error_set(err, ATB_ERR_USAGE, "device must be cpu or cuda, not '%s'",
				     o->device);
	if (o->baseline && strcmp(o->baseline, "eager") && strcmp(o->baseline, "compile"))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "baseline must be eager or compile, not '%s'", o->baseline);
	if (o->seed < 0)
		return atb_error_set(err, ATB_ERR_USAGE, "a seed is a non-negative integer");
	if (o->timeout_per_task_s < 0 || !isfinite(o->timeout_per_task_s))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "the timeout per task must be a positive number of seconds");
	return ATB_OK;
}

static void suite_init(struct suite *S, const char *db_path, const struct atb_suite_opts *o,
		       struct atb_suite_report *out)
{
	memset(S, 0, sizeof(*S));
	memset(out, 0, sizeof(*out));
	S->db_path = db_path;
	S->o = o;
	S->rep = out;
	S->home = o->home ? o->home : atb_home();
}

/* Fill the report from the store (whatever st is, once there is a run) and release. */
static enum atb_status suite_finish(struct suite *S, enum atb_status st, struct atb_error *err)
{
	if (S->run.id[0] && S->proto) {
		struct atb_error rerr;
		int interrupted = S->rep->interrupted;

		atb_error_clear(&rerr);
		if (fill_report(S, &rerr) && !st)
			st = atb_error_set(err, rerr.status, "%s", rerr.msg);
		S->rep->interrupted = interrupted;
	}
	plan_release(&S->plan);
	atb_box_free(S->box);
	atb_protocol_free(S->proto);
	return st;
}

static enum atb_status abs_path(const char *path, char *out, size_t size, struct atb_error *err)
{
	char *abs = realpath(path, NULL);
	int n;

	if (!abs)
		return atb_error_set(err, ATB_ERR_NOT_FOUND, "no such folder '%s'", path);
	n = snprintf(out, size, "%s", abs);
	free(abs);   /* realpath's malloc, not ours */
	if (n < 0 || (size_t)n >= size)
		return atb_error_set(err, ATB_ERR_USAGE, "path '%s' is too long", path);
	return ATB_OK;
}

/* ---- a resume, maybe on another machine ---- */

int atb_suite_boxes_add(char boxes[][65], size_t *nboxes, const char *fp)
{
	size_t i;

	for (i = 0; i < *nboxes; i++)
		if (!strcmp(boxes[i], fp))
			return 0;
	if (*nboxes == ATB_SUITE_MAX_BOXES)
		return -1;
	snprintf(boxes[(*nboxes)++], sizeof(boxes[0]), "%s", fp);
	return 0;
}

enum atb_status atb_suite_boxes_load(struct atb_store *s, const char *run_id, const char *own,
				     const char *resume_kind, char boxes[][65], size_t *nboxes,
				     struct atb_error *err)
{
	struct atb_audit_entry *e = NULL;
	size_t n = 0, i;
	enum atb_status st;

	*nboxes = 0;
	atb_suite_boxes_add(boxes, nboxes, own);
	st = atb_audit_list(s, 0, &e, &n, err);
	for (i = 0; !st && i < n; i++) {
		json_t *o;
		const char *run, *box;

		if (strcmp(e[i].kind, resume_kind))
			continue;
		o = json_loads(e[i].payload, 0, NULL);
		run = json_string_value(json_object_get(o, "run"));
		box = json_string_value(json_object_get(o, "box"));
		if (run && box && !strcmp(run, run_id))
			atb_suite_boxes_add(boxes, nboxes, box);
		json_decref(o);
	}
	atb_audit_entries_free(e, n);
	return st;
}

static int add_box(struct suite *S, const char *fp)
{
	return atb_suite_boxes_add(S->boxes, &S->nboxes, fp);
}

/* Is there a plain file at path? */
static int is_file(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The file of the folder dir (a suite's tasks, found as discovery finds them) with this digest. */
static char *find_by_sha(struct atb_suite_task **found, size_t *nfound, int *listed,
			 const char *dir, const char *sha)
{
	struct atb_error ignored;
	char h[ATB_SHA256_HEX_LEN + 1];
	size_t i;

	if (!*listed) {
		*listed = 1;
		atb_error_clear(&ignored);
		if (atb_suite_discover(dir, NULL, NULL, found, nfound, &ignored))
			return NULL;
	}
	for (i = 0; i < *nfound; i++) {
		atb_error_clear(&ignored);
		if (!file_sha((*found)[i].path, h, &ignored) && !strcmp(h, sha))
			return (*found)[i].path;
	}
	return NULL;
}

static enum atb_status set_path(char **slot, const char *dir, const char *rel,
				struct atb_error *err)
{
	size_t len = strlen(dir) + strlen(rel) + 2;
	char *p = atb_malloc(len);

	if (!p)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	snprintf(p, len, "%s/%s", dir, rel);
	atb_free(*slot);
	*slot = p;
	return ATB_OK;
}

/*
 * Point the tasks still to run at this machine's folders: the suite folder
 * (o->suite_dir, else the stored one), the candidates folder (o's, else
 * the runs folder's copy of a calibration's copies, else the stored one),
 * each task and candidate checked against its planned digest.
 */
static enum atb_status relocate(struct suite *S, struct atb_error *err)
{
	struct plan *P = &S->plan;
	struct atb_suite_task *found = NULL;
	char suite[1024], cands[1024], h[ATB_SHA256_HEX_LEN + 1];
	size_t nfound = 0, k;
	int listed = 0;
	enum atb_status st = ATB_OK;

	if (S->o->suite_dir)
		st = abs_path(S->o->suite_dir, suite, sizeof(suite), err);
	else if (access(P->suite_dir, F_OK))
		st = atb_error_set(err, ATB_ERR_NOT_FOUND,
				   "suite folder '%s' of run '%s' is not here; give it with --suite "
				   "DIR", P->suite_dir, S->run.id);
	else
		snprintf(suite, sizeof(suite), "%s", P->suite_dir);
	if (st)
		return st;
	if (S->o->candidates_dir) {
		st = abs_path(S->o->candidates_dir, cands, sizeof(cands), err);
	} else if (P->candidates_in_runs[0]) {
		char *runs = realpath(S->runs_dir, NULL);

		if (!runs ||
		    (size_t)snprintf(cands, sizeof(cands), "%s/%s", runs, P->candidates_in_runs) >=
			    sizeof(cands))
			st = atb_error_set(err, ATB_ERR_USAGE, "runs folder '%s' is too long",
					   S->runs_dir);
		free(runs);   /* realpath's malloc, not ours */
		/* the same machine, its runs folder not given again: the stored path */
		if (!st && access(cands, F_OK) && !access(P->candidates_dir, F_OK))
			snprintf(cands, sizeof(cands), "%s", P->candidates_dir);
		else if (!st && access(cands, F_OK))
			st = atb_error_set(err, ATB_ERR_NOT_FOUND,
					   "candidates '%s' of run '%s' are not in the runs folder "
					   "'%s'; give the runs folder copied with the store with "
					   "--runs-dir DIR", P->candidates_in_runs, S->run.id,
					   S->runs_dir);
	} else if (access(P->candidates_dir, F_OK)) {
		st = atb_error_set(err, ATB_ERR_NOT_FOUND,
				   "candidates folder '%s' of run '%s' is not here; give it with "
				   "--candidates DIR", P->candidates_dir, S->run.id);
	} else {
		snprintf(cands, sizeof(cands), "%s", P->candidates_dir);
	}
	for (k = (size_t)S->done; !st && k < P->ntasks; k++) {
		struct atb_suite_task *t = &P->tasks[k];
		const struct plan_sha *d = &P->sha[k];
		size_t clen = strlen(P->candidates_dir);
		const char *crel, *other;
		int there;

		h[0] = '\0';
		st = set_path(&t->path, suite, t->rel, err);
		if (st)
			break;
		there = is_file(t->path);
		atb_error_clear(err);
		if (d->task[0] && (!there || file_sha(t->path, h, err) || strcmp(h, d->task))) {
			atb_error_clear(err);
			other = find_by_sha(&found, &nfound, &listed, suite, d->task);
			if (other) {
				char *copy = atb_strdup(other);

				if (!copy) {
					st = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
					break;
				}
				atb_free(t->path);
				t->path = copy;
			} else if (there) {
				st = atb_error_set(err, ATB_ERR_USAGE,
						   "task file '%s' changed since suite '%s' was planned "
						   "(sha256 %.12s, planned %.12s): restore it or start a "
						   "new suite", t->path, S->run.id, h, d->task);
			} else {
				st = atb_error_set(err, ATB_ERR_USAGE,
						   "task '%s' of suite '%s' is not in '%s', and no task "
						   "there has its content (sha256 %.12s); give the suite "
						   "folder with --suite DIR", t->rel, S->run.id, suite,
						   d->task);
			}
		} else if (!d->task[0] && !there) {
			st = atb_error_set(err, ATB_ERR_NOT_FOUND, "no task file '%s' (suite '%s')",
					   t->path, S->run.id);
		}
		if (st || !t->candidate)
			continue;
		/* the candidate's place inside its folder is kept; its folder may move */
		crel = !strncmp(t->candidate, P->candidates_dir, clen) && t->candidate[clen] == '/'
			       ? t->candidate + clen + 1
			       : strrchr(t->candidate, '/') ? strrchr(t->candidate, '/') + 1
							    : t->candidate;
		{
			char *was = atb_strdup(crel);

			if (!was) {
				st = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
				break;
			}
			st = set_path(&t->candidate, cands, was, err);
			atb_free(was);
		}
		if (st)
			break;
		if (!is_file(t->candidate))
			st = atb_error_set(err, ATB_ERR_USAGE,
					   "candidate '%s' of task '%s' (suite '%s') is not here; give "
					   "the candidates folder with --candidates DIR", t->candidate,
					   t->rel, S->run.id);
		else if (d->cand[0] && (file_sha(t->candidate, h, err) || strcmp(h, d->cand)))
			st = err->status ? err->status
					 : atb_error_set(err, ATB_ERR_USAGE,
							 "candidate file '%s' of task '%s' changed "
							 "since suite '%s' was planned (sha256 %.12s, "
							 "planned %.12s): restore it or start a new "
							 "suite", t->candidate, t->rel, S->run.id, h,
							 d->cand);
	}
	atb_suite_tasks_free(found, nfound);
	if (st)
		return st;
	snprintf(P->suite_dir, sizeof(P->suite_dir), "%s", suite);
	snprintf(P->candidates_dir, sizeof(P->candidates_dir), "%s", cands);
	if (S->o->python)
		snprintf(P->python, sizeof(P->python), "%s", S->o->python);
	return ATB_OK;
}

/* The "suite.resume" audit entry: where the folders, the interpreter and the box are now. */
static enum atb_status resume_entry(struct atb_store *s, const struct suite *S, const char *fp,
				    struct atb_error *err)
{
	char *payload = NULL, *runs = realpath(S->runs_dir, NULL);
	json_t *o;
	enum atb_status st;

	o = json_pack("{s:s, s:I, s:I, s:s, s:s, s:s, s:s, s:s, s:s, s:b}", "run", S->run.id,
		      "k", (json_int_t)S->done, "planned", (json_int_t)S->plan.ntasks, "task",
		      S->plan.tasks[S->done].rel, "suite", S->plan.suite_dir, "candidates",
		      S->plan.candidates_dir, "runs", runs ? runs : S->runs_dir, "python",
		      S->plan.python, "box", fp, "other_box",
		      strcmp(fp, S->run.box_fingerprint) != 0);
	free(runs);   /* realpath's malloc, not ours */
	if (!o)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	st = atbi_json_canonical(o, &payload, err);
	json_decref(o);
	if (!st)
		st = atb_store_audit_event(s, "suite.resume", payload, NULL, err);
	atb_free(payload);
	return st;
}

enum atb_status atb_suite_start(const char *db_path, const char *dir,
				const struct atb_suite_opts *o, struct atb_suite_report *out,
				struct atb_error *err)
{
	struct suite S;
	struct atb_frozen_protocol *frozen = NULL;
	struct atb_store *s = NULL;
	char id[33], *plan = NULL;
	size_t nfrozen = 0;
	int current = 0;
	enum atb_status st;

	suite_init(&S, db_path, o, out);
	st = check_opts(o, err);
	if (!st)
		st = abs_path(dir, S.plan.suite_dir, sizeof(S.plan.suite_dir), err);
	if (!st)
		st = abs_path(o->candidates_dir, S.plan.candidates_dir,
			      sizeof(S.plan.candidates_dir), err);
	if (!st)
		st = atb_suite_discover(S.plan.suite_dir, S.plan.candidates_dir, o->filter,
					&S.plan.tasks, &S.plan.ntasks, err);
	if (!st)
		st = plan_digest(&S.plan, err);
	if (!st)
		st = atb_protocol_load_current(S.home, &S.proto, err);
	if (st)
		goto out;
	if (o->paired_seeds != 0 && o->paired_seeds < S.proto->stats.min_paired_seeds) {
		/* PROTO: stats.min_paired_seeds */
		st = atb_error_set(err, ATB_ERR_USAGE,
				   "%" PRId64 " paired seeds is below the protocol's "
				   "stats.min_paired_seeds (%d)",
				   o->paired_seeds, S.proto->stats.min_paired_seeds);
		goto out;
	}
	snprintf(S.plan.filter, sizeof(S.plan.filter), "%s", o->filter ? o->filter : "");
	snprintf(S.plan.device, sizeof(S.plan.device), "%s", o->device ? o->device : "auto");
	snprintf(S.plan.baseline, sizeof(S.plan.baseline), "%s",
		 o->baseline ? o->baseline : "eager");
	snprintf(S.plan.python, sizeof(S.plan.python), "%s",
		 o->python ? o->python : getenv("ATB_PYTHON") ? getenv("ATB_PYTHON") : "python3");
	S.plan.timeout_s = o->timeout_per_task_s > 0 ? o->timeout_per_task_s
						      : SUITE_DEFAULT_TIMEOUT_S;

	st = atbi_random_id(id);
	if (st) {
		st = atb_error_set(err, st, "cannot make a run id");
		goto out;
	}
	snprintf(S.run.id, sizeof(S.run.id), "%.12s", id);
	snprintf(S.plan.run_id, sizeof(S.plan.run_id), "%s", S.run.id);
	snprintf(S.run.task, sizeof(S.run.task), "%.*s", (int)sizeof(S.run.task) - 1,
		 S.plan.suite_dir);
	snprintf(S.run.proposer, sizeof(S.run.proposer), ATB_SUITE_PROPOSER);
	S.run.seed = o->seed;
	S.run.iterations = (int64_t)S.plan.ntasks;
	S.run.paired_seeds = o->paired_seeds ? o->paired_seeds : S.proto->stats.min_paired_seeds;
	snprintf(S.run.protocol_digest, sizeof(S.run.protocol_digest), "%s", S.proto->digest);

	st = atb_store_open(db_path, ATB_STORE_CREATE, &s, err);
	if (!st)
		st = atb_protocol_frozen_list(S.home, &frozen, &nfrozen, &current, err);
	if (!st)
		st = atb_store_sync_protocols(s, frozen, nfrozen, NULL, err);
	atb_protocol_frozen_free(frozen, nfrozen);
	if (!st)
		st = this_box(&S, s, S.run.box_fingerprint, err);
	if (!st)
		st = runs_dir_of(&S, err);
	if (!st)
		plan_in_runs(&S.plan, S.runs_dir);
	if (!st)
		st = plan_json(&S.plan, &plan, err);
	if (!st)
		st = atb_store_add_run(s, &S.run, err);
	if (!st)
		st = atb_store_audit_event(s, "suite.plan", plan, NULL, err);
	atb_free(plan);
	atb_store_close(s);
	if (st)
		goto out;
	snprintf(out->run_id, sizeof(out->run_id), "%s", S.run.id);
	add_box(&S, S.run.box_fingerprint);
	st = run_tasks(&S, err);
out:
	return suite_finish(&S, st, err);
}

enum atb_status atb_suite_resume(const char *db_path, const char *run_id,
				 const struct atb_suite_opts *o, struct atb_suite_report *out,
				 struct atb_error *err)
{
	struct suite S;
	struct atb_store *s = NULL;
	struct atb_iteration_row *rows = NULL;
	char fp[ATB_BOX_FINGERPRINT_LEN + 1];
	size_t n = 0;
	enum atb_status st;

	suite_init(&S, db_path, o, out);
	snprintf(S.plan.run_id, sizeof(S.plan.run_id), "%s", run_id);
	st = atb_store_open(db_path, ATB_STORE_READ_WRITE, &s, err);
	if (!st)
		st = atb_store_get_run(s, run_id, &S.run, err);
	if (!st && strcmp(S.run.proposer, ATB_SUITE_PROPOSER))
		st = atb_error_set(err, ATB_ERR_NOT_FOUND,
				   "run '%s' is not a suite (proposer '%s'); resume it with 'atb run "
				   "--resume'", run_id, S.run.proposer);
	if (!st)
		st = plan_load(s, &S.plan, err);
	if (!st)
		st = atb_store_list_iterations(s, run_id, &rows, &n, err);
	atb_store_iterations_free(rows, n);
	if (!st)
		st = atb_protocol_load_digest(S.home, S.run.protocol_digest, &S.proto, err);
	if (!st)
		st = atb_suite_boxes_load(s, S.run.id, S.run.box_fingerprint, "suite.resume",
					  S.boxes, &S.nboxes, err);
	if (!st && (int64_t)S.plan.ntasks != S.run.iterations)
		st = atb_error_set(err, ATB_ERR_CHECK,
				   "suite '%s' plans %" PRId64 " tasks but its plan lists %zu", run_id,
				   S.run.iterations, S.plan.ntasks);
	S.done = (int64_t)n;
	if (st || S.done >= S.run.iterations) {
		atb_store_close(s);
		goto out;
	}
	/* Tasks to run: this box, this machine's folders, and the entry that says so. */
	st = this_box(&S, NULL, fp, err);   /* registered below, once allowed */
	if (!st && strcmp(fp, S.run.box_fingerprint) && !o->allow_other_box)
		/* A suite's totals pool its tasks' speedups: one box unless asked. */
		st = atb_error_set(err, ATB_ERR_USAGE,
				   "suite '%s' was started on box %.12s, this is box %.12s; resume it "
				   "on its own box, or give --allow-other-box (each task keeps its "
				   "own box; the report then says the run spans boxes)",
				   run_id, S.run.box_fingerprint, fp);
	if (!st && add_box(&S, fp))
		st = atb_error_set(err, ATB_ERR_USAGE,
				   "suite '%s' already spans %d boxes, the most one run may",
				   run_id, ATB_SUITE_MAX_BOXES);
	if (!st)
		st = runs_dir_of(&S, err);
	if (!st)
		st = relocate(&S, err);
	/* nothing is written before every check has passed */
	if (!st && strcmp(fp, S.run.box_fingerprint))
		st = atbi_this_box(s, S.proto, fp, NULL, err);
	if (!st)
		st = resume_entry(s, &S, fp, err);
	atb_store_close(s);
	if (!st)
		st = run_tasks(&S, err);
out:
	return suite_finish(&S, st, err);
}

void atb_suite_report_release(struct atb_suite_report *r)
{
	if (!r)
		return;
	atb_free(r->rows);
	memset(r, 0, sizeof(*r));
}
