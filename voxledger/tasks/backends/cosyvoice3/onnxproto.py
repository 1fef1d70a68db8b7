"""Write small ONNX graphs without the ``onnx`` package: the protobuf wire format by hand.

Only what the scaffold's two feature-extractor stand-ins need: a `Model` of one graph with
nodes (int / ints / float attributes), float / int64 initializers, and typed inputs and outputs
with fixed or named dimensions. Fields are written in field-number order, as protobuf's own
serialiser does, so the bytes equal ``onnx``'s ``SerializeToString()`` of the same model (the
test rebuilds the fake tree's committed ``campplus.onnx`` byte for byte). Field numbers are
``onnx/onnx.proto`` (IR version 8, proto2 encoding: repeated scalars unpacked).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

FLOAT, INT32, INT64 = 1, 6, 7  # TensorProto.DataType
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7  # AttributeProto.AttributeType
_NUMPY_TYPES = {np.dtype(np.float32): FLOAT, np.dtype(np.int32): INT32, np.dtype(np.int64): INT64}


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 as two's complement, as protobuf does
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _int(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _bytes(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _str(number: int, value: str) -> bytes:
    return _bytes(number, value.encode("utf-8"))


def _float(number: int, value: float) -> bytes:
    return _varint(number << 3 | 5) + struct.pack("<f", value)


def tensor(name: str, array: np.ndarray) -> bytes:
    """A TensorProto: dims, data type, name, raw little-endian data (``numpy_helper.from_array``'s layout)."""
    array = np.array(array, order="C")  # (ascontiguousarray would make a scalar 1-d)
    if array.dtype not in _NUMPY_TYPES:
        raise ValueError(f"initializer {name}: dtype {array.dtype} is not one of {sorted(map(str, _NUMPY_TYPES))}")
    dims = b"".join(_int(1, d) for d in array.shape)
    return dims + _int(2, _NUMPY_TYPES[array.dtype]) + _str(8, name) + _bytes(9, array.astype(array.dtype.newbyteorder("<")).tobytes())


def value_info(name: str, elem_type: int, shape: tuple[int | str, ...]) -> bytes:
    """A ValueInfoProto of a tensor; a ``str`` dimension is symbolic (``dim_param``)."""
    dims = b"".join(_bytes(1, _int(1, d) if isinstance(d, int) else _str(2, d)) for d in shape)
    tensor_type = _int(1, elem_type) + _bytes(2, dims)
    return _str(1, name) + _bytes(2, _bytes(1, tensor_type))


def _attribute(name: str, value: int | float | list[int]) -> bytes:
    if isinstance(value, bool):
        raise ValueError(f"attribute {name}: booleans are ints in ONNX; pass 0 or 1")
    if isinstance(value, int):
        return _str(1, name) + _int(3, value) + _int(20, _ATTR_INT)
    if isinstance(value, float):
        return _str(1, name) + _float(2, value) + _int(20, _ATTR_FLOAT)
    return _str(1, name) + b"".join(_int(8, v) for v in value) + _int(20, _ATTR_INTS)


@dataclass(frozen=True)
class Node:
    """One NodeProto (default domain)."""

    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: dict[str, int | float | list[int]] = field(default_factory=dict)

    def encode(self) -> bytes:
        out = b"".join(_str(1, i) for i in self.inputs) + b"".join(_str(2, o) for o in self.outputs)
        out += _str(4, self.op_type)
        return out + b"".join(_bytes(5, _attribute(k, v)) for k, v in sorted(self.attributes.items()))


def model(
    graph_name: str,
    nodes: list[Node],
    inputs: list[bytes],
    outputs: list[bytes],
    initializers: list[bytes],
    *,
    producer: str,
    opset: int = 17,
    ir_version: int = 8,
) -> bytes:
    """A serialised ModelProto of one graph (inputs / outputs from `value_info`, initializers from `tensor`)."""
    graph = b"".join(_bytes(1, n.encode()) for n in nodes) + _str(2, graph_name)
    graph += b"".join(_bytes(5, t) for t in initializers)
    graph += b"".join(_bytes(11, v) for v in inputs) + b"".join(_bytes(12, v) for v in outputs)
    opset_id = _str(1, "") + _int(2, opset)
    return _int(1, ir_version) + _str(2, producer) + _bytes(7, graph) + _bytes(8, opset_id)
