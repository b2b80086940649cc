"""The strict ground-truth check of llmbench's stopwatch: every token, several known delays.

A model whose forward passes take known times (tests/delayed_model.py: prefill P ms, each decode step D ms;
the real generate(), llmbench's in-process backend with its stop check, as the run loop calls it) records when
each pass ended. For every token of every request:
  lag = stamp - end of the pass that produced it          must be in [0, 1 ms + 2%]
  ITL error = |ITL - D|                                   must be <= 1 ms + 2% of D
  TTFT error = |TTFT - (end of prefill - request start)|  must be <= 1 ms + 2% of it
Exit 1 if any token misses. Run it on a quiet machine.

    python benchmarks/stopwatch_accuracy.py [--requests 10] [--tokens 32]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()

    from llmbench.backends import Request
    from llmbench.builtin import qwen_tokenizer
    from llmbench.process import Stop
    from tests.delayed_model import delayed_backend

    tok = qwen_tokenizer()
    failed = False
    print(
        f"{'P ms':>6}{'D ms':>6}{'tokens':>8}{'max lag ms':>12}{'median lag':>12}{'max |ITL-D|':>13}"
        f"{'max TTFT err':>14}{'misses':>8}"
    )
    for p_ms, d_ms in ((20.0, 5.0), (40.0, 15.0), (300.0, 80.0)):
        model, backend = delayed_backend(tok, p_ms, d_ms, args.tokens)
        lags, itl_errs, ttft_errs, misses = [], [], [], 0
        for i in range(args.requests):
            model.starts_ns.clear(), model.ends_ns.clear(), model.kinds.clear()
            r = backend.measure_now(Request(f"prompt {i}: 某化工厂夜间偷排未经处理的工业废水", i, 0), Stop())
            raw = backend.raw[(i, 0)]
            start = raw.start_ns
            req_lags = [(s - e) / 1e6 for s, e in zip(raw.stamps_ns, model.ends_ns, strict=True)]
            errs = [abs(b - a - d_ms) for a, b in zip(r.token_times_ms, r.token_times_ms[1:], strict=False)]
            truth = (model.ends_ns[0] - start) / 1e6
            ttft_err = abs(r.ttft_ms - truth)
            misses += sum(not (0 <= x <= 1.0 + 0.02 * d_ms) for x in req_lags)
            misses += sum(e > 1.0 + 0.02 * d_ms for e in errs) + (ttft_err > 1.0 + 0.02 * truth)
            lags += req_lags
            itl_errs += errs
            ttft_errs.append(ttft_err)
        lags.sort()
        print(
            f"{p_ms:>6.0f}{d_ms:>6.0f}{len(lags):>8}{max(lags):>12.3f}{lags[len(lags) // 2]:>12.3f}"
            f"{max(itl_errs):>13.3f}{max(ttft_errs):>14.3f}{misses:>8}"
        )
        failed |= misses > 0
    print("every token within 1 ms + 2%" if not failed else "SOME TOKENS MISSED the 1 ms + 2% bound")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
