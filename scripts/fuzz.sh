#!/usr/bin/env bash
# Coverage-guided fuzzing on the stable toolchain: libFuzzer (the libfuzzer-sys crate builds it
# with the system's C++ compiler) driven by SanitizerCoverage instrumentation, which rustc
# accepts as ordinary -C flags. Targets: the request decoder, the master reply decoder, script
# recognition and config parsing (fuzz/fuzz_targets). Seeds live in fuzz/corpus/<target> (plus tests/clients/lua for `lua`); a run
# works on a copy, so the repository's corpus only changes when you add to it.
#
# Usage: scripts/fuzz.sh [TARGET...]      (default: all four)
#        scripts/fuzz.sh --build          (only build the targets; scripts/test.sh starts this
#                                          early, at the lowest priority)
#   FUZZ_SECONDS   seconds per target (default 20; run longer locally, e.g. FUZZ_SECONDS=3600)
# A crash, a panic, a timeout (1 s per input) or more than 2 GB of memory fails the run and
# leaves the reproducer in target/fuzz-artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-20}
build_only=false
[ "${1:-}" = --build ] && { build_only=true; shift; }
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(request reply lua config)
command -v c++ >/dev/null 2>&1 || scripts/deps.sh fuzz
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
export CARGO_TARGET_DIR="$PWD/target/fuzz"
# An explicit --target keeps the instrumentation off build scripts (they are not linked with
# libFuzzer).
host=$(rustc -vV | sed -n 's/^host: //p')
(cd fuzz && cargo build --release -q --bins --target "$host")
$build_only && exit 0
bin="$CARGO_TARGET_DIR/$host/release"
for t in "${targets[@]}"; do
  work="$(mktemp -d)"
  cp -r "fuzz/corpus/$t/." "$work/"
  # The lock libraries' exact scripts seed script recognition (kept once, in tests/clients/lua).
  [ "$t" = lua ] && cp tests/clients/lua/*.lua "$work/"
  artifacts="target/fuzz-artifacts/$t/"
  mkdir -p "$artifacts"
  echo "fuzz: $t for ${seconds}s" >&2
  "$bin/$t" "$work" -max_total_time="$seconds" -timeout=1 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts" 2>"$work.log" || {
    tail -n 40 "$work.log" >&2
    echo "fuzz: $t FAILED (reproducer in $artifacts)" >&2
    exit 1
  }
  grep -E "stat::number_of_executed_units|stat::new_units_added" "$work.log" | tr '\n' ' ' >&2
  echo >&2
  rm -rf "$work" "$work.log"
done
echo "fuzz: ${#targets[@]} targets, no crash" >&2
