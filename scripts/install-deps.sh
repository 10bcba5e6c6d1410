#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Install the Debian packages atb builds and tests with, if any is missing.
# As root: installs them.  Otherwise: prints the one apt-get line needed and
# fails, so that `make` stops with the instruction rather than a compiler error.
set -euo pipefail

pkgs=(build-essential cmake pkg-config sqlite3 libsqlite3-dev libfyaml-dev
      libjansson-dev libssl-dev libgsl-dev libcurl4-openssl-dev
      libcriterion-dev libseccomp-dev bubblewrap python3 jq)

missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "atb: missing packages: ${missing[*]}" >&2
	echo "atb: run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
	exit 1
fi
echo "atb: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
