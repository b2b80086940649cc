"""A run's summary, composed once: its table, what it sent (the workload and open-loop lines), and what it cost
(cost, cache, server and, for a saved run, machine lines). ``run``, ``show`` and the HTML report all show it."""

from __future__ import annotations

from typing import Any

from llmbench.present import terminal as display


def workload_lines(run: Any) -> list[str]:
    """What the run sent: its dataset or synthetic workload, and its open loop (none for a plain closed loop)."""
    return [line for line in (display.workload_line(run.config), display.open_loop_line(run)) if line is not None]


def _s(x: Any) -> str:
    return "-" if x is None else f"{x:.1f} s" if x >= 10 else f"{x:.2f} s"


def cold_start_line(run: Any) -> str | None:
    """The cold start in one line: ready after the process started, the load's phases, the warm-up and the
    first request's TTFT after loading (None without a load record)."""
    from llmbench.results.metrics import cold_start

    c = cold_start(run)
    if c is None:
        return None
    names = (("before_load_s", "before the load"), ("locate_s", "locate"),
             ("config_tokenizer_s", "config+tokenizer"), ("model_code_s", "model code"), ("files_s", "engine files"),
             ("engine_import_s", "engine import"), ("weights_s", "weights"), ("build_s", "build"),
             ("quantize_s", "quantize"), ("compile_s", "compile"))  # fmt: skip
    parts = [f"{label} {_s(c[k])}" for k, label in names if c.get(k) is not None]
    if c.get("convert_s") is not None:
        parts.append(f"convert {_s(c['convert_s'])}{' (cached)' if c.get('convert_cached') else ''}")
    if c.get("warmup_s") is not None:
        parts.append(f"warm-up {_s(c['warmup_s'])}")
    first = c.get("first_ttft_ms")
    ttft = (f"; the first request's TTFT {first:.0f} ms (measured p50 {c['ttft_p50_ms']:.0f} ms)"
            if first is not None and c.get("ttft_p50_ms") is not None else "")  # fmt: skip
    ready = f"ready {_s(c['ready_s'])} after the process started" if c.get("ready_s") is not None else "loaded"
    detail = f": {', '.join(parts)}" if parts else ""  # a run from before 0.3.0 has no phases
    return f"cold start: {ready} (load {_s(c['load_s'])}{detail}){ttft}"


def server_boot_line(run: Any) -> str | None:
    """A server's cold start (``--server-command``) in one line: from its exec to listening, ready and the first
    token, and its first request's TTFT against the warm median (None without one)."""
    b = getattr(run, "server_boot", None)
    if b is None:
        return None
    first = f", first token {b.exec_to_first_token_s:.2f} s" if b.exec_to_first_token_s is not None else ""
    line = (f"server cold start ({b.program}, polled every {b.poll_s * 1000:g} ms): listening "
            f"{b.exec_to_listening_s:.2f} s, ready {b.exec_to_ready_s:.2f} s{first} after its exec")  # fmt: skip
    if b.first_request_ttft_ms is not None:
        line += f"; the first request's TTFT {b.first_request_ttft_ms:.0f} ms"
        if b.first_request_penalty_ms is not None:
            line += (f" (warm p50 {b.warm_ttft_p50_ms:.0f} ms over {b.warm_requests}: "
                     f"{b.first_request_penalty_ms:+.0f} ms)")  # fmt: skip
    return line


def _share(s: Any) -> str:
    return f"{s.k} of {s.n} ({s.share:.0%}, 95% CI {s.low:.0%}-{s.high:.0%})"


def agent_lines(run: Any) -> list[str]:
    """What a program waited for: tool calls and their arguments' validity, structured output, a constraint's first
    use against its later uses, and agent tasks split into model and tool time (none without them)."""
    s = run.summary
    if s is None:
        return []
    lines = []
    if s.tool_answers is not None:
        line = f"tool calls: {_share(s.tool_answers)} answers called a tool"
        if s.tool_args_valid is not None and s.tool_args_valid.n:
            line += f"; arguments valid in {_share(s.tool_args_valid)}"
        if s.tool_calls_per_answer is not None:
            line += f"; {s.tool_calls_per_answer.mean:.2f} calls an answer"
        lines.append(line)
    if s.output_valid is not None:
        lines.append(f"structured output: {_share(s.output_valid)} answers match their schema")
    if s.constraint_first_use_ms is not None or s.constraint_reuse_ms is not None:
        parts = [f"{name} p50 {st.p50:.1f} ms (n={st.n})" for name, st in (("first use", s.constraint_first_use_ms),
                 ("later uses", s.constraint_reuse_ms)) if st is not None]  # fmt: skip
        lines.append(
            "a constraint's first answer event: "
            + ", ".join(parts)
            + ("" if s.constraint_first_use_ms is not None else " (warm-ups sent every constraint first: --warmup 0)")
        )
    t = s.tasks
    if t is not None and t.e2e_ms is not None and t.model_ms is not None and t.tool_ms is not None:
        share = f" (model {t.model_share:.0%})" if t.model_share is not None else ""
        line = (f"agent tasks: {t.tasks} whole ({t.tasks_partial} partial, {t.ended_by_answer} ended by an answer), "
                f"{t.steps.mean if t.steps else 0:.1f} steps; end to end mean {t.e2e_ms.mean:.0f} ms = model "
                f"{t.model_ms.mean:.0f} + tool {t.tool_ms.mean:.0f}{share}")  # fmt: skip
        if t.model_first_event_ms is not None:
            line += (
                f"; the model's part: first events {t.model_first_event_ms.mean:.0f} ms, the rest (decoding) "
                f"{t.model_ms.mean - t.model_first_event_ms.mean:.0f} ms"
            )
        if t.cached_tokens_share_later_steps is not None:
            line += f"; later steps' prompt tokens cached {t.cached_tokens_share_later_steps:.0%}"
        lines.append(line)
    return lines


def detail_lines(run: Any, *, machine: bool = False) -> list[str]:
    """What the run cost, its cold start, and what the server and its cache said; with ``machine``, the
    machine's record too."""
    cold = cold_start_line(run) or server_boot_line(run)
    lines = display.lever_lines(run) + display.cost_lines(run) + ([cold] if cold else []) + display.cache_lines(run)
    lines += display.server_lines(run)
    return lines + display.machine_lines(run) if machine else lines


def summary_lines(run: Any, *, machine: bool = False) -> list[str]:
    """Every line under the summary table, in the order they are shown."""
    return workload_lines(run) + agent_lines(run) + detail_lines(run, machine=machine)


def print_summary(run: Any, *, machine: bool = False) -> None:
    """The summary table and its lines, on stdout."""
    display.out.print(display.summary_table(run))
    for line in summary_lines(run, machine=machine):
        display.out.print(line, markup=False, soft_wrap=True)
