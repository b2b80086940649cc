"""``llmbench bisect`` and ``bisect-step`` on a real git repository the tests make: this project's package copied
in, a few commits, one of which makes every model forward 5 ms slower (a ``sitecustomize.py`` at the tree's root,
which the worker, run with the tree first on its path, imports at start-up: a real code change, found only by
measuring), and one whose pyproject.toml asks for a package that can't be installed (skipped, with pip's words).
The search itself, against a simulated measurer with known truth, is tests/unit/test_bisect_rule.py."""

from __future__ import annotations

import json

from tests.bisect_repo import scratch


def test_bad_inputs_are_one_line(cli, tmp_path):
    repo, shas = scratch(tmp_path, ["ok"])
    cases = [
        (("bisect", shas[1], shas[0], "--repo", repo), "is not an ancestor of"),
        (("bisect", shas[0], shas[0], "--repo", repo), "nothing to bisect"),
        (("bisect", "no-such-ref", shas[1], "--repo", repo), "git rev-parse"),
        (("bisect", shas[0], shas[1], "--repo", repo, "--threshold", "nan"), "--threshold must be"),
        (("bisect", shas[0], shas[1], "--repo", repo, "--threshold", "-1"), "--threshold must be"),
        (("bisect", shas[0], shas[1], "--repo", repo, "--max-looks", "0"), "--max-looks must be"),
        (("bisect", shas[0], shas[1], "--repo", repo, "--metric", "speed"), "--metric 'speed'"),
        (("bisect", shas[0], shas[1], "--repo", repo, "--look", "0s"), "--look '0s'"),
        (("bisect", shas[0], shas[1], "--repo", repo, "--resume", "-o", tmp_path / "none"), "--resume goes on"),
    ]
    other = tmp_path / "other"
    other.mkdir()
    record = {"bisect_version": 1, "good": "0" * 40, "bad": "1" * 40, "metric": "tpot_ms", "stat": "gaps",
              "threshold_pct": 2.0}  # fmt: skip
    (other / "bisect.json").write_text(json.dumps(record))
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "bisect.json").write_text('{"bisect_version": 1, "good": ')
    cases += [
        (("bisect", shas[0], shas[1], "--repo", repo, "--resume", "-o", other), "holds a bisect of 000000000000"),
        (("bisect", shas[0], shas[1], "--repo", repo, "--resume", "-o", cut), "can't be read"),
    ]
    for args, said in cases:
        r = cli(*args)
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
    # bisect-step's errors abort git bisect run (128), never read as "bad"
    r = cli("bisect-step", "no-such-ref", cwd=repo)
    assert r.returncode == 128 and "llmbench: error:" in r.stderr


def test_git_bisect_run_with_a_typod_option_aborts_and_names_no_commit(tmp_path):
    """Issue 44: `git bisect run llmbench bisect-step GOOD --threshhold 2` exited 2 (the option parser's), which git
    reads as "bad": it walked to the first commit after GOOD and named it "the first bad commit", nothing measured.
    Every failure of bisect-step now exits 128, and git aborts the bisect."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from tests.bisect_repo import commit, git

    repo = tmp_path / "plain"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = [commit(repo, f"c{i}", {f"f{i}.txt": f"{i}\n"}) for i in range(5)]
    llmbench = shutil.which("llmbench", path=str(Path(sys.executable).parent))
    assert llmbench is not None
    git(repo, "bisect", "start", shas[-1], shas[0])
    for typo in (["--threshhold", "2"], ["--threshold", "abc"], ["--processes", "0"]):
        r = subprocess.run(["git", "-C", str(repo), "bisect", "run", llmbench, "bisect-step", shas[0], *typo],
                           capture_output=True, text=True)  # fmt: skip
        said = r.stdout + r.stderr
        assert r.returncode != 0 and "is the first bad commit" not in said, said
        assert "exit code 128" in said or "cannot continue" in said or "128" in said, said
        assert "llmbench: error:" in said and "Traceback" not in said
    git(repo, "bisect", "reset")
