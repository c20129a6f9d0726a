"""common/config/config_checks.py：按类型严格的规则表——nan/inf 不算数，true 不算整数，"0.1" 不算数。"""

from __future__ import annotations

import math

from common.config.config_checks import Rule, broken_rules, integer, number, one_of, optional, text


def test_number_is_finite_and_typed():
    positive = number(gt=0)
    assert positive(1) and positive(0.5)
    for bad in (0, -1, math.nan, math.inf, -math.inf, True, "0.1", None):
        assert not positive(bad), bad
    unit = number(gt=0, le=1)
    assert unit(1.0) and not unit(1.0000001) and not unit(0.0)


def test_integer_one_of_text_optional():
    at_least_one = integer(ge=1)
    assert at_least_one(1) and not at_least_one(0) and not at_least_one(1.0)
    assert not at_least_one(True) and not at_least_one("3")
    assert one_of((1, 2, 3))(2) and not one_of((1, 2, 3))(9) and not one_of((1, 2, 3))(2.0)
    assert text()("a") and not text()("  ") and not text()(None)
    assert optional(text())(None) and not optional(text())(3)


def test_broken_rules_lists_every_broken_value_in_chinese():
    rules = (
        Rule("lr", number(gt=0), "{flag} 必须是 > 0 的有限数"),
        Rule("save_every", integer(ge=1), "{flag} 必须是 >= 1 的整数"),
        Rule("reward", one_of(("a", "b")), "未知的 {flag} {value!r}"),
    )
    values = {"lr": math.nan, "save_every": 0, "reward": "vibes"}
    assert broken_rules(values, rules) == [
        "--lr 必须是 > 0 的有限数（得到 nan）",
        "--save-every 必须是 >= 1 的整数（得到 0）",
        "未知的 --reward 'vibes'",
    ]
    assert broken_rules({"lr": 1e-4, "save_every": 5, "reward": "a"}, rules) == []
    assert broken_rules({}, rules[:1]) == ["--lr 必须是 > 0 的有限数（得到 None）"]
