#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (the fuzz preset: clang, ASan + UBSan) and runs them
# one after another. docs/fuzzing.md says what each target reads.
#
#   scripts/fuzz.sh                 each target for FUZZ_SECONDS (default 60) on a copy of its
#                                   corpus (build/fuzz/corpus/<target>); fails on any crash
#   scripts/fuzz.sh --regression    each target once over its committed corpus
#                                   (fuzz/corpus/<target>, crash reproducers included): CI
#   scripts/fuzz.sh --no-build ...  skip setup, configure and build
#   scripts/fuzz.sh ... csv idx     only these targets
#
# Environment: FUZZ_SECONDS, JOBS (build parallelism, default nproc), FEDCORE_BUILD_LOCK (a
# file to flock around configure and build, for machines where builds share the cores).
# New inputs found by a run stay in build/fuzz/corpus/<target>; crashes are written to
# build/fuzz/artifacts/<target>/ and the run's log to build/fuzz/logs/<target>.log. To keep
# an input, copy it into fuzz/corpus/<target>/ (docs/fuzzing.md, "Corpora").
set -euo pipefail
cd "$(dirname "$0")/.."

mode=fuzz
build=1
targets=()
for arg in "$@"; do
  case "$arg" in
    --regression) mode=regression ;;
    --no-build) build=0 ;;
    -*) echo "fuzz.sh: unknown option '$arg'" >&2; exit 2 ;;
    *) targets+=("$arg") ;;
  esac
done
seconds=${FUZZ_SECONDS:-60}
out=build/fuzz

locked() {
  if [[ -n "${FEDCORE_BUILD_LOCK:-}" ]]; then
    flock "$FEDCORE_BUILD_LOCK" "$@"
  else
    "$@"
  fi
}

if ((build)); then
  scripts/setup.sh --fuzz
  locked cmake --preset fuzz >/dev/null
  locked cmake --build --preset fuzz -j "${JOBS:-$(nproc)}"
fi

if ((${#targets[@]} == 0)); then
  for dir in fuzz/corpus/*/; do
    targets+=("$(basename "$dir")")
  done
fi

# Longest input per target: a little above the largest valid input worth exploring (the
# parsers' own limits are far larger; longer inputs only slow the search down).
max_len() {
  case "$1" in
    messages | secagg_wire) echo 16384 ;;
    frame | csv | cifar10 | dist_checkpoint) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

failed=()
mkdir -p "$out/logs"
printf '%-16s %10s %8s %6s %6s %7s\n' target execs exec/s cov ft corpus
for t in "${targets[@]}"; do
  bin="$out/fuzz/fuzz_$t"
  [[ -x "$bin" ]] || { echo "fuzz.sh: no target $bin (build first)" >&2; exit 2; }
  log="$out/logs/$t.log"
  mkdir -p "$out/artifacts/$t"
  common=(-rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="$out/artifacts/$t/")
  if [[ $mode == regression ]]; then
    # -runs=0: execute every corpus file once and stop.
    status=0
    "$bin" "${common[@]}" -runs=0 "fuzz/corpus/$t" >"$log" 2>&1 || status=$?
  else
    mkdir -p "$out/corpus/$t"
    cp -n "fuzz/corpus/$t"/* "$out/corpus/$t/"
    status=0
    "$bin" "${common[@]}" -max_len="$(max_len "$t")" -max_total_time="$seconds" \
      "$out/corpus/$t" >"$log" 2>&1 || status=$?
  fi
  # The last status line ("#N DONE cov: C ft: F corp: K/...") and the final stats.
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
  printf '%-16s %10s %8s %6s %6s %7s' "$t" "${execs:--}" "${rate:--}" "${cov:--}" "${ft:--}" "${corp:--}"
  if ((status != 0)); then
    printf '  FAILED (exit %d, %s)\n' "$status" "$log"
    failed+=("$t")
  else
    printf '\n'
  fi
done

if ((${#failed[@]})); then
  echo "fuzz.sh: ${#failed[@]} target(s) failed: ${failed[*]} (reproduce: build/fuzz/fuzz/fuzz_<target> <artifact>)" >&2
  exit 1
fi
