/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The box: what this machine is, and a fingerprint that names it.
 *
 * Absolute times are kept only as raw data tied to the box they were
 * measured on (docs/design.md, "ratios, not absolutes"), so every stored result
 * carries a box fingerprint.  This module probes the CPU, memory, OS, kernel,
 * C compiler, CPU caches and, when NVIDIA's NVML library can be loaded at run
 * time, the GPUs; it describes the box as JSON and hashes the identity
 * fields into the fingerprint.
 *
 * Identity fields (hashed; they define the box and do not change between
 * two probes of an unchanged machine): CPU model, logical cores, memory total
 * rounded to GiB, OS pretty name, kernel release, architecture, compiler
 * version line, GPU driver version, and each GPU's name and UUID.  Everything
 * else is description (physical cores, caches, exact memory, GPU memory and
 * max clocks) or volatile (current clocks, temperature, free memory,
 * persistence mode, load): those never enter the fingerprint.  The fingerprint
 * is the SHA-256 of the canonical JSON text of the "identity" object that
 * atb_box_to_json() prints, so anyone can recompute it.  docs/box.md lists
 * the fields and the reasons.
 *
 * Does not: measure anything (bandwidth, peak flops: the timing core does),
 * read the GPU's L2 size (NVML does not report it; the CUDA backend does), or
 * link against NVML (it is dlopen()ed; no library or a failed nvmlInit means
 * "no GPU", not an error).
 */
#ifndef ATB_BOX_H
#define ATB_BOX_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "atb/status.h"

/*
 * Bump when the identity recipe (the set of hashed fields or how they are
 * normalised) changes: it is part of the hashed object, so fingerprints made
 * by different recipes never collide.
 */
#define ATB_BOX_FINGERPRINT_VERSION 1

#define ATB_BOX_FINGERPRINT_LEN 64

/* One GPU as NVML reports it.  Strings are owned by the box (atb_free). */
struct atb_box_gpu {
	unsigned index;                 /* NVML device index */
	char *name;                     /* identity, e.g. "NVIDIA H200" */
	char *uuid;                     /* identity, e.g. "GPU-5d1c..." */
	uint64_t memory_total_bytes;    /* description; 0 when unknown */
	unsigned sm_clock_max_mhz;      /* description; 0 when unknown */
	unsigned mem_clock_max_mhz;     /* description; 0 when unknown */
	/* volatile: */
	unsigned sm_clock_mhz;          /* current; 0 when unknown */
	unsigned mem_clock_mhz;         /* current; 0 when unknown */
	uint64_t memory_free_bytes;     /* 0 when unknown */
	int temperature_c;              /* -1 when unknown */
	int persistence_mode;           /* 1 on, 0 off, -1 unknown */
};

/*
 * The probed box.  Every field is public so that callers (and tests) can read
 * it; a caller that edits a string must replace it with atb_strdup'ed memory,
 * because atb_box_free() frees it with atb_free.  A NULL string means
 * "unknown" and is null in JSON.
 */
struct atb_box {
	/* identity */
	char *cpu_model;                /* /proc/cpuinfo, spaces collapsed */
	long logical_cores;             /* sysconf(_SC_NPROCESSORS_ONLN) */
	uint64_t memory_total_bytes;    /* hashed rounded to GiB */
	char *os;                       /* /etc/os-release PRETTY_NAME */
	char *kernel;                   /* uname -r */
	char *arch;                     /* uname -m */
	char *compiler_version;         /* first line of `CC --version` */
	char *gpu_driver_version;       /* NVML; NULL without a GPU */
	size_t ngpus;
	struct atb_box_gpu *gpus;       /* ngpus entries; name and uuid hashed */

	/* description */
	char *compiler;                 /* the program run, e.g. "cc" */
	long physical_cores;            /* 0 when not knowable */
	uint64_t cache_largest_bytes;   /* largest CPU cache; 0 when unknown */
	int cuda_driver_version;        /* NVML, e.g. 12040; 0 without a GPU */

	/* volatile */
	int64_t probed_at_ns;           /* CLOCK_REALTIME, a timestamp */
	uint64_t memory_available_bytes;/* /proc/meminfo MemAvailable; 0 unknown */
	double loadavg_1m;              /* -1 when unknown */
	char *gpu_probe;                /* why no GPU was seen, or "ok" */
};

/*
 * Probe this machine with the C compiler "cc".  Same as
 * atb_box_probe_with_compiler(out, NULL, err).
 */
enum atb_status atb_box_probe(struct atb_box **out, struct atb_error *err);

/*
 * Probe this machine.  compiler is the program whose `--version` first line
 * is recorded (the protocol's build.cpu.compiler); NULL means "cc".  It is
 * run directly (posix_spawnp, no shell, LC_ALL=C); it must be a program name
 * or path, not a command line.  A compiler that cannot be run leaves
 * compiler_version NULL; that is not an error.  NVML is loaded with
 * dlopen("libnvidia-ml.so.1"), or the path in $ATB_NVML_LIBRARY when set
 * (for tests and for unusual installs); a missing library or a failed
 * nvmlInit leaves ngpus 0 and says why in gpu_probe.
 *
 * Caller owns *out (atb_box_free); *out is NULL on failure.
 * Returns ATB_OK; ATB_ERR_USAGE for a NULL out or a compiler that is empty or
 * starts with '-'; ATB_ERR_NOMEM; ATB_ERR_SYSTEM when uname() fails.
 */
enum atb_status atb_box_probe_with_compiler(struct atb_box **out,
					    const char *compiler,
					    struct atb_error *err);

/* Free a box and everything it owns.  box may be NULL. */
void atb_box_free(struct atb_box *box);

/*
 * The fingerprint: SHA-256 of the canonical JSON of the identity object,
 * as 64 lowercase hex characters and a NUL, into out.
 * Returns ATB_OK, ATB_ERR_NOMEM, ATB_ERR_INTERNAL (hashing failed).
 * out is "" on failure.
 */
enum atb_status atb_box_fingerprint(const struct atb_box *box,
				    char out[ATB_BOX_FINGERPRINT_LEN + 1],
				    struct atb_error *err);

/*
 * The identity object alone (exactly what is hashed).  Caller owns *out
 * (json_decref); *out is NULL on failure.  Returns ATB_OK or ATB_ERR_NOMEM.
 */
enum atb_status atb_box_identity_json(const struct atb_box *box, json_t **out,
				      struct atb_error *err);

/*
 * The box as JSON: "fingerprint", "fingerprint_version", "identity", the
 * description fields and "gpus"; with include_volatile non-zero also a
 * "volatile" object (probe time, available memory, load, per-GPU current
 * clocks, free memory, temperature, persistence mode, gpu_probe).  The store
 * keeps the form without volatile fields; reports show the full one.
 * docs/box.md lists every key.  Caller owns *out (json_decref); *out is NULL
 * on failure.  Returns ATB_OK, ATB_ERR_NOMEM, ATB_ERR_INTERNAL.
 */
enum atb_status atb_box_to_json(const struct atb_box *box, int include_volatile,
				json_t **out, struct atb_error *err);

#endif
