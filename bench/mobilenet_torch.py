#!/usr/bin/python3
"""PyTorch's side of the MobileNetV2 comparison (bench/mobilenet_scaling.sh): the same
network (torchvision's mobilenet_v2 with the CIFAR strides fedcore uses: stem and second
stage at stride 1), the same data (Fashion-MNIST from Debian's dataset-fashion-mnist,
padded to 32x32, the first N training images), the same recipe (SGD with momentum, global
batch, random crop with padding 4 and horizontal flip, no dropout) and an evaluation on the
test set after every epoch, left out of the training time.

Usage: mobilenet_torch.py --world W --threads T --epochs E --batch B --lr LR --momentum M
                          --train-samples N --test-samples N --width 0.5 --out FILE.json
World 1 is one process with T threads; world W > 1 is DDP over gloo, W processes with
T threads each, each taking B / W of every global batch of B (BatchNorm per process, as
DDP without SyncBatchNorm). Writes {"curve": [...], "samples_per_second": ...}.
"""
import argparse
import gzip
import json
import os
import socket
import struct
import sys
import time

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torchvision
    from torch import nn
except ImportError as e:
    print(f"mobilenet_torch: {e}; install python3-torch python3-torchvision (scripts/setup.sh)")
    sys.exit(0)

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(split, count):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(f"{DATA}/{prefix}-images-idx3-ubyte.gz")[:count]
    labels = read_idx(f"{DATA}/{prefix}-labels-idx1-ubyte.gz")[:count]
    x = torch.zeros(len(images), 1, 32, 32)
    x[:, 0, 2:30, 2:30] = torch.from_numpy(images.astype(np.float32) / 255.0)
    return x, torch.from_numpy(labels.astype(np.int64))


def build(width):
    model = torchvision.models.mobilenet_v2(num_classes=10, width_mult=width, dropout=0.0)
    model.features[0][0] = nn.Conv2d(1, model.features[0][0].out_channels, 3, 1, 1, bias=False)
    model.features[2].conv[1][0].stride = (1, 1)  # the CIFAR strides
    return model


def augment(x, generator):
    """RandomCrop(32, padding=4) + RandomHorizontalFlip, per image."""
    n = x.shape[0]
    padded = nn.functional.pad(x, (4, 4, 4, 4))
    dy = torch.randint(0, 9, (n,), generator=generator)
    dx = torch.randint(0, 9, (n,), generator=generator)
    flip = torch.rand(n, generator=generator) < 0.5
    out = torch.empty_like(x)
    for i in range(n):
        crop = padded[i, :, dy[i]:dy[i] + 32, dx[i]:dx[i] + 32]
        out[i] = crop.flip(-1) if flip[i] else crop
    return out


def evaluate(model, x, y):
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(x), 256):
            out = model(x[i:i + 256])
            loss += nn.functional.cross_entropy(out, y[i:i + 256], reduction="sum").item()
            correct += (out.argmax(1) == y[i:i + 256]).sum().item()
    model.train()
    return correct / len(x), loss / len(x)


def train(rank, args, port, queue):
    torch.set_num_threads(args.threads)
    if args.world > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=args.world)
    torch.manual_seed(args.seed)
    model = build(args.width)
    if args.world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    x, y = load("train", args.train_samples)
    tx, ty = load("test", args.test_samples)
    local = args.batch // args.world
    steps_per_epoch = len(x) // args.batch
    generator = torch.Generator().manual_seed(args.seed * 1000 + rank)
    curve, trained, samples = [], 0.0, 0
    for epoch in range(args.epochs):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(args.seed + epoch))
        start = time.perf_counter()
        loss_sum = 0.0
        for step in range(steps_per_epoch):
            idx = order[step * args.batch + rank * local: step * args.batch + (rank + 1) * local]
            xb = augment(x[idx], generator)
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(xb), y[idx])
            loss.backward()
            opt.step()
            loss_sum += loss.item()
        if args.world > 1:
            dist.barrier()
        trained += time.perf_counter() - start
        samples += steps_per_epoch * args.batch
        if rank == 0:
            acc, test_loss = evaluate(model.module if args.world > 1 else model, tx, ty)
            curve.append({"epoch": epoch + 1, "train_seconds": trained,
                          "train_loss": loss_sum / steps_per_epoch, "test_accuracy": acc,
                          "test_loss": test_loss})
            print(f"torch world {args.world}: epoch {epoch + 1}: test accuracy {acc:.4f} "
                  f"({trained:.1f} s training)", flush=True)
        if args.world > 1:
            dist.barrier()
    if rank == 0:
        queue.put({"curve": curve, "samples_per_second": samples / trained})
    if args.world > 1:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    for name, kind, default in [("world", int, 1), ("threads", int, 1), ("epochs", int, 10),
                                ("batch", int, 64), ("lr", float, 0.05), ("momentum", float, 0.9),
                                ("train-samples", int, 10000), ("test-samples", int, 10000),
                                ("width", float, 0.5), ("seed", int, 1), ("out", str, "")]:
        p.add_argument("--" + name, type=kind, default=default)
    args = p.parse_args()
    print(f"PyTorch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"mkldnn {torch.backends.mkldnn.is_available()}", flush=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    if args.world == 1:
        train(0, args, port, queue)
    else:
        mp.spawn(train, args=(args, port, queue), nprocs=args.world, join=True)
    result = queue.get()
    result.update({"world": args.world, "threads": args.threads, "torch": torch.__version__,
                   "global_batch": args.batch, "epochs": args.epochs})
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    print(f"torch world {args.world}: {result['samples_per_second']:.1f} samples/s", flush=True)


if __name__ == "__main__":
    main()
