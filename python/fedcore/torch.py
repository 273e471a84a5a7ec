"""PyTorch models in a Fedcore federation: the layout of a model, and its parameters to
and from the lists of arrays that fit/evaluate exchange.

The layout is the model's state_dict entries of floating-point type, in state_dict order
(parameters and float buffers such as BatchNorm's running statistics, which are then
averaged like parameters, or kept at each site with the BatchNorm weights and biases in a
run with "batch_norm": "local" (FedBN); integer buffers such as num_batches_tracked stay
local).
Shapes are PyTorch's ([out, in, kh, kw] for a convolution).
"""

import warnings
from typing import Dict, List, Sequence

import numpy as np
import torch

from fedcore.parameters import Layout, model_spec


def _federated_entries(model: torch.nn.Module):
    return [(name, tensor) for name, tensor in model.state_dict().items()
            if tensor.is_floating_point()]


def layout_of(model: torch.nn.Module) -> Layout:
    """The model's layout: [(state_dict name, shape)] of its floating-point entries."""
    return [(name, tuple(t.shape)) for name, t in _federated_entries(model)]


def normalization_of(model: torch.nn.Module) -> List[str]:
    """The layout's tensors that belong to BatchNorm (and InstanceNorm) layers: their weight,
    bias and running statistics, what FedBN ("batch_norm": "local") keeps at each site."""
    names = set()
    for prefix, module in model.named_modules():
        if isinstance(module, torch.nn.modules.batchnorm._NormBase):
            names.update(f"{prefix}.{name}" if prefix else name
                         for name in module.state_dict().keys())
    return [name for name, _ in _federated_entries(model) if name in names]


def spec_of(model: torch.nn.Module, input_shape: Sequence[int], num_classes: int,
            initial: str = "") -> Dict:
    """The run config's "model" object for this model (type "external"), its normalisation
    layers' tensors marked (normalization_of) so that a run may keep them at the sites."""
    return model_spec(layout_of(model), input_shape, num_classes, initial,
                      normalization_of(model))


def get_parameters(model: torch.nn.Module) -> List[np.ndarray]:
    """The model's parameters as NumPy arrays in layout order (views of CPU tensors: no
    copy; return them from fit as they are)."""
    return [t.detach().cpu().numpy() for _, t in _federated_entries(model)]


def set_parameters(model: torch.nn.Module, parameters: Sequence[np.ndarray]) -> None:
    """Copies `parameters` (as fit receives them) into the model, checking every shape."""
    entries = _federated_entries(model)
    if len(parameters) != len(entries):
        raise ValueError(f"{len(parameters)} arrays for a model of {len(entries)} tensors")
    with torch.no_grad(), warnings.catch_warnings():
        # The received arrays are read-only views of the daemon's buffer; copy_ only reads.
        warnings.simplefilter("ignore", UserWarning)
        for (name, tensor), array in zip(entries, parameters):
            if tuple(array.shape) != tuple(tensor.shape):
                raise ValueError(f"tensor '{name}': received shape {tuple(array.shape)}, "
                                 f"the model has {tuple(tensor.shape)}")
            tensor.copy_(torch.from_numpy(np.asarray(array)))


def state_dict_from_file(path: str) -> Dict[str, torch.Tensor]:
    """A Fedcore parameter file (e.g. the API's model download, format=fcp) as a
    state_dict of float tensors: model.load_state_dict(..., strict=False), or torch.save it."""
    from fedcore.parameters import load_parameters
    layout, arrays, _ = load_parameters(path)
    return {name: torch.from_numpy(np.array(a)) for (name, _), a in zip(layout, arrays)}
