"""report, export and show: exports round-trip through pandas; the report renders offline in real Chromium."""

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from llmbench.present.export import REQUEST_COLUMNS, TOKEN_COLUMNS
from llmbench.results.storage import save_run
from tests.helpers import synthetic_run

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def runs(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    save_run(synthetic_run(n=12, tokens=10, noise=0.1, seed=1), a)
    save_run(synthetic_run(n=12, tokens=10, noise=0.1, seed=2, tpot_ms=26.0), b)
    return a, b


def test_export_csv_has_one_row_per_request_with_stable_columns(cli, runs, tmp_path):
    out = tmp_path / "r.csv"
    r = cli("export", runs[0], "--format", "csv", "-o", out)
    assert r.returncode == 0 and "wrote 12 rows" in r.stdout
    df = pd.read_csv(out)
    assert list(df.columns) == REQUEST_COLUMNS and len(df) == 12
    for col in ("ttft_ms", "tpot_ms", "e2e_ms", "decode_tokens_per_s"):
        assert df[col].dtype == "float64"
    assert df["output_tokens"].dtype == "int64" and (df["output_tokens"] == 10).all()
    assert ((df["decode_tokens_per_s"] - 1000 / df["tpot_ms"]).abs() < 1e-3).all()
    r = cli("export", runs[0], "-o", out)
    assert r.returncode == 2 and "already exists" in r.stderr  # never overwritten silently


def test_export_parquet_tokens(cli, runs, tmp_path):
    out = tmp_path / "t.parquet"
    assert cli("export", runs[0], "--format", "parquet", "--tokens", "-o", out).returncode == 0
    df = pd.read_parquet(out)
    assert list(df.columns) == TOKEN_COLUMNS and len(df) == 12 * 10
    assert df["itl_ms"].isna().sum() == 12  # the first token of each request has no gap before it
    assert df["time_ms"].dtype == "float64" and df["token_index"].dtype == "int64"
    assert df[df.token_index == 0]["time_ms"].notna().all()
    assert cli("export", runs[0], "--format", "xlsx", "-o", tmp_path / "x").returncode == 2


def test_show_prints_the_summary(cli, runs):
    r = cli("show", runs[0])
    assert r.returncode == 0 and "TTFT (ms)" in r.stdout and "12 requests" in r.stdout
    assert cli("show", runs[0].with_name("missing.json")).returncode == 2


def test_report_is_one_offline_html_file(cli, runs, tmp_path):
    out = tmp_path / "report.html"
    r = cli("report", *runs, "-o", out)
    assert r.returncode == 0, r.stderr
    text = out.read_text(encoding="utf-8")
    assert text.count("<svg") == 7  # 2 timelines, 2 readers, ITL, TTFT vs prompt, distributions
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*https?:""", text, re.I)
    assert "<script" not in text.lower() and "@import" not in text
    assert not re.search(r"url\((?!#)", text)  # only the SVGs' own clip paths (url(#id))
    assert "one prompt length: no correlation can be estimated" in text  # synthetic prompts are all 30 tokens
    assert "paired" in text and "slower" in text  # compare's verdict for the second run
    assert out.stat().st_size < 400_000


def test_correlation_caveat_is_honest_about_small_samples():
    import numpy as np

    from llmbench.present.html import correlation_caveat

    rng = np.random.default_rng(0)
    x = rng.integers(35, 45, 20).astype(float)
    small = correlation_caveat(x, 250 + 2 * x + rng.normal(0, 30, 20))  # the seed's situation: 20 prompts
    assert "n = 20" in small and "fewer than 30" in small and "can't support a claim" in small
    assert "seed" not in small  # it speaks about the user's run, not the project's history
    x = rng.uniform(10, 2000, 300)
    big = correlation_caveat(x, 50 + 0.5 * x + rng.normal(0, 150, 300))
    assert "n = 300" in big and "can't support" not in big and "rho = +0.8" in big
    flat = rng.uniform(10, 2000, 300)
    noise = correlation_caveat(flat, rng.normal(300, 30, 300))  # many requests, no relation: the interval spans 0
    assert "n = 300" in noise and "fewer than" not in noise and "can't support a claim" in noise
