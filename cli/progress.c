/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The progress line of atb's long commands (atb run, atb suite): item k of
 * N, its phase or outcome, what the command adds (best speedup, correct
 * count) and an ETA, on stderr.  On a terminal the line is redrawn in
 * place; elsewhere (a log, a pipe) only finished items are written, one
 * line each, so logs stay short.  Does not: compute the ETA or anything it
 * shows; the library's progress callbacks hand those in.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "banned.h"

void cli_progress_init(struct cli_progress *p, int quiet)
{
	memset(p, 0, sizeof(*p));
	p->quiet = quiet;
	p->tty = isatty(STDERR_FILENO);
}

void cli_progress_draw(struct cli_progress *p, const struct cli_progress_line *l)
{
	int finished = !strcmp(l->phase, "done");
	char eta[32];

	if (p->quiet || (!p->tty && !finished))
		return;
	cli_fmt_duration(eta, sizeof(eta), l->eta_s);
	fprintf(stderr, "%s%s %" PRId64 "/%" PRId64 "%s%s  %s %s  %s  eta %s%s",
		p->tty ? "\r" : "", l->unit, l->k, l->n, l->name ? " " : "",
		l->name ? l->name : "", finished ? "outcome" : "phase",
		finished ? (l->outcome ? l->outcome : "-") : l->phase, l->tail, eta,
		p->tty ? "\033[K" : "\n");
	p->drawn |= p->tty;
	fflush(stderr);
}

void cli_progress_end(struct cli_progress *p)
{
	if (p->drawn && !p->quiet)
		fputc('\n', stderr);
	p->drawn = 0;
}
