/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb protocol: show, digest, verify and freeze the frozen protocol.  A thin
 * layer over include/atb/protocol.h; the help text below is the command's
 * documentation (docs/protocol.md says the same at more length).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "atb/protocol.h"
#include "cli.h"
#include "banned.h"

static const char usage_text[] =
	"usage: atb protocol show [--version N] [--home DIR] [--json]\n"
	"       atb protocol digest [FILE] [--home DIR] [--json]\n"
	"       atb protocol verify [--home DIR] [--json]\n"
	"       atb protocol freeze FILE [--home DIR] [--json]\n"
	"       atb protocol manifest [--write] [--home DIR] [--json]\n"
	"\n"
	"The measurement protocol is frozen as code: HOME/protocol/ holds one YAML\n"
	"file per version (v1.yaml, v2.yaml, ...) and protocol.lock, which pins the\n"
	"SHA-256 of each file's canonical form (the YAML as JSON with sorted keys\n"
	"and no whitespace: comments, layout and key order do not count, values\n"
	"do) and names the current version.  Every result carries that digest.\n"
	"\n"
	"subcommands:\n"
	"  show     print the current protocol (or version N) grouped by section,\n"
	"           with its version and digest; with --json, an object with\n"
	"           version, digest, file and protocol (the canonical JSON)\n"
	"  digest   print the digest of the current frozen protocol (checked\n"
	"           against the lock), or of FILE's canonical form (no schema or\n"
	"           lock check), as 'DIGEST  FILE'\n"
	"  verify   check every lock entry against its file: a line per version\n"
	"           and exit 0, or exit 2 naming the first file whose digest or\n"
	"           version no longer matches, with both digests; then the trusted\n"
	"           files against protocol/manifest, when the home has one\n"
	"  freeze   (maintainers) add FILE as the next version: FILE must pass\n"
	"           the schema and its 'version:' must be the current version + 1;\n"
	"           it is copied to HOME/protocol/vN.yaml and the lock gains an\n"
	"           entry that becomes current.  Existing entries never change.\n"
	"           A home with a manifest gets it rewritten (the lock changed).\n"
	"  manifest check the trusted files (every file under HOME/include,\n"
	"           HOME/tasks and HOME/engines, the .py files under HOME/python,\n"
	"           and the lock)\n"
	"           against HOME/protocol/manifest, their SHA-256 in sha256sum's\n"
	"           format: exit 0, or exit 2 naming the first file that changed\n"
	"           (both digests), is missing or is new.  atb measure runs the\n"
	"           same check before every measurement and refuses to start.\n"
	"           --write (maintainers): write the manifest from the files as\n"
	"           they are, after changing a trusted file on purpose\n"
	"\n"
	"options:\n"
	"  --version N  show: that frozen version instead of the current one\n"
	"  --write      manifest: write it instead of checking it\n"
	"  --home DIR   the folder holding protocol/ (default: $ATB_HOME or the\n"
	"               source tree atb was built from)\n"
	"  --json       machine-readable output (also 'atb --json protocol ...')\n"
	"  -h, --help   this text\n"
	"\n"
	"errors name file:line:column and the field, e.g.\n"
	"  atb: v2.yaml:17:3: stats.cv_cap: expected a number in (0, 1), got '1.5'\n"
	"exit codes: 0 ok; 2 bad input, schema error, or protocol changed without\n"
	"a new version; 3 i/o failure; 4 internal error\n";

struct opts {
	const char *sub;
	const char *file;
	const char *home;
	int version;
	int json;
	int write;
};

/* On failure with --json, the error also goes to stdout as an object. */
static int fail(const struct opts *o, const struct atb_error *err)
{
	if (o->json) {
		json_t *v = json_pack("{s:b,s:{s:s,s:s,s:i,s:i,s:s,s:s}}", "ok", 0, "error",
				      "status", atb_status_name(err->status), "file", err->file,
				      "line", (int)err->line, "column", (int)err->column,
				      "field", err->field, "message", err->msg);

		cli_print_json("protocol", v);
	}
	return cli_fail(err);
}

static void print_value(const char *path, const json_t *v)
{
	char sub[512];
	const char *key;
	json_t *child;
	size_t i;

	if (json_is_object(v)) {
		const char **keys;
		size_t n = json_object_size(v), k = 0, a, b;

		keys = atb_calloc(n ? n : 1, sizeof(*keys));
		if (!keys)
			return;
		json_object_foreach((json_t *)v, key, child)
			keys[k++] = key;
		for (a = 1; a < n; a++)  /* insertion sort: a handful of keys */
			for (b = a; b > 0 && strcmp(keys[b - 1], keys[b]) > 0; b--) {
				const char *t = keys[b];

				keys[b] = keys[b - 1];
				keys[b - 1] = t;
			}
		for (k = 0; k < n; k++) {
			snprintf(sub, sizeof(sub), "%s%s%s", path, path[0] ? "." : "", keys[k]);
			print_value(sub, json_object_get(v, keys[k]));
		}
		atb_free(keys);
		return;
	}
	if (json_is_array(v)) {
		int scalars = 1;

		json_array_foreach(v, i, child)
			if (json_is_object(child) || json_is_array(child))
				scalars = 0;
		if (!scalars) {
			json_array_foreach(v, i, child) {
				snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
				print_value(sub, child);
			}
			return;
		}
	}
	{
		char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));

		printf("  %-42s %s\n", path, s ? s : "?");
		atb_free(s);
	}
}

static int do_show(const struct opts *o)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	enum atb_status st;
	json_t *doc, *sec;
	json_error_t jerr;
	const char *key;
	int rc = CLI_OK;

	atb_error_clear(&err);
	st = o->version ? atb_protocol_load_version(o->home, o->version, &p, &err)
			: atb_protocol_load_current(o->home, &p, &err);
	if (st)
		return fail(o, &err);
	doc = json_loads(p->canonical_json, 0, &jerr);
	if (!doc) {
		fprintf(stderr, "atb protocol: cannot re-read the canonical form: %s\n", jerr.text);
		atb_protocol_free(p);
		return CLI_INTERNAL;
	}
	if (o->json) {
		rc = cli_print_json("protocol", json_pack("{s:b,s:i,s:s,s:s,s:O}", "ok", 1, "version", p->version,
					  "digest", p->digest, "file", p->path, "protocol",
					  doc));
	} else {
		printf("protocol %d: %s\n", p->version, p->title);
		printf("digest   %s\n", p->digest);
		printf("file     %s\n", p->path);
		json_object_foreach(doc, key, sec) {
			if (!json_is_object(sec))
				continue;
			printf("\n%s\n", key);
			print_value(key, sec);
		}
	}
	json_decref(doc);
	atb_protocol_free(p);
	return rc;
}

static int do_digest(const struct opts *o)
{
	struct atb_error err;
	struct atb_protocol *p = NULL;
	char digest[65];
	const char *file = o->file;
	int version = 0;

	atb_error_clear(&err);
	if (o->file) {
		if (atb_protocol_digest_file(o->file, digest, &err))
			return fail(o, &err);
	} else {
		if (atb_protocol_load_current(o->home, &p, &err))
			return fail(o, &err);
		memcpy(digest, p->digest, sizeof(digest));
		file = p->path;
		version = p->version;
	}
	if (o->json) {
		json_t *v = json_pack("{s:b,s:s,s:s}", "ok", 1, "digest", digest, "file", file);

		if (v && version)
			json_object_set_new(v, "version", json_integer(version));
		atb_protocol_free(p);
		return cli_print_json("protocol", v);
	}
	printf("%s  %s\n", digest, file);
	atb_protocol_free(p);
	return CLI_OK;
}

static int do_verify(const struct opts *o)
{
	struct atb_error err;
	struct atb_frozen_protocol *list = NULL;
	size_t n = 0, i;
	int current = 0;
	json_t *arr = NULL;

	atb_error_clear(&err);
	if (atb_protocol_verify(o->home, &err) ||
	    atb_protocol_frozen_list(o->home, &list, &n, &current, &err))
		return fail(o, &err);
	if (o->json)
		arr = json_array();
	for (i = 0; i < n; i++) {
		if (arr)
			json_array_append_new(arr, json_pack("{s:i,s:s,s:s,s:b}", "version",
							     list[i].version, "file", list[i].file,
							     "digest", list[i].digest, "current",
							     list[i].version == current));
		else
			printf("ok  version %d  %s  %s%s\n", list[i].version, list[i].digest,
			       list[i].file, list[i].version == current ? "  (current)" : "");
	}
	atb_protocol_frozen_free(list, n);
	/* the trusted files too, where the home has a manifest */
	if (atb_protocol_manifest_exists(o->home)) {
		size_t nfiles = 0;

		if (atb_protocol_manifest_verify(o->home, &nfiles, &err)) {
			json_decref(arr);
			return fail(o, &err);
		}
		if (!o->json)
			printf("ok  manifest  %zu trusted files\n", nfiles);
	} else if (!o->json) {
		/* a home of protocol files only (a test's); atb measure refuses it */
		printf("--  manifest  none: trusted files not checked\n");
	}
	if (o->json)
		return cli_print_json("protocol", json_pack("{s:b,s:i,s:o}", "ok", 1, "current", current,
					    "versions", arr));
	return CLI_OK;
}

static int do_manifest(const struct opts *o)
{
	struct atb_error err;
	size_t n = 0;

	atb_error_clear(&err);
	if (o->write ? atb_protocol_manifest_write(o->home, &n, &err)
		     : atb_protocol_manifest_verify(o->home, &n, &err))
		return fail(o, &err);
	if (o->json)
		return cli_print_json("protocol", json_pack("{s:b,s:b,s:I}", "ok", 1, "written",
							    o->write, "files", (json_int_t)n));
	printf(o->write ? "wrote protocol/manifest: %zu trusted files\n"
			: "ok  manifest  %zu trusted files\n", n);
	return CLI_OK;
}

static int do_freeze(const struct opts *o)
{
	struct atb_error err;
	char digest[65];
	int version = 0;

	atb_error_clear(&err);
	if (atb_protocol_freeze(o->home, o->file, &version, digest, &err))
		return fail(o, &err);
	if (o->json)
		return cli_print_json("protocol", json_pack("{s:b,s:i,s:s,s:s}", "ok", 1, "version", version,
					    "digest", digest, "file", o->file));
	printf("froze '%s' as protocol version %d (digest %s); it is now current\n", o->file,
	       version, digest);
	return CLI_OK;
}

int cmd_protocol(int argc, char **argv, struct cli_ctx *ctx)
{
	struct opts o = {0};
	int i;

	if (cli_wants_help(argc, argv)) {
		fputs(usage_text, stdout);
		return CLI_OK;
	}
	atb_alloc_install_json();
	o.json = ctx->json;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--json")) {
			o.json = 1;
		} else if (!strcmp(a, "--write")) {
			o.write = 1;
		} else if (!strcmp(a, "--home") || !strcmp(a, "--version")) {
			if (i + 1 >= argc)
				return cli_usage_error("protocol", "'%s' needs a value", a);
			if (!strcmp(a, "--home")) {
				o.home = argv[++i];
			} else {
				char *end;
				long v;

				errno = 0;
				v = strtol(argv[++i], &end, 10);
				if (errno || *end || v < 1 || v > 1000000)
					return cli_usage_error("protocol",
							       "'--version' needs a number >= 1, "
							       "got '%s'", argv[i]);
				o.version = (int)v;
			}
		} else if (!strncmp(a, "--home=", 7)) {
			o.home = a + 7;
		} else if (a[0] == '-' && a[1]) {
			return cli_usage_error("protocol", "unknown option '%s'", a);
		} else if (!o.sub) {
			o.sub = a;
		} else if (!o.file) {
			o.file = a;
		} else {
			return cli_usage_error("protocol", "unexpected argument '%s'", a);
		}
	}
	if (!o.sub)
		return cli_usage_error("protocol", "missing subcommand");
	if (o.write && strcmp(o.sub, "manifest"))
		return cli_usage_error("protocol", "'--write' is for 'manifest' only");
	if (o.version && strcmp(o.sub, "show"))
		return cli_usage_error("protocol", "'--version' is for 'show' only");
	if (!strcmp(o.sub, "show") && !o.file)
		return do_show(&o);
	if (!strcmp(o.sub, "digest"))
		return do_digest(&o);
	if (!strcmp(o.sub, "verify") && !o.file)
		return do_verify(&o);
	if (!strcmp(o.sub, "manifest") && !o.file)
		return do_manifest(&o);
	if (!strcmp(o.sub, "freeze")) {
		if (!o.file)
			return cli_usage_error("protocol", "'freeze' needs a FILE");
		return do_freeze(&o);
	}
	if (o.file)
		return cli_usage_error("protocol", "unexpected argument '%s'", o.file);
	return cli_usage_error("protocol", "unknown subcommand '%s'", o.sub);
}
