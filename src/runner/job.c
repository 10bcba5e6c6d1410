/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The measurement job: parsing and checking the JSON object that the harness
 * sends and atb-runner reads (docs/internals/runner.md), and filling its
 * protocol sections from a loaded protocol.  Every refusal names the field.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "atb/alloc.h"
#include "atb/kernel.h"
#include "atb/protocol.h"
#include "atb/runner.h"
#include "util.h"
#include "banned.h"

static const char *const dtype_names[] = {"fp32", "fp64", "int32", "int64", "fp16", "bf16"};
#define NDTYPES (sizeof(dtype_names) / sizeof(dtype_names[0]))

const char *atb_dtype_name(enum atb_dtype d)
{
	return (unsigned)d < NDTYPES ? dtype_names[d] : "?";
}

size_t atb_dtype_size(enum atb_dtype d)
{
	switch (d) {
	case ATB_DTYPE_FP64:
	case ATB_DTYPE_INT64:
		return 8;
	case ATB_DTYPE_FP16:
	case ATB_DTYPE_BF16:
		return 2;
	default:
		return 4;
	}
}

int atb_dtype_is_real(enum atb_dtype d)
{
	return d == ATB_DTYPE_FP32 || d == ATB_DTYPE_FP64 || d == ATB_DTYPE_FP16 ||
	       d == ATB_DTYPE_BF16;
}

double atb_dtype_unit_roundoff(enum atb_dtype d)
{
	switch (d) {
	case ATB_DTYPE_FP64:
		return 0x1p-53;
	case ATB_DTYPE_FP32:
		return 0x1p-24;
	case ATB_DTYPE_FP16:
		return 0x1p-11;
	case ATB_DTYPE_BF16:
		return 0x1p-8;
	default:
		return 0;
	}
}

enum atb_status atb_dtype_parse(const char *name, enum atb_dtype *out, struct atb_error *err)
{
	unsigned i;

	for (i = 0; i < NDTYPES; i++)
		if (name && !strcmp(name, dtype_names[i])) {
			*out = (enum atb_dtype)i;
			return ATB_OK;
		}
	return atb_error_set(err, ATB_ERR_SCHEMA,
			     "unsupported dtype '%s': the runner takes fp32, fp64, fp16, bf16, "
			     "int32, int64", name ? name : "");
}

/* ---- the 2-byte storage types ------------------------------------------- */

static uint32_t float_bits(float x)
{
	uint32_t u;

	memcpy(&u, &x, sizeof(u));
	return u;
}

static float bits_float(uint32_t u)
{
	float x;

	memcpy(&x, &u, sizeof(x));
	return x;
}

uint16_t atb_fp16_from_float(float x)
{
	uint32_t u = float_bits(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;

	if (a > 0x7f800000u)                 /* NaN: quiet, keep the payload's top bits */
		return (uint16_t)(sign | ATB_FP16_QNAN | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u)                /* >= 65520 (65504 + half an ulp, a tie to odd): inf */
		return (uint16_t)(sign | 0x7c00u);
	if (a >= 0x38800000u) {              /* a normal half: rebias, then round on 13 bits */
		a -= 0x38000000u;
		return (uint16_t)(sign | ((a + 0xfffu + ((a >> 13) & 1u)) >> 13));
	}
	if (a <= 0x33000000u)                /* <= 2^-25, half the smallest subnormal: 0 */
		return (uint16_t)sign;
	{
		/* a subnormal half: the significand in units of 2^-24 */
		uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126u - (a >> 23);
		uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);

		if (rem > half || (rem == half && (q & 1u)))
			q++;
		return (uint16_t)(sign | q);
	}
}

float atb_fp16_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;

	if (e == 0) {
		float v = (float)m * 0x1p-24f;   /* exact: 10 bits */

		return sign ? -v : v;
	}
	if (e == 31)
		return bits_float(sign | 0x7f800000u | (m << 13));
	return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t atb_bf16_from_float(float x)
{
	uint32_t u = float_bits(x);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	/* Round to nearest even on the low 16 bits; a carry into the exponent
	 * is right, and the largest finite numbers round up to infinity. */
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float atb_bf16_to_float(uint16_t h)
{
	return bits_float((uint32_t)h << 16);
}

static const char *const backend_names[] = {"cpu", "cuda"};

const char *atb_runner_backend_name(enum atb_runner_backend b)
{
	return (unsigned)b < 2 ? backend_names[b] : "?";
}

enum atb_status atb_runner_backend_parse(const char *name, enum atb_runner_backend *out,
					 struct atb_error *err)
{
	unsigned i;

	for (i = 0; i < 2; i++)
		if (name && !strcmp(name, backend_names[i])) {
			*out = (enum atb_runner_backend)i;
			return ATB_OK;
		}
	return atb_error_set(err, ATB_ERR_SCHEMA, "unknown backend '%s': expected cpu or cuda",
			     name ? name : "");
}

/* ---- field helpers: each sets the field path on failure --------------- */

static enum atb_status bad(struct atb_error *err, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static enum atb_status bad(struct atb_error *err, const char *field, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return atb_error_set_at(err, ATB_ERR_SCHEMA, "", 0, 0, field, "%s", msg);
}

static enum atb_status get_real(const json_t *o, const char *key, const char *path,
				int required, double *out)
{
	json_t *v = json_object_get(o, key);

	if (!v)
		return required ? ATB_ERR_NOT_FOUND : ATB_OK;
	if (!json_is_number(v))
		return ATB_ERR_SCHEMA;
	*out = json_number_value(v);
	if (!isfinite(*out))
		return ATB_ERR_SCHEMA;
	return ATB_OK;
}

static enum atb_status get_int(const json_t *o, const char *key, int required,
			       long long *out)
{
	json_t *v = json_object_get(o, key);

	if (!v)
		return required ? ATB_ERR_NOT_FOUND : ATB_OK;
	if (!json_is_integer(v))
		return ATB_ERR_SCHEMA;
	*out = json_integer_value(v);
	return ATB_OK;
}

static enum atb_status get_str(const json_t *o, const char *key, int required,
			       char *buf, size_t size)
{
	json_t *v = json_object_get(o, key);
	size_t n;

	if (!v)
		return required ? ATB_ERR_NOT_FOUND : ATB_OK;
	if (!json_is_string(v))
		return ATB_ERR_SCHEMA;
	n = json_string_length(v);
	if (n >= size || n == 0)
		return ATB_ERR_SCHEMA;
	memcpy(buf, json_string_value(v), n + 1);
	return ATB_OK;
}

/* Turn a helper status into a schema error for field prefix.key. */
static enum atb_status field_status(struct atb_error *err, enum atb_status st,
				    const char *prefix, const char *key)
{
	char field[256];

	if (st == ATB_OK)
		return ATB_OK;
	snprintf(field, sizeof(field), "%s%s%s", prefix, *prefix ? "." : "", key);
	if (st == ATB_ERR_NOT_FOUND)
		return bad(err, field, "missing field '%s'", key);
	return bad(err, field, "bad value for '%s'", key);
}

#define REAL(o, key, prefix, req, dst)                                            \
	do {                                                                      \
		double v_ = (dst);                                                \
		enum atb_status s_ = get_real((o), (key), (prefix), (req), &v_); \
		if (s_)                                                           \
			return field_status(err, s_, (prefix), (key));            \
		(dst) = v_;                                                       \
	} while (0)

#define INT(o, key, prefix, req, dst)                                  \
	do {                                                           \
		long long v_ = (long long)(dst);                       \
		enum atb_status s_ = get_int((o), (key), (req), &v_);  \
		if (s_)                                                \
			return field_status(err, s_, (prefix), (key)); \
		(dst) = v_;                                            \
	} while (0)

#define STR(o, key, prefix, req, buf)                                             \
	do {                                                                      \
		enum atb_status s_ = get_str((o), (key), (req), (buf), sizeof(buf)); \
		if (s_)                                                           \
			return field_status(err, s_, (prefix), (key));            \
	} while (0)

static enum atb_status parse_dist(const json_t *o, const char *path,
				  struct atb_runner_dist *d, struct atb_error *err)
{
	char kind[16] = "";

	if (!json_is_object(o))
		return bad(err, path, "expected an object for '%s'", path);
	STR(o, "name", path, 1, d->name);
	STR(o, "kind", path, 1, kind);
	if (!strcmp(kind, "uniform")) {
		d->normal = 0;
		REAL(o, "low", path, 1, d->low);
		REAL(o, "high", path, 1, d->high);
		if (!(d->low < d->high))
			return bad(err, path, "empty uniform range in '%s'", path);
	} else if (!strcmp(kind, "normal")) {
		d->normal = 1;
		REAL(o, "mean", path, 1, d->mean);
		REAL(o, "stddev", path, 1, d->stddev);
		if (!(d->stddev > 0))
			return bad(err, path, "stddev must be positive in '%s'", path);
	} else {
		return bad(err, path, "unknown distribution kind '%s'", kind);
	}
	return ATB_OK;
}

static enum atb_status parse_set(const json_t *o, const char *path, size_t nbuffers,
				 struct atb_runner_set *s, struct atb_error *err)
{
	json_t *a;
	size_t i;
	char field[128];

	if (!json_is_object(o))
		return bad(err, path, "expected an object for '%s'", path);
	STR(o, "name", path, 1, s->name);
	a = json_object_get(o, "ints");
	if (a) {
		if (!json_is_array(a) || json_array_size(a) > ATB_RUNNER_MAX_PARAMS)
			return field_status(err, ATB_ERR_SCHEMA, path, "ints");
		for (i = 0; i < json_array_size(a); i++) {
			if (!json_is_integer(json_array_get(a, i)))
				return field_status(err, ATB_ERR_SCHEMA, path, "ints");
			s->ints[i] = json_integer_value(json_array_get(a, i));
		}
		s->nints = json_array_size(a);
	}
	a = json_object_get(o, "reals");
	if (a) {
		if (!json_is_array(a) || json_array_size(a) > ATB_RUNNER_MAX_PARAMS)
			return field_status(err, ATB_ERR_SCHEMA, path, "reals");
		for (i = 0; i < json_array_size(a); i++) {
			if (!json_is_number(json_array_get(a, i)))
				return field_status(err, ATB_ERR_SCHEMA, path, "reals");
			s->reals[i] = json_number_value(json_array_get(a, i));
		}
		s->nreals = json_array_size(a);
	}
	a = json_object_get(o, "counts");
	if (!a)
		return field_status(err, ATB_ERR_NOT_FOUND, path, "counts");
	if (!json_is_array(a) || json_array_size(a) != nbuffers) {
		snprintf(field, sizeof(field), "%s.counts", path);
		return bad(err, field, "'%s' must hold one element count per buffer", field);
	}
	for (i = 0; i < nbuffers; i++) {
		json_t *c = json_array_get(a, i);

		if (!json_is_integer(c) || json_integer_value(c) < 1 ||
		    json_integer_value(c) > (json_int_t)1 << 34) {
			snprintf(field, sizeof(field), "%s.counts[%zu]", path, i);
			return bad(err, field, "bad element count at '%s'", field);
		}
		s->counts[i] = (size_t)json_integer_value(c);
	}
	return ATB_OK;
}

static enum atb_status parse_timing(const json_t *o, struct atb_runner_job *j,
				    struct atb_error *err)
{
	struct atb_timing_config *c = &j->timing;
	double ms = (double)c->warmup_min_time_ns / 1e6;
	double per_seed_s = (double)c->max_time_per_seed_ns / 1e9;
	double min_bytes = (double)j->cache_flush_min_bytes;
	double cpu_max = (double)j->cache_flush_cpu_max_bytes;
	long long wi = c->warmup_min_iterations, tmin = c->trials_min, tmax = c->trials_max;
	char interleave[32] = "randomized_pairs", placement[16] = "fixed", preemption[16] = "none";
	json_t *f;

	if (!json_is_object(o))
		return bad(err, "timing", "expected an object for '%s'", "timing");
	INT(o, "warmup_min_iterations", "timing", 0, wi);
	REAL(o, "warmup_min_time_ms", "timing", 0, ms);
	INT(o, "trials_min", "timing", 0, tmin);
	INT(o, "trials_max", "timing", 0, tmax);
	REAL(o, "target_rel_halfwidth", "timing", 0, c->target_rel_halfwidth);
	REAL(o, "ci_level", "timing", 0, c->ci_level);
	REAL(o, "max_time_per_seed_s", "timing", 0, per_seed_s);
	REAL(o, "cache_flush_factor", "timing", 0, j->cache_flush_factor);
	REAL(o, "cache_flush_min_bytes", "timing", 0, min_bytes);
	REAL(o, "cache_flush_cpu_max_bytes", "timing", 0, cpu_max);
	STR(o, "interleave", "timing", 0, interleave);
	STR(o, "placement", "timing", 0, placement);
	if (!strcmp(placement, "fixed"))
		j->placement = ATB_PLACEMENT_FIXED;
	else if (!strcmp(placement, "alternate"))
		j->placement = ATB_PLACEMENT_ALTERNATE;
	else if (!strcmp(placement, "shuffled"))
		j->placement = ATB_PLACEMENT_SHUFFLED;
	else if (!strcmp(placement, "keyed"))
		j->placement = ATB_PLACEMENT_KEYED;
	else
		return bad(err, "timing.placement",
			   "'%s' must be fixed, alternate, shuffled or keyed", "timing.placement");
	/* PROTO: timing.placement (keyed) -- the harness's key, 32 hex digits */
	if ((f = json_object_get(o, "placement_key"))) {
		const char *h = json_string_value(f);
		size_t i;

		if (!h || strlen(h) != 32 || strspn(h, "0123456789abcdefABCDEF") != 32)
			return bad(err, "timing.placement_key",
				   "expected 32 hexadecimal digits for '%s'",
				   "timing.placement_key");
		for (i = 0; i < 16; i++) {
			unsigned v;

			sscanf(h + 2 * i, "%2x", &v);
			j->placement_key[i] = (unsigned char)v;
		}
		j->has_placement_key = 1;
	}
	STR(o, "preemption", "timing", 0, preemption);
	if (!strcmp(preemption, "none"))
		j->preemption = 0;
	else if (!strcmp(preemption, "run_delay"))
		j->preemption = 1;
	else
		return bad(err, "timing.preemption", "'%s' must be none or run_delay",
			   "timing.preemption");
	f = json_object_get(o, "cache_flush");
	if (f) {
		if (!json_is_boolean(f))
			return field_status(err, ATB_ERR_SCHEMA, "timing", "cache_flush");
		c->flush = json_is_true(f);
	}
	if (wi < 0 || wi > 1000000)
		return field_status(err, ATB_ERR_SCHEMA, "timing", "warmup_min_iterations");
	if (tmin < 1 || tmin > 1000000)
		return field_status(err, ATB_ERR_SCHEMA, "timing", "trials_min");
	if (tmax < tmin || tmax > 1000000)
		return bad(err, "timing.trials_max", "'%s' must be at least trials_min",
			   "timing.trials_max");
	if (ms < 0 || per_seed_s < 0 || min_bytes < 0 || cpu_max < 0 || j->cache_flush_factor < 0)
		return bad(err, "timing", "negative value in '%s'", "timing");
	if (!(c->ci_level > 0 && c->ci_level < 1))
		return field_status(err, ATB_ERR_SCHEMA, "timing", "ci_level");
	c->warmup_min_iterations = (int)wi;
	c->trials_min = (int)tmin;
	c->trials_max = (int)tmax;
	c->warmup_min_time_ns = (int64_t)(ms * 1e6);
	c->max_time_per_seed_ns = (int64_t)(per_seed_s * 1e9);
	j->cache_flush_min_bytes = (size_t)min_bytes;
	j->cache_flush_cpu_max_bytes = (size_t)cpu_max;
	if (atb_timing_interleave_parse(interleave, &c->interleave, err)) {
		err->status = ATB_ERR_SCHEMA;
		snprintf(err->field, sizeof(err->field), "timing.interleave");
		return ATB_ERR_SCHEMA;
	}
	return ATB_OK;
}

static enum atb_status parse_correctness(const json_t *o, struct atb_runner_job *j,
					 struct atb_error *err)
{
	char poison[16] = "nan", path[128];
	json_t *t, *d, *v;
	const char *key;
	size_t i;
	enum atb_status st;

	if (!json_is_object(o))
		return bad(err, "correctness", "expected an object for '%s'", "correctness");
	STR(o, "poison", "correctness", 0, poison);
	if (strcmp(poison, "nan"))
		return bad(err, "correctness.poison", "unknown poison '%s': expected nan", poison);
	j->poison_nan = 1;
	/* PROTO: correctness.input_sets_per_seed -- absent: every distribution. */
	if (json_object_get(o, "input_sets_per_seed")) {
		long long n = 0;

		if (get_int(o, "input_sets_per_seed", 1, &n) || n < 1 || n > 1000)
			return bad(err, "correctness.input_sets_per_seed",
				   "bad '%s': expected an integer from 1 to 1000",
				   "correctness.input_sets_per_seed");
		j->input_sets_per_seed = (size_t)n;
	}
	/* PROTO: correctness.input_chunk_elements -- absent (protocol versions
	 * 1 to 7): one stream per buffer. */
	if (json_object_get(o, "input_chunk_elements")) {
		long long n = 0;

		if (get_int(o, "input_chunk_elements", 1, &n) || n < 4096 || n > 1073741824LL)
			return bad(err, "correctness.input_chunk_elements",
				   "bad '%s': expected an integer from 4096 to 1073741824",
				   "correctness.input_chunk_elements");
		j->input_chunk_elements = (size_t)n;
	}
	t = json_object_get(o, "reduction_tolerance");
	if (t) {
		char growth[16] = "";

		if (!json_is_object(t))
			return field_status(err, ATB_ERR_SCHEMA, "correctness",
					    "reduction_tolerance");
		if (get_real(t, "factor", "", 1, &j->reduction_factor) ||
		    !(j->reduction_factor > 0))
			return bad(err, "correctness.reduction_tolerance.factor",
				   "bad '%s': expected a number > 0",
				   "correctness.reduction_tolerance.factor");
		STR(t, "growth", "correctness.reduction_tolerance", 1, growth);
		if (strcmp(growth, "sqrt_length") && strcmp(growth, "length"))
			return bad(err, "correctness.reduction_tolerance.growth",
				   "unknown growth '%s': expected sqrt_length or length", growth);
		j->reduction_linear = !strcmp(growth, "length");
	}
	/* PROTO: correctness.reference_precision (version 14 on) */
	t = json_object_get(o, "reference_precision");
	if (t) {
		if (!json_is_object(t))
			return field_status(err, ATB_ERR_SCHEMA, "correctness",
					    "reference_precision");
		if (get_real(t, "factor", "", 1, &j->ref_precision_factor) ||
		    !(j->ref_precision_factor > 0) || !isfinite(j->ref_precision_factor))
			return bad(err, "correctness.reference_precision.factor",
				   "bad '%s': expected a finite number > 0",
				   "correctness.reference_precision.factor");
		if (get_real(t, "max_relative", "", 1, &j->ref_precision_max_rel) ||
		    !(j->ref_precision_max_rel > 0) || !(j->ref_precision_max_rel <= 1))
			return bad(err, "correctness.reference_precision.max_relative",
				   "bad '%s': expected a number in (0, 1]",
				   "correctness.reference_precision.max_relative");
	}
	t = json_object_get(o, "tolerances");
	if (t) {
		if (!json_is_object(t))
			return field_status(err, ATB_ERR_SCHEMA, "correctness", "tolerances");
		json_object_foreach(t, key, v) {
			struct atb_runner_tolerance *tol;

			snprintf(path, sizeof(path), "correctness.tolerances.%s", key);
			if (j->ntolerances >= ATB_RUNNER_MAX_DTYPES || strlen(key) >= 16)
				return bad(err, path, "too many tolerances at '%s'", path);
			tol = &j->tolerances[j->ntolerances];
			memcpy(tol->dtype, key, strlen(key) + 1);
			if (!json_is_object(v))
				return bad(err, path, "expected an object for '%s'", path);
			REAL(v, "atol", path, 1, tol->atol);
			REAL(v, "rtol", path, 1, tol->rtol);
			if (tol->atol < 0 || tol->rtol < 0)
				return bad(err, path, "negative tolerance at '%s'", path);
			j->ntolerances++;
		}
	}
	d = json_object_get(o, "distributions");
	if (d) {
		if (!json_is_array(d) || json_array_size(d) > ATB_RUNNER_MAX_DISTS)
			return field_status(err, ATB_ERR_SCHEMA, "correctness", "distributions");
		for (i = 0; i < json_array_size(d); i++) {
			snprintf(path, sizeof(path), "correctness.distributions[%zu]", i);
			st = parse_dist(json_array_get(d, i), path, &j->dists[i], err);
			if (st)
				return st;
		}
		j->ndists = json_array_size(d);
	}
	return ATB_OK;
}

/* "reduction" of buffer i (its operands must come before it). */
static enum atb_status parse_reduction(const json_t *r, const char *bpath,
				       struct atb_runner_job *j, size_t i, struct atb_error *err)
{
	struct atb_runner_buffer *rb = &j->buffers[i];
	char path[160], acc[16] = "";
	json_t *ops;
	size_t k, m;

	snprintf(path, sizeof(path), "%s.reduction", bpath);
	if (!json_is_object(r) || rb->role == ATB_BUFFER_IN || !atb_dtype_is_real(rb->dtype))
		return bad(err, path, "bad '%s': expected an object on a real out buffer", path);
	ops = json_object_get(r, "operands");
	if (!json_is_array(ops) || json_array_size(ops) < 1 || json_array_size(ops) > 2)
		return bad(err, path, "bad '%s.operands': expected 1 or 2 buffer names", path);
	for (k = 0; k < json_array_size(ops); k++) {
		const char *name = json_string_value(json_array_get(ops, k));

		for (m = 0; m < i; m++)
			if (name && !strcmp(j->buffers[m].name, name) &&
			    j->buffers[m].role == ATB_BUFFER_IN && atb_dtype_is_real(j->buffers[m].dtype))
				break;
		if (m == i)
			return bad(err, path, "unknown operand '%s' at '%s': expected an earlier "
				   "real in buffer", name ? name : "", path);
		rb->reduction.operand[k] = m;
	}
	rb->reduction.noperands = (int)json_array_size(ops);
	rb->reduction.accumulate = rb->dtype;
	STR(r, "accumulate", path, 0, acc);
	if (acc[0] && (atb_dtype_parse(acc, &rb->reduction.accumulate, err) ||
		       !atb_dtype_is_real(rb->reduction.accumulate)))
		return bad(err, path, "bad accumulate dtype '%s' at '%s'", acc, path);
	return ATB_OK;
}

/* Is (a * b) / c a perfect square K, returned, or 0? */
static size_t reduction_k2(size_t a, size_t b, size_t c)
{
	double k;
	size_t ki;

	if (!c || (a * b) / c * c != a * b)
		return 0;
	k = sqrt((double)(a * b / c));
	ki = (size_t)llround(k);
	return ki * ki == a * b / c ? ki : 0;
}

size_t atb_runner_reduction_length(const struct atb_runner_job *job, size_t i,
				   const struct atb_runner_set *set)
{
	const struct atb_runner_reduction *r = &job->buffers[i].reduction;
	size_t n = set->counts[i];

	if (!r->noperands || !n)
		return 0;
	if (r->noperands == 1)
		return set->counts[r->operand[0]] % n ? 0 : set->counts[r->operand[0]] / n;
	return reduction_k2(set->counts[r->operand[0]], set->counts[r->operand[1]], n);
}

/* Every set's counts must give each reduction an exact length. */
static enum atb_status check_reductions(const struct atb_runner_job *j, const char *what,
					const struct atb_runner_set *set, struct atb_error *err)
{
	size_t i;
	char path[64];

	for (i = 0; i < j->nbuffers; i++) {
		const struct atb_runner_reduction *r = &j->buffers[i].reduction;
		size_t k = atb_runner_reduction_length(j, i, set);

		if (!r->noperands || !set->counts[i])
			continue;
		if (!k || (r->noperands == 2 && (set->counts[r->operand[0]] % k ||
						 set->counts[r->operand[1]] % k))) {
			snprintf(path, sizeof(path), "buffers[%zu].reduction", i);
			return bad(err, path, "counts of %s '%s' do not fit a reduction of '%s'",
				   what, set->name, j->buffers[i].name);
		}
	}
	return ATB_OK;
}

static enum atb_status parse_buffers(const json_t *a, struct atb_runner_job *j,
				     struct atb_error *err)
{
	size_t i;
	char path[128], dtype[16], role[16];
	enum atb_status st;

	if (!json_is_array(a) || json_array_size(a) == 0 ||
	    json_array_size(a) > ATB_RUNNER_MAX_BUFFERS)
		return bad(err, "buffers", "'%s' must be a non-empty array", "buffers");
	for (i = 0; i < json_array_size(a); i++) {
		json_t *b = json_array_get(a, i), *adv, *dist;
		struct atb_runner_buffer *rb = &j->buffers[i];

		snprintf(path, sizeof(path), "buffers[%zu]", i);
		if (!json_is_object(b))
			return bad(err, path, "expected an object for '%s'", path);
		STR(b, "name", path, 1, rb->name);
		STR(b, "dtype", path, 1, dtype);
		STR(b, "role", path, 1, role);
		if (atb_dtype_parse(dtype, &rb->dtype, err)) {
			snprintf(err->field, sizeof(err->field), "%s.dtype", path);
			return ATB_ERR_SCHEMA;
		}
		if (!strcmp(role, "in"))
			rb->role = ATB_BUFFER_IN;
		else if (!strcmp(role, "out"))
			rb->role = ATB_BUFFER_OUT;
		else if (!strcmp(role, "inout"))
			rb->role = ATB_BUFFER_INOUT;
		else
			return bad(err, path, "unknown role '%s': expected in, out or inout", role);
		dist = json_object_get(b, "dist");
		if (rb->role != ATB_BUFFER_OUT) {
			char dpath[160];

			snprintf(dpath, sizeof(dpath), "%s.dist", path);
			if (!dist)
				return bad(err, dpath, "missing field '%s'", "dist");
			st = parse_dist(dist, dpath, &rb->dist, err);
			if (st)
				return st;
		}
		/* Integer inputs are often indices or shapes: adversarial only on request. */
		rb->adversarial = atb_dtype_is_real(rb->dtype);
		adv = json_object_get(b, "adversarial");
		if (adv) {
			if (!json_is_boolean(adv))
				return field_status(err, ATB_ERR_SCHEMA, path, "adversarial");
			rb->adversarial = json_is_true(adv);
		}
		if (json_object_get(b, "reduction")) {
			st = parse_reduction(json_object_get(b, "reduction"), path, j, i, err);
			if (st)
				return st;
		}
	}
	j->nbuffers = json_array_size(a);
	return ATB_OK;
}

/* PROTO: gates.timed_correctness -- {"key": 16 hex digits, check_share, ...}. */
static enum atb_status parse_timed(const json_t *o, struct atb_runner_job *j,
				   struct atb_error *err)
{
	struct atb_runner_timed *t = &j->timed;
	char key[24] = "", *end = NULL;
	long long minc = 2, np = 4;

	if (!json_is_object(o))
		return bad(err, "timed_checks", "expected an object for '%s'", "timed_checks");
	STR(o, "key", "timed_checks", 1, key);
	if (strlen(key) != 16 || strspn(key, "0123456789abcdef") != 16)
		return bad(err, "timed_checks.key", "bad '%s': expected 16 hex digits",
			   "timed_checks.key");
	t->key = strtoull(key, &end, 16);
	t->check_share = 0.125;
	REAL(o, "check_share", "timed_checks", 0, t->check_share);
	if (!(t->check_share > 0 && t->check_share <= 1))
		return bad(err, "timed_checks.check_share", "bad '%s': expected (0, 1]",
			   "timed_checks.check_share");
	INT(o, "min_checks_per_seed", "timed_checks", 0, minc);
	if (minc < 0 || minc > ATB_RUNNER_MAX_PERTURB)
		return bad(err, "timed_checks.min_checks_per_seed",
			   "bad '%s': expected 0 to %d", "timed_checks.min_checks_per_seed",
			   ATB_RUNNER_MAX_PERTURB);
	INT(o, "perturb_elements", "timed_checks", 0, np);
	if (np < 0 || np > ATB_RUNNER_MAX_PERTURB)
		return bad(err, "timed_checks.perturb_elements", "bad '%s': expected 0 to %d",
			   "timed_checks.perturb_elements", ATB_RUNNER_MAX_PERTURB);
	t->min_checks_per_seed = (int)minc;
	t->perturb_elements = (int)np;
	t->on = 1;
	return ATB_OK;
}

static const char *const arm_names[] = {"baseline", "candidate", "naive", "baseline_alone"};

static enum atb_status parse_arms(const json_t *a, struct atb_runner_job *j,
				  struct atb_error *err)
{
	size_t i, k;
	char path[64];

	if (!json_is_array(a) || json_array_size(a) == 0 ||
	    json_array_size(a) > ATB_RUNNER_MAX_ARMS)
		return bad(err, "arms", "'%s' must hold 1 to 4 arms", "arms");
	for (i = 0; i < json_array_size(a); i++) {
		json_t *o = json_array_get(a, i), *so;
		struct atb_runner_arm *arm = &j->arms[i];
		int known = 0;

		snprintf(path, sizeof(path), "arms[%zu]", i);
		if (!json_is_object(o))
			return bad(err, path, "expected an object for '%s'", path);
		STR(o, "name", path, 1, arm->name);
		for (k = 0; k < 4; k++)
			known |= !strcmp(arm->name, arm_names[k]);
		if (!known)
			return bad(err, path,
				   "unknown arm '%s': expected baseline, candidate, naive or baseline_alone",
				   arm->name);
		for (k = 0; k < i; k++)
			if (!strcmp(j->arms[k].name, arm->name))
				return bad(err, path, "duplicate arm '%s'", arm->name);
		so = json_object_get(o, "so");
		if (!json_is_string(so) || !json_string_length(so))
			return field_status(err, so ? ATB_ERR_SCHEMA : ATB_ERR_NOT_FOUND, path, "so");
		arm->so = atb_strdup(json_string_value(so));
		j->narms = i + 1;
		if (!arm->so)
			return atb_error_set(err, ATB_ERR_NOMEM, "cannot copy job: out of memory");
	}
	return ATB_OK;
}

static enum atb_status parse_job(const json_t *o, struct atb_runner_job *j,
				 struct atb_error *err)
{
	char reference[32] = "baseline", backend[16] = "cpu";
	long long abi = -1, cache = 0, progress = 0;
	json_t *a, *opt;
	size_t i;
	enum atb_status st;
	int ref;

	if (!json_is_object(o))
		return bad(err, "", "expected a json object for the %s", "job");
	STR(o, "id", "", 0, j->id);
	INT(o, "abi", "", 1, abi);
	if (abi != ATB_KERNEL_ABI_VERSION)
		return atb_error_set_at(err, ATB_ERR_SCHEMA, "", 0, 0, "abi",
					"kernel abi %lld not supported: this runner speaks %d",
					abi, ATB_KERNEL_ABI_VERSION);
	STR(o, "backend", "", 0, backend);
	if (atb_runner_backend_parse(backend, &j->backend, err))
		return bad(err, "backend", "unknown backend '%s': expected cpu or cuda", backend);
	st = parse_arms(json_object_get(o, "arms"), j, err);
	if (st)
		return st;
	STR(o, "reference", "", 0, reference);
	ref = atb_runner_job_arm(j, reference);
	if (ref < 0)
		return bad(err, "reference", "reference arm '%s' is not among the arms", reference);
	j->reference = (size_t)ref;
	st = parse_buffers(json_object_get(o, "buffers"), j, err);
	if (st)
		return st;

	a = json_object_get(o, "sets");
	if (!json_is_array(a) || json_array_size(a) == 0 ||
	    json_array_size(a) > ATB_RUNNER_MAX_SETS)
		return bad(err, "sets", "'%s' must hold 1 to 32 parameter sets", "sets");
	j->sets = atb_calloc(json_array_size(a), sizeof(*j->sets));
	if (!j->sets)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot copy job: out of memory");
	j->nsets = json_array_size(a);
	for (i = 0; i < j->nsets; i++) {
		char path[32];

		snprintf(path, sizeof(path), "sets[%zu]", i);
		st = parse_set(json_array_get(a, i), path, j->nbuffers, &j->sets[i], err);
		if (st)
			return st;
	}
	if (!json_object_get(o, "timing_set"))
		return bad(err, "timing_set", "missing field '%s'", "timing_set");
	st = parse_set(json_object_get(o, "timing_set"), "timing_set", j->nbuffers,
		       &j->timing_set, err);
	if (st)
		return st;
	for (i = 0; i < j->nsets; i++)
		if ((st = check_reductions(j, "set", &j->sets[i], err)))
			return st;
	if ((st = check_reductions(j, "set", &j->timing_set, err)))
		return st;

	a = json_object_get(o, "seeds");
	if (!json_is_array(a) || json_array_size(a) == 0 ||
	    json_array_size(a) > ATB_RUNNER_MAX_SEEDS)
		return bad(err, "seeds", "'%s' must hold 1 to 1024 seeds", "seeds");
	j->seeds = atb_calloc(json_array_size(a), sizeof(*j->seeds));
	if (!j->seeds)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot copy job: out of memory");
	for (i = 0; i < json_array_size(a); i++) {
		json_t *s = json_array_get(a, i);

		if (!json_is_integer(s) || json_integer_value(s) < 0) {
			char path[32];

			snprintf(path, sizeof(path), "seeds[%zu]", i);
			return bad(err, path, "bad seed at '%s': expected an integer >= 0", path);
		}
		j->seeds[i] = (uint64_t)json_integer_value(s);
	}
	j->nseeds = json_array_size(a);

	INT(o, "progress_ms", "", 0, progress);
	if (progress < 0 || progress > 60000)
		return bad(err, "progress_ms", "bad '%s': expected 0 to 60000", "progress_ms");
	j->progress_ms = (int)progress;
	INT(o, "cache_bytes", "", 0, cache);
	if (cache < 0)
		return bad(err, "cache_bytes", "negative '%s'", "cache_bytes");
	j->cache_bytes = (size_t)cache;
	if (json_object_get(o, "timing")) {
		st = parse_timing(json_object_get(o, "timing"), j, err);
		if (st)
			return st;
	}
	if (json_object_get(o, "correctness")) {
		st = parse_correctness(json_object_get(o, "correctness"), j, err);
		if (st)
			return st;
	}
	if (json_object_get(o, "timed_checks")) {
		st = parse_timed(json_object_get(o, "timed_checks"), j, err);
		if (st)
			return st;
	}
	opt = json_object_get(o, "options");
	if (opt) {
		long long pin = j->pin_cpu;
		json_t *b;

		if (!json_is_object(opt))
			return bad(err, "options", "expected an object for '%s'", "options");
		b = json_object_get(opt, "time_if_incorrect");
		if (b && !json_is_boolean(b))
			return field_status(err, ATB_ERR_SCHEMA, "options", "time_if_incorrect");
		j->time_if_incorrect = b && json_is_true(b);
		b = json_object_get(opt, "skip_timing");
		if (b && !json_is_boolean(b))
			return field_status(err, ATB_ERR_SCHEMA, "options", "skip_timing");
		j->skip_timing = b && json_is_true(b);
		b = json_object_get(opt, "skip_correctness");
		if (b && !json_is_boolean(b))
			return field_status(err, ATB_ERR_SCHEMA, "options", "skip_correctness");
		j->skip_correctness = b && json_is_true(b);
		b = json_object_get(opt, "isolation");
		if (b && !(json_is_string(b) && (!strcmp(json_string_value(b), "process") ||
						 !strcmp(json_string_value(b), "none"))))
			return bad(err, "options.isolation",
				   "bad '%s': expected \"process\" or \"none\"", "options.isolation");
		j->isolate = b && !strcmp(json_string_value(b), "process");
		b = json_object_get(opt, "round_trip");
		if (b) {
			const json_t *e = json_object_get(b, "every_rounds"),
				     *sub = json_object_get(b, "subtract"),
				     *q = json_object_get(b, "quantile"),
				     *pos = json_object_get(b, "position");

			if (!json_is_object(b) || !json_is_integer(e) || json_integer_value(e) < 1 ||
			    json_integer_value(e) > 1000 || !json_is_boolean(sub) ||
			    !json_is_number(q) || !(json_number_value(q) > 0.0) ||
			    !(json_number_value(q) <= 0.5) ||
			    (pos && !(json_is_string(pos) &&
				      (!strcmp(json_string_value(pos), "after") ||
				       !strcmp(json_string_value(pos), "after_reference") ||
				       !strcmp(json_string_value(pos), "keyed")))) ||
			    json_object_size(b) != 3u + (pos != NULL))
				return bad(err, "options.round_trip",
					   "bad '%s': expected {\"every_rounds\": 1 to 1000, "
					   "\"subtract\": true or false, \"quantile\": above 0, at "
					   "most 0.5, optionally \"position\": \"after\", "
					   "\"after_reference\" or \"keyed\"}", "options.round_trip");
			if (!j->isolate)
				return bad(err, "options.round_trip",
					   "bad '%s': only with options.isolation \"process\"",
					   "options.round_trip");
			j->round_trip_every = (int)json_integer_value(e);
			j->round_trip_subtract = json_is_true(sub);
			j->round_trip_quantile = json_number_value(q);
			j->round_trip_position =
				!pos || !strcmp(json_string_value(pos), "after") ? ATB_RT_AFTER
				: !strcmp(json_string_value(pos), "keyed")       ? ATB_RT_KEYED
										 : ATB_RT_AFTER_REFERENCE;
		}
		INT(opt, "pin_cpu", "options", 0, pin);
		if (pin < -1 || pin > 4095)
			return field_status(err, ATB_ERR_SCHEMA, "options", "pin_cpu");
		j->pin_cpu = (int)pin;
	}
	return ATB_OK;
}

enum atb_status atb_runner_job_from_json(const json_t *o, struct atb_runner_job **out,
					 struct atb_error *err)
{
	struct atb_runner_job *j;
	enum atb_status st;

	*out = NULL;
	j = atb_calloc(1, sizeof(*j));
	if (!j)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot allocate job: out of memory");
	atb_timing_config_default(&j->timing);
	j->cache_flush_factor = 2;
	j->cache_flush_min_bytes = 64u << 20;
	j->poison_nan = 1;
	j->pin_cpu = -1;
	st = parse_job(o, j, err);
	if (st) {
		atb_runner_job_free(j);
		return st;
	}
	*out = j;
	return ATB_OK;
}

enum atb_status atb_runner_job_parse(const char *text, size_t len,
				     struct atb_runner_job **out, struct atb_error *err)
{
	json_error_t je;
	json_t *o;
	enum atb_status st;

	*out = NULL;
	atb_alloc_install_json();
	o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!o) {
		/* jansson reports a failed first allocation with no text at all. */
		if (json_error_code(&je) == json_error_out_of_memory || !je.text[0])
			return atb_error_set(err, ATB_ERR_NOMEM, "cannot parse job: out of memory");
		return atb_error_set_at(err, ATB_ERR_PARSE, "", (unsigned)je.line,
					(unsigned)je.column, "", "malformed job json: %s",
					je.text);
	}
	st = atb_runner_job_from_json(o, out, err);
	json_decref(o);
	return st;
}

void atb_runner_job_free(struct atb_runner_job *j)
{
	size_t i;

	if (!j)
		return;
	for (i = 0; i < j->narms; i++)
		atb_free(j->arms[i].so);
	atb_free(j->sets);
	atb_free(j->seeds);
	atb_free(j);
}

int atb_runner_job_arm(const struct atb_runner_job *j, const char *name)
{
	size_t i;

	for (i = 0; i < j->narms; i++)
		if (!strcmp(j->arms[i].name, name))
			return (int)i;
	return -1;
}

/* ---- from a protocol ---------------------------------------------------- */

static int set_new(json_t *o, const char *key, json_t *v)
{
	return !v || json_object_set_new(o, key, v);
}

enum atb_status atb_runner_job_set_protocol(json_t *job, const struct atb_protocol *p,
					    size_t cache_bytes, struct atb_error *err)
{
	json_t *t = json_object(), *c = json_object(), *tol = json_object(),
	       *dists = json_array();
	int bad_ = !t || !c || !tol || !dists;
	size_t i;

	atb_alloc_install_json();
	if (!bad_) {
		bad_ |= set_new(t, "warmup_min_iterations",
				json_integer(p->timing.warmup_min_iterations));
		bad_ |= set_new(t, "warmup_min_time_ms", json_real(p->timing.warmup_min_time_ms));
		bad_ |= set_new(t, "trials_min", json_integer(p->timing.trials_min));
		bad_ |= set_new(t, "trials_max", json_integer(p->timing.trials_max));
		bad_ |= set_new(t, "target_rel_halfwidth",
				json_real(p->timing.target_rel_halfwidth));
		bad_ |= set_new(t, "ci_level", json_real(p->stats.ci_level));
		bad_ |= set_new(t, "max_time_per_seed_s", json_real(p->timing.max_time_per_seed_s));
		bad_ |= set_new(t, "cache_flush", json_boolean(p->timing.cache_flush));
		bad_ |= set_new(t, "cache_flush_factor", json_real(p->timing.cache_flush_factor));
		bad_ |= set_new(t, "cache_flush_min_bytes",
				json_integer(p->timing.cache_flush_min_bytes));
		/* PROTO: timing.cache_flush.cpu_max_bytes (version 6 on) */
		if (p->timing.has_cache_flush_cpu_max)
			bad_ |= set_new(t, "cache_flush_cpu_max_bytes",
					json_integer(p->timing.cache_flush_cpu_max_bytes));
		bad_ |= set_new(t, "interleave", json_string(p->timing.interleave));
		/* PROTO: timing.placement (version 4 on); $ATB_DIAG_PLACEMENT, a
		 * diagnostic for A/A studies, overrides it and is kept in the job */
		{
			const char *pl = getenv("ATB_DIAG_PLACEMENT");

			if (!pl || !*pl)
				pl = p->timing.placement;
			if (pl[0])
				bad_ |= set_new(t, "placement", json_string(pl));
		}
		/* PROTO: timing.preemption (version 5 on) */
		if (p->timing.preemption[0])
			bad_ |= set_new(t, "preemption", json_string(p->timing.preemption));
		bad_ |= set_new(c, "poison", json_string(p->correctness.poison));
		/* PROTO: correctness.input_sets_per_seed */
		if (p->correctness.input_sets_per_seed > 0)
			bad_ |= set_new(c, "input_sets_per_seed",
					json_integer(p->correctness.input_sets_per_seed));
		/* PROTO: correctness.input_chunk_elements (version 8 on) */
		if (p->correctness.input_chunk_elements > 0)
			bad_ |= set_new(c, "input_chunk_elements",
					json_integer(p->correctness.input_chunk_elements));
		/* PROTO: correctness.reduction_tolerance (version 2 on) */
		if (p->correctness.reduction.has)
			bad_ |= set_new(c, "reduction_tolerance",
					json_pack("{s:f, s:s}", "factor",
						  p->correctness.reduction.factor, "growth",
						  p->correctness.reduction.growth));
		/* PROTO: correctness.reference_precision (version 14 on) */
		if (p->correctness.reference_precision.has)
			bad_ |= set_new(c, "reference_precision",
					json_pack("{s:f, s:f}", "factor",
						  p->correctness.reference_precision.factor,
						  "max_relative",
						  p->correctness.reference_precision.max_relative));
		for (i = 0; !bad_ && i < p->correctness.ntolerances; i++) {
			const struct atb_tolerance *x = &p->correctness.tolerances[i];
			json_t *e = json_object();

			if (!e || set_new(e, "atol", json_real(x->atol)) ||
			    set_new(e, "rtol", json_real(x->rtol))) {
				json_decref(e);
				bad_ = 1;
			} else {
				bad_ |= set_new(tol, x->dtype, e);
			}
		}
		for (i = 0; !bad_ && i < p->correctness.ndistributions; i++) {
			const struct atb_distribution *x = &p->correctness.distributions[i];
			json_t *e = json_object();
			int normal = !strcmp(x->kind, "normal");

			if (!e || set_new(e, "name", json_string(x->name)) ||
			    set_new(e, "kind", json_string(x->kind)) ||
			    set_new(e, normal ? "mean" : "low",
				    json_real(normal ? x->mean : x->low)) ||
			    set_new(e, normal ? "stddev" : "high",
				    json_real(normal ? x->stddev : x->high))) {
				json_decref(e);
				bad_ = 1;
			} else {
				bad_ |= json_array_append_new(dists, e) != 0;
			}
		}
		if (!bad_) {
			bad_ |= set_new(c, "tolerances", tol);
			tol = NULL;
			bad_ |= set_new(c, "distributions", dists);
			dists = NULL;
			bad_ |= set_new(job, "timing", t);
			t = NULL;
			bad_ |= set_new(job, "correctness", c);
			c = NULL;
			bad_ |= set_new(job, "cache_bytes", json_integer((json_int_t)cache_bytes));
		}
	}
	json_decref(t);
	json_decref(c);
	json_decref(tol);
	json_decref(dists);
	if (bad_)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot build job: out of memory");
	return ATB_OK;
}

enum atb_status atb_runner_job_set_timed_checks(json_t *job, const struct atb_protocol *p,
						struct atb_error *err)
{
	/* PROTO: gates.timed_correctness -- protocol versions < 3 have no such
	 * key: these defaults are the values v3 froze. */
	double share = p && p->gates.has_timed_correctness ? p->gates.timed_check_share : 0.125;
	int minc = p && p->gates.has_timed_correctness ? p->gates.timed_min_checks_per_seed : 2;
	int np = p && p->gates.has_timed_correctness ? p->gates.timed_perturb_elements : 4;
	unsigned char b[8];
	char hex[17];
	size_t got = 0;

	while (got < sizeof(b)) {
		ssize_t r = getrandom(b + got, sizeof(b) - got, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return atb_error_set(err, ATB_ERR_SYSTEM,
					     "cannot draw a timed-check key: getrandom failed");
		got += (size_t)r;
	}
	atbi_hex(b, sizeof(b), hex);
	atb_alloc_install_json();
	if (set_new(job, "timed_checks",
		    json_pack("{s:s, s:f, s:i, s:i}", "key", hex, "check_share", share,
			      "min_checks_per_seed", minc, "perturb_elements", np)))
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot build job: out of memory");
	return ATB_OK;
}
