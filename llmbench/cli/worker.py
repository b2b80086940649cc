"""``llmbench worker``: one side of ``llmbench ab``, a model in a process of its own."""

from __future__ import annotations

import typer

from llmbench.cli.common import model_options, user_errors
from llmbench.cli.params import (
    AllowOffloadOpt,
    AllowPickleOpt,
    AttnOpt,
    Cache,
    CacheOpt,
    CompileOpt,
    DeviceMapOpt,
    DeviceOpt,
    DType,
    DTypeOpt,
    EngineOpt,
    ModelOpt,
    PrecisionOpt,
    Quantize,
    QuantizeOpt,
    ReprobeOpt,
    ThreadsOpt,
    TrustRemoteCodeOpt,
    Weights,
    WeightsOpt,
)


def worker(
    ctx: typer.Context,
    model: ModelOpt = None,
    weights: WeightsOpt = Weights.pretrained,
    engine: EngineOpt = "transformers",
    precision: PrecisionOpt = None,
    device: DeviceOpt = "auto",
    dtype: DTypeOpt = DType.auto,
    reprobe: ReprobeOpt = False,
    threads: ThreadsOpt = None,
    attn: AttnOpt = None,
    cache: CacheOpt = Cache.dynamic,
    compile_: CompileOpt = False,
    quantize: QuantizeOpt = Quantize.none,
    device_map: DeviceMapOpt = None,
    allow_offload: AllowOffloadOpt = False,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustRemoteCodeOpt = False,
) -> None:
    """A model in a process of its own, measuring on command over stdin/stdout (JSON lines): one side of
    `llmbench ab`. Not for typing at: ab starts it."""
    from llmbench import engines
    from llmbench.backends import worker_main as w

    with user_errors():
        spec = model_options(ctx.params)
        engines.validate(spec)
    raise typer.Exit(w.main(spec, "static" if compile_ else cache.value, compile_))
