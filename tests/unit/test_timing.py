import pytest
import torch

from llmbench.engines.hf.generation import TokenStamper
from llmbench.results.metrics import ids_sha256, request_result


class FakeClock:
    def __init__(self, times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def test_stamper_skips_the_prompt_and_stamps_each_token():
    s = TokenStamper(clock=FakeClock([5, 100, 250, 400, 999]))
    s.put(torch.tensor([[1, 2, 3]]))  # the prompt
    s.put(torch.tensor([7]))
    s.put(torch.tensor([8]))
    s.put(torch.tensor([9]))
    s.end()
    assert s.times_ns == [100, 250, 400]
    assert s.token_ids() == [7, 8, 9]
    assert s.end_ns == 999


def test_request_result_follows_the_written_formulas():
    ms = 1_000_000
    start = 10 * ms
    stamps = [start + 120 * ms, start + 170 * ms, start + 230 * ms, start + 270 * ms]
    r = request_result(
        prompt_index=3,
        repeat=1,
        start_ns=start,
        tokenized_ns=start + 2 * ms,
        stamps_ns=stamps,
        prompt_tokens=40,
        output_sha256=ids_sha256([1, 2, 3, 4]),
        output_text="abcd",
    )
    assert r.ttft_ms == 120.0 == r.token_times_ms[0]
    assert r.tpot_ms == pytest.approx((270 - 120) / 3)  # excludes the first token
    assert r.e2e_ms == 270.0
    assert r.tokenize_ms == 2.0
    assert r.output_tokens == len(r.token_times_ms) == 4


def test_one_token_has_no_tpot():
    r = request_result(
        prompt_index=0,
        repeat=0,
        start_ns=0,
        tokenized_ns=1,
        stamps_ns=[5_000_000],
        prompt_tokens=1,
        output_sha256=ids_sha256([1]),
        output_text="x",
    )
    assert r.tpot_ms is None and r.ttft_ms == r.e2e_ms == 5.0


def test_ids_hash_is_order_sensitive_and_stable():
    assert ids_sha256([1, 2]) == ids_sha256([1, 2])
    assert ids_sha256([1, 2]) != ids_sha256([2, 1])
    assert ids_sha256([12]) != ids_sha256([1, 2])
