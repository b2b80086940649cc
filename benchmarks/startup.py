"""The commands a user types most start fast: ``--help``, ``compare --help`` and ``show`` of a small run, timed in
fresh processes, interleaved with another checkout of llmbench (the code before a change) on the same machine.

Both trees (and site-packages) are compiled to bytecode first and the processes run with bytecode writes allowed:
this machine sets ``PYTHONDONTWRITEBYTECODE=1``, which would add the compile of every changed module to each
start. Each round runs every command once with each tree, alternating which goes first.

    python benchmarks/startup.py --old /tmp/llmbench-before [--rounds 5]

Target (issue 60): every command under 0.25 s, median of 5, on this project's 2-core machine.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TARGET_S = 0.25


# ``python -m llmbench`` with llmbench imported from the tree given (the editable install's finder, which would
# otherwise answer first whatever PYTHONPATH says, is left out): the same start for both trees
START = (
    "import runpy, sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in str(f)]; "
    "sys.path.insert(0, sys.argv.pop(1)); runpy.run_module('llmbench', run_name='__main__', alter_sys=True)"
)


def once(tree: Path, argv: list[str]) -> float:
    """Seconds ``python -m llmbench ARGV`` takes with llmbench imported from ``tree``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", START, str(tree), *argv], capture_output=True, text=True, env=env)
    took = time.perf_counter() - t
    assert r.returncode == 0, (tree, argv, r.stderr)
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", type=Path, help="another checkout of llmbench to interleave with (the code before)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    from llmbench import save_run
    from tests.helpers import synthetic_run

    trees = {"now": ROOT, **({"old": args.old.resolve()} if args.old else {})}
    for tree in [*trees.values(), Path(sysconfig.get_paths()["purelib"])]:
        compileall.compile_dir(tree / "llmbench" if (tree / "llmbench").is_dir() else tree, quiet=2, workers=0)
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "small.json"
        save_run(synthetic_run(n=20, tokens=32, noise=0.1), small)
        commands = {"--help": ["--help"], "compare --help": ["compare", "--help"], "show (20 requests)":
                    ["show", str(small)]}  # fmt: skip
        for name in trees:  # a first start of each (the page cache), not counted
            for argv in commands.values():
                once(trees[name], argv)
        took: dict[tuple[str, str], list[float]] = {}
        for k in range(args.rounds):
            order = list(trees) if k % 2 == 0 else list(reversed(trees))
            for command, argv in commands.items():
                for name in order:
                    took.setdefault((command, name), []).append(once(trees[name], argv))
    print(f"{args.rounds} rounds, median (best) seconds, {sys.platform}, Python {sys.version.split()[0]}\n")
    print("| command | " + " | ".join(trees) + f" | target | met |\n|---|{'---|' * len(trees)}---|---|")
    for command in commands:
        cells = [f"{statistics.median(took[command, n]):.3f} ({min(took[command, n]):.3f})" for n in trees]
        met = "yes" if statistics.median(took[command, "now"]) < TARGET_S else "no"
        print(f"| `llmbench {command}` | " + " | ".join(cells) + f" | {TARGET_S} s | {met} |")


if __name__ == "__main__":
    main()
