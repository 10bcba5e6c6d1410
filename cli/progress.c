/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The progress line of atb's long commands (atb run, atb suite): item k of
 * N, its phase or outcome, what the command adds (best speedup, correct
 * count) and an ETA, on stderr.  On a terminal the line is redrawn in
 * place; elsewhere (a log, a pipe) finished items are written, one line
 * each, and the line in progress once every $ATB_PROGRESS_INTERVAL_S
 * seconds (30), so logs stay short and still show life.  Notes (a re-run
 * and why, a refusal's reason) are lines of their own everywhere.  Does not: compute the ETA or anything it
 * shows; the library's progress callbacks hand those in.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "banned.h"

/* Seconds between progress lines off a terminal: $ATB_PROGRESS_INTERVAL_S
   (tests set it small), else 30. */
static double interval_s(void)
{
	const char *v = getenv("ATB_PROGRESS_INTERVAL_S");
	char *end = NULL;
	double x = v ? strtod(v, &end) : 0;

	return v && end != v && !*end && x >= 0 ? x : 30.0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void cli_progress_init(struct cli_progress *p, int quiet)
{
	memset(p, 0, sizeof(*p));
	p->quiet = quiet;
	p->tty = isatty(STDERR_FILENO);
	p->interval_s = interval_s();
	p->last_s = now_s();
}

void cli_progress_draw(struct cli_progress *p, const struct cli_progress_line *l)
{
	int finished = !strcmp(l->phase, "done");
	char eta[32];
	double t = now_s();

	if (p->quiet)
		return;
	/* off a terminal: every finished item, and the line in progress at most
	   once an interval, so a log shows the command is alive */
	if (!p->tty && !finished && t - p->last_s < p->interval_s)
		return;
	p->last_s = t;
	cli_fmt_duration(eta, sizeof(eta), l->eta_s);
	fprintf(stderr, "%s%s %" PRId64 "/%" PRId64 "%s%s  %s %s  %s  eta %s%s",
		p->tty ? "\r" : "", l->unit, l->k, l->n, l->name ? " " : "",
		l->name ? l->name : "", finished ? "outcome" : "phase",
		finished ? (l->outcome ? l->outcome : "-") : l->phase, l->tail, eta,
		p->tty ? "\033[K" : "\n");
	p->drawn |= p->tty;
	fflush(stderr);
}

void cli_progress_note(struct cli_progress *p, const char *fmt, ...)
{
	va_list ap;

	if (p->quiet)
		return;
	if (p->drawn)
		fputs("\r\033[K", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	p->drawn = 0;
	p->last_s = now_s();
	fflush(stderr);
}

void cli_progress_end(struct cli_progress *p)
{
	if (p->drawn && !p->quiet)
		fputc('\n', stderr);
	p->drawn = 0;
}
