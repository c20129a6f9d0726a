"""common/run/metrics.py：jsonl 追加与续跑截断、计时/显存键的约定、curves.png 能画出来。"""

from __future__ import annotations

import json
import math

import pytest

from common.run.metrics import MetricsLogger, deterministic_part, plot_curves, read_metrics


def test_log_append_and_truncate_on_resume(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLogger(path)
    for s in range(1, 6):
        log.log({"step": s, "reward_mean": s / 10, "rollout_s": 0.1 * s})
    # 在第 3 步的 checkpoint 上续跑：第 4、5 步（checkpoint 之后才记下的）要丢掉，再追加
    log = MetricsLogger(path, resume_from_step=3)
    log.log({"step": 4, "reward_mean": 0.4})
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3, 4]


def test_nan_becomes_null_and_step_is_required(tmp_path):
    log = MetricsLogger(tmp_path / "m.jsonl")
    log.log({"step": 1, "kl": float("nan"), "grad_norm": math.inf})
    assert read_metrics(tmp_path / "m.jsonl") == [{"step": 1, "kl": None, "grad_norm": None}]
    with pytest.raises(ValueError, match="step"):
        log.log({"reward_mean": 1.0})


def test_partial_last_line_is_ignored(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"step": 1}) + "\n" + '{"step": 2, "rew', encoding="utf-8")
    assert read_metrics(path) == [{"step": 1}]


def test_deterministic_part_drops_timing_and_memory():
    row = {
        "step": 3,
        "reward_mean": 0.5,
        "rollout_s": 1.2,
        "tokens_per_s": 99.0,
        "peak_vram_gb": 3.1,
    }
    assert deterministic_part(row) == {"step": 3, "reward_mean": 0.5}


@pytest.mark.slow  # matplotlib：光 import 就约 1 CPU 秒，画图的测试放进 slow（CI 照样跑）
def test_plot_curves_writes_png(tmp_path):
    rows = [
        {
            "step": s,
            "reward_mean": s / 10,
            "accuracy": s / 12,
            "completion_len_mean": 20 - s,
            "entropy": 1.0 / s,
            "clip_fraction": 0.0,
            "eval_accuracy": 0.5 if s % 5 == 0 else None,
        }
        for s in range(1, 11)
    ]
    out = plot_curves(rows, tmp_path / "curves.png", title="test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob("*.tmp*"))


def _rows(n=10, **extra):
    return [
        {"step": s, "reward_mean": 0.3, "accuracy": 0.25, "kl": None, "clip_fraction": 0.0, **extra}
        for s in range(1, n + 1)
    ]


def _texts(ax) -> str:
    return " ".join(t.get_text() for t in ax.texts)


def _panel(fig, key):
    from common.run.metrics import CURVES

    return fig.axes[[k for k, _ in CURVES].index(key)]


@pytest.mark.slow  # matplotlib：光 import 就约 1 CPU 秒，画图的测试放进 slow（CI 照样跑）
def test_kl_and_clip_panels_say_why_they_are_empty_or_flat():
    """β = 0：KL 小图说没有参考模型；μ = 1：clip 小图说 ratio 恒为 1（不是一张空白坐标轴）。"""
    import matplotlib.pyplot as plt

    from common.run.metrics import curves_figure

    fig = curves_figure(_rows(), config={"beta": 0.0, "num_iterations": 1})
    assert "no reference model" in _texts(_panel(fig, "kl"))
    assert "exactly 1" in _texts(_panel(fig, "clip_fraction"))
    plt.close(fig)
    # β > 0、μ = 2：曲线是真的，不加说明
    fig = curves_figure(
        _rows(kl=0.01, clip_fraction=0.1), config={"beta": 0.04, "num_iterations": 2}
    )
    assert _texts(_panel(fig, "kl")) == "" and _texts(_panel(fig, "clip_fraction")) == ""
    plt.close(fig)


@pytest.mark.slow  # matplotlib：光 import 就约 1 CPU 秒，画图的测试放进 slow（CI 照样跑）
def test_accuracy_panel_sets_greedy_heldout_beside_sampled_accuracy():
    import matplotlib.pyplot as plt

    from common.run.metrics import curves_figure

    rows = _rows()
    rows[4].update(eval_accuracy=0.4)  # 只评贪心的一次（前几步）
    rows[9].update(eval_accuracy=0.5, eval_pass_at_1=0.3, eval_pass_at_8=0.7)
    before = {"accuracy": 0.06, "pass_at": {"1": 0.2, "8": 0.66}}
    fig = curves_figure(rows, config={"temperature": 1.0}, before=before)
    ax = _panel(fig, "accuracy")
    lines = {line.get_label(): line for line in ax.lines}
    assert "train batch (sampled, T=1)" in lines
    greedy = lines["held-out greedy"]
    assert list(greedy.get_xdata()) == [0, 5, 10] and list(greedy.get_ydata()) == [0.06, 0.4, 0.5]
    pass1 = lines["held-out pass@1 (sampled, T=1)"]
    assert list(pass1.get_xdata()) == [0, 10] and list(pass1.get_ydata()) == [0.2, 0.3]
    assert list(lines["held-out pass@8"].get_ydata()) == [0.66, 0.7]
    plt.close(fig)


@pytest.mark.slow  # matplotlib：光 import 就约 1 CPU 秒，画图的测试放进 slow（CI 照样跑）
def test_plot_curves_draws_with_the_config_and_eval_before_it_is_given(tmp_path, monkeypatch):
    import common.run.metrics as M

    seen = {}
    real = M.curves_figure
    monkeypatch.setattr(M, "curves_figure", lambda *a, **kw: seen.update(kw) or real(*a, **kw))
    config = {"beta": 0.0, "num_iterations": 1, "temperature": 1.0}
    M.plot_curves(_rows(), tmp_path / "curves.png", config=config, before={"accuracy": 0.06})
    assert seen["config"] == config and seen["before"] == {"accuracy": 0.06}


# ---- 读 metrics.jsonl 时从不悄悄丢行；写入失败不留半行 ---------------------------------------------


def _lines(*rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_a_bad_line_in_the_middle_is_refused_with_its_line_number(tmp_path):
    """以前：读到坏行就停，续跑再截断重写 -> 坏行之后的每一行都没了（[1..7] 只剩 [1]）。"""
    from common.run.metrics import MetricsError

    path = tmp_path / "metrics.jsonl"
    text = _lines(*({"step": s} for s in (1, 2, 3))) + "garbage\n" + _lines({"step": 5})
    path.write_text(text, encoding="utf-8")
    with pytest.raises(MetricsError, match="第 4 行") as err:
        read_metrics(path)
    assert str(path) in str(err.value)
    with pytest.raises(MetricsError):
        MetricsLogger(path, resume_from_step=3)  # 续跑时的截断同样拒绝
    assert path.read_text(encoding="utf-8") == text, "拒绝时文件必须原样不动"


@pytest.mark.parametrize(
    "line", ['{"reward_mean": 1.0}', '{"step": true}', '{"step": "3"}', "[1, 2]", "\xff"]
)
def test_a_line_that_is_not_a_row_is_refused(tmp_path, line):
    from common.run.metrics import MetricsError

    path = tmp_path / "metrics.jsonl"
    path.write_bytes((_lines({"step": 1}) + line + "\n" + _lines({"step": 3})).encode("utf-8"))
    with pytest.raises(MetricsError, match="第 2 行"):
        read_metrics(path)


def test_last_line_without_newline_complete_is_kept_partial_is_dropped(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(_lines({"step": 1}) + '{"step": 2}', encoding="utf-8")
    assert [r["step"] for r in read_metrics(path)] == [1, 2]
    path.write_text(_lines({"step": 1}) + '{"step": 2, "rew', encoding="utf-8")
    MetricsLogger(path, resume_from_step=5)  # 截断时把半行也清掉，之后的追加不会粘在它后面
    assert path.read_text(encoding="utf-8") == _lines({"step": 1})


@pytest.mark.slow  # matplotlib：光 import 就约 1 CPU 秒，画图的测试放进 slow（CI 照样跑）
def test_save_figure_writes_its_suffix_format_and_nothing_else(tmp_path):
    """issue 47：--plot compare.pdf 以前写的是 PNG 字节；--plot 一个已有目录以前留下 .tmp.png。"""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from common.run.metrics import figure_problem, save_figure

    for name, magic in (("a.png", b"\x89PNG"), ("a.pdf", b"%PDF"), ("a.svg", b"<?xml")):
        assert figure_problem(tmp_path / name) is None
        fig = plt.figure()
        save_figure(fig, tmp_path / name)
        assert (tmp_path / name).read_bytes().startswith(magic), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pdf", "a.png", "a.svg"]  # 没有 .tmp
    assert "是一个已有的目录" in figure_problem(tmp_path)
    assert "不是能画的格式" in figure_problem(tmp_path / "a.jpg", "--png")
    assert "不存在" in figure_problem(tmp_path / "no" / "a.png")


def test_a_step_with_two_rows_is_refused_by_every_whole_reader(tmp_path):
    """以前：cudnn_nan.py --run-widths 把同一步的两行当成两步（「3 步」），compare_runs 自己查过、别的工具没查。"""
    from common.run.metrics import MetricsError, read_whole_rows

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 1}\n', encoding="utf-8")
    with pytest.raises(MetricsError, match="第 3 行又是第 1 步（第 1 行已经有这一步）"):
        read_whole_rows(path, "")
