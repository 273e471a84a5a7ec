"""A site with scikit-learn-style NumPy logistic regression on its share of the
breast-cancer table: the smaller example of python/README.md, and the sites of the SDK's
tests (--raise-in-round, --hang-in-round make it misbehave on purpose)."""

import argparse
import os
import time

import numpy as np

import fedcore

LAYOUT = [("weight", (1, 30)), ("bias", (1,))]


def load_share(path: str, index: int, sites: int, seed: int = 7):
    table = np.loadtxt(path, delimiter=",", skiprows=1)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(table))
    share = table[order[index::sites]]
    x, y = share[:, :-1], share[:, -1]
    x = (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-9)  # each site scales its own data
    cut = int(0.8 * len(x))
    return (x[:cut], y[:cut]), (x[cut:], y[cut:])


def loss_and_accuracy(w, b, x, y):
    p = 1 / (1 + np.exp(-(x @ w.T + b).ravel()))
    loss = -np.mean(y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12))
    return float(loss), float(np.mean((p > 0.5) == y))


class LogisticSite(fedcore.Client):
    def __init__(self, train, test, raise_in_round=0, hang_in_round=0, hang_flag="",
                 busy_seconds=0.0):
        self.train, self.test, self.busy_seconds = train, test, busy_seconds
        self.raise_in_round, self.hang_in_round, self.hang_flag = (
            raise_in_round, hang_in_round, hang_flag)

    def properties(self):
        return {"num_examples": len(self.train[0]), "num_test_examples": len(self.test[0]),
                "input_shape": [30], "num_classes": 2, "layout": LAYOUT}

    def fit(self, parameters, config):
        if config["round"] == self.raise_in_round:
            raise ValueError(f"boom in round {config['round']}")
        if config["round"] == self.hang_in_round:
            with open(self.hang_flag, "w") as f:
                f.write("training")
            time.sleep(3600)  # killed by the test
        deadline = time.monotonic() + self.busy_seconds
        spins = 0
        while time.monotonic() < deadline:  # pure Python, holding the GIL as it runs
            spins += 1
        w, b = np.array(parameters[0]), np.array(parameters[1])
        x, y = self.train
        lr = config.get("lr", 0.1)
        rng = np.random.default_rng(config["seed"])
        for _ in range(config["epochs"]):
            order = rng.permutation(len(x))
            for start in range(0, len(x), config["batch_size"]):
                batch = order[start:start + config["batch_size"]]
                p = 1 / (1 + np.exp(-(x[batch] @ w.T + b).ravel()))
                error = p - y[batch]
                w -= lr * (error @ x[batch])[None, :] / len(batch)
                b -= lr * np.array([error.mean()])
        loss, accuracy = loss_and_accuracy(w, b, x, y)
        return [w, b], len(x), {"loss": loss, "accuracy": accuracy}

    def evaluate(self, parameters, config):
        loss, accuracy = loss_and_accuracy(parameters[0], parameters[1], *self.test)
        return loss, len(self.test[0]), {"accuracy": accuracy}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--data", default=os.path.join(
        os.environ.get("FEDCORE_SOURCE_DIR", "."), "data", "breast_cancer_wisconsin.csv"))
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--sites", type=int, default=3)
    parser.add_argument("--raise-in-round", type=int, default=0)
    parser.add_argument("--hang-in-round", type=int, default=0)
    parser.add_argument("--hang-flag", default="")
    parser.add_argument("--busy-seconds", type=float, default=0.0)
    args = parser.parse_args()
    train, test = load_share(args.data, args.index, args.sites)
    site = LogisticSite(train, test, args.raise_in_round, args.hang_in_round, args.hang_flag,
                        args.busy_seconds)
    rounds = fedcore.run_client(site, config=args.config)
    print(f"trained {rounds} round(s)")


if __name__ == "__main__":
    main()
