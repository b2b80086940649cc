"""The stopwatch: a transformers streamer that stamps every token the moment generate() hands it over.

``put()`` runs on the generation thread between two forward passes, so it does O(1) work: one clock read
and one list append. Decoding the ids to text happens after the request, off the clock.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence

from transformers.generation.streamers import BaseStreamer

from llmbench.results import RequestResult

_NS_PER_MS = 1_000_000


class TokenStamper(BaseStreamer):
    """Records ``time.perf_counter_ns()`` and the ids of each generated token.

    generate() calls ``put()`` first with the prompt (skipped here), then once per decoding step with
    the new token(s), already copied to the host (so on CUDA the token is materialised when stamped).
    """

    def __init__(self, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self._clock = clock
        self._prompt_seen = False
        self.times_ns: list[int] = []
        self.tokens: list = []  # tensors as handed over; turned into ints after the request
        self.end_ns: int | None = None

    def put(self, value) -> None:
        t = self._clock()
        if self._prompt_seen:
            self.times_ns.append(t)
            self.tokens.append(value)
        else:
            self._prompt_seen = True

    def end(self) -> None:
        self.end_ns = self._clock()

    def token_ids(self) -> list[int]:
        """The generated ids, in order (call after generate() returned)."""
        ids: list[int] = []
        for t in self.tokens:
            ids.extend(int(x) for x in t.reshape(-1).tolist())
        return ids


def ids_sha256(ids: Sequence[int]) -> str:
    """A stable hash of a token-id sequence: compare uses it to spot changed outputs."""
    return hashlib.sha256(",".join(map(str, ids)).encode("ascii")).hexdigest()


def request_result(
    *,
    prompt_index: int,
    repeat: int,
    start_ns: int,
    tokenized_ns: int,
    stamps_ns: Sequence[int],
    prompt_tokens: int,
    token_ids: Sequence[int],
    output_text: str,
    started_s: float = 0.0,
) -> RequestResult:
    """Turn raw stamps into one request's metrics, by the formulas in ``results.METRIC_FORMULAS``.

    Times are rounded to the microsecond once, so ``token_times_ms[0] == ttft_ms`` exactly.
    """
    times_ms = [round((t - start_ns) / _NS_PER_MS, 3) for t in stamps_ns]
    n = len(times_ms)
    ttft = times_ms[0] if n else float("nan")
    tpot = round((times_ms[-1] - times_ms[0]) / (n - 1), 4) if n >= 2 else None
    return RequestResult(
        prompt_index=prompt_index,
        repeat=repeat,
        prompt_tokens=prompt_tokens,
        output_tokens=n,
        tokenize_ms=round((tokenized_ns - start_ns) / _NS_PER_MS, 3),
        ttft_ms=ttft,
        tpot_ms=tpot,
        e2e_ms=times_ms[-1] if n else float("nan"),
        token_times_ms=times_ms,
        output_token_ids_sha256=ids_sha256(token_ids),
        output_text=output_text,
        started_s=round(started_s, 6),
    )
