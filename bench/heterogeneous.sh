#!/usr/bin/env bash
# Heterogeneous workers: 2-worker DDP of MobileNetV2 (width 0.5, global batch 64, one
# thread each), with rank 1 made 3x slower (fedcore-dist's --test-slowdown: it sleeps twice
# its own compute time every step, standing in for a slower machine), with the uniform
# split and with --adaptive-batch; and both workers at full speed for reference.
#   bench/heterogeneous.sh [BUILD_DIR] [OUT_DIR] [STEPS] [SLOWDOWN]
set -euo pipefail
build=${1:-build/release}
out=${2:-runs/heterogeneous}
steps=${3:-200}
slowdown=${4:-3}
mkdir -p "$out"
dist=$build/distributed/fedcore-dist
common=(--model '{"type":"mobilenetv2","width":0.5,"dropout":0}' --data fashion-mnist-32
  --train-samples 16384 --test-samples 100 --max-steps "$steps" --no-eval --lr 0.05
  --momentum 0.9 --threads 1 --seed 1 --batch 32)
"$dist" launch --nproc 1 -- "${common[@]}" --report "$out/one-fast.json" | grep samples/s
"$dist" launch --nproc 2 -- "${common[@]}" --report "$out/even.json" | grep samples/s
"$dist" launch --nproc 2 -- "${common[@]}" --test-slow-rank 1 --test-slowdown "$slowdown" \
  --report "$out/slow-uniform.json" | grep samples/s
"$dist" launch --nproc 2 -- "${common[@]}" --test-slow-rank 1 --test-slowdown "$slowdown" \
  --adaptive-batch --adaptive-period 10 --report "$out/slow-adaptive.json" | grep samples/s
python3 - "$out" "$slowdown" <<'PY'
import json, sys
out, slow = sys.argv[1], float(sys.argv[2])
r = {n: json.load(open(f"{out}/{n}.json")) for n in ("one-fast", "even", "slow-uniform", "slow-adaptive")}
# A worker's throughput at local batch 32 while the other one computes too (the even run;
# alone on the machine it is faster: one-fast); the slow one has 1/slow of it.
fast = r["even"]["samples_per_second"] / 2
combined = fast * (1 + 1 / slow)
ideal = 64 / combined
print("| run | s/step | samples/s | vs the combined throughput's step time | final split |")
print("|---|---|---|---|---|")
for n in ("even", "slow-uniform", "slow-adaptive"):
    x = r[n]
    splits = x.get("adaptive_batch", {}).get("splits", [])
    split = splits[-1]["local_batches"] if splits else [32, 32]
    print(f"| {n} | {x['seconds_per_step']:.3f} | {x['samples_per_second']:.0f} | "
          f"{x['seconds_per_step'] / ideal:.2f}x | {split} |")
print(f"\none worker alone: {r['one-fast']['samples_per_second']:.0f} samples/s, beside the "
      f"other: {fast:.0f}; combined throughput with one worker "
      f"{slow:g}x slower: {combined:.0f} samples/s = {ideal:.3f} s per global batch of 64")
PY
