"""What a failed command leaves behind: an ab whose sides can't start leaves no empty folder (its -o, or
results/ab-<time> and results/) in the user's tree; a folder that existed, or one holding any file, is kept."""

from pathlib import Path

import pytest

from llmbench.results.storage import claim, lock_path, tidied_on_failure


def test_folders_a_failure_left_empty_are_removed_innermost_first(tmp_path):
    outer, inner = tmp_path / "deep", tmp_path / "deep" / "ab"
    inner.mkdir(parents=True)
    claim(inner / "base.json")
    assert lock_path(inner / "base.json").exists()
    with pytest.raises(RuntimeError), tidied_on_failure([inner, outer], ("base.json",)):
        raise RuntimeError("a side could not start")
    assert not outer.exists()


def test_a_folder_with_a_file_in_it_or_made_by_someone_else_is_kept(tmp_path):
    kept = tmp_path / "ab"
    kept.mkdir()
    (kept / "base.json").write_text("{}", encoding="utf-8")  # an interrupted run's finished requests
    with pytest.raises(KeyboardInterrupt), tidied_on_failure([kept], ("base.json",)):
        raise KeyboardInterrupt
    assert (kept / "base.json").exists()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    with pytest.raises(RuntimeError), tidied_on_failure([], ("base.json",)):  # nothing made by this command
        raise RuntimeError
    assert theirs.is_dir()


def test_a_success_leaves_everything(tmp_path):
    folder = tmp_path / "ab"
    folder.mkdir()
    with tidied_on_failure([folder], ()):
        pass
    assert folder.is_dir()


def test_ab_whose_side_cannot_start_leaves_no_folder(tmp_path, monkeypatch, cli):
    """The driver's own path: a side that is no command fails at start, before any request."""
    import llmbench.drivers.ab as ab_driver

    async def refuse(backends, prompts):
        raise ab_driver.UserError("base: cannot start the worker nonsense: No such file or directory")

    monkeypatch.setattr(ab_driver, "_start_all", refuse)
    monkeypatch.chdir(tmp_path)
    prompts = tmp_path / "p.txt"
    prompts.write_text("one\ntwo\nthree\nfour\nfive\nsix\n", encoding="utf-8")
    for extra in ([], ["-o", "made/here"]):
        r = cli("ab", str(prompts), "--base", "nonsense", "--head", "nonsense", "-q", *extra)
        assert r.returncode == 2 and "cannot start" in r.stderr, r.stderr
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["p.txt"]
