"""GSM8K-format data: GSM8K (shipped or hub), a local jsonl loader, a synthetic generator, prompts.

A GSM8K row is ``{"question": str, "answer": str}`` where ``answer`` is a worked solution whose last
line is ``#### <number>`` (calculator annotations ``<<48/2=24>>`` appear inline). ``Problem.gold`` is
the canonical number after the last ``####`` (``common.gsm8k.reward.extract_answer`` normalises it).

What follows ``####`` must be one plain number as GSM8K writes them: digits, optionally a minus sign,
thousands commas in groups of three and a decimal part (``72``, ``-3``, ``1,234``, ``0.5``). Anything
else (``1e309``, ``1,2345``, ``12 - 5``, ``5/0``, ``72 dollars``) is not a gold: the row is refused
with its line number, never read as some other number. Full-width digits (``#### １２``, ``#### 1２``,
as an IME may type them) are the same digits and are read as ASCII ones; other non-ASCII digits are
refused. A number longer than ``common.gsm8k.reward.MAX_NUMBER_DIGITS`` digits is refused naming that limit.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

GSM8K_HUB_ID = "openai/gsm8k"
# GSM8K as shipped with the course: openai/grade-school-math's grade_school_math/data/{train,test}.jsonl,
# gzip-compressed, byte for byte (source commit and licence in common/assets/gsm8k/README.md). The hub's
# "main" config was built from these two files in file order (huggingface/datasets, datasets/gsm8k/gsm8k.py).
GSM8K_DIR = Path(__file__).resolve().parents[1] / "assets" / "gsm8k"
GSM8K_SPLITS = {"train": 7473, "test": 1319}  # rows per split
GSM8K_SOURCES = ("shipped", "hub")

# The course's answer format: reason briefly, then the final answer in \boxed{}. Qwen's own math prompt
# asks for \boxed{} too, so a Qwen3 model already produces it often; common.gsm8k.reward.format_reward checks it.
INSTRUCTION = "Solve the problem step by step. Put the final answer in \\boxed{}."


class DataError(ValueError):
    """A data file or row that cannot be used; the message says what to fix."""


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str  # GSM8K-style worked solution ending in "#### <number>"
    gold: str  # canonical final answer, e.g. "72", "-5", "2.5"


GOLD_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?", re.ASCII)  # "72", "1,234"
FULL_WIDTH_DIGITS = str.maketrans("０１２３４５６７８９", "0123456789")


def _gold_tail(answer: str) -> str:
    """What follows the last ``####``, full-width digits as ASCII ones."""
    return answer.rsplit("####", 1)[1].strip().translate(FULL_WIDTH_DIGITS)


def parse_gold(answer: str) -> str | None:
    """The canonical number after the last ``####`` of a GSM8K answer; None if there is no ``####``
    or what follows it is not one plain number (see the module docstring)."""
    from common.gsm8k.reward import extract_answer

    if "####" not in answer:
        return None
    tail = _gold_tail(answer)
    if not GOLD_NUMBER.fullmatch(tail):
        return None
    return extract_answer("#### " + tail)


def _problem(question: str, answer: str, where: str) -> Problem:
    from common.gsm8k.reward import MAX_NUMBER_DIGITS

    gold = parse_gold(answer)
    if gold is None and "####" in answer:
        tail = _gold_tail(answer)
        digits = sum(c.isdigit() for c in tail)
        if GOLD_NUMBER.fullmatch(tail) and digits > MAX_NUMBER_DIGITS:
            raise DataError(
                f"{where}：`####` 后面的数有 {digits} 位数字，超过了课程读答案的上限 "
                f"{MAX_NUMBER_DIGITS} 位（common/gsm8k/reward.py 的 MAX_NUMBER_DIGITS：模型写不出、也判不了这么长的数）。"
                f"换一个不超过 {MAX_NUMBER_DIGITS} 位的最终答案，或删掉这一行"
            )
        raise DataError(
            f"{where}：`####` 后面的 {tail[:40]!r} 不是一个数。GSM8K 的最终答案是一个普通的数，"
            "如 `#### 72`、`#### -3`、`#### 1,234`、`#### 0.5`（不要科学计数法、算式、分数或单位）"
        )
    if gold is None:
        raise DataError(
            f"{where}：answer 里没有以 `#### <数字>` 结尾的最终答案（GSM8K 格式要求最后一行是 `#### 72` 这样）"
        )
    return Problem(question.strip(), answer.strip(), gold)


def load_gsm8k(
    split: str = "train", limit: int | None = None, source: str = "shipped"
) -> list[Problem]:
    """GSM8K (7,473 train / 1,319 test rows), the first `limit` rows of `split`, in the dataset's order.

    `source="shipped"` (default) reads the copy inside the package (no network); `source="hub"` downloads
    ``openai/gsm8k`` (config ``main``) with `datasets`. Both give the same rows in the same order.
    """
    if split not in GSM8K_SPLITS:
        raise DataError(f"GSM8K 只有 train 和 test 两个 split，得到 {split!r}")
    if source not in GSM8K_SOURCES:
        raise DataError(
            f"GSM8K 的来源只能是 {' / '.join(GSM8K_SOURCES)}（shipped = 课程自带的副本），得到 {source!r}"
        )
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise DataError(f"limit 必须是非负整数或 None，得到 {limit!r}")
    if source == "shipped":
        rows, name = _shipped_rows(split, limit), "课程自带的 GSM8K"
    else:
        rows, name = _hub_rows(split, limit), GSM8K_HUB_ID
    return [
        _problem(r["question"], r["answer"], f"{name}[{split}][{i}]") for i, r in enumerate(rows)
    ]


def _shipped_rows(split: str, limit: int | None) -> list[dict]:
    path = GSM8K_DIR / f"{split}.jsonl.gz"
    if not path.is_file():
        raise DataError(
            f"找不到课程自带的 GSM8K：{path}。在仓库根目录重新安装（pip install -e .），"
            "或用 source='hub' 从 Hugging Face 下载。"
        )
    rows = []
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                if limit is not None and len(rows) >= limit:
                    break
                rows.append(json.loads(line))
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(
            f"课程自带的 GSM8K 文件已损坏：{path}（{type(err).__name__}: {err}）。"
            "用 git checkout 恢复这个文件，或用 source='hub'。"
        ) from None
    return rows


def _hub_rows(split: str, limit: int | None):
    try:
        from datasets import load_dataset

        rows = load_dataset(GSM8K_HUB_ID, "main", split=split)
    except Exception as err:  # network, cache, auth: all mean "can't get it from the hub"
        raise DataError(
            f"无法从 Hugging Face 下载 {GSM8K_HUB_ID}（{type(err).__name__}: {err}）。"
            "检查网络或 HF_ENDPOINT 镜像设置；或者不用 hub：默认的 source='shipped' 读课程自带的 GSM8K 副本，"
            "不用联网，内容与 hub 的 main 配置相同。"
        ) from err
    if limit is not None:
        rows = rows.select(range(min(limit, len(rows))))
    return rows


def load_jsonl(path: str | Path) -> list[Problem]:
    """A local GSM8K-format jsonl file: one ``{"question": ..., "answer": "... #### N"}`` object per line."""
    path = Path(path)
    if path.is_dir():
        raise DataError(f"--data 指向的是一个目录，不是 jsonl 文件：{path}")
    if not path.is_file():
        raise DataError(f"数据文件不存在：{path}。检查路径，或去掉 --data 改用内置的合成数据。")
    problems, first_seen = [], {}  # question -> (line number, gold)
    try:
        raw_lines = path.read_bytes().split(b"\n")
    except OSError as err:
        raise DataError(f"读不了数据文件 {path}（{err.strerror or err}）") from None
    for lineno, raw in enumerate(raw_lines, start=1):
        where = f"{path} 第 {lineno} 行"
        try:  # utf-8-sig: a byte-order mark at the start of the file is not part of the JSON
            line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
        except UnicodeDecodeError as err:
            raise DataError(
                f"{where}（第 {err.start + 1} 个字节 0x{raw[err.start]:02x}）不是 UTF-8 编码："
                "数据文件必须是 UTF-8。用编辑器「另存为 UTF-8」，"
                f"或 iconv -f GBK -t UTF-8 {path.name} > 新文件（把 GBK 换成它实际的编码）"
            ) from None
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{where}：不是合法的 JSON（{err.msg}，第 {err.colno} 列）") from None
        if not isinstance(row, dict):
            raise DataError(f'{where}：应该是一个 JSON 对象 {{"question": ..., "answer": ...}}')
        for key in ("question", "answer"):
            if not isinstance(row.get(key), str) or not row[key].strip():
                raise DataError(
                    f"{where}：缺少字符串字段 {key!r}（GSM8K 格式需要 question 和 answer）"
                )
        problem = _problem(row["question"], row["answer"], where)
        seen_at, seen_gold = first_seen.setdefault(problem.question, (lineno, problem.gold))
        if seen_gold != problem.gold:
            raise DataError(
                f"{path} 第 {seen_at} 行和第 {lineno} 行是同一道题，最终答案却不同"
                f"（{seen_gold} 和 {problem.gold}）：删掉答错的那一行"
            )
        problems.append(problem)
    if not problems:
        raise DataError(f"{path} 是空的：至少需要一行题目")
    return problems


# ---------------------------------------------------------------------------------------------
# Synthetic GSM8K-format word problems. Deterministic in (n, seed, difficulty); every gold answer is
# computed with exact integer arithmetic, and the worked solution carries GSM8K's <<a+b=c>> annotations.
# ---------------------------------------------------------------------------------------------
NAMES = {
    "Tom": "He",
    "Ben": "He",
    "Sam": "He",
    "Leo": "He",
    "Anna": "She",
    "Lily": "She",
    "Mia": "She",
    "Zoe": "She",
}
ITEMS = ("apples", "pencils", "cookies", "books", "marbles", "stickers", "cards", "eggs")
DIFFICULTIES = (1, 2, 3)


def _step(a: int, op: str, b: int) -> tuple[int, str]:
    """One arithmetic step with its GSM8K-style annotated line, e.g. ``3 + 5 = <<3+5=8>>8``."""
    c = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
    shown = {"*": "x"}.get(op, op)
    return c, f"{a} {shown} {b} = <<{a}{op}{b}={c}>>{c}"


def _one(rng: random.Random, difficulty: int) -> Problem:
    name, pron = rng.choice(list(NAMES.items()))
    other = rng.choice([n for n in NAMES if n != name])
    item = rng.choice(ITEMS)
    hi = {1: 20, 2: 30, 3: 50}[difficulty]
    a, b = rng.randint(2, hi), rng.randint(2, hi)
    kind = rng.randrange(2) if difficulty == 1 else rng.randrange(4)
    lines = []
    if kind == 0:  # a + b
        q = f"{name} has {a} {item}. {pron} buys {b} more. How many {item} does {name} have now?"
        ans, line = _step(a, "+", b)
        lines.append(line)
    elif kind == 1:  # a - b, never negative
        a, b = max(a, b) + 1, min(a, b)
        q = f"{name} has {a} {item} and gives {b} to {other}. How many {item} does {name} have left?"
        ans, line = _step(a, "-", b)
        lines.append(line)
    elif kind == 2:  # a * b, then maybe - c
        a, b = rng.randint(2, 9), rng.randint(2, 12)
        total, line = _step(a, "*", b)
        lines.append(line)
        c = rng.randint(1, total - 1)
        q = f"{name} buys {a} bags of {item}. Each bag has {b} {item}. {pron} gives {c} to {other}. How many {item} does {name} have now?"
        ans, line = _step(total, "-", c)
        lines.append(line)
    else:  # exact division; at difficulty 3 the total is a sum first
        k, m = rng.randint(2, 5), rng.randint(2, 10 if difficulty == 2 else hi)
        if difficulty == 3:
            b = rng.randint(1, k * m - 1)
            total, line = _step(k * m - b, "+", b)
            lines.append(line)
            q = f"{name} has {k * m - b} {item} and finds {b} more. {pron} shares them equally among {k} friends. How many {item} does each friend get?"
        else:
            total = k * m
            q = f"{name} has {total} {item}. {pron} shares them equally among {k} friends. How many {item} does each friend get?"
        ans, line = _step(total, "/", k)
        lines.append(line)
    return Problem(q, "\n".join(lines) + f"\n#### {ans}", str(ans))


def synthetic_problems(n: int, seed: int = 0, difficulty: int = 1) -> list[Problem]:
    """``n`` deterministic GSM8K-format word problems.

    difficulty 1: one step (+, -), numbers up to 20; 2: also two-step (x then -) and exact division,
    numbers up to 30; 3: adds a sum before the division, numbers up to 50.
    """
    if difficulty not in DIFFICULTIES:
        raise DataError(f"difficulty 只能是 {DIFFICULTIES}，得到 {difficulty!r}")
    if n < 0:
        raise DataError(f"题目数 n 不能为负，得到 {n}")
    rng = random.Random(f"synthetic-gsm8k:{seed}:{difficulty}")
    return [_one(rng, difficulty) for _ in range(n)]


def unique_questions(problems: list[Problem]) -> list[Problem]:
    """``problems`` without repeated questions (the first copy of each stays, order kept)."""
    seen = set()
    return [p for p in problems if not (p.question in seen or seen.add(p.question))]


def split_train_heldout(
    problems: list[Problem], n_heldout: int, seed: int = 0
) -> tuple[list[Problem], list[Problem]]:
    """Shuffle deterministically and hold out ``n_heldout`` problems; no held-out question appears in train."""
    if len(problems) < 2:
        raise DataError(
            f"只有 {len(problems)} 道题：切出 held-out 之后就没有训练题了（至少要 2 道不同的题）"
        )
    if not 0 < n_heldout < len(problems):
        raise DataError(f"n_heldout 必须在 1 到 {len(problems) - 1} 之间，得到 {n_heldout}")
    order = list(problems)
    random.Random(f"split:{seed}").shuffle(order)
    heldout = order[:n_heldout]
    seen = {p.question for p in heldout}
    train = [p for p in order[n_heldout:] if p.question not in seen]
    return train, heldout


# Prompt length in tokens of the longest shipped GSM8K question (train and test), rendered with the
# Qwen3 tokenizer and build_prompt (thinking off); measured by L1_concepts/04_vram_ledger/
# prompt_lengths.py (p95: 129 train / 133 test; a test re-measures it). The VRAM ledger sizes a
# GSM8K batch with it: left padding makes every row as long as the batch's longest prompt.
GSM8K_PROMPT_TOKENS_MAX = 240

SYNTHETIC_SEED = (
    1  # the training runs' synthetic pool (the tiny warm start's SFT problems use others)
)


def load_splits(
    data: str, n_heldout: int, *, n_train: int = 5000, difficulty: int = 2, per_step: int = 1
) -> tuple[list[Problem], list[Problem]]:
    """(train, held-out) problems for a training run.

    data: "synthetic" = ``n_train`` generated problems, ``n_heldout`` of them held out;
    "gsm8k" / "hub" = GSM8K's train split, and the first ``n_heldout`` test problems held out
    (a fixed subset, the same in every run); otherwise a GSM8K-format jsonl path: repeated questions
    are removed first (the count is printed), then it is split like "synthetic".
    The synthetic pool keeps its repeats (the generator draws with replacement; the shipped runs and
    their figures use exactly this pool); the split still keeps every held-out question out of train.
    Raises DataError when the train split ends up with fewer than ``per_step`` problems (a step
    draws that many different ones).
    """
    if data == "synthetic":
        pool = synthetic_problems(n_train, seed=SYNTHETIC_SEED, difficulty=difficulty)
        train, heldout = split_train_heldout(pool, n_heldout)
    elif data in ("gsm8k", "hub"):
        if n_heldout > GSM8K_SPLITS["test"]:  # load_gsm8k(limit=n) would quietly give 1319
            raise DataError(
                f"--n-heldout {n_heldout} 超过了 GSM8K test 的 {GSM8K_SPLITS['test']} 道题："
                f"held-out 取 test 的前 n 道，最多 {GSM8K_SPLITS['test']}"
            )
        source = "hub" if data == "hub" else "shipped"
        train = load_gsm8k("train", source=source)
        heldout = load_gsm8k("test", limit=n_heldout, source=source)
    else:
        rows = load_jsonl(data)
        unique = unique_questions(rows)
        if len(unique) < len(rows):
            print(
                f"{data}：去掉了 {len(rows) - len(unique)} 道重复的题（题面相同），剩 {len(unique)} 道"
            )
        if not 0 < n_heldout < len(unique):
            raise DataError(
                f"{data}：去重后只有 {len(unique)} 道不同的题，不够切出 {n_heldout} 道 held-out 再留下训练题："
                "减小 --n-heldout，或者换一份题更多的数据"
            )
        train, heldout = split_train_heldout(unique, n_heldout)
    if not train:
        raise DataError(
            f"--data {data}：切出 {len(heldout)} 道 held-out 后训练集是空的（held-out 里的题不会再出现在训练集里）。"
            "减小 --n-heldout，或用更多不同的题"
        )
    if len(train) < per_step:
        raise DataError(
            f"--data {data}：切出 held-out 后只剩 {len(train)} 道训练题，每步却要抽 "
            f"--prompts-per-step {per_step} 道不同的题：减小 --prompts-per-step（或 --n-heldout），"
            "或用更多不同的题"
        )
    return train, heldout


def prompt_messages(question: str) -> list[dict]:
    """The chat messages of one prompt (conversational format, as TRL's datasets use): the question + INSTRUCTION."""
    return [{"role": "user", "content": f"{question}\n{INSTRUCTION}"}]


def build_prompt(tokenizer, question: str, enable_thinking: bool = False) -> str:
    """The question plus INSTRUCTION, rendered with the model's chat template as a generation prompt.

    For Qwen3, ``enable_thinking=False`` makes the template append an empty ``<think>\\n\\n</think>``
    block, so the model answers directly instead of spending hundreds of tokens thinking — on one
    32 GB card, completion length is the budget that matters most.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise DataError(
            "这个 tokenizer 没有 chat template：请用对话模型（如 Qwen/Qwen3-0.6B）或课程的 tiny 预设"
        )
    from jinja2 import TemplateError  # SecurityError (the sandbox said no) is one of these

    try:
        return tokenizer.apply_chat_template(
            prompt_messages(question),
            tokenize=False,
            add_generation_prompt=True,
            enable_thinking=enable_thinking,
        )
    except TemplateError as err:
        where = getattr(tokenizer, "name_or_path", "") or "这个 tokenizer"
        raise DataError(
            f"{where} 的 chat template 渲染失败（{type(err).__name__}: {err}）：换回模型发布者的原版"
            "模板（重新下载 tokenizer_config.json），python -m common.model.model_dir check 目录 可以先查一遍"
        ) from None


_ANNOTATION = re.compile(r"<<[^<>]*>>")


def reference_completion(problem: Problem) -> str:
    """A correct completion in the course's format: the worked lines without ``<<…>>``, then ``\\boxed{gold}``."""
    steps = problem.answer.rsplit("####", 1)[0]
    steps = _ANNOTATION.sub("", steps).strip()
    return f"{steps}\nThe answer is \\boxed{{{problem.gold}}}."
