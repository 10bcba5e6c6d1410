#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Install what bench/bench-loadgen needs and the build does not: nginx (the
# trivially fast local server) and wrk (the reference load generator), as
# Debian packages.  As root: installs them.  Otherwise: prints the apt-get
# line and fails.  Not part of install-deps.sh: tests never need them.
set -euo pipefail

pkgs=(nginx-light wrk)
alts=(nginx wrk)   # any installed nginx flavour will do

missing=()
for i in "${!pkgs[@]}"; do
	command -v "${alts[$i]}" >/dev/null 2>&1 || [ -x "/usr/sbin/${alts[$i]}" ] ||
		missing+=("${pkgs[$i]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "atb: missing benchmark packages: ${missing[*]}" >&2
	echo "atb: run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
	exit 1
fi
echo "atb: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# the package starts a system nginx on port 80; the benchmark runs its own
if command -v systemctl >/dev/null 2>&1; then
	systemctl disable --now nginx >/dev/null 2>&1 || true
fi
/usr/sbin/nginx -s quit >/dev/null 2>&1 || true
