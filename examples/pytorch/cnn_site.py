"""A hospital-style site that trains a PyTorch CNN on its shard of Fashion-MNIST and joins
a Fedcore federation through the Python SDK.

The model is the CNN of McMahan et al. (2017), the one Fedcore's own trainer builds for
{"type": "cnn"}: conv5x5x32, pool, conv5x5x64, pool, dense 512, dense 10. The shard is
the one fedcore-sim gives site `index` (the same partitioner and seed, via
fedcore.datasets), so the two trainers can be compared on identical data.

    python3 cnn_site.py --config site-1.json --index 0 --sites 3
"""

import argparse
import time

import numpy as np
import torch
from torch import nn

import fedcore
import fedcore.torch as fedtorch


class Cnn(nn.Module):
    def __init__(self, classes: int = 10, batch_norm: bool = False):
        super().__init__()
        # With batch_norm, a BatchNorm2d after each convolution (which then has no bias), as
        # Fedcore's {"type": "cnn", "batch_norm": true}.
        def stage(inputs, outputs):
            if batch_norm:
                return [nn.Conv2d(inputs, outputs, 5, padding=2, bias=False),
                        nn.BatchNorm2d(outputs), nn.ReLU(), nn.MaxPool2d(2)]
            return [nn.Conv2d(inputs, outputs, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2)]
        self.features = nn.Sequential(*stage(1, 32), *stage(32, 64))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU(), nn.Linear(512, classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def to_nchw(images: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))


def shard(index: int, sites: int, partition: str, seed: int, train_limit: int = 0,
          test_limit: int = 0):
    """Site `index`'s (train, test) tensors, as fedcore-sim splits the data."""
    train_x, train_y, test_x, test_y = fedcore.datasets.fashion_mnist()
    if train_limit:
        train_x, train_y = train_x[:train_limit], train_y[:train_limit]
    if test_limit:
        test_x, test_y = test_x[:test_limit], test_y[:test_limit]
    mine = fedcore.datasets.partition(train_y, partition, sites, seed, num_classes=10)[index]
    tests = fedcore.datasets.partition(test_y, "iid", sites, seed, num_classes=10)[index]
    return ((to_nchw(train_x[mine]), torch.from_numpy(train_y[mine]).long()),
            (to_nchw(test_x[tests]), torch.from_numpy(test_y[tests]).long()))


def evaluate_model(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(x), 1000):
            logits = model(x[start:start + 1000])
            loss += nn.functional.cross_entropy(logits, y[start:start + 1000], reduction="sum").item()
            correct += (logits.argmax(1) == y[start:start + 1000]).sum().item()
    return loss / len(x), correct / len(x)


class CnnSite(fedcore.Client):
    def __init__(self, train, test, batch_norm: bool = False):
        self.train, self.test = train, test
        self.model = Cnn(batch_norm=batch_norm)

    def properties(self):
        return {"num_examples": len(self.train[1]), "num_test_examples": len(self.test[1]),
                "input_shape": [28, 28, 1], "num_classes": 10,
                "layout": fedtorch.layout_of(self.model)}

    def fit(self, parameters, config):
        fedtorch.set_parameters(self.model, parameters)
        optimizer_config = config["optimizer"]
        optimizer = torch.optim.SGD(self.model.parameters(), lr=optimizer_config.get("lr", 0.05),
                                    momentum=optimizer_config.get("momentum", 0.0))
        x, y = self.train
        generator = torch.Generator().manual_seed(int(config["seed"]))
        self.model.train()
        started, seen, loss_sum, correct = time.perf_counter(), 0, 0.0, 0
        for _ in range(config["epochs"]):
            order = torch.randperm(len(y), generator=generator)
            for start in range(0, len(y), config["batch_size"]):
                batch = order[start:start + config["batch_size"]]
                optimizer.zero_grad()
                logits = self.model(x[batch])
                loss = nn.functional.cross_entropy(logits, y[batch])
                loss.backward()
                optimizer.step()
                seen += len(batch)
                loss_sum += loss.item() * len(batch)
                correct += (logits.argmax(1) == y[batch]).sum().item()
        print(f"round {config['round']}: {seen} examples in {time.perf_counter() - started:.1f} s",
              flush=True)
        return (fedtorch.get_parameters(self.model), len(y),
                {"loss": loss_sum / seen, "accuracy": correct / seen})

    def evaluate(self, parameters, config):
        fedtorch.set_parameters(self.model, parameters)
        loss, accuracy = evaluate_model(self.model, *self.test)
        return loss, len(self.test[1]), {"accuracy": accuracy}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True, help="the daemon's client config (no 'data')")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--sites", type=int, default=3)
    parser.add_argument("--partition", default="dirichlet:0.5")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--train-limit", type=int, default=0)
    parser.add_argument("--test-limit", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-norm", action="store_true",
                        help="BatchNorm after each convolution (for FedBN runs)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    train, test = shard(args.index, args.sites, args.partition, args.seed, args.train_limit,
                        args.test_limit)
    print(f"site {args.index}: {len(train[1])} training, {len(test[1])} test examples", flush=True)
    rounds = fedcore.run_client(CnnSite(train, test, args.batch_norm), config=args.config)
    print(f"trained {rounds} round(s)")


if __name__ == "__main__":
    main()
