/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Internals of the box module: the text parsers (kept apart from the file
 * reads so tests can feed them fixtures) and the NVML probe.  Not public.
 */
#ifndef ATB_BOX_INT_H
#define ATB_BOX_INT_H

#include <stddef.h>
#include <stdint.h>

#include "atb/box.h"
#include "util.h"

/*
 * Copy the first n bytes of s (stopping at a NUL) as printable ASCII: other
 * bytes above 0x7e become '?', control characters and runs of white space
 * become one space, leading and trailing space is dropped.  *out is NULL
 * when nothing is left.  Returns ATB_OK or ATB_ERR_NOMEM.
 */
ATBI_FUNC enum atb_status atbi_box_clean(const char *s, size_t n, char **out);

/* True when s is NULL or printable ASCII only (what to_json accepts). */
ATBI_FUNC int atbi_box_is_clean(const char *s);

/*
 * From /proc/cpuinfo text: the CPU model (x86 "model name"; other
 * architectures' keys as fallbacks; on Arm "arm implementer 0x.. part 0x..")
 * and the number of distinct (physical id, core id) pairs, 0 when the text
 * has none.  *model is NULL when unknown.  ATB_OK or ATB_ERR_NOMEM.
 */
ATBI_FUNC enum atb_status atbi_box_parse_cpuinfo(const char *text, char **model,
						 long *physical_cores);

/* "MemAvailable:  123 kB" style key from /proc/meminfo text, in bytes; 0 if absent. */
ATBI_FUNC uint64_t atbi_box_parse_meminfo(const char *text, const char *key);

/*
 * PRETTY_NAME (else NAME) from os-release text, unquoted.  *name is NULL when
 * absent.  ATB_OK or ATB_ERR_NOMEM.
 */
ATBI_FUNC enum atb_status atbi_box_parse_os_release(const char *text, char **name);

/* A sysfs cache size ("32K", "1024K", "32M", "512") in bytes; 0 if malformed. */
ATBI_FUNC uint64_t atbi_box_parse_cache_size(const char *text);

/*
 * Fill box->gpus, ngpus, gpu_driver_version, cuda_driver_version and
 * gpu_probe through NVML, loaded with dlopen.  No library, a missing
 * required symbol or a failed nvmlInit is "no GPU" (ATB_OK, a note in
 * gpu_probe).  ATB_OK or ATB_ERR_NOMEM.
 */
ATBI_FUNC enum atb_status atbi_box_probe_gpus(struct atb_box *box,
					      struct atb_error *err);

#endif
