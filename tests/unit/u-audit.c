/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The audit chain: the body is the canonical JSON jansson would write;
 * verify names the first bad entry and which copy after an edit, deletion,
 * insertion, reordering or truncation of either copy; a crash's trailing
 * uncommitted entry is a note and the next read-write open drops it; and a
 * child that ingests in a loop, SIGKILLed at random moments 50 times,
 * leaves a store that passes integrity_check and verify with every ingest
 * it reported complete.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "../fixtures/store/fixture.h"
#include "banned.h"

static struct fx F;

static void setup(void)
{
	fx_setup(&F);
}

static void teardown(void)
{
	fx_teardown(&F);
}

TestSuite(audit, .init = setup, .fini = teardown);

static void add_entries(int n)
{
	struct atb_error err;
	int i;

	for (i = 0; i < n; i++) {
		fx_ingest(&F, 5, 1.5);
		cr_assert_eq(atb_store_ingest(F.s, &F.in, NULL, &err), ATB_OK, "%s", err.msg);
	}
}

static void read_mirror(char **buf, size_t *len)
{
	struct atb_error err;

	cr_assert_eq(atbi_read_file(atb_store_mirror_path(F.s), buf, len, &err), ATB_OK);
}

static void write_mirror(const char *buf, size_t len)
{
	FILE *f = fopen(atb_store_mirror_path(F.s), "wb");

	cr_assert_not_null(f);
	cr_assert_eq(fwrite(buf, 1, len, f), len);
	fclose(f);
}

/* Offsets of the lines of buf (at most 64). */
static size_t lines(const char *buf, size_t len, size_t off[65])
{
	size_t n = 0, i;

	off[0] = 0;
	for (i = 0; i < len && n < 64; i++)
		if (buf[i] == '\n')
			off[++n] = i + 1;
	return n;
}

static void expect_bad(int64_t seq, const char *copy)
{
	struct atb_audit_report rep;
	struct atb_error err;

	atb_error_clear(&err);
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_ERR_AUDIT, "verify passed");
	cr_assert_not(rep.ok);
	cr_assert_eq(rep.bad_seq, seq, "bad seq %lld, want %lld: %s", (long long)rep.bad_seq,
		     (long long)seq, err.msg);
	cr_assert_str_eq(rep.bad_copy, copy, "%s", err.msg);
}

Test(audit, body_is_the_canonical_json_of_the_entry)
{
	const char *payload = "{\"a\":[1,2.5,\"x\\\"y\"],\"b\":{\"c\":null}}";
	char *body = NULL, *canon = NULL;
	json_t *v;
	size_t len;

	cr_assert_eq(atbi_audit_body(7, "2026-11-29T07:10:15.123456789Z", "llm.call", payload,
				     ATB_AUDIT_GENESIS, &body, &len), ATB_OK);
	v = json_pack("{s:I, s:s, s:s, s:o, s:s}", "seq", (json_int_t)7, "time",
		      "2026-11-29T07:10:15.123456789Z", "kind", "llm.call", "payload",
		      json_loads(payload, 0, NULL), "prev_hash", ATB_AUDIT_GENESIS);
	cr_assert_eq(atbi_json_canonical(v, &canon, NULL), ATB_OK);
	cr_assert_str_eq(body, canon);
	cr_assert_eq(len, strlen(canon));
	json_decref(v);
	atb_free(body);
	atb_free(canon);
}

Test(audit, a_clean_chain_verifies_and_lists)
{
	struct atb_audit_report rep;
	struct atb_audit_entry *e;
	struct atb_error err;
	size_t n;

	add_entries(3);
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_OK, "%s", err.msg);
	cr_assert(rep.ok);
	cr_assert_eq(rep.db_entries, 6);
	cr_assert_eq(rep.nnotes, 0);
	cr_assert_eq(atb_audit_list(F.s, 4, &e, &n, &err), ATB_OK);
	cr_assert_eq(n, 2);
	cr_assert_eq(e[0].seq, 5);
	cr_assert_str_eq(e[0].kind, "ingest");
	cr_assert_str_eq(e[1].prev_hash, e[0].hash);
	atb_audit_entries_free(e, n);
}

Test(audit, verify_finds_an_edited_mirror_entry)
{
	char *buf, *p;
	size_t len;

	add_entries(3);
	read_mirror(&buf, &len);
	p = strstr(buf, "\"task\":\"relu\"");
	cr_assert_not_null(p);
	p[9] = 'R';
	write_mirror(buf, len);
	atb_free(buf);
	expect_bad(4, "mirror");
}

Test(audit, verify_finds_a_mirror_entry_edited_with_its_hash_recomputed)
{
	char *buf, *out, hex[65], *body;
	size_t len, off[65], n, blen;
	int64_t seq = 5;

	add_entries(3);
	read_mirror(&buf, &len);
	n = lines(buf, len, off);
	cr_assert_eq(n, 6);
	/* Rewrite entry 5 consistently (new payload, matching hash). */
	body = atb_strndup(buf + off[4] + 9, off[5] - off[4] - 9 - 76);
	{
		char *t = strstr(body, "\"relu\"");

		t[1] = 'R';
	}
	blen = strlen(body);
	atbi_sha256_hex(body, blen, hex);
	out = atb_malloc(len + 10);
	memcpy(out, buf, off[4]);
	n = off[4] + (size_t)snprintf(out + off[4], len, "{\"entry\":%s,\"hash\":\"%s\"}\n", body, hex);
	memcpy(out + n, buf + off[5], len - off[5]);
	write_mirror(out, n + len - off[5]);
	atb_free(buf);
	atb_free(out);
	atb_free(body);
	(void)seq;
	/* Self-consistent but different from the store's, and entry 6 no longer links. */
	expect_bad(5, "both");
}

Test(audit, verify_finds_a_deleted_mirror_entry)
{
	char *buf;
	size_t len, off[65];

	add_entries(3);
	read_mirror(&buf, &len);
	lines(buf, len, off);
	memmove(buf + off[2], buf + off[3], len - off[3]);
	write_mirror(buf, len - (off[3] - off[2]));
	atb_free(buf);
	expect_bad(3, "mirror");
}

Test(audit, verify_finds_reordered_mirror_entries)
{
	char *buf, *out;
	size_t len, off[65];

	add_entries(3);
	read_mirror(&buf, &len);
	lines(buf, len, off);
	out = atb_malloc(len);
	memcpy(out, buf, off[3]);
	memcpy(out + off[3], buf + off[4], off[5] - off[4]);
	memcpy(out + off[3] + (off[5] - off[4]), buf + off[3], off[4] - off[3]);
	memcpy(out + off[5], buf + off[5], len - off[5]);
	write_mirror(out, len);
	atb_free(buf);
	atb_free(out);
	expect_bad(4, "mirror");
}

Test(audit, verify_finds_a_truncated_mirror)
{
	char *buf;
	size_t len, off[65];

	add_entries(3);
	read_mirror(&buf, &len);
	lines(buf, len, off);
	write_mirror(buf, off[4]);
	atb_free(buf);
	expect_bad(5, "mirror");
}

Test(audit, verify_finds_an_inserted_mirror_entry)
{
	char *buf, *out;
	size_t len, off[65];

	add_entries(2);
	read_mirror(&buf, &len);
	lines(buf, len, off);
	out = atb_malloc(len + (off[3] - off[2]));
	memcpy(out, buf, off[3]);
	memcpy(out + off[3], buf + off[2], off[3] - off[2]);  /* entry 3 twice */
	memcpy(out + off[3] + (off[3] - off[2]), buf + off[3], len - off[3]);
	write_mirror(out, len + (off[3] - off[2]));
	atb_free(buf);
	atb_free(out);
	expect_bad(4, "mirror");
}

Test(audit, verify_finds_an_edited_store_entry)
{
	add_entries(3);
	fx_accepted(&F, "DROP TRIGGER audit_no_update; UPDATE audit SET payload ="
		    " replace(payload, 'relu', 'RELU') WHERE seq = 5");
	expect_bad(5, "db");
}

Test(audit, verify_finds_a_deleted_store_entry)
{
	add_entries(3);
	fx_accepted(&F, "DROP TRIGGER audit_no_delete; DELETE FROM audit WHERE seq = 4");
	expect_bad(4, "db");
}

Test(audit, verify_finds_the_last_store_entry_deleted_with_its_subject_kept)
{
	add_entries(3);
	fx_accepted(&F, "DROP TRIGGER audit_no_delete; DELETE FROM audit WHERE seq = 6");
	expect_bad(6, "db");
}

Test(audit, verify_finds_a_row_without_its_audit_entry)
{
	struct atb_audit_report rep;
	struct atb_error err;

	add_entries(1);
	fx_accepted(&F, "INSERT INTO rejection (rule, status, reason, detail, created,"
		    " protocol_digest) VALUES ('gate:x', 10, 'sneaked in', '{}', 'now', '%s')",
		    F.digest);
	atb_error_clear(&err);
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_ERR_AUDIT);
	cr_assert_str_eq(rep.bad_copy, "store");
	cr_assert(strstr(err.msg, "rejection '1' has no audit entry"), "%s", err.msg);
}

/* ---- crash consistency ---- */

static void append_uncommitted_entry(void)
{
	char *buf, *last, hex[65], *body;
	size_t len, off[65], n;
	char line[2048];
	FILE *f;

	/* What a kill between the mirror write and the COMMIT leaves behind. */
	read_mirror(&buf, &len);
	n = lines(buf, len, off);
	last = buf + off[n - 1];
	{
		char prev[65];
		char *h = last + (off[n] - off[n - 1]) - 67;

		memcpy(prev, h, 64);
		prev[64] = '\0';
		atbi_audit_body((int64_t)n + 1, "2026-11-29T07:10:15.123456789Z", "ingest",
				"{\"job\":\"never-committed\"}", prev, &body, NULL);
	}
	atbi_sha256_hex(body, strlen(body), hex);
	snprintf(line, sizeof(line), "{\"entry\":%s,\"hash\":\"%s\"}\n", body, hex);
	f = fopen(atb_store_mirror_path(F.s), "ab");
	fputs(line, f);
	fputs("{\"entry\":{\"kind\":\"ing", f);  /* and a partial line */
	fclose(f);
	atb_free(buf);
	atb_free(body);
}

Test(audit, a_crash_leftover_is_a_note_and_the_next_open_drops_it)
{
	struct atb_audit_report rep;
	struct atb_error err;
	char *before, *after;
	size_t lb, la;

	add_entries(2);
	read_mirror(&before, &lb);
	append_uncommitted_entry();
	atb_error_clear(&err);
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(rep.nnotes, 2);
	cr_assert(strstr(rep.notes[0], "never committed"), "%s", rep.notes[0]);
	atb_store_close(F.s);
	fx_open(&F);
	read_mirror(&after, &la);
	cr_assert_eq(la, lb);
	cr_assert(!memcmp(before, after, lb));
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(rep.nnotes, 0);
	atb_free(before);
	atb_free(after);
	add_entries(1);
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_OK, "%s", err.msg);
}

Test(audit, recovery_leaves_tampering_for_verify_to_report)
{
	char *buf;
	size_t len, off[65];

	add_entries(3);
	read_mirror(&buf, &len);
	lines(buf, len, off);
	write_mirror(buf, off[3]);  /* three entries gone: not a crash shape */
	atb_store_close(F.s);
	fx_open(&F);
	atb_free(buf);
	read_mirror(&buf, &len);
	cr_assert_eq(len, off[3]);
	atb_free(buf);
	expect_bad(4, "mirror");
}

/*
 * PROTO: audit.crash: SIGKILL at random moments, 50 times.  Round r first
 * waits for r % 3 ingests the child reports complete (0, 1 or 2, through a
 * pipe), then 0-30 ms more: the kill lands in the open or the first ingest
 * on a third of the rounds and mid-way through a later ingest on the rest,
 * whatever the box's load.  (A kill at 0-30 ms after the fork alone, as
 * before, found no ingest complete in all 50 rounds on a box at load 13:
 * the test then failed asserting nothing about the store.)
 */
Test(audit, sigkill_during_ingest_loses_nothing_that_completed, .timeout = 120)
{
	char done_path[400], line[128];
	long completed = 0, present;
	struct atb_audit_report rep;
	struct atb_error err;
	int round, status;
	unsigned seed;
	FILE *f;

	snprintf(done_path, sizeof(done_path), "%s/done.txt", F.dir);
	atb_store_close(F.s);
	F.s = NULL;
	/* the kill moments are random; the seed is logged (and ATB_TEST_SEED
	   replays it) so that a failing draw can be run again */
	seed = getenv("ATB_TEST_SEED") ? (unsigned)strtoul(getenv("ATB_TEST_SEED"), NULL, 10)
				       : (unsigned)time(NULL) ^ (unsigned)getpid();
	cr_log_info("kill moments drawn with ATB_TEST_SEED=%u", seed);
	srand(seed);
	for (round = 0; round < 50; round++) {
		int pp[2], k;
		pid_t pid;

		cr_assert_eq(pipe(pp), 0);
		pid = fork();
		cr_assert_neq(pid, -1);
		if (pid == 0) {
			struct atb_store *s;
			struct atb_ingest_outcome o;
			int fd = open(done_path, O_WRONLY | O_APPEND | O_CREAT, 0644);

			close(pp[0]);
			if (atb_store_open(F.path, ATB_STORE_READ_WRITE, &s, &err))
				_exit(3);
			for (;;) {
				char msg[64];
				int len;

				fx_ingest(&F, 5, 1.5);
				if (atb_store_ingest(s, &F.in, &o, &err))
					_exit(4);
				/* Reported complete only after ingest returned. */
				len = snprintf(msg, sizeof(msg), "%s\n", o.job_uuid);
				if (write(fd, msg, (size_t)len) != len || write(pp[1], "i", 1) != 1)
					_exit(5);
			}
		}
		close(pp[1]);
		for (k = 0; k < round % 3; k++) {
			char c;

			if (read(pp[0], &c, 1) != 1)
				break;  /* the child ended: its status says why, below */
		}
		{
			struct timespec ts = {0, (long)(rand() % 30000) * 1000};

			nanosleep(&ts, NULL);
		}
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		close(pp[0]);  /* only now: a closed pipe would stop the child with SIGPIPE */
		cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
			  "child ended early: status %d", status);
	}
	fx_open(&F);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM pragma_integrity_check WHERE"
			     " integrity_check <> 'ok'"), 0);
	atb_error_clear(&err);
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_OK, "%s", err.msg);
	f = fopen(done_path, "r");
	if (f) {
		while (fgets(line, sizeof(line), f)) {
			char q[300];

			line[strcspn(line, "\n")] = '\0';
			if (strlen(line) != 32)
				continue;  /* a line cut by the kill */
			completed++;
			snprintf(q, sizeof(q), "SELECT count(*) FROM result r JOIN job j ON j.id = r.job"
				 " WHERE j.uuid = '%s'", line);
			present = fx_count(&F, q);
			cr_assert_eq(present, 1, "completed ingest %s is missing", line);
		}
		fclose(f);
	}
	cr_log_info("%ld ingests completed across 50 kills; %lld audit entries", completed,
		    (long long)rep.db_entries);
	cr_assert_gt(completed, 0);
}

/* ---- anchors outside the files (issue 12) ---- */

static void witness_path(char *w, size_t size)
{
	/* outside the store's folder, as required */
	snprintf(w, size, "%s.witness", F.dir);
}

Test(audit, a_crash_leftover_in_the_witness_is_a_note_and_the_next_open_drops_it)
{
	struct atb_audit_verify_opts o = {NULL, NULL, 0};
	struct atb_audit_report rep;
	struct atb_error err;
	char w[400], *buf, *last;
	size_t len, off[65], n;
	FILE *f;

	witness_path(w, sizeof(w));
	setenv("ATB_AUDIT_WITNESS", w, 1);
	atb_store_close(F.s);
	fx_open(&F);
	add_entries(2);
	o.witness = w;
	atb_error_clear(&err);
	cr_assert_eq(atb_audit_verify_with(F.s, &o, &rep, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(rep.witness_lines, 2);
	/* The mirror and the witness got entry 6, the store never did. */
	append_uncommitted_entry();
	read_mirror(&buf, &len);
	n = lines(buf, len, off);
	last = buf + off[n - 1];
	f = fopen(w, "a");
	fprintf(f, "%zu:%.64s\n", n, last + (off[n] - off[n - 1]) - 67);
	fclose(f);
	atb_free(buf);
	cr_assert_eq(atb_audit_verify_with(F.s, &o, &rep, &err), ATB_OK, "%s", err.msg);
	cr_assert(strstr(rep.notes[rep.nnotes - 1], "witness entry 6 was never committed"), "%s",
		  rep.notes[rep.nnotes - 1]);
	/* The next read-write open drops it from both. */
	atb_store_close(F.s);
	fx_open(&F);
	cr_assert_eq(atb_audit_verify_with(F.s, &o, &rep, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(rep.nnotes, 0);
	add_entries(1);
	cr_assert_eq(atb_audit_verify_with(F.s, &o, &rep, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(rep.witness_lines, 3);
	unsetenv("ATB_AUDIT_WITNESS");
	unlink(w);
}

Test(audit, a_tail_entry_deleted_while_its_subject_stays_is_not_taken_for_a_crash)
{
	struct atb_audit_report rep;
	struct atb_error err;

	add_entries(2);
	fx_accepted(&F, "DROP TRIGGER audit_no_delete; DELETE FROM audit WHERE seq = 5");
	/* A read-write open must not drop the mirror's entry 5: its job is there. */
	atb_store_close(F.s);
	fx_open(&F);
	atb_error_clear(&err);
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_ERR_AUDIT);
	cr_assert(strstr(err.msg, "audit entry 5 (db): entry missing from the store though its"
			 " subject is there"), "%s", err.msg);
}

Test(audit, head_names_the_last_entry_and_verify_holds_the_chain_to_it)
{
	struct atb_audit_verify_opts o = {NULL, NULL, 0};
	struct atb_audit_report rep;
	struct atb_error err;
	char hash[65], head[100];
	int64_t seq;

	add_entries(2);
	atb_error_clear(&err);
	cr_assert_eq(atb_audit_head(F.s, &seq, hash, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(seq, 5);  /* a protocol, two boxes, two ingests */
	snprintf(head, sizeof(head), "%" PRId64 ":%s", seq, hash);
	o.head = head;
	cr_assert_eq(atb_audit_verify_with(F.s, &o, &rep, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(rep.head_seq, 5);
	snprintf(head, sizeof(head), "6:%s", hash);
	cr_assert_eq(atb_audit_verify_with(F.s, &o, &rep, &err), ATB_ERR_AUDIT);
	cr_assert(strstr(err.msg, "before the published head 6 (truncated)"), "%s", err.msg);
	snprintf(head, sizeof(head), "3:%s", hash);
	cr_assert_eq(atb_audit_verify_with(F.s, &o, &rep, &err), ATB_ERR_AUDIT);
	cr_assert(strstr(err.msg, "is not the published head 3:"), "%s", err.msg);
	snprintf(head, sizeof(head), "three:%s", hash);
	cr_assert_eq(atb_audit_verify_with(F.s, &o, &rep, &err), ATB_ERR_USAGE);
}
