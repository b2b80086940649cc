import json
import os

import pytest

from llmbench.core.errors import UserError
from llmbench.results.schema import SCHEMA_VERSION
from llmbench.results.storage import load_run, prepare_output, save_run
from tests.helpers import synthetic_run


def test_round_trip(tmp_path):
    run = synthetic_run(n=5)
    p = tmp_path / "r.json"
    save_run(run, p)
    back = load_run(p)
    assert back == run
    assert not list(tmp_path.glob(".*tmp"))  # the temp file was renamed, not left behind
    umask = os.umask(0)
    os.umask(umask)
    assert p.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("", "empty"),
        ("not json", "not valid JSON"),
        ('{"a": 1}', "not an llmbench run"),
        ("[1, 2]", "not an llmbench run"),
        ('{"schema_version": 99, "requests": []}', "schema_version 99"),
        ('{"schema_version": 1, "requests": [{"x": 1}]}', "not a valid run JSON"),
    ],
)
def test_bad_run_files(tmp_path, content, match):
    p = tmp_path / "bad.json"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(UserError, match=match):
        load_run(p)


def test_truncated_run_file(tmp_path):
    p = tmp_path / "r.json"
    save_run(synthetic_run(n=3), p)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="truncated"):
        load_run(p)


def test_invariants_are_enforced(tmp_path):
    run = synthetic_run(n=2)
    obj = json.loads(run.model_dump_json())
    obj["requests"][0]["token_times_ms"][0] += 1
    p = tmp_path / "r.json"
    p.write_text(json.dumps(obj), encoding="utf-8")
    with pytest.raises(UserError, match="token_times_ms"):
        load_run(p)
    assert obj["schema_version"] == 1 < SCHEMA_VERSION  # a run with its requests inline stays version 1


def test_prepare_output(tmp_path):
    assert prepare_output(tmp_path / "new" / "deeper" / "r.json", overwrite=False).parent.is_dir()
    existing = tmp_path / "exists.json"
    existing.write_text("keep", encoding="utf-8")
    with pytest.raises(UserError, match="already exists"):
        prepare_output(existing, overwrite=False)
    assert existing.read_text(encoding="utf-8") == "keep"
    assert prepare_output(existing, overwrite=True) == existing
    with pytest.raises(UserError, match="is a file"):
        prepare_output(existing / "sub" / "r.json", overwrite=False)
    with pytest.raises(UserError, match="is a folder"):
        prepare_output(tmp_path, overwrite=False)


def test_a_killed_runs_journal_is_merged_and_a_torn_line_dropped(tmp_path):
    from llmbench.results.schema import FailedRequest
    from llmbench.results.storage import journal_line, journal_path

    run = synthetic_run(n=5)
    last = run.requests.pop()
    p = tmp_path / "r.json"
    save_run(run, p)
    failure = FailedRequest(prompt_index=7, repeat=0, error="HTTP 503: busy", status=503)
    journal_path(p).write_bytes(
        journal_line(run.run_id, run.requests[0])  # already in the JSON
        + journal_line(run.run_id, last)
        + journal_line(run.run_id, failure)
        + b'{"run_id":"r","request":{"prompt_index": 9, "rep'  # torn: the kill came mid-write
    )
    for scalars_only in (False, True):
        back = load_run(p, scalars_only=scalars_only)
        assert [r.prompt_index for r in back.requests] == [0, 1, 2, 3, 4]
    back = load_run(p)
    assert back.summary.requests == 5 and back.summary.failed_requests == 1
    assert [(f.prompt_index, f.status) for f in back.failed_requests] == [(7, 503)]


def test_a_journal_of_another_run_or_a_damaged_one_is_refused(tmp_path):
    from llmbench.results.storage import journal_line, journal_path

    run = synthetic_run(n=3)
    p = tmp_path / "r.json"
    save_run(run, p)
    other = synthetic_run(n=4, seed=9)
    other.run_id = "another-run"
    journal_path(p).write_bytes(journal_line(other.run_id, other.requests[3]))  # left beside a replaced file
    with pytest.raises(UserError, match="belongs to run 'another-run'.*move it away"):
        load_run(p)
    # a damaged line that is not the last one is not a torn write: refused, never skipped silently
    journal_path(p).write_bytes(b"garbage\n" + journal_line(run.run_id, run.requests[0]))
    with pytest.raises(UserError, match=r"journal:1: not a journal line"):
        load_run(p)
    # the old format (a bare request, no run id) can't prove whose it is either
    journal_path(p).write_bytes(run.requests[0].model_dump_json().encode() + b"\n")
    with pytest.raises(UserError, match="belongs to run None"):
        load_run(p)


def test_a_run_written_by_llmbench_0_1_still_loads():
    """The retired regression baseline, written by 0.1.0: every reader must keep reading old files."""
    from pathlib import Path

    run = load_run(Path(__file__).resolve().parents[1] / "data" / "run-0.1.0.json")
    assert run.llmbench_version == "0.1.0" and run.complete and len(run.requests) == 20
    assert run.config.auto == [] and run.config.ab is None and run.summary.tpot_ms.mean > 0
