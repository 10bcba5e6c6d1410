/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Unit tests of the calibrate module: the report's arithmetic on synthetic
 * outcomes (admitted rate and coverage with Wilson intervals against the
 * closed form computed by hand, the median |speedup - 1| for odd and even
 * counts, refusals by reason with the "other" slot, coverage recomputed
 * from the interval), the verdict against targets, the copies (Model
 * renamed to ModelNew as a whole word; a kernel baseline with its local
 * include inlined).  No measurement: the CLI test t4200 runs real copies.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "atb/alloc.h"
#include "atb/calibrate.h"
#include "atb/task.h"
#include "banned.h"

static int close_to(double got, double want, double tol)
{
	return fabs(got - want) <= tol;
}

static void admitted(struct atb_calibrate_row *r, const char *task, double s, double lo,
		     double hi)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->task, sizeof(r->task), "%s", task);
	snprintf(r->outcome, sizeof(r->outcome), "usable");
	r->admitted = 1;
	r->speedup = s;
	r->ci_low = lo;
	r->ci_high = hi;
}

static void refused(struct atb_calibrate_row *r, const char *task, const char *outcome)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->task, sizeof(r->task), "%s", task);
	snprintf(r->outcome, sizeof(r->outcome), "%s", outcome);
}

Test(calibrate, summary_rates_coverage_and_wilson)
{
	struct atb_calibrate_row r[10];
	struct atb_calibrate_summary s;
	struct atb_error err;

	/* 7 admitted, 6 of whose intervals contain 1; 3 refused */
	admitted(&r[0], "a", 1.001, 0.995, 1.007);
	admitted(&r[1], "b", 0.998, 0.990, 1.004);
	admitted(&r[2], "c", 1.033, 1.028, 1.038);   /* excludes 1: copy bias */
	admitted(&r[3], "d", 1.000, 1.000, 1.002);   /* 1 on the edge: contains it */
	admitted(&r[4], "e", 0.997, 0.990, 1.000);   /* likewise */
	admitted(&r[5], "f", 1.004, 0.999, 1.010);
	admitted(&r[6], "g", 0.990, 0.980, 1.001);
	refused(&r[7], "h", "noise");
	refused(&r[8], "i", "baseline_drift");
	refused(&r[9], "j", "noise");
	r[2].covers = 1;   /* recomputed from the interval, whatever it was */
	cr_assert_eq(atb_calibrate_summarize(r, 10, 0.95, &s, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(s.ntasks, 10);
	cr_assert_eq(s.nadmitted, 7);
	cr_assert_eq(s.ncovered, 6);
	cr_assert_eq(s.nrefused, 3);
	cr_assert_eq(r[2].covers, 0);
	cr_assert_eq(r[3].covers, 1);
	cr_assert_eq(r[4].covers, 1);
	cr_assert(close_to(s.admitted_rate, 0.7, 1e-12));
	/* Wilson at 95%, z = 1.959964: 7/10 and 6/7 by the closed form */
	cr_assert(close_to(s.admitted_lo, 0.396778, 1e-5), "%g", s.admitted_lo);
	cr_assert(close_to(s.admitted_hi, 0.892209, 1e-5), "%g", s.admitted_hi);
	cr_assert(s.has_coverage);
	cr_assert(close_to(s.coverage, 6.0 / 7.0, 1e-12));
	cr_assert(close_to(s.coverage_lo, 0.486872, 1e-5), "%g", s.coverage_lo);
	cr_assert(close_to(s.coverage_hi, 0.974320, 1e-5), "%g", s.coverage_hi);
	/* |s-1|: .001 .002 .033 0 .003 .004 .010 -> sorted 0 .001 .002 .003 .004 .010 .033 */
	cr_assert(s.has_dev);
	cr_assert(close_to(s.median_abs_dev, 0.003, 1e-12), "%g", s.median_abs_dev);
	cr_assert(close_to(s.max_abs_dev, 0.033, 1e-12));
	cr_assert(close_to(s.false_refusal_rate, 0.3, 1e-12));
	/* by reason, most frequent first */
	cr_assert_eq(s.nrefusals, 2);
	cr_assert_str_eq(s.refusals[0].reason, "noise");
	cr_assert_eq(s.refusals[0].count, 2);
	cr_assert(close_to(s.refusals[0].rate, 0.2, 1e-12));
	cr_assert_str_eq(s.refusals[1].reason, "baseline_drift");
	cr_assert_eq(s.refusals[1].count, 1);
}

/*
 * PROTO: stats.resolution_rel: the coverage is of the reported (widened)
 * intervals; the seeds' bootstrap intervals alone are counted beside it,
 * and a row without one counts its interval.
 */
Test(calibrate, summary_counts_the_bootstrap_intervals_alone)
{
	struct atb_calibrate_row r[4];
	struct atb_calibrate_summary s;
	struct atb_error err;

	admitted(&r[0], "a", 1.0014, 1.0003 / 1.002, 1.0026 * 1.002);  /* covers only widened */
	r[0].boot_low = 1.0003;
	r[0].boot_high = 1.0026;
	admitted(&r[1], "b", 0.9990, 0.9950 / 1.002, 1.0026 * 1.002);  /* covers both */
	r[1].boot_low = 0.9950;
	r[1].boot_high = 1.0026;
	admitted(&r[2], "c", 0.9990, 0.9950, 1.0026);  /* no bootstrap interval (v9): its own */
	refused(&r[3], "d", "noise");
	r[3].boot_low = 0.5;  /* a refused row never counts */
	r[3].boot_high = 2.0;
	cr_assert_eq(atb_calibrate_summarize(r, 4, 0.95, &s, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(s.nadmitted, 3);
	cr_assert_eq(s.ncovered, 3);
	cr_assert_eq(s.nboot_covered, 2);
	cr_assert_eq(r[0].covers, 1);
	cr_assert_eq(r[0].boot_covers, 0);
	cr_assert_eq(r[2].boot_low, 0.9950);
	cr_assert_eq(r[2].boot_covers, 1);
	cr_assert_eq(r[3].boot_covers, 0);
	cr_assert(close_to(s.boot_coverage, 2.0 / 3.0, 1e-12));
}

Test(calibrate, summary_even_median_and_empty)
{
	struct atb_calibrate_row r[4];
	struct atb_calibrate_summary s;
	struct atb_error err;

	admitted(&r[0], "a", 1.010, 1.0, 1.02);
	admitted(&r[1], "b", 0.996, 0.99, 1.0);
	admitted(&r[2], "c", 1.002, 1.0, 1.01);
	admitted(&r[3], "d", 0.980, 0.97, 0.99);
	cr_assert_eq(atb_calibrate_summarize(r, 4, 0.95, &s, &err), ATB_OK, "%s", err.msg);
	/* |s-1| sorted .002 .004 .010 .020: the mean of the middle two */
	cr_assert(close_to(s.median_abs_dev, 0.007, 1e-12), "%g", s.median_abs_dev);
	cr_assert_eq(s.ncovered, 3);
	cr_assert_eq(s.nrefusals, 0);

	cr_assert_eq(atb_calibrate_summarize(NULL, 0, 0.95, &s, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(s.ntasks, 0);
	cr_assert_eq(s.admitted_rate, 0.0);
	cr_assert_eq(s.admitted_lo, 0.0);
	cr_assert_eq(s.admitted_hi, 1.0);
	cr_assert_eq(s.has_coverage, 0);
	cr_assert_eq(s.has_dev, 0);
}

Test(calibrate, summary_all_refused)
{
	struct atb_calibrate_row r[3];
	struct atb_calibrate_summary s;
	struct atb_error err;

	refused(&r[0], "a", "timeout");
	refused(&r[1], "b", "static");
	refused(&r[2], "c", "");
	cr_assert_eq(atb_calibrate_summarize(r, 3, 0.95, &s, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(s.nadmitted, 0);
	cr_assert_eq(s.has_coverage, 0);
	cr_assert_eq(s.has_dev, 0);
	cr_assert(close_to(s.false_refusal_rate, 1.0, 1e-12));
	cr_assert_eq(s.nrefusals, 3);
	/* ties by name; an empty outcome is "unknown" */
	cr_assert_str_eq(s.refusals[0].reason, "static");
	cr_assert_str_eq(s.refusals[1].reason, "timeout");
	cr_assert_str_eq(s.refusals[2].reason, "unknown");
}

Test(calibrate, summary_other_reasons_are_bounded)
{
	struct atb_calibrate_row r[40];
	struct atb_calibrate_summary s;
	struct atb_error err;
	char why[32];
	size_t i, total = 0;

	for (i = 0; i < 40; i++) {
		snprintf(why, sizeof(why), "rejected:rule_%02zu", i);
		refused(&r[i], "t", why);
	}
	cr_assert_eq(atb_calibrate_summarize(r, 40, 0.95, &s, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(s.nrefusals, ATB_CALIBRATE_MAX_REASONS);
	/* 31 reasons of their own, the other 9 together, first by count */
	cr_assert_str_eq(s.refusals[0].reason, "other");
	cr_assert_eq(s.refusals[0].count, 40 - (ATB_CALIBRATE_MAX_REASONS - 1));
	for (i = 0; i < s.nrefusals; i++)
		total += s.refusals[i].count;
	cr_assert_eq(total, 40);
}

Test(calibrate, summary_refuses_bad_rows)
{
	struct atb_calibrate_row r[2];
	struct atb_calibrate_summary s;
	struct atb_error err;

	admitted(&r[0], "fine", 1.0, 0.99, 1.01);
	admitted(&r[1], "nan-task", NAN, 0.99, 1.01);
	cr_assert_eq(atb_calibrate_summarize(r, 2, 0.95, &s, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "'nan-task'"), "%s", err.msg);
	admitted(&r[1], "outside", 1.2, 0.99, 1.01);
	cr_assert_eq(atb_calibrate_summarize(r, 2, 0.95, &s, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "'outside'"), "%s", err.msg);
	cr_assert_eq(atb_calibrate_summarize(r, 1, 1.0, &s, &err), ATB_ERR_USAGE);
	cr_assert_eq(atb_calibrate_summarize(NULL, 2, 0.95, &s, &err), ATB_ERR_USAGE);
}

Test(calibrate, judge_targets)
{
	struct atb_calibrate_summary s;
	struct atb_calibrate_targets t = {ATB_CALIBRATE_MIN_ADMITTED, ATB_CALIBRATE_MIN_COVERAGE,
					  ATB_CALIBRATE_MAX_MEDIAN_DEV};
	struct atb_calibrate_verdict v;

	memset(&s, 0, sizeof(s));
	s.ntasks = 100;
	s.nadmitted = 98;
	s.admitted_rate = 0.98;
	s.has_coverage = 1;
	s.coverage = 0.95;
	s.has_dev = 1;
	s.median_abs_dev = 0.002;
	atb_calibrate_judge(&s, &t, &v);
	cr_assert(v.pass);
	cr_assert_str_eq(v.line, "pass: admitted 98.0% >= 98.0%, coverage 95.0% >= 90.0%, "
				 "median |speedup-1| 0.20% <= 0.30%");

	s.coverage = 4.0 / 9.0;   /* the t2220: 4 of 9 contain 1 */
	atb_calibrate_judge(&s, &t, &v);
	cr_assert_not(v.pass);
	cr_assert(v.admitted_ok && !v.coverage_ok && v.median_ok);
	cr_assert_str_eq(v.line, "fail: admitted 98.0% >= 98.0%, coverage 44.4% < 90.0%, "
				 "median |speedup-1| 0.20% <= 0.30%");

	t.min_coverage = -1;   /* not checked */
	atb_calibrate_judge(&s, &t, &v);
	cr_assert(v.pass);
	cr_assert_str_eq(v.line, "pass: admitted 98.0% >= 98.0%, median |speedup-1| 0.20% <= "
				 "0.30%");

	/* nothing admitted: coverage and median cannot meet a target */
	memset(&s, 0, sizeof(s));
	s.ntasks = 3;
	t.min_coverage = 0.9;
	atb_calibrate_judge(&s, &t, &v);
	cr_assert_not(v.pass);
	cr_assert(!v.admitted_ok && !v.coverage_ok && !v.median_ok);
	cr_assert(strstr(v.line, "coverage n/a (no copy admitted)"), "%s", v.line);

	t.min_admitted = t.min_coverage = t.max_median_dev = -1;
	atb_calibrate_judge(&s, &t, &v);
	cr_assert(v.pass);
	cr_assert_str_eq(v.line, "pass: no target checked");
}

Test(calibrate, torch_copy_renames_model_as_a_word)
{
	const char *src = "import torch\n"
			  "class Model(torch.nn.Module):\n"
			  "    \"\"\"Model: y = x (not MyModel, Model2 or ModelNew).\"\"\"\n"
			  "    def __init__(self):\n"
			  "        super(Model, self).__init__()\n"
			  "        self.model = None\n";
	const char *want = "import torch\n"
			   "class ModelNew(torch.nn.Module):\n"
			   "    \"\"\"ModelNew: y = x (not MyModel, Model2 or ModelNew).\"\"\"\n"
			   "    def __init__(self):\n"
			   "        super(ModelNew, self).__init__()\n"
			   "        self.model = None\n";
	struct atb_error err;
	char *out = NULL;
	size_t n = 0;

	cr_assert_eq(atb_calibrate_torch_copy(src, &out, &n, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(out, want);
	cr_assert_eq(n, 3);
	atb_free(out);

	cr_assert_eq(atb_calibrate_torch_copy("class ModelNew:\n    pass\n", &out, &n, &err),
		     ATB_ERR_USAGE);
	cr_assert_null(out);
	cr_assert(strstr(err.msg, "no 'class Model'"), "%s", err.msg);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	cr_assert(f, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	cr_assert(buf);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static char *temp_dir(void)
{
	static char dir[] = "/tmp/u-calibrate.XXXXXX";

	snprintf(dir, sizeof(dir), "/tmp/u-calibrate.XXXXXX");
	cr_assert(mkdtemp(dir));
	return dir;
}

Test(calibrate, kernel_copy_is_the_baseline_under_the_surface_name)
{
	struct atb_task *t = NULL;
	struct atb_error err;
	char path[512], *dir = temp_dir(), *got, *want;

	cr_assert_eq(atb_task_load(ATB_SOURCE_DIR "/tests/fixtures/cheats/tasks/relu-spin", &t,
				   &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_calibrate_kernel_copy(t, dir, &err), ATB_OK, "%s", err.msg);
	snprintf(path, sizeof(path), "%s/kernel.c", dir);
	got = slurp(path);
	want = slurp(t->baseline.path);
	cr_assert_str_eq(got, want);
	free(got);
	free(want);
	unlink(path);
	rmdir(dir);
	atb_task_free(t);
}

Test(calibrate, kernel_copy_inlines_local_includes)
{
	struct atb_task *t = NULL;
	struct atb_error err;
	char path[512], *dir = temp_dir(), *got, *common;

	cr_assert_eq(atb_task_load(ATB_SOURCE_DIR "/tasks/cuda_merge_attn_states", &t, &err),
		     ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_calibrate_kernel_copy(t, dir, &err), ATB_OK, "%s", err.msg);
	snprintf(path, sizeof(path), "%s/%s", dir, t->surface[0]);
	got = slurp(path);
	common = slurp(ATB_SOURCE_DIR "/tasks/cuda_merge_attn_states/common.cuh");
	cr_assert_null(strstr(got, "#include \"common.cuh\""), "%s", got);
	cr_assert(strstr(got, common), "the copy does not hold common.cuh");
	/* a header that is not beside the baseline stays an include */
	cr_assert(strstr(got, "#include \"atb/kernel.h\""));
	free(got);
	free(common);
	unlink(path);
	rmdir(dir);
	atb_task_free(t);
}
