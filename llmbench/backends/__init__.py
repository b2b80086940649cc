"""Where tokens come from. The run loop drives any :class:`Backend`; a new mode is a new backend, not a new loop.

- :mod:`llmbench.backends.inprocess`: a transformers model in this process (torch).
- :mod:`llmbench.backends.endpoint`: an OpenAI-compatible server over SSE (httpx, no torch).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from llmbench.process import Stop
    from llmbench.prompts import PromptSet
    from llmbench.schema import Probe, RequestResult, Run


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
    messages: tuple[dict[str, str], ...] = ()
    think_s: float = 0.0


@runtime_checkable
class Backend(Protocol):
    """What the run loop needs from a source of tokens.

    Lifecycle: ``start`` (load, check every prompt fits, compile; UserError for bad input) -> ``new_run`` (the
    record: config, environment, load facts, warnings) -> ``activate`` before its requests when several
    backends take turns -> ``measure`` per request -> ``probe`` before and after -> ``finish`` (the backend's
    own warnings and figures) -> ``close``.
    """

    label: str  # how progress and errors name it
    cancel_on_stop: bool  # True: the first stop drops requests in flight (an HTTP stream); False: the token
    # in flight finishes (a forward pass can't be cut)

    async def start(self, prompts: PromptSet) -> None: ...

    def new_run(self, prompts: PromptSet) -> Run: ...

    def early_config(self, prompts: PromptSet) -> dict:
        """The config fields known before ``start`` (for refusing a wrong --resume before loading anything)."""
        ...

    async def activate(self) -> None: ...

    async def measure(
        self, request: Request, stop: Stop, started_s: float
    ) -> RequestResult | list[RequestResult] | None:
        """One request's result (a batched request: one per sequence); None when ``stop`` cut it short. Raises
        RequestFailed (recorded, the run goes on) or BackendUnavailable (the run ends)."""
        ...

    def probe_key(self) -> Hashable | None:
        """Backends with equal keys share one calibration probe; None: no probe makes sense."""
        ...

    async def probe(self) -> Probe | None: ...

    def finish(self, run: Run) -> list[str]:
        """Fill what only this backend knows into ``run``; return new warnings."""
        ...

    async def close(self) -> None: ...
