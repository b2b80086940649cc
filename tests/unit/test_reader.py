"""The reader model, Andes' QoE and Etalon's fluidity on stamp streams whose answers are computed by hand."""

from __future__ import annotations

import math

import pytest

from llmbench.results.reader import STALL_MS, Pace, andes_qoe, chars_per_s, fluidity, read, words_in


def test_a_steady_stream_faster_than_the_reader_never_stalls():
    times = [100.0 * k for k in range(50)]  # 5 visible characters every 100 ms: 50 characters a second
    r = read(times, [5] * 50, pace_chars_per_s=20.0)  # the reader needs 250 ms for each event's 5
    assert (r.stall_ms, r.stalls, r.longest_stall_ms) == (0.0, 0, 0.0)
    assert r.first_visible_ms == 0.0 and r.done_reading_ms == pytest.approx(250 * 5 * 50 / 5)


@pytest.mark.parametrize(("pauses", "pause_ms"), [(1, 500.0), (3, 500.0), (4, 2000.0)])
def test_n_pauses_of_p_ms_are_n_stalls_of_what_the_reader_model_implies(pauses, pause_ms):
    """Each burst: 10 events 10 ms apart, 2 characters each (20 characters, read in 200 ms at 100 characters a
    second); after a burst the stream pauses ``pause_ms``. The reader catches up 200 ms after a burst began, the
    burst having taken 90 ms to arrive, so it waits pause_ms + 90 - 200 before the next."""
    times, t = [], 0.0
    for _ in range(pauses + 1):
        times += [t + 10.0 * k for k in range(10)]
        t = times[-1] + pause_ms
    r = read(times, [2] * len(times), pace_chars_per_s=100.0)
    each = pause_ms + 90.0 - 200.0
    assert r.stalls == pauses and r.stall_ms == pytest.approx(pauses * each)
    assert r.longest_stall_ms == pytest.approx(each) and each > STALL_MS


def test_invisible_events_neither_start_the_reader_nor_count():
    # a whitespace-only first event and an empty one in the middle: the reader starts at the first character
    r = read([50.0, 300.0, 310.0, 320.0], [0, 4, 0, 4], pace_chars_per_s=400.0)  # 10 ms to read each event's 4
    assert r.first_visible_ms == 300.0 and r.stalls == 0 and r.stall_ms == pytest.approx(10.0)
    assert read([1.0, 2.0], [0, 0], 10.0).first_visible_ms is None


def test_a_wait_after_the_last_event_is_not_a_stall():
    r = read([0.0, 10_000.0], [1, 1], pace_chars_per_s=1000.0)  # one wait of 9,999 ms, between the two events
    assert r.stalls == 1 and r.stall_ms == pytest.approx(9999.0)
    assert read([0.0], [100], 1.0).stall_ms == 0.0  # one event: however long the reading, no wait


@pytest.mark.parametrize(
    ("times", "qoe"),
    [
        ([1000.0, 1100.0, 1200.0], 1.0),  # delivered as expected
        ([500.0, 520.0, 540.0], 1.0),  # faster than the reader: buffered, digested at the expected pace or better
        ([2000.0, 2100.0, 2200.0], 300.0 / 3300.0),  # a second late: areas (200+100+0) / (1200+1100+1000)
        ([1200.0, 1200.0, 1200.0], 300.0 / 900.0),  # all at once at 1.2 s: digested at 1200, 1300, 1400
    ],
)
def test_andes_qoe_matches_the_areas_computed_by_hand(times, qoe):
    assert andes_qoe(times, tokens_per_s=10.0, ttft_target_ms=1000.0) == pytest.approx(qoe)


def test_fluidity_counts_missed_deadlines_as_etalon_does():
    # D_p 100, D_d 50. 80 ms: met (slack 20); +40: met (slack 30); +180: late by 180 - 30 - 50 = 100 ms, so
    # 1 + 100 // 50 = 3 misses, slack reset; +40: met. 3 met of 6 deadlines.
    assert fluidity([80.0, 120.0, 300.0, 340.0], 100.0, 50.0) == pytest.approx(0.5)
    assert fluidity([90.0, 130.0, 170.0], 100.0, 50.0) == 1.0
    assert fluidity([250.0], 100.0, 50.0) == pytest.approx(0.0)  # late by 150: 1 + 3 misses, none met
    assert fluidity([], 100.0, 50.0) is None


def test_words_and_pace_count_cjk_characters_as_words():
    assert words_in("Why is the sky blue?") == 5 and words_in("天空为什么是蓝色的？") == 9
    english = chars_per_s("Why is the sky blue?", 238.0)  # 16 visible characters over 5 words
    assert english == pytest.approx(238.0 / 60.0 * 16 / 5)
    assert chars_per_s("天空为什么是蓝色的？", 238.0) == pytest.approx(238.0 / 60.0 * 10 / 9)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_a_pace_that_is_no_pace_is_refused(bad):
    with pytest.raises(ValueError):
        read([0.0], [1], bad)
    with pytest.raises(ValueError):
        chars_per_s("text", bad)
    with pytest.raises(ValueError):
        andes_qoe([0.0], bad)


@pytest.mark.parametrize(
    "text",
    [
        "Why is the sky blue? Rayleigh scattering.",
        "某工厂夜间偷排废水，环保部门如何处理？",
        "emoji 🌍🚀 and\nlines\n\n  spaced",
    ],
)
def test_each_tokens_text_ends_where_the_incremental_decode_says(qwen_tokenizer, text):
    from llmbench.engines.chat import text_offsets

    ids = qwen_tokenizer.encode(text, add_special_tokens=False)
    offsets = text_offsets(lambda x: qwen_tokenizer.decode(x, skip_special_tokens=True), ids)
    full = qwen_tokenizer.decode(ids, skip_special_tokens=True)
    assert len(offsets) == len(ids) and offsets[-1] == len(full) and offsets == sorted(offsets)
    for k, end in enumerate(offsets):  # every prefix that decodes cleanly is exactly the text up to its offset
        prefix = qwen_tokenizer.decode(ids[: k + 1], skip_special_tokens=True)
        if not prefix.endswith("\ufffd"):
            assert full[:end] == prefix


def test_the_shape_of_a_steady_answer_and_of_a_bursty_one_with_the_same_mean_pace():
    """Same TTFT, same E2E, same 100 one-word tokens: one steady at 25 a second, one in bursts of 25 a second apart.
    A reader at 1,800 words a minute (30 a second) outpaces both: behind the steady one it waits 7 ms a word, which
    it does not notice; a burst it reads in 0.83 s, then waits 0.17 s for the next, three times (and 0.16 s for the
    last token, which the bursty answer sends at the steady one's end)."""
    from llmbench.results.reader import shape_of

    text = "word " * 100
    steady = [500.0 + 40.0 * k for k in range(100)]
    bursty = [500.0 + 1000.0 * (k // 25) for k in range(100)]
    bursty[-1] = steady[-1]  # the same end
    s, b = shape_of(steady, text, pace=Pace(1800.0)), shape_of(bursty, text, pace=Pace(1800.0))
    assert s.reading.stalls == 0 and s.reading.longest_stall_ms < 10.0
    assert b.reading.stalls == 4 and b.reading.longest_stall_ms == pytest.approx(1000.0 - 25 * 1000.0 / 30.0)
    # QoE scores lag behind the expected timeline, not freezes: the bursty answer's tokens mostly come earlier,
    # so it scores higher; only the stall count tells the freezes apart
    assert b.andes_qoe > s.andes_qoe


def test_an_old_run_without_offsets_spreads_its_text_over_its_events():
    from llmbench.results.reader import visible_per_event

    assert visible_per_event("ab cd", [2, 5], 2) == [2, 2]
    assert visible_per_event("abcdef", None, 3) == [2, 2, 2]
    assert visible_per_event("", None, 0) == []


# The recursions as first written, a Python loop over the tokens each: the array forms must agree with them on
# any stream (the hand-computed cases above pin the loops' meaning).
def _loop_read(times, chars, cps):
    ms, events = 1000.0 / cps, [(t, c) for t, c in zip(times, chars, strict=True) if c > 0]
    if not events:
        return None, [], None
    clock, unread, waits = events[0][0], 0.0, []
    for k, (t, c) in enumerate(events):
        if k:
            done = clock + unread * ms
            if done < t:
                waits.append((done, t - done))
                clock, unread = t, 0.0
            else:
                unread -= (t - clock) / ms
                clock = t
        unread += c
    return events[0][0], waits, clock + unread * ms


def _loop_andes(times, tps, ttft):
    step, digested = 1000.0 / tps, []
    for t in times:
        digested.append(max(t, digested[-1] + step) if digested else t)
    expected = [ttft + i * step for i in range(len(times))]
    end = max(digested[-1], expected[-1])
    wanted = sum(end - t for t in expected)
    return 1.0 if wanted <= 0 else min(1.0, sum(end - t for t in digested) / wanted)


def _loop_fluidity(times, dp, dd):
    met = total = 0
    slack, previous = 0.0, 0.0
    for i, t in enumerate(times):
        gap, deadline = t - previous, (dp if i == 0 else dd)
        previous = t
        if gap <= deadline + slack:
            slack += deadline - gap
            met += 1
            total += 1
            continue
        total += 1 + int((gap - slack - deadline) // dd)
        slack = 0.0
    return met / total


@pytest.mark.parametrize("seed", range(40))
def test_the_array_forms_agree_with_the_loops_on_random_streams(seed):
    import numpy as np

    from llmbench.results.reader import shapes, wait_spans

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    gaps = rng.exponential(rng.choice([5.0, 40.0, 200.0]), n) * (rng.random(n) < 0.9)  # some arrive together
    gaps[rng.random(n) < 0.03] += rng.uniform(100, 2000)  # and some pauses
    times = (rng.uniform(10, 3000) + np.cumsum(gaps)).tolist()
    chars = (rng.integers(0, 6, n) * (rng.random(n) < 0.85)).tolist()  # invisible events too
    cps = float(rng.uniform(5, 400))
    first, waits, done = _loop_read(times, chars, cps)
    got = read(times, chars, cps)
    spans = wait_spans(times, chars, cps)
    assert got.first_visible_ms == first and len(spans) == len(waits)
    assert [x for s in spans for x in s] == pytest.approx([x for s in waits for x in s])
    if first is not None:
        w = [x for _, x in waits]
        assert got.stall_ms == pytest.approx(sum(w)) and got.stalls == sum(x > STALL_MS for x in w)
        assert got.done_reading_ms == pytest.approx(done)
    assert andes_qoe(times, cps / 5, 1000.0) == pytest.approx(_loop_andes(times, cps / 5, 1000.0))
    assert fluidity(times, 1000.0, 1000.0 / cps) == pytest.approx(_loop_fluidity(times, 1000.0, 1000.0 / cps))
    # many answers of mixed lengths at once give what each gives alone
    text = "".join(rng.choice(list("ab  c\n天")) for _ in range(3 * n))
    answers = [(times, text, None), (times[: n // 2 + 1], text[:n], None), ([], "", None), (times, text, None)]
    together = shapes(answers, Pace(300.0))
    from llmbench.results.reader import shape_of

    assert together == [shape_of(*a, pace=Pace(300.0)) for a in answers]


def test_visibility_is_str_isspace_for_every_code_point():
    import sys

    from llmbench.results.reader import visible_per_event

    text = "".join(chr(i) for i in range(sys.maxunicode + 1) if not 0xD800 <= i <= 0xDFFF)
    ends = list(range(1, len(text) + 1))
    assert visible_per_event(text, ends, len(text)) == [0 if c.isspace() else 1 for c in text]
