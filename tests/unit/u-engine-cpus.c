/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * An engine task's `cpus:` (the CPUs every engine of the task is pinned to,
 * sched_setaffinity in the child before exec; docs/engine-spec.md): bad
 * values are refused with file, line, field and value; a pinned engine's
 * affinity is the task's (read from /proc/PID/status); a CPU the box lacks
 * is a start failure with the reason in the engine's log.  The engine
 * started is the TEST DOUBLE (tests/fixtures/engine/double_engine.py, a
 * fake OpenAI-compatible server, not an engine): pinning is the launcher's,
 * the same for every engine.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "atb/alloc.h"
#include "atb/engine.h"
#include "banned.h"

static char tmp[256];

static void setup(void)
{
	snprintf(tmp, sizeof(tmp), "%s/atb-uenginecpus.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	cr_assert_not_null(mkdtemp(tmp));
	setenv("ATB_SOURCE_DIR", ATB_SOURCE_DIR, 1);
}

static void teardown(void)
{
	char cmd[400];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(engine_cpus, .init = setup, .fini = teardown);

/* The double's task (tests/fixtures/engine/task.yaml) with a cpus line. */
static const char *write_task(const char *cpus_line)
{
	static char path[400];
	FILE *f;

	snprintf(path, sizeof(path), "%s/task.yaml", tmp);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fprintf(f, "kind: engine\nname: engine-double-pinned\n"
		   "engine: %s/tests/fixtures/engine/double.yaml\nmodel: double-model\n"
		   "%s\n"
		   "workload: {requests: 4}\nprobes: {max_tokens: 8, prompts: [a b c]}\n",
		ATB_SOURCE_DIR, cpus_line);
	fclose(f);
	return path;
}

static enum atb_status load(const char *cpus_line, struct atb_engine_task **t,
			    struct atb_error *err)
{
	*t = NULL;
	atb_error_clear(err);
	return atb_engine_task_load(ATB_SOURCE_DIR, write_task(cpus_line), t, err);
}

static void bad(const char *cpus_line, const char *field, const char *msg_part)
{
	struct atb_engine_task *t;
	struct atb_error err;

	cr_assert_eq(load(cpus_line, &t, &err), ATB_ERR_SCHEMA, "%s: %s", cpus_line, err.msg);
	cr_assert_null(t);
	cr_assert_eq(err.line, 5, "%s: line %u: %s", cpus_line, err.line, err.msg);
	cr_assert_str_eq(err.field, field);
	cr_assert(strstr(err.msg, msg_part), "message '%s' lacks '%s'", err.msg, msg_part);
	cr_assert(strstr(err.file, "task.yaml"));
}

Test(engine_cpus, test_engine_cpus__bad_values_name_line_field_and_value)
{
	bad("cpus: [one]", "cpus[0]", "cpu 'one' is not an integer in [0, 1023]");
	bad("cpus: [0, -1]", "cpus[1]", "cpu '-1' is not an integer");
	bad("cpus: [1024]", "cpus[0]", "cpu '1024' is not an integer in [0, 1023]");
	bad("cpus: [1.5]", "cpus[0]", "cpu '1.5'");
	bad("cpus: [1, 1]", "cpus[1]", "cpu '1' is given twice");
	bad("cpus: []", "cpus", "must not be empty");
	bad("cpus: 1", "cpus", "expected a sequence");
}

Test(engine_cpus, test_engine_cpus__absent_means_not_pinned)
{
	struct atb_engine_task *t;
	struct atb_error err;

	cr_assert_eq(load("", &t, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(t->ncpus, 0);
	cr_assert_null(t->cpus);
	atb_engine_task_free(t);
	cr_assert_eq(load("cpus: [0, 3]", &t, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(t->ncpus, 2);
	cr_assert_eq(t->cpus[0], 0);
	cr_assert_eq(t->cpus[1], 3);
	atb_engine_task_free(t);
}

/* Cpus_allowed_list of pid, from /proc. */
static void allowed_list(pid_t pid, char *buf, size_t size)
{
	char path[64], line[256];
	FILE *f;

	buf[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "Cpus_allowed_list:", 18)) {
			snprintf(buf, size, "%s", line + 18 + strspn(line + 18, " \t"));
			buf[strcspn(buf, "\n")] = '\0';
		}
	fclose(f);
}

static enum atb_status start(struct atb_engine_task *t, struct atb_engine_proc **p,
			     struct atb_error *err)
{
	struct atb_engine_config c;

	atb_error_clear(err);
	cr_assert_eq(atb_engine_config_parse(t->spec, "", &c, err), ATB_OK, "%s", err->msg);
	return atb_engine_start(t, &c, tmp, p, err);
}

Test(engine_cpus, test_engine_cpus__the_engine_runs_on_the_task_cpus_only, .timeout = 60)
{
	struct atb_engine_task *t;
	struct atb_engine_proc *p = NULL;
	struct atb_error err;
	cpu_set_t mine;
	char got[64], want[16], line[32];
	int cpu = -1, i;

	/* the last CPU this test may use, so that the pin is not the default */
	cr_assert_eq(sched_getaffinity(0, sizeof(mine), &mine), 0);
	for (i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &mine))
			cpu = i;
	cr_assert_geq(cpu, 0);
	snprintf(line, sizeof(line), "cpus: [%d]", cpu);
	snprintf(want, sizeof(want), "%d", cpu);
	cr_assert_eq(load(line, &t, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(start(t, &p, &err), ATB_OK, "%s", err.msg);
	allowed_list(atb_engine_pid(p), got, sizeof(got));
	cr_assert_str_eq(got, want, "engine allowed on '%s', task says %d", got, cpu);
	/* atb itself is left where it was */
	cr_assert_eq(sched_getaffinity(0, sizeof(mine), &mine), 0);
	cr_assert(CPU_COUNT(&mine) >= 1);
	atb_engine_stop(p);
	atb_engine_task_free(t);
}

Test(engine_cpus, test_engine_cpus__a_cpu_the_box_lacks_is_a_start_failure, .timeout = 60)
{
	struct atb_engine_task *t;
	struct atb_engine_proc *p = (void *)1;
	struct atb_error err;

	if (sysconf(_SC_NPROCESSORS_CONF) > 1023)
		cr_skip_test("this box has a CPU 1023");
	cr_assert_eq(load("cpus: [1023]", &t, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(start(t, &p, &err), ATB_ERR_CHECK);
	cr_assert_null(p);
	cr_assert(strstr(err.msg, "exited with status 126 at start"), "%s", err.msg);
	cr_assert(strstr(err.msg, "cannot pin engine to cpus [1023]"), "%s", err.msg);
	atb_engine_task_free(t);
}
