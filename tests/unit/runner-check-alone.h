/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * runner/check.c (and timed.c, whose hooks it names) compiled into a test
 * or a benchmark on its own: atb-runner is an executable, not a library, so
 * its checking layer comes in as source, with the event channel stubbed to discard every event.  For code
 * that calls the comparison and never reads the events (u-compare,
 * bench-compare); u-runner keeps its own stubs, which record them.
 */
#ifndef ATB_RUNNER_CHECK_ALONE_H
#define ATB_RUNNER_CHECK_ALONE_H

#include "../../runner/check.c"
#include "../../runner/timed.c"
#include "../../runner/watch.c"

int runner_emit(json_t *ev)
{
	json_decref(ev);
	return 0;
}

void runner_emit_error(const char *reason, const char *msg)
{
	(void)reason;
	(void)msg;
}

#endif
