/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The runner processes of one measurement attempt: which side (the paired
 * arms, or the baseline alone with its twin) each process runs and on which
 * seeds, in order.  PROTO: gates.baseline_drift.tolerance -- the order is
 * what keeps beside and alone comparable (docs/internals/gates.md, "baseline
 * drift").  Pure: measure.c runs the slots.
 *
 * Does not: start processes or judge anything.
 */
#include <string.h>

#include "atb/task.h"
#include "measure/measure_int.h"
#include "banned.h"

size_t atbi_measure_seeds_per_runner(const char *kind, size_t nseeds)
{
	/* cpu: the box drifts between processes, so beside and alone of one
	   seed are timed seconds apart; cuda (a runner costs seconds to start
	   and the device drifts little between processes) and torch (a runner
	   imports torch): one runner per side covering every seed */
	if (kind && (!strcmp(kind, "cuda") || !strcmp(kind, ATB_TASK_KIND_TORCH)))
		return nseeds ? nseeds : 1;
	return 1;
}

size_t atbi_measure_layout(size_t nseeds, size_t per_runner, struct atbi_run_slot *slots)
{
	size_t k, step, n = 0;

	if (!per_runner)
		per_runner = 1;
	for (k = 0; k < nseeds; k += per_runner)
		for (step = 0; step < 2; step++) {
			/* group g: paired first when g is even, alone first when odd */
			int paired = (step == 0) == (k / per_runner % 2 == 0);

			slots[n].paired = paired;
			slots[n].lo = k;
			slots[n].hi = k + per_runner < nseeds ? k + per_runner : nseeds;
			n++;
		}
	return n;
}
