"""A small ONNX interpreter in NumPy for the operators fedcore.export writes (Transpose,
Conv, Relu, MaxPool, Flatten, Gemm), following the ONNX operator specifications. Debian 12's
python3-onnx (1.12) has no reference evaluator and Debian ships no ONNX runtime; this runs
an exported file without PyTorch, from the graph alone."""

import numpy as np
import onnx
from onnx import numpy_helper


def _attributes(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _conv(x, w, b, attrs):
    if attrs.get("group", 1) != 1 or any(s != 1 for s in attrs.get("strides", [1, 1])) or \
            any(d != 1 for d in attrs.get("dilations", [1, 1])):
        raise NotImplementedError("Conv: only group 1, stride 1, dilation 1")
    top, left, bottom, right = attrs.get("pads", [0, 0, 0, 0])
    x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, c, h, wd = x.shape
    out_c, _, kh, kw = w.shape
    oh, ow = h - kh + 1, wd - kw + 1
    # im2col: [n, c*kh*kw, oh*ow]
    cols = np.empty((n, c, kh, kw, oh, ow), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = x[:, :, i:i + oh, j:j + ow]
    y = np.einsum("ok,nkp->nop", w.reshape(out_c, -1), cols.reshape(n, c * kh * kw, oh * ow))
    y = y.reshape(n, out_c, oh, ow)
    return y + b.reshape(1, -1, 1, 1) if b is not None else y


def _maxpool(x, attrs):
    k = attrs["kernel_shape"]
    s = attrs.get("strides", k)
    if any(attrs.get("pads", [0, 0, 0, 0])) or k != s:
        raise NotImplementedError("MaxPool: only unpadded, stride = kernel")
    n, c, h, w = x.shape
    oh, ow = h // k[0], w // k[1]
    x = x[:, :, :oh * k[0], :ow * k[1]].reshape(n, c, oh, k[0], ow, k[1])
    return x.max(axis=(3, 5))


def run(path: str, inputs: np.ndarray) -> np.ndarray:
    model = onnx.load(path)
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    values[model.graph.input[0].name] = inputs
    for node in model.graph.node:
        a = _attributes(node)
        x = [values[name] if name else None for name in node.input]
        if node.op_type == "Transpose":
            y = np.transpose(x[0], a["perm"])
        elif node.op_type == "Conv":
            y = _conv(x[0], x[1], x[2] if len(x) > 2 else None, a)
        elif node.op_type == "Relu":
            y = np.maximum(x[0], 0)
        elif node.op_type == "MaxPool":
            y = _maxpool(x[0], a)
        elif node.op_type == "Flatten":
            axis = a.get("axis", 1)
            y = x[0].reshape(int(np.prod(x[0].shape[:axis])), -1)
        elif node.op_type == "Gemm":
            left = x[0].T if a.get("transA", 0) else x[0]
            right = x[1].T if a.get("transB", 0) else x[1]
            y = a.get("alpha", 1.0) * left @ right
            if len(x) > 2 and x[2] is not None:
                y = y + a.get("beta", 1.0) * x[2]
        else:
            raise NotImplementedError(f"operator {node.op_type}")
        values[node.output[0]] = y.astype(np.float32)
    return values[model.graph.output[0].name]
