"""``--quantize``: int8 linear weights, two ways.

- ``int8`` (weight-only, W8A16): every ``nn.Linear`` weight stored as int8 with one float scale per output
  channel; activations stay in ``--dtype`` and the matmul dequantizes on the fly (``aten._weight_int8pack_mm``,
  the kernel torchao's ``int8_weight_only`` uses on CPUs). A decode step reads a quarter of float32's weight
  bytes (half of bfloat16's), and the model stays close to itself: on SmolLM2-135M, bfloat16 activations,
  KL 0.007 nats per token and top-1 agreement 0.93 against float32 (benchmarks/README.md, "Speed and quality").
- ``int8-dynamic`` (W8A8): torch.ao's dynamic quantization: int8 weights per tensor *and* int8 activations
  quantized per call, float32 only. Fast on x86 (fbgemm), but activation outliers (SmolLM2's ``down_proj``)
  cost it a lot: top-1 agreement 0.35 against float32 on the same text. Kept so that cost can be measured.
"""

from __future__ import annotations

import warnings

import torch

from llmbench.core.errors import UserError

QUANTIZATIONS = ("int8", "int8-dynamic")


def check_quantize(quantize: str, device: str, dtype: str) -> None:
    """UserError unless ``quantize`` can run on ``device`` with activations in ``dtype``."""
    if quantize not in QUANTIZATIONS:
        raise UserError(f"unknown --quantize '{quantize}'; expected none or {', '.join(QUANTIZATIONS)}")
    if device != "cpu":
        raise UserError(f"--quantize {quantize} runs on the CPU only (torch's CPU int8 kernels), not on {device}")
    if quantize == "int8-dynamic" and dtype != "float32":
        raise UserError(f"--quantize int8-dynamic computes in float32: use --dtype float32, not {dtype}")


def forced_dtype(quantize: str | None) -> str | None:
    """The activation dtype a quantization imposes (None: it follows ``--dtype``)."""
    return "float32" if quantize == "int8-dynamic" else None


def quantize_model(model: torch.nn.Module, quantize: str) -> torch.nn.Module:
    """``model`` with its linear layers quantized as ``quantize`` says (in place where it can be)."""
    if quantize == "int8-dynamic":
        return _dynamic_int8(model)
    dtype = next(model.parameters()).dtype
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(module, child_name, Int8WeightLinear(child, dtype))
    return model


class Int8WeightLinear(torch.nn.Module):
    """``y = x @ (q * s).T + b``: int8 weights ``q`` with a scale ``s`` per output channel (symmetric, absmax)."""

    weight_int8: torch.Tensor
    scale: torch.Tensor

    def __init__(self, linear: torch.nn.Linear, dtype: torch.dtype) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127.0
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight_int8", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale.to(dtype))
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, shape[-1]), self.weight_int8, self.scale)
        y = y.reshape(*shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weight-only"


def quantized_weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of quantized weights held outside ``parameters()`` (int8 weights and their scales)."""
    total = 0
    for m in model.modules():
        if isinstance(m, Int8WeightLinear):
            total += m.weight_int8.numel() + m.scale.numel() * m.scale.element_size()
        elif _is_dynamic_int8(m):
            w, b = m.weight(), m.bias()  # type: ignore[operator]  # torch.ao's packed linear: methods, not tensors
            total += w.numel() * w.element_size() + (b.numel() * 4 if b is not None else 0)
    return total


def _dynamic_int8(model: torch.nn.Module) -> torch.nn.Module:
    if next(model.parameters()).dtype != torch.float32:
        model = model.float()
    with warnings.catch_warnings():  # torch.ao's deprecation notices (torch.jit, "moving to torchao"): not ours
        warnings.simplefilter("ignore")
        from torch.ao.quantization import quantize_dynamic

        return quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)


def _is_dynamic_int8(module: torch.nn.Module) -> bool:
    return type(module).__module__.startswith("torch.ao.nn.quantized.dynamic") and hasattr(module, "weight")
