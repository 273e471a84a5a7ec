#!/usr/bin/env python3
"""One command: a PyTorch CNN trained by 3 Fedcore sites on Dirichlet(0.5) shards of
Fashion-MNIST, 10 rounds, over mutual TLS on this machine (see README.md).

    python3 examples/pytorch/federate.py            # after `make build` (build/release)

Brings up a throwaway PKI, fedcore-server and one cnn_site.py process per site, starts the
run through the REST API (fedcore.Admin), prints every round's accuracy, then downloads
the final global model, saves it as a PyTorch state_dict and evaluates it on the whole
test set. Everything lands in --out.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    parser.add_argument("--out", default=os.path.join(ROOT, "build", "pytorch-example"))
    parser.add_argument("--sites", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--partition", default="dirichlet:0.5")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--train-limit", type=int, default=0, help="first N training images only")
    parser.add_argument("--test-limit", type=int, default=0, help="first N test images only")
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import torch
    import fedcore
    import fedcore.torch as fedtorch
    from cnn_site import Cnn, evaluate_model, to_nchw

    os.makedirs(args.out, exist_ok=True)
    for name in os.listdir(args.out):  # a fresh federation each time: new PKI, new history
        path = os.path.join(args.out, name)
        if os.path.isdir(path):
            import shutil
            shutil.rmtree(path)
        else:
            os.remove(path)
    sites = [f"site-{i + 1}" for i in range(args.sites)]
    with fedcore.local.Federation(
            args.out, sites, server_binary=os.path.join(args.build, "server", "fedcore-server"),
            pki_tool=os.path.join(ROOT, "certs", "fedcore-pki"),
            python_path=[os.path.join(args.build, "python"), HERE]) as fed:
        for i, site in enumerate(sites):
            fed.start_site(site, os.path.join(HERE, "cnn_site.py"), "--index", str(i),
                           "--sites", str(args.sites), "--partition", args.partition,
                           "--seed", str(args.seed), "--train-limit", str(args.train_limit),
                           "--test-limit", str(args.test_limit))
        fed.wait_online(len(sites), timeout=120)
        config = {
            "name": "pytorch-cnn", "model": fedtorch.spec_of(Cnn(), [28, 28, 1], 10),
            "rounds": args.rounds, "clients_per_round": len(sites), "min_clients": len(sites),
            "local_epochs": 1, "batch_size": 32, "seed": args.seed,
            "optimizer": {"kind": "sgd", "lr": args.lr, "momentum": args.momentum},
            "round_timeout_s": 3600, "evaluation_timeout_s": 600, "wait_for_clients_s": 120,
        }
        started = time.monotonic()
        run = fed.admin.start_run(config)
        print(f"run {run['id']}: {args.rounds} rounds, {len(sites)} PyTorch sites, "
              f"{args.partition} shards of Fashion-MNIST", flush=True)
        for r in fed.admin.follow(run["id"], poll_seconds=1):
            print(f"round {r['round']:3d}  {r['state']:9s}  train loss {r['train_loss']:.4f}  "
                  f"federated accuracy {100 * (r['fed_eval_accuracy'] or 0):.2f}%  "
                  f"({r['duration_s']:.1f} s)", flush=True)
        final = fed.admin.run(run["id"])
        if final["state"] != "finished":
            print(f"run ended {final['state']}: {final.get('reason')}", file=sys.stderr)
            return 1
        model_file = fed.admin.download_model(run["id"], os.path.join(args.out, "final.fcp"))
        state = fedtorch.state_dict_from_file(model_file)
        torch.save(state, os.path.join(args.out, "final_state_dict.pt"))
        model = Cnn()
        model.load_state_dict(state)
        _, _, test_x, test_y = fedcore.datasets.fashion_mnist()
        if args.test_limit:
            test_x, test_y = test_x[:args.test_limit], test_y[:args.test_limit]
        loss, accuracy = evaluate_model(model, to_nchw(test_x), torch.from_numpy(test_y).long())
        print(f"final model: test accuracy {100 * accuracy:.2f}% (loss {loss:.4f}) on "
              f"{len(test_y)} images; {time.monotonic() - started:.0f} s in all; state_dict in "
              f"{os.path.join(args.out, 'final_state_dict.pt')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
