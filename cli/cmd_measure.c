/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb measure: one candidate through every gate, against the honest
 * baseline, into the store.  Parses options, opens the store, syncs the
 * frozen protocols, probes and registers the box, then calls
 * atb_measure_candidate (atb/measure.h) and prints its outcome.
 */
#define _GNU_SOURCE  /* mkdtemp */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "atb/box.h"
#include "atb/measure.h"
#include "atb/protocol.h"
#include "atb/runner.h"
#include "atb/store.h"
#include "atb/task.h"
#include "cli.h"
#include "banned.h"

static const char measure_help[] =
	"usage: atb measure TASK CANDIDATE_DIR [--knob NAME=VALUE]... [--cflags STR]\n"
	"                   [--seeds N] [--seed-base S] [--naive | --no-naive]\n"
	"                   [--work-dir DIR] [--json]\n"
	"       atb measure TASK.py CANDIDATE.py|CANDIDATE_DIR [--python PATH]\n"
	"                   [--device auto|cpu|cuda] [--baseline eager|compile]\n"
	"                   [--seeds N] [--seed-base S] ...\n"
	"\n"
	"Measure one candidate against the task's honest baseline on this box,\n"
	"on the CPU or, for a task of kind cuda, on GPU 0 (needs nvcc and a driver),\n"
	"under the current frozen protocol, and record the outcome in the store\n"
	"(--db PATH, $ATB_DB or ./atb.db; created if absent).  TASK is a bundled\n"
	"task name or a task folder; CANDIDATE_DIR holds only the task's surface\n"
	"files (see 'atb task show TASK').\n"
	"\n"
	"A KernelBench-format task (TASK.py: class Model, get_inputs(),\n"
	"get_init_inputs()) is of kind torch (docs/torch.md): the honest baseline\n"
	"is its Model in PyTorch eager, the candidate a file defining class ModelNew\n"
	"(CANDIDATE.py, copied as model_new.py, or a folder holding only\n"
	"model_new.py).  Both run in atb-runner's embedded python (the interpreter\n"
	"that has PyTorch: --python, else $ATB_PYTHON, else python3 on PATH), built\n"
	"under the same seed; inputs come from get_inputs() under each seed plus\n"
	"the protocol's adversarial variants of every floating tensor.  Nothing is\n"
	"built and the physical floor is unknown (0); every other gate applies.\n"
	"\n"
	"Builds and runners are sandboxed (docs/sandbox.md): bubblewrap and a\n"
	"seccomp filter show them only the system, their own inputs and a scratch\n"
	"folder (no store, no ATB_HOME, no task folder, no network), and end\n"
	"every process they start.  $ATB_SANDBOX: auto (the default: the strongest\n"
	"level this machine allows), require (refuse below the full level), off.\n"
	"A runner job may have 4096 tasks at once ($ATB_SANDBOX_MAX_TASKS), held\n"
	"by a pids cgroup of its own where one can be made (root: RLIMIT_NPROC\n"
	"does not bind uid 0); a job that reaches it is refused (gate runner,\n"
	"process_limit).  What was enforced is stored with the result (stats\n"
	"runner.sandbox).  A cpu task's arms run as the protocol's\n"
	"timing.isolation says: process (version 11 on) runs each arm in a worker\n"
	"process of its own, stopped outside its own timed trials, so no\n"
	"candidate code shares the runner's address space (its clock, samples\n"
	"and checks; docs/internals/runner.md, \"Arm workers\"); none loads\n"
	"every arm into the runner.  $ATB_ISOLATION=process|none overrides it\n"
	"(debugging); the stats say which ran (runner.isolation).  With workers,\n"
	"timing.round_trip times an empty call to a worker that loads nothing,\n"
	"as an arm's trial is timed, in every round, and takes the group's\n"
	"median of them (version 13; a low quantile in version 12) out of every\n"
	"trial, so the workers' round trip does not pull a speedup toward 1;\n"
	"version 13 puts the empty call right after the baseline's call (never\n"
	"after a candidate's), and refuses as noise a group it leaves more than a\n"
	"quarter of an arm's trials at or under 0 ns (a kernel too short to time\n"
	"from another process).  $ATB_ROUND_TRIP=none|time|subtract overrides it\n"
	"(runner.round_trip; the samples events say what was taken out).  An\n"
	"override is reported as a deviation (a line in the output,\n"
	"deviation in --json with isolation and round_trip, a warning on stderr).\n"
	"\n"
	"Every number takes one path (docs/measure.md):\n"
	"  surface         the folder holds only regular files named in the task's\n"
	"                  surface (no symlink, subfolder or other name); the\n"
	"                  protocol folder, the task folder, atb-runner and the\n"
	"                  built baseline objects are hashed before and after every\n"
	"                  runner: any change rejects the candidate\n"
	"  build           baseline, naive and candidate with the protocol's flags\n"
	"                  (the knobs as -D macros); the compiler log is kept\n"
	"  runner          the paired arms in fresh atb-runners: correctness on\n"
	"                  every parameter set, the task's inputs and the protocol's\n"
	"                  adversarial ones, then baseline and candidate (and the\n"
	"                  naive baseline) interleaved on the paired seeds; a\n"
	"                  crash, timeout or garbled output rejects\n"
	"  correctness, input_mutation, result_reuse   from the runner's facts\n"
	"  output_aliasing (cuda) an output's device range overlaps another buffer\n"
	"  side_stream     (cuda) the device was still busy with the candidate's\n"
	"                  work after its timed window: work on another stream\n"
	"  clock           each timed group's span by the runner's clock (from its\n"
	"                  timed_begin marker to its samples) against the span\n"
	"                  atb saw between the two events, and the sums of a side's\n"
	"                  groups: apart by more than 1% + 25 ms, or trials adding up\n"
	"                  to more than the span, and the runner's clock was forged\n"
	"  hang            the runner sent no event (it sends progress while it\n"
	"                  works) for longer than max(20 s, 10x its longest silence;\n"
	"                  120 s until the candidate's first call returned): killed\n"
	"                  then (PROTO: gates.hang), not at timing.job_timeout_s\n"
	"  background      (cpu) other threads' and processes' CPU time beside a\n"
	"                  timed group above 2% of its wall time + 20 ms (a thread\n"
	"                  or process burning CPU during the baseline's calls;\n"
	"                  PROTO: gates.background)\n"
	"  tamper          (torch) the candidate changed what the reference runs\n"
	"                  on in their shared interpreter (a torch function, a\n"
	"                  global hook, a backend flag, the task's globals):\n"
	"                  checked after its import and construction, after each\n"
	"                  input set, around each seed's timing and before\n"
	"                  random timed trials\n"
	"  physical_floor  a per-seed median below margin x (bytes/bandwidth or\n"
	"                  flops/peak) is impossible; bandwidth and peak are\n"
	"                  measured once per box and cached in the store (on the\n"
	"                  GPU: a device-to-device copy and cuBLAS GEMMs in fp32,\n"
	"                  fp16 and bf16; without cuBLAS only the bytes term).  On\n"
	"                  the CPU a candidate that beats the floor from cached caps\n"
	"                  makes atb measure the caps again, longer (they only go\n"
	"                  up; the raised ones are stored for the box), once per\n"
	"                  measurement: only a candidate that still beats the new\n"
	"                  floor is refused; both floors are in the output\n"
	"                  (floor_cached_ns, floor_ns, floor_remeasured)\n"
	"  timed_correctness  outputs wrong after timed calls: between timed rounds\n"
	"                  the runner changes a few input elements and poisons the\n"
	"                  outputs again, and on rounds drawn from a per-job key\n"
	"                  compares the candidate's outputs with the baseline's of\n"
	"                  the same round (work skipped or cached while timed)\n"
	"  baseline_drift  the baseline is also timed alone, in runners that never\n"
	"                  load the candidate (a byte copy of the baseline, the\n"
	"                  'twin', runs in the candidate's slot, so the work is the\n"
	"                  same; torch: the task file itself, a second Model, and\n"
	"                  no correctness phase).  cpu: one fresh runner per seed\n"
	"                  and side, in the order P A, A P, P A, ... (P paired, A\n"
	"                  alone); cuda and torch: one runner per side covering\n"
	"                  every seed (P A).\n"
	"                  Per seed q = baseline median beside / alone; the drift\n"
	"                  ratio is the median of q over seeds and must lie within\n"
	"                  1 +/- the protocol's tolerance (0.05).  Outside it the\n"
	"                  whole measurement is re-run (at most 2 more times); then\n"
	"                  every q outside on the same side is baseline_drift (the\n"
	"                  candidate changes its baseline), seeds that disagree are\n"
	"                  noise (the box is too noisy to judge drift)\n"
	"  noise           cross-run cv over the protocol's cap, or (cuda) more\n"
	"                  than 10% of the timed trials throttled (NVML): the\n"
	"                  measurement is re-run up to 2 more times, then rejected\n"
	"  anomaly_breaker a speedup >= 10x is quarantined for 'atb review'\n"
	"\n"
	"options:\n"
	"  --knob NAME=VALUE  a knob value (repeatable); others keep their default\n"
	"                     (the first declared value); undeclared values are refused\n"
	"  --cflags STR       one of the task's flag choices (default: the first)\n"
	"  --seeds N          paired seeds, 2 to 1024 (default: the protocol's\n"
	"                     stats.min_paired_seeds, 8 in v1-v3); fewer than that\n"
	"                     are measured and gated (a refusal is recorded as usual)\n"
	"                     but the store does not admit the result\n"
	"  --seed-base S      seeds are S, S+1, ... (default 1)\n"
	"  --naive            also time the naive baseline, reported labelled beside\n"
	"                     the honest speedup, never instead (the default when the\n"
	"                     task has one)\n"
	"  --no-naive         do not\n"
	"  --work-dir DIR     keep builds under DIR (default: a temporary folder,\n"
	"                     removed afterwards)\n"
	"  --label TEXT       the candidate's name in the store (default: folder + knobs)\n"
	"  --python PATH      (torch) the interpreter that has PyTorch\n"
	"  --device D         (torch) auto (the default: GPU 0 when a CUDA driver and\n"
	"                     torch.cuda are there, else the CPU), cpu or cuda; sets\n"
	"                     $ATB_TORCH_DEVICE for the runner job.  On cuda the\n"
	"                     inputs are born on the GPU where the task allows (same\n"
	"                     seed and distribution, not the same numbers as on the\n"
	"                     CPU; inputs_on in --json says which, docs/torch.md)\n"
	"  --baseline B       (torch) eager (the default): the speedup over the task's\n"
	"                     Model in PyTorch eager; compile: also time\n"
	"                     torch.compile(Model) (same seeded weights, mode\n"
	"                     default) as a third arm in the same interleaved rounds\n"
	"                     of the paired runner, reported labelled beside the\n"
	"                     honest speedup, never instead.  Its first call (the\n"
	"                     compilation) runs before any check or timed trial\n"
	"                     and is reported as compile_s, not timed; its outputs\n"
	"                     are checked against eager with the protocol's\n"
	"                     tolerances.  A model that does not compile or\n"
	"                     differs gets no compile speedup, with the reason in\n"
	"                     the note and the result's stats.compile; the\n"
	"                     candidate's verdict is not affected\n"
	"  --json             the outcome as JSON (also 'atb --json measure ...')\n"
	"  -h, --help         this text\n"
	"\n"
	"output: the verdict (admitted, quarantined or rejected), the speedup over\n"
	"the honest baseline with its confidence interval, the speedup over the\n"
	"naive baseline (labelled), the speedup over torch.compile (labelled, with\n"
	"--baseline compile), the Wilcoxon p-value, the cross-run cv, the\n"
	"result or rejection id; when rejected, the gate and the reason; the\n"
	"medians, the drift ratio, the physical floor and whether it was\n"
	"re-measured.  Progress\n"
	"goes to stderr.\n"
	"\n"
	"exit codes: 0 admitted or quarantined; 2 rejected by a gate, or bad usage,\n"
	"no such task, knobs the task does not declare, a cuda task on a box with\n"
	"no CUDA driver (nothing stored); 3 runtime failure (store,\n"
	"i/o, no atb-runner); 4 internal error\n";

static void on_progress(void *ctx, const struct atb_measure_progress *d)
{
	(void)ctx;
	if (d->attempt > 1 && !d->rerun_why)
		fprintf(stderr, "atb measure: %s (attempt %d of %d)\n", d->phase, d->attempt,
			d->max_attempts);
	else
		fprintf(stderr, "atb measure: %s\n", d->phase);
}

/*
 * A refusal's figures, as far as the measurement got: what the gate judged
 * is then on the screen, not only in --json or the store.
 */
static void print_refusal_numbers(const struct atb_task *task, const struct atb_measure_outcome *o)
{
	if (o->baseline_median_ns > 0) {
		printf("  medians         baseline %.0f ns, candidate %.0f ns", o->baseline_median_ns,
		       o->candidate_median_ns);
		if (o->naive_median_ns > 0)
			printf(", naive %.0f ns", o->naive_median_ns);
		if (o->baseline_alone_median_ns > 0)
			printf(", baseline alone %.0f ns", o->baseline_alone_median_ns);
		printf(" (medians over %zu seeds)\n", o->nseeds);
	}
	if (o->seed_speedup_max > 0)
		printf("  per seed        speedups %.4g to %.4g\n", o->seed_speedup_min,
		       o->seed_speedup_max);
	if (o->cv > 0)
		printf("  cv              %.4f (cap %.3g)\n", o->cv, o->cv_cap);
	if (o->drift_ratio > 0)
		printf("  drift           %.4f beside / alone (band 1 +/- %.3g), per seed %.4g to "
		       "%.4g, spread %.4f\n", o->drift_ratio, o->drift_tolerance, o->drift_min,
		       o->drift_max, o->drift_spread);
	if (o->floor_ns > 0 && !strcmp(o->gate, ATB_GATE_PHYSICAL_FLOOR))
		printf("  floor           %.0f ns%s\n", o->floor_ns,
		       o->floor_remeasured ? " (re-measured)" : "");
	if (task->kind && !strcmp(task->kind, "cuda") && o->attempts > 0)
		printf("  throttled       %.1f%% of timed trials (at most 10%%)\n",
		       100 * o->throttled_share);
	if (o->attempts > 0)
		printf("  runs            %d of at most 3\n", o->attempts);
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-')
		return -1;
	*out = v;
	return 0;
}

/* The real bounds of --seeds, with the protocol's minimum for a stored result. */
static int seeds_error(const char *v)
{
	struct atb_protocol *p = NULL;
	struct atb_error err;
	long long min = -1;

	atb_error_clear(&err);
	if (!atb_protocol_load_current(atb_home(), &p, &err))
		min = (long long)p->stats.min_paired_seeds;
	atb_protocol_free(p);
	if (min < 0)
		return cli_usage_error("measure", "--seeds must be an integer from 2 to %d, not "
				       "'%s'; fewer than the protocol's stats.min_paired_seeds are "
				       "measured and gated but the store does not admit the result",
				       ATB_RUNNER_MAX_SEEDS, v);
	return cli_usage_error("measure", "--seeds must be an integer from 2 to %d, not '%s'; "
			       "from 2 to %lld the candidate is measured and gated (a refusal "
			       "is recorded) but the store does not admit the result: %lld "
			       "(stats.min_paired_seeds, the default) or more for a verdict",
			       ATB_RUNNER_MAX_SEEDS, v, min - 1, min);
}

static void remove_tree(const char *path)
{
	struct dirent *de;
	char sub[4096];
	DIR *d = opendir(path);

	if (!d) {
		unlink(path);
		return;
	}
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
		if (de->d_type == DT_DIR)
			remove_tree(sub);
		else
			unlink(sub);
	}
	closedir(d);
	rmdir(path);
}

/*
 * A KernelBench candidate given as a file: copy it as model_new.py into a
 * new folder under /tmp (the candidate's surface is that one file).
 * 0, or -1 with errno's text in why.
 */
static int candidate_folder(const char *file, char *dir, size_t size, char *why, size_t wsize)
{
	char path[4200], buf[65536];
	FILE *in, *out;
	size_t n;
	int rc = 0;

	snprintf(dir, size, "/tmp/atb-candidate.XXXXXX");
	if (!mkdtemp(dir)) {
		snprintf(why, wsize, "cannot create a candidate folder: %s", strerror(errno));
		return -1;
	}
	snprintf(path, sizeof(path), "%s/model_new.py", dir);
	in = fopen(file, "rb");
	out = in ? fopen(path, "wb") : NULL;
	if (!in || !out) {
		snprintf(why, wsize, "cannot copy candidate '%s': %s", file, strerror(errno));
		rc = -1;
	}
	while (!rc && (n = fread(buf, 1, sizeof(buf), in)) > 0)
		if (fwrite(buf, 1, n, out) != n) {
			snprintf(why, wsize, "cannot copy candidate '%s': %s", file, strerror(errno));
			rc = -1;
		}
	if (in)
		fclose(in);
	if (out && fclose(out) && !rc) {
		snprintf(why, wsize, "cannot copy candidate '%s': %s", file, strerror(errno));
		rc = -1;
	}
	if (rc)
		remove_tree(dir);
	return rc;
}

static json_t *jnum(double x)
{
	return x == x ? json_real(x) : json_null();
}

static int print_outcome(const struct atb_task *task, const struct atb_measure_outcome *o,
			 int json, json_t *extra)
{
	if (json) {
		json_t *v = json_object();
		char *s;

		if (extra)
			json_object_update(v, extra);

		json_object_set_new(v, "verdict", json_string(atb_measure_verdict_name(o->verdict)));
		json_object_set_new(v, "task", json_string(task->name));
		json_object_set_new(v, "job_uuid", json_string(o->job_uuid));
		json_object_set_new(v, "gate", o->gate[0] ? json_string(o->gate) : json_null());
		json_object_set_new(v, "status", json_string(atb_status_name(o->status)));
		json_object_set_new(v, "reason", o->reason[0] ? json_string(o->reason) : json_null());
		json_object_set_new(v, "note", o->note[0] ? json_string(o->note) : json_null());
		json_object_set_new(v, "result_id", o->result_id ? json_integer(o->result_id)
								  : json_null());
		json_object_set_new(v, "rejection_id", o->rejection_id ? json_integer(o->rejection_id)
									: json_null());
		json_object_set_new(v, "seeds", json_integer((json_int_t)o->nseeds));
		json_object_set_new(v, "attempts", json_integer(o->attempts));
		if (o->result_id) {
			json_object_set_new(v, "speedup", jnum(o->speedup));
			json_object_set_new(v, "ci_low", jnum(o->ci_low));
			json_object_set_new(v, "ci_high", jnum(o->ci_high));
			json_object_set_new(v, "p_value", jnum(o->p_value));
			json_object_set_new(v, "mde", jnum(o->mde));
			json_object_set_new(v, "cv", jnum(o->cv));
			if (o->naive_speedup > 0)
				json_object_set_new(v, "naive",
						    json_pack("{s:o, s:o, s:o, s:s}", "speedup",
							      jnum(o->naive_speedup), "ci_low",
							      jnum(o->naive_ci_low), "ci_high",
							      jnum(o->naive_ci_high), "label",
							      task->naive.label));
			else
				json_object_set_new(v, "naive", json_null());
		}
		if (o->compile_mode[0])
			json_object_set_new(
				v, "compile",
				json_pack("{s:o, s:o, s:o, s:o, s:o, s:s, s:o}", "speedup",
					  o->compile_measured ? jnum(o->compile_speedup) : json_null(),
					  "ci_low",
					  o->compile_measured ? jnum(o->compile_ci_low) : json_null(),
					  "ci_high",
					  o->compile_measured ? jnum(o->compile_ci_high) : json_null(),
					  "median_ns",
					  o->compile_measured ? jnum(o->compile_median_ns) : json_null(),
					  "compile_s", o->compile_s > 0 ? jnum(o->compile_s) : json_null(),
					  "mode", o->compile_mode, "why",
					  o->compile_why[0] ? json_string(o->compile_why) : json_null()));
		if (o->inputs_on[0])
			json_object_set_new(v, "inputs_on", json_string(o->inputs_on));
		if (task->kind && !strcmp(task->kind, ATB_TASK_KIND_TORCH)) {
			/* the static checker's finding kinds, refusing or not */
			json_t *f = json_array();
			const char *p = o->findings;

			while (f && *p) {
				size_t n = strcspn(p, ",");

				json_array_append_new(f, json_stringn(p, n));
				p += n + (p[n] == ',');
			}
			json_object_set_new(v, "findings", f ? f : json_null());
			json_object_set_new(v, "output_bytes",
					    o->output_bytes >= 0 ? json_integer(o->output_bytes)
								 : json_null());
			json_object_set_new(v, "floor_allowance_bytes",
					    json_integer(o->floor_allowance_bytes));
		}
		json_object_set_new(v, "baseline_median_ns", jnum(o->baseline_median_ns));
		json_object_set_new(v, "candidate_median_ns", jnum(o->candidate_median_ns));
		json_object_set_new(v, "naive_median_ns", jnum(o->naive_median_ns));
		json_object_set_new(v, "baseline_alone_median_ns", jnum(o->baseline_alone_median_ns));
		json_object_set_new(v, "drift_ratio", jnum(o->drift_ratio));
		json_object_set_new(v, "cv_cap", jnum(o->cv_cap));
		if (o->verdict == ATB_MEASURE_REJECTED)
			json_object_set_new(v, "cv", o->cv > 0 ? jnum(o->cv) : json_null());
		json_object_set_new(v, "seed_speedup_min", jnum(o->seed_speedup_min));
		json_object_set_new(v, "seed_speedup_max", jnum(o->seed_speedup_max));
		json_object_set_new(v, "drift_min", jnum(o->drift_min));
		json_object_set_new(v, "drift_max", jnum(o->drift_max));
		json_object_set_new(v, "drift_spread", jnum(o->drift_spread));
		if (task->kind && !strcmp(task->kind, "cuda"))
			json_object_set_new(v, "throttled_share", jnum(o->throttled_share));
		json_object_set_new(v, "floor_ns", jnum(o->floor_ns));
		json_object_set_new(v, "floor_remeasured", json_boolean(o->floor_remeasured));
		if (o->floor_remeasured)
			json_object_set_new(v, "floor_cached_ns", jnum(o->floor_cached_ns));
		/* PROTO: timing.isolation, timing.round_trip -- as run, and any override */
		json_object_set_new(v, "isolation",
				    o->isolation[0] ? json_string(o->isolation) : json_null());
		json_object_set_new(v, "round_trip",
				    o->round_trip[0] ? json_string(o->round_trip) : json_null());
		json_object_set_new(v, "deviation",
				    o->deviation[0] ? json_string(o->deviation) : json_null());
		json_object_set_new(v, "build_s", jnum(o->build_s));
		json_object_set_new(v, "run_s", jnum(o->run_s));
		s = json_dumps(v, JSON_SORT_KEYS | JSON_INDENT(2));
		json_decref(v);
		if (!s)
			return CLI_RUNTIME;
		printf("%s\n", s);
		atb_free(s);
	} else {
		printf("%s: %s\n", atb_measure_verdict_name(o->verdict), task->name);
		printf("  job             %s\n", o->job_uuid);
		if (o->deviation[0])
			printf("  deviation       %s\n", o->deviation);
		if (o->verdict == ATB_MEASURE_REJECTED) {
			printf("  gate            %s\n", o->gate);
			printf("  reason          %s\n", o->reason);
			printf("  rejection       #%" PRId64 "\n", o->rejection_id);
			print_refusal_numbers(task, o);
		} else {
			printf("  speedup         %.4fx vs the honest baseline (%s), %s CI "
			       "[%.4f, %.4f]\n",
			       o->speedup, task->baseline.label, "95%", o->ci_low, o->ci_high);
			if (o->naive_speedup > 0)
				printf("  naive speedup   %.4fx vs the naive baseline (labelled '%s'), "
				       "CI [%.4f, %.4f]\n",
				       o->naive_speedup, task->naive.label, o->naive_ci_low,
				       o->naive_ci_high);
			if (o->compile_measured)
				printf("  vs compile      %.4fx vs torch.compile(Model) (mode %s, "
				       "labelled), CI [%.4f, %.4f]; compiled median %.0f ns, "
				       "compilation %.1f s (not timed)\n",
				       o->compile_speedup, o->compile_mode, o->compile_ci_low,
				       o->compile_ci_high, o->compile_median_ns, o->compile_s);
			else if (o->compile_mode[0])
				printf("  vs compile      n/a: %s\n", o->compile_why);
			printf("  p-value         %.4g (Wilcoxon, %zu paired seeds), MDE %.4fx\n",
			       o->p_value, o->nseeds, o->mde);
			printf("  cv              %.4f (runs: %d)\n", o->cv, o->attempts);
			printf("  medians         baseline %.0f ns, candidate %.0f ns, baseline alone "
			       "%.0f ns (drift %.4f), floor %.0f ns\n",
			       o->baseline_median_ns, o->candidate_median_ns,
			       o->baseline_alone_median_ns, o->drift_ratio, o->floor_ns);
			if (o->floor_remeasured)
				printf("  floor           re-measured: %.0f ns from the cached caps, "
				       "%.0f ns after\n",
				       o->floor_cached_ns, o->floor_ns);
			if (task->kind && !strcmp(task->kind, "cuda"))
				printf("  throttled       %.1f%% of timed trials (at most 10%%)\n",
				       100 * o->throttled_share);
			printf("  result          #%" PRId64 "%s\n", o->result_id,
			       o->verdict == ATB_MEASURE_QUARANTINED ? " (quarantined: see 'atb review')"
								     : "");
			if (o->reason[0])
				printf("  reason          %s\n", o->reason);
		}
		if (o->findings[0])
			printf("  static          findings: %s (docs/torch.md, \"Static checks\")\n",
			       o->findings);
		if (o->note[0])
			printf("  note            %s\n", o->note);
	}
	return o->verdict == ATB_MEASURE_REJECTED ? CLI_USAGE : CLI_OK;
}

int cmd_measure(int argc, char **argv, struct cli_ctx *ctx)
{
	return cli_measure(argc, argv, ctx, NULL);
}

int cli_measure(int argc, char **argv, struct cli_ctx *ctx, const struct cli_measure_hook *h)
{
	struct atb_measure_opts opts;
	struct atb_measure_outcome out;
	struct atb_knob_assignment knobs;
	struct atb_frozen_protocol *list = NULL;
	struct atb_protocol *p = NULL;
	struct atb_task *task = NULL;
	struct atb_store *s = NULL;
	struct atb_box *box = NULL;
	struct atb_error err;
	const char *pos[2] = {NULL, NULL}, *work_dir = NULL, *cflags = NULL, *label = NULL;
	const char *python = NULL, *device = NULL, *cand = NULL;
	char cand_dir[64] = "", why[600];
	struct stat sb;
	const char *knob_args[64];
	size_t nknob_args = 0, npos = 0, nlist = 0, i, k, n;
	char tmpdir[] = "/tmp/atb-measure.XXXXXX";
	int json = ctx->json, naive = -1, cur = 0, rc, made_tmp = 0, compile = 0;
	uint64_t seeds = 0, seed_base = 1;
	enum atb_status st;
	json_t *extra = NULL;

	if (cli_wants_help(argc, argv)) {
		fputs(h && h->help ? h->help : measure_help, stdout);
		return CLI_OK;
	}
	if (h && h->json)
		json = 1;
	for (i = 1; i < (size_t)argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--json"))
			json = 1;
		else if (!strcmp(a, "--naive"))
			naive = 1;
		else if (!strcmp(a, "--no-naive"))
			naive = 0;
		else if (!strcmp(a, "--knob") && i + 1 < (size_t)argc) {
			if (nknob_args == 64)
				return cli_usage_error("measure", "too many --knob options");
			knob_args[nknob_args++] = argv[++i];
		} else if (!strcmp(a, "--cflags") && i + 1 < (size_t)argc)
			cflags = argv[++i];
		else if (!strcmp(a, "--work-dir") && i + 1 < (size_t)argc)
			work_dir = argv[++i];
		else if (!strcmp(a, "--label") && i + 1 < (size_t)argc)
			label = argv[++i];
		else if (!strcmp(a, "--baseline") && i + 1 < (size_t)argc) {
			const char *b = argv[++i];

			if (strcmp(b, "eager") && strcmp(b, "compile"))
				return cli_usage_error("measure", "--baseline must be eager or "
						       "compile, not '%s'", b);
			compile = !strcmp(b, "compile");
		} else if (!strcmp(a, "--python") && i + 1 < (size_t)argc)
			python = argv[++i];
		else if (!strcmp(a, "--device") && i + 1 < (size_t)argc) {
			device = argv[++i];
			if (strcmp(device, "auto") && strcmp(device, "cpu") && strcmp(device, "cuda"))
				return cli_usage_error("measure", "--device must be auto, cpu or cuda, "
						       "not '%s'", device);
		}
		else if (!strcmp(a, "--seeds") && i + 1 < (size_t)argc) {
			if (parse_u64(argv[++i], &seeds) || seeds < 2 || seeds > ATB_RUNNER_MAX_SEEDS)
				return seeds_error(argv[i]);
		} else if (!strcmp(a, "--seed-base") && i + 1 < (size_t)argc) {
			if (parse_u64(argv[++i], &seed_base))
				return cli_usage_error("measure", "--seed-base must be an integer >= 0, not '%s'",
						       argv[i]);
		} else if (a[0] == '-' && a[1])
			return cli_usage_error("measure", "unknown option '%s'", a);
		else if (npos < 2)
			pos[npos++] = a;
		else
			return cli_usage_error("measure", "unexpected argument '%s'", a);
	}
	if (npos != 2)
		return cli_usage_error("measure", "expected TASK and CANDIDATE_DIR");

	atb_error_clear(&err);
	n = strlen(pos[0]);
	if (n > 3 && !strcmp(pos[0] + n - 3, ".py")) {
		if (atb_task_load_kernelbench(pos[0], python, &task, &err))
			return cli_fail(&err);
	} else if (atb_task_open(atb_home(), pos[0], &task, &err)) {
		return cli_fail(&err);
	}
	if (((task->kind && !strcmp(task->kind, "cuda")) || (device && !strcmp(device, "cuda"))) &&
	    (rc = cli_need_cuda_driver("measure", task->kind && !strcmp(task->kind, "cuda")
							  ? "a task of kind cuda" : "--device cuda"))) {
		atb_task_free(task);
		return rc;
	}
	if (device)
		setenv("ATB_TORCH_DEVICE", device, 1);
	atb_task_default_knobs(task, &knobs);
	for (i = 0; i < nknob_args; i++) {
		const char *eq = strchr(knob_args[i], '=');
		int found = 0;

		if (!eq || eq == knob_args[i]) {
			atb_task_free(task);
			return cli_usage_error("measure", "--knob wants NAME=VALUE, not '%s'", knob_args[i]);
		}
		for (k = 0; k < knobs.n; k++)
			if (strlen(knobs.knobs[k].name) == (size_t)(eq - knob_args[i]) &&
			    !strncmp(knobs.knobs[k].name, knob_args[i], (size_t)(eq - knob_args[i]))) {
				snprintf(knobs.knobs[k].value, sizeof(knobs.knobs[k].value), "%s", eq + 1);
				found = 1;
			}
		if (!found) {
			char names[400] = "";
			size_t used = 0;

			for (k = 0; k < task->nknobs && used < sizeof(names); k++)
				used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s",
							 k ? ", " : "", task->knobs[k].name);
			rc = cli_usage_error("measure", "task '%s' has no knob '%.*s' (its knobs: %s)",
					     pos[0], (int)(eq - knob_args[i]), knob_args[i],
					     task->nknobs ? names : "none");
			atb_task_free(task);
			return rc;
		}
	}
	if (cflags)
		snprintf(knobs.cflags, sizeof(knobs.cflags), "%s", cflags);
	if (atb_task_check_knobs(task, &knobs, &err)) {
		atb_task_free(task);
		return cli_fail(&err);
	}

	if (compile && strcmp(task->kind, ATB_TASK_KIND_TORCH)) {
		rc = cli_usage_error("measure", "--baseline compile is for KernelBench-format "
				     "(torch) tasks, not task '%s' of kind %s", task->name,
				     task->kind);
		atb_task_free(task);
		return rc;
	}
	/* A typo is bad input, refused before the store exists or is written
	   (nothing to audit); a symlink or a stray file inside the folder is a
	   candidate's doing, refused by the surface gate and recorded. */
	if (lstat(pos[1], &sb)) {
		rc = cli_usage_error("measure", "the candidate folder '%s' cannot be read: %s "
				     "(CANDIDATE_DIR holds the task's surface files, see "
				     "'atb task show %s')", pos[1], strerror(errno), pos[0]);
		atb_task_free(task);
		return rc;
	}
	if (S_ISREG(sb.st_mode) && strcmp(task->kind, ATB_TASK_KIND_TORCH)) {
		rc = cli_usage_error("measure", "the candidate '%s' is a file, but task '%s' of "
				     "kind %s wants a folder holding its surface files (see "
				     "'atb task show %s')", pos[1], task->name, task->kind, pos[0]);
		atb_task_free(task);
		return rc;
	}
	cand = pos[1];
	if (!strcmp(task->kind, ATB_TASK_KIND_TORCH) && !stat(pos[1], &sb) && S_ISREG(sb.st_mode)) {
		if (candidate_folder(pos[1], cand_dir, sizeof(cand_dir), why, sizeof(why))) {
			atb_task_free(task);
			atb_error_set(&err, ATB_ERR_IO, "%s", why);
			return cli_fail(&err);
		}
		cand = cand_dir;
		if (!label)
			label = pos[1];
	}
	st = atb_protocol_frozen_list(atb_home(), &list, &nlist, &cur, &err);
	if (!st)
		st = atb_protocol_load_current(atb_home(), &p, &err);
	if (!st)
		st = atb_store_open(ctx->db_path, ATB_STORE_CREATE, &s, &err);
	if (!st)
		st = atb_store_sync_protocols(s, list, nlist, NULL, &err);
	if (!st)
		st = atb_box_probe_with_compiler(&box, p->build.cpu_compiler, &err);
	if (!st && !work_dir) {
		if (!mkdtemp(tmpdir))
			st = atb_error_set(&err, ATB_ERR_IO, "cannot create a work folder: %s",
					   strerror(errno));
		work_dir = tmpdir;
		made_tmp = 1;
	}
	if (st) {
		rc = cli_fail(&err);
		goto out;
	}
	memset(&opts, 0, sizeof(opts));
	opts.work_dir = work_dir;
	opts.seed_base = seed_base;
	opts.nseeds = (size_t)seeds;
	opts.with_naive = naive < 0 ? task->has_naive : naive;
	opts.with_compile = compile;
	opts.candidate_label = label;
	if (cand == cand_dir)
		opts.candidate_file = pos[1];
	opts.box = box;
	opts.progress_detail = on_progress;
	/* atb submit: its run's seeds and label, refused before anything is measured */
	if (h && h->before && (rc = h->before(h->arg, s, p, task, pos[0], box, &opts)))
		goto out;
	st = atb_measure_candidate(s, p, task, cand, &knobs, &opts, &out, &err);
	if (st)
		rc = cli_fail(&err);
	else {
		/* the verdict is printed whatever the hook says: it is stored */
		int hrc = h && h->after ? h->after(h->arg, s, p, &knobs, &out, &extra) : CLI_OK;

		rc = print_outcome(task, &out, json, extra);
		/* a measurement not taken as its protocol says: said where it is read */
		if (out.deviation[0] && json)
			fprintf(stderr, "atb measure: warning: %s\n", out.deviation);
		if (hrc)
			rc = hrc;
	}
	json_decref(extra);
out:
	if (made_tmp)
		remove_tree(tmpdir);
	if (cand_dir[0])
		remove_tree(cand_dir);
	atb_box_free(box);
	atb_store_close(s);
	atb_protocol_free(p);
	atb_protocol_frozen_free(list, nlist);
	atb_task_free(task);
	return rc;
}
