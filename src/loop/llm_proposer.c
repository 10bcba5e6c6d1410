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
 * Does not: write candidate code (the knob space is the surface here), or
 * measure (loop.c does).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "atb/alloc.h"
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

static enum atb_status build_prompt(const struct atb_task *task, struct atb_store *s,
				    const char *run_id, char **system, char **prompt,
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
	st = atb_store_list_iterations(s, run_id, &rows, &n, err);
	if (st) {
		atb_free(sy.p);
		atb_free(pr.p);
		return st;
	}
	for (i = 0; i < n; i++) {
		const struct atb_iteration_row *r = &rows[i];

		put(&pr, "  %" PRId64 ": %s -> %s", r->k, r->knobs_json, r->outcome);
		if (r->speedup > 0)
			put(&pr, ", %.4fx [%.4f, %.4f] vs the honest baseline", r->speedup, r->ci_low,
			    r->ci_high);
		if (r->reason && r->reason[0])
			put(&pr, " (%.300s)", r->reason);
		put(&pr, "\n");
	}
	if (!n)
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

enum atb_status atbi_llm_propose_knobs(const struct atbi_llm_proposer *pp, int64_t k,
				       struct atb_knob_assignment *out, int *got, char *why,
				       size_t why_size, struct atb_error *err)
{
	struct atb_llm_client_opts co;
	struct atb_llm_client *c = NULL;
	struct atb_llm_request rq;
	char *system = NULL, *prompt = NULL;
	enum atb_status st;
	int attempt;

	*got = 0;
	why[0] = '\0';
	st = build_prompt(pp->task, pp->store, pp->run_id, &system, &prompt, err);
	if (st)
		return st;
	memset(&co, 0, sizeof(co));
	co.cfg = pp->cfg;
	co.protocol = pp->protocol;
	co.store = pp->store;
	co.run = pp->run_id;
	st = atb_llm_client_new(&co, &c, err);
	memset(&rq, 0, sizeof(rq));
	rq.system = system;
	rq.prompt = prompt;
	rq.expect = ATB_LLM_EXPECT_JSON;
	rq.temperature = 0;
	/* PROTO: llm.max_calls_per_iteration */
	for (attempt = 0; !st && attempt < pp->protocol->llm.max_calls_per_iteration; attempt++) {
		struct atb_llm_result r;

		/* a seed per attempt: a server that honours it gives another draw, the same one on replay */
		rq.has_seed = 1;
		rq.seed = pp->seed * 1000003 + k * 1009 + attempt;
		st = atb_llm_call(c, &rq, &r, err);
		if (st == ATB_ERR_LLM) {
			snprintf(why, why_size, "model call failed: %s", r.error);
			st = ATB_OK;
		} else if (!st && r.outcome != ATB_LLM_OK) {
			snprintf(why, why_size, "the model's reply was %s", atb_llm_outcome_name(r.outcome));
		} else if (!st && !read_knobs(pp->task, r.content, out, why, why_size)) {
			*got = 1;
			atb_llm_result_release(&r);
			break;
		}
		atb_llm_result_release(&r);
	}
	atb_llm_client_free(c);
	atb_free(system);
	atb_free(prompt);
	return st;
}
