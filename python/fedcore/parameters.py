"""Parameter layouts and Fedcore's parameter files (docs/formats.md), from Python.

A layout is the list of a model's tensors, in flat-buffer order: [(name, shape), ...].
The run config's external model spec names it, the server fingerprints it, and every
update must match it.
"""

import json
from typing import Dict, Iterable, List, Sequence, Tuple

import numpy as np

from fedcore import _native

Layout = List[Tuple[str, Tuple[int, ...]]]


def _layout_json(layout: Iterable[Tuple[str, Sequence[int]]]) -> str:
    tensors = [{"name": str(name), "shape": [int(d) for d in shape]} for name, shape in layout]
    return json.dumps({"tensors": tensors})


def _layout_from_json(text: str) -> Layout:
    return [(t["name"], tuple(t["shape"])) for t in json.loads(text)["tensors"]]


def layout_fingerprint(layout: Layout) -> str:
    """The layout's 16-hex-digit fingerprint, as the server computes it."""
    return _native.layout_fingerprint(_layout_json(layout))


def model_spec(layout: Layout, input_shape: Sequence[int], num_classes: int,
               initial: str = "", normalization: Iterable[str] = ()) -> Dict:
    """The run config's "model" object for an external model of this layout.

    `normalization` names the tensors of normalisation layers (BatchNorm's weight, bias and
    running statistics): a run with "batch_norm": "local" (FedBN) keeps them at each site.
    """
    marked = set(normalization)
    unknown = marked - {name for name, _ in layout}
    if unknown:
        raise ValueError(f"normalization names tensors the layout lacks: {sorted(unknown)}")
    tensors = json.loads(_layout_json(layout))
    for tensor in tensors["tensors"]:
        if tensor["name"] in marked:
            tensor["normalization"] = True
    spec = {
        "type": "external",
        "input_shape": [int(d) for d in input_shape],
        "num_classes": int(num_classes),
        "layout": tensors,
    }
    if initial:
        spec["initial"] = initial
    return spec


def flatten(layout: Layout, arrays: Sequence[np.ndarray]) -> np.ndarray:
    """One float32 vector of `arrays`, checked against `layout` tensor by tensor."""
    if len(arrays) != len(layout):
        raise ValueError(f"{len(arrays)} arrays for a layout of {len(layout)} tensors")
    for (name, shape), array in zip(layout, arrays):
        if tuple(np.shape(array)) != tuple(shape):
            raise ValueError(f"tensor '{name}': shape {tuple(np.shape(array))}, "
                             f"the layout says {tuple(shape)}")
    return np.concatenate([np.asarray(a, dtype=np.float32).ravel() for a in arrays])


def unflatten(layout: Layout, flat: np.ndarray) -> List[np.ndarray]:
    """Views of `flat`, one per tensor of `layout`, shaped (no copy)."""
    out, offset = [], 0
    for _, shape in layout:
        size = int(np.prod(shape, dtype=np.int64))
        out.append(flat[offset:offset + size].reshape(shape))
        offset += size
    if offset != flat.size:
        raise ValueError(f"{flat.size} values for a layout of {offset}")
    return out


def save_parameters(path: str, layout: Layout, arrays: Sequence[np.ndarray],
                    metadata: Dict = None) -> None:
    """Writes a Fedcore parameter file (atomically): e.g. a run's "initial" model."""
    _native.save_parameters(path, _layout_json(layout), flatten(layout, arrays),
                            json.dumps(metadata or {}))


def load_parameters(path: str) -> Tuple[Layout, List[np.ndarray], Dict]:
    """Reads a Fedcore parameter file (a checkpoint, or the API's model download):
    (layout, arrays, metadata). The file's checksum and layout are verified."""
    layout_text, flat, metadata = _native.load_parameters(path)
    layout = _layout_from_json(layout_text)
    return layout, unflatten(layout, flat), json.loads(metadata)
