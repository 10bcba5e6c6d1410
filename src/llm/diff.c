/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * A model's unified diff applied to a candidate file, strictly: every hunk's
 * old side (its context and removed lines) must match the file's lines
 * exactly, at the hunk's stated line or, when the model miscounted, at the
 * nearest place after the previous hunk where it matches; no fuzz, no
 * whitespace folding, hunks in order and not overlapping, the hunk header's
 * counts equal to its lines.  What cannot be applied that way is refused
 * with the hunk and the line, never applied in part: the result goes to
 * the caller's buffer and the file is written (by atb_llm_reply_write) only
 * when every file of the reply applied.
 *
 * Does not: read or write files (reply.c does), parse the diff's file
 * headers (reply.c's fenced-block reader does: names go through the same
 * surface check as every other reply file), or accept git's extensions
 * (renames, modes, binary patches): those are refused as unknown lines.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atb/alloc.h"
#include "llm/llm_int.h"
#include "banned.h"

struct line {
	const char *p;
	size_t n;  /* without its '\n' */
};

/* Split text into lines; *last_nl says whether the last line ended with '\n'. */
static struct line *split(const char *s, size_t len, size_t *count, int *last_nl)
{
	size_t n = 0, cap = 64, i, start = 0;
	struct line *v = atb_malloc(cap * sizeof(*v));

	*last_nl = 1;
	if (!v)
		return NULL;
	for (i = 0; i <= len; i++) {
		if (i < len && s[i] != '\n')
			continue;
		if (i == len && start == len)
			break;  /* nothing after the last '\n' */
		if (n == cap) {
			struct line *w = atb_realloc(v, 2 * cap * sizeof(*v));

			if (!w) {
				atb_free(v);
				return NULL;
			}
			v = w;
			cap *= 2;
		}
		v[n].p = s + start;
		v[n].n = i - start;
		n++;
		if (i == len)
			*last_nl = 0;
		start = i + 1;
	}
	*count = n;
	return v;
}

struct out {
	char *p;
	size_t n, cap;
	int full;
};

static void emit(struct out *o, const char *p, size_t n, int nl)
{
	size_t need = o->n + n + 1;

	if (o->full)
		return;
	if (need > ATB_LLM_REPLY_MAX_FILE_BYTES + 1) {
		o->full = 1;
		return;
	}
	if (need > o->cap) {
		size_t cap = o->cap ? o->cap : 4096;
		char *q;

		while (cap < need)
			cap *= 2;
		q = atb_realloc(o->p, cap);
		if (!q) {
			o->full = 2;
			return;
		}
		o->p = q;
		o->cap = cap;
	}
	memcpy(o->p + o->n, p, n);
	o->n += n;
	if (nl)
		o->p[o->n++] = '\n';
}

/* "@@ -A[,B] +C[,D] @@...": 0 when it is one. */
static int hunk_header(const struct line *l, long *a, long *b, long *c, long *d)
{
	char buf[128];
	int used = 0;

	if (l->n < 4 || l->n >= sizeof(buf) || memcmp(l->p, "@@ -", 4))
		return -1;
	memcpy(buf, l->p, l->n);
	buf[l->n] = '\0';
	*b = *d = 1;
	if (sscanf(buf, "@@ -%ld,%ld +%ld,%ld @@%n", a, b, c, d, &used) == 4 && used)
		return 0;
	*b = *d = 1;
	used = 0;
	if (sscanf(buf, "@@ -%ld +%ld,%ld @@%n", a, c, d, &used) == 3 && used)
		return 0;
	*b = *d = 1;
	used = 0;
	if (sscanf(buf, "@@ -%ld,%ld +%ld @@%n", a, b, c, &used) == 3 && used)
		return 0;
	*b = *d = 1;
	used = 0;
	if (sscanf(buf, "@@ -%ld +%ld @@%n", a, c, &used) == 2 && used)
		return 0;
	return -1;
}

/* Do base lines [at, at + nold) equal the hunk's old side? */
static int matches(const struct line *base, size_t nbase, size_t at, const struct line *old,
		   size_t nold)
{
	size_t i;

	if (at + nold > nbase)
		return 0;
	for (i = 0; i < nold; i++)
		if (base[at + i].n != old[i].n || memcmp(base[at + i].p, old[i].p, old[i].n))
			return 0;
	return 1;
}

enum atb_status atbi_llm_diff_apply(const char *name, const char *base, size_t base_len,
				    const char *diff, size_t diff_len, char **out, size_t *out_len,
				    struct atb_error *err)
{
	struct line *bl = NULL, *dl = NULL, *old = NULL;
	size_t nb = 0, nd = 0, i, pos = 0, nhunks = 0;
	int base_nl, diff_nl, end_nl;
	struct out o = {0};
	enum atb_status st = ATB_OK;

	*out = NULL;
	*out_len = 0;
	bl = split(base, base_len, &nb, &base_nl);
	dl = split(diff, diff_len, &nd, &diff_nl);
	old = atb_malloc((nd + 1) * sizeof(*old));
	if (!bl || !dl || !old) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot apply a diff: out of memory");
		goto done;
	}
	end_nl = base_nl;
	for (i = 0; i < nd && !st;) {
		long a, b, c, d, seen_old = 0, seen_new = 0;
		size_t h, nold = 0, at, want, best, bestd, j;
		int found = 0, no_nl_old = 0, no_nl_new = 0;

		if (!dl[i].n) {  /* a blank line between hunks */
			i++;
			continue;
		}
		h = i;

		if (hunk_header(&dl[i], &a, &b, &c, &d) || a < 0 || b < 0 || c < 0 || d < 0) {
			st = atb_error_set(err, ATB_ERR_SCHEMA, "diff for '%s': '%.*s' is not a hunk"
					   " header (@@ -A,B +C,D @@)", name,
					   (int)(dl[i].n > 60 ? 60 : dl[i].n), dl[i].p);
			break;
		}
		nhunks++;
		for (i++; i < nd && (seen_old < b || seen_new < d || (i < nd && dl[i].n &&
								     dl[i].p[0] == '\\')); i++) {
			const struct line *l = &dl[i];
			char k = l->n ? l->p[0] : ' ';

			if (k == '\\') {  /* "\ No newline at end of file": of the line before */
				char prev = i > h + 1 && dl[i - 1].n ? dl[i - 1].p[0] : ' ';

				if (prev == '+')
					no_nl_new = 1;
				else if (prev == '-')
					no_nl_old = 1;
				else
					no_nl_old = no_nl_new = 1;
				continue;
			}
			if (k != ' ' && k != '-' && k != '+')
				break;
			if (k != '+') {
				old[nold].p = l->n ? l->p + 1 : l->p;
				old[nold].n = l->n ? l->n - 1 : 0;
				nold++;
				seen_old++;
			}
			if (k != '-')
				seen_new++;
		}
		if (seen_old != b || seen_new != d) {
			st = atb_error_set(err, ATB_ERR_SCHEMA, "diff for '%s', hunk %zu (%.*s):"
					   " its header counts %ld old and %ld new lines, its body has"
					   " %ld and %ld", name, nhunks,
					   (int)(dl[h].n > 60 ? 60 : dl[h].n), dl[h].p, b, d,
					   seen_old, seen_new);
			break;
		}
		/* where: the stated line if it matches there, else the nearest match at or after pos */
		want = b == 0 ? (size_t)a : (size_t)(a > 0 ? a - 1 : 0);
		best = 0;
		for (at = pos, bestd = 0; at + nold <= nb; at++) {
			size_t dist = at > want ? at - want : want - at;

			if (found && at > want && dist >= bestd)
				break;  /* farther on is only farther */
			if ((!found || dist < bestd) && matches(bl, nb, at, old, nold)) {
				best = at;
				bestd = dist;
				found = 1;
			}
		}
		if (!found) {
			size_t bad = 0;

			while (bad < nold && want + bad < nb &&
			       bl[want + bad].n == old[bad].n &&
			       !memcmp(bl[want + bad].p, old[bad].p, old[bad].n))
				bad++;
			st = atb_error_set(err, ATB_ERR_SCHEMA, "diff for '%s', hunk %zu (%.*s):"
					   " its old lines are not in the file (at line %ld the first"
					   " that differs: '%.*s')", name, nhunks,
					   (int)(dl[h].n > 60 ? 60 : dl[h].n), dl[h].p,
					   a + (long)bad, bad < nold ? (int)(old[bad].n > 60 ? 60 :
									old[bad].n) : 0,
					   bad < nold ? old[bad].p : "");
			break;
		}
		for (j = pos; j < best; j++)
			emit(&o, bl[j].p, bl[j].n, 1);
		/* the new side, in the hunk's order */
		for (j = h + 1; j < i; j++) {
			const struct line *l = &dl[j];
			char k = l->n ? l->p[0] : ' ';

			if (k == ' ' || k == '+')
				emit(&o, l->n ? l->p + 1 : l->p, l->n ? l->n - 1 : 0, 1);
		}
		pos = best + nold;
		if (pos == nb) {
			if (no_nl_new)
				end_nl = 0;
			else if (no_nl_old)
				end_nl = 1;
		}
	}
	if (!st && !nhunks)
		st = atb_error_set(err, ATB_ERR_SCHEMA, "diff for '%s' has no hunk", name);
	if (st)
		goto done;
	for (; pos < nb; pos++)
		emit(&o, bl[pos].p, bl[pos].n, 1);
	if (!end_nl && o.n && o.p[o.n - 1] == '\n')
		o.n--;
	if (o.full == 2) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot apply a diff: out of memory");
	} else if (o.full) {
		st = atb_error_set(err, ATB_ERR_SCHEMA, "diff for '%s' makes it over the %zu bytes"
				   " allowed", name, ATB_LLM_REPLY_MAX_FILE_BYTES);
	} else if (o.n && memchr(o.p, '\0', o.n)) {
		st = atb_error_set(err, ATB_ERR_SCHEMA, "diff for '%s' puts a NUL byte in it", name);
	} else {
		emit(&o, "", 0, 0);  /* room for the terminator */
		if (!o.p)
			o.p = atb_malloc(1);
		if (!o.p) {
			st = atb_error_set(err, ATB_ERR_NOMEM, "cannot apply a diff: out of memory");
		} else {
			o.p[o.n] = '\0';
			*out = o.p;
			*out_len = o.n;
			o.p = NULL;
		}
	}
done:
	atb_free(o.p);
	atb_free(bl);
	atb_free(dl);
	atb_free(old);
	return st;
}

/* One line of s from p: its end (the '\n' or end) and the next line's start. */
static const char *line_end(const char *p, const char *end)
{
	const char *q = memchr(p, '\n', (size_t)(end - p));

	return q ? q : end;
}

static const char *next_line(const char *p, const char *end)
{
	const char *q = line_end(p, end);

	return q < end ? q + 1 : end;
}

enum atb_status atbi_llm_diff_split(const char *s, size_t len, struct atbi_llm_diff_part *parts,
				    size_t max, size_t *n, struct atb_error *err)
{
	const char *end = s + len, *p = s;

	*n = 0;
	while (p < end) {
		const char *e = line_end(p, end), *q = next_line(p, end), *qe, *name, *ne;
		struct atbi_llm_diff_part *part;

		if (e - p < 4 || memcmp(p, "--- ", 4) || q >= end || end - q < 4 ||
		    memcmp(q, "+++ ", 4)) {
			p = q;  /* prose, "diff --git", "index": not the diff's */
			continue;
		}
		if (*n == max)
			return atb_error_set(err, ATB_ERR_SCHEMA, "diff changes more than %zu files",
					     max);
		part = &parts[(*n)++];
		memset(part, 0, sizeof(*part));
		qe = line_end(q, end);
		name = q + 4;
		ne = memchr(name, '\t', (size_t)(qe - name));  /* "+++ NAME\tTIMESTAMP" */
		if (!ne)
			ne = qe;
		while (ne > name && (ne[-1] == ' ' || ne[-1] == '\r'))
			ne--;
		if (ne - name == 9 && !memcmp(name, "/dev/null", 9))
			return atb_error_set(err, ATB_ERR_SCHEMA, "diff deletes a file ('%.*s' to"
					     " /dev/null): a reply may only change surface files",
					     (int)(e - p > 64 ? 64 : e - p), p);
		if (ne - name > 2 && !memcmp(name, "b/", 2))
			name += 2;
		part->name = name;
		part->nlen = (size_t)(ne - name);
		part->create = e - p >= 13 && !memcmp(p + 4, "/dev/null", 9) &&
			       (e - p == 13 || p[13] == '\t' || p[13] == ' ' || p[13] == '\r');
		p = next_line(q, end);
		part->body = p;
		/* its hunks, each as long as its header says, blank lines between them */
		while (p < end) {
			struct line l = {p, (size_t)(line_end(p, end) - p)};
			long a, b, c, d, o = 0, w = 0;

			if (!l.n) {
				p = next_line(p, end);
				continue;
			}
			if (hunk_header(&l, &a, &b, &c, &d))
				break;
			for (p = next_line(p, end); p < end; p = next_line(p, end)) {
				char k = *p == '\n' ? ' ' : *p;

				if (k == '\\')
					continue;
				if (o >= b && w >= d)
					break;
				if (k != ' ' && k != '-' && k != '+')
					break;
				if (k != '+')
					o++;
				if (k != '-')
					w++;
			}
		}
		part->blen = (size_t)(p - part->body);
	}
	if (!*n)
		return atb_error_set(err, ATB_ERR_SCHEMA, "diff has no '--- NAME' / '+++ NAME' header");
	return ATB_OK;
}
