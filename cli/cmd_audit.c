/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb audit: verify and show the hash-chained audit trail kept in the store
 * and in its JSON-lines mirror.  A thin layer over include/atb/audit.h; the
 * help text below is the command's documentation (docs/audit.md says the
 * same at more length).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "atb/audit.h"
#include "atb/store.h"
#include "cli.h"
#include "banned.h"

static const char usage_text[] =
	"usage: atb audit verify [--head SEQ:HASH] [--witness FILE] [--chain-only] [--json]\n"
	"       atb audit head [--json]\n"
	"       atb audit show [--since SEQ] [--json]\n"
	"\n"
	"Every ingest, rejection, review, registered box, box capability, frozen\n"
	"protocol, run and iteration (and every model call or gate decision a\n"
	"module records) is an entry of an append-only chain: entry = {seq, time\n"
	"(RFC 3339 UTC, ns), kind, payload, prev_hash}, hash = SHA-256 of the\n"
	"entry's canonical JSON, prev_hash = the previous entry's hash (64 zeros\n"
	"for seq 1).  An entry that records rows carries in its payload \"rows\":\n"
	"the SHA-256 of those rows' canonical content (the job with its samples,\n"
	"seed results and result; the rejection; the review; ...), so an edited\n"
	"row breaks the entry that recorded it.  The chain is kept in the store's\n"
	"audit table and mirrored, one {\"entry\":...,\"hash\":...} per line, to\n"
	"<db>.audit.jsonl beside the store.  The mirror line is fsync'ed before\n"
	"the store commits, so a crash leaves at most one trailing mirror entry the\n"
	"store never committed (or a partial line); the next write to the store\n"
	"drops it.  With $ATB_AUDIT_WITNESS set to a file outside the store's\n"
	"folder, every append also adds 'SEQ:HASH' to it (fsync'ed): a truncated\n"
	"tail or a chain rewritten in both copies then no longer matches it.\n"
	"Secrets (values of 8+ characters of environment variables whose names\n"
	"contain KEY, TOKEN, SECRET or PASSWORD) are replaced by [redacted] before\n"
	"anything is written.\n"
	"\n"
	"subcommands:\n"
	"  verify   check both copies: every hash against its entry's bytes, seq\n"
	"           continuity, prev_hash links, the mirror equal to the store\n"
	"           entry by entry, the rows each entry records re-hashed, and an\n"
	"           entry for every job, rejection, review, box, box capability,\n"
	"           frozen protocol, run and iteration.  Names the first bad entry:\n"
	"           its seq, which copy (db, mirror, both, witness, or store for\n"
	"           rows that differ or lack an entry) and what is wrong; exit 1.\n"
	"           A crash's leftover, and entries written before row hashes\n"
	"           (schema 2, 'legacy'), are notes\n"
	"  head     print the chain's head, 'SEQ:HASH' (the last entry): publish it\n"
	"           or keep it elsewhere, and give it to 'verify --head' later\n"
	"  show     print the store's entries (after SEQ with --since), one per\n"
	"           line: 'SEQ TIME KIND PAYLOAD'\n"
	"\n"
	"options:\n"
	"  --head SEQ:HASH  verify: the entry SEQ must still have HASH (nothing up to\n"
	"                   a published head was changed, and the chain reaches it)\n"
	"  --witness FILE   verify: every 'SEQ:HASH' line of FILE must match, and the\n"
	"                   chain must reach its last seq (default $ATB_AUDIT_WITNESS).\n"
	"                   A witness in the store's folder is refused\n"
	"  --chain-only     verify: do not re-hash the rows entries record\n"
	"  --since SEQ      show: only entries with seq > SEQ\n"
	"  --json           machine-readable output (also 'atb --json audit ...')\n"
	"  -h, --help       this text\n"
	"\n"
	"the store is --db PATH, $ATB_DB or ./atb.db, opened read-only.\n"
	"exit codes: 0 ok; 1 the chain does not verify; 2 bad usage or not a\n"
	"store; 3 store or i/o failure\n";

static int audit_head(struct cli_ctx *ctx, int json)
{
	struct atb_store *s = NULL;
	struct atb_error err;
	char hash[65];
	int64_t seq;

	atb_error_clear(&err);
	if (atb_store_open(ctx->db_path, ATB_STORE_READ_ONLY, &s, &err) ||
	    atb_audit_head(s, &seq, hash, &err)) {
		atb_store_close(s);
		return cli_fail(&err);
	}
	atb_store_close(s);
	if (json)
		return cli_print_json("audit", json_pack("{s:I, s:s}", "seq", (json_int_t)seq,
							 "hash", hash));
	printf("%" PRId64 ":%s\n", seq, hash);
	return CLI_OK;
}

static int audit_verify(struct cli_ctx *ctx, const struct atb_audit_verify_opts *opts, int json)
{
	struct atb_store *s = NULL;
	struct atb_audit_report rep;
	struct atb_error err;
	enum atb_status st;
	size_t i;
	int rc;

	atb_error_clear(&err);
	if (atb_store_open(ctx->db_path, ATB_STORE_READ_ONLY, &s, &err))
		return cli_fail(&err);
	st = atb_audit_verify_with(s, opts, &rep, &err);
	atb_store_close(s);
	if (st && st != ATB_ERR_AUDIT)
		return cli_fail(&err);
	if (json) {
		json_t *o = json_pack("{s:b, s:I, s:I, s:I, s:I, s:I, s:I}", "ok", rep.ok,
				      "db_entries", (json_int_t)rep.db_entries, "mirror_entries",
				      (json_int_t)rep.mirror_entries, "rows_checked",
				      (json_int_t)rep.rows_checked, "legacy_entries",
				      (json_int_t)rep.legacy_entries, "head_seq",
				      (json_int_t)rep.head_seq, "witness_lines",
				      (json_int_t)rep.witness_lines);
		json_t *notes = json_array();

		for (i = 0; i < rep.nnotes; i++)
			json_array_append_new(notes, json_string(rep.notes[i]));
		if (o) {
			json_object_set_new(o, "notes", notes);
			if (!rep.ok)
				json_object_set_new(o, "problem", json_pack("{s:I, s:s, s:s}", "seq",
					(json_int_t)rep.bad_seq, "copy", rep.bad_copy, "what", rep.problem));
		}
		rc = cli_print_json("audit", o);
		return rc == CLI_OK && !rep.ok ? CLI_CHECK_FAILED : rc;
	}
	for (i = 0; i < rep.nnotes; i++)
		printf("note: %s\n", rep.notes[i]);
	if (!rep.ok)
		return cli_fail(&err);
	printf("audit chain ok: %" PRId64 " entries in the store, %" PRId64 " in the mirror '%s.audit.jsonl'",
	       rep.db_entries, rep.mirror_entries, ctx->db_path);
	if (!opts->chain_only)
		printf("; rows of %" PRId64 " entries re-hashed", rep.rows_checked);
	if (rep.head_seq)
		printf("; head %" PRId64 " matches", rep.head_seq);
	if (opts->witness)
		printf("; %" PRId64 " witness lines match", rep.witness_lines);
	printf("\n");
	return CLI_OK;
}

static int audit_show(struct cli_ctx *ctx, int64_t since, int json)
{
	struct atb_store *s = NULL;
	struct atb_audit_entry *e = NULL;
	struct atb_error err;
	size_t n = 0, i;
	int rc = CLI_OK;

	atb_error_clear(&err);
	if (atb_store_open(ctx->db_path, ATB_STORE_READ_ONLY, &s, &err) ||
	    atb_audit_list(s, since, &e, &n, &err)) {
		atb_store_close(s);
		return cli_fail(&err);
	}
	atb_store_close(s);
	if (json) {
		json_t *a = json_array();

		atb_alloc_install_json();
		for (i = 0; i < n; i++)
			json_array_append_new(a, json_pack("{s:I, s:s, s:s, s:o, s:s, s:s}", "seq",
				(json_int_t)e[i].seq, "time", e[i].time, "kind", e[i].kind,
				"payload", json_loads(e[i].payload, 0, NULL), "prev_hash",
				e[i].prev_hash, "hash", e[i].hash));
		rc = cli_print_json("audit", a);
	} else {
		for (i = 0; i < n; i++)
			printf("%" PRId64 " %s %s %s\n", e[i].seq, e[i].time, e[i].kind, e[i].payload);
	}
	atb_audit_entries_free(e, n);
	return rc;
}

int cmd_audit(int argc, char **argv, struct cli_ctx *ctx)
{
	const char *sub = NULL;
	struct atb_audit_verify_opts vo = {NULL, getenv("ATB_AUDIT_WITNESS"), 0};
	int64_t since = 0;
	int i, json = ctx->json, verify_opt = 0;

	if (cli_wants_help(argc, argv)) {
		fputs(usage_text, stdout);
		return CLI_OK;
	}
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			json = 1;
		} else if (!strcmp(argv[i], "--since")) {
			char *end;

			if (i + 1 >= argc)
				return cli_usage_error("audit", "--since needs a SEQ");
			errno = 0;
			since = strtoll(argv[++i], &end, 10);
			if (errno || *end || end == argv[i] || since < 0)
				return cli_usage_error("audit", "--since '%s' is not a seq", argv[i]);
		} else if (!strcmp(argv[i], "--head") || !strcmp(argv[i], "--witness")) {
			if (i + 1 >= argc)
				return cli_usage_error("audit", "%s needs a value", argv[i]);
			if (!strcmp(argv[i], "--head"))
				vo.head = argv[++i];
			else
				vo.witness = argv[++i];
			verify_opt = 1;
		} else if (!strcmp(argv[i], "--chain-only")) {
			vo.chain_only = 1;
			verify_opt = 1;
		} else if (argv[i][0] == '-') {
			return cli_usage_error("audit", "unknown option '%s'", argv[i]);
		} else if (!sub) {
			sub = argv[i];
		} else {
			return cli_usage_error("audit", "unexpected argument '%s'", argv[i]);
		}
	}
	if (!sub)
		return cli_usage_error("audit", "missing subcommand (verify, head, show)");
	if (vo.witness && !*vo.witness)
		vo.witness = NULL;
	if (!strcmp(sub, "verify")) {
		if (since)
			return cli_usage_error("audit", "--since is for 'show'");
		return audit_verify(ctx, &vo, json);
	}
	if (verify_opt)
		return cli_usage_error("audit", "--head, --witness and --chain-only are for 'verify'");
	if (!strcmp(sub, "head")) {
		if (since)
			return cli_usage_error("audit", "--since is for 'show'");
		return audit_head(ctx, json);
	}
	if (!strcmp(sub, "show"))
		return audit_show(ctx, since, json);
	return cli_usage_error("audit", "unknown subcommand '%s'", sub);
}
