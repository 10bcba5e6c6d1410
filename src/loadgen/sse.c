/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Incremental server-sent-events splitter (the WHATWG event-stream
 * format): bytes arrive in pieces of any size, split anywhere, even inside
 * "\r\n"; complete events' data go to a callback.  Only "data" matters to
 * an OpenAI-compatible stream; other fields and comments are skipped.
 *
 * Also the growable byte string the client and the prompt builder share.
 *
 * Does not: parse the JSON inside an event (client.c does, with jansson).
 */
#include <stddef.h>
#include <string.h>

#include "atb/alloc.h"
#include "loadgen_int.h"
#include "banned.h"

int atbi_buf_add(struct atbi_buf *b, const char *s, size_t n, size_t max)
{
	if (b->len + n > max)
		return -1;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *q;

		while (cap < b->len + n + 1)
			cap *= 2;
		q = atb_realloc(b->p, cap);
		if (!q)
			return -2;
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

void atbi_sse_init(struct atbi_sse *p, size_t max_bytes)
{
	memset(p, 0, sizeof(*p));
	p->max_bytes = max_bytes;
}

void atbi_sse_reset(struct atbi_sse *p, size_t max_bytes)
{
	p->line_len = p->data_len = 0;
	p->has_data = p->last_cr = 0;
	p->max_bytes = max_bytes;
}

void atbi_sse_release(struct atbi_sse *p)
{
	atb_free(p->line);
	atb_free(p->data);
	memset(p, 0, sizeof(*p));
}

/* Make room for n more bytes plus a NUL in *buf, within the hard maximum. */
static int reserve(struct atbi_sse *p, char **buf, size_t *cap, size_t len, size_t n)
{
	size_t want = len + n + 1, c;
	char *q;

	if (want <= *cap)
		return 0;
	if (p->line_len + p->data_len + n > p->max_bytes)
		return -1;
	c = *cap ? *cap : 256;
	while (c < want)
		c *= 2;
	q = atb_realloc(*buf, c);
	if (!q)
		return -1;
	*buf = q;
	*cap = c;
	return 0;
}

static int dispatch(struct atbi_sse *p, atbi_sse_event_fn fn, void *ctx)
{
	int rc = 0;

	if (p->has_data && !p->data)
		rc = fn(ctx, "", 0);
	else if (p->has_data) {
		p->data[p->data_len] = '\0';
		rc = fn(ctx, p->data, p->data_len);
	}
	p->has_data = 0;
	p->data_len = 0;
	return rc;
}

static int end_line(struct atbi_sse *p, atbi_sse_event_fn fn, void *ctx)
{
	const char *v;
	size_t vlen;

	if (!p->line_len)
		return dispatch(p, fn, ctx);
	if (p->line_len < 5 || memcmp(p->line, "data", 4) || (p->line[4] != ':')) {
		/* a comment, another field, or "data" with no colon (empty data) */
		if (p->line_len == 4 && !memcmp(p->line, "data", 4))
			p->has_data = 1;
		p->line_len = 0;
		return 0;
	}
	v = p->line + 5;
	vlen = p->line_len - 5;
	if (vlen && *v == ' ')
		v++, vlen--;
	if (reserve(p, &p->data, &p->data_cap, p->data_len, vlen + 1))
		return -1;
	if (p->has_data)
		p->data[p->data_len++] = '\n';
	memcpy(p->data + p->data_len, v, vlen);
	p->data_len += vlen;
	p->has_data = 1;
	p->line_len = 0;
	return 0;
}

int atbi_sse_feed(struct atbi_sse *p, const char *buf, size_t len, atbi_sse_event_fn fn,
		  void *ctx)
{
	size_t i = 0;

	while (i < len) {
		size_t j = i;
		int rc;

		if (p->last_cr && buf[i] == '\n') {
			/* the \n of a \r\n split across two pieces */
			p->last_cr = 0;
			i++;
			continue;
		}
		p->last_cr = 0;
		while (j < len && buf[j] != '\n' && buf[j] != '\r')
			j++;
		if (j > i) {
			if (reserve(p, &p->line, &p->line_cap, p->line_len, j - i))
				return -1;
			memcpy(p->line + p->line_len, buf + i, j - i);
			p->line_len += j - i;
		}
		if (j == len)
			break;
		if (buf[j] == '\r') {
			if (j + 1 < len && buf[j + 1] == '\n')
				j++;
			else if (j + 1 == len)
				p->last_cr = 1;
		}
		i = j + 1;
		rc = end_line(p, fn, ctx);
		if (rc)
			return rc;
	}
	return 0;
}

int atbi_sse_finish(struct atbi_sse *p, atbi_sse_event_fn fn, void *ctx)
{
	int rc = 0;

	if (p->line_len)
		rc = end_line(p, fn, ctx);
	if (!rc)
		rc = dispatch(p, fn, ctx);
	return rc;
}
