#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Run every benchmark built in BUILD (default build/release).  Each prints its
# figure and the reference it was measured against in the same run.
set -euo pipefail
build=${1:-build/release}
status=0
for b in "$build"/bench-*; do
	[ -x "$b" ] || continue
	echo "== $(basename "$b")"
	"$b" || status=1
done
exit $status
