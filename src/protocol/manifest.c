/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The trusted-file manifest: HOME/protocol/manifest pins the SHA-256 of
 * every file atb ships and trusts besides the protocol files themselves
 * (the lock pins those): the headers under include/ that every build sees,
 * each bundled task's files under tasks/ (task.yaml, baseline, naive and
 * template sources), the engine specs under engines/, the Python atb runs
 * (python/ *.py) and the lock.  A
 * candidate once appended to include/atb/kernel.h and every later baseline
 * ran slower; with the manifest checked at every job start, a tampered
 * home produces no results.
 *
 * The file is sha256sum's format ("DIGEST  PATH", paths relative to the
 * home, sorted), so `sha256sum -c protocol/manifest` from the home checks
 * it too.  Does not: pin the protocol YAML (the lock does, in canonical
 * form, so a comment edit still verifies), or hash anything outside the
 * home (the task being measured is hashed by the surface gate).
 */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atb/alloc.h"
#include "atb/atb.h"
#include "atb/protocol.h"
#include "protocol_int.h"
#include "util.h"
#include "banned.h"

#define MANIFEST_MAX_FILES 8192
#define HINT "; restore it, or after a deliberate change 'atb protocol manifest --write'"
#define MANIFEST_MAX_DEPTH 8

struct entry {
	char *path;       /* relative to the home */
	char sha256[65];
};

struct entries {
	struct entry *e;
	size_t n, cap;
};

static void entries_release(struct entries *s)
{
	size_t i;

	for (i = 0; i < s->n; i++)
		atb_free(s->e[i].path);
	atb_free(s->e);
	memset(s, 0, sizeof(*s));
}

static enum atb_status push(struct entries *s, const char *rel, const char *sha,
			    struct atb_error *err)
{
	if (s->n == MANIFEST_MAX_FILES)
		return atb_error_set(err, ATB_ERR_USAGE, "more than %d trusted files at '%s'",
				     MANIFEST_MAX_FILES, rel);
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 256;
		struct entry *p = atb_realloc(s->e, cap * sizeof(*p));

		if (!p)
			return atb_error_set(err, ATB_ERR_NOMEM, "cannot list trusted files: out of memory");
		s->e = p;
		s->cap = cap;
	}
	s->e[s->n].path = atb_strdup(rel);
	if (!s->e[s->n].path)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot list trusted files: out of memory");
	memcpy(s->e[s->n].sha256, sha, 65);
	s->n++;
	return ATB_OK;
}

/* What atb writes itself into a home (bytecode) is not shipped: skipped. */
static int skipped(const char *name, int is_dir, int py_only)
{
	size_t n = strlen(name);

	if (name[0] == '.')
		return 1;
	if (is_dir)
		return !strcmp(name, "__pycache__");
	if (n > 4 && !strcmp(name + n - 4, ".pyc"))
		return 1;
	return py_only && !(n > 3 && !strcmp(name + n - 3, ".py"));
}

static enum atb_status hash_one(const char *abs, const char *rel, const struct stat *sb,
				struct entries *s, struct atb_error *err)
{
	char sha[65];
	enum atb_status st;

	if (S_ISLNK(sb->st_mode)) {
		char target[4096], buf[4200];
		ssize_t k = readlink(abs, target, sizeof(target) - 1);

		if (k < 0)
			return atb_error_set(err, ATB_ERR_IO, "cannot read link '%s': %s", abs,
					     strerror(errno));
		target[k] = '\0';
		snprintf(buf, sizeof(buf), "symlink:%s", target);
		st = atbi_sha256_hex(buf, strlen(buf), sha);
	} else {
		char *data = NULL;
		size_t len = 0;

		st = atbi_read_file(abs, &data, &len, err);
		if (st)
			return st;
		st = atbi_sha256_hex(data, len, sha);
		atb_free(data);
	}
	if (st)
		return atb_error_set(err, ATB_ERR_INTERNAL, "cannot hash '%s'", abs);
	return push(s, rel, sha, err);
}

/* home/rel, a file or a folder walked without following links. */
static enum atb_status walk(const char *home, const char *rel, int py_only, int depth,
			    struct entries *s, struct atb_error *err)
{
	char abs[4096], sub[4096];
	struct stat sb;
	struct dirent *de;
	enum atb_status st = ATB_OK;
	DIR *d;

	if (snprintf(abs, sizeof(abs), "%s/%s", home, rel) >= (int)sizeof(abs))
		return atb_error_set(err, ATB_ERR_USAGE, "path too long: '%s/%s'", home, rel);
	if (lstat(abs, &sb) != 0) {
		if (errno == ENOENT && depth == 0)
			return ATB_OK;  /* a home without that part (a test's, say) */
		return atb_error_set(err, ATB_ERR_IO, "cannot read '%s': %s", abs, strerror(errno));
	}
	if (!S_ISDIR(sb.st_mode))
		return hash_one(abs, rel, &sb, s, err);
	if (depth >= MANIFEST_MAX_DEPTH)
		return atb_error_set(err, ATB_ERR_USAGE, "folder '%s' is nested too deep", abs);
	d = opendir(abs);
	if (!d)
		return atb_error_set(err, ATB_ERR_IO, "cannot read '%s': %s", abs, strerror(errno));
	while (!st && (de = readdir(d))) {
		struct stat cb;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (snprintf(sub, sizeof(sub), "%s/%s", rel, de->d_name) >= (int)sizeof(sub)) {
			st = atb_error_set(err, ATB_ERR_USAGE, "path too long: '%s'", sub);
			break;
		}
		if (snprintf(abs, sizeof(abs), "%s/%s", home, sub) >= (int)sizeof(abs) ||
		    lstat(abs, &cb) != 0) {
			st = atb_error_set(err, ATB_ERR_IO, "cannot read '%s'", abs);
			break;
		}
		if (skipped(de->d_name, S_ISDIR(cb.st_mode), py_only))
			continue;
		st = walk(home, sub, py_only, depth + 1, s, err);
	}
	closedir(d);
	return st;
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->path, ((const struct entry *)b)->path);
}

/* The trusted files of home as they are now, sorted. */
static enum atb_status scan(const char *home, struct entries *s, struct atb_error *err)
{
	enum atb_status st;

	memset(s, 0, sizeof(*s));
	st = walk(home, "include", 0, 0, s, err);
	if (!st)
		st = walk(home, "tasks", 0, 0, s, err);
	if (!st)
		st = walk(home, "engines", 0, 0, s, err);
	if (!st)
		st = walk(home, "python", 1, 0, s, err);
	if (!st)
		st = walk(home, "protocol/protocol.lock", 0, 0, s, err);
	if (st) {
		entries_release(s);
		return st;
	}
	if (s->n > 1)
		qsort(s->e, s->n, sizeof(s->e[0]), cmp_entry);
	return ATB_OK;
}

static void manifest_path(const char *home, char *out, size_t size)
{
	snprintf(out, size, "%s/protocol/manifest", home ? home : atb_home());
}

enum atb_status atb_protocol_manifest_write(const char *home, size_t *nfiles,
					    struct atb_error *err)
{
	static const char head[] =
		"# atb trusted-file manifest, written by 'atb protocol manifest --write';\n"
		"# do not edit.  SHA-256 of every trusted file of this home (docs/protocol.md),\n"
		"# checked at the start of every measurement: `sha256sum -c` reads it too.\n";
	struct entries s;
	char path[4200], *buf;
	size_t cap, n = 0, i;
	enum atb_status st;

	if (!home)
		home = atb_home();
	st = scan(home, &s, err);
	if (st)
		return st;
	cap = sizeof(head) + 1;
	for (i = 0; i < s.n; i++)
		cap += strlen(s.e[i].path) + 68;
	buf = atb_malloc(cap);
	if (!buf) {
		entries_release(&s);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot write the manifest: out of memory");
	}
	memcpy(buf, head, sizeof(head) - 1);
	n = sizeof(head) - 1;
	for (i = 0; i < s.n; i++)
		n += (size_t)snprintf(buf + n, cap - n, "%s  %s\n", s.e[i].sha256, s.e[i].path);
	manifest_path(home, path, sizeof(path));
	st = atbi_protocol_write_file(path, buf, n, err);
	atb_free(buf);
	if (!st && nfiles)
		*nfiles = s.n;
	entries_release(&s);
	return st;
}

/* Parse the manifest's lines into m (sorted as written; checked). */
static enum atb_status read_manifest(const char *path, struct entries *m, struct atb_error *err)
{
	char *data = NULL, *line, *save = NULL;
	size_t len = 0;
	unsigned lineno = 0;
	enum atb_status st;

	memset(m, 0, sizeof(*m));
	if (access(path, F_OK) != 0)
		return atb_error_set_at(err, ATB_ERR_PROTOCOL, path, 0, 0, NULL,
					"no trusted-file manifest: a maintainer writes it with "
					"'atb protocol manifest --write'");
	st = atbi_read_file(path, &data, &len, err);
	if (st)
		return st;
	for (line = strtok_r(data, "\n", &save); !st && line; line = strtok_r(NULL, "\n", &save)) {
		lineno++;
		if (line[0] == '#' || !line[0])
			continue;
		if (strlen(line) < 67 || line[64] != ' ' || line[65] != ' ') {
			st = atb_error_set_at(err, ATB_ERR_PROTOCOL, path, lineno, 1, NULL,
					      "malformed manifest line %u: expected 'SHA256  PATH'",
					      lineno);
			break;
		}
		line[64] = '\0';
		if (!atbi_is_sha256_hex(line)) {
			st = atb_error_set_at(err, ATB_ERR_PROTOCOL, path, lineno, 1, NULL,
					      "malformed manifest line %u: not a sha-256", lineno);
			break;
		}
		st = push(m, line + 66, line, err);
	}
	atb_free(data);
	if (!st && m->n > 1)
		qsort(m->e, m->n, sizeof(m->e[0]), cmp_entry);
	if (st)
		entries_release(m);
	return st;
}

enum atb_status atb_protocol_manifest_verify(const char *home, size_t *nfiles,
					     struct atb_error *err)
{
	struct entries m, now;
	char path[4200];
	size_t i = 0, j = 0;
	enum atb_status st;

	if (!home)
		home = atb_home();
	manifest_path(home, path, sizeof(path));
	st = read_manifest(path, &m, err);
	if (st)
		return st;
	st = scan(home, &now, err);
	if (st) {
		entries_release(&m);
		return st;
	}
	/* Both sorted: the first difference in path order is the one named;
	   the hint is for a maintainer who changed a trusted file on purpose. */
	while (!st && (i < m.n || j < now.n)) {
		int c = i == m.n ? 1 : j == now.n ? -1 : strcmp(m.e[i].path, now.e[j].path);

		if (c < 0)
			st = atb_error_set_at(err, ATB_ERR_PROTOCOL, path, 0, 0, NULL,
					      "trusted file '%s' is missing: the manifest has sha256 %s%s",
					      m.e[i].path, m.e[i].sha256, HINT);
		else if (c > 0)
			st = atb_error_set_at(err, ATB_ERR_PROTOCOL, path, 0, 0, NULL,
					      "file '%s' (sha256 %s) is not in the trusted-file "
					      "manifest%s", now.e[j].path, now.e[j].sha256, HINT);
		else if (strcmp(m.e[i].sha256, now.e[j].sha256))
			st = atb_error_set_at(err, ATB_ERR_PROTOCOL, path, 0, 0, NULL,
					      "trusted file '%s' changed: the manifest has sha256 %s, "
					      "the file has %s%s", m.e[i].path, m.e[i].sha256,
					      now.e[j].sha256, HINT);
		i += c <= 0;
		j += c >= 0;
	}
	if (!st && nfiles)
		*nfiles = m.n;
	entries_release(&m);
	entries_release(&now);
	return st;
}

int atb_protocol_manifest_exists(const char *home)
{
	char path[4200];

	manifest_path(home, path, sizeof(path));
	return access(path, F_OK) == 0;
}
