/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * libatb: the umbrella header.  The CLI includes only the public headers
 * under include/atb/.
 */
#ifndef ATB_ATB_H
#define ATB_ATB_H

#include "atb/status.h"
#include "atb/alloc.h"

/* libatb's version string, e.g. "0.1.0". */
const char *atb_version(void);

/*
 * The folder that holds protocol/ and tasks/: $ATB_HOME when set, else the
 * source tree atb was built from.  Never NULL; not owned by the caller.
 */
const char *atb_home(void);

/* The default store path: $ATB_DB when set, else "atb.db". */
const char *atb_default_db_path(void);

#endif
