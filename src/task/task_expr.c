/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The arithmetic of task.yaml: shapes ([M, K]) and floor formulas
 * ("2*M*N*K") over the task's integer parameters.  A recursive-descent
 * evaluator over int64 with + - * / % , unary minus and parentheses; every
 * operation is checked for overflow and every division for a zero divisor,
 * because a wrong element count or floor silently corrupts a measurement.
 * Does not: know reals, functions or comparison operators.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "task_int.h"
#include "banned.h"

#define EXPR_MAX_DEPTH 64

struct expr {
	const struct atb_task *task;
	const struct atb_task_param_set *set;
	const char *s;
	size_t pos;
	int depth;
	int failed;
	size_t err_pos;
	char *msg;
	size_t msg_size;
};

static int64_t fail(struct expr *e, size_t at, const char *msg)
{
	if (!e->failed) {
		e->failed = 1;
		e->err_pos = at;
		snprintf(e->msg, e->msg_size, "%s", msg);
	}
	return 0;
}

static void skip_ws(struct expr *e)
{
	while (e->s[e->pos] == ' ' || e->s[e->pos] == '\t')
		e->pos++;
}

static int64_t parse_sum(struct expr *e);

static int64_t parse_primary(struct expr *e)
{
	const char *s = e->s;
	size_t start;

	skip_ws(e);
	start = e->pos;
	if (s[e->pos] == '(') {
		int64_t v;

		if (++e->depth > EXPR_MAX_DEPTH)
			return fail(e, start, "expression nested too deeply");
		e->pos++;
		v = parse_sum(e);
		if (e->failed)
			return 0;
		skip_ws(e);
		if (s[e->pos] != ')')
			return fail(e, e->pos, "missing ')'");
		e->pos++;
		e->depth--;
		return v;
	}
	if (s[e->pos] == '-') {
		int64_t v, r;

		if (++e->depth > EXPR_MAX_DEPTH)
			return fail(e, start, "expression nested too deeply");
		e->pos++;
		v = parse_primary(e);
		e->depth--;
		if (e->failed)
			return 0;
		if (__builtin_sub_overflow((int64_t)0, v, &r))
			return fail(e, start, "integer overflow");
		return r;
	}
	if (isdigit((unsigned char)s[e->pos])) {
		int64_t v = 0;

		while (isdigit((unsigned char)s[e->pos])) {
			if (__builtin_mul_overflow(v, (int64_t)10, &v) ||
			    __builtin_add_overflow(v, (int64_t)(s[e->pos] - '0'), &v))
				return fail(e, start, "integer overflow");
			e->pos++;
		}
		if (isalpha((unsigned char)s[e->pos]) || s[e->pos] == '_' || s[e->pos] == '.')
			return fail(e, e->pos, "not an integer");
		return v;
	}
	if (isalpha((unsigned char)s[e->pos]) || s[e->pos] == '_') {
		char name[ATB_TASK_NAME_MAX], msg[ATB_TASK_NAME_MAX + 64];
		size_t n = 0, i;

		while (isalnum((unsigned char)s[e->pos]) || s[e->pos] == '_') {
			if (n + 1 < sizeof(name))
				name[n++] = s[e->pos];
			e->pos++;
		}
		name[n] = '\0';
		for (i = 0; i < e->task->nparams; i++) {
			if (strcmp(e->task->params[i].name, name))
				continue;
			if (e->task->params[i].is_real) {
				snprintf(msg, sizeof(msg),
					 "real parameter '%s' in an integer expression", name);
				return fail(e, start, msg);
			}
			return e->set->ints[i];
		}
		snprintf(msg, sizeof(msg), "unknown parameter '%s'", name);
		return fail(e, start, msg);
	}
	if (!s[e->pos])
		return fail(e, start, "unexpected end of expression");
	return fail(e, start, "unexpected character");
}

static int64_t parse_product(struct expr *e)
{
	int64_t v = parse_primary(e);

	while (!e->failed) {
		char op;
		size_t at;
		int64_t r;

		skip_ws(e);
		op = e->s[e->pos];
		if (op != '*' && op != '/' && op != '%')
			break;
		at = e->pos++;
		r = parse_primary(e);
		if (e->failed)
			break;
		if (op == '*') {
			if (__builtin_mul_overflow(v, r, &v))
				return fail(e, at, "integer overflow");
		} else {
			if (r == 0)
				return fail(e, at, "division by zero");
			if (v == INT64_MIN && r == -1)
				return fail(e, at, "integer overflow");
			v = op == '/' ? v / r : v % r;
		}
	}
	return v;
}

static int64_t parse_sum(struct expr *e)
{
	int64_t v = parse_product(e);

	while (!e->failed) {
		char op;
		size_t at;
		int64_t r;

		skip_ws(e);
		op = e->s[e->pos];
		if (op != '+' && op != '-')
			break;
		at = e->pos++;
		r = parse_product(e);
		if (e->failed)
			break;
		if (op == '+' ? __builtin_add_overflow(v, r, &v) : __builtin_sub_overflow(v, r, &v))
			return fail(e, at, "integer overflow");
	}
	return v;
}

enum atb_status atbi_task_eval(const struct atb_task *task,
			       const struct atb_task_param_set *set, const char *expr,
			       int64_t *value, size_t *err_offset, char *msg, size_t msg_size)
{
	struct expr e = {task, set, expr, 0, 0, 0, 0, msg, msg_size};
	int64_t v;

	*value = 0;
	*err_offset = 0;
	if (msg_size)
		msg[0] = '\0';
	v = parse_sum(&e);
	if (!e.failed) {
		skip_ws(&e);
		if (e.s[e.pos])
			fail(&e, e.pos, e.s[e.pos] == ')' ? "unbalanced ')'" :
			     "unexpected character");
	}
	if (e.failed) {
		*err_offset = e.err_pos;
		return ATB_ERR_SCHEMA;
	}
	*value = v;
	return ATB_OK;
}

enum atb_status atb_task_eval(const struct atb_task *task, const struct atb_task_param_set *set,
			      const char *expr, int64_t *value, struct atb_error *err)
{
	char msg[256];
	size_t off;
	enum atb_status s = atbi_task_eval(task, set, expr, value, &off, msg, sizeof(msg));

	if (s)
		return atb_error_set(err, s, "bad expression '%s': %s at offset %zu", expr, msg,
				     off);
	return ATB_OK;
}
