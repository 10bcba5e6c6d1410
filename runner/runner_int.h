/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb-runner's internals: the event writer (runner.c) and the cpu backend
 * (cpu.c).  The runner reports raw facts as events and computes no verdict.
 */
#ifndef ATB_RUNNER_INT_H
#define ATB_RUNNER_INT_H

#include <jansson.h>

#include "atb/runner.h"
#include "atb/status.h"

/* Exit statuses of atb-runner. */
enum { RUNNER_EXIT_OK = 0, RUNNER_EXIT_BAD_JOB = 2, RUNNER_EXIT_FAILED = 3 };

/*
 * Write one event (steals ev) as a line on the event channel and flush it.
 * Returns 0, or -1 when it could not be encoded or written.
 */
int runner_emit(json_t *ev);

/* Emit {"event":"error","reason":reason,"message":msg}. */
void runner_emit_error(const char *reason, const char *msg);

/* A finite number as a json real, or null (jansson has no NaN or infinity). */
json_t *runner_real(double x);

/*
 * Run a parsed job on the cpu backend: env, correctness, timing, done.
 * Returns an exit status; on failure an error event has been emitted.
 */
int runner_cpu_run(const struct atb_runner_job *job);

#endif
