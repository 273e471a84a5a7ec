"""Layouts and parameter files from Python: the same fingerprints and files as the C++."""

import os
import tempfile
import unittest

import numpy as np

import fedcore
from fedcore.parameters import flatten, model_spec, unflatten

LAYOUT = [("conv.weight", (4, 1, 3, 3)), ("conv.bias", (4,)), ("fc.weight", (2, 16))]


class ParametersTest(unittest.TestCase):
    def test_save_then_load_gives_back_the_same_tensors(self):
        rng = np.random.default_rng(1)
        arrays = [rng.standard_normal(shape).astype(np.float32) for _, shape in LAYOUT]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "init.fcp")
            fedcore.save_parameters(path, LAYOUT, arrays, {"from": "test"})
            layout, loaded, metadata = fedcore.load_parameters(path)
            self.assertEqual(layout, LAYOUT)
            self.assertEqual(metadata, {"from": "test"})
            for a, b in zip(arrays, loaded):
                np.testing.assert_array_equal(a, b)
            # A flipped payload byte is caught by the file's checksum.
            with open(path, "r+b") as f:
                f.seek(-12, os.SEEK_END)
                byte = f.read(1)
                f.seek(-12, os.SEEK_END)
                f.write(bytes([byte[0] ^ 1]))
            with self.assertRaises(OSError):
                fedcore.load_parameters(path)

    def test_shapes_are_checked_tensor_by_tensor(self):
        arrays = [np.zeros(shape, np.float32) for _, shape in LAYOUT]
        arrays[1] = np.zeros((5,), np.float32)
        with self.assertRaisesRegex(ValueError, "tensor 'conv.bias': shape \\(5,\\)"):
            flatten(LAYOUT, arrays)

    def test_unflatten_views_without_copying(self):
        flat = np.arange(36 + 4 + 32, dtype=np.float32)
        views = unflatten(LAYOUT, flat)
        self.assertTrue(all(np.shares_memory(v, flat) for v in views))
        self.assertEqual(views[2].shape, (2, 16))
        self.assertEqual(views[1][0], 36.0)

    def test_fingerprint_depends_on_names_shapes_and_order(self):
        a = fedcore.layout_fingerprint(LAYOUT)
        self.assertRegex(a, "^[0-9a-f]{16}$")
        self.assertEqual(a, fedcore.layout_fingerprint(list(LAYOUT)))
        self.assertNotEqual(a, fedcore.layout_fingerprint(LAYOUT[::-1]))
        self.assertNotEqual(a, fedcore.layout_fingerprint([("x", (4, 1, 3, 3))] + LAYOUT[1:]))
        spec = model_spec(LAYOUT, [4, 4, 1], 2)
        self.assertEqual(spec["type"], "external")
        self.assertEqual(spec["layout"]["tensors"][0], {"name": "conv.weight", "shape": [4, 1, 3, 3]})


if __name__ == "__main__":
    unittest.main()
