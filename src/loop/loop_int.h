/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Internals the tuning loop (loop.c) shares with the other runs that live
 * in the store's run table, such as atb suite (src/suite/suite.c): where a
 * run's folders go, and this box's identity.  One copy of each, so a run
 * of either kind finds its folders and its box the same way.
 *
 * Does not: open or close the store, or decide anything about a run.
 */
#ifndef ATB_LOOP_INT_H
#define ATB_LOOP_INT_H

#include <stddef.h>
#include <sys/types.h>

#include "atb/box.h"
#include "atb/protocol.h"
#include "atb/status.h"
#include "atb/store.h"
#include "util.h"

/* mkdir(path, mode); an existing folder is fine.  ATB_ERR_IO naming the path. */
ATBI_FUNC enum atb_status atbi_make_dir(const char *path, mode_t mode, struct atb_error *err);

/*
 * RUNS/RUN_ID/task-K emptied (an interrupted attempt is redone) and made
 * again with its candidate/ and work/ folders, whose paths go into cand
 * and work (size bytes each): the suite's and the calibration's layout.
 */
ATBI_FUNC enum atb_status atbi_run_task_dirs(const char *runs_dir, const char *run_id, int64_t k,
					     char *cand, char *work, size_t size,
					     struct atb_error *err);

/*
 * The runs folder into out (size bytes), created (0755) when absent:
 * runs_dir when given, else "runs" beside the store file db_path (in the
 * current folder when db_path has no '/'; "/runs" for a store at the
 * root).  ATB_ERR_USAGE when it does not fit, ATB_ERR_IO.
 */
ATBI_FUNC enum atb_status atbi_runs_dir(const char *runs_dir, const char *db_path, char *out,
					size_t size, struct atb_error *err);

/*
 * Probe this box with p's cpu compiler and its fingerprint into fp; when s
 * is not NULL, register the box in s.  keep not NULL: the caller owns the
 * probed box (*keep, atb_box_free; NULL on failure); NULL: it is freed
 * here.  Statuses of atb_box_probe_with_compiler, atb_box_fingerprint,
 * atb_store_register_box.
 */
ATBI_FUNC enum atb_status atbi_this_box(struct atb_store *s, const struct atb_protocol *p,
					char fp[ATB_BOX_FINGERPRINT_LEN + 1], struct atb_box **keep,
					struct atb_error *err);

#endif
