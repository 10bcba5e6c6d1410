/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Tests of the task module: bundled tasks load, build and agree with their
 * honest baseline on every correctness parameter set (naive, default
 * template and seeded random knob combinations, run in-process via dlopen);
 * bad task files are refused with their exact status and position; knob
 * sampling is reproducible; compile errors return their log; a hung build
 * is killed at the timeout; allocation failures are clean.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <gsl/gsl_rng.h>

#include "atb/alloc.h"
#include "atb/kernel.h"
#include "atb/task.h"
#include "util.h"
#include "banned.h"

#define FIX ATB_SOURCE_DIR "/tests/fixtures/task"

static char tmpdir[256];

static void mk_tmpdir(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/atb-u-task.XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
}

static void rm_tmpdir(void)
{
	char cmd[512];

	if (!tmpdir[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", tmpdir);
	tmpdir[0] = '\0';
}

/* The protocol's build section: from protocol/v1.yaml, as frozen. */
static struct atb_protocol *proto_v1(void)
{
	struct atb_protocol *p = NULL;
	struct atb_error err = {0};

	if (atb_protocol_load_file(ATB_SOURCE_DIR "/protocol/v1.yaml", &p, &err) != ATB_OK)
		cr_skip_test("protocol v1 does not load yet: %s", err.msg);
	return p;
}

/* A hand-made protocol with only the build section, for fake compilers. */
static void fake_proto(struct atb_protocol *p, const char *compiler, double timeout_s)
{
	memset(p, 0, sizeof(*p));
	cr_assert_lt(snprintf(p->build.cpu_compiler, sizeof(p->build.cpu_compiler), "%s", compiler),
		     (int)sizeof(p->build.cpu_compiler), "compiler path too long for the test");
	snprintf(p->build.cpu_flags[0], sizeof(p->build.cpu_flags[0]), "-O2");
	snprintf(p->build.cpu_flags[1], sizeof(p->build.cpu_flags[1]), "-fPIC");
	snprintf(p->build.cpu_flags[2], sizeof(p->build.cpu_flags[2]), "-shared");
	p->build.ncpu_flags = 3;
	p->build.timeout_s = timeout_s;
}

static struct atb_task *load(const char *path)
{
	struct atb_task *t = NULL;
	struct atb_error err = {0};
	enum atb_status s = atb_task_load(path, &t, &err);

	cr_assert_eq(s, ATB_OK, "%s: %s:%u:%u: %s: %s", path, err.file, err.line, err.column,
		     err.field, err.msg);
	return t;
}

/* ---- loading ---------------------------------------------------------- */

Test(task, list_bundled)
{
	static const char *const want[] = {"cuda_gemm", "cuda_layernorm",
					   "cuda_merge_attn_states", "cuda_reduce_sum",
					   "cuda_relu", "cuda_rmsnorm_residual", "cuda_silu_mul",
					   "cuda_softmax", "cuda_transpose",
					   "layernorm", "prefix_sum", "relu",
					   "sgemm", "softmax", "stencil2d"};
	struct atb_error err = {0};
	char **names;
	size_t n, i;

	cr_assert_eq(atb_task_list(ATB_SOURCE_DIR, &names, &n, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(n, sizeof(want) / sizeof(want[0]));
	for (i = 0; i < n; i++)
		cr_expect_str_eq(names[i], want[i]);
	atb_task_list_free(names, n);
}

Test(task, good_fixture_fields)
{
	struct atb_task *t = load(FIX "/good.yaml");
	struct atb_task_instance in;
	struct atb_error err = {0};

	cr_expect_str_eq(t->name, "good");
	cr_expect_eq(t->nparams, 2);
	cr_expect_eq(t->nsets, 2);
	cr_expect_eq(t->nbuffers, 2);
	cr_expect_eq(t->nknobs, 1);
	cr_expect_eq(t->nflag_choices, 2);
	cr_expect(t->has_naive);
	cr_expect_str_eq(t->surface[0], "kernel.c");
	cr_assert_eq(atb_task_instantiate(t, 1, &in, &err), ATB_OK);
	cr_expect_eq(in.nints, 1);
	cr_expect_eq(in.ints[0], 3);
	cr_expect_eq(in.nreals, 1);
	cr_expect_float_eq(in.reals[0], 0.5, 1e-12);
	cr_expect_eq(in.buffers[0].count, 3);
	cr_expect_eq(in.buffers[0].role, ATB_ROLE_IN);
	cr_expect_str_eq(in.buffers[0].generator.kind, "uniform");
	cr_expect_eq(in.buffers[1].has_generator, 0);
	cr_expect_eq(in.floor_bytes, 24);
	cr_expect_eq(atb_task_instantiate(t, 2, &in, &err), ATB_ERR_USAGE);
	atb_task_free(t);
}

Test(task, sgemm_instance)
{
	struct atb_task *t = load(ATB_SOURCE_DIR "/tasks/sgemm");
	struct atb_task_instance in;
	struct atb_error err = {0};

	cr_assert_eq(atb_task_instantiate(t, 0, &in, &err), ATB_OK);
	cr_expect_eq(in.nints, 3);
	cr_expect_str_eq(in.int_names[2], "K");
	cr_expect_eq(in.buffers[0].count, 192 * 192);
	cr_expect_eq(in.buffers[2].role, ATB_ROLE_OUT);
	cr_expect_eq(in.floor_flops, 2LL * 192 * 192 * 192);
	cr_expect_eq(in.floor_bytes, 4LL * 3 * 192 * 192);
	cr_assert_eq(atb_task_instantiate(t, 1, &in, &err), ATB_OK);
	cr_expect_eq(in.buffers[2].dims[0], 67);
	cr_expect_eq(in.buffers[2].dims[1], 45);
	atb_task_free(t);
}

Test(task, open_by_name_and_not_found)
{
	struct atb_task *t = NULL;
	struct atb_error err = {0};

	cr_assert_eq(atb_task_open(ATB_SOURCE_DIR, "relu", &t, &err), ATB_OK);
	cr_expect_str_eq(t->buffers[0].generator.kind, "uniform");
	cr_expect_float_eq(t->buffers[0].generator.low, 0.0, 0);
	cr_expect_float_eq(t->buffers[0].generator.high, 1.0, 0);
	atb_task_free(t);
	cr_expect_eq(atb_task_open(ATB_SOURCE_DIR, "nosuchtask", &t, &err), ATB_ERR_NOT_FOUND);
	cr_expect_null(t);
	cr_expect_eq(atb_task_load(FIX "/nosuch.yaml", &t, &err), ATB_ERR_NOT_FOUND);
}

struct bad_case {
	const char *file;
	enum atb_status status;
	unsigned line, column;
	const char *field;
	const char *msg;   /* a substring of the message */
};

static const struct bad_case bad_cases[] = {
	{"bad-unknown-key.yaml", ATB_ERR_SCHEMA, 4, 1, "colour", "unknown key 'colour'"},
	{"bad-wrong-type.yaml", ATB_ERR_SCHEMA, 6, 33, "params[0].value", "expected an integer"},
	{"bad-missing-field.yaml", ATB_ERR_SCHEMA, 2, 1, "description",
	 "missing field 'description'"},
	{"bad-dtype.yaml", ATB_ERR_SCHEMA, 12, 22, "buffers[1].dtype", "bad dtype 'fp17'"},
	{"bad-role.yaml", ATB_ERR_SCHEMA, 12, 34, "buffers[1].role", "bad role 'output'"},
	{"bad-expression.yaml", ATB_ERR_SCHEMA, 11, 46, "buffers[0].shape[0]",
	 "unexpected end of expression"},
	{"bad-unknown-param.yaml", ATB_ERR_SCHEMA, 12, 47, "buffers[1].shape[0]",
	 "unknown parameter 'M'"},
	{"bad-div-zero.yaml", ATB_ERR_SCHEMA, 20, 16, "floor.bytes", "division by zero"},
	{"bad-overflow.yaml", ATB_ERR_SCHEMA, 20, 28, "floor.flops", "integer overflow"},
	{"bad-negative-shape.yaml", ATB_ERR_SCHEMA, 12, 46, "buffers[0].shape[0]",
	 "must be at least 1"},
	{"bad-surface-dotdot.yaml", ATB_ERR_SCHEMA, 15, 11, "surface[0]", "'..'"},
	{"bad-surface-absolute.yaml", ATB_ERR_SCHEMA, 15, 11, "surface[0]", "absolute path"},
	{"bad-flag.yaml", ATB_ERR_SCHEMA, 19, 24, "knobs.cflags[2]", "flag '-o' not allowed"},
	{"bad-out-generator.yaml", ATB_ERR_SCHEMA, 12, 63, "buffers[1].generator",
	 "an out buffer has no generator"},
	{"bad-malformed.yaml", ATB_ERR_PARSE, 0, 0, "", "malformed yaml"},
};

Test(task, bad_fixtures_refused_at_their_position)
{
	size_t i;

	for (i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		const struct bad_case *c = &bad_cases[i];
		struct atb_task *t = (struct atb_task *)1;
		struct atb_error err = {0};
		char path[512];
		enum atb_status s;

		snprintf(path, sizeof(path), "%s/%s", FIX, c->file);
		s = atb_task_load(path, &t, &err);
		cr_expect_eq(s, c->status, "%s: status %s", c->file, atb_status_name(s));
		cr_expect_null(t, "%s: *out not NULL on failure", c->file);
		cr_expect_str_eq(err.file, path, "%s", c->file);
		if (c->line) {
			cr_expect_eq(err.line, c->line, "%s: line %u", c->file, err.line);
			cr_expect_eq(err.column, c->column, "%s: column %u", c->file, err.column);
		} else {
			cr_expect_gt(err.line, 0, "%s: no line", c->file);
		}
		cr_expect_str_eq(err.field, c->field, "%s: field '%s'", c->file, err.field);
		cr_expect_not_null(strstr(err.msg, c->msg), "%s: message '%s'", c->file, err.msg);
	}
}

/* ---- expressions ------------------------------------------------------ */

Test(task, expressions)
{
	struct atb_task *t = load(ATB_SOURCE_DIR "/tasks/sgemm");
	struct atb_error err = {0};
	int64_t v;

	cr_expect_eq(atb_task_eval(t, &t->sets[0], "2*(M + K) - N/2 % 7", &v, &err), ATB_OK);
	cr_expect_eq(v, 2 * (192 + 192) - (192 / 2) % 7);
	cr_expect_eq(atb_task_eval(t, &t->sets[0], "-M*-2", &v, &err), ATB_OK);
	cr_expect_eq(v, 384);
	cr_expect_eq(atb_task_eval(t, &t->sets[0], "M/(N-N)", &v, &err), ATB_ERR_SCHEMA);
	cr_expect_not_null(strstr(err.msg, "division by zero"));
	cr_expect_eq(atb_task_eval(t, &t->sets[0], "9223372036854775807+1", &v, &err),
		     ATB_ERR_SCHEMA);
	cr_expect_not_null(strstr(err.msg, "integer overflow"));
	cr_expect_eq(atb_task_eval(t, &t->sets[0], "99999999999999999999", &v, &err),
		     ATB_ERR_SCHEMA);
	cr_expect_eq(atb_task_eval(t, &t->sets[0], "M)", &v, &err), ATB_ERR_SCHEMA);
	cr_expect_eq(atb_task_eval(t, &t->sets[0], "(M", &v, &err), ATB_ERR_SCHEMA);
	cr_expect_eq(atb_task_eval(t, &t->sets[0], "", &v, &err), ATB_ERR_SCHEMA);
	cr_expect_eq(atb_task_eval(t, &t->sets[0], "M $ 2", &v, &err), ATB_ERR_SCHEMA);
	cr_expect_eq(atb_task_eval(t, &t->sets[0], "2.5*M", &v, &err), ATB_ERR_SCHEMA);
	atb_task_free(t);
}

/* ---- knobs ------------------------------------------------------------ */

Test(task, knob_sampling_is_reproducible)
{
	struct atb_task *t = load(ATB_SOURCE_DIR "/tasks/sgemm");
	gsl_rng *a = gsl_rng_alloc(gsl_rng_mt19937), *b = gsl_rng_alloc(gsl_rng_mt19937);
	gsl_rng *c = gsl_rng_alloc(gsl_rng_mt19937);
	struct atb_knob_assignment ka, kb, kc;
	struct atb_error err = {0};
	int i, differ = 0;

	gsl_rng_set(a, 42);
	gsl_rng_set(b, 42);
	gsl_rng_set(c, 43);
	for (i = 0; i < 50; i++) {
		char sa[512], sb[512], sc[512];

		atb_task_sample_knobs(t, a, &ka);
		atb_task_sample_knobs(t, b, &kb);
		atb_task_sample_knobs(t, c, &kc);
		atb_task_format_knobs(&ka, sa, sizeof(sa));
		atb_task_format_knobs(&kb, sb, sizeof(sb));
		atb_task_format_knobs(&kc, sc, sizeof(sc));
		cr_expect_str_eq(sa, sb);
		differ |= strcmp(sa, sc) != 0;
		cr_expect_eq(atb_task_check_knobs(t, &ka, &err), ATB_OK, "%s", err.msg);
	}
	cr_expect(differ, "another seed gives other proposals");
	atb_task_default_knobs(t, &ka);
	cr_expect_str_eq(ka.knobs[0].name, "TILE_I");
	cr_expect_str_eq(ka.knobs[0].value, "64");
	cr_expect_str_eq(ka.cflags, "");
	snprintf(ka.knobs[0].value, sizeof(ka.knobs[0].value), "65");
	cr_expect_eq(atb_task_check_knobs(t, &ka, &err), ATB_ERR_USAGE);
	atb_task_default_knobs(t, &ka);
	snprintf(ka.cflags, sizeof(ka.cflags), "-O0");
	cr_expect_eq(atb_task_check_knobs(t, &ka, &err), ATB_ERR_USAGE);
	gsl_rng_free(a);
	gsl_rng_free(b);
	gsl_rng_free(c);
	atb_task_free(t);
}

Test(task, instantiate_candidate, .init = mk_tmpdir, .fini = rm_tmpdir)
{
	struct atb_task *t = load(ATB_SOURCE_DIR "/tasks/relu");
	struct atb_error err = {0};
	char dir[512], path[600], *a, *b;

	snprintf(dir, sizeof(dir), "%s/cand", tmpdir);
	cr_assert_eq(atb_task_instantiate_candidate(t, NULL, dir, &err), ATB_OK, "%s", err.msg);
	snprintf(path, sizeof(path), "%s/kernel.c", dir);
	cr_assert_eq(atbi_read_file(path, &a, NULL, &err), ATB_OK);
	cr_assert_eq(atbi_read_file(t->candidate.path, &b, NULL, &err), ATB_OK);
	cr_expect_str_eq(a, b);
	atb_free(a);
	atb_free(b);
	/* Not a fresh folder: refused. */
	cr_expect_eq(atb_task_instantiate_candidate(t, NULL, dir, &err), ATB_ERR_IO);
	atb_task_free(t);
}

/* ---- builds ----------------------------------------------------------- */

Test(task, compile_error_returns_log, .init = mk_tmpdir, .fini = rm_tmpdir)
{
	struct atb_protocol *p = proto_v1();
	struct atb_task *t = load(FIX "/good.yaml");
	struct atb_error err = {0};
	char so[512], *log = NULL;

	snprintf(so, sizeof(so), "%s/broken.so", tmpdir);
	cr_expect_eq(atb_task_build(t, FIX "/broken.c", NULL, p, so, &log, &err), ATB_ERR_BUILD);
	cr_expect_not_null(strstr(err.msg, "build failed"), "%s", err.msg);
	cr_assert_not_null(log);
	cr_expect_not_null(strstr(log, "this_is_not_declared"), "log: %s", log);
	atb_free(log);
	atb_protocol_free(p);
	atb_task_free(t);
}

Test(task, hung_build_is_killed_at_timeout, .init = mk_tmpdir, .fini = rm_tmpdir)
{
	struct atb_task *t = load(FIX "/good.yaml");
	struct atb_protocol p;
	struct atb_error err = {0};
	char cc[512], so[512], *log = NULL;
	FILE *f;
	int64_t t0, dt;

	snprintf(cc, sizeof(cc), "%s/fakecc", tmpdir);
	f = fopen(cc, "w");
	cr_assert_not_null(f);
	fprintf(f, "#!/bin/sh\necho fake compiler starting\nsleep 30\necho never\n");
	fclose(f);
	chmod(cc, 0700);
	fake_proto(&p, cc, 0.5);
	snprintf(so, sizeof(so), "%s/x.so", tmpdir);
	t0 = atbi_monotonic_ns();
	cr_expect_eq(atb_task_build(t, FIX "/copy.c", NULL, &p, so, &log, &err), ATB_ERR_BUILD);
	dt = atbi_monotonic_ns() - t0;
	cr_expect_not_null(strstr(err.msg, "timed out"), "%s", err.msg);
	cr_expect_lt(dt, 5000000000LL, "took %lld ns", (long long)dt);
	cr_expect_geq(dt, 400000000LL);
	cr_assert_not_null(log);
	cr_expect_not_null(strstr(log, "fake compiler starting"), "log: %s", log);
	atb_free(log);
	atb_task_free(t);
}

Test(task, missing_compiler_is_system_error)
{
	struct atb_task *t = load(FIX "/good.yaml");
	struct atb_protocol p;
	struct atb_error err = {0};
	char *log = NULL;

	fake_proto(&p, "/nonexistent/atb-no-such-cc", 10);
	cr_expect_eq(atb_task_build(t, FIX "/copy.c", NULL, &p, "/tmp/atb-never.so", &log, &err),
		     ATB_ERR_SYSTEM);
	cr_expect_not_null(strstr(err.msg, "cannot run compiler"), "%s", err.msg);
	atb_free(log);
	atb_task_free(t);
}

Test(task, build_passes_knobs_and_flags, .init = mk_tmpdir, .fini = rm_tmpdir)
{
	struct atb_task *t = load(FIX "/good.yaml");
	struct atb_knob_assignment k;
	struct atb_protocol p;
	struct atb_error err = {0};
	char cc[512], so[512], *log = NULL;
	FILE *f;

	/* A compiler that prints its arguments: the order is the contract. */
	snprintf(cc, sizeof(cc), "%s/echocc", tmpdir);
	f = fopen(cc, "w");
	cr_assert_not_null(f);
	fprintf(f, "#!/bin/sh\necho \"$@\"\n");
	fclose(f);
	chmod(cc, 0700);
	fake_proto(&p, cc, 10);
	atb_task_default_knobs(t, &k);
	snprintf(k.knobs[0].value, sizeof(k.knobs[0].value), "4");
	snprintf(k.cflags, sizeof(k.cflags), "-O3");
	snprintf(so, sizeof(so), "%s/x.so", tmpdir);
	cr_assert_eq(atb_task_build(t, FIX "/copy.c", &k, &p, so, &log, &err), ATB_OK, "%s",
		     err.msg);
	cr_expect_not_null(strstr(log, "-O2 -fPIC -shared -O3 -DUNROLL=4 -I"), "log: %s", log);
	cr_expect_not_null(strstr(log, FIX "/copy.c -lm"), "log: %s", log);
	atb_free(log);
	log = NULL;
	snprintf(k.knobs[0].value, sizeof(k.knobs[0].value), "3");
	cr_expect_eq(atb_task_build(t, FIX "/copy.c", &k, &p, so, &log, &err), ATB_ERR_USAGE);
	atb_free(log);
	atb_task_free(t);
}

/* ---- bundled kernels agree with their baseline -------------------------- */

struct built {
	void *dl;
	atb_kernel_fn fn;
};

static struct built build_load(const struct atb_task *t, const char *src,
			       const struct atb_knob_assignment *k, const struct atb_protocol *p,
			       const char *tag)
{
	struct built b;
	struct atb_error err = {0};
	char so[600], *log = NULL, kbuf[512] = "";
	enum atb_status s;

	snprintf(so, sizeof(so), "%s/%s-%s.so", tmpdir, t->name, tag);
	if (k)
		atb_task_format_knobs(k, kbuf, sizeof(kbuf));
	s = atb_task_build(t, src, k, p, so, &log, &err);
	cr_assert_eq(s, ATB_OK, "%s %s [%s]: %s\n%s", t->name, tag, kbuf, err.msg,
		     log ? log : "");
	atb_free(log);
	b.dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	cr_assert_not_null(b.dl, "%s", dlerror());
	*(void **)&b.fn = dlsym(b.dl, ATB_KERNEL_SYMBOL);
	cr_assert_not_null(b.fn);
	return b;
}

/* Deterministic signed inputs, wider than any task's own generator. */
static void fill(void *buf, const char *dtype, int64_t n, uint64_t seed)
{
	uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
	int64_t i;

	for (i = 0; i < n; i++) {
		double u;

		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		u = (double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0;  /* [-1, 1) */
		if (!strcmp(dtype, "fp32"))
			((float *)buf)[i] = (float)(u * 3.0);
		else if (!strcmp(dtype, "fp64"))
			((double *)buf)[i] = u * 3.0;
		else if (!strcmp(dtype, "int32"))
			((int32_t *)buf)[i] = (int32_t)(u * 1.0e9);
	}
}

/* Run fn on set si; returns the output buffers (caller frees). */
static void **run(const struct atb_task *t, atb_kernel_fn fn, size_t si, void **inputs)
{
	struct atb_task_instance in;
	struct atb_error err = {0};
	struct atb_kernel_args a;
	void **bufs = calloc(t->nbuffers, sizeof(void *));
	size_t i;

	cr_assert_eq(atb_task_instantiate(t, si, &in, &err), ATB_OK);
	for (i = 0; i < in.nbuffers; i++) {
		size_t bytes = (size_t)in.buffers[i].count * in.buffers[i].elem_bytes;

		bufs[i] = malloc(bytes);
		if (in.buffers[i].role == ATB_ROLE_OUT)
			memset(bufs[i], 0xff, bytes);  /* NaN for floats: poison */
		else
			memcpy(bufs[i], inputs[i], bytes);
	}
	a.buffers = bufs;
	a.ints = in.ints;
	a.reals = in.reals;
	a.nbuffers = (int)in.nbuffers;
	a.nints = (int)in.nints;
	a.nreals = (int)in.nreals;
	a.stream = NULL;
	cr_assert_eq(fn(&a), 0, "%s: kernel returned non-zero", t->name);
	return bufs;
}

static void compare(const struct atb_task *t, size_t si, void **want, void **got,
		    const char *what)
{
	struct atb_task_instance in;
	struct atb_error err = {0};
	size_t i;
	int64_t j;

	cr_assert_eq(atb_task_instantiate(t, si, &in, &err), ATB_OK);
	for (i = 0; i < in.nbuffers; i++) {
		if (in.buffers[i].role == ATB_ROLE_IN)
			continue;
		for (j = 0; j < in.buffers[i].count; j++) {
			if (!strcmp(in.buffers[i].dtype, "fp32")) {
				float w = ((float *)want[i])[j], g = ((float *)got[i])[j];

				/* PROTO: correctness.tolerances.fp32 */
				cr_assert(fabsf(w - g) <= 1e-4f + 1e-4f * fabsf(w),
					  "%s %s set %zu: %s[%lld] = %g, baseline %g", t->name, what,
					  si, in.buffers[i].name, (long long)j, g, w);
			} else {
				cr_assert_eq(((int32_t *)want[i])[j], ((int32_t *)got[i])[j],
					     "%s %s set %zu: %s[%lld]", t->name, what, si,
					     in.buffers[i].name, (long long)j);
			}
		}
	}
}

static void free_bufs(void **b, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(b[i]);
	free(b);
}

#define RANDOM_COMBOS 4

static void check_task(const char *name)
{
	struct atb_protocol *p = proto_v1();
	struct atb_task *t = NULL;
	struct atb_error err = {0};
	struct built base, others[2 + RANDOM_COMBOS];
	struct atb_knob_assignment k;
	const char *what[2 + RANDOM_COMBOS];
	char kdesc[2 + RANDOM_COMBOS][256];
	gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
	size_t si, i, nothers = 0;

	gsl_rng_set(rng, 20260917);
	cr_assert_eq(atb_task_open(ATB_SOURCE_DIR, name, &t, &err), ATB_OK, "%s", err.msg);
	base = build_load(t, t->baseline.path, NULL, p, "baseline");
	cr_assert(t->has_naive);
	others[nothers] = build_load(t, t->naive.path, NULL, p, "naive");
	what[nothers++] = "naive";
	atb_task_default_knobs(t, &k);
	others[nothers] = build_load(t, t->candidate.path, &k, p, "default");
	what[nothers++] = "template (default knobs)";
	for (i = 0; i < RANDOM_COMBOS; i++) {
		char tag[32];

		atb_task_sample_knobs(t, rng, &k);
		snprintf(tag, sizeof(tag), "random%zu", i);
		atb_task_format_knobs(&k, kdesc[nothers], sizeof(kdesc[nothers]));
		others[nothers] = build_load(t, t->candidate.path, &k, p, tag);
		what[nothers] = kdesc[nothers];
		nothers++;
	}
	for (si = 1; si < t->nsets; si++) {
		struct atb_task_instance in;
		void *inputs[ATB_TASK_MAX_BUFFERS] = {NULL};
		void **want;

		cr_assert_eq(atb_task_instantiate(t, si, &in, &err), ATB_OK);
		for (i = 0; i < in.nbuffers; i++) {
			inputs[i] = malloc((size_t)in.buffers[i].count * in.buffers[i].elem_bytes);
			if (in.buffers[i].role != ATB_ROLE_OUT)
				fill(inputs[i], in.buffers[i].dtype, in.buffers[i].count, si * 7 + i);
		}
		/* layernorm's gamma: keep it positive-ish like its generator. */
		want = run(t, base.fn, si, inputs);
		for (i = 0; i < nothers; i++) {
			void **got = run(t, others[i].fn, si, inputs);

			compare(t, si, want, got, what[i]);
			free_bufs(got, t->nbuffers);
		}
		free_bufs(want, t->nbuffers);
		for (i = 0; i < in.nbuffers; i++)
			free(inputs[i]);
	}
	dlclose(base.dl);
	for (i = 0; i < nothers; i++)
		dlclose(others[i].dl);
	gsl_rng_free(rng);
	atb_task_free(t);
	atb_protocol_free(p);
}

Test(task, sgemm_kernels_agree, .init = mk_tmpdir, .fini = rm_tmpdir) { check_task("sgemm"); }
Test(task, softmax_kernels_agree, .init = mk_tmpdir, .fini = rm_tmpdir) { check_task("softmax"); }
Test(task, layernorm_kernels_agree, .init = mk_tmpdir, .fini = rm_tmpdir) { check_task("layernorm"); }
Test(task, stencil2d_kernels_agree, .init = mk_tmpdir, .fini = rm_tmpdir) { check_task("stencil2d"); }
Test(task, prefix_sum_kernels_agree, .init = mk_tmpdir, .fini = rm_tmpdir) { check_task("prefix_sum"); }
Test(task, relu_kernels_agree, .init = mk_tmpdir, .fini = rm_tmpdir) { check_task("relu"); }

/* ---- allocation failures ---------------------------------------------- */

Test(task, alloc_failure_walk_over_load)
{
	long k;
	int completed = 0;

	for (k = 1; k < 10000 && !completed; k++) {
		struct atb_task *t = (struct atb_task *)1;
		struct atb_error err = {0};
		enum atb_status s;

		atb_alloc_fail_at(k);
		s = atb_task_load(ATB_SOURCE_DIR "/tasks/sgemm", &t, &err);
		if (!atb_alloc_failed()) {
			cr_expect_eq(s, ATB_OK, "k=%ld: %s", k, err.msg);
			completed = 1;
		} else {
			cr_expect_eq(s, ATB_ERR_NOMEM, "k=%ld: status %s: %s", k,
				     atb_status_name(s), err.msg);
			cr_expect_null(t, "k=%ld", k);
		}
		atb_task_free(s == ATB_OK ? t : NULL);
	}
	atb_alloc_fail_at(0);
	cr_expect(completed, "load never succeeded");
	cr_expect_gt(k, 5, "the walk covered %ld allocations", k - 1);
}

/* PROTO: correctness.reduction_tolerance -- the task side of a reduction. */
Test(task, reduction_declared_on_gemm_and_reduce_sum)
{
	struct atb_error err = {0};
	struct atb_task *t = NULL;

	cr_assert_eq(atb_task_open(ATB_SOURCE_DIR, "cuda_gemm", &t, &err), ATB_OK, "%s", err.msg);
	cr_expect(t->buffers[2].reduction.has);
	cr_expect_str_eq(t->buffers[2].reduction.length, "K");
	cr_expect_eq(t->buffers[2].reduction.noperands, 2);
	cr_expect_str_eq(t->buffers[2].reduction.operands[1], "B");
	cr_expect_not(t->buffers[0].reduction.has);
	atb_task_free(t);
	cr_assert_eq(atb_task_open(ATB_SOURCE_DIR, "cuda_reduce_sum", &t, &err), ATB_OK, "%s",
		     err.msg);
	cr_expect_eq(t->buffers[1].reduction.noperands, 1);
	atb_task_free(t);
}

Test(task, reduction_that_does_not_fit_the_shapes_is_refused)
{
	static const char *const bad[][2] = {
		{"reduction: {length: K, operands: [A, B]}", "does not fit the shapes"},
		{"reduction: {length: N, operands: [A, Z]}", "bad operand 'Z'"},
	};
	char dir[] = "/tmp/atb-u-task-red-XXXXXX", path[128];
	struct atb_error err = {0};
	struct atb_task *t = NULL;
	size_t i;

	cr_assert(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/b.cu", dir);
	fclose(fopen(path, "w"));
	for (i = 0; i < 2; i++) {
		FILE *f;

		snprintf(path, sizeof(path), "%s/task.yaml", dir);
		f = fopen(path, "w");
		cr_assert(f);
		fprintf(f, "name: r\nkind: cuda\ndescription: x\n"
			"params:\n  - {name: M, type: int, value: 4}\n"
			"  - {name: N, type: int, value: 4}\n  - {name: K, type: int, value: 8}\n"
			"buffers:\n"
			"  - {name: A, dtype: fp32, role: in, shape: [M, K], generator: {kind: normal, mean: 0, stddev: 1}}\n"
			"  - {name: B, dtype: fp32, role: in, shape: [N, N], generator: {kind: normal, mean: 0, stddev: 1}}\n"
			"  - {name: C, dtype: fp32, role: out, shape: [M, N], %s}\n"
			"baseline: {source: b.cu, label: x, why: honest enough for this test}\nsurface: [kernel.cu]\n"
			"candidate: {template: b.cu}\nfloor: {bytes: M, flops: M}\n", bad[i][0]);
		fclose(f);
		cr_expect_eq(atb_task_load(path, &t, &err), ATB_ERR_SCHEMA, "%s", bad[i][0]);
		cr_expect(strstr(err.msg, bad[i][1]), "%s", err.msg);
		remove(path);
	}
	snprintf(path, sizeof(path), "%s/b.cu", dir);
	remove(path);
	rmdir(dir);
}
