#!/usr/bin/env python3
"""Issue 18's evaluation tables, made by running fedcore-sim once per cell (stdlib only).

  strategies   Fashion-MNIST accuracy per strategy, same seed and partition, next to FedAvg
  compression  accuracy and bytes up per encoding (none, f16, int8, topk), IID and Dirichlet
  attacks      accuracy after N rounds per aggregator x attack x malicious fraction, with an
               SVG chart (the reference for choosing an aggregator)

    bench/strategy_eval.py strategies --sim build/release/sim/fedcore-sim --out runs/strategies \\
        [--strategies fedavg,scaffold]
    bench/strategy_eval.py compression --sim build/release/sim/fedcore-sim --out runs/compression
    bench/strategy_eval.py attacks --sim build/release/sim/fedcore-sim --out runs/attacks \\
        [--aggregators fedavg,median,...] [--attacks sign_flip,scaled] [--fractions 0,0.2]

Each cell is one fedcore-sim run in its own folder under --out; a cell whose rounds.csv is
already there is read, not run again (delete the folder to rerun it). The markdown table goes
to stdout and to --out/table.md; the chart to --out/attacks.svg.
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import time

# The options each strategy runs with in the strategies table. Server optimizers: the paper's
# ranges (Reddi et al. 2021 tune server_lr over 10^-3..1 with tau 10^-3); robust aggregators:
# the faulty-site counts that 10 sites allow.
STRATEGIES = [
    ("fedavg", {}),
    ("fedavgm", {"server_lr": 1.0, "server_momentum": 0.5}),
    ("fedadam", {"server_lr": 0.01, "tau": 0.001}),
    ("fedyogi", {"server_lr": 0.01, "tau": 0.001}),
    ("fedadagrad", {"server_lr": 0.01, "tau": 0.001}),
    ("median", {}),
    ("trimmed_mean", {"trim_fraction": 0.2}),
    ("krum", {"byzantine": 2}),
    ("multi_krum", {"byzantine": 2}),
    ("bulyan", {"byzantine": 1}),
    ("centered_clipping", {"clipping_radius": 1.0}),
    ("scaffold", {}),
]


def aggregator_options(name, clients, fraction):
    """The robust options for `clients` sites of which `fraction` may be malicious: f is the
    number of attackers the largest tested fraction brings (the aggregator is told the truth
    about the worst case it must survive), capped at what the rule allows for `clients`
    (Krum: n > 2f + 2; Bulyan: n >= 4f + 3), beyond which it runs outside its guarantee."""
    f = max(1, round(fraction * clients))
    krum_f = min(f, (clients - 3) // 2)
    bulyan_f = min(f, (clients - 3) // 4)
    return {
        "fedavg": {},
        "median": {},
        "trimmed_mean": {"trim_fraction": min(0.45, f / clients + 1e-9)},
        "krum": {"byzantine": krum_f},
        "multi_krum": {"byzantine": krum_f},
        "bulyan": {"byzantine": bulyan_f},
        "centered_clipping": {"clipping_radius": 1.0},
    }[name]


def run_cell(args, folder, strategy, options, attack="none", fraction=0.0, clients=None,
             partition=None, compression=None):
    out = os.path.join(args.out, folder)
    rounds_csv = os.path.join(out, "rounds.csv")
    if not os.path.exists(rounds_csv):
        command = [args.sim, "--dataset", "fashion-mnist", "--model", args.model,
                   "--partition", partition or args.partition,
                   "--clients", str(clients or args.clients),
                   "--rounds", str(args.rounds), "--lr", str(args.lr), "--batch", "32",
                   "--seed", str(args.seed), "--strategy", strategy,
                   "--strategy-options", json.dumps(options), "--out", out, "--quiet"]
        if compression is not None and compression[0] != "none":
            command += ["--compression", compression[0], "--topk-fraction", str(compression[1])]
        if attack != "none" and fraction > 0:
            command += ["--attack", attack, "--attack-fraction", str(fraction)]
            if args.attack_scale > 0:
                command += ["--attack-scale", str(args.attack_scale)]
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True)
        seconds = time.monotonic() - started
        if done.returncode != 0:
            sys.stderr.write(f"{folder}: fedcore-sim failed ({done.returncode}):\n{done.stderr[-2000:]}\n")
            return None
        sys.stderr.write(f"{folder}: {seconds:.0f} s\n")
    with open(rounds_csv) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return None
    accuracies = [float(r["accuracy"]) for r in rows]
    return {"final": accuracies[-1], "best": max(accuracies), "rounds": len(rows),
            "bytes_up": sum(int(r["bytes_up"]) for r in rows)}


def strategies(args):
    lines = ["| strategy | options | accuracy after %d rounds | best round |" % args.rounds,
             "|---|---|---:|---:|"]
    chosen = args.strategies.split(",") if args.strategies else None
    for name, options in STRATEGIES:
        if chosen is not None and name not in chosen:
            continue
        cell = run_cell(args, name, name, options)
        text = "failed" if cell is None else f"{100 * cell['final']:.2f}%"
        best = "" if cell is None else f"{100 * cell['best']:.2f}%"
        lines.append(f"| `{name}` | `{json.dumps(options)}` | {text} | {best} |")
    return lines


COMPRESSIONS = [("none", 0.01), ("f16", 0.01), ("int8", 0.01), ("topk", 0.01), ("topk", 0.1)]


def compression(args):
    lines = ["| partition | encoding | accuracy after %d rounds | vs fp32 | bytes up, all rounds | "
             "vs fp32 |" % args.rounds, "|---|---|---:|---:|---:|---:|"]
    for partition in ("iid", args.partition):
        base = None
        for encoding, fraction in COMPRESSIONS:
            name = encoding if encoding != "topk" else f"topk-{fraction:g}"
            cell = run_cell(args, f"{partition.replace(':', '')}-{name}", "fedavg", {},
                            partition=partition, compression=(encoding, fraction))
            if cell is None:
                lines.append(f"| {partition} | {name} | failed | | | |")
                continue
            base = base or cell
            lines.append(f"| {partition} | {name} | {100 * cell['final']:.2f}% | "
                         f"{100 * (cell['final'] - base['final']):+.2f} | "
                         f"{cell['bytes_up'] / 1e6:.2f} MB | "
                         f"{cell['bytes_up'] / base['bytes_up']:.3f}x |")
    return lines


def svg_chart(results, aggregators, attacks, fractions, path):
    """Grouped bars: one group per (attack, fraction), one bar per aggregator."""
    colours = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1"]
    groups = [(a, fr) for a in attacks for fr in fractions]
    bar, gap = 12, 18
    width = 60 + len(groups) * (len(aggregators) * bar + gap) + 160
    height, top, plot = 320, 20, 240
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="10">']
    for tick in range(0, 101, 20):
        y = top + plot * (1 - tick / 100)
        parts.append(f'<line x1="50" x2="{width - 160}" y1="{y}" y2="{y}" stroke="#ddd"/>')
        parts.append(f'<text x="45" y="{y + 3}" text-anchor="end">{tick}%</text>')
    x = 60
    for attack, fraction in groups:
        for i, agg in enumerate(aggregators):
            acc = results.get((agg, attack, fraction))
            if acc is not None:
                h = plot * acc
                parts.append(f'<rect x="{x + i * bar}" y="{top + plot - h:.1f}" width="{bar - 2}" '
                             f'height="{h:.1f}" fill="{colours[i % len(colours)]}">'
                             f'<title>{agg}, {attack}, {fraction:.0%}: {acc:.2%}</title></rect>')
        label = f"{attack} {fraction:.0%}" if fraction > 0 else "no attack"
        centre = x + len(aggregators) * bar / 2
        parts.append(f'<text x="{centre}" y="{top + plot + 14}" text-anchor="middle">{label}</text>')
        x += len(aggregators) * bar + gap
    for i, agg in enumerate(aggregators):
        y = top + 10 + 16 * i
        parts.append(f'<rect x="{width - 150}" y="{y - 9}" width="10" height="10" '
                     f'fill="{colours[i % len(colours)]}"/>')
        parts.append(f'<text x="{width - 135}" y="{y}">{agg}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def attacks(args):
    aggregators = args.aggregators.split(",")
    attack_names = args.attacks.split(",")
    fractions = [float(x) for x in args.fractions.split(",")]
    worst = max(fractions)
    results = {}
    for agg in aggregators:
        options = aggregator_options(agg, args.clients, worst)
        clean = run_cell(args, f"{agg}-clean", agg, options)
        for attack in attack_names:
            for fraction in fractions:
                scale = f"-s{args.attack_scale:g}" if args.attack_scale > 0 else ""
                cell = clean if fraction == 0 else run_cell(
                    args, f"{agg}-{attack}{scale}-{int(round(100 * fraction))}", agg, options,
                    attack, fraction)
                results[(agg, attack, fraction)] = None if cell is None else cell["final"]
    header = "| aggregator | no attack | " + " | ".join(
        f"{a} {fr:.0%}" for a in attack_names for fr in fractions if fr > 0) + " |"
    lines = [header, "|---" * (2 + sum(1 for _ in attack_names for fr in fractions if fr > 0)) + "|"]
    for agg in aggregators:
        clean = results.get((agg, attack_names[0], 0.0))
        cells = ["failed" if clean is None else f"{100 * clean:.2f}%"]
        for attack in attack_names:
            for fraction in fractions:
                if fraction == 0:
                    continue
                acc = results.get((agg, attack, fraction))
                cells.append("failed" if acc is None else f"{100 * acc:.2f}%")
        lines.append(f"| `{agg}` `{json.dumps(aggregator_options(agg, args.clients, worst))}` | "
                     + " | ".join(cells) + " |")
    if 0.0 not in fractions:
        fractions = [0.0] + fractions
    for attack in attack_names:
        for agg in aggregators:
            results.setdefault((agg, attack, 0.0), results.get((agg, attack_names[0], 0.0)))
    svg_chart(results, aggregators, attack_names, fractions, os.path.join(args.out, "attacks.svg"))
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("table", choices=["strategies", "attacks", "compression"])
    parser.add_argument("--sim", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--partition", default="dirichlet:0.5")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--strategies", default="",
                        help="strategies table: only these (comma-separated); default all")
    parser.add_argument("--aggregators",
                        default="fedavg,median,trimmed_mean,multi_krum,centered_clipping")
    parser.add_argument("--attacks", default="sign_flip,scaled")
    parser.add_argument("--fractions", default="0,0.2")
    parser.add_argument("--attack-scale", type=float, default=0,
                        help="fedcore-sim --attack-scale for every attack (0: each one's default)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    lines = {"strategies": strategies, "attacks": attacks, "compression": compression}[args.table](args)
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
