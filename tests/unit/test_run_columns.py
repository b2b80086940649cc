"""A large run's requests in a columns file beside its JSON (issue 61, schema version 2): the line between one file
and two, the writer's group commits, what a kill, a full disk or a truncated file leave, and the readers' checks."""

from __future__ import annotations

import errno
import json
import os
import shutil

import pytest

pytest.importorskip("pyarrow")

from llmbench.analysis.compare import compare_runs
from llmbench.core.errors import UserError
from llmbench.results import columns, storage
from llmbench.results.storage import RunWriter, load_run, named_sidecar, save_run
from tests.helpers import synthetic_run


def _dump(requests) -> list[dict]:
    return [r.model_dump() for r in requests]


def _sidecars(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.suffix == ".arrow")


def test_a_run_as_columns_reads_back_as_the_same_run(tmp_path):
    run = synthetic_run(n=30, tokens=12, noise=0.2, seed=4)
    run.ttft_requests = [run.requests.pop().model_copy(update={"ttft_only": True, "prompt_index": 99})]
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    save_run(run, one, columns=False)
    save_run(run, two, columns=True)
    head = json.loads(two.read_bytes())
    assert head["schema_version"] == 2 and head["requests"] == [] and head["ttft_requests"] == []
    assert head["columns"]["rows"] == 30 and head["columns"]["file"] == named_sidecar(two) == _sidecars(tmp_path)[0]
    assert json.loads(one.read_bytes())["schema_version"] == 1 and named_sidecar(one) is None
    back = load_run(two)
    assert _dump(back.requests) == _dump(run.requests) and _dump(back.ttft_requests) == _dump(run.ttft_requests)
    assert back.summary == run.summary and back.run_id == run.run_id
    scalars = load_run(two, scalars_only=True, request_fields=("token_times_ms",))
    assert [r.ttft_ms for r in scalars.requests] == [r.ttft_ms for r in run.requests]
    assert [list(r.token_times_ms) for r in scalars.requests] == [r.token_times_ms for r in run.requests]
    # compare reads both forms alike: every row the same
    other = synthetic_run(n=30, tokens=12, noise=0.2, seed=5, tpot_ms=21.0)
    save_run(other, tmp_path / "other.json", columns=True)
    a = compare_runs(load_run(one, scalars_only=True), load_run(tmp_path / "other.json", scalars_only=True))
    b = compare_runs(scalars, load_run(tmp_path / "other.json", scalars_only=True))
    assert [(r.metric, r.stat, r.change_pct, r.ci_low_pct) for r in a.rows] == [
        (r.metric, r.stat, r.change_pct, r.ci_low_pct) for r in b.rows
    ]
    # show's read: the summary alone, the file checked to be there at its size
    assert load_run(two, scalars_only=True, requests=False).requests == []


def test_the_line_between_one_file_and_columns(tmp_path, monkeypatch):
    run = synthetic_run(n=10, tokens=8)  # 80 stamps
    monkeypatch.setenv("LLMBENCH_COLUMNS_FROM", str(80))
    save_run(run, tmp_path / "at.json")
    monkeypatch.setenv("LLMBENCH_COLUMNS_FROM", str(79))
    save_run(run, tmp_path / "past.json")
    assert json.loads((tmp_path / "at.json").read_bytes())["schema_version"] == 1
    assert json.loads((tmp_path / "past.json").read_bytes())["schema_version"] == 2


def test_replacing_a_run_removes_the_columns_the_old_json_named(tmp_path):
    path = tmp_path / "r.json"
    save_run(synthetic_run(n=5), path, columns=True)
    first = _sidecars(tmp_path)
    save_run(synthetic_run(n=6), path, columns=True)  # --overwrite: a new file, the old one gone after
    second = _sidecars(tmp_path)
    assert len(first) == len(second) == 1 and first != second
    save_run(synthetic_run(n=6), path, columns=False)  # back to one file: no columns file left behind
    assert _sidecars(tmp_path) == [] and len(load_run(path).requests) == 6


def _write(tmp_path, monkeypatch, n=40, commit_every=8, close=True):
    """A run written through RunWriter as the loop writes it, past the line after 5 requests."""
    monkeypatch.setenv("LLMBENCH_COLUMNS_FROM", str(5 * 10))
    monkeypatch.setattr(storage, "GROUP_ROWS", commit_every)
    monkeypatch.setattr(storage, "GROUP_S", 3600.0)
    full = synthetic_run(n=n, tokens=10, noise=0.1, seed=2)
    shell = full.model_copy(update={"requests": []})
    path = tmp_path / "run.json"
    w = RunWriter(path, shell)
    for r in full.requests:
        shell.requests.append(r)
        w.add(shell, r)
    if close:
        w.close(shell)
    return full, shell, path, w


def test_the_writer_moves_to_columns_at_the_line_and_commits_in_groups(tmp_path, monkeypatch):
    full, _, path, w = _write(tmp_path, monkeypatch)
    assert w.columns and w.group_commits >= 40 // 8
    assert not storage.journal_path(path).exists()
    back = load_run(path)
    assert back.schema_version == 2 and _dump(back.requests) == _dump(full.requests)
    assert back.columns is not None and back.columns.rows == 40


def _copy_files(src, dst):
    """What the disk holds at this instant (a SIGKILL leaves the kernel's pages: every write() so far)."""
    dst.mkdir()
    for p in src.iterdir():
        if p.is_file():
            shutil.copy(p, dst / p.name)


def test_a_writer_killed_between_commits_loses_no_finished_request(tmp_path, monkeypatch):
    full, shell, _path, w = _write(tmp_path, monkeypatch, n=37, close=False)  # 7 requests since the last commit
    _copy_files(tmp_path, tmp_path / "killed")
    w.close(shell)
    back = load_run(tmp_path / "killed" / "run.json")
    assert _dump(back.requests) == _dump(full.requests)
    assert back.summary is not None and back.summary.requests == 37  # the summary is the requests read back


def test_a_writer_killed_just_after_a_commit_reads_back_with_a_summary_of_everything(tmp_path, monkeypatch):
    _, shell, path, w = _write(tmp_path, monkeypatch, n=30, close=False)  # commits at 6, 14, 22, 30: none pending
    assert storage.journal_path(path).stat().st_size == 0
    _copy_files(tmp_path, tmp_path / "killed")
    storage.journal_path(tmp_path / "killed" / "run.json").unlink()  # even without its (empty) journal
    w.close(shell)
    for read in (
        load_run(tmp_path / "killed" / "run.json"),
        load_run(tmp_path / "killed" / "run.json", scalars_only=True),
    ):
        assert len(read.requests) == 30 and read.summary is not None and read.summary.requests == 30


def test_a_writer_killed_in_the_middle_of_a_batch_loses_no_finished_request(tmp_path, monkeypatch):
    sizes: list[int] = []
    real = columns.ColumnWriter.sync
    killed = tmp_path / "killed"
    work = tmp_path / "work"
    work.mkdir()

    def sync(self):
        self._file.flush()
        size = os.path.getsize(self.path)
        if len(sizes) == 4:  # the 4th commit (after the file's creation): the kill came with half its batch on disk
            _copy_files(work, killed)
            cut = killed / self.path.name
            cut.write_bytes(cut.read_bytes()[: sizes[-1] + (size - sizes[-1]) // 2])
        sizes.append(size)
        real(self)

    monkeypatch.setattr(columns.ColumnWriter, "sync", sync)
    full, *_ = _write(work, monkeypatch, n=37)  # commits at 6 (the line), 14, 22, 30 requests
    back = load_run(killed / "run.json")  # 22 from the stream (the cut batch dropped), 23-30 from the journal
    assert _dump(back.requests) == _dump(full.requests[:30])


def test_a_full_disk_at_a_group_commit_keeps_what_was_written(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = columns.ColumnWriter.sync

    def sync(self):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self)

    monkeypatch.setattr(columns.ColumnWriter, "sync", sync)
    monkeypatch.setenv("LLMBENCH_COLUMNS_FROM", str(5 * 10))
    monkeypatch.setattr(storage, "GROUP_ROWS", 8)
    monkeypatch.setattr(storage, "GROUP_S", 3600.0)
    full = synthetic_run(n=40, tokens=10, seed=3)
    shell = full.model_copy(update={"requests": []})
    path = tmp_path / "run.json"
    w = RunWriter(path, shell)
    failed_at = None
    for i, r in enumerate(full.requests):
        shell.requests.append(r)
        try:
            w.add(shell, r)
        except OSError:
            failed_at = i
            break
    assert failed_at is not None
    size = storage.journal_path(path).stat().st_size
    with pytest.raises(OSError):  # nothing more goes after a batch that may be cut, not even a journal line
        w.add(shell, full.requests[failed_at + 1])
    assert storage.journal_path(path).stat().st_size == size
    back = load_run(path)  # the stream up to the failure, the journal since the last good commit
    assert [r.prompt_index for r in back.requests] == [r.prompt_index for r in full.requests[: failed_at + 1]]


def test_a_columns_file_that_is_not_what_its_run_names_is_one_line(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    save_run(synthetic_run(n=8, tokens=6), path, columns=True)
    side = tmp_path / named_sidecar(path)
    data = side.read_bytes()
    cases = {
        "truncated": data[:-10],
        "altered": data[:-40] + bytes(b ^ 1 for b in data[-40:-39]) + data[-39:],
    }
    for name, content in cases.items():
        side.write_bytes(content)
        with pytest.raises(UserError) as e:
            load_run(path, scalars_only=True)
        assert "\n" not in str(e.value) and str(side) in str(e.value), name
    side.unlink()
    with pytest.raises(UserError, match="missing"):
        load_run(path, scalars_only=True, requests=False)
    # another run's columns file under this run's name: refused by its run id even without a sha256
    other = tmp_path / "o.json"
    save_run(synthetic_run(n=8, tokens=6).model_copy(update={"run_id": "another"}), other, columns=True)
    shutil.copy(tmp_path / named_sidecar(other), side)
    head = json.loads(path.read_bytes())
    head["columns"].update(rows=None, sha256=None, size_bytes=None)
    path.write_text(json.dumps(head), encoding="utf-8")
    with pytest.raises(UserError, match="another run's file"):
        load_run(path)
    head["requests"] = json.loads(synthetic_run(n=1).model_dump_json())["requests"]
    path.write_text(json.dumps(head), encoding="utf-8")
    with pytest.raises(UserError, match="holds requests itself"):
        load_run(path)


def test_a_check_is_remembered_until_the_file_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(columns, "QUIET_NS", 0)
    path = tmp_path / "r.json"
    save_run(synthetic_run(n=8, tokens=6), path, columns=True)
    side = tmp_path / named_sidecar(path)
    hashed = []
    real = columns.file_sha256
    monkeypatch.setattr(columns, "file_sha256", lambda p: hashed.append(p) or real(p))
    load_run(path, scalars_only=True)
    load_run(path, scalars_only=True)
    assert len(hashed) == 1  # the second read trusted the first's check
    data = bytearray(side.read_bytes())
    data[-50] ^= 1  # the same size, another content, the old modification time put back: its change time moved
    before = side.stat()
    side.write_bytes(bytes(data))
    os.utime(side, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(UserError, match="not the columns file"):
        load_run(path, scalars_only=True)


def test_convert_writes_either_form_and_keeps_the_original(cli, tmp_path):
    src = tmp_path / "big.json"
    save_run(synthetic_run(n=12, tokens=5), src, columns=True)
    r = cli("convert", src, "-o", tmp_path / "one.json")
    assert r.returncode == 0 and "schema version 1" in r.stdout, r.stderr
    one = json.loads((tmp_path / "one.json").read_bytes())
    assert one["schema_version"] == 1 and len(one["requests"]) == 12 and "columns" in one and one["columns"] is None
    r = cli("convert", tmp_path / "one.json", "-o", tmp_path / "two.json", "--columns")
    assert r.returncode == 0 and load_run(tmp_path / "two.json").schema_version == 2
    assert _dump(load_run(tmp_path / "two.json").requests) == _dump(load_run(src).requests)
    r = cli("convert", src, "-o", tmp_path / "one.json")  # exists: refused, kept
    assert r.returncode == 2 and "already exists" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert load_run(src).schema_version == 2  # the original is untouched


@pytest.mark.parametrize("value", ["-1", "1.5", "x", "1e6"])
def test_a_malformed_line_is_one_line_before_any_work(cli, tmp_path, value):
    src = tmp_path / "r.json"
    save_run(synthetic_run(n=2), src)
    r = cli("convert", src, "-o", tmp_path / "out.json", env={"LLMBENCH_COLUMNS_FROM": value})
    assert r.returncode == 2 and "LLMBENCH_COLUMNS_FROM" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.json").exists()


def test_a_journal_line_the_disk_takes_only_part_of_is_finished_or_failed(tmp_path, monkeypatch):
    """A full disk may take part of a write without an error: the rest is written, or its error ends the run; a
    torn last line is dropped by readers, and the run never counts a request its files do not hold."""
    real = os.write
    calls = {"n": 0}

    def write(fd, data):
        calls["n"] += 1
        if calls["n"] == 12:  # part of this line, no error
            return real(fd, bytes(data)[: len(data) // 2])
        if calls["n"] == 13:  # its rest: the disk is full now
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(storage, "GROUP_S", 3600.0)
    full = synthetic_run(n=30, tokens=6, seed=4)
    shell = full.model_copy(update={"requests": []})
    path = tmp_path / "run.json"
    w = RunWriter(path, shell, columns=True)  # the columns file made at once, its JSON naming it
    monkeypatch.setattr(storage.os, "write", write)
    saved = 0
    with pytest.raises(OSError):
        for r in full.requests:
            shell.requests.append(r)
            w.add(shell, r)
            saved += 1
    monkeypatch.setattr(storage.os, "write", real)
    assert saved == 11  # the 12th request's line was torn: not counted as saved
    assert [r.prompt_index for r in load_run(path).requests] == list(range(11))
