"""Multi-turn sessions (``--turns T [--think-time S]``): each prompt opens a conversation of T turns; each turn sends
the conversation so far as chat messages, with the model's actual replies, so a server sees what a chat user's
requests look like: each one's messages a strict prefix of the next one's, ever longer.

The later turns' user messages are the data's own where it has them (a ShareGPT entry's later human turns), else
fixed follow-ups (:data:`FOLLOW_UPS`, in turn). Each turn is a prompt of its own in the expanded prompt set
(``prompt_index``; ``requests[].conversation`` and ``turn`` say where it sits), so pairing, resume bookkeeping
and compare work per turn. A conversation's turns run in order (a turn waits for the previous reply, then
``--think-time`` seconds); ``--concurrency N`` keeps N conversations going at once. A turn that fails ends its
conversation (the rest is never sent, and the run says it is incomplete). Turn 0 is cold, later turns warm:
their conversation so far is a prefix a server may have cached.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any

from llmbench.core.errors import UserError
from llmbench.workloads import limits
from llmbench.workloads.prompts import PromptSet, check_whole

FOLLOW_UPS = (
    "Tell me more about that.",
    "Can you give a concrete example?",
    "What would you check first, and why?",
    "Summarize your answer in two sentences.",
)


def expand(prompts: PromptSet, turns: int) -> PromptSet:
    """Each prompt -> ``turns`` prompts, the user messages of its conversation's turns in order (the data's own
    later turns, ``prompts.followups``, where it has them; else :data:`FOLLOW_UPS`).

    Turn 0 keeps its prompt's own structure: cold unless the workload says its prefix was sent before (a
    prefix group's later prompt is warm from its first turn); later turns are warm (their conversation so far
    was sent). A dataset's output length is its first turn's; later turns ask for the run's own
    (``source["default_output_tokens"]``, the --max-new-tokens before the dataset's largest length raised it)."""
    check_whole("--turns", turns, high=limits.MAX_TURNS, what=" turns")
    if turns == 1:
        return prompts
    check_whole("--turns x prompts", turns * len(prompts.prompts), what=" requests a round")
    later_tokens = (prompts.source or {}).get("default_output_tokens")
    texts: list[str] = []
    where: list[int] = []
    places: list[tuple[int, int]] = []
    own: list[int | None] = []
    cold: list[bool] = []
    for i, first in enumerate(prompts.prompts):
        later = list(prompts.followups[i]) if prompts.followups is not None else []
        for k in range(turns):
            texts.append(first if k == 0 else (later[k - 1] if k - 1 < len(later) else FOLLOW_UPS[(k - 1) % 4]))
            where.append(prompts.line_numbers[i])
            places.append((i, k))
            cold.append(k == 0 and (prompts.cold is None or prompts.cold[i]))
            if prompts.output_tokens is not None:
                own.append(prompts.output_tokens[i] if k == 0 else later_tokens)
    output_tokens = tuple(own) if prompts.output_tokens is not None else None
    return dataclasses.replace(prompts, sha256=digest(prompts, turns), prompts=tuple(texts), line_numbers=tuple(where),
                               output_tokens=output_tokens, cold=tuple(cold), turns=tuple(places),
                               followups=None)  # fmt: skip


def expand_tasks(prompts: PromptSet, turns: int) -> PromptSet:
    """Each agent task (a line with ``tool_results``, :mod:`llmbench.workloads.tools`) -> its steps: the prompt,
    then one step per tool result (its ``prompt`` the result's text, for the request's identity); a line without
    results stays one request. ``prompts`` unchanged when no line is a task. A step's conversation so far is sent
    with it, as a session's turns are (the loop adds each answer's tool calls and the results)."""
    asks = prompts.asks
    if asks is None or not any(a is not None and a.results for a in asks):
        return prompts
    if turns > 1:
        raise UserError("--turns with a workload of agent tasks (tool_results): a task's steps are its turns")
    texts: list[str] = []
    where: list[int] = []
    places: list[tuple[int, int]] = []
    own: list[int | None] = []
    cold: list[bool] = []
    expanded: list[Any] = []
    for i, first in enumerate(prompts.prompts):
        ask = asks[i]
        steps = [first, *(r.content for r in (ask.results if ask is not None else ()))]
        for k, text in enumerate(steps):
            texts.append(text)
            where.append(prompts.line_numbers[i])
            places.append((i, k))
            cold.append(k == 0 and (prompts.cold is None or prompts.cold[i]))
            expanded.append(ask)
            if prompts.output_tokens is not None:
                own.append(prompts.output_tokens[i])
    check_whole("steps of the agent tasks", len(texts), what=" requests a round")
    return dataclasses.replace(prompts, prompts=tuple(texts), line_numbers=tuple(where), turns=tuple(places),
                               output_tokens=tuple(own) if prompts.output_tokens is not None else None,
                               cold=tuple(cold), asks=tuple(expanded), followups=None)  # fmt: skip


def digest(prompts: PromptSet, turns: int) -> str:
    """The sha256 of ``prompts`` expanded into ``turns`` turns (config.prompt_sha256 of a --turns run)."""
    # the data's later turns are part of what was sent: two datasets with the same first turns don't pair
    key: list[Any] = [prompts.sha256, turns]
    if prompts.followups is not None and any(prompts.followups):
        key.append([list(f) for f in prompts.followups])
    return hashlib.sha256(json.dumps(key, ensure_ascii=False).encode("utf-8")).hexdigest()


def record(prompts: PromptSet, turns: int, think_time_s: float, followups: bool) -> dict[str, Any]:
    """``config.sessions``: how the conversations were made."""
    return {"turns": turns, "conversations": len(prompts.prompts) // turns, "think_time_s": think_time_s,
            "later_turns": "the data's, then fixed follow-ups" if followups else "fixed follow-ups",
            "follow_ups": list(FOLLOW_UPS)}  # fmt: skip


def task_record(prompts: PromptSet) -> dict[str, Any]:
    """``config.sessions`` of agent tasks (:func:`expand_tasks`): how many, their steps, their tools' latencies."""
    assert prompts.turns is not None
    tasks = {i for i, _ in prompts.turns}
    latencies = sorted({r.latency_ms for a in (prompts.asks or ()) if a is not None for r in a.results})
    return {"turns": max(k for _, k in prompts.turns) + 1, "conversations": len(tasks), "think_time_s": 0.0,
            "later_turns": "tool results (agent tasks)", "tasks": len(tasks), "steps": len(prompts.prompts),
            "tool_latencies_ms": latencies}  # fmt: skip


def with_think_time(plan: Sequence[tuple[Any, Any]], think_time_s: float) -> list[tuple[Any, Any]]:
    """Every turn after a conversation's first waits ``think_time_s`` after the previous reply."""
    if not 0 <= think_time_s < math.inf:  # the API's path (the CLI refuses it before loading)
        raise UserError(f"--think-time must be 0 or more seconds, not {think_time_s}")
    # an agent task's step waits its tool's latency instead (set from the workload)
    return [(t, dataclasses.replace(req, think_s=think_time_s) if req.turn and req.tool_result is None else req)
            for t, req in plan]  # fmt: skip
