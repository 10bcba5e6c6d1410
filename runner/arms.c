/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Each arm's shared object, for every backend: hashed (the env event names
 * the exact bytes that ran), then dlopen()ed and its atb_kernel found.  The
 * cpu backend's objects are built with cc, the cuda backend's with nvcc (a
 * host wrapper that launches on args->stream); loading is the same.
 *
 * Does not: unload anything (destructors run at process exit) or check
 * what the kernel does.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "atb/alloc.h"
#include "runner_int.h"
#include "banned.h"

static int load_arms(const struct atb_runner_job *job, struct runner_arm *arms, int dl)
{
	char msg[1200];
	size_t i;

	for (i = 0; i < job->narms; i++) {
		struct runner_arm *a = &arms[i];
		struct atb_error err;
		char *data = NULL;
		size_t len = 0;
		void *sym;

		a->arm = &job->arms[i];
		atb_error_clear(&err);
		if (atbi_read_file(a->arm->so, &data, &len, &err)) {
			snprintf(msg, sizeof(msg), "cannot load arm '%s': %s", a->arm->name, err.msg);
			runner_emit_error("dlopen", msg);
			return -1;
		}
		atbi_sha256_hex(data, len, a->sha256);
		atb_free(data);
		if (!dl)
			continue;
		a->dl = dlopen(a->arm->so, RTLD_NOW | RTLD_LOCAL);
		if (!a->dl) {
			snprintf(msg, sizeof(msg), "cannot load arm '%s' from '%s': %s",
				 a->arm->name, a->arm->so, dlerror());
			runner_emit_error("dlopen", msg);
			return -1;
		}
		sym = dlsym(a->dl, ATB_KERNEL_SYMBOL);
		if (!sym) {
			snprintf(msg, sizeof(msg), "no symbol '%s' in arm '%s' ('%s')",
				 ATB_KERNEL_SYMBOL, a->arm->name, a->arm->so);
			runner_emit_error("no_symbol", msg);
			return -1;
		}
		/* dlsym returns void *; copying the bits avoids an object-to-function cast. */
		memcpy(&a->fn, &sym, sizeof(a->fn));
	}
	return 0;
}

int runner_load_arms(const struct atb_runner_job *job, struct runner_arm *arms)
{
	return load_arms(job, arms, 1);
}

int runner_hash_arms(const struct atb_runner_job *job, struct runner_arm *arms)
{
	return load_arms(job, arms, 0);
}

json_t *runner_arms_json(const struct atb_runner_job *job, const struct runner_arm *arms)
{
	json_t *out = json_array();
	size_t i;

	for (i = 0; out && i < job->narms; i++)
		if (json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "name",
							 arms[i].arm->name, "so", arms[i].arm->so,
							 "sha256", arms[i].sha256))) {
			json_decref(out);
			return NULL;
		}
	return out;
}
