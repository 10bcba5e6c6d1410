/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The loop's LLM proposers (llm_proposer.c), for loop.c: a kernel task's
 * knobs or an engine task's launch configuration ("llm"), or the source of a task's surface files ("llm-code": the
 * kernel's files of a cpu or cuda task, model_new.py of a torch task).
 */
#ifndef ATB_LOOP_LLM_PROPOSER_H
#define ATB_LOOP_LLM_PROPOSER_H

#include <stddef.h>
#include <stdint.h>

#include "atb/engine.h"
#include "atb/llm.h"
#include "atb/protocol.h"
#include "atb/store.h"
#include "atb/task.h"
#include "util.h"

struct atbi_llm_proposer {
	struct atb_store *store;
	const struct atb_protocol *protocol;
	const struct atb_task *task;     /* a kernel or torch task; NULL for an engine task */
	const struct atb_engine_task *etask; /* an engine task (atbi_llm_propose_engine) */
	struct atb_llm_client *client; /* the run's: records under the run's id, or replays */
	const char *run_id;
	/*
	 * The run whose iterations are the prompt's history: run_id, or on a
	 * replay the recorded run, so that every prompt is the bytes the model
	 * was asked (the replay's own verdicts are measured again and may differ).
	 */
	const char *history_run;
	const char *home;         /* the prompt templates: home/tasks/prompts/ */
	int64_t seed;             /* the run's */
};

/*
 * Iteration k's knobs from the model: up to llm.max_calls_per_iteration
 * recorded calls, each prompt holding the knob space and the run's stored
 * history.  *got 1 with out filled when a reply was inside the knob space;
 * 0 with why (a one-line reason) when none was.  Errors: those of
 * atb_llm_call that end the run (ATB_ERR_INFRA_DEFECT: the run halted;
 * ATB_ERR_NOT_FOUND: a replayed request that was not recorded; store
 * errors), ATB_ERR_NOMEM.
 */
ATBI_FUNC enum atb_status atbi_llm_propose_knobs(const struct atbi_llm_proposer *pp, int64_t k,
						 struct atb_knob_assignment *out, int *got,
						 char *why, size_t why_size, struct atb_error *err);

/*
 * Iteration k's code from the model into cand_dir (an existing folder that
 * holds the starting candidate, or nothing for a task without a template):
 * the prompt (the template file home/tasks/prompts/llm-code-kernel-1.txt
 * or llm-code-torch-1.txt, whose SHA-256 is the system message's first
 * line) holds the reference, the surface and ABI, the starting candidate,
 * the history of prev_run's iterations with their verdicts, and the
 * previous candidate's files (prev_dir, NULL: none); the reply (JSON
 * {"files": {...}} under a JSON schema, or fenced blocks) is parsed with
 * atb_llm_reply_parse and written with atb_llm_reply_write, so nothing lands
 * outside cand_dir.  Up to llm.max_calls_per_iteration calls; *got 0 with
 * why when no reply was usable (a traversal, a name off the surface, no
 * file).  Errors as atbi_llm_propose_knobs; ATB_ERR_IO, ATB_ERR_NOT_FOUND
 * (no template file).
 */
ATBI_FUNC enum atb_status atbi_llm_propose_code(const struct atbi_llm_proposer *pp, int64_t k,
						const char *cand_dir, const char *prev_dir,
						int *got, char *why, size_t why_size,
						struct atb_error *err);

/*
 * Iteration k's engine configuration from the model: up to
 * llm.max_calls_per_iteration recorded calls, each prompt the template
 * home/tasks/prompts/llm-engine-1.txt (its SHA-256 the system message's
 * first line) holding the engine, the model, the extra arguments, the
 * workload, every search flag with its type, domain and default, and the
 * run's history with every verdict; the request carries a JSON schema of
 * {"config": {...}} over the search flags.  *got 1 with out filled when a
 * reply passed atb_engine_config_from_json; 0 with why (the last
 * refusal: an unknown flag, a flag outside the search, a wrong type, a
 * value outside the domain) when none did.  Errors as
 * atbi_llm_propose_knobs; ATB_ERR_IO, ATB_ERR_NOT_FOUND (no template).
 */
ATBI_FUNC enum atb_status atbi_llm_propose_engine(const struct atbi_llm_proposer *pp, int64_t k,
						  struct atb_engine_config *out, int *got,
						  char *why, size_t why_size, struct atb_error *err);

/*
 * The surface files present in dir as a canonical JSON object
 * {"NAME": "SHA-256 hex", ...} (caller owns *out, atb_free): a code
 * proposal's identity, stored as the iteration's "files".
 */
ATBI_FUNC enum atb_status atbi_candidate_hashes(const struct atb_task *task, const char *dir,
						json_t **out, struct atb_error *err);

#endif
