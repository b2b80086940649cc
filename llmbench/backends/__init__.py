"""Where tokens come from. The run loop drives any :class:`Backend`; a new mode is a new backend, not a new loop.

- :mod:`llmbench.backends.inprocess`: a transformers model in this process (torch).
- :mod:`llmbench.backends.endpoint`: an OpenAI-compatible server over SSE (httpx, no torch).

:class:`Request` lives with the prompt sets that build it (:mod:`llmbench.workloads.request`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from llmbench.workloads.request import Request  # re-exported: backends take Requests

if TYPE_CHECKING:
    from llmbench.core.process import Stop
    from llmbench.results.schema import Probe, RequestResult, Run
    from llmbench.workloads.prompts import PromptSet


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
