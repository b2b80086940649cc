"""A stamping stub: an OpenAI-compatible streaming server on a fixed schedule that says when it sent each event.

Ground truth for the client's own delay (issue 59): each request streams ``tokens`` content events, the first
``first_ms`` after the request arrived and then one every ``gap_ms``, each due at its planned instant (an absolute
schedule: a late event does not push the next one). The final usage chunk carries, under ``llmbench`` (the key
``llmbench serve`` uses), the arrival on the wall clock and each event's actual send time in ms since arrival, so
a client on the same machine can put its arrival stamps beside the sends: client-added delay = client stamp - send
stamp. The stub records its own lateness (send - plan) per event: ``GET /stats`` returns its percentiles, so a run
whose server fell behind is told apart from one whose client did.

Plain asyncio streams and HTTP/1.1 with chunked bodies (keep-alive), no framework: the stub must cost less per
event than any client it measures. Loopback only.

    python benchmarks/stamp_server.py --port 8011 --first-ms 20 --gap-ms 10 --tokens 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

WORD = "tok "
# one content event ("object" as OpenAI's format has it: AIPerf drops a chunk without it)
EVENT = b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n' % WORD.encode()


class StampServer:
    """The stub's schedule and its own record of lateness; :meth:`serve` runs it on 127.0.0.1."""

    def __init__(self, first_ms: float = 20.0, gap_ms: float = 10.0, tokens: int = 64) -> None:
        self.first_ms, self.gap_ms, self.tokens = first_ms, gap_ms, tokens
        self.lateness_ms: list[float] = []  # every event's send - plan
        self.requests = 0
        self.server: asyncio.AbstractServer | None = None

    def stats(self) -> dict[str, Any]:
        """The stub's own lateness: p50, p99 and max over every event sent so far (and how many)."""
        late = sorted(self.lateness_ms)

        def q(p: float) -> float | None:
            return round(late[min(len(late) - 1, int(p * len(late)))], 3) if late else None

        return {"requests": self.requests, "events": len(late), "lateness_p50_ms": q(0.5),
                "lateness_p99_ms": q(0.99), "lateness_max_ms": round(late[-1], 3) if late else None}  # fmt: skip

    def reset(self) -> None:
        self.lateness_ms.clear()
        self.requests = 0

    async def serve(self, port: int = 0) -> int:
        """Listen on 127.0.0.1 (``port`` 0: a free one); the port."""
        self.server = await asyncio.start_server(self._connection, "127.0.0.1", port, backlog=4096)
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                arrived_ns = time.perf_counter_ns()
                arrived_unix_ms = time.time() * 1000
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                if method == "POST" and path.endswith("/chat/completions"):
                    await self._stream(writer, body, arrived_ns, arrived_unix_ms)
                else:
                    payload = (
                        self.stats()
                        if "/stats" in path
                        else ({"data": [{"id": "stamp-stub", "object": "model"}]} if path.endswith("/models") else {})
                    )
                    if "/stats?reset" in path:
                        self.reset()
                    data = json.dumps(payload).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                                 + str(len(data)).encode() + b"\r\n\r\n" + data)  # fmt: skip
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _stream(self, writer: asyncio.StreamWriter, body: bytes, arrived_ns: int, arrived_unix_ms: float) -> None:
        self.requests += 1
        asked = json.loads(body or b"{}")
        # max_completion_tokens: OpenAI's newer name (AIPerf sends it)
        n = min(int(asked.get("max_tokens") or asked.get("max_completion_tokens") or self.tokens), self.tokens)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
        sent_ms: list[float] = []
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for k in range(n):
            plan_s = (self.first_ms + k * self.gap_ms) / 1000
            delay = t0 + plan_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            event = EVENT
            # stamped just before the bytes go to the kernel: no client can read them earlier
            sent_ms.append(round((time.perf_counter_ns() - arrived_ns) / 1e6, 3))
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.lateness_ms.append((loop.time() - t0 - plan_s) * 1000)
            await writer.drain()
        usage = {"object": "chat.completion.chunk", "choices": [],
                 "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1},
                 "llmbench": {"arrived_unix_ms": round(arrived_unix_ms, 3), "token_times_ms": sent_ms}}  # fmt: skip
        for event in (b"data: " + json.dumps(usage).encode() + b"\n\n", b"data: [DONE]\n\n"):
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--first-ms", type=float, default=20.0)
    ap.add_argument("--gap-ms", type=float, default=10.0)
    ap.add_argument("--tokens", type=int, default=64)
    a = ap.parse_args()

    async def run() -> None:
        stub = StampServer(a.first_ms, a.gap_ms, a.tokens)
        port = await stub.serve(a.port)
        print(f"stamp stub on http://127.0.0.1:{port}/v1 (first {a.first_ms:g} ms, then every {a.gap_ms:g} ms, "
              f"{a.tokens} tokens)", flush=True)  # fmt: skip
        await asyncio.Event().wait()

    asyncio.run(run())


if __name__ == "__main__":
    main()
