"""Gates that can't be switched off, checked before anything is measured, and inputs that end in one line.

A NaN or infinite threshold would pass every head (no comparison with it is ever true); ``ab`` measures for
minutes, so every option that can be refused is refused before a worker starts; a run file with impossible
numbers is refused by name instead of being computed into "-125% faster"; each row says the population it used.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_gates_faults.py."""

from __future__ import annotations

from tests.unit.test_gates_faults import marker_side  # noqa: F401 (fixtures)


def test_ab_refuses_a_gate_on_too_few_pairs_before_any_worker_starts(cli, tmp_path, marker_side):
    marker, side = marker_side
    one = tmp_path / "one.txt"
    one.write_text("a single prompt\n", encoding="utf-8")
    for repeats in ("1", "5"):  # the gaps row's interval (a median's) needs 6 pairs
        r = cli("ab", one, "--base", side, "--head", side, "-o", tmp_path / "ab", "--gate-stat", "gaps",
                "--fail-on", "tpot_ms=3", "--repeats", repeats, "-q")  # fmt: skip
        assert r.returncode == 2 and f"{repeats} pairs (prompts x --repeats) give no 95% interval; at least 6" in (
            r.stderr) and not marker.exists(), r.stderr  # fmt: skip
    # six repeats are six pairs: accepted, so the side is started (and fails: it is no worker)
    r = cli("ab", one, "--base", side, "--head", side, "-o", tmp_path / "ab", "--gate-stat", "gaps",
            "--fail-on", "tpot_ms=3", "--repeats", "6", "-q")  # fmt: skip
    assert r.returncode == 2 and marker.exists(), r.stderr


def test_the_marker_side_does_show_a_started_worker(cli, prompt_file, tmp_path, marker_side):
    """The control of the tests above: with good options the side is started (and fails the handshake)."""
    marker, side = marker_side
    r = cli("ab", prompt_file, "--base", side, "--head", side, "-o", tmp_path / "ab", "--fail-on-regression", "3",
            "--repeats", "2", "-q")  # fmt: skip
    assert r.returncode == 2 and marker.exists() and "internal error" not in r.stderr, r.stderr
