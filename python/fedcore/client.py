"""The site side: a Client class to subclass and run_client to join a federation."""

import abc
import json
import os
from typing import Dict, List, Tuple

import numpy as np

from fedcore import _native
from fedcore.parameters import Layout, _layout_json


class Client(abc.ABC):
    """A site's training code, called by Fedcore's client daemon.

    fit and evaluate receive `parameters`: a list of read-only NumPy arrays, one per
    tensor of the run's layout, viewing the received global model without a copy. They
    are valid during the call only: copy (np.array(p)) anything kept for later.
    `config` holds the round's settings: run_id, round, epochs, batch_size, optimizer
    (a dict), lr (when the optimizer has one), proximal_mu and seed.

    An exception raised in fit is reported to the server as this site's failure for the
    round, with its type and message; the daemon keeps serving the next rounds.
    """

    @abc.abstractmethod
    def properties(self) -> Dict:
        """What the site announces when it connects: "num_examples" (training examples,
        >= 1), "input_shape" (one example's shape, e.g. [28, 28, 1]), "num_classes"
        (>= 2), optionally "num_test_examples" and "layout" (the model's [(name, shape)],
        checked against every request: a run with another model is refused, naming the
        first differing tensor)."""

    @abc.abstractmethod
    def fit(self, parameters: List[np.ndarray], config: Dict) -> Tuple[object, int, Dict]:
        """Trains from `parameters`; returns (parameters, num_examples, metrics): the
        new parameters as a list of arrays in the layout's order and shapes (or one flat
        array), the number of examples trained on (the update's weight), and metrics
        ("loss" and "accuracy" are reported to the server)."""

    def evaluate(self, parameters: List[np.ndarray], config: Dict) -> Tuple[float, int, Dict]:
        """Evaluates `parameters` on the site's test data: (loss, num_examples, metrics
        with "accuracy"). The default refuses, as a site without test data does."""
        raise NotImplementedError("this site does not evaluate")


def _checked_properties(client: Client) -> Dict:
    props = client.properties()
    if not isinstance(props, dict):
        raise TypeError("properties() must return a dict")
    unknown = set(props) - {"num_examples", "num_test_examples", "input_shape",
                            "num_classes", "layout"}
    if unknown:
        raise ValueError(f"properties(): unknown key(s) {sorted(unknown)}")
    for key in ("num_examples", "input_shape", "num_classes"):
        if key not in props:
            raise ValueError(f"properties() must give '{key}'")
    examples = props["num_examples"]
    if not isinstance(examples, int) or examples < 1:
        raise ValueError(f"properties(): 'num_examples' must be an int >= 1, got {examples!r}")
    tests = props.get("num_test_examples", 0)
    if not isinstance(tests, int) or tests < 0:
        raise ValueError(f"properties(): 'num_test_examples' must be an int >= 0, got {tests!r}")
    shape = [int(d) for d in props["input_shape"]]
    if not 1 <= len(shape) <= 3 or min(shape) < 1:
        raise ValueError(f"properties(): 'input_shape' must be 1 to 3 positive ints, got {shape}")
    classes = props["num_classes"]
    if not isinstance(classes, int) or classes < 2:
        raise ValueError(f"properties(): 'num_classes' must be an int >= 2, got {classes!r}")
    return props


def run_client(client: Client, config: str, log_level: str = "info") -> int:
    """Runs Fedcore's client daemon with `client` as the site's trainer.

    `config` is the daemon's config file (docs/config.md: server, port, server_name, tls,
    threads, audit_log, policy) without "data": the site's code holds its data.
    Connects over mutual TLS, serves rounds and reconnects with backoff until SIGINT or
    SIGTERM; returns the number of rounds trained. The GIL is released while the daemon
    does I/O, so heartbeats go on while Python trains. `log_level`: the daemon's log
    (stderr): trace, debug, info, warn, error, critical or off.
    """
    if not isinstance(client, Client):
        raise TypeError("run_client needs a fedcore.Client (fit, evaluate, properties)")
    levels = ("trace", "debug", "info", "warn", "error", "critical", "off")
    if log_level not in levels:
        raise ValueError(f"log_level must be one of {', '.join(levels)}, got {log_level!r}")
    if not os.path.isfile(config):
        raise FileNotFoundError(f"client config '{config}' does not exist")
    props = _checked_properties(client)
    layout: Layout = props.get("layout")
    return _native.run_client(
        client, config, props["num_examples"], props.get("num_test_examples", 0),
        [int(d) for d in props["input_shape"]], props["num_classes"],
        _layout_json(layout) if layout is not None else None, log_level)
