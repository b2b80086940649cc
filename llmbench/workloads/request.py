"""One measurement to take: the unit every backend is handed. It lives beside the prompt sets that build it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmbench.workloads.tools import Ask, ToolResult


@dataclass(frozen=True)
class Request:
    """One measurement to take: a prompt of the run's prompt set, and which repeat of it (< 0: a warm-up).

    ``batch``: several prompts generated together in one call (a backend that batches returns one result per
    sequence, ``prompt_index`` = the sequence's place in the batch). ``scheduled_s``: an open-loop run's due
    time (seconds after the run's start); the loop sets ``due_ns`` (``perf_counter_ns``) when it sends it.
    Build one with :meth:`PromptSet.request`, which attaches a dataset's output length."""

    prompt: str
    prompt_index: int
    repeat: int
    batch: tuple[str, ...] = ()
    scheduled_s: float | None = None
    due_ns: int | None = None
    max_new_tokens: int | None = None  # this request's own output length (a dataset's); None: the run's
    cold: bool | None = None  # a workload with shared prefixes: the first to send its prefix (None: no structure)
    # a session's turn (--turns): which conversation, which turn, the conversation so far (sent before the prompt),
    # and how long the user thinks after the previous reply before sending it
    conversation: int | None = None
    turn: int | None = None
    messages: tuple[dict[str, Any], ...] = ()
    think_s: float = 0.0
    ttft_only: bool = False  # ab's short request: one output token, recorded in Run.ttft_requests
    cpu: int | None = None  # ab --duet: the CPU the worker measures this request on (its threads pinned there)
    pair: int | None = None  # ab: which pair it belongs to (the loop measures a pair's requests as one unit)
    simultaneous: bool = False  # ab --duet: the pair's requests start at the same moment
    ask: Ask | None = None  # its tools, tool choice and response format (a .jsonl workload's line)
    # an agent task's later step (workloads.tools): the tool result this step sends back for each call of the
    # previous answer (``prompt`` is its content, for the request's identity); ``messages`` then end with them
    tool_result: ToolResult | None = None
