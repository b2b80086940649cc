"""What must start fast imports nothing heavy: ``import llmbench`` and its names, ``--help``, ``compare --help``,
``prompts``, ``show``, ``compare`` and the endpoint client, each checked in turn in one fresh process (the
imports a process holds only grow, so each step's check covers what ran before it), and the real console
entry's ``--version``. Six child processes once; one now."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llmbench.results.storage import load_run, save_run
from tests.helpers import synthetic_run

HEAVY = ("torch", "transformers", "scipy", "pandas", "matplotlib", "sqlalchemy", "playwright")

STEPS = r"""
import json, sys
HEAVY = set(json.loads(sys.argv[1]))
steps = json.loads(sys.argv[2])

def heavy():
    return sorted({m.split(".")[0] for m in sys.modules} & HEAVY)

import llmbench
assert "pydantic" not in sys.modules, "import llmbench imported pydantic"
assert heavy() == [], ("import llmbench", heavy())
llmbench.compare_runs, llmbench.load_run, llmbench.Run, llmbench.RunOptions, llmbench.Stop
assert heavy() == [], ("llmbench's names", heavy())
assert set(llmbench.__all__) <= set(dir(llmbench))
from llmbench.cli import main
for argv, allowed in steps:
    sys.argv = ["llmbench", *argv]
    try:
        main()
    except SystemExit as e:
        assert e.code in (0, None), (argv, e.code)
    sys.stdout.flush()
    extra = [m for m in heavy() if m not in allowed]
    assert not extra, (argv, extra)
print("\nSTEPS DONE")
"""


@pytest.fixture
def endpoint(tiny_model_dir):
    from llmbench.engines.hf.models import load_model
    from llmbench.options import ModelOptions
    from llmbench.serve import create_app
    from tests.servers import BackgroundServer

    lm = load_model(ModelOptions(model=str(tiny_model_dir), device="cpu", dtype="float32", threads=1))
    with BackgroundServer(create_app(lm, max_queue=2, max_tokens=8)) as url:
        yield url


def test_light_commands_import_nothing_heavy(cli, endpoint, prompt_file, tmp_path):
    a, b, light = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "light.json"
    save_run(synthetic_run(n=40, tokens=16, noise=0.1, seed=1), a)
    save_run(synthetic_run(n=40, tokens=16, noise=0.1, seed=2, tpot_ms=22.0), b)
    steps = [
        (["--help"], []),
        (["compare", "--help"], []),
        (["prompts", "--json"], []),
        (["show", str(a)], []),
        (["compare", str(a), str(b)], []),  # no torch, transformers, scipy or pandas
        # the endpoint client: no torch or transformers (scipy and the rest are not its promise)
        (["run", str(prompt_file), "--endpoint", endpoint, "-o", str(light), "-q"], ["scipy", "pandas", "sqlalchemy"]),
    ]
    r = subprocess.run([sys.executable, "-c", STEPS, json.dumps(HEAVY), json.dumps(steps)], capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0 and "STEPS DONE" in r.stdout, r.stderr[-2000:]
    assert "Usage" in r.stdout and "env_violations" in r.stdout  # --help and prompts spoke
    assert load_run(light).config.mode == "endpoint"
    # --help and compare --help do not even import numpy (~80 ms here): the spec they read names the reader's pace
    # and --help alone imports no command module, no spec and no pydantic: it lists the commands' summaries
    helps = ("import sys\nfrom llmbench.cli import main\nfor argv in (['--help'], ['compare', '--help']):\n"
             "    sys.argv = ['llmbench', *argv]\n    try:\n        main()\n    except SystemExit:\n        pass\n"
             "    print(sorted(m for m in ('pydantic', 'llmbench.spec', 'llmbench.cli.run') if m in sys.modules))\n"
             "print('markdown_it' in sys.modules or 'pygments' in sys.modules)\n"  # rich's, loaded on first use:
             "import rich.markdown, rich.traceback\nprint(type(rich.markdown.Markdown('# x')).__module__, "
             "rich.traceback.Traceback.from_exception.__qualname__)\n"
             "print('numpy' in sys.modules)")  # fmt: skip
    h = subprocess.run([sys.executable, "-c", helps], capture_output=True, text=True, timeout=120)
    assert h.returncode == 0 and h.stdout.strip().endswith("False"), h.stderr[-2000:]
    lines = h.stdout.strip().splitlines()
    said = [x for x in lines if x.startswith("[")]  # after each help's own text
    assert said == ["[]", "['llmbench.spec', 'pydantic']"], said  # compare imports its own spec only
    assert lines[-3:-1] == ["False", "rich.markdown Traceback.from_exception"], lines[-3:]
    v = cli("--version", process=True)  # the real console entry, in a fresh process
    assert v.returncode == 0 and v.stdout.startswith("llmbench ")
