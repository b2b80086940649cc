"""``llmbench paint``: the last link of the chain, model -> server -> whatever sits between -> the browser's pixels.

Headless Chromium (driven by Playwright, imported here only) loads a page llmbench fulfils at the endpoint's own
origin (``ORIGIN/__llmbench_paint__``, ``page.route``: nothing is served by the server for it), so the page's
``fetch`` to the endpoint is same-origin whatever the server is. For each prompt the page streams one chat
completion and stamps every content event when it was read, appended to the DOM and painted
(llmbench/data/paint.html); Python records ``time.time()`` around each request, and llmbench's own endpoint client
streams the same prompt once more through the same URL for the buffering detector. The numbers are computed in
:mod:`llmbench.results.paint`; the record (``paint_version``) keeps every raw stamp beside them.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llmbench.backends.http.client import (
    ServerUnreachable,
    api_headers,
    chat_url,
    probe_server,
    redact,
    request_body,
    stream_one,
    stream_session,
)
from llmbench.core.errors import BackendUnavailable, RequestFailed, UserError, require
from llmbench.options import EndpointOptions, RunOptions
from llmbench.results import paint as figures
from llmbench.results.schema import PAINT_VERSION, llmbench_version, utc_now
from llmbench.results.storage import write_record
from llmbench.workloads.limits import check_planned
from llmbench.workloads.prompts import PromptSet

PAGE_PATH = "/__llmbench_paint__"
DEBIAN_CHROMIUM = "/usr/bin/chromium"
OnRequest = Callable[[str, dict], None]  # ("warmup" | "measured" | "failed", the request's entry)


def find_chromium(given: Path | str | None = None) -> str:
    """Chromium's executable: ``given``, else Debian's /usr/bin/chromium, else chromium or chromium-browser on
    PATH. UserError in one line when there is none."""
    if given is not None:
        p = Path(given).expanduser()
        if not p.is_file() or not os.access(p, os.X_OK):
            raise UserError(f"--chromium {p}: no such executable")
        return str(p)
    if os.access(DEBIAN_CHROMIUM, os.X_OK):
        return DEBIAN_CHROMIUM
    for name in ("chromium", "chromium-browser"):
        if found := shutil.which(name):
            return found
    raise UserError("llmbench paint needs Chromium: apt-get install chromium (Debian), or --chromium PATH")


def check_tools(chromium: Path | str | None = None) -> str:
    """Before anything is sent: Playwright importable and a Chromium found (its path). UserError otherwise."""
    require("llmbench paint", "paint", "playwright")
    return find_chromium(chromium)


def page_html() -> str:
    """The measuring page (llmbench/data/paint.html)."""
    return (resources.files("llmbench") / "data" / "paint.html").read_text(encoding="utf-8")


def origin_of(url: str) -> str:
    u = urlsplit(url)
    return f"{u.scheme}://{u.netloc}"


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


async def _client_check(url: str, body: dict, headers: dict, timeout_s: float) -> tuple[dict | None, str | None]:
    """The same request through llmbench's endpoint client: (its figures, None) or (None, why it failed)."""
    try:
        async with stream_session(1, timeout_s) as session:
            start_unix_ms = time.time() * 1000
            s = await stream_one(session, url, body, headers)
    except (RequestFailed, BackendUnavailable) as e:
        return None, str(e)
    return figures.client_figures(start_unix_ms, [(t - s.start_ns) / 1e6 for t in s.stamps_ns]), None


class _Page:
    """One browser page at the endpoint's origin, the measuring page loaded."""

    def __init__(self, page: Any, url: str, headers: dict, timeout_s: float) -> None:
        self.page, self.url, self.headers, self.timeout_s = page, url, headers, timeout_s
        self.errors: list[str] = []
        page.on("pageerror", lambda e: self.errors.append(_first_line(e)))

    async def load(self) -> None:
        where = origin_of(self.url) + PAGE_PATH
        html = page_html()

        async def fulfil(route: Any) -> None:
            await route.fulfill(status=200, content_type="text/html; charset=utf-8", body=html)

        await self.page.route(where, fulfil)
        await self.page.goto(where)
        await self.page.unroute(where)  # the streams themselves go past no interception
        await self.page.wait_for_function("window.llmbenchReady === true")

    async def send(self, body: dict) -> dict:
        """One streamed request in the page: its raw record, Python's wall clock around it added."""
        cfg = {"url": self.url, "body": body, "headers": self.headers, "timeout_ms": self.timeout_s * 1000}
        before = time.time() * 1000
        raw = await self.page.evaluate("cfg => window.llmbenchPaint(cfg)", cfg)
        raw["python"] = {"before_unix_ms": round(before, 3), "after_unix_ms": round(time.time() * 1000, 3)}
        if self.errors:
            raw["page"]["error"] = raw["page"]["error"] or f"page error: {self.errors[0]}"
            self.errors.clear()
        return raw


def _entry(raw: dict, index: int, repeat: int, client: dict | None, client_error: str | None) -> dict:
    """One measured request's entry: its figures, the client's, whether they agree, and the raw stamps."""
    page, events = raw["page"], raw["events"]
    fig = figures.request_figures(page, events, raw["python"]["before_unix_ms"])
    entry: dict[str, Any] = {"prompt_index": index, "repeat": repeat, **fig, "client": client}
    if client_error:
        entry["client_error"] = client_error
    entry["agree"] = figures.agreement(fig, client)
    entry["text"] = "".join(e["text"] for e in events)
    entry["raw"] = {"python": raw["python"], "page": page, "events": events}
    return entry


async def _measure(page: _Page, plan: list[tuple[str, int, int]], prompts: PromptSet, bodies: Callable[[str], dict],
                   client_check: bool, on_request: OnRequest | None) -> tuple[list[dict], list[dict]]:  # fmt: skip
    """Each (kind, index, repeat) of ``plan`` in the page, then (unless warm-up or no check) through the client."""
    measured: list[dict] = []
    failed: list[dict] = []
    for kind, index, repeat in plan:
        body = bodies(prompts.prompts[index])
        raw = await page.send(body)
        error = raw["page"]["error"] or (None if raw["events"] else "the stream carried no content")
        client, client_error = (None, None)
        if client_check and kind == "measured":  # a fresh client each time: nothing of it to warm up
            client, client_error = await _client_check(page.url, body, page.headers, page.timeout_s)
        if error:
            entry = {"prompt_index": index, "repeat": repeat, "warmup": kind == "warmup", "error": error}
            failed.append(entry)
            kind = "failed"
        else:
            entry = _entry(raw, index, repeat, client, client_error)
            if kind == "measured":
                measured.append(entry)
        if on_request is not None:
            on_request(kind, entry)
    return measured, failed


def _plan(prompts: PromptSet, options: RunOptions) -> list[tuple[str, int, int]]:
    n = len(prompts.prompts)
    warm = [("warmup", k % n, -1) for k in range(options.warmup)]
    return warm + [("measured", i, r) for r in range(options.repeats) for i in range(n)]


async def paint(
    prompts: PromptSet,
    endpoint: EndpointOptions,
    options: RunOptions,
    *,
    chromium: Path | str | None = None,
    client_check: bool = True,
    output: Path | None = None,
    on_request: OnRequest | None = None,
) -> dict:
    """Stream every prompt in headless Chromium at ``endpoint``'s origin: the paint record (written to ``output``
    when given). UserError before anything is sent for a missing Playwright or Chromium, a bad URL or a server
    that does not answer; and when every measured request failed."""
    options.check()
    endpoint.check()
    check_planned(("prompts", len(prompts.prompts)), ("--repeats", options.repeats))  # before Chromium starts
    url = chat_url(endpoint.endpoint)
    headers = api_headers(endpoint.api_key_env)
    executable = check_tools(chromium)
    try:
        health, listed = await probe_server(url, headers)
    except ServerUnreachable as e:
        raise UserError(str(e)) from None
    model = endpoint.model or listed or (health or {}).get("model")

    def bodies(prompt: str) -> dict:
        return request_body(model, prompt, options)

    from playwright.async_api import Error as PlaywrightError
    from playwright.async_api import async_playwright

    args = ["--disable-gpu", *(["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])]
    async with async_playwright() as pw:
        try:
            browser = await pw.chromium.launch(executable_path=executable, args=args, headless=True)
        except PlaywrightError as e:
            raise UserError(f"Chromium ({executable}) did not start: {_first_line(e)}") from None
        try:
            page = _Page(await browser.new_page(), url, headers, endpoint.timeout_s)
            await page.load()
            agent = await page.page.evaluate("navigator.userAgent")
            measured, failed = await _measure(page, _plan(prompts, options), prompts, bodies, client_check,
                                              on_request)  # fmt: skip
            version = browser.version
        finally:
            await browser.close()
    if not measured:
        why = failed[0]["error"] if failed else "nothing was measured"
        raise UserError(f"no request was measured: {why}")
    record = {
        "paint_version": PAINT_VERSION,
        "created_at": utc_now(),
        "llmbench_version": llmbench_version(),
        "endpoint": redact(url),
        "model": model,
        "server": {k: health[k] for k in ("model", "weights", "device", "dtype") if k in health} if health else None,
        "browser": {"executable": executable, "version": version, "user_agent": agent, "args": args},
        "prompts": {"path": prompts.path, "sha256": prompts.sha256, "count": len(prompts.prompts)},
        "settings": {
            "max_new_tokens": options.max_new_tokens,
            "ignore_eos": options.ignore_eos,
            "warmup": options.warmup,
            "repeats": options.repeats,
            "client_check": client_check,
            "timeout_s": endpoint.timeout_s,
        },
        "formulas": figures.PAINT_FORMULAS,
        "summary": figures.summarize(measured),
        "requests": measured,
        "failed": failed,
    }
    if output is not None:
        write_record(output, record)
    return record
