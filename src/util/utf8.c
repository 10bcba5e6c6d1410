/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The check every YAML text passes before libfyaml sees it: the text must
 * be UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past
 * U+10FFFF).  libfyaml 0.7.12 loops forever, never returning, when a byte
 * that is not UTF-8 follows a '%' where a directive may start (the first
 * bytes "%" 0xAD are enough; docs/internals/libfyaml-hang.md), so the
 * loaders refuse such a file here, naming its line, column and byte.  YAML
 * 1.2 streams are Unicode, and atb's files are UTF-8, so no valid file of
 * the project is refused.
 *
 * Does not: check YAML syntax or the printable set (libfyaml does).
 */
#include <stdio.h>

#include "util.h"
#include "banned.h"

/* Length of the UTF-8 sequence at p (at most n bytes), 0 when it is not one. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xbf;
	size_t len, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0;  /* a continuation byte, an overlong lead (c0, c1) or past f4 */
	/* The second byte's range rules out overlongs, surrogates and > U+10FFFF. */
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (n < len || p[1] < lo || p[1] > hi)
		return 0;
	for (i = 2; i < len; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return len;
}

size_t atbi_utf8_invalid_at(const char *text, size_t len)
{
	const unsigned char *p = (const unsigned char *)text;
	size_t i = 0, k;

	while (i < len) {
		k = utf8_seq(p + i, len - i);
		if (!k)
			return i;
		i += k;
	}
	return len;
}

enum atb_status atbi_yaml_prescan(const char *path, const char *text, size_t len,
				  struct atb_error *err)
{
	size_t bad = atbi_utf8_invalid_at(text, len), i;
	unsigned line = 1, col = 1;

	if (bad == len)
		return ATB_OK;
	for (i = 0; i < bad; i++) {
		if (text[i] == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	return atb_error_set_at(err, ATB_ERR_PARSE, path, line, col, NULL,
				"malformed yaml: byte 0x%02x (offset %zu) is not utf-8;"
				" atb reads yaml files as utf-8 only",
				(unsigned)(unsigned char)text[bad], bad);
}
