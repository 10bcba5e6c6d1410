/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb review: a human decision on a quarantined result (the anomaly
 * breaker's), added as a new review row with its audit entry; and the list
 * of quarantined results still awaiting one.  A thin layer over
 * atb_store_review and atb_store_list_results.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "atb/store.h"
#include "cli.h"
#include "banned.h"

static const char review_help[] =
	"usage: atb review RESULT_ID (--admit | --reject) --reason TEXT [--reviewer NAME]\n"
	"                  [--json]\n"
	"       atb review --list [--all] [--json]\n"
	"\n"
	"A result whose speedup is at or over the protocol's anomaly factor (10x\n"
	"over the honest baseline, PROTO: gates.anomaly_breaker.factor) is stored\n"
	"quarantined, never admitted: a human looks at it (is it a real gain, or a\n"
	"kernel that skips work?) and decides.  The decision is a new row in the\n"
	"store (review table) and an audit entry; the result row itself never\n"
	"changes.  Only a quarantined result can be reviewed; a later review of\n"
	"the same result adds another row, and the latest one is in force.\n"
	"\n"
	"options:\n"
	"  --admit          the speedup is real: admit the result\n"
	"  --reject         it is not: reject it\n"
	"  --reason TEXT    why (required, stored)\n"
	"  --reviewer NAME  who decided (default: $USER, else 'unknown')\n"
	"  --list           quarantined results awaiting a review (no review yet):\n"
	"                   id, task, candidate, speedup and its CI, created\n"
	"  --all            with --list: every quarantined result, with its latest\n"
	"                   decision\n"
	"  --json           machine-readable output (also 'atb --json review ...')\n"
	"  -h, --help       this text\n"
	"\n"
	"The store is --db PATH, $ATB_DB or ./atb.db.\n"
	"\n"
	"exit codes: 0 ok; 2 bad usage, or the result does not exist or is not\n"
	"quarantined (refused by the store: atb-rule:review); 3 store failure\n";

static int list_reviews(struct cli_ctx *ctx, int all, int json)
{
	struct atb_result_row *rows = NULL;
	struct atb_store *s = NULL;
	struct atb_error err;
	json_t *arr = NULL;
	size_t n = 0, i, shown = 0;

	atb_error_clear(&err);
	if (atb_store_open(ctx->db_path, ATB_STORE_READ_ONLY, &s, &err) ||
	    atb_store_list_results(s, &rows, &n, &err)) {
		atb_store_close(s);
		return cli_fail(&err);
	}
	atb_store_close(s);
	if (json)
		arr = json_array();
	for (i = 0; i < n; i++) {
		const struct atb_result_row *r = &rows[i];

		if (strcmp(r->status, "quarantined") || (!all && r->review[0]))
			continue;
		shown++;
		if (json)
			json_array_append_new(arr, json_pack("{s:I, s:s, s:s, s:s, s:f, s:f, s:f, s:I, "
							     "s:s, s:s?}",
							     "result_id", (json_int_t)r->id, "job_uuid",
							     r->job_uuid, "task", r->task, "candidate",
							     r->candidate, "speedup", r->speedup,
							     "ci_low", r->ci_low, "ci_high", r->ci_high,
							     "n_seeds", (json_int_t)r->n_seeds,
							     "created", r->created, "review",
							     r->review[0] ? r->review : NULL));
		else
			printf("#%" PRId64 "  %s  %s  %.2fx [%.2f, %.2f]  %s%s%s\n", r->id, r->task,
			       r->candidate, r->speedup, r->ci_low, r->ci_high, r->created,
			       r->review[0] ? "  review: " : "", r->review);
	}
	atb_store_results_free(rows, n);
	if (json) {
		char *t = json_dumps(arr, JSON_INDENT(2));

		json_decref(arr);
		if (!t)
			return CLI_RUNTIME;
		printf("%s\n", t);
		atb_free(t);
	} else if (!shown) {
		printf("no quarantined result awaits review\n");
	}
	return CLI_OK;
}

int cmd_review(int argc, char **argv, struct cli_ctx *ctx)
{
	const char *decision = NULL, *reason = NULL, *reviewer = NULL, *id_arg = NULL;
	struct atb_store *s = NULL;
	struct atb_error err;
	int json = ctx->json, list = 0, all = 0, i;
	int64_t review_id = 0;
	long long id;
	char *end;
	enum atb_status st;

	if (cli_wants_help(argc, argv)) {
		fputs(review_help, stdout);
		return CLI_OK;
	}
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--json"))
			json = 1;
		else if (!strcmp(a, "--list"))
			list = 1;
		else if (!strcmp(a, "--all"))
			all = 1;
		else if (!strcmp(a, "--admit") || !strcmp(a, "--reject")) {
			if (decision)
				return cli_usage_error("review", "give one of --admit and --reject");
			decision = a[2] == 'a' ? "admit" : "reject";
		} else if (!strcmp(a, "--reason") && i + 1 < argc)
			reason = argv[++i];
		else if (!strcmp(a, "--reviewer") && i + 1 < argc)
			reviewer = argv[++i];
		else if (a[0] == '-' && a[1])
			return cli_usage_error("review", "unknown option '%s'", a);
		else if (!id_arg)
			id_arg = a;
		else
			return cli_usage_error("review", "unexpected argument '%s'", a);
	}
	if (list) {
		if (id_arg || decision)
			return cli_usage_error("review", "--list takes no result or decision");
		return list_reviews(ctx, all, json);
	}
	if (!id_arg)
		return cli_usage_error("review", "expected RESULT_ID (or --list)");
	errno = 0;
	id = strtoll(id_arg, &end, 10);
	if (errno || end == id_arg || *end || id <= 0)
		return cli_usage_error("review", "RESULT_ID must be a positive integer, not '%s'", id_arg);
	if (!decision)
		return cli_usage_error("review", "give --admit or --reject");
	if (!reason || !reason[0])
		return cli_usage_error("review", "give --reason TEXT");
	if (!reviewer)
		reviewer = getenv("USER");
	if (!reviewer || !reviewer[0])
		reviewer = "unknown";
	atb_error_clear(&err);
	st = atb_store_open(ctx->db_path, ATB_STORE_READ_WRITE, &s, &err);
	if (!st)
		st = atb_store_review(s, (int64_t)id, decision, reviewer, reason, &review_id, &err);
	atb_store_close(s);
	if (st)
		return cli_fail(&err);
	if (json) {
		json_t *v = json_pack("{s:I, s:I, s:s, s:s, s:s}", "review_id", (json_int_t)review_id,
				      "result_id", (json_int_t)id, "decision", decision, "reviewer",
				      reviewer, "reason", reason);
		char *t = v ? json_dumps(v, JSON_SORT_KEYS | JSON_INDENT(2)) : NULL;

		json_decref(v);
		if (!t)
			return CLI_RUNTIME;
		printf("%s\n", t);
		atb_free(t);
	} else {
		printf("review #%" PRId64 ": result #%lld %s by %s: %s\n", review_id, id,
		       !strcmp(decision, "admit") ? "admitted" : "rejected", reviewer, reason);
	}
	return CLI_OK;
}
