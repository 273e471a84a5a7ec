#!/usr/bin/env bash
# MobileNetV2 (width 0.5) on the CIFAR-10 stand-in (Fashion-MNIST padded to 32x32, the
# first 10,000 training images, the whole 10,000-image test set), 10 epochs, global batch
# 64, SGD lr 0.05 momentum 0.9, random crop (padding 4) and flip, test after every epoch:
#   fedcore-dist: one worker on 1 thread and on 2, 2-worker DDP, 2-stage pipeline
#   (balanced by measured time), 2 x 2 hybrid (4 processes on 2 cores);
#   PyTorch (torchvision's mobilenet_v2 with the same strides): one process on 2 threads,
#   and DDP over gloo with 2 processes of 1 thread.
# Every run's JSON report lands in OUT_DIR; bench/mobilenet_report.py turns them into the
# tables and curves of docs/results.md.
#   bench/mobilenet_scaling.sh [BUILD_DIR] [OUT_DIR] [EPOCHS] [TRAIN_SAMPLES]
set -euo pipefail
build=${1:-build/release}
out=${2:-runs/mobilenet}
epochs=${3:-10}
samples=${4:-10000}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
dist=$build/distributed/fedcore-dist
common=(--model '{"type":"mobilenetv2","width":0.5,"dropout":0}' --data fashion-mnist-32
  --train-samples "$samples" --test-samples 10000 --epochs "$epochs" --lr 0.05 --momentum 0.9
  --augment-crop 4 --augment-flip --eval-every-epoch --seed 1)
run() {
  local name=$1
  shift
  echo "== $name" >&2
  /usr/bin/time -v -o "$out/$name.time" "$@" 2>&1 | grep -v "^\[.*\] \[info\] rank [1-9]" |
    tee "$out/$name.log" | grep -E "epoch|samples/s" >&2 || true
}
only=${ONLY:-single1,single2,ddp2,pipe2,hybrid4,torch1,torchddp2}
want() { [[ ",$only," == *",$1,"* ]]; }
want single1 && run single1 "$dist" launch --nproc 1 -- "${common[@]}" --batch 64 --threads 1 --report "$out/single1.json"
want single2 && run single2 "$dist" launch --nproc 1 -- "${common[@]}" --batch 64 --threads 2 --report "$out/single2.json"
want ddp2 && run ddp2 "$dist" launch --nproc 2 -- "${common[@]}" --batch 32 --threads 1 --report "$out/ddp2.json"
want pipe2 && run pipe2 "$dist" launch --nproc 2 -- "${common[@]}" --mode pipeline --stages 2 \
  --micro-batches 4 --balance time --batch 64 --threads 1 --report "$out/pipe2.json"
want hybrid4 && run hybrid4 "$dist" launch --nproc 4 -- "${common[@]}" --mode pipeline --stages 2 \
  --micro-batches 4 --balance time --batch 32 --threads 1 --report "$out/hybrid4.json"
want torch1 && run torch1 /usr/bin/python3 "$here/mobilenet_torch.py" --world 1 --threads 2 \
  --epochs "$epochs" --train-samples "$samples" --out "$out/torch1.json"
want torchddp2 && run torchddp2 /usr/bin/python3 "$here/mobilenet_torch.py" --world 2 --threads 1 \
  --epochs "$epochs" --train-samples "$samples" --out "$out/torchddp2.json"
echo "reports in $out" >&2
