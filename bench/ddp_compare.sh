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
openblas=/usr/lib/x86_64-linux-gnu/openblas-openmp
if [[ ! -e $openblas/libblas.so.3 || ! -x /usr/bin/python3 ]]; then
  echo "ddp_compare: OpenBLAS or /usr/bin/python3 missing; skipping PyTorch" >&2
  exit 0
fi
for world in 1 2; do
  LD_LIBRARY_PATH=$openblas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} OMP_NUM_THREADS=1 \
    /usr/bin/python3 "$here/ddp_torch.py" "$world" "$steps" "$batch"
done
