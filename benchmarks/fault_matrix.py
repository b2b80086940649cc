"""The fault matrix: faults injected into every measuring command, and what each kept.

For every (command, fault) it runs the real ``llmbench`` command in a process of its own on a tiny real Qwen2
(2 layers, the real Qwen tokenizer; built once per matrix) or against a loopback server that misbehaves on
purpose (``fault_server.py``), injects the fault, and reports:

- **exit**: the exit code (negative: killed by that signal), against what the fault should give;
- **clear**: the fault is told in one line (``llmbench: error: ...`` or ``interrupted by ...``), with no
  traceback and no "internal error" (SIGKILL leaves nothing to say: n/a);
- **finished / kept**: requests the command had made durable before the fault (the most this script saw on disk
  while it ran: a lower bound of what finished) and what its files hold afterwards; **lost** = finished - kept;
- **resume**: ``--resume`` (run, ab) completes the run once the fault is gone (every planned request, complete);
- **history**: with ``--history``, after the fault and a later ``history add`` of what the command wrote, every
  result row has its metrics and no run is recorded twice.

Commands: run (in-process), run-columns (the same past the line between one file and two: JSON plus a columns file,
appended a batch per group commit), run-endpoint, sweep, scan, load, ab, quality, history add. A columns file
truncated or altered after the fact is refused in one line (tests/unit/test_run_columns.py): the disk lost what it
held, which no writer can keep.

Faults: sigint, sigterm, sigkill (when a random number of requests is on disk); disk-full (the output folder
is a small tmpfs); read-only (a read-only tmpfs from the start) and read-only-mid (remounted read-only mid-run);
db-locked (another writer holds the SQLite history's write lock longer than the busy timeout); pg-stopped (the
PostgreSQL history server stops mid-run); worker-killed (ab: a worker process killed mid-run); sse-stall,
sse-reset, sse-malformed (the endpoint stalls past --timeout, drops the connection, or sends an event that is not
JSON, mid-stream). Mounting needs root; without it the tmpfs rows are skipped with the reason, as are the
PostgreSQL rows without Debian's server binaries.

    python benchmarks/fault_matrix.py                 # every row (about 10 minutes on 2 cores)
    python benchmarks/fault_matrix.py --quick         # the CI subset (tests/e2e/test_fault_matrix_quick.py)
    python benchmarks/fault_matrix.py --only run,ab --faults sigkill,disk-full --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from tests import postgres  # noqa: E402  (a real PostgreSQL cluster, as the history tests start one)

PROMPTS = 24
TOKENS = 8
SIGNALS = {"sigint": (signal.SIGINT, 130), "sigterm": (signal.SIGTERM, 143), "sigkill": (signal.SIGKILL, -9)}
MACHINE_FAULTS = ("disk-full", "read-only", "read-only-mid", "db-locked", "pg-stopped")
SSE_FAULTS = ("sse-stall", "sse-reset", "sse-malformed")


@dataclass
class Outcome:
    """One row of the matrix."""

    command: str
    fault: str
    exit: int | None = None
    expected_exit: str = ""
    clear: bool | None = None
    finished: int = 0
    kept: int = 0
    resume: str = "n/a"
    history: str = "n/a"
    line: str = ""
    seconds: float = 0.0
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return max(0, self.finished - self.kept)

    @property
    def survived(self) -> bool:
        """Nothing finished lost, told in one line, the exit it should give, resumed and recorded consistently."""
        return (self.skipped is None and self.lost == 0 and self.clear is not False and self.exit_ok
                and self.resume in ("ok", "n/a") and self.history in ("consistent", "n/a"))  # fmt: skip

    @property
    def exit_ok(self) -> bool:
        return self.exit is not None and str(self.exit) in self.expected_exit.split("|")


# ------------------------------------------------------------------------------------------------ the setting


@dataclass
class Ctx:
    """What every case shares: the work folder, the tiny model, the prompts, the servers."""

    work: Path
    model: Path
    prompts: Path
    text: Path
    rng: random.Random
    server_url: str = ""
    server_app: Any = None
    pg: PgCluster | None = None
    history_files: list[Path] = field(default_factory=list)
    mount: Path | None = None  # the case's tmpfs
    locker: subprocess.Popen | None = None  # the case's other SQLite writer


def build_model(folder: Path) -> Path:
    """A 2-layer Qwen2 with random weights and the real Qwen tokenizer, saved as a user's model folder is."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from llmbench.engines.hf.builtin import qwen_tokenizer
    from tests.conftest import TINY

    torch.manual_seed(1)
    AutoModelForCausalLM.from_config(Qwen2Config(**TINY)).save_pretrained(folder)
    qwen_tokenizer().save_pretrained(folder)
    return folder


class PgCluster:
    """A PostgreSQL cluster on loopback that a case can stop and start again (tests/postgres.py's recipe)."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="llmbench-faults-pg-"))
        os.chmod(self.folder, 0o755)
        self.data = self.folder / "pgdata"
        self.data.mkdir()
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            import pwd

            pw = pwd.getpwnam("postgres")
            for p in (self.folder, self.data):
                os.chown(p, pw.pw_uid, pw.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self.port = postgres._free_port()
        self._run(postgres._binary("initdb") or "initdb", "-D", str(self.data), "-U", "llmbench", "--auth=trust")
        self.start()
        self.url = f"postgresql://llmbench@127.0.0.1:{self.port}/history"
        self.db = 0

    def _run(self, *argv: str) -> None:
        subprocess.run([*self.prefix, *argv], check=True, capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.data} -c fsync=off"
        self._run(postgres._binary("pg_ctl") or "pg_ctl", "-D", str(self.data), "-o", opts, "-l",
                  str(self.data / "log"), "-w", "start")  # fmt: skip

    def stop(self) -> None:
        self._run(postgres._binary("pg_ctl") or "pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def new_database(self) -> str:
        """A fresh, empty database for one case."""
        self.db += 1
        name = f"case{self.db}"
        self._run(postgres._binary("createdb") or "createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U",
                  "llmbench", name)  # fmt: skip
        return f"postgresql://llmbench@127.0.0.1:{self.port}/{name}"

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._run(postgres._binary("pg_ctl") or "pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ the commands


@dataclass
class Command:
    """A measuring command: its arguments into ``out``, the files whose requests count, its resume, if any."""

    name: str
    argv: Callable[[Ctx, Path], list[str]]
    files: Callable[[Path], list[Path]]
    planned: int  # requests a complete run of it holds (resume's target)
    resume: Callable[[Ctx, Path], list[str]] | None = None
    history: bool = True  # takes --history
    endpoint: bool = False
    env: dict[str, str] = field(default_factory=dict)  # set for the command and its resume


def _model(ctx: Ctx) -> list[str]:
    return ["-m", str(ctx.model), "--device", "cpu", "--dtype", "float32", "--threads", "1"]


def _worker(ctx: Ctx) -> str:
    return f"{sys.executable} -m llmbench worker -m {ctx.model} --device cpu --dtype float32 --threads 1"


def _runs_in(folder: Path) -> list[Path]:
    drivers = {"sweep.json", "scan.json", "load.json"}
    return sorted(p for p in folder.glob("*.json") if p.name not in drivers) if folder.is_dir() else []


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        Command("run", lambda ctx, out: ["run", str(ctx.prompts), *_model(ctx), "--max-new-tokens", str(TOKENS),
                                         "--warmup", "0", "-o", str(out / "run.json")],
                lambda out: [out / "run.json"], PROMPTS,
                resume=lambda ctx, out: ["run", str(ctx.prompts), *_model(ctx), "--max-new-tokens", str(TOKENS),
                                         "--warmup", "0", "--resume", str(out / "run.json")]),
        # every run past the line (LLMBENCH_COLUMNS_FROM=0): its requests a columns file beside the JSON, appended
        # a batch per group commit, the pending ones in the journal; a SIGKILL may land mid-batch
        Command("run-columns", lambda ctx, out: ["run", str(ctx.prompts), *_model(ctx), "--max-new-tokens",
                                                 str(TOKENS), "--warmup", "0", "-o", str(out / "run.json")],
                lambda out: [out / "run.json"], PROMPTS, env={"LLMBENCH_COLUMNS_FROM": "0"},
                resume=lambda ctx, out: ["run", str(ctx.prompts), *_model(ctx), "--max-new-tokens", str(TOKENS),
                                         "--warmup", "0", "--resume", str(out / "run.json")]),
        Command("run-endpoint", lambda ctx, out: ["run", str(ctx.prompts), "--endpoint", ctx.server_url,
                                                  "--max-new-tokens", str(TOKENS), "--warmup", "0", "--timeout", "2",
                                                  "-o", str(out / "run.json")],
                lambda out: [out / "run.json"], PROMPTS, endpoint=True,
                resume=lambda ctx, out: ["run", str(ctx.prompts), "--endpoint", ctx.server_url, "--max-new-tokens",
                                         str(TOKENS), "--warmup", "0", "--timeout", "2", "--resume",
                                         str(out / "run.json")]),
        Command("sweep", lambda ctx, out: ["sweep", str(ctx.prompts), "-m", str(ctx.model), "--device", "cpu",
                                           "--dtype", "float32,bfloat16", "--threads", "1", "--max-new-tokens",
                                           str(TOKENS), "-o", str(out / "sweep")],
                lambda out: _runs_in(out / "sweep"), 2 * 3 * PROMPTS),  # 2 setups, 3 rounds
        Command("scan", lambda ctx, out: ["scan", *_model(ctx), "--prompt-tokens", "32,64", "--depth", "",
                                          "--batch", "", "--rounds", "3",
                                          "--prompts-per-point", "4", "-o", str(out / "scan")],
                lambda out: _runs_in(out / "scan"), 2 * 3 * 4),
        Command("load", lambda ctx, out: ["load", str(ctx.prompts), "--endpoint", ctx.server_url, "--rates", "20,40",
                                          "--requests", "16", "--max-new-tokens", str(TOKENS), "--ignore-eos",
                                          "--timeout", "2", "--slo", "ttft_ms:p90=2000", "-o", str(out / "load")],
                lambda out: _runs_in(out / "load"), 32, endpoint=True),
        Command("ab", lambda ctx, out: ["ab", str(ctx.prompts), "--base", _worker(ctx), "--head", _worker(ctx),
                                        "--max-new-tokens", str(TOKENS), "-o", str(out / "ab")],
                lambda out: [out / "ab" / "base.json", out / "ab" / "head.json"], 2 * PROMPTS,
                resume=lambda ctx, out: ["ab", str(ctx.prompts), "--base", _worker(ctx), "--head", _worker(ctx),
                                         "--max-new-tokens", str(TOKENS), "-o", str(out / "ab"), "--resume"]),
        Command("quality", lambda ctx, out: ["quality", *_model(ctx), "--text", str(ctx.text), "--prompts",
                                             str(ctx.prompts), "--max-new-tokens", "6", "-o", str(out / "q.json")],
                lambda out: [out / "q.json"], 1),
        Command("history-add", lambda ctx, out: ["history", "add", *map(str, ctx.history_files)],
                lambda out: [], 0),
    )
}  # fmt: skip

FAULTS: dict[str, tuple[str, ...]] = {
    "run": ("none", "sigint", "sigterm", "sigkill", "disk-full", "read-only", "read-only-mid", "db-locked",
            "pg-stopped"),
    "run-columns": ("none", "sigint", "sigkill", "disk-full", "read-only-mid"),
    "run-endpoint": ("none", "sigint", "sigterm", "sigkill", "sse-stall", "sse-reset", "sse-malformed"),
    "sweep": ("none", "sigint", "sigterm", "sigkill", "disk-full", "read-only", "db-locked"),
    "scan": ("none", "sigint", "sigterm", "sigkill", "disk-full", "read-only", "db-locked"),
    "load": ("none", "sigint", "sigterm", "sigkill", "disk-full", "read-only", "db-locked", "sse-stall", "sse-reset",
             "sse-malformed"),
    "ab": ("none", "sigint", "sigterm", "sigkill", "disk-full", "read-only", "db-locked", "pg-stopped",
           "worker-killed"),
    "quality": ("none", "sigint", "sigterm", "sigkill", "disk-full", "read-only", "db-locked"),
    "history-add": ("none", "sigint", "sigterm", "sigkill", "disk-full", "read-only", "db-locked", "pg-stopped"),
}  # fmt: skip
QUICK = {("run", "sigint"), ("run", "sigkill"), ("run", "disk-full"), ("run", "db-locked"), ("run-columns", "sigkill"),
         ("run-endpoint", "sse-reset"), ("run-endpoint", "sse-stall"), ("ab", "worker-killed"), ("ab", "sigterm"),
         ("sweep", "sigkill"), ("history-add", "sigkill")}  # fmt: skip


def expected_exit(command: str, fault: str) -> str:
    """The exit codes a fault should end in ("|" between alternatives)."""
    if fault in SIGNALS:
        return str(SIGNALS[fault][1])
    if fault == "none" or (fault in SSE_FAULTS and command != "load"):
        return "0"  # a request that failed mid-stream is recorded as failed; the rest go on
    if fault in SSE_FAULTS:
        return "0|1"  # load: a rate whose requests failed may miss its SLOs
    return "2"  # the machine's fault, said in one line


# ------------------------------------------------------------------------------------------------ the faults


@contextlib.contextmanager
def tmpfs(folder: Path, size_kib: int, read_only: bool = False) -> Iterator[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    opts = f"size={size_kib}k" + (",ro" if read_only else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(folder)], check=True, capture_output=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def remount(folder: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(folder)], check=True, capture_output=True)


def read_only_bind(folder: Path) -> None:
    """``folder`` read-only from now on, for every new open, while the files a process already holds open stay
    as they are (a remount of the filesystem itself is refused while files are open for writing)."""
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True, capture_output=True)
    r = subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"mount -o remount,bind,ro {folder}: {r.stderr.strip()}")


def can_mount() -> str | None:
    """None when tmpfs can be mounted here, else why not."""
    probe = Path(tempfile.mkdtemp(prefix="llmbench-faults-probe-"))
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)], capture_output=True,
                           text=True)  # fmt: skip
        if r.returncode != 0:
            return f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}): needs root"
        subprocess.run(["umount", str(probe)], capture_output=True)
        return None
    finally:
        shutil.rmtree(probe, ignore_errors=True)


LOCKER = """
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


def lock_sqlite(path: Path, seconds: float) -> subprocess.Popen:
    """Another writer that holds ``path``'s write lock for ``seconds`` (the database is created first)."""
    from llmbench.history.db import History

    History(f"sqlite:///{path}").close()
    proc = subprocess.Popen([sys.executable, "-c", LOCKER, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def durable(command: Command, out: Path, ctx: Ctx, history_url: str | None) -> int:
    """Finished requests on disk now (history add: result rows in the database; quality: its record)."""
    if command.name == "history-add":
        return history_rows(history_url) if history_url else 0
    if command.name == "quality":
        return int((out / "q.json").is_file() and _json_ok(out / "q.json"))
    return sum(len(on_disk(p)) for p in command.files(out))


def on_disk(path: Path) -> set[tuple]:
    """The (prompt, repeat, session) of every request a run file and its journal hold now, each once: a poll
    between a snapshot's rename and the journal's truncation sees some twice. A journal line without its
    newline is being written (or was torn by the fault): not durable yet."""
    from llmbench.results.storage import journal_path

    keys: set[tuple] = set()
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        head = json.loads(path.read_bytes())
        for r in head["requests"]:
            keys.add((r["prompt_index"], r["repeat"], r.get("session", 0)))
        if head.get("columns"):  # version 2: the requests a columns file holds (a batch being written: not yet)
            keys |= _in_columns(path.parent / head["columns"]["file"])
    with contextlib.suppress(OSError):
        for line in journal_path(path).read_bytes().split(b"\n")[:-1]:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                r = json.loads(line)["request"]
                keys.add((r["prompt_index"], r["repeat"], r.get("session", 0)))
    return keys


def _in_columns(path: Path) -> set[tuple]:
    from llmbench.core.errors import UserError
    from llmbench.results.columns import read_table

    try:
        table, _ = read_table(path, ["prompt_index", "repeat", "session"])
    except UserError:
        return set()
    return set(zip(*(table.column(c).to_pylist() for c in ("prompt_index", "repeat", "session")), strict=True))


def _json_ok(p: Path) -> bool:
    try:
        json.loads(p.read_text(encoding="utf-8"))
        return True
    except (OSError, ValueError):
        return False


def kept(command: Command, out: Path, ctx: Ctx, history_url: str | None) -> int:
    """What the command's files hold afterwards, read as any reader reads them (a journal merged)."""
    if command.name in ("history-add", "quality"):
        return durable(command, out, ctx, history_url)
    from llmbench.core.errors import UserError
    from llmbench.results.storage import load_run

    n = 0
    for p in command.files(out):
        if p.is_file():
            with contextlib.suppress(UserError):  # unreadable: kept nothing (counted as lost against what was seen)
                n += len(load_run(p).requests)
    return n


def history_rows(url: str) -> int:
    from llmbench.history.db import History

    try:
        h = History(_resolved(url))
    except Exception:
        return 0
    try:
        return len(h.list())
    finally:
        h.close()


def _resolved(url: str) -> str:
    from llmbench.history.db import resolve_url

    return resolve_url(url) or url


def history_consistent(url: str) -> tuple[bool, str]:
    """Every result row has metrics; no run id, file or content hash is recorded twice."""
    from sqlalchemy import create_engine, text

    engine = create_engine(_resolved(url))
    try:
        with engine.connect() as c:
            orphans = c.execute(text(
                "SELECT COUNT(*) FROM llmbench_results r WHERE NOT EXISTS "
                "(SELECT 1 FROM llmbench_metrics m WHERE m.result_id = r.id)"
            )).scalar()  # fmt: skip
            dup_sha = c.execute(text("SELECT COUNT(*) - COUNT(DISTINCT sha256) FROM llmbench_results")).scalar()
            dup_path = c.execute(text("SELECT COUNT(*) - COUNT(DISTINCT path || '|' || COALESCE(label, '')) FROM "
                                      "llmbench_results WHERE kind = 'run'")).scalar()  # fmt: skip
            rows = c.execute(text("SELECT COUNT(*) FROM llmbench_results")).scalar()
    finally:
        engine.dispose()
    ok = not orphans and not dup_sha and not dup_path
    return ok, f"{rows} rows, {orphans} without metrics, {dup_sha + dup_path} recorded twice"


# ------------------------------------------------------------------------------------------------ one case


def _env(history_url: str | None) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "LLMBENCH_HISTORY": history_url or ""}
    env["LLMBENCH_HISTORY_TIMEOUT_S"] = "2"  # db-locked: the busy timeout the locker outlasts
    env.pop("LLMBENCH_DEBUG", None)
    return env


def llmbench(argv: list[str], history_url: str | None, env: dict[str, str] | None = None) -> subprocess.Popen:
    args = [*argv, "-q"] if argv[0] not in ("history", "quality") else argv  # those two print no progress
    if history_url is not None:
        args += ["--history", history_url]
    return subprocess.Popen([sys.executable, "-m", "llmbench", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**_env(history_url), **(env or {})}, cwd=ROOT)  # fmt: skip


def clear_line(stderr: str, code: int | None) -> tuple[bool | None, str]:
    """(told in one line?, that line). SIGKILL: nothing can be said (None)."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    told = [ln for ln in lines if ln.startswith(("llmbench: error:", "interrupted by", "llmbench: interrupted",
                                                  "llmbench: terminated"))]  # fmt: skip
    warned = [ln for ln in lines if "failed" in ln or "warning" in ln.lower()]
    bad = any("Traceback" in ln or "internal error" in ln for ln in lines)
    if code == -signal.SIGKILL:
        return None, ""
    if code == 0:
        return not bad, (warned[0] if warned else "")
    return (not bad and len([t for t in told if t.startswith("llmbench: error:")]) <= 1 and bool(told)), (
        told[0] if told else (lines[-1] if lines else "")
    )


class Injector:
    """Injects one fault into a running command, when its trigger is reached."""

    def __init__(self, ctx: Ctx, command: Command, fault: str, out: Path) -> None:
        self.ctx, self.command, self.fault, self.out = ctx, command, fault, out
        self.trigger = ctx.rng.randint(2, max(2, command.planned // 2)) if command.planned > 1 else 1
        self.at_time = time.monotonic() + ctx.rng.uniform(2.0, 5.0)  # commands with nothing to count
        self.done = False

    def due(self, seen: int) -> bool:
        if self.command.name == "history-add":
            return seen >= 2  # mid-add: rows are going in (a moment before main() has nothing to lose or say)
        if self.command.name == "quality":
            return time.monotonic() >= self.at_time
        return seen >= self.trigger

    def fire(self, proc: subprocess.Popen) -> None:
        self.done = True
        if self.fault in SIGNALS:
            os.kill(proc.pid, SIGNALS[self.fault][0])
        elif self.fault == "read-only-mid":
            read_only_bind(self.out)
        elif self.fault == "pg-stopped":
            assert self.ctx.pg is not None
            self.ctx.pg.stop()
        elif self.fault == "worker-killed":
            import psutil

            workers = [c for c in psutil.Process(proc.pid).children(recursive=True)
                       if "worker" in " ".join(c.cmdline())]  # fmt: skip
            if workers:
                self.ctx.rng.choice(workers).kill()


MID_RUN = (*SIGNALS, "read-only-mid", "pg-stopped", "worker-killed")


def watch(
    proc: subprocess.Popen, injector: Injector | None, count: Callable[[], int], limit_s: float
) -> tuple[int, bool]:
    """Poll durable requests until the process ends, firing the fault on time; (most seen, hung)."""
    seen, deadline = 0, time.monotonic() + limit_s
    while proc.poll() is None:
        with contextlib.suppress(Exception):  # a file half-renamed, a database mid-write: read it next time
            seen = max(seen, count())
        if injector is not None and not injector.done and injector.due(seen):
            injector.fire(proc)
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            return seen, True
        time.sleep(0.05)
    return seen, False


def run_case(ctx: Ctx, name: str, fault: str, mountable: str | None) -> Outcome:
    """One row: set the fault up, run the command, inject, restore, resume, and check the history."""
    command = COMMANDS[name]
    o = Outcome(name, fault, expected_exit=expected_exit(name, fault))
    if fault in ("disk-full", "read-only", "read-only-mid") and mountable:
        o.skipped = mountable
        return o
    if fault == "pg-stopped" and ctx.pg is None:
        o.skipped = postgres.available() or "PostgreSQL did not start"
        return o
    out = ctx.work / f"{name}-{fault}"
    out.mkdir(parents=True)
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        history_url = _history_for(ctx, command, fault, out, stack)
        _prepare(ctx, command, fault, out, stack)
        proc = llmbench(command.argv(ctx, out), history_url, command.env)
        injector = Injector(ctx, command, fault, out) if fault in MID_RUN else None
        o.finished, hung = watch(proc, injector, lambda: durable(command, out, ctx, history_url), 400)
        _stdout, stderr = proc.communicate()
        o.exit = proc.returncode
        o.clear, o.line = clear_line(stderr, o.exit)
        if hung:
            o.notes.append("hung: killed after 400 s")
            o.clear = False
        if "Traceback" in stderr or "internal error" in stderr:
            o.notes.append(stderr.strip().splitlines()[-1][:200])
        _restore(ctx, fault, out)
        o.kept = kept(command, out, ctx, history_url)
        total = len(ctx.history_files) if name == "history-add" else command.planned
        if fault in SIGNALS and o.exit == 0 and o.kept >= total > 0:
            o.expected_exit += "|0"  # the signal came as it was exiting, its work all done and kept
            o.notes.append("the signal landed after the work was done")
        o.resume = _resume(ctx, command, out, history_url, o)
        o.history = _history_check(ctx, command, out, history_url, o)
    o.seconds = round(time.monotonic() - t0, 1)
    return o


def _history_for(ctx: Ctx, command: Command, fault: str, out: Path, stack: contextlib.ExitStack) -> str | None:
    """The case's history database: PostgreSQL for pg-stopped, a SQLite file otherwise (history-add: always;
    other commands: for the history faults only, so the others measure without one)."""
    if fault == "pg-stopped":
        assert ctx.pg is not None
        return ctx.pg.new_database()
    if not command.history:
        return None
    if command.name != "history-add" and fault not in ("db-locked",):
        return None
    db_dir = out / "db"
    if fault in ("disk-full", "read-only"):
        return f"sqlite:///{db_dir / 'history.db'}"  # made in _prepare, on the small tmpfs
    db_dir.mkdir()
    url = f"sqlite:///{db_dir / 'history.db'}"
    if fault == "db-locked":
        locker = lock_sqlite(db_dir / "history.db", 900.0)  # held until the command ends (_restore kills it)
        stack.callback(lambda: (locker.kill(), locker.wait()))
        ctx.locker = locker
    return url


def _prepare(ctx: Ctx, command: Command, fault: str, out: Path, stack: contextlib.ExitStack) -> None:
    if fault in SSE_FAULTS or command.endpoint:
        ctx.server_app.state.fault = fault.removeprefix("sse-") if fault in SSE_FAULTS else "none"
        ctx.server_app.state.fault_at = ctx.server_app.state.calls + ctx.rng.randint(3, 8)
    if fault in ("disk-full", "read-only"):
        target = out / "db" if command.name == "history-add" else out
        size = {"run": 48, "run-columns": 48, "run-endpoint": 48, "ab": 96, "sweep": 64, "scan": 64, "load": 48,
                "quality": 4, "history-add": 160}[command.name] if fault == "disk-full" else 4096  # fmt: skip
        stack.enter_context(tmpfs(target, size, read_only=fault == "read-only"))
        ctx.mount = target


def _restore(ctx: Ctx, fault: str, out: Path) -> None:
    """Take the fault away, as a user would before resuming: room on the disk, the server back."""
    if fault in ("disk-full", "read-only"):
        assert ctx.mount is not None
        remount(ctx.mount, "rw,size=65536k")
    elif fault == "read-only-mid":
        subprocess.run(["umount", str(out)], capture_output=True)  # the read-only bind goes: writable again
    elif fault == "pg-stopped":
        assert ctx.pg is not None
        ctx.pg.start()
    elif fault == "db-locked" and ctx.locker is not None:
        ctx.locker.kill()
        ctx.locker.wait()
        ctx.locker = None
    if ctx.server_app is not None:
        ctx.server_app.state.fault = "none"


def _resume(ctx: Ctx, command: Command, out: Path, history_url: str | None, o: Outcome) -> str:
    """``--resume`` after the fault is gone: "ok" when the run ends complete with every planned request."""
    if command.resume is None or command.name in ("history-add",):
        return "n/a"
    from llmbench.core.errors import UserError
    from llmbench.results.storage import load_run

    files = command.files(out)
    try:
        runs = [load_run(p) for p in files]
    except UserError:
        runs = []
    if len(runs) == len(files) and all(r.complete for r in runs):
        return "n/a"  # nothing to resume: the fault did not stop it
    if not files or not all(p.is_file() for p in files):
        return "n/a" if o.kept == 0 else "no file"
    proc = llmbench(command.resume(ctx, out), None, command.env)
    _, stderr = proc.communicate(timeout=400)
    if proc.returncode != 0:
        o.notes.append(f"resume: {stderr.strip().splitlines()[-1][:200] if stderr.strip() else proc.returncode}")
        return f"failed ({proc.returncode})"
    runs = [load_run(p) for p in files]
    done = sum(len(r.requests) + len(r.failed_requests) for r in runs)
    return "ok" if all(r.complete for r in runs) and done >= command.planned else f"incomplete ({done})"


def _history_check(ctx: Ctx, command: Command, out: Path, history_url: str | None, o: Outcome) -> str:
    """After the fault: ``history add`` what the command wrote (history add: the same files again), then
    every row has its metrics and nothing is recorded twice."""
    if history_url is None:
        return "n/a"
    files = ctx.history_files if command.name == "history-add" else [p for p in command.files(out) if p.is_file()]
    if command.name in ("sweep", "scan", "load"):
        folder = command.files(out)[0].parent if command.files(out) else None
        files = [folder] if folder is not None and folder.is_dir() else []
    if files:
        proc = llmbench(["history", "add", *map(str, files)], history_url)
        _, stderr = proc.communicate(timeout=300)
        if proc.returncode != 0 and "no run, sweep.json" not in stderr:
            o.notes.append(f"history add: {stderr.strip().splitlines()[-1][:200] if stderr.strip() else ''}")
            return "history add failed"
    ok, detail = history_consistent(history_url)
    o.notes.append(f"history: {detail}")
    if command.name == "history-add" and history_rows(history_url) != len(ctx.history_files):
        return "rows missing"
    return "consistent" if ok else "inconsistent"


# ------------------------------------------------------------------------------------------------ the matrix


def setting(work: Path, seed: int, need_pg: bool) -> Ctx:
    """The tiny model, the prompts, a text for quality, the history-add inputs, and (when asked) PostgreSQL."""
    prompts = work / "prompts.txt"
    prompts.write_text("".join(f"工厂 {i} 夜间偷排废水 prompt number {i}\n" for i in range(PROMPTS)), encoding="utf-8")
    text = work / "text.txt"
    text.write_text(" ".join(f"The river near plant {i} ran grey that night." for i in range(60)), encoding="utf-8")
    ctx = Ctx(work, build_model(work / "model"), prompts, text, random.Random(seed))
    if need_pg and postgres.available() is None:
        try:
            ctx.pg = PgCluster()
        except (subprocess.SubprocessError, OSError) as e:
            print(f"PostgreSQL rows skipped: {e}", file=sys.stderr)
    return ctx


def history_inputs(ctx: Ctx, count: int = 12) -> list[Path]:
    """``count`` distinct complete run files (one real run, each copy its own run id), for history add."""
    base = ctx.work / "history-inputs"
    base.mkdir()
    proc = llmbench(COMMANDS["run"].argv(ctx, base), None)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    data = json.loads((base / "run.json").read_text(encoding="utf-8"))
    files = []
    for k in range(count):
        data["run_id"] = f"{data['run_id'][:-4]}{k:04d}"
        f = base / f"run-{k:02d}.json"
        f.write_text(json.dumps(data), encoding="utf-8")
        files.append(f)
    (base / "run.json").unlink()
    return files


def table(rows: list[Outcome]) -> list[str]:
    """The matrix as Markdown, and its totals."""
    head = ("| command | fault | exit (expected) | one clear line | finished | kept | lost | --resume | history | "
            "survived |")  # fmt: skip
    lines = [head, "|" + "---|" * 10]
    for o in rows:
        if o.skipped:
            lines.append(f"| {o.command} | {o.fault} | skipped: {o.skipped} |  |  |  |  |  |  |  |")
            continue
        clear = {True: "yes", False: "NO", None: "n/a"}[o.clear]
        lines.append(f"| {o.command} | {o.fault} | {o.exit} ({o.expected_exit}) | {clear} | {o.finished} | {o.kept} | "
                     f"{o.lost} | {o.resume} | {o.history} | {'yes' if o.survived else 'NO'} |")  # fmt: skip
    ran = [o for o in rows if not o.skipped]
    lines.append("")
    lines.append(f"faults injected: {len(ran)}, survived: {sum(o.survived for o in ran)}, "
                 f"requests lost: {sum(o.lost for o in ran)}, skipped: {len(rows) - len(ran)}")  # fmt: skip
    return lines


def cases(quick: bool, only: set[str] | None, faults: set[str] | None) -> list[tuple[str, str]]:
    out = []
    for command, fs in FAULTS.items():
        for fault in fs:
            if quick and (command, fault) not in QUICK:
                continue
            if (only and command not in only) or (faults and fault not in faults):
                continue
            out.append((command, fault))
    return out


def run_matrix(todo: list[tuple[str, str]], seed: int = 0, work: Path | None = None,
               progress: Callable[[Outcome], None] | None = None) -> list[Outcome]:  # fmt: skip
    """Every case of ``todo``, in order; the rows."""
    import logging

    from fault_server import fault_server  # type: ignore[import-not-found]

    from tests.servers import BackgroundServer

    own = work is None
    work = Path(tempfile.mkdtemp(prefix="llmbench-faults-")) if work is None else work
    ctx = setting(work, seed, need_pg=any(f == "pg-stopped" for _, f in todo))
    mountable = can_mount() if any(f in ("disk-full", "read-only", "read-only-mid") for _, f in todo) else None
    rows = []
    app = fault_server(tokens=TOKENS)
    try:
        with BackgroundServer(app) as url:
            ctx.server_url, ctx.server_app = url, app
            logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)  # the reset fault's exception, on purpose
            if any(c == "history-add" for c, _ in todo):
                ctx.history_files = history_inputs(ctx)
            for command, fault in todo:
                try:
                    o = run_case(ctx, command, fault, mountable)
                except Exception as e:  # the harness's own failure (a mount refused): said, and the matrix goes on
                    o = Outcome(command, fault, expected_exit=expected_exit(command, fault))
                    o.skipped = f"harness error: {type(e).__name__}: {e}"[:200]
                    subprocess.run(["umount", "-R", "-l", str(ctx.work / f"{command}-{fault}")], capture_output=True)
                rows.append(o)
                if progress is not None:
                    progress(o)
    finally:
        if ctx.pg is not None:
            ctx.pg.close()
        if own:
            subprocess.run(["umount", "-R", "-l", str(work)], capture_output=True)  # any mount a failure left
            shutil.rmtree(work, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> list[Outcome]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the CI subset")
    ap.add_argument("--only", help="commands, comma-separated: " + ",".join(FAULTS))
    ap.add_argument("--faults", help="faults, comma-separated")
    ap.add_argument("--seed", type=int, default=0, help="the random moments (which request a signal lands after)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    todo = cases(args.quick, set(args.only.split(",")) if args.only else None,
                 set(args.faults.split(",")) if args.faults else None)  # fmt: skip
    if not todo:
        ap.error("no case matches --only/--faults")

    def say(o: Outcome) -> None:
        state = f"skipped ({o.skipped})" if o.skipped else ("survived" if o.survived else "NOT SURVIVED")
        print(f"{o.command:>12} {o.fault:<14} exit {o.exit} lost {o.lost} resume {o.resume} history {o.history}: "
              f"{state} [{o.seconds:.0f} s] {o.line[:100]}{' ; '.join(['', *o.notes])[:300]}", flush=True)  # fmt: skip

    rows = run_matrix(todo, args.seed, progress=say)
    print()
    print("\n".join(table(rows)))
    if args.json:
        args.json.write_text(json.dumps([{**asdict(o), "lost": o.lost, "survived": o.survived} for o in rows],
                                        indent=1), encoding="utf-8")  # fmt: skip
    return rows


if __name__ == "__main__":
    rows = main()
    sys.exit(0 if all(o.survived or o.skipped for o in rows) else 1)
