/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The gates of the measurement pipeline as pure judgements: the
 * modification surface (the candidate folder's contents, and hashes of
 * everything outside it), correctness / input mutation / result reuse from
 * the runner's correctness events, the physical floor and baseline drift
 * from per-seed medians.  measure.c applies them in order and stores the
 * refusal; nothing here writes, prints or runs anything.
 *
 * Does not: decide the anomaly breaker (the store's schema quarantines) or
 * the noise gate (stats' cv against the cap, with re-runs in measure.c).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atb/alloc.h"
#include "atb/runner.h"
#include "atb/stats.h"
#include "measure/measure_int.h"
#include "banned.h"

#define HASH_MAX_DEPTH 8
#define HASH_MAX_FILES 4096

/* ---- surface ---- */

enum atb_status atbi_gate_surface_folder(const struct atb_task *task, const char *dir,
					 char *why, size_t why_size)
{
	struct dirent *de;
	struct stat sb;
	char path[4096];
	int have_first = 0;
	DIR *d;
	size_t i;

	why[0] = '\0';
	if (lstat(dir, &sb) != 0) {
		snprintf(why, why_size, "cannot read candidate folder '%s': %s", dir, strerror(errno));
		return ATB_ERR_IO;
	}
	if (S_ISLNK(sb.st_mode) || !S_ISDIR(sb.st_mode)) {
		snprintf(why, why_size, "candidate '%s' is not a folder (symlinks are refused)", dir);
		return ATB_ERR_CHECK;
	}
	d = opendir(dir);
	if (!d) {
		snprintf(why, why_size, "cannot read candidate folder '%s': %s", dir, strerror(errno));
		return ATB_ERR_IO;
	}
	while ((de = readdir(d))) {
		int known = 0;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		for (i = 0; i < task->nsurface; i++)
			known |= !strcmp(de->d_name, task->surface[i]);
		if (!known) {
			snprintf(why, why_size, "'%s' is not in the task's surface", de->d_name);
			closedir(d);
			return ATB_ERR_CHECK;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
			snprintf(why, why_size, "'%s' is a %s, not a regular file", de->d_name,
				 S_ISLNK(sb.st_mode) ? "symlink" : S_ISDIR(sb.st_mode) ? "folder"
											: "special file");
			closedir(d);
			return ATB_ERR_CHECK;
		}
		have_first |= !strcmp(de->d_name, task->surface[0]);
	}
	closedir(d);
	/* Surface names are checked by the task loader; refuse again, cheaply. */
	for (i = 0; i < task->nsurface; i++)
		if (task->surface[i][0] == '/' || strstr(task->surface[i], "..") ||
		    strchr(task->surface[i], '/')) {
			snprintf(why, why_size, "surface name '%s' leaves the candidate folder",
				 task->surface[i]);
			return ATB_ERR_CHECK;
		}
	if (!have_first) {
		snprintf(why, why_size, "the candidate lacks '%s'", task->surface[0]);
		return ATB_ERR_CHECK;
	}
	return ATB_OK;
}

/* ---- hashes of what the candidate must not touch ---- */

static enum atb_status hs_push(struct atbi_hash_set *hs, const char *path, const char *sha,
			       struct atb_error *err)
{
	if (hs->n == hs->cap) {
		size_t cap = hs->cap ? hs->cap * 2 : 32;
		struct atbi_hashed_file *f;

		if (cap > HASH_MAX_FILES)
			return atb_error_set(err, ATB_ERR_IO, "too many files to hash under '%s'", path);
		f = atb_realloc(hs->files, cap * sizeof(*f));
		if (!f)
			return atb_error_set(err, ATB_ERR_NOMEM, "cannot hash files: out of memory");
		hs->files = f;
		hs->cap = cap;
	}
	hs->files[hs->n].path = atb_strdup(path);
	if (!hs->files[hs->n].path)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot hash files: out of memory");
	snprintf(hs->files[hs->n].sha256, sizeof(hs->files[hs->n].sha256), "%s", sha);
	hs->n++;
	return ATB_OK;
}

static enum atb_status hash_walk(struct atbi_hash_set *hs, const char *path, int depth,
				 struct atb_error *err)
{
	char sha[65], sub[4096];
	struct stat sb;
	enum atb_status st;

	if (lstat(path, &sb) != 0)
		return atb_error_set(err, ATB_ERR_IO, "cannot hash '%s': %s", path, strerror(errno));
	if (S_ISLNK(sb.st_mode)) {
		char target[4096], buf[4200];
		ssize_t k = readlink(path, target, sizeof(target) - 1);

		if (k < 0)
			return atb_error_set(err, ATB_ERR_IO, "cannot read link '%s'", path);
		target[k] = '\0';
		snprintf(buf, sizeof(buf), "symlink:%s", target);
		if (atbi_sha256_hex(buf, strlen(buf), sha))
			return atb_error_set(err, ATB_ERR_INTERNAL, "cannot hash '%s'", path);
		return hs_push(hs, path, sha, err);
	}
	if (S_ISREG(sb.st_mode)) {
		char *data = NULL;
		size_t len = 0;

		st = atbi_read_file(path, &data, &len, err);
		if (st)
			return st;
		st = atbi_sha256_hex(data, len, sha);
		atb_free(data);
		if (st)
			return atb_error_set(err, ATB_ERR_INTERNAL, "cannot hash '%s'", path);
		return hs_push(hs, path, sha, err);
	}
	if (S_ISDIR(sb.st_mode)) {
		struct dirent *de;
		DIR *d;

		if (depth >= HASH_MAX_DEPTH)
			return atb_error_set(err, ATB_ERR_IO, "folder '%s' is nested too deep", path);
		/* the folder itself: a new or removed entry shows up below */
		d = opendir(path);
		if (!d)
			return atb_error_set(err, ATB_ERR_IO, "cannot read '%s': %s", path,
					     strerror(errno));
		st = ATB_OK;
		while (st == ATB_OK && (de = readdir(d))) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
			st = hash_walk(hs, sub, depth + 1, err);
		}
		closedir(d);
		return st;
	}
	/* a fifo or socket: record that it exists */
	if (atbi_sha256_hex("special", 7, sha))
		return atb_error_set(err, ATB_ERR_INTERNAL, "cannot hash '%s'", path);
	return hs_push(hs, path, sha, err);
}

enum atb_status atbi_hash_add(struct atbi_hash_set *hs, const char *path, struct atb_error *err)
{
	return hash_walk(hs, path, 0, err);
}

static int cmp_hashed(const void *a, const void *b)
{
	return strcmp(((const struct atbi_hashed_file *)a)->path,
		      ((const struct atbi_hashed_file *)b)->path);
}

void atbi_hash_sort(struct atbi_hash_set *hs)
{
	if (hs->n > 1)
		qsort(hs->files, hs->n, sizeof(hs->files[0]), cmp_hashed);
}

int atbi_hash_diff(const struct atbi_hash_set *before, const struct atbi_hash_set *after,
		   char *what, size_t what_size)
{
	size_t i = 0, j = 0;

	what[0] = '\0';
	while (i < before->n || j < after->n) {
		int c = i == before->n ? 1 : j == after->n ? -1
			: strcmp(before->files[i].path, after->files[j].path);

		if (c < 0) {
			snprintf(what, what_size, "removed '%s'", before->files[i].path);
			return 1;
		}
		if (c > 0) {
			snprintf(what, what_size, "added '%s'", after->files[j].path);
			return 1;
		}
		if (strcmp(before->files[i].sha256, after->files[j].sha256)) {
			snprintf(what, what_size, "changed '%s'", before->files[i].path);
			return 1;
		}
		i++;
		j++;
	}
	return 0;
}

void atbi_hash_release(struct atbi_hash_set *hs)
{
	size_t i;

	if (!hs)
		return;
	for (i = 0; i < hs->n; i++)
		atb_free(hs->files[i].path);
	atb_free(hs->files);
	memset(hs, 0, sizeof(*hs));
}

/* ---- correctness events ---- */

static const char *jstr(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "?";
}

static void describe_bad(const json_t *ev, char *buf, size_t size)
{
	const json_t *fb = json_object_get(ev, "first_bad");
	char ref[32] = "null", got[32] = "null";

	if (json_is_number(json_object_get(fb, "ref")))
		snprintf(ref, sizeof(ref), "%.9g", json_number_value(json_object_get(fb, "ref")));
	if (json_is_number(json_object_get(fb, "got")))
		snprintf(got, sizeof(got), "%.9g", json_number_value(json_object_get(fb, "got")));
	if (json_is_object(fb))
		snprintf(buf, size,
			 "wrong output on seed %lld, set '%s', input '%s': '%s'[%lld] is %s, "
			 "reference %s (%lld bad, %lld nan)",
			 (long long)json_integer_value(json_object_get(ev, "seed")),
			 jstr(ev, "set"), jstr(ev, "input"), jstr(fb, "buffer"),
			 (long long)json_integer_value(json_object_get(fb, "index")), got, ref,
			 (long long)json_integer_value(json_object_get(ev, "bad_count")),
			 (long long)json_integer_value(json_object_get(ev, "nan_count")));
	else
		snprintf(buf, size,
			 "kernel failed on seed %lld, set '%s', input '%s' (status %lld)",
			 (long long)json_integer_value(json_object_get(ev, "seed")),
			 jstr(ev, "set"), jstr(ev, "input"),
			 (long long)json_integer_value(json_object_get(ev, "kernel_status")));
}

void atbi_gate_correctness_event(struct atbi_correctness_state *st, const json_t *ev)
{
	const char *arm = jstr(ev, "arm");
	const json_t *gates = json_object_get(ev, "gates");
	const json_t *mut = json_object_get(json_object_get(gates, "input_mutation"), "mutated");
	const json_t *reuse = json_object_get(gates, "result_reuse");
	int pass = json_is_true(json_object_get(ev, "pass"));

	st->events++;
	if (!strcmp(arm, "naive")) {
		if (!pass && !st->naive_wrong) {
			char d[400];

			describe_bad(ev, d, sizeof(d));
			st->naive_wrong = 1;
			snprintf(st->naive_reason, sizeof(st->naive_reason),
				 "the task's naive baseline is wrong (a task bug): %s", d);
		}
		return;
	}
	if (strcmp(arm, "candidate"))
		return;
	st->candidate_events++;
	if (!pass)
		st->failures++;
	if (json_array_size(mut) && !st->mutation) {
		st->mutation = 1;
		snprintf(st->mutation_reason, sizeof(st->mutation_reason),
			 "the candidate wrote its input '%s' on seed %lld, set '%s', input '%s'",
			 json_string_value(json_array_get(mut, 0)) ? json_string_value(json_array_get(mut, 0)) : "?",
			 (long long)json_integer_value(json_object_get(ev, "seed")), jstr(ev, "set"),
			 jstr(ev, "input"));
		st->mutation_event = json_deep_copy(ev);
	}
	if (json_array_size(json_object_get(json_object_get(gates, "output_aliasing"), "overlaps")) &&
	    !st->aliasing) {
		const json_t *o = json_array_get(json_object_get(json_object_get(gates,
							"output_aliasing"), "overlaps"), 0);
		const char *a = json_string_value(json_array_get(o, 0));
		const char *b = json_string_value(json_array_get(o, 1));

		st->aliasing = 1;
		snprintf(st->aliasing_reason, sizeof(st->aliasing_reason),
			 "the candidate's output '%s' overlaps buffer '%s' on seed %lld, set '%s', "
			 "input '%s'", a ? a : "?", b ? b : "?",
			 (long long)json_integer_value(json_object_get(ev, "seed")), jstr(ev, "set"),
			 jstr(ev, "input"));
		st->aliasing_event = json_deep_copy(ev);
	}
	if (pass && json_is_true(json_object_get(reuse, "checked")) &&
	    !json_is_true(json_object_get(reuse, "follows_inputs")) && !st->wrong)
		st->reuse_before_wrong = 1;
	if (!pass && !st->wrong) {
		st->wrong = 1;
		describe_bad(ev, st->wrong_reason, sizeof(st->wrong_reason));
		st->wrong_event = json_deep_copy(ev);
	}
	if (pass && json_is_true(json_object_get(reuse, "checked")) &&
	    !json_is_true(json_object_get(reuse, "follows_inputs")) && !st->reuse) {
		st->reuse = 1;
		snprintf(st->reuse_reason, sizeof(st->reuse_reason),
			 "the candidate's outputs do not follow fresh inputs (step '%s') on seed %lld, "
			 "set '%s', input '%s': it reuses results across calls",
			 json_string_value(json_object_get(reuse, "failed_step"))
				 ? json_string_value(json_object_get(reuse, "failed_step")) : "?",
			 (long long)json_integer_value(json_object_get(ev, "seed")), jstr(ev, "set"),
			 jstr(ev, "input"));
		st->reuse_event = json_deep_copy(ev);
	}
	if (pass && json_is_true(json_object_get(reuse, "checked")) &&
	    !json_is_true(json_object_get(reuse, "follows_inputs")) &&
	    !st->reuse_same_buffers &&
	    !strcmp(jstr(reuse, "failed_step"), "same_buffers_new_inputs")) {
		st->reuse_same_buffers = 1;
		snprintf(st->reuse_reason, sizeof(st->reuse_reason),
			 "the candidate returned a stale result when its old buffers got new inputs "
			 "(step 'same_buffers_new_inputs') on seed %lld, set '%s', input '%s': it "
			 "reuses results across calls",
			 (long long)json_integer_value(json_object_get(ev, "seed")), jstr(ev, "set"),
			 jstr(ev, "input"));
		json_decref(st->reuse_event);
		st->reuse_event = json_deep_copy(ev);
	}
}

const char *atbi_gate_correctness_verdict(const struct atbi_correctness_state *st,
					  const char **reason, const json_t **event)
{
	if (st->mutation) {
		*reason = st->mutation_reason;
		*event = st->mutation_event;
		return ATB_GATE_INPUT_MUTATION;
	}
	if (st->aliasing) {
		*reason = st->aliasing_reason;
		*event = st->aliasing_event;
		return ATB_GATE_OUTPUT_ALIASING;
	}
	/* right on fresh buffers, wrong when old buffers get new contents: that
	   is a cache, the precise diagnosis (the stale cache also makes some
	   plain checks fail); so is a reuse fact before any wrong output (right,
	   then wrong on the same inputs in other buffers: it read an earlier
	   call's result, or the poison where that result used to be); other
	   reuse failures are a wrong kernel's */
	if (st->reuse && (st->reuse_same_buffers || st->reuse_before_wrong)) {
		*reason = st->reuse_reason;
		*event = st->reuse_event;
		return ATB_GATE_RESULT_REUSE;
	}
	if (st->wrong) {
		*reason = st->wrong_reason;
		*event = st->wrong_event;
		return ATB_GATE_CORRECTNESS;
	}
	if (st->reuse) {
		*reason = st->reuse_reason;
		*event = st->reuse_event;
		return ATB_GATE_RESULT_REUSE;
	}
	*reason = NULL;
	*event = NULL;
	return NULL;
}

void atbi_correctness_release(struct atbi_correctness_state *st)
{
	if (!st)
		return;
	json_decref(st->mutation_event);
	json_decref(st->wrong_event);
	json_decref(st->reuse_event);
	json_decref(st->aliasing_event);
	memset(st, 0, sizeof(*st));
}

/* ---- cuda: side stream and throttling ---- */

static long long jll(const json_t *ev, const char *key)
{
	return (long long)json_integer_value(json_object_get(ev, key));
}

int atbi_gate_side_stream(const json_t *ev, const struct atb_protocol *p, char *why,
			  size_t why_size)
{
	if (strcmp(jstr(ev, "event"), "side_stream") || strcmp(jstr(ev, "arm"), "candidate"))
		return 0;
	if (!strcmp(jstr(ev, "phase"), "timed")) {
		/* PROTO: gates.side_stream (version 7 on) */
		long long t = jll(ev, "event_ns"), x = jll(ev, "device_extra_ns"),
			  rx = jll(ev, "reference_extra_ns"), excess = x - rx;

		if (!p || !p->gates.has_side_stream ||
		    !((double)excess > p->gates.side_stream_abs_slack_us * 1e3 &&
		      (double)excess > p->gates.side_stream_rel_tolerance * (double)t))
			return 0;
		snprintf(why, why_size,
			 "the candidate left work running after its timed windows on seed %lld: "
			 "after each trial's stop event the device stayed busy a median %lld ns, "
			 "the reference's %lld ns (median trial %lld ns; allowed: %.0f ns and %g of "
			 "the trial more); work on another stream escapes the timing",
			 jll(ev, "seed"), x, rx, t, p->gates.side_stream_abs_slack_us * 1e3,
			 p->gates.side_stream_rel_tolerance);
		return 1;
	}
	if (!json_is_true(json_object_get(ev, "escaped")))
		return 0;
	snprintf(why, why_size,
		 "the candidate left work running after its timed window on seed %lld: the device "
		 "was busy %lld ns more after the runner's stream finished (window %lld ns); work on "
		 "another stream escapes the timing",
		 (long long)json_integer_value(json_object_get(ev, "seed")),
		 (long long)json_integer_value(json_object_get(ev, "device_extra_ns")),
		 (long long)json_integer_value(json_object_get(ev, "event_ns")));
	return 1;
}

/* ---- torch: the shared interpreter ---- */

int atbi_gate_tamper(const json_t *ev, char *why, size_t why_size)
{
	const json_t *ch = json_object_get(ev, "changes"), *c;
	size_t i, n = json_array_size(ch), len;

	if (strcmp(jstr(ev, "event"), "tamper") || !n)
		return 0;
	snprintf(why, why_size, "the candidate changed what the reference runs on in their "
		 "shared interpreter (first seen at %s): ",
		 jstr(json_array_get(ch, 0), "where"));
	json_array_foreach(ch, i, c) {
		len = strlen(why);
		if (i == 4 && n > 5) {
			snprintf(why + len, why_size - len, "; and %zu more", n - i);
			break;
		}
		snprintf(why + len, why_size - len, "%s%s", i ? "; " : "", jstr(c, "what"));
	}
	return 1;
}

int atbi_gate_timed_checks(const json_t *ev, char *why, size_t why_size)
{
	const json_t *tc = json_object_get(ev, "timed_checks"), *fb;
	json_int_t failed = json_integer_value(json_object_get(tc, "failed"));
	size_t n;

	if (strcmp(jstr(ev, "event"), "samples") || strcmp(jstr(ev, "arm"), "candidate") ||
	    !json_is_object(tc) || failed <= 0)
		return 0;
	fb = json_object_get(tc, "first_bad");
	n = (size_t)snprintf(why, why_size,
			     "the candidate's outputs were wrong after timed calls on seed %lld: "
			     "round %lld first, %lld of %lld checked rounds failed (%lld bad "
			     "elements, %lld NaN, max abs error %.6g)",
			     (long long)json_integer_value(json_object_get(ev, "seed")),
			     (long long)json_integer_value(json_object_get(tc, "first_failed_round")),
			     (long long)failed,
			     (long long)json_integer_value(json_object_get(tc, "rounds_checked")),
			     (long long)json_integer_value(json_object_get(tc, "bad_count")),
			     (long long)json_integer_value(json_object_get(tc, "nan_count")),
			     json_number_value(json_object_get(tc, "max_abs_err")));
	if (json_is_object(fb) && n < why_size) {
		const json_t *g = json_object_get(fb, "got");
		char got[48];

		/* a null got is the poison left in place: NaN, never written */
		if (json_is_number(g))
			snprintf(got, sizeof(got), "%.6g", json_number_value(g));
		else
			snprintf(got, sizeof(got), "NaN (unwritten)");
		snprintf(why + n, why_size - n, "; %s[%lld] is %s, the reference %.6g: work "
			 "skipped or cached while timed",
			 jstr(fb, "buffer"), (long long)json_integer_value(json_object_get(fb, "index")),
			 got, json_number_value(json_object_get(fb, "ref")));
	}
	return 1;
}

/* ---- hang and background ---- */

void atbi_hang_watch(const struct atb_protocol *p, struct atb_runner_watch *w)
{
	int has = p->gates.has_hang;

	w->startup_s = has ? p->gates.hang_startup_s : ATBI_HANG_STARTUP_S;
	w->min_s = has ? p->gates.hang_min_s : ATBI_HANG_MIN_S;
	w->factor = has ? p->gates.hang_factor : ATBI_HANG_FACTOR;
	w->progress_ms = has ? p->gates.hang_progress_ms : ATBI_HANG_PROGRESS_MS;
}

void atbi_background_limits(const struct atb_protocol *p, struct atbi_background_limits *l)
{
	int has = p->gates.has_background;

	l->max_cpu_share = has ? p->gates.background_max_cpu_share : ATBI_BACKGROUND_MAX_CPU_SHARE;
	l->slack_ns = (int64_t)(1e6 * (has ? p->gates.background_abs_slack_ms
					   : ATBI_BACKGROUND_ABS_SLACK_MS));
}

int atbi_gate_background(const json_t *ev, const struct atbi_background_limits *l, char *why,
			 size_t why_size)
{
	json_int_t wall = json_integer_value(json_object_get(ev, "wall_ns"));
	/* the torch backend's: other threads less PyTorch's own pools (those
	   alive before any candidate code, runner/watch.c) */
	const json_t *untrusted = json_object_get(ev, "untrusted_threads_cpu_ns");
	json_int_t thr = json_integer_value(untrusted ? untrusted
						      : json_object_get(ev, "other_threads_cpu_ns"));
	json_int_t prc = json_integer_value(json_object_get(ev, "other_processes_cpu_ns"));
	json_int_t p0 = json_integer_value(json_object_get(ev, "processes_group_start"));
	json_int_t p1 = json_integer_value(json_object_get(ev, "processes_group_end"));
	double other = (double)(thr > 0 ? thr : 0) + (double)(prc > 0 ? prc : 0);
	double allowed = l->max_cpu_share * (double)(wall > 0 ? wall : 0) + (double)l->slack_ns;
	json_int_t procs = p0 > p1 ? p0 : p1;

	if (strcmp(jstr(ev, "event"), "background"))
		return 0;
	/* seen from outside: the runner's CPU time comes in 10 ms ticks, less
	   its timing thread's in ns: one tick more of slack */
	if (!strcmp(jstr(ev, "seen_from"), "harness"))
		allowed += 1e7;
	if (!(other > allowed))
		return 0;
	if (!strcmp(jstr(ev, "seen_from"), "harness")) {
		snprintf(why, why_size,
			 "work ran beside the timed calls on seed %lld (group %s), seen from outside "
			 "the runner: the job's processes used %.1f ms of CPU besides the timing "
			 "thread's in %.1f ms of wall time (%.1f%%; at most %.1f%% + %.0f ms), %lld "
			 "processes in the job: a thread or process stealing CPU from the baseline",
			 (long long)json_integer_value(json_object_get(ev, "seed")), jstr(ev, "group"),
			 (double)thr / 1e6, (double)wall / 1e6,
			 wall > 0 ? 100.0 * other / (double)wall : 0.0, 100.0 * l->max_cpu_share,
			 (double)l->slack_ns / 1e6 + 10,
			 (long long)json_integer_value(json_object_get(ev, "job_processes")));
		return 1;
	}
	snprintf(why, why_size,
		 "work ran beside the timed calls on seed %lld (group %s): other threads%s used "
		 "%.1f ms and other processes %.1f ms of CPU in %.1f ms of wall time (%.1f%%; at "
		 "most %.1f%% + %.0f ms), %lld processes beside the runner, threads %lld before "
		 "any candidate code, %lld at the group's start, %lld at its end: a thread or "
		 "process stealing CPU from the baseline",
		 (long long)json_integer_value(json_object_get(ev, "seed")), jstr(ev, "group"),
		 untrusted ? " (not PyTorch's pools)" : "",
		 (double)thr / 1e6, (double)prc / 1e6, (double)wall / 1e6,
		 wall > 0 ? 100.0 * other / (double)wall : 0.0, 100.0 * l->max_cpu_share,
		 (double)l->slack_ns / 1e6, (long long)procs,
		 (long long)json_integer_value(json_object_get(ev, "threads_at_start")),
		 (long long)json_integer_value(json_object_get(ev, "threads_group_start")),
		 (long long)json_integer_value(json_object_get(ev, "threads_group_end")));
	return 1;
}

int atbi_gate_throttle(size_t throttled, size_t total, double max_share, double *share)
{
	*share = total ? (double)throttled / (double)total : 0;
	return *share > max_share;
}

/* ---- the SM clock per trial (PROTO: gates.clocks) ---- */

int atbi_clocks_add(struct atbi_clocks_state *s, const json_t *ev, int arm)
{
	const json_t *a = json_object_get(ev, "sm_mhz"), *v;
	size_t i;

	if (!json_is_array(a))
		return 0;
	json_array_foreach(a, i, v) {
		json_int_t mhz = json_integer_value(v);

		if (mhz <= 0 || mhz > 100000)
			continue;  /* a failed read */
		if (s->nall == s->cap) {
			size_t cap = s->cap ? 2 * s->cap : 256;
			unsigned *p = atb_realloc(s->all, cap * sizeof(*p));

			if (!p)
				return -1;
			s->all = p;
			s->cap = cap;
		}
		s->all[s->nall++] = (unsigned)mhz;
		if (arm == 0 || arm == 1) {
			s->sum[arm] += (double)mhz;
			s->n[arm]++;
		}
	}
	return 0;
}

void atbi_clocks_gpu_state(struct atbi_clocks_state *s, const json_t *ev)
{
	const char *side[] = {"before", "after"};
	size_t k;

	for (k = 0; k < 2; k++) {
		json_int_t m = json_integer_value(
			json_object_get(json_object_get(ev, side[k]), "sm_clock_max_mhz"));

		if (m > 0 && m < 100000 && (unsigned)m > s->max_mhz)
			s->max_mhz = (unsigned)m;
	}
}

void atbi_clocks_release(struct atbi_clocks_state *s)
{
	atb_free(s->all);
	memset(s, 0, sizeof(*s));
}

int atbi_gate_clocks(const struct atbi_clocks_state *s, double floor_ratio,
		     double max_share_below, double max_rel_difference,
		     struct atbi_clocks_facts *f)
{
	unsigned top = s->max_mhz;
	size_t i;

	memset(f, 0, sizeof(*f));
	if (!s->nall)
		return -1;
	/* without NVML's maximum, the highest clock seen stands for it */
	for (i = 0; !s->max_mhz && i < s->nall; i++)
		if (s->all[i] > top)
			top = s->all[i];
	f->max_mhz = top;
	f->floor_mhz = (unsigned)(floor_ratio * (double)top);
	f->total = s->nall;
	for (i = 0; i < s->nall; i++)
		if ((double)s->all[i] < floor_ratio * (double)top)
			f->below++;
	f->share_below = (double)f->below / (double)f->total;
	if (s->n[0] && s->n[1]) {
		f->mean_base_mhz = s->sum[0] / (double)s->n[0];
		f->mean_cand_mhz = s->sum[1] / (double)s->n[1];
		f->rel_difference = fabs(f->mean_base_mhz / f->mean_cand_mhz - 1);
	}
	if (f->share_below > max_share_below)
		return 1;
	if (s->n[0] && s->n[1] && f->rel_difference > max_rel_difference)
		return 2;
	return 0;
}

/* ---- floor and drift ---- */

long atbi_gate_floor(const double *medians_ns, size_t n, double floor_ns, double margin)
{
	size_t i;

	if (!(floor_ns > 0))
		return -1;
	for (i = 0; i < n; i++)
		if (!(medians_ns[i] >= margin * floor_ns))
			return (long)i;
	return -1;
}

double atbi_median_of(const double *v, size_t n)
{
	double m;

	if (!n || atb_stats_median(v, n, &m, NULL))
		return NAN;
	return m;
}

int atbi_gate_drift(const double *beside_ns, size_t n, const double *alone_ns, size_t m,
		    double tolerance, double *ratio)
{
	double a = atbi_median_of(beside_ns, n), b = atbi_median_of(alone_ns, m);

	*ratio = 0;
	if (!(a > 0) || !(b > 0) || !isfinite(a) || !isfinite(b))
		return 0;
	*ratio = a / b;
	return *ratio <= 1 + tolerance && *ratio >= 1 / (1 + tolerance);
}

int atbi_gate_drift_paired(const double *beside_ns, const double *alone_ns, size_t n,
			   double tolerance, double *ratio, double *spread, int *consistent)
{
	double q[ATB_RUNNER_MAX_SEEDS], mean = 0, ss = 0, hi = 1 + tolerance, lo = 1 / hi;
	size_t k, above = 0, below = 0;

	*ratio = 0;
	*spread = INFINITY;
	*consistent = 0;
	if (!n || n > ATB_RUNNER_MAX_SEEDS)
		return 0;
	for (k = 0; k < n; k++) {
		if (!(beside_ns[k] > 0) || !(alone_ns[k] > 0) || !isfinite(beside_ns[k]) ||
		    !isfinite(alone_ns[k]))
			return 0;
		q[k] = beside_ns[k] / alone_ns[k];
		mean += q[k];
		above += q[k] > hi;
		below += q[k] < lo;
	}
	mean /= (double)n;
	for (k = 0; k < n; k++)
		ss += (q[k] - mean) * (q[k] - mean);
	*spread = n > 1 ? sqrt(ss / (double)(n - 1)) / mean : 0;
	*ratio = atbi_median_of(q, n);
	*consistent = above == n || below == n;
	return *ratio <= hi && *ratio >= lo;
}
