"""Models trained by Fedcore's own trainer, for use elsewhere: as a PyTorch module (and
state_dict) and as ONNX.

    module = fedcore.export.torch_module("final.fcp")      # a torch.nn.Module
    fedcore.export.to_onnx("final.fcp", "final.onnx")        # checked with onnx.checker

Works for the built-in families (logreg, mlp, cnn) from a parameter file whose metadata
holds the model spec (every checkpoint and fedcore-train --save file does). The module and
the ONNX graph take inputs as Fedcore does, [batch, *input_shape] (images NHWC, e.g.
[N, 28, 28, 1]), and return logits: one per class, or one for a two-class model
(sigmoid). External models are PyTorch's own already: fedcore.torch.state_dict_from_file.
"""

import json
from typing import Dict, List, Tuple

import numpy as np

from fedcore.parameters import load_parameters


def _spec_and_tensors(path: str) -> Tuple[Dict, Dict[str, np.ndarray]]:
    layout, arrays, metadata = load_parameters(path)
    spec = metadata.get("spec")
    if not isinstance(spec, dict) or spec.get("type") not in ("logreg", "mlp", "cnn"):
        raise ValueError(f"{path}: its metadata names no built-in model spec "
                         f"(logreg, mlp or cnn); got {json.dumps(spec)}")
    return spec, {name: np.array(a) for (name, _), a in zip(layout, arrays)}


def torch_module(path: str):
    """The network of a Fedcore parameter file as a torch.nn.Module (eval mode), with the
    file's parameters. Its outputs equal Fedcore's own (float32 rounding aside)."""
    import torch
    from torch import nn

    spec, tensors = _spec_and_tensors(path)

    def linear(name: str) -> nn.Linear:
        weight = tensors[f"{name}.weight"]  # Fedcore's Dense: {in, out}
        layer = nn.Linear(weight.shape[0], weight.shape[1])
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(weight.T.copy()))
            layer.bias.copy_(torch.from_numpy(tensors[f"{name}.bias"]))
        return layer

    class ToChannelsFirst(nn.Module):  # NHWC (Fedcore) -> NCHW (torch's convolutions)
        def forward(self, x):
            return x.permute(0, 3, 1, 2)

    class ToChannelsLast(nn.Module):   # back, so that Flatten reads H, W, C as Fedcore does
        def forward(self, x):
            return x.permute(0, 2, 3, 1)

    layers: List = []
    if spec["type"] == "logreg":
        layers = [nn.Flatten(), linear("fc")]
    elif spec["type"] == "mlp":
        layers = [nn.Flatten()]
        for i in range(len(spec["hidden"])):
            layers += [linear(f"fc{i + 1}"), nn.ReLU()]
        layers.append(linear(f"fc{len(spec['hidden']) + 1}"))
    else:
        layers = [ToChannelsFirst()]
        for i in range(len(spec["channels"])):
            weight = tensors[f"conv{i + 1}.weight"]  # HWIO
            kernel, _, cin, cout = weight.shape
            conv = nn.Conv2d(cin, cout, kernel, padding=kernel // 2)
            with torch.no_grad():
                conv.weight.copy_(torch.from_numpy(weight.transpose(3, 2, 0, 1).copy()))
                conv.bias.copy_(torch.from_numpy(tensors[f"conv{i + 1}.bias"]))
            layers += [conv, nn.ReLU(), nn.MaxPool2d(2)]
        layers += [ToChannelsLast(), nn.Flatten(), linear("fc1"), nn.ReLU(), linear("fc2")]
    module = nn.Sequential(*layers)
    module.eval()
    module.input_shape = tuple(spec["input_shape"])
    return module


def to_onnx(path: str, out: str, opset: int = 13) -> str:
    """Writes the network of a Fedcore parameter file as an ONNX model (input "input"
    [batch, *input_shape] float32, output "logits"), exported by torch.onnx from
    torch_module(path) and checked with onnx.checker. Needs python3-torch and python3-onnx."""
    import onnx
    import torch

    module = torch_module(path)
    example = torch.zeros((1, *module.input_shape), dtype=torch.float32)
    torch.onnx.export(module, example, out, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=opset)
    onnx.checker.check_model(onnx.load(out), full_check=True)
    return out
