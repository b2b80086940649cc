"""A run's requests as Arrow columns (issue 61, llmbench.results.columns): every field a column, a round trip that
loses nothing, a killed writer's finished batches readable, a sidecar that is not its run's refused in one line."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")

from llmbench.core.errors import UserError  # noqa: E402
from llmbench.results import columns  # noqa: E402
from llmbench.results.schema import Columns, RequestResult  # noqa: E402
from tests.helpers import synthetic_run  # noqa: E402

RUN = "a" * 32  # the run id the files are written for


def _requests(n: int = 7) -> list[RequestResult]:
    run = synthetic_run(n=n, tokens=9, noise=0.2, seed=3)
    reqs = run.requests
    # optional fields of every kind set on some requests: an endpoint's, a session's, text beyond ASCII
    reqs[1] = reqs[1].model_copy(update={"server_send_ms": [float(x) for x in reqs[1].token_times_ms],
                                         "tokens_from": "usage", "cold": True, "turn": 2, "send_lateness_ms": -0.25,
                                         "output_text": "某工厂夜间偷排废水 é ✓"})  # fmt: skip
    return reqs


def test_every_field_of_a_request_is_a_column():
    schema = columns.arrow_schema()
    assert schema.names == list(RequestResult.model_fields)
    assert schema.field("token_times_ms").type == pa.list_(pa.float64())
    assert schema.field("text_offsets").type == pa.list_(pa.int32())
    assert schema.field("output_text").type == pa.large_string()
    assert schema.field("prompt_index").type == pa.int64() and schema.field("cold").type == pa.bool_()


def test_requests_round_trip_through_a_stream_file(tmp_path):
    reqs = _requests()
    path = tmp_path / f"run{columns.SUFFIX}"
    w = columns.ColumnWriter(path, RUN)
    w.add(reqs[:3])
    w.add([])  # nothing: no empty batch
    w.add(reqs[3:])
    w.close()
    table, cut = columns.read_table(path)
    assert not cut and table.num_rows == len(reqs) == w.rows
    back = columns.requests_of(table)
    assert [r.model_dump() for r in back] == [r.model_dump() for r in reqs]
    assert back[1].output_text == "某工厂夜间偷排废水 é ✓" and back[1].server_send_ms == reqs[1].server_send_ms
    only, _ = columns.read_table(path, columns=["ttft_ms"])
    assert only.column_names == ["ttft_ms"] and only.column(0).to_pylist() == [r.ttft_ms for r in reqs]


def test_a_second_writer_of_the_same_file_is_refused(tmp_path):
    path = tmp_path / "run.arrow"
    first = columns.ColumnWriter(path, RUN)
    with pytest.raises(FileExistsError):
        columns.ColumnWriter(path, RUN)
    first.close()


def test_a_killed_writer_leaves_every_finished_batch(tmp_path):
    reqs = _requests(9)
    path = tmp_path / "run.arrow"
    w = columns.ColumnWriter(path, RUN)
    w.add(reqs[:4])
    w.add(reqs[4:7])
    size = path.stat().st_size
    w.add(reqs[7:])  # the batch being written when the process died: cut in its middle below
    data = path.read_bytes()
    w.close()
    path.write_bytes(data[: size + (len(data) - size) // 2])
    table, cut = columns.read_table(path)
    assert cut and table.num_rows == 7
    assert [r.prompt_index for r in columns.requests_of(table)] == [r.prompt_index for r in reqs[:7]]
    path.write_bytes(data[:size])  # killed between two batches: no end marker, nothing cut
    table, cut = columns.read_table(path)
    assert table.num_rows == 7 and not cut


def test_a_sidecar_that_is_not_its_runs_is_one_line(tmp_path):
    reqs = _requests()
    path = tmp_path / "run.arrow"
    w = columns.ColumnWriter(path, RUN)
    w.add(reqs)
    ref = w.close()
    # hashed and counted as written
    assert ref == Columns(file="run.arrow", rows=len(reqs), sha256=columns.file_sha256(path),
                          size_bytes=path.stat().st_size)  # fmt: skip
    assert columns.read_checked(path, ref, RUN).num_rows == len(reqs)  # its own: fine
    for ref_, run_id, message in (
        (ref.model_copy(update={"rows": len(reqs) + 1}), RUN, "requests, the run says"),
        (ref.model_copy(update={"sha256": "0" * 64}), RUN, "not the columns file its run names"),
        (ref.model_copy(update={"size_bytes": ref.size_bytes + 1}), RUN, "bytes, the run says"),
        (Columns(file="run.arrow"), "b" * 32, "another run's file"),  # a killed run's: no sha256, still its own
    ):
        with pytest.raises(UserError, match=message) as e:
            columns.read_checked(path, ref_, run_id)
        assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="missing"):
        columns.read_checked(tmp_path / "gone.arrow", ref, RUN)
    (tmp_path / "junk.arrow").write_bytes(b"not arrow at all")
    with pytest.raises(UserError, match="not a run's columns file"):
        columns.read_table(tmp_path / "junk.arrow")


def test_rows_are_light_and_their_stamps_are_views(tmp_path):
    reqs = _requests(6)
    path = tmp_path / "run.arrow"
    w = columns.ColumnWriter(path, RUN)
    w.add(reqs)
    w.close()
    table, _ = columns.read_table(path, columns=["prompt_index", "ttft_ms", "token_times_ms", "server_send_ms"])
    rows = columns.rows(table)
    assert [r.prompt_index for r in rows] == [r.prompt_index for r in reqs]
    assert [list(r.token_times_ms) for r in rows] == [r.token_times_ms for r in reqs]
    assert rows[1].server_send_ms is not None and rows[0].server_send_ms is None  # a null list stays None
    assert not hasattr(rows[0], "output_text")  # only the columns read


def test_sidecar_names_are_new_each_time_and_plain():
    a, b = columns.sidecar_name("results/run.json"), columns.sidecar_name("results/run.json")
    assert a != b and a.startswith("run.") and a.endswith(".arrow")
    odd = columns.sidecar_name("/x/.hidden weird é.json")
    assert Columns(file=odd).file == odd and not odd.startswith(".") and " " not in odd


def test_a_batch_too_big_for_int32_offsets_is_split_and_a_missing_column_is_one_line(tmp_path, monkeypatch):
    reqs = _requests(5)  # 9 stamps each
    monkeypatch.setattr(columns, "BATCH_VALUES", 20)  # two requests' stamps a batch
    path = tmp_path / "run.arrow"
    w = columns.ColumnWriter(path, RUN)
    w.add(reqs)
    w.close()
    import pyarrow.ipc as ipc

    sizes = [b.num_rows for b in ipc.open_stream(str(path))]
    assert sizes == [0, 2, 2, 1]  # the empty batch that carries the schema from the file's creation
    with pytest.raises(ValueError, match="int32 offsets"):
        columns.to_batch(reqs)  # unsplit: refused, never wrapped around
    table, _ = columns.read_table(path)
    assert [r.model_dump() for r in columns.requests_of(table)] == [r.model_dump() for r in reqs]
    with pytest.raises(UserError, match="no column nope"):
        columns.read_table(path, columns=["ttft_ms", "nope"])
