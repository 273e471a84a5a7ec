#!/usr/bin/env python3
"""What the Python path costs per round: a federation of no-op sites on one server, run
twice in one go — sites running fedcore-client's daemon with a no-op C++ trainer
(bench/noop_site), then the same daemon with a no-op Python fit (fedcore.run_client) —
on an external model of P parameters. Prints each run's median round time (the server's
duration_s, which includes TRAIN frames, training, updates, aggregation and commit) and
the Python path's extra time.

    python3 bench/python_overhead.py [--build build/release] [--params 1000000]
        [--sites 2] [--rounds 20]
"""

import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

NOOP_PYTHON_SITE = '''
import argparse, fedcore
class Noop(fedcore.Client):
    def __init__(self, samples): self.samples = samples
    def properties(self):
        return {"num_examples": self.samples, "input_shape": [1], "num_classes": 2}
    def fit(self, parameters, config):
        return parameters, self.samples, {}
parser = argparse.ArgumentParser()
parser.add_argument("--config"); parser.add_argument("--samples", type=int)
args = parser.parse_args()
fedcore.run_client(Noop(args.samples), config=args.config, log_level="warn")
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    parser.add_argument("--params", type=int, default=1_000_000)
    parser.add_argument("--sites", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each kind, alternating (C++, Python, C++, ...)")
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import fedcore
    from fedcore.parameters import model_spec

    sites = [f"site-{i + 1}" for i in range(args.sites)]
    durations = {"cpp": [], "python": []}
    with tempfile.TemporaryDirectory(prefix="fedcore-pyoverhead-") as tmp:
        script = os.path.join(tmp, "noop_python_site.py")
        with open(script, "w") as f:
            f.write(NOOP_PYTHON_SITE)
        with fedcore.local.Federation(
                tmp, sites, server_binary=os.path.join(args.build, "server", "fedcore-server"),
                pki_tool=os.path.join(ROOT, "certs", "fedcore-pki"),
                python_path=[os.path.join(args.build, "python")]) as fed:
            for kind in ("cpp", "python") * args.repeats:
                for site in sites:
                    if kind == "cpp":
                        fed.start_process(
                            site, [os.path.join(args.build, "bench", "noop_site"),
                                   "--config", fed.client_config(site), "--samples", "100"])
                    else:
                        fed.start_site(site, script, "--samples", "100")
                fed.wait_online(len(sites))
                run = fed.admin.start_run({
                    "name": f"overhead-{kind}",
                    "model": model_spec([("w", (args.params,))], [1], 2),
                    "rounds": args.rounds, "clients_per_round": len(sites),
                    "min_clients": len(sites), "federated_evaluation": False,
                    "round_timeout_s": 60, "wait_for_clients_s": 30})
                ended = fed.admin.wait(run["id"], poll_seconds=0.2, timeout=600)
                if ended["state"] != "finished":
                    sys.exit(f"{kind} run ended {ended['state']}: {ended.get('reason')}")
                rounds = [r["duration_s"] for r in fed.admin.rounds(run["id"])][1:]
                durations[kind] += rounds
                print(f"{kind:6s} sites: median round {1000 * statistics.median(rounds):.1f} ms "
                      f"(min {1000 * min(rounds):.1f}, max {1000 * max(rounds):.1f}, "
                      f"{len(rounds)} rounds after the first)", flush=True)
                fed.stop_sites()
                fed.wait_online(0, exactly=True)
    medians = {kind: statistics.median(d) for kind, d in durations.items()}
    extra = medians["python"] / medians["cpp"] - 1
    print(f"all runs: C++ median {1000 * medians['cpp']:.1f} ms, Python median "
          f"{1000 * medians['python']:.1f} ms")
    print(f"{args.params} parameters, {args.sites} sites: the Python path adds "
          f"{100 * extra:.1f}% per round ({1000 * (medians['python'] - medians['cpp']):.1f} ms)")


if __name__ == "__main__":
    main()
