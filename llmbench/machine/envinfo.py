"""What machine and software a run was measured on (no environment variables: they may hold secrets)."""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from llmbench.results.schema import Environment, GPUInfo

# The instruction-set flags that decide which kernels run (stable for a CPU model: the history fingerprint's).
ISA_PREFIXES = ("avx", "amx", "fma", "f16c", "sse4", "neon", "sve", "asimd")


def git_info(cwd: str | Path | None = None) -> dict[str, Any] | None:
    """{commit, branch, dirty} of the checkout at ``cwd`` (None outside one, or without git).
    ``LLMBENCH_GIT_COMMIT``/``LLMBENCH_GIT_BRANCH`` override (a CI system that builds from an archive)."""
    from llmbench.core.settings import settings

    given = settings()
    branch = given.git_branch
    if given.git_commit:
        return {"commit": given.git_commit, "branch": branch, "dirty": None}

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": commit,
        "branch": branch or git("rev-parse", "--abbrev-ref", "HEAD"),
        "dirty": bool(status) if status is not None else None,
    }


def isa_flags(flags: set[str] | list[str]) -> list[str]:
    """The instruction-set flags that decide which kernels run (stable for a CPU model)."""
    return sorted(f for f in flags if f.startswith(ISA_PREFIXES))


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    """The CPU's marketing name (Linux /proc/cpuinfo, else platform.processor())."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    """The CPU feature flags on Linux (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def gpu_info(device: str) -> GPUInfo | None:
    """Name, memory and driver of the CUDA device a run uses; None on CPU/MPS."""
    if not device.startswith("cuda"):
        return None
    import torch

    index = torch.device(device).index or 0
    props = torch.cuda.get_device_properties(index)
    driver = None
    try:
        import subprocess

        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", f"--id={index}"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        driver = out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return GPUInfo(name=props.name, memory_bytes=props.total_memory, driver=driver, cuda=torch.version.cuda)


def collect(device: str = "cpu") -> Environment:
    """The environment block of a run JSON."""
    return Environment(
        python=sys.version.split()[0],
        torch=_version("torch"),
        transformers=_version("transformers"),
        platform=platform.platform(),
        cpu_model=cpu_model(),
        cpu_count=psutil.cpu_count(logical=True),
        cpu_physical_cores=psutil.cpu_count(logical=False),
        ram_total_bytes=psutil.virtual_memory().total,
        gpu=gpu_info(device),
        cpu_flags=isa_flags(cpu_flags()) or None,
        git=git_info(),
    )
