/* SPDX-License-Identifier: GPL-3.0-or-later */
/* atb box: placeholder until the module lands. */
#include "cli.h"
#include "banned.h"

int cmd_box(int argc, char **argv, struct cli_ctx *ctx)
{
	(void)argc; (void)argv; (void)ctx;
	fprintf(stderr, "atb box: not built yet\n");
	return CLI_INTERNAL;
}
