/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The results store: opening (checks before any write), schema creation,
 * and the writers (ingest, reject, review, boxes, frozen protocols, audit
 * events).  Every writer runs one transaction and appends its audit entry
 * in it; the schema's constraints and triggers do the validating, this file
 * only maps their "atb-rule:" refusals to statuses.
 *
 * Does not: re-verify stored rows (check.c) or hash the chain (src/audit).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atb/alloc.h"
#include "atb/audit.h"
#include "proc/proc_int.h"
#include "store/store_int.h"
#include "banned.h"

static const struct {
	const char *rule;
	enum atb_status status;
} rules[] = {
	{"paired_seeds", ATB_REJECTED_PAIRED_SEEDS},
	{"unfrozen_protocol", ATB_REJECTED_UNFROZEN_PROTOCOL},
	{"no_box", ATB_REJECTED_NO_BOX},
	{"baseline_elsewhere", ATB_REJECTED_BASELINE_ELSEWHERE},
	{"cv_over_cap", ATB_REJECTED_CV_OVER_CAP},
	{"anomaly_not_quarantined", ATB_REJECTED_ANOMALY_NOT_QUARANTINED},
	{"duplicate_seed", ATB_REJECTED_DUPLICATE_SEED},
	{"bad_time", ATB_REJECTED_BAD_TIME},
	{"append_only", ATB_REJECTED_APPEND_ONLY},
	{"audit_chain", ATB_REJECTED_AUDIT_CHAIN},
	{"review", ATB_REJECTED_REVIEW},
	{"malformed", ATB_REJECTED_MALFORMED},
	{"not_derived", ATB_REJECTED_NOT_DERIVED},
};

enum atb_status atbi_store_rule_status(const char *rule, size_t len)
{
	size_t i;

	for (i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
		if (strlen(rules[i].rule) == len && !memcmp(rules[i].rule, rule, len))
			return rules[i].status;
	return ATB_REJECTED_MALFORMED;
}

enum atb_status atbi_store_sqlerr(struct atb_store *s, int rc, const char *what,
				  struct atb_error *err)
{
	const char *msg = s && s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc);
	const char *path = s && s->path ? s->path : "";
	const char *r;

	switch (rc & 0xff) {
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return atb_error_set(err, ATB_ERR_LOCKED,
				     "store '%s' is locked by another process", path);
	case SQLITE_NOMEM:
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot %s: out of memory", what);
	case SQLITE_NOTADB:
		return atb_error_set(err, ATB_ERR_NOT_A_STORE, "'%s' is not an atb store", path);
	case SQLITE_CONSTRAINT:
		r = strstr(msg, "atb-rule:");
		if (r) {
			const char *id = r + 9, *end = strchr(id, ':');
			size_t len = end ? (size_t)(end - id) : strlen(id);

			return atb_error_set(err, atbi_store_rule_status(id, len),
					     "%s refused: %s", what, r);
		}
		return atb_error_set(err, ATB_REJECTED_MALFORMED,
				     "%s refused: atb-rule:malformed: %s", what, msg);
	default:
		return atb_error_set(err, ATB_ERR_STORE, "cannot %s in store '%s': %s",
				     what, path, msg);
	}
}

const char *atb_arm_name(enum atb_arm arm)
{
	switch (arm) {
	case ATB_ARM_BASELINE: return "baseline";
	case ATB_ARM_CANDIDATE: return "candidate";
	case ATB_ARM_NAIVE: return "naive";
	case ATB_ARM_BASELINE_ALONE: return "baseline_alone";
	}
	return "invalid";
}

const char *atb_store_path(const struct atb_store *s)
{
	return s->path;
}

const char *atb_store_mirror_path(const struct atb_store *s)
{
	return s->mirror_path;
}

/* ---- transactions ---- */

enum atb_status atbi_store_begin(struct atb_store *s, struct atb_error *err)
{
	int rc;

	if (s->read_only)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "store '%s' is open read-only", s->path);
	rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "begin a transaction", err);
	s->in_txn = 1;
	s->mirror_pending = -1;
	s->witness_pending = -1;
	return ATB_OK;
}

static void undo_mirror(struct atb_store *s)
{
	if (s->mirror_pending >= 0 && s->mirror_fd >= 0) {
		if (ftruncate(s->mirror_fd, s->mirror_pending) == 0)
			(void)fdatasync(s->mirror_fd);
	}
	if (s->witness_pending >= 0 && s->witness_fd >= 0) {
		if (ftruncate(s->witness_fd, s->witness_pending) == 0)
			(void)fdatasync(s->witness_fd);
	}
	s->mirror_pending = -1;
	s->witness_pending = -1;
}

enum atb_status atbi_store_commit(struct atb_store *s, struct atb_error *err)
{
	int rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);

	if (rc != SQLITE_OK) {
		enum atb_status st = atbi_store_sqlerr(s, rc, "commit", err);

		atbi_store_rollback(s);
		return st;
	}
	s->in_txn = 0;
	s->mirror_pending = -1;
	s->witness_pending = -1;
	return ATB_OK;
}

void atbi_store_rollback(struct atb_store *s)
{
	if (!sqlite3_get_autocommit(s->db))
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
	undo_mirror(s);
	s->in_txn = 0;
}

/* ---- open / close ---- */

/*
 * Look at path before writing to it.  The look is read-only, except where
 * a crash left a hot rollback journal (or a WAL needing recovery) that a
 * read-only connection cannot undo: then a writable mode opens it
 * read-write once, which lets SQLite roll the interrupted transaction back.
 */
static enum atb_status probe(const char *path, int writable, int *user_version, int *empty,
			     struct atb_error *err)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int rc, app = 0, objects = 0;
	enum atb_status status = ATB_OK;
	struct atb_store tmp = {0};

	*user_version = 0;
	*empty = 0;
again:
	rc = sqlite3_open_v2(path, &db, writable > 1 ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY,
			     NULL);
	tmp.db = db;
	tmp.path = (char *)path;
	if (rc != SQLITE_OK) {
		status = atbi_store_sqlerr(&tmp, rc, "open", err);
		goto out;
	}
	sqlite3_busy_timeout(db, ATB_STORE_BUSY_TIMEOUT_MS);
	rc = sqlite3_prepare_v2(db,
		"SELECT (SELECT application_id FROM pragma_application_id),"
		" (SELECT user_version FROM pragma_user_version),"
		" (SELECT count(*) FROM sqlite_schema)", -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	if (rc != SQLITE_ROW && (rc & 0xff) == SQLITE_READONLY && db &&
	    (sqlite3_extended_errcode(db) == SQLITE_READONLY_ROLLBACK ||
	     sqlite3_extended_errcode(db) == SQLITE_READONLY_RECOVERY)) {
		if (writable == 1) {
			sqlite3_finalize(st);
			st = NULL;
			sqlite3_close(db);
			db = NULL;
			writable = 2;
			goto again;
		}
		status = atb_error_set(err, ATB_ERR_STORE,
				       "store '%s' was left in the middle of a write by a crash;"
				       " open it read-write once (e.g. 'atb db init') to roll it back",
				       path);
		goto out;
	}
	if (rc != SQLITE_ROW) {
		if ((rc & 0xff) == SQLITE_NOTADB || (rc & 0xff) == SQLITE_CORRUPT)
			status = atb_error_set(err, ATB_ERR_NOT_A_STORE,
					       "'%s' is not an atb store", path);
		else
			status = atbi_store_sqlerr(&tmp, rc, "read", err);
		goto out;
	}
	app = sqlite3_column_int(st, 0);
	*user_version = sqlite3_column_int(st, 1);
	objects = sqlite3_column_int(st, 2);
	if (app == 0 && *user_version == 0 && objects == 0) {
		*empty = 1;
	} else if (app != ATB_STORE_APPLICATION_ID || *user_version < 1) {
		status = atb_error_set(err, ATB_ERR_NOT_A_STORE, "'%s' is not an atb store", path);
	} else if (*user_version > ATB_STORE_SCHEMA_VERSION) {
		status = atb_error_set(err, ATB_ERR_STORE_NEWER,
				       "store '%s' has schema %d, this atb reads up to %d; upgrade atb",
				       path, *user_version, ATB_STORE_SCHEMA_VERSION);
	} else if (*user_version < ATB_STORE_SCHEMA_OLDEST) {
		/* No user store predates v2 worth migrating: refuse, never rewrite. */
		status = atb_error_set(err, ATB_ERR_NOT_A_STORE,
				       "store '%s' has schema %d, which this atb no longer reads (it reads %d-%d);"
				       " create a new store with 'atb db init'",
				       path, *user_version, ATB_STORE_SCHEMA_OLDEST,
				       ATB_STORE_SCHEMA_VERSION);
	}
out:
	sqlite3_finalize(st);
	sqlite3_close(db);
	return status;
}

static enum atb_status create_schema(struct atb_store *s, struct atb_error *err)
{
	enum atb_status st;
	sqlite3_stmt *q = NULL;
	int rc, have = 0;
	char pragmas[128];

	st = atbi_store_begin(s, err);
	if (st)
		return st;
	/* Another process may have created it while we waited for the lock. */
	rc = sqlite3_prepare_v2(s->db, "SELECT user_version FROM pragma_user_version",
				-1, &q, NULL);
	if (rc == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
		have = sqlite3_column_int(q, 0);
	sqlite3_finalize(q);
	if (have) {
		atbi_store_rollback(s);
		return ATB_OK;
	}
	rc = sqlite3_exec(s->db, atbi_store_schema_sql, NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(s->db, atbi_store_schema_v3_sql, NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(s->db, atbi_store_schema_v4_sql, NULL, NULL, NULL);
	if (rc == SQLITE_OK) {
		snprintf(pragmas, sizeof(pragmas),
			 "PRAGMA application_id = %d; PRAGMA user_version = %d;",
			 ATB_STORE_APPLICATION_ID, ATB_STORE_SCHEMA_VERSION);
		rc = sqlite3_exec(s->db, pragmas, NULL, NULL, NULL);
	}
	if (rc != SQLITE_OK) {
		st = atbi_store_sqlerr(s, rc, "create the schema", err);
		atbi_store_rollback(s);
		return st;
	}
	st = atbi_store_commit(s, err);
	if (st == ATB_OK)
		s->schema = ATB_STORE_SCHEMA_VERSION;
	return st;
}

/*
 * v2 or v3 -> v4 in one transaction, with an audit entry that says from
 * which: v2 -> v3 marks where row hashes begin (entries before it are
 * "legacy", not bound to their rows); v3 -> v4 lets an iteration's result
 * be on a box its run was resumed on with --allow-other-box.
 */
static enum atb_status migrate(struct atb_store *s, struct atb_error *err)
{
	enum atb_status st;
	sqlite3_stmt *q = NULL;
	json_t *payload;
	char pragma[64];
	int rc, have = 0;

	st = atbi_store_begin(s, err);
	if (st)
		return st;
	rc = sqlite3_prepare_v2(s->db, "SELECT user_version FROM pragma_user_version",
				-1, &q, NULL);
	if (rc == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
		have = sqlite3_column_int(q, 0);
	sqlite3_finalize(q);
	if (have < ATB_STORE_SCHEMA_OLDEST || have >= ATB_STORE_SCHEMA_VERSION) {
		/* Another process migrated it while we waited for the lock. */
		atbi_store_rollback(s);
		s->schema = have;
		return ATB_OK;
	}
	snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %d;", ATB_STORE_SCHEMA_VERSION);
	rc = have < 3 ? sqlite3_exec(s->db, atbi_store_schema_v3_sql, NULL, NULL, NULL) : SQLITE_OK;
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(s->db, atbi_store_schema_v4_sql, NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(s->db, pragma, NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		st = atbi_store_sqlerr(s, rc, "migrate the store to schema 4", err);
		atbi_store_rollback(s);
		return st;
	}
	s->schema = ATB_STORE_SCHEMA_VERSION;
	atb_alloc_install_json();
	payload = json_pack("{s:i, s:i}", "from", have, "to", ATB_STORE_SCHEMA_VERSION);
	st = payload ? atbi_audit_append(s, ATBI_AUDIT_MIGRATED, payload, NULL, err)
		     : atb_error_set(err, ATB_ERR_NOMEM, "cannot migrate the store: out of memory");
	json_decref(payload);
	if (st == ATB_OK)
		st = atbi_store_commit(s, err);
	else
		atbi_store_rollback(s);
	if (st)
		s->schema = have;
	return st;
}

/* Remove path+suffix if it is there; 0, or -1 with errno set. */
static int unlink_suffix(const char *path, const char *suffix)
{
	char p[PATH_MAX];
	int w = snprintf(p, sizeof(p), "%s%s", path, suffix);

	if (w < 0 || (size_t)w >= sizeof(p)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return unlink(p) && errno != ENOENT ? -1 : 0;
}

static int fsync_parent(const char *path)
{
	char dir[PATH_MAX], *slash;
	int fd, rc;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (slash)
		slash[slash == dir ? 1 : 0] = '\0';
	fd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
}

/*
 * Create the store at path, which is absent or an empty database.
 *
 * The schema is built in "<path>.creating" and renamed into place, so that
 * a process killed at any point leaves either no store (and a leftover
 * that the next creation clears) or a complete one: building it in place
 * left, killed at the wrong fsync, a schema half-written beside a hot
 * journal that every read-only look refused with "attempt to write a
 * readonly database".  The audit mirror is not touched here: it appears
 * with the first audit entry, which is written in the complete store like
 * any later one (see atb/audit.h for how those survive a crash).
 *
 * Creators serialise on an flock of the ".creating" file: the second one
 * waits, then finds the store in place and leaves it alone.
 */
static enum atb_status create_store(const char *path, struct atb_error *err)
{
	char tmp[PATH_MAX], mirror[PATH_MAX];
	struct stat a, b;
	struct atb_store t = {0};
	enum atb_status st = ATB_OK;
	int fd = -1, rc, uv = 0, empty = 1, renamed = 0;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.creating", path) >= sizeof(tmp) ||
	    (size_t)snprintf(mirror, sizeof(mirror), "%s.audit.jsonl", path) >= sizeof(mirror))
		return atb_error_set(err, ATB_ERR_USAGE, "store path too long: '%s'", path);
	for (;;) {
		fd = open(tmp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
		if (fd < 0)
			return atb_error_set(err, ATB_ERR_IO, "cannot create store '%s': %s",
					     path, strerror(errno));
		if (flock(fd, LOCK_EX)) {
			st = atb_error_set(err, ATB_ERR_IO, "cannot lock '%s': %s", tmp,
					   strerror(errno));
			close(fd);
			return st;
		}
		/* The lock is ours if the name still leads to the file we locked. */
		if (!fstat(fd, &a) && !stat(tmp, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
			break;
		close(fd);
	}
	if (stat(path, &b) == 0) {
		if (b.st_size > 0) {
			st = probe(path, 1, &uv, &empty, err);
			if (st || !empty)
				goto out;  /* another creator finished first, or not a store */
		}
	} else if (errno != ENOENT) {
		st = atb_error_set(err, ATB_ERR_IO, "cannot create store '%s': %s", path,
				   strerror(errno));
		goto out;
	}
	if (stat(mirror, &b) == 0) {
		/* Never start a new chain on top of the record of a removed store. */
		st = atb_error_set(err, ATB_ERR_AUDIT,
				   "audit mirror '%s' exists but its store '%s' does not;"
				   " move the mirror away to create a new store", mirror, path);
		goto out;
	}

	/* What a killed creation left is garbage: start again from nothing. */
	if (ftruncate(fd, 0) || unlink_suffix(tmp, "-journal") || unlink_suffix(tmp, "-wal") ||
	    unlink_suffix(tmp, "-shm")) {
		st = atb_error_set(err, ATB_ERR_IO, "cannot clear '%s': %s", tmp, strerror(errno));
		goto out;
	}
	t.path = tmp;
	t.mirror_fd = -1;
	t.mirror_pending = -1;
	rc = sqlite3_open_v2(tmp, &t.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_extended_result_codes(t.db, 1);
		rc = sqlite3_exec(t.db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;",
				  NULL, NULL, NULL);
	}
	if (rc != SQLITE_OK) {
		st = atbi_store_sqlerr(&t, rc, "create the store", err);
		goto out;
	}
	st = create_schema(&t, err);
	if (st)
		goto out;
	/* The last connection's close checkpoints the WAL into the file and removes it. */
	rc = sqlite3_close(t.db);
	t.db = NULL;
	if (rc != SQLITE_OK) {
		st = atb_error_set(err, ATB_ERR_STORE, "cannot create store '%s': %s", path,
				   sqlite3_errstr(rc));
		goto out;
	}
	/*
	 * A -wal, -shm or -journal beside an absent or empty store belongs to
	 * no content we keep, and SQLite would replay it into the new file.
	 */
	if (fsync(fd) || unlink_suffix(path, "-wal") || unlink_suffix(path, "-shm") ||
	    unlink_suffix(path, "-journal") || unlink_suffix(tmp, "-wal") ||
	    unlink_suffix(tmp, "-shm") || rename(tmp, path) || fsync_parent(path)) {
		st = atb_error_set(err, ATB_ERR_IO, "cannot create store '%s': %s", path,
				   strerror(errno));
		goto out;
	}
	renamed = 1;
out:
	if (t.db)
		sqlite3_close(t.db);
	if (!renamed) {
		/* Still holding the lock: nothing of a creation that did not happen stays. */
		(void)unlink_suffix(tmp, "");
		(void)unlink_suffix(tmp, "-journal");
		(void)unlink_suffix(tmp, "-wal");
		(void)unlink_suffix(tmp, "-shm");
	}
	close(fd);
	return st;
}

enum atb_status atb_store_open(const char *path, enum atb_store_mode mode,
			       struct atb_store **out, struct atb_error *err)
{
	struct atb_store *s;
	struct stat sb;
	enum atb_status st;
	int uv = 0, empty = 1, rc, flags;
	size_t plen;

	*out = NULL;
	if (!path || !*path)
		return atb_error_set(err, ATB_ERR_USAGE, "no store path given");
	{
		/* PROTO: sandbox -- no job may ever see this store's folder */
		char dir[4096], *slash;

		snprintf(dir, sizeof(dir), "%s", path);
		slash = strrchr(dir, '/');
		if (slash)
			*slash = '\0';
		atbi_sandbox_forbid(slash ? (dir[0] ? dir : "/") : ".");
	}
	if (stat(path, &sb) == 0) {
		if (!S_ISREG(sb.st_mode))
			return atb_error_set(err, ATB_ERR_NOT_A_STORE,
					     "'%s' is not an atb store", path);
		if (sb.st_size > 0) {
			st = probe(path, mode != ATB_STORE_READ_ONLY, &uv, &empty, err);
			if (st)
				return st;
		}
		if (empty && mode != ATB_STORE_CREATE)
			return atb_error_set(err, ATB_ERR_NOT_A_STORE,
					     "'%s' is not an atb store", path);
	} else if (errno != ENOENT) {
		return atb_error_set(err, ATB_ERR_IO, "cannot open store '%s': %s",
				     path, strerror(errno));
	} else if (mode != ATB_STORE_CREATE) {
		return atb_error_set(err, ATB_ERR_NOT_FOUND,
				     "store '%s' does not exist; create it with 'atb db init'", path);
	}
	if (empty) {
		st = create_store(path, err);
		if (st == ATB_OK)
			st = probe(path, 1, &uv, &empty, err);
		if (st == ATB_OK && empty)
			st = atb_error_set(err, ATB_ERR_INTERNAL, "store '%s' is still empty after"
					   " its creation", path);
		if (st)
			return st;
	}

	s = atb_calloc(1, sizeof(*s));
	if (!s)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot open store '%s': out of memory", path);
	s->mirror_fd = -1;
	s->mirror_pending = -1;
	s->witness_fd = -1;
	s->witness_pending = -1;
	s->read_only = mode == ATB_STORE_READ_ONLY;
	s->path = atb_strdup(path);
	plen = strlen(path);
	s->mirror_path = atb_malloc(plen + sizeof(".audit.jsonl"));
	if (!s->path || !s->mirror_path) {
		atb_store_close(s);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot open store '%s': out of memory", path);
	}
	memcpy(s->mirror_path, path, plen);
	memcpy(s->mirror_path + plen, ".audit.jsonl", sizeof(".audit.jsonl"));

	if (!s->read_only) {
		/* The witness ($ATB_AUDIT_WITNESS) is kept outside the store's folder. */
		st = atbi_audit_witness_setup(s, getenv("ATB_AUDIT_WITNESS"), err);
		if (st) {
			atb_store_close(s);
			return st;
		}
	}
	/* Never SQLITE_OPEN_CREATE: a new store comes only from create_store. */
	flags = s->read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE;
	rc = sqlite3_open_v2(path, &s->db, flags | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		st = atbi_store_sqlerr(s, rc, "open", err);
		atb_store_close(s);
		return st;
	}
	sqlite3_extended_result_codes(s->db, 1);
	sqlite3_busy_timeout(s->db, ATB_STORE_BUSY_TIMEOUT_MS);
	s->schema = empty ? ATB_STORE_SCHEMA_VERSION : uv;
	if (!s->read_only) {
		/* A 64 MiB page cache keeps a large job's sample b-tree in memory. */
		rc = sqlite3_exec(s->db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
				  " PRAGMA cache_size = -65536;", NULL, NULL, NULL);
		if (rc != SQLITE_OK) {
			st = atbi_store_sqlerr(s, rc, "set up", err);
			atb_store_close(s);
			return st;
		}
		st = atbi_audit_recover(s, err);
		if (st == ATB_OK && s->schema < ATB_STORE_SCHEMA_VERSION)
			st = migrate(s, err);
		if (st) {
			atb_store_close(s);
			return st;
		}
	}
	*out = s;
	return ATB_OK;
}

void atb_store_close(struct atb_store *s)
{
	if (!s)
		return;
	if (s->db && s->in_txn)
		atbi_store_rollback(s);
	sqlite3_finalize(s->st_job);
	sqlite3_finalize(s->st_sample);
	sqlite3_finalize(s->st_sample1);
	sqlite3_finalize(s->st_seed);
	sqlite3_finalize(s->st_result);
	sqlite3_finalize(s->st_audit);
	if (s->db)
		sqlite3_close(s->db);
	if (s->mirror_fd >= 0)
		close(s->mirror_fd);
	if (s->witness_fd >= 0)
		close(s->witness_fd);
	atb_free(s->witness_path);
	atb_free(s->path);
	atb_free(s->mirror_path);
	atb_free(s);
}

/* ---- helpers ---- */

static enum atb_status prep(struct atb_store *s, sqlite3_stmt **st, const char *sql,
			    struct atb_error *err)
{
	int rc;

	if (*st) {
		sqlite3_reset(*st);
		return ATB_OK;
	}
	rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "prepare a statement", err);
	return ATB_OK;
}

/* Step a write statement that returns no row, then reset it. */
static int step_done(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	return rc == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(sqlite3_db_handle(st));
}

static void bind_text(sqlite3_stmt *st, int i, const char *v)
{
	if (v)
		sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, i);
}

/* Parse text as a JSON object, redact it and return its canonical text. */
static enum atb_status canonical_object(const char *text, const char *what, char **out,
					struct atb_error *err)
{
	json_t *v;
	json_error_t je;
	enum atb_status st;

	*out = NULL;
	atb_alloc_install_json();
	v = json_loads(text ? text : "{}", JSON_REJECT_DUPLICATES, &je);
	if (!v)
		return atb_error_set(err, ATB_ERR_PARSE, "%s is not valid json: %s", what, je.text);
	if (!json_is_object(v)) {
		json_decref(v);
		return atb_error_set(err, ATB_ERR_SCHEMA, "%s is not a json object", what);
	}
	st = atbi_redact_json(v);
	if (st == ATB_OK)
		st = atbi_json_canonical(v, out, err);
	else
		atb_error_set(err, st, "cannot redact %s: out of memory", what);
	json_decref(v);
	return st;
}

/* Look up (and cache) the protocol's anomaly factor; INFINITY when unknown. */
static enum atb_status anomaly_factor(struct atb_store *s, const char *digest, double *factor,
				      struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	json_t *root, *f;
	json_error_t je;
	int rc;

	*factor = INFINITY;
	if (!digest)
		return ATB_OK;
	if (s->factor_digest[0] && !strcmp(s->factor_digest, digest)) {
		*factor = s->factor;
		return ATB_OK;
	}
	rc = sqlite3_prepare_v2(s->db, "SELECT canonical FROM frozen_protocol WHERE digest = ?",
				-1, &q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "read the frozen protocol", err);
	sqlite3_bind_text(q, 1, digest, -1, SQLITE_STATIC);
	if (sqlite3_step(q) != SQLITE_ROW) {
		sqlite3_finalize(q);
		return ATB_OK;  /* not frozen: the schema refuses the job */
	}
	atb_alloc_install_json();
	root = json_loads((const char *)sqlite3_column_text(q, 0), 0, &je);
	sqlite3_finalize(q);
	if (!root)
		return atb_error_set(err, ATB_ERR_NOMEM,
				     "cannot read frozen protocol '%s': %s", digest, je.text);
	f = json_object_get(json_object_get(json_object_get(root, "gates"), "anomaly_breaker"),
			    "factor");
	/* PROTO: gates.anomaly_breaker.factor */
	if (json_is_number(f))
		*factor = json_number_value(f);
	json_decref(root);
	snprintf(s->factor_digest, sizeof(s->factor_digest), "%s", digest);
	s->factor = *factor;
	return ATB_OK;
}

static int valid_kind(const char *k)
{
	size_t n = 0;

	if (!k)
		return 0;
	for (; k[n]; n++)
		if (!((k[n] >= 'a' && k[n] <= 'z') || (k[n] >= '0' && k[n] <= '9') ||
		      k[n] == '_' || k[n] == '.' || k[n] == ':' || k[n] == '-'))
			return 0;
	return n >= 1 && n <= 63;
}

/* ---- one audited row ---- */

/* What one single-row writer inserts and how its audit entry is named. */
struct audited_row {
	const char *what;     /* the SQL failure's subject: "review", ... */
	const char *kind;     /* the audit entry's kind */
	const char *id_key;   /* the payload key of the new row's id; NULL: none */
	const char *nomem;    /* the message when the payload is missing */
};

/*
 * The tail every single-row writer shares, inside the transaction it
 * began: step the INSERT q (prepared and bound by the caller; prep_rc its
 * prepare's status; finalized here; NULL: no row, the entry alone), put
 * the new row's id into payload under r->id_key, append the audit entry,
 * commit.  On any failure the transaction is rolled back.  Takes payload
 * (NULL: out of memory).  The row's id in *id only when committed.
 */
static enum atb_status insert_audited(struct atb_store *s, const struct audited_row *r,
				      int prep_rc, sqlite3_stmt *q, json_t *payload,
				      int64_t *seq, int64_t *id, struct atb_error *err)
{
	enum atb_status st;
	int64_t rowid = 0;
	int rc = prep_rc == SQLITE_OK && q ? step_done(q) : prep_rc;

	sqlite3_finalize(q);
	if (rc != SQLITE_OK) {
		st = atbi_store_sqlerr(s, rc, r->what, err);
		goto fail;
	}
	if (q)
		rowid = sqlite3_last_insert_rowid(s->db);
	if (!payload ||
	    (r->id_key && json_object_set_new(payload, r->id_key, json_integer(rowid)))) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "%s", r->nomem);
		goto fail;
	}
	st = atbi_audit_append(s, r->kind, payload, seq, err);
	if (st)
		goto fail;
	st = atbi_store_commit(s, err);
	if (st == ATB_OK && id)
		*id = rowid;
	json_decref(payload);
	return st;
fail:
	atbi_store_rollback(s);
	json_decref(payload);
	return st;
}

/* ---- rejections ---- */

static enum atb_status insert_rejection(struct atb_store *s, const char *job_uuid,
					const char *digest, const char *rule,
					enum atb_status status,
					const char *reason, const char *detail_canonical,
					int64_t *rejection_id, int64_t *seq,
					struct atb_error *err)
{
	static const struct audited_row row = {"record the rejection", "rejection", "rejection",
					       "cannot record a rejection: out of memory"};
	sqlite3_stmt *q = NULL;
	char now[40], *red = NULL;
	enum atb_status st;
	int rc;

	red = atbi_redact_string(reason ? reason : "");
	if (!red)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot record a rejection: out of memory");
	st = atbi_store_begin(s, err);
	if (st == ATB_OK) {
		atbi_audit_time(now, sizeof(now));
		/* A v2 store read-write is migrated at open: the column is there. */
		rc = sqlite3_prepare_v2(s->db,
			"INSERT INTO rejection (job_uuid, rule, status, reason, detail, created,"
			" protocol_digest) VALUES (?, ?, ?, ?, ?, ?, ?)", -1, &q, NULL);
		if (rc == SQLITE_OK) {
			bind_text(q, 7, digest);
			bind_text(q, 1, job_uuid);
			bind_text(q, 2, rule);
			sqlite3_bind_int(q, 3, (int)status);
			bind_text(q, 4, red);
			bind_text(q, 5, detail_canonical ? detail_canonical : "{}");
			bind_text(q, 6, now);
		}
		st = insert_audited(s, &row, rc, q,
				    json_pack("{s:s?, s:s, s:s, s:i, s:s, s:s?}", "job", job_uuid,
					      "rule", rule, "status", atb_status_name(status),
					      "code", (int)status, "reason", red, "protocol", digest),
				    seq, rejection_id, err);
	}
	atb_free(red);
	return st;
}

enum atb_status atb_store_reject(struct atb_store *s, const char *job_uuid,
				 const char *protocol_digest, const char *rule,
				 enum atb_status status,
				 const char *reason, const char *detail_json,
				 int64_t *rejection_id, struct atb_error *err)
{
	char *detail = NULL;
	enum atb_status st;

	if (rejection_id)
		*rejection_id = 0;
	if (!s || !rule || !*rule || !reason || !*reason || status == ATB_OK)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "a rejection needs a rule, a failure status and a reason");
	st = canonical_object(detail_json, "rejection detail", &detail, err);
	if (st)
		return st;
	st = insert_rejection(s, job_uuid, protocol_digest, rule, status, reason, detail,
			      rejection_id, NULL, err);
	atb_free(detail);
	return st;
}

/* ---- ingest ---- */

#define SQL_JOB "INSERT INTO job (uuid, kind, task, candidate, unit, protocol_digest," \
	" box_fingerprint, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
#define SQL_SAMPLE "INSERT INTO sample (job, arm, seed, trial, value) VALUES "
/*
 * Samples per INSERT statement: one statement per row costs a statement
 * journal and a VDBE start per row; 128 rows of 4 bound values each (the
 * job is ?1) stay far below SQLite's 32766 parameters.
 */
#define SAMPLE_BATCH 128
#define SQL_SEED "INSERT INTO seed_result (job, seed, baseline_median," \
	" candidate_median, ratio) VALUES (?, ?, ?, ?, ?)"
#define SQL_RESULT "INSERT INTO result (job, kind, metric, baseline_job, n_seeds," \
	" speedup, ci_low, ci_high, cv, status, stats, protocol_digest, box_fingerprint," \
	" created) VALUES (?1, ?2, ?3, CASE WHEN ?4 IS NULL THEN ?1 ELSE" \
	" (SELECT id FROM job WHERE uuid = ?4) END, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"

static void bind_real(sqlite3_stmt *st, int i, double v)
{
	sqlite3_bind_double(st, i, v);  /* NaN is stored as NULL: refused */
}

/*
 * The sample key's order, (arm, seed, trial) with arms as their names sort
 * in SQLite ("baseline" < "baseline_alone" < "candidate" < "naive"), so
 * that sorted rows are appended to the b-tree rather than split into it.
 */
static int arm_rank(enum atb_arm arm)
{
	switch (arm) {
	case ATB_ARM_BASELINE: return 0;
	case ATB_ARM_BASELINE_ALONE: return 1;
	case ATB_ARM_CANDIDATE: return 2;
	case ATB_ARM_NAIVE: return 3;
	}
	return 4;
}

static int sample_cmp(const void *pa, const void *pb)
{
	const struct atb_sample *a = pa, *b = pb;
	int ra = arm_rank(a->arm), rb = arm_rank(b->arm);

	if (ra != rb)
		return ra < rb ? -1 : 1;
	if (a->seed != b->seed)
		return a->seed < b->seed ? -1 : 1;
	return (a->trial > b->trial) - (a->trial < b->trial);
}

/* "(?1, ?2, ?3, ?4, ?5), (?1, ?6, ...)" for n rows, after SQL_SAMPLE. */
static enum atb_status prep_samples(struct atb_store *s, sqlite3_stmt **st, int n,
				    struct atb_error *err)
{
	char sql[sizeof(SQL_SAMPLE) + SAMPLE_BATCH * 40];
	size_t len = sizeof(SQL_SAMPLE) - 1;
	int i;

	if (*st)
		return prep(s, st, NULL, err);
	memcpy(sql, SQL_SAMPLE, len + 1);
	for (i = 0; i < n; i++)
		len += (size_t)snprintf(sql + len, sizeof(sql) - len, "%s(?1, ?%d, ?%d, ?%d, ?%d)",
					i ? ", " : "", 4 * i + 2, 4 * i + 3, 4 * i + 4, 4 * i + 5);
	return prep(s, st, sql, err);
}

static void bind_sample(sqlite3_stmt *st, int row, const struct atb_sample *x)
{
	int p = 4 * row + 2;
	const char *arm = atb_arm_name(x->arm);

	sqlite3_bind_text(st, p, arm, (int)strlen(arm), SQLITE_STATIC);
	sqlite3_bind_int64(st, p + 1, x->seed);
	sqlite3_bind_int(st, p + 2, x->trial);
	sqlite3_bind_double(st, p + 3, x->value);  /* NaN is stored as NULL: refused */
}

static int in_key_order(const struct atb_sample *x, size_t n)
{
	size_t i;

	for (i = 1; i < n; i++)
		if (sample_cmp(&x[i - 1], &x[i]) > 0)
			return 0;
	return 1;
}

/*
 * A copy of x in key order: a stable pass by arm first, then a sort of
 * each arm's rows only where they are out of (seed, trial) order, so rows
 * interleaved by arm, as a runner times them, cost O(n).
 */
static struct atb_sample *key_order_copy(const struct atb_sample *x, size_t n)
{
	struct atb_sample *y = atb_malloc(n * sizeof(*y));
	size_t start[6] = {0}, at[5], i;
	int r;

	if (!y)
		return NULL;
	for (i = 0; i < n; i++)
		start[arm_rank(x[i].arm) + 1]++;
	for (r = 0; r < 5; r++) {
		start[r + 1] += start[r];
		at[r] = start[r];
	}
	for (i = 0; i < n; i++)
		y[at[arm_rank(x[i].arm)]++] = x[i];
	for (r = 0; r < 5; r++)
		if (!in_key_order(y + start[r], start[r + 1] - start[r]))
			qsort(y + start[r], start[r + 1] - start[r], sizeof(*y), sample_cmp);
	return y;
}

/*
 * Insert the samples in key order, SAMPLE_BATCH rows per statement and
 * the rest one by one.  Rows already in key order (what atb measure
 * hands in) are used as they are; others are put in order in a copy.
 */
static enum atb_status insert_samples(struct atb_store *s, int64_t job,
				      const struct atb_sample *x, size_t n,
				      struct atb_error *err)
{
	struct atb_sample *sorted = NULL;
	struct atbi_rows_samples rh;
	enum atb_status st = ATB_OK;
	sqlite3_stmt *q;
	size_t i, k;
	int rc;

	if (!in_key_order(x, n)) {
		sorted = key_order_copy(x, n);
		if (!sorted)
			return atb_error_set(err, ATB_ERR_NOMEM, "cannot ingest: out of memory");
		x = sorted;
	}
	/* The samples' row hash, in the order they are stored (src/audit/rows.c). */
	s->samples_md_set = 0;
	if (s->schema >= 3 && atbi_rows_samples_begin(&rh)) {
		atb_free(sorted);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot ingest: out of memory");
	}
	for (i = 0; s->schema >= 3 && i < n; i++)
		if (atbi_rows_samples_add(&rh, job, atb_arm_name(x[i].arm), x[i].seed, x[i].trial,
					  x[i].value)) {
			atbi_rows_samples_abort(&rh);
			atb_free(sorted);
			return atb_error_set(err, ATB_ERR_INTERNAL, "cannot hash the samples");
		}
	if (s->schema >= 3) {
		if (atbi_rows_samples_end(&rh, s->samples_md)) {
			atb_free(sorted);
			return atb_error_set(err, ATB_ERR_INTERNAL, "cannot hash the samples");
		}
		s->samples_md_set = 1;
	}
	for (i = 0; i < n && st == ATB_OK; i += k) {
		k = n - i >= SAMPLE_BATCH ? SAMPLE_BATCH : 1;
		st = k > 1 ? prep_samples(s, &s->st_sample, SAMPLE_BATCH, err)
			   : prep_samples(s, &s->st_sample1, 1, err);
		if (st)
			break;
		q = k > 1 ? s->st_sample : s->st_sample1;
		sqlite3_bind_int64(q, 1, job);
		for (size_t r = 0; r < k; r++)
			bind_sample(q, (int)r, &x[i + r]);
		rc = step_done(q);
		if (rc != SQLITE_OK)
			st = atbi_store_sqlerr(s, rc, "sample", err);
	}
	atb_free(sorted);
	return st;
}

/* The ingest transaction proper; on failure the caller rolls back. */
static enum atb_status ingest_txn(struct atb_store *s, const struct atb_ingest *in,
				  const char *uuid, const char *stats, int quarantined,
				  struct atb_ingest_outcome *o, struct atb_error *err)
{
	char now[40];
	enum atb_status st;
	json_t *payload;
	size_t i;
	int rc;

	atbi_audit_time(now, sizeof(now));
	st = prep(s, &s->st_job, SQL_JOB, err);
	if (st)
		return st;
	bind_text(s->st_job, 1, uuid);
	bind_text(s->st_job, 2, in->kind);
	bind_text(s->st_job, 3, in->task);
	bind_text(s->st_job, 4, in->candidate);
	bind_text(s->st_job, 5, in->unit);
	bind_text(s->st_job, 6, in->protocol_digest);
	bind_text(s->st_job, 7, in->box_fingerprint);
	bind_text(s->st_job, 8, now);
	rc = step_done(s->st_job);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "job", err);
	o->job_id = sqlite3_last_insert_rowid(s->db);

	st = insert_samples(s, o->job_id, in->samples, in->nsamples, err);
	if (st)
		return st;

	st = prep(s, &s->st_seed, SQL_SEED, err);
	if (st)
		return st;
	sqlite3_bind_int64(s->st_seed, 1, o->job_id);
	for (i = 0; i < in->nseeds; i++) {
		const struct atb_seed_result *r = &in->seeds[i];

		sqlite3_bind_int64(s->st_seed, 2, r->seed);
		bind_real(s->st_seed, 3, r->baseline_median);
		bind_real(s->st_seed, 4, r->candidate_median);
		bind_real(s->st_seed, 5, r->ratio);
		rc = step_done(s->st_seed);
		if (rc != SQLITE_OK)
			return atbi_store_sqlerr(s, rc, "seed result", err);
	}

	st = prep(s, &s->st_result, SQL_RESULT, err);
	if (st)
		return st;
	sqlite3_bind_int64(s->st_result, 1, o->job_id);
	bind_text(s->st_result, 2, in->kind);
	bind_text(s->st_result, 3, in->metric);
	bind_text(s->st_result, 4, in->baseline_job_uuid && strcmp(in->baseline_job_uuid, uuid)
					   ? in->baseline_job_uuid : NULL);
	sqlite3_bind_int64(s->st_result, 5, (sqlite3_int64)in->nseeds);
	bind_real(s->st_result, 6, in->speedup);
	bind_real(s->st_result, 7, in->ci_low);
	bind_real(s->st_result, 8, in->ci_high);
	bind_real(s->st_result, 9, in->cv);
	bind_text(s->st_result, 10, quarantined ? "quarantined" : "admitted");
	bind_text(s->st_result, 11, stats);
	bind_text(s->st_result, 12, in->protocol_digest);
	bind_text(s->st_result, 13, in->box_fingerprint);
	bind_text(s->st_result, 14, now);
	rc = step_done(s->st_result);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "result", err);
	o->result_id = sqlite3_last_insert_rowid(s->db);

	payload = json_pack("{s:s, s:I, s:s, s:s?, s:s?, s:I, s:s, s:f, s:I, s:I, s:s?, s:s?}",
			    "job", uuid, "job_id", (json_int_t)o->job_id, "kind", in->kind,
			    "task", in->task, "candidate", in->candidate,
			    "result", (json_int_t)o->result_id,
			    "status", quarantined ? "quarantined" : "admitted",
			    "speedup", in->speedup, "n_seeds", (json_int_t)in->nseeds,
			    "n_samples", (json_int_t)in->nsamples,
			    "protocol", in->protocol_digest, "box", in->box_fingerprint);
	if (!payload)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot audit the ingest: out of memory");
	st = atbi_audit_append(s, "ingest", payload, &o->audit_seq, err);
	s->samples_md_set = 0;
	json_decref(payload);
	return st;
}

enum atb_status atb_store_ingest(struct atb_store *s, const struct atb_ingest *in,
				 struct atb_ingest_outcome *out, struct atb_error *err)
{
	struct atb_ingest_outcome o;
	struct atb_ingest red;
	char *stats = NULL, *detail = NULL, *task = NULL, *candidate = NULL;
	const char *stats_text;
	enum atb_status st, rst;
	struct atb_error rerr;
	double factor;
	json_t *dj;

	memset(&o, 0, sizeof(o));
	if (out)
		*out = o;
	if (!s || !in || (in->nsamples && !in->samples) || (in->nseeds && !in->seeds) ||
	    !in->kind || !in->task || !in->candidate || !in->unit || !in->metric)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "an ingest needs kind, task, candidate, unit, metric, samples and seeds");
	if (in->job_uuid) {
		snprintf(o.job_uuid, sizeof(o.job_uuid), "%s", in->job_uuid);
	} else if (atbi_random_id(o.job_uuid) != ATB_OK) {
		return atb_error_set(err, ATB_ERR_SYSTEM, "cannot draw a job id");
	}

	/* Bad stats json is left for the schema to refuse (and recorded). */
	stats_text = in->stats_json ? in->stats_json : "{}";
	st = canonical_object(stats_text, "result stats", &stats, err);
	if (st == ATB_ERR_NOMEM)
		return st;
	if (stats)
		stats_text = stats;

	/* Names are free text: keep secrets out of them too. */
	task = atbi_redact_string(in->task);
	candidate = atbi_redact_string(in->candidate);
	if (!task || !candidate) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot ingest: out of memory");
		goto out;
	}
	red = *in;
	red.task = task;
	red.candidate = candidate;
	in = &red;

	st = atbi_store_begin(s, err);
	if (st)
		goto out;
	st = anomaly_factor(s, in->protocol_digest, &factor, err);
	if (st == ATB_OK) {
		/* PROTO: gates.anomaly_breaker: >= factor is quarantined, never admitted */
		o.quarantined = in->speedup >= factor;
		st = ingest_txn(s, in, o.job_uuid, stats_text, o.quarantined, &o, err);
	}
	if (st == ATB_OK)
		st = atbi_store_commit(s, err);
	else
		atbi_store_rollback(s);
	if (st == ATB_OK)
		goto out;

	o.job_id = o.result_id = o.audit_seq = 0;
	o.quarantined = 0;
	if (ATB_PRIMARY(st) != ATB_ERR_REJECTED)
		goto out;
	/* Refused: record it with its rule and reason, in a new transaction. */
	atb_alloc_install_json();
	dj = json_pack("{s:s?, s:s?, s:s?, s:s?, s:s?, s:I, s:I}", "kind", in->kind,
		       "task", in->task, "candidate", in->candidate,
		       "protocol", in->protocol_digest, "box", in->box_fingerprint,
		       "n_samples", (json_int_t)in->nsamples, "n_seeds", (json_int_t)in->nseeds);
	if (dj && atbi_redact_json(dj) == ATB_OK)
		atbi_json_canonical(dj, &detail, NULL);
	json_decref(dj);
	if (detail) {
		char rule[64];
		const char *r = strstr(err ? err->msg : "", "atb-rule:");

		snprintf(rule, sizeof(rule), "store:%s", atb_status_name(st) + 9);
		atb_error_clear(&rerr);
		/* A job that named no protocol is recorded under 64 zeros: none. */
		rst = insert_rejection(s, o.job_uuid,
				       in->protocol_digest && atbi_is_sha256_hex(in->protocol_digest)
					       ? in->protocol_digest : ATBI_GENESIS, rule, st,
				       r ? r : atb_status_name(st), detail,
				       &o.rejection_id, &o.audit_seq, &rerr);
	} else {
		rst = atb_error_set(&rerr, ATB_ERR_NOMEM, "cannot record a rejection: out of memory");
	}
	if (rst) {
		/* The refusal stands; say the record of it failed too. */
		if (err) {
			size_t n = strlen(err->msg);

			snprintf(err->msg + n, sizeof(err->msg) - n, " (and the rejection was not recorded: %s)",
				 rerr.msg);
		}
	} else if (err) {
		/* The reason as recorded (secrets redacted). */
		char *rmsg = atbi_redact_string(err->msg);

		if (rmsg) {
			snprintf(err->msg, sizeof(err->msg), "%s", rmsg);
			atb_free(rmsg);
		}
	}
out:
	s->samples_md_set = 0;
	atb_free(stats);
	atb_free(detail);
	atb_free(task);
	atb_free(candidate);
	if (out)
		*out = o;
	return st;
}

/* ---- review, boxes, protocols, events ---- */

enum atb_status atb_store_review(struct atb_store *s, int64_t result_id,
				 const char *decision, const char *reviewer,
				 const char *reason, int64_t *review_id,
				 struct atb_error *err)
{
	static const struct audited_row row = {"review", "review", "review",
					       "cannot review: out of memory"};
	sqlite3_stmt *q = NULL;
	char now[40], *red = NULL;
	enum atb_status st;
	int rc;

	if (review_id)
		*review_id = 0;
	if (!s)
		return atb_error_set(err, ATB_ERR_USAGE, "no store");
	red = atbi_redact_string(reason ? reason : "");
	if (!red)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot review: out of memory");
	st = atbi_store_begin(s, err);
	if (st == ATB_OK) {
		atbi_audit_time(now, sizeof(now));
		rc = sqlite3_prepare_v2(s->db, "INSERT INTO review (result, decision, reviewer,"
					" reason, created) VALUES (?, ?, ?, ?, ?)", -1, &q, NULL);
		if (rc == SQLITE_OK) {
			sqlite3_bind_int64(q, 1, result_id);
			bind_text(q, 2, decision);
			bind_text(q, 3, reviewer);
			bind_text(q, 4, red);
			bind_text(q, 5, now);
		}
		st = insert_audited(s, &row, rc, q,
				    json_pack("{s:I, s:s, s:s, s:s}", "result",
					      (json_int_t)result_id, "decision", decision,
					      "reviewer", reviewer, "reason", red),
				    NULL, review_id, err);
	}
	atb_free(red);
	return st;
}

enum atb_status atb_store_register_box(struct atb_store *s, const char *fingerprint,
				       const char *description_json,
				       struct atb_error *err)
{
	static const struct audited_row row = {"register the box", "box.registered", NULL,
					       "cannot register the box: out of memory"};
	sqlite3_stmt *q = NULL;
	char now[40], *desc = NULL;
	enum atb_status st;
	int rc, exists = 0;

	if (!s || !fingerprint || !atbi_is_sha256_hex(fingerprint))
		return atb_error_set(err, ATB_REJECTED_NO_BOX,
				     "box fingerprint '%s' is not 64 lowercase hex",
				     fingerprint ? fingerprint : "");
	st = canonical_object(description_json, "box description", &desc, err);
	if (st)
		return st;
	st = atbi_store_begin(s, err);
	if (st)
		goto out;
	rc = sqlite3_prepare_v2(s->db, "SELECT 1 FROM box WHERE fingerprint = ?", -1, &q, NULL);
	if (rc == SQLITE_OK) {
		bind_text(q, 1, fingerprint);
		exists = sqlite3_step(q) == SQLITE_ROW;
	}
	sqlite3_finalize(q);
	q = NULL;
	if (exists) {
		atbi_store_rollback(s);
		goto out;
	}
	atbi_audit_time(now, sizeof(now));
	rc = sqlite3_prepare_v2(s->db, "INSERT INTO box (fingerprint, description, created)"
				" VALUES (?, ?, ?)", -1, &q, NULL);
	if (rc == SQLITE_OK) {
		bind_text(q, 1, fingerprint);
		bind_text(q, 2, desc);
		bind_text(q, 3, now);
	}
	st = insert_audited(s, &row, rc, q,
			    json_pack("{s:s, s:o}", "fingerprint", fingerprint,
				      "description", json_loads(desc, 0, NULL)),
			    NULL, NULL, err);
out:
	atb_free(desc);
	return st;
}

enum atb_status atb_store_sync_protocols(struct atb_store *s,
					 const struct atb_frozen_protocol *list,
					 size_t n, size_t *added,
					 struct atb_error *err)
{
	sqlite3_stmt *q = NULL, *ins = NULL;
	char hex[65], now[40];
	enum atb_status st = ATB_OK;
	json_t *payload;
	size_t i, nadded = 0;
	int rc, pass;

	if (added)
		*added = 0;
	if (!s || (n && !list))
		return atb_error_set(err, ATB_ERR_USAGE, "no protocols given");
	for (i = 0; i < n; i++) {
		if (!list[i].canonical_json ||
		    atbi_sha256_hex(list[i].canonical_json, strlen(list[i].canonical_json), hex) ||
		    strcmp(hex, list[i].digest))
			return atb_error_set(err, ATB_ERR_PROTOCOL,
					     "frozen protocol version %d: digest '%s' is not the sha-256 of its canonical form",
					     list[i].version, list[i].digest);
	}
	rc = sqlite3_prepare_v2(s->db, "SELECT digest, version, canonical FROM frozen_protocol"
				" WHERE digest = ? OR version = ?", -1, &q, NULL);
	if (rc == SQLITE_OK && !s->read_only)
		rc = sqlite3_prepare_v2(s->db, "INSERT INTO frozen_protocol (digest, version,"
					" canonical, created) VALUES (?, ?, ?, ?)", -1, &ins, NULL);
	if (rc != SQLITE_OK) {
		sqlite3_finalize(q);
		return atbi_store_sqlerr(s, rc, "sync frozen protocols", err);
	}
	atbi_audit_time(now, sizeof(now));
	/*
	 * Pass 0 looks for a conflict before anything is written; pass 1 adds
	 * each missing protocol in a transaction of its own, so that every
	 * transaction appends exactly one audit entry: a process killed between
	 * the mirror's line and the COMMIT leaves the one trailing line the
	 * next read-write open drops (a transaction of three entries left two,
	 * a chain no recovery may repair).
	 */
	for (pass = 0; pass < 2 && !st; pass++) {
		for (i = 0; i < n; i++) {
			int found = 0, same = 0;

			if (pass) {
				st = atbi_store_begin(s, err);
				if (st)
					break;
			}
			sqlite3_reset(q);
			bind_text(q, 1, list[i].digest);
			sqlite3_bind_int(q, 2, list[i].version);
			while (sqlite3_step(q) == SQLITE_ROW) {
				found = 1;
				same = !strcmp((const char *)sqlite3_column_text(q, 0), list[i].digest) &&
				       sqlite3_column_int(q, 1) == list[i].version &&
				       !strcmp((const char *)sqlite3_column_text(q, 2),
					       list[i].canonical_json);
				if (!same)
					break;
			}
			sqlite3_reset(q);
			if (found && !same) {
				st = atb_error_set(err, ATB_ERR_PROTOCOL,
						   "frozen protocol version %d ('%s') conflicts with the store's",
						   list[i].version, list[i].digest);
				break;
			}
			if (!pass)
				continue;
			if (found) {
				atbi_store_rollback(s);
				continue;
			}
			sqlite3_reset(ins);
			bind_text(ins, 1, list[i].digest);
			sqlite3_bind_int(ins, 2, list[i].version);
			bind_text(ins, 3, list[i].canonical_json);
			bind_text(ins, 4, now);
			rc = step_done(ins);
			sqlite3_reset(ins);
			if (rc != SQLITE_OK) {
				st = atbi_store_sqlerr(s, rc, "freeze the protocol", err);
				break;
			}
			payload = json_pack("{s:i, s:s}", "version", list[i].version, "digest",
					    list[i].digest);
			if (!payload) {
				st = atb_error_set(err, ATB_ERR_NOMEM,
						   "cannot sync protocols: out of memory");
				break;
			}
			st = atbi_audit_append(s, "protocol.frozen", payload, NULL, err);
			json_decref(payload);
			if (st)
				break;
			st = atbi_store_commit(s, err);
			if (st)
				break;
			nadded++;
		}
	}
	if (s->in_txn)
		atbi_store_rollback(s);
	sqlite3_finalize(q);
	sqlite3_finalize(ins);
	if (added)
		*added = nadded;
	return st;
}

enum atb_status atb_store_audit_event(struct atb_store *s, const char *kind,
				      const char *payload_json, int64_t *seq,
				      struct atb_error *err)
{
	const struct audited_row row = {"audit", kind, NULL, "out of memory"};
	json_t *v;
	json_error_t je;
	enum atb_status st;

	if (seq)
		*seq = 0;
	if (!s || !valid_kind(kind))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "audit kind '%s' is not 1-63 of [a-z0-9_.:-]", kind ? kind : "");
	atb_alloc_install_json();
	v = json_loads(payload_json ? payload_json : "{}", JSON_REJECT_DUPLICATES, &je);
	if (!v)
		return atb_error_set(err, ATB_ERR_PARSE, "audit payload is not valid json: %s", je.text);
	if (!json_is_object(v)) {
		json_decref(v);
		return atb_error_set(err, ATB_ERR_SCHEMA, "audit payload is not a json object");
	}
	st = atbi_store_begin(s, err);
	if (st) {
		json_decref(v);
		return st;
	}
	return insert_audited(s, &row, SQLITE_OK, NULL, v, seq, NULL, err);
}
