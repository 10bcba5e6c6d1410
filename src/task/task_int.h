/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Internals of the task module shared by its files: the expression
 * evaluator's core, which reports the offending offset so the loader can
 * point at it; the interpreter's self-description (also for the suite's
 * static checker, which must know what of it to show its sandbox).  Not
 * part of the public API.
 */
#ifndef ATB_TASK_INT_H
#define ATB_TASK_INT_H

#include <stddef.h>
#include <stdint.h>

#include "atb/task.h"
#include "util.h"

/*
 * Evaluate expr over the int params of task with the values of set.  On
 * failure returns ATB_ERR_SCHEMA with a message naming the problem, and
 * *err_offset (0-based into expr) where it was found.
 */
ATBI_FUNC enum atb_status atbi_task_eval(const struct atb_task *task,
					 const struct atb_task_param_set *set,
					 const char *expr, int64_t *value,
					 size_t *err_offset, char *msg, size_t msg_size);

/*
 * The interpreter to run: python, else $ATB_PYTHON, else python3, found on
 * PATH; *out is its path (atb_free).  ATB_ERR_NOT_FOUND, ATB_ERR_NOMEM.
 */
ATBI_FUNC enum atb_status atbi_task_python_resolve(const char *python, char **out,
						   struct atb_error *err);

/*
 * Ask the interpreter (a path) about itself, within 30 s: the canonical
 * JSON text of {"executable", "version", "library", "home" (one prefix, or
 * two joined by ':'), "path": [...]} into *info (atb_free).  A plain child:
 * the interpreter is the caller's and runs no task or candidate code.
 * ATB_ERR_SYSTEM (it cannot run, fails, hangs or answers nonsense),
 * ATB_ERR_NOMEM.
 */
ATBI_FUNC enum atb_status atbi_task_python_info(const char *python, char **info,
						struct atb_error *err);

#endif
