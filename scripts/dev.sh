#!/usr/bin/env bash
# Quick start: install redis-server if missing, then run the proxy in dev mode with three local
# masters on free ports. Extra arguments go to the proxy (e.g. --listen 127.0.0.1:7000).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh dev
exec cargo run --release -- --dev 3 --listen 127.0.0.1:7777 "$@"
