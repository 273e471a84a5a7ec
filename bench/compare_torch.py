#!/usr/bin/python3
"""Times the same training step as bench_train_step in PyTorch and prints both side by side.

Usage: compare_torch.py FEDCORE_BENCH_JSON
Run it through compare_torch.sh, which sets LD_LIBRARY_PATH so torch loads Debian's
OpenBLAS instead of the reference BLAS (about 15x slower), and prints which one it mapped.
"""
import json
import sys
import time

try:
    import torch
    from torch import nn
except ImportError:
    print("compare_torch: python3-torch is not installed; skipping the PyTorch side "
          "(scripts/setup.sh --bench installs it)")
    sys.exit(0)

MODELS = ["logreg", "mlp", "cnn"]


def build(name):
    if name == "logreg":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 10))


def samples_per_second(name, batch, threads, min_time=1.0):
    torch.manual_seed(1)
    torch.set_num_threads(threads)
    model = build(name)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(batch, 1, 28, 28)
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


def main():
    with open(sys.argv[1]) as f:
        ours = {}
        for b in json.load(f)["benchmarks"]:
            # train_step/model:2/batch:32/threads:1/min_time:1.000/real_time
            parts = dict(p.split(":") for p in b["name"].split("/")[1:4])
            ours[(MODELS[int(parts["model"])], int(parts["batch"]), int(parts["threads"]))] = b["items_per_second"]
    torch.zeros(2, 2) @ torch.zeros(2, 2)  # make torch load its BLAS before we look
    print(f"PyTorch {torch.__version__}, mkldnn {torch.backends.mkldnn.is_available()}, BLAS mapped: {mapped_blas()}")
    print(f"{'model':<8}{'batch':>6}{'threads':>8}{'fedcore samples/s':>19}{'pytorch samples/s':>19}{'ratio':>8}")
    for (name, batch, threads), fedcore in sorted(ours.items(), key=lambda kv: (MODELS.index(kv[0][0]), kv[0][1], kv[0][2])):
        torch_rate = samples_per_second(name, batch, threads)
        print(f"{name:<8}{batch:>6}{threads:>8}{fedcore:>19,.0f}{torch_rate:>19,.0f}{fedcore / torch_rate:>7.2f}x",
              flush=True)


if __name__ == "__main__":
    main()
