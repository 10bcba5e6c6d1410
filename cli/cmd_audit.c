/* SPDX-License-Identifier: GPL-3.0-or-later */
/* atb audit: placeholder until the module lands. */
#include "cli.h"
#include "banned.h"

int cmd_audit(int argc, char **argv, struct cli_ctx *ctx)
{
	(void)argc; (void)argv; (void)ctx;
	fprintf(stderr, "atb audit: not built yet\n");
	return CLI_INTERNAL;
}
