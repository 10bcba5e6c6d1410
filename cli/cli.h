/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The atb command line: one cmd_<name>() per command, dispatched from the
 * table in atb.c (git's builtin/).  Commands use only the public API, print,
 * and map statuses to exit codes:
 *   0  success
 *   1  a check or verification found a problem (verify, db check)
 *   2  bad input or usage (malformed file, unknown option, refused ingest)
 *   3  a runtime failure (store, i/o, system)
 *   4  an internal error (a bug)
 */
#ifndef ATB_CLI_H
#define ATB_CLI_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "atb/atb.h"

enum { CLI_OK = 0, CLI_CHECK_FAILED = 1, CLI_USAGE = 2, CLI_RUNTIME = 3, CLI_INTERNAL = 4 };

struct cli_ctx {
	const char *db_path;  /* --db, $ATB_DB, or "atb.db" */
	int json;             /* --json given before the command */
};

struct cli_command {
	const char *name;
	int (*fn)(int argc, char **argv, struct cli_ctx *ctx);
	const char *summary;
};

/* Exit code for a status. */
int cli_exit_code(enum atb_status s);

/* Print "atb: <formatted error>" to stderr; return cli_exit_code(err->status). */
int cli_fail(const struct atb_error *err);

/* Print "atb <cmd>: <message>" and the usage hint to stderr; return CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* True when argv[1..] holds -h or --help (before any "--"). */
int cli_wants_help(int argc, char **argv);

/* The commands. */
int cmd_protocol(int argc, char **argv, struct cli_ctx *ctx);
int cmd_db(int argc, char **argv, struct cli_ctx *ctx);
int cmd_audit(int argc, char **argv, struct cli_ctx *ctx);
int cmd_box(int argc, char **argv, struct cli_ctx *ctx);
int cmd_task(int argc, char **argv, struct cli_ctx *ctx);
int cmd_measure(int argc, char **argv, struct cli_ctx *ctx);
int cmd_submit(int argc, char **argv, struct cli_ctx *ctx);
int cmd_serve(int argc, char **argv, struct cli_ctx *ctx);

struct atb_store;
struct atb_protocol;
struct atb_task;
struct atb_box;
struct atb_measure_opts;
struct atb_measure_outcome;
struct atb_knob_assignment;
struct json_t;

/*
 * atb measure's one path with a caller's hooks (atb submit): the same
 * options, task and candidate checks, store, protocol, box, gates and
 * verdict.  help replaces measure's --help text; json forces --json.
 * before runs once everything is ready and nothing is measured yet
 * (task_arg is TASK as given); it may set o's seeds, naive and label, and
 * returns 0 to go on or an exit code (its message printed).  after runs
 * with the recorded outcome; it may set *extra to an object whose fields
 * join the JSON verdict (freed by the caller), and returns 0 or an exit
 * code (its message printed; the verdict is printed either way).
 */
struct cli_measure_hook {
	const char *help;
	int json;
	int (*before)(void *arg, struct atb_store *s, const struct atb_protocol *p,
		      const struct atb_task *task, const char *task_arg, const struct atb_box *box,
		      struct atb_measure_opts *o);
	int (*after)(void *arg, struct atb_store *s, const struct atb_protocol *p,
		     const struct atb_knob_assignment *knobs, const struct atb_measure_outcome *out,
		     struct json_t **extra);
	void *arg;
};

int cli_measure(int argc, char **argv, struct cli_ctx *ctx, const struct cli_measure_hook *h);
int cmd_review(int argc, char **argv, struct cli_ctx *ctx);
int cmd_run(int argc, char **argv, struct cli_ctx *ctx);
int cmd_report(int argc, char **argv, struct cli_ctx *ctx);
/* "42s", "3m05s", "1h02m"; "?" when s < 0 (an ETA not known yet). */
void cli_fmt_duration(char *buf, size_t size, double s);
/* Parse an integer option value in [lo, hi]; 0, or the usage error of
   command cmd (printed) naming the option and its value. */
int cli_parse_int(const char *cmd, const char *opt, const char *v, int64_t lo, int64_t hi,
		  int64_t *out);
struct json_t;

/*
 * Print v (taken: freed here) on stdout as JSON, keys sorted, indented by
 * two, then a newline.  v NULL or no memory: "atb CMD: out of memory" on
 * stderr and CLI_RUNTIME; else CLI_OK.
 */
int cli_print_json(const char *cmd, struct json_t *v);

/*
 * Before anything is built, run or stored for work that needs a GPU: is
 * there a CUDA driver to load (libcuda.so.1, as atb-runner loads it)?  When
 * not, print "atb CMD: WHAT needs a CUDA driver ..." with the loader's
 * reason and return CLI_USAGE; else CLI_OK.  Only the library is opened
 * (and closed): no cuInit in atb's own process.
 */
int cli_need_cuda_driver(const char *cmd, const char *what);

/*
 * Ctrl-C and SIGTERM during a long command (atb run, atb suite): from
 * cli_stop_catch() until cli_stop_restore() either signal only sets the
 * returned flag, which the library call polls (its opts' stop) to stop
 * after the work in progress; the old handlers come back on restore.
 */
volatile sig_atomic_t *cli_stop_catch(void);
void cli_stop_restore(void);

/*
 * The progress line of a long command (cli/progress.c), on stderr:
 *   UNIT K/N[ NAME]  phase PHASE  TAIL  eta E
 * with "outcome OUTCOME" ("-" when NULL) in place of the phase once the
 * item's phase is "done".  On a terminal every call redraws the line in
 * place ("\r...\033[K"); elsewhere finished items are written, one line
 * each, and an unfinished one when $ATB_PROGRESS_INTERVAL_S seconds (30)
 * have passed since the last line.  Nothing when quiet.
 */
struct cli_progress {
	int tty;     /* stderr is a terminal (cli_progress_init) */
	int quiet;   /* --quiet */
	int drawn;   /* a line is left on the terminal: cli_progress_end ends it */
	double interval_s, last_s;  /* off a terminal: seconds between lines, the last */
};

struct cli_progress_line {
	const char *unit;      /* "iter", "task" */
	int64_t k, n;          /* item k (from 1) of n */
	const char *name;      /* the item's name after K/N; NULL: none */
	const char *phase;     /* the phase in progress, or "done" */
	const char *outcome;   /* a finished item's outcome */
	const char *tail;      /* the command's own part ("best ...  usable 2/3") */
	double eta_s;          /* < 0: not known yet ("?") */
};

void cli_progress_init(struct cli_progress *p, int quiet);
void cli_progress_draw(struct cli_progress *p, const struct cli_progress_line *l);
/* A line of its own (a re-run and why, a refusal's numbers), on a terminal
   too, in place of the line drawn there (the next draw redraws it). */
void cli_progress_note(struct cli_progress *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* A newline after a line left on the terminal, so what follows starts clean. */
void cli_progress_end(struct cli_progress *p);

int cmd_suite(int argc, char **argv, struct cli_ctx *ctx);
int cmd_calibrate(int argc, char **argv, struct cli_ctx *ctx);
int cmd_loadgen(int argc, char **argv, struct cli_ctx *ctx);
int cmd_engine(int argc, char **argv, struct cli_ctx *ctx);
int cmd_llm(int argc, char **argv, struct cli_ctx *ctx);

#endif
