#!/usr/bin/env bash
# Pipeline throughput of fedcore-dist as micro-batches per batch grow (1, 2, 4, 8): the
# cnn on Fashion-MNIST split into 2 stages (balanced by measured time) on 2 local worker
# processes, one compute thread each, 1F1B and GPipe schedules.
#   bench/pipeline_dist_bench.sh [BUILD_DIR] [STEPS] [BATCH] [JOB OPTIONS...]
# Extra job options go to every run, e.g. --shm off to keep activations on the sockets.
set -euo pipefail
build=${1:-build/release}
steps=${2:-40}
batch=${3:-64}
shift $(($# < 3 ? $# : 3))
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| schedule | micro-batches | samples/s | max comm share |"
echo "|---|---|---|---|"
for schedule in 1f1b gpipe; do
  for m in 1 2 4 8; do
    "$build/distributed/fedcore-dist" launch --nproc 2 -- --mode pipeline --stages 2 --micro-batches "$m" \
      --schedule "$schedule" --balance time --batch "$batch" --max-steps "$steps" --threads 1 \
      --train-samples $((steps * batch)) --test-samples 100 --model '{"type":"cnn"}' \
      --report "$out/p.json" "$@" >/dev/null
    python3 - "$out/p.json" "$schedule" "$m" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
share = max(x["comm_share"] for x in r["ranks"])
print(f"| {sys.argv[2]} | {sys.argv[3]} | {r['samples_per_second']:.1f} | {share:.2f} |")
PY
  done
done
