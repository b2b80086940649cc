"""The command line as a user meets it: outputs, defaults, one-line errors, and what it must not import."""

import pytest
import torch


@pytest.mark.parametrize(
    ("args", "match"),
    [
        pytest.param(
            ["--device", "cuda"],
            "no CUDA device",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present here"),
        ),
        (["--dtype", "float8"], "Invalid value for '--dtype'"),
        (["--device", "tpu"], "unknown --device"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be 1 to 10,000,000"),
        (["--max-new-tokens", "-5"], "--max-new-tokens must be 1 to 10,000,000"),
        (["--threads", "0"], "--threads must be 1 to 4,096"),
        (["--threads", "99999999999999999999"], "--threads must be 1 to 4,096"),  # torch overflowed: internal error
        (["--warmup", "100000000000"], "--warmup must be 0 to 1,000,000"),
        (["--max-new-tokens", "100000000000"], "--max-new-tokens must be 1 to 10,000,000"),
        (["--timeout", "5"], "--timeout: options of --endpoint runs only"),  # named as typed, not --timeout-s
        (["--weights", "fake"], "Invalid value for '--weights'"),
        (["--model", "/no/such/folder"], "model folder not found"),
        (["--model", "someone/uncached-model"], "not in the Hugging Face cache"),
        (["--max-new-tokens", "many"], "Invalid value"),
        (["--device-map", "{bad"], "--device-map is not valid JSON"),
        (["--device-map", "everywhere"], "unknown --device-map"),
        (["--no-such-option"], "No such option"),
    ],
)
def test_bad_inputs_exit_2_with_one_line(cli, prompt_file, args, match, tmp_path):
    r = cli("run", str(prompt_file), "-o", str(tmp_path / "r.json"), *args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert match in lines[0]
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("content", [b"", b"# only comments\n", b"\x89PNG\x00\x00", b"\xff\xfe\xfa bad"])
def test_bad_prompt_files_exit_2(cli, tmp_path, content):
    p = tmp_path / "p.txt"
    p.write_bytes(content)
    r = cli("run", str(p), "--weights", "random")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and str(p) in r.stderr


def test_existing_output_is_never_overwritten(cli, prompt_file, tmp_path):
    out = tmp_path / "keep.json"
    out.write_text("precious", encoding="utf-8")
    r = cli("run", str(prompt_file), "--weights", "random", "-o", str(out))
    assert r.returncode == 2 and "already exists" in r.stderr and "--overwrite" in r.stderr
    assert out.read_text(encoding="utf-8") == "precious"


def test_output_folder_under_a_file(cli, prompt_file, tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x", encoding="utf-8")
    r = cli("run", str(prompt_file), "--weights", "random", "-o", str(blocker / "r.json"))
    assert r.returncode == 2 and "is a file" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_warning_every_run_of_a_driver_repeats_is_shown_once(capsys):
    """A scan's or sweep's runs each carry the same warnings (random weights...): the terminal says it once."""
    from llmbench.present import terminal as display

    with display.reporter(quiet=True) as reporter:
        for _ in range(3):
            reporter.warn("RANDOM WEIGHTS: timings only")
        reporter.warn("another one")
    err = capsys.readouterr().err
    assert err.count("RANDOM WEIGHTS") == 1 and err.count("another one") == 1
