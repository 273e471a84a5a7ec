#!/usr/bin/python3
"""PyTorch DDP (gloo backend, CPU) on the cnn fedcore-dist trains, for the throughput
comparison in bench/ddp_compare.sh: the same model (conv5x5x32-pool-conv5x5x64-pool-
dense512-dense10), local batch, SGD and one compute thread per worker.

Usage: ddp_torch.py WORLD STEPS BATCH   -> prints "torch-ddp world=N samples_per_second=X"
Random inputs: throughput does not depend on pixel values.
"""
import os
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch import nn
except ImportError:
    print("ddp_torch: python3-torch is not installed; skipping (scripts/setup.sh --bench)")
    sys.exit(0)


def build():
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 10))


def worker(rank, world, steps, batch, port, queue):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    model = nn.parallel.DistributedDataParallel(build())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(5):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    elapsed = time.perf_counter() - start
    if rank == 0:
        queue.put(steps * batch * world / elapsed)
    dist.destroy_process_group()


def mapped_blas():
    torch.zeros(2, 2) @ torch.zeros(2, 2)  # make torch load its BLAS before we look
    with open("/proc/self/maps") as maps:
        libs = {line.split()[-1] for line in maps if "blas" in line.lower() and "/" in line}
    return ", ".join(sorted(libs)) or "none mapped"


def main():
    world, steps, batch = (int(a) for a in sys.argv[1:4])
    print(f"PyTorch {torch.__version__}, BLAS mapped: {mapped_blas()}", flush=True)
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(worker, args=(world, steps, batch, port, queue), nprocs=world, join=True)
    print(f"torch-ddp world={world} samples_per_second={queue.get():.1f}", flush=True)


if __name__ == "__main__":
    main()
