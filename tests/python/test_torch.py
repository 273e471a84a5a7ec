"""PyTorch sites (examples/pytorch/cnn_site.py) against the real server, and the
state_dict helpers of fedcore.torch."""

import os
import sys
import tempfile
import unittest

import numpy as np
import torch

import fedcore
import fedcore.torch as fedtorch
from rig import SOURCE_DIR, Federation

sys.path.insert(0, os.path.join(SOURCE_DIR, "examples", "pytorch"))
from cnn_site import Cnn  # noqa: E402


class TorchHelpersTest(unittest.TestCase):
    def test_parameters_round_trip_through_the_layout(self):
        torch.manual_seed(0)
        a, b = Cnn(), Cnn()
        layout = fedtorch.layout_of(a)
        self.assertEqual(layout[0], ("features.0.weight", (32, 1, 5, 5)))
        self.assertEqual(sum(int(np.prod(s)) for _, s in layout), 1663370)
        params = fedtorch.get_parameters(a)
        self.assertTrue(np.shares_memory(params[0], a.features[0].weight.detach().numpy()))
        read_only = [np.array(p) for p in params]
        for p in read_only:
            p.setflags(write=False)  # as fit receives them
        fedtorch.set_parameters(b, read_only)
        x = torch.rand(3, 1, 28, 28)
        torch.testing.assert_close(a(x), b(x))
        wrong = list(read_only)
        wrong[1] = np.zeros(31, np.float32)
        with self.assertRaisesRegex(ValueError, "tensor 'features.0.bias': received shape"):
            fedtorch.set_parameters(b, wrong)

    def test_batchnorm_statistics_are_federated_and_the_counter_is_not(self):
        model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
        names = [name for name, _ in fedtorch.layout_of(model)]
        self.assertEqual(names, ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                 "1.running_var"])
        # spec_of marks the BatchNorm tensors, which FedBN keeps at the sites.
        self.assertEqual(fedtorch.normalization_of(model), names[2:])
        tensors = fedtorch.spec_of(model, [5, 5, 1], 2)["layout"]["tensors"]
        self.assertEqual([t.get("normalization", False) for t in tensors],
                         [False, False, True, True, True, True])


class TorchSitesTest(unittest.TestCase):
    def federate(self, fed, partition, site_args=(), **config):
        """Two cnn_site.py sites on 600 images each, one 2-round run of `config` (over the
        defaults below); returns the run's rounds once it has finished."""
        script = os.path.join(SOURCE_DIR, "examples", "pytorch", "cnn_site.py")
        for i in range(2):
            fed.start_site(f"site-{i + 1}", script, "--index", str(i), "--sites", "2",
                           "--partition", partition, "--train-limit", "600",
                           "--test-limit", "400", "--threads", "1", *site_args)
        fed.wait_online(2, timeout=120)
        run = fed.admin.start_run({
            "rounds": 2, "clients_per_round": 2, "min_clients": 2, "local_epochs": 1,
            "batch_size": 32, "optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.9},
            "round_timeout_s": 300, "wait_for_clients_s": 60, "seed": 1, **config})
        ended = fed.admin.wait(run["id"], poll_seconds=0.5, timeout=500)
        self.assertEqual(ended["state"], "finished", fed.log("server"))
        rounds = fed.admin.rounds(run["id"])
        self.assertEqual([r["accepted"] for r in rounds], [2, 2])
        return run["id"], rounds

    def test_two_pytorch_sites_train_the_cnn_and_the_result_loads_as_a_state_dict(self):
        with tempfile.TemporaryDirectory(prefix="fedcore-torch-") as tmp:
            fed = Federation(tmp, ["site-1", "site-2"])
            try:
                run_id, rounds = self.federate(
                    fed, "iid", name="torch", model=fedtorch.spec_of(Cnn(), [28, 28, 1], 10))
                # 600 images, 2 rounds: well above chance (10%) already.
                self.assertGreater(rounds[-1]["fed_eval_accuracy"], 0.5)
                path = fed.admin.download_model(run_id, os.path.join(tmp, "final.fcp"))
                state = fedtorch.state_dict_from_file(path)
                model = Cnn()
                model.load_state_dict(state)  # strict: every tensor, right names and shapes
                layout, arrays, _ = fedcore.load_parameters(path)
                np.testing.assert_array_equal(model.classifier[3].bias.detach().numpy(), arrays[-1])
                self.assertNotEqual(float(np.abs(arrays[-1]).sum()), 0.0)  # trained, not zeros
            finally:
                fed.close()

    def test_fedbn_keeps_the_batchnorm_of_pytorch_sites_at_the_sites(self):
        with tempfile.TemporaryDirectory(prefix="fedcore-torch-fedbn-") as tmp:
            fed = Federation(tmp, ["site-1", "site-2"])
            try:
                spec = fedtorch.spec_of(Cnn(batch_norm=True), [28, 28, 1], 10)
                run_id, rounds = self.federate(fed, "dirichlet:0.5", ["--batch-norm"],
                                               name="torch-fedbn", model=spec,
                                               batch_norm="local")
                self.assertGreater(rounds[-1]["fed_eval_accuracy"], 0.3)
                path = fed.admin.download_model(run_id, os.path.join(tmp, "final.fcp"))
                state = fedtorch.state_dict_from_file(path)
                # The BatchNorm tensors are the start's (ones and zeros, model.initialize_
                # external): no site ever sent its own.
                for name in fedtorch.normalization_of(Cnn(batch_norm=True)):
                    start = 1.0 if name.endswith(("weight", "running_var")) else 0.0
                    np.testing.assert_array_equal(state[name].numpy(), start, err_msg=name)
                model = Cnn(batch_norm=True)
                model.load_state_dict(state, strict=False)  # num_batches_tracked is local
            finally:
                fed.close()

if __name__ == "__main__":
    unittest.main()
