/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb-runner's torch backend (runner/torch.c), chosen by the job's
 * top-level "backend": "torch": KernelBench-format tasks in an embedded
 * CPython whose libpython is loaded at run time (docs/internals/torch.md).
 */
#ifndef ATB_RUNNER_TORCH_H
#define ATB_RUNNER_TORCH_H

#include <stddef.h>

/* Is text (a job) one for the torch backend ("backend": "torch")? */
int runner_is_torch_job(const char *text, size_t len);

/*
 * Run a torch job (the job's text): parse it, embed the job's python,
 * env, correctness, side-stream checks (cuda), timing, done.  Returns an
 * exit status (RUNNER_EXIT_*); on failure an error event has been emitted
 * ("bad_job", "no_python" where libpython does not load, "python" where the
 * interpreter or atb_torch fails, "no_cuda", "dlopen"/"no_symbol" for an
 * arm that does not import or lacks its class, ...).
 */
int runner_torch_run(const char *text, size_t len);

#endif
