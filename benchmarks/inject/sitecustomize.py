"""Change a worker through its environment alone (no hook in llmbench): put this folder on PYTHONPATH.

    env PYTHONPATH=benchmarks/inject LLMBENCH_INJECT_SLEEP_MS=5 llmbench worker ...   # +5 ms per model forward
    env PYTHONPATH=benchmarks/inject LLMBENCH_INJECT_EXIT_AFTER=7 llmbench worker ... # dies at the 7th forward

Python imports ``sitecustomize`` at start-up when it is on the path; this one registers a global forward hook
on torch modules that acts after each forward pass of a causal LM (one per token): it sleeps, or ends the
process as a crash would (exit status 9, nothing flushed). Used by tests/test_ab.py and benchmarks/ab_noise.py
to make a head measurably slower, or a worker die mid-run.
"""

import os

_SLEEP_S = float(os.environ.get("LLMBENCH_INJECT_SLEEP_MS", "0")) / 1000
_EXIT_AFTER = int(os.environ.get("LLMBENCH_INJECT_EXIT_AFTER", "0"))

if _SLEEP_S or _EXIT_AFTER:
    import time

    import torch

    _forwards = [0]

    def _after_forward(module, _args, _output):
        if not type(module).__name__.endswith("ForCausalLM"):
            return None
        _forwards[0] += 1
        if _EXIT_AFTER and _forwards[0] >= _EXIT_AFTER:
            os._exit(9)
        if _SLEEP_S:
            time.sleep(_SLEEP_S)
        return None

    torch.nn.modules.module.register_module_forward_hook(_after_forward)
