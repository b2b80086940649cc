"""Secrets never written: a user name, a password, query tokens and an API key planted in every URL option of real
``run`` and ``load`` commands against a real loopback server reach the server, and appear in no file the command
wrote (run JSON, journal, history database, caches) and nowhere on stdout or stderr; nor in the one error line
of a scrape or a connection that failed."""

from __future__ import annotations

import base64
import signal
from pathlib import Path

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse

from llmbench.results.storage import load_run
from tests.helpers import cli_process, wait_for_requests
from tests.servers import BackgroundServer, faulty_server, free_port

USER, PW, TOKEN, KEY = "us3rNAME", "S3CRETpw", "T0KENxyz", "K3Yabc987"
MUSER, MPW, MTOKEN = "scr4per", "S3CRETmx", "T0KENmet"  # the metrics URL's own
SECRETS = (USER, PW, TOKEN, KEY, MUSER, MPW, MTOKEN,
           base64.b64encode(f"{USER}:{PW}".encode()).decode(),  # the Basic header httpx makes of the userinfo
           base64.b64encode(f"{MUSER}:{MPW}".encode()).decode())  # fmt: skip
PAGE = "# TYPE llmbench_requests_generating gauge\nllmbench_requests_generating 1\n"


@pytest.fixture(scope="module")
def server():
    """faulty_server (mode ok) with a Prometheus page, behind an ASGI wrapper that records every request's path,
    query and headers: proof that the secrets were sent, so their absence from the files means something."""
    app = faulty_server()

    async def metrics(_request: Request) -> PlainTextResponse:
        return PlainTextResponse(PAGE, media_type="text/plain; version=0.0.4")

    app.add_route("/metrics", metrics)
    seen: list[tuple[str, str, dict[str, str]]] = []

    async def recording(scope, receive, send):
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            seen.append((scope["path"], scope["query_string"].decode(), headers))
            if scope["path"].startswith("/echo/"):  # a 429 whose message quotes what it was sent, as some do
                said = f"slow down, {headers.get('authorization')} at {scope['path']}?{scope['query_string'].decode()}"
                await JSONResponse({"error": {"message": said}}, status_code=429)(scope, receive, send)
                return
        await app(scope, receive, send)

    with BackgroundServer(recording) as url:
        yield url, seen


def secret_urls(url: str) -> tuple[str, str]:
    """The endpoint and the metrics URL of ``url``'s server, each with a user, a password and a query token."""
    hostport = url.removeprefix("http://")
    return (f"http://{USER}:{PW}@{hostport}/v1?api_key={TOKEN}&user={USER}",
            f"http://{MUSER}:{MPW}@{hostport}/metrics?token={MTOKEN}")  # fmt: skip


def leaks(folder: Path, *texts: str) -> list[str]:
    """Where a planted secret appears: in any file under ``folder`` (walked, hidden files, journals and databases
    included, read as bytes) or in ``texts`` (stdout, stderr)."""
    found = []
    files = [p for p in folder.rglob("*") if p.is_file()]
    for p in files:
        data = p.read_bytes()
        found += [f"{p.relative_to(folder)}: {s}" for s in SECRETS if s.encode() in data]
    for i, text in enumerate(texts):
        found += [f"text {i}: {s}" for s in SECRETS if s in text]
    return found


def isolated(out: Path) -> dict[str, str]:
    """The environment of a command whose every file lands under ``out``: caches and data too; the API key."""
    return {"XDG_CACHE_HOME": str(out / "xdg-cache"), "XDG_DATA_HOME": str(out / "xdg-data"), "SECRET_KEY_VAR": KEY}


@pytest.mark.parametrize("metrics", ["--metrics-url", "--server-metrics"])
def test_a_run_with_secrets_in_every_url_writes_and_prints_none(cli, server, prompt_file, tmp_path, metrics):
    url, seen = server
    endpoint, metrics_url = secret_urls(url)
    out = tmp_path / "out"
    scrape = ["--metrics-url", metrics_url] if metrics == "--metrics-url" else ["--server-metrics"]
    seen.clear()
    r = cli("run", prompt_file, "--endpoint", endpoint, *scrape, "--api-key-env", "SECRET_KEY_VAR", "--repeats", "2",
            "-o", out / "r.json", "--history", out / "history.db", env=isolated(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    # the secrets were used: the query token and the userinfo reached the server (sent as Basic auth)
    chats = [(q, h) for p, q, h in seen if p == "/v1/chat/completions"]
    assert chats and all(f"api_key={TOKEN}" in q and h["authorization"].startswith("Basic ") for q, h in chats)
    scrapes = [(q, h) for p, q, h in seen if p == "/metrics"]
    assert len(scrapes) >= 3  # the check, then the window's first and last
    if metrics == "--metrics-url":
        assert all(q == f"token={MTOKEN}" and SECRETS[-1] in h["authorization"] for q, h in scrapes)
    run = load_run(out / "r.json")
    hostport = url.removeprefix("http://")
    assert run.config.endpoint.url == f"http://{hostport}/v1/chat/completions"
    assert run.server_metrics["url"] == f"http://{hostport}/metrics" and run.server_metrics["scrapes"] >= 2
    assert run.config.endpoint.api_key_env == "SECRET_KEY_VAR"  # the variable's name, never its value
    assert (out / "history.db").exists() and f"via http://{hostport}/v1/chat/completions" in r.stdout
    assert leaks(out, r.stdout, r.stderr) == []
    shown = cli("show", out / "r.json")
    assert shown.returncode == 0 and leaks(out, shown.stdout, shown.stderr) == []


def test_a_failed_scrape_is_one_line_without_the_secrets(cli, server, prompt_file, tmp_path):
    url, _ = server
    endpoint, metrics_url = secret_urls(url)
    closed = metrics_url.replace(url.removeprefix("http://"), f"127.0.0.1:{free_port()}")  # nothing listens there
    missing = metrics_url.replace("/metrics", "/not-metrics")  # a 404: httpx's message carries the whole URL
    for scrape, why in ((closed, "Connect"), (missing, "404")):
        out = tmp_path / why
        r = cli("run", prompt_file, "--endpoint", endpoint, "--metrics-url", scrape, "-o", out / "r.json",
                env=isolated(out))  # fmt: skip
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "--server-metrics: can't read http://127.0.0.1:" in r.stderr and why in r.stderr
        assert "Traceback" not in r.stderr and leaks(tmp_path, r.stdout, r.stderr) == []
        assert not (out / "r.json").exists()


def test_urls_that_fail_say_so_without_the_secrets(cli, prompt_file, tmp_path):
    closed = f"{USER}:{PW}@127.0.0.1:{free_port()}"
    cases = [
        (["--endpoint", f"http://{closed}/v1?key={TOKEN}"], "cannot connect to http://127.0.0.1:"),
        (["--endpoint", f"ftp://{closed}/v1?key={TOKEN}"], "is not an http(s) URL"),
        (["--endpoint", f"http://{closed}/v1", "--metrics-url", f"ftp://{closed}/m?key={TOKEN}"],
         "--metrics-url must be an http(s) URL"),
    ]  # fmt: skip
    for args, said in cases:
        r = cli("run", prompt_file, *args, "-o", tmp_path / "r.json", env=isolated(tmp_path))
        assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and leaks(tmp_path, r.stdout, r.stderr) == []


def test_load_with_secrets_writes_and_prints_none(cli, server, prompt_file, tmp_path):
    url, seen = server
    endpoint, metrics_url = secret_urls(url)
    out = tmp_path / "load"
    seen.clear()
    r = cli("load", prompt_file, "--endpoint", endpoint, "--metrics-url", metrics_url, "--api-key-env",
            "SECRET_KEY_VAR", "--rates", "20", "--requests", "4", "--slo", "ttft_ms:p50=10000", "--warmup", "0",
            "-o", out, env=isolated(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sum(p == "/v1/chat/completions" for p, _, _ in seen) == 4
    assert {p.name for p in out.glob("*.json")} == {"load.json", "rate-20.json"}
    assert leaks(out, r.stdout, r.stderr) == []


def test_a_server_that_quotes_the_secrets_back_is_recorded_without_them(cli, server, prompt_file, tmp_path):
    """A 429 is recorded (failed_requests) with the server's own message, which here quotes the API key and the
    URL's token: both masked, in the file and on the terminal."""
    url, seen = server
    endpoint = url + f"/echo/v1?api_key={TOKEN}"
    out = tmp_path / "out"
    seen.clear()
    r = cli("run", prompt_file, "--endpoint", endpoint, "--api-key-env", "SECRET_KEY_VAR", "--warmup", "0",
            "-o", out / "r.json", env=isolated(out))  # fmt: skip
    assert r.returncode == 2 and "every request failed" in r.stderr, r.stderr
    assert any(h.get("authorization") == f"Bearer {KEY}" for _, _, h in seen)  # the key was sent, and said back
    run = load_run(out / "r.json")
    assert run.failed_requests and all(f.status == 429 for f in run.failed_requests)
    assert run.failed_requests[0].error.startswith("HTTP 429: slow down, Bearer redacted at /echo/v1/")
    assert leaks(out, r.stdout, r.stderr) == []


@pytest.mark.subprocess
def test_a_killed_run_leaves_a_journal_without_the_secrets(server, many_prompts, tmp_path):
    url, _ = server
    endpoint, metrics_url = secret_urls(url)
    out = tmp_path / "out"
    proc = cli_process("run", many_prompts, "--endpoint", endpoint, "--metrics-url", metrics_url, "--repeats", "20",
                       "-o", out / "r.json", env=isolated(out))  # fmt: skip
    try:
        wait_for_requests(out / "r.json", 3, proc)
        proc.send_signal(signal.SIGKILL)  # no compaction: the journal stays as it was written
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (out / "r.json.journal").exists()
    assert leaks(out, stdout, stderr) == []


def test_a_worker_that_cannot_start_is_named_without_its_secrets():
    """A real child process (``env`` running a program that isn't there) and a command that can't start at all."""
    import asyncio

    from llmbench.backends.worker import WorkerBackend
    from llmbench.core.errors import UserError
    from llmbench.options import RunOptions
    from llmbench.workloads.prompts import PromptSet

    exits = "the worker exited (code 127) (worker: env HF_TOKEN=redacted no-such-program-xyz --api-key redacted"
    commands = {
        exits: ["env", f"HF_TOKEN={TOKEN}", "no-such-program-xyz", "--api-key", KEY],
        "cannot start the worker no-such-program-xyz --token=redacted": ["no-such-program-xyz", f"--token={TOKEN}"],
    }
    for said, command in commands.items():
        with pytest.raises(UserError) as e:
            asyncio.run(WorkerBackend(command, RunOptions(), label="head: ").start(PromptSet.from_list(["a"])))
        assert said in str(e.value) and not [s for s in SECRETS if s in str(e.value)], str(e.value)


@pytest.mark.subprocess
def test_an_open_loop_over_worker_processes_writes_and_prints_none(cli, server, prompt_file, tmp_path):
    """--workers: the driver's own status line names the endpoint, and the workers pass it across processes."""
    url, seen = server
    endpoint, metrics_url = secret_urls(url)
    out = tmp_path / "out"
    seen.clear()
    r = cli("run", prompt_file, "--endpoint", endpoint, "--metrics-url", metrics_url, "--rate", "20", "--requests",
            "4", "--workers", "2", "-o", out / "w.json", env=isolated(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sum(p == "/v1/chat/completions" for p, _, _ in seen) >= 4 and "over 2 local client processes" in r.stderr
    assert leaks(out, r.stdout, r.stderr) == []
