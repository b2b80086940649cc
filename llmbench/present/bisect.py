"""``llmbench bisect``'s answer as lines: every measured commit with its change against GOOD, then the answer."""

from __future__ import annotations

from typing import Any


def _interval(look: dict[str, Any] | None) -> str:
    if not look:
        return "not measured"

    def pct(x: Any) -> str:
        return "?" if x is None else f"{x:+.2f}"

    return f"{pct(look['change_pct'])}% [{pct(look['ci_low'])}, {pct(look['ci_high'])}] over {look['pairs']} pairs"


def bisect_lines(record: dict[str, Any]) -> list[str]:
    """The table of commits (oldest first, GOOD and those never measured left out) and the answer's line."""
    metric = f"{record['metric']} {record['stat']}"
    lines = [f"{metric} against GOOD {record['good'][:12]}, {len(record['commits']) - 1} commits, "
             f"{record['wall_s']:.0f} s:"]  # fmt: skip
    for c in record["commits"][1:]:
        if c["skipped"]:
            lines.append(f"  {c['sha'][:12]} skipped: {c['skipped']}  {c['subject']}")
        elif c["looks"]:
            n = len(c["looks"])
            lines.append(f"  {c['sha'][:12]} {_interval(c['looks'][-1])} ({n} look{'s' * (n > 1)})  {c['subject']}")
    answer = record["answer"] or {"kind": "none", "reason": "not finished"}
    commits = record["commits"]
    kind = answer["kind"]
    if kind == "commit":
        c = commits[answer["first"]]
        own = f"; against its parent {_interval(c['own'][-1])}" if c["own"] else ""
        lines.append(f"first bad commit: {c['sha']} {c['subject']}{own} ({answer['reason']})")
    elif kind in ("stretch", "candidates"):
        a, b = commits[answer["first"]], commits[answer["last"]]
        what = "crept in between" if kind == "stretch" else "is one of (skipped commits hide which)"
        lines.append(f"the change {what} {a['sha'][:12]} and {b['sha'][:12]} "
                     f"({answer['last'] - answer['first'] + 1} commits): {answer['reason']}")  # fmt: skip
    else:
        lines.append(f"nothing to bisect: {answer['reason']}")
    return lines
