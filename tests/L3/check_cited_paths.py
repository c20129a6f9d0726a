"""核对 L3 源码导读里的引用：每条 `owner/repo@<commit>:<path>` 在那个 commit 上真的存在。

这不是 pytest 测试（CI 离线，拿不到上游仓库），而是维护者换 commit 重写导读时手动跑的工具：

    python3 tests/L3/check_cited_paths.py L3_frameworks/02_slime_reading/README.md /path/to/THUDM+slime.git
    python3 tests/L3/check_cited_paths.py L3_frameworks/03_miles_reading/README.md /path/to/radixark+miles.git

第二个参数是上游仓库的 git 目录（裸仓库或普通仓库的 .git 都行）。
每条引用都用 `git cat-file -e <commit>:<path>` 检查；有任何一条不存在，退出码为 1。
tests/L3/test_l3_readings.py 复用这里的 CITATION_RE / citations()，保证离线检查与在线核对用同一套解析。
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

# 形如 THUDM/slime@624b824a:slime/ray/rollout.py；路径只含字母数字和 ./_-，遇到反引号、空白、# 等就结束
CITATION_RE = re.compile(r"\b([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)@([0-9a-f]{7,40}):([A-Za-z0-9_./-]+)")


def citations(text: str) -> list[tuple[str, str, str]]:
    """从文本里抽出所有 (repo, commit, path)，按出现顺序、含重复。路径末尾的句点去掉。"""
    return [(m.group(1), m.group(2), m.group(3).rstrip(".")) for m in CITATION_RE.finditer(text)]


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__)
        return 2
    readme, git_dir = Path(argv[1]), Path(argv[2])
    if not readme.is_file():
        print(f"找不到 README：{readme}")
        return 2
    if not (git_dir / "HEAD").exists() and not (git_dir / ".git").exists():
        print(f"{git_dir} 不像一个 git 目录（没有 HEAD）。请传上游仓库的 git 目录。")
        return 2

    cites = citations(readme.read_text(encoding="utf-8"))
    if not cites:
        print(f"{readme} 里没有任何 repo@commit:path 引用")
        return 1
    unique = sorted(set(cites))
    missing = []
    for repo, commit, path in unique:
        ok = (
            subprocess.run(
                ["git", f"--git-dir={git_dir}", "cat-file", "-e", f"{commit}:{path}"],
                capture_output=True,
            ).returncode
            == 0
        )
        if not ok:
            missing.append(f"{repo}@{commit}:{path}")
    repos = sorted({r for r, _, _ in unique})
    commits = sorted({c for _, c, _ in unique})
    print(
        f"{readme}: {len(cites)} 处引用，{len(unique)} 条不同的 repo@commit:path，"
        f"{len({p for _, _, p in unique})} 个不同路径；仓库 {repos}，commit {commits}"
    )
    if missing:
        print(f"其中 {len(missing)} 条在该 commit 上不存在：")
        for m in missing:
            print("  ", m)
        return 1
    print("全部存在。")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
