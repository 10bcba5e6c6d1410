/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The frozen protocol: loading protocol files (schema-checked, with the
 * digest of their canonical form), the lock that pins each frozen version's
 * digest, verification of every file against the lock, and freezing a new
 * version (the only writer of the lock).
 *
 * Does not: know the store; the store copies atb_protocol_frozen_list()
 * into its own table.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atb/alloc.h"
#include "atb/atb.h"
#include "protocol_int.h"
#include "banned.h"

#define LOCK_NAME "protocol.lock"
#define LOCK_MAX_ENTRIES 1000

struct lock_entry {
	int version;
	char file[128];       /* a plain file name inside protocol/ */
	char sha256[65];
};

struct lock {
	char path[PATH_MAX];  /* the lock file */
	char dir[PATH_MAX];   /* home/protocol */
	int current;          /* 0: no lock yet (freeze only) */
	struct lock_entry *e;
	size_t n;
};

static void lock_release(struct lock *l)
{
	atb_free(l->e);
	l->e = NULL;
	l->n = 0;
}

static enum atb_status join_path(char *buf, size_t size, const char *a, const char *b,
				 struct atb_error *err)
{
	int w = snprintf(buf, size, "%s/%s", a, b);

	if (w < 0 || (size_t)w >= size)
		return atb_error_set(err, ATB_ERR_USAGE, "path too long: '%s/%s'", a, b);
	return ATB_OK;
}

void atb_protocol_free(struct atb_protocol *p)
{
	if (!p)
		return;
	atb_free(p->canonical_json);
	atb_free(p->path);
	atb_free(p);
}

const struct atb_tolerance *atb_protocol_tolerance(const struct atb_protocol *p,
						   const char *dtype)
{
	size_t i;

	if (!p || !dtype)
		return NULL;
	for (i = 0; i < p->correctness.ntolerances; i++)
		if (!strcmp(p->correctness.tolerances[i].dtype, dtype))
			return &p->correctness.tolerances[i];
	return NULL;
}

enum atb_status atb_protocol_digest_file(const char *path, char out[65], struct atb_error *err)
{
	struct atbi_yaml y;
	char *canonical = NULL;
	enum atb_status st;

	out[0] = '\0';
	st = atbi_yaml_load(path, &y, err);
	if (!st)
		st = atbi_yaml_canonical(&y, NULL, &canonical, out, err);
	atb_free(canonical);
	atbi_yaml_release(&y);
	return st;
}

/* The "version" a file's JSON claims, or -1. */
static long long json_version(const json_t *root)
{
	json_t *v = json_object_get(root, "version");

	return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

/*
 * Check a loaded document against a lock entry: PROTOCOL when the digest
 * or the version differs.
 */
static enum atb_status check_against(const struct atbi_yaml *y, const json_t *json,
				     const char *digest, const struct lock_entry *e,
				     struct atb_error *err)
{
	long long v;

	if (strcmp(digest, e->sha256))
		return atb_error_set_at(err, ATB_ERR_PROTOCOL, y->path, 0, 0, NULL,
					"protocol '%s' changed without a new version: frozen "
					"digest %s, file digest %s; add a new version and lock "
					"entry with 'atb protocol freeze'",
					e->file, e->sha256, digest);
	v = json_version(json);
	if (v != e->version)
		return atb_error_set_at(err, ATB_ERR_PROTOCOL, y->path, 0, 0, "version",
					"protocol '%s' says version %lld but the lock freezes "
					"it as version %d", e->file, v, e->version);
	return ATB_OK;
}

/* Load, digest, (lock-check when e), validate. */
static enum atb_status load(const char *path, const struct lock_entry *e,
			    struct atb_protocol **out, struct atb_error *err)
{
	struct atbi_yaml y;
	struct atb_protocol *p = NULL;
	json_t *json = NULL;
	char *canonical = NULL;
	char digest[65];
	enum atb_status st;

	*out = NULL;
	st = atbi_yaml_load(path, &y, err);
	if (!st)
		st = atbi_yaml_canonical(&y, &json, &canonical, digest, err);
	if (!st && e)
		st = check_against(&y, json, digest, e, err);
	if (!st) {
		p = atb_calloc(1, sizeof(*p));
		if (!p)
			st = atb_error_set(err, ATB_ERR_NOMEM,
					   "cannot load '%s': out of memory", path);
		else
			p->timing.round_trip_max_share_under = -1;  /* absent: no rule */
	}
	if (!st)
		st = atbi_protocol_validate(&y, p, err);
	if (!st) {
		p->path = atb_strdup(path);
		if (!p->path)
			st = atb_error_set(err, ATB_ERR_NOMEM,
					   "cannot load '%s': out of memory", path);
	}
	json_decref(json);
	atbi_yaml_release(&y);
	if (st) {
		atb_free(canonical);
		atb_protocol_free(p);
		return st;
	}
	memcpy(p->digest, digest, sizeof(p->digest));
	p->canonical_json = canonical;
	*out = p;
	return ATB_OK;
}

enum atb_status atb_protocol_load_file(const char *path, struct atb_protocol **out,
				       struct atb_error *err)
{
	return load(path, NULL, out, err);
}

/* ---- the lock ---- */

static enum atb_status lock_fail(const struct atbi_yaml *y, struct fy_node *n,
				 const char *field, const char *what)
	;

static struct atb_error *lock_err;

static enum atb_status lock_fail(const struct atbi_yaml *y, struct fy_node *n,
				 const char *field, const char *what)
{
	unsigned line = 1, col = 1;

	atbi_yaml_mark(n, &line, &col);
	return atb_error_set_at(lock_err, ATB_ERR_SCHEMA, y->path, line, col, field, "%s", what);
}

static enum atb_status lock_int(const struct atbi_yaml *y, struct fy_node *n,
				const char *field, int *out, struct atb_error *err)
{
	struct atbi_scalar sc;
	enum atb_status st;

	if (!n || !fy_node_is_scalar(n))
		return lock_fail(y, n, field, "expected an integer >= 1");
	st = atbi_yaml_scalar(y, n, field, &sc, err);
	if (st)
		return st;
	if (sc.type != ATBI_SCALAR_INT || sc.i < 1 || sc.i > INT_MAX)
		return lock_fail(y, n, field, "expected an integer >= 1");
	*out = (int)sc.i;
	return ATB_OK;
}

static enum atb_status lock_str(const struct atbi_yaml *y, struct fy_node *n,
				const char *field, char *out, size_t size,
				struct atb_error *err)
{
	struct atbi_scalar sc;
	enum atb_status st;

	if (!n || !fy_node_is_scalar(n))
		return lock_fail(y, n, field, "expected a string");
	st = atbi_yaml_scalar(y, n, field, &sc, err);
	if (st)
		return st;
	if (sc.type != ATBI_SCALAR_STRING || !sc.len || sc.len >= size ||
	    memchr(sc.text, '\0', sc.len))
		return lock_fail(y, n, field, "expected a non-empty string");
	memcpy(out, sc.text, sc.len);
	out[sc.len] = '\0';
	return ATB_OK;
}

static enum atb_status parse_entry(const struct atbi_yaml *y, struct fy_node *n,
				   const char *path, struct lock_entry *e,
				   struct atb_error *err)
{
	struct fy_node_pair *pair;
	void *it = NULL;
	int seen = 0;
	char sub[256];
	enum atb_status st;

	if (!fy_node_is_mapping(n))
		return lock_fail(y, n, path, "expected a mapping {version, file, sha256}");
	while ((pair = fy_node_mapping_iterate(n, &it))) {
		struct fy_node *kn = fy_node_pair_key(pair), *vn = fy_node_pair_value(pair);
		size_t klen = 0;
		const char *ks = fy_node_get_scalar(kn, &klen);

		if (!ks)
			ks = "";
		atbi_path_key(sub, sizeof(sub), path, ks, klen);
		if (klen == 7 && !memcmp(ks, "version", 7)) {
			st = lock_int(y, vn, sub, &e->version, err);
			seen |= 1;
		} else if (klen == 4 && !memcmp(ks, "file", 4)) {
			st = lock_str(y, vn, sub, e->file, sizeof(e->file), err);
			if (!st && (strchr(e->file, '/') || e->file[0] == '.'))
				st = lock_fail(y, vn, sub, "expected a file name inside protocol/");
			seen |= 2;
		} else if (klen == 6 && !memcmp(ks, "sha256", 6)) {
			st = lock_str(y, vn, sub, e->sha256, sizeof(e->sha256), err);
			if (!st && !atbi_is_sha256_hex(e->sha256))
				st = lock_fail(y, vn, sub, "expected 64 lowercase hex digits");
			seen |= 4;
		} else {
			char msg[128];

			snprintf(msg, sizeof(msg), "unknown key '%.*s'",
				 klen > 60 ? 60 : (int)klen, ks);
			st = lock_fail(y, kn, sub, msg);
		}
		if (st)
			return st;
	}
	if (seen != 7) {
		const char *missing = !(seen & 1) ? "version" : !(seen & 2) ? "file" : "sha256";
		char msg[64];

		atbi_path_key(sub, sizeof(sub), path, missing, strlen(missing));
		snprintf(msg, sizeof(msg), "missing field '%s'", missing);
		return lock_fail(y, n, sub, msg);
	}
	return ATB_OK;
}

static enum atb_status parse_lock(const struct atbi_yaml *y, struct lock *l,
				  struct atb_error *err)
{
	struct fy_node *root = y->root, *frozen = NULL, *current = NULL, *item;
	struct fy_node_pair *pair;
	void *it = NULL;
	size_t i, j;
	enum atb_status st;
	char sub[64];

	if (!root || !fy_node_is_mapping(root))
		return lock_fail(y, root, "", "expected a mapping {current, frozen}");
	while ((pair = fy_node_mapping_iterate(root, &it))) {
		struct fy_node *kn = fy_node_pair_key(pair);
		size_t klen = 0;
		const char *ks = fy_node_get_scalar(kn, &klen);

		if (ks && klen == 7 && !memcmp(ks, "current", 7))
			current = fy_node_pair_value(pair);
		else if (ks && klen == 6 && !memcmp(ks, "frozen", 6))
			frozen = fy_node_pair_value(pair);
		else
			return lock_fail(y, kn, "", "unknown key in protocol lock");
	}
	if (!current)
		return lock_fail(y, root, "current", "missing field 'current'");
	if (!frozen)
		return lock_fail(y, root, "frozen", "missing field 'frozen'");
	st = lock_int(y, current, "current", &l->current, err);
	if (st)
		return st;
	if (!fy_node_is_sequence(frozen) || fy_node_sequence_item_count(frozen) < 1 ||
	    fy_node_sequence_item_count(frozen) > LOCK_MAX_ENTRIES)
		return lock_fail(y, frozen, "frozen", "expected a non-empty sequence");
	l->e = atb_calloc((size_t)fy_node_sequence_item_count(frozen), sizeof(*l->e));
	if (!l->e)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot read '%s': out of memory",
				     y->path);
	it = NULL;
	while ((item = fy_node_sequence_iterate(frozen, &it))) {
		atbi_path_index(sub, sizeof(sub), "frozen", l->n);
		st = parse_entry(y, item, sub, &l->e[l->n], err);
		if (st)
			return st;
		for (j = 0; j < l->n; j++)
			if (l->e[j].version == l->e[l->n].version ||
			    !strcmp(l->e[j].file, l->e[l->n].file))
				return lock_fail(y, item, sub,
						 "duplicate version or file in protocol lock");
		l->n++;
	}
	for (i = 0; i < l->n; i++)
		if (l->e[i].version == l->current)
			return ATB_OK;
	return lock_fail(y, current, "current", "current version has no frozen entry");
}

/* Read home/protocol/protocol.lock.  missing_ok: an absent lock is empty. */
static enum atb_status read_lock(const char *home, struct lock *l, int missing_ok,
				 struct atb_error *err)
{
	struct atbi_yaml y;
	enum atb_status st;

	memset(l, 0, sizeof(*l));
	if (!home)
		home = atb_home();
	st = join_path(l->dir, sizeof(l->dir), home, "protocol", err);
	if (!st)
		st = join_path(l->path, sizeof(l->path), l->dir, LOCK_NAME, err);
	if (st)
		return st;
	if (missing_ok && access(l->path, F_OK) && errno == ENOENT)
		return ATB_OK;
	st = atbi_yaml_load(l->path, &y, err);
	if (st == ATB_ERR_NOT_FOUND)
		st = atb_error_set_at(err, ATB_ERR_PROTOCOL, l->path, 0, 0, NULL,
				      "no protocol lock '%s': the protocol is not frozen",
				      l->path);
	if (!st) {
		lock_err = err;
		st = parse_lock(&y, l, err);
		lock_err = NULL;
	}
	atbi_yaml_release(&y);
	if (st)
		lock_release(l);
	return st;
}

static const struct lock_entry *find_version(const struct lock *l, int version)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		if (l->e[i].version == version)
			return &l->e[i];
	return NULL;
}

static enum atb_status load_entry(const struct lock *l, const struct lock_entry *e,
				  struct atb_protocol **out, struct atb_error *err)
{
	char path[PATH_MAX];
	enum atb_status st = join_path(path, sizeof(path), l->dir, e->file, err);

	if (!st)
		st = load(path, e, out, err);
	if (st == ATB_ERR_NOT_FOUND)
		atb_error_set(err, st = ATB_ERR_PROTOCOL,
			      "frozen protocol '%s' (version %d) is missing", e->file,
			      e->version);
	return st;
}

enum atb_status atb_protocol_load_version(const char *home, int version,
					  struct atb_protocol **out, struct atb_error *err)
{
	struct lock l;
	const struct lock_entry *e;
	enum atb_status st;

	*out = NULL;
	st = read_lock(home, &l, 0, err);
	if (st)
		return st;
	e = find_version(&l, version);
	if (!e)
		st = atb_error_set_at(err, ATB_ERR_PROTOCOL, l.path, 0, 0, NULL,
				      "protocol version %d is not frozen", version);
	else
		st = load_entry(&l, e, out, err);
	lock_release(&l);
	return st;
}

enum atb_status atb_protocol_load_current(const char *home, struct atb_protocol **out,
					  struct atb_error *err)
{
	struct lock l;
	enum atb_status st;

	*out = NULL;
	st = read_lock(home, &l, 0, err);
	if (st)
		return st;
	st = load_entry(&l, find_version(&l, l.current), out, err);
	lock_release(&l);
	return st;
}

enum atb_status atb_protocol_load_digest(const char *home, const char *digest,
					 struct atb_protocol **out, struct atb_error *err)
{
	struct lock l;
	size_t i;
	enum atb_status st;

	*out = NULL;
	st = read_lock(home, &l, 0, err);
	if (st)
		return st;
	for (i = 0; i < l.n; i++)
		if (digest && !strcmp(l.e[i].sha256, digest))
			break;
	if (i == l.n)
		st = atb_error_set_at(err, ATB_ERR_PROTOCOL, l.path, 0, 0, NULL,
				      "protocol digest '%.64s' is not frozen",
				      digest ? digest : "");
	else
		st = load_entry(&l, &l.e[i], out, err);
	lock_release(&l);
	return st;
}

/* Digest- and version-check one entry; hand back the canonical text if asked. */
static enum atb_status check_entry(const struct lock *l, const struct lock_entry *e,
				   char **canonical_out, struct atb_error *err)
{
	struct atbi_yaml y;
	json_t *json = NULL;
	char *canonical = NULL;
	char path[PATH_MAX], digest[65];
	enum atb_status st;

	if (canonical_out)
		*canonical_out = NULL;
	st = join_path(path, sizeof(path), l->dir, e->file, err);
	if (st)
		return st;
	st = atbi_yaml_load(path, &y, err);
	if (st == ATB_ERR_NOT_FOUND)
		st = atb_error_set_at(err, ATB_ERR_PROTOCOL, path, 0, 0, NULL,
				      "frozen protocol '%s' (version %d) is missing",
				      e->file, e->version);
	if (!st)
		st = atbi_yaml_canonical(&y, &json, &canonical, digest, err);
	if (!st)
		st = check_against(&y, json, digest, e, err);
	json_decref(json);
	atbi_yaml_release(&y);
	if (!st && canonical_out)
		*canonical_out = canonical;
	else
		atb_free(canonical);
	return st;
}

void atb_protocol_frozen_free(struct atb_frozen_protocol *list, size_t n)
{
	size_t i;

	if (!list)
		return;
	for (i = 0; i < n; i++) {
		atb_free(list[i].file);
		atb_free(list[i].canonical_json);
	}
	atb_free(list);
}

enum atb_status atb_protocol_frozen_list(const char *home, struct atb_frozen_protocol **out,
					 size_t *n, int *current_version,
					 struct atb_error *err)
{
	struct atb_frozen_protocol *list;
	struct lock l;
	char path[PATH_MAX];
	size_t i;
	enum atb_status st;

	*out = NULL;
	*n = 0;
	if (current_version)
		*current_version = 0;
	st = read_lock(home, &l, 0, err);
	if (st)
		return st;
	list = atb_calloc(l.n, sizeof(*list));
	if (!list) {
		lock_release(&l);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot list protocols: out of memory");
	}
	for (i = 0; i < l.n && !st; i++) {
		list[i].version = l.e[i].version;
		memcpy(list[i].digest, l.e[i].sha256, sizeof(list[i].digest));
		st = join_path(path, sizeof(path), l.dir, l.e[i].file, err);
		if (!st) {
			list[i].file = atb_strdup(path);
			if (!list[i].file)
				st = atb_error_set(err, ATB_ERR_NOMEM,
						   "cannot list protocols: out of memory");
		}
		if (!st)
			st = check_entry(&l, &l.e[i], &list[i].canonical_json, err);
	}
	if (st) {
		atb_protocol_frozen_free(list, l.n);
		lock_release(&l);
		return st;
	}
	*out = list;
	*n = l.n;
	if (current_version)
		*current_version = l.current;
	lock_release(&l);
	return ATB_OK;
}

enum atb_status atb_protocol_verify(const char *home, struct atb_error *err)
{
	struct lock l;
	size_t i;
	enum atb_status st;

	st = read_lock(home, &l, 0, err);
	for (i = 0; !st && i < l.n; i++)
		st = check_entry(&l, &l.e[i], NULL, err);
	lock_release(&l);
	return st;
}

/* ---- freezing ---- */

static enum atb_status write_file(const char *path, const char *data, size_t len,
				  struct atb_error *err)
{
	char tmp[PATH_MAX];
	FILE *f;
	int w = snprintf(tmp, sizeof(tmp), "%s.tmp", path);

	if (w < 0 || (size_t)w >= sizeof(tmp))
		return atb_error_set(err, ATB_ERR_USAGE, "path too long: '%s'", path);
	f = fopen(tmp, "wb");
	if (!f)
		return atb_error_set_at(err, ATB_ERR_IO, tmp, 0, 0, NULL,
					"cannot write '%s': %s", tmp, strerror(errno));
	if (fwrite(data, 1, len, f) != len || fflush(f) || fsync(fileno(f))) {
		fclose(f);
		remove(tmp);
		return atb_error_set_at(err, ATB_ERR_IO, tmp, 0, 0, NULL,
					"cannot write '%s': %s", tmp, strerror(errno));
	}
	if (fclose(f) || rename(tmp, path)) {
		remove(tmp);
		return atb_error_set_at(err, ATB_ERR_IO, path, 0, 0, NULL,
					"cannot write '%s': %s", path, strerror(errno));
	}
	return ATB_OK;
}

enum atb_status atbi_protocol_write_file(const char *path, const char *data, size_t len,
					 struct atb_error *err)
{
	return write_file(path, data, len, err);
}

static enum atb_status write_lock(const struct lock *l, int current, struct atb_error *err)
{
	size_t cap = 512 + l->n * 256, n = 0, i;
	char *buf = atb_malloc(cap);
	enum atb_status st;
	int w;

	if (!buf)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot write the lock: out of memory");
#define PUT(...)                                                           \
	do {                                                               \
		w = snprintf(buf + n, cap - n, __VA_ARGS__);               \
		if (w > 0)                                                 \
			n += (size_t)w < cap - n ? (size_t)w : cap - n - 1; \
	} while (0)
	PUT("# atb protocol lock, written by 'atb protocol freeze'; do not edit.\n"
	    "# Each entry pins the SHA-256 of a protocol file's canonical form\n"
	    "# (docs/internals/protocol.md).  Entries are only ever added.\n"
	    "current: %d\nfrozen:\n", current);
	for (i = 0; i < l->n; i++)
		PUT("  - version: %d\n    file: %s\n    sha256: %s\n", l->e[i].version,
		    l->e[i].file, l->e[i].sha256);
#undef PUT
	st = write_file(l->path, buf, n, err);
	atb_free(buf);
	return st;
}

enum atb_status atb_protocol_freeze(const char *home, const char *path, int *version,
				    char digest[65], struct atb_error *err)
{
	struct atb_protocol *p = NULL;
	struct lock l;
	struct lock_entry *grown;
	char dest[PATH_MAX], name[64];
	char *text = NULL;
	size_t i, len = 0;
	int next;
	enum atb_status st;
	struct stat sa, sb;

	if (version)
		*version = 0;
	if (digest)
		digest[0] = '\0';
	st = read_lock(home, &l, 1, err);
	for (i = 0; !st && i < l.n; i++)
		st = check_entry(&l, &l.e[i], NULL, err);
	if (!st)
		st = atb_protocol_load_file(path, &p, err);
	if (st)
		goto out;
	next = l.current + 1;
	if (p->version != next || find_version(&l, p->version)) {
		st = atb_error_set_at(err, ATB_ERR_PROTOCOL, path, 0, 0, "version",
				      "cannot freeze '%s' as version %d: the next version "
				      "is %d, and frozen entries are never changed",
				      path, p->version, next);
		goto out;
	}
	for (i = 0; i < l.n; i++)
		if (!strcmp(l.e[i].sha256, p->digest)) {
			st = atb_error_set_at(err, ATB_ERR_PROTOCOL, path, 0, 0, NULL,
					      "'%s' is already frozen as version %d", path,
					      l.e[i].version);
			goto out;
		}
	snprintf(name, sizeof(name), "v%d.yaml", next);
	st = join_path(dest, sizeof(dest), l.dir, name, err);
	if (st)
		goto out;
	if (!stat(dest, &sb)) {
		if (stat(path, &sa) || sa.st_dev != sb.st_dev || sa.st_ino != sb.st_ino) {
			st = atb_error_set_at(err, ATB_ERR_PROTOCOL, dest, 0, 0, NULL,
					      "'%s' already exists and is not '%s'; move it "
					      "away or freeze it", dest, path);
			goto out;
		}
	} else {
		st = atbi_read_file(path, &text, &len, err);
		if (!st)
			st = write_file(dest, text, len, err);
		if (st)
			goto out;
	}
	grown = atb_realloc(l.e, (l.n + 1) * sizeof(*l.e));
	if (!grown) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot freeze: out of memory");
		goto out;
	}
	l.e = grown;
	memset(&l.e[l.n], 0, sizeof(l.e[l.n]));
	l.e[l.n].version = next;
	snprintf(l.e[l.n].file, sizeof(l.e[l.n].file), "%s", name);
	memcpy(l.e[l.n].sha256, p->digest, sizeof(l.e[l.n].sha256));
	l.n++;
	st = write_lock(&l, next, err);
	/* The lock is a trusted file: a home with a manifest gets it rewritten,
	   or the freeze itself would leave the manifest stale. */
	if (!st && atb_protocol_manifest_exists(home))
		st = atb_protocol_manifest_write(home, NULL, err);
	if (!st) {
		if (version)
			*version = next;
		if (digest)
			memcpy(digest, p->digest, 65);
	}
out:
	atb_free(text);
	atb_protocol_free(p);
	lock_release(&l);
	return st;
}
