/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb db: create, inspect and check the results store, and ingest one
 * result described as JSON.  A thin layer over include/atb/store.h; the
 * help text below is the command's documentation (docs/db.md says the same
 * at more length).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "atb/audit.h"
#include "atb/judge.h"
#include "atb/llm.h"
#include "atb/protocol.h"
#include "atb/store.h"
#include "cli.h"
#include "banned.h"

static const char usage_text[] =
	"usage: atb db init [--json]\n"
	"       atb db info [--json]\n"
	"       atb db check [--json]\n"
	"       atb db ingest-json FILE [--json]\n"
	"\n"
	"The results store is one SQLite file (--db PATH, $ATB_DB, or ./atb.db)\n"
	"whose schema is the ingest validator: CHECK constraints and triggers\n"
	"refuse, whoever writes (the sqlite3 shell included), a result without\n"
	"paired seeds, a row whose protocol digest is not frozen, a row without a\n"
	"registered box or measured on another box than its job, a baseline from\n"
	"another job, a cv over the protocol's cap, an admitted speedup at or over\n"
	"the anomaly factor (it must be quarantined), duplicate seeds, values that\n"
	"are NaN, infinite, zero or negative, any UPDATE or DELETE (rows are\n"
	"append-only), audit rows that break the chain, a rejection without its\n"
	"protocol digest, and numbers that do not follow from the rows below them\n"
	"(not_derived: a per-seed median that is not its samples' median, a ratio\n"
	"that is not its medians', a speedup that is not the geometric mean of\n"
	"the ratios, a cv that is not theirs).  Refusals read\n"
	"'atb-rule:<rule>: <explanation>'.  The audit chain is mirrored to\n"
	"<db>.audit.jsonl beside the store, and each entry carries the hash of the\n"
	"rows it records (see 'atb audit --help').  Schema 3; a schema 2 store is\n"
	"read as it is and migrated on its first read-write open.\n"
	"\n"
	"subcommands:\n"
	"  init         create the store (the current schema) if absent, and copy every\n"
	"               frozen protocol from $ATB_HOME/protocol/protocol.lock into\n"
	"               it; run again after 'atb protocol freeze'.  The store is built\n"
	"               as <db>.creating and renamed into place: a process killed at\n"
	"               any point leaves no store or a complete one\n"
	"  info         schema version, rows per table, frozen protocols, boxes\n"
	"  check        SQLite's integrity_check; the schema objects against\n"
	"               the current schema (a dropped or altered trigger is found); every\n"
	"               rule re-checked over every row with SQL (rows that got in\n"
	"               while a trigger was dropped are found); every result\n"
	"               re-derived from its samples with the statistics code\n"
	"               (per-seed medians and ratios, speedup, cv, and the bootstrap\n"
	"               interval when its stats name the bootstrap seed); frozen\n"
	"               protocol digests recomputed; the audit chain of both copies\n"
	"               with the rows of every entry re-hashed (and the witness of\n"
	"               $ATB_AUDIT_WITNESS when set).  One line per finding\n"
	"               ('atb-rule:<rule>: <row>: <what>'), and exit 1\n"
	"  ingest-json  ingest one job and its result described as JSON, through\n"
	"               the judge and the same validator (for tests and tools).\n"
	"               FILE ('-' for stdin) holds an object with: kind\n"
	"               (kernel|engine), task, candidate, unit, metric, samples (a\n"
	"               list of {arm, seed, trial, value}; arm baseline|candidate|\n"
	"               naive|baseline_alone), box_fingerprint (64 hex), and\n"
	"               optionally the numbers the judge derives from the samples:\n"
	"               seeds (a list of {seed, baseline_median, candidate_median,\n"
	"               ratio}), speedup, ci_low, ci_high, cv; and job_uuid,\n"
	"               protocol_digest (default: the current frozen protocol),\n"
	"               baseline_job_uuid, stats (an object; stats.bootstrap_seed\n"
	"               seeds the interval), box_description (an object: registers\n"
	"               the box).  Numbers given must be the derived ones (rule\n"
	"               not_derived; an interval that is not the bootstrap of the\n"
	"               samples: gate:derived).  A refused ingest is stored as a\n"
	"               rejection with its reason and exits 2\n"
	"\n"
	"options:\n"
	"  --json       machine-readable output (also 'atb --json db ...')\n"
	"  -h, --help   this text\n"
	"\n"
	"errors: a store that is not SQLite or not atb's is refused ('x' is not an\n"
	"atb store), a newer schema asks for a newer atb, a locked store says so;\n"
	"none of these writes anything.  Malformed JSON is reported as\n"
	"FILE:LINE:COLUMN, wrong fields with their path, e.g.\n"
	"  atb: r.json: samples[2].value: expected a number\n"
	"exit codes: 0 ok; 1 check found problems; 2 bad input or refused ingest;\n"
	"3 store or i/o failure; 4 internal error\n";

/* ---- init ---- */

static int db_init(struct cli_ctx *ctx, int json)
{
	struct atb_frozen_protocol *list = NULL;
	struct atb_store *s = NULL;
	struct atb_error err;
	size_t n = 0, added = 0;
	int current = 0, rc;

	atb_error_clear(&err);
	if (atb_protocol_frozen_list(atb_home(), &list, &n, &current, &err))
		return cli_fail(&err);
	if (atb_store_open(ctx->db_path, ATB_STORE_CREATE, &s, &err) ||
	    atb_store_sync_protocols(s, list, n, &added, &err)) {
		atb_protocol_frozen_free(list, n);
		atb_store_close(s);
		return cli_fail(&err);
	}
	if (json)
		rc = cli_print_json("db", json_pack("{s:s, s:i, s:I, s:I, s:i}", "store", ctx->db_path,
					  "schema", ATB_STORE_SCHEMA_VERSION, "protocols",
					  (json_int_t)n, "added", (json_int_t)added,
					  "current_protocol", current));
	else {
		printf("store '%s' ready: schema %d, %zu frozen protocol%s (%zu new), current v%d\n",
		       ctx->db_path, ATB_STORE_SCHEMA_VERSION, n, n == 1 ? "" : "s", added, current);
		rc = CLI_OK;
	}
	atb_protocol_frozen_free(list, n);
	atb_store_close(s);
	return rc;
}

/* ---- info ---- */

static int db_info(struct cli_ctx *ctx, int json)
{
	struct atb_store *s = NULL;
	struct atb_store_info info;
	struct atb_error err;
	int64_t llm_calls = 0;
	int i;

	atb_error_clear(&err);
	if (atb_store_open(ctx->db_path, ATB_STORE_READ_ONLY, &s, &err) ||
	    atb_store_info(s, &info, &err)) {
		atb_store_close(s);
		return cli_fail(&err);
	}
	/* the model calls (src/llm/record.c keeps their table): counted as
	   atb llm check reads them; a changed one is db check's to report */
	{
		struct atb_error lerr;

		atb_error_clear(&lerr);
		(void)atb_llm_check(s, &llm_calls, NULL, 0, &lerr);
	}
	atb_store_close(s);
	if (json) {
		json_t *o = json_object(), *rows = json_object(), *p = json_array(), *b = json_array();

		for (i = 0; i < ATB_STORE_NTABLES; i++)
			json_object_set_new(rows, info.tables[i], json_integer(info.rows[i]));
		json_object_set_new(rows, "llm_call", json_integer((json_int_t)llm_calls));
		for (i = 0; i < info.nprotocols; i++)
			json_array_append_new(p, json_pack("{s:i, s:s}", "version",
							   info.protocol_versions[i], "digest",
							   info.protocol_digests[i]));
		for (i = 0; i < info.nboxes; i++)
			json_array_append_new(b, json_string(info.box_fingerprints[i]));
		json_object_set_new(o, "store", json_string(ctx->db_path));
		json_object_set_new(o, "schema", json_integer(info.schema_version));
		json_object_set_new(o, "rows", rows);
		json_object_set_new(o, "protocols", p);
		json_object_set_new(o, "boxes", b);
		return cli_print_json("db", o);
	}
	printf("store     %s\nschema    %d\n", ctx->db_path, info.schema_version);
	printf("rows\n");
	for (i = 0; i < ATB_STORE_NTABLES; i++)
		printf("  %-16s %" PRId64 "\n", info.tables[i], info.rows[i]);
	printf("  %-16s %" PRId64 "\n", "llm_call", llm_calls);
	printf("protocols\n");
	for (i = 0; i < info.nprotocols; i++)
		printf("  v%-3d %s\n", info.protocol_versions[i], info.protocol_digests[i]);
	printf("boxes\n");
	for (i = 0; i < info.nboxes; i++)
		printf("  %s\n", info.box_fingerprints[i]);
	return CLI_OK;
}

/* ---- check ---- */

static int db_check(struct cli_ctx *ctx, int json)
{
	struct atb_store *s = NULL;
	struct atb_store_finding *f = NULL;
	struct atb_error err;
	enum atb_status st;
	size_t kept = 0, total = 0, i;
	int rc;

	atb_error_clear(&err);
	if (atb_store_open(ctx->db_path, ATB_STORE_READ_ONLY, &s, &err))
		return cli_fail(&err);
	st = atb_store_check(s, &f, &kept, &total, &err);
	if (st && st != ATB_ERR_CHECK) {
		atb_store_close(s);
		return cli_fail(&err);
	}
	/* the model calls: every llm_call row re-hashed against its row_hash and
	   its llm.call audit entry (atb llm check), the first that differs a finding */
	{
		struct atb_error lerr;
		int64_t ncalls = 0;
		enum atb_status lst;

		atb_error_clear(&lerr);
		lst = atb_llm_check(s, &ncalls, NULL, 0, &lerr);
		if (lst == ATB_ERR_CHECK) {
			struct atb_store_finding *nf = atb_realloc(f, (kept + 1) * sizeof(*f));

			if (nf) {
				f = nf;
				memset(&f[kept], 0, sizeof(f[kept]));
				snprintf(f[kept].rule, sizeof(f[kept].rule), "llm_call");
				snprintf(f[kept].table, sizeof(f[kept].table), "llm_call");
				snprintf(f[kept].what, sizeof(f[kept].what), "atb-rule:llm_call: %.480s",
					 lerr.msg);
				kept++;
			}
			total++;
			atb_error_set(&err, ATB_ERR_CHECK, "store '%s': %zu finding%s", ctx->db_path,
				      total, total == 1 ? "" : "s");
		} else if (lst) {
			atb_store_close(s);
			atb_free(f);
			return cli_fail(&lerr);
		}
	}
	atb_store_close(s);
	if (json) {
		json_t *o = json_object(), *a = json_array();

		for (i = 0; i < kept; i++)
			json_array_append_new(a, json_pack("{s:s, s:s, s:I, s:s}", "rule", f[i].rule,
							   "table", f[i].table, "row",
							   (json_int_t)f[i].row, "what", f[i].what));
		json_object_set_new(o, "ok", json_boolean(total == 0));
		json_object_set_new(o, "findings", a);
		json_object_set_new(o, "total", json_integer((json_int_t)total));
		rc = cli_print_json("db", o);
		if (rc == CLI_OK && total)
			rc = CLI_CHECK_FAILED;
	} else {
		for (i = 0; i < kept; i++) {
			if (f[i].table[0] && !strncmp(f[i].what, "atb-rule:", 9))
				printf("%s\n", f[i].what);  /* names its rule and row */
			else if (f[i].table[0])
				printf("%s: %s %" PRId64 ": %s\n", f[i].rule, f[i].table, f[i].row,
				       f[i].what);
			else
				printf("%s: %s\n", f[i].rule, f[i].what);
		}
		if (total > kept)
			printf("... and %zu more\n", total - kept);
		if (total)
			fprintf(stderr, "atb: %s\n", err.msg);
		else
			printf("store '%s' ok: integrity, schema, every rule, every result re-derived, every model call re-hashed and the audit chain\n",
			       ctx->db_path);
		rc = total ? CLI_CHECK_FAILED : CLI_OK;
	}
	atb_free(f);
	return rc;
}

/* ---- ingest-json ---- */

struct reader {
	const char *file;
	struct atb_error *err;
	enum atb_status st;
};

static int fail_field(struct reader *r, const char *field, const char *msg)
{
	if (!r->st)
		r->st = atb_error_set_at(r->err, ATB_ERR_SCHEMA, r->file, 0, 0, field, "%s", msg);
	return -1;
}

static const char *get_str(struct reader *r, json_t *o, const char *key, int required)
{
	json_t *v = json_object_get(o, key);

	if (!v) {
		if (required)
			fail_field(r, key, "missing field");
		return NULL;
	}
	if (!json_is_string(v)) {
		fail_field(r, key, "expected a string");
		return NULL;
	}
	return json_string_value(v);
}

static double get_num(struct reader *r, json_t *o, const char *key, const char *path)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_number(v)) {
		fail_field(r, path, v ? "expected a number" : "missing field");
		return NAN;
	}
	return json_number_value(v);
}

static int64_t get_int(struct reader *r, json_t *o, const char *key, const char *path)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v)) {
		fail_field(r, path, v ? "expected an integer" : "missing field");
		return 0;
	}
	return json_integer_value(v);
}

static const char *const known_keys[] = {
	"kind", "task", "candidate", "unit", "metric", "samples", "seeds", "speedup", "ci_low",
	"ci_high", "cv", "box_fingerprint", "job_uuid", "protocol_digest", "baseline_job_uuid",
	"stats", "box_description",
};

static int db_ingest_json(struct cli_ctx *ctx, const char *file, int json)
{
	struct atb_error err;
	struct reader r = {file, &err, ATB_OK};
	struct atb_ingest in;
	struct atb_ingest_outcome o;
	struct atb_sample *samples = NULL;
	struct atb_seed_result *seeds = NULL;
	struct atb_store *s = NULL;
	char *stats = NULL, *desc = NULL, current_digest[65] = "";
	json_error_t je;
	json_t *root, *a, *x;
	const char *key;
	size_t i;
	enum atb_status st;
	struct atb_protocol *proto = NULL;
	unsigned claimed = 0;
	int rc = CLI_OK;

	atb_error_clear(&err);
	atb_alloc_install_json();
	if (!strcmp(file, "-"))
		root = json_loadf(stdin, JSON_REJECT_DUPLICATES, &je);
	else
		root = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
	if (!root) {
		atb_error_set_at(&err, je.line < 0 ? ATB_ERR_IO : ATB_ERR_PARSE, file,
				 je.line > 0 ? (unsigned)je.line : 0,
				 je.column > 0 ? (unsigned)je.column : 0, NULL, "%s", je.text);
		return cli_fail(&err);
	}
	if (!json_is_object(root)) {
		json_decref(root);
		atb_error_set_at(&err, ATB_ERR_SCHEMA, file, 0, 0, NULL, "expected a json object");
		return cli_fail(&err);
	}
	json_object_foreach(root, key, x) {
		int ok = 0;

		for (i = 0; i < sizeof(known_keys) / sizeof(known_keys[0]); i++)
			ok |= !strcmp(key, known_keys[i]);
		if (!ok) {
			fail_field(&r, key, "unknown key");
			break;
		}
	}
	memset(&in, 0, sizeof(in));
	in.kind = get_str(&r, root, "kind", 1);
	in.task = get_str(&r, root, "task", 1);
	in.candidate = get_str(&r, root, "candidate", 1);
	in.unit = get_str(&r, root, "unit", 1);
	in.metric = get_str(&r, root, "metric", 1);
	in.box_fingerprint = get_str(&r, root, "box_fingerprint", 1);
	in.job_uuid = get_str(&r, root, "job_uuid", 0);
	in.protocol_digest = get_str(&r, root, "protocol_digest", 0);
	in.baseline_job_uuid = get_str(&r, root, "baseline_job_uuid", 0);
	/* the derived numbers are claims: optional, checked by the judge and the store */
	if (json_object_get(root, "speedup")) {
		in.speedup = get_num(&r, root, "speedup", "speedup");
		claimed |= ATB_JUDGE_CLAIM_SPEEDUP;
	}
	if (json_object_get(root, "ci_low") || json_object_get(root, "ci_high")) {
		in.ci_low = get_num(&r, root, "ci_low", "ci_low");
		in.ci_high = get_num(&r, root, "ci_high", "ci_high");
		claimed |= ATB_JUDGE_CLAIM_INTERVAL;
	}
	if (json_object_get(root, "cv")) {
		in.cv = get_num(&r, root, "cv", "cv");
		claimed |= ATB_JUDGE_CLAIM_CV;
	}
	if ((x = json_object_get(root, "stats"))) {
		if (!json_is_object(x))
			fail_field(&r, "stats", "expected an object");
		else
			stats = json_dumps(x, JSON_COMPACT | JSON_SORT_KEYS);
		in.stats_json = stats;
	}
	if ((x = json_object_get(root, "box_description"))) {
		if (!json_is_object(x))
			fail_field(&r, "box_description", "expected an object");
		else
			desc = json_dumps(x, JSON_COMPACT | JSON_SORT_KEYS);
	}
	a = json_object_get(root, "samples");
	if (!json_is_array(a)) {
		fail_field(&r, "samples", "expected a list");
	} else if (!r.st) {
		in.nsamples = json_array_size(a);
		samples = atb_calloc(in.nsamples ? in.nsamples : 1, sizeof(*samples));
		if (!samples)
			r.st = atb_error_set(&err, ATB_ERR_NOMEM, "out of memory");
		json_array_foreach(a, i, x) {
			char path[64];
			const char *arm;
			int k;

			if (r.st)
				break;
			snprintf(path, sizeof(path), "samples[%zu]", i);
			if (!json_is_object(x)) {
				fail_field(&r, path, "expected an object");
				break;
			}
			snprintf(path, sizeof(path), "samples[%zu].arm", i);
			arm = json_string_value(json_object_get(x, "arm"));
			for (k = 0; k < 4 && (!arm || strcmp(arm, atb_arm_name((enum atb_arm)k))); k++)
				;
			if (k == 4) {
				fail_field(&r, path, "expected baseline, candidate, naive or baseline_alone");
				break;
			}
			samples[i].arm = (enum atb_arm)k;
			snprintf(path, sizeof(path), "samples[%zu].seed", i);
			samples[i].seed = get_int(&r, x, "seed", path);
			snprintf(path, sizeof(path), "samples[%zu].trial", i);
			samples[i].trial = (int32_t)get_int(&r, x, "trial", path);
			snprintf(path, sizeof(path), "samples[%zu].value", i);
			samples[i].value = get_num(&r, x, "value", path);
		}
		in.samples = samples;
	}
	a = json_object_get(root, "seeds");
	if (a && !json_is_array(a)) {
		fail_field(&r, "seeds", "expected a list");
	} else if (a && !r.st) {
		claimed |= ATB_JUDGE_CLAIM_SEEDS;
		in.nseeds = json_array_size(a);
		seeds = atb_calloc(in.nseeds ? in.nseeds : 1, sizeof(*seeds));
		if (!seeds)
			r.st = atb_error_set(&err, ATB_ERR_NOMEM, "out of memory");
		json_array_foreach(a, i, x) {
			char path[64];

			if (r.st)
				break;
			snprintf(path, sizeof(path), "seeds[%zu]", i);
			if (!json_is_object(x)) {
				fail_field(&r, path, "expected an object");
				break;
			}
			snprintf(path, sizeof(path), "seeds[%zu].seed", i);
			seeds[i].seed = get_int(&r, x, "seed", path);
			snprintf(path, sizeof(path), "seeds[%zu].baseline_median", i);
			seeds[i].baseline_median = get_num(&r, x, "baseline_median", path);
			snprintf(path, sizeof(path), "seeds[%zu].candidate_median", i);
			seeds[i].candidate_median = get_num(&r, x, "candidate_median", path);
			snprintf(path, sizeof(path), "seeds[%zu].ratio", i);
			seeds[i].ratio = get_num(&r, x, "ratio", path);
		}
		in.seeds = seeds;
	}
	if (r.st) {
		rc = cli_fail(&err);
		goto out;
	}
	if (!in.protocol_digest) {
		struct atb_frozen_protocol *list = NULL;
		size_t n = 0;
		int current = 0;

		if (atb_protocol_frozen_list(atb_home(), &list, &n, &current, &err)) {
			rc = cli_fail(&err);
			goto out;
		}
		for (i = 0; i < n; i++)
			if (list[i].version == current)
				snprintf(current_digest, sizeof(current_digest), "%s", list[i].digest);
		atb_protocol_frozen_free(list, n);
		in.protocol_digest = current_digest;
	}
	if (atb_store_open(ctx->db_path, ATB_STORE_READ_WRITE, &s, &err)) {
		rc = cli_fail(&err);
		goto out;
	}
	if (desc && atb_store_register_box(s, in.box_fingerprint, desc, &err)) {
		rc = cli_fail(&err);
		goto out;
	}
	/* PROTO: stats.* -- the judge derives every number under the job's protocol;
	   one not frozen here derives nothing, and the store refuses it */
	{
		struct atb_error perr;

		atb_error_clear(&perr);
		if (atb_protocol_load_digest(atb_home(), in.protocol_digest, &proto, &perr))
			proto = NULL;
	}
	st = atb_judge_ingest_samples(s, proto, &in, claimed, &o, &err);
	if (json) {
		json_t *v = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:b}", "status",
				      atb_status_name(st), "job", o.job_uuid, "job_id",
				      (json_int_t)o.job_id, "result", (json_int_t)o.result_id,
				      "rejection", (json_int_t)o.rejection_id, "audit_seq",
				      (json_int_t)o.audit_seq, "quarantined", o.quarantined);

		if (st && v)
			json_object_set_new(v, "reason", json_string(err.msg));
		rc = cli_print_json("db", v);
		if (st)
			rc = cli_exit_code(st);
	} else if (st) {
		char msg[sizeof(err.msg)];

		snprintf(msg, sizeof(msg), "%s", err.msg);
		atb_error_set_at(&err, st, file, 0, 0, NULL, "%s", msg);
		rc = cli_fail(&err);
		if (o.rejection_id && o.audit_seq)
			fprintf(stderr, "atb: stored as rejection %" PRId64 " (audit entry %" PRId64 ")\n",
				o.rejection_id, o.audit_seq);
		else if (o.rejection_id)
			fprintf(stderr, "atb: stored as rejection %" PRId64 "\n", o.rejection_id);
	} else {
		printf("ingested job %s: result %" PRId64 " %s, speedup %.4gx over %zu paired seeds;"
		       " audit entry %" PRId64 "\n", o.job_uuid, o.result_id,
		       o.quarantined ? "quarantined (anomaly breaker; see 'atb review')" : "admitted",
		       in.speedup, in.nseeds, o.audit_seq);
	}
out:
	atb_protocol_free(proto);
	atb_store_close(s);
	atb_free(samples);
	atb_free(seeds);
	atb_free(stats);
	atb_free(desc);
	json_decref(root);
	return rc;
}

int cmd_db(int argc, char **argv, struct cli_ctx *ctx)
{
	const char *sub = NULL, *file = NULL;
	int i, json = ctx->json;

	if (cli_wants_help(argc, argv)) {
		fputs(usage_text, stdout);
		return CLI_OK;
	}
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (argv[i][0] == '-' && strcmp(argv[i], "-"))
			return cli_usage_error("db", "unknown option '%s'", argv[i]);
		else if (!sub)
			sub = argv[i];
		else if (!file)
			file = argv[i];
		else
			return cli_usage_error("db", "unexpected argument '%s'", argv[i]);
	}
	if (!sub)
		return cli_usage_error("db", "missing subcommand (init, info, check, ingest-json)");
	if (!strcmp(sub, "ingest-json")) {
		if (!file)
			return cli_usage_error("db", "ingest-json needs a FILE");
		return db_ingest_json(ctx, file, json);
	}
	if (file)
		return cli_usage_error("db", "unexpected argument '%s'", file);
	if (!strcmp(sub, "init"))
		return db_init(ctx, json);
	if (!strcmp(sub, "info"))
		return db_info(ctx, json);
	if (!strcmp(sub, "check"))
		return db_check(ctx, json);
	return cli_usage_error("db", "unknown subcommand '%s'", sub);
}
