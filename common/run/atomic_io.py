"""Atomic file writes: a crash, Ctrl-C or a full disk never leaves a half-written file behind.

    atomic_write(path, data)                    # bytes or str (UTF-8)
    atomic_write(path, writer, size_hint=n)     # writer(f) writes into an open binary file

Every write goes to ``<name>.tmp`` next to the target, is fsync'ed, then ``os.replace``d over the
target (atomic on POSIX and Windows). If anything fails on the way (a full disk, a read-only
folder, Ctrl-C), the temporary file is removed and the target keeps its old content. No write
goes through a symbolic link (:func:`open_no_link`): a link planted where the course writes a file
is refused, never followed out of its folder. OS errors
become :class:`WriteError` with a Chinese message; a full disk is a :class:`DiskFullError` that
names ENOSPC, how many bytes the write needed and how many were free.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

TMP_SUFFIX = ".tmp"  # every temporary file of a run folder ends with it (RunFolder cleans them up)


class WriteError(RuntimeError):
    """A file could not be written (permissions, read-only disk, ...); the message says which."""


class DiskFullError(WriteError):
    """ENOSPC: the message names the file, the bytes needed and the bytes free."""


class LinkError(WriteError):
    """A path the course would write is a symbolic link: refused, never followed."""


def link_error(path: Path) -> LinkError:
    target = os.readlink(path) if path.is_symlink() else "?"
    return LinkError(
        f"{path} 是一个符号链接（指向 {target}）：课程从不通过链接写文件，免得写到目录外面去。"
        "删掉这个链接（或换一个目录）再运行"
    )


def open_no_link(path: str | Path, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags | O_NOFOLLOW)``; a symbolic link at ``path`` is a :class:`LinkError`."""
    path = Path(path)
    try:
        return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), mode)
    except OSError:
        if path.is_symlink():
            raise link_error(path) from None
        raise


def tmp_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + TMP_SUFFIX)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def free_bytes(folder: str | Path) -> int | None:
    """Free bytes on the filesystem of ``folder`` (None if the OS cannot say)."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def disk_full_error(path: Path, needed: int | None) -> DiskFullError:
    free = free_bytes(path.parent)
    need = f"需要约 {human_bytes(needed)}" if needed else "空间不够"
    left = f"，那块磁盘只剩 {human_bytes(free)}" if free is not None else ""
    room = f"至少 {human_bytes(needed)} 的" if needed else ""
    return DiskFullError(
        f"磁盘满了（ENOSPC）：写 {path} {need}{left}。没有留下写了一半的文件，原来的 {path.name} 没动；"
        f"先腾出{room}空间再试"
    )


def check_free_space(path: str | Path, needed: int) -> None:
    """Refuse before writing ``needed`` bytes next to ``path`` when the disk has less free."""
    path = Path(path)
    free = free_bytes(path.parent)
    if free is not None and free < needed:
        raise disk_full_error(path, needed)


def os_error_in(err: BaseException) -> OSError | None:
    """The OSError behind ``err`` (itself, or its cause/context: torch.save wraps write errors)."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, OSError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def write_error(path: Path, err: OSError, needed: int | None = None) -> WriteError:
    """The Chinese WriteError for an OSError met while writing ``path``."""
    if err.errno == errno.ENOSPC or err.errno == getattr(errno, "EDQUOT", -1):
        return disk_full_error(path, needed)
    if err.errno == errno.EROFS:
        why = "它在一个只读的文件系统上"
    elif err.errno in (errno.EACCES, errno.EPERM):
        why = "没有写权限"
    else:
        why = f"{type(err).__name__}: {err.strerror or err}"
    return WriteError(f"写不了 {path}（{why}）。换一个能写的目录，或者改好权限再试")


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError:  # the original error is the one worth reporting
        pass


def _fsync_dir(folder: Path) -> None:
    """Persist a rename (the directory entry); not possible on every OS/filesystem."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(
    path: str | Path,
    data: bytes | str | Callable[[BinaryIO], object],
    *,
    size_hint: int | None = None,
) -> Path:
    """Write ``data`` to ``path`` atomically; on any failure the target is unchanged and no .tmp stays.

    data: bytes, str (written as UTF-8), or ``writer(f)`` that writes into the open temporary file.
    size_hint: bytes the writer will write (for the free-space check and the ENOSPC message).
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    needed = len(data) if isinstance(data, bytes) else size_hint
    if needed:
        check_free_space(path, needed)
    tmp = tmp_path(path)
    if tmp.is_symlink():  # not ours: a link is never written through, nor removed
        raise link_error(tmp)
    try:
        fd = open_no_link(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with open(fd, "wb") as f:
            if isinstance(data, bytes):
                f.write(data)
            else:
                data(f)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the rename makes them "the" file
        os.replace(tmp, path)
    except BaseException as err:
        if not isinstance(err, LinkError):
            _remove(tmp)
        oserr = os_error_in(err)
        if oserr is not None and not isinstance(err, (KeyboardInterrupt, LinkError)):
            raise write_error(path, oserr, needed) from None
        raise
    _fsync_dir(path.parent)
    return path


def append_line(path: str | Path, line: str) -> None:
    """Append ``line + "\\n"``; on failure the file is cut back to its old length (no half line)."""
    path = Path(path)
    data = (line + "\n").encode("utf-8")
    try:
        fd = open_no_link(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        with open(fd, "ab", buffering=0) as f:
            start = f.seek(0, os.SEEK_END)
            try:
                view = memoryview(data)
                while view:
                    view = view[f.write(view) :]
            except BaseException:
                try:
                    f.truncate(start)  # never leave half a line for the next reader
                except OSError:
                    pass
                raise
    except BaseException as err:
        oserr = os_error_in(err)
        if oserr is not None and not isinstance(err, (KeyboardInterrupt, LinkError)):
            raise write_error(path, oserr, len(data)) from None
        raise
