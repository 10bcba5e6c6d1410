/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Where atb's data lives (protocol/, tasks/) and the default store path.
 */
#include <stdlib.h>

#include "atb/atb.h"
#include "banned.h"

#ifndef ATB_HOME_DEFAULT
#define ATB_HOME_DEFAULT "."
#endif
#ifndef ATB_VERSION
#define ATB_VERSION "0.0.0"
#endif

const char *atb_version(void)
{
	return ATB_VERSION;
}

const char *atb_home(void)
{
	const char *h = getenv("ATB_HOME");

	return h && *h ? h : ATB_HOME_DEFAULT;
}

const char *atb_default_db_path(void)
{
	const char *p = getenv("ATB_DB");

	return p && *p ? p : "atb.db";
}
