#!/usr/bin/env bash
# BatchNorm in federated rounds: the same simulated federation (real server, real daemons,
# mutual TLS) on Fashion-MNIST with Dirichlet label skew, the model's BatchNorm statistics
# averaged and kept at the sites (FedBN), every site evaluated on test data in its own
# training class proportions (--site-test like-train). MODEL "cnn" (16-32, dense 128) also
# runs the same cnn without BatchNorm for reference; "mobilenetv2" is MobileNetV2 at width
# 0.25 (BatchNorm everywhere: no reference without it). Prints one table row per run.
#   bench/fedbn.sh [BUILD_DIR] [OUT_DIR] [ROUNDS] [ALPHA] [MODEL] [TRAIN_LIMIT]
set -euo pipefail
build=${1:-build/release}
out=${2:-runs/fedbn}
rounds=${3:-20}
alpha=${4:-0.3}
model=${5:-cnn}
train_limit=${6:-20000}
mkdir -p "$out"
sim=$build/sim/fedcore-sim
common=(--dataset fashion-mnist --partition "dirichlet:$alpha" --site-test like-train
  --clients 8 --rounds "$rounds" --local-epochs 1 --batch 32 --lr 0.05 --momentum 0.9
  --train-limit "$train_limit" --test-limit 10000 --seed 1 --quiet)
if [[ $model == cnn ]]; then
  cnn='"type": "cnn", "channels": [16, 32], "kernel": 5, "dense": 128'
  plain="{$cnn}"
  with_bn="{$cnn, \"batch_norm\": true}"
  runs="no-bn averaged local"
  "$sim" "${common[@]}" --model "$plain" --out "$out/no-bn"
else
  with_bn='{"type": "mobilenetv2", "width": 0.25}'
  runs="averaged local"
fi
"$sim" "${common[@]}" --model "$with_bn" --out "$out/averaged"
"$sim" "${common[@]}" --model "$with_bn" --batch-norm local --out "$out/local"
python3 - "$out" $runs <<'PY'
import csv, json, sys
out, runs = sys.argv[1], sys.argv[2:]
labels = {"no-bn": "without BatchNorm", "averaged": "BatchNorm averaged",
          "local": "FedBN (BatchNorm at the sites)"}
print("| run | site accuracy after the last round | best | first round at 80% | global-model accuracy | mean round s |")
print("|---|---|---|---|---|---|")
for name in runs:
    rows = list(csv.DictReader(open(f"{out}/{name}/rounds.csv")))
    site = [float(r["site_accuracy"]) for r in rows if r["site_accuracy"]]
    first = next((r["round"] for r in rows if r["site_accuracy"] and float(r["site_accuracy"]) >= 0.8), "not reached")
    s = json.load(open(f"{out}/{name}/summary.json"))["federated"]
    central = "n/a (no global BatchNorm)" if name == "local" else f"{float(rows[-1]['accuracy']):.4f}"
    print(f"| {labels[name]} | {site[-1]:.4f} | {max(site):.4f} | {first} | {central} | {s['mean_round_s']:.2f} |")
PY
