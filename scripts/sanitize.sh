#!/usr/bin/env bash
# scripts/sanitize.sh address|thread [--jobs N] [--list]
#
# Builds the suites that exercise the server, the client daemon, the store, the admin API,
# the network layer and the collectives with a sanitizer, and runs them (docs/ci.md):
#
#   address  ASan + UBSan (-fno-sanitize-recover=undefined: the first UB report fails the
#            test), in build/asan. Leak checking is on.
#   thread   TSan, in build/tsan: the concurrency-heavy suites (server sessions and run
#            controller, client daemon, collectives over TCP/TLS, SQLite store, API).
#
# The address tree also builds the fuzz targets of fuzz/ as corpus replayers (GCC, no
# libFuzzer): ctest's fuzz_replay_<target> runs every committed input once (docs/fuzzing.md).
#
# Warnings are not errors here: the dev tree (-O3, -Werror) checks them. GCC 12's
# flow-sensitive warnings report false positives on instrumented -O1 code in coroutine
# frames ("may be used uninitialized" on a moved boost::system::result, "mismatched
# new/delete" on Asio's frame allocator), which the dev build of the same code does not.
#
# Both are built at -O1 -g1: -O0 makes the tests that train real models several times
# slower, and -O1 keeps every report's stack readable; line tables (-g1) carry the file,
# line and inlined frames of every report at a quarter of -g's size. The numeric suites
# (model, training, data, dist, the sim's other suites) are left out: they are
# single-threaded Eigen loops covered by the release suite, and under ASan at -O1 they would
# double the run. sim_run_test is in (22 s under ASan): it starts and stops whole simulated
# federations with their dashboard, where ASan found a timer destroyed after its io_context
# (2026-11-29).
#
# Under TSan, OpenMP and OpenBLAS run one thread (OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1):
# libgomp is not built with TSan, and its barriers would be reported as races that are not
# ours; with one thread they never run. No other suppression is used.
set -euo pipefail
cd "$(dirname "$0")/.."

kind=${1:-}
shift || true
jobs=$(nproc)
list_only=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --jobs) jobs=$2; shift 2 ;;
    --list) list_only=1; shift ;;
    *) echo "sanitize.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done

# The suites each sanitizer runs (test binaries; their cases are discovered by ctest).
# Left out of both: federation_storm_test, a load test at a fixed scale (2,000 handshakes and
# 400 slow sockets against one server) with bounds on round and API latency. Instrumented,
# the server cannot meet them (2026-11-26, ASan + UBSan: 5 of 8 rounds in the storm, API
# p50 26 s; no sanitizer report in its 91 s). It runs in the release suite.
address_targets=(
  util_test log_format_test net_test tls_test tls_stream_test protocol_test secagg_test
  privacy_test store_test store_fault_test fault_proxy_test check_config_test
  federation_test federation_robust_test federation_e2e_test federation_faults_test
  federation_control_test federation_crash_test federation_fault_proxy_test federation_fd_test federation_scaling_test
  federation_storage_test federation_kill_loop_test
  api_unit_test api_http_test api_run_test api_access_test api_storage_test
  client_test site_control_test client_config_test client_scaling_test
  collective_test sim_run_test
  fuzz-targets
)
thread_targets=(
  net_test tls_stream_test store_test store_fault_test
  federation_test federation_e2e_test federation_faults_test federation_control_test
  federation_storage_test federation_fault_proxy_test
  api_http_test api_run_test
  client_test site_control_test
  collective_test
)

case $kind in
  address) dir=build/asan; targets=("${address_targets[@]}") ;;
  thread) dir=build/tsan; targets=("${thread_targets[@]}") ;;
  *) echo "usage: scripts/sanitize.sh address|thread [--jobs N] [--list]" >&2; exit 2 ;;
esac
if [[ $list_only == 1 ]]; then
  printf '%s\n' "${targets[@]}"
  exit 0
fi

# FEDCORE_BUILD_LOCK: a file to flock around the build (not the tests), for machines where
# several builds share the cores.
locked() {
  if [[ -n "${FEDCORE_BUILD_LOCK:-}" ]]; then
    flock "$FEDCORE_BUILD_LOCK" "$@"
  else
    "$@"
  fi
}

start=$SECONDS
locked cmake -S . -B "$dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
  -DFEDCORE_SANITIZE="$kind" -DFEDCORE_WERROR=OFF -DFEDCORE_BUILD_BENCH=OFF -DFEDCORE_MPI=OFF \
  >/dev/null
# The binaries the suites start as processes (crash, fd and check-config tests run the
# real fedcore-server) come in through their add_dependencies.
locked cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
echo "sanitize.sh: $kind build done at $((SECONDS - start)) s"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
if [[ $kind == thread ]]; then
  export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
fi
# Only the listed suites: ctest lists the ones not built as <target>_NOT_BUILT, and a tree
# built whole by hand (`cmake --build build/asan`) holds the others too, the storm among
# them, which fails instrumented (above); so the test numbers of every suite binary
# (*_test) not in the list are left out. The browser tests of the dashboard (web_*) are not
# C++ and run in the release suite.
selected=$(ctest --test-dir "$dir" --show-only=json-v1 | /usr/bin/python3 -c '
import json, os, sys
suites = set(sys.argv[1:])
for number, test in enumerate(json.load(sys.stdin)["tests"], start=1):
    program = os.path.basename((test.get("command") or [""])[0])
    if not (program.endswith("_test") and program not in suites):
        print(number)
' "${targets[@]}" | paste -sd,)
if [[ -z $selected ]]; then
  echo "sanitize.sh: no tests of the listed suites in $dir" >&2
  exit 1
fi
ctest --test-dir "$dir" -j "$jobs" --output-on-failure --timeout 900 -E '_NOT_BUILT$|^web_' \
  -I "0,0,0,$selected"

echo "sanitize.sh: $kind suites passed at $((SECONDS - start)) s"
