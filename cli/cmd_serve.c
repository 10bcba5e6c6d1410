/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb serve --stdio: atb as a tool for agent frameworks.  A JSON-RPC 2.0
 * server over stdin and stdout in the shape of the Model Context
 * Protocol's stdio transport (one JSON message a line, UTF-8, no embedded
 * newline): initialize, ping, tools/list and tools/call, with the tools
 * list_tasks, show_task, submit_candidate, get_verdict and get_history.
 *
 * Every judgement is atb's own command in a child process: a submission
 * is written into a fresh scratch folder with atb llm apply's rules
 * (atb_llm_reply_parse and _write: surface names only, no traversal,
 * symlink, absolute path or oversize file, all or nothing) and handed to
 * `atb submit` (atb measure's one path), so the same gates, audit and
 * static checks apply and nothing a candidate does can reach the server's
 * stdout.  stdout carries protocol messages only; the children's progress
 * and the server's log go to stderr.  Requests are served one at a time.
 *
 * Does not: speak HTTP, send requests of its own to the client, or judge
 * anything itself.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "atb/atb.h"
#include "atb/llm.h"
#include "atb/proc.h"
#include "atb/report.h"
#include "atb/store.h"
#include "atb/task.h"
#include "cli.h"
#include "banned.h"

static const char serve_help[] =
	"usage: atb serve --stdio [--python PATH] [--max-message-bytes N]\n"
	"\n"
	"Serve atb to an agent framework as tools: JSON-RPC 2.0 over stdin and\n"
	"stdout in the shape of the Model Context Protocol's stdio transport\n"
	"(docs/serve.md): one JSON message a line; the methods initialize,\n"
	"ping, tools/list and tools/call (notifications: notifications/\n"
	"initialized, notifications/cancelled).  The tools:\n"
	"  list_tasks        the bundled tasks (atb task list --json)\n"
	"  show_task         one task: atb task show --json, its surface files and\n"
	"                    the text of its baseline and candidate template\n"
	"  submit_candidate  {task, files: {NAME: TEXT}, run?, ...}: the files are\n"
	"                    written into a fresh scratch folder under atb llm\n"
	"                    apply's rules (the task's surface names only: no\n"
	"                    folder, '..', absolute path, symlink, NUL byte, more\n"
	"                    than 16 files or 1 MiB a file; refused whole, nothing\n"
	"                    written) and judged by 'atb submit' (atb measure's\n"
	"                    gates, store and audit chain); the verdict as JSON\n"
	"  get_verdict       {result_id} or {rejection_id}: a stored verdict\n"
	"  get_history       {run}: an agent run's iterations with their verdicts\n"
	"                    (atb report RUN --json)\n"
	"A gate's refusal is a verdict (isError false); a submission that could\n"
	"not be judged (unknown task, refused files, atb failing) is a tool error\n"
	"(isError true, the message as text).  JSON-RPC errors: -32700 parse\n"
	"error (not JSON, not UTF-8), -32600 invalid request (not a request\n"
	"object, a message over the size limit), -32601 method not found,\n"
	"-32602 invalid params (an unknown tool, a missing or mistyped\n"
	"argument; data.field names it).  Batches (JSON arrays) are served.\n"
	"stdout carries protocol messages only; logs and the children's progress\n"
	"go to stderr.  The store is --db PATH, $ATB_DB or ./atb.db.  End of\n"
	"input ends the server.\n"
	"\n"
	"options:\n"
	"  --stdio                  the transport (the only one)\n"
	"  --python PATH            the interpreter with PyTorch for torch tasks\n"
	"                           (passed to atb submit; else $ATB_PYTHON)\n"
	"  --max-message-bytes N    the longest message line (default 33554432);\n"
	"                           a longer one is answered -32600 and skipped\n"
	"  -h, --help               this text\n"
	"\n"
	"exit codes: 0 at end of input; 2 bad usage; 3 stdout cannot be written\n";

/* MCP revisions this server answers in; the first is the newest. */
static const char *const protocol_versions[] = {"2025-06-18", "2025-03-26", "2024-11-05"};

#define SERVE_DEFAULT_MAX_MESSAGE ((size_t)32 << 20)
#define SERVE_ERR_TAIL 4000

enum {
	RPC_PARSE_ERROR = -32700,
	RPC_INVALID_REQUEST = -32600,
	RPC_METHOD_NOT_FOUND = -32601,
	RPC_INVALID_PARAMS = -32602,
	RPC_INTERNAL_ERROR = -32603,
};

struct serve {
	struct cli_ctx *ctx;
	const char *python;
	char self[PATH_MAX];
	size_t max_message;
	int initialized;
};

/* ---- JSON-RPC messages ---- */

static json_t *rpc_error(json_t *id, int code, const char *msg, json_t *data)
{
	json_t *e = json_pack("{s:i, s:s}", "code", code, "message", msg);

	if (e && data)
		json_object_set_new(e, "data", data);
	else
		json_decref(data);
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error",
			 e ? e : json_object());
}

static json_t *rpc_result(json_t *id, json_t *result)
{
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result",
			 result ? result : json_object());
}

/* One message on stdout, one line (jansson escapes newlines inside strings). */
static int send_message(json_t *m)
{
	char *s = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
	int rc = 0;

	if (!s) {
		fprintf(stderr, "atb serve: cannot format a response: out of memory\n");
		return 0;
	}
	if (fputs(s, stdout) == EOF || fputc('\n', stdout) == EOF || fflush(stdout))
		rc = -1;
	atb_free(s);
	return rc;
}

/* ---- tool arguments: one table gives the inputSchema and the checks ---- */

enum arg_type { ARG_STRING, ARG_INTEGER, ARG_BOOLEAN, ARG_FILES, ARG_KNOBS };

struct arg_spec {
	const char *name;
	enum arg_type type;
	int required;
	const char *description;
	const char *const *choices;  /* ARG_STRING: the allowed values, NULL-ended; NULL any */
	int64_t lo, hi;              /* ARG_INTEGER */
};

struct call_error {
	int code;          /* 0: none */
	char msg[600];
	char field[64];
};

static void call_fail(struct call_error *ce, int code, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void call_fail(struct call_error *ce, int code, const char *field, const char *fmt, ...)
{
	va_list ap;

	ce->code = code;
	snprintf(ce->field, sizeof(ce->field), "%s", field ? field : "");
	va_start(ap, fmt);
	vsnprintf(ce->msg, sizeof(ce->msg), fmt, ap);
	va_end(ap);
}

static json_t *arg_schema(const struct arg_spec *args)
{
	json_t *props = json_object(), *req = json_array(), *p;
	const struct arg_spec *a;
	size_t i;

	for (a = args; a && a->name; a++) {
		switch (a->type) {
		case ARG_STRING:
			p = json_pack("{s:s}", "type", "string");
			if (a->choices) {
				json_t *e = json_array();

				for (i = 0; a->choices[i]; i++)
					json_array_append_new(e, json_string(a->choices[i]));
				json_object_set_new(p, "enum", e);
			}
			break;
		case ARG_INTEGER:
			p = json_pack("{s:s, s:I, s:I}", "type", "integer", "minimum",
				      (json_int_t)a->lo, "maximum", (json_int_t)a->hi);
			break;
		case ARG_BOOLEAN:
			p = json_pack("{s:s}", "type", "boolean");
			break;
		case ARG_FILES:
			p = json_pack("{s:s, s:i, s:i, s:{s:s}}", "type", "object", "minProperties", 1,
				      "maxProperties", ATB_LLM_REPLY_MAX_FILES,
				      "additionalProperties", "type", "string");
			break;
		default:
			p = json_pack("{s:s, s:{s:s}}", "type", "object", "additionalProperties",
				      "type", "string");
			break;
		}
		json_object_set_new(p, "description", json_string(a->description));
		json_object_set_new(props, a->name, p);
		if (a->required)
			json_array_append_new(req, json_string(a->name));
	}
	return json_pack("{s:s, s:o, s:o, s:b}", "type", "object", "properties", props, "required",
			 req, "additionalProperties", 0);
}

/* args against the table: -32602 naming the field when they do not fit. */
static int check_args(const struct arg_spec *spec, json_t *args, struct call_error *ce)
{
	const struct arg_spec *a;
	const char *key;
	json_t *v, *x;
	size_t i;

	json_object_foreach(args, key, v) {
		for (a = spec; a && a->name && strcmp(a->name, key); a++)
			;
		if (!a || !a->name) {
			call_fail(ce, RPC_INVALID_PARAMS, key, "unknown argument '%.60s'", key);
			return -1;
		}
	}
	for (a = spec; a && a->name; a++) {
		v = json_object_get(args, a->name);
		if (!v) {
			if (a->required) {
				call_fail(ce, RPC_INVALID_PARAMS, a->name, "missing argument '%s'",
					  a->name);
				return -1;
			}
			continue;
		}
		switch (a->type) {
		case ARG_STRING:
			if (!json_is_string(v)) {
				call_fail(ce, RPC_INVALID_PARAMS, a->name, "argument '%s' must be a "
					  "string", a->name);
				return -1;
			}
			if (!json_string_length(v) || strlen(json_string_value(v)) != json_string_length(v)) {
				call_fail(ce, RPC_INVALID_PARAMS, a->name, "argument '%s' must be a "
					  "non-empty string without NUL bytes", a->name);
				return -1;
			}
			if (a->choices) {
				for (i = 0; a->choices[i] && strcmp(a->choices[i], json_string_value(v)); i++)
					;
				if (!a->choices[i]) {
					call_fail(ce, RPC_INVALID_PARAMS, a->name, "argument '%s' is "
						  "'%.60s', not one of its values", a->name,
						  json_string_value(v));
					return -1;
				}
			}
			break;
		case ARG_INTEGER:
			if (!json_is_integer(v) || json_integer_value(v) < a->lo ||
			    json_integer_value(v) > a->hi) {
				call_fail(ce, RPC_INVALID_PARAMS, a->name, "argument '%s' must be an "
					  "integer from %" PRId64 " to %" PRId64, a->name, a->lo, a->hi);
				return -1;
			}
			break;
		case ARG_BOOLEAN:
			if (!json_is_boolean(v)) {
				call_fail(ce, RPC_INVALID_PARAMS, a->name, "argument '%s' must be true "
					  "or false", a->name);
				return -1;
			}
			break;
		case ARG_FILES:
		case ARG_KNOBS:
			if (!json_is_object(v) || (a->type == ARG_FILES && !json_object_size(v))) {
				call_fail(ce, RPC_INVALID_PARAMS, a->name, "argument '%s' must be an "
					  "object of %s", a->name, a->type == ARG_FILES ?
					  "file names to their text, at least one" : "names to values");
				return -1;
			}
			json_object_foreach(v, key, x)
				if (!json_is_string(x)) {
					call_fail(ce, RPC_INVALID_PARAMS, a->name, "argument '%s': "
						  "'%.60s' must be a string", a->name, key);
					return -1;
				}
			break;
		}
	}
	return 0;
}

/* ---- children: atb's own commands ---- */

static char *read_fd(int fd)
{
	struct stat sb;
	char *buf;
	ssize_t n;
	size_t got = 0;

	if (fstat(fd, &sb) || lseek(fd, 0, SEEK_SET) < 0)
		return NULL;
	buf = atb_malloc((size_t)sb.st_size + 1);
	if (!buf)
		return NULL;
	while (got < (size_t)sb.st_size && (n = read(fd, buf + got, (size_t)sb.st_size - got)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	return buf;
}

static int temp_fd(void)
{
	char path[] = "/tmp/atb-serve-io.XXXXXX";
	int fd = mkstemp(path);

	if (fd >= 0)
		unlink(path);
	return fd;
}

/* The child gets SIGPIPE back: an ignored signal would stay ignored across exec. */
static int child_signals(void *arg)
{
	(void)arg;
	signal(SIGPIPE, SIG_DFL);
	return 0;
}

/*
 * Run `atb --db DB ARGS...` to its end: its stdout into *out (atb_free),
 * its stderr copied to ours (the log) with its tail into tail, its exit
 * code (128 + signal when killed; -1 not run) returned.
 */
static int run_atb(struct serve *S, const char *const *args, char **out, char *tail,
		   size_t tsize)
{
	const char *argv[64];
	struct atb_proc_opts po;
	struct atb_proc p;
	struct atb_error err;
	char *errtext = NULL;
	size_t n = 0, i, len;
	int ofd = temp_fd(), efd = temp_fd(), code = -1;

	*out = NULL;
	tail[0] = '\0';
	argv[n++] = S->self;
	argv[n++] = "--db";
	argv[n++] = S->ctx->db_path;
	for (i = 0; args[i] && n < 63; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	if (ofd < 0 || efd < 0) {
		snprintf(tail, tsize, "cannot make a temporary file: %s", strerror(errno));
		goto out;
	}
	memset(&po, 0, sizeof(po));
	po.death_signal = SIGKILL;   /* the server's end ends its judge */
	po.before_exec = child_signals;
	atb_error_clear(&err);
	if (atb_proc_start_opts(argv, -1, ofd, efd, NULL, &po, &p, &err)) {
		atb_error_format(&err, tail, tsize);
		goto out;
	}
	atb_proc_wait(&p, INT64_MAX);
	atb_proc_reap(&p);
	code = WIFEXITED(p.status) ? WEXITSTATUS(p.status)
				   : WIFSIGNALED(p.status) ? 128 + WTERMSIG(p.status) : -1;
	*out = read_fd(ofd);
	errtext = read_fd(efd);
	if (errtext) {
		len = strlen(errtext);
		fputs(errtext, stderr);
		snprintf(tail, tsize, "%s", len >= tsize ? errtext + len - (tsize - 1) : errtext);
		len = strlen(tail);
		while (len && (tail[len - 1] == '\n' || tail[len - 1] == ' '))
			tail[--len] = '\0';
	}
out:
	atb_free(errtext);
	if (ofd >= 0)
		close(ofd);
	if (efd >= 0)
		close(efd);
	return code;
}

/* ---- tool results ---- */

/* {content: [{type: text, text}], isError}, with structuredContent for an object. */
static json_t *tool_result(json_t *obj, const char *text, int is_error)
{
	json_t *r;
	char *s = NULL;

	if (obj && !text)
		text = s = json_dumps(obj, JSON_INDENT(2) | JSON_SORT_KEYS);
	r = json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text",
		      text ? text : "", "isError", is_error);
	if (r && json_is_object(obj))
		json_object_set(r, "structuredContent", obj);
	json_decref(obj);
	atb_free(s);
	return r;
}

static json_t *tool_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static json_t *tool_error(const char *fmt, ...)
{
	char msg[SERVE_ERR_TAIL + 600];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "atb serve: %s\n", msg);
	return tool_result(NULL, msg, 1);
}

/* A child's JSON object on stdout, or a tool error with its stderr. */
static json_t *child_result(const char *what, int code, char *out, const char *tail,
			    int want_verdict)
{
	json_t *v = out ? json_loads(out, 0, NULL) : NULL;

	atb_free(out);
	if (json_is_object(v) && (!want_verdict || json_object_get(v, "verdict")) &&
	    (code == 0 || (want_verdict && code == CLI_USAGE)))
		return tool_result(v, NULL, 0);
	if (want_verdict && json_is_object(v) && json_object_get(v, "verdict")) {
		/* judged and stored, but the run's iteration was not: both are said */
		char msg[SERVE_ERR_TAIL + 200];

		snprintf(msg, sizeof(msg), "%s failed (exit %d) after its verdict: %s", what, code,
			 tail[0] ? tail : "no message");
		fprintf(stderr, "atb serve: %s\n", msg);
		return tool_result(v, msg, 1);
	}
	json_decref(v);
	return tool_error("%s failed (exit %d): %s", what, code, tail[0] ? tail : "no message");
}

static int task_arg_ok(const char *t, struct call_error *ce)
{
	if (t[0] == '-') {
		call_fail(ce, RPC_INVALID_PARAMS, "task", "argument 'task' is '%.60s': a task "
			  "name or path does not start with '-'", t);
		return -1;
	}
	return 0;
}

static int is_py(const char *t)
{
	size_t n = strlen(t);

	return n > 3 && !strcmp(t + n - 3, ".py");
}

static const struct arg_spec no_args[] = {{NULL, 0, 0, NULL, NULL, 0, 0}};

static json_t *do_list_tasks(struct serve *S, json_t *args, struct call_error *ce)
{
	static const char *const a[] = {"task", "list", "--json", NULL};
	char tail[SERVE_ERR_TAIL], *out;
	int code;

	(void)args;
	(void)ce;
	code = run_atb(S, a, &out, tail, sizeof(tail));
	return child_result("atb task list", code, out, tail, 0);
}

static const struct arg_spec show_args[] = {
	{"task", ARG_STRING, 1, "a bundled task's name (list_tasks), a task folder, or a "
	 "KernelBench-format TASK.py", NULL, 0, 0},
	{NULL, 0, 0, NULL, NULL, 0, 0},
};

/* The text of a task's file, as a source the agent reads; too big or unreadable: skipped. */
static void add_source(json_t *src, const char *name, const char *path)
{
	FILE *f;
	char *buf;
	size_t n;

	if (!name || !path || !(f = fopen(path, "rb")))
		return;
	buf = atb_malloc(ATB_LLM_REPLY_MAX_FILE_BYTES + 1);
	if (buf) {
		n = fread(buf, 1, ATB_LLM_REPLY_MAX_FILE_BYTES + 1, f);
		if (n <= ATB_LLM_REPLY_MAX_FILE_BYTES)
			json_object_set_new(src, name, json_stringn(buf, n));
		atb_free(buf);
	}
	fclose(f);
}

static json_t *do_show_task(struct serve *S, json_t *args, struct call_error *ce)
{
	const char *t = json_string_value(json_object_get(args, "task"));
	const char *a[] = {"task", "show", t, "--json", NULL};
	struct atb_task *task = NULL;
	struct atb_error err;
	char tail[SERVE_ERR_TAIL], *out;
	json_t *v, *surface, *src;
	size_t i;
	int code;

	if (task_arg_ok(t, ce))
		return NULL;
	code = run_atb(S, a, &out, tail, sizeof(tail));
	v = out ? json_loads(out, 0, NULL) : NULL;
	atb_free(out);
	if (code || !json_is_object(v)) {
		json_decref(v);
		return tool_error("atb task show failed (exit %d): %s", code,
				  tail[0] ? tail : "no message");
	}
	surface = json_array();
	src = json_object();
	if (is_py(t)) {
		const char *slash = strrchr(t, '/');

		json_array_append_new(surface, json_string("model_new.py"));
		add_source(src, slash ? slash + 1 : t, t);
	} else {
		atb_error_clear(&err);
		if (!atb_task_open(atb_home(), t, &task, &err)) {
			for (i = 0; i < task->nsurface; i++)
				json_array_append_new(surface, json_string(task->surface[i]));
			add_source(src, task->baseline.file, task->baseline.path);
			if (task->has_naive)
				add_source(src, task->naive.file, task->naive.path);
			add_source(src, task->candidate.file, task->candidate.path);
			atb_task_free(task);
		}
	}
	json_object_set_new(v, "surface", surface);
	json_object_set_new(v, "sources", src);
	return tool_result(v, NULL, 0);
}

static const char *const device_choices[] = {"auto", "cpu", "cuda", NULL};
static const char *const baseline_choices[] = {"eager", "compile", NULL};

static const struct arg_spec submit_args[] = {
	{"task", ARG_STRING, 1, "a bundled task's name, a task folder, or a KernelBench-format "
	 "TASK.py (as atb submit takes it)", NULL, 0, 0},
	{"files", ARG_FILES, 1, "the candidate: each surface file's name (show_task's "
	 "\"surface\"; model_new.py for a torch task) to its full text", NULL, 0, 0},
	{"run", ARG_STRING, 0, "record the outcome as the next iteration of this agent run "
	 "(1-64 of [0-9a-zA-Z-]; a new id starts one)", NULL, 0, 0},
	{"iterations", ARG_INTEGER, 0, "a new run's planned iterations (default 100)", NULL, 1,
	 100000},
	{"knobs", ARG_KNOBS, 0, "knob values {NAME: VALUE} (atb measure --knob)", NULL, 0, 0},
	{"cflags", ARG_STRING, 0, "one of the task's flag choices", NULL, 0, 0},
	{"seeds", ARG_INTEGER, 0, "paired seeds (default: the protocol's minimum)", NULL, 2,
	 1024},
	{"seed_base", ARG_INTEGER, 0, "the first seed (default 1)", NULL, 0, INT64_MAX},
	{"naive", ARG_BOOLEAN, 0, "also time the naive baseline (default: when the task has "
	 "one)", NULL, 0, 0},
	{"label", ARG_STRING, 0, "the candidate's name in the store", NULL, 0, 0},
	{"device", ARG_STRING, 0, "torch tasks: where to run", device_choices, 0, 0},
	{"baseline", ARG_STRING, 0, "torch tasks: also time torch.compile (compile)",
	 baseline_choices, 0, 0},
	{NULL, 0, 0, NULL, NULL, 0, 0},
};

/* The files as atb llm apply takes them, checked against the task's surface. */
static json_t *parse_files(struct serve *S, const char *t, json_t *files,
			   struct atb_llm_reply *reply)
{
	struct atb_task *task = NULL;
	struct atb_error err;
	const char *allowed[ATB_TASK_MAX_SURFACE];
	size_t nallowed = 0, i;
	json_t *wrap;
	char *text;
	enum atb_status st;

	(void)S;
	atb_error_clear(&err);
	if (is_py(t)) {
		allowed[nallowed++] = "model_new.py";
	} else if (atb_task_open(atb_home(), t, &task, &err)) {
		char msg[1024];

		atb_error_format(&err, msg, sizeof(msg));
		return tool_error("%s", msg);
	} else {
		for (i = 0; i < task->nsurface; i++)
			allowed[nallowed++] = task->surface[i];
	}
	wrap = json_pack("{s:O}", "files", files);
	text = wrap ? json_dumps(wrap, JSON_COMPACT) : NULL;
	json_decref(wrap);
	st = text ? atb_llm_reply_parse(text, ATB_LLM_REPLY_JSON, allowed, nallowed, reply, &err)
		  : atb_error_set(&err, ATB_ERR_NOMEM, "out of memory");
	atb_free(text);
	atb_task_free(task);
	if (st) {
		char msg[1024];

		atb_error_format(&err, msg, sizeof(msg));
		return tool_error("submission refused, nothing written: %s", msg);
	}
	return NULL;
}

static json_t *do_submit(struct serve *S, json_t *args, struct call_error *ce)
{
	const char *t = json_string_value(json_object_get(args, "task"));
	const char *av[64];
	char knob[ATB_TASK_MAX_KNOBS][2 * ATB_TASK_NAME_MAX + 2];
	char num[3][32], dir[PATH_MAX], tail[SERVE_ERR_TAIL], *out;
	struct atb_llm_reply reply;
	struct atb_error err;
	json_t *v, *refused;
	const char *key;
	size_t n = 0, k = 0;
	int code;

	if (task_arg_ok(t, ce))
		return NULL;
	v = json_object_get(args, "knobs");
	if (json_object_size(v) > ATB_TASK_MAX_KNOBS) {
		call_fail(ce, RPC_INVALID_PARAMS, "knobs", "argument 'knobs' names more than %d "
			  "knobs", ATB_TASK_MAX_KNOBS);
		return NULL;
	}
	/* PROTO: loop -- what an agent hands in lands only inside a fresh candidate folder */
	refused = parse_files(S, t, json_object_get(args, "files"), &reply);
	if (refused)
		return refused;
	atb_error_clear(&err);
	if (atb_proc_scratch("atb-serve-candidate", dir, sizeof(dir), &err) ||
	    atb_llm_reply_write(&reply, dir, &err)) {
		char msg[1024];

		atb_error_format(&err, msg, sizeof(msg));
		atb_llm_reply_release(&reply);
		atb_proc_remove_tree(dir);
		return tool_error("cannot write the candidate: %s", msg);
	}
	atb_llm_reply_release(&reply);

	av[n++] = "submit";
	av[n++] = t;
	av[n++] = dir;
	if ((v = json_object_get(args, "run"))) {
		av[n++] = "--run";
		av[n++] = json_string_value(v);
	}
	if ((v = json_object_get(args, "iterations"))) {
		snprintf(num[0], sizeof(num[0]), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		av[n++] = "--iterations";
		av[n++] = num[0];
	}
	json_object_foreach(json_object_get(args, "knobs"), key, v) {
		snprintf(knob[k], sizeof(knob[k]), "%.63s=%.63s", key, json_string_value(v));
		av[n++] = "--knob";
		av[n++] = knob[k++];
	}
	if ((v = json_object_get(args, "cflags"))) {
		av[n++] = "--cflags";
		av[n++] = json_string_value(v);
	}
	if ((v = json_object_get(args, "seeds"))) {
		snprintf(num[1], sizeof(num[1]), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		av[n++] = "--seeds";
		av[n++] = num[1];
	}
	if ((v = json_object_get(args, "seed_base"))) {
		snprintf(num[2], sizeof(num[2]), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		av[n++] = "--seed-base";
		av[n++] = num[2];
	}
	if ((v = json_object_get(args, "naive")))
		av[n++] = json_is_true(v) ? "--naive" : "--no-naive";
	if ((v = json_object_get(args, "label"))) {
		av[n++] = "--label";
		av[n++] = json_string_value(v);
	}
	if ((v = json_object_get(args, "device"))) {
		av[n++] = "--device";
		av[n++] = json_string_value(v);
	}
	if ((v = json_object_get(args, "baseline"))) {
		av[n++] = "--baseline";
		av[n++] = json_string_value(v);
	}
	if (S->python && is_py(t)) {
		av[n++] = "--python";
		av[n++] = S->python;
	}
	av[n] = NULL;
	fprintf(stderr, "atb serve: submit_candidate for task '%s' in %s\n", t, dir);
	code = run_atb(S, av, &out, tail, sizeof(tail));
	atb_proc_remove_tree(dir);
	return child_result("atb submit", code, out, tail, 1);
}

static const struct arg_spec verdict_args[] = {
	{"result_id", ARG_INTEGER, 0, "a result's id (a verdict's result_id)", NULL, 1, INT64_MAX},
	{"rejection_id", ARG_INTEGER, 0, "a rejection's id (a verdict's rejection_id)", NULL, 1,
	 INT64_MAX},
	{NULL, 0, 0, NULL, NULL, 0, 0},
};

static json_t *store_error(const struct atb_error *err)
{
	char msg[1024];

	atb_error_format(err, msg, sizeof(msg));
	return tool_error("%s", msg);
}

static json_t *do_get_verdict(struct serve *S, json_t *args, struct call_error *ce)
{
	json_t *rid = json_object_get(args, "result_id"), *jid = json_object_get(args, "rejection_id");
	struct atb_rejection_row *rows = NULL;
	struct atb_store *s = NULL;
	struct atb_error err;
	json_t *v = NULL;
	size_t n = 0, i;

	if (!rid == !jid) {
		call_fail(ce, RPC_INVALID_PARAMS, rid ? "rejection_id" : "result_id",
			  "give exactly one of 'result_id' and 'rejection_id'");
		return NULL;
	}
	atb_error_clear(&err);
	if (atb_store_open(S->ctx->db_path, ATB_STORE_READ_ONLY, &s, &err))
		return store_error(&err);
	if (rid) {
		if (atb_store_result_stats(s, json_integer_value(rid), &v, &err)) {
			atb_store_close(s);
			return store_error(&err);
		}
		json_object_set(v, "verdict", json_object_get(v, "status"));
		json_object_set_new(v, "result_id", json_integer(json_integer_value(rid)));
	} else {
		if (atb_store_list_rejections(s, &rows, &n, &err)) {
			atb_store_close(s);
			return store_error(&err);
		}
		for (i = 0; i < n && rows[i].id != json_integer_value(jid); i++)
			;
		if (i == n) {
			atb_store_rejections_free(rows, n);
			atb_store_close(s);
			return tool_error("no rejection %" JSON_INTEGER_FORMAT " in store '%s'",
					  json_integer_value(jid), S->ctx->db_path);
		}
		v = json_pack("{s:s, s:I, s:s, s:s, s:s, s:s, s:s}", "verdict", "rejected",
			      "rejection_id", (json_int_t)rows[i].id, "job_uuid", rows[i].job_uuid,
			      "rule", rows[i].rule, "gate",
			      strncmp(rows[i].rule, "gate:", 5) ? "" : rows[i].rule + 5, "reason",
			      rows[i].reason ? rows[i].reason : "", "created", rows[i].created);
		atb_store_rejections_free(rows, n);
	}
	atb_store_close(s);
	return tool_result(v, NULL, 0);
}

static const struct arg_spec history_args[] = {
	{"run", ARG_STRING, 1, "the run's id (as given to submit_candidate's 'run')", NULL, 0, 0},
	{NULL, 0, 0, NULL, NULL, 0, 0},
};

static json_t *do_get_history(struct serve *S, json_t *args, struct call_error *ce)
{
	const char *run = json_string_value(json_object_get(args, "run"));
	struct atb_report *r = NULL;
	struct atb_store *s = NULL;
	struct atb_error err;
	json_t *v = NULL;

	(void)ce;
	atb_error_clear(&err);
	if (atb_store_open(S->ctx->db_path, ATB_STORE_READ_ONLY, &s, &err))
		return store_error(&err);
	if (atb_report_build(s, run, NULL, &r, &err) || atb_report_json(r, &v, &err)) {
		atb_report_free(r);
		atb_store_close(s);
		return store_error(&err);
	}
	atb_report_free(r);
	atb_store_close(s);
	return tool_result(v, NULL, 0);
}

struct tool {
	const char *name, *title, *description;
	const struct arg_spec *args;
	json_t *(*fn)(struct serve *S, json_t *args, struct call_error *ce);
};

static const struct tool tools[] = {
	{"list_tasks", "List tasks", "The bundled tasks atb can judge candidates for: name, kind "
	 "(cpu, cuda, torch), description, path.", no_args, do_list_tasks},
	{"show_task", "Show a task", "One task: its parameters, buffers, knobs, baseline and "
	 "floor (atb task show --json), the surface files a candidate consists of "
	 "(\"surface\"), and the text of its baseline and candidate template (\"sources\").",
	 show_args, do_show_task},
	{"submit_candidate", "Submit a candidate", "Hand in a candidate for a task: its surface "
	 "files inline, written into a fresh folder (surface names only: no folders, '..', "
	 "absolute paths or files over 1 MiB) and judged by atb's gates against the honest "
	 "baseline on this machine (correctness, timing, cheat checks). Returns the verdict: "
	 "admitted, quarantined or rejected with the gate and reason, the speedup with its 95% "
	 "interval, and the result or rejection id. Takes seconds to minutes.",
	 submit_args, do_submit},
	{"get_verdict", "Get a verdict", "A stored verdict by its result_id or rejection_id.",
	 verdict_args, do_get_verdict},
	{"get_history", "Get a run's history", "A run's iterations in order, each with its "
	 "outcome, speedup and interval or the gate that refused it, and the best so far "
	 "(atb report RUN --json).", history_args, do_get_history},
};

#define NTOOLS (sizeof(tools) / sizeof(tools[0]))

/* ---- methods ---- */

static json_t *m_initialize(struct serve *S, json_t *params, struct call_error *ce)
{
	json_t *want = json_object_get(params, "protocolVersion");
	const char *version = protocol_versions[0];
	size_t i;

	if (want && !json_is_string(want)) {
		call_fail(ce, RPC_INVALID_PARAMS, "protocolVersion", "'protocolVersion' must be a "
			  "string");
		return NULL;
	}
	/* the client's revision when we speak it, else our newest (the client decides) */
	for (i = 0; want && i < sizeof(protocol_versions) / sizeof(protocol_versions[0]); i++)
		if (!strcmp(json_string_value(want), protocol_versions[i]))
			version = protocol_versions[i];
	S->initialized = 1;
	return json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", version,
			 "capabilities", "tools", "listChanged", 0, "serverInfo", "name", "atb",
			 "title", "AutoTuneBench", "version", atb_version(), "instructions",
			 "atb judges whether a candidate kernel is really faster than the honest "
			 "baseline and whether it cheated. list_tasks, show_task to read a task and "
			 "its surface files, submit_candidate to hand in files and get the verdict; "
			 "give the same 'run' id to each submission to keep a history "
			 "(get_history).");
}

static json_t *m_tools_list(struct serve *S, json_t *params, struct call_error *ce)
{
	json_t *arr = json_array();
	size_t i;

	(void)S;
	(void)params;
	(void)ce;
	for (i = 0; i < NTOOLS; i++)
		json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:o}", "name", tools[i].name,
						     "title", tools[i].title, "description",
						     tools[i].description, "inputSchema",
						     arg_schema(tools[i].args)));
	return json_pack("{s:o}", "tools", arr);
}

static json_t *m_tools_call(struct serve *S, json_t *params, struct call_error *ce)
{
	json_t *name = json_object_get(params, "name"), *args = json_object_get(params, "arguments");
	json_t *empty = NULL, *r;
	size_t i;

	if (!json_is_string(name)) {
		call_fail(ce, RPC_INVALID_PARAMS, "name", "tools/call needs the tool's 'name'");
		return NULL;
	}
	for (i = 0; i < NTOOLS && strcmp(tools[i].name, json_string_value(name)); i++)
		;
	if (i == NTOOLS) {
		call_fail(ce, RPC_INVALID_PARAMS, "name", "unknown tool '%.60s' (tools/list lists "
			  "them)", json_string_value(name));
		return NULL;
	}
	if (args && !json_is_object(args)) {
		call_fail(ce, RPC_INVALID_PARAMS, "arguments", "'arguments' must be an object");
		return NULL;
	}
	if (!args)
		args = empty = json_object();
	if (check_args(tools[i].args, args, ce)) {
		json_decref(empty);
		return NULL;
	}
	r = tools[i].fn(S, args, ce);
	json_decref(empty);
	return r;
}

static json_t *m_ping(struct serve *S, json_t *params, struct call_error *ce)
{
	(void)S;
	(void)params;
	(void)ce;
	return json_object();
}

static const struct {
	const char *name;
	json_t *(*fn)(struct serve *S, json_t *params, struct call_error *ce);
} methods[] = {
	{"initialize", m_initialize},
	{"ping", m_ping},
	{"tools/list", m_tools_list},
	{"tools/call", m_tools_call},
};

/* One message: its response, or NULL (a notification, a client's response). */
static json_t *handle(struct serve *S, json_t *m)
{
	json_t *id, *method, *params, *r;
	struct call_error ce;
	size_t i;

	if (!json_is_object(m))
		return rpc_error(NULL, RPC_INVALID_REQUEST, "a message is a JSON object", NULL);
	id = json_object_get(m, "id");
	method = json_object_get(m, "method");
	params = json_object_get(m, "params");
	if (id && !json_is_string(id) && !json_is_integer(id))
		return rpc_error(NULL, RPC_INVALID_REQUEST, "a request's id is a string or an "
				 "integer", NULL);
	if (!json_is_string(json_object_get(m, "jsonrpc")) ||
	    strcmp(json_string_value(json_object_get(m, "jsonrpc")), "2.0"))
		return rpc_error(id, RPC_INVALID_REQUEST, "not JSON-RPC 2.0: \"jsonrpc\" must be "
				 "\"2.0\"", NULL);
	if (!method && id && (json_object_get(m, "result") || json_object_get(m, "error")))
		return NULL;   /* a response: we send no requests, so nothing waits for it */
	if (!json_is_string(method))
		return rpc_error(id, RPC_INVALID_REQUEST, "a request names its \"method\" (a "
				 "string)", NULL);
	if (params && !json_is_object(params) && !json_is_array(params))
		return rpc_error(id, RPC_INVALID_REQUEST, "\"params\" is an object or an array",
				 NULL);
	if (!id) {
		/* notifications: never answered, an unknown one neither */
		if (!strcmp(json_string_value(method), "notifications/initialized"))
			fprintf(stderr, "atb serve: client initialized\n");
		return NULL;
	}
	for (i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
		if (!strcmp(methods[i].name, json_string_value(method)))
			break;
	if (i == sizeof(methods) / sizeof(methods[0])) {
		char msg[160];

		snprintf(msg, sizeof(msg), "method not found: '%.80s'", json_string_value(method));
		return rpc_error(id, RPC_METHOD_NOT_FOUND, msg, NULL);
	}
	if (params && !json_is_object(params))
		return rpc_error(id, RPC_INVALID_PARAMS, "this method's params are an object",
				 NULL);
	memset(&ce, 0, sizeof(ce));
	r = methods[i].fn(S, params, &ce);
	if (ce.code) {
		json_decref(r);
		return rpc_error(id, ce.code, ce.msg,
				 ce.field[0] ? json_pack("{s:s}", "field", ce.field) : NULL);
	}
	if (!r)
		return rpc_error(id, RPC_INTERNAL_ERROR, "out of memory", NULL);
	return rpc_result(id, r);
}

/* One line: a message or a batch; the reply to send (NULL: none). */
static json_t *handle_line(struct serve *S, const char *line, size_t len)
{
	json_error_t je;
	json_t *m, *out, *r, *x;
	char msg[300];
	size_t i;

	m = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
	if (!m) {
		snprintf(msg, sizeof(msg), "parse error: %s (column %d)", je.text, je.column);
		return rpc_error(NULL, RPC_PARSE_ERROR, msg, NULL);
	}
	if (!json_is_array(m)) {
		out = handle(S, m);
		json_decref(m);
		return out;
	}
	if (!json_array_size(m)) {
		json_decref(m);
		return rpc_error(NULL, RPC_INVALID_REQUEST, "an empty batch", NULL);
	}
	out = json_array();
	json_array_foreach(m, i, x)
		if ((r = handle(S, x)))
			json_array_append_new(out, r);
	json_decref(m);
	if (!json_array_size(out)) {
		json_decref(out);
		return NULL;
	}
	return out;
}

static int all_space(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return 0;
	return 1;
}

int cmd_serve(int argc, char **argv, struct cli_ctx *ctx)
{
	struct serve S;
	char *buf;
	size_t len = 0, cap = 4096;
	int i, c, stdio = 0, over = 0, rc = CLI_OK;
	ssize_t n;

	if (cli_wants_help(argc, argv)) {
		fputs(serve_help, stdout);
		return CLI_OK;
	}
	memset(&S, 0, sizeof(S));
	S.ctx = ctx;
	S.max_message = SERVE_DEFAULT_MAX_MESSAGE;
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--stdio"))
			stdio = 1;
		else if (!strcmp(argv[i], "--python") && i + 1 < argc)
			S.python = argv[++i];
		else if (!strcmp(argv[i], "--max-message-bytes") && i + 1 < argc) {
			int64_t v;

			if (cli_parse_int("serve", "--max-message-bytes", argv[++i], 1024,
					  (int64_t)1 << 30, &v))
				return CLI_USAGE;
			S.max_message = (size_t)v;
		} else
			return cli_usage_error("serve", "unknown argument '%s'", argv[i]);
	}
	if (!stdio)
		return cli_usage_error("serve", "give --stdio (the only transport)");
	n = readlink("/proc/self/exe", S.self, sizeof(S.self) - 1);
	if (n <= 0 || (size_t)n >= sizeof(S.self) - 1) {
		fprintf(stderr, "atb serve: cannot find its own executable: %s\n", strerror(errno));
		return CLI_RUNTIME;
	}
	S.self[n] = '\0';
	atb_alloc_install_json();
	/* a client that went away ends the server at its next write, not by a signal */
	signal(SIGPIPE, SIG_IGN);
	buf = atb_malloc(cap);
	if (!buf) {
		fprintf(stderr, "atb serve: out of memory\n");
		return CLI_RUNTIME;
	}
	fprintf(stderr, "atb serve: serving on stdio (store %s)\n", ctx->db_path);
	for (;;) {
		c = getchar();
		if (c != EOF && c != '\n') {
			if (over)
				continue;
			if (len + 1 >= cap) {
				size_t ncap = cap * 2 > S.max_message + 1 ? S.max_message + 1 : cap * 2;
				char *nb = len + 1 < S.max_message ? atb_realloc(buf, ncap) : NULL;

				if (!nb) {
					over = 1;   /* answered once its end is read */
					continue;
				}
				buf = nb;
				cap = ncap;
			}
			buf[len++] = (char)c;
			continue;
		}
		if (c == EOF && !len && !over)
			break;
		if (over || len) {
			json_t *r;

			if (over) {
				char msg[160];

				snprintf(msg, sizeof(msg), "message over %zu bytes: skipped",
					 S.max_message);
				r = rpc_error(NULL, RPC_INVALID_REQUEST, msg, NULL);
			} else {
				r = all_space(buf, len) ? NULL : handle_line(&S, buf, len);
			}
			if (r && send_message(r)) {
				json_decref(r);
				fprintf(stderr, "atb serve: cannot write to stdout: %s\n",
					strerror(errno));
				rc = CLI_RUNTIME;
				break;
			}
			json_decref(r);
		}
		len = 0;
		over = 0;
		if (c == EOF)
			break;
	}
	atb_free(buf);
	fprintf(stderr, "atb serve: end of input\n");
	return rc;
}
