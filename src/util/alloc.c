/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The replaceable allocator with failure injection for tests.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "atb/alloc.h"
#include "banned.h"

static long fail_at;   /* 0: never fail */
static long count;
static int failed;

static int should_fail(void)
{
	count++;
	if (fail_at && count == fail_at) {
		failed = 1;
		return 1;
	}
	return 0;
}

void atb_alloc_fail_at(long k)
{
	fail_at = k;
	count = 0;
	failed = 0;
}

long atb_alloc_count(void)
{
	return count;
}

int atb_alloc_failed(void)
{
	return failed;
}

void *atb_malloc(size_t size)
{
	if (should_fail())
		return NULL;
	return malloc(size ? size : 1);
}

void *atb_calloc(size_t n, size_t size)
{
	if (should_fail())
		return NULL;
	return calloc(n ? n : 1, size ? size : 1);
}

void *atb_realloc(void *p, size_t size)
{
	if (should_fail())
		return NULL;
	return realloc(p, size ? size : 1);
}

void *atb_aligned_alloc(size_t align, size_t size)
{
	void *p = NULL;

	if (should_fail())
		return NULL;
	if (posix_memalign(&p, align, size ? size : 1))
		return NULL;
	return p;
}

void atb_free(void *p)
{
	free(p);
}

char *atb_strndup(const char *s, size_t n)
{
	char *d;

	if (!s)
		return NULL;
	d = atb_malloc(n + 1);
	if (!d)
		return NULL;
	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

char *atb_strdup(const char *s)
{
	return s ? atb_strndup(s, strlen(s)) : NULL;
}

void atb_alloc_install_json(void)
{
	static int done;

	if (done)
		return;
	json_set_alloc_funcs(atb_malloc, atb_free);
	done = 1;
}
