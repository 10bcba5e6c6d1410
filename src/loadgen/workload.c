/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Seeded workloads: option parsing, length distributions, synthetic,
 * repetitive and random prompts, JSONL datasets (ShareGPT-style
 * conversations or {"prompt", "output_len"}), and the precomputed arrival
 * schedule, with the canonical JSON and digest that prove two arms ran the
 * same workload.
 *
 * Randomness is GSL's MT19937 and GSL's distributions only.  Two streams
 * derive from the seed: one for prompts and lengths, one for arrivals, so
 * the arrival process can change without changing the prompts.
 *
 * Does not: send anything (client.c) or compute metrics (metrics.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <jansson.h>

#include "atb/alloc.h"
#include "loadgen_int.h"
#include "banned.h"

#define DIST_CLIP_MAX 1048576L

/* Common English words: about one token each with the usual BPE vocabularies. */
static const char *const words[] = {
	"the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be",
	"by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but",
	"have", "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her",
	"has", "there", "been", "if", "more", "when", "will", "would", "who", "so", "no", "she",
	"other", "its", "may", "these", "what", "them", "than", "some", "him", "time", "into",
	"only", "do", "two", "then", "first", "any", "new", "like", "could", "our", "over",
	"such", "out", "also", "most", "made", "after", "many", "about", "very", "where", "way",
	"system", "work", "people", "water", "light", "house", "world", "school", "river",
	"city", "night", "paper", "music", "story", "power", "market", "field", "table",
	"order", "answer", "number", "garden", "window", "energy", "memory", "signal", "engine",
	"bridge", "forest", "island", "letter", "mountain", "season", "silver", "winter",
	"summer", "morning", "evening", "simple", "quick", "small", "large", "bright", "quiet",
	"early", "late", "green", "blue", "red", "white", "black", "strong", "gentle",
	"careful", "open", "close", "happy", "clear", "build", "carry", "follow", "measure",
	"write", "read", "travel", "listen", "change", "begin", "move", "hold", "bring", "turn",
	"keep", "show", "learn", "grow", "speak", "draw", "because", "while", "before",
	"between", "under", "around", "through", "without", "again", "always", "never", "often",
	"today", "together", "almost", "above", "below", "across", "behind", "inside",
	"question", "problem", "reason", "history", "science", "language", "picture", "country",
	"family", "student", "teacher", "doctor", "farmer", "captain", "village", "harbor",
	"station", "library", "kitchen", "machine", "stone", "cloud", "storm", "wind", "fire",
	"ocean", "valley", "desert", "planet", "star", "apple", "bread", "coffee", "sugar",
	"salt", "honey", "lemon", "pepper", "rice", "cheese", "circle", "square", "line",
	"point", "angle", "shape", "color", "sound", "voice", "word", "minute", "hour", "week",
	"month", "year", "moment", "future", "past", "present", "century", "north", "south",
	"east", "west", "center", "corner", "edge", "surface", "layer", "path",
};
#define NWORDS (sizeof(words) / sizeof(words[0]))

const char *atb_loadgen_failure_name(enum atb_loadgen_failure f)
{
	static const char *const names[ATB_LOADGEN_FAIL_COUNT] = {
		"ok", "connect", "http_4xx", "http_5xx", "timeout", "reset",
		"malformed_event", "too_large", "http_other", "other",
		"aborted",
	};

	if ((unsigned)f >= ATB_LOADGEN_FAIL_COUNT)
		return "other";
	return names[f];
}

void atb_loadgen_config_init(struct atb_loadgen_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->endpoint = ATB_LOADGEN_COMPLETIONS;
	cfg->model = "default";
	cfg->stream = 1;
	cfg->requests = 100;
	cfg->prompts = ATB_LOADGEN_PROMPTS_SYNTHETIC;
	cfg->input_len = (struct atb_loadgen_dist){ATB_LOADGEN_DIST_FIXED, 128, 0, 1, DIST_CLIP_MAX};
	cfg->output_len = cfg->input_len;
	cfg->arrival = ATB_LOADGEN_ARRIVAL_CLOSED;
	cfg->burstiness = 1.0;
	cfg->concurrency = 1;
	cfg->timeout_s = 600.0;
	cfg->max_response_bytes = (size_t)64 << 20;
	cfg->reuse_connections = 1;
}

/* Parse a finite number that fills the whole of [s, s+len). */
static int parse_number(const char *s, size_t len, double *out)
{
	char buf[64];
	char *end;

	if (!len || len >= sizeof(buf))
		return -1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	errno = 0;
	*out = strtod(buf, &end);
	if (errno || *end || !isfinite(*out))
		return -1;
	return 0;
}

enum atb_status atb_loadgen_dist_parse(const char *text, struct atb_loadgen_dist *out,
				       struct atb_error *err)
{
	static const char *const kinds[] = {"fixed", "uniform", "normal", "lognormal"};
	static const size_t nparams[] = {1, 2, 2, 2};
	double v[4] = {0, 0, 0, 0};
	size_t nv = 0, k;
	const char *p = text, *colon;
	struct atb_loadgen_dist d = {ATB_LOADGEN_DIST_FIXED, 0, 0, 1, DIST_CLIP_MAX};

	if (!text || !*text)
		return atb_error_set(err, ATB_ERR_USAGE, "empty length distribution");
	colon = strchr(text, ':');
	if (colon) {
		for (k = 0; k < 4; k++)
			if (strlen(kinds[k]) == (size_t)(colon - text) &&
			    !strncmp(text, kinds[k], (size_t)(colon - text)))
				break;
		if (k == 4)
			return atb_error_set(err, ATB_ERR_USAGE,
					     "unknown length distribution '%s': use fixed, uniform, "
					     "normal or lognormal", text);
		d.kind = (enum atb_loadgen_dist_kind)k;
		p = colon + 1;
	}
	for (;;) {
		const char *e = strchr(p, ':');
		size_t len = e ? (size_t)(e - p) : strlen(p);

		if (nv == 4 || parse_number(p, len, &v[nv]))
			return atb_error_set(err, ATB_ERR_USAGE,
					     "bad length distribution '%s': parameters must be numbers",
					     text);
		nv++;
		if (!e)
			break;
		p = e + 1;
	}
	k = (size_t)d.kind;
	if (nv != nparams[k] && !(k >= 2 && nv == 4))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "bad length distribution '%s': %s takes %s", text, kinds[k],
				     k == 0 ? "N" : k == 1 ? "LO:HI" :
				     k == 2 ? "MEAN:SD[:MIN:MAX]" : "MEDIAN:SIGMA[:MIN:MAX]");
	d.a = v[0];
	d.b = nv > 1 ? v[1] : 0;
	if (nv == 4) {
		if (v[2] != floor(v[2]) || v[3] != floor(v[3]) || v[2] < 1 || v[3] < v[2] ||
		    v[3] > DIST_CLIP_MAX)
			return atb_error_set(err, ATB_ERR_USAGE,
					     "bad length distribution '%s': need integers "
					     "1 <= MIN <= MAX <= %ld", text, DIST_CLIP_MAX);
		d.min = (long)v[2];
		d.max = (long)v[3];
	}
	switch (d.kind) {
	case ATB_LOADGEN_DIST_FIXED:
	case ATB_LOADGEN_DIST_UNIFORM:
		if (d.a != floor(d.a) || d.a < 1 || d.a > DIST_CLIP_MAX ||
		    (d.kind == ATB_LOADGEN_DIST_UNIFORM &&
		     (d.b != floor(d.b) || d.b < d.a || d.b > DIST_CLIP_MAX)))
			return atb_error_set(err, ATB_ERR_USAGE,
					     "bad length distribution '%s': lengths must be "
					     "integers in [1, %ld]%s", text, DIST_CLIP_MAX,
					     d.kind == ATB_LOADGEN_DIST_UNIFORM ? " with LO <= HI" : "");
		break;
	case ATB_LOADGEN_DIST_NORMAL:
	case ATB_LOADGEN_DIST_LOGNORMAL:
		if (d.a <= 0 || d.b < 0)
			return atb_error_set(err, ATB_ERR_USAGE,
					     "bad length distribution '%s': need %s > 0 and %s >= 0",
					     text, d.kind == ATB_LOADGEN_DIST_NORMAL ? "MEAN" : "MEDIAN",
					     d.kind == ATB_LOADGEN_DIST_NORMAL ? "SD" : "SIGMA");
		break;
	}
	*out = d;
	return ATB_OK;
}

static enum atb_status parse_name(const char *text, const char *const *names, size_t n,
				  int *out, const char *what, const char *choices,
				  struct atb_error *err)
{
	size_t i;

	for (i = 0; text && i < n; i++)
		if (!strcmp(text, names[i])) {
			*out = (int)i;
			return ATB_OK;
		}
	return atb_error_set(err, ATB_ERR_USAGE, "unknown %s '%s': use %s", what,
			     text ? text : "", choices);
}

enum atb_status atb_loadgen_arrival_parse(const char *text, enum atb_loadgen_arrival *out,
					  struct atb_error *err)
{
	static const char *const names[] = {"poisson", "gamma", "constant", "closed"};
	int v = 0;
	enum atb_status s = parse_name(text, names, 4, &v, "arrival process",
				       "poisson, gamma, constant or closed", err);

	if (!s)
		*out = (enum atb_loadgen_arrival)v;
	return s;
}

enum atb_status atb_loadgen_endpoint_parse(const char *text, enum atb_loadgen_endpoint *out,
					   struct atb_error *err)
{
	static const char *const names[] = {"completions", "chat"};
	int v = 0;
	enum atb_status s = parse_name(text, names, 2, &v, "endpoint", "completions or chat", err);

	if (!s)
		*out = (enum atb_loadgen_endpoint)v;
	return s;
}

enum atb_status atb_loadgen_prompts_parse(const char *text, enum atb_loadgen_prompts *out,
					  struct atb_error *err)
{
	static const char *const names[] = {"synthetic", "repetitive", "random"};
	int v = 0;
	enum atb_status s = parse_name(text, names, 3, &v, "prompt kind",
				       "synthetic, repetitive, random or a .jsonl path", err);

	if (!s)
		*out = (enum atb_loadgen_prompts)v;
	return s;
}

static const char *dist_name(enum atb_loadgen_dist_kind k)
{
	static const char *const names[] = {"fixed", "uniform", "normal", "lognormal"};

	return (unsigned)k < 4 ? names[k] : "fixed";
}

static const char *arrival_name(enum atb_loadgen_arrival a)
{
	static const char *const names[] = {"poisson", "gamma", "constant", "closed"};

	return (unsigned)a < 4 ? names[a] : "closed";
}

static const char *prompts_name(enum atb_loadgen_prompts p)
{
	static const char *const names[] = {"synthetic", "repetitive", "random", "dataset"};

	return (unsigned)p < 4 ? names[p] : "synthetic";
}

static long draw(const struct atb_loadgen_dist *d, gsl_rng *r)
{
	double x;

	switch (d->kind) {
	case ATB_LOADGEN_DIST_UNIFORM:
		x = d->a + (double)gsl_rng_uniform_int(r, (unsigned long)(d->b - d->a) + 1);
		break;
	case ATB_LOADGEN_DIST_NORMAL:
		x = d->a + gsl_ran_gaussian(r, d->b);
		break;
	case ATB_LOADGEN_DIST_LOGNORMAL:
		x = gsl_ran_lognormal(r, log(d->a), d->b);
		break;
	default:
		x = d->a;
		break;
	}
	x = nearbyint(x);
	if (!(x >= (double)d->min))
		return d->min;
	if (x > (double)d->max)
		return d->max;
	return (long)x;
}

static int sbuf_word(struct atbi_buf *b, const char *w)
{
	if (b->len && atbi_buf_add(b, " ", 1, SIZE_MAX / 2))
		return -1;
	return atbi_buf_add(b, w, strlen(w), SIZE_MAX / 2);
}

/*
 * A prompt of about n tokens.  synthetic: n words from the list; repetitive:
 * a phrase of 8..16 words drawn once, repeated to n words; random: n/2
 * strings of four random letters (about two tokens each), so no n-gram
 * recurs.
 */
static char *make_prompt(enum atb_loadgen_prompts kind, long n, gsl_rng *r)
{
	struct atbi_buf b = {0};
	size_t phrase[16], plen = 0;
	long i;

	if (kind == ATB_LOADGEN_PROMPTS_REPETITIVE) {
		plen = 8 + gsl_rng_uniform_int(r, 9);
		for (i = 0; i < (long)plen; i++)
			phrase[i] = gsl_rng_uniform_int(r, NWORDS);
	}
	if (kind == ATB_LOADGEN_PROMPTS_RANDOM) {
		long nw = n / 2 > 0 ? n / 2 : 1;

		for (i = 0; i < nw; i++) {
			char w[5];
			int j;

			for (j = 0; j < 4; j++)
				w[j] = (char)('a' + gsl_rng_uniform_int(r, 26));
			w[4] = '\0';
			if (sbuf_word(&b, w))
				goto fail;
		}
		return b.p;
	}
	for (i = 0; i < n; i++) {
		size_t w = plen ? phrase[(size_t)i % plen] : gsl_rng_uniform_int(r, NWORDS);

		if (sbuf_word(&b, words[w]))
			goto fail;
	}
	return b.p;
fail:
	atb_free(b.p);
	return NULL;
}

long atbi_loadgen_count_words(const char *s)
{
	long n = 0;
	int in = 0;

	for (; s && *s; s++) {
		int space = *s == ' ' || *s == '\n' || *s == '\t' || *s == '\r';

		if (!space && !in)
			n++;
		in = !space;
	}
	return n;
}

/* One dataset entry: a prompt and an output length (0: draw one). */
struct entry {
	char *prompt;
	long output_len;
};

static enum atb_status bad_line(struct atb_error *err, enum atb_status s, const char *path,
				unsigned line, const char *field, const char *msg)
{
	return atb_error_set_at(err, s, path, line, 0, field, "%s", msg);
}

static int is_role(const char *from, const char *a, const char *b)
{
	return from && (!strcmp(from, a) || !strcmp(from, b));
}

static enum atb_status parse_entry(json_t *o, const char *path, unsigned line,
				   struct entry *e, struct atb_error *err)
{
	json_t *conv = json_object_get(o, "conversations");
	json_t *prompt = json_object_get(o, "prompt");

	e->prompt = NULL;
	e->output_len = 0;
	if (conv) {
		size_t i, n;
		const char *p = NULL, *reply = NULL;

		if (!json_is_array(conv) || !json_array_size(conv))
			return bad_line(err, ATB_ERR_SCHEMA, path, line, "conversations",
					"'conversations' must be a non-empty array of turns");
		n = json_array_size(conv);
		for (i = 0; i < n; i++) {
			json_t *t = json_array_get(conv, i);
			json_t *from = json_object_get(t, "from");
			json_t *value = json_object_get(t, "value");
			char field[64];

			snprintf(field, sizeof(field), "conversations[%zu]", i);
			if (!json_is_object(t) || !json_is_string(from) || !json_is_string(value))
				return bad_line(err, ATB_ERR_SCHEMA, path, line, field,
						"a turn needs string 'from' and 'value'");
			if (!p && is_role(json_string_value(from), "human", "user"))
				p = json_string_value(value);
			else if (p && !reply && is_role(json_string_value(from), "gpt", "assistant"))
				reply = json_string_value(value);
		}
		if (!p || !*p)
			return bad_line(err, ATB_ERR_SCHEMA, path, line, "conversations",
					"no 'human' turn with a non-empty value");
		e->prompt = atb_strdup(p);
		if (reply)
			e->output_len = atbi_loadgen_count_words(reply);
		if (reply && !e->output_len)
			e->output_len = 1;
	} else if (prompt) {
		json_t *ol = json_object_get(o, "output_len");

		if (!json_is_string(prompt) || !*json_string_value(prompt))
			return bad_line(err, ATB_ERR_SCHEMA, path, line, "prompt",
					"'prompt' must be a non-empty string");
		if (ol && (!json_is_integer(ol) || json_integer_value(ol) < 1 ||
			   json_integer_value(ol) > DIST_CLIP_MAX)) {
			char *v = json_dumps(ol, JSON_ENCODE_ANY | JSON_COMPACT);

			atb_error_set_at(err, ATB_ERR_SCHEMA, path, line, 0, "output_len",
					 "bad output_len '%.40s': need an integer in [1, %ld]",
					 v ? v : "?", DIST_CLIP_MAX);
			atb_free(v);
			return ATB_ERR_SCHEMA;
		}
		e->prompt = atb_strdup(json_string_value(prompt));
		if (ol)
			e->output_len = (long)json_integer_value(ol);
	} else {
		return bad_line(err, ATB_ERR_SCHEMA, path, line, "",
				"a line needs 'conversations' (ShareGPT) or 'prompt'");
	}
	if (!e->prompt)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory reading '%s'", path);
	return ATB_OK;
}

static void entries_free(struct entry *es, size_t n)
{
	size_t i;

	for (i = 0; es && i < n; i++)
		atb_free(es[i].prompt);
	atb_free(es);
}

/* Read and check every line of a JSONL dataset. */
static enum atb_status load_dataset(const char *path, struct entry **out, size_t *nout,
				    char sha[65], struct atb_error *err)
{
	char *text = NULL, *p, *nl;
	size_t len = 0, n = 0, cap = 0;
	struct entry *es = NULL;
	unsigned line = 0;
	enum atb_status s;

	*out = NULL;
	*nout = 0;
	s = atbi_read_file(path, &text, &len, err);
	if (s)
		return s;
	s = atbi_sha256_hex(text, len, sha);
	if (s) {
		atb_free(text);
		return atb_error_set(err, s, "cannot hash dataset '%s'", path);
	}
	for (p = text; p < text + len; p = nl + 1) {
		json_t *o;
		json_error_t je;
		size_t ll;

		line++;
		nl = memchr(p, '\n', (size_t)(text + len - p));
		if (!nl)
			nl = text + len;
		ll = (size_t)(nl - p);
		while (ll && (p[ll - 1] == '\r' || p[ll - 1] == ' ' || p[ll - 1] == '\t'))
			ll--;
		if (!ll)
			continue;
		o = json_loadb(p, ll, JSON_REJECT_DUPLICATES, &je);
		if (!o && ATBI_JSON_OOM(&je)) {
			s = atb_error_set(err, ATB_ERR_NOMEM, "out of memory reading '%s'", path);
			goto fail;
		}
		if (!o) {
			s = atb_error_set_at(err, ATB_ERR_PARSE, path, line,
					     je.column > 0 ? (unsigned)je.column : 0, "",
					     "malformed JSON: %s", je.text);
			goto fail;
		}
		if (!json_is_object(o)) {
			json_decref(o);
			s = bad_line(err, ATB_ERR_SCHEMA, path, line, "",
				     "a line must be a JSON object");
			goto fail;
		}
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 64;
			struct entry *q = atb_realloc(es, nc * sizeof(*es));

			if (!q) {
				json_decref(o);
				s = atb_error_set(err, ATB_ERR_NOMEM, "out of memory reading '%s'", path);
				goto fail;
			}
			es = q;
			cap = nc;
		}
		s = parse_entry(o, path, line, &es[n], err);
		json_decref(o);
		if (s)
			goto fail;
		n++;
	}
	atb_free(text);
	if (!n) {
		entries_free(es, n);
		return atb_error_set_at(err, ATB_ERR_SCHEMA, path, 0, 0, "",
					"dataset has no entries");
	}
	*out = es;
	*nout = n;
	return ATB_OK;
fail:
	atb_free(text);
	entries_free(es, n);
	return s;
}

static unsigned long derive_seed(uint64_t seed, uint64_t stream)
{
	/* splitmix64: distinct, well-mixed seeds for the two streams */
	uint64_t z = seed + stream * 0x9e3779b97f4a7c15ull + 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	/* MT19937 uses 32 bits of its seed, and GSL maps 0 to its default */
	return (unsigned long)(z & 0xffffffffu) | 1ul;
}

static enum atb_status check_config(const struct atb_loadgen_config *cfg, struct atb_error *err)
{
	const char *f = NULL, *m = NULL;

	if (!cfg->requests)
		f = "requests", m = "need at least one measured request";
	else if (cfg->requests + cfg->warmup > 10000000)
		f = "requests", m = "more than 10000000 requests";
	else if ((unsigned)cfg->arrival > ATB_LOADGEN_ARRIVAL_CLOSED)
		f = "arrival", m = "unknown arrival process";
	else if (cfg->arrival != ATB_LOADGEN_ARRIVAL_CLOSED &&
		 !(cfg->rate_per_s > 0 && isfinite(cfg->rate_per_s)))
		f = "rate_per_s", m = "an open-loop arrival process needs a rate > 0";
	else if (cfg->arrival == ATB_LOADGEN_ARRIVAL_GAMMA &&
		 !(cfg->burstiness > 0 && isfinite(cfg->burstiness)))
		f = "burstiness", m = "gamma arrivals need a burstiness (shape) > 0";
	else if (cfg->prompts == ATB_LOADGEN_PROMPTS_DATASET && !cfg->dataset_path)
		f = "dataset_path", m = "dataset prompts need a dataset path";
	else if ((unsigned)cfg->prompts > ATB_LOADGEN_PROMPTS_DATASET)
		f = "prompts", m = "unknown prompt kind";
	else if (!(cfg->temperature >= 0 && isfinite(cfg->temperature)))
		f = "temperature", m = "temperature must be >= 0";
	if (!f)
		return ATB_OK;
	return atb_error_set_at(err, ATB_ERR_USAGE, "", 0, 0, f, "%s", m);
}

static json_t *dist_json(const struct atb_loadgen_dist *d)
{
	return json_pack("{s:s, s:f, s:f, s:I, s:I}", "kind", dist_name(d->kind), "a", d->a,
			 "b", d->b, "min", (json_int_t)d->min, "max", (json_int_t)d->max);
}

static enum atb_status build_json(const struct atb_loadgen_config *cfg,
				  struct atb_loadgen_workload *wl, const char *dataset_sha,
				  struct atb_error *err)
{
	json_t *root, *arr, *conf;
	size_t i;
	enum atb_status s;

	conf = json_pack("{s:I, s:I, s:I, s:s, s:o, s:o, s:s, s:f, s:f, s:I, s:b, s:f}",
			 "seed", (json_int_t)cfg->seed, "requests", (json_int_t)cfg->requests,
			 "warmup", (json_int_t)cfg->warmup, "prompts", prompts_name(cfg->prompts),
			 "input_len", dist_json(&cfg->input_len),
			 "output_len", dist_json(&cfg->output_len),
			 "arrival", arrival_name(cfg->arrival),
			 "rate_per_s", cfg->arrival == ATB_LOADGEN_ARRIVAL_CLOSED ? 0.0 : cfg->rate_per_s,
			 "burstiness", cfg->arrival == ATB_LOADGEN_ARRIVAL_GAMMA ? cfg->burstiness : 0.0,
			 "concurrency", (json_int_t)(cfg->arrival == ATB_LOADGEN_ARRIVAL_CLOSED ?
						     cfg->concurrency : 0),
			 "ignore_eos", cfg->ignore_eos, "temperature", cfg->temperature);
	arr = json_array();
	root = json_pack("{s:i, s:o, s:o}", "workload_version", 1, "config", conf, "requests", arr);
	if (!root)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory building the workload");
	if (dataset_sha && json_object_set_new(json_object_get(root, "config"), "dataset_sha256",
					       json_string(dataset_sha))) {
		json_decref(root);
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory building the workload");
	}
	for (i = 0; i < wl->n; i++) {
		const struct atb_loadgen_request *q = &wl->items[i];

		if (json_array_append_new(arr, json_pack("{s:I, s:b, s:s, s:I, s:I, s:I}",
							 "index", (json_int_t)q->index,
							 "warmup", q->warmup, "prompt", q->prompt,
							 "input_len", (json_int_t)q->input_len,
							 "max_tokens", (json_int_t)q->max_tokens,
							 "intended_ns", (json_int_t)q->intended_ns))) {
			json_decref(root);
			return atb_error_set(err, ATB_ERR_NOMEM, "out of memory building the workload");
		}
	}
	s = atbi_json_canonical(root, &wl->json, err);
	json_decref(root);
	if (s)
		return s;
	return atbi_sha256_hex(wl->json, strlen(wl->json), wl->digest);
}

/* Intended send times of the measured requests (PROTO: engine.paired_order seeds them). */
static void schedule(const struct atb_loadgen_config *cfg, struct atb_loadgen_workload *wl,
		     gsl_rng *r)
{
	double t = 0;
	size_t i, k = 0;

	for (i = 0; i < wl->n; i++) {
		struct atb_loadgen_request *q = &wl->items[i];

		if (q->warmup || cfg->arrival == ATB_LOADGEN_ARRIVAL_CLOSED) {
			q->intended_ns = -1;
			continue;
		}
		if (k++) {
			switch (cfg->arrival) {
			case ATB_LOADGEN_ARRIVAL_POISSON:
				t += gsl_ran_exponential(r, 1.0 / cfg->rate_per_s);
				break;
			case ATB_LOADGEN_ARRIVAL_GAMMA:
				t += gsl_ran_gamma(r, cfg->burstiness,
						   1.0 / (cfg->rate_per_s * cfg->burstiness));
				break;
			default:
				t = (double)(k - 1) / cfg->rate_per_s;
				break;
			}
		}
		q->intended_ns = (int64_t)llround(t * 1e9);
	}
}

enum atb_status atb_loadgen_workload_new(const struct atb_loadgen_config *cfg,
					 struct atb_loadgen_workload **out, struct atb_error *err)
{
	struct atb_loadgen_workload *wl;
	struct entry *es = NULL;
	size_t nes = 0, i, *order = NULL;
	char sha[65];
	gsl_rng *rp = NULL, *ra = NULL;
	enum atb_status s;

	*out = NULL;
	s = check_config(cfg, err);
	if (s)
		return s;
	atb_alloc_install_json();
	if (cfg->prompts == ATB_LOADGEN_PROMPTS_DATASET) {
		s = load_dataset(cfg->dataset_path, &es, &nes, sha, err);
		if (s)
			return s;
	}
	wl = atb_calloc(1, sizeof(*wl));
	if (wl)
		wl->items = atb_calloc(cfg->warmup + cfg->requests, sizeof(*wl->items));
	rp = gsl_rng_alloc(gsl_rng_mt19937);
	ra = gsl_rng_alloc(gsl_rng_mt19937);
	if (nes)
		order = atb_malloc(nes * sizeof(*order));
	if (!wl || !wl->items || !rp || !ra || (nes && !order)) {
		s = atb_error_set(err, ATB_ERR_NOMEM, "out of memory building the workload");
		goto done;
	}
	gsl_rng_set(rp, derive_seed(cfg->seed, 1));
	gsl_rng_set(ra, derive_seed(cfg->seed, 2));
	for (i = 0; i < nes; i++)
		order[i] = i;
	wl->n = cfg->warmup + cfg->requests;
	for (i = 0; i < wl->n; i++) {
		struct atb_loadgen_request *q = &wl->items[i];

		q->index = i;
		q->warmup = i < cfg->warmup;
		if (nes) {
			/* a fresh shuffle for every pass over the dataset */
			const struct entry *e;

			if (i % nes == 0)
				gsl_ran_shuffle(rp, order, nes, sizeof(*order));
			e = &es[order[i % nes]];
			q->prompt = atb_strdup(e->prompt);
			q->input_len = atbi_loadgen_count_words(e->prompt);
			q->max_tokens = e->output_len ? e->output_len : draw(&cfg->output_len, rp);
		} else {
			q->input_len = draw(&cfg->input_len, rp);
			q->max_tokens = draw(&cfg->output_len, rp);
			q->prompt = make_prompt(cfg->prompts, q->input_len, rp);
		}
		if (!q->prompt) {
			s = atb_error_set(err, ATB_ERR_NOMEM, "out of memory building the workload");
			goto done;
		}
	}
	schedule(cfg, wl, ra);
	s = build_json(cfg, wl, nes ? sha : NULL, err);
done:
	gsl_rng_free(rp);
	gsl_rng_free(ra);
	atb_free(order);
	entries_free(es, nes);
	if (s) {
		atb_loadgen_workload_free(wl);
		return s;
	}
	*out = wl;
	return ATB_OK;
}

void atb_loadgen_workload_free(struct atb_loadgen_workload *wl)
{
	size_t i;

	if (!wl)
		return;
	for (i = 0; wl->items && i < wl->n; i++)
		atb_free(wl->items[i].prompt);
	atb_free(wl->items);
	atb_free(wl->json);
	atb_free(wl);
}

size_t atb_loadgen_workload_count(const struct atb_loadgen_workload *wl)
{
	return wl ? wl->n : 0;
}

const struct atb_loadgen_request *atb_loadgen_workload_get(const struct atb_loadgen_workload *wl,
							   size_t i)
{
	return wl && i < wl->n ? &wl->items[i] : NULL;
}

enum atb_status atb_loadgen_workload_json(const struct atb_loadgen_workload *wl, char **json,
					  struct atb_error *err)
{
	*json = atb_strdup(wl->json);
	if (!*json)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory copying the workload");
	return ATB_OK;
}

enum atb_status atb_loadgen_workload_digest(const struct atb_loadgen_workload *wl,
					    char out[65], struct atb_error *err)
{
	memcpy(out, wl->digest, 65);
	return ATB_OK;
}
