#!/usr/bin/env bash
# Allreduce bus bandwidth, side by side in one run: fedcore's ring over TCP and TLS,
# OpenMPI's MPI_Allreduce over the TCP BTL, gloo's ring allreduce over TCP; 2 and 4
# ranks on 127.0.0.1, 4 KiB .. 64 MiB. Then the same on one host's shared memory:
# fedcore with its shared-memory rings (payloads skip the sockets, envelopes do not)
# against OpenMPI's vader BTL. Prints the raw lines and two markdown tables.
#   [REPEATS=3] [SPIN_US=50] bench/allreduce_compare.sh [BUILD_DIR] [RANKS...]
# SPIN_US: how long fedcore's waits poll before they sleep (NetOptions::spin). OpenMPI's
# TCP and shared-memory transports poll by default, so the like-for-like setting polls
# too; SPIN_US=0 shows fedcore's default, which sleeps at once.
# Each implementation runs REPEATS times, interleaved with the others, and the table shows
# the median per size: single runs on a shared 2-core VM move by ±30% from one to the next.
# OpenMPI and gloo are skipped with a note when not installed (scripts/setup.sh --bench).
set -euo pipefail
build=${1:-build/release}
shift || true
ranks=("$@")
((${#ranks[@]} == 0)) && ranks=(2 4)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$here/../certs/fedcore-pki" --dir "$work/pki" init >/dev/null
"$here/../certs/fedcore-pki" --dir "$work/pki" server fedcore-server >/dev/null
"$here/../certs/fedcore-pki" --dir "$work/pki" client rank-peer >/dev/null
out="$work/results.txt"
repeats=${REPEATS:-3}
spin=(--spin-us "${SPIN_US:-50}")
# The host may move this VM's CPUs onto cores that share no cache, which slows every
# transfer between them (fedcore's and OpenMPI's alike) for minutes at a time: the probe's
# round trip before each batch says which kind of minute a batch ran in.
core_link() {
  if [[ -x $build/bench/core_link_probe ]]; then
    "$build/bench/core_link_probe" | sed "s/^/$1 /" | tee -a "$work/core_link.txt" || true
  fi
}
for ((repeat = 1; repeat <= repeats; repeat++)); do
  for n in "${ranks[@]}"; do
    core_link "repeat=$repeat ranks=$n before:"
    "$build/bench/allreduce_bench" --ranks "$n" --transport tcp "${spin[@]}" | tee -a "$out"
    "$build/bench/allreduce_bench" --ranks "$n" --transport tls --pki "$work/pki" "${spin[@]}" |
      tee -a "$out"
    "$build/bench/allreduce_bench" --ranks "$n" --transport tcp --shm-mb 16 "${spin[@]}" |
      tee -a "$out"
    "$build/bench/allreduce_bench" --ranks "$n" --transport tls --pki "$work/pki" --shm-mb 16 \
      "${spin[@]}" | tee -a "$out"
    if [[ -x $build/bench/allreduce_mpi_bench ]] && command -v mpirun >/dev/null; then
      mpirun --allow-run-as-root --oversubscribe -n "$n" --mca btl tcp,self --mca btl_tcp_if_include lo \
        "$build/bench/allreduce_mpi_bench" | tee -a "$out"
      mpirun --allow-run-as-root --oversubscribe -n "$n" --mca btl vader,self \
        "$build/bench/allreduce_mpi_bench" --name openmpi-shm | tee -a "$out"
    else
      echo "allreduce_compare: OpenMPI not built/installed, skipping" >&2
    fi
    if [[ -x $build/bench/allreduce_gloo_bench ]]; then
      "$build/bench/allreduce_gloo_bench" --ranks "$n" | tee -a "$out"
    else
      echo "allreduce_compare: gloo not built/installed, skipping" >&2
    fi
  done
done
core_link "after all:"
if [[ -s $work/core_link.txt ]]; then
  echo
  echo "Core-to-core round trips seen (lower is closer; on the EPYC VMs of 2026-11-29, 55-120 ns"
  echo "ran fast and ~320 ns, CPUs on cores that share no L3 cache, ran every lane slowly):"
  cat "$work/core_link.txt"
fi
python3 - "$out" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"allreduce (\S+) ranks=(\d+) bytes=(\d+) seconds=\S+ busbw_gbps=(\S+)", line)
    if m:
        rows.setdefault((int(m[2]), int(m[3])), {}).setdefault(m[1], []).append(float(m[4]))
runs = max(len(x) for v in rows.values() for x in v.values())
rows = {k: {i: statistics.median(x) for i, x in v.items()} for k, v in rows.items()}
def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"
def table(title, impls, pairs):
    print(f"\n{title}: median of {runs} runs per implementation and size")
    print("\n| ranks | size | " + " | ".join(f"{i} GB/s" for i in impls) + " | " +
          " | ".join(f"{a}/{b}" for a, b in pairs) + " |")
    print("|---|---|" + "---|" * (len(impls) + len(pairs)))
    for (n, b), v in sorted(rows.items()):
        size = f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
        cells = [f"{v[i]:.3f}" if i in v else "-" for i in impls]
        ratios = [ratio(v.get(f"fedcore-{a}"), v.get(b)) for a, b in pairs]
        print(f"| {n} | {size} | " + " | ".join(cells + ratios) + " |")
table("Over sockets", ["fedcore-tcp", "fedcore-tls", "openmpi-tcp", "gloo-ring-tcp"],
      [("tcp", "openmpi-tcp"), ("tcp", "gloo-ring-tcp"), ("tls", "openmpi-tcp"), ("tls", "gloo-ring-tcp")])
table("Shared memory on one host", ["fedcore-tcp+shm", "fedcore-tls+shm", "openmpi-shm", "gloo-ring-tcp"],
      [("tcp+shm", "openmpi-shm"), ("tls+shm", "openmpi-shm"), ("tcp+shm", "gloo-ring-tcp")])
PY
