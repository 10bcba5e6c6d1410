/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The loop's LLM proposer (llm_proposer.c), for loop.c.
 */
#ifndef ATB_LOOP_LLM_PROPOSER_H
#define ATB_LOOP_LLM_PROPOSER_H

#include <stddef.h>
#include <stdint.h>

#include "atb/llm.h"
#include "atb/protocol.h"
#include "atb/store.h"
#include "atb/task.h"
#include "util.h"

struct atbi_llm_proposer {
	struct atb_store *store;
	const struct atb_protocol *protocol;
	const struct atb_task *task;
	const struct atb_llm_config *cfg;
	const char *run_id;       /* the calls are recorded under the run's id */
	int64_t seed;             /* the run's */
};

/*
 * Iteration k's knobs from the model: up to llm.max_calls_per_iteration
 * recorded calls, each prompt holding the knob space and the run's stored
 * history.  *got 1 with out filled when a reply was inside the knob space;
 * 0 with why (a one-line reason) when none was.  Errors: those of
 * atb_llm_call that end the run (ATB_ERR_INFRA_DEFECT: the run halted;
 * store errors), ATB_ERR_NOMEM.
 */
ATBI_FUNC enum atb_status atbi_llm_propose_knobs(const struct atbi_llm_proposer *pp, int64_t k,
						 struct atb_knob_assignment *out, int *got,
						 char *why, size_t why_size, struct atb_error *err);

#endif
