/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Tasks: what is tuned, against what, and how it is built.
 *
 * A task is a folder with a task.yaml (docs/task-format.md) and its kernel
 * sources: the honest baseline (what a user would otherwise run, built with
 * the protocol's flags), optionally a naive baseline (reported beside the
 * honest one, labelled, never instead of it), and a tunable candidate
 * template whose knobs arrive as -D macros.  Every source exports the kernel
 * ABI of atb/kernel.h.
 *
 * This module parses and validates task.yaml (unknown keys, wrong types,
 * missing fields, bad values and bad expressions are refused with
 * ATB_ERR_SCHEMA, file:line:column and the field path), evaluates shapes and
 * floor formulas for each parameter set, samples knobs, writes candidate
 * folders and builds sources to shared objects with the protocol's compiler.
 *
 * Does not: generate inputs, run or time kernels (atb-runner does), or judge
 * candidates (gates do).  Not thread-safe; nothing here prints.
 */
#ifndef ATB_TASK_H
#define ATB_TASK_H

#include <stddef.h>
#include <stdint.h>

#include <gsl/gsl_rng.h>

#include "atb/protocol.h"
#include "atb/status.h"

#define ATB_TASK_MAX_PARAMS 16
#define ATB_TASK_MAX_PARAM_SETS 16   /* the timing set plus correctness sets */
#define ATB_TASK_MAX_BUFFERS 16
#define ATB_TASK_MAX_DIMS 8
#define ATB_TASK_MAX_SURFACE 8
#define ATB_TASK_MAX_KNOBS 16
#define ATB_TASK_MAX_KNOB_VALUES 16
#define ATB_TASK_MAX_FLAG_CHOICES 8
#define ATB_TASK_NAME_MAX 64         /* names, dtypes, knob values: incl. NUL */
#define ATB_TASK_FLAGS_MAX 128       /* one flag choice, e.g. "-O3 -funroll-loops" */
#define ATB_TASK_BUILD_LOG_MAX (256 * 1024)

enum atb_task_role { ATB_ROLE_IN = 0, ATB_ROLE_OUT = 1, ATB_ROLE_INOUT = 2 };

struct atb_task_param {
	char name[ATB_TASK_NAME_MAX];
	int is_real;                  /* 0: int (usable in shapes), 1: real */
};

struct atb_task_buffer {
	char name[ATB_TASK_NAME_MAX];
	char dtype[16];               /* fp32 fp64 fp16 bf16 int32 int64 int8 uint8 */
	size_t elem_bytes;
	enum atb_task_role role;
	char *shape[ATB_TASK_MAX_DIMS]; /* expressions over int params; owned */
	size_t ndims;
	int has_generator;            /* required for in/inout, absent for out */
	/* kind "uniform" | "normal" | "constant"; constant's value is in low. */
	struct atb_distribution generator;
	/*
	 * "reduction: {length: K, operands: [A, B], accumulate: fp32}" on an
	 * out buffer: each element is a sum of K products of A's row and B's
	 * column (A [M, K], B [K, N] row-major; one operand: of K terms of X's
	 * row), checked at load for every set.  The runner job carries it as
	 * {"operands": [...], "accumulate": ...} (PROTO:
	 * correctness.reduction_tolerance).
	 */
	struct {
		int has;
		char *length;                        /* expression; owned */
		char operands[2][ATB_TASK_NAME_MAX];
		size_t noperands;
		char accumulate[16];                 /* "" : the buffer's dtype */
	} reduction;
};

struct atb_task_source {
	char *file;    /* as written in task.yaml, relative to the task folder; owned */
	char *path;    /* task folder + "/" + file; owned */
	char *label;   /* owned; "" when none */
	char *why;     /* baseline only: why it is the honest one; owned, or NULL */
};

struct atb_task_knob {
	char name[ATB_TASK_NAME_MAX]; /* an upper-case C identifier: the macro */
	char values[ATB_TASK_MAX_KNOB_VALUES][ATB_TASK_NAME_MAX];
	size_t nvalues;               /* >= 1; values[0] is the default */
};

/* One point of the parameter space: values by declaration index. */
struct atb_task_param_set {
	int64_t ints[ATB_TASK_MAX_PARAMS];   /* for params with is_real == 0 */
	double reals[ATB_TASK_MAX_PARAMS];   /* for params with is_real == 1 */
};

/* The kinds of task: task.yaml gives "cpu" or "cuda"; a KernelBench file is "torch". */
#define ATB_TASK_KIND_CPU "cpu"
#define ATB_TASK_KIND_CUDA "cuda"
#define ATB_TASK_KIND_TORCH "torch"

struct atb_task {
	char *name;
	char *kind;           /* ATB_TASK_KIND_*: "cpu", "cuda" or "torch" */
	char *description;
	char *dir;            /* the task folder */
	char *yaml_path;      /* the task.yaml it was loaded from */

	struct atb_task_param params[ATB_TASK_MAX_PARAMS];
	size_t nparams;
	/* sets[0]: the timing set (params' values); sets[1..]: correctness_params. */
	struct atb_task_param_set sets[ATB_TASK_MAX_PARAM_SETS];
	size_t nsets;

	struct atb_task_buffer buffers[ATB_TASK_MAX_BUFFERS];
	size_t nbuffers;

	struct atb_task_source baseline;
	struct atb_task_source naive;
	int has_naive;
	struct atb_task_source candidate;   /* the tunable template; label unused */

	char surface[ATB_TASK_MAX_SURFACE][ATB_TASK_NAME_MAX];
	size_t nsurface;

	struct atb_task_knob knobs[ATB_TASK_MAX_KNOBS];
	size_t nknobs;
	/* knobs.cflags: extra compiler flags added after the protocol's. */
	char flag_choices[ATB_TASK_MAX_FLAG_CHOICES][ATB_TASK_FLAGS_MAX];
	size_t nflag_choices;  /* 0: no flags knob (as if [""]) */

	char *floor_bytes;     /* expression; owned */
	char *floor_flops;     /* expression; owned */

	/*
	 * Kind "torch" only (atb_task_load_kernelbench); NULL for the others.
	 * python: the interpreter's path as resolved.  python_info: what it said
	 * about itself, a JSON object as text: {"executable", "version",
	 * "library" (the libpython to dlopen; "" when it has none, e.g. a
	 * static build), "home" (PYTHONHOME: base prefix), "path" (its
	 * sys.path, the venv's site-packages included)}: the torch job carries
	 * it so atb-runner can embed the same interpreter.
	 */
	char *python;
	char *python_info;
};

/* A knob choice: one value per knob of the task, plus extra flags. */
struct atb_knob_assignment {
	size_t n;
	struct {
		char name[ATB_TASK_NAME_MAX];
		char value[ATB_TASK_NAME_MAX];
	} knobs[ATB_TASK_MAX_KNOBS];
	char cflags[ATB_TASK_FLAGS_MAX];   /* space-separated, "" for none */
};

/* A buffer with its element count evaluated for one parameter set. */
struct atb_task_buffer_instance {
	const char *name;          /* into the task: valid while it lives */
	const char *dtype;
	size_t elem_bytes;
	enum atb_task_role role;
	int64_t dims[ATB_TASK_MAX_DIMS];
	size_t ndims;
	int64_t count;             /* product of dims, >= 0 */
	int has_generator;
	struct atb_distribution generator;
};

/*
 * What the runner needs for one parameter set: scalars in kernel ABI order
 * (ints, then reals, each in declaration order) and buffers in task order.
 */
struct atb_task_instance {
	size_t set_index;          /* 0: timing; >= 1: correctness */
	size_t nints;
	const char *int_names[ATB_TASK_MAX_PARAMS];
	int64_t ints[ATB_TASK_MAX_PARAMS];
	size_t nreals;
	const char *real_names[ATB_TASK_MAX_PARAMS];
	double reals[ATB_TASK_MAX_PARAMS];
	size_t nbuffers;
	struct atb_task_buffer_instance buffers[ATB_TASK_MAX_BUFFERS];
	int64_t floor_bytes;       /* minimum bytes moved by one call */
	int64_t floor_flops;       /* minimum floating-point operations of one call */
};

/*
 * Load and validate a task: path is a task folder (holding task.yaml) or a
 * YAML file.  Every expression is evaluated for every parameter set, so a
 * loaded task instantiates without error.  Caller owns *out (atb_task_free);
 * *out is NULL on failure.  Errors: ATB_ERR_NOT_FOUND (no such file),
 * ATB_ERR_IO, ATB_ERR_PARSE (malformed YAML), ATB_ERR_SCHEMA (with
 * file:line:column and field path, e.g. "buffers[1].dtype"), ATB_ERR_NOMEM.
 */
enum atb_status atb_task_load(const char *path, struct atb_task **out, struct atb_error *err);

void atb_task_free(struct atb_task *task);

/*
 * Load a KernelBench-format file as a task of kind "torch"
 * (docs/torch.md).  py_path is a Python file that defines `class Model`
 * (a torch.nn.Module), a module-level `get_inputs()` and
 * `get_init_inputs()` (each checked to be defined at the start of a line;
 * the file is not imported here).  The task's name is the file's stem (the
 * name less ".py"), its dir the file's folder, baseline.path the file (the
 * reference: PyTorch eager), its surface the single file `model_new.py`:
 * atb_measure_candidate accepts it with candidate_dir a folder holding
 * only model_new.py, a file that defines `class ModelNew` with Model's
 * interface.  It has no parameters, buffers or knobs of its own: inputs
 * come from get_inputs() in the runner.  python is the interpreter that has
 * PyTorch (NULL: $ATB_PYTHON, else `python3` on PATH); it is asked once,
 * with `python -c`, for its libpython, prefix and sys.path
 * (task->python_info), within 30 s.  Caller owns *out (atb_task_free);
 * *out is NULL on failure.
 * Errors: ATB_ERR_USAGE (no path, not a .py file, a stem that is not a
 * name), ATB_ERR_NOT_FOUND (no such file; no such interpreter),
 * ATB_ERR_IO, ATB_ERR_SCHEMA (file:line, field "Model", "get_inputs" or
 * "get_init_inputs": a definition is missing), ATB_ERR_SYSTEM (the
 * interpreter failed or timed out; its output's tail in the message),
 * ATB_ERR_NOMEM.
 */
enum atb_status atb_task_load_kernelbench(const char *py_path, const char *python,
					  struct atb_task **out, struct atb_error *err);

/*
 * Find a task and atb_task_load it: a name containing a '/' or ending in
 * .yaml is a path; a bare name is the bundled task home/tasks/NAME when
 * there is one (a bundled name means the same task from every folder),
 * else the folder NAME in the current folder.  ATB_ERR_NOT_FOUND when
 * neither exists.
 */
enum atb_status atb_task_open(const char *home, const char *name_or_path,
			      struct atb_task **out, struct atb_error *err);

/*
 * Names of the bundled tasks: folders under home/tasks/ that hold a
 * task.yaml, sorted.  Caller owns *names and each string
 * (atb_task_list_free); *names is NULL and *n 0 on failure or when none.
 */
enum atb_status atb_task_list(const char *home, char ***names, size_t *n,
			      struct atb_error *err);
void atb_task_list_free(char **names, size_t n);

/* Number of parameter sets: 1 (timing) + the correctness sets. */
size_t atb_task_nsets(const struct atb_task *task);

/*
 * Evaluate parameter set set_index (0: timing) into *out: scalar values,
 * buffer dims and element counts, floor bytes and flops.  ATB_ERR_USAGE for
 * an index out of range; ATB_ERR_SCHEMA for an expression that overflows or
 * divides by zero (cannot happen for a task atb_task_load accepted).
 */
enum atb_status atb_task_instantiate(const struct atb_task *task, size_t set_index,
				     struct atb_task_instance *out, struct atb_error *err);

/*
 * Evaluate an arithmetic expression (integers, int parameter names, + - * /
 * %, unary minus, parentheses) with the int values of set.  Integer
 * arithmetic; overflow and division by zero are ATB_ERR_SCHEMA errors with
 * the offending offset in the message.  Exposed for the tests and the runner.
 */
enum atb_status atb_task_eval(const struct atb_task *task, const struct atb_task_param_set *set,
			      const char *expr, int64_t *value, struct atb_error *err);

/* The default knobs: the first value of every knob, the first flag choice. */
void atb_task_default_knobs(const struct atb_task *task, struct atb_knob_assignment *out);

/*
 * Draw one value of every knob (declaration order), then a flag choice,
 * uniformly from rng: the same seed gives the same sequence of proposals.
 */
void atb_task_sample_knobs(const struct atb_task *task, gsl_rng *rng,
			   struct atb_knob_assignment *out);

/*
 * Check that every knob of the task has exactly one value in a, each one of
 * its declared values, and that a->cflags is one of the flag choices:
 * ATB_ERR_USAGE otherwise (the harness never builds an undeclared knob).
 */
enum atb_status atb_task_check_knobs(const struct atb_task *task,
				     const struct atb_knob_assignment *a, struct atb_error *err);

/*
 * Format a as "NAME=VALUE NAME=VALUE [cflags=...]" into buf (always
 * NUL-terminated).
 */
void atb_task_format_knobs(const struct atb_knob_assignment *a, char *buf, size_t size);

/*
 * Write a candidate's surface into dir, which must not exist yet (it is
 * created, mode 0700): the template as the first surface file.  Knobs are
 * not written into the source; they reach it at build time.  Errors:
 * ATB_ERR_IO (dir exists, cannot write), ATB_ERR_NOMEM.
 */
enum atb_status atb_task_instantiate_candidate(const struct atb_task *task,
					       const struct atb_knob_assignment *knobs,
					       const char *dir, struct atb_error *err);

/*
 * Build source_path into the shared object out_so_path with the protocol's
 * CPU compiler and flags, then the knobs as -DNAME=VALUE, then the knobs'
 * extra flags (only ever added), -I home/include for atb/kernel.h, and -lm.
 * Runs the compiler with fork/execvp (no shell) in its own process group and
 * kills the group after proto->build.timeout_s.  knobs may be NULL (none).
 * *build_log (may be NULL when not wanted) receives the compiler's combined
 * output, capped at ATB_TASK_BUILD_LOG_MAX; caller owns it (atb_free), also
 * on failure.  Errors: ATB_ERR_BUILD "build failed" (the compiler exited
 * non-zero) or "build timed out"; ATB_ERR_SYSTEM (fork, pipe, the compiler
 * cannot be run); ATB_ERR_USAGE (knobs not valid for the task).
 */
enum atb_status atb_task_build(const struct atb_task *task, const char *source_path,
			       const struct atb_knob_assignment *knobs,
			       const struct atb_protocol *proto, const char *out_so_path,
			       char **build_log, struct atb_error *err);

/* "in", "out", "inout". */
const char *atb_task_role_name(enum atb_task_role role);

#endif
