/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Greedy probes and the output-equivalence gate (PROTO:
 * engine.output_equivalence, greedy_token_exact): the task's probe prompts
 * sent one at a time with temperature 0, the task's max_tokens and no
 * ignore_eos; a candidate must reproduce the default configuration's text,
 * completion-token count and finish reason on every probe, so lossless
 * speculative decoding passes and a configuration that stops early, pads
 * or alters a token fails.
 *
 * Does not: start engines or store verdicts (ab.c does).
 */
#include <stdio.h>
#include <string.h>

#include "atb/alloc.h"
#include "engine_int.h"
#include "banned.h"

void atb_engine_probe_release(struct atb_engine_probe_set *s)
{
	size_t i;

	if (!s)
		return;
	for (i = 0; i < s->n; i++)
		atb_free(s->out[i].text);
	atb_free(s->out);
	memset(s, 0, sizeof(*s));
}

static json_t *probe_body(const struct atb_engine_task *t, const char *prompt)
{
	json_t *b = json_object(), *m;
	int chat = !strcmp(t->probe_api, "chat");

	if (!b)
		return NULL;
	json_object_set_new(b, "model", json_string("default"));
	json_object_set_new(b, "max_tokens", json_integer(t->probe_max_tokens));
	json_object_set_new(b, "temperature", json_real(0.0));
	json_object_set_new(b, "stream", json_false());
	if (chat) {
		m = json_pack("[{s:s,s:s}]", "role", "user", "content", prompt);
		json_object_set_new(b, "messages", m ? m : json_null());
	} else {
		json_object_set_new(b, "prompt", json_string(prompt));
	}
	return b;
}

/* Text, finish_reason and usage.completion_tokens of a response body. */
static void parse_answer(const char *body, int chat, struct atb_engine_probe_out *o)
{
	json_t *j = json_loads(body, 0, NULL), *c0, *v;
	const char *text = NULL;

	c0 = j ? json_array_get(json_object_get(j, "choices"), 0) : NULL;
	if (c0) {
		v = chat ? json_object_get(json_object_get(c0, "message"), "content")
			 : json_object_get(c0, "text");
		text = json_string_value(v);
		v = json_object_get(c0, "finish_reason");
		snprintf(o->finish_reason, sizeof(o->finish_reason), "%s",
			 json_is_string(v) ? json_string_value(v) : "none");
	} else {
		snprintf(o->finish_reason, sizeof(o->finish_reason), "malformed");
	}
	v = j ? json_object_get(json_object_get(j, "usage"), "completion_tokens") : NULL;
	o->completion_tokens = json_is_integer(v) ? (long)json_integer_value(v) : -1;
	o->text = atb_strdup(text ? text : "");
	json_decref(j);
}

enum atb_status atb_engine_probe(struct atb_engine_proc *p, const struct atb_engine_task *t,
				 struct atb_engine_probe_set *out, struct atb_error *err)
{
	int chat = !strcmp(t->probe_api, "chat");
	char url[256], why[256];
	size_t i;

	memset(out, 0, sizeof(*out));
	atb_alloc_install_json();
	out->out = atb_calloc(t->nprobes + 1, sizeof(*out->out));
	if (!out->out)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	snprintf(url, sizeof(url), "%s%s", atb_engine_base_url(p),
		 chat ? t->spec->chat_path : t->spec->completions_path);
	for (i = 0; i < t->nprobes; i++) {
		struct atb_engine_probe_out *o = &out->out[i];
		json_t *b = probe_body(t, t->probes[i]);
		char *req = b ? json_dumps(b, JSON_COMPACT) : NULL, *body = NULL;
		enum atb_status st;

		json_decref(b);
		out->n = i + 1;
		if (!req)
			return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
		st = atbi_engine_http(url, req, 120000, &o->http_status, &body, why, sizeof(why));
		atb_free(req);
		if (st) {
			atb_free(body);
			return atb_error_set(err, st, "out of memory");
		}
		if (o->http_status == 200) {
			parse_answer(body, chat, o);
		} else {
			snprintf(o->finish_reason, sizeof(o->finish_reason), "error");
			o->completion_tokens = -1;
			o->text = atb_strdup(o->http_status ? body : why);
		}
		atb_free(body);
		if (!o->text)
			return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	}
	return ATB_OK;
}

/* "stop:3 length:2" into buf. */
static void finish_summary(const struct atb_engine_probe_set *s, char *buf, size_t size)
{
	size_t i, j, n = 0, count;

	buf[0] = '\0';
	for (i = 0; i < s->n; i++) {
		for (j = 0; j < i; j++)
			if (!strcmp(s->out[j].finish_reason, s->out[i].finish_reason))
				break;
		if (j < i)
			continue;
		for (count = 0, j = i; j < s->n; j++)
			count += !strcmp(s->out[j].finish_reason, s->out[i].finish_reason);
		n += (size_t)snprintf(buf + n, n < size ? size - n : 0, "%s%s:%zu", n ? " " : "",
				      s->out[i].finish_reason, count);
		if (n >= size)
			return;
	}
}

int atb_engine_equivalent(const struct atb_engine_probe_set *a,
			  const struct atb_engine_probe_set *b, char *why, size_t why_size)
{
	char fa[128], fb[128], what[200];
	size_t i, k, la, lb;

	finish_summary(a, fa, sizeof(fa));
	finish_summary(b, fb, sizeof(fb));
	if (a->n != b->n) {
		snprintf(why, why_size, "probe count differs: %zu vs %zu", a->n, b->n);
		return 0;
	}
	for (i = 0; i < a->n; i++) {
		const struct atb_engine_probe_out *x = &a->out[i], *y = &b->out[i];

		la = strlen(x->text);
		lb = strlen(y->text);
		for (k = 0; k < la && k < lb && x->text[k] == y->text[k]; k++)
			;
		if (strcmp(y->finish_reason, "error") == 0)
			snprintf(what, sizeof(what), "request failed (http %ld)", y->http_status);
		else if (k == lb && lb < la)
			snprintf(what, sizeof(what), "stops early: %zu bytes of the default's %zu",
				 lb, la);
		else if (k == la && la < lb)
			snprintf(what, sizeof(what), "pads: %zu bytes past the default's %zu",
				 lb - la, la);
		else if (k < la)
			snprintf(what, sizeof(what), "text differs at byte %zu", k);
		else if (x->completion_tokens != y->completion_tokens)
			snprintf(what, sizeof(what), "same text, completion tokens %ld vs %ld",
				 y->completion_tokens, x->completion_tokens);
		else if (strcmp(x->finish_reason, y->finish_reason))
			snprintf(what, sizeof(what), "same text, finish_reason '%s' vs '%s'",
				 y->finish_reason, x->finish_reason);
		else
			continue;
		snprintf(why, why_size,
			 "probe %zu %s (tokens %ld vs %ld, finish '%s' vs '%s'); finish reasons "
			 "candidate [%s] default [%s]",
			 i, what, y->completion_tokens, x->completion_tokens, y->finish_reason,
			 x->finish_reason, fb, fa);
		return 0;
	}
	if (why_size)
		why[0] = '\0';
	return 1;
}
