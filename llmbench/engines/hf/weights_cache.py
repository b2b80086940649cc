"""Random weights built once per machine and memory-mapped by every later process.

``--weights random`` used to build its model in every process (~12 s for Qwen2.5-0.5B, and ``ab --processes N``
starts 2N workers). Here the first build is saved (safetensors and config, transformers' own ``save_pretrained``)
into ``<cache root>/random-weights/<key>/``; every later load of the same inputs maps that file instead, so the
weights are the file's pages, shared by all the workers of a machine, instead of a private copy each.

- **Content-addressed**: the key is the sha256 of a canonical JSON of everything the weights depend on (the config,
  dtype, seed, torch and transformers versions and :data:`FORMAT_VERSION`), so nothing is ever invalidated: a
  change makes another key.
- **One builder**: the first process takes an exclusive ``flock`` on ``<key>.lock`` beside the entry; the others
  wait on it, then find the entry and load it.
- **Atomic**: the entry is written into ``<key>.tmp-<pid>-<random>`` in the same folder and renamed into place,
  so a reader never sees half a file and a killed builder leaves only a temp folder, which the next builder
  removes. Files are never rewritten in place: other processes may have them mapped.
- **Never fatal**: an entry that fails its check or its load is rebuilt with a warning; a cache folder that
  can't be written (read-only, full) costs only the time: the model is built in memory, with a warning.

The same machinery keeps the built-in Qwen tokenizer (converting its BPE vocabulary costs ~4 s a process) under
``<cache root>/tokenizers/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

FORMAT_VERSION = 1  # part of every key: bump when what an entry holds, or how it is built, changes
MANIFEST = "llmbench-entry.json"  # written last: its file sizes are what a reader checks the entry against

T = TypeVar("T")


def cache_root() -> Path:
    """``$LLMBENCH_CACHE``, else the folder of llmbench's other caches (``$XDG_CACHE_HOME/llmbench``, beside the
    ``--dtype auto`` decision and the engines' conversions)."""
    from llmbench.core.settings import settings

    return settings().build_cache_root


def entry_key(parts: dict[str, Any]) -> str:
    """The sha256 of ``parts`` as canonical JSON (sorted keys, no whitespace) with :data:`FORMAT_VERSION`."""
    text = json.dumps({**parts, "format": FORMAT_VERSION}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


_VOLATILE = ("transformers_version", "dtype", "torch_dtype", "architectures")


def config_facts(config: Any) -> dict[str, Any]:
    """The config as a plain dict, less what does not shape the weights and changes under our feet: where it was
    read from (``_name_or_path`` and the other private fields), which transformers wrote it (the key holds the
    installed version), and the fields building and saving set on the caller's config (``dtype``, a key part of
    its own, and ``architectures``). So the same architecture read from two folders, or before and after a build,
    is one entry."""
    facts = config.to_dict()
    return {k: v for k, v in facts.items() if not k.startswith("_") and k not in _VOLATILE}


def weights_key_parts(config: Any, dtype: Any, seed: int) -> dict[str, Any]:
    """What random weights depend on: the architecture, the dtype, the seed, and the libraries that draw them."""
    import torch
    import transformers

    return {"kind": "random-weights", "config": config_facts(config), "dtype": str(dtype).removeprefix("torch."),
            "seed": seed, "torch": torch.__version__, "transformers": transformers.__version__}  # fmt: skip


@dataclass
class Cached(Generic[T]):
    """What :func:`cached` returns: the object, ``LoadInfo.weights_cache`` (None when built in memory) and the
    entry's ``.safetensors`` files (empty when built in memory)."""

    value: T
    record: dict[str, Any] | None = None
    files: list[Path] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- random weights


def random_model(config: Any, dtype: Any, seed: int, build: Callable[[], Any], warnings: list[str]) -> Cached[Any]:
    """The model ``build()`` makes (seeded random weights, checked), from the cache when it has it: loaded with
    transformers' ``from_pretrained``, which maps the safetensors file rather than copying it."""

    def load(entry: Path) -> Any:
        from transformers import AutoModelForCausalLM

        # No device_map: loaded as the in-memory build is (no hf_device_map), and the tensors stay views of the mmap
        # when the file's dtype is the one asked (it always is: the key holds the dtype).
        return AutoModelForCausalLM.from_pretrained(entry, config=config, dtype=dtype)

    def save(model: Any, folder: Path) -> None:
        _save_model(model, folder)  # looked up when called: the tests make it fail like a full disk

    return cached("random-weights", weights_key_parts(config, dtype, seed), build=build, save=save, load=load,
                  what=f"random weights ({str(dtype).removeprefix('torch.')})", warnings=warnings)  # fmt: skip


def _save_model(model: Any, folder: Path) -> None:
    model.save_pretrained(folder)


def file_backed(tensors: Iterable[Any], files: Iterable[Path]) -> bool | None:
    """True when every tensor's bytes lie inside a mapping of one of ``files`` (``/proc/self/maps``): the weights
    are the file's pages, shared with every process that maps them, not a private copy. False when any is not (a
    copy, a dtype cast, another device); None where there is no ``/proc`` to ask."""
    wanted = {str(Path(f).resolve()) for f in files}
    try:
        text = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    ranges: list[tuple[int, int]] = []
    for line in text.splitlines():
        cols = line.split(maxsplit=5)
        if len(cols) == 6 and cols[5].removesuffix(" (deleted)") in wanted:
            lo, hi = (int(x, 16) for x in cols[0].split("-"))
            if ranges and ranges[-1][1] == lo:  # one file mapped in adjacent pieces: one range
                ranges[-1] = (ranges[-1][0], hi)
            else:
                ranges.append((lo, hi))
    seen: set[int] = set()
    for t in tensors:
        if t.device.type != "cpu":
            return False
        if t.numel() == 0 or t.data_ptr() in seen:  # tied weights: one tensor
            continue
        seen.add(t.data_ptr())
        start, end = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
        if not any(lo <= start and end <= hi for lo, hi in ranges):
            return False
    return bool(seen)


# ---------------------------------------------------------------------------------------------- the entries


def cached(
    kind: str, parts: dict[str, Any], *, build: Callable[[], T], save: Callable[[T, Path], None],
    load: Callable[[Path], T], what: str, warnings: list[str],
) -> Cached[T]:  # fmt: skip
    """``load(entry)`` of the entry for ``parts`` under ``<cache root>/<kind>``, built first (``build()`` then
    ``save(value, folder)``) by exactly one process when it is missing or broken. Problems become ``warnings``."""
    key = entry_key(parts)
    root = cache_root() / kind
    entry = root / key
    got, problem = _try_load(entry, key, load)
    if got is not None:
        return got  # the common case: no lock, no write
    if problem is not None:
        warnings.append(f"the cache entry {entry} was unreadable ({problem}): rebuilding it")
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = (root / f"{key}.lock").open("a", encoding="utf-8")
    except OSError as e:
        warnings.append(f"the cache folder {root} is not writable ({_reason(e)}): {what} built in memory, not cached")
        return Cached(build())
    # The lock file stays: deleting it would let a late process lock a new file while another holds the old one.
    # Closing it drops the lock, and so does the kernel when the process dies: a killed builder blocks no one.
    with lock:
        try:
            import fcntl
        except ImportError:  # Windows: no flock. Racing builders each build; the rename still protects readers
            pass
        else:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        # Whoever held the lock before us may have built the entry meanwhile.
        got, again = _try_load(entry, key, load)
        if got is not None:
            return got
        if again is not None and problem is None:
            warnings.append(f"the cache entry {entry} was unreadable ({again}): rebuilding it")
        return _build_entry(root, entry, key, parts, build=build, save=save, load=load, what=what, warnings=warnings)


def _build_entry(
    root: Path, entry: Path, key: str, parts: dict[str, Any], *, build: Callable[[], T],
    save: Callable[[T, Path], None], load: Callable[[Path], T], what: str, warnings: list[str],
) -> Cached[T]:  # fmt: skip
    """Under the lock: clear what a broken entry or a killed builder left, build, save into a temp folder, rename
    it into place, and load it as every later process will (so the builder maps the same file as the others)."""
    for stale in [entry, *root.glob(f"{key}.tmp-*"), *root.glob(f"{key}.old-*")]:
        _remove(stale, root)
    print(f"llmbench: building {what} once into {entry} (later runs load it from there)", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    value = build()
    tmp = root / f"{key}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        tmp.mkdir()
        save(value, tmp)
        files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}
        build_s = round(time.perf_counter() - t0, 3)
        manifest = {"key": key, "parts": parts, "files": files, "build_s": build_s,
                    "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, default=str), encoding="utf-8")
        _fsync_tree(tmp)  # the rename must not reach the disk before the data it names
        tmp.rename(entry)
    # Any failure to write (a full disk reaches us as safetensors' own error type, not OSError) only costs the
    # cache: the run goes on with the model built in memory.
    except Exception as e:
        shutil.rmtree(tmp, ignore_errors=True)
        warnings.append(f"could not write the cache entry {entry} ({_reason(e)}): {what} kept in memory, not cached")
        return Cached(value)
    got, problem = _try_load(entry, key, load)
    if got is None:  # unreadable right after writing: rebuilding would not help, so keep what was built
        _remove(entry, root)
        warnings.append(f"the cache entry {entry} could not be loaded back ({problem}): {what} kept in memory")
        return Cached(value)
    got.record = {**(got.record or {}), "hit": False, "build_s": build_s}
    return got


def _try_load(entry: Path, key: str, load: Callable[[Path], T]) -> tuple[Cached[T] | None, str | None]:
    """(the loaded entry, None), or (None, why it is broken), or (None, None) when there is no entry."""
    problem = _check(entry, key)
    if problem == "missing":
        return None, None
    if problem is None:
        try:
            value = load(entry)
        except Exception as e:  # a damaged file surfaces as safetensors', transformers' or tokenizers' own error
            problem = f"{type(e).__name__}: {_reason(e)}"
        else:
            record = {"path": str(entry), "key": key, "hit": True, "build_s": None}
            return Cached(value, record, sorted(entry.glob("*.safetensors"))), None
    return None, problem


def _check(entry: Path, key: str) -> str | None:
    """None when ``entry`` is complete (its manifest names this key and every file has its recorded size), else
    why not ("missing" when there is no entry at all)."""
    if not entry.is_dir():
        return "missing"
    try:
        manifest = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        if manifest["key"] != key or not isinstance(files, dict) or not files:
            return "its manifest is not this entry's"
        for name, size in files.items():
            actual = (entry / name).stat().st_size
            if actual != size:
                return f"{name} is {actual} bytes, not {size}"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"no valid manifest: {_reason(e)}"
    return None


def _remove(path: Path, root: Path) -> None:
    """Remove an entry or temp folder: renamed aside first, so the entry's name is free at once even if deleting
    its files fails; processes that map the files keep their pages (Linux frees them on the last unmap)."""
    if not path.exists():
        return
    aside = root / f"{path.name.split('.')[0]}.old-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        path.rename(aside)
    except OSError:
        aside = path
    shutil.rmtree(aside, ignore_errors=True)


def _fsync_tree(folder: Path) -> None:
    for p in folder.iterdir():
        with p.open("rb") as f:
            os.fsync(f.fileno())
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror + (f": {e.filename}" if e.filename else "")
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:200]
