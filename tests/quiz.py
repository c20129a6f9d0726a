"""检查点题目的解析：从每节课 README 的「检查点」一节读出题目、选项和答案。

README 里的格式（所有课统一）：

    **Q1（单选）** 题干……
    - A. 选项
    - B. 选项

    <details><summary>答案与解析</summary>

    - Q1：B。解析……

    </details>

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
_ANS = re.compile(r"^- (Q\d+)：([A-H]+)。")


@dataclass
class Question:
    qid: str
    kind: str  # "单选" | "多选"
    text: str
    options: list[str]


def lesson_readmes() -> list[Path]:
    return sorted(p for level in LEVELS for p in (ROOT / level).glob("[0-9][0-9]_*/README.md"))


def module_name(readme: Path) -> str:
    """L2_algorithm/01_advantages/README.md -> l2_01_advantages"""
    return f"{LEVELS[readme.parent.parent.name]}_{readme.parent.name}"


def parse_checkpoint(readme: Path) -> tuple[list[Question], dict[str, str]]:
    """返回 (题目列表, README 答案区里写的答案)。"""
    text = readme.read_text(encoding="utf-8")
    if "## 检查点" not in text:
        return [], {}
    section = text.split("## 检查点", 1)[1].split("\n## ", 1)[0]
    questions: list[Question] = []
    answers: dict[str, str] = {}
    in_details = False
    for line in section.splitlines():
        line = line.strip()
        if line.startswith("<details"):
            in_details = True
        if in_details:
            if m := _ANS.match(line):
                answers[m.group(1)] = m.group(2)
            continue
        if m := _Q.match(line):
            questions.append(Question(m.group(1), m.group(2), m.group(3), []))
        elif (m := _OPT.match(line)) and questions:
            questions[-1].options.append(m.group(1))
    return questions, answers
