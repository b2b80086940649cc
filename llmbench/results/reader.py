"""The shape of the wait as a reader lives it: a reader's pace against the stamps llmbench already takes.

Three models, each a pure function of one request's stamps (no torch, no numpy):

- **The reader** (:func:`read`): starts at the first *visible* character (not whitespace), reads at a pace of R
  characters a second, and never gets ahead of what has arrived. When it catches up before the answer ends it
  waits: a *stall*. ``reader_stall_ms`` is the total wait, ``reader_stalls`` the waits over
  :data:`STALL_MS`, ``reader_longest_stall_ms`` the longest. A steady stream faster than R never stalls;
  a stream that pauses for P ms after the reader has caught up stalls P ms.
- **Andes' QoE** (:func:`andes_qoe`; Liu et al., "Andes: Defining and Enhancing Quality-of-Experience in
  LLM-Based Text Streaming Services", arXiv 2404.16283, section 3.1): the area under the tokens-digested curve
  over the area under the expected one, capped at 1. Expected: token i at ``ttft_target + (i - 1) / r``.
  Digested: token i at ``max(arrival_i, digested_{i-1} + 1 / r)`` (early tokens wait in a buffer and are read at
  r). Both are integrated from 0 to ``T``, when the later of the two curves reaches the answer's length; as step
  curves, each area is ``sum_i (T - t_i)``. 1 when delivery keeps up with the expected pace; lower the longer
  delivery lags it. The paper's code is unpublished: this is its published definition, discretised per token.
- **Etalon's fluidity index** (:func:`fluidity`; Agrawal et al., arXiv 2407.07000, and project-etalon's
  ``get_request_level_deadline_miss_rate``): each token has a deadline, ``D_p`` after the request for the first
  and ``D_d`` after the previous token for the others, plus the slack earlier tokens left unused. A token that
  meets its deadline adds its unused time to the slack; a late one misses ``1 + floor((late) / D_d)``
  deadlines (one per decode period it overran, each counted in the total too) and resets the slack to 0.
  Fluidity = met deadlines / all deadlines.

Pace. The default is the mean silent reading rate of adults for non-fiction in English, 238 words a minute
(Brysbaert 2019, "How many words do we read per minute? A review and meta-analysis of reading rate", Journal of
Memory and Language 109, 104047; most adults read 175-300). A pace in words is turned into characters with the
answer's own characters per word (:func:`words_in`: a run of letters or digits is a word, and so is each CJK
character, as reading-rate studies of Chinese and Japanese count them).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

WORDS_PER_MINUTE = 238.0  # Brysbaert (2019): adults' silent reading of non-fiction, English
STALL_MS = 100.0  # a wait the reader notices (a frame is 16 ms; 100 ms is the classic "instant" limit)
TOKENS_PER_WORD = 1.3  # Andes' conversion between its reading speeds in words and tokens
ANDES_TTFT_MS = 1000.0  # Andes' expected TTFT in its evaluation (1 s)

# a CJK ideograph, kana or hangul syllable is a word of its own; elsewhere a run of letters and digits is
_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]|[^\W_]+", re.UNICODE)


def words_in(text: str) -> int:
    """Words as reading-rate studies count them: runs of letters or digits; each CJK character is one."""
    return sum(1 for _ in _WORD.finditer(text))


def chars_per_word(text: str) -> float:
    """Visible characters per word in ``text`` (5.7, the English average with its space, when it has no word)."""
    words = words_in(text)
    return sum(1 for c in text if not c.isspace()) / words if words else 5.7


def chars_per_s(text: str, words_per_minute: float = WORDS_PER_MINUTE) -> float:
    """The pace in characters a second for this text: ``words_per_minute`` times its visible characters per
    word."""
    if not (math.isfinite(words_per_minute) and words_per_minute > 0):
        raise ValueError(f"a reading pace must be a positive number of words a minute, not {words_per_minute}")
    return words_per_minute / 60.0 * chars_per_word(text)


@dataclass(frozen=True)
class Pace:
    """A reader's pace: ``words_per_minute``, or ``chars_per_s`` when given (any script: no word count needed)."""

    words_per_minute: float = WORDS_PER_MINUTE
    chars_per_s: float | None = None

    def chars_per_s_for(self, text: str) -> float:
        """Characters a second on this text."""
        return self.chars_per_s if self.chars_per_s is not None else chars_per_s(text, self.words_per_minute)

    def words_per_minute_for(self, text: str) -> float:
        """Words a minute on this text (a pace in characters, in this text's characters per word)."""
        return self.words_per_minute if self.chars_per_s is None else self.chars_per_s * 60.0 / chars_per_word(text)

    @classmethod
    def of(cls, record: dict[str, Any] | None) -> Pace:
        """The pace a run's ``config.reader`` records (None: the default)."""
        return cls(**record) if record else cls()


def pace_record(words_per_minute: float = WORDS_PER_MINUTE, chars_per_s: float | None = None) -> dict[str, Any] | None:
    """``config.reader``: None at the default pace (what runs from before the pace could be set read as), else
    the pace asked."""
    if chars_per_s is None and words_per_minute == WORDS_PER_MINUTE:
        return None
    return {"words_per_minute": words_per_minute, "chars_per_s": chars_per_s}


@dataclass(frozen=True)
class Reading:
    """What the reader went through on one answer (times in ms from the request's start)."""

    first_visible_ms: float | None  # the first event that showed a visible character; None: nothing visible
    stall_ms: float  # time the reader had caught up and waited, before the answer ended
    stalls: int  # waits longer than STALL_MS
    longest_stall_ms: float
    done_reading_ms: float | None  # when the reader finished the last character


def read(times_ms: Sequence[float], visible_chars: Sequence[int], pace_chars_per_s: float) -> Reading:
    """The reader model over one answer. ``times_ms[k]``: when event k arrived; ``visible_chars[k]``: the visible
    characters it brought (0 for an empty, whitespace-only or reasoning event). The reader starts at the first
    event with a visible character and reads ``pace_chars_per_s``; a wait counts only while more is to come."""
    first, spans, done = _walk(times_ms, visible_chars, pace_chars_per_s)
    if first is None:
        return Reading(None, 0.0, 0, 0.0, None)
    waits = [w for _, w in spans]
    return Reading(first, sum(waits), sum(1 for w in waits if w > STALL_MS), max(waits, default=0.0), done)


def wait_spans(
    times_ms: Sequence[float], visible_chars: Sequence[int], pace_chars_per_s: float
) -> list[tuple[float, float]]:
    """Every wait of :func:`read`'s reader, in order, as ``(start_ms, wait_ms)``: it caught up at ``start_ms``
    (ms from the request's start) and waited ``wait_ms`` for the next visible event. The stalls are those over
    :data:`STALL_MS`; ``read()``'s figures are these waits summed, counted and maximised."""
    return _walk(times_ms, visible_chars, pace_chars_per_s)[1]


def _walk(times_ms: Sequence[float], visible_chars: Sequence[int],
          pace_chars_per_s: float) -> tuple[float | None, list[tuple[float, float]], float | None]:  # fmt: skip
    """The reader's walk over the events: the first visible event's time, each wait (start, length) and when it
    finished reading (None, [], None when nothing visible arrived)."""
    if len(times_ms) != len(visible_chars):
        raise ValueError("one character count per event")
    if not (math.isfinite(pace_chars_per_s) and pace_chars_per_s > 0):
        raise ValueError(f"a reading pace must be a positive number of characters a second, not {pace_chars_per_s}")
    ms_per_char = 1000.0 / pace_chars_per_s
    events = [(t, c) for t, c in zip(times_ms, visible_chars, strict=True) if c > 0]
    if not events:
        return None, [], None
    clock, unread, waits = events[0][0], 0.0, []
    for k, (t, chars) in enumerate(events):
        if k:  # the reader reads what it has until this event arrives, or waits for it
            done = clock + unread * ms_per_char
            if done < t:
                waits.append((done, t - done))
                clock, unread = t, 0.0
            else:
                unread -= (t - clock) / ms_per_char
                clock = t
        unread += chars
    return events[0][0], waits, clock + unread * ms_per_char


def andes_qoe(token_times_ms: Sequence[float], tokens_per_s: float, ttft_target_ms: float = ANDES_TTFT_MS) -> float:
    """Andes' QoE of one answer (see the module docstring): 1 when every token is digested no later than the
    expected timeline says, less the further delivery lags it. ``tokens_per_s``: the expected delivery (reading)
    speed; ``ttft_target_ms``: the expected TTFT."""
    if not token_times_ms:
        return 0.0
    if not (math.isfinite(tokens_per_s) and tokens_per_s > 0) or not (math.isfinite(ttft_target_ms)
                                                                         and ttft_target_ms >= 0):  # fmt: skip
        raise ValueError("Andes' QoE needs a positive expected speed and a non-negative expected TTFT")
    step = 1000.0 / tokens_per_s
    expected = [ttft_target_ms + i * step for i in range(len(token_times_ms))]
    digested: list[float] = []
    for t in token_times_ms:
        digested.append(max(t, digested[-1] + step) if digested else t)
    end = max(digested[-1], expected[-1])
    actual_area = sum(end - t for t in digested)
    expected_area = sum(end - t for t in expected)
    return 1.0 if expected_area <= 0 else min(1.0, actual_area / expected_area)


def fluidity(token_times_ms: Sequence[float], prefill_deadline_ms: float, decode_deadline_ms: float) -> float | None:
    """Etalon's fluidity index of one answer (see the module docstring); None without a token. The first
    token's time is counted from the request's start (its TTFT), each later one from the token before."""
    if not token_times_ms:
        return None
    if not (prefill_deadline_ms > 0 and decode_deadline_ms > 0):  # NaN fails too
        raise ValueError("Etalon's deadlines must be positive")
    met = total = 0
    slack, previous = 0.0, 0.0
    for i, t in enumerate(token_times_ms):
        gap, deadline = t - previous, (prefill_deadline_ms if i == 0 else decode_deadline_ms)
        previous = t
        if gap <= deadline + slack:
            slack += deadline - gap
            met += 1
            total += 1
            continue
        late = gap - slack - deadline  # past this token's own deadline: a missed deadline, and one per D_d more
        missed = 1 + int(late // decode_deadline_ms)
        total += missed
        slack = 0.0
    return met / total


@dataclass(frozen=True)
class Shape:
    """One answer's shape as a reader lives it, at the default pace (what a run's summary aggregates)."""

    reading: Reading
    andes_qoe: float
    fluidity: float | None


def decode_deadline_ms(words_per_minute: float = WORDS_PER_MINUTE) -> float:
    """Etalon's decode deadline at a reader's pace: one token's reading time (Andes' 1.3 tokens a word)."""
    return 60_000.0 / (words_per_minute * TOKENS_PER_WORD)


def visible_per_event(text: str, ends: Sequence[int] | None, events: int) -> list[int]:
    """The visible characters each event brought: from each event's end offset in ``text`` (``ends``), or, for a
    run recorded before offsets were (None), the text spread evenly over the events (an approximation)."""
    if events == 0:
        return []
    if ends is None:
        ends = [round(len(text) * (k + 1) / events) for k in range(events)]
    starts = [0, *ends[:-1]]
    return [sum(1 for c in text[a:b] if not c.isspace()) for a, b in zip(starts, ends, strict=True)]


def shape_of(token_times_ms: Sequence[float], text: str, ends: Sequence[int] | None = None,
             pace: Pace = Pace()) -> Shape:  # fmt: skip
    """The reader, Andes' QoE and Etalon's fluidity of one answer at ``pace`` (Andes' expected TTFT, 1 s, is
    Etalon's prefill deadline too; the decode deadline is a token's reading time, Andes' 1.3 tokens a word)."""
    wpm = pace.words_per_minute_for(text)
    tokens_per_s = wpm / 60.0 * TOKENS_PER_WORD
    return Shape(
        read(token_times_ms, visible_per_event(text, ends, len(token_times_ms)), pace.chars_per_s_for(text)),
        andes_qoe(token_times_ms, tokens_per_s, ANDES_TTFT_MS),
        fluidity(token_times_ms, ANDES_TTFT_MS, decode_deadline_ms(wpm)),
    )
