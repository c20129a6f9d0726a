"""每节课（L1、L2、L3 的 `NN_名字/README.md`）的骨架：最后三节依次是「学完这节你能做到」「检查点」「练习」；
每节课都在根目录 README 的课程地图上。"""

from __future__ import annotations

import pytest
from quiz import ROOT, lesson_readmes, module_name

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


def test_every_lesson_is_on_the_course_map():
    """根目录 README 的「课程地图」链接每一节课（课按文件夹发现，地图是人写的：漏了这里报出来）。"""
    front = (ROOT / "README.md").read_text(encoding="utf-8")
    course_map = (
        front.split("## 课程地图", 1)[1].split("\n## ", 1)[0] if "## 课程地图" in front else ""
    )
    assert course_map, "根目录 README.md 里没有「## 课程地图」一节"
    missing = [p.relative_to(ROOT).as_posix() for p in READMES]
    missing = [link for link in missing if f"]({link})" not in course_map]
    assert not missing, (
        f"这些课不在根目录 README.md 的「课程地图」里（每节课一行，链接写课文的路径）：{missing}"
    )


def test_the_abstract_counts_the_training_script_lines():
    """README 的英文摘要说训练脚本有多少行：数的是现在的 grpo_train.py（总行数，和去掉空行、纯注释行以后的行数）。"""
    script = ROOT / "L2_algorithm" / "07_grpo_train" / "grpo_train.py"
    lines = script.read_text(encoding="utf-8").splitlines()
    code = [x for x in lines if x.strip() and not x.strip().startswith("#")]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    want = f"a training script of {len(lines)} lines ({len(code)} without blank and comment-only lines)"
    assert want in readme, f"grpo_train.py 的行数变了：README 的摘要要写成「{want}」"
