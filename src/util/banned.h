/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Functions atb does not use, turned into compile errors (git's banned.h).
 * Include this last in every .c file, after all system headers.
 * Use snprintf / memcpy with explicit sizes, strtol / strtod with end checks,
 * and clock_gettime(CLOCK_MONOTONIC) for timing.
 */
#ifndef ATB_BANNED_H
#define ATB_BANNED_H

#define ATB_BANNED(func) sorry_##func##_is_banned_in_atb

#undef strcpy
#define strcpy(x, y) ATB_BANNED(strcpy)
#undef strcat
#define strcat(x, y) ATB_BANNED(strcat)
#undef strncpy
#define strncpy(x, y, n) ATB_BANNED(strncpy)
#undef strncat
#define strncat(x, y, n) ATB_BANNED(strncat)
#undef sprintf
#define sprintf(...) ATB_BANNED(sprintf)
#undef vsprintf
#define vsprintf(...) ATB_BANNED(vsprintf)
#undef atoi
#define atoi(x) ATB_BANNED(atoi)
#undef atol
#define atol(x) ATB_BANNED(atol)
#undef atof
#define atof(x) ATB_BANNED(atof)
#undef gettimeofday
#define gettimeofday(x, y) ATB_BANNED(gettimeofday)
#undef gets
#define gets(x) ATB_BANNED(gets)

#endif
