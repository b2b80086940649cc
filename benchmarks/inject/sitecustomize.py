"""Change a worker through its environment alone (no hook in llmbench): put this folder on PYTHONPATH.

    env PYTHONPATH=benchmarks/inject LLMBENCH_INJECT_SLEEP_MS=5 llmbench worker ...   # +5 ms per model forward
    env PYTHONPATH=benchmarks/inject LLMBENCH_INJECT_EXIT_AFTER=7 llmbench worker ... # dies at the 7th forward
    env PYTHONPATH=benchmarks/inject LLMBENCH_INJECT_SLOW_PCT=3 llmbench worker ...   # each forward +3% of itself
    env PYTHONPATH=benchmarks/inject LLMBENCH_INJECT_LOAD_SLEEP_S=2 llmbench worker ... # the model's load +2 s
    env PYTHONPATH=benchmarks/inject LLMBENCH_INJECT_BURST_MS=300 llmbench worker ...  # tokens handed over in bursts
        LLMBENCH_INJECT_SLOW_KIND=memory: the extra time streams through a 64 MB buffer instead of spinning (a
        slowdown that uses the memory bus, as a model's own work does)
        LLMBENCH_INJECT_LOG=PATH   (with SLOW_PCT, or alone to measure only): at exit, JSON {"forwards": n,
        "forward_s": measured forward time, "injected_s": time spun, "pct": P} written to PATH ("{pid}" in it
        is replaced by the process id, so several workers sharing one environment keep a file each)

Python imports ``sitecustomize`` at start-up when it is on the path; this one acts after each forward pass of
a causal LM (one per token, the prefill's included):

- SLEEP_MS / EXIT_AFTER (a global torch forward hook, on every module, as always): sleeps, or ends the process
  as a crash would (exit status 9, nothing flushed). Used by the nightly tests (tests/nightly), the bisect test
  (tests/bisect_repo.py) and benchmarks/ab_noise.py to make a head measurably slower, or a worker die mid-run.
- LOAD_SLEEP_S=S: the first ``eval()`` (``train(False)``) of a causal LM (transformers' from_pretrained ends with
  it, and llmbench's load calls it: both inside ``load.seconds``) sleeps S seconds once, as a slower loading path
  would: the cold-start tests (tests/e2e/test_cold_start_phases.py, tests/nightly/test_measured_claims.py).
- BURST_MS=B: the same computation, delivered in bursts, as a proxy flushing a large buffer delivers it. llmbench's
  token stamper (``TokenStamper.put``, where every token is stamped and, in ``serve``, streamed) holds each token
  until B ms have passed since the last release, then hands over everything held at once, stamped together. The
  first token goes at once and the held ones go at ``end()``, right after the last forward: TTFT, E2E and mean
  TPOT stay what the model's pace makes them, and only the shape of the wait changes (benchmarks/README.md,
  "Bursts"). :func:`install_burst` / :func:`uninstall_burst` do it in a running process.
- SLOW_PCT=P: BUSY-WAITS (spins on perf_counter, never sleeps: a sleeping CPU may clock down, and a sleep
  overshoots) for P% of that very forward's own measured wall time, so the head is slower by a known share of
  the model's work whatever the machine does. Only the outermost ``*ForCausalLM`` module's forward counts: the
  first one a global pre-hook sees gets hooks of its own (a pre-hook stamps the start, a post-hook spins) and
  the global hook is removed, so no other module pays for a hook. :func:`set_slow_pct` changes P at run time
  (benchmarks/inject_check.py flips it between generations); :func:`install` attaches without the environment.
  SLOW_KIND=memory keeps the same time budget but spends it summing 1 MB slices of a 64 MB float32 buffer (far
  beyond the caches): in a duet a spinning head leaves the bus to the base while it spins, a reading one
  competes for it, so the two bracket how a real slowdown's size is seen.
"""

import os
from time import perf_counter

_SLEEP_S = float(os.environ.get("LLMBENCH_INJECT_SLEEP_MS", "0")) / 1000
_EXIT_AFTER = int(os.environ.get("LLMBENCH_INJECT_EXIT_AFTER", "0"))
_LOG = os.environ.get("LLMBENCH_INJECT_LOG", "")
_LOAD_SLEEP_S = float(os.environ.get("LLMBENCH_INJECT_LOAD_SLEEP_S", "0"))

# the SLOW_PCT injection's state: P (changeable at run time) and what was measured and spun
# ("trace": a list to append each forward's (measured s, spun s) to, for benchmarks/inject_check.py; None: not kept)
slow = {"pct": float(os.environ.get("LLMBENCH_INJECT_SLOW_PCT", "0")), "forwards": 0, "forward_s": 0.0,
        "injected_s": 0.0, "trace": None, "kind": os.environ.get("LLMBENCH_INJECT_SLOW_KIND", "spin")}  # fmt: skip
_MEMORY: list = []  # SLOW_KIND=memory: the buffer (made on the first forward) and the next slice's offset
_SLICE = 1 << 18  # floats: 1 MB, ~0.1 ms of reading, so a budget is overshot by little
_handles: list = []  # the global pre-hook until a causal LM is found, then that model's two hooks
_start: list[float] = []  # the outermost forward's start (a stack: a model that calls itself stays outermost)

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


if _LOAD_SLEEP_S:
    import time

    import torch

    _train = torch.nn.Module.train  # eval() is train(False); transformers' own eval() ends up here too
    _slept = [False]

    def _slow_train(self, mode=True):
        if not mode and not _slept[0] and type(self).__name__.endswith("ForCausalLM"):
            _slept[0] = True
            time.sleep(_LOAD_SLEEP_S)
        return _train(self, mode)

    torch.nn.Module.train = _slow_train


def set_slow_pct(pct: float) -> None:
    """P for the forwards from now on (0: measure only, spin nothing)."""
    slow["pct"] = float(pct)


def stats() -> dict:
    """What the SLOW_PCT hooks measured and spun so far (the LOG file's content)."""
    return {"forwards": slow["forwards"], "forward_s": round(slow["forward_s"], 6),
            "injected_s": round(slow["injected_s"], 6), "pct": slow["pct"], "kind": slow["kind"]}  # fmt: skip


def reset() -> None:
    """Start the counts again (P unchanged)."""
    slow.update(forwards=0, forward_s=0.0, injected_s=0.0)


def _before(_module, _args):
    _start.append(perf_counter())


def _after(_module, _args, _output):
    now = perf_counter()
    elapsed = now - _start.pop()  # (always called: a forward that raised leaves no stamp behind)
    if _start:  # an inner call of the same model: the outermost one counts
        return None
    slow["forwards"] += 1
    slow["forward_s"] += elapsed
    until = now + elapsed * slow["pct"] / 100
    if slow["kind"] == "memory" and slow["pct"]:
        _read_memory_until(until)
    while perf_counter() < until:
        pass
    spun = perf_counter() - now
    slow["injected_s"] += spun
    if slow["trace"] is not None:
        slow["trace"].append((elapsed, spun))
    return None


def _read_memory_until(until: float) -> None:
    """Sum 1 MB slices of a 64 MB buffer, in turn, until ``until``: time spent on the memory bus."""
    import numpy as np

    if not _MEMORY:
        _MEMORY[:] = [np.ones(1 << 24, dtype=np.float32), 0]
    buf, pos = _MEMORY
    while perf_counter() < until:
        buf[pos : pos + _SLICE].sum()
        pos = (pos + _SLICE) % buf.size
    _MEMORY[1] = pos


def attach(model) -> None:
    """Hook ``model`` (a causal LM): its forwards are measured and slowed by P% from now on."""
    for h in _handles:
        h.remove()
    _handles[:] = [model.register_forward_pre_hook(_before), model.register_forward_hook(_after, always_call=True)]


def _find(module, args):
    if type(module).__name__.endswith("ForCausalLM"):
        attach(module)
        _before(module, args)  # this first forward counts too
    return None


def install() -> None:
    """Attach to the first causal LM that runs a forward (a global pre-hook until then)."""
    import torch

    if not _handles:
        _handles.append(torch.nn.modules.module.register_module_forward_pre_hook(_find))


def _write_log() -> None:
    import json

    path = _LOG.replace("{pid}", str(os.getpid()))
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(stats(), f)
    os.replace(tmp, path)


_burst: dict = {}  # BURST_MS's state: the stamper's own put/end while patched, and B in ns


def install_burst(ms: float) -> None:
    """Hand llmbench's stamped tokens over in bursts of ``ms`` from now on (see the module docstring)."""
    from llmbench.engines.hf.generation import TokenStamper

    if not _burst:
        _burst.update(put=TokenStamper.put, end=TokenStamper.end)
    _burst["ns"] = int(ms * 1_000_000)
    TokenStamper.put = _burst_put
    TokenStamper.end = _burst_end


def uninstall_burst() -> None:
    """The stamper as it was."""
    from llmbench.engines.hf.generation import TokenStamper

    if _burst:
        TokenStamper.put, TokenStamper.end = _burst["put"], _burst["end"]
        _burst.clear()


def _release(stamper, now: int) -> None:
    clock = stamper._clock
    stamper._clock = lambda: now  # every held token is stamped (and streamed) at the release
    try:
        for value in stamper._held:
            _burst["put"](stamper, value)
    finally:
        stamper._clock = clock
    stamper._held, stamper._released = [], now


def _burst_put(self, value) -> None:
    if not self._prompt_seen:  # the prompt: the stamper's own business
        return _burst["put"](self, value)
    if not hasattr(self, "_held"):
        self._held, self._released = [], None
    self._held.append(value)
    now = self._clock()
    if self._released is None or now - self._released >= _burst["ns"]:  # the first token at once, then every B
        _release(self, now)
    return None


def _burst_end(self) -> None:
    if getattr(self, "_held", None):
        _release(self, self._clock())
    _burst["end"](self)


if os.environ.get("LLMBENCH_INJECT_BURST_MS"):
    install_burst(float(os.environ["LLMBENCH_INJECT_BURST_MS"]))

if slow["pct"] or _LOG:
    install()
    if _LOG:
        import atexit

        atexit.register(_write_log)
