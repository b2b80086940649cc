"""The shape of the wait as a reader lives it: a reader's pace against the stamps llmbench already takes.

Three models, each a pure function of one request's stamps (numpy, no Python loop over the tokens: a run of
10,000 x 256 tokens read from before they were recorded gets them in a blink):

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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported where used: the spec reads this module's pace, and --help the spec
    import numpy as np

# Brysbaert (2019): adults' silent reading of non-fiction, English. The pace of a run that recorded none (written
# before the pace could be set): the spec's --reading-wpm default is declared there, and every run records its own
WORDS_PER_MINUTE = 238.0
# a pace's bounds (the spec's --reading-wpm/--reading-cps, and a run's config.reader read back): a reader of 30 to
# 3,000 words a minute, up to 1,000 characters a second; slower is no reading, faster no person
MIN_WPM, MAX_WPM, MAX_CPS = 30.0, 3000.0, 1000.0
STALL_MS = 100.0  # a wait the reader notices (a frame is 16 ms; 100 ms is the classic "instant" limit)
TOKENS_PER_WORD = 1.3  # Andes' conversion between its reading speeds in words and tokens
ANDES_TTFT_MS = 1000.0  # Andes' expected TTFT in its evaluation (1 s)

# a CJK ideograph, kana or hangul syllable is a word of its own; elsewhere a run of letters and digits is
_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]|[^\W_]+", re.UNICODE)


def words_in(text: str) -> int:
    """Words as reading-rate studies count them: runs of letters or digits; each CJK character is one."""
    return len(_WORD.findall(text))


def chars_per_word(text: str) -> float:
    """Visible characters per word in ``text`` (5.7, the English average with its space, when it has no word)."""
    words = words_in(text)
    return int(_visible_mask(text).sum()) / words if words else 5.7


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
        """The pace a run's ``config.reader`` records (None: the default); keys a newer version may add are left
        out."""
        if not record:
            return cls()
        return cls(**{k: record[k] for k in ("words_per_minute", "chars_per_s") if k in record})


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
    import numpy as np

    t, c = _events(times_ms, visible_chars)
    return _readings(t[None, :], c[None, :], np.array([_ms_per_char(pace_chars_per_s)]))[0]


def wait_spans(
    times_ms: Sequence[float], visible_chars: Sequence[int], pace_chars_per_s: float
) -> list[tuple[float, float]]:
    """Every wait of :func:`read`'s reader, in order, as ``(start_ms, wait_ms)``: it caught up at ``start_ms``
    (ms from the request's start) and waited ``wait_ms`` for the next visible event. The stalls are those over
    :data:`STALL_MS`; ``read()``'s figures are these waits summed, counted and maximised."""
    import numpy as np

    t, c = _events(times_ms, visible_chars)
    _, caught, waits, _ = _walk(t[None, :], c[None, :], np.array([_ms_per_char(pace_chars_per_s)]))
    at = waits[0] > 0
    return list(zip(caught[0][at].tolist(), waits[0][at].tolist(), strict=True))


def _events(times_ms: Sequence[float], visible_chars: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    if len(times_ms) != len(visible_chars):
        raise ValueError("one character count per event")
    return np.asarray(times_ms, dtype=float), np.asarray(visible_chars, dtype=float)


def _ms_per_char(pace_chars_per_s: float) -> float:
    if not (math.isfinite(pace_chars_per_s) and pace_chars_per_s > 0):
        raise ValueError(f"a reading pace must be a positive number of characters a second, not {pace_chars_per_s}")
    return 1000.0 / pace_chars_per_s


def _walk(t: np.ndarray, c: np.ndarray, ms_per_char: np.ndarray) -> tuple[np.ndarray, ...]:
    """The reader's walk over rows of events of one length (row i: an answer's arrival times ``t[i]``, visible
    characters ``c[i]``, read at ``ms_per_char[i]``), without a Python loop over the events.

    The reader has read everything up to event k at ``F_k = max(F_{k-1}, t_k) + c_k m`` (it waits for event k when
    it is done before it arrives); with ``S_k`` the characters up to k times m, ``F_k - S_k = max over j <= k of
    (t_j - S_{j-1})``, a running maximum. Invisible events take no part (their time is -inf: never waited for).
    Returns (the first visible event's index, or -1; where each wait began; each event's wait, 0 where none;
    when the reader finished)."""
    import numpy as np

    if t.shape[1] == 0:
        none = np.zeros(t.shape)
        return np.full(t.shape[0], -1), none, none, np.full(t.shape[0], np.nan)
    visible = c > 0
    tt = np.where(visible, t, -np.inf)
    s = np.cumsum(c, axis=1) * ms_per_char[:, None]
    done = np.maximum.accumulate(tt - (s - c * ms_per_char[:, None]), axis=1) + s  # F_k
    before = np.concatenate((np.full((t.shape[0], 1), -np.inf), done[:, :-1]), axis=1)  # F_{k-1}
    with np.errstate(invalid="ignore"):  # -inf - -inf before the first visible event: not a wait
        waits = np.where(visible & np.isfinite(before) & (tt > before), tt - before, 0.0)
    first = np.where(visible.any(axis=1), visible.argmax(axis=1), -1)
    return first, before, waits, done[:, -1]


def _readings(t: np.ndarray, c: np.ndarray, ms_per_char: np.ndarray) -> list[Reading]:
    """:func:`read` of each row (see :func:`_walk`)."""
    first, _, waits, done = _walk(t, c, ms_per_char)
    stall_ms, stalls, longest = waits.sum(axis=1), (waits > STALL_MS).sum(axis=1), waits.max(axis=1, initial=0.0)
    return [Reading(None, 0.0, 0, 0.0, None) if f < 0 else
            Reading(float(t[i, f]), float(stall_ms[i]), int(stalls[i]), float(longest[i]), float(done[i]))
            for i, f in enumerate(first.tolist())]  # fmt: skip


def andes_qoe(token_times_ms: Sequence[float], tokens_per_s: float, ttft_target_ms: float = ANDES_TTFT_MS) -> float:
    """Andes' QoE of one answer (see the module docstring): 1 when every token is digested no later than the
    expected timeline says, less the further delivery lags it. ``tokens_per_s``: the expected delivery (reading)
    speed; ``ttft_target_ms``: the expected TTFT."""
    import numpy as np

    if not len(token_times_ms):
        return 0.0
    if not (math.isfinite(tokens_per_s) and tokens_per_s > 0) or not (math.isfinite(ttft_target_ms)
                                                                         and ttft_target_ms >= 0):  # fmt: skip
        raise ValueError("Andes' QoE needs a positive expected speed and a non-negative expected TTFT")
    return float(_andes_rows(np.asarray(token_times_ms, dtype=float)[None, :], np.array([tokens_per_s]),
                             ttft_target_ms)[0])  # fmt: skip


def _andes_rows(t: np.ndarray, tokens_per_s: np.ndarray, ttft_target_ms: float) -> np.ndarray:
    """:func:`andes_qoe` of each row. Digested ``d_i = max(t_i, d_{i-1} + step)`` is ``i step`` plus the running
    maximum of ``t_j - j step``; each area is ``sum_i (T - x_i)``."""
    import numpy as np

    step = (1000.0 / tokens_per_s)[:, None] * np.arange(t.shape[1])
    digested = np.maximum.accumulate(t - step, axis=1) + step
    expected = ttft_target_ms + step
    end = np.maximum(digested[:, -1], expected[:, -1])[:, None]
    actual, wanted = (end - digested).sum(axis=1), (end - expected).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(wanted <= 0, 1.0, np.minimum(1.0, actual / wanted))


def fluidity(token_times_ms: Sequence[float], prefill_deadline_ms: float, decode_deadline_ms: float) -> float | None:
    """Etalon's fluidity index of one answer (see the module docstring); None without a token. The first
    token's time is counted from the request's start (its TTFT), each later one from the token before."""
    import numpy as np

    if not len(token_times_ms):
        return None
    if not (prefill_deadline_ms > 0 and decode_deadline_ms > 0):  # NaN fails too
        raise ValueError("Etalon's deadlines must be positive")
    t = np.asarray(token_times_ms, dtype=float)[None, :]
    return float(_fluidity_rows(t, prefill_deadline_ms, np.array([decode_deadline_ms]))[0])


def _fluidity_rows(t: np.ndarray, prefill_deadline_ms: float, decode_deadline_ms: np.ndarray) -> np.ndarray:
    """:func:`fluidity` of each row. The slack after token k is Lindley's recursion ``s_k = max(0, s_{k-1} + D_k -
    gap_k)``: with ``X = D - gap`` summed to ``S``, ``s_k = S_k - min(0, S_0..S_k)``. Token k meets its deadline
    when ``X_k + s_{k-1} >= 0``; else it misses ``1 + floor(-(X_k + s_{k-1}) / D_d)``."""
    import numpy as np

    dd = decode_deadline_ms[:, None]
    gaps = np.diff(t, axis=1, prepend=0.0)
    x = np.broadcast_to(dd, t.shape).copy()
    x[:, 0] = prefill_deadline_ms
    x -= gaps
    total = np.cumsum(x, axis=1)
    slack = total - np.minimum.accumulate(np.minimum(total, 0.0), axis=1)
    margin = x + np.concatenate((np.zeros((t.shape[0], 1)), slack[:, :-1]), axis=1)
    met = margin >= 0
    missed = np.where(met, 0.0, 1.0 + np.floor(-margin / dd)).sum(axis=1)
    hits = met.sum(axis=1)
    return hits / (hits + missed)


@dataclass(frozen=True)
class Shape:
    """One answer's shape as a reader lives it, at the default pace (what a run's summary aggregates)."""

    reading: Reading
    andes_qoe: float
    fluidity: float | None
    later_chars: int = 0  # visible characters after the first event: decode speed in characters
    chars_per_word: float = 5.7  # the answer's own (:func:`chars_per_word`): decode speed in words


def decode_deadline_ms(words_per_minute: float = WORDS_PER_MINUTE) -> float:
    """Etalon's decode deadline at a reader's pace: one token's reading time (Andes' 1.3 tokens a word)."""
    return 60_000.0 / (words_per_minute * TOKENS_PER_WORD)


def visible_per_event(text: str, ends: Sequence[int] | None, events: int) -> list[int]:
    """The visible characters each event brought: from each event's end offset in ``text`` (``ends``), or, for a
    run recorded before offsets were (None), the text spread evenly over the events (an approximation)."""
    return _visible_rows([text], [ends], events)[0][0].astype(int).tolist()


def _visible_rows(texts: Sequence[str], ends: Sequence[Sequence[int] | None], events: int) -> tuple[np.ndarray, ...]:
    """(the visible characters of each text's ``events`` events, one row a text; each text's visible characters):
    the texts joined and their characters' visibility summed once, then read at each event's end."""
    import numpy as np

    lens = np.array([len(x) for x in texts], dtype=np.int64)
    start = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64)
    before = np.concatenate(([0], np.cumsum(_visible_mask("".join(texts)))))
    totals = before[start + lens] - before[start]
    if events == 0:
        return np.zeros((len(texts), 0)), totals
    at = np.round(lens[:, None] * np.arange(1, events + 1) / events)  # no offsets recorded: spread evenly
    given = [k for k, e in enumerate(ends) if e is not None]
    if given:
        at[given] = np.array([ends[k] for k in given], dtype=float).reshape(len(given), events)
    upto = before[np.clip(at, 0, lens[:, None]).astype(np.int64) + start[:, None]]
    return np.maximum(np.diff(upto, axis=1, prepend=before[start][:, None]), 0).astype(float), totals


_SPACE: np.ndarray | None = None  # str.isspace() of each code point up to U+3000, the last space there is


def _visible_mask(text: str) -> np.ndarray:
    """Whether each character of ``text`` is visible (not ``str.isspace()``), in C: its code points looked up."""
    import numpy as np

    global _SPACE
    if _SPACE is None:
        _SPACE = np.array([chr(i).isspace() for i in range(0x3002)])  # 0x3001 and above: no space
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return ~_SPACE[np.minimum(points, 0x3001)]


def shape_of(token_times_ms: Sequence[float], text: str, ends: Sequence[int] | None = None,
             pace: Pace = Pace()) -> Shape:  # fmt: skip
    """The reader, Andes' QoE and Etalon's fluidity of one answer at ``pace`` (Andes' expected TTFT, 1 s, is
    Etalon's prefill deadline too; the decode deadline is a token's reading time, Andes' 1.3 tokens a word)."""
    return shapes([(token_times_ms, text, ends)], pace)[0]


Answer = tuple[Sequence[float], str, Sequence[int] | None]  # (stamps in ms, text, each stamp's end in it or None)


def shapes(answers: Sequence[Answer], pace: Pace = Pace()) -> list[Shape]:
    """:func:`shape_of` of each answer, the answers of one length in one pass of array arithmetic: a run of 10,000
    answers from before the shape was recorded gets it when read, in well under a second."""
    import numpy as np

    if pace.chars_per_s is None:
        chars_per_s(" ", pace.words_per_minute)  # the pace's check
    else:
        _ms_per_char(pace.chars_per_s)
    out: list[Shape] = [Shape(Reading(None, 0.0, 0, 0.0, None), 0.0, None)] * len(answers)
    groups: dict[int, list[int]] = {}
    for i, (times, _, _) in enumerate(answers):
        groups.setdefault(len(times), []).append(i)
    for n, rows in groups.items():
        if n == 0:
            continue
        t = np.array([answers[i][0] for i in rows], dtype=float).reshape(len(rows), n)
        c, visible = _visible_rows([answers[i][1] for i in rows], [answers[i][2] for i in rows], n)
        words = np.array([len(_WORD.findall(answers[i][1])) for i in rows])
        cpw = np.where(words > 0, visible.astype(float) / np.maximum(words, 1), 5.7)
        if pace.chars_per_s is None:
            wpm, cps = np.full(len(rows), pace.words_per_minute), pace.words_per_minute / 60.0 * cpw
        else:
            wpm, cps = pace.chars_per_s * 60.0 / cpw, np.full(len(rows), pace.chars_per_s)
        readings = _readings(t, c, 1000.0 / cps)
        qoe = _andes_rows(t, wpm / 60.0 * TOKENS_PER_WORD, ANDES_TTFT_MS)
        fluid = _fluidity_rows(t, ANDES_TTFT_MS, 60_000.0 / (wpm * TOKENS_PER_WORD))
        later = c[:, 1:].sum(axis=1)
        for k, i in enumerate(rows):
            out[i] = Shape(readings[k], float(qoe[k]), float(fluid[k]), int(later[k]), float(cpw[k]))
    return out
