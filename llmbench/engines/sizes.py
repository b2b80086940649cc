"""How many bytes of weights an engine's files hold, and how many a decode step reads: the roofline's numerator.

A decode step reads every weight once, except an input embedding table that only a Gather reads (one row per
step); a tied embedding is read whole by the output projection and so counts. Each function returns
(parameters, weight bytes, decode weight bytes) from the files alone, without loading the model.
"""

from __future__ import annotations

from pathlib import Path


def gguf_sizes(path: Path) -> tuple[int, int, int]:
    """A .gguf: every tensor's bytes as stored (quantized blocks included); ``token_embd`` is left out of the
    decode bytes when an ``output.weight`` exists (untied)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}
    total = sum(int(t.n_bytes) for t in tensors.values())
    params = sum(int(t.n_elements) for t in tensors.values())
    untied = "output.weight" in tensors and "token_embd.weight" in tensors
    decode = total - (int(tensors["token_embd.weight"].n_bytes) if untied else 0)
    return params, total, decode


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
