#!/usr/bin/env bash
# Data-parallel cnn training on Fashion-MNIST: fedcore-dist on 1 and 2 workers (one
# compute thread each; speedup, efficiency, accuracy vs one worker, in scaling.json and
# scaling.svg) and PyTorch DDP (gloo backend, Debian's torch on Debian's OpenBLAS) on the
# same model, local batch and step count.
#   [REPEATS=1] bench/ddp_compare.sh [BUILD_DIR] [STEPS] [BATCH] [OUT_DIR]
# With REPEATS > 1 the fedcore-dist 1-and-2-worker pair runs that many times and the
# speedups are listed with their median: on the shared 2-core VM one pair of runs can
# differ from the next by ±15%.
set -euo pipefail
build=${1:-build/release}
steps=${2:-200}
batch=${3:-32}
out=${4:-$(mktemp -d)}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
# Enough samples that 2 workers never wrap an epoch within `steps`.
samples=$((steps * batch * 2))
repeats=${REPEATS:-1}
for ((repeat = 1; repeat <= repeats; repeat++)); do
  run_out=$out
  ((repeats > 1)) && run_out=$out/repeat-$repeat && mkdir -p "$run_out"
  "$build/distributed/fedcore-dist" scale --nprocs 1,2 --out "$run_out" -- \
    --model '{"type":"cnn"}' --batch "$batch" --threads 1 --max-steps "$steps" \
    --train-samples "$samples" --test-samples 2000 --lr 0.05
  echo "fedcore-dist reports: $run_out/scaling.json $run_out/scaling.svg"
done
if ((repeats > 1)); then
  python3 - "$out" "$repeats" <<'PY'
import json, statistics, sys
speedups = []
for r in range(1, int(sys.argv[2]) + 1):
    runs = json.load(open(f"{sys.argv[1]}/repeat-{r}/scaling.json"))["runs"]
    rate = {run["world"]: run["samples_per_second"] for run in runs}
    speedups.append(rate[2] / rate[1])
    print(f"repeat {r}: 1 worker {rate[1]:.1f}, 2 workers {rate[2]:.1f} samples/s, speedup {speedups[-1]:.2f}x")
print(f"median speedup over {len(speedups)} repeats: {statistics.median(speedups):.2f}x")
PY
fi
# The ceiling two workers can reach on this machine without any communication: two
# independent one-worker jobs at once, each on its own core, competing only for memory
# bandwidth, caches and whatever else the machine runs. Their summed throughput over one
# job alone is the best speedup any data-parallel implementation could show here.
mkdir -p "$out/alone" "$out/pair-a" "$out/pair-b"
one_worker() {
  "$build/distributed/fedcore-dist" scale --nprocs 1 --out "$1" -- \
    --model '{"type":"cnn"}' --batch "$batch" --threads 1 --max-steps "$steps" \
    --train-samples "$samples" --test-samples 2000 --lr 0.05 >/dev/null
}
one_worker "$out/alone"
one_worker "$out/pair-a" &
pair_a=$!
one_worker "$out/pair-b"
wait "$pair_a"
python3 - "$out" <<'PY'
import json, sys
def rate(name):
    return json.load(open(f"{sys.argv[1]}/{name}/scaling.json"))["runs"][0]["samples_per_second"]
alone, a, b = rate("alone"), rate("pair-a"), rate("pair-b")
print(f"no-communication ceiling: one job alone {alone:.1f} samples/s; two at once "
      f"{a:.1f} + {b:.1f} = {a + b:.1f}; ceiling speedup {(a + b) / alone:.2f}x")
PY
openblas=/usr/lib/x86_64-linux-gnu/openblas-openmp
if [[ ! -e $openblas/libblas.so.3 || ! -x /usr/bin/python3 ]]; then
  echo "ddp_compare: OpenBLAS or /usr/bin/python3 missing; skipping PyTorch" >&2
  exit 0
fi
for ((repeat = 1; repeat <= repeats; repeat++)); do
  for world in 1 2; do
    LD_LIBRARY_PATH=$openblas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} OMP_NUM_THREADS=1 \
      /usr/bin/python3 "$here/ddp_torch.py" "$world" "$steps" "$batch"
  done
done
