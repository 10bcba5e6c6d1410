/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Runs of the tuning loop and their iterations in the store: the writers
 * (one transaction each, with its audit entry) and the readers reports use.
 * The schema (schema.c, tables run and iteration) does the validating; this
 * file maps its refusals like every other writer.
 *
 * Does not: decide outcomes or usability (src/loop does, and the schema
 * re-checks what it can), or compute anything.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>

#include "atb/alloc.h"
#include "store/store_int.h"
#include "banned.h"

static void copy_col(char *dst, size_t size, sqlite3_stmt *q, int col)
{
	const unsigned char *t = sqlite3_column_text(q, col);

	snprintf(dst, size, "%s", t ? (const char *)t : "");
}

static void bind_opt_text(sqlite3_stmt *q, int i, const char *v)
{
	if (v && *v)
		sqlite3_bind_text(q, i, v, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(q, i);
}

static void bind_opt_real(sqlite3_stmt *q, int i, double v)
{
	if (v > 0 && isfinite(v))
		sqlite3_bind_double(q, i, v);
	else
		sqlite3_bind_null(q, i);
}

static void bind_opt_id(sqlite3_stmt *q, int i, int64_t v)
{
	if (v > 0)
		sqlite3_bind_int64(q, i, v);
	else
		sqlite3_bind_null(q, i);
}

/* Run one INSERT and its audit entry in one transaction. */
static enum atb_status insert_with_audit(struct atb_store *s, sqlite3_stmt *q, const char *what,
					 const char *kind, json_t *payload, struct atb_error *err)
{
	enum atb_status st;
	int rc;

	if (!payload)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot %s: out of memory", what);
	st = atbi_store_begin(s, err);
	if (st)
		return st;
	rc = sqlite3_step(q);
	if (rc != SQLITE_DONE) {
		st = atbi_store_sqlerr(s, rc, what, err);
		atbi_store_rollback(s);
		return st;
	}
	st = atbi_audit_append(s, kind, payload, NULL, err);
	if (st) {
		atbi_store_rollback(s);
		return st;
	}
	return atbi_store_commit(s, err);
}

enum atb_status atb_store_add_run(struct atb_store *s, const struct atb_run_row *run,
				  struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	json_t *payload;
	enum atb_status st;
	char now[40];
	int rc;

	if (!s || !run || !run->id[0] || !run->task[0] || !run->proposer[0])
		return atb_error_set(err, ATB_ERR_USAGE, "a run needs an id, a task and a proposer");
	atbi_audit_time(now, sizeof(now));
	rc = sqlite3_prepare_v2(s->db,
		"INSERT INTO run (id, task, proposer, seed, iterations, paired_seeds, naive,"
		" protocol_digest, box_fingerprint, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		-1, &q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "record the run", err);
	sqlite3_bind_text(q, 1, run->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 2, run->task, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 3, run->proposer, -1, SQLITE_STATIC);
	sqlite3_bind_int64(q, 4, run->seed);
	sqlite3_bind_int64(q, 5, run->iterations);
	sqlite3_bind_int64(q, 6, run->paired_seeds);
	sqlite3_bind_int(q, 7, run->naive ? 1 : 0);
	bind_opt_text(q, 8, run->protocol_digest);
	bind_opt_text(q, 9, run->box_fingerprint);
	sqlite3_bind_text(q, 10, now, -1, SQLITE_STATIC);
	atb_alloc_install_json();
	payload = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:b, s:s, s:s}", "run", run->id,
			    "task", run->task, "proposer", run->proposer, "seed",
			    (json_int_t)run->seed, "iterations", (json_int_t)run->iterations,
			    "paired_seeds", (json_int_t)run->paired_seeds, "naive", run->naive,
			    "protocol_digest", run->protocol_digest, "box_fingerprint",
			    run->box_fingerprint);
	st = insert_with_audit(s, q, "record the run", "run", payload, err);
	json_decref(payload);
	sqlite3_finalize(q);
	return st;
}

#define RUN_COLUMNS "r.id, r.task, r.proposer, r.seed, r.iterations, r.paired_seeds, r.naive," \
	" r.protocol_digest, r.box_fingerprint, r.created," \
	" (SELECT count(*) FROM iteration i WHERE i.run = r.id)," \
	" (SELECT count(*) FROM iteration i WHERE i.run = r.id AND i.usable = 1)"

static void read_run(sqlite3_stmt *q, struct atb_run_row *r)
{
	memset(r, 0, sizeof(*r));
	copy_col(r->id, sizeof(r->id), q, 0);
	copy_col(r->task, sizeof(r->task), q, 1);
	copy_col(r->proposer, sizeof(r->proposer), q, 2);
	r->seed = sqlite3_column_int64(q, 3);
	r->iterations = sqlite3_column_int64(q, 4);
	r->paired_seeds = sqlite3_column_int64(q, 5);
	r->naive = sqlite3_column_int(q, 6);
	copy_col(r->protocol_digest, sizeof(r->protocol_digest), q, 7);
	copy_col(r->box_fingerprint, sizeof(r->box_fingerprint), q, 8);
	copy_col(r->created, sizeof(r->created), q, 9);
	r->done = sqlite3_column_int64(q, 10);
	r->usable = sqlite3_column_int64(q, 11);
}

enum atb_status atb_store_get_run(struct atb_store *s, const char *id, struct atb_run_row *out,
				  struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = sqlite3_prepare_v2(s->db, "SELECT " RUN_COLUMNS " FROM run r WHERE r.id = ?", -1, &q,
				NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "read the run", err);
	sqlite3_bind_text(q, 1, id ? id : "", -1, SQLITE_STATIC);
	rc = sqlite3_step(q);
	if (rc == SQLITE_ROW) {
		read_run(q, out);
		sqlite3_finalize(q);
		return ATB_OK;
	}
	sqlite3_finalize(q);
	if (rc != SQLITE_DONE)
		return atbi_store_sqlerr(s, rc, "read the run", err);
	return atb_error_set(err, ATB_ERR_NOT_FOUND, "no run '%s' in store '%s'", id ? id : "",
			     s->path);
}

enum atb_status atb_store_list_runs(struct atb_store *s, struct atb_run_row **rows, size_t *n,
				    struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	struct atb_run_row *v = NULL, *nv;
	size_t cap = 0, len = 0;
	int rc;

	*rows = NULL;
	*n = 0;
	rc = sqlite3_prepare_v2(s->db, "SELECT " RUN_COLUMNS " FROM run r ORDER BY r.created, r.id",
				-1, &q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "list runs", err);
	while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
		if (len == cap) {
			cap = cap ? 2 * cap : 16;
			nv = atb_realloc(v, cap * sizeof(*v));
			if (!nv) {
				sqlite3_finalize(q);
				atb_free(v);
				return atb_error_set(err, ATB_ERR_NOMEM, "cannot list runs: out of memory");
			}
			v = nv;
		}
		read_run(q, &v[len++]);
	}
	sqlite3_finalize(q);
	if (rc != SQLITE_DONE) {
		atb_free(v);
		return atbi_store_sqlerr(s, rc, "list runs", err);
	}
	*rows = v;
	*n = len;
	return ATB_OK;
}

enum atb_status atb_store_add_iteration(struct atb_store *s, const struct atb_iteration_row *it,
					struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	json_t *payload, *knobs;
	json_error_t je;
	enum atb_status st;
	char now[40], *reason;
	int rc;

	if (!s || !it || !it->run[0] || it->k < 0 || !it->outcome[0] || !it->knobs_json)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "an iteration needs a run, a number, knobs and an outcome");
	atb_alloc_install_json();
	knobs = json_loads(it->knobs_json, JSON_REJECT_DUPLICATES, &je);
	if (!knobs || !json_is_object(knobs)) {
		json_decref(knobs);
		return atb_error_set(err, ATB_ERR_USAGE, "iteration knobs are not a json object");
	}
	reason = atbi_redact_string(it->reason ? it->reason : "");
	if (!reason) {
		json_decref(knobs);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot record the iteration: out of memory");
	}
	atbi_audit_time(now, sizeof(now));
	rc = sqlite3_prepare_v2(s->db,
		"INSERT INTO iteration (run, k, knobs, outcome, usable, job_uuid, result, rejection,"
		" speedup, ci_low, ci_high, naive_speedup, naive_ci_low, naive_ci_high, reason,"
		" wall_s, created) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,"
		/* A result's own numbers, so the iteration can never disagree with it. */
		" CASE WHEN ?7 IS NULL THEN ?9 ELSE (SELECT speedup FROM result WHERE id = ?7) END,"
		" CASE WHEN ?7 IS NULL THEN ?10 ELSE (SELECT ci_low FROM result WHERE id = ?7) END,"
		" CASE WHEN ?7 IS NULL THEN ?11 ELSE (SELECT ci_high FROM result WHERE id = ?7) END,"
		" ?12, ?13, ?14, ?15, ?16, ?17)",
		-1, &q, NULL);
	if (rc != SQLITE_OK) {
		atb_free(reason);
		json_decref(knobs);
		return atbi_store_sqlerr(s, rc, "record the iteration", err);
	}
	sqlite3_bind_text(q, 1, it->run, -1, SQLITE_STATIC);
	sqlite3_bind_int64(q, 2, it->k);
	sqlite3_bind_text(q, 3, it->knobs_json, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 4, it->outcome, -1, SQLITE_STATIC);
	sqlite3_bind_int(q, 5, it->usable ? 1 : 0);
	bind_opt_text(q, 6, it->job_uuid);
	bind_opt_id(q, 7, it->result_id);
	bind_opt_id(q, 8, it->rejection_id);
	bind_opt_real(q, 9, it->speedup);
	bind_opt_real(q, 10, it->ci_low);
	bind_opt_real(q, 11, it->ci_high);
	bind_opt_real(q, 12, it->naive_speedup);
	bind_opt_real(q, 13, it->naive_ci_low);
	bind_opt_real(q, 14, it->naive_ci_high);
	sqlite3_bind_text(q, 15, reason, -1, SQLITE_STATIC);
	sqlite3_bind_double(q, 16, isfinite(it->wall_s) && it->wall_s > 0 ? it->wall_s : 0.0);
	sqlite3_bind_text(q, 17, now, -1, SQLITE_STATIC);
	payload = json_pack("{s:s, s:I, s:O, s:s, s:b, s:s?, s:I, s:I, s:f, s:s}", "run", it->run,
			    "k", (json_int_t)it->k, "knobs", knobs, "outcome", it->outcome,
			    "usable", it->usable, "job", it->job_uuid[0] ? it->job_uuid : NULL,
			    "result", (json_int_t)it->result_id, "rejection",
			    (json_int_t)it->rejection_id, "speedup",
			    it->speedup > 0 && isfinite(it->speedup) ? it->speedup : 0.0,
			    "reason", reason);
	st = insert_with_audit(s, q, "record the iteration", "iteration", payload, err);
	json_decref(payload);
	json_decref(knobs);
	sqlite3_finalize(q);
	atb_free(reason);
	return st;
}

void atb_store_iterations_free(struct atb_iteration_row *rows, size_t n)
{
	size_t i;

	if (!rows)
		return;
	for (i = 0; i < n; i++) {
		atb_free(rows[i].knobs_json);
		atb_free(rows[i].reason);
	}
	atb_free(rows);
}

static double col_real(sqlite3_stmt *q, int col)
{
	return sqlite3_column_type(q, col) == SQLITE_NULL ? 0.0 : sqlite3_column_double(q, col);
}

enum atb_status atb_store_list_iterations(struct atb_store *s, const char *run,
					  struct atb_iteration_row **rows, size_t *n,
					  struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	struct atb_iteration_row *v = NULL, *nv, *r;
	size_t cap = 0, len = 0;
	int rc;

	*rows = NULL;
	*n = 0;
	rc = sqlite3_prepare_v2(s->db,
		"SELECT run, k, knobs, outcome, usable, job_uuid, result, rejection, speedup, ci_low,"
		" ci_high, naive_speedup, naive_ci_low, naive_ci_high, reason, wall_s, created"
		" FROM iteration WHERE run = ? ORDER BY k", -1, &q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "list iterations", err);
	sqlite3_bind_text(q, 1, run ? run : "", -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
		if (len == cap) {
			cap = cap ? 2 * cap : 16;
			nv = atb_realloc(v, cap * sizeof(*v));
			if (!nv)
				goto nomem;
			v = nv;
		}
		r = &v[len];
		memset(r, 0, sizeof(*r));
		len++;
		copy_col(r->run, sizeof(r->run), q, 0);
		r->k = sqlite3_column_int64(q, 1);
		r->knobs_json = atb_strdup((const char *)sqlite3_column_text(q, 2));
		copy_col(r->outcome, sizeof(r->outcome), q, 3);
		r->usable = sqlite3_column_int(q, 4);
		copy_col(r->job_uuid, sizeof(r->job_uuid), q, 5);
		r->result_id = sqlite3_column_int64(q, 6);
		r->rejection_id = sqlite3_column_int64(q, 7);
		r->speedup = col_real(q, 8);
		r->ci_low = col_real(q, 9);
		r->ci_high = col_real(q, 10);
		r->naive_speedup = col_real(q, 11);
		r->naive_ci_low = col_real(q, 12);
		r->naive_ci_high = col_real(q, 13);
		r->reason = atb_strdup((const char *)sqlite3_column_text(q, 14));
		r->wall_s = col_real(q, 15);
		copy_col(r->created, sizeof(r->created), q, 16);
		if (!r->knobs_json || !r->reason)
			goto nomem;
	}
	sqlite3_finalize(q);
	if (rc != SQLITE_DONE) {
		atb_store_iterations_free(v, len);
		return atbi_store_sqlerr(s, rc, "list iterations", err);
	}
	*rows = v;
	*n = len;
	return ATB_OK;
nomem:
	sqlite3_finalize(q);
	atb_store_iterations_free(v, len);
	return atb_error_set(err, ATB_ERR_NOMEM, "cannot list iterations: out of memory");
}

enum atb_status atb_store_get_box(struct atb_store *s, const char *fingerprint, char **out,
				  struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	int rc;

	*out = NULL;
	rc = sqlite3_prepare_v2(s->db, "SELECT description FROM box WHERE fingerprint = ?", -1,
				&q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "read the box", err);
	sqlite3_bind_text(q, 1, fingerprint ? fingerprint : "", -1, SQLITE_STATIC);
	rc = sqlite3_step(q);
	if (rc == SQLITE_ROW) {
		*out = atb_strdup((const char *)sqlite3_column_text(q, 0));
		sqlite3_finalize(q);
		return *out ? ATB_OK
			    : atb_error_set(err, ATB_ERR_NOMEM, "cannot read the box: out of memory");
	}
	sqlite3_finalize(q);
	if (rc != SQLITE_DONE)
		return atbi_store_sqlerr(s, rc, "read the box", err);
	return atb_error_set(err, ATB_ERR_NOT_FOUND, "box '%s' is not registered in store '%s'",
			     fingerprint ? fingerprint : "", s->path);
}

enum atb_status atb_store_protocol_version(struct atb_store *s, const char *digest,
					   int *version, struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	int rc;

	*version = 0;
	rc = sqlite3_prepare_v2(s->db, "SELECT version FROM frozen_protocol WHERE digest = ?", -1,
				&q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "read the frozen protocol", err);
	sqlite3_bind_text(q, 1, digest ? digest : "", -1, SQLITE_STATIC);
	rc = sqlite3_step(q);
	if (rc == SQLITE_ROW)
		*version = sqlite3_column_int(q, 0);
	sqlite3_finalize(q);
	if (rc == SQLITE_ROW)
		return ATB_OK;
	if (rc != SQLITE_DONE)
		return atbi_store_sqlerr(s, rc, "read the frozen protocol", err);
	return atb_error_set(err, ATB_ERR_NOT_FOUND, "protocol '%s' is not frozen in store '%s'",
			     digest ? digest : "", s->path);
}

enum atb_status atb_store_result_floor(struct atb_store *s, int64_t result_id,
				       struct atb_result_floor *out, struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	enum atb_status st;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = sqlite3_prepare_v2(s->db,
				"SELECT json_extract(stats, '$.floor.floor_ns'),"
				" json_extract(stats, '$.floor.bytes'), json_extract(stats, '$.floor.flops'),"
				" json_extract(stats, '$.floor.mem_bw_bytes_per_s'),"
				" json_extract(stats, '$.floor.peak_flops_per_s')"
				" FROM result WHERE id = ?",
				-1, &q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "read a result's floor", err);
	sqlite3_bind_int64(q, 1, result_id);
	rc = sqlite3_step(q);
	if (rc == SQLITE_ROW && sqlite3_column_double(q, 0) > 0) {
		out->floor_ns = sqlite3_column_double(q, 0);
		out->bytes = sqlite3_column_double(q, 1);
		out->flops = sqlite3_column_double(q, 2);
		out->mem_bw_bytes_per_s = sqlite3_column_double(q, 3);
		out->peak_flops_per_s = sqlite3_column_double(q, 4);
		if (out->bytes > 0 && out->mem_bw_bytes_per_s > 0)
			out->memory_ns = out->bytes / out->mem_bw_bytes_per_s * 1e9;
		if (out->flops > 0 && out->peak_flops_per_s > 0)
			out->compute_ns = out->flops / out->peak_flops_per_s * 1e9;
		st = ATB_OK;
	} else if (rc == SQLITE_ROW || rc == SQLITE_DONE) {
		st = atb_error_set(err, ATB_ERR_NOT_FOUND, "no floor for result %lld in '%s'",
				   (long long)result_id, s->path);
	} else {
		st = atbi_store_sqlerr(s, rc, "read a result's floor", err);
	}
	sqlite3_finalize(q);
	return st;
}

enum atb_status atb_store_result_medians(struct atb_store *s, int64_t result_id,
					 double *baseline, double *candidate,
					 struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	double *b = NULL, *c = NULL, *nb, *nc;
	size_t cap = 0, n = 0;
	enum atb_status st = ATB_OK;
	int rc;

	*baseline = *candidate = 0;
	rc = sqlite3_prepare_v2(s->db,
				"SELECT sr.baseline_median, sr.candidate_median FROM seed_result sr"
				" JOIN result r ON r.job = sr.job WHERE r.id = ?",
				-1, &q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "read a result's seeds", err);
	sqlite3_bind_int64(q, 1, result_id);
	while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			nb = atb_realloc(b, cap * sizeof(*b));
			if (nb)
				b = nb;
			nc = nb ? atb_realloc(c, cap * sizeof(*c)) : NULL;
			if (!nc) {
				st = atb_error_set(err, ATB_ERR_NOMEM,
						   "cannot read a result's seeds: out of memory");
				goto out;
			}
			c = nc;
		}
		b[n] = sqlite3_column_double(q, 0);
		c[n++] = sqlite3_column_double(q, 1);
	}
	if (rc != SQLITE_DONE) {
		st = atbi_store_sqlerr(s, rc, "read a result's seeds", err);
	} else if (!n) {
		st = atb_error_set(err, ATB_ERR_NOT_FOUND, "no paired seeds for result %lld in '%s'",
				   (long long)result_id, s->path);
	} else {
		gsl_sort(b, 1, n);
		gsl_sort(c, 1, n);
		*baseline = gsl_stats_median_from_sorted_data(b, 1, n);
		*candidate = gsl_stats_median_from_sorted_data(c, 1, n);
	}
out:
	sqlite3_finalize(q);
	atb_free(b);
	atb_free(c);
	return st;
}
