#!/usr/bin/python3
"""A calibrated model of MobileNetV2 data-parallel and hybrid training on N separate nodes,
checked against throttled-link runs on this machine (bench/mobilenet_links.sh).

Usage: mobilenet_model.py RUN_DIR [PIPELINE_REPORT]
RUN_DIR holds the calibration reports written by bench/mobilenet_links.sh:
  calib-b{8,16,32,64}.json one worker, one thread: seconds per step at local batch b
  ddp2-shm.json            2-worker DDP through shared memory (no link): the compute base
  ddp2-<rate>.json         2-worker DDP over loopback limited to <rate> (tc tbf)
PIPELINE_REPORT (optional): a 2-stage pipeline run's report (bench/mobilenet_scaling.sh's
pipe2.json): per-stage compute per micro-batch and boundary activations

The model (no overlap of communication with compute assumed):
  compute(b)                                 per step, one core: calib-b*, linear between the
                                             measured batches (per-sample cost falls with
                                             smaller batches here: cache), never extrapolated
  ring(N, P, R) = 2 (N-1)/N P / R + 2 (N-1) alpha
                                             ring allreduce of P bytes, each node's link of
                                             R bytes/s in each direction, alpha per message
  DDP on N nodes, global batch G:   T = compute(G/N) + ring(N, P, R)
  hybrid D x S (1F1B, M micro-batches): T = (M + S - 1) max(t_stage, 2 act / R) + ring(D, P_s, R)
                                             t_stage: the slowest stage's measured compute
                                             per micro-batch; act: bytes of one micro-batch's
                                             activations at the stage boundary (sent while
                                             the other stage computes: the larger counts)
On this machine every rank shares one loopback device: all bytes of all ranks, in both
directions, pass one token bucket of rate R whose burst (2 MB, bench/link_limited.sh)
refills while the ranks compute, so the check against the throttled runs uses
  T_lo(R) = T_shm + max(0, N 2 (N-1)/N P - burst) / R   (T_shm: the job through shared memory)
"""
import json
import os
import sys

PARAMS = 700_490          # MobileNetV2 width 0.5, 10 classes
P = PARAMS * 4            # bytes per allreduce (f32 gradients)
ALPHA = 50e-6             # seconds per message on a switched LAN (assumption, stated)
GLOBAL_BATCH = 64
BURST = 2 * 1024 * 1024   # tc tbf burst of bench/link_limited.sh
RATES = {"100mbit": 100e6 / 8, "300mbit": 300e6 / 8, "1gbit": 1e9 / 8, "10gbit": 10e9 / 8}


def load(run_dir, name):
    path = os.path.join(run_dir, name + ".json")
    return json.load(open(path)) if os.path.exists(path) else None


def compute(points, b):
    """Seconds per step at local batch b: linear between measured batches; below the
    smallest, that batch's per-sample cost; above the largest, the largest's."""
    points = sorted(points)
    if b <= points[0][0]:
        return points[0][1] * b / points[0][0]
    for (b0, t0), (b1, t1) in zip(points, points[1:]):
        if b <= b1:
            return t0 + (t1 - t0) * (b - b0) / (b1 - b0)
    return points[-1][1] * b / points[-1][0]


def ring(n, nbytes, rate):
    return 0.0 if n == 1 else 2 * (n - 1) / n * nbytes / rate + 2 * (n - 1) * ALPHA


def main():
    run_dir = sys.argv[1]
    calib = [(b, load(run_dir, f"calib-b{b}")) for b in (8, 16, 32, 64)]
    points = [(b, r["seconds_per_step"]) for b, r in calib if r]
    if len(points) < 2:
        sys.exit("need calib-b8/16/32/64.json from bench/mobilenet_links.sh")
    print("compute per step on one core: " +
          ", ".join(f"batch {b}: {t * 1e3:.0f} ms ({b / t:.0f} samples/s)" for b, t in points) + "\n")

    shm = load(run_dir, "ddp2-shm")
    print("## Check: 2-worker DDP on this machine, loopback limited by tc (all ranks' bytes share "
          "one token bucket)\n")
    print("| link | predicted s/step | measured s/step | error |")
    print("|---|---|---|---|")
    if shm:
        base = shm["seconds_per_step"]
        print(f"| shared memory (no link) | (base) | {base:.3f} | |")
        for name, rate in RATES.items():
            r = load(run_dir, f"ddp2-{name}")
            if not r:
                continue
            predicted = base + max(0.0, 2 * 2 * (2 - 1) / 2 * P - BURST) / rate
            measured = r["seconds_per_step"]
            print(f"| {name} | {predicted:.3f} | {measured:.3f} | "
                  f"{(measured - predicted) / predicted:+.0%} |")
    pipe = json.load(open(sys.argv[2])) if len(sys.argv) > 2 else None
    throttled_pipe = load(run_dir, "pipe2-300mbit")
    if pipe and throttled_pipe:
        m = pipe["micro_batches"]
        act_values = max(x.get("output_values", 0) for x in pipe["ranks"] if x["stage"] == 0)
        per_step = 2 * m * act_values * (pipe["local_batch"] // m) * 4  # activations + gradients
        base = pipe["wall_seconds"] / pipe["steps"]
        link = max(0.0, per_step - BURST) / RATES["300mbit"]
        measured = throttled_pipe["wall_seconds"] / throttled_pipe["steps"]
        print(f"| 2-stage pipeline, shared memory | (base) | {base:.3f} | |")
        # Transfers overlap with the other stage's compute: the step lies between the larger
        # of compute and link time (full overlap, the model used below) and their sum.
        for label, predicted in (("overlapped", max(base, link)), ("serial", base + link)):
            print(f"| 2-stage pipeline, 300mbit ({per_step / 1e6:.1f} MB/step), {label} | "
                  f"{predicted:.3f} | {measured:.3f} | {(measured - predicted) / predicted:+.0%} |")
    print()

    single = compute(points, GLOBAL_BATCH)
    print(f"## Predicted speedup on N separate nodes (one core each, global batch {GLOBAL_BATCH}, "
          f"alpha {ALPHA * 1e6:.0f} us)\n")
    print("| nodes | layout | link | s/step | samples/s | speedup vs 1 node | efficiency |")
    print("|---|---|---|---|---|---|---|")
    stage = None
    if pipe:
        steps = pipe["steps"]
        m = pipe["micro_batches"]
        ranks = [x for x in pipe["ranks"] if x["replica"] == 0]
        stage = max(x["compute_seconds"] for x in ranks) / (steps * m)
        act_values = max(x.get("output_values", 0) for x in ranks if x["stage"] == 0)
        stage_params = PARAMS  # the larger stage's parameters bound its allreduce from above
        mb_full = pipe["local_batch"] // m
    for n in (1, 2, 4, 8):
        for name in ("1gbit", "10gbit"):
            rate = RATES[name]
            t = compute(points, GLOBAL_BATCH / n) + ring(n, P, rate)
            print(f"| {n} | DDP | {name} | {t:.3f} | {GLOBAL_BATCH / t:.0f} | {single / t:.2f}x | "
                  f"{single / t / n:.0%} |")
            if stage and n >= 2 and n % 2 == 0:
                d, s = n // 2, 2
                # The calibration pipeline ran micro-batches of mb_full samples with a global
                # batch of 64 on one replica; with d replicas each holds 64 / d.
                mb = max(1, GLOBAL_BATCH // d // m)
                t_stage = stage * mb / mb_full
                act = act_values * mb * 4
                th = (m + s - 1) * max(t_stage, 2 * act / rate) + ring(d, stage_params * 4, rate)
                print(f"| {n} | {d} x {s} hybrid | {name} | {th:.3f} | {GLOBAL_BATCH / th:.0f} | "
                      f"{single / th:.2f}x | {single / th / n:.0%} |")


if __name__ == "__main__":
    main()
