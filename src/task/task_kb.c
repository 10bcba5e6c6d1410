/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * KernelBench-format tasks: one Python file defining `class Model`,
 * `get_inputs()` and `get_init_inputs()`, loaded as a struct atb_task of
 * kind "torch" (include/atb/task.h, docs/torch.md).  The reference is the
 * file itself (PyTorch eager); the candidate's surface is the single file
 * model_new.py defining `class ModelNew`.
 *
 * Loading checks that the three definitions are there (at the start of a
 * line; the file is not imported: importing runs the task's code, which is
 * the runner's job, in its own process) and asks the interpreter once, with
 * `python -c`, where its libpython, prefix and sys.path are, so atb-runner
 * can embed that same interpreter (runner/torch.c).
 *
 * Does not: import torch, run the model, or judge anything.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "atb/alloc.h"
#include "atb/proc.h"
#include "atb/task.h"
#include "task_int.h"
#include "util.h"
#include "banned.h"

#define PY_QUERY_TIMEOUT_NS (30LL * 1000000000LL)
#define PY_OUT_MAX (256 * 1024)

/*
 * What the interpreter says about itself, on one line of JSON.  The
 * libpython is looked for under the names and folders sysconfig gives
 * (INSTSONAME, LDLIBRARY in LIBDIR, LIBDIR/MULTIARCH, base_prefix/lib);
 * "" when there is none (a static build cannot be embedded).
 */
static const char py_query[] =
	"import sys, os, sysconfig, json\n"
	"v = sysconfig.get_config_var\n"
	"lib = ''\n"
	"names = [n for n in (v('INSTSONAME'), v('LDLIBRARY')) if n and '.so' in n]\n"
	"libdir = v('LIBDIR') or ''\n"
	"dirs = [d for d in (libdir, os.path.join(libdir, v('MULTIARCH') or ''),"
	" os.path.join(sys.base_prefix, 'lib')) if d]\n"
	"for n in names:\n"
	"    for d in dirs:\n"
	"        if not lib and os.path.exists(os.path.join(d, n)):\n"
	"            lib = os.path.join(d, n)\n"
	"home = sys.base_prefix\n"
	"if sys.base_exec_prefix != sys.base_prefix:\n"
	"    home = sys.base_prefix + ':' + sys.base_exec_prefix\n"
	"print(json.dumps({'executable': sys.executable,"
	" 'version': '%d.%d.%d' % sys.version_info[:3], 'library': lib, 'home': home,"
	" 'path': [p for p in sys.path if p]}))\n";

static int ends_with(const char *s, const char *suf)
{
	size_t n = strlen(s), k = strlen(suf);

	return n >= k && !strcmp(s + n - k, suf);
}

/*
 * The longest KernelBench stem: a whole file name (NAME_MAX, 255 bytes)
 * less ".py".  Upstream's are up to 96 characters
 * (level1/75_conv_transposed_2D_asymmetric_input_asymmetric_kernel_
 * strided__grouped____padded____dilated__); 63, the limit of a task.yaml
 * name, refused eight Level-1 tasks as task_error on the H200.
 */
#define KB_STEM_MAX 252

/* A KernelBench stem: "19_ReLU", "relu-small"; letters, digits, _ - . */
static int good_stem(const char *s, size_t n)
{
	size_t i;

	if (n == 0 || n > KB_STEM_MAX || s[0] == '.' || s[0] == '-')
		return 0;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-' || s[i] == '.'))
			return 0;
	return 1;
}

/*
 * Is `prefix` followed by a delimiter in delims at the start of some line
 * of text?  ("class Model" then "(" or ":"; not "class ModelNew".)
 */
static int defines(const char *text, const char *prefix, const char *delims)
{
	const char *p = text;
	size_t k = strlen(prefix);

	while (p && *p) {
		if (!strncmp(p, prefix, k)) {
			const char *q = p + k;

			while (*q == ' ' || *q == '\t')
				q++;
			if (*q && strchr(delims, *q))
				return 1;
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return 0;
}

enum atb_status atbi_task_python_resolve(const char *python, char **out, struct atb_error *err)
{
	const char *path, *p;
	char buf[4096];

	*out = NULL;
	if (!python || !*python)
		python = getenv("ATB_PYTHON");
	if (!python || !*python)
		python = "python3";
	if (strchr(python, '/')) {
		if (access(python, X_OK))
			return atb_error_set(err, ATB_ERR_NOT_FOUND, "no python interpreter '%s': %s",
					     python, strerror(errno));
		*out = atb_strdup(python);
		return *out ? ATB_OK : atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	}
	path = getenv("PATH");
	for (p = path; p && *p;) {
		const char *c = strchr(p, ':');
		size_t n = c ? (size_t)(c - p) : strlen(p);

		if (n && (size_t)snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, p, python) <
				 sizeof(buf) && !access(buf, X_OK)) {
			*out = atb_strdup(buf);
			return *out ? ATB_OK : atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
		}
		p = c ? c + 1 : NULL;
	}
	return atb_error_set(err, ATB_ERR_NOT_FOUND,
			     "no python interpreter '%s' on PATH: set ATB_PYTHON or install python3",
			     python);
}

/* Run python -c query with a deadline; stdout and stderr together into *out. */
static enum atb_status run_query(const char *python, char **out, struct atb_error *err)
{
	const char *argv[] = {python, "-c", py_query, NULL};
	struct atb_proc proc;
	int fds[2], status;
	size_t n = 0, cap = 4096;
	char *buf = atb_malloc(cap);
	int64_t deadline = atbi_monotonic_ns() + PY_QUERY_TIMEOUT_NS;
	enum atb_status st;

	*out = NULL;
	if (!buf)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	if (pipe2(fds, O_CLOEXEC)) {
		atb_free(buf);
		return atb_error_set(err, ATB_ERR_SYSTEM, "cannot make a pipe: %s", strerror(errno));
	}
	/* the interpreter is the caller's (trusted) and runs no task code: a plain child */
	st = atb_proc_start(argv, -1, fds[1], fds[1], NULL, &proc, err);
	close(fds[1]);
	if (st) {
		close(fds[0]);
		atb_free(buf);
		return st;
	}
	for (;;) {
		struct pollfd pf = {fds[0], POLLIN, 0};
		int64_t left = deadline - atbi_monotonic_ns();
		ssize_t r;

		if (left <= 0) {
			atb_proc_reap(&proc);
			close(fds[0]);
			atb_free(buf);
			return atb_error_set(err, ATB_ERR_SYSTEM, "python '%s' did not answer in 30 s",
					     python);
		}
		if (poll(&pf, 1, (int)(left / 1000000 + 1)) < 0 && errno != EINTR)
			break;
		r = read(fds[0], buf + n, cap - n - 1);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
		if (n + 1 == cap && cap < PY_OUT_MAX) {
			char *nb = atb_realloc(buf, cap * 2);

			if (!nb)
				break;
			buf = nb;
			cap *= 2;
		}
		if (n + 1 == cap)
			break;
	}
	close(fds[0]);
	buf[n] = '\0';
	atb_proc_wait(&proc, INT64_MAX);
	atb_proc_reap(&proc);
	status = proc.status;   /* an exec that failed is exit 127, as before */
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		size_t tail = n > 300 ? n - 300 : 0;

		st = atb_error_set(err, ATB_ERR_SYSTEM, "python '%s' failed (status %d): %s",
				   python, WIFEXITED(status) ? WEXITSTATUS(status) : -1, buf + tail);
		atb_free(buf);
		return st;
	}
	*out = buf;
	return ATB_OK;
}

enum atb_status atbi_task_python_info(const char *python, char **info, struct atb_error *err)
{
	char *text = NULL, *line;
	json_error_t je;
	json_t *o;
	enum atb_status st;

	*info = NULL;
	if ((st = run_query(python, &text, err)))
		return st;
	/* The answer is the last non-empty line (a sitecustomize may print before it). */
	line = text + strlen(text);
	while (line > text && (line[-1] == '\n' || line[-1] == '\r'))
		*--line = '\0';
	while (line > text && line[-1] != '\n')
		line--;
	atb_alloc_install_json();
	o = json_loads(line, 0, &je);
	if (!json_is_object(o) || !json_is_string(json_object_get(o, "library")) ||
	    !json_is_string(json_object_get(o, "home")) ||
	    !json_is_array(json_object_get(o, "path"))) {
		st = atb_error_set(err, ATB_ERR_SYSTEM, "python '%s' gave no usable answer: '%.200s'",
				   python, line);
	} else {
		st = atbi_json_canonical(o, info, err);
	}
	json_decref(o);
	atb_free(text);
	return st;
}

enum atb_status atb_task_load_kernelbench(const char *py_path, const char *python,
					  struct atb_task **out, struct atb_error *err)
{
	static const struct {
		const char *prefix, *delims, *field;
	} need[] = {
		{"class Model", "(:", "Model"},
		{"def get_inputs", "(", "get_inputs"},
		{"def get_init_inputs", "(", "get_init_inputs"},
	};
	const char *base, *slash;
	struct atb_task *t;
	struct stat sb;
	char *text = NULL;
	enum atb_status st;
	size_t i, stem;

	*out = NULL;
	if (!py_path || !*py_path)
		return atb_error_set(err, ATB_ERR_USAGE, "no task file given");
	slash = strrchr(py_path, '/');
	base = slash ? slash + 1 : py_path;
	if (!ends_with(base, ".py"))
		return atb_error_set_at(err, ATB_ERR_USAGE, py_path, 0, 0, "",
					"not a python file '%s': a KernelBench task is NAME.py",
					py_path);
	stem = strlen(base) - 3;
	if (!good_stem(base, stem))
		return atb_error_set_at(err, ATB_ERR_USAGE, py_path, 0, 0, "",
					"bad task name '%.*s': letters, digits, _ - . (at most %d)",
					(int)stem, base, KB_STEM_MAX);
	if (stat(py_path, &sb))
		return atb_error_set_at(err, errno == ENOENT ? ATB_ERR_NOT_FOUND : ATB_ERR_IO,
					py_path, 0, 0, "", "cannot open task '%s': %s", py_path,
					strerror(errno));
	if (!S_ISREG(sb.st_mode))
		return atb_error_set_at(err, ATB_ERR_USAGE, py_path, 0, 0, "",
					"not a regular file '%s'", py_path);
	if ((st = atbi_read_file(py_path, &text, NULL, err)))
		return st;
	for (i = 0; i < sizeof(need) / sizeof(need[0]); i++)
		if (!defines(text, need[i].prefix, need[i].delims)) {
			atb_free(text);
			return atb_error_set_at(err, ATB_ERR_SCHEMA, py_path, 0, 0, need[i].field,
						"missing '%s' in '%s': a KernelBench task defines "
						"class Model, get_inputs() and get_init_inputs()",
						need[i].prefix, py_path);
		}
	atb_free(text);

	t = atb_calloc(1, sizeof(*t));
	if (!t)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot load task: out of memory");
	t->name = atb_strndup(base, stem);
	t->kind = atb_strdup(ATB_TASK_KIND_TORCH);
	t->description = atb_strdup("KernelBench-format task (PyTorch reference)");
	t->dir = slash ? atb_strndup(py_path, (size_t)(slash - py_path) + (slash == py_path))
		       : atb_strdup(".");
	t->yaml_path = atb_strdup(py_path);
	t->baseline.file = atb_strdup(base);
	t->baseline.path = atb_strdup(py_path);
	t->baseline.label = atb_strdup("PyTorch eager (the task's Model)");
	t->baseline.why = atb_strdup("the reference a user would otherwise run");
	t->candidate.file = atb_strdup("model_new.py");
	t->candidate.path = atb_strdup("model_new.py");
	t->candidate.label = atb_strdup("");
	t->floor_bytes = atb_strdup("0");
	t->floor_flops = atb_strdup("0");
	t->nsets = 1;   /* one point, no parameters: the inputs come from get_inputs() */
	snprintf(t->surface[0], sizeof(t->surface[0]), "model_new.py");
	t->nsurface = 1;
	if (!t->name || !t->kind || !t->description || !t->dir || !t->yaml_path ||
	    !t->baseline.file || !t->baseline.path || !t->baseline.label || !t->baseline.why ||
	    !t->candidate.file || !t->candidate.path || !t->candidate.label || !t->floor_bytes ||
	    !t->floor_flops) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot load task: out of memory");
		goto fail;
	}
	if ((st = atbi_task_python_resolve(python, &t->python, err)) ||
	    (st = atbi_task_python_info(t->python, &t->python_info, err)))
		goto fail;
	*out = t;
	return ATB_OK;
fail:
	atb_task_free(t);
	return st;
}
