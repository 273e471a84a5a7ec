#!/usr/bin/env bash
# Data-parallel cnn training on Fashion-MNIST: fedcore-dist on 1 and 2 workers (one
# compute thread each; speedup, efficiency, accuracy vs one worker, in scaling.json and
# scaling.svg) and PyTorch DDP (gloo backend, Debian's torch on Debian's OpenBLAS) on the
# same model, local batch and step count.
#   bench/ddp_compare.sh [BUILD_DIR] [STEPS] [BATCH] [OUT_DIR]
set -euo pipefail
build=${1:-build/release}
steps=${2:-200}
batch=${3:-32}
out=${4:-$(mktemp -d)}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
# Enough samples that 2 workers never wrap an epoch within `steps`.
samples=$((steps * batch * 2))
"$build/dist/fedcore-dist" scale --nprocs 1,2 --out "$out" -- \
  --model '{"type":"cnn"}' --batch "$batch" --threads 1 --max-steps "$steps" \
  --train-samples "$samples" --test-samples 2000 --lr 0.05
echo "fedcore-dist reports: $out/scaling.json $out/scaling.svg"
# The ceiling two workers can reach on this machine without any communication: two
# independent one-worker jobs at once, each on its own core, competing only for memory
# bandwidth, caches and whatever else the machine runs. Their summed throughput over one
# job alone is the best speedup any data-parallel implementation could show here.
mkdir -p "$out/alone" "$out/pair-a" "$out/pair-b"
one_worker() {
  "$build/dist/fedcore-dist" scale --nprocs 1 --out "$1" -- \
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
for world in 1 2; do
  LD_LIBRARY_PATH=$openblas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} OMP_NUM_THREADS=1 \
    /usr/bin/python3 "$here/ddp_torch.py" "$world" "$steps" "$batch"
done
