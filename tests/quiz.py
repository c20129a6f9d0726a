"""检查点题目的解析与判分：题目在每节课 README 的「检查点」一节，答案与解析在每一级的 ANSWERS.md。

README 里的格式（所有课统一）：

    **Q1（单选）** 题干……
    - A. 选项
    - B. 选项

答案页 `<级>/ANSWERS.md` 里，每节课一段，以 `<a id="l2_01_advantages"></a>` 开头：

    - Q1：B。回看「4. 坑，以及出处」。解析……

「回看」指向课文里的一个标题（`## ` 或 `### ` 开头的那一行，写出它的开头即可）：
学习者答错时，测试只打印这个指向，不打印答案。
答案键放在 `solutions/<模块>.py` 的 CHECKPOINT_ANSWERS 里（如 {"Q1": "B", "Q2": "AC"}），
学习者在 `exercises/<模块>.py` 的同名字典里作答。
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEVELS = {"L1_concepts": "l1", "L2_algorithm": "l2", "L3_frameworks": "l3"}

_Q = re.compile(r"^\*\*(Q\d+)（(单选|多选)）\*\*\s*(.+)$")
_OPT = re.compile(r"^- ([A-H])\. (.+)$")
_ANS = re.compile(r"^- (Q\d+)：([A-H]+)。(?:回看「([^」]+)」。)?")
_HEADING = re.compile(r"^#{2,4} (.+)$")


@dataclass
class Question:
    qid: str
    kind: str  # "单选" | "多选"
    text: str
    options: list[str]


@dataclass
class Answer:
    qid: str
    key: str  # 正确选项，如 "AC"
    section: str | None  # 答错时回看的课文标题（开头部分）
    line: str  # 答案页里的整行（含解析）


def lesson_readmes() -> list[Path]:
    return sorted(p for level in LEVELS for p in (ROOT / level).glob("[0-9][0-9]_*/README.md"))


def module_name(readme: Path) -> str:
    """L2_algorithm/01_advantages/README.md -> l2_01_advantages"""
    return f"{LEVELS[readme.parent.parent.name]}_{readme.parent.name}"


def answers_page(readme: Path) -> Path:
    return readme.parent.parent / "ANSWERS.md"


def parse_checkpoint(readme: Path) -> list[Question]:
    """README「检查点」一节里的题目。"""
    text = readme.read_text(encoding="utf-8")
    if "## 检查点" not in text:
        return []
    section = text.split("## 检查点", 1)[1].split("\n## ", 1)[0]
    questions: list[Question] = []
    for line in section.splitlines():
        line = line.strip()
        if m := _Q.match(line):
            questions.append(Question(m.group(1), m.group(2), m.group(3), []))
        elif (m := _OPT.match(line)) and questions:
            questions[-1].options.append(m.group(1))
    return questions


def parse_answers(readme: Path) -> dict[str, Answer]:
    """答案页里这节课的答案与解析：{"Q1": Answer(...)}；找不到这一段时返回 {}。"""
    page = answers_page(readme)
    if not page.is_file():
        return {}
    anchor = f'<a id="{module_name(readme)}"></a>'
    text = page.read_text(encoding="utf-8")
    if anchor not in text:
        return {}
    block = text.split(anchor, 1)[1].split('<a id="', 1)[0]
    answers = {}
    for line in block.splitlines():
        if m := _ANS.match(line.strip()):
            answers[m.group(1)] = Answer(m.group(1), m.group(2), m.group(3), line.strip())
    return answers


def headings(readme: Path) -> list[str]:
    """课文里 `##`–`####` 标题的文字。"""
    lines = readme.read_text(encoding="utf-8").splitlines()
    return [m.group(1).strip() for line in lines if (m := _HEADING.match(line))]


def find_heading(readme: Path, section: str) -> str | None:
    """以 `section` 开头的那个标题（完整文字）；没有则 None。"""
    return next((h for h in headings(readme) if h.startswith(section)), None)


def grade(readme: Path, key: dict[str, str], yours: dict[str, str | None]) -> list[str]:
    """判分：返回每道答错的题一行指向（不含答案）；全对返回 []。未作答的题也算错，单独说明。"""
    answers = parse_answers(readme)
    where = readme.relative_to(ROOT).as_posix()
    lines = []
    for qid in sorted(key, key=lambda s: int(s[1:])):
        given = yours.get(qid)
        if given is None:
            lines.append(
                f"{qid} 还没作答：在 exercises/{module_name(readme)}.py 的 CHECKPOINT_ANSWERS 里填大写字母串"
            )
            continue
        if "".join(sorted(set(str(given).upper()))) == key[qid]:
            continue
        section = answers.get(qid).section if qid in answers else None
        target = f"{where} 的「{find_heading(readme, section) or section}」" if section else where
        lines.append(f"{qid} 不对：回看 {target}")
    return lines
