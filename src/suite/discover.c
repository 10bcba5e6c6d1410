/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Finding a suite's tasks and their candidates (include/atb/suite.h):
 * DIR/ *.py and DIR/SUB/ *.py, ordered as KernelBench numbers them, a
 * filter glob, and each task's candidate file.
 *
 * Does not: read the files (atb_task_load_kernelbench and the static
 * checker do).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "atb/alloc.h"
#include "atb/suite.h"
#include "banned.h"

struct list {
	struct atb_suite_task *t;
	size_t n, cap;
};

static int is_file(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int is_dir(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_task_name(const char *name)
{
	size_t len = strlen(name);

	return len > 3 && name[0] != '.' && name[0] != '_' && !strcmp(name + len - 3, ".py");
}

static char *join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *s = atb_malloc(la + lb + 2);

	if (s)
		snprintf(s, la + lb + 2, "%s/%s", a, b);
	return s;
}

static enum atb_status add(struct list *L, const char *rel, const char *dir,
			   struct atb_error *err)
{
	struct atb_suite_task *t;

	if (L->n == ATB_SUITE_MAX_TASKS)
		return atb_error_set(err, ATB_ERR_USAGE, "suite '%s' has more than %d tasks", dir,
				     ATB_SUITE_MAX_TASKS);
	if (L->n == L->cap) {
		size_t cap = L->cap ? 2 * L->cap : 32;

		t = atb_realloc(L->t, cap * sizeof(*t));
		if (!t)
			return atb_error_set(err, ATB_ERR_NOMEM, "cannot list suite '%s': out of memory",
					     dir);
		L->t = t;
		L->cap = cap;
	}
	t = &L->t[L->n];
	memset(t, 0, sizeof(*t));
	t->rel = atb_strdup(rel);
	t->path = join(dir, rel);
	L->n++;
	if (!t->rel || !t->path)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot list suite '%s': out of memory", dir);
	return ATB_OK;
}

static int matches(const char *filter, const char *rel)
{
	const char *base = strrchr(rel, '/');

	return !filter || !fnmatch(filter, rel, 0) || !fnmatch(filter, base ? base + 1 : rel, 0);
}

/* The .py files of dir/sub (sub "" for dir itself), filtered. */
static enum atb_status scan(struct list *L, const char *dir, const char *sub,
			    const char *filter, struct atb_error *err)
{
	char path[4096], rel[4096];
	struct dirent *e;
	enum atb_status st = ATB_OK;
	DIR *d;

	snprintf(path, sizeof(path), "%s%s%s", dir, *sub ? "/" : "", sub);
	d = opendir(path);
	if (!d)
		return atb_error_set(err, errno == ENOENT ? ATB_ERR_NOT_FOUND : ATB_ERR_IO,
				     "cannot read suite folder '%s': %s", path, strerror(errno));
	while (!st && (e = readdir(d))) {
		char full[8192];

		if (e->d_name[0] == '.' || e->d_name[0] == '_')
			continue;
		if ((size_t)snprintf(rel, sizeof(rel), "%s%s%s", sub, *sub ? "/" : "", e->d_name) >=
		    sizeof(rel))
			continue;
		snprintf(full, sizeof(full), "%s/%s", dir, rel);
		if (!*sub && strcmp(e->d_name, "candidates") && is_dir(full)) {
			st = scan(L, dir, rel, filter, err);
			continue;
		}
		if (is_task_name(e->d_name) && is_file(full) && matches(filter, rel))
			st = add(L, rel, dir, err);
	}
	closedir(d);
	return st;
}

/* KernelBench order: folder, then the leading number, then the name. */
static int cmp_task(const void *a, const void *b)
{
	const char *x = ((const struct atb_suite_task *)a)->rel;
	const char *y = ((const struct atb_suite_task *)b)->rel;
	const char *bx = strrchr(x, '/'), *by = strrchr(y, '/');
	size_t dx = bx ? (size_t)(bx - x) : 0, dy = by ? (size_t)(by - y) : 0;
	int c;

	if (dx != dy || strncmp(x, y, dx)) {
		c = strncmp(x, y, dx < dy ? dx : dy);
		return c ? c : (dx < dy ? -1 : 1);
	}
	bx = bx ? bx + 1 : x;
	by = by ? by + 1 : y;
	if (isdigit((unsigned char)*bx) && isdigit((unsigned char)*by)) {
		unsigned long nx = strtoul(bx, NULL, 10), ny = strtoul(by, NULL, 10);

		if (nx != ny)
			return nx < ny ? -1 : 1;
	}
	return strcmp(bx, by);
}

static enum atb_status find_candidate(struct atb_suite_task *t, const char *cands,
				      struct atb_error *err)
{
	const char *base = strrchr(t->rel, '/');
	char *p = join(cands, base ? base + 1 : t->rel);

	if (!p)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	if (!is_file(p) && base) {
		atb_free(p);
		p = join(cands, t->rel);
		if (!p)
			return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	}
	if (is_file(p))
		t->candidate = p;
	else
		atb_free(p);
	return ATB_OK;
}

void atb_suite_tasks_free(struct atb_suite_task *t, size_t n)
{
	size_t i;

	if (!t)
		return;
	for (i = 0; i < n; i++) {
		atb_free(t[i].rel);
		atb_free(t[i].path);
		atb_free(t[i].candidate);
	}
	atb_free(t);
}

enum atb_status atb_suite_discover(const char *dir, const char *candidates_dir,
				   const char *filter, struct atb_suite_task **out, size_t *n,
				   struct atb_error *err)
{
	struct list L = {0};
	enum atb_status st;
	size_t i;

	*out = NULL;
	*n = 0;
	if (!is_dir(dir))
		return atb_error_set(err, ATB_ERR_NOT_FOUND, "no suite folder '%s'", dir);
	if (candidates_dir && !is_dir(candidates_dir))
		return atb_error_set(err, ATB_ERR_NOT_FOUND, "no candidates folder '%s'",
				     candidates_dir);
	st = scan(&L, dir, "", filter, err);
	if (!st && L.n == 0)
		st = atb_error_set(err, ATB_ERR_USAGE, "no task in suite '%s'%s%s%s", dir,
				   filter ? " matches '" : "", filter ? filter : "",
				   filter ? "'" : "");
	if (!st)
		qsort(L.t, L.n, sizeof(*L.t), cmp_task);
	for (i = 0; !st && candidates_dir && i < L.n; i++)
		st = find_candidate(&L.t[i], candidates_dir, err);
	if (st) {
		atb_suite_tasks_free(L.t, L.n);
		return st;
	}
	*out = L.t;
	*n = L.n;
	return ATB_OK;
}
