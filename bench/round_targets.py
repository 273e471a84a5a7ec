#!/usr/bin/env python3
"""Issue 20's round-time table against its targets, with this machine's floors beside it.

Runs `federation_bench rounds` REPEATS times over the issue's nine cells (100k and 1M
parameters with 15 rounds, 10M with 5; 2, 8 and 32 no-op clients), then prints, per cell:
every run's median round (the microsecond clock: TRAIN sent to the last update folded in),
their median, the target, the TLS floor (every byte of the round encrypted, sent, received
and decrypted once at the TLS channel's measured CPU cost, on 2 cores) and a verdict:

  met                  the median round is at or under the target;
  below the TLS floor  even the cheapest TLS floor measured in these runs is above the
                       target: no code change can meet it on this machine with user-space
                       TLS (kernel TLS or cheaper bytes would be needed);
  not met: CPU-bound   the CPU the server and the clients used per round, spread over 2
                       cores (the busy floor), is above the target in every run: the
                       target needs less CPU per round, not better overlap;
  not met              anything else (the round waits: dependencies, wake-ups).

And the server's CPU per round against the issue's floor (AES-GCM plus kernel TCP for its
own bytes, plus one memory pass) and against its TLS floor, where the issue's target is
<= 1.3x at the large sizes (1M and 10M).

This VM's per-byte costs move by up to 2x between minutes, so each figure is the median
of REPEATS runs, and each run's floors come from byte costs measured in that run.

  [REPEATS=3] bench/round_targets.py [--build build/release] [--repeats N] [--client-threads 1]
                         [--sizes 100000,1000000,10000000] [--strict]

--strict exits 1 when a cell is not met (a check for a machine that should meet them all).
`make bench-rounds` builds the release bench and runs this.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

# (parameters, clients) -> the target for the median round, ms.
TARGETS_MS = {
    (100_000, 2): 1.7, (100_000, 8): 7.0, (100_000, 32): 25.0,
    (1_000_000, 2): 10.0, (1_000_000, 8): 35.0, (1_000_000, 32): 200.0,
    (10_000_000, 2): 150.0, (10_000_000, 8): 500.0, (10_000_000, 32): 2000.0,
}
# The server-CPU target (<= 1.3x its floor) is stated for the large sizes.
CPU_RATIO_TARGET = 1.3
CPU_RATIO_FROM_PARAMS = 1_000_000
ROUNDS_FOR = {100_000: 15, 1_000_000: 15, 10_000_000: 5}


def bench_round_count(params):
    return ROUNDS_FOR.get(params, 15 if params < 10_000_000 else 5)


def parse_run(text):
    """Per (params, clients) cell of one bench run: round on the us clock and the floors."""
    cells = {}
    # The summary table: columns padded with spaces, names that contain single spaces.
    round_column = None
    for line in text.splitlines():
        if line.startswith("params "):
            # (printf pads by bytes, so the two-byte "µ" leaves one space after its column)
            names = re.split(r"\s{2,}", line.strip())
            found = [i for i, name in enumerate(names) if name.startswith("µs clock (ms)")]
            if not found:
                sys.exit("round_targets: the bench's summary table has no 'µs clock (ms)' column")
            round_column = found[0]
            continue
        fields = line.split()
        if round_column is not None and len(fields) > round_column and fields[0].isdigit():
            cells.setdefault((int(fields[0]), int(fields[1])), {})["round"] = float(
                fields[round_column])
    # The phases table (markdown): columns named in its header row.
    header = None
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        columns = [c.strip() for c in line.strip().strip("|").split("|")]
        if columns and columns[0] == "params":
            header = columns
            missing = [n for n in ("TLS floor", "CPU / floor", "CPU / server TLS floor",
                                   "busy floor")
                       if n not in header]
            if missing:
                sys.exit(f"round_targets: the bench's phases table has no column {missing}")
            continue
        if header is None or not columns[0].isdigit():
            continue
        row = dict(zip(header, columns))
        cell = cells.setdefault((int(row["params"]), int(row["clients"])), {})
        for key, name in (("tls_floor", "TLS floor"), ("busy_floor", "busy floor"),
                          ("cpu_per_floor", "CPU / floor"),
                          ("cpu_per_tls_floor", "CPU / server TLS floor"),
                          ("all_in", "round, all in"), ("server_cpu", "server CPU")):
            if name in row:
                cell[key] = float(row[name].replace(",", ""))
    return cells


def nearest_params(params):
    """The issue's size a bench cell belongs to (the bench rounds 100000 to 99,001)."""
    return min((p for p, _ in TARGETS_MS), key=lambda p: abs(p - params))


def run_bench(binary, sizes, client_threads, log):
    groups = {}
    for params in sizes:
        groups.setdefault(bench_round_count(params), []).append(params)
    cells = {}
    for rounds, group in sorted(groups.items(), reverse=True):
        command = [binary, "rounds", *map(str, group), "--clients", "2,8,32", "--rounds",
                   str(rounds), "--client-threads", str(client_threads)]
        print("$ " + " ".join(command), file=log, flush=True)
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        log.write(done.stdout)
        if done.returncode != 0:
            sys.exit(f"round_targets: {' '.join(command)} failed ({done.returncode}):\n"
                     f"{done.stderr[-2000:]}")
        for (params, clients), cell in parse_run(done.stdout).items():
            cells[(nearest_params(params), clients)] = cell
    return cells


def fmt(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:.2f}" if x < 10 else f"{x:.1f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--repeats", type=int, default=int(os.environ.get("REPEATS", "3")))
    parser.add_argument("--client-threads", type=int, default=1)
    parser.add_argument("--sizes", default="100000,1000000,10000000")
    parser.add_argument("--strict", action="store_true")
    parser.add_argument("--log", help="append every bench run's full output here")
    a = parser.parse_args()
    binary = os.path.join(a.build, "bench", "federation_bench")
    if not os.access(binary, os.X_OK):
        sys.exit(f"round_targets: {binary} not found; build the bench target first")
    if a.repeats < 1:
        sys.exit("round_targets: --repeats must be at least 1")
    sizes = [int(s) for s in a.sizes.split(",") if s]
    unknown = [s for s in sizes if s not in {p for p, _ in TARGETS_MS}]
    if unknown:
        sys.exit(f"round_targets: no target for {unknown}; the issue's sizes are "
                 "100000, 1000000 and 10000000")
    log = open(a.log, "a") if a.log else open(os.devnull, "w")
    runs = []
    for repeat in range(1, a.repeats + 1):
        print(f"run {repeat} of {a.repeats} ...", file=sys.stderr, flush=True)
        runs.append(run_bench(binary, sizes, a.client_threads, log))

    print(f"\nmedian round (us clock) of {a.repeats} runs, ms; TLS floor min..max over the runs; "
          f"client threads {a.client_threads}\n")
    print("| params | clients | runs | median | target | TLS floor | busy floor | verdict | "
          "server CPU / floor | server CPU / its TLS floor |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    missed = 0
    for (params, clients), target in sorted(TARGETS_MS.items()):
        if params not in sizes:
            continue
        seen = [r[(params, clients)] for r in runs if (params, clients) in r]
        rounds = [c["round"] for c in seen if "round" in c]
        floors = [c["tls_floor"] for c in seen if "tls_floor" in c]
        if not rounds:
            print(f"| {params:,} | {clients} | - | - | {fmt(target)} | - | - | no result | - | - |")
            missed += 1
            continue
        busy = [c["busy_floor"] for c in seen if "busy_floor" in c]
        median = statistics.median(rounds)
        if median <= target:
            verdict = "met"
        elif floors and min(floors) > target:
            verdict = "below the TLS floor"
        elif busy and min(busy) > target:
            verdict = "not met: CPU-bound"
        else:
            verdict = "not met"
        missed += verdict != "met"
        cpu = [c["cpu_per_floor"] for c in seen if "cpu_per_floor" in c]
        cpu_tls = [c["cpu_per_tls_floor"] for c in seen if "cpu_per_tls_floor" in c]
        cpu_text = f"{statistics.median(cpu):.2f}" if cpu else "-"
        if cpu and params >= CPU_RATIO_FROM_PARAMS:
            cpu_text += " (met)" if statistics.median(cpu) <= CPU_RATIO_TARGET else " (> 1.3)"
        floor_text = f"{fmt(min(floors))}..{fmt(max(floors))}" if floors else "-"
        busy_text = f"{fmt(min(busy))}..{fmt(max(busy))}" if busy else "-"
        cpu_tls_text = f"{statistics.median(cpu_tls):.2f}" if cpu_tls else "-"
        print(f"| {params:,} | {clients} | {', '.join(fmt(r) for r in rounds)} | {fmt(median)} | "
              f"{fmt(target)} | {floor_text} | {busy_text} | {verdict} | {cpu_text} | "
              f"{cpu_tls_text} |")
    return 1 if a.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
