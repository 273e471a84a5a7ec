#!/usr/bin/env bash
# BatchNorm in federated rounds: the same simulated federation (real server, real daemons,
# mutual TLS) of a cnn with BatchNorm on Fashion-MNIST with Dirichlet label skew, its
# statistics averaged and kept at the sites (FedBN), every site evaluated on test data in
# its own training class proportions (--site-test like-train); and the same cnn without
# BatchNorm for reference. Prints one table row per run.
#   bench/fedbn.sh [BUILD_DIR] [OUT_DIR] [ROUNDS] [ALPHA]
set -euo pipefail
build=${1:-build/release}
out=${2:-runs/fedbn}
rounds=${3:-20}
alpha=${4:-0.3}
mkdir -p "$out"
sim=$build/sim/fedcore-sim
common=(--dataset fashion-mnist --partition "dirichlet:$alpha" --site-test like-train
  --clients 8 --rounds "$rounds" --local-epochs 1 --batch 32 --lr 0.05 --momentum 0.9
  --train-limit 20000 --test-limit 10000 --seed 1 --quiet)
cnn='"type": "cnn", "channels": [16, 32], "kernel": 5, "dense": 128'
"$sim" "${common[@]}" --model "{$cnn}" --out "$out/no-bn"
"$sim" "${common[@]}" --model "{$cnn, \"batch_norm\": true}" --out "$out/averaged"
"$sim" "${common[@]}" --model "{$cnn, \"batch_norm\": true}" --batch-norm local \
  --out "$out/local"
python3 - "$out" <<'PY'
import csv, json, sys
out = sys.argv[1]
print("| run | site accuracy after the last round | best | first round at 80% | global-model accuracy | mean round s |")
print("|---|---|---|---|---|---|")
for name, label in (("no-bn", "cnn without BatchNorm"), ("averaged", "BatchNorm averaged"),
                    ("local", "FedBN (BatchNorm at the sites)")):
    rows = list(csv.DictReader(open(f"{out}/{name}/rounds.csv")))
    site = [float(r["site_accuracy"]) for r in rows if r["site_accuracy"]]
    first = next((r["round"] for r in rows if r["site_accuracy"] and float(r["site_accuracy"]) >= 0.8), "not reached")
    s = json.load(open(f"{out}/{name}/summary.json"))["federated"]
    central = "n/a (no global BatchNorm)" if name == "local" else f"{float(rows[-1]['accuracy']):.4f}"
    print(f"| {label} | {site[-1]:.4f} | {max(site):.4f} | {first} | {central} | {s['mean_round_s']:.2f} |")
PY
