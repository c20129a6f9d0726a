"""仓库里每个 Markdown 文件的站内链接都指得到东西：相对路径的文件或目录存在，`#锚点` 是目标文件里真有的标题。

锚点按 GitHub 渲染 Markdown 时给标题生成 id 的规则算（github-slugger）：取标题的文字（去掉 `代码` 的反引号、
强调的星号、链接只留文字、HTML 标签去掉），转小写；删掉不是字母、数字、`_`、`-`、空格的字符（中文是字母，留下；
「：」「，」「（」这类全角标点、`.`、`/` 都删掉）；每个空格换成一个 `-`。同一个文件里重复的标题依次加 `-1`、`-2`。
`<a id="...">`（答案页用的）和 HTML 标签的 `name="..."` 也算锚点。

不检查：http(s)、mailto 等外部链接（测试离线）；代码块和行内代码里像链接的文字。
链接也不许指到仓库外面（学习者的 clone 里只有仓库本身）。
"""

from __future__ import annotations

import difflib
import re
import subprocess
import unicodedata
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest
from quiz import ROOT

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
# [文字](目标) 和 ![图](目标)；目标里可以有一层括号（少见），可以有 "标题"
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"
)
_REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
_HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']*)[\"']", re.I)
_HTML_ID = re.compile(r"<[a-zA-Z][^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files(root: Path = ROOT) -> list[Path]:
    """git 跟踪的（和没被忽略的新）.md 文件；不在 git 仓库里时（下载的压缩包）按目录找，跳过隐藏目录和虚拟环境。"""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "*.md"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout.decode("utf-8")
        files = [root / name for name in out.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in root.rglob("*.md") if not _skipped(p.relative_to(root).parent, root)]
    return sorted(p for p in files if p.is_file())


def _skipped(folder: Path, root: Path) -> bool:
    """隐藏目录（.git、.venv……）和虚拟环境（有 pyvenv.cfg 的目录）里的 .md 不是课程的。"""
    parts = folder.parts
    return any(
        part.startswith(".") or (root.joinpath(*parts[: i + 1]) / "pyvenv.cfg").exists()
        for i, part in enumerate(parts)
    )


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(行号, 行) ：去掉围栏代码块里的行，行内代码换成空白（其中像链接的文字不算链接）。"""
    out, fence = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            continue
        if fence is not None:
            if line.strip().startswith(fence) and set(line.strip()) == {fence[0]}:
                fence = None
            continue
        out.append((number, _INLINE_CODE.sub(lambda c: " " * len(c.group(0)), line)))
    return out


def _heading_text(raw: str) -> str:
    """GitHub 上标题的纯文字：反引号、星号、HTML 标签去掉，链接只留文字。"""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("`", "").replace("*", "")


def slug(text: str) -> str:
    """github-slugger 的规则：小写，只留字母、数字、`_`、`-`、空格，空格换成 `-`。"""
    kept = "".join(ch for ch in text.lower() if ch in " -_" or unicodedata.category(ch)[0] in "LNM")
    return kept.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """这个 Markdown 文件里所有能用 `#...` 指到的 id。"""
    text = path.read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    ids: set[str] = set()
    for _, line in _prose_lines(text):
        ids.update(_HTML_ID.findall(line))
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(_heading_text(m.group(2) or ""))
        n = seen.get(base, 0)
        seen[base] = n + 1
        ids.add(base if n == 0 else f"{base}-{n}")
    return frozenset(ids)


def links(path: Path) -> list[tuple[int, str]]:
    """(行号, 链接目标)：行内链接、图片、引用式定义、HTML 的 href/src；外部链接不算。"""
    found = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        targets = _INLINE_LINK.findall(line) + _HTML_LINK.findall(line)
        m = _REF_DEF.match(line)
        if m:
            targets.append(m.group(1))
        for target in targets:
            target = target.strip().removeprefix("<").removesuffix(">")
            if target and not _SCHEME.match(target) and not target.startswith("//"):
                found.append((number, target))
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """这个文件里每个指不到东西的站内链接一句中文（说清是哪一行、哪个链接、错在哪）。"""
    problems = []
    where = path.relative_to(root).as_posix()
    for number, target in links(path):
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        here = f"{where}:{number} 的链接 ({target})"
        if not dest.is_relative_to(root.resolve()):
            problems.append(
                f"{here} 指到了仓库外面：学习者的 clone 里没有它，换成仓库里的文件或外部网址。"
            )
            continue
        if not dest.exists():
            problems.append(
                f"{here} 指向的文件不存在：{dest.relative_to(root.resolve()).as_posix()}。"
            )
            continue
        if not fragment:
            continue
        if dest.is_dir():
            dest = dest / "README.md"
        if dest.suffix != ".md" or not dest.is_file():
            problems.append(
                f"{here} 带了锚点 #{fragment}，但目标不是 Markdown 文件，锚点没法核对。"
            )
            continue
        fragment = unquote(fragment)
        have = anchors(dest)
        if fragment not in have:
            near = difflib.get_close_matches(fragment, sorted(have), n=1, cutoff=0.3)
            hint = f"相近的锚点：#{near[0]}" if near else "那个文件里没有相近的标题"
            problems.append(
                f"{here} 指向的锚点 #{fragment} 在 {dest.relative_to(root.resolve()).as_posix()} 里不存在"
                f"（标题改过？）：{hint}。"
            )
    return problems


FILES = markdown_files()


def test_markdown_files_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in FILES}
    assert {"README.md", "MAINTAINING.md", "L2_algorithm/ANSWERS.md"} <= names, sorted(names)


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(ROOT).as_posix() for p in FILES])
def test_in_repo_links_resolve(path):
    problems = broken_links(path)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def test_the_slug_rules():
    """GitHub 的标题 id：中文留下，全角标点、`.`、反引号删掉，空格变 `-`，大写变小写。"""
    assert slug(_heading_text("2.1 Qwen3-0.6B 的显存：所有数字在这一张表里")) == (
        "21-qwen3-06b-的显存所有数字在这一张表里"
    )
    assert slug(_heading_text("2.7 梯度累积：每个 micro-batch 的损失乘多少（本节练习）")) == (
        "27-梯度累积每个-micro-batch-的损失乘多少本节练习"
    )
    assert slug(_heading_text("3.1 `token_logprobs`：规格")) == "31-token_logprobs规格"
    assert slug(_heading_text("坑 1：对称裁剪压制低概率 token（DAPO 的 clip-higher）")) == (
        "坑-1对称裁剪压制低概率-tokendapo-的-clip-higher"
    )
    assert (
        slug(_heading_text("第四次（2026-12-02）：在 GPU 上重跑"))
        == "第四次2026-12-02在-gpu-上重跑"
    )


def test_the_checker_finds_what_it_should(tmp_path):
    """检查器本身：好的链接不报，坏文件、坏锚点、仓库外、代码里的假链接各是什么结果。"""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "README.md").write_text(
        '# 标题\n\n## 2.1 同一个 Qwen3-0.6B，三个数字\n\n## 重复\n\n## 重复\n\n<a id="l2_01"></a>\n',
        encoding="utf-8",
    )
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[好](a/README.md#21-同一个-qwen3-06b三个数字) [好](a/#重复-1) [好](a/README.md#l2_01)\n"
        "[好](#本文) ![图](a/README.md) [外](https://example.com/x#y)\n"
        "# 本文\n"
        "`[代码里](不存在.md)`\n\n```\n[代码块里](不存在.md)\n```\n"
        "[坏文件](a/没有.md) [坏锚点](a/README.md#21-同一个-qwen3-06b你会看到三个数字)\n"
        "[仓库外](../outside.md)\n",
        encoding="utf-8",
    )
    (tmp_path.parent / "outside.md").write_text("x", encoding="utf-8")
    problems = broken_links(doc, root=tmp_path)
    assert len(problems) == 3, problems
    assert "a/没有.md" in problems[0] and "不存在" in problems[0]
    assert "#21-同一个-qwen3-06b三个数字" in problems[1] and "相近的锚点" in problems[1]
    assert "仓库外面" in problems[2]


def test_without_git_the_files_are_found_by_walking(tmp_path):
    """下载的压缩包里没有 .git：按目录找 .md，跳过隐藏目录和虚拟环境。"""
    for name in ("r.md", "x/a.md", ".hidden/b.md", "venv/lib/c.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("", encoding="utf-8")
    (tmp_path / "venv" / "pyvenv.cfg").write_text("", encoding="utf-8")
    found = [p.relative_to(tmp_path).as_posix() for p in markdown_files(tmp_path)]
    assert found == ["r.md", "x/a.md"], found
