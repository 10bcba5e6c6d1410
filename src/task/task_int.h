/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Internals of the task module shared by its files: the expression
 * evaluator's core, which reports the offending offset so the loader can
 * point at it.  Not part of the public API.
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

#endif
