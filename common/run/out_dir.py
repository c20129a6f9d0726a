"""Can ``--out`` be a run folder? Asked while the command line is parsed, before anything heavy.

Torch-free and importing nothing of the course, so the config modules (common/config/grpo_config.py,
common/config/config_cli.py) call it at the top level; common/run/run_folder.py owns the folder
itself. CONFIG_NAME lives here for the same reason: the command line checks it before run_folder
loads.
"""

from __future__ import annotations

import os
from pathlib import Path

CONFIG_NAME = "config.json"  # a run's settings; a folder holding one already holds a run


def out_dir_problem(out: str | Path) -> str | None:
    """Why ``out`` cannot be a run folder (a file, under a file, not writable); None if it can.

    Reads only: nothing is created. Call it before loading a model.
    """
    path = Path(out)
    if path.exists() and not path.is_dir():
        return f"--out {path} 是一个文件，不是目录：换一个 --out"
    existing = path
    while not existing.exists():  # the nearest folder that exists: the new one is made inside it
        existing = existing.parent
    if not existing.is_dir():
        return f"--out {path} 在文件 {existing} 的下面（文件里不能建目录）：换一个 --out"
    if not os.access(existing, os.W_OK | os.X_OK):
        return (
            f"--out {path}：没有权限在 {existing} 里写（只读的目录或文件系统）：换一个能写的 --out"
        )
    return None


def out_file_problem(path: str | Path, flag: str, example: str = "result.json") -> str | None:
    """Why the file ``flag path`` (--json, --plot) cannot be written; None if it can.

    Asked before the work, so a long run does not end with nowhere to put its result. Reads only.
    """
    path = Path(path)
    if path.is_dir():
        return f"{flag} {path} 是一个已有的目录：要给一个文件名，比如 {path / example}"
    if path.is_symlink():
        return f"{flag} {path} 是一个符号链接：课程不通过链接写文件，换一个文件名"
    parent = path.parent
    if not parent.is_dir():
        return f"{flag} {path}：目录 {parent} 不存在。先建好它（mkdir -p {parent}）或换一个路径"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{flag} {path}：没有权限在 {parent} 里写（只读的目录或文件系统）：换一个能写的路径"
    return None
