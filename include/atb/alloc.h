/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The one allocator of libatb.
 *
 * All library allocation goes through these functions so that tests can make
 * the k-th allocation fail (Lua's allocator, SQLite's fault simulation) and
 * walk k = 1..N over parse, ingest and audit.  Jansson is pointed at the same
 * functions by atb_alloc_install_json().  Not thread-safe by design: atb is
 * single-threaded; the runner is a separate process.
 */
#ifndef ATB_ALLOC_H
#define ATB_ALLOC_H

#include <stddef.h>

void *atb_malloc(size_t size);
void *atb_calloc(size_t n, size_t size);
void *atb_realloc(void *p, size_t size);
void atb_free(void *p);
/*
 * size bytes aligned to align (a power of two, a multiple of sizeof(void *));
 * NULL on failure.  Free with atb_free.
 */
void *atb_aligned_alloc(size_t align, size_t size);
/* Copy of s (NULL when s is NULL or on failure); free with atb_free. */
char *atb_strdup(const char *s);
/* Copy of the first n bytes of s, NUL-terminated; free with atb_free. */
char *atb_strndup(const char *s, size_t n);

/*
 * Test hook: from now, allocation number k (1-based) fails and every later
 * one succeeds; k = 0 turns failure injection off.  Counts only atb_* and
 * jansson allocations.
 */
void atb_alloc_fail_at(long k);
/* Number of allocations made since the last atb_alloc_fail_at() call. */
long atb_alloc_count(void);
/* True once the injected failure has fired since the last atb_alloc_fail_at(). */
int atb_alloc_failed(void);

/* Route jansson's allocations through atb_malloc/atb_free.  Idempotent. */
void atb_alloc_install_json(void);

#endif
