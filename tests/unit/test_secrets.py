"""Secrets never written: a user name, a password, query tokens and an API key planted in every URL option of real
``run`` and ``load`` commands against a real loopback server reach the server, and appear in no file the command
wrote (run JSON, journal, history database, caches) and nowhere on stdout or stderr; nor in the one error line
of a scrape or a connection that failed.

This file: the part that needs no child process and no socket (tests/unit); the rest is in
tests/integration/test_secrets.py."""

from __future__ import annotations

import pytest

from tests.integration.test_secrets import (
    KEY,
    PW,
    SECRETS,
    TOKEN,
    USER,
    server,  # noqa: F401 (fixtures)
)


def test_redact_url_keeps_where_and_drops_every_secret():
    from llmbench.core import redact

    assert redact.redact_url(f"http://{USER}:{PW}@127.0.0.1:8000/v1?api_key={TOKEN}#frag") == "http://127.0.0.1:8000/v1"
    assert redact.redact_url(f"https://{TOKEN}@[::1]:9/x") == "https://[::1]:9/x"  # a user name alone can be a key
    assert redact.redact_url(f"postgresql://{USER}:{PW}@db.example:5432/h?sslpassword={PW}") == (
        "postgresql://db.example:5432/h"
    )
    assert redact.redact_url(f"{USER}:{PW}@10.0.0.1:6379?x={TOKEN}") == "10.0.0.1:6379"  # no scheme (a Ray address)
    assert redact.redact_url(f"http://{USER}:{PW}@[::1/v1?k={TOKEN}") == "http://[::1/v1"  # unparseable: no raise
    assert redact.redact_url("auto") == "auto" and redact.redact_url("http://127.0.0.1:1/v1") == "http://127.0.0.1:1/v1"
    assert redact.redact_url("sqlite:////abs/h.db") == "sqlite:////abs/h.db"  # an empty authority keeps its //


def test_scrub_redacts_every_url_in_a_line():
    from llmbench.core import redact

    line = f"Client error '404 Not Found' for url 'http://{USER}:{PW}@h:1/m?token={TOKEN}'. See http://x/a, then"
    assert redact.scrub(line) == "Client error '404 Not Found' for url 'http://h:1/m'. See http://x/a, then"
    assert redact.mask(f"bad key {KEY}!", [KEY, ""]) == "bad key redacted!"


def test_a_command_line_keeps_its_shape_and_loses_its_secrets():
    from llmbench.core import redact

    argv = ["env", f"HF_TOKEN={TOKEN}", "llmbench", "worker", "--model", "m", "--api-key", KEY, f"--token={TOKEN}",
            "--endpoint", f"http://{USER}:{PW}@127.0.0.1:1/v1?k={TOKEN}"]  # fmt: skip
    assert redact.redact_command(argv) == (
        "env HF_TOKEN=redacted llmbench worker --model m --api-key redacted --token=redacted "
        "--endpoint http://127.0.0.1:1/v1"
    )


def test_a_ray_address_that_cannot_be_joined_is_said_without_its_secrets(monkeypatch):
    """Ray itself is not started (it leaves loopback, see test_ray): its init fails as it does for a cluster that
    is not there, with the address in its message."""
    ray = pytest.importorskip("ray")
    from llmbench.core.errors import UserError
    from llmbench.options import EndpointOptions, OpenLoop, RunOptions
    from llmbench.runner import loadgen
    from llmbench.workloads.prompts import PromptSet

    address = f"ray://{USER}:{PW}@127.0.0.1:1?token={TOKEN}"

    def no_cluster(address: str | None = None, **_kw) -> None:
        raise ConnectionError(f"Failed to connect to the cluster at {address}")

    monkeypatch.setattr(ray, "init", no_cluster)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    target = EndpointOptions(endpoint="http://127.0.0.1:1/v1", open_loop=OpenLoop(rate=1, requests=2, workers=2,
                                                                                       ray=address))  # fmt: skip
    with pytest.raises(UserError) as e:
        import asyncio

        asyncio.run(loadgen.run_ray(PromptSet.from_list(["a"]), target, RunOptions(), None))
    assert "--ray ray://127.0.0.1:1: cannot join the cluster" in str(e.value)
    assert not [s for s in SECRETS if s in str(e.value)]
