/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Runs of an outside agent (atb_loop_agent_run, atb_loop_agent_record):
 * a new id starts a run of proposer agent with its plan; a submission is
 * refused, with nothing written, for a bad id, a plan below the protocol's
 * paired seeds, a run of another proposer, task, protocol or box, or a run
 * with every planned iteration done; outcomes are stored in order and
 * classified by the loop's rule (PROTO: loop.usable_iteration); atb run's
 * resume refuses an agent run.  The CLI over it is tests/cli/t5110.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "atb/atb.h"
#include "atb/box.h"
#include "atb/loop.h"
#include "atb/store.h"
#include "banned.h"

static char dir[256], dbpath[300];
static struct atb_store *S;
static struct atb_protocol *P;
static struct atb_box *B;
static char fp[ATB_BOX_FINGERPRINT_LEN + 1], old_digest[65];

static void setup(void)
{
	struct atb_frozen_protocol *list = NULL;
	struct atb_error err;
	size_t n = 0, i;
	int cur = 0;

	snprintf(dir, sizeof(dir), "%s/atb-uagent.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(dbpath, sizeof(dbpath), "%s/atb.db", dir);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_open(dbpath, ATB_STORE_CREATE, &S, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_protocol_frozen_list(atb_home(), &list, &n, &cur, &err), ATB_OK, "%s",
		     err.msg);
	cr_assert_eq(atb_store_sync_protocols(S, list, n, NULL, &err), ATB_OK, "%s", err.msg);
	for (i = 0; i < n; i++)
		if (list[i].version != cur)
			snprintf(old_digest, sizeof(old_digest), "%s", list[i].digest);
	atb_protocol_frozen_free(list, n);
	cr_assert(old_digest[0], "no frozen protocol but the current one");
	cr_assert_eq(atb_protocol_load_current(atb_home(), &P, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_box_probe_with_compiler(&B, P->build.cpu_compiler, &err), ATB_OK);
	cr_assert_eq(atb_box_fingerprint(B, fp, &err), ATB_OK);
}

static void teardown(void)
{
	char cmd[400];

	atb_box_free(B);
	atb_protocol_free(P);
	atb_store_close(S);
	S = NULL;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		cr_log_warn("cannot remove %s", dir);
}

TestSuite(agent, .init = setup, .fini = teardown);

static struct atb_loop_agent_plan plan(int64_t iterations)
{
	struct atb_loop_agent_plan pl = {iterations, 1, P->stats.min_paired_seeds, 0};

	return pl;
}

static int64_t count_runs(void)
{
	struct atb_run_row *rows = NULL;
	struct atb_error err;
	size_t n = 0;

	cr_assert_eq(atb_store_list_runs(S, &rows, &n, &err), ATB_OK, "%s", err.msg);
	atb_free(rows);
	return (int64_t)n;
}

/* A refusal by gate g, stored as the measurement would store it. */
static struct atb_measure_outcome refused(const char *g)
{
	struct atb_measure_outcome o;
	struct atb_error err;
	char rule[64];

	memset(&o, 0, sizeof(o));
	o.verdict = ATB_MEASURE_REJECTED;
	snprintf(o.gate, sizeof(o.gate), "%s", g);
	o.status = ATB_ERR_REJECTED;
	snprintf(o.reason, sizeof(o.reason), "planted %s", g);
	snprintf(rule, sizeof(rule), "gate:%s", g);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_reject(S, NULL, P->digest, rule, o.status, o.reason, NULL,
				      &o.rejection_id, &err), ATB_OK, "%s", err.msg);
	return o;
}

static void add_run(const char *id, const char *proposer, const char *digest, const char *box)
{
	struct atb_run_row r;
	struct atb_error err;

	memset(&r, 0, sizeof(r));
	snprintf(r.id, sizeof(r.id), "%s", id);
	snprintf(r.task, sizeof(r.task), "relu");
	snprintf(r.proposer, sizeof(r.proposer), "%s", proposer);
	r.seed = 1;
	r.iterations = 5;
	r.paired_seeds = P->stats.min_paired_seeds;
	snprintf(r.protocol_digest, sizeof(r.protocol_digest), "%s", digest);
	snprintf(r.box_fingerprint, sizeof(r.box_fingerprint), "%s", box);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_add_run(S, &r, &err), ATB_OK, "%s", err.msg);
}

Test(agent, a_new_id_starts_a_run_and_outcomes_are_its_iterations_in_order)
{
	struct atb_loop_agent_plan pl = plan(2);
	struct atb_measure_outcome o;
	struct atb_iteration_row row, *rows = NULL;
	struct atb_run_row run;
	struct atb_error err;
	size_t n = 0;
	int created = -1;

	atb_error_clear(&err);
	cr_assert_eq(atb_loop_agent_run(S, P, "a1", "relu", B, NULL, &run, &created, &err),
		     ATB_ERR_NOT_FOUND);
	cr_assert_eq(atb_loop_agent_run(S, P, "a1", "relu", B, &pl, &run, &created, &err), ATB_OK,
		     "%s", err.msg);
	cr_assert_eq(created, 1);
	cr_assert_str_eq(run.proposer, ATB_LOOP_PROPOSER_AGENT);
	cr_assert_eq(run.iterations, 2);
	cr_assert_eq(run.paired_seeds, P->stats.min_paired_seeds);

	o = refused("correctness");
	cr_assert_eq(atb_loop_agent_record(S, P, &run, NULL, &o, 1.5, &row, &err), ATB_OK, "%s",
		     err.msg);
	cr_assert_eq(row.k, 0);
	cr_assert_str_eq(row.outcome, "correctness");
	cr_assert_eq(row.usable, 0);

	/* the same id again: the run as stored, one iteration done */
	cr_assert_eq(atb_loop_agent_run(S, P, "a1", "relu", B, &pl, &run, &created, &err), ATB_OK,
		     "%s", err.msg);
	cr_assert_eq(created, 0);
	cr_assert_eq(run.done, 1);
	o = refused("build");
	cr_assert_eq(atb_loop_agent_record(S, P, &run, NULL, &o, 0, &row, &err), ATB_OK, "%s",
		     err.msg);
	cr_assert_eq(row.k, 1);
	cr_assert_str_eq(row.outcome, "build");

	cr_assert_eq(atb_loop_agent_run(S, P, "a1", "relu", B, &pl, &run, &created, &err),
		     ATB_ERR_USAGE);
	cr_assert_str_eq(err.msg, "run 'a1' has done all its 2 planned iterations");
	/* the store's triggers hold too: a third row is beyond the plan */
	o = refused("build");
	cr_assert_eq(atb_loop_agent_record(S, P, &run, NULL, &o, 0, &row, &err),
		     ATB_REJECTED_MALFORMED);
	cr_assert_eq(atb_store_list_iterations(S, "a1", &rows, &n, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(n, 2);
	cr_assert_str_eq(rows[0].reason, "planted correctness");
	cr_assert_str_eq(rows[0].knobs_json, "{\"cflags\":\"\"}");
	atb_store_iterations_free(rows, n);
}

Test(agent, refusals_write_nothing)
{
	struct atb_loop_agent_plan pl = plan(3);
	struct atb_run_row run;
	struct atb_error err;
	char other[65];

	atb_error_clear(&err);
	cr_assert_eq(atb_loop_agent_run(S, P, "a/b", "relu", B, &pl, &run, NULL, &err),
		     ATB_ERR_USAGE);
	cr_assert_str_eq(err.msg, "run id 'a/b' is not 1-64 of [0-9a-zA-Z-]");
	cr_assert_eq(atb_loop_agent_run(S, P, "", "relu", B, &pl, &run, NULL, &err), ATB_ERR_USAGE);
	pl.paired_seeds = 2;   /* PROTO: stats.min_paired_seeds */
	cr_assert_eq(atb_loop_agent_run(S, P, "a2", "relu", B, &pl, &run, NULL, &err),
		     ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "below the protocol's stats.min_paired_seeds"), "%s", err.msg);
	pl = plan(0);
	cr_assert_eq(atb_loop_agent_run(S, P, "a2", "relu", B, &pl, &run, NULL, &err),
		     ATB_ERR_USAGE);
	cr_assert_eq(count_runs(), 0);

	pl = plan(3);
	cr_assert_eq(atb_loop_agent_run(S, P, "a3", "relu", B, &pl, &run, NULL, &err), ATB_OK);
	cr_assert_eq(atb_loop_agent_run(S, P, "a3", "/x/relu2", B, &pl, &run, NULL, &err),
		     ATB_ERR_USAGE);
	cr_assert_str_eq(err.msg, "run 'a3' is of task 'relu', not '/x/relu2'");

	/* an atb run run: its iterations are its proposer's */
	add_run("r1", "random", P->digest, fp);
	cr_assert_eq(atb_loop_agent_run(S, P, "r1", "relu", B, &pl, &run, NULL, &err),
		     ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "run 'r1' is proposed by 'random'"), "%s", err.msg);
	/* another protocol, another box */
	add_run("old", ATB_LOOP_PROPOSER_AGENT, old_digest, fp);
	cr_assert_eq(atb_loop_agent_run(S, P, "old", "relu", B, &pl, &run, NULL, &err),
		     ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "runs under protocol"), "%s", err.msg);
	memset(other, 'a', 64);
	other[64] = '\0';
	cr_assert_eq(atb_store_register_box(S, other, "{}", &err), ATB_OK, "%s", err.msg);
	add_run("far", ATB_LOOP_PROPOSER_AGENT, P->digest, other);
	cr_assert_eq(atb_loop_agent_run(S, P, "far", "relu", B, &pl, &run, NULL, &err),
		     ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "was started on box aaaaaaaaaaaa"), "%s", err.msg);
	cr_assert_eq(count_runs(), 4);
}

Test(agent, atb_run_does_not_resume_an_agent_run)
{
	struct atb_loop_agent_plan pl = plan(3);
	struct atb_loop_opts o;
	struct atb_loop_summary sum;
	struct atb_run_row run;
	struct atb_error err;

	atb_error_clear(&err);
	cr_assert_eq(atb_loop_agent_run(S, P, "a4", "relu", B, &pl, &run, NULL, &err), ATB_OK);
	memset(&o, 0, sizeof(o));
	cr_assert_eq(atb_loop_resume(S, "a4", &o, &sum, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "is an outside agent's"), "%s", err.msg);
}

Test(agent, task_ref_is_a_name_or_an_absolute_path)
{
	char out[256], cwd[200];
	struct atb_error err;

	atb_error_clear(&err);
	cr_assert_eq(atb_loop_task_ref("relu", out, sizeof(out), &err), ATB_OK);
	cr_assert_str_eq(out, "relu");
	cr_assert_not_null(getcwd(cwd, sizeof(cwd)));
	cr_assert_eq(chdir(dir), 0);
	cr_assert_eq(atb_loop_task_ref("./atb.db", out, sizeof(out), &err), ATB_OK);
	cr_assert_eq(chdir(cwd), 0);
	cr_assert_eq(out[0], '/');
	cr_assert(strstr(out, "/atb.db"), "%s", out);
	cr_assert_eq(atb_loop_task_ref("relu", out, 3, &err), ATB_ERR_USAGE);
}
