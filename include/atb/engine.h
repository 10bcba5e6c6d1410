/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Serving engines: specs, tasks, lifecycle, output equivalence and the
 * paired configuration A/B (docs/engine-spec.md, docs/internals/engine.md).
 *
 * An engine spec (engines/<name>.yaml) says how to launch one engine (argv
 * template with {model} {host} {port} {run_dir} {env:NAME}), how to know it
 * is ready, where its Prometheus metrics are, and which launch flags may be
 * tuned (type, domain, default, how a value renders on the command line).
 * An engine task (kind: engine) names a spec, a model, a workload for the
 * load generator, a probe set for the output-equivalence gate and the flags
 * a search may touch.  A configuration is a set of name=value pairs over the
 * spec's flags; the empty configuration is the engine's own default, the
 * honest baseline (no tunable flag is passed).
 *
 * Lifecycle: an engine is spawned in its own process group on a free
 * loopback port, its stdout and stderr going to files in the arm's folder;
 * readiness is polled with libcurl up to the spec's timeout; stop is SIGTERM
 * to the group, SIGKILL after the grace period, and a reap.
 *
 * Does not: generate load or compute latency metrics (loadgen/ does),
 * compute statistics (stats/ does), print, or exit.  Not thread-safe.
 */
#ifndef ATB_ENGINE_H
#define ATB_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "atb/loadgen.h"
#include "atb/measure.h"
#include "atb/status.h"

struct atb_store;
struct atb_protocol;

/* Gate ids of engine measurements (stored as "gate:<id>"). */
#define ATB_GATE_ENGINE_START "engine_start"     /* exited at start, never ready, port taken */
#define ATB_GATE_ENGINE_DIED "engine_died"       /* died while measured */
#define ATB_GATE_ENGINE_ERRORS "engine_errors"   /* requests failed (HTTP 4xx/5xx, resets) */
#define ATB_GATE_OUTPUT_EQUIVALENCE "output_equivalence"
#define ATB_GATE_CLIENT_LAG "client_lag"         /* the client, not the engine, was measured */
/* baseline's own failures are not the candidate's: */
#define ATB_GATE_ENGINE_BASELINE "engine_baseline"

#define ATB_ENGINE_MAX_FLAGS 64
#define ATB_ENGINE_MAX_VALUES 32
#define ATB_ENGINE_NAME_MAX 64
#define ATB_ENGINE_VALUE_MAX 256

enum atb_engine_type {
	ATB_ENGINE_BOOL = 0,
	ATB_ENGINE_INT = 1,
	ATB_ENGINE_FLOAT = 2,
	ATB_ENGINE_ENUM = 3,
	ATB_ENGINE_STRING = 4,
};

enum atb_engine_render {
	ATB_RENDER_VALUE = 0,     /* --flag VALUE */
	ATB_RENDER_EQUALS = 1,    /* --flag=VALUE */
	ATB_RENDER_SWITCH = 2,    /* --flag when true, nothing when false */
	ATB_RENDER_BOOL_PAIR = 3, /* --flag / negative */
	ATB_RENDER_LIST = 4,      /* --flag V1 V2 ... (split on spaces) */
	ATB_RENDER_JSON = 5,      /* member `json_key` of the JSON flag `json_cli` */
};

struct atb_engine_flag {
	char *name;               /* [a-z0-9_]+ */
	char *cli;                /* NULL for a JSON member */
	char *negative;           /* bool_pair only */
	enum atb_engine_type type;
	enum atb_engine_render render;
	char *json_cli;           /* ATB_RENDER_JSON: the JSON flag */
	char *json_key;
	int as_int_list;          /* JSON member: "1 2 4" -> [1,2,4] */
	int has_range;            /* int/float: min..max */
	double min, max;
	int log;                  /* sample the range log-uniformly */
	char **values;            /* discrete domain (enum; optional otherwise) */
	size_t nvalues;
	char *default_text;       /* the engine's own default; NULL: unknown */
};

struct atb_engine_json_flag {
	char *cli;
	char *fixed_json;         /* canonical JSON object text */
};

struct atb_engine_spec {
	char *path;
	char *name;
	char **argv;              /* the launch template */
	size_t argc;
	char **env;               /* "NAME=value" templates */
	size_t nenv;
	char *ready_path;
	double ready_timeout_s;
	int ready_interval_ms;
	char *completions_path;
	char *chat_path;
	char *metrics_path;       /* NULL: none */
	char **counters;
	size_t ncounters;
	double grace_s;
	struct atb_engine_json_flag *json_flags;
	size_t njson_flags;
	struct atb_engine_flag *flags;
	size_t nflags;
	int run_here;
};

/*
 * Load and check an engine spec.  Caller owns *out (atb_engine_spec_free);
 * NULL on failure.  Errors: ATB_ERR_NOT_FOUND, ATB_ERR_IO, ATB_ERR_PARSE
 * (malformed YAML), ATB_ERR_SCHEMA (unknown key, wrong type, bad value,
 * unknown placeholder), each with file:line:column, field and value;
 * ATB_ERR_NOMEM.
 */
enum atb_status atb_engine_spec_load(const char *path, struct atb_engine_spec **out,
				     struct atb_error *err);
void atb_engine_spec_free(struct atb_engine_spec *spec);
/* The flag called name, or NULL. */
const struct atb_engine_flag *atb_engine_spec_flag(const struct atb_engine_spec *spec,
						   const char *name);

/* A configuration: values for some of the spec's flags, in spec order. */
struct atb_engine_setting {
	char name[ATB_ENGINE_NAME_MAX];
	char value[ATB_ENGINE_VALUE_MAX];
};
struct atb_engine_config {
	size_t n;                 /* 0: the engine's default configuration */
	struct atb_engine_setting set[ATB_ENGINE_MAX_FLAGS];
};

/*
 * Parse "name=value,name=value" (text "" or "default": the default
 * configuration) against spec: every name a flag, every value in its type
 * and domain (an int/float range admits any value inside; a value list
 * only its members; bool is true/false), no name twice.  Values are
 * normalized (bools "true"/"false") and sorted into spec order.  A value
 * containing a comma cannot be given here.  ATB_ERR_USAGE naming the pair.
 */
enum atb_status atb_engine_config_parse(const struct atb_engine_spec *spec, const char *text,
					struct atb_engine_config *out, struct atb_error *err);

/* The configuration as canonical JSON {"name":"value",...}; caller owns *out. */
enum atb_status atb_engine_config_json(const struct atb_engine_config *c, char **out,
				       struct atb_error *err);

/* An engine task (docs/engine-spec.md). */
struct atb_engine_task {
	char *path;               /* absolute */
	char *dir;
	char *name;
	struct atb_engine_spec *spec;
	char *model;              /* template */
	char **extra_args;
	size_t nextra_args;
	char *workload_json;      /* the workload section, canonical JSON */
	/* The workload as the load generator's configuration (url, seed and,
	   when warmup_set is 0, warmup filled in per arm); strings owned. */
	struct atb_loadgen_config workload;
	int warmup_set;           /* 0: the protocol's engine.warmup_requests */
	char *probe_api;          /* "completions" | "chat" */
	int probe_max_tokens;
	char **probes;
	size_t nprobes;
	char **search;            /* flag names a search may change */
	size_t nsearch;
	char *description;        /* NULL when the task has none */
	/* `cpus: [N, ...]`: the CPUs every engine of the task is pinned to
	   (sched_setaffinity in the child, before exec; each an integer in
	   [0, ATB_ENGINE_MAX_CPU], none twice); NULL and 0: not pinned. */
	int *cpus;
	size_t ncpus;
};

#define ATB_ENGINE_MAX_CPU 1023

/*
 * True when path is a YAML file whose top-level "kind" is "engine".  Never
 * fails: an unreadable or malformed file is not an engine task (the kernel
 * task loader then reports it).
 */
int atb_engine_task_detect(const char *path);

/*
 * Find an engine task given as a path (see atb_engine_task_detect) or as a
 * bundled task's name: home/tasks/NAME/engine.yaml or .../task.yaml with
 * kind: engine (home NULL: atb_home()).  Writes the path into path
 * (size bytes) and returns 1 when found; 0 otherwise.
 */
int atb_engine_task_find(const char *home, const char *name, char *path, size_t size);

/*
 * Names of the bundled engine tasks: folders under home/tasks/ (home
 * NULL: atb_home()) holding an engine.yaml or a task.yaml of kind engine
 * (see atb_engine_task_find), sorted.  Caller owns *names and each string
 * (atb_engine_task_list_free); *names NULL and *n 0 when none or on
 * failure.  A missing tasks folder is no task, not an error.
 * ATB_ERR_IO (the folder cannot be read), ATB_ERR_NOMEM.
 */
enum atb_status atb_engine_task_list(const char *home, char ***names, size_t *n,
				     struct atb_error *err);
void atb_engine_task_list_free(char **names, size_t n);

/*
 * Load an engine task and its spec: engine is engines/<name>.yaml under
 * home (NULL: atb_home()) or a path ending in .yaml relative to the task's
 * folder.  Caller owns *out (atb_engine_task_free).  Errors as
 * atb_engine_spec_load, for either file.
 */
enum atb_status atb_engine_task_load(const char *home, const char *path,
				     struct atb_engine_task **out, struct atb_error *err);
void atb_engine_task_free(struct atb_engine_task *t);

/*
 * The task's cpus as a new JSON array of integers (jansson; caller owns
 * it), or JSON null when the task pins nothing; NULL when out of memory.
 * What the store keeps as engine_cpus and `atb engine show --json` prints.
 */
struct json_t *atb_engine_task_cpus_json(const struct atb_engine_task *t);

/*
 * The full command line for config: the spec's argv, the task's
 * extra_args, then the configuration's flags (plain flags in spec order,
 * then each JSON flag once), placeholders expanded with model, host, port
 * and run_dir.  Caller owns *argv (atb_engine_argv_free).  ATB_ERR_USAGE
 * for an unset {env:NAME} or a bad value; ATB_ERR_NOMEM.
 */
enum atb_status atb_engine_render(const struct atb_engine_task *t,
				  const struct atb_engine_config *config, int port,
				  const char *run_dir, char ***argv, size_t *argc,
				  struct atb_error *err);
void atb_engine_argv_free(char **argv, size_t argc);

/*
 * The first n proposals of the seeded random search into out[0..n-1]:
 * out[0] the default configuration (the baseline measured against itself
 * is never proposed: out[0] is a no-op candidate that only checks the
 * harness), out[k] a draw over the task's search flags on gsl mt19937
 * seeded with seed.  Each search flag is left at the engine's default
 * with probability 1/2, otherwise drawn from its domain (a value list
 * uniformly; a range uniformly or log-uniformly, ints rounded).
 */
enum atb_status atb_engine_proposals(const struct atb_engine_task *t, int64_t seed, size_t n,
				     struct atb_engine_config *out, struct atb_error *err);

/* ---- lifecycle ---- */

struct atb_engine_proc;

/*
 * Check a proposal c against task t's search space, the check every
 * configuration of atb run passes before it is measured (the random
 * proposer's draws and a model's replies alike): each setting names a flag
 * of the spec that is among the task's search flags, no flag twice, and
 * its value lies inside the flag's type and domain (atb_engine_config_parse's
 * rule).  Values are normalized in place (bools "true"/"false", a number
 * of a value list in its listed spelling: 2 and 2.0 are one configuration)
 * and sorted into spec order.  ATB_ERR_USAGE naming the flag and value.
 */
enum atb_status atb_engine_config_check(const struct atb_engine_task *t,
					struct atb_engine_config *c, struct atb_error *err);

/*
 * A configuration from a JSON object {"FLAG": VALUE, ...} (VALUE a string,
 * an integer, a number or a boolean; null or an absent flag: the engine's
 * default), then atb_engine_config_check.  ATB_ERR_USAGE naming the flag
 * and value (an unknown flag, a flag outside the search, a wrong type, a
 * value outside the domain); out is then unspecified.
 */
enum atb_status atb_engine_config_from_json(const struct atb_engine_task *t,
					    const struct json_t *obj,
					    struct atb_engine_config *out, struct atb_error *err);

/*
 * Spawn the engine for config in its own process group on a free loopback
 * port (found by binding port 0; an engine that then reports the port
 * taken is a start failure saying so), stdout and stderr in
 * run_dir/engine.stdout and run_dir/engine.stderr (run_dir must exist),
 * pinned to the task's cpus when it names some (a CPU the box lacks or
 * refuses: the engine's log says "atb: cannot pin engine to cpus ..." and
 * it is a start failure, exit status 126),
 * and wait until GET ready_path answers 200 or the spec's timeout.  On a
 * start failure returns ATB_ERR_CHECK with why in err->msg ("engine exited
 * with status 2 at start: <log tail>", "engine not ready after 5 s",
 * "port 4312 already taken: <log tail>") and *out NULL, the process group
 * stopped and reaped.  Caller owns *out (atb_engine_stop).
 */
enum atb_status atb_engine_start(const struct atb_engine_task *t,
				 const struct atb_engine_config *config, const char *run_dir,
				 struct atb_engine_proc **out, struct atb_error *err);

/* "http://127.0.0.1:PORT" of a started engine. */
const char *atb_engine_base_url(const struct atb_engine_proc *p);
pid_t atb_engine_pid(const struct atb_engine_proc *p);

/*
 * Whether the engine still runs (waitpid WNOHANG); when it died, why
 * (exit status or signal and the log's tail) goes into why.
 */
int atb_engine_alive(struct atb_engine_proc *p, char *why, size_t why_size);

/* The last bytes of the engine's stderr (then stdout), one line, into buf. */
void atb_engine_log_tail(const struct atb_engine_proc *p, char *buf, size_t size);

/*
 * SIGTERM to the process group, SIGKILL after the spec's grace period,
 * reap, free p.  p may be NULL.
 */
void atb_engine_stop(struct atb_engine_proc *p);

/* ---- probes and output equivalence ---- */

struct atb_engine_probe_out {
	char *text;               /* owned */
	long completion_tokens;   /* from usage; -1 when absent */
	char finish_reason[32];
	long http_status;         /* 0: no response */
};

struct atb_engine_probe_set {
	struct atb_engine_probe_out *out;
	size_t n;
};

/*
 * Greedy generations of every probe prompt (temperature 0, the task's
 * max_tokens, no ignore_eos, one at a time) from a started engine.
 * Failed requests are recorded (http_status, finish_reason "error"), not
 * returned as errors; ATB_ERR_NOMEM only.  Release with
 * atb_engine_probe_release.
 */
enum atb_status atb_engine_probe(struct atb_engine_proc *p, const struct atb_engine_task *t,
				 struct atb_engine_probe_set *out, struct atb_error *err);
void atb_engine_probe_release(struct atb_engine_probe_set *s);

/*
 * The output-equivalence gate (PROTO: engine.output_equivalence,
 * greedy_token_exact): every probe's text and completion-token count and
 * finish_reason must match the baseline's.  Returns 1 when they all do;
 * else 0 with the first difference in why (probe index, what differs:
 * "stops early", "pads", "text differs at byte N", finish reasons and
 * lengths), and a summary of the finish_reason distributions.
 */
int atb_engine_equivalent(const struct atb_engine_probe_set *baseline,
			  const struct atb_engine_probe_set *candidate, char *why,
			  size_t why_size);

/* ---- the paired A/B ---- */

struct atb_engine_ab_opts {
	const char *work_dir;      /* arms' folders go here; must exist */
	uint64_t seed_base;        /* seeds are seed_base, seed_base+1, ... */
	size_t nseeds;             /* 0: the protocol's stats.min_paired_seeds */
	const char *candidate_label; /* stored as the result's candidate; NULL: the config */
	const char *box_fingerprint; /* registered box; NULL: probed and registered here */
	void (*progress)(void *ctx, const char *phase);
	void *progress_ctx;
	/* fault injection for tests: busy-wait this long before each dispatch
	   of the baseline [0] or the candidate [1] arm, on top of the
	   workload's test_dispatch_delay_ns (a client lagging in one arm) */
	int64_t test_dispatch_delay_ns[2];
};

/*
 * Measure config against the engine's default configuration on the paired
 * seeds, under p, and record the outcome in store (PROTO: engine.*).
 * Per seed (order ABBA over consecutive seeds, engine.paired_order), each
 * arm on a fresh engine (engine.fresh_engine_per_arm): start, probes on
 * every start (output equivalence against the default configuration's
 * first probes), warm-up requests (engine.warmup_requests, excluded), the
 * seed's workload with the engine watched (waitpid) on every turn of the
 * load generator's loop; the per-seed value is requests/s.  Gates, each a
 * rejection "gate:<id>": engine_baseline (the default configuration itself
 * failed, or its outputs differ across restarts: not the candidate's
 * fault), engine_start, output_equivalence, engine_died (the load stopped
 * at once), engine_errors (failures counted by category), client_lag
 * (engine.client_lag from protocol version 6: an arm's lag share of the
 * load over max_share, or the arms' shares apart by more than
 * max_arm_difference; before it engine.max_dispatch_lag_ms on the p99), noise (cv over the cap after the first run
 * and at most 2 re-runs, PROTO: stats.cv_cap; out->attempts says how many),
 * then the store's validator (kind "engine", unit "req/s").  A noise re-run
 * measures BOTH arms of every seed again, back to back in the seed's paired
 * order, so every stored pair is two measurements adjacent in time from one
 * attempt; only the last attempt's pairs are the result's samples, each
 * sample's trial being its attempt (0: first run, k: re-run k).  Returns
 * ATB_OK whenever the outcome was recorded (out->verdict says which).
 *
 * The stored result's stats object (read back with atb_store_result_stats)
 * holds: "requests_per_s" {"ratio", "ci_low", "ci_high", "p_value",
 * "baseline_median", "candidate_median"} (ratio candidate / default, > 1
 * faster; medians over the seeds in req/s), "latency" {NAME: {"ratio",
 * "ci_low", "ci_high", "p_value"}} for ttft_median_ms, tpot_median_ms,
 * e2e_median_ms and e2e_p99_ms (ratio default / candidate, > 1 faster; a
 * metric absent when some seed lacks it), "per_seed" (each arm's figures per
 * seed, with "attempt" (1-based), "order" (the arm's position among the
 * job's measurements; a seed's two arms are consecutive) and
 * "load_start_ns"/"load_end_ns" (wall clock)), "counters" (the spec's
 * metric counters differenced, per arm, of the last attempt), "config",
 * "engine", "verdict", "attempts", "rerun_arms" ("both") and "reruns" (per
 * re-run: the cvs that caused it, "side": "both", and "replaced": the
 * earlier attempt's per_seed entries).  out->note holds
 * the latency ratios as one line of text, for people; programs read stats.
 */
enum atb_status atb_engine_ab(struct atb_store *store, const struct atb_protocol *p,
			      const struct atb_engine_task *t,
			      const struct atb_engine_config *config,
			      const struct atb_engine_ab_opts *opts,
			      struct atb_measure_outcome *out, struct atb_error *err);

#endif
