/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The LLM proposer of a kernel task's knobs: the prompt (a fixed template
 * whose digest is its first line, the task's knob space, the run's history
 * with every verdict: speedup and interval, or the refusal and its reason),
 * one recorded model call per attempt (src/llm: the call audit and the
 * alarms), and the reply read as JSON over the knob space and checked
 * against it.  A reply outside the space is a failed attempt, never a
 * candidate: the harness builds only declared knob values.
 *
 * The code proposer (llm-code) asks for the surface files themselves: its
 * prompt comes from a template file under tasks/prompts/ (covered by the
 * protocol manifest, so a changed template refuses to measure until the
 * manifest is rewritten), and its reply goes through atb_llm_reply_parse
 * and atb_llm_reply_write, the only way a model's text reaches a file.
 *
 * The engine proposer (llm on an engine task) asks for a launch
 * configuration: JSON {"config": {FLAG: VALUE}} under a JSON schema built
 * from the task's search flags, read back with atb_engine_config_from_json,
 * the check every configuration of a flag search passes; a reply outside
 * the space is a failed attempt, never started.
 *
 * Does not: measure or judge (loop.c hands every candidate to
 * atb_measure_candidate or atb_engine_ab, the same gates as atb measure
 * and atb engine ab).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "atb/alloc.h"
#include "atb/engine.h"
#include "atb/llm.h"
#include "loop/llm_proposer.h"
#include "banned.h"

/* The template; its SHA-256 goes with every call (the first line of the system message). */
static const char knobs_template[] =
	"You tune a %s kernel task of atb by choosing compile-time knobs.\n"
	"Task: %s. %s\n"
	"Every candidate is measured against the honest baseline on paired seeds;\n"
	"only a faster, correct candidate counts.\n"
	"Reply with one JSON object and nothing else:\n"
	"{\"knobs\": {\"NAME\": \"VALUE\", ...}, \"cflags\": \"CHOICE\"}\n"
	"with every knob below given one of its listed values and cflags one of its choices.\n";

struct sbuf {
	char *p;
	size_t n, cap;
	int bad;
};

static void put(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int need;

	if (b->bad)
		return;
	for (;;) {
		va_start(ap, fmt);
		need = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
		va_end(ap);
		if (need < 0) {
			b->bad = 1;
			return;
		}
		if (b->p && b->n + (size_t)need < b->cap) {
			b->n += (size_t)need;
			return;
		}
		{
			size_t cap = b->cap ? b->cap : 1024;
			char *np;

			while (cap <= b->n + (size_t)need)
				cap *= 2;
			np = atb_realloc(b->p, cap);
			if (!np) {
				b->bad = 1;
				return;
			}
			b->p = np;
			b->cap = cap;
		}
	}
}

/* A time per call in ns, as the model reads it. */
static void put_ns(struct sbuf *b, double ns)
{
	if (ns >= 1e6)
		put(b, "%.3f ms", ns / 1e6);
	else
		put(b, "%.3f us", ns / 1e3);
}

/* A count with an SI prefix and a unit ("201.3 MB", "1.80 PFLOP/s"). */
static void put_si(struct sbuf *b, double v, const char *unit)
{
	static const char *const prefix[] = {"", "k", "M", "G", "T", "P", "E"};
	size_t i = 0;

	while (v >= 1000 && i + 1 < sizeof(prefix) / sizeof(*prefix)) {
		v /= 1000;
		i++;
	}
	put(b, "%.1f %s%s", v, prefix[i], unit);
}

/* One side of the roofline: "memory 18.530 us (524.3 kB at 28.3 GB/s)". */
static void put_bound(struct sbuf *b, const char *what, double ns, double amount, double rate,
		      const char *unit)
{
	char per_s[16];

	snprintf(per_s, sizeof(per_s), "%s/s", unit);
	put(b, "%s ", what);
	put_ns(b, ns);
	put(b, " (");
	put_si(b, amount, unit);
	put(b, " at ");
	put_si(b, rate, per_s);
	put(b, ")");
}

/*
 * Profiling feedback (issue 14, item 2): a measured iteration's time per
 * call, the candidate's and the honest baseline's (the medians of the
 * stored result's per-seed medians), after its speedup; then, where the
 * result has a physical floor (PROTO: gates.physical_floor), where that time
 * stands on the box's roofline: the memory and compute floors of one call
 * (its bytes over the bandwidth, its flops over the peak, the rates the gate
 * used), which one binds, and the candidate's time over it.  Nothing when
 * the iteration has no result or its seeds cannot be read.
 */
static void put_times(struct sbuf *b, struct atb_store *s, const struct atb_iteration_row *r)
{
	struct atb_result_floor fl;
	double base, cand;
	struct atb_error e;

	atb_error_clear(&e);
	if (r->result_id <= 0 || atb_store_result_medians(s, r->result_id, &base, &cand, &e))
		return;
	put(b, "; per call: candidate ");
	put_ns(b, cand);
	put(b, ", baseline ");
	put_ns(b, base);
	if (atb_store_result_floor(s, r->result_id, &fl, &e) || !(cand > 0))
		return;
	put(b, "; floor: ");
	if (fl.memory_ns > 0)
		put_bound(b, "memory", fl.memory_ns, fl.bytes, fl.mem_bw_bytes_per_s, "B");
	if (fl.memory_ns > 0 && fl.compute_ns > 0)
		put(b, ", ");
	if (fl.compute_ns > 0)
		put_bound(b, "compute", fl.compute_ns, fl.flops, fl.peak_flops_per_s, "FLOP");
	if (fl.memory_ns > 0 && fl.compute_ns > 0)
		put(b, ", %s-bound", fl.memory_ns >= fl.compute_ns ? "memory" : "compute");
	put(b, "; candidate at %.1fx its floor", cand / fl.floor_ns);
}

static enum atb_status build_prompt(const struct atb_task *task, struct atb_store *s,
				    const char *history_run, int64_t k, char **system, char **prompt,
				    struct atb_error *err)
{
	struct atb_iteration_row *rows = NULL;
	struct sbuf sy = {0}, pr = {0};
	char digest[65];
	size_t n = 0, i, j;
	enum atb_status st;

	*system = *prompt = NULL;
	if (atbi_sha256_hex(knobs_template, sizeof(knobs_template) - 1, digest))
		return atb_error_set(err, ATB_ERR_INTERNAL, "cannot hash the prompt template");
	put(&sy, "atb prompt template knobs-1 sha256:%s\n", digest);
	put(&sy, knobs_template, task->kind, task->name, task->description ? task->description : "");
	put(&pr, "Knobs (the first value is the default):\n");
	for (i = 0; i < task->nknobs; i++) {
		put(&pr, "  %s:", task->knobs[i].name);
		for (j = 0; j < task->knobs[i].nvalues; j++)
			put(&pr, " \"%s\"", task->knobs[i].values[j]);
		put(&pr, "\n");
	}
	put(&pr, "  cflags:");
	for (j = 0; j < task->nflag_choices; j++)
		put(&pr, " \"%s\"", task->flag_choices[j]);
	if (!task->nflag_choices)
		put(&pr, " \"\"");
	put(&pr, "\n\nHistory of this run (iteration, knobs, verdict):\n");
	st = atb_store_list_iterations(s, history_run, &rows, &n, err);
	if (st) {
		atb_free(sy.p);
		atb_free(pr.p);
		return st;
	}
	/* the iterations before k: on a replay the recorded run has later ones too */
	for (i = 0; i < n && rows[i].k < k; i++) {
		const struct atb_iteration_row *r = &rows[i];

		put(&pr, "  %" PRId64 ": %s -> %s", r->k, r->knobs_json, r->outcome);
		if (r->speedup > 0)
			put(&pr, ", %.4fx [%.4f, %.4f] vs the honest baseline", r->speedup, r->ci_low,
			    r->ci_high);
		put_times(&pr, s, r);
		if (r->reason && r->reason[0])
			put(&pr, " (%.300s)", r->reason);
		put(&pr, "\n");
	}
	if (!i)
		put(&pr, "  (none yet)\n");
	put(&pr, "\nPropose the next knobs.\n");
	atb_store_iterations_free(rows, n);
	if (sy.bad || pr.bad) {
		atb_free(sy.p);
		atb_free(pr.p);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot build the prompt: out of memory");
	}
	*system = sy.p;
	*prompt = pr.p;
	return ATB_OK;
}

/* The reply's knobs into out, in the task's order; 0, or why not in why. */
static int read_knobs(const struct atb_task *task, const char *content,
		      struct atb_knob_assignment *out, char *why, size_t why_size)
{
	json_t *o, *k, *v, *cf;
	struct atb_error e;
	size_t i;

	atb_alloc_install_json();
	memset(out, 0, sizeof(*out));
	o = json_loads(content, JSON_REJECT_DUPLICATES, NULL);
	k = json_object_get(o, "knobs");
	cf = json_object_get(o, "cflags");
	if (!json_is_object(k) || (cf && !json_is_string(cf))) {
		snprintf(why, why_size, "the reply is not {\"knobs\": {...}, \"cflags\": \"...\"}");
		json_decref(o);
		return -1;
	}
	if (json_object_size(k) != task->nknobs) {
		snprintf(why, why_size, "the reply gives %zu knobs, the task has %zu",
			 json_object_size(k), task->nknobs);
		json_decref(o);
		return -1;
	}
	for (i = 0; i < task->nknobs; i++) {
		v = json_object_get(k, task->knobs[i].name);
		if (!json_is_string(v) && !json_is_integer(v)) {
			snprintf(why, why_size, "the reply has no value for knob '%s'",
				 task->knobs[i].name);
			json_decref(o);
			return -1;
		}
		snprintf(out->knobs[i].name, sizeof(out->knobs[i].name), "%s", task->knobs[i].name);
		if (json_is_string(v))
			snprintf(out->knobs[i].value, sizeof(out->knobs[i].value), "%.63s",
				 json_string_value(v));
		else
			snprintf(out->knobs[i].value, sizeof(out->knobs[i].value), "%" JSON_INTEGER_FORMAT,
				 json_integer_value(v));
	}
	out->n = task->nknobs;
	snprintf(out->cflags, sizeof(out->cflags), "%s", cf ? json_string_value(cf) : "");
	json_decref(o);
	atb_error_clear(&e);
	/* the harness builds only declared values (atb_task_check_knobs) */
	if (atb_task_check_knobs(task, out, &e)) {
		snprintf(why, why_size, "%s", e.msg);
		return -1;
	}
	return 0;
}

/* A reply's reader: 0 when content gave the proposal (into out), else why not. */
typedef int reply_reader(const struct atbi_llm_proposer *pp, const char *content, void *out,
			 char *why, size_t why_size);

/*
 * Ask for a JSON proposal up to llm.max_calls_per_iteration times (PROTO),
 * each attempt with its own seed (a server that honours it draws again, the
 * same way on replay), until read() takes a reply.  *got 1 then; else why
 * holds the last attempt's reason.  A failed call is a reason, not an error.
 */
static enum atb_status ask_json(const struct atbi_llm_proposer *pp, int64_t k,
				struct atb_llm_request *rq, reply_reader *read, void *out, int *got,
				char *why, size_t why_size, struct atb_error *err)
{
	enum atb_status st = ATB_OK;
	int attempt;

	rq->expect = ATB_LLM_EXPECT_JSON;
	rq->temperature = 0;
	for (attempt = 0; !st && attempt < pp->protocol->llm.max_calls_per_iteration; attempt++) {
		struct atb_llm_result r;

		rq->has_seed = 1;
		rq->seed = pp->seed * 1000003 + k * 1009 + attempt;
		st = atb_llm_call(pp->client, rq, &r, err);
		if (st == ATB_ERR_LLM) {
			snprintf(why, why_size, "model call failed: %s", r.error);
			st = ATB_OK;
		} else if (!st && r.outcome != ATB_LLM_OK) {
			snprintf(why, why_size, "the model's reply was %s", atb_llm_outcome_name(r.outcome));
		} else if (!st && !read(pp, r.content, out, why, why_size)) {
			*got = 1;
			atb_llm_result_release(&r);
			break;
		}
		atb_llm_result_release(&r);
	}
	return st;
}

static int knobs_reader(const struct atbi_llm_proposer *pp, const char *content, void *out,
			char *why, size_t why_size)
{
	return read_knobs(pp->task, content, out, why, why_size);
}

enum atb_status atbi_llm_propose_knobs(const struct atbi_llm_proposer *pp, int64_t k,
				       struct atb_knob_assignment *out, int *got, char *why,
				       size_t why_size, struct atb_error *err)
{
	struct atb_llm_request rq;
	char *system = NULL, *prompt = NULL;
	enum atb_status st;

	*got = 0;
	why[0] = '\0';
	st = build_prompt(pp->task, pp->store, pp->history_run ? pp->history_run : pp->run_id, k,
			  &system, &prompt, err);
	if (st)
		return st;
	memset(&rq, 0, sizeof(rq));
	rq.system = system;
	rq.prompt = prompt;
	st = ask_json(pp, k, &rq, knobs_reader, out, got, why, why_size, err);
	atb_free(system);
	atb_free(prompt);
	return st;
}

/* ---- the code proposer ---- */

/* A file's text cut to max bytes (a note says so), or "(missing)"; caller frees. */
static char *read_cut(const char *path, size_t max)
{
	struct atb_error e;
	char *data = NULL;
	size_t len = 0;

	if (!path || atbi_read_file(path, &data, &len, &e))
		return atb_strdup("(missing)");
	if (len > max) {
		data[max] = '\0';
		{
			char *p = atb_realloc(data, max + 64);

			if (!p) {
				atb_free(data);
				return NULL;
			}
			data = p;
			snprintf(data + max, 64, "\n... (cut at %zu of %zu bytes)", max, len);
		}
	}
	return data;
}

struct var {
	const char *key;
	const char *val;
};

/* Template text with every {{key}} replaced; ATB_ERR_SCHEMA for an unknown key. */
static enum atb_status render(const char *name, const char *t, const struct var *v, size_t nv,
			      struct sbuf *b, struct atb_error *err)
{
	const char *p = t, *open, *close;
	size_t i;

	while ((open = strstr(p, "{{"))) {
		put(b, "%.*s", (int)(open - p), p);
		close = strstr(open + 2, "}}");
		if (!close)
			return atb_error_set(err, ATB_ERR_SCHEMA, "prompt template '%s': '{{' without '}}'",
					     name);
		for (i = 0; i < nv; i++)
			if (strlen(v[i].key) == (size_t)(close - open - 2) &&
			    !memcmp(v[i].key, open + 2, (size_t)(close - open - 2)))
				break;
		if (i == nv)
			return atb_error_set(err, ATB_ERR_SCHEMA,
					     "prompt template '%s': unknown field '{{%.*s}}'", name,
					     (int)(close - open - 2), open + 2);
		put(b, "%s", v[i].val ? v[i].val : "");
		p = close + 2;
	}
	put(b, "%s", p);
	return ATB_OK;
}

#define CODE_FILE_CUT 16384

/* The history lines of run (the verdicts the model is shown). */
static enum atb_status history_text(struct atb_store *s, const char *run, int64_t k,
				    struct sbuf *b, int *prev_wrote, struct atb_error *err)
{
	struct atb_iteration_row *rows = NULL;
	size_t n = 0, i;
	enum atb_status st;

	*prev_wrote = 0;
	st = atb_store_list_iterations(s, run, &rows, &n, err);
	if (st)
		return st;
	for (i = 0; i < n && rows[i].k < k; i++) {
		const struct atb_iteration_row *r = &rows[i];
		json_t *o = json_loads(r->knobs_json, 0, NULL), *f = json_object_get(o, "files"), *v;
		const char *key;

		put(b, "  %" PRId64 ":", r->k);
		if (r->k == k - 1)
			*prev_wrote = json_is_object(f) && json_object_size(f);
		if (json_is_object(f) && json_object_size(f))
			json_object_foreach(f, key, v)
				put(b, " %s %.12s", key, json_string_value(v) ? json_string_value(v) : "?");
		else
			put(b, " (no candidate)");
		put(b, " -> %s", r->outcome);
		if (r->speedup > 0)
			put(b, ", %.4fx [%.4f, %.4f] vs the honest baseline", r->speedup, r->ci_low,
			    r->ci_high);
		put_times(b, s, r);
		if (r->reason && r->reason[0])
			put(b, " (%.300s)", r->reason);
		put(b, "\n");
		json_decref(o);
	}
	if (!i)
		put(b, "  (none yet)\n");
	atb_store_iterations_free(rows, n);
	return ATB_OK;
}

static int is_torch(const struct atb_task *t)
{
	return t->kind && !strcmp(t->kind, ATB_TASK_KIND_TORCH);
}

/*
 * Template `tname` from tasks/prompts/: *text holds its system part (cut at
 * the %%user%% line), *user its user part (inside *text: one free), digest
 * its SHA-256 over the whole file, which goes with every call.
 */
static enum atb_status load_template(const struct atbi_llm_proposer *pp, const char *tname,
				     char **text, char **user, char digest[65], struct atb_error *err)
{
	char path[4096];
	size_t len = 0;
	enum atb_status st;

	snprintf(path, sizeof(path), "%s/tasks/prompts/%s.txt", pp->home, tname);
	st = atbi_read_file(path, text, &len, err);
	if (st)
		return st;
	*user = strstr(*text, "%%user%%\n");
	if (!*user) {
		atb_free(*text);
		*text = NULL;
		return atb_error_set(err, ATB_ERR_SCHEMA, "prompt template '%s' has no %%%%user%%%% line",
				     path);
	}
	/* PROTO: loop -- the template's digest goes with every call (the system message's first line) */
	if (atbi_sha256_hex(*text, len, digest)) {
		atb_free(*text);
		*text = NULL;
		return atb_error_set(err, ATB_ERR_INTERNAL, "cannot hash the prompt template");
	}
	**user = '\0';
	*user += strlen("%%user%%\n");
	return ATB_OK;
}

static enum atb_status code_prompt(const struct atbi_llm_proposer *pp, const char *prev_dir,
				   int64_t k, char **system, char **prompt, char **schema,
				   struct atb_error *err)
{
	const struct atb_task *t = pp->task;
	const char *tname = is_torch(t) ? "llm-code-torch-1" : "llm-code-kernel-1";
	struct sbuf sy = {0}, pr = {0}, surf = {0}, par = {0}, buf = {0}, hist = {0}, prev = {0};
	struct atb_knob_assignment dk;
	char path[4096], digest[65], knobs[1024], *text = NULL, *abi = NULL, *ref = NULL;
	char *tmpl = NULL, *user;
	size_t i, base, maxlen;
	int prev_wrote = 0;
	json_t *props, *req, *rf;
	enum atb_status st;

	*system = *prompt = *schema = NULL;
	st = load_template(pp, tname, &text, &user, digest, err);
	if (st)
		return st;

	for (i = 0; i < t->nsurface; i++)
		put(&surf, "%s%s", i ? ", " : "", t->surface[i]);
	for (i = 0; i < t->nparams; i++) {
		if (t->params[i].is_real)
			put(&par, "%s%s=%.17g (real)", i ? ", " : "", t->params[i].name,
			    t->sets[0].reals[i]);
		else
			put(&par, "%s%s=%" PRId64 " (int)", i ? ", " : "", t->params[i].name,
			    t->sets[0].ints[i]);
	}
	if (!t->nparams)
		put(&par, "none");
	for (i = 0; i < t->nbuffers; i++) {
		size_t d;

		put(&buf, "%s%s %s %s [", i ? "; " : "", t->buffers[i].name, t->buffers[i].dtype,
		    atb_task_role_name(t->buffers[i].role));
		for (d = 0; d < t->buffers[i].ndims; d++)
			put(&buf, "%s%s", d ? ", " : "", t->buffers[i].shape[d]);
		put(&buf, "]");
	}
	if (!t->nbuffers)
		put(&buf, "none");
	atb_task_default_knobs(t, &dk);
	atb_task_format_knobs(&dk, knobs, sizeof(knobs));
	/* the iterations before k: on a replay the recorded run has later ones too */
	st = history_text(pp->store, pp->history_run ? pp->history_run : pp->run_id, k, &hist,
			  &prev_wrote, err);
	if (st)
		goto out;
	/* the previous iteration's files, when the model wrote some (its folder: the same bytes on a replay) */
	if (prev_dir && prev_wrote) {
		for (i = 0; i < t->nsurface; i++) {
			char p2[4096], *pt;
			struct stat sb;

			snprintf(p2, sizeof(p2), "%s/%s", prev_dir, t->surface[i]);
			if (lstat(p2, &sb) || !S_ISREG(sb.st_mode))
				continue;
			pt = read_cut(p2, CODE_FILE_CUT);
			if (!pt) {
				prev.bad = 1;
				break;
			}
			put(&prev, "\nThe previous candidate (iteration %" PRId64 "), %s:\n```\n%s\n```\n",
			    k - 1, t->surface[i], pt);
			atb_free(pt);
		}
	}
	snprintf(path, sizeof(path), "%s/include/atb/kernel.h", pp->home);
	abi = is_torch(t) ? atb_strdup("") : read_cut(path, CODE_FILE_CUT);
	ref = read_cut(t->baseline.path, CODE_FILE_CUT);
	/* a torch task's candidate.path names the surface file: it has no template */
	tmpl = t->candidate.path && !is_torch(t) ? read_cut(t->candidate.path, CODE_FILE_CUT)
						 : atb_strdup("(none)");
	if (!abi || !ref || !tmpl || surf.bad || par.bad || buf.bad || hist.bad || prev.bad) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot build the prompt: out of memory");
		goto out;
	}
	{
		const struct var v[] = {
			{"kind", t->kind}, {"task", t->name},
			{"description", t->description ? t->description : ""},
			{"surface", surf.p}, {"params", par.p}, {"buffers", buf.p},
			{"knobs", knobs[0] ? knobs : "(none)"},
			{"cflags", t->nflag_choices ? t->flag_choices[0] : ""},
			{"abi", abi}, {"reference_file", t->baseline.file ? t->baseline.file : t->name},
			{"reference", ref},
			{"template_file", t->candidate.file ? t->candidate.file : "(none)"},
			{"template", tmpl}, {"history", hist.p}, {"previous", prev.p ? prev.p : ""},
		};

		put(&sy, "atb prompt template %s sha256:%s\n", tname, digest);
		st = render(tname, text, v, sizeof(v) / sizeof(v[0]), &sy, err);
		if (!st)
			st = render(tname, user, v, sizeof(v) / sizeof(v[0]), &pr, err);
		if (st)
			goto out;
	}

	/*
	 * The schema bounds each file, so that a model that never closes its
	 * string stops there instead of at the output cap: a kernel at 4x its
	 * template (at least 256 characters), a ModelNew at 16x the reference
	 * (it may carry an inline CUDA source; at least 8192).
	 */
	if (is_torch(t)) {
		base = strlen(ref);
		maxlen = base * 16 < 8192 ? 8192 : base * 16;
	} else {
		base = strlen(tmpl);
		maxlen = base * 4 < 256 ? 256 : base * 4;
	}
	if (maxlen > ATB_LLM_REPLY_MAX_FILE_BYTES)
		maxlen = ATB_LLM_REPLY_MAX_FILE_BYTES;
	props = json_object();
	req = json_array();
	for (i = 0; props && req && i < t->nsurface; i++) {
		json_object_set_new(props, t->surface[i], json_pack("{s:s, s:I}", "type", "string",
								    "maxLength", (json_int_t)maxlen));
		json_array_append_new(req, json_string(t->surface[i]));
	}
	/* not "strict": OpenAI's strict mode refuses maxLength; llama.cpp enforces it anyway */
	rf = json_pack("{s:s, s:{s:s, s:{s:s, s:{s:{s:s, s:o, s:o, s:b}}, s:[s], s:b}}}",
		       "type", "json_schema", "json_schema", "name", "candidate",
		       "schema", "type", "object", "properties", "files", "type", "object",
		       "properties", props, "required", req, "additionalProperties", 0,
		       "required", "files", "additionalProperties", 0);
	if (!rf) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot build the reply schema: out of memory");
		goto out;
	}
	st = atbi_json_canonical(rf, schema, err);
	json_decref(rf);
out:
	if (!st && (sy.bad || pr.bad))
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot build the prompt: out of memory");
	if (st) {
		atb_free(sy.p);
		atb_free(pr.p);
		atb_free(*schema);
		*schema = NULL;
	} else {
		*system = sy.p;
		*prompt = pr.p;
	}
	atb_free(text);
	atb_free(abi);
	atb_free(ref);
	atb_free(tmpl);
	atb_free(surf.p);
	atb_free(par.p);
	atb_free(buf.p);
	atb_free(hist.p);
	atb_free(prev.p);
	return st;
}

enum atb_status atbi_llm_propose_code(const struct atbi_llm_proposer *pp, int64_t k,
				      const char *cand_dir, const char *prev_dir, int *got,
				      char *why, size_t why_size, struct atb_error *err)
{
	const char *allowed[ATB_TASK_MAX_SURFACE];
	struct atb_llm_request rq;
	char *system = NULL, *prompt = NULL, *schema = NULL;
	enum atb_status st;
	size_t i;
	int attempt;

	*got = 0;
	why[0] = '\0';
	for (i = 0; i < pp->task->nsurface; i++)
		allowed[i] = pp->task->surface[i];
	st = code_prompt(pp, prev_dir, k, &system, &prompt, &schema, err);
	if (st)
		return st;
	memset(&rq, 0, sizeof(rq));
	rq.system = system;
	rq.prompt = prompt;
	rq.expect = ATB_LLM_EXPECT_FILES;
	rq.response_format = schema;
	rq.temperature = 0;
	/* PROTO: llm.max_calls_per_iteration */
	for (attempt = 0; !st && attempt < pp->protocol->llm.max_calls_per_iteration; attempt++) {
		struct atb_llm_result r;
		struct atb_llm_reply reply;
		struct atb_error e;
		const char *c;

		rq.has_seed = 1;
		rq.seed = pp->seed * 1000003 + k * 1009 + attempt;
		st = atb_llm_call(pp->client, &rq, &r, err);
		if (st == ATB_ERR_LLM) {
			snprintf(why, why_size, "model call failed: %s", r.error);
			st = ATB_OK;
			atb_llm_result_release(&r);
			continue;
		}
		if (st || !r.content || (r.outcome != ATB_LLM_OK && r.outcome != ATB_LLM_UNPARSABLE)) {
			if (!st)
				snprintf(why, why_size, "the model's reply was %s",
					 atb_llm_outcome_name(r.outcome));
			atb_llm_result_release(&r);
			continue;
		}
		/* JSON as asked; a server that ignored the schema may still have sent fenced code */
		for (c = r.content; *c == ' ' || *c == '\n' || *c == '\r' || *c == '\t'; c++)
			;
		atb_error_clear(&e);
		if (atb_llm_reply_parse(r.content, *c == '{' ? ATB_LLM_REPLY_JSON : ATB_LLM_REPLY_FENCED,
					allowed, pp->task->nsurface, &reply, &e)) {
			snprintf(why, why_size, "%s", e.msg);
			atb_llm_result_release(&r);
			continue;
		}
		st = atb_llm_reply_write(&reply, cand_dir, &e);
		atb_llm_reply_release(&reply);
		atb_llm_result_release(&r);
		if (st == ATB_ERR_SCHEMA) {
			snprintf(why, why_size, "%s", e.msg);
			st = ATB_OK;
			continue;
		}
		if (st) {
			*err = e;
			break;
		}
		*got = 1;
		break;
	}
	atb_free(system);
	atb_free(prompt);
	atb_free(schema);
	return st;
}

enum atb_status atbi_candidate_hashes(const struct atb_task *task, const char *dir,
				      json_t **out, struct atb_error *err)
{
	json_t *o;
	size_t i;

	*out = NULL;
	atb_alloc_install_json();
	o = json_object();
	if (!o)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	for (i = 0; i < task->nsurface; i++) {
		char path[4096], hex[65], *data = NULL;
		size_t len = 0;
		struct stat sb;
		enum atb_status st;

		snprintf(path, sizeof(path), "%s/%s", dir, task->surface[i]);
		if (lstat(path, &sb) || !S_ISREG(sb.st_mode))
			continue;
		st = atbi_read_file(path, &data, &len, err);
		if (!st && atbi_sha256_hex(data, len, hex))
			st = atb_error_set(err, ATB_ERR_INTERNAL, "cannot hash '%s'", path);
		atb_free(data);
		if (st) {
			json_decref(o);
			return st;
		}
		json_object_set_new(o, task->surface[i], json_string(hex));
	}
	*out = o;
	return ATB_OK;
}

/* ---- the engine proposer ---- */

/* One search flag's line of the prompt: its type, domain and the engine's default. */
static void flag_line(struct sbuf *b, const struct atb_engine_flag *f)
{
	static const char *const type[] = {"bool", "int", "float", "enum", "string"};
	size_t j;

	put(b, "  %s: %s", f->name, type[f->type]);
	if (f->type == ATB_ENGINE_BOOL) {
		put(b, ", true or false");
	} else if (f->nvalues) {
		put(b, ", one of");
		for (j = 0; j < f->nvalues; j++)
			put(b, "%s %s", j ? "," : "", f->values[j]);
	} else if (f->has_range) {
		put(b, ", %.17g to %.17g%s", f->min, f->max, f->log ? " (log scale)" : "");
	} else {
		put(b, ", any text");
	}
	put(b, "; default %s\n", f->default_text ? f->default_text : "the engine's own (unknown)");
}

/* A number of a value list as JSON: the list's text read as the flag's type. */
static json_t *listed(const struct atb_engine_flag *f, const char *v)
{
	if (f->type == ATB_ENGINE_INT)
		return json_integer(strtoll(v, NULL, 10));
	if (f->type == ATB_ENGINE_FLOAT)
		return json_real(strtod(v, NULL));
	return json_string(v);
}

/* The reply's schema: {"config": {FLAG: its type and domain, ...}}, every flag optional. */
static enum atb_status engine_schema(const struct atb_engine_task *t, char **out,
				     struct atb_error *err)
{
	json_t *props = json_object(), *rf = NULL;
	size_t i, j;
	int bad = !props;

	*out = NULL;
	for (i = 0; !bad && i < t->nsearch; i++) {
		const struct atb_engine_flag *f = atb_engine_spec_flag(t->spec, t->search[i]);
		json_t *s;

		if (f->type == ATB_ENGINE_BOOL) {
			s = json_pack("{s:s}", "type", "boolean");
		} else if (f->nvalues) {
			json_t *e = json_array();

			for (j = 0; e && j < f->nvalues; j++)
				if (json_array_append_new(e, listed(f, f->values[j])))
					bad = 1;
			s = e ? json_pack("{s:o}", "enum", e) : NULL;
		} else if (f->has_range) {
			s = f->type == ATB_ENGINE_INT
				? json_pack("{s:s, s:I, s:I}", "type", "integer", "minimum",
					    (json_int_t)f->min, "maximum", (json_int_t)f->max)
				: json_pack("{s:s, s:f, s:f}", "type", "number", "minimum", f->min,
					    "maximum", f->max);
		} else if (f->type == ATB_ENGINE_STRING) {
			s = json_pack("{s:s, s:i}", "type", "string", "maxLength",
				      ATB_ENGINE_VALUE_MAX - 1);
		} else {
			s = json_pack("{s:s}", "type", f->type == ATB_ENGINE_INT ? "integer" : "number");
		}
		if (!s || json_object_set_new(props, f->name, s))
			bad = 1;
	}
	if (!bad)
		rf = json_pack("{s:s, s:{s:s, s:{s:s, s:{s:{s:s, s:O, s:b}}, s:[s], s:b}}}",
			       "type", "json_schema", "json_schema", "name", "engine_config",
			       "schema", "type", "object", "properties", "config", "type", "object",
			       "properties", props, "additionalProperties", 0, "required", "config",
			       "additionalProperties", 0);
	json_decref(props);
	if (!rf)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot build the reply schema: out of memory");
	{
		enum atb_status st = atbi_json_canonical(rf, out, err);

		json_decref(rf);
		return st;
	}
}

/* The history lines of run before iteration k: configuration and verdict. */
static enum atb_status engine_history(struct atb_store *s, const char *run, int64_t k,
				      struct sbuf *b, struct atb_error *err)
{
	struct atb_iteration_row *rows = NULL;
	size_t n = 0, i;
	enum atb_status st = atb_store_list_iterations(s, run, &rows, &n, err);

	if (st)
		return st;
	for (i = 0; i < n && rows[i].k < k; i++) {
		const struct atb_iteration_row *r = &rows[i];

		put(b, "  %" PRId64 ": %s -> %s", r->k, r->knobs_json, r->outcome);
		if (r->speedup > 0)
			put(b, ", requests/s %.4fx [%.4f, %.4f] vs the default", r->speedup,
			    r->ci_low, r->ci_high);
		if (r->reason && r->reason[0])
			put(b, " (%.300s)", r->reason);
		put(b, "\n");
	}
	if (!i)
		put(b, "  (none yet)\n");
	atb_store_iterations_free(rows, n);
	return ATB_OK;
}

static enum atb_status engine_prompt(const struct atbi_llm_proposer *pp, int64_t k,
				     char **system, char **prompt, struct atb_error *err)
{
	static const char tname[] = "llm-engine-1";
	const struct atb_engine_task *t = pp->etask;
	struct sbuf sy = {0}, pr = {0}, flags = {0}, args = {0}, hist = {0};
	char digest[65], *text = NULL, *user;
	size_t i;
	enum atb_status st;

	*system = *prompt = NULL;
	st = load_template(pp, tname, &text, &user, digest, err);
	if (st)
		return st;
	for (i = 0; i < t->nsearch; i++)
		flag_line(&flags, atb_engine_spec_flag(t->spec, t->search[i]));
	for (i = 0; i < t->nextra_args; i++)
		put(&args, "%s%s", i ? " " : "", t->extra_args[i]);
	if (!t->nextra_args)
		put(&args, "(none)");
	/* the iterations before k: on a replay the recorded run has later ones too */
	st = engine_history(pp->store, pp->history_run ? pp->history_run : pp->run_id, k, &hist,
			    err);
	if (!st && (flags.bad || args.bad || hist.bad))
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot build the prompt: out of memory");
	if (!st) {
		/* the model as the task names it (a template such as {env:NAME}): the same
		   bytes on every box, so a replay elsewhere asks the recorded request */
		const struct var v[] = {
			{"engine", t->spec->name}, {"task", t->name},
			{"description", t->description ? t->description : ""},
			{"model", t->model}, {"extra_args", args.p},
			{"workload", t->workload_json}, {"flags", flags.p}, {"history", hist.p},
		};

		put(&sy, "atb prompt template %s sha256:%s\n", tname, digest);
		st = render(tname, text, v, sizeof(v) / sizeof(v[0]), &sy, err);
		if (!st)
			st = render(tname, user, v, sizeof(v) / sizeof(v[0]), &pr, err);
	}
	if (!st && (sy.bad || pr.bad))
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot build the prompt: out of memory");
	if (st) {
		atb_free(sy.p);
		atb_free(pr.p);
	} else {
		*system = sy.p;
		*prompt = pr.p;
	}
	atb_free(text);
	atb_free(flags.p);
	atb_free(args.p);
	atb_free(hist.p);
	return st;
}

/* The reply's configuration into out; 0, or why not in why. */
static int read_config(const struct atb_engine_task *t, const char *content,
		       struct atb_engine_config *out, char *why, size_t why_size)
{
	json_t *o, *c;
	json_error_t je;
	struct atb_error e;
	int rc = 0;

	atb_alloc_install_json();
	o = json_loads(content, JSON_REJECT_DUPLICATES, &je);
	c = json_object_get(o, "config");
	if (!o) {
		snprintf(why, why_size, "the reply is not JSON: %s", je.text);
		return -1;
	}
	if (!json_is_object(c) || json_object_size(o) != 1) {
		snprintf(why, why_size, "the reply is not {\"config\": {...}}");
		json_decref(o);
		return -1;
	}
	atb_error_clear(&e);
	/* the same check as every configuration the harness runs (atb_engine_config_check) */
	if (atb_engine_config_from_json(t, c, out, &e)) {
		snprintf(why, why_size, "%s", e.msg);
		memset(out, 0, sizeof(*out));
		rc = -1;
	}
	json_decref(o);
	return rc;
}

static int config_reader(const struct atbi_llm_proposer *pp, const char *content, void *out,
			 char *why, size_t why_size)
{
	return read_config(pp->etask, content, out, why, why_size);
}

enum atb_status atbi_llm_propose_engine(const struct atbi_llm_proposer *pp, int64_t k,
					struct atb_engine_config *out, int *got, char *why,
					size_t why_size, struct atb_error *err)
{
	struct atb_llm_request rq;
	char *system = NULL, *prompt = NULL, *schema = NULL;
	enum atb_status st;

	*got = 0;
	why[0] = '\0';
	memset(out, 0, sizeof(*out));
	st = engine_prompt(pp, k, &system, &prompt, err);
	if (!st)
		st = engine_schema(pp->etask, &schema, err);
	if (st) {
		atb_free(system);
		atb_free(prompt);
		return st;
	}
	memset(&rq, 0, sizeof(rq));
	rq.system = system;
	rq.prompt = prompt;
	rq.response_format = schema;
	st = ask_json(pp, k, &rq, config_reader, out, got, why, why_size, err);
	atb_free(system);
	atb_free(prompt);
	atb_free(schema);
	return st;
}
