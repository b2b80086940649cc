"""How many bytes of weights an engine's files hold, and how many a decode step reads: the roofline's numerator.

A decode step reads every weight once, except an input embedding table that only a Gather reads (one row per
step); a tied embedding is read whole by the output projection and so counts. Each function returns
(parameters, weight bytes, decode weight bytes) from the files alone, without loading the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def gguf_sizes(path: Path) -> tuple[int, int, int]:
    """A .gguf: every tensor's bytes as stored (quantized blocks included); ``token_embd`` is left out of the
    decode bytes when an ``output.weight`` exists (untied)."""
    try:
        tensors = gguf_tensors(path)
    except ValueError:  # a layout the lean reader doesn't know (a big-endian file): gguf's own reader
        import gguf

        tensors = {t.name: (int(t.n_elements), int(t.n_bytes)) for t in gguf.GGUFReader(str(path)).tensors}
    total = sum(b for _, b in tensors.values())
    params = sum(n for n, _ in tensors.values())
    untied = "output.weight" in tensors and "token_embd.weight" in tensors
    decode = total - (tensors["token_embd.weight"][1] if untied else 0)
    return params, total, decode


# GGUF metadata value types (gguf.GGUFValueType) -> struct format of a scalar; 8 is a string, 9 an array
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_tensors(path: Path) -> dict[str, tuple[int, int]]:
    """{tensor name: (elements, bytes as stored)} from a little-endian GGUF's header, skipping the metadata
    without decoding it. Why not ``gguf.GGUFReader``: it builds a numpy view per metadata item, ~19 s for a
    151,936-token vocabulary on this project's 2-core machine, inside every llama.cpp run's cold start; this reads
    the same header in a fraction of a second (tests/unit/test_cold_start.py checks both agree). ValueError for a file
    that isn't one (or a big-endian one)."""
    import struct

    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    with path.open("rb") as f:

        def read(fmt: str) -> Any:
            size = struct.calcsize("<" + fmt)
            data = f.read(size)
            if len(data) != size:
                raise ValueError(f"{path.name}: the GGUF header ends early")
            return struct.unpack("<" + fmt, data)[0]

        def skip_string() -> None:
            f.seek(read("Q"), 1)

        def skip_value(kind: int) -> None:
            if kind in _GGUF_SCALARS:
                f.seek(struct.calcsize("<" + _GGUF_SCALARS[kind]), 1)
            elif kind == 8:
                skip_string()
            elif kind == 9:
                item, count = read("I"), read("Q")
                if item in _GGUF_SCALARS:
                    f.seek(count * struct.calcsize("<" + _GGUF_SCALARS[item]), 1)
                else:
                    for _ in range(count):
                        skip_value(item)
            else:
                raise ValueError(f"{path.name}: unknown GGUF value type {kind}")

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path.name} is not a GGUF file")
        version = read("I")
        if version not in (2, 3):  # a big-endian file reads as a huge version
            raise ValueError(f"{path.name}: GGUF version {version} is not read here")
        n_tensors, n_kv = read("Q"), read("Q")
        for _ in range(n_kv):
            skip_string()
            skip_value(read("I"))
        out: dict[str, tuple[int, int]] = {}
        for _ in range(n_tensors):
            name = f.read(read("Q")).decode("utf-8")
            dims = [read("Q") for _ in range(read("I"))]
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(read("I"))]
            read("Q")  # the offset of its data
            elements = 1
            for d in dims:
                elements *= d
            out[name] = (elements, elements // block * type_size)
    return out


def onnx_sizes(folder: Path) -> tuple[int, int, int]:
    """An ONNX Runtime GenAI folder: the model's initializers (external data included, by their recorded
    length); an initializer that feeds only Gather nodes as their data is an input embedding."""
    import json

    import onnx

    config = json.loads((folder / "genai_config.json").read_text(encoding="utf-8"))
    model = onnx.load(str(folder / config["model"]["decoder"]["filename"]), load_external_data=False)
    graph = model.graph
    consumers: dict[str, list[tuple[str, int]]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node.op_type, i))
    total = decode = params = 0
    for init in graph.initializer:
        size = _onnx_bytes(init)
        elems = 1
        for d in init.dims:
            elems *= int(d)
        total += size
        params += elems
        uses = consumers.get(init.name, [])
        if uses and all(op == "Gather" and i == 0 for op, i in uses):
            continue  # an embedding table: a step gathers one row
        decode += size
    return params, total, decode


def _onnx_bytes(init) -> int:
    from onnx import helper

    for entry in init.external_data:
        if entry.key == "length":
            return int(entry.value)
    if init.raw_data:
        return len(init.raw_data)
    elems = 1
    for d in init.dims:
        elems *= int(d)
    return elems * helper.tensor_dtype_to_np_dtype(init.data_type).itemsize


def openvino_sizes(folder: Path) -> tuple[int, int, int]:
    """An OpenVINO IR folder: every Constant's bytes; a Constant whose values reach only a Gather's data input
    (through the decompression ops of compressed weights) is an input embedding."""
    import openvino as ov

    model = ov.Core().read_model(str(folder / "openvino_model.xml"))
    passthrough = {"Convert", "Subtract", "Multiply", "Reshape", "Unsqueeze", "Transpose"}
    total = decode = params = 0
    for op in model.get_ops():
        if op.get_type_name() != "Constant":
            continue
        shape = op.get_output_partial_shape(0)
        if not shape.is_static:
            continue
        elems = 1
        for d in shape.to_shape():
            elems *= int(d)
        size = elems * op.get_output_element_type(0).bitwidth // 8
        if elems < 64:  # shapes, axes and scalars, not weights
            continue
        total += size
        params += elems
        if not _reaches_matmul(op, passthrough):
            continue
        decode += size
    return params, total, decode


def _reaches_matmul(op, passthrough: set[str], depth: int = 6) -> bool:
    """Whether a Constant's values flow into a MatMul (or anything but a Gather's data input) within a few
    decompression ops."""
    frontier = [op]
    for _ in range(depth):
        nxt = []
        for node in frontier:
            for out in node.outputs():
                for target in out.get_target_inputs():
                    consumer = target.get_node()
                    kind = consumer.get_type_name()
                    if kind in passthrough:
                        nxt.append(consumer)
                    elif kind == "Gather" and target.get_index() == 0:
                        continue
                    else:
                        return True
        if not nxt:
            return False
        frontier = nxt
    return True
