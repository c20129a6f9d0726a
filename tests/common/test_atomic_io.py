"""common/run/atomic_io.py：原子写入；失败时（磁盘满、只读、Ctrl-C）目标文件不变、不留 .tmp，报错是中文。"""

from __future__ import annotations

import errno
from collections import namedtuple

import pytest

import common.run.atomic_io as A
from common.run.atomic_io import (
    DiskFullError,
    WriteError,
    append_line,
    atomic_write,
    human_bytes,
    os_error_in,
)


def test_atomic_write_bytes_text_and_writer(tmp_path):
    atomic_write(tmp_path / "a.bin", b"\x00\x01")
    atomic_write(tmp_path / "b.txt", "中文")
    atomic_write(tmp_path / "c.bin", lambda f: f.write(b"xyz"), size_hint=3)
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "b.txt").read_text(encoding="utf-8") == "中文"
    assert (tmp_path / "c.bin").read_bytes() == b"xyz"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.txt", "c.bin"]


def _half_then(exc):
    def writer(f):
        f.write(b"half")
        raise exc

    return writer


@pytest.mark.parametrize(
    "exc, expected",
    [
        (OSError(errno.ENOSPC, "No space left on device"), DiskFullError),
        (OSError(errno.EROFS, "Read-only file system"), WriteError),
        (KeyboardInterrupt(), KeyboardInterrupt),
        (ValueError("not an OS problem"), ValueError),
    ],
)
def test_failed_write_keeps_the_old_file_and_leaves_no_tmp(tmp_path, exc, expected):
    target = tmp_path / "config.json"
    target.write_text("old", encoding="utf-8")
    with pytest.raises(expected) as err:
        atomic_write(target, _half_then(exc), size_hint=10)
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]
    if expected is DiskFullError:
        msg = str(err.value)
        assert "ENOSPC" in msg and str(target) in msg and "需要约 10 B" in msg
    if expected is WriteError:
        assert "只读" in str(err.value) and str(target) in str(err.value)


def test_torch_style_wrapped_enospc_is_recognised(tmp_path):
    """torch.save 把写失败包成 RuntimeError（'unexpected pos …'），真正的 OSError 在 __context__ 里。"""

    def writer(f):
        err = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
        err.__context__ = OSError(errno.ENOSPC, "No space left on device")
        raise err

    with pytest.raises(DiskFullError, match="ENOSPC"):
        atomic_write(tmp_path / "checkpoint.pt", writer, size_hint=2 << 20)
    assert not list(tmp_path.iterdir())
    assert os_error_in(RuntimeError("x")) is None


def test_not_enough_free_space_is_refused_before_writing(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(A.shutil, "disk_usage", lambda p: usage(100, 90, 10))
    target = tmp_path / "checkpoint.pt"
    with pytest.raises(DiskFullError) as err:
        atomic_write(target, b"x" * 2048)
    assert "需要约 2.0 KiB" in str(err.value) and "只剩 10 B" in str(err.value)
    assert not list(tmp_path.iterdir()), "空间不够时不该开始写"


class _FullDisk:
    """一个只写得进前 n 个字节、然后 ENOSPC 的文件（包在真文件外面）。"""

    def __init__(self, f, n):
        self.f, self.n = f, n

    def write(self, data):
        if self.n <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        k = min(self.n, len(data))
        self.n -= k
        return self.f.write(bytes(data[:k]))

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def test_append_line_on_a_full_disk_leaves_no_half_line(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    append_line(path, '{"step": 1}')
    real_open = open
    monkeypatch.setattr(
        A, "open", lambda *a, **kw: _FullDisk(real_open(*a, **kw), 5), raising=False
    )
    with pytest.raises(DiskFullError, match="ENOSPC"):
        append_line(path, '{"step": 2, "reward_mean": 0.5}')
    monkeypatch.undo()
    assert path.read_text(encoding="utf-8") == '{"step": 1}\n'


def test_missing_folder_is_a_chinese_write_error(tmp_path):
    with pytest.raises(WriteError, match="写不了 .*x.json"):
        atomic_write(tmp_path / "no" / "such" / "dir" / "x.json", "{}")


def test_human_bytes():
    assert human_bytes(512) == "512 B"
    assert human_bytes(3 * 1024**2) == "3.0 MiB"
    assert human_bytes(7.5 * 1024**3) == "7.5 GiB"


@pytest.mark.parametrize("where", ["target", "tmp"])
def test_no_write_goes_through_a_planted_link(tmp_path, where):
    """一个指向目录外的符号链接放在课程要写的文件（或它的 .tmp）的位置：拒绝，外面的文件不变。"""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    folder = tmp_path / "run"
    folder.mkdir()
    link = folder / ("metrics.jsonl" if where == "target" else "metrics.jsonl.tmp")
    link.symlink_to(victim)
    if where == "tmp":
        with pytest.raises(WriteError, match="符号链接"):
            atomic_write(folder / "metrics.jsonl", b"new")
        assert link.is_symlink()  # 不是课程写的，不删
    else:  # 目标本身是链接：追加被拒；原子写入换掉的是链接，不写穿它
        with pytest.raises(WriteError, match="符号链接"):
            append_line(folder / "metrics.jsonl", '{"step": 1}')
        atomic_write(folder / "metrics.jsonl", b"new")
        assert not (folder / "metrics.jsonl").is_symlink()
    assert victim.read_bytes() == b"precious"
