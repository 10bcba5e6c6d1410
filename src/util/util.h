/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Internals shared by libatb's modules: hashing, canonical JSON, file
 * reading, clocks, hex.  Not part of the public API (atbi_ prefix, hidden).
 * Does not: print, exit, or allocate other than through atb_malloc.
 */
#ifndef ATB_UTIL_H
#define ATB_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "atb/status.h"

#define ATBI_FUNC __attribute__((visibility("hidden")))

#define ATB_SHA256_HEX_LEN 64

/* SHA-256 of data (OpenSSL libcrypto) as 64 lowercase hex chars + NUL. */
ATBI_FUNC enum atb_status atbi_sha256_hex(const void *data, size_t len,
					  char out[ATB_SHA256_HEX_LEN + 1]);

/* True when s is exactly 64 lowercase hex characters. */
ATBI_FUNC int atbi_is_sha256_hex(const char *s);

/*
 * Canonical JSON text of v: keys sorted, no whitespace, ASCII only, reals
 * with 17 significant digits.  Two values equal as JSON trees give equal
 * text.  Caller owns *out (atb_free).
 */
ATBI_FUNC enum atb_status atbi_json_canonical(const json_t *v, char **out,
					      struct atb_error *err);

/*
 * Read a whole file into a NUL-terminated buffer; caller owns *out
 * (atb_free).  *len may be NULL.  Errors name the path.
 */
ATBI_FUNC enum atb_status atbi_read_file(const char *path, char **out,
					 size_t *len, struct atb_error *err);

/* Write all n bytes of p to fd, again after EINTR or a short write.  0, or -1 with errno. */
ATBI_FUNC int atbi_write_all(int fd, const char *p, size_t n);

/* Wall-clock time (CLOCK_REALTIME) in ns since the epoch: for timestamps only. */
ATBI_FUNC int64_t atbi_realtime_ns(void);
/* CLOCK_MONOTONIC in ns: for every duration. */
ATBI_FUNC int64_t atbi_monotonic_ns(void);

/* Format realtime ns as RFC 3339 UTC with microseconds into buf (>= 32 bytes). */
ATBI_FUNC void atbi_format_time(int64_t realtime_ns, char *buf, size_t size);

/* Lowercase hex of len bytes into out (2*len+1 bytes). */
ATBI_FUNC void atbi_hex(const unsigned char *in, size_t len, char *out);

/* Random 128-bit identifier as 32 hex chars + NUL (from getrandom). */
ATBI_FUNC enum atb_status atbi_random_id(char out[33]);

/* Offset of the first byte of text that is not UTF-8 (RFC 3629), len if none. */
ATBI_FUNC size_t atbi_utf8_invalid_at(const char *text, size_t len);

/*
 * Refuse YAML text libfyaml must not see: ATB_ERR_PARSE at path:line:column
 * naming the first byte that is not UTF-8 (libfyaml 0.7.12 never returns on
 * some; see utf8.c).  Every YAML load calls it before parsing.
 */
ATBI_FUNC enum atb_status atbi_yaml_prescan(const char *path, const char *text, size_t len,
					    struct atb_error *err);

#endif
