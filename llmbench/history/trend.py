"""A metric over time from the history: the series with its intervals, commits on the axis, change points; and
against an anchor (a pinned ref measured side by side with each head by ``ab``), the ratio series that a change
of runner cancels out of, with a budget check for slow creep.

- **Plain series** (``trend METRIC``): the complete results of one machine and one setup (the newest result's,
  unless ``--machine``/``--config`` say; a prefix must name one), each point its ``stat`` with its 95% interval.
  Different machines or setups are never mixed into one line; partial (interrupted) runs are left out.
- **Against an anchor** (``trend METRIC --anchor REF``): each point is an ``ab`` of a head against REF, its value
  the paired change (head over anchor, %) with its interval. Base and head ran on the same runner in the same
  minutes, so the runner's speed cancels: the series moves only with the code, and takes every runner (unless
  ``--machine``), but one setup (``--config``, else the newest result's). When the anchor was moved (an
  ``ab --anchor OLD --move-anchor`` of NEW against OLD), results against NEW are chained onto OLD's index:
  (1 + a)(1 + b) - 1, whenever the move was recorded (``--since`` limits the points, not the chain).
- **The check** (``--check --budget B``): exit 1 when the latest point is significantly above B (its interval's
  low end over it), or when an upward change point left the series at a level significantly above B; a change
  point under the budget is reported, not failed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from llmbench.analysis.changepoints import Change, detect
from llmbench.core.errors import UserError
from llmbench.history.db import History, is_complete

Z95 = 1.96


@dataclass
class Point:
    result_id: int
    created_at: str | None
    commit: str | None
    label: str | None
    value: float
    ci_low: float | None
    ci_high: float | None
    mdc: float | None = None
    anchor: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.result_id,
            "created_at": self.created_at,
            "commit": self.commit,
            "label": self.label,
            "value": self.value,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "mdc_pct": self.mdc,
            "anchor": self.anchor,
        }


@dataclass
class Trend:
    metric: str
    stat: str
    unit: str  # "ms", "tokens/s", "% vs anchor"
    points: list[Point]
    changes: list[Change]
    machine_id: str | None = None
    config_hash: str | None = None
    anchor: str | None = None
    chained: list[str] = field(default_factory=list)  # anchors chained onto the first
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "stat": self.stat,
            "unit": self.unit,
            "machine_id": self.machine_id,
            "config_hash": self.config_hash,
            "anchor": self.anchor,
            "chained_anchors": self.chained,
            "points": [p.as_dict() for p in self.points],
            "changes": [c.as_dict() for c in self.changes],
            "notes": self.notes,
        }


def _se(p: Point) -> float | None:
    if p.ci_low is None or p.ci_high is None:
        return None
    return (p.ci_high - p.ci_low) / (2 * Z95)


def _with_changes(t: Trend) -> Trend:
    values = [p.value for p in t.points]
    labels = [(p.commit or "")[:12] or p.label for p in t.points]
    t.changes = detect(values, labels, point_se=[_se(p) for p in t.points])
    return t


def valid_budget(budget: float) -> float:
    """``--budget``: a finite percentage, at least 0; UserError otherwise (NaN compares false with everything:
    a NaN budget would pass every series)."""
    if not math.isfinite(budget) or budget < 0:
        raise UserError(f"--budget {budget:g}: expected a finite percentage of at least 0 (the allowed slowdown)")
    return budget


def _complete(rows: list[dict[str, Any]], notes: list[str]) -> list[dict[str, Any]]:
    """The complete results of ``rows``; a note for the partial ones left out (their figures are of part of
    the requests)."""
    done = [r for r in rows if is_complete(r.get("extra"))]
    if len(done) < len(rows):
        notes.append(f"{len(rows) - len(done)} partial result(s) left out (interrupted runs)")
    return done


def series(
    h: History,
    metric: str,
    stat: str = "p50",
    *,
    since: str | None = None,
    machine: str | None = None,
    config: str | None = None,
    kinds: tuple[str, ...] = ("run", "sweep", "scan", "load"),
) -> Trend:
    """The plain series of ``metric``'s ``stat`` for one machine and one setup: ``machine``/``config`` (each
    given by its start, which must name one) or the newest result's."""
    mid = h.resolve("machine", machine) if machine is not None else None
    cfg = h.resolve("config", config) if config is not None else None
    notes: list[str] = []
    rows = _complete([r for r in h.list(since=since, machine=mid, config=cfg) if r["kind"] in kinds], notes)
    if not rows:
        raise UserError("the history has no result that matches (see llmbench history list)")
    newest = rows[-1]
    mid, cfg = mid or newest["machine_id"], cfg or newest["config_hash"]
    chosen = [r for r in rows if r["machine_id"] == mid and r["config_hash"] == cfg]
    others = {(r["machine_id"], r["config_hash"]) for r in rows} - {(mid, cfg)}
    if others:
        notes.append(f"{len(others)} other machine/setup series left out (choose with --machine and --config)")
    stats = h.series(metric, stat, [r["id"] for r in chosen])
    points = [
        Point(r["id"], r["created_at"], r["commit"], r["label"], s["value"], s["ci_low"], s["ci_high"])
        for r in chosen
        if (s := stats.get(r["id"])) is not None and s["value"] is not None
    ]
    if not points:
        raise UserError(f"no result of this series has {metric} {stat}")
    unit = "tokens/s" if metric.endswith("_per_s") else ("ms" if metric.endswith("_ms") else "")
    return _with_changes(Trend(metric, stat, unit, points, [], mid, cfg, notes=notes))


def _ab_rows(h: History, anchor: str, machine: str | None, config: str | None) -> list[dict[str, Any]]:
    """Every ab result against ``anchor`` and the anchors chained onto it (by their move records), unfiltered by
    time: a move recorded before --since still links the later anchor's results."""
    rows: list[dict[str, Any]] = []
    todo, seen = [anchor], {anchor}
    while todo:
        found = h.list(kind="ab", anchor=todo.pop(), machine=machine, config=config)
        rows += found
        for r in found:
            nxt = r["head_ref"]
            if (r.get("extra") or {}).get("moves_anchor") and nxt and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return rows


def anchored(
    h: History,
    metric: str,
    stat: str,
    anchor: str,
    *,
    since: str | None = None,
    machine: str | None = None,
    config: str | None = None,
) -> Trend:
    """The series of heads against ``anchor`` (percent change, paired), later anchors chained on: one setup's
    (``config`` or the newest result's; a change of setup is not a change of code), on every runner unless
    ``machine`` says (the pairing cancels the runner)."""
    mid = h.resolve("machine", machine) if machine is not None else None
    cfg = h.resolve("config", config) if config is not None else None
    notes: list[str] = []
    rows = _complete(_ab_rows(h, anchor, mid, cfg), notes)
    if rows and cfg is None:
        cfg = max(rows, key=lambda r: (r["created_at"] or "", r["id"]))["config_hash"]
        others = {r["config_hash"] for r in rows} - {cfg}
        if others:
            notes.append(f"{len(others)} other setup series left out (choose with --config)")
        rows = [r for r in rows if r["config_hash"] == cfg]
    by_anchor: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_anchor.setdefault(r["anchor_ref"], []).append(r)
    points: list[Point] = []
    chained: list[str] = []
    offset = 0.0  # the current anchor's own change against the first, as a fraction
    current: str | None = anchor
    seen = {anchor}
    while current is not None:
        group = by_anchor.get(current, [])
        stats = h.series(metric, stat, [r["id"] for r in group])
        move = None
        for r in group:
            s = stats.get(r["id"])
            if s is None or s["change_pct"] is None:
                continue
            if (r.get("extra") or {}).get("moves_anchor"):
                move = (r, s)
                continue
            if since is not None and (r["created_at"] or "") < since:
                continue
            points.append(_anchored_point(r, s, offset, current))
        current = None
        if move is not None and move[0]["head_ref"] and move[0]["head_ref"] not in seen:
            r, s = move
            offset = (1 + offset) * (1 + s["change_pct"] / 100) - 1
            current = r["head_ref"]
            chained.append(r["head_ref"])
            seen.add(r["head_ref"])
    if not points:
        raise UserError(
            f"the history has no ab result against the anchor {anchor} with {metric} {stat} (record "
            f"one: llmbench ab ... --history URL --anchor {anchor})"
        )
    points.sort(key=lambda p: (p.created_at or "", p.result_id))
    t = Trend(metric, stat, f"% vs {anchor}", points, [], mid, cfg, anchor=anchor, chained=chained, notes=notes)
    return _with_changes(t)


def _anchored_point(r: dict[str, Any], s: dict[str, Any], offset: float, anchor: str) -> Point:
    """An ab result as a point of the first anchor's index: its change chained onto ``offset``."""
    f = (1 + offset) * (1 + s["change_pct"] / 100) - 1
    lo = hi = None
    if s["change_ci_low"] is not None and s["change_ci_high"] is not None:
        lo = ((1 + offset) * (1 + s["change_ci_low"] / 100) - 1) * 100
        hi = ((1 + offset) * (1 + s["change_ci_high"] / 100) - 1) * 100
    return Point(r["id"], r["created_at"], r["head_commit"], r["head_ref"], f * 100, lo, hi, s["mdc_pct"], anchor)


def check(t: Trend, budget: float) -> list[str]:
    """Why the series fails the budget (empty: it passes). Points are percent changes against the anchor."""
    return [text for text, _ in _over_budget(t, budget)]


def bisect_hints(t: Trend, budget: float) -> list[dict[str, Any]]:
    """For each problem :func:`check` finds, the ``llmbench bisect`` that would search its stretch (see
    :func:`_over_budget`); points without a commit give no hint."""
    return [h for _, h in _over_budget(t, budget) if h]


def _over_budget(t: Trend, budget: float) -> list[tuple[str, dict[str, Any]]]:
    """Each problem as (its line, its bisect hint). A change point's stretch runs from two points before it
    (change points land within about two points) to one after, at half its size; the latest head's from the
    newest point clearly under the budget (its interval's top below half of it; else the anchor) to the head,
    at half the budget."""
    valid_budget(budget)
    problems = []
    pts = t.points
    last = pts[-1]
    low = last.ci_low if last.ci_low is not None else last.value
    if low > budget:
        under = [p for p in pts[:-1] if p.ci_high is not None and p.ci_high <= budget / 2]
        problems.append((
            f"the latest head ({last.label or (last.commit or '')[:12]}) is {last.value:+.2f}% "
            f"[{_f(last.ci_low)}, {_f(last.ci_high)}] against {t.anchor}: above the {budget:g}% budget",
            _hint(t, under[-1].commit if under else t.anchor, last.commit, budget / 2),
        ))  # fmt: skip
    for c in t.changes:
        after = pts[c.index :]
        level_low = c.after - Z95 * _level_se(after, c)
        if c.upward and level_low > budget:
            problems.append((
                f"a change point between {c.between[0]} and {c.between[1]}: {c.size:+.2f}% "
                f"[{c.ci_low:+.2f}, {c.ci_high:+.2f}] to {c.after:+.2f}% against {t.anchor}, above the "
                f"{budget:g}% budget",
                _hint(t, pts[max(0, c.index - 2)].commit, pts[min(len(pts) - 1, c.index + 1)].commit, c.size / 2),
            ))  # fmt: skip
    return problems


def _hint(t: Trend, good: str | None, bad: str | None, threshold: float) -> dict[str, Any]:
    threshold = max(threshold, 0.1)  # a budget of 0 still asks bisect for something measurable
    if not good or not bad or good == bad:
        return {}

    def short(ref: str) -> str:  # a full sha shortened; a tag or branch as it is
        return ref[:12] if len(ref) == 40 else ref

    argv = ["llmbench", "bisect", short(good), short(bad), "--metric", t.metric, "--stat", t.stat,
            "--threshold", f"{threshold:.2g}"]  # fmt: skip
    return {"good": good, "bad": bad, "threshold_pct": round(threshold, 2), "argv": argv}


def _level_se(points: list[Point], c: Change) -> float:
    import numpy as np

    values = np.array([p.value for p in points])
    if values.size > 1:
        return float(values.std(ddof=1) / np.sqrt(values.size))
    se = _se(points[0]) if points else None
    return se or abs(c.ci_high - c.size) / Z95


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:+.2f}"
