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
#include <unistd.h>

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

struct dumpbuf {
	char *p;
	size_t len, cap;
	int failed;   /* a growth failed: the text is incomplete */
};

static int dump_append(const char *buf, size_t size, void *data)
{
	struct dumpbuf *b = data;
	char *np;
	size_t ncap;

	if (b->failed)
		return -1;
	if (b->len + size + 1 > b->cap) {
		ncap = b->cap ? b->cap : 256;
		while (ncap < b->len + size + 1)
			ncap *= 2;
		np = atb_realloc(b->p, ncap);
		if (!np) {
			b->failed = 1;
			return -1;
		}
		b->p = np;
		b->cap = ncap;
	}
	memcpy(b->p + b->len, buf, size);
	b->len += size;
	b->p[b->len] = '\0';
	return 0;
}

/*
 * jansson 2.14 can return success from a dump whose allocation failed
 * inside it (a key went missing under fault injection), and the text would
 * then get a digest.  So the text goes into our own buffer, which remembers
 * a failed growth, and is read back and compared with the tree before it is
 * trusted.
 */
enum atb_status atbi_json_canonical(const json_t *v, char **out,
				    struct atb_error *err)
{
	struct dumpbuf b = {0};
	json_t *back;
	int ok;

	*out = NULL;
	atb_alloc_install_json();
	if (json_dump_callback(v, dump_append, &b,
			       JSON_SORT_KEYS | JSON_COMPACT | JSON_ENSURE_ASCII |
				       JSON_ENCODE_ANY | JSON_REAL_PRECISION(17)) ||
	    b.failed || !b.p) {
		atb_free(b.p);
		return atb_error_set(err, ATB_ERR_NOMEM,
				     "cannot encode canonical json: out of memory");
	}
	back = json_loadb(b.p, b.len, JSON_DECODE_ANY, NULL);
	ok = back && json_equal(back, (json_t *)v);
	json_decref(back);
	if (!ok) {
		atb_free(b.p);
		/* Only a failed allocation in jansson can make the two differ. */
		return atb_error_set(err, ATB_ERR_NOMEM,
				     "cannot encode canonical json: out of memory");
	}
	*out = b.p;
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

int atbi_write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
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
