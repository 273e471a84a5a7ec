#!/usr/bin/python3
"""Tables and curves of the MobileNetV2 scaling runs (bench/mobilenet_scaling.sh).

Usage: mobilenet_report.py RUN_DIR [TARGET_ACCURACY] [SVG_OUT]
Prints markdown: the scalability table (samples/s, speedup and efficiency against one
worker on one thread, time to the target accuracy, final accuracy, CPU and peak RSS per
worker), accuracy per epoch, and the pipeline stages' time balance; writes an SVG of
test accuracy against epoch and against training time.
"""
import json
import os
import sys

RUNS = [  # name, label, processes x threads
    ("single1", "fedcore, 1 worker", "1 x 1"),
    ("single2", "fedcore, 1 worker", "1 x 2"),
    ("ddp2", "fedcore, DDP", "2 x 1"),
    ("pipe2", "fedcore, 2-stage pipeline", "2 x 1"),
    ("hybrid4", "fedcore, 2 x 2 hybrid", "4 x 1 (on 2 cores)"),
    ("torch1", "PyTorch, 1 process", "1 x 2"),
    ("torchddp2", "PyTorch, DDP (gloo)", "2 x 1"),
]
CORES = {"single1": 1, "single2": 2, "ddp2": 2, "pipe2": 2, "hybrid4": 2, "torch1": 2,
         "torchddp2": 2}
COLORS = ["#1f77b4", "#aec7e8", "#2ca02c", "#ff7f0e", "#d62728", "#7f7f7f", "#bcbd22"]


def max_rss_mb(path):
    """Peak RSS of the largest process, from /usr/bin/time -v."""
    try:
        for line in open(path):
            if "Maximum resident set size" in line:
                return int(line.split(":")[1]) / 1024
    except OSError:
        pass
    return None


def load(run_dir):
    runs = {}
    for name, label, shape in RUNS:
        path = os.path.join(run_dir, name + ".json")
        if os.path.exists(path):
            r = json.load(open(path))
            r["label"], r["shape"] = label, shape
            r["time_rss_mb"] = max_rss_mb(os.path.join(run_dir, name + ".time"))
            runs[name] = r
    return runs


def time_to(curve, target):
    for p in curve:
        if p["test_accuracy"] >= target:
            return p["train_seconds"], p["epoch"]
    return None, None


def per_worker(r, key):
    ranks = r.get("ranks") or []
    values = [x[key] for x in ranks if key in x]
    if not values:
        return "–"
    if key == "cpu_seconds" and r.get("mode") == "pipeline":
        # The pipeline's per-rank CPU counts the whole process (data loading included).
        pass
    return " / ".join(f"{v:.0f}" for v in values)


def table(runs, target):
    base = runs.get("single1", {}).get("samples_per_second")
    out = [f"| run | processes x threads | samples/s | speedup vs 1 x 1 | efficiency per core | "
           f"time to {target:.0%} (epoch) | accuracy after the last epoch | CPU s per worker | "
           f"peak RSS MB per worker |",
           "|---|---|---|---|---|---|---|---|---|"]
    for name, _, _ in RUNS:
        if name not in runs:
            continue
        r = runs[name]
        rate = r["samples_per_second"]
        speedup = rate / base if base else None
        eff = speedup / CORES[name] if speedup else None
        t, e = time_to(r["curve"], target)
        final = r["curve"][-1]["test_accuracy"] if r["curve"] else r.get("test_accuracy", -1)
        rss = per_worker(r, "peak_rss_mb")
        if rss == "–" and r["time_rss_mb"]:
            rss = f"{r['time_rss_mb']:.0f} (largest process)"
        out.append(f"| {r['label']} | {r['shape']} | {rate:.0f} | "
                   f"{speedup:.2f}x | {eff:.0%} | " if speedup else f"| {r['label']} | {r['shape']} | {rate:.0f} | – | – | ")
        out[-1] += (f"{t:.0f} s ({e}) | " if t else "not reached | ")
        out[-1] += f"{final:.2%} | {per_worker(r, 'cpu_seconds')} | {rss} |"
    return "\n".join(out)


def epochs_table(runs):
    names = [n for n, _, _ in RUNS if n in runs]
    epochs = max(len(runs[n]["curve"]) for n in names)
    out = ["| epoch | " + " | ".join(f"{runs[n]['label']} {runs[n]['shape']}" for n in names) + " |",
           "|---" * (len(names) + 1) + "|"]
    for e in range(epochs):
        cells = []
        for n in names:
            c = runs[n]["curve"]
            cells.append(f"{c[e]['test_accuracy']:.2%}" if e < len(c) else "")
        out.append(f"| {e + 1} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def balance_table(runs):
    out = ["| run | rank | stage | replica | layers | compute s | communication s | wall s |",
           "|---|---|---|---|---|---|---|---|"]
    for name in ("pipe2", "hybrid4"):
        if name not in runs:
            continue
        for x in runs[name]["ranks"]:
            out.append(f"| {runs[name]['shape']} | {x['rank']} | {x['stage']} | {x['replica']} | "
                       f"{int(x['layers'][0])}..{int(x['layers'][1]) - 1} | "
                       f"{x['compute_seconds']:.1f} | {x['comm_seconds']:.1f} | {x['wall_seconds']:.1f} |")
    return "\n".join(out)


def svg(runs, path):
    w, h, pad = 900, 340, 50
    names = [n for n, _, _ in RUNS if n in runs]
    max_epoch = max(len(runs[n]["curve"]) for n in names)
    max_time = max(runs[n]["curve"][-1]["train_seconds"] for n in names)
    lo = min(min(p["test_accuracy"] for p in runs[n]["curve"]) for n in names)
    lo = max(0.0, min(lo, 0.8))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'font-family="sans-serif" font-size="11">',
             f'<rect width="{w}" height="{h}" fill="white"/>']
    panel = (w - 3 * pad) / 2
    for k, (title, key, xmax) in enumerate([("test accuracy per epoch", "epoch", max_epoch),
                                            ("test accuracy against training time (s)",
                                             "train_seconds", max_time)]):
        x0 = pad + k * (panel + pad)
        parts.append(f'<text x="{x0}" y="20">{title}</text>')
        parts.append(f'<rect x="{x0}" y="30" width="{panel}" height="{h - 90}" fill="none" stroke="#999"/>')
        for frac in (0, 0.5, 1):
            acc = lo + frac * (1 - lo)
            y = 30 + (h - 90) * (1 - frac)
            parts.append(f'<text x="{x0 - 40}" y="{y + 4}">{acc:.2f}</text>')
        parts.append(f'<text x="{x0 + panel - 30}" y="{h - 45}">{xmax:.0f}</text>')
        for i, n in enumerate(names):
            pts = " ".join(
                f"{x0 + panel * p[key] / xmax:.1f},{30 + (h - 90) * (1 - (p['test_accuracy'] - lo) / (1 - lo)):.1f}"
                for p in runs[n]["curve"])
            parts.append(f'<polyline points="{pts}" fill="none" stroke="{COLORS[i % len(COLORS)]}" stroke-width="2"/>')
    for i, n in enumerate(names):
        x = 40 + i * 118
        parts.append(f'<rect x="{x}" y="{h - 30}" width="10" height="10" fill="{COLORS[i % len(COLORS)]}"/>')
        parts.append(f'<text x="{x + 14}" y="{h - 21}">{n} ({runs[n]["shape"].split(" (")[0]})</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    run_dir = sys.argv[1]
    target = float(sys.argv[2]) if len(sys.argv) > 2 else 0.85
    runs = load(run_dir)
    if not runs:
        sys.exit(f"no run reports in {run_dir}")
    print(table(runs, target) + "\n")
    print(epochs_table(runs) + "\n")
    print(balance_table(runs))
    if len(sys.argv) > 3:
        svg(runs, sys.argv[3])


if __name__ == "__main__":
    main()
