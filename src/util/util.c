/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Shared internals: SHA-256 through libcrypto's EVP interface, canonical JSON
 * through jansson, whole-file reads, clocks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <openssl/evp.h>

#include "atb/alloc.h"
#include "util.h"
#include "banned.h"

void atbi_hex(const unsigned char *in, size_t len, char *out)
{
	static const char digits[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < len; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * len] = '\0';
}

enum atb_status atbi_sha256_hex(const void *data, size_t len,
				char out[ATB_SHA256_HEX_LEN + 1])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (!EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) ||
	    mdlen != 32) {
		out[0] = '\0';
		return ATB_ERR_INTERNAL;
	}
	atbi_hex(md, 32, out);
	return ATB_OK;
}

int atbi_is_sha256_hex(const char *s)
{
	size_t i;

	if (!s)
		return 0;
	for (i = 0; i < ATB_SHA256_HEX_LEN; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return s[ATB_SHA256_HEX_LEN] == '\0';
}

enum atb_status atbi_json_canonical(const json_t *v, char **out,
				    struct atb_error *err)
{
	char *s;

	*out = NULL;
	atb_alloc_install_json();
	s = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENSURE_ASCII |
				  JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
	if (!s)
		return atb_error_set(err, ATB_ERR_NOMEM,
				     "cannot encode canonical json: out of memory");
	*out = s;  /* allocated by atb_malloc through jansson's hook */
	return ATB_OK;
}

enum atb_status atbi_read_file(const char *path, char **out, size_t *len,
			       struct atb_error *err)
{
	FILE *f;
	char *buf = NULL, *nbuf;
	size_t cap = 0, n = 0, r;

	*out = NULL;
	if (len)
		*len = 0;
	f = fopen(path, "rb");
	if (!f)
		return atb_error_set_at(err, errno == ENOENT ? ATB_ERR_NOT_FOUND : ATB_ERR_IO,
					path, 0, 0, NULL, "cannot open '%s': %s",
					path, strerror(errno));
	for (;;) {
		if (cap - n < 4096) {
			cap = cap ? cap * 2 : 8192;
			nbuf = atb_realloc(buf, cap + 1);
			if (!nbuf) {
				atb_free(buf);
				fclose(f);
				return atb_error_set(err, ATB_ERR_NOMEM,
						     "cannot read '%s': out of memory", path);
			}
			buf = nbuf;
		}
		r = fread(buf + n, 1, cap - n, f);
		n += r;
		if (r == 0)
			break;
	}
	if (ferror(f)) {
		atb_free(buf);
		fclose(f);
		return atb_error_set_at(err, ATB_ERR_IO, path, 0, 0, NULL,
					"cannot read '%s': i/o error", path);
	}
	fclose(f);
	buf[n] = '\0';
	*out = buf;
	if (len)
		*len = n;
	return ATB_OK;
}

int64_t atbi_realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t atbi_monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void atbi_format_time(int64_t realtime_ns, char *buf, size_t size)
{
	time_t secs = (time_t)(realtime_ns / 1000000000);
	long us = (long)((realtime_ns % 1000000000) / 1000);
	struct tm tm;
	char tmp[32];

	gmtime_r(&secs, &tm);
	strftime(tmp, sizeof(tmp), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, size, "%s.%06ldZ", tmp, us);
}

enum atb_status atbi_random_id(char out[33])
{
	unsigned char b[16];
	size_t got = 0;
	ssize_t r;

	while (got < sizeof(b)) {
		r = getrandom(b + got, sizeof(b) - got, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return ATB_ERR_SYSTEM;
		}
		got += (size_t)r;
	}
	atbi_hex(b, sizeof(b), out);
	return ATB_OK;
}
