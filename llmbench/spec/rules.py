"""The settings' cross-field rules, written once: the spec applies them when it is made (the CLI, ``--config``,
``--print-config``, ``--config-from``, :func:`llmbench.measure`), and the option types apply the same ones when
the API builds them directly (:meth:`llmbench.options.RunOptions.validate`, ...).

A rule names the settings it reads. A spec applies it when the spec has every one of them (a command without
``--turns`` has no rule about it); the option types hold every setting, so they apply all. A rule either refuses
(one line, the options named as the user types them) or resolves (``--compile`` decodes on the static cache).
``given``: the settings the user set to other than their default (on the command line, in a file, as keywords),
each with its option as typed, for the rules that refuse an option for being given at all; None where that is not
known (an option type built by the API), and those rules find nothing given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from llmbench.core.errors import UserError

Check = Callable[[Mapping[str, Any], "Mapping[str, str] | None"], "str | None"]
_RULES: list[tuple[tuple[str, ...], Check]] = []
_RESOLVERS: list[tuple[tuple[str, ...], Callable[[Mapping[str, Any]], dict[str, Any]]]] = []


def rule(*names: str) -> Callable[[Check], Check]:
    """Register a refusal over ``names``: ``check(values, given)`` returns the one-line reason, or None."""

    def add(check: Check) -> Check:
        _RULES.append((names, check))
        return check

    return add


def check(values: Mapping[str, Any], given: Mapping[str, str] | None = None) -> None:
    """UserError with the first rule ``values`` break (every rule whose settings ``values`` holds). ``given``: the
    settings the user gave, each with its option as typed (``think_time_s``: ``--think-time``)."""
    for names, fn in _RULES:
        if all(n in values for n in names):
            reason = fn(values, given)
            if reason is not None:
                raise UserError(reason)


def resolved(values: Mapping[str, Any]) -> dict[str, Any]:
    """The settings the resolving rules change, by name: what the run is measured with, not what was asked."""
    out: dict[str, Any] = {}
    for names, fn in _RESOLVERS:
        if all(n in values for n in names):
            out.update(fn({**values, **out}))
    return out


def described() -> list[str]:
    """Every rule and resolution, one line each (their docstrings' first sentences): docs/config.md lists them."""
    return [" ".join((fn.__doc__ or "").split()) for _names, fn in [*_RESOLVERS, *_RULES]]


def resolver(*names: str) -> Callable[[Callable[[Mapping[str, Any]], dict[str, Any]]], Any]:
    """Register a resolution over ``names``: ``fn(values)`` returns the settings it sets."""

    def add(fn: Callable[[Mapping[str, Any]], dict[str, Any]]) -> Any:
        _RESOLVERS.append((names, fn))
        return fn

    return add


def _given(given: Mapping[str, str] | None, names: tuple[str, ...]) -> list[str]:
    """The options of ``names`` the user gave, spelled as typed, in ``names``' order."""
    return [given[n] for n in names if given is not None and n in given]


# ------------------------------------------------------------------------------------------------ resolutions


@resolver("compile", "cache")
def _compile_static(v: Mapping[str, Any]) -> dict[str, Any]:
    """`--compile` decodes on the static cache (torch.compile can't trace a growing one)."""
    return {"cache": "static"} if v["compile"] else {}  # torch.compile can't trace a growing cache


@resolver("ignore_eos", "weights")
def _eos_with_random(v: Mapping[str, Any]) -> dict[str, Any]:
    """`--ignore-eos` unset is on with `--weights random` (their text is meaningless: the length is fixed)."""
    # random weights write meaningless text: their length is fixed by --max-new-tokens
    return {"ignore_eos": v["weights"] == "random"} if v["ignore_eos"] is None else {}


# ------------------------------------------------------------------------------------------------ refusals


@rule("think_time_s", "turns")
def _think_time(v: Mapping[str, Any], _given: Mapping[str, str] | None) -> str | None:
    """`--think-time` needs `--turns` 2 or more."""
    if v["think_time_s"] and v["turns"] == 1:
        return "--think-time is the pause between a conversation's turns: give --turns 2 or more"
    return None


@rule("sample", "temperature", "top_p")
def _sampling(v: Mapping[str, Any], _given: Mapping[str, str] | None) -> str | None:
    """`--sample` needs `--temperature` and `--top-p` above 0."""
    if v["sample"] and not v["temperature"] > 0:
        return f"--temperature must be above 0 when sampling, not {v['temperature']}"
    if v["sample"] and not v["top_p"] > 0:
        return f"--top-p must be in (0, 1], not {v['top_p']}"
    return None


@rule("speculative", "prefix_cache", "cache")
def _levers(v: Mapping[str, Any], _given: Mapping[str, str] | None) -> str | None:
    """`--speculative` and `--prefix-cache system` exclude each other, and each needs `--cache dynamic`."""
    from llmbench.core.speculative import parse_prefix_cache, parse_speculative

    spec, prefix = parse_speculative(v["speculative"]), parse_prefix_cache(v["prefix_cache"])
    if spec is not None and prefix != "none":
        # transformers' assisted loop feeds the whole prompt again on top of a given cache (silently wrong)
        return "--speculative and --prefix-cache system can't be combined: measure them apart"
    if (spec is not None or prefix != "none") and v["cache"] != "dynamic":
        return ("--speculative and --prefix-cache need --cache dynamic (a static cache can't be cut back to the "
                "accepted tokens, nor copied per request)")  # fmt: skip
    return None


# run's settings that belong to one mode only (the model's name and the seed serve both): the model section but its
# name, the levers, truncate and chat_template; the server section but its URL, and the arrivals
# (tests/unit/test_spec.py holds them to the sections)
IN_PROCESS_ONLY = ("weights", "engine", "precision", "device", "dtype", "reprobe", "threads", "attn", "quantize",
                   "device_map", "allow_offload", "allow_pickle", "trust_remote_code", "cache", "compile",
                   "speculative", "prefix_cache", "truncate", "chat_template")  # fmt: skip
ENDPOINT_ONLY = ("api_key_env", "timeout_s", "concurrency", "tokenizer", "server_metrics", "metrics_url",
                 "server_command", "boot_timeout_s", "rate", "arrival", "requests", "duration_s", "workers",
                 "ray")  # fmt: skip
_OPEN_LOOP = ("arrival", "requests", "duration_s", "ray")


@rule("endpoint", *IN_PROCESS_ONLY, *ENDPOINT_ONLY)
def _one_mode(v: Mapping[str, Any], given: Mapping[str, str] | None) -> str | None:
    """With `--endpoint`, no option of a model in this process (`--dtype`, `--threads`, the levers, ...); without
    it, no option of a server (`--concurrency`, `--rate`, ...); `--boot-timeout` only with `--server-command`."""
    if v["endpoint"] is not None:
        named = _given(given, IN_PROCESS_ONLY)
        if named:
            return f"{', '.join(named)}: in-process run options only; with --endpoint the server decides them"
        if v["server_command"] is None and (named := _given(given, ("boot_timeout_s",))):
            return f"{named[0]}: the limit of --server-command's start; no server is started"
        return None
    named = _given(given, ENDPOINT_ONLY)
    return f"{', '.join(named)}: options of --endpoint runs only" if named else None


@rule("rate", "trace", *_OPEN_LOOP, "workers")
def _open_loop(v: Mapping[str, Any], given: Mapping[str, str] | None) -> str | None:
    """`--arrival`, `--requests`, `--duration` and `--ray` only with `--rate`; none of them, nor `--workers`,
    with `--trace`."""
    if v["trace"] is not None:
        named = _given(given, (*_OPEN_LOOP[:3], "workers", "ray"))
        return f"{', '.join(named)}: options of --rate, not --trace" if named else None
    if v["rate"] is None:  # --workers splits a closed loop's streams too
        named = _given(given, _OPEN_LOOP)
        return f"{', '.join(named)}: options of an open loop (--rate)" if named else None
    return None


@rule("server_command", "rate", "trace", "concurrency", "metrics_url")
def _server(v: Mapping[str, Any], _given: Mapping[str, str] | None) -> str | None:
    """`--server-command` only with a closed loop; `--metrics-url` an http(s) URL; `--concurrency` only in a
    closed loop."""
    open_loop = v["rate"] is not None or v["trace"] is not None
    if v["server_command"] is not None and open_loop:
        return ("--server-command measures the first request of a closed loop; for an open loop (--rate, --trace) "
                "start the server yourself")  # fmt: skip
    url = v["metrics_url"]
    if url is not None and not str(url).lower().startswith(("http://", "https://")):
        from llmbench.core.redact import redact_url

        return f"--metrics-url must be an http(s) URL, not '{redact_url(str(url))}'"
    if open_loop and v["concurrency"] != 1:
        return "--concurrency is a closed loop's; an open-loop run (--rate) has no limit in flight"
    return None
