#!/usr/bin/python3
"""Times the same training step as bench_train_step in PyTorch and prints both side by side.

Usage: compare_torch.py FEDCORE_BENCH_JSON
       compare_torch.py --torch-json OUT FEDCORE_BENCH_JSON   (times PyTorch only, into OUT)
       compare_torch.py --summary FEDCORE_1 TORCH_1 [FEDCORE_2 TORCH_2 ...]
The last two are compare_torch.sh's REPEATS mode: runs alternated, then medians.
Run it through compare_torch.sh, which sets LD_LIBRARY_PATH so torch loads Debian's
OpenBLAS instead of the reference BLAS (about 15x slower), and prints which one it mapped.
"""
import json
import statistics
import sys
import time

try:
    import torch
    from torch import nn
except ImportError:
    print("compare_torch: python3-torch is not installed; skipping the PyTorch side "
          "(scripts/setup.sh --bench installs it)")
    sys.exit(0)

# The same order as bench/train_step_bench.cpp's kSpecs; cnn_cifar is the McMahan cnn on
# CIFAR-shaped 32x32x3 inputs.
MODELS = ["logreg", "mlp", "cnn", "cnn_cifar"]
INPUT_SHAPES = {"cnn_cifar": (3, 32, 32)}


def build(name):
    if name == "logreg":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    channels, side, _ = INPUT_SHAPES.get(name, (1, 28, 28))
    return nn.Sequential(
        nn.Conv2d(channels, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * (side // 4) ** 2, 512), nn.ReLU(), nn.Linear(512, 10))


def samples_per_second(name, batch, threads, min_time=1.0):
    torch.manual_seed(1)
    torch.set_num_threads(threads)
    model = build(name)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(batch, *INPUT_SHAPES.get(name, (1, 28, 28)))
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    steps, start = 0, time.perf_counter()
    while True:
        step()
        steps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time and steps >= 10:
            return steps * batch / elapsed


def mapped_blas():
    with open("/proc/self/maps") as maps:
        libs = {line.split()[-1] for line in maps if "blas" in line.lower() and "/" in line}
    return ", ".join(sorted(libs)) or "none mapped yet"


def fedcore_rates(path):
    """{(model, batch, threads): samples/s} from a bench_train_step JSON file."""
    rates = {}
    with open(path) as f:
        for b in json.load(f)["benchmarks"]:
            # train_step/model:2/batch:32/threads:1/min_time:1.000/real_time
            parts = dict(p.split(":") for p in b["name"].split("/")[1:4])
            rates[(MODELS[int(parts["model"])], int(parts["batch"]), int(parts["threads"]))] = b["items_per_second"]
    return rates


def in_order(keys):
    return sorted(keys, key=lambda k: (MODELS.index(k[0]), k[1], k[2]))


def announce_torch():
    torch.zeros(2, 2) @ torch.zeros(2, 2)  # make torch load its BLAS before we look
    print(f"PyTorch {torch.__version__}, mkldnn {torch.backends.mkldnn.is_available()}, BLAS mapped: {mapped_blas()}")


def side_by_side(fedcore_json):
    ours = fedcore_rates(fedcore_json)
    announce_torch()
    print(f"{'model':<10}{'batch':>6}{'threads':>8}{'fedcore samples/s':>19}{'pytorch samples/s':>19}{'ratio':>8}")
    for key in in_order(ours):
        name, batch, threads = key
        torch_rate = samples_per_second(name, batch, threads)
        print(f"{name:<10}{batch:>6}{threads:>8}{ours[key]:>19,.0f}{torch_rate:>19,.0f}{ours[key] / torch_rate:>7.2f}x",
              flush=True)


def torch_only(out_path, fedcore_json):
    rates = {"|".join(map(str, key)): samples_per_second(*key) for key in in_order(fedcore_rates(fedcore_json))}
    with open(out_path, "w") as f:
        json.dump(rates, f)


def summary(paths):
    if len(paths) < 2 or len(paths) % 2:
        sys.exit("compare_torch: --summary takes FEDCORE TORCH pairs")
    announce_torch()
    ours, theirs = {}, {}
    for fedcore_json, torch_json in zip(paths[0::2], paths[1::2]):
        for key, rate in fedcore_rates(fedcore_json).items():
            ours.setdefault(key, []).append(rate)
        with open(torch_json) as f:
            for key, rate in json.load(f).items():
                name, batch, threads = key.split("|")
                theirs.setdefault((name, int(batch), int(threads)), []).append(rate)
    runs = len(paths) // 2
    print(f"{runs} runs of each, alternated; medians, and Fedcore / PyTorch of each run in order")
    print(f"{'model':<10}{'batch':>6}{'threads':>8}{'fedcore samples/s':>19}{'pytorch samples/s':>19}"
          f"{'ratio':>8}  runs >= 1.0x  each run")
    for key in in_order(ours):
        mine, peer = ours[key], theirs.get(key, [])
        if len(mine) != len(peer):
            continue
        ratios = [a / b for a, b in zip(mine, peer)]
        ahead = sum(r >= 1.0 for r in ratios)
        print(f"{key[0]:<10}{key[1]:>6}{key[2]:>8}{statistics.median(mine):>19,.0f}"
              f"{statistics.median(peer):>19,.0f}{statistics.median(mine) / statistics.median(peer):>7.2f}x"
              f"  {ahead:>4} of {len(ratios):<5}  " + ", ".join(f"{r:.2f}" for r in ratios))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--torch-json":
        torch_only(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 2 and sys.argv[1] == "--summary":
        summary(sys.argv[2:])
    elif len(sys.argv) == 2:
        side_by_side(sys.argv[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
