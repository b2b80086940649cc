"""A self-contained HTML report of one or more runs: tables, and matplotlib figures inlined as SVG.

No scripts, fonts or images are fetched: the file opens offline. The figures show the shape of the wait
(token timelines, streamed vs all-at-once), the spread of inter-token gaps, TTFT against prompt length
(with an honest caveat when the sample is too small), and, for several runs, their distributions overlaid
with compare's verdict.

Why one module of 700-odd lines (over 600): every figure shares one style, one SVG writer and the hook the layout
check reads (:data:`FIGURE_HOOK`); a figure drawn elsewhere (a load rate's panel among them) could escape the check
that no text covers another.
"""

from __future__ import annotations

import html
import io
import itertools
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from llmbench.present.terminal import SUMMARY_COLUMNS, setup_title, summary_rows
from llmbench.results.schema import Run, Stats

# What the page reads of each request besides RequestScalars' fields (load_run's request_fields): the timelines'
# stamps, the reader panels' texts and offsets, the cold/warm split. A large run's stamps come as numpy views.
REPORT_FIELDS = ("token_times_ms", "text_offsets", "output_text", "cold")

MAX_TIMELINES = 20  # requests drawn in the timeline; more would be a blur
MIN_CORRELATION_N = 30  # below this, a correlation over prompts is not claimed


# Called with every figure just before it is saved (tests collect layout_problems of each figure through it).
FIGURE_HOOK: Callable[[Any], None] | None = None


def _texts(fig) -> list[tuple[str, Any]]:
    """Every piece of text a reader sees in ``fig``: tick labels within the view, axis labels, titles, legend
    entries and titles, annotations and figure texts; (what it is, the Text)."""
    out: list[tuple[str, Any]] = []
    for k, ax in enumerate(fig.get_axes()):
        name = ax.get_title() or ax.get_ylabel() or f"axes {k}"
        for axis, which in ((ax.xaxis, "x"), (ax.yaxis, "y")):
            lo, hi = sorted(axis.get_view_interval())
            span = hi - lo
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                label = tick.label1
                loc = tick.get_loc()
                if (label.get_visible() and tick.get_visible() and label.get_text().strip()
                        and lo - 1e-9 * abs(span) <= loc <= hi + 1e-9 * abs(span)):  # fmt: skip
                    out.append((f"{name}: {which} tick {label.get_text()!r}", label))
            if axis.label.get_visible() and axis.label.get_text():
                out.append((f"{name}: {which} label", axis.label))
        for title in (ax.title, ax._left_title, ax._right_title):
            if title.get_visible() and title.get_text():
                out.append((f"{name}: title", title))
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            out += [(f"{name}: legend {t.get_text()!r}", t) for t in legend.get_texts() if t.get_text()]
            if legend.get_title().get_text():
                out.append((f"{name}: legend title", legend.get_title()))
        out += [(f"{name}: text {t.get_text()!r}", t) for t in ax.texts if t.get_visible() and t.get_text()]
    out += [(f"figure text {t.get_text()!r}", t) for t in fig.texts if t.get_visible() and t.get_text()]
    return out


def layout_problems(fig) -> list[str]:
    """Pairs of texts in ``fig`` whose drawn boxes overlap (more than a pixel each way): a label over a label."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(what, t.get_window_extent(renderer)) for what, t in _texts(fig)]
    problems = []
    for i, (a_name, a) in enumerate(boxes):
        for b_name, b in boxes[i + 1 :]:
            w = min(a.x1, b.x1) - max(a.x0, b.x0)
            h = min(a.y1, b.y1) - max(a.y0, b.y0)
            if w > 1 and h > 1:
                problems.append(f"{a_name} overlaps {b_name}")
    return problems


def _declutter_ticks(ax, axis: str = "x") -> None:
    """Hide tick labels that would overlap the previous one kept (left to right / bottom to top), so an axis
    with many close ticks stays readable whatever the font and size."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ticks = sorted((ax.xaxis if axis == "x" else ax.yaxis).get_major_ticks(), key=lambda t: t.get_loc())
    last = None
    for tick in ticks:
        label = tick.label1
        if not (label.get_visible() and label.get_text()):
            continue
        box = label.get_window_extent(renderer).expanded(1.15, 1.0)
        if last is not None and box.overlaps(last):
            label.set_visible(False)
            continue
        last = box


def _svg(fig) -> str:
    import matplotlib.pyplot as plt

    if FIGURE_HOOK is not None:
        FIGURE_HOOK(fig)
    buf = io.StringIO()
    fig.savefig(
        buf, format="svg", bbox_inches="tight", metadata={"Creator": None, "Date": None, "Format": None, "Type": None}
    )
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg") :]  # drop the XML declaration and DOCTYPE (a URL): inline SVG needs neither
    return re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)


def _pyplot():
    """matplotlib's pyplot, off-screen (Agg), with the report's style."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _figure(width: float = 10.0, height: float = 3.6, ncols: int = 1):
    return _pyplot().subplots(1, ncols, figsize=(width, height))


def timeline_svg(run: Run) -> str:
    """Tokens against time for each request (TTFT marked), and the median request streamed vs all at once."""
    fig, (ax, ax2) = _figure(ncols=2)
    # an answer of tool calls alone has no text (a columns file's stamps are arrays: len, not truth)
    reqs = [r for r in run.requests if len(r.token_times_ms)][:MAX_TIMELINES]
    for r in reqs:
        t = np.asarray(r.token_times_ms) / 1000
        ax.step(t, np.arange(1, len(t) + 1), where="post", lw=0.9, alpha=0.6)
        ax.plot(t[:1], [1], "o", ms=3, color="black")
    ax.set_xlabel("seconds since the request was sent")
    ax.set_ylabel("tokens received")
    texted = sum(1 for r in run.requests if len(r.token_times_ms))
    whose = "requests" if texted == len(run.requests) else f"requests with text ({len(run.requests)} in all)"
    ax.set_title(f"token timeline: {len(reqs)} of {texted} {whose} (dot: first token)")
    texts = [r for r in run.requests if r.ttft_ms is not None] or run.requests
    med = sorted(texts, key=lambda r: r.e2e_ms)[len(texts) // 2]
    ttft, e2e = (med.ttft_ms or med.e2e_ms) / 1000, med.e2e_ms / 1000
    ax2.barh([1], [ttft], color="#d9d9d9", label="waiting, nothing on screen")
    ax2.barh([1], [e2e - ttft], left=[ttft], color="#4c9be8", label="text appearing, token by token")
    ax2.barh([0], [e2e], color="#d9d9d9")
    ax2.plot([e2e], [0], "s", color="#e8684c", label="whole answer at once")
    ax2.set_yticks([0, 1], ["all at once", "streamed"])
    ax2.set_ylabel("how the answer arrives")
    ax2.set_xlabel("seconds since the request was sent")
    ax2.set_title(f"median request: first text at {ttft:.2f} s, not {e2e:.2f} s")
    ax2.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, fontsize=7, frameon=False)
    return _svg(fig)


READER_PANELS = 6  # requests whose reader timeline is drawn: the ones the reader waited on longest


def reader_curves(r: Any, pace: Any) -> dict[str, Any] | None:
    """One request's reader timeline (:mod:`llmbench.results.reader`): visible characters arrived and read against
    seconds since the request was sent, and the waits over the stall limit; None without a visible character. The
    read curve rises at the pace from the first visible character, is flat while the reader waits (caught up:
    read = arrived), and ends when the last character is read."""
    from llmbench.results.reader import STALL_MS, visible_per_event, wait_spans

    times = list(r.token_times_ms)
    chars = visible_per_event(r.output_text, r.text_offsets, len(times))
    if not times or sum(chars) == 0:
        return None
    cps = pace.chars_per_s_for(r.output_text)
    spans = wait_spans(times, chars, cps)
    first = next(t for t, c in zip(times, chars, strict=True) if c > 0)
    read_t, read_c, waited = [first], [0.0], 0.0
    for start, wait in spans:
        done = cps * (start - first - waited) / 1000
        read_t += [start, start + wait]
        read_c += [done, done]
        waited += wait
    total = float(sum(chars))
    read_t.append(first + waited + 1000 * total / cps)
    read_c.append(total)
    return {"arrived": (np.asarray(times) / 1000, np.cumsum(chars)), "read": (np.asarray(read_t) / 1000,
            np.asarray(read_c)), "stalls": [(s / 1000, w / 1000) for s, w in spans if w > STALL_MS]}  # fmt: skip


def reader_svg(run: Run) -> str | None:
    """The shape of the wait as a reader lives it: for the requests the reader waited on longest, visible characters
    arrived (steps) and read at the run's pace (line), each stall over 100 ms shaded; beside them, the share of
    requests at or below each Andes QoE and fluidity index. None for a run without the shape (no tokens)."""
    from llmbench.results.reader import Pace

    if not any(r.andes_qoe is not None for r in run.requests):
        return None
    pace = Pace.of(run.config.reader)
    chosen = sorted(run.requests, key=lambda r: -(r.reader_stall_ms or 0.0))[:READER_PANELS]
    curves = [(r, c) for r in chosen if (c := reader_curves(r, pace)) is not None]
    if not curves:
        return None
    plt = _pyplot()
    cols = min(3, len(curves))
    rows = math.ceil(len(curves) / cols)
    fig = plt.figure(figsize=(10.0, 2.4 * (rows + 1)))
    grid = fig.add_gridspec(rows + 1, cols)
    for k, (r, c) in enumerate(curves):
        ax = fig.add_subplot(grid[k // cols, k % cols])
        t, n = c["arrived"]
        ax.step(t, n, where="post", color="#4c9be8", lw=1.0, label="arrived")
        ax.plot(*c["read"], color="#222", lw=1.0, label="read")
        for start, wait in c["stalls"]:
            ax.axvspan(start, start + wait, color="#e8684c", alpha=0.35, lw=0)
        ax.set_title(f"prompt {r.prompt_index} repeat {r.repeat}: {r.reader_stalls or 0} stalls", fontsize=8)
        ax.set_xlabel("seconds since sent")
        ax.set_ylabel("visible characters")
        if k == 0:
            ax.legend(fontsize=7, frameon=False, loc="upper left")
    dist = fig.add_subplot(grid[rows, :])
    for metric, label in (("andes_qoe", "Andes QoE"), ("fluidity", "fluidity index")):
        v = np.sort([x for r in run.requests if (x := getattr(r, metric)) is not None])
        if v.size:
            dist.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=label)
    dist.set_xlabel("QoE or fluidity (1: never behind the reader)")
    dist.set_ylabel("share at or below")
    dist.legend(fontsize=7, frameon=False, loc="upper left")
    how = (f"{pace.chars_per_s:g} characters/s" if pace.chars_per_s is not None
           else f"{pace.words_per_minute:g} words/min")  # fmt: skip
    fig.suptitle(f"the reader at {how}: arrived vs read, stalls over 100 ms shaded", fontsize=9)
    fig.tight_layout()
    return _svg(fig)


def machine_svg(run: Run) -> str | None:
    """The machine over the run, beside the token timeline: the card's power and SM clock (clock events marked)
    on a GPU; this CPU's busy share and frequency otherwise. None without samples."""
    m = run.machine
    if m is None:
        return None
    fig, (ax, ax2) = _figure(ncols=2, height=3.0)
    if m.gpu_samples:
        t = [x["t_s"] for x in m.gpu_samples]
        ax.plot(t, [x.get("power_w") for x in m.gpu_samples], "-", lw=1, label="power")
        ax.set_ylabel("GPU power, W")
        ax2.plot(t, [x.get("sm_clock_mhz") for x in m.gpu_samples], "-", lw=1, label="SM clock")
        slowed = [x["t_s"] for x in m.gpu_samples if set(x.get("clock_events") or []) & _slowdowns()]
        if slowed:
            ax2.plot(slowed, [min(v for v in (x.get("sm_clock_mhz") for x in m.gpu_samples) if v)] * len(slowed),
                     "v", color="#d62728", ms=4, label="clock event (slowdown)")  # fmt: skip
        ax2.set_ylabel("GPU SM clock, MHz")
    elif m.samples:
        t = [x.t_s for x in m.samples]
        ax.plot(t, [x.cpu_busy_pct for x in m.samples], "-", lw=1, label="whole machine")
        ax.plot(t, [x.own_cpu_pct for x in m.samples], "-", lw=1, label="this process")
        ax.set_ylabel("CPU busy, % of all cores")
        freqs = [x.freq_mhz for x in m.samples]
        if any(freqs):
            ax2.plot(t, freqs, "-", lw=1, label="frequency")
        ax2.set_ylabel("CPU frequency, MHz")
    else:
        import matplotlib.pyplot as plt

        plt.close(fig)
        return None
    for a, title in ((ax, "load over the run"), (ax2, "clock over the run")):
        a.set_xlabel("seconds since measuring started")
        a.set_title(title, fontsize=8)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return _svg(fig)


def _slowdowns() -> set[str]:
    from llmbench.machine.telemetry import SLOWDOWNS

    return SLOWDOWNS


def _pooled_gaps(stamps: list[Any]) -> np.ndarray:
    """Every gap between consecutive stamps of the same request, pooled, written straight into one array (100,000
    requests x 256 tokens: one array of gaps, no copy of the stamps first)."""
    lens = np.fromiter((len(s) for s in stamps), dtype=np.int64, count=len(stamps))
    out = np.empty(int(np.maximum(lens - 1, 0).sum()))
    at = 0
    for s, n in zip(stamps, lens.tolist(), strict=True):
        if n > 1:
            a = np.asarray(s, dtype=float)
            np.subtract(a[1:], a[:-1], out=out[at : at + n - 1])
            at += n - 1
    return out


def itl_svg(runs: list[tuple[str, Run]]) -> str:
    """Histogram of every gap between consecutive tokens (pooled over requests), one outline per run. Gaps of zero
    (the tokens after the first of a speculative bundle, which share its stamp) are drawn apart, as a stem at 0
    with their count, so the bins of the real gaps neither hide nor absorb them."""
    fig, ax = _figure(height=3.0)
    for name, run in runs:
        gaps = _pooled_gaps([r.token_times_ms for r in run.requests])
        if gaps.size:
            zero = int(np.count_nonzero(gaps == 0))
            mid = (gaps.size - 1) // 2
            gaps.partition([mid, gaps.size // 2])  # in place: the median without a copy of 25 million gaps
            label = f"{name} (n={gaps.size}, median {(gaps[mid] + gaps[gaps.size // 2]) / 2:.1f} ms"
            label += f", {zero} zero gaps: bundled tokens)" if zero else ")"
            (line,) = ax.plot([], [])  # the run's colour, for its outline and its stem alike
            colour = line.get_color()
            if gaps.size > zero:
                # numpy counts in blocks, and the outline is drawn from the counts (hist would keep every gap)
                counts, edges = np.histogram(gaps[gaps > 0] if zero else gaps, bins=60)
                ax.stairs(counts, edges, lw=1.2, color=colour, label=label)
            if zero:
                ax.vlines(0, 0, zero, colors=colour, lw=3, label=None if gaps.size > zero else label)
    ax.set_xlabel("inter-token latency, ms (every gap between consecutive tokens)")
    ax.set_ylabel("gaps")
    if ax.get_legend_handles_labels()[0]:  # a run of one-token answers has no gaps to draw
        ax.legend(fontsize=7, frameon=False)
    return _svg(fig)


def _average_ranks(a: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties given the mean of the ranks they span (scipy.stats.rankdata's "average")."""
    _, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return ((ends - counts + 1 + ends) / 2.0)[inverse]


def spearman_rho(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation: Pearson's correlation of the average ranks (as scipy.stats.spearmanr computes
    it; numpy alone, because importing scipy.stats cost a report of a large run more than a second)."""
    return float(np.corrcoef(_average_ranks(np.asarray(x)), _average_ranks(np.asarray(y)))[0, 1])


def correlation_caveat(x: np.ndarray, y: np.ndarray) -> str:
    """Spearman's rho with a 95% interval (Fisher z), and whether the sample can support a claim."""
    n = len(x)
    if n < 4 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return f"n = {n} requests{' with one prompt length' if n >= 4 else ''}: no correlation can be estimated."
    rho = spearman_rho(x, y)
    z, se = math.atanh(max(min(rho, 0.999999), -0.999999)), 1.06 / math.sqrt(n - 3)
    low, high = math.tanh(z - 1.96 * se), math.tanh(z + 1.96 * se)
    text = f"Spearman's rho = {rho:+.2f} (95% CI {low:+.2f} to {high:+.2f}, n = {n} requests)."
    if n < MIN_CORRELATION_N or low <= 0 <= high:
        text += (
            f" With {n} requests{' (fewer than ' + str(MIN_CORRELATION_N) + ')' if n < MIN_CORRELATION_N else ''} "
            "and this interval, the sample can't support a claim that prompt length drives TTFT: "
            "more prompts, or prompts of controlled lengths, are needed."
        )
    return text


def ttft_vs_prompt_svg(runs: list[tuple[str, Run]]) -> tuple[str, list[str]]:
    """TTFT against prompt tokens, one colour per run; returns the SVG and one caveat line per run."""
    fig, ax = _figure(height=3.2)
    caveats = []
    for name, run in runs:
        # endpoint runs may not know the prompt's tokens; an answer of tool calls alone has no TTFT
        known = [r for r in run.requests if r.prompt_tokens is not None and r.ttft_ms is not None]
        x = np.array([r.prompt_tokens for r in known], dtype=float)
        y = np.array([r.ttft_ms for r in known], dtype=float)
        # thousands of markers as vectors make a slow, heavy page: drawn as pixels (still inline) beyond 2,000
        ax.plot(x, y, "o", ms=3.5, alpha=0.7, label=name, rasterized=x.size > 2000)
        caveats.append(f"{name}: {correlation_caveat(x, y)}")
    ax.set_xlabel("prompt tokens (after the chat template)")
    ax.set_ylabel("TTFT, ms")
    ax.legend(fontsize=7, frameon=False)
    return _svg(fig), caveats


def reuse_svg(run: Run) -> str | None:
    """A workload with shared prefixes (a trace, prefix groups, conversations): TTFT of cold and warm requests side
    by side, and TTFT against the share of the prompt the server's cache served; None without that structure."""
    structured = [r for r in run.requests if r.cold is not None]
    told = [r for r in run.requests if r.cached_tokens is not None and r.prompt_tokens]
    if not structured and not told:
        return None
    fig, axes = _figure(ncols=2 if told and structured else 1, height=3.2)
    axes = list(np.atleast_1d(axes))
    ax = axes[0] if structured else None
    ax2 = axes[-1] if told else None
    rng = np.random.default_rng(0)  # jitter only: the points' x is their group
    if ax is not None:
        groups = (("cold", [r for r in structured if r.cold]), ("warm", [r for r in structured if r.cold is False]))
        for x, (_label, group) in enumerate(groups):
            v = np.asarray([r.ttft_ms for r in group if r.ttft_ms is not None], dtype=float)
            if v.size:
                ax.plot(x + rng.uniform(-0.15, 0.15, v.size), v, "o", ms=3, alpha=0.6)
                ax.plot([x - 0.25, x + 0.25], [np.median(v)] * 2, color="black", lw=1.5)
        ax.set_xticks([0, 1], [f"{label} (n={len(g)})" for label, g in groups])
        ax.set_xlim(-0.6, 1.6)
        ax.set_xlabel("cold: the first request of its prefix; warm: the rest")
        ax.set_ylabel("TTFT, ms")
        ax.set_title("TTFT, cold vs warm (bar: median)")
    if ax2 is not None:
        share = np.asarray([(r.cached_tokens or 0) / (r.prompt_tokens or 1) for r in told])
        ax2.plot(share * 100, np.array([r.ttft_ms for r in told], dtype=float), "o", ms=3, alpha=0.6)  # None: a gap
        ax2.set_xlabel("prompt tokens the server's cache served, %")
        ax2.set_ylabel("TTFT, ms")
        ax2.set_title("TTFT against the cached share")
    return _svg(fig)


def distributions_svg(runs: list[tuple[str, Run]]) -> str:
    """Empirical CDFs of TTFT and TPOT per run, overlaid."""
    fig, axes = _figure(ncols=2, height=3.2)
    for ax, metric in zip(axes, ("ttft_ms", "tpot_ms"), strict=True):
        for name, run in runs:
            v = np.sort([getattr(r, metric) for r in run.requests if getattr(r, metric) is not None])
            if v.size:
                ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=name)
        ax.set_xlabel(metric.replace("_ms", "").upper() + ", ms")
        ax.set_ylabel("share of requests at or below")
        ax.legend(fontsize=7, frameon=False)
    return _svg(fig)


def _stats_cells(s: Stats | None, digits: int) -> str:
    if s is None:
        return "<td>-</td>" * len(SUMMARY_COLUMNS)
    return "".join(f"<td>{getattr(s, k):.{digits}f}</td>" for k in SUMMARY_COLUMNS)


def summary_html(name: str, run: Run) -> str:
    """The summary table of one run, with its setup and warnings."""
    c, s = run.config, run.summary
    rows = "".join(
        f"<tr><th>{label}</th>{_stats_cells(stats, digits)}</tr>" for label, stats, digits in summary_rows(run)
    )
    roof = ""
    if s is not None and s.tpot_bound_ms is not None and s.tpot_efficiency is not None:
        roof = (
            f"<p>Roofline: TPOT cannot beat {s.tpot_bound_ms:.1f} ms (weights / "
            f"{s.roofline_mem_read_gbps:.1f} GB/s); efficiency {s.tpot_efficiency:.2f}.</p>"
        )
    warnings = "".join(f"<p class=warn>{html.escape(w)}</p>" for w in run.warnings)
    setup = (
        f"{setup_title(run)} · max_new_tokens {c.max_new_tokens} · {len(run.requests)} requests · "
        f"{'complete' if run.complete else 'INCOMPLETE'} · {run.created_at}"
    )
    return (
        f"<h2>{html.escape(name)}</h2>{warnings}<p>{html.escape(setup)}</p>"
        f"<table><tr><th></th>{''.join(f'<th>{k}</th>' for k in SUMMARY_COLUMNS)}</tr>{rows}</table>{roof}"
    )


def verdicts_html(runs: list[tuple[str, Run]]) -> str:
    """compare's rows that speak (medians, TPOT's gaps) for each run against the first."""
    from llmbench.analysis.compare import compare_runs

    out = ""
    base_name, base = runs[0]
    for name, run in runs[1:]:
        comp = compare_runs(base, run, base_name=base_name, new_name=name)
        rows = "".join(
            f"<tr><th>{html.escape(r.metric)} {r.stat}</th><td>{r.base:.2f}</td><td>{r.new:.2f}</td>"
            f"<td>{r.change_pct:+.1f}%</td><td>{r.ci_low_pct:+.1f}% .. {r.ci_high_pct:+.1f}%</td>"
            f"<td>{r.verdict}</td></tr>"
            for r in comp.rows
            if r.speaks
        )
        notes = "".join(f"<li>{html.escape(n.metric)}: {html.escape(n.explanation)}</li>" for n in comp.machine)
        diffs = "".join(f"<li>setup differs: {html.escape(f'{k}: {b} -> {n}')}</li>" for k, b, n in comp.config_diffs)
        out += (
            f"<h3>{html.escape(base_name)} → {html.escape(name)}"
            f" ({'paired' if comp.paired else 'unpaired'})</h3><ul>{diffs}{notes}</ul>"
            "<table><tr><th>statistic</th><th>base</th><th>new</th><th>change</th><th>95% CI</th><th>verdict</th>"
            f"</tr>{rows}</table>"
        )
    return out


CSS = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .7em;text-align:right;border-bottom:1px solid #ddd}
th:first-child{text-align:left}.warn{color:#b00;font-weight:bold}.caveat{color:#555;font-style:italic}
svg{max-width:100%;height:auto}"""


def build_report(runs: list[tuple[str, Run]]) -> str:
    """The whole HTML document for ``runs`` ((name, run) pairs; the first is the base of comparisons)."""
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>llmbench report</title>"
        f"<style>{CSS}</style></head><body><h1>llmbench report</h1>"
    ]
    parts.append(
        "<p>TTFT: time to the first token. TPOT: (last - first token) / (tokens - 1) per request. "
        "ITL: every gap between consecutive tokens. E2E: the request's last token.</p>"
    )
    from llmbench.present.summary import detail_lines, workload_lines

    for name, run in runs:
        parts.append(summary_html(name, run))
        parts += [f"<p>{html.escape(line)}</p>" for line in workload_lines(run)]
        parts.append(timeline_svg(run))
        if (reader := reader_svg(run)) is not None:
            parts.append(reader)
        if (reuse := reuse_svg(run)) is not None:
            parts.append(reuse)
        machine = machine_svg(run)
        if machine is not None:
            parts.append(machine)
        parts += [f"<p>{html.escape(line)}</p>" for line in detail_lines(run)]
    parts.append("<h2>Inter-token latency</h2>" + itl_svg(runs))
    svg, caveats = ttft_vs_prompt_svg(runs)
    parts.append("<h2>TTFT against prompt length</h2>" + svg)
    parts += [f"<p class=caveat>{html.escape(c)}</p>" for c in caveats]
    if len(runs) > 1:
        parts.append("<h2>Distributions and compare's verdict</h2>" + distributions_svg(runs) + verdicts_html(runs))
    parts.append("</body></html>")
    return "\n".join(parts)


def build_scan_report(record: dict) -> str:
    """The HTML of a scan: TTFT against prompt length, TPOT against depth, throughput against batch, with the
    fits and the roofline drawn beside the measurements."""
    from llmbench.present.terminal import scan_lines

    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>llmbench scan</title>"
        f"<style>{CSS}</style></head><body><h1>llmbench scan</h1>"
    ]
    parts += [f"<p>{html.escape(line)}</p>" for line in scan_lines(record)]
    points = {k: [p for p in record["points"] if p["kind"] == k and p.get("ttft_ms_mean") is not None]
              for k in ("length", "depth", "batch")}  # fmt: skip
    fits = record["fits"]
    if points["length"]:
        fig, ax = _figure(height=3.4)
        x = np.array([p["prompt_tokens"] for p in points["length"]], dtype=float)
        ax.plot(x, [p["ttft_ms_mean"] for p in points["length"]], "o", label="measured (mean)")
        f = fits.get("length")
        if f:
            grid = np.linspace(0, x.max(), 200)
            ax.plot(grid, f["a_ms"] + f["b_ms_per_token"] * grid + f["c_ms_per_token2"] * grid**2, "-",
                    label=f"fit a + bL + cL\u00b2, R\u00b2 {f['r2']:.3f}")  # fmt: skip
        ax.set_xlabel("prompt tokens")
        ax.set_ylabel("TTFT, ms")
        ax.legend(fontsize=7, frameon=False)
        parts.append("<h2>TTFT against prompt length</h2>" + _svg(fig))
    if points["depth"]:
        fig, ax = _figure(height=3.4)
        x = np.array([p["prompt_tokens"] for p in points["depth"]], dtype=float)
        ax.plot(x, [p["tpot_ms_mean"] for p in points["depth"]], "o", label="measured (mean)")
        f = fits.get("depth")
        if f:
            ax.plot(x, f["t0_ms"] + f["k_ms_per_token"] * x, "-", label=f"fit t0 + kD, R\u00b2 {f['r2']:.3f}")
            if f["roofline_tpot_ms"]:
                d = np.array([float(k) for k in f["roofline_tpot_ms"]])
                ax.plot(d, list(f["roofline_tpot_ms"].values()), "--", label="roofline: weights + KV cache read")
        ax.set_xlabel("context tokens before decoding")
        ax.set_ylabel("TPOT, ms")
        ax.legend(fontsize=7, frameon=False)
        parts.append("<h2>TPOT against context depth</h2>" + _svg(fig))
    f = fits.get("batch")
    if f:
        fig, ax = _figure(height=3.4)
        b = [r["batch"] for r in f["table"]]
        ax.plot(b, [r["aggregate_decode_tokens_per_s"] for r in f["table"]], "o-", label="measured")
        roof = [r["roofline_aggregate_tokens_per_s"] for r in f["table"]]
        if all(v is not None for v in roof):
            ax.plot(b, roof, "--", label="roofline: weights once + B x KV per step")
        ax.set_xlabel("batch (sequences per generate() call)")
        ax.set_ylabel("decode tokens/s, all sequences")
        ax.legend(fontsize=7, frameon=False)
        parts.append("<h2>Throughput against batch size</h2>" + _svg(fig))
    parts.append("</body></html>")
    return "\n".join(parts)


def _rate_axis(ax, rates: list[float]) -> None:
    """An offered-rate axis: log scale, the offered rates themselves as ticks (plain numbers, no minor labels),
    thinned where two would overlap."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(sorted(set(rates))))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    lo, hi = min(rates), max(rates)
    ax.set_xlim(lo / 1.35, hi * 1.35)
    ax.set_xlabel("offered rate, requests/s (log)")


def load_figure(records: list[tuple[str, dict]]):
    """TTFT and TPOT percentiles and goodput against the offered rate: SLO limits and the saturation point
    labelled, the "offered" reference the diagonal y = x (what a server that keeps up achieves)."""
    fig, axes = _figure(width=11.0, height=3.8, ncols=3)
    all_rates = sorted({r["offered_rate_rps"] for _, rec in records for r in rec["rates"]})
    for k, (name, record) in enumerate(records):
        rows = sorted(record["rates"], key=lambda r: r["offered_rate_rps"])
        x = [r["offered_rate_rps"] for r in rows]
        color = f"C{k}"
        tag = f" ({name})" if len(records) > 1 else ""
        for ax, metric in ((axes[0], "ttft_ms"), (axes[1], "tpot_ms")):
            for stat, style in (("p50", "o-"), ("p90", "s--"), ("p99", "^:")):
                y = [r[metric][stat] if r[metric] else np.nan for r in rows]
                ax.plot(x, y, style, color=color, ms=3, lw=1, label=f"{stat}{tag}")
            for slo in record["slos"]:
                if slo["metric"] == metric and k == 0:
                    ax.axhline(slo["limit"], color="#888888", lw=0.9, ls="-.", label=f"SLO: {slo['text']}")
        axes[2].plot(x, [r["goodput_rps"] for r in rows], "o-", color=color, ms=3, label=f"goodput{tag}")
        axes[2].plot(x, [r["achieved_rate_rps"] or np.nan for r in rows], "x:", color=color, ms=4,
                     label=f"achieved{tag}")  # fmt: skip
        sat = record["saturation"]["rate_rps"]
        if sat is not None:
            for ax in axes:
                ax.axvline(sat, color=color, lw=0.9, ls="--", label=f"saturation {sat:g}/s{tag}")
    axes[2].plot(all_rates, all_rates, "-", color="#888888", lw=0.8, label="offered (y = x)")
    for ax, title, ylabel in ((axes[0], "TTFT percentiles", "TTFT, ms"), (axes[1], "TPOT percentiles", "TPOT, ms"),
                              (axes[2], "goodput and achieved rate", "requests/s")):  # fmt: skip
        _rate_axis(ax, all_rates)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=8)
        ax.legend(fontsize=6, frameon=False, loc="upper left")
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axes[2].set_yscale("log")
    axes[2].yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axes[2].yaxis.set_minor_formatter(NullFormatter())
    fig.tight_layout()
    for ax in axes:
        _declutter_ticks(ax, "x")
    return fig


MAX_RATE_PANELS = 9  # rates drawn over their run, the highest first: past that a page of small panels is a blur


def rate_timelines_figure(record: dict, runs: dict[float, tuple[Any, Any]]):
    """Each rate over its own run (the highest :data:`MAX_RATE_PANELS`): every finished request's TTFT against its
    send time (probes, ``--probe-rate``, apart), the requests in flight on the right axis, the steady-state window
    shaded, and where the over-saturation stop ended the rate (with its reason) and the unfinished it dropped."""
    from llmbench.analysis.steady import life_concurrency

    rows = sorted((r for r in record["rates"] if r["offered_rate_rps"] in runs),
                  key=lambda r: -r["offered_rate_rps"])[:MAX_RATE_PANELS]  # fmt: skip
    rows.sort(key=lambda r: r["offered_rate_rps"])
    ncols = min(3, len(rows))
    nrows = -(-len(rows) // ncols)
    fig, axes = _pyplot().subplots(nrows, ncols, figsize=(11.0, 3.0 * nrows), squeeze=False)
    for ax in axes.flat[len(rows) :]:
        ax.set_visible(False)
    for ax, row in zip(axes.flat, rows, strict=False):
        run, probes = runs[row["offered_rate_rps"]]
        timed = [r for r in run.requests if r.scheduled_s is not None and r.send_lateness_ms is not None
                 and r.e2e_from_schedule_ms is not None]  # fmt: skip
        send = np.array([r.scheduled_s + r.send_lateness_ms / 1000 for r in timed])
        end = np.array([r.scheduled_s + r.e2e_from_schedule_ms / 1000 for r in timed])
        stopped = row.get("stopped")
        if stopped:  # the requests the stop dropped were in flight from their due time until it
            cut = [f.scheduled_s for f in run.failed_requests if f.error.startswith("unfinished:")
                   and f.scheduled_s is not None]  # fmt: skip
            every_send = np.concatenate([send, cut])
            every_end = np.concatenate([end, np.full(len(cut), stopped["at_s"])])
        else:
            every_send, every_end = send, end
        # an answer of tool calls alone has no TTFT: NaN, not drawn
        ax.plot(send, np.array([r.ttft_ms for r in timed], dtype=float), ".", ms=2, color="C0", alpha=0.6,
                label="TTFT, load")  # fmt: skip
        if probes is not None and probes.requests:
            ax.plot([r.scheduled_s for r in probes.requests], np.array([r.ttft_ms for r in probes.requests],
                    dtype=float), "D", ms=3.5, color="C3", label="TTFT, probe")  # fmt: skip
        ax.set_yscale("log")
        ax.set_xlabel("send time, s")
        ax.set_ylabel("TTFT, ms (log)")
        window = (row.get("steady") or {}).get("window") or {}
        if window and not str(window.get("method", "")).startswith("whole run"):
            ax.axvspan(window["start_s"], window["end_s"], color="#2ca02c", alpha=0.12,
                       label=f"steady window ({window['share']:.0%})")  # fmt: skip
        if stopped:
            ax.axvline(stopped["at_s"], color="#d62728", lw=1.2, ls="--",
                       label=f"stopped at {stopped['at_s']:.1f} s: {stopped['reason'].split(':')[0]}")  # fmt: skip
        if every_send.size:
            order = np.argsort(every_send)
            ax2 = ax.twinx()
            ax2.plot(every_send[order], life_concurrency(every_send, every_end)[order], "-", lw=0.8, color="#7f7f7f",
                     label="in flight (over each life)")  # fmt: skip
            ax2.set_ylabel("requests in flight", fontsize=7)
            ax2.spines["right"].set_visible(True)
        ax.set_title(f"{row['offered_rate_rps']:g}/s: {row.get('verdict') or ''}", fontsize=8)
        if ax.get_legend_handles_labels()[0]:  # a rate whose every request was refused draws nothing to name
            ax.legend(fontsize=6, frameon=True, framealpha=0.8, loc="best")
    fig.tight_layout()
    return fig


def build_load_report(
    records: list[tuple[str, dict]], runs: dict[str, dict[float, tuple[Any, Any]]] | None = None
) -> str:
    """The HTML of one or more load tests: TTFT and TPOT percentiles and goodput against the offered rate, the
    saturation point marked (several files: overlaid, the first is the base); with ``runs`` (per record's name,
    each rate's run and probes: :func:`llmbench.results.storage.rate_runs`), each rate over its run
    (:func:`rate_timelines_figure`)."""
    from llmbench.present.terminal import load_lines

    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>llmbench load</title>"
        f"<style>{CSS}</style></head><body><h1>llmbench load</h1>"
    ]
    for name, record in records:
        parts.append(f"<h2>{html.escape(name)}</h2>")
        parts += [f"<p>{html.escape(line)}</p>" for line in load_lines(record)]
    parts.append("<h2>Latency and goodput against offered rate</h2>" + _svg(load_figure(records)))
    for name, record in records:
        if rates := (runs or {}).get(name):
            parts.append(f"<h2>Each rate over its run{html.escape(f': {name}' if len(records) > 1 else '')}</h2>"
                         "<p>TTFT of each request at its send time (probes apart), the requests in flight, the "
                         "steady-state window shaded, and where the over-saturation stop ended a rate.</p>"
                         + _svg(rate_timelines_figure(record, rates)))  # fmt: skip
    parts.append("</body></html>")
    return "\n".join(parts)


def trend_svg(trend, budget: float | None = None) -> str:
    """The series with its 95% intervals, one point per result in time order, commits on the axis; each level
    between change points drawn as a segment, and (against an anchor) the budget as a line."""
    fig, ax = _figure(10.0, 4.0)
    pts = trend.points
    x = np.arange(len(pts))
    y = np.array([p.value for p in pts])
    lo = np.array([p.value - p.ci_low if p.ci_low is not None else 0.0 for p in pts])
    hi = np.array([p.ci_high - p.value if p.ci_high is not None else 0.0 for p in pts])
    ax.errorbar(x, y, yerr=[lo, hi], fmt="o", ms=4, capsize=2, lw=1, color="#1f77b4", label="result, 95% CI")
    bounds = [0, *[c.index for c in trend.changes], len(pts)]
    for k, (a, b) in enumerate(itertools.pairwise(bounds)):
        ax.hlines(y[a:b].mean(), a - 0.4, b - 0.6, colors="#d62728", lw=2, label="level between change points"
                  if k == 0 else None)  # fmt: skip
    for c in trend.changes:
        ax.axvline(c.index - 0.5, color="#d62728", ls=":", lw=1)
    if trend.changes:  # the sizes go in the legend, not over the points
        ax.plot([], [], ":", color="#d62728", lw=1, label="change points: " + ", ".join(
            f"{c.size:+.2f} at {i}" for c in trend.changes for i in [c.index]))  # fmt: skip
    if budget is not None:
        ax.axhline(budget, color="#ff7f0e", ls="--", lw=1, label=f"budget {budget:g}%")
        ax.axhline(0, color="#7f7f7f", lw=0.8)
    labels = [(p.commit or "")[:7] or str(p.label or i) for i, p in enumerate(pts)]
    ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=7)
    ax.set_xlabel("result (commit), oldest first")
    ax.set_ylabel(f"{trend.metric} {trend.stat} ({trend.unit})")
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    fig.tight_layout()
    _declutter_ticks(ax, "x")  # commits too close to label each: every other, or fewer
    return _svg(fig)


def build_trend_report(trend, budget: float | None = None) -> str:
    """The trend page: the series, its change points in words and the points as a table."""
    title = f"{trend.metric} {trend.stat}" + (f" against {trend.anchor}" if trend.anchor else "")
    parts = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>llmbench trend: {html.escape(title)}"
             f"</title><style>{CSS}</style></head><body><h1>Trend: {html.escape(title)}</h1>"]  # fmt: skip
    chained = f" (chained: {', '.join(trend.chained)})" if trend.chained else ""
    where = (f"machine {trend.machine_id}, setup {trend.config_hash}" if trend.machine_id else
             f"ab results against {trend.anchor}{chained}")  # fmt: skip
    parts.append(f"<p>{len(trend.points)} results, {html.escape(where)}. Change points: PELT (ruptures) with a "
                 "penalty from the series' own noise; each with its size and 95% interval.</p>")  # fmt: skip
    parts.append(trend_svg(trend, budget))
    if trend.changes:
        items = "".join(f"<li>between {html.escape(str(c.between[0]))} and {html.escape(str(c.between[1]))}: "
                        f"{c.before:.3f} &rarr; {c.after:.3f} ({c.size:+.3f} {html.escape(trend.unit)}, "
                        f"95% CI [{c.ci_low:+.3f}, {c.ci_high:+.3f}])</li>" for c in trend.changes)  # fmt: skip
        parts.append(f"<h2>Change points</h2><ul>{items}</ul>")
    else:
        parts.append("<p>No change point.</p>")
    rows = "".join(f"<tr><td>{i}</td><td>{html.escape(str(p.created_at or '')[:19])}</td>"
                   f"<td>{html.escape((p.commit or '')[:12])}</td><td>{html.escape(str(p.label or ''))}</td>"
                   f"<td>{p.value:.3f}</td><td>{'' if p.ci_low is None else f'{p.ci_low:.3f} .. {p.ci_high:.3f}'}"
                   f"</td></tr>" for i, p in enumerate(trend.points))  # fmt: skip
    parts.append("<h2>Results</h2><table><tr><th>#</th><th>measured</th><th>commit</th><th>ref/label</th>"
                 f"<th>value</th><th>95% CI</th></tr>{rows}</table></body></html>")  # fmt: skip
    return "\n".join(parts)
