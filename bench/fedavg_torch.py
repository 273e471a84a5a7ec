#!/usr/bin/python3
"""The PyTorch FedAvg reference for docs/results.md ("Strategies"): plain FedAvg written in
PyTorch (no Fedcore in the loop), on the very shards fedcore-sim deals (Fedcore's own
partitioner through the Python SDK, same seed), with the same model, client optimizer,
batch and local epochs. Prints the global model's test accuracy after each round.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/fedavg_torch.py \\
        --partition dirichlet:0.5 --clients 10 --rounds 20 --lr 0.05 --seed 1

Model: the mlp 784-256-128-10 with ReLU (fedcore's {"type": "mlp"}), PyTorch's default
initialisation (not Fedcore's: the two starts differ). Each round every client starts from
the global model, runs one epoch of SGD (lr, no momentum, batch 32, a fresh shuffle per
client and round), and the server takes the sample-weighted mean of the state dicts.
"""

import argparse
import time

import numpy as np
import torch
from torch import nn

from fedcore import datasets


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def local_epoch(model, x, y, lr, batch, generator):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    order = torch.randperm(len(x), generator=generator)
    loss_fn = nn.CrossEntropyLoss()
    for start in range(0, len(x), batch):
        idx = order[start:start + batch]
        optimizer.zero_grad()
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--partition", default="dirichlet:0.5")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    train_x, train_y, test_x, test_y = datasets.fashion_mnist()
    parts = datasets.partition(train_y, args.partition, args.clients, seed=args.seed)
    x = torch.from_numpy(np.ascontiguousarray(train_x.reshape(len(train_x), -1)))
    y = torch.from_numpy(train_y.astype(np.int64))
    tx = torch.from_numpy(np.ascontiguousarray(test_x.reshape(len(test_x), -1)))
    ty = torch.from_numpy(test_y.astype(np.int64))
    shards = [(x[torch.from_numpy(p.astype(np.int64))], y[torch.from_numpy(p.astype(np.int64))])
              for p in parts]
    global_model = mlp()
    generator = torch.Generator().manual_seed(args.seed)
    started = time.monotonic()
    for round_number in range(1, args.rounds + 1):
        total = sum(len(s[1]) for s in shards)
        summed = {k: torch.zeros_like(v) for k, v in global_model.state_dict().items()}
        for sx, sy in shards:
            local = mlp()
            local.load_state_dict(global_model.state_dict())
            local_epoch(local, sx, sy, args.lr, args.batch, generator)
            for k, v in local.state_dict().items():
                summed[k] += v * (len(sy) / total)
        global_model.load_state_dict(summed)
        with torch.no_grad():
            accuracy = (global_model(tx).argmax(1) == ty).float().mean().item()
        print(f"round {round_number}: accuracy {accuracy:.4f} ({time.monotonic() - started:.1f} s)",
              flush=True)


if __name__ == "__main__":
    main()
