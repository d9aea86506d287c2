#!/usr/bin/env bash
# The test command: install what the tests need if missing, then run every test.
# Extra arguments go to `cargo test` (e.g. scripts/test.sh --test locks).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
cargo test --all-targets "$@"
# Coverage-guided fuzzing, bounded (FUZZ_SECONDS per target, default 20); only for a full run.
if [ $# -eq 0 ]; then
  scripts/fuzz.sh
fi
