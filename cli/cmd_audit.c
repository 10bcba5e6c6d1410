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
	"usage: atb audit verify [--json]\n"
	"       atb audit show [--since SEQ] [--json]\n"
	"\n"
	"Every ingest, rejection, review, registered box and frozen protocol (and\n"
	"every model call or gate decision a module records) is an entry of an\n"
	"append-only chain: entry = {seq, time (RFC 3339 UTC, ns), kind, payload,\n"
	"prev_hash}, hash = SHA-256 of the entry's canonical JSON, prev_hash = the\n"
	"previous entry's hash (64 zeros for seq 1).  The chain is kept in the\n"
	"store's audit table and mirrored, one {\"entry\":...,\"hash\":...} per\n"
	"line, to <db>.audit.jsonl beside the store.  The mirror line is fsync'ed\n"
	"before the store commits, so a crash leaves at most one trailing mirror\n"
	"entry the store never committed (or a partial line); the next write to\n"
	"the store drops it.  Secrets (values of 8+ characters of environment\n"
	"variables whose names contain KEY, TOKEN, SECRET or PASSWORD) are\n"
	"replaced by [redacted] before anything is written.\n"
	"\n"
	"subcommands:\n"
	"  verify   check both copies: every hash against its entry's bytes, seq\n"
	"           continuity, prev_hash links, the mirror equal to the store\n"
	"           entry by entry, and an entry for every job, rejection, review,\n"
	"           box and frozen protocol.  Names the first bad entry: its seq,\n"
	"           which copy (db, mirror, both, or store for a missing entry)\n"
	"           and what is wrong; exit 1.  A crash's leftover is a note\n"
	"  show     print the store's entries (after SEQ with --since), one per\n"
	"           line: 'SEQ TIME KIND PAYLOAD'\n"
	"\n"
	"options:\n"
	"  --since SEQ  show: only entries with seq > SEQ\n"
	"  --json       machine-readable output (also 'atb --json audit ...')\n"
	"  -h, --help   this text\n"
	"\n"
	"the store is --db PATH, $ATB_DB or ./atb.db, opened read-only.\n"
	"exit codes: 0 ok; 1 the chain does not verify; 2 bad usage or not a\n"
	"store; 3 store or i/o failure\n";

static int audit_verify(struct cli_ctx *ctx, int json)
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
	st = atb_audit_verify(s, &rep, &err);
	atb_store_close(s);
	if (st && st != ATB_ERR_AUDIT)
		return cli_fail(&err);
	if (json) {
		json_t *o = json_pack("{s:b, s:I, s:I}", "ok", rep.ok, "db_entries",
				      (json_int_t)rep.db_entries, "mirror_entries",
				      (json_int_t)rep.mirror_entries);
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
	printf("audit chain ok: %" PRId64 " entries in the store, %" PRId64 " in the mirror '%s.audit.jsonl'\n",
	       rep.db_entries, rep.mirror_entries, ctx->db_path);
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
	int64_t since = 0;
	int i, json = ctx->json;

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
		} else if (argv[i][0] == '-') {
			return cli_usage_error("audit", "unknown option '%s'", argv[i]);
		} else if (!sub) {
			sub = argv[i];
		} else {
			return cli_usage_error("audit", "unexpected argument '%s'", argv[i]);
		}
	}
	if (!sub)
		return cli_usage_error("audit", "missing subcommand (verify, show)");
	if (!strcmp(sub, "verify")) {
		if (since)
			return cli_usage_error("audit", "--since is for 'show'");
		return audit_verify(ctx, json);
	}
	if (!strcmp(sub, "show"))
		return audit_show(ctx, since, json);
	return cli_usage_error("audit", "unknown subcommand '%s'", sub);
}
