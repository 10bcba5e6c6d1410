/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Unit tests of the protocol module: the shipped lock matches the shipped
 * files (provenance: editing protocol/v1.yaml without a new version fails
 * this suite), the digest ignores comments, layout and key order but not
 * values, older versions stay loadable after a freeze, every bad fixture in
 * tests/fixtures/protocol/ fails with the status and position its
 * "# expect:" line names, and the allocation-failure walk.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>

#include <criterion/criterion.h>

#include "atb/alloc.h"
#include "atb/protocol.h"
#include "util.h"
#include "banned.h"

#define SRC ATB_SOURCE_DIR
#define V1 SRC "/protocol/v1.yaml"
#define V2 SRC "/protocol/v2.yaml"
#define V3 SRC "/protocol/v3.yaml"
#define V4 SRC "/protocol/v4.yaml"
#define V5 SRC "/protocol/v5.yaml"
#define V6 SRC "/protocol/v6.yaml"
#define V7 SRC "/protocol/v7.yaml"
#define V8 SRC "/protocol/v8.yaml"
#define V9 SRC "/protocol/v9.yaml"
#define V10 SRC "/protocol/v10.yaml"
#define V11 SRC "/protocol/v11.yaml"
#define V12 SRC "/protocol/v12.yaml"
#define V13 SRC "/protocol/v13.yaml"
#define V14 SRC "/protocol/v14.yaml"
#define FIXTURES SRC "/tests/fixtures/protocol"

static char *slurp(const char *path)
{
	char *text = NULL;
	struct atb_error err;

	cr_assert_eq(atbi_read_file(path, &text, NULL, &err), ATB_OK, "%s", err.msg);
	return text;
}

static void spit(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");

	cr_assert(f, "cannot write %s", path);
	cr_assert_eq(fwrite(text, 1, strlen(text), f), strlen(text));
	cr_assert_eq(fclose(f), 0);
}

/* text with the first `from` replaced by `to`; caller frees (atb_free). */
static char *replace(const char *text, const char *from, const char *to)
{
	const char *at = strstr(text, from);
	size_t n;
	char *out;

	cr_assert(at, "'%s' not found", from);
	n = strlen(text) - strlen(from) + strlen(to);
	out = atb_malloc(n + 1);
	cr_assert(out);
	snprintf(out, n + 1, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
	return out;
}

/*
 * Every key version 4 requires, as an insertion into version 3's text: the
 * text it goes right after, and what.  v4_text makes version 3 a complete
 * version 4 with all of them but `omit` ("" none).
 */
static const struct {
	const char *key, *after, *add;
} v4_keys[] = {
	{"timing.placement", "interleave: randomized_pairs", "\n  placement: shuffled"},
	{"gates.clocks", "\ngates:\n",
	 "  clocks: {floor_ratio: 0.75, max_share_below: 0.1, max_arm_rel_difference: 0.02}\n"},
	{"llm.alarms", "  request_timeout_s: 600\n",
	 "  alarms: {min_calls: 4, empty_rate: 0.05, unparsable_rate: 0.1, failed_rate: 0.1}\n"},
	{"gates.physical_floor.cache_allowance", "    margin: 0.9", "\n    cache_allowance: 2"},
	{"gates.hang", "\ngates:\n",
	 "  hang: {startup_s: 120, min_s: 20, factor: 10, progress_ms: 250}\n"},
	{"gates.background", "\ngates:\n", "  background: {max_cpu_share: 0.02, abs_slack_ms: 20}\n"},
};

static char *v4_text(const char *v3, const char *omit)
{
	char *t = replace(v3, "\nversion: 3", "\nversion: 4"), *u, with[512];
	size_t i;

	for (i = 0; i < sizeof(v4_keys) / sizeof(v4_keys[0]); i++) {
		if (!strcmp(v4_keys[i].key, omit))
			continue;
		snprintf(with, sizeof(with), "%s%s", v4_keys[i].after, v4_keys[i].add);
		u = replace(t, v4_keys[i].after, with);
		atb_free(t);
		t = u;
	}
	return t;
}

/*
 * Every key version 5 requires, as for v4_keys: v5_text makes version 4 a
 * complete version 5 with all of them but `omit` ("" none).
 */
static const struct {
	const char *key, *after, *add;
} v5_keys[] = {
	{"gates.background.torch_cpu", "abs_slack_ms: 20", "\n    torch_cpu: true"},
	{"timing.preemption", "placement: shuffled", "\n  preemption: run_delay"},
	{"gates.rerun", "\ngates:\n", "  rerun: {max_runs: 3}\n"},
};

static char *v5_text(const char *v4, const char *omit)
{
	char *t = replace(v4, "\nversion: 4", "\nversion: 5"), *u, with[512];
	size_t i;

	for (i = 0; i < sizeof(v5_keys) / sizeof(v5_keys[0]); i++) {
		if (!strcmp(v5_keys[i].key, omit))
			continue;
		snprintf(with, sizeof(with), "%s%s", v5_keys[i].after, v5_keys[i].add);
		u = replace(t, v5_keys[i].after, with);
		atb_free(t);
		t = u;
	}
	return t;
}

/*
 * Every key version 6 requires, as for v5_keys: v6_text makes version 5 a
 * complete version 6 with all of them but `omit` ("" none).
 */
static const struct {
	const char *key, *after, *add;
} v6_keys[] = {
	{"engine.client_lag", "  max_dispatch_lag_ms: 10",
	 "\n  client_lag: {max_share: 0.02, max_arm_difference: 0.01}"},
	{"timing.cache_flush.cpu_max_bytes", "    min_bytes: 67108864",
	 "\n    cpu_max_bytes: 67108864"},
};

static char *v6_text(const char *v5, const char *omit)
{
	char *t = replace(v5, "\nversion: 5", "\nversion: 6"), *u, with[512];
	size_t i;

	for (i = 0; i < sizeof(v6_keys) / sizeof(v6_keys[0]); i++) {
		if (!strcmp(v6_keys[i].key, omit))
			continue;
		snprintf(with, sizeof(with), "%s%s", v6_keys[i].after, v6_keys[i].add);
		u = replace(t, v6_keys[i].after, with);
		atb_free(t);
		t = u;
	}
	return t;
}

/* A temporary home holding a copy of the shipped protocol/. */
static char home[256];

static void copy_home(void)
{
	char cmd[768];

	snprintf(home, sizeof(home), "/tmp/atb-u-protocol.XXXXXX");
	cr_assert(mkdtemp(home));
	snprintf(cmd, sizeof(cmd), "cp -r '%s/protocol' '%s/'", SRC, home);
	cr_assert_eq(system(cmd), 0);
}

static void remove_home(void)
{
	char cmd[512];

	if (!home[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", home);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", home);
	home[0] = '\0';
}

static void edit_home_file(const char *name, const char *from, const char *to)
{
	char path[512], *text, *out;

	snprintf(path, sizeof(path), "%s/protocol/%s", home, name);
	text = slurp(path);
	out = replace(text, from, to);
	spit(path, out);
	atb_free(out);
	atb_free(text);
}

/* ---- provenance -------------------------------------------------------- */

Test(protocol, shipped_lock_matches_shipped_files)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char digest[65];

	cr_assert_eq(atb_protocol_verify(SRC, &err), ATB_OK,
		     "protocol/ does not match protocol.lock: %s", err.msg);
	cr_assert_eq(atb_protocol_load_current(SRC, &p, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_protocol_digest_file(V14, digest, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(p->version, 14);
	cr_assert_str_eq(p->digest, digest);
	cr_assert_str_eq(p->digest,
			 "cfa8887c47090287e2a93494610c41f3360406406438b20fff3b2d1046292e0e");
	/* version 14's key, as frozen (PROTO: correctness.reference_precision) */
	cr_expect(p->correctness.reference_precision.has);
	cr_expect_float_eq(p->correctness.reference_precision.factor, 4.0, 1e-15);
	cr_expect_float_eq(p->correctness.reference_precision.max_relative, 0.0078125, 1e-15);
	/* version 13's keys, as frozen (PROTO: timing.round_trip) */
	cr_expect(p->timing.has_round_trip);
	cr_expect_eq(p->timing.round_trip_every, 1);
	cr_expect(p->timing.round_trip_subtract);
	cr_expect_float_eq(p->timing.round_trip_quantile, 0.5, 1e-15);
	cr_expect_str_eq(p->timing.round_trip_position, "after_reference");
	cr_expect_float_eq(p->timing.round_trip_max_share_under, 0.25, 1e-15);
	atb_protocol_free(p);
	/* version 13, as it was frozen: still loadable, no allowance */
	cr_assert_eq(atb_protocol_load_version(SRC, 13, &p, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(p->digest,
			 "14fb4990ada31b8d8277ec65935f6f80c11e26bc456981871540bb985d6bb59a");
	cr_expect(!p->correctness.reference_precision.has);
	atb_protocol_free(p);
	/* version 12, as it was frozen: still loadable, and its digest kept */
	cr_assert_eq(atb_protocol_load_version(SRC, 12, &p, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(p->digest,
			 "037d527d52106dc1930b1b3e8ef4658d44f3d853b22730df36c84c24e72f6bc7");
	cr_expect_float_eq(p->timing.round_trip_quantile, 0.1, 1e-15);
	cr_expect_str_eq(p->timing.round_trip_position, "");
	cr_expect(p->timing.round_trip_max_share_under < 0);
	atb_protocol_free(p);
	cr_assert_eq(atb_protocol_load_current(SRC, &p, &err), ATB_OK, "%s", err.msg);
	/* version 11's key, as frozen (PROTO: timing.isolation) */
	cr_expect_str_eq(p->timing.isolation, "process");
	/* version 10's key, as frozen (PROTO: stats.resolution_rel) */
	cr_expect_float_eq(p->stats.resolution_rel, 0.002, 1e-15);
	/* version 9's value, as frozen (PROTO: timing.placement) */
	cr_expect_str_eq(p->timing.placement, "keyed");
	/* version 8's key, as frozen (PROTO: correctness.input_chunk_elements) */
	cr_expect_eq(p->correctness.input_chunk_elements, 1048576);
	/* version 7's keys, as frozen (PROTO: gates.side_stream) */
	cr_expect(p->gates.has_side_stream);
	cr_expect_float_eq(p->gates.side_stream_rel_tolerance, 0.01, 1e-15);
	cr_expect_float_eq(p->gates.side_stream_abs_slack_us, 1.0, 1e-15);
	/* version 6's keys, and version 5's */
	cr_expect(p->timing.has_cache_flush_cpu_max);
	cr_expect_eq(p->timing.cache_flush_cpu_max_bytes, 67108864);
	cr_expect(p->engine.has_client_lag);
	cr_expect(p->gates.has_background_torch_cpu && p->gates.background_torch_cpu);
	cr_expect_str_eq(p->timing.preemption, "none");
	/* the frozen versions before it keep their digests */
	cr_assert_eq(atb_protocol_digest_file(V11, digest, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(digest, "6e8740c2ea02780039793e3d9761d4d60f64c45c4b2925a9c8b23713c3118284");
	cr_assert_eq(atb_protocol_digest_file(V10, digest, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(digest, "a4c29eb415467b4491021368a0c79d3466fab1452857f55be45103fc05d0a85a");
	cr_assert_eq(atb_protocol_digest_file(V9, digest, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(digest, "da71c17e7e28dc4ac266818130ac5d00b7d6832af4151e7fe37812f848a0243d");
	cr_assert_eq(atb_protocol_digest_file(V8, digest, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(digest, "31c1c5310ad74ebbca71e34f1b5083625a9276f3a1713183143ef7c8c2104c16");
	cr_assert_eq(atb_protocol_digest_file(V7, digest, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(digest, "8b4191ef291845a4fc461ed92a7141d81fdafcd00e60e2249e21fdf1ded79532");
	cr_assert_eq(atb_protocol_digest_file(V5, digest, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(digest, "0488698e92dbbd637dda34bf52e4549b04e1ea26b8d1db21d502d3da1dfe9279");
	cr_assert_eq(atb_protocol_digest_file(V4, digest, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(digest, "923b9c0ebae66b60f082db5405df6806ccd17f46b980456ed4689f317bba69a3");
	cr_assert_eq(atb_protocol_digest_file(V3, digest, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(digest, "56a2bc911cd5de41f5aea1110f2fa38423f248a1098e9c286073c62d89bb5c61");
	cr_assert_eq(atb_protocol_digest_file(V2, digest, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(digest, "76414dedb4d5e8345a93b257564223928be092e41e9696480e2b94f8e7afd49e");
	cr_assert(atbi_is_sha256_hex(p->digest));
	atb_protocol_free(p);
	/* v1 stays loadable by version and by digest: results keep pointing at it */
	cr_assert_eq(atb_protocol_load_digest(SRC,
		     "70eeb87aa3ea4e45d27f45ba578ca005c4639d9e199ed1acaea07aced80831d6", &p, &err),
		     ATB_OK, "%s", err.msg);
	cr_assert_eq(p->version, 1);
	cr_assert_eq(p->correctness.reduction.has, 0);
	atb_protocol_free(p);
}

/* PROTO: correctness.reduction_tolerance -- v2's one new key, and only it. */
Test(protocol, v2_is_v1_plus_reduction_tolerance_and_throttle)
{
	struct atb_error err;
	struct atb_protocol *p1 = NULL, *p2 = NULL;
	char *t1, *t2, *t3, *t4;

	cr_assert_eq(atb_protocol_load_version(SRC, 1, &p1, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_protocol_load_version(SRC, 2, &p2, &err), ATB_OK, "%s", err.msg);
	cr_expect(p2->correctness.reduction.has);
	cr_expect_float_eq(p2->correctness.reduction.factor, 1.0, 1e-15);
	cr_expect_str_eq(p2->correctness.reduction.growth, "sqrt_length");
	cr_expect(p2->gates.has_throttle);
	cr_expect_float_eq(p2->gates.throttle_max_share, 0.10, 1e-15);
	cr_expect(!p1->gates.has_throttle);
	t1 = replace(p1->canonical_json, "\"version\":1", "\"version\":2");
	t2 = replace(p2->canonical_json,
		     ",\"reduction_tolerance\":{\"factor\":1.0,\"growth\":\"sqrt_length\"}", "");
	t3 = replace(t2, ",\"throttle\":{\"max_share\":0.10000000000000001}", "");
	t4 = replace(t3, "\"cv_of\":\"per_seed_ratio\",", "");
	cr_expect_str_eq(p2->stats.cv_of, "per_seed_ratio");
	cr_expect_str_eq(p1->stats.cv_of, "");
	cr_expect_str_eq(t1, t4, "v2 differs from v1 by more than the new keys");
	atb_free(t4);
	atb_free(t1);
	atb_free(t2);
	atb_free(t3);
	atb_protocol_free(p1);
	atb_protocol_free(p2);
}

Test(protocol, v2_without_reduction_tolerance_is_refused, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char cand[512], *text, *t2;

	copy_home();
	text = slurp(V2);
	snprintf(cand, sizeof(cand), "%s/bad.yaml", home);
	/* version 2 without the key: missing field */
	t2 = replace(text, "  reduction_tolerance:\n    factor: 1.0\n    growth: sqrt_length",
		     "  # none");
	cr_assert_neq(strcmp(t2, text), 0);
	spit(cand, t2);
	atb_free(t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "correctness.reduction_tolerance");
	cr_expect(strstr(err.msg, "required from version 2"), "%s", err.msg);
	/* a bad factor, a bad growth */
	t2 = replace(text, "    factor: 1.0\n", "    factor: -1.0\n");
	spit(cand, t2);
	atb_free(t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "correctness.reduction_tolerance.factor");
	t2 = replace(text, "growth: sqrt_length", "growth: cubic");
	spit(cand, t2);
	atb_free(t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "correctness.reduction_tolerance.growth");
	/* version 2 without gates.throttle: missing field; a share over 1 */
	t2 = replace(text, "  throttle:\n    max_share: 0.10", "  # none");
	cr_assert_neq(strcmp(t2, text), 0);
	spit(cand, t2);
	atb_free(t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "gates.throttle");
	cr_expect(strstr(err.msg, "required from version 2"), "%s", err.msg);
	t2 = replace(text, "max_share: 0.10", "max_share: 1.5");
	spit(cand, t2);
	atb_free(t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "gates.throttle.max_share");
	/* version 2 without stats.cv_of; an unknown choice */
	t2 = replace(text, "  cv_of: per_seed_ratio\n", "");
	cr_assert_neq(strcmp(t2, text), 0);
	spit(cand, t2);
	atb_free(t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "stats.cv_of");
	cr_expect(strstr(err.msg, "required from version 2"), "%s", err.msg);
	t2 = replace(text, "cv_of: per_seed_ratio", "cv_of: per_trial");
	spit(cand, t2);
	atb_free(t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "stats.cv_of");
	atb_free(text);
}

Test(protocol, shipped_v1_values_are_the_papers)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	const struct atb_tolerance *t;

	cr_assert_eq(atb_protocol_load_version(SRC, 1, &p, &err), ATB_OK, "%s", err.msg);
	cr_assert_float_eq(p->stats.cv_cap, 0.05, 1e-15);           /* PROTO: stats.cv_cap */
	cr_assert_eq(p->stats.min_paired_seeds, 8);
	cr_assert_float_eq(p->gates.anomaly_factor, 10.0, 1e-15);    /* PROTO: gates.anomaly_breaker */
	cr_assert_float_eq(p->anchor_band, 0.10, 1e-15);
	cr_assert_float_eq(p->kernelbench.correct_rate_bar, 0.50, 1e-15);
	cr_assert_float_eq(p->kernelbench.median_speedup_bar, 1.2, 1e-15);
	cr_assert_eq(p->timing.trials_min, 10);
	cr_assert_eq(p->timing.trials_max, 200);
	cr_assert_eq(p->timing.cache_flush, 1);
	cr_assert_eq(p->timing.cache_flush_min_bytes, 67108864LL);
	cr_assert_str_eq(p->timing.interleave, "randomized_pairs");
	cr_assert_eq(p->build.ncpu_flags, 4);
	cr_assert_str_eq(p->build.cpu_flags[1], "-march=native");
	cr_assert_eq(p->correctness.ndistributions, 4);
	cr_assert_str_eq(p->correctness.distributions[2].name, "large_magnitude");
	cr_assert_float_eq(p->correctness.distributions[2].low, -1000.0, 1e-12);
	cr_assert_eq(p->kernelbench.nfast_p, 4);
	cr_assert_eq(p->loop.nusable_iteration, 4);
	cr_assert_str_eq(p->loop.usable_iteration[3], "admitted");
	cr_assert_eq(p->llm.max_output_tokens, 16384);
	cr_assert_str_eq(p->engine.paired_order, "ABBA");
	t = atb_protocol_tolerance(p, "bf16");
	cr_assert(t);
	cr_assert_float_eq(t->atol, 2.0e-2, 1e-15);
	cr_assert_null(atb_protocol_tolerance(p, "fp7"));
	/* the store's triggers read these paths from the canonical JSON */
	cr_assert(strstr(p->canonical_json, "\"stats\":{"));
	cr_assert(strstr(p->canonical_json, "\"cv_cap\":0.050000000000000003"));
	cr_assert(strstr(p->canonical_json, "\"anomaly_breaker\":{\"factor\":10.0}"));
	atb_protocol_free(p);
}

Test(protocol, edit_without_version_bump_fails_load_and_verify, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	struct atb_frozen_protocol *list = NULL;
	size_t n = 7;
	char before[65], after[65], path[512];

	copy_home();
	snprintf(path, sizeof(path), "%s/protocol/v1.yaml", home);
	cr_assert_eq(atb_protocol_digest_file(path, before, &err), ATB_OK);
	edit_home_file("v1.yaml", "cv_cap: 0.05", "cv_cap: 0.06");
	cr_assert_eq(atb_protocol_digest_file(path, after, &err), ATB_OK);

	cr_assert_eq(atb_protocol_load_version(home, 1, &p, &err), ATB_ERR_PROTOCOL);
	cr_assert_null(p);
	cr_assert(strstr(err.msg, "protocol 'v1.yaml' changed without a new version"), "%s",
		  err.msg);
	cr_assert(strstr(err.msg, before), "%s", err.msg);
	cr_assert(strstr(err.msg, after), "%s", err.msg);
	cr_assert(strstr(err.msg, "atb protocol freeze"), "%s", err.msg);
	cr_assert_str_eq(err.file, path);

	cr_assert_eq(atb_protocol_verify(home, &err), ATB_ERR_PROTOCOL);
	cr_assert(strstr(err.msg, "v1.yaml"));
	cr_assert_eq(atb_protocol_load_version(home, 1, &p, &err), ATB_ERR_PROTOCOL);
	cr_assert_eq(atb_protocol_load_digest(home, before, &p, &err), ATB_ERR_PROTOCOL);
	cr_assert_eq(atb_protocol_frozen_list(home, &list, &n, NULL, &err), ATB_ERR_PROTOCOL);
	cr_assert_null(list);
	cr_assert_eq(n, 0);
}

Test(protocol, comment_only_edit_still_verifies, .fini = remove_home)
{
	struct atb_error err;

	copy_home();
	edit_home_file("v1.yaml", "stats:\n", "# a new comment\nstats:   # trailing\n\n");
	edit_home_file("v1.yaml", "cv_cap: 0.05", "cv_cap:      5.0e-2");
	cr_assert_eq(atb_protocol_verify(home, &err), ATB_OK, "%s", err.msg);
}

/* ---- the digest -------------------------------------------------------- */

Test(protocol, key_order_comments_and_layout_do_not_change_digest)
{
	struct atb_error err;
	char a[65], b[65];

	cr_assert_eq(atb_protocol_digest_file(V1, a, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_protocol_digest_file(FIXTURES "/good-reordered.yaml", b, &err), ATB_OK,
		     "%s", err.msg);
	cr_assert_str_eq(a, b);
}

Test(protocol, any_value_change_changes_digest, .fini = remove_home)
{
	static const char *const edits[][2] = {
		{"cv_cap: 0.05", "cv_cap: 0.050001"},
		{"min_paired_seeds: 8", "min_paired_seeds: 9"},
		{"-march=native", "-march=x86-64"},
		{"enabled: true", "enabled: false"},
		{"title: AutoTuneBench", "title: AutoTuneBench2"},
		{"factor: 10.0", "factor: 10"},         /* a real became an integer */
		{"poison: nan", "poison: 'nan '"},
		{"[0.0, 1.0, 1.2, 2.0]", "[0.0, 1.2, 1.0, 2.0]"},  /* sequence order counts */
	};
	struct atb_error err;
	char base[65], got[65], path[512];
	char *orig;
	size_t i;

	copy_home();
	snprintf(path, sizeof(path), "%s/protocol/v1.yaml", home);
	orig = slurp(path);
	cr_assert_eq(atb_protocol_digest_file(path, base, &err), ATB_OK);
	for (i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
		char *t = replace(orig, edits[i][0], edits[i][1]);

		spit(path, t);
		atb_free(t);
		cr_assert_eq(atb_protocol_digest_file(path, got, &err), ATB_OK, "%s", err.msg);
		cr_assert_str_neq(got, base, "edit '%s' kept the digest", edits[i][1]);
	}
	atb_free(orig);
}

/*
 * PROTO: engine.client_lag -- absent before version 6 (an arm's p99
 * dispatch lag over max_dispatch_lag_ms refuses, as in version 5),
 * required from it.
 */
Test(protocol, client_lag_is_required_from_version_6, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char cand[512], *text, *t2, *t3;

	copy_home();
	snprintf(cand, sizeof(cand), "%s/candidate.yaml", home);
	cr_assert_eq(atb_protocol_load_file(V5, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_not(p->engine.has_client_lag);
	cr_expect_eq(p->engine.max_dispatch_lag_ms, 10);
	atb_protocol_free(p);
	text = slurp(V5);
	t2 = v6_text(text, "engine.client_lag");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "engine.client_lag");
	cr_expect(strstr(err.msg, "required from version 6"), "%s", err.msg);
	atb_free(t2);
	t2 = v6_text(text, "");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect(p->engine.has_client_lag);
	cr_expect_eq(p->engine.client_lag_max_share, 0.02);
	cr_expect_eq(p->engine.client_lag_max_arm_difference, 0.01);
	atb_protocol_free(p);
	t3 = replace(t2, "max_arm_difference: 0.01", "max_arm_difference: 1.5");
	spit(cand, t3);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "engine.client_lag.max_arm_difference");
	atb_free(t3);
	atb_free(t2);
	atb_free(text);
}

/*
 * PROTO: timing.cache_flush.cpu_max_bytes -- absent before version 6 (no
 * bound), required from it, never below min_bytes, and sent to the runner
 * only where the protocol has it.
 */
Test(protocol, cache_flush_cpu_max_is_required_from_version_6, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char cand[512], *text, *t2, *t3;

	copy_home();
	snprintf(cand, sizeof(cand), "%s/candidate.yaml", home);
	cr_assert_eq(atb_protocol_load_file(V5, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_not(p->timing.has_cache_flush_cpu_max);
	cr_expect_eq(p->timing.cache_flush_cpu_max_bytes, 0);
	atb_protocol_free(p);
	text = slurp(V5);
	t2 = v6_text(text, "timing.cache_flush.cpu_max_bytes");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "timing.cache_flush.cpu_max_bytes");
	cr_expect(strstr(err.msg, "required from version 6"), "%s", err.msg);
	atb_free(t2);
	t2 = v6_text(text, "");
	t3 = replace(t2, "cpu_max_bytes: 67108864", "cpu_max_bytes: 33554432");
	spit(cand, t3);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "timing.cache_flush.cpu_max_bytes");
	cr_expect(strstr(err.msg, "cpu_max_bytes 33554432 is below min_bytes 67108864"), "%s",
		  err.msg);
	atb_free(t3);
	t3 = replace(t2, "cpu_max_bytes: 67108864", "cpu_max_bytes: -1");
	spit(cand, t3);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "timing.cache_flush.cpu_max_bytes");
	atb_free(t3);
	cr_assert_eq(atb_protocol_load_file(V6, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect(p->timing.has_cache_flush_cpu_max);
	cr_expect_eq(p->timing.cache_flush_cpu_max_bytes, 67108864);
	atb_protocol_free(p);
	atb_free(t2);
	atb_free(text);
}

/* PROTO: gates.side_stream -- required from version 7, its values in range */
Test(protocol, side_stream_is_required_from_version_7, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char cand[512], *text, *t2;

	copy_home();
	snprintf(cand, sizeof(cand), "%s/candidate.yaml", home);
	cr_assert_eq(atb_protocol_load_file(V6, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_not(p->gates.has_side_stream);
	atb_protocol_free(p);
	text = slurp(V7);
	t2 = replace(text, "  side_stream:\n    rel_tolerance: 0.01\n    abs_slack_us: 1\n", "");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "gates.side_stream");
	cr_expect(strstr(err.msg, "missing field 'side_stream' (required from version 7)"), "%s",
		  err.msg);
	atb_free(t2);
	t2 = replace(text, "abs_slack_us: 1\n", "abs_slack_us: -3\n");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "gates.side_stream.abs_slack_us");
	atb_free(t2);
	t2 = replace(text, "    rel_tolerance: 0.01\n    abs_slack_us", "    rel_tolerance: 1.5\n    abs_slack_us");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "gates.side_stream.rel_tolerance");
	atb_free(t2);
	atb_free(text);
}

/* PROTO: correctness.input_chunk_elements -- required from version 8, in range */
Test(protocol, input_chunk_elements_is_required_from_version_8, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char cand[512], *text, *t2;

	copy_home();
	snprintf(cand, sizeof(cand), "%s/candidate.yaml", home);
	cr_assert_eq(atb_protocol_load_file(V7, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_eq(p->correctness.input_chunk_elements, 0);
	atb_protocol_free(p);
	text = slurp(V8);
	t2 = replace(text, "  input_chunk_elements: 1048576\n", "");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "correctness.input_chunk_elements");
	cr_expect(strstr(err.msg, "missing field 'input_chunk_elements' (required from version 8)"),
		  "%s", err.msg);
	atb_free(t2);
	t2 = replace(text, "input_chunk_elements: 1048576", "input_chunk_elements: 100");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "correctness.input_chunk_elements");
	cr_expect_str_eq(err.msg, "expected an integer in [4096, 1073741824], got '100'");
	atb_free(t2);
	t2 = replace(text, "input_chunk_elements: 1048576", "input_chunk_elements: 0.5");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "correctness.input_chunk_elements");
	atb_free(t2);
	atb_free(text);
}

/* PROTO: stats.resolution_rel -- required from version 10, in [0, 0.5) */
Test(protocol, resolution_rel_is_required_from_version_10, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char cand[512], *text, *t2;

	copy_home();
	snprintf(cand, sizeof(cand), "%s/candidate.yaml", home);
	cr_assert_eq(atb_protocol_load_file(V9, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_eq(p->stats.resolution_rel, 0.0);
	atb_protocol_free(p);
	text = slurp(V10);
	t2 = replace(text, "  resolution_rel: 0.002\n", "");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "stats.resolution_rel");
	cr_expect(strstr(err.msg, "missing field 'resolution_rel' (required from version 10)"),
		  "%s", err.msg);
	atb_free(t2);
	/* 0 is a value (the bootstrap's own interval), not an absence */
	t2 = replace(text, "resolution_rel: 0.002", "resolution_rel: 0");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_eq(p->stats.resolution_rel, 0.0);
	atb_protocol_free(p);
	atb_free(t2);
	t2 = replace(text, "resolution_rel: 0.002", "resolution_rel: 0.5");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "stats.resolution_rel");
	atb_free(t2);
	t2 = replace(text, "resolution_rel: 0.002", "resolution_rel: -0.001");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "stats.resolution_rel");
	atb_free(t2);
	atb_free(text);
}

/* PROTO: timing.isolation -- required from version 11, none or process */
Test(protocol, isolation_is_required_from_version_11, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char cand[512], *text, *t2;

	copy_home();
	snprintf(cand, sizeof(cand), "%s/candidate.yaml", home);
	/* before it: absent, which means none */
	cr_assert_eq(atb_protocol_load_file(V10, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_str_eq(p->timing.isolation, "");
	atb_protocol_free(p);
	text = slurp(V11);
	t2 = replace(text, "  isolation: process\n", "");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "timing.isolation");
	cr_expect(strstr(err.msg, "missing field 'isolation' (required from version 11)"), "%s",
		  err.msg);
	atb_free(t2);
	t2 = replace(text, "isolation: process", "isolation: none");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_str_eq(p->timing.isolation, "none");
	atb_protocol_free(p);
	atb_free(t2);
	t2 = replace(text, "isolation: process", "isolation: thread");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "timing.isolation");
	atb_free(t2);
	atb_free(text);
}

/* PROTO: timing.round_trip -- required from version 12, every_rounds 1 to 1000 */
Test(protocol, round_trip_is_required_from_version_12, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char cand[512], *text, *t2;

	copy_home();
	snprintf(cand, sizeof(cand), "%s/candidate.yaml", home);
	/* before it: absent, which means none */
	cr_assert_eq(atb_protocol_load_file(V11, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect(!p->timing.has_round_trip);
	cr_expect_eq(p->timing.round_trip_every, 0);
	atb_protocol_free(p);
	text = slurp(V12);
	t2 = replace(text, "  round_trip:\n    every_rounds: 1\n    subtract: true\n    quantile: 0.1\n",
		     "");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "timing.round_trip");
	cr_expect(strstr(err.msg, "missing field 'round_trip' (required from version 12)"), "%s",
		  err.msg);
	atb_free(t2);
	t2 = replace(text, "every_rounds: 1", "every_rounds: 0");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "timing.round_trip.every_rounds");
	atb_free(t2);
	t2 = replace(text, "subtract: true", "subtract: maybe");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "timing.round_trip.subtract");
	atb_free(t2);
	t2 = replace(text, "quantile: 0.1", "quantile: 0.6");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "timing.round_trip.quantile");
	atb_free(t2);
	t2 = replace(text, "quantile: 0.1", "quantile: 0");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "timing.round_trip.quantile");
	atb_free(t2);
	t2 = replace(text, "every_rounds: 1", "every_rounds: 4");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_eq(p->timing.round_trip_every, 4);
	atb_protocol_free(p);
	atb_free(t2);
	atb_free(text);
}

/* PROTO: timing.round_trip.position, max_share_under -- required from version 13 */
Test(protocol, round_trip_position_and_share_are_required_from_version_13, .fini = remove_home)
{
	static const struct {
		const char *from, *to, *field, *msg;
	} bad[] = {
		{"    position: after_reference\n", "", "timing.round_trip.position",
		 "missing field 'position' (required from version 13)"},
		{"    max_share_under: 0.25\n", "", "timing.round_trip.max_share_under",
		 "missing field 'max_share_under' (required from version 13)"},
		{"position: after_reference", "position: before", "timing.round_trip.position",
		 NULL},
		{"max_share_under: 0.25", "max_share_under: 1.5", "timing.round_trip.max_share_under",
		 NULL},
		{"max_share_under: 0.25", "max_share_under: -0.1",
		 "timing.round_trip.max_share_under", NULL},
	};
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char cand[512], *text, *t2;
	size_t i;

	copy_home();
	snprintf(cand, sizeof(cand), "%s/candidate.yaml", home);
	text = slurp(V13);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		t2 = replace(text, bad[i].from, bad[i].to);
		cr_assert(strcmp(t2, text), "case %zu: '%s' not in v13.yaml", i, bad[i].from);
		spit(cand, t2);
		cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA, "case %zu", i);
		cr_expect_str_eq(err.field, bad[i].field, "case %zu", i);
		if (bad[i].msg)
			cr_expect(strstr(err.msg, bad[i].msg), "case %zu: %s", i, err.msg);
		atb_free(t2);
	}
	/* the other places, and no rule at 1 */
	t2 = replace(text, "position: after_reference", "position: keyed");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_str_eq(p->timing.round_trip_position, "keyed");
	atb_protocol_free(p);
	atb_free(t2);
	t2 = replace(text, "position: after_reference", "position: after");
	atb_free(text);
	text = replace(t2, "max_share_under: 0.25", "max_share_under: 1");
	spit(cand, text);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_str_eq(p->timing.round_trip_position, "after");
	cr_expect_float_eq(p->timing.round_trip_max_share_under, 1.0, 1e-15);
	atb_protocol_free(p);
	atb_free(t2);
	atb_free(text);
}

/* PROTO: correctness.reference_precision -- required from version 14, factor > 0 */
Test(protocol, reference_precision_is_required_from_version_14, .fini = remove_home)
{
	static const struct {
		const char *from, *to, *field, *msg;
	} bad[] = {
		{"  reference_precision:\n    factor: 4.0\n    max_relative: 0.0078125    # 2^-7\n",
		 "", "correctness.reference_precision",
		 "missing field 'reference_precision' (required from version 14)"},
		{"    max_relative: 0.0078125    # 2^-7\n", "",
		 "correctness.reference_precision.max_relative", NULL},
		{"max_relative: 0.0078125", "max_relative: 0", "correctness.reference_precision.max_relative",
		 NULL},
		{"max_relative: 0.0078125", "max_relative: 1.5",
		 "correctness.reference_precision.max_relative", NULL},
		{"    factor: 4.0\n", "    factor: 0\n", "correctness.reference_precision.factor",
		 NULL},
		{"    factor: 4.0\n", "    factor: -2\n", "correctness.reference_precision.factor",
		 NULL},
		{"    factor: 4.0\n", "    factor: 4.0\n    slack: 1\n",
		 "correctness.reference_precision.slack", NULL},
	};
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char cand[512], *text, *t2;
	size_t i;

	copy_home();
	snprintf(cand, sizeof(cand), "%s/candidate.yaml", home);
	text = slurp(V14);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		t2 = replace(text, bad[i].from, bad[i].to);
		cr_assert(strcmp(t2, text), "case %zu: '%s' not in v14.yaml", i, bad[i].from);
		spit(cand, t2);
		cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA, "case %zu", i);
		cr_expect_str_eq(err.field, bad[i].field, "case %zu", i);
		if (bad[i].msg)
			cr_expect(strstr(err.msg, bad[i].msg), "case %zu: %s", i, err.msg);
		atb_free(t2);
	}
	/* another factor loads, and is what the torch runner's job gets */
	t2 = replace(text, "    factor: 4.0\n", "    factor: 2.5\n");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_float_eq(p->correctness.reference_precision.factor, 2.5, 1e-15);
	atb_protocol_free(p);
	atb_free(t2);
	atb_free(text);
}

/* ---- versions ---------------------------------------------------------- */

Test(protocol, older_version_stays_loadable_after_freeze, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	struct atb_frozen_protocol *list = NULL;
	char v1digest[65], v6digest[65], cand[512], *text, *t2;
	size_t n = 0;
	int version = 0, current = 0;

	copy_home();
	cr_assert_eq(atb_protocol_digest_file(V1, v1digest, &err), ATB_OK);
	/* the next version after the current one (14), one value changed */
	text = slurp(V14);
	t2 = replace(text, "\nversion: 14", "\nversion: 15");
	atb_free(text);
	text = replace(t2, "cv_cap: 0.05", "cv_cap: 0.04");
	atb_free(t2);
	snprintf(cand, sizeof(cand), "%s/candidate.yaml", home);
	spit(cand, text);
	atb_free(text);

	cr_assert_eq(atb_protocol_freeze(home, cand, &version, v6digest, &err), ATB_OK, "%s",
		     err.msg);
	cr_assert_eq(version, 15);
	cr_assert_str_neq(v6digest, v1digest);
	/* PROTO: gates.clock, gates.timed_correctness (version 3 on), version 4's keys */
	cr_assert_eq(atb_protocol_load_current(home, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect(p->gates.has_clock);
	cr_expect_float_eq(p->gates.clock_rel_tolerance, 0.01, 1e-15);
	cr_expect_float_eq(p->gates.clock_abs_slack_ms, 50.0, 1e-15);
	cr_expect(p->gates.has_timed_correctness);
	cr_expect_float_eq(p->gates.floor_cache_allowance, 2.0, 1e-15);
	cr_expect(p->gates.has_clocks && p->gates.has_hang && p->gates.has_background);
	cr_expect_str_eq(p->timing.placement, "keyed");
	cr_expect_str_eq(p->timing.preemption, "none");
	cr_assert_eq(p->version, 15);
	cr_assert(p->correctness.reference_precision.has);
	cr_assert(p->timing.has_round_trip && p->timing.round_trip_subtract);
	cr_assert_str_eq(p->timing.isolation, "process");
	cr_assert_float_eq(p->stats.resolution_rel, 0.002, 1e-15);
	cr_assert(p->gates.has_side_stream);
	cr_assert_eq(p->correctness.input_chunk_elements, 1048576);
	cr_assert_float_eq(p->stats.cv_cap, 0.04, 1e-15);
	cr_assert_str_eq(p->digest, v6digest);
	atb_protocol_free(p);

	cr_assert_eq(atb_protocol_load_version(home, 1, &p, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(p->version, 1);
	cr_assert_float_eq(p->stats.cv_cap, 0.05, 1e-15);
	cr_assert_str_eq(p->digest, v1digest);
	atb_protocol_free(p);

	cr_assert_eq(atb_protocol_load_digest(home, v1digest, &p, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(p->version, 1);
	atb_protocol_free(p);

	cr_assert_eq(atb_protocol_frozen_list(home, &list, &n, &current, &err), ATB_OK);
	cr_assert_eq(n, 15);
	cr_assert_eq(current, 15);
	cr_assert_eq(list[0].version, 1);
	cr_assert_str_eq(list[0].digest, v1digest);
	cr_assert_str_eq(list[14].digest, v6digest);
	cr_assert(strstr(list[14].file, "/protocol/v15.yaml"));
	cr_assert(strstr(list[14].canonical_json, "\"cv_cap\":0.040000000000000001"));
	cr_assert(strstr(list[14].canonical_json, "\"timed_correctness\""));
	atb_protocol_frozen_free(list, n);
	cr_assert_eq(atb_protocol_verify(home, &err), ATB_OK, "%s", err.msg);

	/* freezing is append-only: the same file again, or a skipped version */
	cr_assert_eq(atb_protocol_freeze(home, cand, &version, NULL, &err), ATB_ERR_PROTOCOL);
	cr_assert(strstr(err.msg, "the next version is 16"), "%s", err.msg);
	edit_home_file("v15.yaml", "version: 15", "version: 17");
	cr_assert_eq(atb_protocol_verify(home, &err), ATB_ERR_PROTOCOL);
}

Test(protocol, freeze_refuses_schema_errors_and_wrong_version, .fini = remove_home)
{
	struct atb_error err;
	int version = 15;

	copy_home();
	cr_assert_eq(atb_protocol_freeze(home, FIXTURES "/bad-out-of-range.yaml", &version, NULL,
					 &err), ATB_ERR_SCHEMA);
	cr_assert_eq(version, 0);
	cr_assert_eq(atb_protocol_freeze(home, V1, &version, NULL, &err), ATB_ERR_PROTOCOL);
	cr_assert(strstr(err.msg, "as version 1: the next version is 15"), "%s", err.msg);
}

Test(protocol, lock_errors_are_protocol_errors, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char lock[512], v1digest[65], cand[512], *text, *t2;
	FILE *f;

	copy_home();
	cr_assert_eq(atb_protocol_load_version(home, 15, &p, &err), ATB_ERR_PROTOCOL);
	cr_assert(strstr(err.msg, "version 15 is not frozen"), "%s", err.msg);
	cr_assert_eq(atb_protocol_load_digest(home, "00", &p, &err), ATB_ERR_PROTOCOL);

	/* a file whose own version: disagrees with its lock entry */
	text = slurp(V1);
	t2 = replace(text, "version: 1", "version: 3");
	snprintf(cand, sizeof(cand), "%s/protocol/v1.yaml", home);
	spit(cand, t2);
	atb_free(text);
	atb_free(t2);
	cr_assert_eq(atb_protocol_digest_file(cand, v1digest, &err), ATB_OK);
	snprintf(lock, sizeof(lock), "%s/protocol/protocol.lock", home);
	f = fopen(lock, "w");
	cr_assert(f);
	fprintf(f, "current: 1\nfrozen:\n  - {version: 1, file: v1.yaml, sha256: %s}\n", v1digest);
	fclose(f);
	cr_assert_eq(atb_protocol_load_current(home, &p, &err), ATB_ERR_PROTOCOL);
	cr_assert(strstr(err.msg, "says version 3 but the lock freezes it as version 1"), "%s",
		  err.msg);

	/* a lock entry pointing outside protocol/ */
	f = fopen(lock, "w");
	cr_assert(f);
	fprintf(f, "current: 1\nfrozen:\n  - {version: 1, file: ../v1.yaml, sha256: %s}\n",
		v1digest);
	fclose(f);
	cr_assert_eq(atb_protocol_verify(home, &err), ATB_ERR_SCHEMA);
	cr_assert_str_eq(err.field, "frozen[0].file");
	cr_assert_eq(err.line, 3);

	remove(lock);
	cr_assert_eq(atb_protocol_load_current(home, &p, &err), ATB_ERR_PROTOCOL);
	cr_assert(strstr(err.msg, "not frozen"), "%s", err.msg);
	cr_assert_null(p);
}

/* ---- schema failures: tests/fixtures/protocol/bad-*.yaml -------------- */

/*
 * Load a fixture and compare with its "# expect: STATUS: LINE:COL: FIELD:
 * MESSAGE" line (the file name left out).
 */
static void check_fixture(const char *name)
{
	struct atb_error err;
	struct atb_protocol *p = (struct atb_protocol *)1;
	char path[512], got[2048], want[1024];
	char *text = NULL, *line, *nl;
	enum atb_status st;

	snprintf(path, sizeof(path), "%s/%s", FIXTURES, name);
	text = slurp(path);
	line = strstr(text, "# expect: ");
	cr_assert(line, "%s has no '# expect:' line", name);
	line += strlen("# expect: ");
	nl = strchr(line, '\n');
	snprintf(want, sizeof(want), "%.*s", nl ? (int)(nl - line) : (int)strlen(line), line);
	atb_free(text);

	atb_error_clear(&err);
	st = atb_protocol_load_file(path, &p, &err);
	cr_assert_null(p, "%s: out not NULL on failure", name);
	cr_assert_neq(st, ATB_OK, "%s loaded", name);
	cr_assert_eq(st, err.status);
	cr_assert_str_eq(err.file, path);
	cr_assert(err.line > 0 && err.column > 0, "%s: no position", name);
	atb_error_format(&err, got, sizeof(got));
	cr_assert(!strncmp(got, path, strlen(path)) && got[strlen(path)] == ':');
	snprintf(path, sizeof(path), "%s: %s", atb_status_name(st), got + strlen(path) + 1);
	cr_assert_str_eq(path, want, "%s", name);
}

Test(protocol, unknown_key_is_schema_error) { check_fixture("bad-unknown-key.yaml"); }
Test(protocol, wrong_type_is_schema_error) { check_fixture("bad-wrong-type.yaml"); }
Test(protocol, quoted_number_is_schema_error) { check_fixture("bad-quoted-number.yaml"); }
Test(protocol, missing_field_is_schema_error) { check_fixture("bad-missing-field.yaml"); }
Test(protocol, out_of_range_is_schema_error) { check_fixture("bad-out-of-range.yaml"); }
Test(protocol, trials_max_below_min_is_schema_error) { check_fixture("bad-trials.yaml"); }
Test(protocol, uniform_low_not_below_high_is_schema_error)
{
	check_fixture("bad-distribution-range.yaml");
}
Test(protocol, clock_other_than_monotonic_is_schema_error) { check_fixture("bad-clock.yaml"); }
Test(protocol, anomaly_factor_of_one_is_schema_error) { check_fixture("bad-anomaly-factor.yaml"); }
Test(protocol, malformed_yaml_is_parse_error) { check_fixture("bad-malformed.yaml"); }
Test(protocol, duplicate_key_is_parse_error) { check_fixture("bad-duplicate-key.yaml"); }
Test(protocol, empty_file_is_schema_error) { check_fixture("bad-empty.yaml"); }
Test(protocol, sequence_at_top_is_schema_error) { check_fixture("bad-not-mapping.yaml"); }

/* Every bad-*.yaml, so a new fixture is tested without a new Test(). */
Test(protocol, every_bad_fixture_fails_as_its_expect_line_says)
{
	DIR *d = opendir(FIXTURES);
	struct dirent *e;
	int n = 0;

	cr_assert(d);
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "bad-", 4))
			continue;
		check_fixture(e->d_name);
		n++;
	}
	closedir(d);
	cr_assert_geq(n, 20);
}

/* The pre-scan that keeps libfyaml 0.7.12 from looping (docs/internals/libfyaml-hang.md). */
#define VALID ((size_t)-1)
Test(protocol, yaml_prescan_refuses_exactly_what_is_not_utf8)
{
	static const struct {
		const char *text;
		size_t bad;  /* offset of the first bad byte; VALID when none */
	} cases[] = {
		{"%\xad", 1},
		{"a: b\n...\n%\xc0\x80\n", 10},       /* overlong NUL */
		{"%\xc1\xbf", 1},                     /* overlong */
		{"%\xe0\x9f\xbf", 1},                 /* overlong 3-byte */
		{"%\xed\xa0\x80", 1},                 /* a surrogate */
		{"%\xf4\x90\x80\x80", 1},             /* past U+10FFFF */
		{"%\xf5\x80\x80\x80", 1},
		{"%\xe2\x80", 1},                     /* truncated */
		{"\xff\xfe%\x00", 0},                 /* a UTF-16 BOM */
		{"a: caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9d\x9b\xbc\n", VALID},  /* valid: 2, 3, 4 bytes */
		{"\xef\xbb\xbf%YAML 1.2\n---\n", VALID},   /* a UTF-8 BOM */
		{"\xed\x9f\xbf \xee\x80\x80 \xf4\x8f\xbf\xbf", VALID},  /* the edges around surrogates, U+10FFFF */
	};
	struct atb_error err;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = strlen(cases[i].text), want = cases[i].bad == VALID ? len : cases[i].bad;

		cr_assert_eq(atbi_utf8_invalid_at(cases[i].text, len), want, "case %zu", i);
		atb_error_clear(&err);
		cr_assert_eq(atbi_yaml_prescan("f.yaml", cases[i].text, len, &err),
			     want == len ? ATB_OK : ATB_ERR_PARSE, "case %zu", i);
	}
	atb_error_clear(&err);
	cr_assert_eq(atbi_yaml_prescan("f.yaml", "a: 1\n\tb\xad", 8, &err), ATB_ERR_PARSE);
	cr_assert_eq(err.line, 2);
	cr_assert_eq(err.column, 3);
	cr_assert_str_eq(err.file, "f.yaml");
	cr_assert(strstr(err.msg, "byte 0xad (offset 7) is not utf-8"), "%s", err.msg);
}

Test(protocol, a_file_libfyaml_would_loop_on_is_refused_at_its_byte, .timeout = 20)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char digest[65];

	atb_error_clear(&err);
	cr_assert_eq(atb_protocol_load_file(SRC "/tests/fixtures/yaml/percent-0xad.yaml", &p, &err),
		     ATB_ERR_PARSE);
	cr_assert_null(p);
	cr_assert_eq(err.line, 1);
	cr_assert_eq(err.column, 2);
	cr_assert_eq(atb_protocol_digest_file(SRC "/tests/fixtures/yaml/after-end-overlong.yaml",
					      digest, &err), ATB_ERR_PARSE);
	cr_assert_eq(err.line, 3);
	cr_assert(strstr(err.msg, "byte 0xc0"), "%s", err.msg);
}

Test(protocol, missing_file_is_not_found)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char digest[65];

	cr_assert_eq(atb_protocol_load_file(FIXTURES "/no-such.yaml", &p, &err), ATB_ERR_NOT_FOUND);
	cr_assert_null(p);
	cr_assert_eq(atb_protocol_digest_file(FIXTURES "/no-such.yaml", digest, &err),
		     ATB_ERR_NOT_FOUND);
	cr_assert_str_eq(digest, "");
}

/* ---- allocation failure ------------------------------------------------ */

typedef enum atb_status (*walk_fn)(void);

static enum atb_status walk_load_file(void)
{
	struct atb_error err;
	struct atb_protocol *p = (struct atb_protocol *)1;
	enum atb_status st = atb_protocol_load_file(V1, &p, &err);

	if (st)
		cr_assert_null(p);
	atb_protocol_free(st ? NULL : p);
	return st;
}

static enum atb_status walk_load_current(void)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	enum atb_status st = atb_protocol_load_current(SRC, &p, &err);

	atb_protocol_free(p);
	return st;
}

static enum atb_status walk_frozen_list(void)
{
	struct atb_error err;
	struct atb_frozen_protocol *list = NULL;
	size_t n = 0;
	enum atb_status st = atb_protocol_frozen_list(SRC, &list, &n, NULL, &err);

	atb_protocol_frozen_free(list, n);
	return st;
}

static void walk(walk_fn fn, const char *what)
{
	long k;
	enum atb_status st;

	for (k = 1; k < 100000; k++) {
		atb_alloc_fail_at(k);
		st = fn();
		if (!atb_alloc_failed()) {
			atb_alloc_fail_at(0);
			cr_assert_eq(st, ATB_OK, "%s: k=%ld: status %d without a failure", what, k,
				     st);
			cr_assert_gt(k, 10, "%s allocates too little to be walked", what);
			return;
		}
		cr_assert_eq(st, ATB_ERR_NOMEM, "%s: k=%ld: status %s, want nomem", what, k,
			     atb_status_name(st));
	}
	atb_alloc_fail_at(0);
	cr_assert_fail("%s: never succeeded", what);
}

Test(protocol, allocation_failure_walk_load_file) { walk(walk_load_file, "load_file"); }
Test(protocol, allocation_failure_walk_load_current) { walk(walk_load_current, "load_current"); }
Test(protocol, allocation_failure_walk_frozen_list) { walk(walk_frozen_list, "frozen_list"); }

/* PROTO: gates.timed_correctness -- optional before version 3, required from it. */
Test(protocol, timed_correctness_is_required_from_version_3, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char cand[512], *text, *t2, *t3;

	copy_home();
	snprintf(cand, sizeof(cand), "%s/candidate.yaml", home);
	text = slurp(V2);
	cr_assert_eq(atb_protocol_load_file(V2, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_not(p->gates.has_timed_correctness);   /* the runner job uses defaults */
	atb_protocol_free(p);
	t3 = replace(text, "version: 2", "version: 3");
	/* a version 3 with gates.clock (also required) but without this key */
	t2 = replace(t3, "\ngates:\n", "\ngates:\n  clock: {rel_tolerance: 0.01, abs_slack_ms: 25}\n");
	atb_free(t3);
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "gates.timed_correctness");
	cr_expect(strstr(err.msg, "required from version 3"), "%s", err.msg);
	t3 = replace(t2, "\ngates:\n", "\ngates:\n  timed_correctness: {check_share: 0.25, "
		     "min_checks_per_seed: 3, perturb_elements: 8}\n");
	spit(cand, t3);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect(p->gates.has_timed_correctness);
	cr_expect_float_eq(p->gates.timed_check_share, 0.25, 1e-15);
	cr_expect_eq(p->gates.timed_min_checks_per_seed, 3);
	cr_expect_eq(p->gates.timed_perturb_elements, 8);
	atb_protocol_free(p);
	atb_free(t3);
	t3 = replace(t2, "\ngates:\n", "\ngates:\n  timed_correctness: {check_share: 0, "
		     "min_checks_per_seed: 3, perturb_elements: 8}\n");
	spit(cand, t3);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "gates.timed_correctness.check_share");
	atb_free(t3);
	atb_free(t2);
	atb_free(text);
}

/* PROTO: gates.clocks, timing.placement -- absent before version 4, required from it. */
Test(protocol, clocks_and_placement_are_required_from_version_4, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	const char *keys[] = {"gates.clocks", "timing.placement"};
	char cand[512], *text, *t2, *t3;
	size_t i;

	copy_home();
	snprintf(cand, sizeof(cand), "%s/candidate.yaml", home);
	text = slurp(V3);
	cr_assert_eq(atb_protocol_load_file(V3, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_not(p->gates.has_clocks);          /* the NVML-reasons rule */
	cr_expect_str_eq(p->timing.placement, "");   /* fixed */
	atb_protocol_free(p);
	for (i = 0; i < 2; i++) {
		t2 = v4_text(text, keys[i]);
		spit(cand, t2);
		cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA, "%s", keys[i]);
		cr_expect_str_eq(err.field, keys[i]);
		cr_expect(strstr(err.msg, "required from version 4"), "%s", err.msg);
		atb_free(t2);
	}
	t2 = v4_text(text, "");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect(p->gates.has_clocks);
	cr_expect_float_eq(p->gates.clocks_floor_ratio, 0.75, 1e-15);
	cr_expect_float_eq(p->gates.clocks_max_arm_rel_difference, 0.02, 1e-15);
	cr_expect_str_eq(p->timing.placement, "shuffled");
	atb_protocol_free(p);
	/* a value outside the list names the field */
	t3 = replace(t2, "placement: shuffled", "placement: random");
	spit(cand, t3);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "timing.placement");
	atb_free(t3);
	t3 = replace(t2, "floor_ratio: 0.75", "floor_ratio: 1.5");
	spit(cand, t3);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "gates.clocks.floor_ratio");
	atb_free(t3);
	atb_free(t2);
	atb_free(text);
}

/* PROTO: gates.physical_floor.cache_allowance -- optional before version 4, required from it. */
Test(protocol, floor_cache_allowance_is_required_from_version_4, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char cand[512], *text, *t2, *t3;

	copy_home();
	snprintf(cand, sizeof(cand), "%s/candidate.yaml", home);
	text = slurp(V3);
	cr_assert_eq(atb_protocol_load_file(V3, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_float_eq(p->gates.floor_cache_allowance, 0.0, 1e-15);  /* the gate's default */
	atb_protocol_free(p);
	t2 = v4_text(text, "gates.physical_floor.cache_allowance");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "gates.physical_floor.cache_allowance");
	cr_expect(strstr(err.msg, "required from version 4"), "%s", err.msg);
	atb_free(t2);
	t2 = v4_text(text, "");
	t3 = replace(t2, "cache_allowance: 2", "cache_allowance: 3");
	spit(cand, t3);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_float_eq(p->gates.floor_cache_allowance, 3.0, 1e-15);
	atb_protocol_free(p);
	atb_free(t3);
	t3 = replace(t2, "cache_allowance: 2", "cache_allowance: 0.5");
	spit(cand, t3);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "gates.physical_floor.cache_allowance");
	atb_free(t3);
	atb_free(t2);
	atb_free(text);
}

/* PROTO: gates.hang, gates.background -- absent before version 4 (defaults), required from it. */
Test(protocol, hang_and_background_are_required_from_version_4, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	const char *keys[] = {"gates.hang", "gates.background"};
	char cand[512], *text, *t2, *t3;
	size_t i;

	copy_home();
	snprintf(cand, sizeof(cand), "%s/candidate.yaml", home);
	cr_assert_eq(atb_protocol_load_file(V3, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_not(p->gates.has_hang);        /* the watchdog uses its defaults */
	cr_expect_not(p->gates.has_background);
	atb_protocol_free(p);
	text = slurp(V3);
	for (i = 0; i < 2; i++) {
		t2 = v4_text(text, keys[i]);
		spit(cand, t2);
		cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA, "%s", keys[i]);
		cr_expect_str_eq(err.field, keys[i]);
		cr_expect(strstr(err.msg, "required from version 4"), "%s", err.msg);
		atb_free(t2);
	}
	t3 = v4_text(text, "");
	t2 = replace(t3, "hang: {startup_s: 120, min_s: 20, factor: 10, progress_ms: 250}",
		     "hang: {startup_s: 60, min_s: 5, factor: 4, progress_ms: 100}");
	atb_free(t3);
	t3 = replace(t2, "background: {max_cpu_share: 0.02, abs_slack_ms: 20}",
		     "background: {max_cpu_share: 0.05, abs_slack_ms: 10}");
	atb_free(t2);
	t2 = t3;
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect(p->gates.has_hang && p->gates.has_background);
	cr_expect_float_eq(p->gates.hang_startup_s, 60, 1e-15);
	cr_expect_float_eq(p->gates.hang_min_s, 5, 1e-15);
	cr_expect_float_eq(p->gates.hang_factor, 4, 1e-15);
	cr_expect_eq(p->gates.hang_progress_ms, 100);
	cr_expect_float_eq(p->gates.background_max_cpu_share, 0.05, 1e-15);
	cr_expect_float_eq(p->gates.background_abs_slack_ms, 10, 1e-15);
	atb_protocol_free(p);
	/* a bad value names its field */
	t3 = replace(t2, "progress_ms: 100", "progress_ms: 0");
	spit(cand, t3);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "gates.hang.progress_ms");
	atb_free(t3);
	atb_free(t2);
	atb_free(text);
}

/*
 * PROTO: gates.background.torch_cpu -- absent before version 5 (0: torch
 * tasks' background facts recorded, not judged), required from it.
 */
Test(protocol, background_torch_cpu_is_required_from_version_5, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char cand[512], *text, *t2, *t3;

	copy_home();
	snprintf(cand, sizeof(cand), "%s/candidate.yaml", home);
	text = slurp(V4);
	cr_assert_eq(atb_protocol_load_file(V4, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_not(p->gates.has_background_torch_cpu);
	cr_expect_not(p->gates.background_torch_cpu);
	atb_protocol_free(p);
	t2 = v5_text(text, "gates.background.torch_cpu");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "gates.background.torch_cpu");
	cr_expect(strstr(err.msg, "required from version 5"), "%s", err.msg);
	t3 = v5_text(text, "");
	spit(cand, t3);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect(p->gates.has_background_torch_cpu);
	cr_expect(p->gates.background_torch_cpu);
	atb_protocol_free(p);
	atb_free(t3);
	t3 = replace(t2, "abs_slack_ms: 20", "abs_slack_ms: 20\n    torch_cpu: 3");
	spit(cand, t3);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "gates.background.torch_cpu");
	atb_free(t3);
	atb_free(t2);
	atb_free(text);
}

/* PROTO: gates.rerun.max_runs -- absent before version 5 (the judge's 3 runs), required from it. */
Test(protocol, rerun_is_required_from_version_5, .fini = remove_home)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char cand[512], *text, *t2, *t3;

	copy_home();
	snprintf(cand, sizeof(cand), "%s/candidate.yaml", home);
	cr_assert_eq(atb_protocol_load_file(V4, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect_not(p->gates.has_rerun);
	atb_protocol_free(p);
	text = slurp(V4);
	t2 = v5_text(text, "gates.rerun");
	spit(cand, t2);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "gates.rerun");
	cr_expect(strstr(err.msg, "required from version 5"), "%s", err.msg);
	atb_free(t2);
	t2 = v5_text(text, "");
	t3 = replace(t2, "rerun: {max_runs: 3}", "rerun: {max_runs: 5}");
	spit(cand, t3);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_OK, "%s", err.msg);
	cr_expect(p->gates.has_rerun);
	cr_expect_eq(p->gates.rerun_max_runs, 5);
	atb_protocol_free(p);
	atb_free(t3);
	t3 = replace(t2, "rerun: {max_runs: 3}", "rerun: {max_runs: 0}");
	spit(cand, t3);
	cr_assert_eq(atb_protocol_load_file(cand, &p, &err), ATB_ERR_SCHEMA);
	cr_expect_str_eq(err.field, "gates.rerun.max_runs");
	atb_free(t3);
	atb_free(t2);
	atb_free(text);
}
