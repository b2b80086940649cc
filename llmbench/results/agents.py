"""What a program waits for (fields of :class:`~llmbench.results.schema.Summary`): tool calls, structured output, a
schema's first use, and agent tasks of several steps. Each figure is computed on the population its name says
(``METRIC_FORMULAS`` writes the formulas down); a share comes with its Wilson 95% interval.

An agent task's end-to-end time splits exactly into model time and tool time: a step's model time is its request's
life (sent -> the stream ended), its tool time the wait before it (the previous step's stream ended -> this one was
sent: the tool's set latency, from the answer's end, and what of the client's own work outlasted it), so
``e2e_ms = sum(model_ms) + sum(tool_ms)`` by the stamps, and ``tool_ms - tool_set_ms`` is what the client added.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, NamedTuple

from llmbench.results.describe import describe, share_bounds
from llmbench.results.schema import RequestResult, Share, TaskFigures

_CONFIDENCE = 0.95


def share(k: int, n: int) -> Share | None:
    """k of n as a share with its two-sided Wilson 95% interval; None when n is 0."""
    bounds = share_bounds(k, n, (1 + _CONFIDENCE) / 2)  # each side one-sided at 97.5%
    if bounds is None:
        return None
    return Share(k=k, n=n, share=round(k / n, 6), low=round(bounds[0], 6), high=round(bounds[1], 6))


def first_answer_ms(r: RequestResult) -> float | None:
    """The answer's first event a program can act on: its first text, else its first tool call's name."""
    return r.ttft_ms if r.ttft_ms is not None else r.tool_name_ms


def tool_figures(requests: Sequence[RequestResult]) -> dict[str, Any]:
    """Tool calls, structured output and a constraint's first use against its later uses; {} without any."""
    out: dict[str, Any] = {}
    offered = [r for r in requests if r.tool_calls is not None]
    if offered:
        answers = [r for r in offered if r.tool_calls]
        out.update(
            tool_offered=len(offered),
            tool_answers=share(len(answers), len(offered)),
            tool_calls_per_answer=describe(r.tool_calls or 0 for r in answers),
            tool_name_ms=describe(r.tool_name_ms for r in answers if r.tool_name_ms is not None),
            tool_args_ms=describe(r.tool_args_ms for r in answers if r.tool_args_ms is not None),
            tool_args_valid=share(sum(bool(r.tool_args_valid) for r in answers), len(answers)),
        )
    checked = [r for r in requests if r.output_valid is not None]
    if checked:
        out["output_valid"] = share(sum(bool(r.output_valid) for r in checked), len(checked))
    # (first answer event, first use) of each request that sent a constraint
    constrained = [(t, r.constraint_first_use) for r in requests
                   if r.constraint_first_use is not None and (t := first_answer_ms(r)) is not None]  # fmt: skip
    if constrained:
        out.update(
            constraint_first_use_ms=describe(t for t, first in constrained if first),
            constraint_reuse_ms=describe(t for t, first in constrained if not first),
        )
    tasks = task_figures(requests)
    if tasks is not None:
        out["tasks"] = tasks
    return out


class TaskTimes(NamedTuple):
    """One task's times, ms (see the module's docstring): ``e2e_ms = model_ms + tool_ms``; the model's part splits
    into ``first_event_ms`` (each step's wait for its first answer event, summed) and the rest (decoding and each
    stream's end)."""

    e2e_ms: float
    model_ms: float
    tool_ms: float
    tool_set_ms: float
    first_event_ms: float


def task_times(steps: Sequence[RequestResult]) -> TaskTimes:
    """One task's times from its steps in order."""
    model = [r.stream_end_ms if r.stream_end_ms is not None else r.e2e_ms for r in steps]
    e2e = (steps[-1].started_s - steps[0].started_s) * 1000 + model[-1]
    return TaskTimes(round(e2e, 3), round(sum(model), 3), round(sum(r.tool_wait_ms or 0.0 for r in steps), 3),
                     round(sum(r.tool_wait_set_ms or 0.0 for r in steps), 3),
                     round(sum(first_answer_ms(r) or 0.0 for r in steps), 3))  # fmt: skip


def tasks_of(requests: Sequence[Any]) -> tuple[list[list[Any]], int]:
    """(the whole tasks, each its steps in order; how many are partial): a task is one conversation and repeat
    whose steps answer tool calls, whole when its first step and every later step it sent finished (a failed step
    ends its task, its later steps never sent). ([], 0) when no step answered a call: no task went on."""
    if not any(getattr(r, "tool_wait_set_ms", None) is not None for r in requests):
        return [], 0
    grouped: dict[tuple[int, int], list[Any]] = defaultdict(list)
    for r in requests:
        if r.conversation is not None and r.turn is not None and r.tool_calls is not None:
            grouped[(r.conversation, r.repeat)].append(r)
    tasks = [sorted(v, key=lambda r: r.turn or 0) for v in grouped.values()]
    whole = [t for t in tasks if [r.turn for r in t] == list(range(len(t)))]
    return whole, len(tasks) - len(whole)


def task_figures(requests: Sequence[RequestResult]) -> TaskFigures | None:
    """The agent tasks' figures (:func:`tasks_of`); None when the run has none."""
    whole, partial = tasks_of(requests)
    if not whole and not partial:
        return None
    times = [task_times(t) for t in whole]
    total = sum(x.e2e_ms for x in times)
    later = [r for t in whole for r in t[1:] if r.cached_tokens is not None and r.prompt_tokens]
    prompt = sum(r.prompt_tokens or 0 for r in later)
    return TaskFigures(
        tasks=len(whole),
        tasks_partial=partial,
        ended_by_answer=sum(not t[-1].tool_calls for t in whole),
        steps=describe(len(t) for t in whole),
        e2e_ms=describe(x.e2e_ms for x in times),
        model_ms=describe(x.model_ms for x in times),
        model_first_event_ms=describe(x.first_event_ms for x in times),
        model_after_first_ms=describe(x.model_ms - x.first_event_ms for x in times),
        tool_ms=describe(x.tool_ms for x in times),
        tool_set_ms=describe(x.tool_set_ms for x in times),
        model_share=round(sum(x.model_ms for x in times) / total, 6)
        if (total := sum(x.e2e_ms for x in times))
        else None,
        step_ttft_ms=describe(v for t in whole for r in t if (v := first_answer_ms(r)) is not None),
        cached_tokens_share_later_steps=round(sum(r.cached_tokens or 0 for r in later) / prompt, 6) if prompt else None,
    )
