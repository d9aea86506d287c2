#!/usr/bin/env bash
# The test command: install what the tests need if missing, then run every test.
# Extra arguments go to `cargo test` (e.g. scripts/test.sh --test locks).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
cargo test --all-targets "$@"
# Only for a full run: the Kubernetes manifests (deploy/kubernetes/, about a second once its venv
# is installed), then coverage-guided fuzzing, bounded (FUZZ_SECONDS per target, default 20).
if [ $# -eq 0 ]; then
  REDLOCK_PROXY="${CARGO_TARGET_DIR:-target}/debug/redlock-proxy" scripts/check-manifests.sh
  scripts/fuzz.sh
fi
