/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The OpenAI-compatible chat client: configuration (file, then
 * environment), the request body and its hash, one POST per attempt over
 * libcurl with retries (exponential backoff with jitter on timeouts,
 * connection failures, 429 and 5xx; Retry-After honoured), parsing of the
 * completion, and the replay transport that answers from a recorded run.
 *
 * The request body is canonical JSON (sorted keys, compact), so the same
 * request is the same bytes and the same hash on any machine: replay looks
 * a call up by that hash.  The key travels only in the Authorization header
 * list, which is freed right after the transfer.
 *
 * Does not: write the store (record.c) or build prompts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include <curl/curl.h>

#include "atb/alloc.h"
#include "atb/store.h"
#include "llm/llm_int.h"
#include "banned.h"

/* Record the failing libcurl setup call with file and line. */
#define CURL_CALL(err, call)                                                          \
	do {                                                                          \
		int rc_ = (int)(call);                                                \
		if (rc_)                                                              \
			return atb_error_set(err, ATB_ERR_SYSTEM,                     \
					     "libcurl call failed at %s:%d: %s: %d",  \
					     __FILE__, __LINE__, #call, rc_);         \
	} while (0)

#define RESPONSE_MAX ((size_t)64 << 20)  /* a reply larger than 64 MiB fails the call */

const char *atb_llm_outcome_name(enum atb_llm_outcome o)
{
	switch (o) {
	case ATB_LLM_OK: return "ok";
	case ATB_LLM_TRUNCATED: return "truncated";
	case ATB_LLM_EMPTY: return "empty";
	case ATB_LLM_UNPARSABLE: return "unparsable";
	case ATB_LLM_FAILED: return "failed";
	}
	return "failed";
}

/* ---- configuration ---- */

static void wipe(void *p, size_t n)
{
	explicit_bzero(p, n);
}

void atb_llm_config_release(struct atb_llm_config *cfg)
{
	if (cfg)
		wipe(cfg->api_key, sizeof(cfg->api_key));
}

static enum atb_status set_str(char *dst, size_t size, const char *v, const char *file,
			       const char *key, struct atb_error *err)
{
	if (strlen(v) >= size)
		return atb_error_set_at(err, ATB_ERR_SCHEMA, file, 0, 0, key,
					"'%s' is longer than %zu characters", key, size - 1);
	memcpy(dst, v, strlen(v) + 1);
	return ATB_OK;
}

static enum atb_status load_file(const char *path, struct atb_llm_config *cfg,
				 struct atb_error *err)
{
	static const char *const num_keys[] = {
		"timeout_s", "max_attempts", "backoff_base_ms", "backoff_max_ms",
		"retry_after_max_s",
	};
	json_error_t je;
	json_t *o, *v;
	const char *key;
	struct stat sb;
	enum atb_status st = ATB_OK;
	size_t i;

	atb_alloc_install_json();
	if (stat(path, &sb))
		return atb_error_set(err, errno == ENOENT ? ATB_ERR_NOT_FOUND : ATB_ERR_IO,
				     "cannot read llm config '%s': %s", path, strerror(errno));
	o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (!o)
		return atb_error_set_at(err, ATB_ERR_PARSE, path, (unsigned)je.line,
					(unsigned)je.column, "", "llm config is not valid json: %s",
					je.text);
	if (!json_is_object(o)) {
		json_decref(o);
		return atb_error_set_at(err, ATB_ERR_SCHEMA, path, 1, 1, "",
					"llm config is not a json object");
	}
	json_object_foreach(o, key, v) {
		int is_num = 0;

		for (i = 0; i < sizeof(num_keys) / sizeof(num_keys[0]); i++)
			is_num |= !strcmp(key, num_keys[i]);
		if (is_num) {
			double x = json_number_value(v);

			if (!json_is_number(v) || !isfinite(x) || x < 0 ||
			    (!strcmp(key, "max_attempts") && (x < 1 || x > 100 || x != floor(x))) ||
			    (!strcmp(key, "timeout_s") && x <= 0)) {
				st = atb_error_set_at(err, ATB_ERR_SCHEMA, path, 0, 0, key,
						      "bad value for '%s': expected a %s", key,
						      !strcmp(key, "max_attempts") ?
						      "whole number from 1 to 100" :
						      "finite non-negative number");
				break;
			}
			if (!strcmp(key, "timeout_s"))
				cfg->timeout_s = x;
			else if (!strcmp(key, "max_attempts"))
				cfg->max_attempts = (int)x;
			else if (!strcmp(key, "backoff_base_ms"))
				cfg->backoff_base_ms = x;
			else if (!strcmp(key, "backoff_max_ms"))
				cfg->backoff_max_ms = x;
			else
				cfg->retry_after_max_s = x;
			continue;
		}
		if (!strcmp(key, "max_tokens_field")) {
			const char *f = json_string_value(v);

			if (!f || (strcmp(f, "max_tokens") && strcmp(f, "max_completion_tokens"))) {
				st = atb_error_set_at(err, ATB_ERR_SCHEMA, path, 0, 0, key,
						      "'%s' is \"max_tokens\" or \"max_completion_tokens\"",
						      key);
				break;
			}
			cfg->max_completion_tokens = !strcmp(f, "max_completion_tokens");
			continue;
		}
		if (strcmp(key, "base_url") && strcmp(key, "model") && strcmp(key, "api_key") &&
		    strcmp(key, "price_table")) {
			st = atb_error_set_at(err, ATB_ERR_SCHEMA, path, 0, 0, key,
					      "unknown key '%s' in llm config", key);
			break;
		}
		if (!json_is_string(v)) {
			st = atb_error_set_at(err, ATB_ERR_SCHEMA, path, 0, 0, key,
					      "'%s' must be a string", key);
			break;
		}
		if (!strcmp(key, "api_key")) {
			/* a key in a file others can read is a leaked key */
			if (sb.st_mode & 077) {
				st = atb_error_set_at(err, ATB_ERR_SCHEMA, path, 0, 0, key,
						      "llm config holds an api_key but is readable by"
						      " group or others (mode %03o): chmod 600 it",
						      (unsigned)(sb.st_mode & 0777));
				break;
			}
			st = set_str(cfg->api_key, sizeof(cfg->api_key), json_string_value(v), path,
				     key, err);
		} else if (!strcmp(key, "base_url")) {
			st = set_str(cfg->base_url, sizeof(cfg->base_url), json_string_value(v), path,
				     key, err);
		} else if (!strcmp(key, "model")) {
			st = set_str(cfg->model, sizeof(cfg->model), json_string_value(v), path, key,
				     err);
		} else {
			st = set_str(cfg->price_table, sizeof(cfg->price_table), json_string_value(v),
				     path, key, err);
		}
		if (st)
			break;
	}
	/* the parsed tree held the key too: wipe its strings before freeing */
	v = json_object_get(o, "api_key");
	if (json_is_string(v))
		wipe((void *)json_string_value(v), json_string_length(v));
	json_decref(o);
	return st;
}

enum atb_status atb_llm_config_load(const char *path, struct atb_llm_config *cfg,
				    struct atb_error *err)
{
	static const struct {
		const char *env;
		size_t off, size;
	} envs[] = {
		{"ATB_LLM_BASE_URL", offsetof(struct atb_llm_config, base_url), 512},
		{"ATB_LLM_MODEL", offsetof(struct atb_llm_config, model), 256},
		{"ATB_LLM_API_KEY", offsetof(struct atb_llm_config, api_key), 512},
		{"ATB_LLM_PRICES", offsetof(struct atb_llm_config, price_table), 1024},
	};
	enum atb_status st;
	size_t i;

	memset(cfg, 0, sizeof(*cfg));
	cfg->max_attempts = 5;
	cfg->backoff_base_ms = 500;
	cfg->backoff_max_ms = 30000;
	cfg->retry_after_max_s = 120;
	if (!path || !*path)
		path = getenv("ATB_LLM_CONFIG");
	if (path && *path) {
		st = load_file(path, cfg, err);
		if (st) {
			atb_llm_config_release(cfg);
			return st;
		}
	}
	for (i = 0; i < sizeof(envs) / sizeof(envs[0]); i++) {
		const char *v = getenv(envs[i].env);

		if (!v || !*v)
			continue;
		if (strlen(v) >= envs[i].size) {
			atb_llm_config_release(cfg);
			return atb_error_set(err, ATB_ERR_USAGE, "$%s is longer than %zu characters",
					     envs[i].env, envs[i].size - 1);
		}
		memcpy((char *)cfg + envs[i].off, v, strlen(v) + 1);
	}
	return ATB_OK;
}

/* ---- backoff and Retry-After ---- */

double atbi_llm_backoff_ms(const struct atb_llm_config *cfg, int k, double u)
{
	double d = cfg->backoff_base_ms * ldexp(1.0, k > 1 ? (k - 1 > 30 ? 30 : k - 1) : 0);

	if (d > cfg->backoff_max_ms)
		d = cfg->backoff_max_ms;
	/* equal jitter: half fixed, half random, so retries of many clients spread */
	return d / 2 + u * d / 2;
}

double atbi_llm_retry_after_s(const char *value, int64_t now_s)
{
	char *end = NULL;
	double x;
	time_t t;

	if (!value)
		return -1;
	while (*value == ' ' || *value == '\t')
		value++;
	errno = 0;
	x = strtod(value, &end);
	if (end != value && !errno && isfinite(x) && x >= 0) {
		while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')
			end++;
		if (!*end)
			return x;
	}
	t = curl_getdate(value, NULL);
	if (t < 0)
		return -1;
	return t > now_s ? (double)(t - now_s) : 0;
}

/* ---- parsing a completion ---- */

static int blank(const char *s)
{
	for (; s && *s; s++)
		if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r')
			return 0;
	return 1;
}

static int parsable(const char *content, enum atb_llm_expect expect)
{
	json_t *v;
	const char *a, *b;

	switch (expect) {
	case ATB_LLM_EXPECT_JSON:
		v = json_loads(content, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
		json_decref(v);
		return v != NULL;
	case ATB_LLM_EXPECT_FENCED:
		a = strstr(content, "```");
		b = a ? strstr(a + 3, "```") : NULL;
		return b != NULL;
	case ATB_LLM_EXPECT_FILES:
		return parsable(content, ATB_LLM_EXPECT_JSON) || parsable(content, ATB_LLM_EXPECT_FENCED);
	case ATB_LLM_EXPECT_TEXT:
		break;
	}
	return 1;
}

static int64_t count_of(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_integer(v) && json_integer_value(v) >= 0 ? (int64_t)json_integer_value(v) : -1;
}

void atbi_llm_parse_response(struct atb_llm_result *r, enum atb_llm_expect expect)
{
	json_t *o, *ch, *msg, *c, *fr, *usage, *det;
	json_error_t je;

	r->outcome = ATB_LLM_FAILED;
	atb_alloc_install_json();
	o = r->response ? json_loads(r->response, JSON_REJECT_DUPLICATES, &je) : NULL;
	if (!o) {
		if (!r->error[0])
			snprintf(r->error, sizeof(r->error), "the response is not json%s%s",
				 r->response ? ": " : "", r->response ? je.text : "");
		return;
	}
	ch = json_array_get(json_object_get(o, "choices"), 0);
	msg = json_object_get(ch, "message");
	if (!json_is_object(msg)) {
		json_t *e = json_object_get(json_object_get(o, "error"), "message");

		snprintf(r->error, sizeof(r->error), "the response has no choices[0].message%s%.400s",
			 json_is_string(e) ? ": " : "", json_is_string(e) ? json_string_value(e) : "");
		json_decref(o);
		return;
	}
	c = json_object_get(msg, "content");
	if (json_is_string(c) && !(r->content = atb_strdup(json_string_value(c)))) {
		snprintf(r->error, sizeof(r->error), "out of memory");
		json_decref(o);
		return;
	}
	fr = json_object_get(ch, "finish_reason");
	if (json_is_string(fr))
		snprintf(r->finish_reason, sizeof(r->finish_reason), "%s", json_string_value(fr));
	usage = json_object_get(o, "usage");
	r->prompt_tokens = count_of(usage, "prompt_tokens");
	r->completion_tokens = count_of(usage, "completion_tokens");
	det = json_object_get(usage, "completion_tokens_details");
	r->reasoning_tokens = count_of(det, "reasoning_tokens");
	json_decref(o);
	r->error[0] = '\0';
	/* PROTO: llm.truncation_alarm_rate -- the length limit wins over everything else */
	if (!strcmp(r->finish_reason, "length"))
		r->outcome = ATB_LLM_TRUNCATED;
	else if (!r->content || blank(r->content))
		r->outcome = ATB_LLM_EMPTY;
	else if (!parsable(r->content, expect))
		r->outcome = ATB_LLM_UNPARSABLE;
	else
		r->outcome = ATB_LLM_OK;
}

/* ---- price table ---- */

double atbi_llm_cost(const json_t *prices, const char *model, const struct atb_llm_result *r)
{
	json_t *m = json_object_get(json_object_get(prices, "models"), model);
	double in, out;

	if (!m)
		m = json_object_get(json_object_get(prices, "models"), "*");
	if (!json_is_object(m) || r->prompt_tokens < 0 || r->completion_tokens < 0)
		return -1;
	in = json_number_value(json_object_get(m, "prompt_usd_per_mtok"));
	out = json_number_value(json_object_get(m, "completion_usd_per_mtok"));
	/* reasoning tokens are part of completion_tokens (OpenAI's usage) and billed with them */
	return ((double)r->prompt_tokens * in + (double)r->completion_tokens * out) / 1e6;
}

static enum atb_status load_prices(const char *path, json_t **out, char digest[65],
				   struct atb_error *err)
{
	char *text = NULL;
	size_t len = 0;
	json_error_t je;
	json_t *o, *models, *m;
	const char *name;
	enum atb_status st;

	*out = NULL;
	st = atbi_read_file(path, &text, &len, err);
	if (st)
		return st;
	st = atbi_sha256_hex(text, len, digest);
	o = st ? NULL : json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	atb_free(text);
	if (st)
		return atb_error_set(err, st, "cannot hash price table '%s'", path);
	if (!o)
		return atb_error_set_at(err, ATB_ERR_PARSE, path, (unsigned)je.line,
					(unsigned)je.column, "", "price table is not valid json: %s",
					je.text);
	models = json_object_get(o, "models");
	if (!json_is_object(models)) {
		json_decref(o);
		return atb_error_set_at(err, ATB_ERR_SCHEMA, path, 0, 0, "models",
					"price table has no 'models' object");
	}
	json_object_foreach(models, name, m) {
		json_t *a = json_object_get(m, "prompt_usd_per_mtok");
		json_t *b = json_object_get(m, "completion_usd_per_mtok");

		if (!json_is_number(a) || !json_is_number(b) || json_number_value(a) < 0 ||
		    json_number_value(b) < 0 || json_object_size(m) != 2) {
			char field[300];

			snprintf(field, sizeof(field), "models.%s", name);
			json_decref(o);
			return atb_error_set_at(err, ATB_ERR_SCHEMA, path, 0, 0, field,
						"a price is {\"prompt_usd_per_mtok\": N,"
						" \"completion_usd_per_mtok\": N}, both >= 0");
		}
	}
	*out = o;
	return ATB_OK;
}

/* ---- the client ---- */

struct atb_llm_client {
	struct atb_llm_config cfg;
	const struct atb_protocol *p;
	struct atb_store *store;
	char run[65];
	char replay_run[65];
	int replay;
	struct atbi_llm_recorded *rec;
	size_t nrec;
	json_t *prices;
	char prices_digest[65];
	char url[600];
	double timeout_s;
	uint64_t rng;
};

static uint64_t next_rand(struct atb_llm_client *c)
{
	/* xorshift64*: jitter only, never a measurement */
	c->rng ^= c->rng >> 12;
	c->rng ^= c->rng << 25;
	c->rng ^= c->rng >> 27;
	return c->rng * 2685821657736338717ull;
}

enum atb_status atb_llm_client_new(const struct atb_llm_client_opts *o,
				   struct atb_llm_client **out, struct atb_error *err)
{
	struct atb_llm_client *c;
	enum atb_status st = ATB_OK;
	size_t blen;
	char id[33];

	*out = NULL;
	if (!o || !o->cfg || !o->protocol)
		return atb_error_set(err, ATB_ERR_USAGE, "a model client needs a config and a protocol");
	if (o->store && o->run && !atbi_llm_valid_run(o->run))
		return atb_error_set(err, ATB_ERR_USAGE, "run '%s' is not 1-64 of [0-9a-zA-Z-]",
				     o->run ? o->run : "");
	if (o->replay_run && (!o->store || !atbi_llm_valid_run(o->replay_run)))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "replay needs a store and a run of 1-64 [0-9a-zA-Z-], not '%s'",
				     o->replay_run);
	if (!o->cfg->model[0])
		return atb_error_set(err, ATB_ERR_USAGE,
				     "no model: set $ATB_LLM_MODEL, --model or the config's model");
	if (!o->replay_run && !o->cfg->base_url[0])
		return atb_error_set(err, ATB_ERR_USAGE,
				     "no server: set $ATB_LLM_BASE_URL, --base-url or the config's base_url");
	if (curl_global_init(CURL_GLOBAL_DEFAULT))
		return atb_error_set(err, ATB_ERR_SYSTEM, "cannot initialise libcurl");
	c = atb_calloc(1, sizeof(*c));
	if (!c)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot make a model client: out of memory");
	c->cfg = *o->cfg;
	c->p = o->protocol;
	c->store = o->store;
	if (o->run)
		snprintf(c->run, sizeof(c->run), "%s", o->run);
	/* PROTO: llm.request_timeout_s -- a config may only shorten it */
	c->timeout_s = o->protocol->llm.request_timeout_s;
	if (c->cfg.timeout_s > 0 && c->cfg.timeout_s < c->timeout_s)
		c->timeout_s = c->cfg.timeout_s;
	blen = strlen(c->cfg.base_url);
	while (blen && c->cfg.base_url[blen - 1] == '/')
		blen--;
	/* a base given with /v1 (as hosted APIs document it) is taken as it is */
	if (blen >= 3 && !strncmp(c->cfg.base_url + blen - 3, "/v1", 3))
		blen -= 3;
	snprintf(c->url, sizeof(c->url), "%.*s/v1/chat/completions", (int)blen, c->cfg.base_url);
	if (atbi_random_id(id) == ATB_OK)
		c->rng = strtoull(id + 16, NULL, 16) | 1;
	else
		c->rng = 0x9e3779b97f4a7c15ull;
	if (c->cfg.price_table[0])
		st = load_prices(c->cfg.price_table, &c->prices, c->prices_digest, err);
	if (!st && o->replay_run) {
		c->replay = 1;
		snprintf(c->replay_run, sizeof(c->replay_run), "%s", o->replay_run);
		st = atbi_llm_load_run(o->store, o->replay_run, &c->rec, &c->nrec, err);
	}
	if (st) {
		atb_llm_client_free(c);
		return st;
	}
	*out = c;
	return ATB_OK;
}

void atb_llm_client_free(struct atb_llm_client *c)
{
	if (!c)
		return;
	atb_llm_config_release(&c->cfg);
	atbi_llm_recorded_free(c->rec, c->nrec);
	json_decref(c->prices);
	atb_free(c);
}

void atb_llm_result_release(struct atb_llm_result *r)
{
	if (!r)
		return;
	atb_free(r->content);
	atb_free(r->response);
	atb_free(r->alarm);
	memset(r, 0, sizeof(*r));
}

static void result_init(struct atb_llm_result *r)
{
	memset(r, 0, sizeof(*r));
	r->prompt_tokens = r->completion_tokens = r->reasoning_tokens = -1;
	r->cost_usd = -1;
	r->outcome = ATB_LLM_FAILED;
}

/* The request body: canonical, so equal requests are equal bytes. */
static enum atb_status request_body(const struct atb_llm_client *c, const struct atb_llm_request *rq,
				    char **body, struct atb_error *err)
{
	json_t *o, *msgs;
	enum atb_status st;

	*body = NULL;
	msgs = json_array();
	if (msgs && rq->system)
		json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content",
						      rq->system));
	if (msgs)
		json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content",
						      rq->prompt));
	/* PROTO: llm.max_output_tokens -- the limit is the protocol's, never the caller's */
	o = json_pack("{s:i, s:o, s:s, s:f}",
		      c->cfg.max_completion_tokens ? "max_completion_tokens" : "max_tokens",
		      c->p->llm.max_output_tokens,
		      "messages", msgs, "model", c->cfg.model, "temperature", rq->temperature);
	if (o && rq->has_seed)
		json_object_set_new(o, "seed", json_integer((json_int_t)rq->seed));
	if (o && rq->response_format) {
		json_t *rf = json_loads(rq->response_format, JSON_REJECT_DUPLICATES, NULL);

		if (!json_is_object(rf)) {
			json_decref(rf);
			json_decref(o);
			return atb_error_set(err, ATB_ERR_USAGE,
					     "cannot build the request: response_format is not a json object");
		}
		json_object_set_new(o, "response_format", rf);
	}
	if (!o || json_array_size(msgs) != (rq->system ? 2u : 1u)) {
		json_decref(o);
		return atb_error_set(err, ATB_ERR_USAGE,
				     "cannot build the request: the prompt is not valid utf-8, or out of memory");
	}
	st = atbi_json_canonical(o, body, err);
	json_decref(o);
	return st;
}

struct sink {
	char *p;
	size_t n, cap;
	int over;
	char retry_after[64];
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
	struct sink *b = arg;
	size_t n = size * nmemb;

	if (b->n + n + 1 > RESPONSE_MAX) {
		b->over = 1;
		return 0;
	}
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *np;

		while (cap < b->n + n + 1)
			cap *= 2;
		np = atb_realloc(b->p, cap);
		if (!np)
			return 0;
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->n, data, n);
	b->n += n;
	b->p[b->n] = '\0';
	return n;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
	struct sink *b = arg;
	size_t n = size * nmemb;

	if (n > 12 && !strncasecmp(data, "retry-after:", 12))
		snprintf(b->retry_after, sizeof(b->retry_after), "%.*s",
			 (int)(n - 12 > 63 ? 63 : n - 12), data + 12);
	return n;
}

static enum atb_status setup(CURL *e, const struct atb_llm_client *c, const char *body,
			     struct curl_slist *h, struct sink *b, char *ebuf, struct atb_error *err)
{
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_URL, c->url));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_HTTPHEADER, h));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_POSTFIELDS, body));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(body)));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_WRITEDATA, b));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_HEADERDATA, b));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_ERRORBUFFER, ebuf));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
					(long)(c->timeout_s * 1000 > 1 ? c->timeout_s * 1000 : 1)));
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 30000L));
	/* a redirect would resend the key to wherever it points */
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L));
#if LIBCURL_VERSION_NUM >= 0x075500
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https"));
#else
	CURL_CALL(err, curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS)));
#endif
	return ATB_OK;
}

/* One POST; *curl_rc, *http and the sink tell what happened. */
static enum atb_status post_once(struct atb_llm_client *c, const char *body, struct sink *b,
				 int *curl_rc, long *http, char *why, size_t why_size,
				 struct atb_error *err)
{
	char ebuf[CURL_ERROR_SIZE] = "", auth[600];
	struct curl_slist *h = NULL, *h2;
	CURL *e;
	enum atb_status st;

	*curl_rc = 0;
	*http = 0;
	why[0] = '\0';
	e = curl_easy_init();
	if (!e)
		return atb_error_set(err, ATB_ERR_SYSTEM, "cannot start a libcurl transfer");
	h = curl_slist_append(NULL, "Content-Type: application/json");
	if (h && c->cfg.api_key[0]) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", c->cfg.api_key);
		h2 = curl_slist_append(h, auth);
		wipe(auth, sizeof(auth));
		if (!h2) {
			curl_slist_free_all(h);
			h = NULL;
		}
	}
	if (!h) {
		curl_easy_cleanup(e);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot build the request: out of memory");
	}
	st = setup(e, c, body, h, b, ebuf, err);
	if (st == ATB_OK) {
		*curl_rc = (int)curl_easy_perform(e);
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, http);
		if (*curl_rc)
			snprintf(why, why_size, "%s", b->over ? "the response is over 64 MiB" :
				 ebuf[0] ? ebuf : curl_easy_strerror((CURLcode)*curl_rc));
	}
	curl_easy_cleanup(e);
	/* the header list held the key: wipe it before it goes back to the heap */
	for (h2 = h; h2; h2 = h2->next)
		wipe(h2->data, strlen(h2->data));
	curl_slist_free_all(h);
	return st;
}

static void sleep_ms(double ms)
{
	struct timespec ts;

	if (ms <= 0)
		return;
	ts.tv_sec = (time_t)(ms / 1000);
	ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1000) * 1e6);
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static int retryable_http(long code)
{
	return code == 429 || (code >= 500 && code <= 599);
}

static int valid_utf8(const char *s, size_t n)
{
	json_t *v = json_stringn(s, n);

	json_decref(v);
	return v != NULL;
}

/* The HTTP transport: attempts until a response, a refusal, or the last attempt. */
static enum atb_status http_call(struct atb_llm_client *c, const char *body,
				 enum atb_llm_expect expect, struct atb_llm_result *r,
				 struct atb_error *err)
{
	int64_t t0 = atbi_monotonic_ns();
	enum atb_status st;
	int k;

	for (k = 1; k <= c->cfg.max_attempts; k++) {
		struct sink b = {0};
		char why[CURL_ERROR_SIZE + 64];
		int crc;
		long code;
		double wait_ms, ra;

		r->attempts = k;
		st = post_once(c, body, &b, &crc, &code, why, sizeof(why), err);
		if (st) {
			atb_free(b.p);
			return st;
		}
		r->http_status = (int)code;
		atb_free(r->response);
		r->response = NULL;
		if (!crc && code >= 200 && code <= 299) {
			if (b.p && !valid_utf8(b.p, b.n)) {
				snprintf(r->error, sizeof(r->error),
					 "the response body is not valid utf-8 (%zu bytes)", b.n);
				atb_free(b.p);
				break;
			}
			r->response = b.p ? b.p : atb_strdup("");
			r->error[0] = '\0';
			atbi_llm_parse_response(r, expect);
			r->latency_s = (double)(atbi_monotonic_ns() - t0) / 1e9;
			return r->outcome == ATB_LLM_FAILED ? ATB_ERR_LLM : ATB_OK;
		}
		if (crc)
			snprintf(r->error, sizeof(r->error), "attempt %d: %s", k, why);
		else
			snprintf(r->error, sizeof(r->error), "attempt %d: http %ld: %.300s", k, code,
				 b.p && valid_utf8(b.p, b.n) ? b.p : "");
		atb_free(b.p);
		/* a 4xx other than 429 is the request's fault: asking again changes nothing */
		if (!crc && !retryable_http(code))
			break;
		if (crc == CURLE_UNSUPPORTED_PROTOCOL || crc == CURLE_URL_MALFORMAT ||
		    crc == CURLE_OUT_OF_MEMORY)
			break;
		if (k == c->cfg.max_attempts)
			break;
		wait_ms = atbi_llm_backoff_ms(&c->cfg, k, (double)(next_rand(c) >> 11) / 9007199254740992.0);
		ra = b.retry_after[0] ? atbi_llm_retry_after_s(b.retry_after,
							       atbi_realtime_ns() / 1000000000) : -1;
		if (ra > c->cfg.retry_after_max_s) {
			size_t len = strlen(r->error);

			snprintf(r->error + len, sizeof(r->error) - len,
				 "; the server asks to retry after %.0f s, over the %.0f s allowed",
				 ra, c->cfg.retry_after_max_s);
			break;
		}
		/* PROTO: llm -- Retry-After is a floor under the backoff, never shortened */
		if (ra * 1000 > wait_ms)
			wait_ms = ra * 1000;
		sleep_ms(wait_ms);
	}
	r->latency_s = (double)(atbi_monotonic_ns() - t0) / 1e9;
	r->outcome = ATB_LLM_FAILED;
	if (!r->error[0])
		snprintf(r->error, sizeof(r->error), "no response");
	return ATB_ERR_LLM;
}

/* The replay transport: the k-th unused recorded call with this hash. */
static enum atb_status replay_call(struct atb_llm_client *c, const char *hash,
				   enum atb_llm_expect expect, struct atb_llm_result *r,
				   struct atb_error *err)
{
	size_t i, seen = 0;

	for (i = 0; i < c->nrec; i++) {
		struct atbi_llm_recorded *x = &c->rec[i];

		if (strcmp(x->request_hash, hash))
			continue;
		seen++;
		if (x->used)
			continue;
		x->used = 1;
		r->attempts = 0;
		r->http_status = x->http_status;
		r->latency_s = x->latency_s;
		if (x->response && !(r->response = atb_strdup(x->response)))
			return atb_error_set(err, ATB_ERR_NOMEM, "cannot replay a call: out of memory");
		if (x->error)
			snprintf(r->error, sizeof(r->error), "%s", x->error);
		if (r->response && !x->error) {
			atbi_llm_parse_response(r, expect);
		} else {
			r->outcome = ATB_LLM_FAILED;
			if (!r->error[0])
				snprintf(r->error, sizeof(r->error), "no response");
		}
		return r->outcome == ATB_LLM_FAILED ? ATB_ERR_LLM : ATB_OK;
	}
	if (seen)
		return atb_error_set(err, ATB_ERR_NOT_FOUND,
				     "request %.16s... was recorded %zu time(s) in run '%s' and every"
				     " recording is used: this call was not recorded", hash, seen,
				     c->replay_run);
	return atb_error_set(err, ATB_ERR_NOT_FOUND,
			     "request %.16s... was not recorded in run '%s': a replay answers only"
			     " recorded requests", hash, c->replay_run);
}

enum atb_status atb_llm_call(struct atb_llm_client *c, const struct atb_llm_request *rq,
			     struct atb_llm_result *out, struct atb_error *err)
{
	struct atbi_llm_row row;
	char *body = NULL, *params = NULL;
	json_t *pj;
	enum atb_status st, rst;

	result_init(out);
	if (!c || !rq || !rq->prompt)
		return atb_error_set(err, ATB_ERR_USAGE, "a model call needs a client and a prompt");
	if (!isfinite(rq->temperature) || rq->temperature < 0)
		return atb_error_set(err, ATB_ERR_USAGE, "temperature %g is not finite and >= 0",
				     rq->temperature);
	if (c->store && c->run[0]) {
		struct atb_llm_run_stats rs;

		/* a halted run asks no server (the schema refuses its rows anyway) */
		st = atb_llm_run_stats(c->store, c->run, &rs, err);
		if (st)
			return st;
		if (rs.halted)
			return atb_error_set(err, ATB_ERR_USAGE,
					     "run '%s' halted as an infrastructure defect (%s) after %lld"
					     " calls; it takes no more (atb-rule:infrastructure_defect)",
					     c->run, rs.halt_reason, (long long)rs.calls);
	}
	st = request_body(c, rq, &body, err);
	if (st)
		return st;
	st = atbi_sha256_hex(body, strlen(body), out->request_hash);
	if (st) {
		atb_free(body);
		return atb_error_set(err, st, "cannot hash the request");
	}
	if (c->replay)
		st = replay_call(c, out->request_hash, rq->expect, out, err);
	else
		st = http_call(c, body, rq->expect, out, err);
	if (ATB_PRIMARY(st) == ATB_ERR_NOT_FOUND || (st && st != ATB_ERR_LLM)) {
		atb_free(body);
		return st;
	}
	if (st == ATB_ERR_LLM)
		atb_error_set(err, ATB_ERR_LLM, "model call failed: %s", out->error);
	if (c->prices)
		out->cost_usd = atbi_llm_cost(c->prices, c->cfg.model, out);
	if (!c->store || !c->run[0]) {
		atb_free(body);
		return st;
	}
	/* what was asked, without the key: the URL's host part may name a tenant, so keep it */
	pj = json_pack("{s:i, s:f, s:i, s:f, s:f, s:s, s:s, s:s?}",
		       "max_tokens", c->p->llm.max_output_tokens, "timeout_s", c->timeout_s,
		       "max_attempts", c->cfg.max_attempts, "backoff_base_ms", c->cfg.backoff_base_ms,
		       "backoff_max_ms", c->cfg.backoff_max_ms, "url", c->replay ? "" : c->url,
		       "protocol_digest", c->p->digest, "price_table_sha256",
		       c->prices ? c->prices_digest : NULL);
	if (pj && c->replay)
		json_object_set_new(pj, "replay_of", json_string(c->replay_run));
	if (pj)
		json_object_set_new(pj, "expect", json_string(rq->expect == ATB_LLM_EXPECT_JSON ? "json" :
						       rq->expect == ATB_LLM_EXPECT_FENCED ? "fenced" :
						       rq->expect == ATB_LLM_EXPECT_FILES ? "files" : "text"));
	if (!pj || atbi_json_canonical(pj, &params, err)) {
		json_decref(pj);
		atb_free(body);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot record a call: out of memory");
	}
	json_decref(pj);
	row.run = c->run;
	row.transport = c->replay ? "replay" : "http";
	row.request_hash = out->request_hash;
	row.request = body;
	row.prompt = rq->prompt;
	row.model = c->cfg.model;
	row.params = params;
	row.r = out;
	rst = atbi_llm_record(c->store, c->p, &row, c->cfg.api_key, &out->call_id, &out->n,
			      &out->alarm, err);
	atb_free(body);
	atb_free(params);
	/* the halt outranks the call's own failure: the run is over either way */
	return rst ? rst : st;
}
