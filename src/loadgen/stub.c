/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Temporary compiling skeleton of atb/loadgen.h: every entry point exists
 * and the fallible ones report "not implemented yet".  Replaced piece by
 * piece by workload.c, client.c and metrics.c.
 */
#include <stddef.h>
#include <string.h>

#include "atb/alloc.h"
#include "atb/loadgen.h"
#include "util.h"
#include "banned.h"

#define NOT_YET(err) atb_error_set(err, ATB_ERR_INTERNAL, "load generator not implemented yet")

const char *atb_loadgen_failure_name(enum atb_loadgen_failure f)
{
	(void)f;
	return "other";
}

void atb_loadgen_config_init(struct atb_loadgen_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
}

enum atb_status atb_loadgen_dist_parse(const char *text, struct atb_loadgen_dist *out,
				       struct atb_error *err)
{
	return NOT_YET(err);
}

enum atb_status atb_loadgen_arrival_parse(const char *text, enum atb_loadgen_arrival *out,
					  struct atb_error *err)
{
	return NOT_YET(err);
}

enum atb_status atb_loadgen_endpoint_parse(const char *text, enum atb_loadgen_endpoint *out,
					   struct atb_error *err)
{
	return NOT_YET(err);
}

enum atb_status atb_loadgen_prompts_parse(const char *text, enum atb_loadgen_prompts *out,
					  struct atb_error *err)
{
	return NOT_YET(err);
}

enum atb_status atb_loadgen_workload_new(const struct atb_loadgen_config *cfg,
					 struct atb_loadgen_workload **out, struct atb_error *err)
{
	*out = NULL;
	return NOT_YET(err);
}

void atb_loadgen_workload_free(struct atb_loadgen_workload *wl)
{
}

size_t atb_loadgen_workload_count(const struct atb_loadgen_workload *wl)
{
	return 0;
}

const struct atb_loadgen_request *atb_loadgen_workload_get(const struct atb_loadgen_workload *wl,
							   size_t i)
{
	return NULL;
}

enum atb_status atb_loadgen_workload_json(const struct atb_loadgen_workload *wl, char **json,
					  struct atb_error *err)
{
	*json = NULL;
	return NOT_YET(err);
}

enum atb_status atb_loadgen_workload_digest(const struct atb_loadgen_workload *wl,
					    char out[65], struct atb_error *err)
{
	out[0] = '\0';
	return NOT_YET(err);
}

enum atb_status atb_loadgen_run(const struct atb_loadgen_config *cfg,
				struct atb_loadgen_result **out, struct atb_error *err)
{
	*out = NULL;
	return NOT_YET(err);
}

enum atb_status atb_loadgen_run_workload(const struct atb_loadgen_config *cfg,
					 const struct atb_loadgen_workload *wl,
					 struct atb_loadgen_result **out, struct atb_error *err)
{
	*out = NULL;
	return NOT_YET(err);
}

size_t atb_loadgen_result_count(const struct atb_loadgen_result *res)
{
	return 0;
}

const struct atb_loadgen_record *atb_loadgen_result_record(const struct atb_loadgen_result *res,
							   size_t i)
{
	return NULL;
}

const struct atb_loadgen_summary *atb_loadgen_result_summary(const struct atb_loadgen_result *res)
{
	return NULL;
}

const char *atb_loadgen_result_workload_digest(const struct atb_loadgen_result *res)
{
	return "";
}

enum atb_status atb_loadgen_result_json(const struct atb_loadgen_result *res, int with_records,
					char **json, struct atb_error *err)
{
	*json = NULL;
	return NOT_YET(err);
}

enum atb_status atb_loadgen_record_json(const struct atb_loadgen_record *rec, char **json,
					struct atb_error *err)
{
	*json = NULL;
	return NOT_YET(err);
}

enum atb_status atb_loadgen_result_write_records(const struct atb_loadgen_result *res,
						 const char *path, struct atb_error *err)
{
	return NOT_YET(err);
}

void atb_loadgen_result_free(struct atb_loadgen_result *res)
{
}
