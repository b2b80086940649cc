"""Bounds of what llmbench makes, reads or plans: far above any real model or run, and far below what would
overflow, exhaust memory or spin for hours while prompts are made (a typo'd 10**20 is one line, not a hang).
docs/limits.md lists every option's range."""

import math

MAX_PROMPT_TOKENS = 10_000_000  # no model reads (or writes) more: the longest contexts are 10M tokens
MAX_REQUESTS = 1_000_000  # prompts made, turns expanded, arrivals drawn, requests planned
MAX_TURNS = 1_000  # turns of one conversation (--turns): more outgrow any context long before their end
# requests of one plan, every count that multiplies it multiplied (a plan is held in memory whole): prompts, repeats,
# turns, rates, grid points, setups, processes. Checked by :func:`check_planned` before anything loads or starts.
MAX_PLANNED = 10_000_000
MAX_TOKENS_MADE = 1_000_000_000  # prompt tokens made before measuring (text held in memory: a few GB at most)
MAX_PROCESSES = 1_000  # worker processes a side, each loading its model: far more is days of loading alone
MAX_CONCURRENCY = 100_000  # requests in flight (tasks and connections held at once)
MAX_CLIENTS = 1_024  # open-loop client processes (--workers)
MAX_TIMEOUT_S = 86_400.0  # a request's timeout: a day (a longer wait is a hung server, not a slow one)
MAX_WAIT_S = 86_400.0  # a pause asked between requests (--think-time)
MAX_SCHEDULE_S = 604_800.0  # an open loop's planned length (--duration, --requests / --rate): a week
MAX_RATE_RPS = 1_000_000.0  # requests per second asked of one server: no server takes more
MAX_SEED = 2**32 - 1  # seeds: numpy's and every server's range (a seed adds each request's index to itself)
MAX_RESULT_ID = 2**63 - 1  # SQLite's largest integer (a history's row ids)


def check_range(option: str, value: float, low: float, high: float, *, unit: str = "", above: bool = False) -> float:
    """``value`` when it is a finite number in [``low``, ``high``] (``above``: in (``low``, ``high``]); else a
    UserError naming ``option`` in one line. NaN and inf fail it (and a bool, or anything that is no number)."""
    from llmbench.core.errors import UserError

    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not (low < value if above else low <= value) or value > high:
        span = f"above {low:,g}" if above else f"{low:,g}"
        raise UserError(f"{option} {value}: expected a number {'' if above else 'from '}{span}"
                        f"{' up to' if above else ' to'} {high:,g}{unit}")  # fmt: skip
    return value


def check_planned(*factors: tuple[str, int], what: str = "requests", add: tuple[str, int] | None = None) -> int:
    """The requests a plan holds, the product of ``factors`` (each ``(its name as the user gave it, its count)``,
    e.g. ``("prompts", 200), ("--repeats", 10**6)``) plus ``add``'s count; UserError in one line naming every
    factor when it is more than :data:`MAX_PLANNED`. Called before anything loads, starts or is built: a product of
    typo'd counts once held 2e8 requests in memory after the model had loaded."""
    from llmbench.core.errors import UserError

    total = math.prod(max(int(n), 0) for _name, n in factors) + (max(int(add[1]), 0) if add else 0)
    if total > MAX_PLANNED:
        terms = " x ".join(map(_term, factors)) + (f" + {_term(add)}" if add else "")
        raise UserError(f"{terms}: {total:,} {what}, more than a plan holds (at most {MAX_PLANNED:,}); give fewer")
    return total


def _term(factor: tuple[str, int]) -> str:
    name, n = factor
    return f"{name} {n:,}" if name.startswith("--") else f"{n:,} {name}"
