"""common/run/json_files.py：JSON / JSON-lines 文件的原子写入和读取。"""

from __future__ import annotations

import json
import math

import pytest

from common.run.json_files import read_json, read_json_object, read_jsonl, write_json, write_jsonl


def test_write_json_is_complete(tmp_path):
    write_json(tmp_path / "eval.json", {"accuracy": 0.25, "n": 4})
    assert json.loads((tmp_path / "eval.json").read_text()) == {"accuracy": 0.25, "n": 4}
    assert not list(tmp_path.glob("*.tmp"))


def test_read_json_is_none_for_anything_but_an_object(tmp_path):
    for name, content in [("a", b"[1]"), ("b", b"{"), ("c", b"\xff"), ("d", b'{"x": 1}')]:
        (tmp_path / name).write_bytes(content)
    assert [read_json(tmp_path / n) for n in "abcde"] == [None, None, None, {"x": 1}, None]


def test_read_json_object_names_the_file_and_the_hint(tmp_path):
    (tmp_path / "a.json").write_text("[1]", encoding="utf-8")
    with pytest.raises(KeyError, match="a.json 不是一个 JSON 对象：换一个"):
        read_json_object(tmp_path / "a.json", "换一个", KeyError)
    with pytest.raises(ValueError, match="missing.json 读不出来"):
        read_json_object(tmp_path / "missing.json", "换一个")


def test_jsonl_round_trip_stores_nan_and_inf_as_null(tmp_path):
    rows = [{"step": 1, "kl": math.nan}, {"step": 2, "grad_norm": -math.inf, "ok": True}]
    write_jsonl(tmp_path / "rows.jsonl", rows)
    expected = [{"step": 1, "kl": None}, {"step": 2, "grad_norm": None, "ok": True}]
    assert read_jsonl(tmp_path / "rows.jsonl") == expected
    assert not list(tmp_path.glob("*.tmp"))


def test_read_run_config_says_what_is_wrong(tmp_path):
    """课里的工具（before_after、entropy_t1、pass_k_seeds）读运行目录的 config.json：坏了是一行中文。"""
    from common.run.json_files import read_run_config

    with pytest.raises(ValueError, match="config.json 不存在"):
        read_run_config(tmp_path)
    (tmp_path / "config.json").write_text('{"model": "tiny", "da', encoding="utf-8")  # 截断
    with pytest.raises(ValueError, match="config.json 读不出来"):
        read_run_config(tmp_path)
    (tmp_path / "config.json").write_text('{"model": "tiny"}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"缺 \['data'\]"):
        read_run_config(tmp_path, ("model", "data"))
    assert read_run_config(tmp_path, ("model",)) == {"model": "tiny"}
