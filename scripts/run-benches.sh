#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Run every benchmark built in BUILD (default build/release).  Each prints its
# figure and the reference it was measured against in the same run.
set -euo pipefail
build=${1:-build/release}
status=0
# bench-crossrun measures every bundled CPU task ATB_CROSSRUN_RUNS times (3):
# minutes per task on a 2-core box.
for b in "$build"/bench-*; do
	[ -x "$b" ] || continue
	echo "== $(basename "$b")"
	case $(basename "$b") in
	bench-crossrun) "$b" "${ATB_CROSSRUN_RUNS:-3}" || status=1 ;;
	*) "$b" || status=1 ;;
	esac
done
exit $status
