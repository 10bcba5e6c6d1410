/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Schema v2 of the results store, which is also the ingest validator, and
 * the v3 additions (atbi_store_schema_v3_sql, at the end).
 * (v2 = v1 with lean sample rows: a sample no longer repeats its job's
 * protocol digest, box and unit; it inherits them through its job row, so
 * "a sample on another box or protocol than its job" cannot be written at
 * all.  v1 stores are refused, not migrated: see store.c.)
 *
 * Column-domain rules are named CHECK constraints; rules that look at other
 * rows are BEFORE INSERT triggers; every table has BEFORE UPDATE and BEFORE
 * DELETE triggers that refuse (append-only).  Each refusal message reads
 * "atb-rule:<rule_id>: <explanation>" so that the C side maps it to an
 * ATB_REJECTED_* status, and so that a refusal seen from the sqlite3 shell
 * says which protocol rule was broken.
 *
 * INSERT OR REPLACE deletes the conflicting row without firing DELETE
 * triggers (unless the writer enables recursive_triggers), so every INSERT
 * trigger refuses a key that already exists before SQLite's conflict
 * resolution can replace it.
 *
 * Does not: hash anything (SQLite has no SHA-256); the audit hashes and the
 * frozen protocol digests are re-verified in C by atb_store_check.
 */
#include <stddef.h>

#include "store/store_int.h"
#include "banned.h"

/* A finite positive real: NaN arrives as NULL, so NULL is refused too. */
#define POS(c) \
	"(" c " IS NOT NULL AND typeof(" c ") IN ('real','integer') AND " c " > 0 " \
	"AND " c " <= 1.7976931348623157e308)"
#define HEX64(c) "(length(" c ") = 64 AND " c " NOT GLOB '*[^0-9a-f]*')"

#define APPEND_ONLY(t)                                                              \
	"CREATE TRIGGER " t "_no_update BEFORE UPDATE ON " t " BEGIN "              \
	"SELECT RAISE(ABORT, 'atb-rule:append_only: " t " rows are never updated'); " \
	"END;\n"                                                                    \
	"CREATE TRIGGER " t "_no_delete BEFORE DELETE ON " t " BEGIN "              \
	"SELECT RAISE(ABORT, 'atb-rule:append_only: " t " rows are never deleted'); " \
	"END;\n"

const char atbi_store_schema_sql[] =
	/* ---- frozen protocols: the only digests a row may carry ---- */
	"CREATE TABLE frozen_protocol (\n"
	"  digest TEXT PRIMARY KEY\n"
	"    CONSTRAINT \"atb-rule:malformed: a protocol digest is 64 lowercase hex\"\n"
	"    CHECK " HEX64("digest") ",\n"
	"  version INTEGER NOT NULL UNIQUE\n"
	"    CONSTRAINT \"atb-rule:malformed: a protocol version is a positive integer\"\n"
	"    CHECK (typeof(version) = 'integer' AND version >= 1),\n"
	"  canonical TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a protocol's canonical form is json\"\n"
	"    CHECK (json_valid(canonical)),\n"
	"  created TEXT NOT NULL\n"
	");\n"
	"CREATE TRIGGER frozen_protocol_insert BEFORE INSERT ON frozen_protocol BEGIN\n"
	"  SELECT RAISE(ABORT, 'atb-rule:append_only: a frozen protocol is never replaced')\n"
	"  WHERE EXISTS (SELECT 1 FROM frozen_protocol\n"
	"                WHERE digest = NEW.digest OR version = NEW.version);\n"
	"END;\n"
	APPEND_ONLY("frozen_protocol")

	/* ---- boxes: every measurement names the machine it ran on ---- */
	"CREATE TABLE box (\n"
	"  fingerprint TEXT PRIMARY KEY\n"
	"    CONSTRAINT \"atb-rule:no_box: a box fingerprint is 64 lowercase hex\"\n"
	"    CHECK (fingerprint IS NOT NULL AND " HEX64("fingerprint") "),\n"
	"  description TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a box description is a json object\"\n"
	"    CHECK (json_valid(description) AND json_type(description) = 'object'),\n"
	"  created TEXT NOT NULL\n"
	");\n"
	"CREATE TRIGGER box_insert BEFORE INSERT ON box BEGIN\n"
	"  SELECT RAISE(ABORT, 'atb-rule:append_only: a box is never replaced')\n"
	"  WHERE EXISTS (SELECT 1 FROM box WHERE fingerprint = NEW.fingerprint);\n"
	"END;\n"
	APPEND_ONLY("box")

	/* ---- box capabilities: measured once per box, latest row per kind wins ---- */
	"CREATE TABLE box_capability (\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  fingerprint TEXT NOT NULL REFERENCES box(fingerprint),\n"
	"  kind TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a capability kind is 1-63 of [a-z0-9_]\"\n"
	"    CHECK (length(kind) BETWEEN 1 AND 63 AND kind NOT GLOB '*[^a-z0-9_]*'),\n"
	"  value REAL\n"
	"    CONSTRAINT \"atb-rule:bad_time: a capability value is finite and positive\"\n"
	"    CHECK " POS("value") ",\n"
	"  method TEXT NOT NULL,\n"
	"  measured_at TEXT NOT NULL\n"
	");\n"
	"CREATE TRIGGER box_capability_insert BEFORE INSERT ON box_capability BEGIN\n"
	"  SELECT CASE\n"
	"    WHEN EXISTS (SELECT 1 FROM box_capability WHERE id = NEW.id)\n"
	"      THEN RAISE(ABORT, 'atb-rule:append_only: a capability row is never replaced')\n"
	"    WHEN NOT EXISTS (SELECT 1 FROM box WHERE fingerprint = NEW.fingerprint)\n"
	"      THEN RAISE(ABORT, 'atb-rule:no_box: the capability names no registered box')\n"
	"  END;\n"
	"END;\n"
	APPEND_ONLY("box_capability")

	/* ---- jobs: one measurement of baseline and candidate on one box ---- */
	"CREATE TABLE job (\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  uuid TEXT NOT NULL UNIQUE\n"
	"    CONSTRAINT \"atb-rule:malformed: a job uuid is 1-64 of [0-9a-zA-Z-]\"\n"
	"    CHECK (length(uuid) BETWEEN 1 AND 64 AND uuid NOT GLOB '*[^0-9a-zA-Z-]*'),\n"
	"  kind TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a job kind is kernel or engine\"\n"
	"    CHECK (kind IN ('kernel', 'engine')),\n"
	"  task TEXT NOT NULL,\n"
	"  candidate TEXT NOT NULL,\n"
	"  unit TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a sample unit is 1-31 characters\"\n"
	"    CHECK (length(unit) BETWEEN 1 AND 31),\n"
	"  protocol_digest TEXT REFERENCES frozen_protocol(digest),\n"
	"  box_fingerprint TEXT REFERENCES box(fingerprint),\n"
	"  created TEXT NOT NULL\n"
	");\n"
	/*
	 * A sample is not checked for its job when it is inserted (that probe
	 * would cost a tenth of the hot path); instead a job cannot be created
	 * over samples already stored under its id, and a seed result or a
	 * result needs its job.  So a sample without its job never joins one
	 * and never counts for a result (atb db check lists it).  AFTER, so
	 * that NEW.id is the id the row really got.
	 */
	"CREATE TRIGGER job_orphan_samples AFTER INSERT ON job\n"
	"WHEN EXISTS (SELECT 1 FROM sample WHERE job = NEW.id)\n"
	"BEGIN\n"
	"  SELECT RAISE(ABORT, 'atb-rule:malformed: samples were stored under this job id before the job');\n"
	"END;\n"
	"CREATE TRIGGER job_insert BEFORE INSERT ON job BEGIN\n"
	"  SELECT CASE\n"
	"    WHEN EXISTS (SELECT 1 FROM job WHERE id = NEW.id OR uuid = NEW.uuid)\n"
	"      THEN RAISE(ABORT, 'atb-rule:append_only: a job is never replaced')\n"
	"    WHEN NEW.protocol_digest IS NULL OR NOT EXISTS\n"
	"         (SELECT 1 FROM frozen_protocol WHERE digest = NEW.protocol_digest)\n"
	"      THEN RAISE(ABORT, 'atb-rule:unfrozen_protocol: the job''s protocol digest is not frozen in this store')\n"
	"    WHEN NEW.box_fingerprint IS NULL OR NOT EXISTS\n"
	"         (SELECT 1 FROM box WHERE fingerprint = NEW.box_fingerprint)\n"
	"      THEN RAISE(ABORT, 'atb-rule:no_box: the job names no registered box')\n"
	"  END;\n"
	"END;\n"
	APPEND_ONLY("job")

	/*
	 * ---- raw per-trial samples: the hot path, kept lean.  The key order
	 * (job, arm, seed, trial) is the order the writer inserts in, so rows
	 * are appended; the digest, box and unit are the job's.  Arm is one of
	 * four strings tested with OR, not IN: a CHECK with IN over more than
	 * two values builds an ephemeral table for every row.  The value rule
	 * is POS() written without typeof(): REAL affinity turns numeric text
	 * into a real, other text and blobs compare above every number, and
	 * NULL makes the comparison NULL, which IS 1 refuses.
	 */
	"CREATE TABLE sample (\n"
	"  job INTEGER NOT NULL REFERENCES job(id),\n"
	"  arm TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: an arm is baseline, candidate, naive or baseline_alone\"\n"
	"    CHECK (arm = 'baseline' OR arm = 'candidate' OR arm = 'naive' OR arm = 'baseline_alone'),\n"
	"  seed INTEGER NOT NULL,\n"
	"  trial INTEGER NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a trial number is a non-negative integer\"\n"
	"    CHECK (typeof(trial) = 'integer' AND trial >= 0),\n"
	"  value REAL\n"
	"    CONSTRAINT \"atb-rule:bad_time: a sample value is finite and positive (not nan, inf, zero or negative)\"\n"
	"    CHECK ((value > 0 AND value <= 1.7976931348623157e308) IS 1),\n"
	"  PRIMARY KEY (job, arm, seed, trial)\n"
	") WITHOUT ROWID;\n"
	/*
	 * Once a job has its result its samples are final, so neither a new
	 * sample nor INSERT OR REPLACE of an old one gets in: one probe of
	 * result's job index per row.
	 */
	"CREATE TRIGGER sample_insert BEFORE INSERT ON sample\n"
	"WHEN EXISTS (SELECT 1 FROM result WHERE job = NEW.job)\n"
	"BEGIN\n"
	"  SELECT RAISE(ABORT, 'atb-rule:append_only: the job''s result is stored; its samples are final');\n"
	"END;\n"
	APPEND_ONLY("sample")

	/* ---- per-seed results: the paired comparison ---- */
	"CREATE TABLE seed_result (\n"
	"  job INTEGER NOT NULL REFERENCES job(id),\n"
	"  seed INTEGER NOT NULL,\n"
	"  baseline_median REAL\n"
	"    CONSTRAINT \"atb-rule:bad_time: a baseline median is finite and positive\"\n"
	"    CHECK " POS("baseline_median") ",\n"
	"  candidate_median REAL\n"
	"    CONSTRAINT \"atb-rule:bad_time: a candidate median is finite and positive\"\n"
	"    CHECK " POS("candidate_median") ",\n"
	"  ratio REAL\n"
	"    CONSTRAINT \"atb-rule:bad_time: a per-seed ratio is finite and positive\"\n"
	"    CHECK " POS("ratio") ",\n"
	"  PRIMARY KEY (job, seed)\n"
	") WITHOUT ROWID;\n"
	"CREATE TRIGGER seed_result_insert BEFORE INSERT ON seed_result BEGIN\n"
	"  SELECT CASE\n"
	"    WHEN NOT EXISTS (SELECT 1 FROM job WHERE id = NEW.job)\n"
	"      THEN RAISE(ABORT, 'atb-rule:malformed: the seed result names no stored job')\n"
	"    WHEN EXISTS (SELECT 1 FROM seed_result WHERE job = NEW.job AND seed = NEW.seed)\n"
	"      THEN RAISE(ABORT, 'atb-rule:duplicate_seed: this seed already has a result in this job')\n"
	"    WHEN EXISTS (SELECT 1 FROM result WHERE job = NEW.job)\n"
	"      THEN RAISE(ABORT, 'atb-rule:paired_seeds: the job''s result is stored; no seed can be added')\n"
	"    WHEN NOT EXISTS (SELECT 1 FROM sample WHERE job = NEW.job AND arm = 'baseline'\n"
	"                     AND seed = NEW.seed)\n"
	"      OR NOT EXISTS (SELECT 1 FROM sample WHERE job = NEW.job AND arm = 'candidate'\n"
	"                     AND seed = NEW.seed)\n"
	"      THEN RAISE(ABORT, 'atb-rule:paired_seeds: the seed lacks baseline or candidate samples in this job')\n"
	"  END;\n"
	"END;\n"
	APPEND_ONLY("seed_result")

	/* ---- results: admitted or quarantined, never anything else ---- */
	"CREATE TABLE result (\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  job INTEGER NOT NULL UNIQUE REFERENCES job(id),\n"
	"  kind TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a result kind is kernel or engine\"\n"
	"    CHECK (kind IN ('kernel', 'engine')),\n"
	"  metric TEXT NOT NULL,\n"
	"  baseline_job INTEGER,\n"
	"  n_seeds INTEGER NOT NULL\n"
	"    CONSTRAINT \"atb-rule:paired_seeds: n_seeds is a positive integer\"\n"
	"    CHECK (typeof(n_seeds) = 'integer' AND n_seeds >= 1),\n"
	"  speedup REAL\n"
	"    CONSTRAINT \"atb-rule:bad_time: a speedup is finite and positive\"\n"
	"    CHECK " POS("speedup") ",\n"
	"  ci_low REAL\n"
	"    CONSTRAINT \"atb-rule:bad_time: a confidence bound is finite and positive\"\n"
	"    CHECK " POS("ci_low") ",\n"
	"  ci_high REAL\n"
	"    CONSTRAINT \"atb-rule:bad_time: a confidence bound is finite and positive\"\n"
	"    CHECK " POS("ci_high") ",\n"
	"  cv REAL\n"
	"    CONSTRAINT \"atb-rule:bad_time: a cv is finite and not negative\"\n"
	"    CHECK (cv IS NOT NULL AND typeof(cv) IN ('real', 'integer') AND cv >= 0\n"
	"           AND cv <= 1.7976931348623157e308),\n"
	"  status TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a result status is admitted or quarantined\"\n"
	"    CHECK (status IN ('admitted', 'quarantined')),\n"
	"  stats TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: result stats are a json object\"\n"
	"    CHECK (json_valid(stats) AND json_type(stats) = 'object'),\n"
	"  protocol_digest TEXT,\n"
	"  box_fingerprint TEXT,\n"
	"  created TEXT NOT NULL,\n"
	"  CONSTRAINT \"atb-rule:malformed: the confidence interval holds the speedup\"\n"
	"    CHECK (ci_low <= speedup AND speedup <= ci_high)\n"
	");\n"
	"CREATE TRIGGER result_insert BEFORE INSERT ON result BEGIN\n"
	"  SELECT CASE\n"
	"    WHEN j.id IS NULL\n"
	"      THEN RAISE(ABORT, 'atb-rule:malformed: the result names no stored job')\n"
	"    WHEN EXISTS (SELECT 1 FROM result WHERE id = NEW.id OR job = NEW.job)\n"
	"      THEN RAISE(ABORT, 'atb-rule:append_only: a job has one result, never replaced')\n"
	"    WHEN NEW.kind IS NOT j.kind\n"
	"      THEN RAISE(ABORT, 'atb-rule:malformed: the result''s kind is not its job''s')\n"
	"    WHEN p.digest IS NULL\n"
	"      THEN RAISE(ABORT, 'atb-rule:unfrozen_protocol: the result''s protocol digest is not frozen in this store')\n"
	"    WHEN NEW.protocol_digest IS NOT j.protocol_digest\n"
	"      THEN RAISE(ABORT, 'atb-rule:unfrozen_protocol: the result''s protocol digest is not its job''s')\n"
	"    WHEN NEW.box_fingerprint IS NULL OR NOT EXISTS\n"
	"         (SELECT 1 FROM box WHERE fingerprint = NEW.box_fingerprint)\n"
	"      THEN RAISE(ABORT, 'atb-rule:no_box: the result names no registered box')\n"
	"    WHEN NEW.box_fingerprint IS NOT j.box_fingerprint\n"
	"      THEN RAISE(ABORT, 'atb-rule:baseline_elsewhere: the result''s box is not its job''s')\n"
	"    WHEN NEW.baseline_job IS NOT NEW.job\n"
	"      THEN RAISE(ABORT, 'atb-rule:baseline_elsewhere: the baseline was not measured in the result''s own job')\n"
	"    WHEN NEW.n_seeds IS NOT (SELECT count(*) FROM seed_result WHERE job = NEW.job)\n"
	"      THEN RAISE(ABORT, 'atb-rule:paired_seeds: n_seeds is not the number of the job''s paired seeds')\n"
	"    WHEN NEW.n_seeds < json_extract(p.canonical, '$.stats.min_paired_seeds')\n"
	"      THEN RAISE(ABORT, 'atb-rule:paired_seeds: fewer paired seeds than the protocol''s stats.min_paired_seeds')\n"
	"    WHEN EXISTS (SELECT 1 FROM seed_result r WHERE r.job = NEW.job AND (\n"
	"             NOT EXISTS (SELECT 1 FROM sample WHERE job = r.job AND arm = 'baseline' AND seed = r.seed)\n"
	"          OR NOT EXISTS (SELECT 1 FROM sample WHERE job = r.job AND arm = 'candidate' AND seed = r.seed)))\n"
	"      THEN RAISE(ABORT, 'atb-rule:paired_seeds: a seed lacks baseline or candidate samples in this job')\n"
	"    WHEN NEW.cv > json_extract(p.canonical, '$.stats.cv_cap')\n"
	"      THEN RAISE(ABORT, 'atb-rule:cv_over_cap: the cross-run cv is over the protocol''s stats.cv_cap')\n"
	"    WHEN NEW.speedup >= json_extract(p.canonical, '$.gates.anomaly_breaker.factor')\n"
	"         AND NEW.status IS NOT 'quarantined'\n"
	"      THEN RAISE(ABORT, 'atb-rule:anomaly_not_quarantined: a speedup at or over the anomaly factor must be quarantined')\n"
	"  END FROM (SELECT 1) LEFT JOIN job j ON j.id = NEW.job\n"
	"    LEFT JOIN frozen_protocol p ON p.digest = NEW.protocol_digest;\n"
	"END;\n"
	APPEND_ONLY("result")

	/* ---- rejections: refused jobs, with their reason ---- */
	"CREATE TABLE rejection (\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  job_uuid TEXT,\n"
	"  rule TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a rejection names its rule\"\n"
	"    CHECK (length(rule) BETWEEN 1 AND 63),\n"
	"  status INTEGER NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a rejection status is a non-zero atb status\"\n"
	"    CHECK (typeof(status) = 'integer' AND status > 0),\n"
	"  reason TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a rejection gives its reason\"\n"
	"    CHECK (length(reason) >= 1),\n"
	"  detail TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: rejection detail is a json object\"\n"
	"    CHECK (json_valid(detail) AND json_type(detail) = 'object'),\n"
	"  created TEXT NOT NULL\n"
	");\n"
	"CREATE TRIGGER rejection_insert BEFORE INSERT ON rejection BEGIN\n"
	"  SELECT RAISE(ABORT, 'atb-rule:append_only: a rejection is never replaced')\n"
	"  WHERE EXISTS (SELECT 1 FROM rejection WHERE id = NEW.id);\n"
	"END;\n"
	APPEND_ONLY("rejection")

	/* ---- reviews: a human decision adds a row, never edits one ---- */
	"CREATE TABLE review (\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  result INTEGER NOT NULL REFERENCES result(id),\n"
	"  decision TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:review: a decision is admit or reject\"\n"
	"    CHECK (decision IN ('admit', 'reject')),\n"
	"  reviewer TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:review: a review names its reviewer\"\n"
	"    CHECK (length(reviewer) >= 1),\n"
	"  reason TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:review: a review gives its reason\"\n"
	"    CHECK (length(reason) >= 1),\n"
	"  created TEXT NOT NULL\n"
	");\n"
	"CREATE TRIGGER review_insert BEFORE INSERT ON review BEGIN\n"
	"  SELECT CASE\n"
	"    WHEN EXISTS (SELECT 1 FROM review WHERE id = NEW.id)\n"
	"      THEN RAISE(ABORT, 'atb-rule:append_only: a review is never replaced')\n"
	"    WHEN NOT EXISTS (SELECT 1 FROM result WHERE id = NEW.result)\n"
	"      THEN RAISE(ABORT, 'atb-rule:review: the reviewed result does not exist')\n"
	"    WHEN (SELECT status FROM result WHERE id = NEW.result) IS NOT 'quarantined'\n"
	"      THEN RAISE(ABORT, 'atb-rule:review: only a quarantined result can be reviewed')\n"
	"  END;\n"
	"END;\n"
	APPEND_ONLY("review")

	/* ---- the audit chain (hashes re-verified in C) ---- */
	"CREATE TABLE audit (\n"
	"  seq INTEGER PRIMARY KEY\n"
	"    CONSTRAINT \"atb-rule:audit_chain: seq is a positive integer\"\n"
	"    CHECK (typeof(seq) = 'integer' AND seq >= 1),\n"
	"  time TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:audit_chain: time is rfc 3339 utc with nanoseconds\"\n"
	"    CHECK (time GLOB '[0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9].[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]Z'),\n"
	"  kind TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:audit_chain: kind is 1-63 of [a-z0-9_.:-]\"\n"
	"    CHECK (length(kind) BETWEEN 1 AND 63 AND kind NOT GLOB '*[^a-z0-9_.:-]*'),\n"
	"  payload TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:audit_chain: payload is a json object\"\n"
	"    CHECK (json_valid(payload) AND json_type(payload) = 'object'),\n"
	"  prev_hash TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:audit_chain: prev_hash is 64 lowercase hex\"\n"
	"    CHECK " HEX64("prev_hash") ",\n"
	"  hash TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:audit_chain: hash is 64 lowercase hex\"\n"
	"    CHECK " HEX64("hash") "\n"
	");\n"
	"CREATE TRIGGER audit_insert BEFORE INSERT ON audit BEGIN\n"
	"  SELECT CASE\n"
	"    WHEN NEW.seq IS NOT (SELECT coalesce(max(seq), 0) + 1 FROM audit)\n"
	"      THEN RAISE(ABORT, 'atb-rule:audit_chain: seq must be the last seq plus one')\n"
	"    WHEN NEW.prev_hash IS NOT coalesce((SELECT hash FROM audit WHERE seq = NEW.seq - 1),\n"
	"         '" ATBI_GENESIS "')\n"
	"      THEN RAISE(ABORT, 'atb-rule:audit_chain: prev_hash must be the previous entry''s hash')\n"
	"  END;\n"
	"END;\n"
	APPEND_ONLY("audit")

	/* ---- runs: one tuning loop (atb run), its plan, protocol and box ---- */
	"CREATE TABLE run (\n"
	"  id TEXT PRIMARY KEY\n"
	"    CONSTRAINT \"atb-rule:malformed: a run id is 1-64 of [0-9a-zA-Z-]\"\n"
	"    CHECK (length(id) BETWEEN 1 AND 64 AND id NOT GLOB '*[^0-9a-zA-Z-]*'),\n"
	"  task TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a run names its task\"\n"
	"    CHECK (length(task) >= 1),\n"
	"  proposer TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a run names its proposer\"\n"
	"    CHECK (length(proposer) BETWEEN 1 AND 31),\n"
	"  seed INTEGER NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a run seed is an integer\"\n"
	"    CHECK (typeof(seed) = 'integer'),\n"
	"  iterations INTEGER NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a run plans at least one iteration\"\n"
	"    CHECK (typeof(iterations) = 'integer' AND iterations >= 1),\n"
	"  paired_seeds INTEGER NOT NULL\n"
	"    CONSTRAINT \"atb-rule:paired_seeds: a run measures on at least one paired seed\"\n"
	"    CHECK (typeof(paired_seeds) = 'integer' AND paired_seeds >= 1),\n"
	"  naive INTEGER NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a run's naive flag is 0 or 1\"\n"
	"    CHECK (naive IN (0, 1)),\n"
	"  protocol_digest TEXT REFERENCES frozen_protocol(digest),\n"
	"  box_fingerprint TEXT REFERENCES box(fingerprint),\n"
	"  created TEXT NOT NULL\n"
	");\n"
	"CREATE TRIGGER run_insert BEFORE INSERT ON run BEGIN\n"
	"  SELECT CASE\n"
	"    WHEN EXISTS (SELECT 1 FROM run WHERE id = NEW.id)\n"
	"      THEN RAISE(ABORT, 'atb-rule:append_only: a run is never replaced')\n"
	"    WHEN NEW.protocol_digest IS NULL OR NOT EXISTS\n"
	"         (SELECT 1 FROM frozen_protocol WHERE digest = NEW.protocol_digest)\n"
	"      THEN RAISE(ABORT, 'atb-rule:unfrozen_protocol: the run''s protocol digest is not frozen in this store')\n"
	"    WHEN NEW.box_fingerprint IS NULL OR NOT EXISTS\n"
	"         (SELECT 1 FROM box WHERE fingerprint = NEW.box_fingerprint)\n"
	"      THEN RAISE(ABORT, 'atb-rule:no_box: the run names no registered box')\n"
	"  END;\n"
	"END;\n"
	APPEND_ONLY("run")

	/*
	 * ---- iterations: one row per finished loop iteration, with its
	 * outcome.  Written in one transaction after the measurement, so an
	 * interrupted iteration leaves no row and is redone on resume.
	 */
	"CREATE TABLE iteration (\n"
	"  run TEXT NOT NULL REFERENCES run(id),\n"
	"  k INTEGER NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: an iteration number is a non-negative integer\"\n"
	"    CHECK (typeof(k) = 'integer' AND k >= 0),\n"
	"  knobs TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: an iteration's knobs are a json object\"\n"
	"    CHECK (json_valid(knobs) AND json_type(knobs) = 'object'),\n"
	"  outcome TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: an outcome is 1-63 of [a-z0-9_:]\"\n"
	"    CHECK (length(outcome) BETWEEN 1 AND 63 AND outcome NOT GLOB '*[^a-z0-9_:]*'),\n"
	"  usable INTEGER NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: usable is 0 or 1, and 1 exactly when the outcome is usable\"\n"
	"    CHECK (usable IN (0, 1) AND (usable = 1) = (outcome = 'usable')),\n"
	"  job_uuid TEXT,\n"
	"  result INTEGER REFERENCES result(id),\n"
	"  rejection INTEGER REFERENCES rejection(id),\n"
	"  speedup REAL, ci_low REAL, ci_high REAL,\n"
	"  naive_speedup REAL, naive_ci_low REAL, naive_ci_high REAL,\n"
	"  reason TEXT NOT NULL,\n"
	"  wall_s REAL NOT NULL\n"
	"    CONSTRAINT \"atb-rule:bad_time: an iteration's wall time is finite and not negative\"\n"
	"    CHECK (typeof(wall_s) IN ('real', 'integer') AND wall_s >= 0\n"
	"           AND wall_s <= 1.7976931348623157e308),\n"
	"  created TEXT NOT NULL,\n"
	"  CONSTRAINT \"atb-rule:bad_time: an iteration's speedups are finite and positive when present\"\n"
	"    CHECK ((speedup IS NULL OR " POS("speedup") ") AND (ci_low IS NULL OR " POS("ci_low") ")\n"
	"       AND (ci_high IS NULL OR " POS("ci_high") ")\n"
	"       AND (naive_speedup IS NULL OR " POS("naive_speedup") ")\n"
	"       AND (naive_ci_low IS NULL OR " POS("naive_ci_low") ")\n"
	"       AND (naive_ci_high IS NULL OR " POS("naive_ci_high") ")),\n"
	"  PRIMARY KEY (run, k)\n"
	") WITHOUT ROWID;\n"
	"CREATE TRIGGER iteration_insert BEFORE INSERT ON iteration BEGIN\n"
	"  SELECT CASE\n"
	"    WHEN r.id IS NULL\n"
	"      THEN RAISE(ABORT, 'atb-rule:malformed: the iteration names no stored run')\n"
	"    WHEN EXISTS (SELECT 1 FROM iteration WHERE run = NEW.run AND k = NEW.k)\n"
	"      THEN RAISE(ABORT, 'atb-rule:append_only: an iteration is never replaced')\n"
	"    WHEN NEW.k >= r.iterations\n"
	"      THEN RAISE(ABORT, 'atb-rule:malformed: the iteration is beyond its run''s planned iterations')\n"
	"    WHEN NEW.k IS NOT (SELECT count(*) FROM iteration WHERE run = NEW.run)\n"
	"      THEN RAISE(ABORT, 'atb-rule:malformed: iterations are recorded in order, each once')\n"
	"    WHEN NEW.result IS NOT NULL AND NOT EXISTS (SELECT 1 FROM result x JOIN job j ON j.id = x.job\n"
	"         WHERE x.id = NEW.result AND j.uuid IS NEW.job_uuid\n"
	"           AND x.protocol_digest IS r.protocol_digest AND x.box_fingerprint IS r.box_fingerprint\n"
	"           AND x.speedup IS NEW.speedup AND x.ci_low IS NEW.ci_low AND x.ci_high IS NEW.ci_high)\n"
	"      THEN RAISE(ABORT, 'atb-rule:malformed: the iteration''s result is not of its job, its run''s protocol and box, or has another speedup')\n"
	/* PROTO: loop.usable_iteration (an iteration counts as usable only when admitted) */
	"    WHEN NEW.usable = 1 AND EXISTS (SELECT 1 FROM frozen_protocol p,\n"
	"         json_each(p.canonical, '$.loop.usable_iteration') u\n"
	"         WHERE p.digest = r.protocol_digest AND u.value = 'admitted')\n"
	"         AND NOT EXISTS (SELECT 1 FROM result x WHERE x.id = NEW.result AND x.status = 'admitted')\n"
	"      THEN RAISE(ABORT, 'atb-rule:malformed: a usable iteration names an admitted result')\n"
	"  END FROM (SELECT 1) LEFT JOIN run r ON r.id = NEW.run;\n"
	"END;\n"
	APPEND_ONLY("iteration")

	"CREATE INDEX rejection_job ON rejection(job_uuid);\n"
	"CREATE INDEX review_result ON review(result);\n"
	"CREATE INDEX audit_kind ON audit(kind);\n"
	"CREATE INDEX box_capability_kind ON box_capability(fingerprint, kind);\n";

/*
 * Schema v3 = v2 above plus this, run in the same transaction, both when a
 * store is created and when a v2 store is migrated on its first read-write
 * open, so that a migrated store's schema text is a fresh one's.
 *
 * - The store re-derives what it can on insert: each per-seed median from
 *   its samples, each ratio from its medians (baseline/candidate for a
 *   kernel's times, candidate/baseline for an engine's rates), the speedup
 *   as the geometric mean of the ratios and the cv as the protocol's
 *   stats.cv_of says (the ratios' sample CV, or the larger per-arm CV of
 *   per-seed medians before v2).  Relative tolerance 1e-9: the C code
 *   computes the same numbers with other roundings.  AFTER triggers, so
 *   that the v2 BEFORE rules (cv_over_cap, paired_seeds...) speak first.
 *   The interval is a seeded bootstrap: atb db check re-derives it in C.
 * - A rejection names the protocol digest it was judged under (NULL only
 *   in rows written before v3).
 */
/*
 * "m is the median of the seed's samples of arm", in one pass over them
 * (no sort): with cl and cg the counts below and above m, m lies between
 * the two middle order statistics when cl, cg <= n/2; for odd n that makes
 * it the middle one, for even n the two middle ones are the largest value
 * below m (when cl = n/2, else m) and the smallest above (when cg = n/2,
 * else m), and m must be their mean.  The median C and Python compute for
 * even n, 0.5a + 0.5b and (a + b) / 2, are the same double.
 */
#define IS_MEDIAN(arm, m) \
	"(SELECT x.cl <= x.n / 2 AND x.cg <= x.n / 2 AND (x.n % 2 = 1 OR abs(" m " - (" \
	"CASE WHEN x.cl = x.n / 2 THEN x.lo ELSE " m " END + " \
	"CASE WHEN x.cg = x.n / 2 THEN x.hi ELSE " m " END) / 2) <= 1e-9 * " m ") FROM" \
	" (SELECT count(*) AS n, sum(value < " m ") AS cl, sum(value > " m ") AS cg," \
	" max(CASE WHEN value < " m " THEN value END) AS lo," \
	" min(CASE WHEN value > " m " THEN value END) AS hi FROM sample" \
	" WHERE job = NEW.job AND arm = '" arm "' AND seed = NEW.seed) x)"
#define SPREAD(col, mean) \
	"(SELECT sqrt(sum((" col " - " mean ") * (" col " - " mean ")) / (g.n - 1)) / " mean \
	" FROM seed_result WHERE job = NEW.job)"

const char atbi_store_schema_v3_sql[] =
	"ALTER TABLE rejection ADD COLUMN protocol_digest TEXT\n"
	"    CONSTRAINT \"atb-rule:malformed: a rejection's protocol digest is 64 lowercase hex\"\n"
	"    CHECK (protocol_digest IS NULL OR " HEX64("protocol_digest") ");\n"
	"CREATE TRIGGER rejection_digest BEFORE INSERT ON rejection\n"
	"WHEN NEW.protocol_digest IS NULL\n"
	"BEGIN\n"
	"  SELECT RAISE(ABORT, 'atb-rule:malformed: a rejection names the protocol digest it was judged under');\n"
	"END;\n"
	"CREATE TRIGGER seed_result_derive AFTER INSERT ON seed_result BEGIN\n"
	"  SELECT CASE\n"
	"    WHEN " IS_MEDIAN("baseline", "NEW.baseline_median") " IS NOT 1\n"
	"      THEN RAISE(ABORT, 'atb-rule:not_derived: the baseline median is not the median of the seed''s baseline samples')\n"
	"    WHEN " IS_MEDIAN("candidate", "NEW.candidate_median") " IS NOT 1\n"
	"      THEN RAISE(ABORT, 'atb-rule:not_derived: the candidate median is not the median of the seed''s candidate samples')\n"
	"    WHEN NOT abs(NEW.ratio - CASE WHEN j.kind = 'engine'\n"
	"             THEN NEW.candidate_median / NEW.baseline_median\n"
	"             ELSE NEW.baseline_median / NEW.candidate_median END) <= 1e-9 * NEW.ratio\n"
	"      THEN RAISE(ABORT, 'atb-rule:not_derived: the per-seed ratio does not follow from the seed''s medians')\n"
	"  END FROM job j WHERE j.id = NEW.job;\n"
	"END;\n"
	"CREATE TRIGGER result_derive AFTER INSERT ON result BEGIN\n"
	"  SELECT CASE\n"
	"    WHEN NOT abs(ln(NEW.speedup) - g.lm) <= 1e-9\n"
	"      THEN RAISE(ABORT, 'atb-rule:not_derived: the speedup is not the geometric mean of the per-seed ratios')\n"
	"    WHEN g.n >= 2 AND NOT abs(NEW.cv - CASE\n"
	"             WHEN json_extract(p.canonical, '$.stats.cv_of') = 'per_seed_ratio'\n"
	"             THEN " SPREAD("ratio", "g.mr") "\n"
	"             ELSE max(" SPREAD("baseline_median", "g.mb") ", " SPREAD("candidate_median", "g.mc") ")\n"
	"             END) <= 1e-9\n"
	"      THEN RAISE(ABORT, 'atb-rule:not_derived: the cv does not follow from the per-seed values (the protocol''s stats.cv_of)')\n"
	"  END FROM (SELECT count(*) AS n, avg(ln(ratio)) AS lm, avg(ratio) AS mr,\n"
	"                   avg(baseline_median) AS mb, avg(candidate_median) AS mc\n"
	"            FROM seed_result WHERE job = NEW.job) g\n"
	"    LEFT JOIN frozen_protocol p ON p.digest = NEW.protocol_digest;\n"
	"END;\n";

/*
 * Schema v4 = v3 plus this (created and migrated as v3 is): an iteration's
 * result may be on another box than its run's when the run was resumed
 * there with --allow-other-box, which the resume's audit entry
 * ('suite.resume' or 'calibrate.resume', written before the task runs)
 * records as {"run": RUN, "box": FP, "other_box": true}.  v3 refused every
 * such result, so a suite or calibration resumed on another machine
 * measured its next task and then could not record it.  The allowance is
 * the audit chain's, not a table of its own: an entry is hashed and
 * mirrored, so one added by SQL is found by 'atb audit verify', and an
 * iteration on a box that no entry of its run names is still refused.
 * The rules are otherwise v3's, with the box in a clause of its own so
 * that a refusal says which part failed.
 */
const char atbi_store_schema_v4_sql[] =
	"DROP TRIGGER iteration_insert;\n"
	"CREATE TRIGGER iteration_insert BEFORE INSERT ON iteration BEGIN\n"
	"  SELECT CASE\n"
	"    WHEN r.id IS NULL\n"
	"      THEN RAISE(ABORT, 'atb-rule:malformed: the iteration names no stored run')\n"
	"    WHEN EXISTS (SELECT 1 FROM iteration WHERE run = NEW.run AND k = NEW.k)\n"
	"      THEN RAISE(ABORT, 'atb-rule:append_only: an iteration is never replaced')\n"
	"    WHEN NEW.k >= r.iterations\n"
	"      THEN RAISE(ABORT, 'atb-rule:malformed: the iteration is beyond its run''s planned iterations')\n"
	"    WHEN NEW.k IS NOT (SELECT count(*) FROM iteration WHERE run = NEW.run)\n"
	"      THEN RAISE(ABORT, 'atb-rule:malformed: iterations are recorded in order, each once')\n"
	"    WHEN NEW.result IS NOT NULL AND NOT EXISTS (SELECT 1 FROM result x JOIN job j ON j.id = x.job\n"
	"         WHERE x.id = NEW.result AND j.uuid IS NEW.job_uuid\n"
	"           AND x.protocol_digest IS r.protocol_digest\n"
	"           AND x.speedup IS NEW.speedup AND x.ci_low IS NEW.ci_low AND x.ci_high IS NEW.ci_high)\n"
	"      THEN RAISE(ABORT, 'atb-rule:malformed: the iteration''s result is not of its job and its run''s protocol, or has another speedup')\n"
	"    WHEN NEW.result IS NOT NULL AND NOT EXISTS (SELECT 1 FROM result x WHERE x.id = NEW.result\n"
	"         AND (x.box_fingerprint IS r.box_fingerprint OR " ATBI_ALLOWED_BOX("NEW.run", "x.box_fingerprint") "))\n"
	"      THEN RAISE(ABORT, 'atb-rule:malformed: the iteration''s result is on a box its run was neither started on nor resumed on with --allow-other-box')\n"
	/* PROTO: loop.usable_iteration (an iteration counts as usable only when admitted) */
	"    WHEN NEW.usable = 1 AND EXISTS (SELECT 1 FROM frozen_protocol p,\n"
	"         json_each(p.canonical, '$.loop.usable_iteration') u\n"
	"         WHERE p.digest = r.protocol_digest AND u.value = 'admitted')\n"
	"         AND NOT EXISTS (SELECT 1 FROM result x WHERE x.id = NEW.result AND x.status = 'admitted')\n"
	"      THEN RAISE(ABORT, 'atb-rule:malformed: a usable iteration names an admitted result')\n"
	"  END FROM (SELECT 1) LEFT JOIN run r ON r.id = NEW.run;\n"
	"END;\n";

const char *const atbi_store_tables[ATB_STORE_NTABLES] = {
	"frozen_protocol", "box", "job", "sample", "seed_result",
	"result", "rejection", "review", "audit", "run", "iteration",
	"box_capability",
};
