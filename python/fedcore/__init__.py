"""Fedcore's Python SDK: bring your own model to a Fedcore federation.

A site's own training code (PyTorch, NumPy, scikit-learn style) joins a federation
through Fedcore's C++ client daemon, which keeps doing TLS, identity, reconnects,
heartbeats, the site policy, the audit log and secure-aggregation masking:

    import fedcore

    class Hospital(fedcore.Client):
        def properties(self):
            return {"num_examples": 5000, "input_shape": [28, 28, 1], "num_classes": 10}
        def fit(self, parameters, config):
            ...                       # train, starting from `parameters`
            return new_parameters, num_examples, {"loss": loss}
        def evaluate(self, parameters, config):
            return loss, num_examples, {"accuracy": accuracy}

    fedcore.run_client(Hospital(), config="hospital-1.json")

`fedcore.Admin` drives the server's REST API from a notebook; `fedcore.torch` maps a
PyTorch model to and from the run's parameter layout. See python/README.md.
"""

from fedcore import datasets, local
from fedcore.admin import Admin, AdminError
from fedcore.client import Client, run_client
from fedcore.parameters import (
    Layout,
    layout_fingerprint,
    load_parameters,
    save_parameters,
)

__version__ = "0.1.0"

__all__ = [
    "Admin",
    "AdminError",
    "Client",
    "Layout",
    "layout_fingerprint",
    "load_parameters",
    "run_client",
    "save_parameters",
]
