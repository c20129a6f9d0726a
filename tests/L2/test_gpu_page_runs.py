"""L2.07 第 6.4 节的前两条命令在 H100 上原样跑过（gpu_page/）：命令就是页上的，课文里的每个数都从附带的文件算出来。"""

from __future__ import annotations

import json
import re
import shlex
import statistics
from datetime import datetime
from pathlib import Path

from common.gsm8k.paired_stats import paired, signed
from common.run.json_files import read_jsonl
from common.run.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "L2_algorithm" / "07_grpo_train"
SHIPPED = LESSON / "gpu_page"
RUNS = ("q3-s0", "q3-ctl-s0")
# 课文允许的改动：模型目录、--out（放到机器的 /tmp 下）和模拟 5090 的 --cap-gb 32
REPLACED = {"--model", "--out"}
ADDED = ("--cap-gb", "32")


def _page() -> str:
    return (LESSON / "README.md").read_text(encoding="utf-8")


def _flat(text: str) -> str:
    return re.sub(r"\n(?!\n)\s*", "", text)


def _rows(name: str) -> list[dict]:
    return read_metrics(SHIPPED / name / "metrics.jsonl")


def _json(name: str, file: str) -> dict:
    return json.loads((SHIPPED / name / file).read_text(encoding="utf-8"))


def _greedy(name: str, which: str) -> list[int]:
    return _json(name, f"eval_{which}.json")["per_question"]["greedy"]


def _greedy_at(folder: Path, step: int) -> list[int]:
    """一个运行目录在第 step 步（eval_questions.jsonl 里那一行）的逐题贪心结果。"""
    (row,) = [r for r in read_jsonl(folder / "eval_questions.jsonl") if r["step"] == step]
    return row["greedy"]


def _page_train_commands() -> list[list[str]]:
    """页上 ```bash 块里的每条 grpo_train.py 命令（argv）。"""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", _page(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if len(argv) > 1 and argv[1].endswith("07_grpo_train/grpo_train.py"):
                out.append(argv)
    return out


def _normalised(argv: list[str]) -> tuple[list[str], str]:
    """去掉解释器、课文允许改的值（模型目录、--out）和末尾加的 --cap-gb 32；返回 (其余的 argv, --out 的目录名)。"""
    rest = argv[1:]
    if rest[-2:] == list(ADDED):
        rest = rest[:-2]
    out = ""
    for i, arg in enumerate(rest):
        if arg in REPLACED:
            if arg == "--out":
                out = Path(rest[i + 1]).name
            rest = [*rest[: i + 1], "…", *rest[i + 2 :]]
    return rest, out


def _timeline() -> tuple[datetime, dict[str, datetime], dict[str, int], dict[str, int]]:
    """timeline.txt：起进程的时刻、每个文件的修改时刻、du -sb 的字节数、checkpoint.pt 的字节数。"""
    text = (SHIPPED / "timeline.txt").read_text(encoding="utf-8")
    day = "2026-12-07"
    started = datetime.fromisoformat(f"{day} " + re.search(r"^started (\S+)$", text, re.M)[1])
    files = {
        m[2]: datetime.fromisoformat(f"{m[1]}")
        for m in re.finditer(r"^\S+ root/root +\d+ (\S+ \S+) runs/(\S+)$", text, re.M)
    }
    du = {m[2]: int(m[1]) for m in re.finditer(r"^(\d+)\t/tmp/runs/([\w-]+)/$", text, re.M)}
    ckpts = {
        m[1]: int(m[2])
        for m in re.finditer(
            r"/tmp/runs/([\w-]+)/\n-\S+ 1 root root (\d+) .* checkpoint\.pt$", text, re.M
        )
    }
    return started, files, du, ckpts


def test_the_shipped_runs_are_the_page_commands():
    """issue 44：附带的 GPU 运行目录的 provenance.command 就是页上的命令（模型目录、--out、--cap-gb 之外一字不差）。"""
    page = {tuple(rest): out for rest, out in map(_normalised, _page_train_commands())}
    for name in RUNS:
        config = _json(name, "config.json")
        prov = config["provenance"]
        assert "H100" in prov["device"] and prov["libraries"]["torch"] == "2.11.0"
        assert prov["git"]["dirty"] is False and config["cap_gb"] == 32.0
        assert f"代码是 commit {prov['git']['commit'][:7]}（没有改动）" in _page()
        rest, out = _normalised(prov["command"])
        assert tuple(rest) in page, (
            f"gpu_page/{name} 的命令不是 L2.07 第 6.4 节的任何一条：{shlex.join(prov['command'])}"
        )
        assert page[tuple(rest)] == out == name, "附带的目录名要和页上那条命令的 --out 相同"
        assert not list((SHIPPED / name).glob("checkpoint*")), "附带的运行目录不带 checkpoint"


def test_the_measured_pair_table_is_the_shipped_files():
    """L2.07 第 6.5 节「第 6.4 节的前两条，原样跑的实测」那张表和它下面的推算。"""
    started, files, du, ckpts = _timeline()
    page = _page()
    cells = {}
    for name in RUNS:
        rows = _rows(name)
        later = [r for r in rows if r["step"] > 2]
        by = {r["step"]: r for r in rows}
        step = statistics.median(r["rollout_s"] + r["train_s"] for r in later)
        rollout = statistics.median(r["rollout_s"] for r in later)
        train = statistics.median(r["train_s"] for r in later)
        gap = by[51]["elapsed_s"] - by[50]["elapsed_s"] - by[51]["rollout_s"] - by[51]["train_s"]
        log = (SHIPPED / name / "train_log.txt").read_text(encoding="utf-8")
        minutes, seconds = re.findall(r"100/100 \[(\d+):(\d\d)<00:00", log)[-1]
        bar = int(minutes) * 60 + int(seconds)
        before = (files[f"{name}/eval_before.json"] - started).total_seconds()
        cells[name] = [
            f"{before:.0f} s",
            f"{step:.2f} s（rollout {rollout:.2f} s、训练 {train:.2f} s）",
            f"{gap:.1f} s",
            f"{bar - rows[-1]['elapsed_s']:.0f} s",
            f"{bar} s",
            f"{max(r['peak_vram_gb'] for r in rows):.2f} GiB",
            f"{du[name]:,} B",
        ]
    for a, b in zip(cells["q3-s0"], cells["q3-ctl-s0"], strict=True):
        assert f"| {a} | {b} |" in page, (
            f"L2.07 第 6.5 节的实测表和 gpu_page/ 对不上，应该有：| {a} | {b} |"
        )
    end = max(files.values())
    wall = (end - started).total_seconds()
    minutes, seconds = divmod(int(wall), 60)
    assert f"**两条一起，从起进程到两条都写完：{minutes} 分 {seconds} 秒**" in page
    assert f"{started:%H:%M:%S} 起，最后一个文件 {end:%H:%M:%S}" in page
    # 和单独一个进程的一步比（第一张表的 hw-mb8-s2），以及由它推的一前一后
    timing = ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "gpu_record" / "hw-mb8-s2"
    solo_rows = read_metrics(timing / "metrics.jsonl")
    solo = statistics.median(r["rollout_s"] + r["train_s"] for r in solo_rows if r["step"] > 2)
    pair = statistics.median(r["rollout_s"] + r["train_s"] for r in _rows("q3-s0") if r["step"] > 2)
    gain = 2 * solo / pair
    flat = _flat(page)
    assert f"2 × {solo:.2f} / {pair:.2f} ≈ {gain:.2f} 倍" in flat
    assert f"约 {wall / 60:.2f} × {gain:.2f} ≈ {round(wall / 60 * gain, -1):.0f} 分钟" in flat
    assert f"约 2 × {wall / 60:.2f} ≈ {2 * wall / 60:.1f} 分钟" in flat
    assert 0 < abs(ckpts["q3-s0"] - ckpts["q3-ctl-s0"]) < 100, "课文说对照的只差几十字节"
    assert (
        f"一样大（运行的 {ckpts['q3-s0']:,} B，对照的只差几十字节，`gpu_page/timeline.txt`；"
        f"运行目录连同其余文件 {du['q3-s0']:,} B）" in page
    )


def test_the_floor_of_the_page_run_is_its_eval_floor_file():
    """第 6.4 节「你的训练前不会是 0.290」：这一页的命令量到的底噪（eval batch 64 对 32）。"""
    floor = _json("q3-s0", "eval_floor.json")
    assert (floor["batch_size_first"], floor["batch_size_second"]) == (64, 32)
    assert floor["accuracy_first"] == sum(_greedy("q3-s0", "before")) / 500
    quote = (
        f"eval batch 64 是 {floor['accuracy_first']:.3f}，32 是 {floor['accuracy_second']:.3f}，"
        f"500 题里 {floor['grade_flips']} 题判分变了（{floor['up']} 题变对、{floor['down']} 题变错）。"
        f"同样的权重只改评估的 batch 就差 {floor['accuracy_first'] - floor['accuracy_second']:.3f}"
    )
    assert quote in _flat(_page()), (
        f"L2.07 第 6.4 节的底噪和 eval_floor.json 对不上，应该写：{quote}"
    )


def test_the_page_run_result_and_the_four_gains():
    """第 6.6 节「拿这一页的命令自己核对一次」：表里的正确率、逐题配对；四次的均值和标准差。"""
    page = _page()
    flat = _flat(page)
    at50 = {}
    for name, label in zip(RUNS, ("运行 `q3-s0`", "对照 `q3-ctl-s0`"), strict=True):
        before, after = _greedy(name, "before"), _greedy(name, "after")
        at50[name] = sum(_greedy_at(SHIPPED / name, 50)) / 500
        assert at50[name] == next(r["eval_accuracy"] for r in _rows(name) if r["step"] == 50)
        g = paired(before, after)
        row = (
            f"| {label} | {sum(before) / 500:.3f} | {at50[name]:.3f} | {sum(after) / 500:.3f} | "
            f"{signed(g['diff'])} ± {g['se']:.3f}，翻对 {g['up']} / 翻错 {g['down']}"
        )
        assert row in page, f"L2.07 第 6.6 节的核对表和 gpu_page/ 对不上，应该有：{row}"
    run = paired(_greedy("q3-s0", "before"), _greedy("q3-s0", "after"))
    assert f"翻错 {run['down']}，p = {run['p']:.2f} |" in page
    assert f"第 50 步的「运行 − 对照」是 {signed(at50['q3-s0'] - at50['q3-ctl-s0'])}" in flat
    assert f"它第 50 步就掉到了 {at50['q3-ctl-s0']:.3f}" in flat
    # 同一个 seed 0 在 L2.08 的设置下第 100 步的涨幅；四次的均值和标准差
    recipe = ROOT / "L2_algorithm" / "08_reading_the_curves" / "real_recipe"
    old = {}
    for name in ("recipe-s0", "recipe-s1", "recipe100-s2"):
        before = json.loads((recipe / name / "eval_before.json").read_text())
        last = _greedy_at(recipe / name, 100)
        old[name] = paired(before["per_question"]["greedy"], last)["diff"]
    gains = [*old.values(), run["diff"]]
    assert f"第 100 步是 {signed(old['recipe-s0'])}" in flat
    assert f"就差了 {old['recipe-s0'] - run['diff']:.3f}：这里面有重跑的噪声" in flat
    floor = _json("q3-s0", "eval_floor.json")
    gap = floor["accuracy_first"] - floor["accuracy_second"]
    assert run["diff"] < gap, "课文说这次的涨幅比评估自己的底噪还小"
    assert (
        f"{signed(run['diff'])} 比这次评估自己的底噪还小（同样的权重只改 eval batch 就差 {gap:.3f}"
        in flat
    )
    assert min(gains) == run["diff"] and "它是上面四次里最小的一次" in flat
    quote = (
        f"**四次的均值 {signed(statistics.fmean(gains))}，标准差 {statistics.stdev(gains):.3f}。**"
    )
    assert quote in flat, f"L2.07 第 6.6 节四次的均值和标准差应该写：{quote}"


def test_l2_08_quotes_the_page_run():
    """L2.08 第 6.8 节引用这一页的运行：显存峰值和第 100 步的涨幅。"""
    text = (ROOT / "L2_algorithm" / "08_reading_the_curves" / "README.md").read_text(
        encoding="utf-8"
    )
    part = text.split("### 6.8 ", 1)[1].split("\n### ", 1)[0]
    peaks = [max(r["peak_vram_gb"] for r in _rows(name)) for name in RUNS]
    assert f"显存峰值 {peaks[0]:.2f} GiB 和 {peaks[1]:.2f} GiB" in part
    run = paired(_greedy("q3-s0", "before"), _greedy("q3-s0", "after"))
    assert f"第 100 步只涨了 {signed(run['diff'])}（p = {run['p']:.2f}" in part


def test_the_front_page_quotes_the_page_run():
    """首页 README 的 GPU 一段引用这一页的运行：三个评估点、涨幅和 p、两条一起的时间、目录大小。"""
    front = (ROOT / "README.md").read_text(encoding="utf-8")
    curve = []
    for name in RUNS:
        at50 = [r["eval_accuracy"] for r in _rows(name) if r["step"] == 50][0]
        curve.append((sum(_greedy(name, "before")) / 500, at50, sum(_greedy(name, "after")) / 500))
    run = paired(_greedy("q3-s0", "before"), _greedy("q3-s0", "after"))
    started, files, du, _ = _timeline()
    minutes, seconds = divmod(int((max(files.values()) - started).total_seconds()), 60)
    for quote in (
        "运行 {:.3f} → {:.3f}（第 50 步）→ {:.3f}（第 100 步，".format(*curve[0]),
        f"{signed(run['diff'])}，p = {run['p']:.2f}，",
        "对照 {:.3f} → {:.3f} → {:.3f}；".format(*curve[1]),
        f"两条一起 {minutes} 分 {seconds} 秒，每个运行目录 {du['q3-s0'] / 1e9:.2f} GB",
    ):
        assert quote in front, f"首页 README 引用的这一页的运行和 gpu_page/ 对不上，应该写：{quote}"
