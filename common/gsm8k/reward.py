"""GSM8K rewards: answer extraction, exact correctness, and a separate format reward.

``extract_answer(text)`` returns a canonical number string ("1234", "-5", "2.5", "1/3") or None.

Where the answer is read from
  * ``<think>``: if ``</think>`` occurs, only the text after the last ``</think>`` is read (the reasoning
    is not the answer). A ``<think>`` that is never closed means the model never answered: None.
  * Answer markers, and the last one wins. A marker is one of
    - a complete ``\\boxed{...}`` (braces nested <= 2 levels inside it, content <= 256 chars); a
      ``\\boxed`` that is not complete (unclosed/truncated, too deep, too long) is no marker;
    - a ``####`` line that starts with a number ("#### 72", "#### $1,234 dollars."). A markdown
      heading ("#### Step 3", "#### 3. Compute ...") is no marker;
    - an answer phrase ("answer is / answer: / answer = / answer would be", "**Answer:**",
      "The final answer is", Chinese "答案是/答案为/答案：") whose sentence holds a number.
    The marker that stands last in the text decides, even when it holds no answer: a stale
    ``\\boxed{70}`` early in a completion does not beat a later "#### 72".
  * A marker must name exactly one number, or it gives None (reward 0): "#### 12 or 13",
    "The answer is 12, 13" and ``\\boxed{12 \\text{ or } 13}`` are hedges, and a hedge must never pay
    (under RL a policy would learn to list candidates). Of several boxes only the last counts. For a
    ``####`` line or a phrase, the answer is the sentence after the marker (to ". ", "!", "?", "。", ";"
    or the end of the line): a calculation there counts by its result after the last "=" ("The answer
    is 12 - 5 = 7" gives 7); otherwise every number in it must have the same value.
  * With no marker, the answer is the last number in the text (plain text only: no LaTeX clean-up).
  How other graders treat the same cases (checked in tests/common/test_reward.py): verl's GSM8K
  scorer (volcengine/verl, verl/utils/reward_score/gsm8k.py) takes the last "#### number" match, so
  the last marker wins there too, but it reads only the number right after "####" and pays
  "#### 12 or 13" when the gold is 12. math-verify (huggingface/Math-Verify) reads several values in
  one box as a set, which equals no single gold (a hedge scores 0), but a box beats any later text.

Number reading and normalisation
  * Inside boxes, ``####`` lines and answer phrases, LaTeX is cleaned first: ``\\$``, ``\\%``, ``\\text{}``,
    ``\\textbf{}``, ``\\mathrm{}``, ``\\left``/``\\right``, ``\\,`` and ``{,}`` separators, ``\\frac{a}{b}``,
    ``\\dfrac``, ``\\tfrac``, ``\\frac12``, ``^\\circ``. A box may contain "x = 5" (value after the last "=")
    and words ("18 dollars", "Total: 18"); it must hold exactly one number.
  * Thousands separators: "," (groups of exactly 3 digits: "1,234", not "1,2345"), no-break / thin
    spaces, ``\\,``. A plain space ("1 234") only where the whole span is that one number (a box or a
    ``####`` line); in running text "3 500 ml" stays two numbers.
  * "$", "\\$", "€", "£", "¥", trailing "%", units and a final "." are dropped: "$5.00" -> "5",
    "50%" -> "50" (not 0.5: GSM8K golds are bare numbers), "12 cm" -> "12".
  * Signs: "-", unicode minus U+2212, leading "+" dropped; a "-" between two numbers ("10-3") is
    not a sign. Decimals are exact and trimmed: "2.50" -> "2.5", "5.0" -> "5", ".5" -> "0.5".
  * Fractions ``a/b`` (in boxes, ``####`` lines, answer phrases): "3/4" -> "0.75" when the decimal
    terminates, else reduced "p/q" ("2/6" -> "1/3"); a zero denominator gives None. Mixed numbers
    ("2\\frac{1}{2}"), scientific notation, number words and non-ASCII digits are not read.
  * A digit glued to a letter ("x5", "CO2") does not start a number.
  * Numbers with more than 100 digits are not answers (None).

Bounded work (no eval/exec; every regex is linear; a 1 MB input takes a few ms)
  Markers are found with ``str.rfind`` over the whole text, never in a tail window of characters
  (verl's GSM8K reward reads only the last 300 characters, ``_SOLUTION_CLIP_CHARS`` in
  verl/utils/reward_score/gsm8k.py; see verl PR #7274 on tail windows). Instead the number of
  *tries* is bounded: the last 8 ``\\boxed`` occurrences, the last 8 ``####`` lines, the last 16
  answer-phrase candidates, the last 8 digit runs glued to letters; a separator run ("1,2,3,...")
  longer than 120 characters is not read. Real completions never reach these bounds; adversarial
  ones find no marker (then the last number is read) or give None.

Rewards
  * ``correctness_reward(completion, gold)``: 1.0 iff the extracted number equals the gold exactly
    (``fractions.Fraction``, no float: 99999999999999999999999999 != 99999999999999999999999998).
    ``gold`` is a GSM8K gold ("72", "1,234", or a full answer ending in "#### 72"), normalised the same
    way; an unreadable gold raises ValueError (a data bug, not a wrong answer). Format never matters.
  * ``format_reward(completion)``: 1.0 iff the answer text (after ``</think>``) has 1 to 4 ``\\boxed``,
    every one a complete box holding the same single number (the final answer, not intermediate
    results), and at most 40 characters (stripped) after the last box. Correctness never matters.
  * ``REWARD_FUNCS``: "correctness", "format_only", "correctness_plus_format" (correctness + 0.1 * format,
    so values are 0, 0.1, 1.0, 1.1); all take ``(completion, gold)``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from fractions import Fraction

import torch

from common.gsm8k.controls import shuffle_rewards
from common.options.choices import CONTROLS

__all__ = ["extract_answer", "correctness_reward", "format_reward", "REWARD_FUNCS", "get_reward_fn"]

MAX_NUMBER_DIGITS = 100  # longer digit strings are not answers
MAX_SPAN_CHARS = 256  # box content / rest-of-line read after a marker
MAX_RUN_CHARS = 120  # a run of [0-9 , .] longer than this is not read as a number
MAX_BOX_TRIES = 8  # last `\boxed` occurrences examined for a complete box
MAX_PHRASE_TRIES = 16  # last "answer" / "答案" occurrences examined for an answer phrase
MAX_HASH_TRIES = 8  # last "####" occurrences examined for an answer line (headings are skipped)
MAX_GLUED_RUNS = 8  # digit runs glued to letters ("x5") skipped before giving up on "last number"
MAX_FORMAT_BOXES = 4  # more boxes than this is box spam, not "the final answer boxed"
MAX_TRAILING_CHARS = 40  # text allowed after the final box (e.g. "$.", " dollars.", "\\]")
FORMAT_WEIGHT = 0.1  # correctness_plus_format = correctness + FORMAT_WEIGHT * format

# ---------------------------------------------------------------------------------------------
# Number tokens
# ---------------------------------------------------------------------------------------------
_SEPS = ",\u00a0\u2009\u202f"  # comma, no-break space, thin space, narrow no-break space
_STRIP_SEPS = str.maketrans("", "", _SEPS + " ")


def _number_regex(space_groups: bool, fraction: bool) -> re.Pattern:
    """A number token. Every quantifier is either bounded or over a class disjoint from what follows."""
    grouped = r"[0-9]{1,3}(?P<sep>[" + _SEPS + r"])[0-9]{3}(?![0-9])(?:(?P=sep)[0-9]{3}(?![0-9]))*"
    spaced = r"|[0-9]{1,3}(?: [0-9]{3}(?![0-9]))+" if space_groups else ""
    den = r"(?:[ \t]*/[ \t]*(?P<den>[0-9]+))?" if fraction else ""
    return re.compile(
        r"(?<![0-9A-Za-z_.])"  # not glued to a word, a number or a decimal point
        r"(?P<sign>[-+\u2212])?"
        r"(?:(?:\\?\$|[€£¥])[ ]?(?P<sign2>[-+\u2212])?)?"  # currency: "-$5", "$-5", "\$ 5"
        r"(?:(?P<int>"
        + grouped
        + spaced
        + r"|[0-9]+)(?:\.(?P<frac>[0-9]+))?|\.(?P<lead>[0-9]+))"
        + den
    )


_NUMBER_TEXT = _number_regex(space_groups=False, fraction=False)  # running text (rule 4)
_NUMBER_PHRASE = _number_regex(space_groups=False, fraction=True)  # after an answer phrase
_NUMBER_WHOLE = _number_regex(space_groups=True, fraction=True)  # a span that is one number


def _fraction_to_str(value: Fraction) -> str:
    """Canonical string: "12", "-2.5", "0.75"; "p/q" (reduced) when the decimal does not terminate."""
    n, d = value.numerator, value.denominator
    if d == 1:
        return str(n)
    twos = fives = 0
    rest = d
    while rest % 2 == 0:
        rest //= 2
        twos += 1
    while rest % 5 == 0:
        rest //= 5
        fives += 1
    if rest != 1:
        return f"{n}/{d}"
    k = max(twos, fives)
    digits = str(abs(n) * 10**k // d).rjust(k + 1, "0")
    return ("-" if n < 0 else "") + (digits[:-k] + "." + digits[-k:]).rstrip("0")


def _canonical(m: re.Match) -> str | None:
    """The canonical string of a number token, or None (too long, zero denominator)."""
    whole = (m["int"] or "0").translate(_STRIP_SEPS)
    frac = m["frac"] or m["lead"] or ""
    den = m.groupdict().get("den")
    if len(whole) + len(frac) + len(den or "") > MAX_NUMBER_DIGITS:
        return None
    value = Fraction(int(whole + frac), 10 ** len(frac))
    if den is not None:
        if int(den) == 0:
            return None
        value /= int(den)
    minus = (m["sign"] in ("-", "\u2212")) != (m["sign2"] in ("-", "\u2212"))  # "-$-5" is 5
    return _fraction_to_str(-value if minus else value)


# ---------------------------------------------------------------------------------------------
# Spans: box content, the rest of a `####` line, the rest of an answer-phrase line
# ---------------------------------------------------------------------------------------------
_FRAC = re.compile(r"\\[dt]?frac[ \t]*\{([^{}]*)\}[ \t]*\{([^{}]*)\}|\\[dt]?frac([0-9])([0-9])")
_ESCAPES = {
    "\\$": "$", "\\%": "%", "\\,": "\u2009", "\\!": "", "\\;": " ", "\\:": " ", "\\ ": " ",
    "\\\\": " ", "\\(": " ", "\\)": " ", "\\[": " ", "\\]": " ", "\\{": "", "\\}": "", "~": " ",
    "\u2212": "-", "**": " ", "≈": "=", "^\\circ": "°", "^{\\circ}": "°",
}  # fmt: skip
_ESCAPE_RE = re.compile("|".join(re.escape(k) for k in sorted(_ESCAPES, key=len, reverse=True)))
_DROP_COMMANDS = {
    "text", "textbf", "textit", "textrm", "texttt", "textnormal", "mathrm", "mathbf", "mathit", "mathsf",
    "mbox", "hbox", "fbox", "boxed", "operatorname", "displaystyle", "textstyle", "left", "right",
    "bigl", "bigr", "Bigl", "Bigr", "big", "Big",
}  # fmt: skip
_SPACE_COMMANDS = {"quad", "qquad", "enspace", "thinspace", "medspace", "thickspace"}
_SYMBOL_COMMANDS = {"approx": "=", "times": "×", "cdot": "·", "div": "÷", "circ": "°", "degree": "°",
                    "dollar": "$", "percent": "%"}  # fmt: skip
_COMMAND_RE = re.compile(r"\\([A-Za-z]+)")

# What may stand around the single number of a span (checked on <= 256 chars; all linear anyway).
_DECOR = re.compile(r"[\s*_:$\"'(\[]*")  # "**", "$", "\(", ":" before the number
_WORDS_DECOR = re.compile(r"(?:[^\W\d]|[\s*:$\"'(\[])*")  # box: also words, "Total: 18"
_UNITS = re.compile(  # "%", "$" (closing math), "**", then words: "dollars", "km/h", "cm^2", "个", then "."
    r"(?:[\s%°$*)\]\"']*[^\W\d_]+(?:\^[23])?(?:[\s./\-]+[^\W\d_]+(?:\^[23])?)*)?"
    r"[\s.%°$*)\]\"']*"
)


def _frac_sub(m: re.Match) -> str:
    num, den = (m[1], m[2]) if m[1] is not None else (m[3], m[4])
    # "2\frac{1}{2}" must not become "21/2": keep a space after a digit (then it reads as two numbers).
    pad = " " if m.start() > 0 and m.string[m.start() - 1].isdigit() else ""
    return f"{pad}{num.strip()}/{den.strip()} "


def _command_sub(m: re.Match) -> str:
    name = m[1]
    if name in _DROP_COMMANDS:
        return ""
    if name in _SPACE_COMMANDS:
        return " "
    return _SYMBOL_COMMANDS.get(name, m[0])  # unknown commands stay, and make the span unreadable


def _clean_latex(span: str) -> str:
    span = _FRAC.sub(_frac_sub, span.replace("{,}", ","))
    span = _ESCAPE_RE.sub(lambda m: _ESCAPES[m[0]], span)
    span = _COMMAND_RE.sub(_command_sub, span)
    return span.replace("{", "").replace("}", "")


_BOX, _HASH = "box", "hash"


def _parse_span(span: str, kind: str) -> str | None:
    """The single number a span holds, canonical, or None. `kind` sets what may surround it."""
    if len(span) > MAX_SPAN_CHARS:
        return None
    span = _clean_latex(span)
    if kind == _BOX and "=" in span:
        span = span.rsplit("=", 1)[1]  # "x = 5", "3 + 4 = 7"
    m = _NUMBER_WHOLE.search(span)
    if m is None:
        return None
    before, after = span[: m.start()], span[m.end() :]
    if not (_WORDS_DECOR if kind == _BOX else _DECOR).fullmatch(before):
        return None
    if not _UNITS.fullmatch(after):
        return None
    return _canonical(m)


_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|[。！？；;]")
_UNIT_POWER = re.compile(r"\^\{?[23]\}?")  # "cm^2": the 2 belongs to the unit, it is no number


def _numbers(span: str) -> list[str]:
    """Canonical values of the number tokens in a cleaned span (unit powers are not numbers)."""
    found = (_canonical(m) for m in _NUMBER_PHRASE.finditer(_UNIT_POWER.sub("", span)))
    return [v for v in found if v is not None]


def _sentence_value(line: str) -> str | None:
    """The one number the sentence after a marker names, or None (a hedge, or no number).

    A span that is one number with units ("$1,234 dollars.") is read as a whole; otherwise a
    calculation counts by its result after the last "=", and every other number must agree.
    """
    cut = _SENTENCE_END.search(line)
    sentence = line if cut is None else line[: cut.end()]
    whole = _parse_span(sentence, _HASH)
    if whole is not None:
        return whole
    text = _clean_latex(sentence)
    if "=" in text:
        text = text.rsplit("=", 1)[1]
    values = _numbers(text)
    return values[0] if values and len({Fraction(v) for v in values}) == 1 else None


def _line_after(text: str, start: int) -> str:
    """The first non-blank line after `start` (at most MAX_SPAN_CHARS characters are looked at)."""
    chunk = text[start : start + MAX_SPAN_CHARS].lstrip()
    newline = chunk.find("\n")
    return chunk if newline < 0 else chunk[:newline]


# ---------------------------------------------------------------------------------------------
# The four rules
# ---------------------------------------------------------------------------------------------
# A complete box: braces balanced, at most 2 levels nested inside the box's own ("\boxed{\frac{\text{1}}{2}}").
# "Unrolled loops" (N (group N)*): every string matches in exactly one way, so a failed match cannot
# backtrack catastrophically; the match is also cut off after _BOX_WINDOW characters.
_N = r"[^{}]*"
_BOX_RE = re.compile(
    r"\\boxed[ \t]*\{(" + _N + r"(?:\{" + _N + r"(?:\{" + _N + r"\}" + _N + r")*\}" + _N + r")*)\}"
)
_BOX_WINDOW = len("\\boxed") + 16 + MAX_SPAN_CHARS + 2  # a longer box is not an answer box


def _box_at(text: str, pos: int) -> re.Match | None:
    m = _BOX_RE.match(text, pos, pos + _BOX_WINDOW)
    return m if m is not None and len(m[1]) <= MAX_SPAN_CHARS else None


def _last_box(region: str) -> re.Match | None:
    pos = len(region)
    for _ in range(MAX_BOX_TRIES):
        pos = region.rfind("\\boxed", 0, pos)
        if pos < 0:
            return None
        m = _box_at(region, pos)
        if m is not None:
            return m
    return None


_PHRASE_TAIL = re.compile(r"(?:\*\*|__)?[ \t]*(?:is\b|would be\b|will be\b|should be\b|[:=])")


def _last_phrase_end(region: str) -> int:
    """End offset of the last answer phrase ("answer is", "Answer:", "答案是"), or -1."""
    best = -1
    pos = len(region)
    for _ in range(
        MAX_PHRASE_TRIES
    ):  # English: "...nswer" preceded by A/a and not by another letter
        pos = region.rfind("nswer", 0, pos)
        if pos < 1:
            break
        if region[pos - 1] in "Aa" and not (
            pos >= 2 and region[pos - 2].isascii() and region[pos - 2].isalpha()
        ):
            m = _PHRASE_TAIL.match(region, pos + 5, pos + 5 + 32)
            if m is not None:
                best = m.end()
                break
    pos = len(region)
    for _ in range(MAX_PHRASE_TRIES):
        pos = region.rfind("答案", 0, pos)
        if pos < 0 or pos + 3 <= best:
            break
        if region[pos + 2 : pos + 3] in ("是", "为", "：", ":"):
            return pos + 3
    return best


_RUN_CHARS = frozenset("0123456789.," + _SEPS)


def _last_digit_before(text: str, end: int) -> int:
    return max(text.rfind(d, 0, end) for d in "0123456789")  # 10 C-level scans, no Python loop


def _last_number(region: str) -> str | None:
    """Rule 4: the last number token. Find the last digit (right to left, in C), then read the run of
    digits/separators around it left to right, so "1,234" is one number and "1,2,3" ends in "3"."""
    end = len(region)
    for _ in range(MAX_GLUED_RUNS + 1):
        last = _last_digit_before(region, end)
        if last < 0:
            return None
        start = last
        while start > 0 and region[start - 1] in _RUN_CHARS:
            start -= 1
            if last - start >= MAX_RUN_CHARS:
                return None
        # up to 6 characters before the run may hold a sign/currency ("-\\$ 5"); keep tokens in the run
        tokens = [
            t for t in _NUMBER_TEXT.finditer(region, max(0, start - 6), last + 1) if t.end() > start
        ]
        if tokens:
            return _canonical(tokens[-1])
        end = start  # the run is glued to a letter ("x5", "CO2"): look before it
    return None


def _answer_region(text: str) -> str | None:
    if not isinstance(text, str):
        raise TypeError(f"completion 必须是 str，得到 {type(text).__name__}")
    end_think = text.rfind("</think>")
    if end_think >= 0:
        return text[end_think + len("</think>") :]
    return None if "<think>" in text else text


_HEADING = re.compile(r"[0-9]+[.)][ \t]+[^\W\d_]")  # "#### 3. Compute ...": a numbered heading


def _hash_marker(region: str) -> tuple[int, str | None] | None:
    """(position, answer) of the last ``####`` answer line, or None; headings are skipped."""
    pos = len(region)
    for _ in range(MAX_HASH_TRIES):
        pos = region.rfind("####", 0, pos)
        if pos < 0:
            return None
        line = _line_after(region, pos + 4)
        start = _NUMBER_WHOLE.search(_clean_latex(line))
        if start is None or not _DECOR.fullmatch(_clean_latex(line)[: start.start()]):
            continue  # "#### Step 3", "#### Answer": no answer line
        whole = _parse_span(line, _HASH)
        if whole is not None:
            return pos, whole
        if _HEADING.match(line.lstrip()):
            continue
        return pos, _sentence_value(line)
    return None


def _box_marker(region: str) -> tuple[int, str | None] | None:
    """(position, answer) of the last complete box, or None."""
    box = _last_box(region)
    return None if box is None else (box.start(), _parse_span(box[1], _BOX))


def _phrase_marker(region: str) -> tuple[int, str | None] | None:
    """(position, answer) of the last answer phrase whose sentence holds a number, or None."""
    end = _last_phrase_end(region)
    if end < 0:
        return None
    line = _line_after(region, end)
    if not _numbers(_clean_latex(line)):
        return None  # "The answer is as follows:": no answer here
    return end, _sentence_value(line)


def extract_answer(text: str) -> str | None:
    """The final numeric answer of a completion as a canonical string ("1234", "-5", "2.5"), or None."""
    region = _answer_region(text)
    if region is None:
        return None
    markers = [m for m in (_box_marker(region), _hash_marker(region), _phrase_marker(region)) if m]
    if markers:
        return max(markers, key=lambda m: m[0])[1]  # the last marker wins, even when it is a hedge
    return _last_number(region)


# ---------------------------------------------------------------------------------------------
# Rewards
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def _gold_value(gold: str) -> Fraction:
    if not isinstance(gold, str):
        raise TypeError(f"gold 必须是 str（GSM8K 的最终答案，如 '72'），得到 {type(gold).__name__}")
    tail = gold.rsplit("####", 1)[1] if "####" in gold else gold
    canon = _parse_span(tail.strip(), _HASH)
    if canon is None:
        raise ValueError(
            f"gold 答案 {gold[:80]!r} 不是一个数：应是 GSM8K 的最终答案，如 '72'、'1,234'、'-5'、'2.5'"
            "（或以 '#### 72' 结尾的完整解答）。检查数据文件里这一行的 answer。"
        )
    return Fraction(canon)


def correctness_reward(completion: str, gold: str) -> float:
    """1.0 if the completion's extracted answer equals `gold` exactly (Fraction, no float), else 0.0."""
    gold_value = _gold_value(gold)
    answer = extract_answer(completion)
    return 1.0 if answer is not None and Fraction(answer) == gold_value else 0.0


def format_reward(completion: str) -> float:
    """1.0 iff the final answer is boxed as the course asks (see the module docstring), else 0.0."""
    region = _answer_region(completion)
    if region is None:
        return 0.0
    starts, pos = [], region.find("\\boxed")
    while pos >= 0 and len(starts) <= MAX_FORMAT_BOXES:  # stop counting after one box too many
        starts.append(pos)
        pos = region.find("\\boxed", pos + 1)
    if not 1 <= len(starts) <= MAX_FORMAT_BOXES:
        return 0.0
    values, end = set(), 0
    for pos in starts:
        box = _box_at(region, pos)
        if box is None:  # unclosed, too long or too deep
            return 0.0
        values.add(_parse_span(box[1], _BOX))
        end = max(end, box.end())
    if None in values or len(values) != 1:
        return 0.0
    return 1.0 if len(region[end:].strip()) <= MAX_TRAILING_CHARS else 0.0


def _correctness_plus_format(completion: str, gold: str) -> float:
    return correctness_reward(completion, gold) + FORMAT_WEIGHT * format_reward(completion)


REWARD_FUNCS: dict[str, Callable[[str, str], float]] = {
    "correctness": correctness_reward,
    "format_only": lambda completion, gold: format_reward(completion),
    "correctness_plus_format": _correctness_plus_format,
}


def get_reward_fn(name: str) -> Callable[[str, str], float]:
    """The reward function `(completion, gold) -> float` registered under `name`."""
    try:
        return REWARD_FUNCS[name]
    except (KeyError, TypeError):
        raise ValueError(f"未知的 reward {name!r}；可选：{', '.join(REWARD_FUNCS)}") from None


def training_rewards(
    name: str, completions: list[str], golds: list[str], group_size: int, generator
) -> torch.Tensor:
    """The rewards (N,) a run learns from: reward ``name`` of each completion against its gold.

    A control run (``name`` in CONTROLS) gets correctness rewards shuffled with ``generator``
    (common.gsm8k.controls): "shuffled" within each group of ``group_size`` adjacent answers,
    "shuffled_batch" across the whole batch (L2.08 section 1.1).
    """
    control = name in CONTROLS
    reward = get_reward_fn("correctness" if control else name)
    rewards = torch.tensor([reward(c, g) for c, g in zip(completions, golds)])
    if control:
        within = name == "shuffled"
        rewards = shuffle_rewards(rewards, group_size, generator, within_groups=within)
    return rewards
