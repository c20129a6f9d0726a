"""失败信息只点名错误，不教写法：诊断、症状、异常提示里不能出现「该写成什么代码」。

课程的规矩（MAINTAINING.md）：失败信息从不包含算法。一条诊断说出错在哪（「softmax 沿错了维度（dim=0）」
「把 cap 当成了下限」「熵是在 bf16 里算的」），可以复述课文当作规格写明的事实（形状、「规格是 std + eps」、
「结果要 float32」），但不给改法：不写「每块先 .float() 再算」「gather 的索引要是 int64（tokens.long()）」
「应沿 dim=1」这样的代码或步骤。

这里扫的是 tests/diagnose.py、tests/L2 的典型错误表和每节课的测试里所有面向学习者的中文字符串（docstring 和
「L2.0X「…」」这样的章节指向除外），以及 tests/pytest_plugin.py 的异常提示 `EXCEPTION_KINDS`。规则按分句
（以 ；。：—— 和全角逗号、换行切开）判断：

1. 引用学习者写错的代码可以：不带「要 / 应 / 改成 / 请 / 不要 …」的分句里出现代码，是在描述错误
   （「用了 std.clamp(min=eps) 代替了 std + eps」「把 cap 当成了下限（clamp(min=cap)）」）；
2. 规定正确的代码不行：带「要、应、改成、改用、换成、请、不要、别用、需要、记得、直接返回」的分句里不能有代码，
   「用 <代码>」（不是「用了」）也算规定；
3. 「用 X 判断 / 代替」（不是「用了」）是在教做法，不行；复述规格时写明「规格」（「规格用 == 判断」）；
4. 一句里「先 …… 再 ……」而没有「了」，是在教步骤，不行（「先做了 top-p 再除以 temperature」是描述错误，可以）。

代码指：方法和属性（.float()、.shape[0]、.T）、torch.xxx、函数调用 xxx(…)、dim= / keepdim= / min= / max= 这类
关键字参数、[:, None]，以及 where、gather、scatter、clamp、cumsum、log_softmax 这些 PyTorch 函数名。
`ALLOWED` 是人工核对过、规则误判的少数句子（目前为空）：加进去之前先试着改写成对错误的描述。
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from pytest_plugin import EXCEPTION_KINDS

ROOT = Path(__file__).resolve().parents[1]
SCANNED = sorted(
    {ROOT / "tests" / "diagnose.py"}
    | set((ROOT / "tests" / "L2").glob("mistake_tools.py"))
    | set((ROOT / "tests" / "L2").glob("mistakes_*.py"))
    | set((ROOT / "tests" / "L2").glob("test_l2_*.py"))
)

# 人工核对过的例外（整句原文）。引用错误写法的句子按规则本来就能过，不用加在这里
ALLOWED: set[str] = set()

_CJK = re.compile(r"[\u4e00-\u9fff]")
_POINTER_ONLY = re.compile(r"^L[1-3]\.\d\d「[^」]*」[^。；：]*$")  # 只是一个章节指向
_API = (
    "where|gather|scatter_?|masked_fill_?|cumsum|cumprod|argmax|argmin|clamp_?|isin|reshape"
    "|view|unsqueeze|squeeze|expm1|log1p|log_softmax|logsumexp|softmax|detach|keepdim|item|tolist"
)
CODE = re.compile(
    r"(?<![A-Za-z0-9_])(?:"
    r"torch\.\w+"  # torch.where、torch.isin
    r"|[A-Za-z_]\w*\("  # 函数调用：clamp(、where(、float(
    r"|(?:dim|keepdim|min|max|device|dtype|correction)\s*=(?!=)"  # 关键字参数
    rf"|(?:{_API})(?![A-Za-z0-9_])"  # PyTorch 函数名
    r")"
    r"|(?<![A-Za-z0-9_])\.(?!(?:py|json|jsonl|md)\b)[A-Za-z_]\w*"  # .float()、.shape、.T
    r"|\w\.(?!(?:py|json|jsonl|md)\b)[A-Za-z_]\w*"  # x.float()、mask.sum
    r"|\[\s*:\s*,"  # [:, None]
)
DIRECTIVE = re.compile(
    r"(?<![对相反])应(?!用)|(?<![主重只想])要(?![求么])|改成|改用|换成|换掉|请|不要|别(?:用|再|忘|把|做|调|让)"
    r"|记得|直接返回|只需"
)
USE_CODE = re.compile(r"用(?![了的来于])\s*(?=" + CODE.pattern + ")")
USE_TO = re.compile(r"用(?![了的来于])[^，。；：]{0,20}?(?:判断|代替)")  # 「用 X 判断 / 代替」
_CLAUSE = re.compile(r"[；;。：\n，]|——")
_SENTENCE = re.compile(r"[；;。：\n]|——")


def problems(text: str) -> list[str]:
    """`text` 里规定了正确写法的分句（空列表 = 没问题）。"""
    if text in ALLOWED:
        return []
    found = []
    for clause in _CLAUSE.split(text):
        if USE_TO.search(clause) and "了" not in clause and "规格" not in clause:
            found.append(f"规定了做法（用……判断 / 代替）：「{clause.strip()}」")
        if not CODE.search(clause):
            continue
        if DIRECTIVE.search(clause) or ("了" not in clause and USE_CODE.search(clause)):
            found.append(f"规定了代码：「{clause.strip()}」")
    for sentence in _SENTENCE.split(text):
        if re.search(r"先.*再", sentence) and "了" not in sentence:
            found.append(f"教了步骤（先……再……）：「{sentence.strip()}」")
    return found


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def source_messages(path: Path) -> list[tuple[int, str]]:
    """文件里所有中文字符串（f-string 里填值的地方写成 {}），docstring 和纯章节指向除外。"""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip |= {id(v) for v in node.values}
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        else:
            continue
        if _CJK.search(text) and not _POINTER_ONLY.match(text):
            out.append((node.lineno, text))
    return out


def _all_messages() -> list[tuple[str, str]]:
    msgs = [
        (f"{p.relative_to(ROOT).as_posix()}:{line}", text)
        for p in SCANNED
        for line, text in source_messages(p)
    ]
    msgs += [(f"EXCEPTION_KINDS[{kind!r}]", text) for kind, _, _, text in EXCEPTION_KINDS]
    return msgs


def test_scan_finds_the_messages():
    """扫描本身没漏：典型错误表、每节课的测试和异常提示都扫到了。"""
    names = {p.name for p in SCANNED}
    assert {"diagnose.py", "mistakes_l2_01.py", "test_l2_05_grpo_loss.py"} <= names
    texts = [t for _, t in _all_messages()]
    assert any("有偏 std" in t for t in texts)  # mistakes_l2_01.py 的一条诊断
    assert len(texts) > 300 and len(EXCEPTION_KINDS) > 10


def test_failure_messages_name_the_mistake_not_the_code():
    bad = [f"{where}：{p}" for where, text in _all_messages() for p in problems(text)]
    assert not bad, (
        "这些失败信息在教写法（规定了该写的代码或步骤），失败信息只能点名错在哪：\n"
        + "\n".join(bad)
        + "\n改法：把「要 / 应 / 改成 / 用 + 代码」「先……再……」改成对错误本身的描述（哪里算错了、"
        "输出有什么毛病）；学习者写错的代码可以原样引用；规格里的事实可以写成「规格是 ……」，但不带代码。"
        "确属误判的整句加进 tests/test_message_style.py 的 ALLOWED。"
    )


# 规则本身：课程明令禁止的写法必须被拦下，描述错误（引用错误代码）的写法必须放行
FORBIDDEN = [
    "在 bf16 里算了 log_softmax：每块先 .float() 再算",
    "全相等的组没有得到精确的 0：用 == 判断整行相等，整行置 0",
    "gather 的索引要是 int64（tokens.long()）",
    "max 取在了两个 ratio 上再乘 A：要对两个目标 r·A、clip(r)·A 取 min",
    "std 沿错了维度（dim=0）；每道题一行，应沿 dim=1",
    "torch.isin(completion_ids, EOS 张量) 要得到 (B, T)",
    "rewards 是一维的：先 reshape 成 (P, G)，再求均值",
    "逐元素的条件用 torch.where",
    "张量请用 float(...) 或 .item()",
    "把 cap 当成了下限：应是 clamp(max=cap)",
]
PERMITTED = [
    "softmax 沿错了维度（dim=0：在不同行之间归一化）",
    "把 cap 当成了下限（clamp(min=cap)）",
    "熵是在 bf16 里算的",
    "torch.clamp 的下界、上界位置写反了（clamp(ratio, 1 + eps_high, 1 − eps_low)）",
    "用了 std.clamp(min=eps) 代替了 std + eps：规格是 std + eps",
    "k3 出现了负数：k3 = (r − 1) − log r ≥ 0",
    "把 token_mean 写成了先在每行内平均、再对行平均（那是 sequence_mean）",
    "结果是 bf16：规格要 float32 的 log 概率",
    "计算图被切断了——用了 torch.no_grad()、.detach()，或用 torch.tensor(...) 重新包了一层",
    "用了容差判断「组内全相等」：规格用 == 判断",
    "logp == ref_logp 的位置 k 应恰好为 0（两个分布在这里一样）",
]


@pytest.mark.parametrize("text", FORBIDDEN)
def test_rule_catches_prescribed_code(text):
    assert problems(text), f"规则没有拦下这条在教写法的信息：{text}"


@pytest.mark.parametrize("text", PERMITTED)
def test_rule_allows_naming_the_mistake(text):
    assert not problems(text), f"规则误伤了只在描述错误的信息：{text} -> {problems(text)}"
