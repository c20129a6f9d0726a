"""每节课（L1、L2、L3 的 `NN_名字/README.md`）的骨架：最后三节依次是「学完这节你能做到」「检查点」「练习」。"""

from __future__ import annotations

import pytest
from quiz import lesson_readmes, module_name

ENDING = ["## 学完这节你能做到", "## 检查点", "## 练习"]
READMES = lesson_readmes()


def test_lessons_are_discovered():
    assert READMES, "没有找到任何课程 README（L*_*/NN_名字/README.md）"


@pytest.mark.parametrize("readme", READMES, ids=module_name)
def test_lesson_ends_with_the_three_sections(readme):
    heads = [line.strip() for line in readme.read_text(encoding="utf-8").splitlines()]
    heads = [h for h in heads if h.startswith("## ")]
    assert heads[-3:] == ENDING, (
        f"{readme.parent.name} 的最后三节必须依次是 {ENDING}，实际是 {heads[-3:]}"
    )
