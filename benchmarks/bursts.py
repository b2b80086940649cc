"""The same computation delivered steady or in bursts: what the speed gates and the shape gates say.

A model whose decode step takes a known time (tests/delayed_model.py, behind the real tokenizer and generate())
answers the same prompts twice in one process: as it computes, and through benchmarks/inject's BURST_MS (its
tokens held and handed over every B ms, stamped together, as a proxy flushing a buffer delivers them). The reader
reads faster than the model writes (--reading-cps), so it catches up between bursts. Printed: each run's TTFT,
TPOT and E2E medians, its stalls and fluidity, and compare's gates on both.

    python benchmarks/bursts.py [--decode-ms 40] [--burst-ms 300] [--tokens 20] [--prompts 8] [--reading-cps 400]
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--decode-ms", type=float, default=40.0)
    ap.add_argument("--burst-ms", type=float, default=300.0)
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--reading-cps", type=float, default=400.0)
    args = ap.parse_args()

    import llmbench
    from llmbench.analysis.compare import compare_runs
    from llmbench.engines.hf.builtin import qwen_tokenizer
    from tests.delayed_model import delayed_loaded

    spec = importlib.util.spec_from_file_location(
        "llmbench_inject", ROOT / "benchmarks" / "inject" / "sitecustomize.py"
    )
    inject = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(inject)  # type: ignore[union-attr]
    lm = delayed_loaded(qwen_tokenizer(), prefill_ms=60.0, decode_ms=args.decode_ms)
    prompts = [f"Question {i}: why is the sky blue over the sea at noon?" for i in range(args.prompts)]

    def measure(burst: float | None):
        if burst is not None:
            inject.install_burst(burst)
        try:
            return llmbench.measure(prompts, model=lm, max_new_tokens=args.tokens, ignore_eos=True, warmup=0,
                                    reading_cps=args.reading_cps)  # fmt: skip
        finally:
            inject.uninstall_burst()

    steady, bursty = measure(None), measure(args.burst_ms)
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print(f"decode {args.decode_ms:g} ms a token, {args.tokens} tokens, {args.prompts} prompts, reader "
          f"{args.reading_cps:g} characters/s, bursts every {args.burst_ms:g} ms")  # fmt: skip
    print("| run | TTFT p50 ms | TPOT p50 ms | E2E p50 ms | stalls a request | stall ms a request | fluidity |")
    print("|---|---|---|---|---|---|---|")
    for name, run in (("steady", steady), ("bursts", bursty)):
        r = run.requests
        print(f"| {name} | {statistics.median(x.ttft_ms for x in r):.1f} | "
              f"{statistics.median(x.tpot_ms for x in r):.2f} | {statistics.median(x.e2e_ms for x in r):.1f} | "
              f"{statistics.mean(x.reader_stalls for x in r):.2f} | "
              f"{statistics.mean(x.reader_stall_ms for x in r):.0f} | "
              f"{statistics.mean(x.fluidity for x in r):.3f} |")  # fmt: skip
    comp = compare_runs(steady, bursty)
    for c in comp.checks(fail_on_regression=10, stat="p50"):
        print(f"gate {c.metric} p50: {c.change_pct:+.2f}% [{c.ci_low_pct:+.2f}, {c.ci_high_pct:+.2f}], threshold 10%: "
              f"{'REGRESSION' if c.regression else 'ok'}")  # fmt: skip
    for c in compare_runs(steady, bursty).checks(fail_on={"reader_stalls": 1, "fluidity": 0.05}):
        low, high = c.difference_ci or (float("nan"), float("nan"))
        print(f"gate {c.metric}: {c.difference:+.3g} {c.unit} [{low:+.3g}, {high:+.3g}], threshold {c.threshold:g}: "
              f"{'REGRESSION' if c.regression else 'ok'}")  # fmt: skip


if __name__ == "__main__":
    main()
