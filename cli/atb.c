/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb: main, global options and the command table.  Adding a command is one
 * file (cmd_<name>.c) and one row here.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "atb/alloc.h"
#include "cli.h"
#include "banned.h"

void cli_fmt_duration(char *buf, size_t size, double s)
{
	if (s < 0)
		snprintf(buf, size, "?");
	else if (s < 60)
		snprintf(buf, size, "%.0fs", s);
	else if (s < 3600)
		snprintf(buf, size, "%dm%02ds", (int)(s / 60), (int)s % 60);
	else
		snprintf(buf, size, "%dh%02dm", (int)(s / 3600), ((int)s % 3600) / 60);
}

int cli_parse_int(const char *cmd, const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
	char *end = NULL;
	long long x;

	errno = 0;
	x = strtoll(v, &end, 10);
	if (!*v || *end || errno || x < lo || x > hi)
		return cli_usage_error(cmd, "bad %s '%s': expected an integer from %" PRId64
				       " to %" PRId64, opt, v, lo, hi);
	*out = x;
	return 0;
}

int cli_print_json(const char *cmd, json_t *v)
{
	char *s = v ? json_dumps(v, JSON_SORT_KEYS | JSON_INDENT(2)) : NULL;

	json_decref(v);
	if (!s) {
		fprintf(stderr, "atb %s: out of memory\n", cmd);
		return CLI_RUNTIME;
	}
	printf("%s\n", s);
	atb_free(s);
	return CLI_OK;
}

int cli_need_cuda_driver(const char *cmd, const char *what)
{
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
	const char *e;

	if (h) {
		dlclose(h);
		return CLI_OK;
	}
	e = dlerror();
	fprintf(stderr, "atb %s: %s needs a CUDA driver, and this box has none (cannot load "
		"'libcuda.so.1': %s); nothing was run or stored\n", cmd, what, e ? e : "unknown error");
	return CLI_USAGE;
}

/* ---- Ctrl-C and SIGTERM for long commands (one per process) ---- */

static volatile sig_atomic_t stop_flag;
static struct sigaction old_int, old_term;

/*
 * The first signal asks the command to stop after the measurement in
 * progress (it may take minutes under load) and says so; a second one
 * stops at once by the signal's default action: that work is lost, as with
 * SIGKILL, and the store stays consistent (every finished item is its own
 * transaction; the runner's sandbox dies with its parent).
 */
static void on_stop_signal(int sig)
{
	static const char first[] =
		"\natb: stopping after the work in progress; "
		"Ctrl-C or SIGTERM again stops now\n";
	static const char again[] = "\natb: stopping now: the work in progress is lost\n";
	struct sigaction dfl;
	ssize_t w;

	if (!stop_flag) {
		stop_flag = 1;
		w = write(STDERR_FILENO, first, sizeof(first) - 1);
		(void)w;
		return;
	}
	w = write(STDERR_FILENO, again, sizeof(again) - 1);
	(void)w;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	raise(sig);
}

volatile sig_atomic_t *cli_stop_catch(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	return &stop_flag;
}

void cli_stop_restore(void)
{
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
}

/*
 * PROTO: timing.isolation, timing.round_trip -- the debugging overrides of
 * where a cpu task's arms run and what of their round trip is taken out:
 * a command that measures says, once, that what it measures is not measured
 * as the protocol says.
 */
static void warn_overrides(const char *cmd)
{
	/* (atb measure and atb submit report it per outcome: their deviation) */
	static const char *const measuring[] = {"run", "suite", "calibrate", "serve"};
	static const char *const vars[] = {"ATB_ISOLATION", "ATB_ROUND_TRIP"};
	size_t i, k;

	for (i = 0; i < sizeof(measuring) / sizeof(measuring[0]); i++)
		if (!strcmp(cmd, measuring[i]))
			break;
	if (i == sizeof(measuring) / sizeof(measuring[0]))
		return;
	for (k = 0; k < sizeof(vars) / sizeof(vars[0]); k++)
		if (getenv(vars[k]))
			fprintf(stderr,
				"atb %s: warning: %s=%.40s overrides the protocol: cpu tasks are "
				"not measured as its version says (the stored stats say how they "
				"were: runner.isolation, runner.round_trip)\n",
				cmd, vars[k], getenv(vars[k]));
}

static const struct cli_command commands[] = {
	{"protocol", cmd_protocol, "show, digest and verify the frozen protocol"},
	{"db", cmd_db, "create and check the results store"},
	{"audit", cmd_audit, "show and verify the audit chain"},
	{"box", cmd_box, "show this machine's fingerprint"},
	{"task", cmd_task, "list, show and check bundled tasks"},
	{"measure", cmd_measure, "measure a candidate through every gate into the store"},
	{"submit", cmd_submit, "hand in a candidate (for a task or an agent run), get the verdict as JSON"},
	{"serve", cmd_serve, "agent-tool server: JSON-RPC 2.0 (MCP tools) over stdin/stdout"},
	{"review", cmd_review, "admit or reject a quarantined result"},
	{"run", cmd_run, "the tuning loop: propose, measure, keep the best; --resume"},
	{"report", cmd_report, "a run's trajectory, honest and naive speedups, gates"},
	{"calibrate", cmd_calibrate, "A/A self-test: copies of each baseline must read 1.00x"},
	{"suite", cmd_suite, "a KernelBench-format task set against the protocol's bars; --resume"},
	{"engine", cmd_engine, "serving engines: specs, command lines, paired configuration A/B"},
	{"loadgen", cmd_loadgen, "load an OpenAI-compatible server with a seeded workload"},
	{"llm", cmd_llm, "model calls: ping, call, replay, a run's call audit and alarms"},
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *out)
{
	size_t i;

	fprintf(out,
		"usage: atb [--db PATH] [--json] COMMAND [ARGS...] [--db PATH] [--json]\n"
		"       atb COMMAND --help\n"
		"\n"
		"atb decides whether a kernel or engine configuration is really faster\n"
		"than the honest baseline, under a frozen protocol, and records only\n"
		"results that pass every gate.\n"
		"\n"
		"commands:\n");
	for (i = 0; i < NCOMMANDS; i++)
		fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(out,
		"\n"
		"global options (before or after the command):\n"
		"  --db PATH   the results store (default: $ATB_DB or ./atb.db)\n"
		"  --json      machine-readable output where the command reports\n"
		"  --version   print the version\n"
		"\n"
		"environment: ATB_HOME (folder with protocol/ and tasks/), ATB_DB,\n"
		"ATB_PROGRESS_INTERVAL_S (seconds between progress lines of a long\n"
		"command when stderr is not a terminal; default 30)\n"
		"exit codes: 0 ok, 1 check failed, 2 bad input or usage, 3 runtime\n"
		"failure, 4 internal error\n");
}

int cli_exit_code(enum atb_status s)
{
	switch (ATB_PRIMARY(s)) {
	case ATB_OK:
		return CLI_OK;
	case ATB_ERR_PARSE:
	case ATB_ERR_SCHEMA:
	case ATB_ERR_PROTOCOL:
	case ATB_ERR_USAGE:
	case ATB_ERR_REJECTED:
	case ATB_ERR_NOT_FOUND:
	case ATB_ERR_NOT_A_STORE:
	case ATB_ERR_STORE_NEWER:
		return CLI_USAGE;
	case ATB_ERR_AUDIT:
	case ATB_ERR_CHECK:
	case ATB_ERR_BUILD:
	case ATB_ERR_INFRA_DEFECT:
		return CLI_CHECK_FAILED;
	case ATB_ERR_INTERNAL:
		return CLI_INTERNAL;
	default:
		return CLI_RUNTIME;
	}
}

int cli_fail(const struct atb_error *err)
{
	char buf[2048];

	atb_error_format(err, buf, sizeof(buf));
	fprintf(stderr, "atb: %s\n", buf);
	return cli_exit_code(err->status);
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "atb %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nsee 'atb %s --help'\n", cmd);
	return CLI_USAGE;
}

int cli_wants_help(int argc, char **argv)
{
	int i;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--"))
			return 0;
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return 1;
	}
	return 0;
}

/*
 * The global options after the command ('atb measure T C --db X' is
 * 'atb --db X measure T C'): --db PATH, --db=PATH and --json are taken out
 * of argv[1..] (up to a "--"), the rest moved down in order.  Returns the
 * new argc, or -1 (the usage error printed) for a --db without its value.
 * A later --db wins, as with options given twice before the command.
 */
static int take_global_options(int argc, char **argv, struct cli_ctx *ctx)
{
	int i, n = 1, rest = 0;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (rest || !strcmp(a, "--")) {
			rest = 1;
			argv[n++] = argv[i];
		} else if (!strcmp(a, "--db")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "atb %s: option '--db' needs a value (the store's path)\n",
					argv[0]);
				return -1;
			}
			ctx->db_path = argv[++i];
		} else if (!strncmp(a, "--db=", 5)) {
			ctx->db_path = a + 5;
		} else if (!strcmp(a, "--json")) {
			ctx->json = 1;
		} else {
			argv[n++] = argv[i];
		}
	}
	argv[n] = NULL;
	return n;
}

int main(int argc, char **argv)
{
	struct cli_ctx ctx = {0};
	size_t i;
	int ai = 1;

	ctx.db_path = atb_default_db_path();
	while (ai < argc && argv[ai][0] == '-') {
		const char *a = argv[ai];

		if (!strcmp(a, "--db") && ai + 1 < argc) {
			ctx.db_path = argv[ai + 1];
			ai += 2;
		} else if (!strncmp(a, "--db=", 5)) {
			ctx.db_path = a + 5;
			ai++;
		} else if (!strcmp(a, "--json")) {
			ctx.json = 1;
			ai++;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return CLI_OK;
		} else if (!strcmp(a, "--version")) {
			printf("atb %s\n", atb_version());
			return CLI_OK;
		} else {
			fprintf(stderr, "atb: unknown option '%s'\n", a);
			usage(stderr);
			return CLI_USAGE;
		}
	}
	if (ai >= argc) {
		usage(stderr);
		return CLI_USAGE;
	}
	if (!strcmp(argv[ai], "help")) {
		if (ai + 1 < argc) {
			char *hargv[3] = {argv[ai + 1], "--help", NULL};

			for (i = 0; i < NCOMMANDS; i++)
				if (!strcmp(commands[i].name, argv[ai + 1]))
					return commands[i].fn(2, hargv, &ctx);
		}
		usage(stdout);
		return CLI_OK;
	}
	for (i = 0; i < NCOMMANDS; i++)
		if (!strcmp(commands[i].name, argv[ai])) {
			int n = take_global_options(argc - ai, argv + ai, &ctx);

			if (n >= 0)
				warn_overrides(commands[i].name);
			return n < 0 ? CLI_USAGE : commands[i].fn(n, argv + ai, &ctx);
		}
	fprintf(stderr, "atb: '%s' is not an atb command; see 'atb --help'\n", argv[ai]);
	return CLI_USAGE;
}
