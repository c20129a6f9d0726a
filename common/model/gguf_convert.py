"""GGUF file (llama.cpp / Ollama / LM Studio) -> a model folder that `--model` accepts.

    folder = from_gguf("model.gguf", "./qwen2.5-coder-0.5b")   # dequantised, saved as bfloat16

    python -m common.model.model_dir from-gguf model.gguf ./out         # the same, then checked and described

The weights in a GGUF are usually quantised: the folder is an approximation of the original model
(PROXY_NOTE says so to the learner). Every problem is one Chinese GGUFError (a ValueError) that
names the file and what to do; an interrupted conversion leaves no half-written folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from common.model.tokenizer import QWEN_STOP_TOKENS
from common.vram.shapes import DENSE_FAMILIES, SUPPORTED_FAMILIES

GGUF_MAGIC = b"GGUF"  # the first 4 bytes of every GGUF file (ggml/docs/gguf.md)


class GGUFError(ValueError):
    """A GGUF file the course cannot convert; the message (Chinese) names the file and what to do."""


PROXY_NOTE = (
    "注意：GGUF 里的权重多半是量化过的（Q4/Q5/Q8）。这里把它们反量化成 {dtype}，得到的是原模型的一个"
    "近似（量化误差已经在权重里了），不是原版权重：用它得到的正确率会低于原模型，课文里引用时要说明。"
)


def from_gguf(gguf_file, out_dir, dtype: str = "bfloat16") -> Path:
    """Convert a GGUF file (llama.cpp / Ollama / LM Studio) of a Qwen model into a folder `--model` accepts.

    transformers' GGUF loader (`gguf_file=`, needs the `gguf` package: `pip install -e ".[gguf]"`)
    dequantises every tensor; the model is saved in `dtype` with safetensors, the tokenizer and chat
    template from the GGUF beside it, and a generation_config that stops at both Qwen stop tokens.
    """
    import importlib.util

    import torch

    src, out = Path(gguf_file).expanduser(), Path(out_dir).expanduser()
    if src.is_dir():
        found = sorted(p.name for p in src.glob("*.gguf"))
        inside = f"（里面有：{', '.join(found[:5])}）" if found else "（里面没有 .gguf 文件）"
        raise GGUFError(
            f"{src} 是一个目录，不是 GGUF 文件{inside}：第一个参数要给 .gguf 文件本身，"
            f"比如 {src / (found[0] if found else 'model.gguf')}"
        )
    if not src.is_file():
        raise GGUFError(f"GGUF 文件不存在：{src}")
    if importlib.util.find_spec("gguf") is None:
        raise GGUFError(
            '读 GGUF 需要 gguf 这个包：pip install -e ".[gguf]"（纯 Python，约 100 KB）'
        )
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise GGUFError(f"输出目录 {out} 已经存在且不是空目录：换一个目录，或先删掉它")
    if dtype not in ("bfloat16", "float32"):
        raise GGUFError(f"--dtype 只能是 bfloat16 或 float32，得到 {dtype!r}")
    kind = _gguf_architecture(src)
    if kind not in DENSE_FAMILIES:
        raise GGUFError(f"{src} 的架构是 {kind!r}：课程支持{SUPPORTED_FAMILIES}")
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tmp = out.with_name(f".{out.name}.converting")  # marked as ours: never a folder we did not make
    marker = tmp / ".from_gguf"
    if tmp.is_dir() and not tmp.is_symlink() and marker.is_file():
        shutil.rmtree(tmp)  # left by a conversion that was killed
    elif tmp.exists() or tmp.is_symlink():
        raise GGUFError(
            f"{tmp} 已经存在、又不是转换留下的：它不是课程写的，不删。挪走它，或换一个输出目录"
        )
    tmp.mkdir(parents=True)
    marker.write_bytes(b"")
    try:
        try:
            tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
            model = AutoModelForCausalLM.from_pretrained(
                src.parent, gguf_file=src.name, dtype=getattr(torch, dtype)
            )
        except Exception as err:  # a tensor or tokenizer field transformers cannot map
            raise GGUFError(
                f"transformers 读不了 {src}（{type(err).__name__}: {str(err)[:300]}）：文件可能损坏，"
                "或是 transformers 不支持的量化格式。删掉它重新下载，或换一个 Q8_0 / F16 的 GGUF。"
            ) from None
        # transformers refuses to save a model it loaded "quantized with gguf"; the tensors are plain now
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        vocab = tokenizer.get_vocab()
        stops = [vocab[t] for t in QWEN_STOP_TOKENS if t in vocab]
        pad = vocab.get("<|endoftext|>", stops[-1] if stops else None)
        GenerationConfig(eos_token_id=stops, pad_token_id=pad).save_pretrained(tmp)
        tmp.rename(out)
        (out / marker.name).unlink()
    finally:
        if marker.is_file():  # a failed or interrupted save leaves no half folder
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _gguf_architecture(src: Path) -> str:
    """general.architecture of a GGUF file, after checking that the file is one and is whole."""
    from gguf import GGUFReader

    size = src.stat().st_size
    with src.open("rb") as f:
        head = f.read(len(GGUF_MAGIC))
    if head != GGUF_MAGIC:
        raise GGUFError(
            f"{src} 不是 GGUF 文件：开头应是 4 个字节 {GGUF_MAGIC.decode()}，这里是 {head!r}"
            f"（共 {size:,} 字节；下载到的可能是网页或别的格式）。重新下载 .gguf 文件。"
        )
    try:
        reader = GGUFReader(src)
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    except Exception as err:  # a cut file: numpy cannot reshape / index what is not there
        raise GGUFError(
            f"{src} 不完整或已损坏（读文件头和张量表时出错：{type(err).__name__}，文件 {size:,} 字节）："
            "下载多半中断了。删掉它，重新下载。"
        ) from None
    if end > size:
        raise GGUFError(
            f"{src} 不完整：张量表说数据到第 {end:,} 字节，文件只有 {size:,} 字节。"
            "下载中断了：删掉它，重新下载。"
        )
    field = reader.fields.get("general.architecture")
    try:
        return bytes(field.parts[field.data[0]]).decode() if field else "?"
    except (IndexError, UnicodeDecodeError):
        return "?"
