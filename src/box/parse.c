/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Parsers for the text files the box probe reads: /proc/cpuinfo,
 * /proc/meminfo, os-release and sysfs cache sizes.  They take text, not
 * paths, so that tests can feed them other machines' files.  Every string
 * they return is cleaned to printable ASCII, because identity strings are
 * hashed and must not depend on stray bytes or spacing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atb/alloc.h"
#include "box_int.h"
#include "banned.h"

static int is_space(unsigned char c)
{
	return c <= 0x20 || c == 0x7f;
}

enum atb_status atbi_box_clean(const char *s, size_t n, char **out)
{
	char *d;
	size_t i, j = 0;
	int pending_space = 0;

	*out = NULL;
	if (!s)
		return ATB_OK;
	d = atb_malloc(n + 1);
	if (!d)
		return ATB_ERR_NOMEM;
	for (i = 0; i < n && s[i]; i++) {
		unsigned char c = (unsigned char)s[i];

		if (is_space(c)) {
			pending_space = j > 0;
			continue;
		}
		if (c > 0x7e)
			c = '?';
		if (pending_space) {
			d[j++] = ' ';
			pending_space = 0;
		}
		d[j++] = (char)c;
	}
	d[j] = '\0';
	if (j == 0) {
		atb_free(d);
		return ATB_OK;
	}
	*out = d;
	return ATB_OK;
}

int atbi_box_is_clean(const char *s)
{
	if (!s)
		return 1;
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return 0;
	return 1;
}

/*
 * Split one "key<spaces>: value" line.  The key is trimmed in place into
 * key[]; *val points at the value, *vlen its length without trailing space.
 */
static int split_line(const char *line, size_t len, char *key, size_t keysz,
		      const char **val, size_t *vlen)
{
	const char *colon = memchr(line, ':', len);
	size_t k, end;

	if (!colon)
		return 0;
	k = (size_t)(colon - line);
	while (k > 0 && is_space((unsigned char)line[k - 1]))
		k--;
	if (k == 0 || k >= keysz)
		return 0;
	memcpy(key, line, k);
	key[k] = '\0';
	*val = colon + 1;
	end = len - (size_t)(*val - line);
	while (end > 0 && is_space((unsigned char)**val)) {
		(*val)++;
		end--;
	}
	while (end > 0 && is_space((unsigned char)(*val)[end - 1]))
		end--;
	*vlen = end;
	return 1;
}

/* Keys that name the CPU, best first (x86, old Arm, MIPS, POWER, RISC-V). */
static const char *const model_keys[] = {
	"model name", "Processor", "cpu model", "cpu", "uarch",
};
#define NMODEL_KEYS (sizeof(model_keys) / sizeof(model_keys[0]))

enum atb_status atbi_box_parse_cpuinfo(const char *text, char **model,
				       long *physical_cores)
{
	const char *p = text, *best = NULL;
	size_t best_len = 0, best_rank = NMODEL_KEYS;
	char implementer[32] = "", part[32] = "";
	uint64_t *pairs = NULL;
	size_t npairs = 0, cap = 0, i;
	long phys = -1, core = -1;
	enum atb_status st;

	*model = NULL;
	*physical_cores = 0;
	while (p && *p) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		const char *val;
		size_t vlen, r;
		char key[64];

		if (len == 0) {
			/* a blank line ends one processor's block */
			phys = core = -1;
		} else if (split_line(p, len, key, sizeof(key), &val, &vlen)) {
			for (r = 0; r < best_rank; r++) {
				if (!strcmp(key, model_keys[r]) && vlen > 0) {
					best = val;
					best_len = vlen;
					best_rank = r;
					break;
				}
			}
			if (!strcmp(key, "CPU implementer") && !implementer[0] &&
			    vlen < sizeof(implementer)) {
				memcpy(implementer, val, vlen);
				implementer[vlen] = '\0';
			} else if (!strcmp(key, "CPU part") && !part[0] &&
				   vlen < sizeof(part)) {
				memcpy(part, val, vlen);
				part[vlen] = '\0';
			} else if (!strcmp(key, "physical id")) {
				phys = strtol(val, NULL, 10);
			} else if (!strcmp(key, "core id")) {
				core = strtol(val, NULL, 10);
			}
			if (phys >= 0 && core >= 0) {
				uint64_t pair = ((uint64_t)phys << 32) | (uint64_t)(uint32_t)core;

				for (i = 0; i < npairs && pairs[i] != pair; i++)
					;
				if (i == npairs) {
					if (npairs == cap) {
						size_t ncap = cap ? 2 * cap : 64;
						uint64_t *np = atb_realloc(pairs, ncap * sizeof(*np));

						if (!np) {
							atb_free(pairs);
							return ATB_ERR_NOMEM;
						}
						pairs = np;
						cap = ncap;
					}
					pairs[npairs++] = pair;
				}
				phys = core = -1;
			}
		}
		p = nl ? nl + 1 : NULL;
	}
	atb_free(pairs);
	*physical_cores = (long)npairs;

	/* On Arm the "model name" line is often absent: name the core by its ids. */
	if (best_rank > 0 && implementer[0] && part[0]) {
		char buf[96];

		snprintf(buf, sizeof(buf), "arm implementer %s part %s", implementer, part);
		return atbi_box_clean(buf, strlen(buf), model);
	}
	if (!best)
		return ATB_OK;
	st = atbi_box_clean(best, best_len, model);
	return st;
}

uint64_t atbi_box_parse_meminfo(const char *text, const char *key)
{
	size_t klen = strlen(key);
	const char *p = text;

	while (p && *p) {
		if (!strncmp(p, key, klen) && p[klen] == ':') {
			char *end;
			unsigned long long v = strtoull(p + klen + 1, &end, 10);

			while (*end == ' ' || *end == '\t')
				end++;
			if (!strncmp(end, "kB", 2))
				return (uint64_t)v * 1024u;
			return (uint64_t)v;
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return 0;
}

/* Unquote an os-release value (shell-like: "..." with \ escapes, or '...'). */
static enum atb_status unquote(const char *v, size_t n, char **out)
{
	char buf[512];
	size_t i = 0, j = 0;
	char q = 0;

	if (n > 0 && (v[0] == '"' || v[0] == '\'')) {
		q = v[0];
		i = 1;
	}
	for (; i < n && j + 1 < sizeof(buf); i++) {
		if (q && v[i] == q)
			break;
		if (q == '"' && v[i] == '\\' && i + 1 < n)
			i++;
		buf[j++] = v[i];
	}
	buf[j] = '\0';
	return atbi_box_clean(buf, j, out);
}

enum atb_status atbi_box_parse_os_release(const char *text, char **name)
{
	const char *p = text, *pretty = NULL, *plain = NULL;
	size_t pretty_len = 0, plain_len = 0;

	*name = NULL;
	while (p && *p) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);

		if (len > 12 && !strncmp(p, "PRETTY_NAME=", 12)) {
			pretty = p + 12;
			pretty_len = len - 12;
		} else if (len > 5 && !strncmp(p, "NAME=", 5)) {
			plain = p + 5;
			plain_len = len - 5;
		}
		p = nl ? nl + 1 : NULL;
	}
	if (pretty)
		return unquote(pretty, pretty_len, name);
	if (plain)
		return unquote(plain, plain_len, name);
	return ATB_OK;
}

uint64_t atbi_box_parse_cache_size(const char *text)
{
	char *end;
	unsigned long long v;

	if (!text || *text < '0' || *text > '9')
		return 0;
	v = strtoull(text, &end, 10);
	switch (*end) {
	case 'K':
		v *= 1024ull;
		end++;
		break;
	case 'M':
		v *= 1024ull * 1024ull;
		end++;
		break;
	case 'G':
		v *= 1024ull * 1024ull * 1024ull;
		end++;
		break;
	default:
		break;
	}
	while (*end == '\n' || *end == ' ')
		end++;
	return *end ? 0 : (uint64_t)v;
}
