"""The wheels a GPU machine without network needs to run ``benchmarks/gpu_check.sh`` beside its own CUDA torch.

Walks the installed requirement tree of ``llmbench[serve,gpu]`` and pytest in this environment (so the versions are
the ones tested here), leaves out torch and everything only torch needs (the machine's own CUDA build stays) and two
big packages the check never imports (scipy, hf-xet), keeps of ``dashscope`` only the vocabulary file's package
itself and ``tiktoken`` (the Qwen tokenizer for ``--weights random``), and downloads each as a binary wheel for the
target Python into ``.whl/``:

    python scripts/gpu-wheels.py [--python-version 3.12] [--dest .whl]

then carry ``.whl`` to the machine (the device tool: ``carry: [".whl"]``); gpu_check.sh installs from it with
``--no-index --no-deps``. Prints the list and the total size.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOTS = [("llmbench", {"serve", "gpu"}), ("pytest", set())]
# torch: the machine's own; dashscope: added without its deps; scipy (35 MiB) and hf-xet (downloads) are not
# imported on the check's paths (compare's t interval for ab --processes, autodtype's CPU probes are off them)
SKIP = {"torch", "dashscope", "setuptools", "pip", "scipy", "hf-xet"}
EXTRA = ["dashscope", "tiktoken"]  # the vocabulary file's package (no-deps) and the BPE it is read with


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure() -> dict[str, str]:
    """{distribution: installed version} reachable from ROOTS, torch's subtree and SKIP left out."""
    seen: dict[str, str] = {}
    todo = list(ROOTS) + [(name, set()) for name in EXTRA]
    while todo:
        name, extras = todo.pop()
        key = canonical(name)
        if key in {canonical(s) for s in SKIP} and name not in EXTRA:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if key != "llmbench":
            seen.setdefault(key, dist.version)
        if name in EXTRA and key == "dashscope":
            continue
        for text in dist.requires or []:
            req = Requirement(text)
            envs = [{**default_environment(), "extra": e} for e in (extras or {""})]
            wanted = req.marker is None or any(req.marker.evaluate(env) for env in envs)
            if wanted and canonical(req.name) not in seen:
                todo.append((req.name, set(req.extras)))
    return seen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python-version", default=f"{sys.version_info.major}.{sys.version_info.minor}")
    ap.add_argument("--platform", default="manylinux2014_x86_64")
    ap.add_argument("--dest", type=Path, default=Path(".whl"))
    a = ap.parse_args()
    pins = sorted(f"{k}=={v}" for k, v in closure().items())
    print("\n".join(pins))
    a.dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--python-version",
           a.python_version, "--platform", a.platform, "--platform", "manylinux_2_28_x86_64", "--platform",
           "any", "-d", str(a.dest), *pins]  # fmt: skip
    rc = subprocess.call(cmd)
    size = sum(p.stat().st_size for p in a.dest.glob("*.whl"))
    print(f"{len(pins)} wheels in {a.dest}: {size / 2**20:.1f} MiB (the device tool carries 64 MiB in all)")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
