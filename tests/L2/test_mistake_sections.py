"""诊断信息里「回看 L2.0X「…」」指向的课文小节必须真的存在（课文改标题时，这里会先报出来）。"""

from __future__ import annotations

import re

import pytest
import test_l2_04_kl
import test_l2_05_grpo_loss
import test_l2_06_sampling
import test_l2_07_grpo_train
from quiz import ROOT, find_heading

LESSONS = {
    "L2.04": "04_kl",
    "L2.05": "05_grpo_loss",
    "L2.06": "06_sampling",
    "L2.07": "07_grpo_train",
}
MODULES = [test_l2_04_kl, test_l2_05_grpo_loss, test_l2_06_sampling, test_l2_07_grpo_train]


def _sections():
    found = set()
    for mod in MODULES:
        for value in vars(mod).values():
            items = value if isinstance(value, list) else [value]
            for item in items:
                text = getattr(item, "section", item)
                if isinstance(text, str):
                    found.update(re.findall(r"(L2\.0[4-7])「([^」{]+)」", text))
    return sorted(found)


SECTIONS = _sections()


def test_sections_were_collected():
    assert len(SECTIONS) >= 8, SECTIONS


@pytest.mark.parametrize("lesson,heading", SECTIONS)
def test_section_exists(lesson, heading):
    readme = ROOT / "L2_algorithm" / LESSONS[lesson] / "README.md"
    assert find_heading(readme, heading), (
        f"{readme.relative_to(ROOT)} 里没有以「{heading}」开头的标题"
    )
