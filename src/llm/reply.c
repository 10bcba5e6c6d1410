/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * What a model's reply may write: the files it proposes, parsed from
 * fenced code blocks (whole files or a unified diff, diff.c) or a JSON object, checked against the task's surface
 * (plain names only, no traversal, no absolute path, size limits), and
 * written into the candidate folder only, all or nothing.  The proposer is
 * untrusted (DESIGN.md, the trust boundary): its text decides the bytes of
 * the surface files, never where they go.
 *
 * Does not: judge the code (the surface gate, the build and the runner do)
 * or call the model.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atb/alloc.h"
#include "llm/llm_int.h"
#include "util.h"
#include "banned.h"

void atb_llm_reply_release(struct atb_llm_reply *r)
{
	size_t i;

	if (!r)
		return;
	for (i = 0; i < r->nfiles; i++)
		atb_free(r->files[i].text);
	memset(r, 0, sizeof(*r));
}

/* PROTO: loop -- a proposal lands only inside its candidate folder */
static enum atb_status check_name(const char *name, size_t len, const char *const *allowed,
				  size_t nallowed, struct atb_error *err)
{
	size_t i;

	if (len == 0 || len >= ATB_LLM_REPLY_NAME_MAX)
		return atb_error_set(err, ATB_ERR_SCHEMA, "reply names a file of %zu characters"
				     " (1-%d allowed)", len, ATB_LLM_REPLY_NAME_MAX - 1);
	if (name[0] == '/')
		return atb_error_set(err, ATB_ERR_SCHEMA, "reply names an absolute path '%.*s'",
				     (int)len, name);
	for (i = 0; i + 1 < len; i++)
		if (name[i] == '.' && name[i + 1] == '.')
			return atb_error_set(err, ATB_ERR_SCHEMA,
					     "reply names '%.*s', which climbs out of the candidate folder",
					     (int)len, name);
	for (i = 0; i < len; i++) {
		char c = name[i];

		if (c == '/' || c == '\\')
			return atb_error_set(err, ATB_ERR_SCHEMA,
					     "reply names '%.*s' in a folder: only the surface's plain"
					     " file names", (int)len, name);
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return atb_error_set(err, ATB_ERR_SCHEMA,
					     "reply names '%.*s', which is not a plain file name",
					     (int)len, name);
	}
	if (name[0] == '.')
		return atb_error_set(err, ATB_ERR_SCHEMA, "reply names a hidden file '%.*s'",
				     (int)len, name);
	for (i = 0; i < nallowed; i++)
		if (strlen(allowed[i]) == len && !memcmp(allowed[i], name, len))
			return ATB_OK;
	return atb_error_set(err, ATB_ERR_SCHEMA, "reply names '%.*s', which is not a surface"
			     " file of the task", (int)len, name);
}

static enum atb_status add_entry(struct atb_llm_reply *r, const char *name, size_t nlen,
				 const char *text, size_t tlen, int diff, int create,
				 const char *const *allowed, size_t nallowed, struct atb_error *err)
{
	struct atb_llm_file *f;
	enum atb_status st;
	size_t i;

	st = check_name(name, nlen, allowed, nallowed, err);
	if (st)
		return st;
	for (i = 0; i < r->nfiles; i++)
		if (strlen(r->files[i].name) == nlen && !memcmp(r->files[i].name, name, nlen))
			return atb_error_set(err, ATB_ERR_SCHEMA, "reply gives '%.*s' twice",
					     (int)nlen, name);
	if (r->nfiles == ATB_LLM_REPLY_MAX_FILES)
		return atb_error_set(err, ATB_ERR_SCHEMA, "reply gives more than %d files",
				     ATB_LLM_REPLY_MAX_FILES);
	if (tlen > ATB_LLM_REPLY_MAX_FILE_BYTES)
		return atb_error_set(err, ATB_ERR_SCHEMA, "reply's '%.*s' is %zu bytes, over the"
				     " %zu allowed", (int)nlen, name, tlen, ATB_LLM_REPLY_MAX_FILE_BYTES);
	if (memchr(text, '\0', tlen))
		return atb_error_set(err, ATB_ERR_SCHEMA, "reply's '%.*s' holds a NUL byte",
				     (int)nlen, name);
	f = &r->files[r->nfiles];
	memcpy(f->name, name, nlen);
	f->name[nlen] = '\0';
	f->text = atb_strndup(text, tlen);
	if (!f->text)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot keep a reply: out of memory");
	f->len = tlen;
	f->diff = diff;
	f->create = create;
	r->nfiles++;
	return ATB_OK;
}

static enum atb_status add_file(struct atb_llm_reply *r, const char *name, size_t nlen,
				const char *text, size_t tlen, const char *const *allowed,
				size_t nallowed, struct atb_error *err)
{
	return add_entry(r, name, nlen, text, tlen, 0, 0, allowed, nallowed, err);
}

/* A ```diff block: one entry per file it changes. */
static enum atb_status add_diff(struct atb_llm_reply *r, const char *body, size_t blen,
				const char *const *allowed, size_t nallowed, struct atb_error *err)
{
	struct atbi_llm_diff_part parts[ATB_LLM_REPLY_MAX_FILES];
	enum atb_status st;
	size_t n, i;

	st = atbi_llm_diff_split(body, blen, parts, ATB_LLM_REPLY_MAX_FILES, &n, err);
	for (i = 0; !st && i < n; i++)
		st = add_entry(r, parts[i].name, parts[i].nlen, parts[i].body, parts[i].blen, 1,
			       parts[i].create, allowed, nallowed, err);
	return st;
}

/* Is the info string's first word "diff" or "patch"? */
static int is_diff_info(const char *info, const char *eol)
{
	size_t n;

	while (info < eol && (*info == ' ' || *info == '\t'))
		info++;
	for (n = 0; info + n < eol && info[n] != ' ' && info[n] != '\t' && info[n] != '\r'; n++)
		;
	return (n == 4 && !memcmp(info, "diff", 4)) || (n == 5 && !memcmp(info, "patch", 5));
}

/* The fenced blocks: a line starting with ``` opens (its info string: LANG [NAME]). */
static enum atb_status parse_fenced(const char *s, const char *const *allowed, size_t nallowed,
				    struct atb_llm_reply *r, struct atb_error *err)
{
	const char *p = s;
	enum atb_status st;

	while ((p = strstr(p, "```"))) {
		const char *info = p + 3, *eol = strchr(info, '\n'), *body, *end, *w, *name = NULL;
		size_t nlen = 0;

		if (p != s && p[-1] != '\n') {
			p += 3;
			continue;
		}
		if (!eol)
			break;
		body = eol + 1;
		end = strstr(body, "\n```");
		if (!end && !strncmp(body, "```", 3))
			end = body - 1;
		if (!end)
			return atb_error_set(err, ATB_ERR_PARSE, "reply has a ``` block that never closes");
		if (is_diff_info(info, eol)) {
			st = add_diff(r, body, end >= body ? (size_t)(end - body) + 1 : 0, allowed,
				      nallowed, err);
			if (st)
				return st;
			p = end + 4;
			continue;
		}
		/* the info string's last word that has a '.' or a '/' names the file */
		for (w = info; w < eol;) {
			const char *b;

			while (w < eol && (*w == ' ' || *w == '\t' || *w == '\r'))
				w++;
			b = w;
			while (w < eol && *w != ' ' && *w != '\t' && *w != '\r')
				w++;
			if (w > b && (memchr(b, '.', (size_t)(w - b)) || memchr(b, '/', (size_t)(w - b)))) {
				name = b;
				nlen = (size_t)(w - b);
			}
		}
		if (!name) {
			if (nallowed != 1)
				return atb_error_set(err, ATB_ERR_SCHEMA,
						     "reply has a ``` block without a file name and the"
						     " task has %zu surface files", nallowed);
			name = allowed[0];
			nlen = strlen(name);
		}
		st = add_file(r, name, nlen, body, end >= body ? (size_t)(end - body) + 1 : 0,
			      allowed, nallowed, err);
		if (st)
			return st;
		p = end + 4;
	}
	if (!r->nfiles)
		return atb_error_set(err, ATB_ERR_PARSE, "reply has no ``` block");
	return ATB_OK;
}

static enum atb_status parse_json(const char *s, const char *const *allowed, size_t nallowed,
				  struct atb_llm_reply *r, struct atb_error *err)
{
	json_error_t je;
	json_t *o, *files, *v;
	const char *key;
	enum atb_status st = ATB_OK;

	atb_alloc_install_json();
	o = json_loads(s, JSON_REJECT_DUPLICATES, &je);
	if (!o)
		return atb_error_set(err, ATB_ERR_PARSE, "reply is not json: %s (line %d)", je.text,
				     je.line);
	files = json_object_get(o, "files");
	if (!json_is_object(files) || !json_object_size(files)) {
		json_decref(o);
		return atb_error_set(err, ATB_ERR_PARSE, "reply has no \"files\" object");
	}
	json_object_foreach(files, key, v) {
		if (!json_is_string(v)) {
			st = atb_error_set(err, ATB_ERR_SCHEMA, "reply's file '%.100s' is not a string",
					   key);
			break;
		}
		st = add_file(r, key, strlen(key), json_string_value(v), json_string_length(v),
			      allowed, nallowed, err);
		if (st)
			break;
	}
	json_decref(o);
	return st;
}

enum atb_status atb_llm_reply_parse(const char *content, enum atb_llm_reply_format fmt,
				    const char *const *allowed, size_t nallowed,
				    struct atb_llm_reply *out, struct atb_error *err)
{
	enum atb_status st;

	memset(out, 0, sizeof(*out));
	if (!content)
		return atb_error_set(err, ATB_ERR_PARSE, "reply has no content");
	st = fmt == ATB_LLM_REPLY_JSON ? parse_json(content, allowed, nallowed, out, err)
				       : parse_fenced(content, allowed, nallowed, out, err);
	if (st)
		atb_llm_reply_release(out);
	return st;
}

/* A diff entry's new text: its hunks applied to dir's file of that name. */
static enum atb_status apply_diff(int dfd, const char *dir, const struct atb_llm_file *f,
				  char **out, size_t *olen, struct atb_error *err)
{
	char *base = NULL;
	size_t blen = 0, cap = 0;
	enum atb_status st = ATB_OK;
	ssize_t k;
	int fd;

	fd = openat(dfd, f->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT && f->create)
		return atbi_llm_diff_apply(f->name, "", 0, f->text, f->len, out, olen, err);
	if (fd < 0)
		return atb_error_set(err, errno == ENOENT ? ATB_ERR_SCHEMA : ATB_ERR_IO,
				     "reply's diff changes '%s', which candidate folder '%s' %s",
				     f->name, dir, errno == ENOENT ? "does not have" :
				     "cannot open");
	if (f->create) {
		close(fd);
		return atb_error_set(err, ATB_ERR_SCHEMA, "reply's diff creates '%s' (from"
				     " /dev/null), which candidate folder '%s' already has",
				     f->name, dir);
	}
	for (;;) {
		if (blen == cap) {
			char *q;

			if (cap > ATB_LLM_REPLY_MAX_FILE_BYTES) {
				st = atb_error_set(err, ATB_ERR_SCHEMA, "'%s' in '%s' is over the %zu"
						   " bytes a reply may change", f->name, dir,
						   ATB_LLM_REPLY_MAX_FILE_BYTES);
				break;
			}
			cap = cap ? 2 * cap : 65536;
			q = atb_realloc(base, cap);
			if (!q) {
				st = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
				break;
			}
			base = q;
		}
		k = read(fd, base + blen, cap - blen);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			st = atb_error_set(err, ATB_ERR_IO, "cannot read '%s' in '%s': %s", f->name, dir,
					   strerror(errno));
			break;
		}
		if (k == 0)
			break;
		blen += (size_t)k;
	}
	close(fd);
	if (!st)
		st = atbi_llm_diff_apply(f->name, base ? base : "", blen, f->text, f->len, out, olen,
					 err);
	atb_free(base);
	return st;
}

enum atb_status atb_llm_reply_write(const struct atb_llm_reply *r, const char *dir,
				    struct atb_error *err)
{
	char tmp[ATB_LLM_REPLY_MAX_FILES][64], *patched[ATB_LLM_REPLY_MAX_FILES] = {0};
	size_t plen[ATB_LLM_REPLY_MAX_FILES] = {0};
	enum atb_status st = ATB_OK;
	struct stat sb;
	size_t i, made = 0;
	int dfd, fd;

	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return atb_error_set(err, errno == ELOOP || errno == ENOTDIR ? ATB_ERR_SCHEMA : ATB_ERR_IO,
				     "cannot open candidate folder '%s': %s", dir, strerror(errno));
	for (i = 0; i < r->nfiles; i++)
		if (!fstatat(dfd, r->files[i].name, &sb, AT_SYMLINK_NOFOLLOW) && !S_ISREG(sb.st_mode)) {
			close(dfd);
			return atb_error_set(err, ATB_ERR_SCHEMA,
					     "'%s' in candidate folder '%s' is a %s, not a file: nothing"
					     " written", r->files[i].name, dir,
					     S_ISLNK(sb.st_mode) ? "symlink" : S_ISDIR(sb.st_mode) ?
					     "folder" : "special file");
		}
	for (i = 0; i < r->nfiles && !st; i++)
		if (r->files[i].diff)
			st = apply_diff(dfd, dir, &r->files[i], &patched[i], &plen[i], err);
	for (i = 0; i < r->nfiles && !st; i++) {
		snprintf(tmp[i], sizeof(tmp[i]), ".atb-reply-%ld-%zu", (long)getpid(), i);
		fd = openat(dfd, tmp[i], O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd < 0) {
			st = atb_error_set(err, ATB_ERR_IO, "cannot write into '%s': %s", dir,
					   strerror(errno));
			break;
		}
		made++;
		if (atbi_write_all(fd, patched[i] ? patched[i] : r->files[i].text,
				   patched[i] ? plen[i] : r->files[i].len) || fsync(fd))
			st = atb_error_set(err, ATB_ERR_IO, "cannot write '%s' into '%s': %s",
					   r->files[i].name, dir, strerror(errno));
		if (close(fd) && !st)
			st = atb_error_set(err, ATB_ERR_IO, "cannot write '%s' into '%s': %s",
					   r->files[i].name, dir, strerror(errno));
	}
	/* rename replaces a name, never follows it: a symlink planted since the check is replaced */
	for (i = 0; i < r->nfiles && !st; i++)
		if (renameat(dfd, tmp[i], dfd, r->files[i].name))
			st = atb_error_set(err, ATB_ERR_IO, "cannot put '%s' into '%s': %s",
					   r->files[i].name, dir, strerror(errno));
	if (st)
		for (i = 0; i < made; i++)
			(void)unlinkat(dfd, tmp[i], 0);
	for (i = 0; i < r->nfiles; i++)
		atb_free(patched[i]);
	close(dfd);
	return st;
}
