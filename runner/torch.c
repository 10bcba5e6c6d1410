/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb-runner's torch backend (job "backend": "torch"): KernelBench-format
 * tasks (a PyTorch Model and a candidate ModelNew) in an embedded CPython.
 * libpython is not linked: the job names the one the harness's interpreter
 * uses (its LDLIBRARY in LIBDIR, asked with `python -c` when the task was
 * loaded), and it is dlopen()ed here with RTLD_GLOBAL, so extension modules
 * such as torch._C resolve against it, and the dozen C-API functions used
 * are looked up with dlsym.  atb builds and its tests run where no Python or
 * PyTorch exists; such a job ends with "no_python".
 *
 * The Python side is python/atb_torch/runner.py: it imports the task and
 * the candidate, builds both models under the same seed, generates inputs
 * (the task's get_inputs() under the seed, plus the protocol's adversarial
 * distributions over every floating tensor), poisons the allocator's free
 * blocks, runs the calls, and hands back the facts: outputs as CPU tensors
 * (compared HERE, by the same tolerance rule as every backend,
 * runner_compare), mutated inputs, output aliasing, result-reuse steps.
 * Events are built by the shared layer (check.c), so atb's gates read them
 * as they read the cpu and cuda backends' events.
 *
 * Timing: the one timing core (src/timing) calls back into Python once per
 * trial (a prepared bound method and argument tuple; nothing is timed in
 * Python).  On CPU tensors the cpu timer (CLOCK_MONOTONIC, cache flush).
 * On cuda, device 0 is opened through the driver API (src/cuda) first and
 * PyTorch is made to use the runner's stream (torch.cuda.ExternalStream):
 * the CUDA-events timer records its events and L2 flush on the very stream
 * the models launch on, and the side-stream check of the cuda backend
 * (device-wide completion against the event window) runs before each
 * seed's timing.
 *
 * Does not: judge anything, or finalize the interpreter (the process ends).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/time.h>
#include <sys/types.h>
#include <unistd.h>

#include <gsl/gsl_rng.h>

#include "atb/alloc.h"
#include "atb/cuda.h"
#include "atb/cuda_compare.h"
#include "atb/timing.h"
#include "runner_int.h"
#include "runner_torch.h"
#include "util.h"
#include "banned.h"

/* The signals whose Python handlers left_hooks compares (the watch's). */
static const int hook_signals[] = {SIGALRM, SIGPROF, SIGVTALRM, SIGUSR1, SIGUSR2, SIGCHLD, SIGIO};
#define HOOK_SIGNALS (sizeof(hook_signals) / sizeof(hook_signals[0]))

/* ---- the CPython C API, resolved at run time ------------------------------ */

/* PyObject * is void * here: nothing but these functions touches one. */
struct pyapi {
	void (*Py_InitializeEx)(int);
	void *(*PyImport_ImportModule)(const char *);
	void *(*PyObject_GetAttrString)(void *, const char *);
	void *(*PyObject_CallObject)(void *, void *);
	void *(*PyUnicode_FromString)(const char *);
	const char *(*PyUnicode_AsUTF8)(void *);
	void *(*PyLong_FromLongLong)(long long);
	void *(*PyTuple_New)(ssize_t);
	int (*PyTuple_SetItem)(void *, ssize_t, void *);
	void (*Py_DecRef)(void *);
	void (*Py_IncRef)(void *);
	void (*PyErr_Print)(void);
	void (*PyErr_Clear)(void);
	ssize_t (*PyObject_Size)(void *);
	long long (*PyLong_AsLongLong)(void *);
};

static struct pyapi py;

#define PY_SYM(name) {#name, (void **)(void *)&py.name}

static int py_load(const char *library, char *why, size_t size)
{
	const struct {
		const char *name;
		void **slot;
	} syms[] = {
		PY_SYM(Py_InitializeEx), PY_SYM(PyImport_ImportModule),
		PY_SYM(PyObject_GetAttrString), PY_SYM(PyObject_CallObject),
		PY_SYM(PyUnicode_FromString), PY_SYM(PyUnicode_AsUTF8),
		PY_SYM(PyLong_FromLongLong), PY_SYM(PyTuple_New), PY_SYM(PyTuple_SetItem),
		PY_SYM(Py_DecRef), PY_SYM(Py_IncRef), PY_SYM(PyErr_Print), PY_SYM(PyErr_Clear),
		PY_SYM(PyObject_Size), PY_SYM(PyLong_AsLongLong),
	};
	void *dl;
	size_t i;

	if (!library || !*library) {
		snprintf(why, size, "the job's python has no shared libpython (a static build "
			 "cannot be embedded)");
		return -1;
	}
	dl = dlopen(library, RTLD_NOW | RTLD_GLOBAL);
	if (!dl) {
		snprintf(why, size, "cannot load libpython '%s': %s", library, dlerror());
		return -1;
	}
	for (i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *s = dlsym(dl, syms[i].name);

		if (!s) {
			snprintf(why, size, "no symbol '%s' in libpython '%s'", syms[i].name, library);
			return -1;
		}
		/* dlsym returns void *; copy the bits rather than cast to a function. */
		memcpy(syms[i].slot, &s, sizeof(s));
	}
	return 0;
}

/* A tuple of up to three integers (n of them). */
static void *int_tuple(int n, long long a, long long b, long long c)
{
	long long v[3] = {a, b, c};
	void *t = py.PyTuple_New(n);
	int i;

	for (i = 0; t && i < n; i++) {
		void *x = py.PyLong_FromLongLong(v[i]);

		if (!x || py.PyTuple_SetItem(t, i, x)) {  /* steals x, even on failure */
			py.Py_DecRef(t);
			return NULL;
		}
	}
	return t;
}

/* ---- the backend's state ------------------------------------------------- */

struct trt {
	const struct atb_runner_job *job;
	char preemption[256];        /* timing.preemption as applied: "run_delay", why not, "" */
	json_t *raw;                 /* the job as sent */
	const json_t *torch;         /* its "torch" object (borrowed from raw) */
	char sha[ATB_RUNNER_MAX_ARMS][ATB_SHA256_HEX_LEN + 1];
	void *session;               /* atb_torch.runner.Session */
	void *call;                  /* its bound method call */
	/* one argument tuple per model: the job's arms, then the compiled reference */
	void *arm_args[ATB_RUNNER_MAX_ARMS + 1];
	struct atb_cuda *cu;         /* NULL on CPU tensors */
	json_t *py_env;              /* Session.env() */
	char msg[1400];
	char reason[32];             /* an error reason the Python side named */
	size_t skipped;              /* adversarial input sets the reference is not defined on */
	/* "torch": {"compile": {"mode"}}: torch.compile of the reference, the
	   model after the job's arms (index job->narms), checked against eager
	   and timed in the paired group while compile_ok */
	int with_compile, compile_ok;
	char compile_mode[32];
	char compile_why[512];       /* why it is not timed; "" */
	int64_t compile_ns;          /* its first call (the compilation), wall time */
	size_t compile_checks;
	json_t *compile_failed;      /* the first input set it differed on: {seed, input, buffers} */
	/* where the time goes (the "phases" event): the C side's own phases */
	int64_t interpreter_ns;      /* Py_InitializeEx and importing atb_torch.runner */
	int64_t compare_ns;          /* runner_compare over the output pairs */
	int compare_on_device;       /* outputs compared on the GPU (compare_device) */
	/* the references' copies in the runner's own memory, on the device (d)
	   or the host (h): ref_slot, ref_store */
	struct {
		char name[24]; uint64_t d; void *h; size_t cap, bytes; int direct;
		double slack;  /* PROTO: correctness.reference_precision -- its allowance */
	} refs[128];  /* ref*, refb* and tref*: 42 tensor outputs each */
	size_t nrefs;
	/* PROTO: correctness.reference_precision -- per seed, the allowance of
	   each output (by index) of its set drawn from the task's own
	   generator, for that seed's timed checks (every seed's sets are
	   checked before any seed is timed); and what was allowed */
	struct task_slack { uint64_t seed; size_t n; double v[42]; } *ts;
	size_t nts;
	struct runner_ref_precision rp;
	size_t ref_direct;  /* reference copies that fell back to PyTorch's tensor */
	char compare_why[256];       /* why not, on cuda ("" when they are) */
	int64_t side_stream_ns;      /* the side-stream checks (cuda) */
	int64_t warmup_ns;           /* the timing core's warm-up calls, every arm and seed */
	int64_t timed_ns;            /* the sum of the timed windows (every sample) */
	int64_t timing_ns;           /* the timing core's whole seeds (warm-up included) */
	/* the interpreter's hooks that run code after a call returns, read by
	   C after every timed call (left_hooks): sys.getprofile, sys.gettrace,
	   the gc module's callbacks list and sys.monitoring.get_tool (3.12+),
	   bound before the candidate's import; None */
	void *getprofile, *gettrace, *gc_callbacks, *mon_get_tool, *none;
	void *gc_isenabled, *getsignal;  /* gc.isenabled, signal.getsignal */
	void *gc_on;                     /* gc.isenabled() at the group's start */
	void *handlers[HOOK_SIGNALS];    /* signal.getsignal(n) then; owned */
	/* torch._C._len_torch_function_stack and _len_torch_dispatch_stack
	   (bound after open(): the tamper watch holds torch._C's names) */
	void *mode_len[2];
	ssize_t mode_n[2];
	ssize_t gc_callbacks_n;      /* at the group's start */
	int tamper_emitted;          /* a tamper event is out (left_hooks): the job ends */
	unsigned mon_free;           /* the monitoring tool ids free at the group's start */
	int64_t hooks_ns;            /* the timed checks' hooks inside them (Python's
	                                timed_checks phase and their compare) */
	int64_t check_ns, t0_ns;     /* the correctness phase; the run's start */
	struct flush_timer *ft;      /* the job's timer, its flushes timed */
	size_t seeds_timed;
	/* PROTO: gates tamper -- the watch (python/atb_torch/tamper.py) before
	   the first timed trial of each group and before one in TAMPER_EVERY
	   of the others, drawn here (getrandom: the candidate cannot know
	   which), whatever the arm: checking before the reference's windows
	   only would put work before them that the candidate's do not follow
	   (caches, the garbage collector's counts), a bias */
	void *tamper_trial;          /* Session.tamper_trial */
	uint64_t tamper_rng;         /* xorshift64 state, never 0 */
	int tamper_first;            /* the group's next trial is its first */
	size_t tamper_trials;        /* trials checked */
	int64_t tamper_trial_ns;     /* inside the timing core's seeds, outside the windows */
};

/*
 * The job's timer with its flush timed (CLOCK_MONOTONIC on the host, outside
 * the timed window): every operation is the inner timer's.  On cuda the
 * flush is an asynchronous memset, so this is its launch, not its run.
 */
struct flush_timer {
	struct atb_timer t;          /* first: the core is handed &t */
	struct atb_timer *inner;
	int64_t flush_ns;
	size_t nflush;
	/* run before each timed trial's window opens (the tamper watch); NULL: none */
	void (*before)(void *ctx);
	void *ctx;
};

static void ft_start(void *s)
{
	struct flush_timer *f = s;

	if (f->before)
		f->before(f->ctx);
	f->inner->ops->start(f->inner->state);
}

static void ft_stop(void *s)
{
	struct flush_timer *f = s;

	f->inner->ops->stop(f->inner->state);
}

static int64_t ft_elapsed_ns(void *s)
{
	struct flush_timer *f = s;
	int64_t ns = f->inner->ops->elapsed_ns(f->inner->state);

	/* the inner timer's per-trial facts, where the core reads them */
	f->t.last_preempted_ns = f->inner->last_preempted_ns;
	f->t.last_device_extra_ns = f->inner->last_device_extra_ns;
	return ns;
}

static void ft_flush(void *s)
{
	struct flush_timer *f = s;
	int64_t t0 = atbi_monotonic_ns();

	if (f->inner->ops->flush)
		f->inner->ops->flush(f->inner->state);
	f->flush_ns += atbi_monotonic_ns() - t0;
	f->nflush++;
}

static int64_t ft_resolution_ns(void *s)
{
	struct flush_timer *f = s;

	return f->inner->ops->resolution_ns(f->inner->state);
}

static int ft_sync(void *s)
{
	struct flush_timer *f = s;

	return f->inner->ops->sync ? f->inner->ops->sync(f->inner->state) : 0;
}

static const struct atb_timer_ops ft_ops_sync = {
	.start = ft_start, .stop = ft_stop, .elapsed_ns = ft_elapsed_ns, .flush = ft_flush,
	.resolution_ns = ft_resolution_ns, .release = NULL, .sync = ft_sync,
};

static void flush_timer_init(struct flush_timer *f, struct atb_timer *inner,
			     struct atb_timer_ops *ops)
{
	*ops = ft_ops_sync;
	ops->name = inner->ops->name;
	if (!inner->ops->sync)
		ops->sync = NULL;
	f->inner = inner;
	f->t.ops = ops;
	f->t.state = f;
	f->t.flush_bytes = inner->flush_bytes;
	f->t.measures_device_extra = inner->measures_device_extra;
}

static const char *ft_cuda_error(const struct atb_timer *t)
{
	return atb_cuda_timer_error(((const struct flush_timer *)(const void *)t)->inner);
}

/* The name the compiled reference's samples and facts carry. */
#define COMPILE_ARM "compile"

/*
 * Call session.method(args) (args stolen; NULL: no arguments) and parse the
 * JSON text it answers.  NULL with rt->msg set when Python failed (the
 * traceback went to stderr) or the answer is not JSON.  An answer with an
 * "error" is returned as it is: see answer_error.
 */
static json_t *py_json(struct trt *rt, const char *method, void *args)
{
	void *fn = py.PyObject_GetAttrString(rt->session, method), *r = NULL;
	const char *s;
	json_t *o = NULL;

	if (fn)
		r = py.PyObject_CallObject(fn, args);
	if (args)
		py.Py_DecRef(args);
	if (fn)
		py.Py_DecRef(fn);
	s = r ? py.PyUnicode_AsUTF8(r) : NULL;
	if (s)
		o = json_loads(s, 0, NULL);
	if (!o) {
		py.PyErr_Print();
		snprintf(rt->msg, sizeof(rt->msg), "atb_torch: %s() failed (its traceback is on "
			 "stderr)", method);
	}
	if (r)
		py.Py_DecRef(r);
	return o;
}

/* An answer {"error", "reason"}: emit it as an error event; 1 when it was one. */
static int answer_error(const json_t *a)
{
	const char *e = json_string_value(json_object_get(a, "error"));
	const char *reason = json_string_value(json_object_get(a, "reason"));

	if (!e)
		return 0;
	runner_emit_error(reason ? reason : "python", e);
	return 1;
}

/*
 * py_json, with its failures emitted: NULL after an error event (Python
 * failed, or answered {"error", "reason"}); otherwise the answer.
 */
static json_t *py_answer(struct trt *rt, const char *method, void *args)
{
	json_t *a = py_json(rt, method, args);

	if (!a) {
		runner_emit_error("python", rt->msg);
		return NULL;
	}
	if (answer_error(a)) {
		json_decref(a);
		return NULL;
	}
	return a;
}

/*
 * PROTO: gates tamper -- Session.tamper(where): the watch checked now, and
 * every change it saw since the last call (before timed trials too).  Any
 * change: the event {"event": "tamper", "where", "changes": [{where,
 * what}]} and the job ends (an error event "tamper": nothing measured
 * after it could be trusted); the harness refuses the candidate.  0 clean,
 * -1 after the events (or a Python failure's error event).
 */
/* The tamper event (changes: [{where, what}], borrowed), then the error
 * event that ends the job; later tamper points emit nothing. */
static void emit_tamper(struct trt *rt, const char *where, json_t *ch, json_t *checks)
{
	char msg[600];

	snprintf(msg, sizeof(msg), "the interpreter the reference runs in changed (first seen "
		 "at %s): %s", json_string_value(json_object_get(json_array_get(ch, 0), "where")),
		 json_string_value(json_object_get(json_array_get(ch, 0), "what")));
	if (!runner_emit(json_pack("{s:s, s:s, s:O, s:O}", "event", "tamper", "where", where,
				   "changes", ch, "checks", checks)))
		runner_emit_error("tamper", msg);
	rt->tamper_emitted = 1;
}

static int tamper_point(struct trt *rt, const char *where)
{
	void *args = py.PyTuple_New(1);
	json_t *a, *ch;

	if (rt->tamper_emitted) {  /* the job ends on the first tamper event */
		if (args)
			py.Py_DecRef(args);
		return -1;
	}
	if (!args || py.PyTuple_SetItem(args, 0, py.PyUnicode_FromString(where))) {
		if (args)
			py.Py_DecRef(args);
		runner_emit_error("python", "atb_torch: cannot call tamper()");
		return -1;
	}
	a = py_answer(rt, "tamper", args);
	if (!a)
		return -1;
	ch = json_object_get(a, "changes");
	if (!json_array_size(ch)) {
		json_decref(a);
		return 0;
	}
	emit_tamper(rt, where, ch, json_object_get(a, "checks"));
	json_decref(a);
	return -1;
}

/*
 * One timed trial in TAMPER_EVERY is checked at random: a change live
 * during every trial of the reference (or most of them) is seen within a
 * few trials, and a check costs about 0.4 ms on a 2-core VM (several on a
 * loaded one): before each of the reference's trials the checks were 13%
 * of a drift job's wall time there.
 */
#define TAMPER_EVERY 8

static void tamper_seed_rng(struct trt *rt)
{
	uint64_t x = 0;

	if (getrandom(&x, sizeof(x), 0) != (ssize_t)sizeof(x))
		x = (uint64_t)atbi_monotonic_ns() ^ ((uint64_t)getpid() << 32);
	rt->tamper_rng = x ? x : 0x9e3779b97f4a7c15ull;
}

/* The timer's hook before each timed trial's window: the watch's check,
 * on the group's first trial and one in TAMPER_EVERY of the others. */
static void tamper_before_trial(void *ctx)
{
	struct trt *rt = ctx;
	uint64_t x = rt->tamper_rng;
	int64_t t0;
	void *r;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	rt->tamper_rng = x;
	if (!rt->tamper_trial || (!rt->tamper_first && x % TAMPER_EVERY))
		return;
	rt->tamper_first = 0;
	rt->tamper_trials++;
	t0 = atbi_monotonic_ns();
	r = py.PyObject_CallObject(rt->tamper_trial, NULL);
	if (r)
		py.Py_DecRef(r);
	else
		py.PyErr_Print();  /* found at the next tamper_point, or not at all */
	rt->tamper_trial_ns += atbi_monotonic_ns() - t0;
}

/* ---- the job ------------------------------------------------------------- */

int runner_is_torch_job(const char *text, size_t len)
{
	json_t *o = json_loadb(text, len, 0, NULL);
	const char *b = json_string_value(json_object_get(o, "backend"));
	int yes = b && !strcmp(b, "torch");

	json_decref(o);
	return yes;
}

/*
 * The torch job is the generic job (arms, reference, seeds, timing,
 * correctness, options: parsed by the one parser) with "py" files instead
 * of shared objects and no buffers or parameter sets of its own: the
 * inputs come from the task's get_inputs().  For the shared parser the
 * arms' files go in "so" and one placeholder input stands for the inputs
 * (real, so the protocol's distributions rotate over the seeds as on the
 * other backends: runner_seed_inputs).
 */
static int parse_job(struct trt *rt, const char *text, size_t len, struct atb_runner_job **job)
{
	json_t *copy = NULL, *arms, *set;
	const json_t *t, *pyj;
	struct atb_error err;
	json_error_t je;
	size_t i;
	int rc = -1;

	*job = NULL;
	atb_error_clear(&err);
	rt->raw = json_loadb(text, len, 0, &je);
	if (!rt->raw) {
		snprintf(rt->msg, sizeof(rt->msg), "the job is not json: %s", je.text);
		return -1;
	}
	t = rt->torch = json_object_get(rt->raw, "torch");
	pyj = json_object_get(t, "python");
	if (!json_is_object(t) || !json_is_object(pyj)) {
		snprintf(rt->msg, sizeof(rt->msg), "torch: missing object '%s'",
			 json_is_object(t) ? "torch.python" : "torch");
		return -1;
	}
	if (!json_is_string(json_object_get(pyj, "library")) ||
	    !json_is_string(json_object_get(pyj, "home")) ||
	    !json_is_array(json_object_get(pyj, "path")) ||
	    !json_is_string(json_object_get(t, "module_path"))) {
		snprintf(rt->msg, sizeof(rt->msg), "torch: 'python.library', 'python.home', "
			 "'python.path' and 'module_path' are required");
		return -1;
	}
	if (json_object_get(t, "device")) {
		const char *d = json_string_value(json_object_get(t, "device"));

		if (!d || (strcmp(d, "auto") && strcmp(d, "cpu") && strcmp(d, "cuda"))) {
			snprintf(rt->msg, sizeof(rt->msg),
				 "torch.device: bad device '%s': expected auto, cpu or cuda",
				 d ? d : "(not a string)");
			return -1;
		}
	}
	if (json_object_get(t, "compile")) {
		const json_t *c = json_object_get(t, "compile");
		const char *mode = json_string_value(json_object_get(c, "mode"));
		static const char *const modes[] = {"default", "reduce-overhead", "max-autotune",
						    "max-autotune-no-cudagraphs"};

		for (i = 0; mode && i < sizeof(modes) / sizeof(modes[0]); i++)
			if (!strcmp(mode, modes[i]))
				break;
		if (!json_is_object(c) || !mode || i == sizeof(modes) / sizeof(modes[0])) {
			snprintf(rt->msg, sizeof(rt->msg),
				 "torch.compile.mode: bad mode '%s': expected default, "
				 "reduce-overhead, max-autotune or max-autotune-no-cudagraphs",
				 mode ? mode : "(not a string)");
			return -1;
		}
		rt->with_compile = 1;
		snprintf(rt->compile_mode, sizeof(rt->compile_mode), "%s", mode);
	}
	copy = json_deep_copy(rt->raw);
	arms = json_object_get(copy, "arms");
	set = json_pack("{s:s, s:[], s:[], s:[i]}", "name", "task", "ints", "reals", "counts", 1);
	if (!copy || !set)
		goto nomem;
	for (i = 0; i < json_array_size(arms); i++) {
		json_t *a = json_array_get(arms, i);
		const char *p = json_string_value(json_object_get(a, "py"));

		if (!p || !*p) {
			snprintf(rt->msg, sizeof(rt->msg), "arms[%zu].py: missing python file", i);
			goto out;
		}
		json_object_set_new(a, "so", json_string(p));
	}
	json_object_del(copy, "backend");
	json_object_del(copy, "torch");
	json_object_set_new(copy, "buffers",
			    json_pack("[{s:s, s:s, s:s, s:{s:s, s:s, s:f, s:f}}]", "name", "inputs",
				      "dtype", "fp32", "role", "in", "dist", "name", "task", "kind",
				      "uniform", "low", 0.0, "high", 1.0));
	json_object_set_new(copy, "sets", json_pack("[O]", set));
	json_object_set_new(copy, "timing_set", json_incref(set));
	if (atb_runner_job_from_json(copy, job, &err)) {
		atb_error_format(&err, rt->msg, sizeof(rt->msg));
		goto out;
	}
	rc = 0;
	goto out;
nomem:
	snprintf(rt->msg, sizeof(rt->msg), "cannot read the job: out of memory");
out:
	json_decref(set);
	json_decref(copy);
	return rc;
}

/* Hash each arm's python file: the env event names the exact bytes that ran. */
static int hash_arms(struct trt *rt)
{
	size_t i;

	for (i = 0; i < rt->job->narms; i++) {
		struct atb_error err;
		char *data = NULL;
		size_t len = 0;

		atb_error_clear(&err);
		if (atbi_read_file(rt->job->arms[i].so, &data, &len, &err)) {
			snprintf(rt->msg, sizeof(rt->msg), "cannot load arm '%s': %s",
				 rt->job->arms[i].name, err.msg);
			return -1;
		}
		atbi_sha256_hex(data, len, rt->sha[i]);
		atb_free(data);
	}
	return 0;
}

/* ---- the interpreter ------------------------------------------------------ */

/*
 * Embed the job's python: PYTHONHOME its base prefix, atb_torch's folder on
 * PYTHONPATH (the interpreter's own sys.path, the venv's site-packages
 * included, is added by atb_torch.runner.open), no bytecode written next to
 * the task or the candidate (the surface gate would see it), no user site.
 */
/*
 * PROTO: gates tamper -- the interpreter's hooks that run code after a call
 * returns.  A timed call that leaves a profile or trace function set, a
 * gc callback registered or a sys.monitoring tool in use has code of its
 * own run inside whatever Python runs next: the next arm's timed call (a
 * slower reference) or the round's check (an output filled there, after
 * its window), and such a hook can remove itself before the watch's next
 * check sees it.  So C reads them after every timed call, with functions
 * bound before the candidate's import and called from C (no Python frame,
 * no profile event): any change is a tamper finding.  Bound here.
 */
static int bind_hooks(struct trt *rt)
{
	void *sys = py.PyImport_ImportModule("sys");
	void *gc = py.PyImport_ImportModule("gc");
	void *sig = py.PyImport_ImportModule("signal");
	void *mon;

	if (!sys || !gc || !sig) {
		py.PyErr_Print();
		snprintf(rt->msg, sizeof(rt->msg), "cannot import sys and gc");
		return -1;
	}
	rt->getprofile = py.PyObject_GetAttrString(sys, "getprofile");
	rt->gettrace = py.PyObject_GetAttrString(sys, "gettrace");
	rt->gc_callbacks = py.PyObject_GetAttrString(gc, "callbacks");
	rt->gc_isenabled = py.PyObject_GetAttrString(gc, "isenabled");
	rt->getsignal = py.PyObject_GetAttrString(sig, "getsignal");
	py.Py_DecRef(sig);
	mon = py.PyObject_GetAttrString(sys, "monitoring");
	if (mon) {
		rt->mon_get_tool = py.PyObject_GetAttrString(mon, "get_tool");
		py.Py_DecRef(mon);
	}
	py.PyErr_Clear(); /* no sys.monitoring before 3.12 */
	py.Py_DecRef(sys);
	py.Py_DecRef(gc);
	rt->none = rt->getprofile ? py.PyObject_CallObject(rt->getprofile, NULL) : NULL;
	if (!rt->getprofile || !rt->gettrace || !rt->gc_callbacks || !rt->none ||
	    !rt->gc_isenabled || !rt->getsignal) {
		py.PyErr_Print();
		snprintf(rt->msg, sizeof(rt->msg), "cannot bind sys.getprofile, sys.gettrace, "
			 "gc.callbacks, gc.isenabled and signal.getsignal");
		return -1;
	}
	return 0;
}

/* sys.monitoring.get_tool(id) is None (no tool holds id); 1 when no
 * sys.monitoring. */
static int mon_tool_free(struct trt *rt, int id)
{
	void *args = int_tuple(1, id, 0, 0), *v;
	int free_ = 1;

	if (!rt->mon_get_tool || !args)
		return 1;
	v = py.PyObject_CallObject(rt->mon_get_tool, args);
	py.Py_DecRef(args);
	if (v) {
		free_ = v == rt->none;
		py.Py_DecRef(v);
	} else {
		py.PyErr_Clear();
	}
	return free_;
}

/* fn() as an integer (torch._C._len_torch_function_stack()); -1 on failure. */
static ssize_t py_len(void *fn)
{
	void *v = py.PyObject_CallObject(fn, NULL);
	ssize_t n = -1;

	if (v) {
		n = (ssize_t)py.PyLong_AsLongLong(v);
		py.Py_DecRef(v);
	}
	py.PyErr_Clear();
	return n;
}

/* signal.getsignal(n), a new reference; NULL on failure. */
static void *py_getsignal(struct trt *rt, int n)
{
	void *args = int_tuple(1, n, 0, 0), *v;

	if (!args)
		return NULL;
	v = py.PyObject_CallObject(rt->getsignal, args);
	py.Py_DecRef(args);
	if (!v)
		py.PyErr_Clear();
	return v;
}

/* The references hooks_begin took. */
static void hooks_end(struct trt *rt)
{
	size_t k;

	for (k = 0; k < HOOK_SIGNALS; k++) {
		if (rt->handlers[k])
			py.Py_DecRef(rt->handlers[k]);
		rt->handlers[k] = NULL;
	}
	if (rt->gc_on)
		py.Py_DecRef(rt->gc_on);
	rt->gc_on = NULL;
}

/* At a timed group's start (after Session.timed_begin turned gc off): the
 * state left_hooks compares with. */
static void hooks_begin(struct trt *rt)
{
	size_t k;
	int i;

	hooks_end(rt);
	rt->gc_on = py.PyObject_CallObject(rt->gc_isenabled, NULL);
	for (k = 0; k < HOOK_SIGNALS; k++)
		rt->handlers[k] = py_getsignal(rt, hook_signals[k]);
	py.PyErr_Clear();
	for (i = 0; i < 2; i++)
		rt->mode_n[i] = rt->mode_len[i] ? py_len(rt->mode_len[i]) : 0;
	rt->gc_callbacks_n = py.PyObject_Size(rt->gc_callbacks);
	rt->mon_free = 0;
	for (i = 0; rt->mon_get_tool && i < 6; i++)
		if (mon_tool_free(rt, i))
			rt->mon_free |= 1u << i;
}

/* After a timed call of model `model`: "" when no hook was left, else what
 * was (into what, size n). */
static void left_hooks(struct trt *rt, size_t model, char *what, size_t n)
{
	char arm[80];
	void *v;
	size_t k;
	int i;

	what[0] = 0;
	if (model < rt->job->narms)
		snprintf(arm, sizeof(arm), "the timed call of arm '%s'", rt->job->arms[model].name);
	else
		snprintf(arm, sizeof(arm), "the compiled reference's timed call");
	v = py.PyObject_CallObject(rt->getprofile, NULL);
	if (v != rt->none)
		snprintf(what, n, "a profile function (sys.setprofile) left set by %s", arm);
	if (v)
		py.Py_DecRef(v);
	v = what[0] ? NULL : py.PyObject_CallObject(rt->gettrace, NULL);
	if (!what[0] && v != rt->none)
		snprintf(what, n, "a trace function (sys.settrace) left set by %s", arm);
	if (v)
		py.Py_DecRef(v);
	if (!what[0] && py.PyObject_Size(rt->gc_callbacks) != rt->gc_callbacks_n)
		snprintf(what, n, "gc.callbacks changed by %s (%zd now, %zd at the group's "
			 "start)", arm, py.PyObject_Size(rt->gc_callbacks),
			 rt->gc_callbacks_n);
	v = what[0] ? NULL : py.PyObject_CallObject(rt->gc_isenabled, NULL);
	if (!what[0] && v != rt->gc_on)  /* True and False are singletons */
		snprintf(what, n, "the garbage collector turned on by %s (the runner turns it off "
			 "for its timed groups)", arm);
	if (v)
		py.Py_DecRef(v);
	for (k = 0; !what[0] && k < HOOK_SIGNALS; k++) {
		v = py_getsignal(rt, hook_signals[k]);
		if (v != rt->handlers[k])
			snprintf(what, n, "the Python handler of signal %d changed by %s",
				 hook_signals[k], arm);
		if (v)
			py.Py_DecRef(v);
	}
	for (i = 0; !what[0] && i < 3; i++) {
		static const int which[] = {ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF};
		struct itimerval it;

		if (!getitimer(which[i], &it) && (it.it_value.tv_sec || it.it_value.tv_usec))
			snprintf(what, n, "an interval timer (%s) armed by %s",
				 i == 0 ? "ITIMER_REAL" : i == 1 ? "ITIMER_VIRTUAL" : "ITIMER_PROF", arm);
	}
	for (i = 0; !what[0] && i < 2; i++)
		if (rt->mode_len[i] && py_len(rt->mode_len[i]) != rt->mode_n[i])
			snprintf(what, n, "a torch %s mode left active by %s (the stack is %zd, "
				 "was %zd)", i ? "dispatch" : "function", arm,
				 py_len(rt->mode_len[i]), rt->mode_n[i]);
	for (i = 0; !what[0] && rt->mon_get_tool && i < 6; i++)
		if (rt->mon_free >> i & 1 && !mon_tool_free(rt, i))
			snprintf(what, n, "sys.monitoring tool %d taken by %s", i, arm);
	py.PyErr_Clear();
}

static int py_start(struct trt *rt, const char **reason)
{
	const json_t *pyj = json_object_get(rt->torch, "python");
	void *mod, *open_fn, *args, *s;
	const char *err_text;
	char *text;
	int64_t t0;

	*reason = "no_python";
	if (py_load(json_string_value(json_object_get(pyj, "library")), rt->msg, sizeof(rt->msg)))
		return -1;
	*reason = "python";
	t0 = atbi_monotonic_ns();
	setenv("PYTHONHOME", json_string_value(json_object_get(pyj, "home")), 1);
	setenv("PYTHONPATH", json_string_value(json_object_get(rt->torch, "module_path")), 1);
	setenv("PYTHONDONTWRITEBYTECODE", "1", 1);
	setenv("PYTHONNOUSERSITE", "1", 1);
	py.Py_InitializeEx(0);
	if (bind_hooks(rt))
		return -1;
	mod = py.PyImport_ImportModule("atb_torch.runner");
	if (!mod) {
		py.PyErr_Print();
		snprintf(rt->msg, sizeof(rt->msg), "cannot import atb_torch.runner from '%s' (the "
			 "traceback is on stderr)",
			 json_string_value(json_object_get(rt->torch, "module_path")));
		return -1;
	}
	open_fn = py.PyObject_GetAttrString(mod, "open");
	py.Py_DecRef(mod);
	rt->interpreter_ns = atbi_monotonic_ns() - t0;
	text = json_dumps(rt->raw, JSON_COMPACT);
	args = text ? py.PyTuple_New(1) : NULL;
	if (args && py.PyTuple_SetItem(args, 0, py.PyUnicode_FromString(text))) {
		py.Py_DecRef(args);
		args = NULL;
	}
	atb_free(text);
	s = open_fn && args ? py.PyObject_CallObject(open_fn, args) : NULL;
	if (args)
		py.Py_DecRef(args);
	if (open_fn)
		py.Py_DecRef(open_fn);
	if (!s) {
		py.PyErr_Print();
		snprintf(rt->msg, sizeof(rt->msg), "atb_torch.runner.open failed (stderr has why)");
		return -1;
	}
	/* open() answers a Session, or the JSON text of why there is none. */
	err_text = py.PyUnicode_AsUTF8(s);
	if (err_text) {
		json_t *a = json_loads(err_text, 0, NULL);
		const char *e = json_string_value(json_object_get(a, "error"));
		const char *r = json_string_value(json_object_get(a, "reason"));

		snprintf(rt->msg, sizeof(rt->msg), "%s", e ? e : err_text);
		snprintf(rt->reason, sizeof(rt->reason), "%s", r ? r : "python");
		*reason = rt->reason;
		json_decref(a);
		py.Py_DecRef(s);
		return -1;
	}
	py.PyErr_Clear();  /* not a str: a Session (the TypeError is expected) */
	rt->session = s;
	{
		void *torch = py.PyImport_ImportModule("torch"), *C;

		C = torch ? py.PyObject_GetAttrString(torch, "_C") : NULL;
		if (C) {
			rt->mode_len[0] = py.PyObject_GetAttrString(C, "_len_torch_function_stack");
			rt->mode_len[1] = py.PyObject_GetAttrString(C, "_len_torch_dispatch_stack");
			py.Py_DecRef(C);
		}
		if (torch)
			py.Py_DecRef(torch);
		py.PyErr_Clear(); /* a torch without them: the watch's checks only */
	}
	return 0;
}

/* ---- correctness --------------------------------------------------------- */

/*
 * One output pair at device addresses (the Python side's dense copies, alive
 * until its next call): atb_cuda_compare, the same rule on the GPU.  Where
 * the driver fails mid-run, both arrays are copied to the host and compared
 * there instead: an infrastructure error must not read as the candidate's.
 * 0, or -1 (out of memory, or the copies failed too: the message in rt->msg).
 */
static int compare_device(struct trt *rt, uint64_t ref, uint64_t got, enum atb_dtype d, size_t n,
			  double atol, double rtol, struct runner_cmp *c)
{
	struct atb_cuda_cmp dc;
	struct atb_error err;
	size_t bytes = n * atb_dtype_size(d);
	void *hr, *hg;

	atb_error_clear(&err);
	if (!atb_cuda_compare(rt->cu, ref, got, d, n, atol, rtol, &dc, &err)) {
		c->max_abs = dc.max_abs;
		c->max_rel = dc.max_rel;
		c->first_bad = dc.first_bad;
		c->bad_ref = dc.bad_ref;
		c->bad_got = dc.bad_got;
		c->nbad = dc.nbad;
		c->nnan = dc.nnan;
		return 0;
	}
	atb_error_format(&err, rt->compare_why, sizeof(rt->compare_why));
	hr = atb_malloc(bytes ? bytes : 1);
	hg = atb_malloc(bytes ? bytes : 1);
	atb_error_clear(&err);
	if (!hr || !hg || atb_cuda_d2h(rt->cu, hr, ref, bytes, &err) ||
	    atb_cuda_d2h(rt->cu, hg, got, bytes, &err)) {
		snprintf(rt->msg, sizeof(rt->msg), "comparing outputs: %s",
			 !hr || !hg ? "out of memory" : err.msg);
		atb_free(hr);
		atb_free(hg);
		return -1;
	}
	runner_compare_parallel(hr, hg, d, n, atol, rtol, NULL, c);
	atb_free(hr);
	atb_free(hg);
	return 0;
}

/*
 * The reference's output for a device comparison, in the runner's own
 * memory: copied from the Python side's dense tensor src when the pair (or
 * ref_store, before any arm of a new input set runs) says it is fresh,
 * read from that copy by every later arm.  The result-reuse step's second
 * reference and the timed checks' run in the same call as the candidate,
 * so theirs are fresh right after it.  A tensor of PyTorch's allocator is
 * listed by torch.cuda.memory_snapshot() to any candidate that calls it; a
 * cuMemAlloc block is not.  Past 32 slots, or out of device memory, src
 * itself (the Python side's tensor).  0 and the address in *out, or -1
 * (the message in rt->msg).
 */
static int ref_slot(struct trt *rt, const char *name, int fresh, uint64_t src, size_t bytes,
		    uint64_t *out)
{
	const size_t max = sizeof(rt->refs) / sizeof(rt->refs[0]);
	struct atb_error err;
	size_t i;

	*out = src;
	if (!name || strlen(name) >= sizeof(rt->refs[0].name))
		return 0;
	for (i = 0; i < rt->nrefs && strcmp(rt->refs[i].name, name); i++)
		;
	if (i == rt->nrefs) {
		if (i == max) {
			rt->ref_direct += fresh != 0;  /* counted once, when it is made */
			return 0;  /* every slot taken: src itself, first arm or later */
		}
		if (!fresh) {
			snprintf(rt->msg, sizeof(rt->msg), "comparing outputs: no copy of the "
				 "reference in slot '%s'", name);
			return -1;
		}
		memset(&rt->refs[i], 0, sizeof(rt->refs[i]));
		snprintf(rt->refs[i].name, sizeof(rt->refs[i].name), "%s", name);
		rt->nrefs++;
	}
	atb_error_clear(&err);
	if (rt->refs[i].h) {
		/* held a host copy before (a pair sent to the host): device from now */
		atb_free(rt->refs[i].h);
		rt->refs[i].h = NULL;
		rt->refs[i].cap = 0;
		if (!fresh) {
			snprintf(rt->msg, sizeof(rt->msg), "comparing outputs: slot '%s' holds a "
				 "host copy of the reference", name);
			return -1;
		}
	}
	if (fresh) {
		/* its slack stays: a fresh copy here is of the same set's
		   reference (ref_store, which sets the slack, begins a set) */
		rt->refs[i].direct = 0;
		rt->refs[i].bytes = bytes;
		if (bytes > rt->refs[i].cap) {
			if (rt->refs[i].d)
				atb_cuda_free(rt->cu, rt->refs[i].d);
			rt->refs[i].d = 0;
			rt->refs[i].cap = 0;
			if (atb_cuda_alloc(rt->cu, bytes, &rt->refs[i].d, &err)) {
				/* out of device memory: src itself for this set,
				   counted (the copy's protection is lost) */
				rt->refs[i].d = 0;
				rt->refs[i].direct = 1;
				rt->ref_direct++;
				return 0;
			}
			rt->refs[i].cap = bytes;
		}
		if (bytes && (atb_cuda_d2d_async(rt->cu, rt->refs[i].d, src, bytes, &err) ||
			      atb_cuda_stream_sync(rt->cu, &err))) {
			rt->refs[i].bytes = 0;
			snprintf(rt->msg, sizeof(rt->msg), "comparing outputs: %s", err.msg);
			return -1;
		}
	} else if (rt->refs[i].direct) {
		return 0;
	} else if (rt->refs[i].bytes != bytes) {
		snprintf(rt->msg, sizeof(rt->msg), "comparing outputs: the reference's copy in slot "
			 "'%s' holds %zu bytes, the pair %zu", name, rt->refs[i].bytes, bytes);
		return -1;
	}
	if (bytes)
		*out = rt->refs[i].d;
	return 0;
}

/* The index of the reference copy in slot name, or SIZE_MAX. */
static size_t slot_find(const struct trt *rt, const char *name)
{
	size_t i;

	for (i = 0; name && i < rt->nrefs; i++)
		if (!strcmp(rt->refs[i].name, name))
			return i;
	return SIZE_MAX;
}

/* PROTO: correctness.reference_precision -- slot name's allowance; 0. */
static double slot_slack(const struct trt *rt, const char *name)
{
	size_t i = slot_find(rt, name);

	return i == SIZE_MAX ? 0 : rt->refs[i].slack;
}

/* The allowances kept for seed's timed checks; made when make (NULL: out of
 * memory, or none kept for seed). */
static struct task_slack *task_slack_of(struct trt *rt, uint64_t seed, int make)
{
	struct task_slack *t;
	size_t i;

	for (i = 0; i < rt->nts; i++)
		if (rt->ts[i].seed == seed)
			return &rt->ts[i];
	if (!make)
		return NULL;
	t = atb_realloc(rt->ts, (rt->nts + 1) * sizeof(*t));
	if (!t)
		return NULL;
	rt->ts = t;
	t = &rt->ts[rt->nts++];
	memset(t, 0, sizeof(*t));
	t->seed = seed;
	return t;
}

/*
 * PROTO: correctness.reference_precision (version 14 on) -- the allowance
 * for the reference's own precision of output k (entry o of ref_store, its
 * copy at ref: device or host, n elements of dt): "ptr" (copied, what
 * every arm is compared with) is the reference's output, o's "twin" the
 * same output computed in float64 and rounded to dt (Session.precise_twin);
 * the allowance is the protocol's factor times the largest |difference|
 * between the two: how far the reference itself is from the float64 result
 * (TF32 in cuDNN's convolutions, a long sum's rounding).  None (the dtype's
 * tolerance alone) where a NaN is in one and not the other, or where the
 * difference is infinite or over max_relative x the float64 result's
 * largest magnitude (o's twin "max_abs").
 * o's "task" (the set drawn from the task's own generator) keeps it for the
 * seed's timed checks, whose references (o's "slack": "task") take it.
 * 0, or -1 (the message in rt->msg).
 */
static int ref_allowance(struct trt *rt, const json_t *o, size_t k, enum atb_dtype dt, size_t n,
			 const void *ref_h, uint64_t ref_d, double *slack)
{
	const json_t *lo = json_object_get(o, "twin");
	const char *from = json_string_value(json_object_get(o, "slack"));
	const char *slot = json_string_value(json_object_get(o, "slot"));
	uint64_t seed = (uint64_t)json_integer_value(json_object_get(o, "seed"));
	const size_t kmax = sizeof(rt->ts[0].v) / sizeof(rt->ts[0].v[0]);
	struct task_slack *t;
	struct runner_cmp c, back;

	*slack = 0;
	if (!(rt->job->ref_precision_factor > 0))
		return 0;
	if (from && !strcmp(from, "task")) {
		t = task_slack_of(rt, seed, 0);
		*slack = t && k < t->n ? t->v[k] : 0;
		return 0;
	}
	if (json_is_object(lo) && (dt == ATB_DTYPE_FP32 || dt == ATB_DTYPE_FP64 ||
				   dt == ATB_DTYPE_FP16 || dt == ATB_DTYPE_BF16)) {
		uint64_t lp = (uint64_t)json_integer_value(json_object_get(lo, "ptr"));
		int ldev = json_is_true(json_object_get(lo, "on_device"));
		/* the largest magnitude of the float64 result (NaN: none) */
		double tmax = json_is_number(json_object_get(lo, "max_abs"))
				      ? json_number_value(json_object_get(lo, "max_abs")) : NAN;

		runner_cmp_init(&c);
		runner_cmp_init(&back);
		if (ldev != (ref_h == NULL)) {
			snprintf(rt->msg, sizeof(rt->msg), "the reference's outputs: its two runs "
				 "on different sides");
			return -1;
		}
		/* both ways: a NaN in the twin where the reference has none, and
		   one in the reference where the twin has none */
		if (ldev) {
			if (compare_device(rt, ref_d, lp, dt, n, 0, 0, &c) ||
			    compare_device(rt, lp, ref_d, dt, n, 0, 0, &back))
				return -1;
		} else {
			runner_compare_parallel(ref_h, (const void *)(uintptr_t)lp, dt, n, 0, 0,
						NULL, &c);
			runner_compare_parallel((const void *)(uintptr_t)lp, ref_h, dt, n, 0, 0,
						NULL, &back);
		}
		rt->rp.compared++;
		/* PROTO: correctness.reference_precision.max_relative -- a
		   difference past it is not rounding's (a random draw, a jump):
		   no allowance */
		if (c.nnan || back.nnan || !isfinite(c.max_abs) || !(tmax >= 0) ||
		    !isfinite(tmax) || c.max_abs > rt->job->ref_precision_max_rel * tmax) {
			rt->rp.unbounded++;
		} else if (c.max_abs > 0) {
			rt->rp.differed++;
			*slack = rt->job->ref_precision_factor * c.max_abs;
		}
		if (*slack > rt->rp.largest) {
			rt->rp.largest = *slack;
			snprintf(rt->rp.largest_of, sizeof(rt->rp.largest_of), "%s",
				 slot ? slot : "");
		}
	}
	if (json_is_true(json_object_get(o, "task")) && k < kmax) {
		t = task_slack_of(rt, seed, 1);
		if (!t) {
			snprintf(rt->msg, sizeof(rt->msg), "the reference's outputs: out of memory");
			return -1;
		}
		if (k == 0)
			t->n = 0;
		t->v[k] = *slack;
		t->n = k + 1;
	}
	return 0;
}

/*
 * A new input set's reference outputs ({"refs": [{slot, dtype, n, ptr,
 * on_device}]}, from Session.set_reference, before any arm of the set runs):
 * each copied into the runner's own memory, device (ref_slot) or host (a
 * malloc block no Python object refers to), for every arm's comparison.
 * 0, or -1 (the message in rt->msg).
 */
static int ref_store(struct trt *rt, const json_t *refs)
{
	const json_t *o;
	size_t k;

	json_array_foreach(refs, k, o) {
		const char *name = json_string_value(json_object_get(o, "slot"));
		struct atb_error err;
		enum atb_dtype dt;
		uint64_t src = (uint64_t)json_integer_value(json_object_get(o, "ptr")), out;
		size_t bytes, i;
		double slack;

		atb_error_clear(&err);
		if (!name || atb_dtype_parse(json_string_value(json_object_get(o, "dtype")), &dt,
					     &err)) {
			snprintf(rt->msg, sizeof(rt->msg), "the reference's outputs: a bad entry");
			return -1;
		}
		bytes = (size_t)json_integer_value(json_object_get(o, "n")) * atb_dtype_size(dt);
		if (json_is_true(json_object_get(o, "on_device"))) {
			if (!rt->compare_on_device) {
				snprintf(rt->msg, sizeof(rt->msg), "the reference's outputs: device "
					 "addresses where host ones were asked for");
				return -1;
			}
			if (ref_slot(rt, name, 1, src, bytes, &out))
				return -1;
			i = slot_find(rt, name);
			if (ref_allowance(rt, o, k, dt, bytes / atb_dtype_size(dt), NULL, out,
					  &slack))
				return -1;
			if (i != SIZE_MAX)
				rt->refs[i].slack = slack;
			continue;
		}
		if (strlen(name) >= sizeof(rt->refs[0].name))
			continue;
		for (i = 0; i < rt->nrefs && strcmp(rt->refs[i].name, name); i++)
			;
		if (i == rt->nrefs) {
			if (i == sizeof(rt->refs) / sizeof(rt->refs[0]))
				continue;  /* every slot taken: "ref" itself, read later */
			memset(&rt->refs[i], 0, sizeof(rt->refs[i]));
			snprintf(rt->refs[i].name, sizeof(rt->refs[i].name), "%s", name);
			rt->nrefs++;
		}
		if (rt->refs[i].d) {
			atb_cuda_free(rt->cu, rt->refs[i].d);
			rt->refs[i].d = 0;
			rt->refs[i].cap = 0;
		}
		if (bytes > rt->refs[i].cap || !rt->refs[i].h) {
			atb_free(rt->refs[i].h);
			rt->refs[i].h = atb_malloc(bytes ? bytes : 1);
			rt->refs[i].cap = rt->refs[i].h ? bytes : 0;
			if (!rt->refs[i].h) {
				snprintf(rt->msg, sizeof(rt->msg), "the reference's outputs: out of "
					 "memory for %zu bytes", bytes);
				return -1;
			}
		}
		memcpy(rt->refs[i].h, (const void *)(uintptr_t)src, bytes);
		rt->refs[i].bytes = bytes;
		rt->refs[i].direct = 0;
		if (ref_allowance(rt, o, k, dt, bytes / atb_dtype_size(dt), rt->refs[i].h, 0,
				  &slack))
			return -1;
		rt->refs[i].slack = slack;
	}
	return 0;
}

/* The host copy in slot name holding bytes, or NULL (none: "ref" is read). */
static const void *ref_host_slot(struct trt *rt, const char *name, size_t bytes)
{
	size_t i;

	for (i = 0; name && i < rt->nrefs; i++)
		if (!strcmp(rt->refs[i].name, name))
			return rt->refs[i].h && rt->refs[i].bytes == bytes ? rt->refs[i].h : NULL;
	return NULL;
}

/* An entry of the correctness event's "buffers" for an output that cannot be compared. */
static json_t *unjudged(const char *name, const char *why)
{
	return json_pack("{s:s, s:b, s:s}", "name", name, "pass", 0, "why", why);
}

/*
 * Compare the output pairs of one call ({"kernel_status", "structure",
 * "error", "outputs": [{name, dtype, n, ref, got}]}) with the job's
 * tolerance per dtype (runner_compare: the rule of every backend).  arr and
 * worst as runner_outputs_match.  Returns 1 when every output matches.
 */
static int compare_call(struct trt *rt, const json_t *call, json_t *arr,
			struct runner_cmp *worst, const char **worst_name)
{
	const struct atb_runner_job *job = rt->job;
	const json_t *outs = json_object_get(call, "outputs"), *o;
	const char *structure = json_string_value(json_object_get(call, "structure"));
	size_t i;
	int pass = 1;

	if (worst)
		runner_cmp_init(worst);
	if (json_integer_value(json_object_get(call, "kernel_status"))) {
		const char *raised = json_string_value(json_object_get(call, "raised"));

		if (arr)
			json_array_append_new(arr, unjudged("output", raised ? raised
								: "the call raised an exception"));
		return 0;
	}
	if (structure) {
		if (arr)
			json_array_append_new(arr, unjudged("output", structure));
		if (worst)
			worst->nbad = 1;
		return 0;
	}
	json_array_foreach(outs, i, o) {
		const char *name = json_string_value(json_object_get(o, "name"));
		struct atb_error err;
		enum atb_dtype dt;
		struct runner_cmp c;
		double atol, rtol, slack;
		int64_t t0;

		atb_error_clear(&err);
		if (!name || atb_dtype_parse(json_string_value(json_object_get(o, "dtype")), &dt,
					     &err)) {
			if (arr)
				json_array_append_new(arr, unjudged(name ? name : "output",
								    "an output of unknown dtype"));
			pass = 0;
			continue;
		}
		runner_tolerance_for(job, dt, &atol, &rtol);
		/* PROTO: correctness.reference_precision -- the reference copy's
		   allowance for its own error (version 14 on, torch: 0 where the
		   reference matches its float64 result) */
		slack = slot_slack(rt, json_string_value(json_object_get(o, "ref_slot")));
		atol += slack;
		t0 = atbi_monotonic_ns();
		/* PROTO: correctness.tolerances -- the Python side keeps both tensors
		 * alive until its next call; these are their CPU addresses. */
		if (json_is_true(json_object_get(o, "on_device")) && rt->compare_on_device) {
			size_t n = (size_t)json_integer_value(json_object_get(o, "n"));
			uint64_t ref;

			if (ref_slot(rt, json_string_value(json_object_get(o, "ref_slot")),
				     json_is_true(json_object_get(o, "ref_fresh")),
				     (uint64_t)json_integer_value(json_object_get(o, "ref")),
				     n * atb_dtype_size(dt), &ref) ||
			    compare_device(rt, ref,
					   (uint64_t)json_integer_value(json_object_get(o, "got")),
					   dt, n, atol, rtol, &c)) {
				if (arr)
					json_array_append_new(arr, unjudged(name, rt->msg));
				pass = 0;
				continue;
			}
		} else if (json_is_true(json_object_get(o, "on_device"))) {
			/* device addresses from a side that was told to send host ones */
			if (arr)
				json_array_append_new(arr, unjudged(name, "device output "
								    "addresses where host ones "
								    "were asked for"));
			pass = 0;
			continue;
		} else if (json_string_value(json_object_get(o, "ref_slot"))) {
			/* the reference's copy the runner made before the arms ran */
			size_t n = (size_t)json_integer_value(json_object_get(o, "n"));
			const void *ref = ref_host_slot(rt, json_string_value(json_object_get(o,
									  "ref_slot")),
							n * atb_dtype_size(dt));

			if (!ref) {
				if (arr)
					json_array_append_new(arr, unjudged(name, "no copy of the "
									    "reference to compare with"));
				pass = 0;
				continue;
			}
			runner_compare_parallel(ref, (const void *)(uintptr_t)json_integer_value(
							json_object_get(o, "got")), dt, n, atol,
						rtol, NULL, &c);
		} else {
			runner_compare_parallel((const void *)(uintptr_t)json_integer_value(
							json_object_get(o, "ref")),
						(const void *)(uintptr_t)json_integer_value(
							json_object_get(o, "got")),
						dt, (size_t)json_integer_value(json_object_get(o, "n")),
						atol, rtol, NULL, &c);
		}
		rt->compare_ns += atbi_monotonic_ns() - t0;
		if (c.nbad)
			pass = 0;
		if (arr) {
			json_t *b = runner_buffer_json(name, dt, &c, atol, rtol);

			if (b && slack > 0)
				json_object_set_new(b, "reference_allowance", json_real(slack));
			json_array_append_new(arr, b);
		}
		if (worst)
			runner_cmp_merge(worst, worst_name, &c, name);
	}
	return pass;
}

/*
 * PROTO: gates result_reuse -- wrong on B in A's old tensors: the rule of
 * runner_check_reuse.  sb: step 2 (fresh_inputs_b), B in fresh tensors;
 * wrong there too, and not A's outputs handed back (compared with sa's,
 * step 0's, reference: its address and its slot in the runner's memory), it
 * is a correctness failure on B.  0, or -1 out of memory.
 */
static int reuse_fresh(struct trt *rt, const json_t *sa, const json_t *sb,
		       struct runner_reuse *res)
{
	json_t *stale, *o;
	size_t i;
	int was_a, same_side = 1;

	if (!sa || !sb || compare_call(rt, sb, NULL, NULL, NULL))
		return 0;
	/* B's outputs from fresh tensors against A's reference: A's result? */
	stale = json_deep_copy(sb);
	if (!stale)
		return -1;
	json_array_foreach(json_object_get(stale, "outputs"), i, o) {
		const json_t *ra = json_array_get(json_object_get(sa, "outputs"), i);
		static const char *const keys[] = {"ref", "ref_slot", "ref_fresh"};
		size_t k;

		/* all three: B's slot would name B's reference again */
		for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
			if (json_object_get(ra, keys[k]))
				json_object_set(o, keys[k], json_object_get(ra, keys[k]));
			else
				json_object_del(o, keys[k]);
		/* A's pair on the host and B's on the device (a device copy
		   out of memory at one step), or the reverse: a host address
		   is no device one; not compared, so wrong on B */
		if (json_is_true(json_object_get(ra, "on_device")) !=
		    json_is_true(json_object_get(o, "on_device")))
			same_side = 0;
	}
	was_a = same_side && json_array_size(json_object_get(sa, "outputs")) ==
		json_array_size(json_object_get(sb, "outputs")) &&
		compare_call(rt, stale, NULL, NULL, NULL);
	json_decref(stale);
	if (was_a)
		return 0;
	res->buffers = json_array();
	if (!res->buffers)
		return -1;
	compare_call(rt, sb, res->buffers, &res->worst, &res->worst_name);
	res->kernel_status = (int)json_integer_value(json_object_get(sb, "kernel_status"));
	res->wrong_fresh = 1;
	res->follows = 1;
	res->failed_step = NULL;
	return 0;
}

/* Step `step` (-1: B and its reference) of the arm's result-reuse check, its
   answer in *a and kept in keep. */
static int reuse_step(struct trt *rt, size_t arm, long long step, json_t *keep, json_t **a)
{
	*a = py_json(rt, "reuse", int_tuple(2, (long long)arm, step, 0));
	if (!*a)
		return -1;
	if (json_array_append_new(keep, *a)) {
		snprintf(rt->msg, sizeof(rt->msg), "out of memory");
		return -1;
	}
	return answer_error(*a) ? -2 : 0;
}

/*
 * PROTO: gates result_reuse -- the first step whose outputs are wrong.  The
 * Python side runs one step a call and frees its outputs before the next
 * (their copies live until the next call), so each step is compared before
 * the next runs.  *keep: the steps' answers (worst_name points into them).
 * 0, -1 (the message in rt->msg) or -2 (an error event emitted).
 */
static int reuse_facts(struct trt *rt, size_t arm, struct runner_reuse *res, json_t **keep)
{
	static const char *const steps[] = {"fresh_inputs_a", "same_buffers_new_inputs",
					    "fresh_inputs_b"};
	const size_t nsteps = sizeof(steps) / sizeof(steps[0]);
	json_t *a = NULL;
	size_t i;
	int r;

	memset(res, 0, sizeof(*res));
	res->follows = 1;
	*keep = json_array();
	if (!*keep) {
		snprintf(rt->msg, sizeof(rt->msg), "out of memory");
		return -1;
	}
	/* B and its reference first, the reference's outputs copied into the
	   runner's memory before the candidate runs on anything of the check
	   (ref_store, as for an input set) */
	if ((r = reuse_step(rt, arm, -1, *keep, &a)))
		return r;
	if (ref_store(rt, json_object_get(a, "refs")))
		return -1;
	for (i = 0; i < nsteps; i++) {
		if ((r = reuse_step(rt, arm, (long long)i, *keep, &a)))
			return r;
		if (compare_call(rt, a, NULL, &res->step_cmp, &res->step_cmp_name))
			continue;
		res->step_cmp_set = !json_integer_value(json_object_get(a, "kernel_status"));
		res->follows = 0;
		res->failed_step = json_integer_value(json_object_get(a, "kernel_status"))
			? "kernel_failed" : steps[i];
		break;
	}
	if (res->follows || i != 1)
		return 0;
	/* wrong at step 1: step 2, B in fresh tensors, says cache or wrong */
	if ((r = reuse_step(rt, arm, 2, *keep, &a)))
		return r;
	return reuse_fresh(rt, json_array_get(*keep, 1), a, res);  /* [0]: step -1 */
}

/*
 * The compiled reference on one input set, against eager with the job's
 * tolerances (PROTO: correctness.tolerances).  Not a gate: the first set it
 * differs on (or raises on) stops its timing, with the reason, and nothing
 * else (the candidate's verdict does not depend on it).  0, or -1 after an
 * error event.
 */
static int check_compiled(struct trt *rt, uint64_t seed, int dist)
{
	const struct atb_runner_job *job = rt->job;
	struct runner_cmp worst;
	const char *wname = NULL;
	json_t *a, *bufs;
	int pass;

	a = py_answer(rt, "check", int_tuple(3, (long long)seed, dist, (long long)job->narms));
	if (!a)
		return -1;
	bufs = json_array();
	pass = bufs && compare_call(rt, a, bufs, &worst, &wname);
	rt->compile_checks++;
	if (!pass) {
		const char *raised = json_string_value(json_object_get(a, "raised"));
		const char *structure = json_string_value(json_object_get(a, "structure"));

		rt->compile_ok = 0;
		if (raised)
			snprintf(rt->compile_why, sizeof(rt->compile_why),
				 "the compiled reference raised on seed %llu, input '%s': %s",
				 (unsigned long long)seed, runner_input_name(job, dist), raised);
		else if (structure)
			snprintf(rt->compile_why, sizeof(rt->compile_why),
				 "the compiled reference differs from eager on seed %llu, input "
				 "'%s': %s", (unsigned long long)seed, runner_input_name(job, dist),
				 structure);
		else
			snprintf(rt->compile_why, sizeof(rt->compile_why),
				 "the compiled reference differs from eager on seed %llu, input "
				 "'%s': %zu element(s) of '%s' out of tolerance, max abs err %g "
				 "(first at %lld: eager %g, compiled %g)",
				 (unsigned long long)seed, runner_input_name(job, dist), worst.nbad,
				 wname ? wname : "output", worst.max_abs, worst.first_bad,
				 worst.bad_ref, worst.bad_got);
		rt->compile_failed = json_pack("{s:I, s:s, s:O}", "seed", (json_int_t)seed,
					       "input", runner_input_name(job, dist), "buffers",
					       bufs);
	}
	json_decref(bufs);
	json_decref(a);  /* after the message: wname pointed into it */
	return 0;
}

/* After the warm call and the checks: what became of the compiled reference. */
static int emit_compile(struct trt *rt)
{
	return runner_emit(json_pack("{s:s, s:s, s:b, s:s, s:I, s:I, s:O?}", "event",
				     COMPILE_ARM, "mode", rt->compile_mode, "ok", rt->compile_ok,
				     "why", rt->compile_why, "compile_ns",
				     (json_int_t)rt->compile_ns, "checks",
				     (json_int_t)rt->compile_checks, "failed", rt->compile_failed));
}

/*
 * The compiled reference's first call, where torch.compile compiles: timed
 * here (wall time, CLOCK_MONOTONIC), before any check or timed trial, and
 * reported apart.  0 (compile_ok says whether it ran), -1 after an error
 * event.
 */
static int warm_compiled(struct trt *rt)
{
	int64_t t0 = atbi_monotonic_ns();
	json_t *a = py_answer(rt, "compile_warm",
			      int_tuple(1, (long long)(rt->job->nseeds ? rt->job->seeds[0] : 0), 0, 0));
	const char *raised;

	rt->compile_ns = atbi_monotonic_ns() - t0;
	if (!a)
		return -1;
	raised = json_string_value(json_object_get(a, "raised"));
	rt->compile_ok = !raised;
	if (raised)
		snprintf(rt->compile_why, sizeof(rt->compile_why), "%s", raised);
	json_decref(a);
	return 0;
}

/*
 * One input set of one seed: every checked arm, one correctness event
 * each.  0; 1 when the reference is not defined on this adversarial set
 * (skipped); -1 after an error event.
 */
static int check_input_set(struct trt *rt, uint64_t seed, int dist, const char **reuse_on,
			   size_t *failures, size_t *nevents)
{
	const struct atb_runner_job *job = rt->job;
	json_t *refs;
	size_t ai;

	/* the reference first, its outputs copied by the runner before any arm
	   (the candidate) runs on the set */
	if (!(refs = py_answer(rt, "set_reference", int_tuple(2, (long long)seed, dist, 0))))
		return -1;
	if (json_object_get(refs, "skip")) {
		json_decref(refs);
		return 1;
	}
	if (ref_store(rt, json_object_get(refs, "refs"))) {
		json_decref(refs);
		runner_emit_error("python", rt->msg);
		return -1;
	}
	/* PROTO: correctness.reference_precision -- why there is no allowance */
	if (json_is_string(json_object_get(refs, "twin_unavailable")) && !rt->rp.unavailable[0])
		snprintf(rt->rp.unavailable, sizeof(rt->rp.unavailable), "%s",
			 json_string_value(json_object_get(refs, "twin_unavailable")));
	json_decref(refs);
	for (ai = 0; ai < job->narms; ai++) {
		struct runner_facts f = {.seed = seed, .arm = job->arms[ai].name, .set_index = 0,
					 .dist = dist, .reuse = {.follows = 1}};
		json_t *a, *ra = NULL, *ev;
		int r;

		if (!runner_arm_is_checked(job, ai))
			continue;
		a = py_answer(rt, "check", int_tuple(3, (long long)seed, dist, (long long)ai));
		if (!a)
			return -1;
		if (json_object_get(a, "skip")) {
			json_decref(a);
			return 1;
		}
		f.kernel_status = (int)json_integer_value(json_object_get(a, "kernel_status"));
		f.buffers = json_array();
		f.pass = compare_call(rt, a, f.buffers, &f.worst, &f.worst_name);
		f.mutated = json_deep_copy(json_object_get(a, "mutated"));
		f.aliasing = json_deep_copy(json_object_get(a, "aliasing"));
		/* Once per (seed, set), on the first right outputs (as cpu and cuda). */
		if (f.pass && !reuse_on[ai]) {
			r = reuse_facts(rt, ai, &f.reuse, &ra);
			if (r) {
				if (r == -1)
					runner_emit_error("python", rt->msg);
				json_decref(ra);
				json_decref(a);
				json_decref(f.buffers);
				json_decref(f.mutated);
				json_decref(f.aliasing);
				return -1;
			}
			runner_reuse_settle(job, &f, &reuse_on[ai]);
		}
		f.reuse_checked_on = reuse_on[ai];
		if (runner_facts_failed(&f))
			(*failures)++;
		ev = runner_correctness_event(job, &f);
		json_decref(ra);
		r = runner_emit(ev);
		json_decref(a);  /* after the event: worst_name pointed into it */
		if (r)
			return -1;
		(*nevents)++;
	}
	if (rt->compile_ok)
		return check_compiled(rt, seed, dist);
	return 0;
}

/* ---- timing --------------------------------------------------------------- */

struct timing_ctx {
	struct trt *rt;
	size_t map[ATB_RUNNER_MAX_ARMS + 1]; /* the core's arm -> the model (job's arm, compiled) */
	/* PROTO: gates.timed_correctness -- with timed checks each arm's last
	   output, kept until its next timed call (NULL: none; keep 0: dropped) */
	int keep;
	void *held[ATB_RUNNER_MAX_ARMS + 1];
};

/*
 * One timed call: Session.call(arm), prepared; on cuda it only launches.
 * Its output is dropped here, inside the window, as it always was; with
 * timed checks this one is kept for the checks and the arm's previous
 * output dropped instead, inside the window too, right before the call:
 * still one output released per call, on every round, as in the
 * baseline-alone runner (no checks), and the call's own output may take
 * the block its previous one held there too.  Dropped after the call (as
 * until session 29), one output per arm was alive while every arm ran:
 * on KernelBench 38_L1Norm (8 GiB an output) a copy's timed call ran an
 * 80 GB H100 out of memory (56 GiB allocated by PyTorch).  Dropped
 * between rounds, outside the windows, the paired runner's baseline read
 * up to 1.39x its time alone on the CPU (relu01, t4010): no free in its
 * windows, one in the alone runner's.
 */
static int timed_call(void *ctx, size_t arm)
{
	struct timing_ctx *t = ctx;
	void *r, *old = NULL;

	if (t->keep) {
		old = t->held[arm];
		t->held[arm] = NULL;
		if (old)
			py.Py_DecRef(old);
	}
	r = py.PyObject_CallObject(t->rt->call, t->rt->arm_args[t->map[arm]]);
	if (!r) {
		py.PyErr_Print();
		return 1;
	}
	if (t->keep)
		t->held[arm] = r;
	else
		py.Py_DecRef(r);
	return 0;
}

/* Drop the outputs timed_call kept (the end of a group). */
static void timed_drop(struct timing_ctx *t)
{
	size_t a;

	for (a = 0; a < ATB_RUNNER_MAX_ARMS + 1; a++) {
		if (t->held[a])
			py.Py_DecRef(t->held[a]);
		t->held[a] = NULL;
	}
	t->keep = 0;
}

/*
 * PROTO: gates.timed_correctness -- the torch backend's timed checks: the
 * shared plan (which rounds, from the job's key) and counts (runner/timed.c);
 * Session.timed_begin names the inputs' memory, the hooks change elements
 * there from C between rounds, timed_call keeps each arm's last output
 * (every round), and on checked rounds Session.timed_after pairs them with
 * the reference's for the one comparison (compare_call).
 */

/* One input the hooks change: its master copy and every group model's copy. */
struct torch_timed_input {
	size_t esize, numel;
	int on_device;
	uint64_t master, ptr[ATB_RUNNER_MAX_ARMS + 1];
};

struct torch_timed {
	struct trt *rt;
	struct timing_ctx *tc;
	size_t np;
	struct runner_timed t;   /* plan, ref, stats and msg; no buffers */
	struct torch_timed_input in[ATB_RUNNER_MAX_BUFFERS];
	size_t nin;
	gsl_rng *r;
	char tamper[300];        /* a hook a timed call left (left_hooks); "" */
};

/* Copy one element (esize bytes) from src to dst, on the host or the device. */
static int tt_copy(struct torch_timed *x, int on_device, uint64_t dst, uint64_t src, size_t es)
{
	struct atb_error err;

	if (!on_device) {
		memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, es);
		return 0;
	}
	atb_error_clear(&err);
	if (!x->rt->cu || atb_cuda_d2d_async(x->rt->cu, dst, src, es, &err)) {
		snprintf(x->t.msg, sizeof(x->t.msg), "cannot change an input on the device: %s",
			 x->rt->cu ? err.msg : "no device");
		return -1;
	}
	return 0;
}

/*
 * Before a round, outside the timed window, no Python: perturb_elements
 * elements of every input, at places drawn from the round's key, take the
 * values of other elements of the same tensor (its own distribution,
 * whatever get_inputs draws) in the master copy and then in every model's
 * copy.  The outputs are not poisoned here: a torch model allocates them,
 * and one that hands back stale or unwritten tensors differs from the
 * reference at the changed elements.
 */
static int torch_timed_before(void *ctx, int round)
{
	struct torch_timed *x = ctx;
	int64_t t0 = atbi_monotonic_ns();
	uint64_t key = runner_timed_round_key(&x->t.plan, round);
	int dev = 0, rc = 0;
	size_t i, j, g;

	x->t.round = round;
	for (i = 0; !rc && i < x->nin; i++) {
		struct torch_timed_input *in = &x->in[i];
		unsigned long n = in->numel > 0xffffffffUL ? 0xffffffffUL : (unsigned long)in->numel;

		gsl_rng_set(x->r, (unsigned long)(key ^ (uint64_t)i * 0x9e3779b97f4a7c15ULL));
		dev |= in->on_device;
		for (j = 0; !rc && j < (size_t)x->t.plan.perturb_elements; j++) {
			uint64_t pos = (uint64_t)gsl_rng_uniform_int(x->r, n) * in->esize;
			uint64_t src = (uint64_t)gsl_rng_uniform_int(x->r, n) * in->esize;

			rc = tt_copy(x, in->on_device, in->master + pos, in->master + src, in->esize);
			for (g = 0; !rc && g < x->np; g++)
				rc = tt_copy(x, in->on_device, in->ptr[g] + pos, in->master + pos,
					     in->esize);
		}
	}
	if (!rc && dev) {
		struct atb_error err;

		atb_error_clear(&err);
		if (atb_cuda_ctx_sync(x->rt->cu, &err)) {
			snprintf(x->t.msg, sizeof(x->t.msg), "the device faulted between timed "
				 "rounds: %s", err.msg);
			rc = -1;
		}
	}
	x->rt->hooks_ns += atbi_monotonic_ns() - t0;
	return rc;
}

/* The inputs timed_begin named (its answer's "inputs"); 0, or -1 with x->t.msg. */
static int torch_timed_inputs(struct torch_timed *x, const json_t *list)
{
	const json_t *e;
	size_t i, g;

	x->nin = 0;
	json_array_foreach(list, i, e) {
		struct torch_timed_input *in;
		const json_t *ptrs = json_object_get(e, "ptrs");
		const char *dev = json_string_value(json_object_get(e, "device"));

		if (x->nin == ATB_RUNNER_MAX_BUFFERS)
			break;
		in = &x->in[x->nin];
		in->esize = (size_t)json_integer_value(json_object_get(e, "esize"));
		in->numel = (size_t)json_integer_value(json_object_get(e, "numel"));
		in->master = (uint64_t)json_integer_value(json_object_get(e, "master"));
		in->on_device = dev && !strcmp(dev, "cuda");
		if (!in->esize || in->esize > 16 || !in->numel || !in->master ||
		    json_array_size(ptrs) != x->np || (in->on_device && !x->rt->cu) ||
		    (dev && strcmp(dev, "cuda") && strcmp(dev, "cpu"))) {
			snprintf(x->t.msg, sizeof(x->t.msg), "timed_begin named a bad input %zu", i);
			return -1;
		}
		for (g = 0; g < x->np; g++)
			in->ptr[g] = (uint64_t)json_integer_value(json_array_get(ptrs, g));
		x->nin++;
	}
	return 0;
}

static int torch_timed_check(struct torch_timed *x, int round);

/*
 * The trial hook: right after the reference's call in a checked round (its
 * time read, before the next arm's flush), its output is copied into the
 * runner's own memory (Session.timed_ref, ref_store), so that an arm that
 * runs after it in the round cannot make the check agree by rewriting the
 * reference's tensor (relu01/skip_timed_ref).  The clock hook first.
 */
static int torch_timed_call(void *ctx, size_t arm, size_t trial)
{
	struct torch_timed *x = ctx;
	int64_t t0;
	void *args, *v;
	json_t *a;
	int rc = 0;

	/* the clock's sample first: it is read closest to the call */
	if (x->t.clock && x->t.clock(NULL, arm, trial))
		return -1;
	t0 = atbi_monotonic_ns();
	/* then, before any Python runs, the hooks the call may have left */
	left_hooks(x->rt, x->tc->map[arm], x->tamper, sizeof(x->tamper));
	if (x->tamper[0]) {
		snprintf(x->t.msg, sizeof(x->t.msg), "%s", x->tamper);
		return -1;
	}
	if (x->t.ref < x->np && arm == x->t.ref &&
	    runner_timed_plan_is_check(&x->t.plan, x->t.round)) {
		v = x->tc->held[arm];
		args = v ? py.PyTuple_New(2) : NULL;
		if (args) {
			py.Py_IncRef(v);
			if (py.PyTuple_SetItem(args, 1, v) ||  /* steals v */
			    !(v = py.PyLong_FromLongLong(x->t.round)) ||
			    py.PyTuple_SetItem(args, 0, v)) {
				py.Py_DecRef(args);
				args = NULL;
			}
		}
		if (!args) {
			snprintf(x->t.msg, sizeof(x->t.msg), "cannot call timed_ref: %s",
				 x->tc->held[arm] ? "out of memory" : "the reference kept no output");
			return -1;
		}
		a = py_json(x->rt, "timed_ref", args);
		if (!a || json_object_get(a, "error")) {
			snprintf(x->t.msg, sizeof(x->t.msg), "%s",
				 a ? json_string_value(json_object_get(a, "error")) : x->rt->msg);
			rc = -1;
		} else if (ref_store(x->rt, json_object_get(a, "refs"))) {
			snprintf(x->t.msg, sizeof(x->t.msg), "%s", x->rt->msg);
			rc = -1;
		}
		json_decref(a);
		x->rt->hooks_ns += atbi_monotonic_ns() - t0;
	}
	return rc;
}

static int torch_timed_after(void *ctx, int round)
{
	struct torch_timed *x = ctx;
	int64_t t0 = atbi_monotonic_ns(), c0 = x->rt->compare_ns;
	int rc = 0;

	if (x->t.ref < x->np && runner_timed_plan_is_check(&x->t.plan, round)) {
		rc = torch_timed_check(x, round);
		/* the compare inside is in hooks_ns, not in compare (counted once) */
		x->rt->compare_ns = c0;
	}
	x->rt->hooks_ns += atbi_monotonic_ns() - t0;
	return rc;
}

static int torch_timed_check(struct torch_timed *x, int round)
{
	const json_t *arms, *e;
	json_t *a;
	size_t i, g;
	void *args = py.PyTuple_New((long)(x->np + 1)), *v;

	/* timed_after(round, the round's output of every group arm, in order) */
	v = args ? py.PyLong_FromLongLong(round) : NULL;
	if (!v || py.PyTuple_SetItem(args, 0, v)) {
		if (args)
			py.Py_DecRef(args);
		snprintf(x->t.msg, sizeof(x->t.msg), "cannot call timed_after: out of memory");
		return -1;
	}
	for (g = 0; g < x->np; g++) {
		/* every arm of the group ran this round: each holds an output */
		v = x->tc->held[g];
		if (v)
			py.Py_IncRef(v);
		if (!v || py.PyTuple_SetItem(args, (long)g + 1, v)) {  /* steals v */
			py.Py_DecRef(args);
			snprintf(x->t.msg, sizeof(x->t.msg), "cannot call timed_after: out of memory");
			return -1;
		}
	}
	a = py_json(x->rt, "timed_after", args);
	if (!a || json_object_get(a, "error")) {
		snprintf(x->t.msg, sizeof(x->t.msg), "%s",
			 a ? json_string_value(json_object_get(a, "error")) : x->rt->msg);
		json_decref(a);
		return -1;
	}
	x->t.st[x->t.ref].rounds_checked++;
	arms = json_object_get(a, "arms");
	json_array_foreach(arms, i, e) {
		size_t model = (size_t)json_integer_value(json_object_get(e, "model"));
		struct runner_timed_stats *s;
		struct runner_cmp worst;
		const char *name = NULL;

		for (g = 0; g < x->np && x->tc->map[g] != model; g++)
			;
		if (g == x->np)
			continue;
		s = &x->t.st[g];
		s->rounds_checked++;
		if (compare_call(x->rt, e, NULL, &worst, &name))
			continue;
		s->failed++;
		s->bad_count += worst.nbad;
		s->nan_count += worst.nnan;
		if (worst.max_abs > s->max_abs)
			s->max_abs = worst.max_abs;
		if (s->first_failed_round < 0) {
			s->first_failed_round = round;
			s->first_bad_index = worst.first_bad;
			s->first_bad_ref = worst.bad_ref;
			s->first_bad_got = worst.bad_got;
			snprintf(s->first_bad_buffer, sizeof(s->first_bad_buffer), "%s",
				 name ? name : json_string_value(json_object_get(e, "structure"))
					  ? "structure" : "output");
		}
	}
	json_decref(a);
	return 0;
}

/*
 * One group through the timing core, with the timed checks when the job has
 * a key (ref: the reference's index in the group, >= np when absent).  0
 * with *res filled, or -1 after an error event.
 */
static int torch_time_group(struct trt *rt, struct atb_timer *timer, uint64_t seed,
			    struct timing_ctx *tc, size_t np, unsigned group,
			    struct torch_timed *x, struct atb_timing_seed *res)
{
	const struct atb_runner_job *job = rt->job;
	struct atb_timing_hooks hooks = {.before_round = torch_timed_before,
					 .after_round = torch_timed_after, .ctx = x,
					 .after_call = torch_timed_call, .call_ctx = x,
					 .progress = runner_progress};
	struct atb_error err;
	long long mask = 0;
	size_t g, ref = np;
	json_t *a;
	char msg[1400];
	int ok;

	x->np = 0;
	if (!job->timed.on)
		return runner_time_group(job, timer, seed, np, timed_call, tc,
					 rt->cu ? ft_cuda_error : NULL, res);
	for (g = 0; g < np; g++) {
		mask |= 1LL << tc->map[g];
		if (tc->map[g] == job->reference)
			ref = g;
	}
	memset(&x->t, 0, sizeof(x->t));
	x->rt = rt;
	x->tc = tc;
	x->np = np;
	x->t.narms = np;
	x->t.ref = ref;
	x->t.round = -1;
	x->t.clock = runner_clock_hook();
	for (g = 0; g < ATB_RUNNER_MAX_ARMS; g++)
		x->t.st[g].first_failed_round = -1;
	runner_timed_plan_init(&x->t.plan, &job->timed, job->timing.trials_min, seed, group);
	a = py_answer(rt, "timed_begin", int_tuple(2, mask, ref < np ? (long long)tc->map[ref] : -1,
						   0));
	if (!a)
		return -1;
	x->r = gsl_rng_alloc(gsl_rng_mt19937);
	if (!x->r || torch_timed_inputs(x, json_object_get(a, "inputs"))) {
		json_decref(a);
		runner_emit_error("timed_checks", x->r ? x->t.msg : "cannot allocate an rng");
		if (x->r)
			gsl_rng_free(x->r);
		x->r = NULL;
		x->np = 0;
		json_decref(py_json(rt, "timed_end", NULL));
		return -1;
	}
	json_decref(a);
	atb_error_clear(&err);
	tc->keep = 1;
	memset(res, 0, sizeof(*res));
	x->tamper[0] = 0;
	hooks_begin(rt);
	/* PROTO: gates.clock -- the group's marker, as runner_time_group's */
	ok = !runner_mark_group(seed, np) &&
	     !runner_clock_begin(np, (size_t)job->timing.trials_max) &&
	     !atb_timing_run_seed_hooked(&job->timing, timer, seed, np, timed_call, tc, &hooks,
					 res, &err);
	timed_drop(tc);
	gsl_rng_free(x->r);
	x->r = NULL;
	hooks_end(rt);
	json_decref(py_json(rt, "timed_end", NULL));
	if (ok)
		return 0;
	atb_error_format(&err, msg, sizeof(msg));
	if (x->tamper[0]) {
		char where[64];
		json_t *ch, *zero = json_integer(0);

		snprintf(where, sizeof(where), "a timed call of seed %llu", (unsigned long long)seed);
		ch = json_pack("[{s:s, s:s}]", "where", where, "what", x->tamper);
		emit_tamper(rt, where, ch, zero);
		json_decref(ch);
		json_decref(zero);
	} else if (x->t.msg[0])
		runner_emit_error("timed_checks", x->t.msg);
	else if (rt->cu && ft_cuda_error(timer)[0])
		runner_emit_error("timing", ft_cuda_error(timer));
	else
		runner_emit_error(err.status == ATB_ERR_CHECK ? "kernel_failed" : "timing", msg);
	atb_timing_seed_release(res);
	x->np = 0;
	return -1;
}

static json_t *gpu_json(const struct atb_cuda_gpu_sample *s)
{
	if (!s->valid)
		return json_pack("{s:b, s:s}", "valid", 0, "why", s->why);
	return json_pack("{s:b, s:i, s:i, s:I, s:b, s:i, s:i}", "valid", 1, "sm_clock_mhz",
			 (int)s->sm_clock_mhz, "mem_clock_mhz", (int)s->mem_clock_mhz,
			 "throttle_reasons", (json_int_t)s->throttle_reasons, "throttled",
			 s->throttled, "temperature_c", s->temperature_c, "power_mw",
			 (int)s->power_mw);
}

/*
 * Side-stream escape (PROTO: gates side_stream), as the cuda backend: the
 * call bracketed by events on the runner's stream (the one PyTorch uses),
 * then cuCtxSynchronize timed on the host: work the arm left on another
 * stream shows up as device-wide completion long after the window.
 * Returns 1 escaped, 0 not, -1 after an error event.
 */
struct side_ctx {
	struct trt *rt;
	size_t ai;
};

static int side_call(void *ctx)
{
	struct side_ctx *c = ctx;
	struct timing_ctx tc = {.rt = c->rt, .map = {c->ai}};

	return timed_call(&tc, 0);
}

static int side_stream_check(struct trt *rt, size_t ai, uint64_t seed)
{
	struct side_ctx c = {.rt = rt, .ai = ai};
	struct atb_error err;
	int64_t t0 = atbi_monotonic_ns();
	int r = runner_side_stream(rt->cu, seed, rt->job->arms[ai].name, side_call, &c, &err);

	rt->side_stream_ns += atbi_monotonic_ns() - t0;
	if (r < 0 && err.msg[0])
		runner_emit_error("cuda", err.msg);
	return r;
}

static int time_seed(struct trt *rt, struct atb_timer *timer, uint64_t seed, size_t *escapes);

/* The timing core's seed into the phases: warm-up, timed windows, the whole. */
static void count_timing(struct trt *rt, const struct atb_timing_seed *res)
{
	size_t a, k;

	rt->timing_ns += res->elapsed_ns;
	for (a = 0; a < res->narms; a++) {
		rt->warmup_ns += res->arms[a].warmup_ns;
		for (k = 0; k < res->arms[a].ntrials; k++)
			rt->timed_ns += res->arms[a].times_ns[k];
	}
}

static int emit_phases(struct trt *rt);

/* runner_time_and_done's hook; the phases event after the last seed, before done. */
static int time_seed_cb(void *ctx, struct atb_timer *timer, uint64_t seed, size_t *escapes)
{
	struct trt *rt = ctx;

	if (time_seed(rt, timer, seed, escapes))
		return -1;
	if (++rt->seeds_timed == rt->job->nseeds)
		return emit_phases(rt);
	return 0;
}

/*
 * Every copy of a reference the runner holds (device and host), freed: at the
 * start of each seed's timing, when the check phase's copies (ref*, refb*)
 * and the last seed's timed one (tref*) are dead.  An 8 GB output kept two
 * of them (16 GB outside PyTorch's allocator) through the timing phase,
 * where PyTorch then ran out of memory on an 80 GB H100 (KernelBench
 * 39_L2Norm: 56 GB allocated by PyTorch, 73 GB in use).  The slots are made
 * again, fresh, by the next copy that names them.
 */
static void refs_release(struct trt *rt)
{
	size_t i;

	for (i = 0; i < rt->nrefs; i++) {
		if (rt->refs[i].d)
			atb_cuda_free(rt->cu, rt->refs[i].d);
		atb_free(rt->refs[i].h);
	}
	memset(rt->refs, 0, sizeof(rt->refs));
	rt->nrefs = 0;
}

static int time_seed(struct trt *rt, struct atb_timer *timer, uint64_t seed, size_t *escapes)
{
	const struct atb_runner_job *job = rt->job;
	struct timing_ctx tc = {.rt = rt};
	const char *names[ATB_RUNNER_MAX_ARMS + 1];
	struct atb_cuda_gpu_sample g0, g1;
	struct atb_timing_seed res;
	struct torch_timed x = {0};
	size_t np = 0, ai, alone = SIZE_MAX;
	char where[64];
	size_t order[ATB_RUNNER_MAX_ARMS];
	json_t *a;
	int throttled = -1;

	/* PROTO: timing.placement (keyed) -- the arms' models and inputs are
	   placed in the order runner_arm_order turns each seed (as the cpu and
	   cuda backends allocate their buffers); Python is told where it
	   starts and reports it in the placement event */
	if (runner_arm_order(job, seed, order)) {
		runner_emit_error("timing", "cannot draw the arms' placement order (HMAC-SHA256)");
		return -1;
	}
	refs_release(rt);
	a = py_json(rt, "prepare", int_tuple(2, (long long)seed, (long long)order[0], 0));
	if (!a || answer_error(a)) {
		if (!a)
			runner_emit_error("python", rt->msg);
		json_decref(a);
		return -1;
	}
	/* PROTO: gates.physical_floor -- the reference's output bytes, once */
	if (json_is_object(json_object_get(a, "outputs")) &&
	    runner_emit(json_pack("{s:s, s:I, s:O}", "event", "outputs", "seed", (json_int_t)seed,
				  "outputs", json_object_get(a, "outputs")))) {
		json_decref(a);
		return -1;
	}
	/* PROTO: timing.placement -- the pads this seed drew, per model (shuffled),
	   and under keyed the order the arms were placed in */
	if (json_is_object(json_object_get(a, "placement"))) {
		json_t *ev = json_pack("{s:s, s:I, s:O}", "event", "placement", "seed",
				       (json_int_t)seed, "placement", json_object_get(a, "placement"));

		if (ev && job->placement == ATB_PLACEMENT_KEYED &&
		    json_object_set_new(ev, "order", runner_arm_order_names(job, order))) {
			json_decref(ev);   /* the names are set_new's to free, set or not */
			ev = NULL;
		}
		if (runner_emit(ev)) {
			json_decref(a);
			return -1;
		}
	}
	json_decref(a);
	for (ai = 0; ai < job->narms; ai++) {
		if (rt->cu) {
			int esc = side_stream_check(rt, ai, seed);

			if (esc < 0)
				return -1;
			*escapes += (size_t)esc;
		}
		if (!strcmp(job->arms[ai].name, "baseline_alone")) {
			alone = ai;
			continue;
		}
		tc.map[np] = ai;
		names[np++] = job->arms[ai].name;
	}
	/* the compiled reference, in the same interleaved rounds (labelled) */
	if (rt->compile_ok && np) {
		tc.map[np] = job->narms;
		names[np++] = COMPILE_ARM;
	}
	/* PROTO: gates tamper -- before the group, before its first timed
	   trial and random others (the timer's start hook), after the group */
	snprintf(where, sizeof(where), "timing seed %llu", (unsigned long long)seed);
	if (tamper_point(rt, where))
		return -1;
	if (rt->cu)
		atb_cuda_gpu_sample(atb_cuda_info(rt->cu)->pci_bus_id, &g0);
	if (np) {
		int failed;

		rt->tamper_first = 1;
		failed = torch_time_group(rt, timer, seed, &tc, np, 0, &x, &res);
		/* what the trials' checks saw, also when the group failed (a
		   tampered call may be what raised) */
		if (tamper_point(rt, where) || failed) {
			if (!failed)
				atb_timing_seed_release(&res);
			return -1;
		}
		count_timing(rt, &res);
		if (rt->cu) {
			atb_cuda_gpu_sample(atb_cuda_info(rt->cu)->pci_bus_id, &g1);
			throttled = g0.throttled || g1.throttled;
		}
		ai = (size_t)runner_emit_samples_timed(&res, "paired", names, np, throttled,
						       x.np ? &x.t : NULL);
		/* PROTO: gates.side_stream.timed -- the arms beside the reference */
		if (!ai && rt->cu) {
			size_t k, ref = np;

			for (k = 0; k < np; k++)
				if (tc.map[k] == job->reference)
					ref = k;
			ai = (size_t)-runner_emit_timed_side_stream(&res, names, ref);
		}
		atb_timing_seed_release(&res);
		if (ai)
			return -1;
	}
	if (alone != SIZE_MAX) {
		tc.map[0] = alone;
		names[0] = job->arms[alone].name;
		int failed;

		rt->tamper_first = 1;
		failed = torch_time_group(rt, timer, seed, &tc, 1, 1, &x, &res);
		if (tamper_point(rt, where) || failed) {
			if (!failed)
				atb_timing_seed_release(&res);
			return -1;
		}
		count_timing(rt, &res);
		if (rt->cu) {
			atb_cuda_gpu_sample(atb_cuda_info(rt->cu)->pci_bus_id, &g1);
			throttled = g0.throttled || g1.throttled;
		}
		ai = (size_t)runner_emit_samples_timed(&res, "alone", names, 1, throttled,
						       x.np ? &x.t : NULL);
		atb_timing_seed_release(&res);
		if (ai)
			return -1;
	}
	if (rt->cu) {
		atb_cuda_gpu_sample(atb_cuda_info(rt->cu)->pci_bus_id, &g1);
		return runner_emit(json_pack("{s:s, s:I, s:o, s:o}", "event", "gpu_state", "seed",
					     (json_int_t)seed, "before", gpu_json(&g0), "after",
					     gpu_json(&g1)));
	}
	return 0;
}

/* ---- where the time goes ------------------------------------------------- */

static double secs(int64_t ns)
{
	return (double)ns / 1e9;
}

/*
 * The "phases" event: seconds per phase, exclusive (python/atb_torch/
 * phases.py for the Python side's; "other" is the run's wall time less
 * every phase).  The harness ignores it; where $ATB_RUNNER_PHASES_LOG names
 * a file the same line is appended there too (bench-suite reads it: the
 * harness keeps no runner output of an admitted job).  0, or -1 when the
 * event cannot be written (an error there is not the measurement's).
 */
static json_t *phases_json(struct trt *rt);

/* The phases so far as one line in $ATB_RUNNER_PHASES_LOG (when set). */
static void log_phases(const json_t *ev)
{
	const char *log = getenv("ATB_RUNNER_PHASES_LOG");
	char *line;
	FILE *f;

	if (!ev || !log || !*log)
		return;
	line = json_dumps(ev, JSON_COMPACT | JSON_SORT_KEYS);
	f = line ? fopen(log, "a") : NULL;
	if (f) {
		fprintf(f, "%s\n", line);
		fclose(f);
	}
	atb_free(line);
}

/*
 * After each seed's correctness: the phases so far into the log only, with
 * "partial": true (a runner killed at the job timeout leaves where its time
 * went; readers keep a job's last line).
 */
static void log_partial_phases(struct trt *rt)
{
	json_t *ev;

	if (!getenv("ATB_RUNNER_PHASES_LOG"))
		return;
	ev = phases_json(rt);
	if (ev && !json_object_set_new(ev, "partial", json_true()))
		log_phases(ev);
	json_decref(ev);
}

static int emit_phases(struct trt *rt)
{
	json_t *ev = phases_json(rt);

	log_phases(ev);
	return runner_emit(ev);
}

/* The "phases" event; NULL out of memory. */
static json_t *phases_json(struct trt *rt)
{
	const struct atb_runner_job *job = rt->job;
	json_t *a = py_json(rt, "phases", NULL), *s = json_object(), *v;
	int64_t flush_ns = rt->ft ? rt->ft->flush_ns : 0;
	double sum = 0;
	const char *k;
	size_t i;
	int alone = 0;

	if (a && !json_object_get(a, "error"))
		json_object_update(s, a);
	json_decref(a);
	/* the timing core's seed less its warm-up, windows and flushes: the
	   per-trial overhead (the call into Python, the timer's own work) */
	json_object_set_new(s, "interpreter", json_real(secs(rt->interpreter_ns)));
	json_object_set_new(s, "compare", json_real(secs(rt->compare_ns)));
	json_object_set_new(s, "side_stream", json_real(secs(rt->side_stream_ns)));
	json_object_set_new(s, "warmup", json_real(secs(rt->warmup_ns)));
	json_object_set_new(s, "timed", json_real(secs(rt->timed_ns)));
	json_object_set_new(s, "flush", json_real(secs(flush_ns)));
	/* the watch before timed trials is Python's "tamper" phase, not overhead */
	json_object_set_new(s, "trial_overhead",
			    json_real(secs(rt->timing_ns - rt->warmup_ns - rt->timed_ns - flush_ns -
					   rt->tamper_trial_ns - rt->hooks_ns)));
	json_object_foreach(s, k, v)
		sum += json_number_value(v);
	json_object_set_new(s, "other", json_real(secs(atbi_monotonic_ns() - rt->t0_ns) - sum));
	/* the drift side: atb measure's alone runner (its twin in the
	   candidate's slot, nothing checked) or a one-arm job */
	alone = job->skip_correctness;
	for (i = 0; i < job->narms; i++)
		alone |= !strcmp(job->arms[i].name, "baseline_alone") ||
			 (job->narms == 1 && i == job->reference);
	return json_pack("{s:s, s:s, s:s, s:b, s:f, s:f, s:I, s:I, s:o}", "event", "phases",
			 "job", job->id, "task", job->arms[job->reference].so, "alone", alone,
			 "wall_s", secs(atbi_monotonic_ns() - rt->t0_ns), "correctness_s",
			 secs(rt->check_ns), "flushes", (json_int_t)(rt->ft ? rt->ft->nflush : 0),
			 "tamper_trials", (json_int_t)rt->tamper_trials, "seconds", s);
}

/* ---- env and the run ------------------------------------------------------ */

static int emit_env(struct trt *rt, const struct atb_timer *timer)
{
	const struct atb_runner_job *job = rt->job;
	const json_t *pyj = json_object_get(rt->torch, "python");
	json_t *arms = json_array(), *ev;
	size_t i;

	for (i = 0; arms && i < job->narms; i++)
		json_array_append_new(arms, json_pack("{s:s, s:s, s:s}", "name", job->arms[i].name,
						      "py", job->arms[i].so, "sha256", rt->sha[i]));
	ev = json_pack("{s:s, s:s, s:s, s:s, s:I, s:o, s:O, s:{s:O, s:O}, s:I, s:I, s:b, s:s,"
		       " s:i, s:o}",
		       "event", "env", "backend", "torch", "device", rt->cu ? "cuda" : "cpu",
		       "clock", rt->cu ? "cuda_events" : "CLOCK_MONOTONIC", "clock_resolution_ns",
		       (json_int_t)timer->ops->resolution_ns(timer->state), "arms",
		       arms ? arms : json_null(), "torch", rt->py_env, "python", "library",
		       json_object_get(pyj, "library"), "home", json_object_get(pyj, "home"),
		       "cache_bytes", (json_int_t)job->cache_bytes, "flush_bytes",
		       (json_int_t)timer->flush_bytes, "flush_enabled", job->timing.flush, "timer",
		       timer->ops->name, "seeds", (int)job->nseeds, "correctness_inputs",
		       runner_inputs_json(job));
	if (ev && json_object_set_new(ev, "preemption",
				      json_string(rt->preemption[0] ? rt->preemption : "none"))) {
		json_decref(ev);
		ev = NULL;
	}
	if (ev && rt->cu) {
		const struct atb_cuda_device_info *d = atb_cuda_info(rt->cu);
		struct atb_cuda_gpu_sample g;

		atb_cuda_gpu_sample(d->pci_bus_id, &g);
		json_object_set_new(ev, "gpu_device", json_pack("{s:s, s:s, s:i, s:I}", "name",
								d->name, "pci_bus_id", d->pci_bus_id,
								"sm_count", d->sm_count, "l2_bytes",
								(json_int_t)d->l2_bytes));
		json_object_set_new(ev, "spin_ns", json_integer(ATB_CUDA_SPIN_NS));
		json_object_set_new(ev, "gpu", gpu_json(&g));
		/* where outputs are compared, and why not on the GPU */
		json_object_set_new(ev, "compare", rt->compare_on_device
				    ? json_string("gpu")
				    : json_sprintf("host: %s", rt->compare_why));
	}
	return runner_emit(ev);
}

/*
 * Device: "cpu"; "cuda" (device 0 through the driver, or no_cuda); "auto"
 * (the default): cuda when a driver and a device are there, else cpu.
 * The job's torch object gets the resolved device and, on cuda, the
 * runner's stream for PyTorch to use.
 */
static int torch_clock(void *ctx, unsigned *mhz, unsigned long long *reasons)
{
	struct trt *rt = ctx;

	return atb_cuda_sm_clock(atb_cuda_info(rt->cu)->pci_bus_id, mhz, reasons);
}

static int open_device(struct trt *rt, const char **reason)
{
	const char *want = json_string_value(json_object_get(rt->torch, "device"));
	struct atb_error err;

	if (!want)
		want = "auto";
	atb_error_clear(&err);
	if (strcmp(want, "cpu") && atb_cuda_open(0, &rt->cu, &err)) {
		rt->cu = NULL;
		if (!strcmp(want, "cuda")) {
			*reason = err.status == ATB_ERR_NOT_FOUND ? "no_cuda" : "cuda";
			atb_error_format(&err, rt->msg, sizeof(rt->msg));
			return -1;
		}
	}
	json_object_set_new((json_t *)rt->torch, "device", json_string(rt->cu ? "cuda" : "cpu"));
	/* PROTO: gates.clocks -- the SM clock after every timed trial on the GPU */
	if (rt->cu)
		runner_clock_reader(torch_clock, rt);
	if (rt->cu)
		json_object_set_new((json_t *)rt->torch, "stream",
				    json_integer((json_int_t)(uintptr_t)atb_cuda_stream(rt->cu)));
	/* PROTO: correctness.tolerances -- on the GPU the outputs are compared
	 * where they are (compare_device), when the driver takes the kernel;
	 * else copied to the host as on the cpu (the reason in the env event) */
	if (rt->cu) {
		atb_error_clear(&err);
		if (atb_cuda_compare_load(rt->cu, &err))
			atb_error_format(&err, rt->compare_why, sizeof(rt->compare_why));
		else
			rt->compare_on_device = 1;
		json_object_set_new((json_t *)rt->torch, "compare_on_device",
				    json_boolean(rt->compare_on_device));
	}
	return 0;
}

static int make_timer(struct trt *rt, struct atb_timer **timer, const char **reason)
{
	const struct atb_runner_job *job = rt->job;
	size_t flush_bytes = 0, cache = job->cache_bytes;
	struct atb_error err;
	enum atb_status st;

	atb_error_clear(&err);
	/* PROTO: timing.cache_flush -- factor x the largest cache (on cuda the
	 * larger of the job's and the GPU's L2), at least min_bytes. */
	if (rt->cu && atb_cuda_info(rt->cu)->l2_bytes > cache)
		cache = atb_cuda_info(rt->cu)->l2_bytes;
	if (job->timing.flush)
		/* PROTO: timing.cache_flush.cpu_max_bytes (version 6 on) bounds a
		 * cpu timer's flush; a cuda timer's (the device's L2) is not bound */
		flush_bytes = atb_timing_flush_bytes(cache, job->cache_flush_factor,
						     job->cache_flush_min_bytes,
						     rt->cu ? 0 : job->cache_flush_cpu_max_bytes);
	st = rt->cu ? atb_cuda_timer_new(rt->cu, flush_bytes, ATB_CUDA_SPIN_NS, timer, &err)
		    : atb_timer_cpu_new(flush_bytes, timer, &err);
	if (st) {
		*reason = st == ATB_ERR_NOMEM ? "nomem" : "timer";
		atb_error_format(&err, rt->msg, sizeof(rt->msg));
		return -1;
	}
	/* PROTO: timing.preemption -- cpu tensors only (a cuda trial is the
	 * device's time); without schedstat the trials stay wall time */
	if (!rt->cu && job->preemption) {
		if (atb_timer_cpu_subtract_preemption(*timer, &err))
			atb_error_format(&err, rt->preemption, sizeof(rt->preemption));
		else
			snprintf(rt->preemption, sizeof(rt->preemption), "run_delay");
	}
	return 0;
}

static int run(struct trt *rt)
{
	const struct atb_runner_job *job = rt->job;
	struct atb_timer *timer = NULL;
	const char *reason = "internal";
	struct runner_done done = {.t0_ns = atbi_monotonic_ns(), .has_escapes = 1,
				   .skipped = &rt->skipped, .ref_direct = &rt->ref_direct,
				   .ref_precision = &rt->rp};
	size_t k, x;
	int inputs[ATB_RUNNER_MAX_DISTS + 1], rc = RUNNER_EXIT_FAILED;
	int64_t t_check;
	char where[160];
	struct flush_timer ft = {0};
	struct atb_timer_ops ft_ops;

	if (hash_arms(rt)) {
		runner_emit_error("dlopen", rt->msg);
		return rc;
	}
	rt->t0_ns = done.t0_ns;
	rt->rp.factor = job->ref_precision_factor;
	if (open_device(rt, &reason) || py_start(rt, &reason) || make_timer(rt, &timer, &reason)) {
		runner_emit_error(reason, rt->msg);
		goto out;
	}
	flush_timer_init(&ft, timer, &ft_ops);
	ft.before = tamper_before_trial;
	ft.ctx = rt;
	rt->ft = &ft;
	rt->tamper_trial = py.PyObject_GetAttrString(rt->session, "tamper_trial");
	tamper_seed_rng(rt);
	rt->py_env = py_json(rt, "env", NULL);
	/* PROTO: gates.background -- the threads there before any candidate code */
	if (rt->py_env) {
		const json_t *tt = json_object_get(rt->py_env, "trusted_threads"), *v;
		long tids[RUNNER_MAX_TRUSTED];
		size_t i, n = 0;

		json_array_foreach(tt, i, v)
			if (n < RUNNER_MAX_TRUSTED && json_is_integer(v))
				tids[n++] = (long)json_integer_value(v);
		runner_background_trust(tids, n);
	}
	rt->call = py.PyObject_GetAttrString(rt->session, "call");
	for (k = 0; k < job->narms + (size_t)rt->with_compile; k++)
		if (!(rt->arm_args[k] = int_tuple(1, (long long)k, 0, 0)))
			rt->call = NULL;
	if (!rt->py_env || !rt->call) {
		runner_emit_error("python", "atb_torch: cannot prepare the session");
		goto out;
	}
	if (emit_env(rt, timer))
		goto out;
	/* PROTO: gates tamper -- the candidate imported and built (open) */
	if (tamper_point(rt, "the candidate's import and construction"))
		goto out;
	if (rt->with_compile && (warm_compiled(rt) ||
				 tamper_point(rt, "the compiled reference's first call")))
		goto out;
	/* PROTO: correctness.distributions, correctness.input_sets_per_seed */
	t_check = atbi_monotonic_ns();
	for (k = 0; runner_any_checked(job) && k < job->nseeds; k++) {
		const char *reuse_on[ATB_RUNNER_MAX_ARMS] = {0};
		size_t ninputs = runner_seed_inputs(job, k, inputs);

		for (x = 0; x < ninputs; x++) {
			int r = check_input_set(rt, job->seeds[k], inputs[x], reuse_on,
						&done.failures, &done.nevents);

			if (r < 0)
				goto out;
			rt->skipped += (size_t)r;
			snprintf(where, sizeof(where), "input set '%s' of seed %llu",
				 runner_input_name(job, inputs[x]), (unsigned long long)job->seeds[k]);
			if (tamper_point(rt, where))
				goto out;
		}
		rt->check_ns = atbi_monotonic_ns() - t_check;
		log_partial_phases(rt);
	}
	rt->check_ns = done.check_ns = atbi_monotonic_ns() - t_check;
	if (rt->with_compile && emit_compile(rt))
		goto out;
	/* timing skipped (runner_time_and_done's rule): the phases now */
	if ((job->skip_timing || (done.failures && !job->time_if_incorrect) || !job->nseeds) &&
	    emit_phases(rt))
		goto out;
	if (!runner_time_and_done(job, &ft.t, time_seed_cb, rt, &done))
		rc = RUNNER_EXIT_OK;
out:
	atb_timer_free(timer);
	return rc;
}

int runner_torch_run(const char *text, size_t len)
{
	struct trt *rt = atb_calloc(1, sizeof(*rt));
	struct atb_runner_job *job = NULL;
	int rc;

	if (!rt) {
		runner_emit_error("nomem", "cannot start the torch backend");
		return RUNNER_EXIT_FAILED;
	}
	if (parse_job(rt, text, len, &job)) {
		runner_emit_error("bad_job", rt->msg);
		json_decref(rt->raw);
		atb_free(rt);
		return RUNNER_EXIT_BAD_JOB;
	}
	rt->job = job;
	runner_progress_setup(job->progress_ms);
	rc = run(rt);
	/* Python objects, torch and the cuda context are left to process exit:
	 * finalizing an interpreter that imported torch is slow and fragile. */
	json_decref(rt->py_env);
	json_decref(rt->compile_failed);
	json_decref(rt->raw);
	atb_runner_job_free(job);
	atb_free(rt->ts);
	atb_free(rt);
	return rc;
}
