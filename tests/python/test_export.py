"""Fedcore's own models for use elsewhere (fedcore.export): a checkpoint trained by
fedcore-train becomes a PyTorch module and an ONNX file (checked with onnx.checker, run by
the NumPy interpreter onnx_numpy.py) that score exactly the test accuracy Fedcore measured."""

import os
import re
import subprocess
import tempfile
import unittest

import numpy as np
import torch

import fedcore
import fedcore.export
import onnx_numpy
from rig import BUILD_DIR

TRAIN = os.path.join(BUILD_DIR, "tools", "train", "fedcore-train")


def train(spec: str, out: str, *args: str) -> float:
    """Trains with fedcore-train, saves to `out`; Fedcore's own test accuracy (percent)."""
    run = subprocess.run([TRAIN, "--model", spec, "--save", out, "--quiet", "--threads", "1",
                          *args], capture_output=True, text=True, timeout=300, check=True)
    return float(re.findall(r"test accuracy ([0-9.]+)%", run.stdout)[-1])


class ExportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="fedcore-export-")
        _, _, self.x, self.y = fedcore.datasets.fashion_mnist()

    def tearDown(self):
        self.tmp.cleanup()

    def check(self, spec: str, name: str):
        path = os.path.join(self.tmp.name, f"{name}.fcp")
        fedcore_accuracy = train(spec, path, "--train-limit", "3000")
        module = fedcore.export.torch_module(path)
        with torch.no_grad():
            torch_logits = module(torch.from_numpy(self.x)).numpy()
        torch_accuracy = 100 * np.mean(torch_logits.argmax(1) == self.y)
        self.assertAlmostEqual(torch_accuracy, fedcore_accuracy, delta=0.011)
        onnx_path = fedcore.export.to_onnx(path, os.path.join(self.tmp.name, f"{name}.onnx"))
        onnx_logits = np.concatenate([onnx_numpy.run(onnx_path, self.x[i:i + 2000])
                                      for i in range(0, len(self.x), 2000)])
        onnx_accuracy = 100 * np.mean(onnx_logits.argmax(1) == self.y)
        self.assertAlmostEqual(onnx_accuracy, fedcore_accuracy, delta=0.011)
        np.testing.assert_allclose(onnx_logits, torch_logits, rtol=1e-3, atol=1e-3)
        return fedcore_accuracy

    def test_a_cnn_exports_with_fedcores_accuracy(self):
        self.assertGreater(self.check('{"type":"cnn","channels":[8,16],"dense":64}', "cnn"), 30)

    def test_an_mlp_and_a_logreg_export_with_fedcores_accuracy(self):
        self.assertGreater(self.check('{"type":"mlp","hidden":[64,32]}', "mlp"), 50)
        self.assertGreater(self.check('{"type":"logreg"}', "logreg"), 50)

    def test_an_external_model_is_not_fedcores_to_export(self):
        path = os.path.join(self.tmp.name, "external.fcp")
        fedcore.save_parameters(path, [("w", (2, 3))], [np.zeros((2, 3), np.float32)])
        with self.assertRaisesRegex(ValueError, "no built-in model spec"):
            fedcore.export.torch_module(path)


if __name__ == "__main__":
    unittest.main()
