"""llmbench: measure how long a language model makes a person wait (TTFT and TPOT).

The public, typed API (see README, "Python API"):

    import llmbench
    run = llmbench.measure(["Why is the sky blue?"], weights="random", max_new_tokens=16)
    other = llmbench.load_run("results/base.json")
    regressions = llmbench.compare_runs(other, run).gate(fail_on_regression=10)

Names load on first use, so ``import llmbench`` (and ``llmbench --help``) never imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from llmbench.core.version import __version__

# name -> module that defines it
_EXPORTS = {
    "measure": "llmbench.api",
    "ameasure": "llmbench.api",
    "measure_quality": "llmbench.api",
    "ameasure_quality": "llmbench.api",
    "measure_load": "llmbench.api",
    "ameasure_load": "llmbench.api",
    "OpenLoop": "llmbench.options",
    "load_model": "llmbench.api",
    "load_spec": "llmbench.api",
    "RunSpec": "llmbench.spec",
    "LoadedModel": "llmbench.engines.hf.models",
    "load_run": "llmbench.results.storage",
    "save_run": "llmbench.results.storage",
    "compare_runs": "llmbench.analysis.compare",
    "Comparison": "llmbench.analysis.compare",
    "GateCheck": "llmbench.analysis.compare",
    "Run": "llmbench.results.schema",
    "RequestResult": "llmbench.results.schema",
    "Summary": "llmbench.results.schema",
    "RunOptions": "llmbench.options",
    "ModelOptions": "llmbench.options",
    "EndpointOptions": "llmbench.options",
    "PromptSet": "llmbench.workloads.prompts",
    "DatasetSpec": "llmbench.workloads.dataset",
    "load_prompts": "llmbench.workloads.prompts",
    "Stop": "llmbench.core.process",
    "stop_on_signals": "llmbench.core.process",
    "frozen_gc": "llmbench.core.process",
    "UserError": "llmbench.core.errors",
    "RunInterrupted": "llmbench.core.errors",
}

__all__ = [
    "Comparison",
    "DatasetSpec",
    "EndpointOptions",
    "GateCheck",
    "LoadedModel",
    "ModelOptions",
    "OpenLoop",
    "PromptSet",
    "RequestResult",
    "Run",
    "RunInterrupted",
    "RunOptions",
    "RunSpec",
    "Stop",
    "Summary",
    "UserError",
    "__version__",
    "ameasure",
    "ameasure_load",
    "ameasure_quality",
    "compare_runs",
    "frozen_gc",
    "load_model",
    "load_prompts",
    "load_run",
    "load_spec",
    "measure",
    "measure_load",
    "measure_quality",
    "save_run",
    "stop_on_signals",
]
assert set(__all__) == {"__version__", *_EXPORTS}

if TYPE_CHECKING:
    from llmbench.analysis.compare import Comparison, GateCheck, compare_runs
    from llmbench.api import (
        ameasure,
        ameasure_load,
        ameasure_quality,
        load_model,
        load_spec,
        measure,
        measure_load,
        measure_quality,
    )
    from llmbench.core.errors import RunInterrupted, UserError
    from llmbench.core.process import Stop, frozen_gc, stop_on_signals
    from llmbench.engines.hf.models import LoadedModel
    from llmbench.options import EndpointOptions, ModelOptions, OpenLoop, RunOptions
    from llmbench.results.schema import RequestResult, Run, Summary
    from llmbench.results.storage import load_run, save_run
    from llmbench.spec import RunSpec
    from llmbench.workloads.prompts import PromptSet, load_prompts


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'llmbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
