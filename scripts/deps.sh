#!/usr/bin/env bash
# Installs what the proxy's dev mode and test suite need, only where it is missing.
# Usage: scripts/deps.sh [dev|test]   (sourced or run; idempotent)
set -euo pipefail

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
    echo "deps: need root (or sudo) to run: $*" >&2; return 1; fi
}

# apt_need PKG... : install the Debian packages that are not installed yet.
apt_need() {
  local missing=()
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || {
    as_root apt-get update -qq >/dev/null
    as_root apt-get install -y -qq "${missing[@]}" >/dev/null
  }
}

mode="${1:-test}"
apt_need redis-server redis-tools
# A redis-server installed by apt may start as a service on 6379; the proxy and the tests use
# their own masters on free ports, so it does no harm, but stop it to keep the machine quiet.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then
  as_root systemctl stop redis-server || true
fi
if [ "$mode" = "test" ]; then
  :
fi
