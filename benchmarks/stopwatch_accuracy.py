"""The strict ground-truth check of llmbench's stopwatch: every token, several known delays.

A model whose forward passes take known times (tests/delayed_model.py: prefill P ms, each decode step D ms;
the real generate(), llmbench's in-process backend with its stop check, as the run loop calls it) records
when each pass ended; a logits processor appended after generate()'s own records when each token's scores
were final ("chosen"). For every token of every request:
  stopwatch lag = stamp - chosen                                   must be in [0, 1 ms]
  ITL error     = |ITL - (chosen_k - chosen_k-1)|                   must be <= 1 ms + 2% of D
  TTFT error    = TTFT - (chosen_0 - request start)                 must be in [0, 1 ms]
  decode floor  = ITL >= D                                          (a step can't beat its forward pass)
and it reports generate()'s own per-step work (chosen - end of the forward pass): real TPOT, not stopwatch
error. Exit 1 if any token misses. Run it on a quiet machine.

    python benchmarks/stopwatch_accuracy.py [--requests 10] [--tokens 32]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()

    from transformers import LogitsProcessorList

    from llmbench.backends import Request
    from llmbench.core.process import Stop
    from llmbench.engines.hf.builtin import qwen_tokenizer
    from tests.delayed_model import delayed_backend
    from tests.unit.test_stopwatch import ChosenStamp

    tok = qwen_tokenizer()
    failed = False
    print(f"{'P ms':>6}{'D ms':>6}{'tokens':>8}{'max lag':>9}{'med lag':>9}{'max |ITL err|':>15}{'max TTFT err':>14}"
          f"{'generate work med/max':>23}{'misses':>8}")  # fmt: skip
    for p_ms, d_ms in ((20.0, 5.0), (40.0, 15.0), (300.0, 80.0)):
        model, backend = delayed_backend(tok, p_ms, d_ms, args.tokens)
        chosen = ChosenStamp(time.perf_counter_ns)
        kwargs = backend._generate_kwargs
        backend._generate_kwargs = lambda kwargs=kwargs, chosen=chosen: {**kwargs(), "logits_processor":
                                                                       LogitsProcessorList([chosen])}  # fmt: skip
        lags, itl_errs, ttft_errs, work, misses = [], [], [], [], 0
        for i in range(args.requests):
            model.starts_ns.clear(), model.ends_ns.clear(), model.kinds.clear()
            chosen.times_ns.clear()
            r = backend.measure_now(Request(f"prompt {i}: 某化工厂夜间偷排未经处理的工业废水", i, 0), Stop())
            raw = backend.raw[(i, 0)]
            ch = chosen.times_ns
            req_lags = [(s - c) / 1e6 for s, c in zip(raw.stamps_ns, ch, strict=True)]
            work += [(c - e) / 1e6 for c, e in zip(ch, model.ends_ns, strict=True)]
            itls = [b - a for a, b in zip(r.token_times_ms, r.token_times_ms[1:], strict=False)]
            errs = [abs(itl - (ch[k + 1] - ch[k]) / 1e6) for k, itl in enumerate(itls)]
            ttft_err = r.ttft_ms - (ch[0] - raw.start_ns) / 1e6
            misses += sum(not (0 <= x <= 1.0) for x in req_lags) + sum(itl < d_ms for itl in itls)
            misses += sum(e > 1.0 + 0.02 * d_ms for e in errs) + (not 0 <= ttft_err <= 1.0)
            lags += req_lags
            itl_errs += errs
            ttft_errs.append(ttft_err)
        print(f"{p_ms:>6.0f}{d_ms:>6.0f}{len(lags):>8}{max(lags):>9.3f}{statistics.median(lags):>9.3f}"
              f"{max(itl_errs):>15.3f}{max(ttft_errs):>14.3f}"
              f"{statistics.median(work):>14.3f} / {max(work):>6.3f}{misses:>8}")  # fmt: skip
        failed |= misses > 0
    print("every token within bounds" if not failed else "SOME TOKENS MISSED their bound")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
