#!/usr/bin/env bash
# Calibration and throttled-link runs for the MobileNetV2 scaling model
# (bench/mobilenet_model.py):
#   - one worker, one thread, 40 steps at local batch 8, 16, 32 and 64: compute per step;
#   - 2-worker DDP (global batch 64) through shared memory, and over loopback limited to
#     100 Mb/s, 300 Mb/s and 1 Gb/s by tc in a network namespace (bench/link_limited.sh;
#     needs root), 40 steps each;
#   - a 2-stage pipeline, 40 steps: the stages' compute per micro-batch and activations.
#   bench/mobilenet_links.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
build=${1:-build/release}
out=${2:-runs/mobilenet-links}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
dist=$(realpath "$build/distributed/fedcore-dist")
common=(--model '{"type":"mobilenetv2","width":0.5,"dropout":0}' --data fashion-mnist-32
  --train-samples 8192 --test-samples 100 --max-steps 40 --no-eval --lr 0.05 --momentum 0.9
  --threads 1 --seed 1)
for b in 8 16 32 64; do
  "$dist" launch --nproc 1 -- "${common[@]}" --batch "$b" --report "$out/calib-b$b.json" |
    grep samples/s
done
"$dist" launch --nproc 2 -- "${common[@]}" --batch 32 --shm on --report "$out/ddp2-shm.json" |
  grep samples/s
for rate in 100mbit 300mbit 1gbit; do
  "$here/link_limited.sh" "$rate" "$dist" launch --nproc 2 -- "${common[@]}" --batch 32 \
    --shm off --report "$out/ddp2-$rate.json" | grep samples/s
done
# A 2-stage pipeline (global batch 64, 4 micro-batches, split by measured time): the
# stages' compute per micro-batch and the activations between them, for the hybrid model.
"$dist" launch --nproc 2 -- "${common[@]}" --batch 64 --mode pipeline --stages 2 \
  --micro-batches 4 --balance time --shm on --report "$out/pipe2.json" | grep samples/s
"$here/link_limited.sh" 300mbit "$dist" launch --nproc 2 -- "${common[@]}" --batch 64 \
  --mode pipeline --stages 2 --micro-batches 4 --balance time --shm off \
  --report "$out/pipe2-300mbit.json" | grep samples/s
python3 "$here/mobilenet_model.py" "$out" "$out/pipe2.json"
