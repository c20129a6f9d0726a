"""Model folders: check one before any weight is loaded (GGUF conversion:
common/model/gguf_convert.py).

    folder = inspect_model_dir("./Qwen3-0.6B")         # -> ModelFolder (family, shape, EOS ids, ...)
    folder = inspect_model_dir(path, expect=shape)     # --preset NAME --model DIR: the exact shapes too

    python -m common.model.model_dir check ./Qwen2.5-0.5B-Instruct       # what the course sees in a folder
    python -m common.model.model_dir from-gguf model.gguf ./out          # GGUF (Ollama, LM Studio) -> folder

A folder is the Hugging Face layout that `hf download` / `modelscope download` write: config.json,
model.safetensors (or shards + model.safetensors.index.json), tokenizer.json (or vocab.json +
merges.txt), tokenizer_config.json with a chat template (or chat_template.jinja), and usually
generation_config.json. `inspect_model_dir` reads only config.json, the tokenizer's JSON files and
each safetensors header (via `safetensors.safe_open`, which also checks that the file is exactly as
long as its header says); every problem is one Chinese ModelDirError that names the path and what to
do. Supported: dense Qwen3 and Qwen2 / Qwen2.5 (`model_type` qwen3 / qwen2). A folder written by
L2.07's make_warmstart.py (it has warmstart.json) is the tiny model's warm start.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common.model.gguf_convert import PROXY_NOTE, GGUFError, from_gguf
from common.model.tokenizer import QWEN_STOP_TOKENS
from common.options.cli import CourseParser
from common.run.json_files import read_json_object

try:
    import resource  # peak memory while a chat template renders (not on Windows)
except ImportError:
    resource = None
from common.vram.shapes import (
    DENSE_FAMILIES,
    MOE_TYPES,
    SUPPORTED_FAMILIES,
    ModelShape,
    ShapeError,
)

WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
WARMSTART_FILE = "warmstart.json"  # written by L2_algorithm/07_grpo_train/make_warmstart.py
MAKE_WARMSTART = "L2_algorithm/07_grpo_train/make_warmstart.py"
# config.json fields that must equal a preset's when --preset and --model are both given
SHAPE_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "tie_word_embeddings",
)
# config.json's "dtype" (older transformers: "torch_dtype"): transformers turns the string into
# getattr(torch, name), so anything else is an AttributeError at load time, after the run started
FLOAT_DTYPES = ("bfloat16", "float16", "float32", "float64", "half", "float", "double")
TEMPLATE_SECONDS = 10.0  # a chat template renders the course's prompt in milliseconds; a bound
# ... of a few KiB: a bound (MiB) on the memory one render may add (a string doubled in a loop)
TEMPLATE_MIB = 512


class ModelDirError(ValueError):
    """A model folder the course cannot use; the message (Chinese) names the path and what to do."""


@dataclass(frozen=True)
class ModelFolder:
    """What `inspect_model_dir` found: enough to plan a run without loading any weight."""

    path: Path
    config: dict  # config.json
    shape: ModelShape
    eos_token_ids: tuple[int, ...]  # stop at any of these (the chat-turn end first)
    pad_token_id: int
    warmstart: (
        dict | None
    )  # warmstart.json of a make_warmstart.py folder (the tiny model), else None

    @property
    def family(self) -> str:
        return self.shape.family

    @property
    def n_params(self) -> int:
        return self.shape.n_params()


def _read_json(path: Path, what: str) -> dict:
    return read_json_object(path, f"{what}。重新下载这个文件。", ModelDirError)


def _header_size(path: Path) -> tuple[int, int] | None:
    """(bytes the documented safetensors header says the file has, header length), or None.

    The format (huggingface/safetensors README): 8 bytes little-endian N, N bytes of JSON mapping
    each tensor to its data_offsets within the data that follows. Only used to explain an error.
    """
    with path.open("rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        header = f.read(n) if 0 < n <= 100_000_000 else b""
    try:
        tensors = json.loads(header)
        ends = [t["data_offsets"][1] for k, t in tensors.items() if k != "__metadata__"]
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
    return 8 + n + max(ends, default=0), n


def tensor_shapes(path: Path) -> dict[str, list[int]]:
    """{name: shape} of one safetensors file, read from its header; ModelDirError if it is not whole."""
    return {name: shape for name, (shape, _) in tensor_headers(path).items()}


# safetensors dtype names a weight may have (a float); anything else (I32, U8, BOOL...) is refused
WEIGHT_DTYPES = ("BF16", "F16", "F32", "F64")


def expected_tensors(shape: ModelShape) -> dict[str, list[int]]:
    """{name without the "model." prefix: shape} of every tensor of a dense Qwen2 / Qwen3 with
    ``shape`` (transformers' Qwen2/Qwen3 modules: Linear weights are [out, in])."""
    h, v, i = shape.hidden, shape.vocab, shape.intermediate
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    want = {"embed_tokens.weight": [v, h], "norm.weight": [h], "lm_head.weight": [v, h]}
    per_layer = {
        "input_layernorm.weight": [h], "post_attention_layernorm.weight": [h],
        "self_attn.q_proj.weight": [q, h], "self_attn.k_proj.weight": [kv, h],
        "self_attn.v_proj.weight": [kv, h], "self_attn.o_proj.weight": [h, q],
        "mlp.gate_proj.weight": [i, h], "mlp.up_proj.weight": [i, h], "mlp.down_proj.weight": [h, i],
    }  # fmt: skip
    if shape.attention_bias:
        per_layer |= {"self_attn.q_proj.bias": [q], "self_attn.k_proj.bias": [kv],
                      "self_attn.v_proj.bias": [kv]}  # fmt: skip
    if shape.qk_norm:
        per_layer |= {"self_attn.q_norm.weight": [shape.head_dim],
                      "self_attn.k_norm.weight": [shape.head_dim]}  # fmt: skip
    for layer in range(shape.layers):
        want |= {f"layers.{layer}.{name}": dims for name, dims in per_layer.items()}
    return want


def tensor_headers(path: Path) -> dict[str, tuple[list[int], str]]:
    """{name: (shape, safetensors dtype)} of one file, from its header; ModelDirError if not whole."""
    from safetensors import SafetensorError, safe_open

    size = path.stat().st_size
    with path.open("rb") as f:
        if f.read(8).startswith(b"version "):  # "version https://git-lfs.github.com/spec/v1"
            raise ModelDirError(
                f"{path} 是 Git LFS 的指针文件（{size} 字节），不是权重：用 git clone 下载时没装 git-lfs。"
                "装好 git-lfs 后在目录里运行 git lfs pull，或改用 modelscope download / hf download 下载。"
            )
    try:
        with safe_open(str(path), framework="pt") as f:
            return {
                name: (list(f.get_slice(name).get_shape()), f.get_slice(name).get_dtype())
                for name in f.keys()
            }
    except (SafetensorError, OSError) as err:
        expected = _header_size(path)
        if expected is None:
            raise ModelDirError(
                f"{path} 不是完整的 safetensors 文件（文件头读不出来，{size} 字节）：下载多半中断了，"
                "删掉它重新下载。"
            ) from None
        if expected[0] != size:
            raise ModelDirError(
                f"{path} 不完整：文件头说应有 {expected[0]:,} 字节，实际是 {size:,} 字节。"
                "下载中断了：删掉这个文件，重新运行下载命令。"
            ) from None
        raise ModelDirError(
            f"{path} 不是合法的 safetensors 文件（{err}）：删掉它重新下载。"
        ) from None


def _weight_files(folder: Path) -> list[Path]:
    index = folder / WEIGHTS_INDEX
    if index.is_file():
        weight_map = _read_json(index, "分片权重的索引").get("weight_map")
        names = list(weight_map.values()) if isinstance(weight_map, dict) else []
        if not names or not all(isinstance(name, str) for name in names):
            raise ModelDirError(f"{index} 里没有 weight_map：索引文件不完整，重新下载。")
        files = [folder / name for name in sorted(set(names))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ModelDirError(
                f"{folder} 缺少 {len(missing)} 个权重分片：{', '.join(missing)}（{WEIGHTS_INDEX} 里列了它们）。"
                "下载没完成：重新运行下载命令。"
            )
        return files
    if (folder / WEIGHTS_FILE).is_file():
        return [folder / WEIGHTS_FILE]
    others = sorted(
        p.name
        for p in folder.iterdir()
        if p.suffix in (".safetensors", ".bin", ".pt", ".gguf") and p.is_file()
    )
    odd = (folder / WEIGHTS_FILE).exists()  # there, but not a file (a folder, say)
    raise ModelDirError(
        f"{folder} 里没有权重文件：要有 {WEIGHTS_FILE}，或分片的 {WEIGHTS_INDEX} + 各分片"
        + (f"（{WEIGHTS_FILE} 不是一个文件）" if odd else "")
        + (f"（只找到 {', '.join(others)}）" if others else "")
        + "。下载没完成，或下载的不是完整的模型仓库"
        + (
            "；GGUF 文件先用 python -m common.model.model_dir from-gguf 转换"
            if ".gguf" in str(others)
            else ""
        )
        + "。"
    )


def _check_weights(folder: Path, shape: ModelShape) -> None:
    """Every file is whole, and the tensors the config promises are there with its shapes."""
    headers: dict[str, tuple[list[int], str]] = {}
    for weights in _weight_files(folder):
        headers.update(tensor_headers(weights))
    shapes = {name: dims for name, (dims, _) in headers.items()}
    for name, (_, dtype) in headers.items():
        if dtype not in WEIGHT_DTYPES:
            raise ModelDirError(
                f"{folder} 的 {name} 在 safetensors 文件头里是 {dtype}，不是浮点权重"
                f"（{'/'.join(WEIGHT_DTYPES)}）：文件头被改过或不是这个模型的权重，重新下载。"
            )
    prefix = "model." if "model.embed_tokens.weight" in shapes else ""
    embed = shapes.get(f"{prefix}embed_tokens.weight")
    if embed != [shape.vocab, shape.hidden]:
        got = "没有这个张量" if embed is None else f"形状是 {embed}"
        raise ModelDirError(
            f"{folder} 的 embed_tokens.weight {got}，config.json 说应为 [{shape.vocab}, {shape.hidden}]"
            "（vocab_size × hidden_size）：权重和 config.json 对不上，重新下载或重新保存这个目录。"
        )
    if not shape.tied and shapes.get("lm_head.weight") != [shape.vocab, shape.hidden]:
        raise ModelDirError(
            f"{folder}：config.json 说 lm_head 不与 embedding 共享（tie_word_embeddings=false），"
            f"但权重里没有形状为 [{shape.vocab}, {shape.hidden}] 的 lm_head.weight：重新下载这个目录。"
        )
    missing = [
        i
        for i in range(shape.layers)
        if not any(k.startswith(f"{prefix}layers.{i}.") for k in shapes)
    ]
    if missing:
        raise ModelDirError(
            f"{folder} 的权重里缺第 {missing[:5]} 层（config.json 说有 {shape.layers} 层）：权重不完整，重新下载。"
        )
    # every tensor the model has: the shape config.json implies and a float dtype (the bytes of a
    # transposed or int32 header would load without a word, or fail mid-run with a traceback)
    want = expected_tensors(shape)
    for name, (dims, _) in headers.items():
        bare = name.removeprefix(prefix) if name != "lm_head.weight" else name
        if bare in want and dims != want[bare]:
            raise ModelDirError(
                f"{folder} 的 {name} 形状是 {dims}，config.json 说应为 {want[bare]}"
                "（文件头被改过，比如转置了？）：权重和 config.json 对不上，重新下载或重新保存这个目录。"
            )


def _tokenizer_files(folder: Path) -> dict:
    """tokenizer_config.json, after checking the tokenizer files and the chat template exist."""
    has_fast = (folder / "tokenizer.json").is_file()
    has_bpe = (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file()
    config = folder / "tokenizer_config.json"
    if not (has_fast or has_bpe) or not config.is_file():
        raise ModelDirError(
            f"{folder} 里没有完整的 tokenizer：要有 tokenizer_config.json，以及 tokenizer.json"
            "（或 vocab.json + merges.txt）。下载整个模型仓库，不要只下权重。"
        )
    tok_config = _read_json(config, "tokenizer 的设置")
    if "chat_template" not in tok_config and not (folder / "chat_template.jinja").is_file():
        raise ModelDirError(
            f"{folder} 的 tokenizer 没有 chat template（tokenizer_config.json 里没有 chat_template，"
            "也没有 chat_template.jinja）：课程的 prompt 要用对话模板。用对话（Instruct）版本的模型，"
            "或确认下载的是完整的模型仓库。"
        )
    return tok_config


def _chat_templates(folder: Path, tok_config: dict) -> dict[str, str]:
    """{where: template text} of every chat template the folder has (the tokenizer may use any)."""
    found = {}
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        try:
            found[str(jinja)] = jinja.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ModelDirError(f"{jinja} 读不出（{err}）：重新下载这个文件。") from None
    value = tok_config.get("chat_template")
    where = str(folder / "tokenizer_config.json")
    if isinstance(value, str):
        found[where] = value
    elif isinstance(value, list):  # [{"name": "default", "template": ...}, {"name": ...}, ...]
        for item in value:
            if isinstance(item, dict) and isinstance(item.get("template"), str):
                found[f"{where}（{item.get('name')}）"] = item["template"]
    elif value is not None:
        raise ModelDirError(f"{where} 的 chat_template 不是一段文字：重新下载这个文件。")
    return found


class TemplateTooSlow(Exception):
    """A chat template still rendering after TEMPLATE_SECONDS (a loop of 10^10 steps, say)."""


class TemplateTooBig(Exception):
    """A chat template whose rendering took TEMPLATE_MIB more memory (a string doubled 40 times)."""


def _peak_mib() -> float | None:
    """This process's peak resident memory in MiB (None where the resource module is missing)."""
    if resource is None:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, else KiB


def _bounded(render, seconds: float, mib: float):
    """``render()``, stopped with TemplateTooSlow after ``seconds``, or TemplateTooBig once the
    process's peak memory grew by ``mib``: jinja2 compiles a template to Python, so a trace function
    sees every line it runs (a template's loops and strings have no other bound). Memory is checked
    before every line: a string that doubles each line is stopped within one more doubling."""
    deadline = time.monotonic() + seconds
    start = _peak_mib()
    lines = 0

    def trace(frame, event, arg):
        nonlocal lines
        if event == "line":
            lines += 1
            if lines % 4096 == 0 and time.monotonic() > deadline:
                raise TemplateTooSlow()
            if start is not None and _peak_mib() - start > mib:
                raise TemplateTooBig()
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        return render()
    finally:
        sys.settrace(previous)


def _check_chat_template(folder: Path, tok_config: dict) -> None:
    """Render the course's prompt with each chat template, in the sandbox transformers uses.

    A template that breaks (a syntax error, raise_exception, an attribute the sandbox forbids, such
    as ``''.__class__``) is refused here, before a run folder exists, instead of in the first rollout.
    """
    from jinja2.exceptions import SecurityError
    from transformers.utils.chat_template_utils import render_jinja_template

    from common.gsm8k.data import prompt_messages

    tokens = {k: v for k, v in tok_config.items() if k.endswith("_token") and isinstance(v, str)}
    for where, template in _chat_templates(folder, tok_config).items():

        def render(template=template):
            return render_jinja_template(
                [prompt_messages("1 + 1 = ?")], chat_template=template,
                add_generation_prompt=True, enable_thinking=False, **tokens,
            )  # fmt: skip

        try:
            _bounded(render, TEMPLATE_SECONDS, TEMPLATE_MIB)
        except TemplateTooBig:
            raise ModelDirError(
                f"{where} 的 chat template 渲染课程的一个 prompt 用掉了超过 {TEMPLATE_MIB:g} MiB 内存"
                "（模板里多半有一个在循环里不断变长的字符串），停下了：一个 prompt 只有几 KB。"
                "换回模型发布者的原版模板（重新下载 tokenizer_config.json 和 chat_template.jinja），"
                "或换一个来源可靠的模型目录。"
            ) from None
        except TemplateTooSlow:
            raise ModelDirError(
                f"{where} 的 chat template 渲染课程的一个 prompt 超过 {TEMPLATE_SECONDS:g} 秒还没完"
                "（模板里多半有一个极长的循环），停下了：每次 rollout 都要渲染它。换回模型发布者的原版模板"
                "（重新下载 tokenizer_config.json 和 chat_template.jinja），或换一个来源可靠的模型目录。"
            ) from None
        except SecurityError as err:
            raise ModelDirError(
                f"{where} 的 chat template 想访问 Python 的内部（{err}），被模板沙箱拦下了："
                "这个模板不可信。换回模型发布者的原版（重新下载 tokenizer_config.json 和 "
                "chat_template.jinja），或换一个来源可靠的模型目录。"
            ) from None
        except Exception as err:  # syntax errors, raise_exception(...), a filter that fails
            raise ModelDirError(
                f"{where} 的 chat template 渲染不了课程的 prompt（{type(err).__name__}: {err}）："
                "换回模型发布者的原版模板（重新下载），或换一个 Qwen 对话模型。"
            ) from None


def _token_ids(folder: Path) -> dict[str, int]:
    """{token: id} of the tokenizer's special / added tokens and base vocab (tokenizer.json or vocab.json)."""
    ids: dict[str, int] = {}
    if (folder / "tokenizer.json").is_file():
        tok = _read_json(folder / "tokenizer.json", "tokenizer 的词表")
        ids.update((tok.get("model") or {}).get("vocab") or {})
        ids.update({t["content"]: t["id"] for t in tok.get("added_tokens", []) if "id" in t})
    else:
        ids.update(_read_json(folder / "vocab.json", "tokenizer 的词表"))
    added = _read_json(folder / "tokenizer_config.json", "").get("added_tokens_decoder") or {}
    ids.update({v["content"]: int(k) for k, v in added.items() if isinstance(v, dict)})
    return ids


def _as_ids(value) -> list[int]:
    if isinstance(value, int):
        return [value]
    return [v for v in value if isinstance(v, int)] if isinstance(value, list) else []


def _stop_and_pad(folder: Path, config: dict, tok_config: dict, vocab: int) -> tuple[tuple, int]:
    """EOS ids (generation_config, config, the tokenizer; Qwen's <|im_end|> and <|endoftext|>) and pad."""
    ids = _token_ids(folder)
    gen = folder / "generation_config.json"
    gen_config = _read_json(gen, "生成设置") if gen.is_file() else {}
    eos = [*_as_ids(gen_config.get("eos_token_id")), *_as_ids(config.get("eos_token_id"))]
    eos += [ids[t] for t in (tok_config.get("eos_token"), *QWEN_STOP_TOKENS) if t in ids]
    eos = tuple(dict.fromkeys(i for i in eos if 0 <= i < vocab))
    pad = [*_as_ids(gen_config.get("pad_token_id")), *_as_ids(config.get("pad_token_id"))]
    pad += [ids[t] for t in (tok_config.get("pad_token"),) if t in ids]
    if not eos:
        raise ModelDirError(
            f"{folder} 说不出回答在哪个 token 结束：generation_config.json、config.json、tokenizer 里"
            "都没有 eos_token_id。补上 generation_config.json（Qwen 的是 [151645, 151643]），或重新下载。"
        )
    too_big = max(ids.values(), default=-1)
    if too_big >= vocab:
        raise ModelDirError(
            f"{folder} 的 tokenizer 有 id {too_big} 的 token，但 config.json 的 vocab_size 只有 {vocab}："
            "tokenizer 和模型不是一套（扩了词表却没改 embedding？）。用配套的 tokenizer，或重新保存模型。"
        )
    return eos, (pad or [eos[-1]])[0]


def _shape_mismatch(config: dict, expect: ModelShape) -> list[str]:
    """The SHAPE_FIELDS where config.json differs from `expect` (head_dim may be implied by the rest)."""
    have = {**config}
    if "head_dim" not in have and config.get("num_attention_heads"):
        have["head_dim"] = config.get("hidden_size", 0) // config["num_attention_heads"]
    want = expect.config_dict()
    return [
        f"{key} = {have.get(key, '（缺）')}，应为 {want[key]}"
        for key in SHAPE_FIELDS
        if have.get(key) != want[key]
    ]


def inspect_model_dir(path, expect: ModelShape | None = None, source: str = "") -> ModelFolder:
    """Check a local model folder without loading any weight; ModelDirError (Chinese) if it can't be used.

    expect: the exact shape a named preset needs (`--preset NAME --model DIR`); None accepts any dense
    Qwen2 / Qwen3 shape. source: where a right folder comes from, for the messages (a hub id).
    """
    folder = Path(path).expanduser()
    source = source or (expect.hub_id if expect else "") or "一个 Qwen3 / Qwen2.5 对话模型"
    if not folder.is_dir():
        what = "不是目录" if folder.exists() else "不存在"
        raise ModelDirError(
            f"模型目录{what}：{folder}。先下载 {source}（见 README「权重从哪来」），"
            "再把 --model 指向下载到的目录。"
        )
    if not (folder / "config.json").is_file():
        raise ModelDirError(
            f"{folder} 里没有 config.json：这不是一个 Hugging Face 格式的模型目录"
            f"（{source} 的目录里有 config.json、model.safetensors、tokenizer.json 等）。"
        )
    config = _read_json(folder / "config.json", "模型的结构设置")
    kind = config.get("model_type")
    if kind in MOE_TYPES:
        raise ModelDirError(
            f"{folder / 'config.json'} 的 model_type 是 {kind!r}：MoE 模型每个 token 只用几个专家，"
            "但训练时全部专家的权重、梯度和优化器状态都要驻留（Qwen3-30B-A3B 光 bf16 权重就约 57 GiB），"
            f"一张 32 GB 的卡放不下（python -m common.vram 的表里 MoE 一行是 ❌）。课程支持{SUPPORTED_FAMILIES}。"
        )
    if kind not in DENSE_FAMILIES:
        raise ModelDirError(
            f"{folder / 'config.json'} 的 model_type 是 {kind!r}：课程支持{SUPPORTED_FAMILIES}"
            "（快速解码器、显存账本、chat template 和 EOS 都按 Qwen 的结构写）。换一个 Qwen 模型。"
        )
    if config.get("use_sliding_window"):
        raise ModelDirError(
            f"{folder / 'config.json'} 打开了 sliding window attention（use_sliding_window=true）："
            "课程的快速解码器和显存账本都按全注意力算。把它改成 false（Qwen2.5 的原版就是 false）。"
        )
    for key in ("dtype", "torch_dtype"):
        value = config.get(key)
        if value is not None and value not in FLOAT_DTYPES:
            raise ModelDirError(
                f"{folder / 'config.json'} 的 {key} 是 {value!r}：不是 PyTorch 的浮点类型"
                '（bfloat16、float16、float32）。Qwen 发布的权重是 bfloat16：把它改成 "bfloat16"，'
                "或重新下载 config.json。"
            )
    try:
        shape = ModelShape.from_config_json(config, name=folder.name, hub_id=str(folder))
    except ShapeError as err:
        raise ModelDirError(f"{folder / 'config.json'}：{err}。重新下载这个文件。") from None
    if expect is not None:
        wrong = _shape_mismatch(config, expect)
        if wrong:
            from common.vram.shapes import SHAPES

            same = [m.name for m in SHAPES.values() if not _shape_mismatch(config, m)]
            hint = f"这是 {same[0]} 的形状（python -m common.vram 的表里有它）；" if same else ""
            raise ModelDirError(
                f"{folder / 'config.json'} 的形状与预设要的 {expect.name}（{source}）不符："
                + "；".join(wrong)
                + f"。{hint}去掉 --preset 只给 --model（脚本按目录里的形状定配方），或者换成正确的目录。"
            )
    _check_weights(folder, shape)
    tok_config = _tokenizer_files(folder)
    _check_chat_template(folder, tok_config)
    eos, pad = _stop_and_pad(folder, config, tok_config, shape.vocab)
    ws = folder / WARMSTART_FILE
    warmstart = _read_json(ws, "make_warmstart.py 写的起点说明") if ws.is_file() else None
    return ModelFolder(folder, config, shape, eos, pad, warmstart)


def describe(folder: ModelFolder) -> str:
    """A few Chinese lines on what the course sees in a folder (for `check`)."""
    s = folder.shape
    kind = "tiny 的 warm start（make_warmstart.py）" if folder.warmstart else s.family
    return "\n".join(
        [
            f"{folder.path}：{kind}，{s.n_params() / 1e6:.1f}M 参数"
            + ("" if s.tied else "（lm_head 不与 embedding 共享）"),
            f"  {s.layers} 层，hidden {s.hidden}，{s.heads} 个 query 头 / {s.kv_heads} 个 KV 头 × {s.head_dim}，"
            f"FFN {s.intermediate}，词表 {s.vocab}，上下文 {s.max_position}",
            f"  停止 token {list(folder.eos_token_ids)}，pad {folder.pad_token_id}",
            f"  显存账本：python -m common.vram --model {folder.path}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = CourseParser(
        prog="python -m common.model.model_dir", description="模型目录：检查，或从 GGUF 转换。"
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="检查一个模型目录（不加载权重）")
    c.add_argument("folder")
    g = sub.add_parser("from-gguf", help="把 GGUF 文件转成 --model 认的目录（反量化）")
    g.add_argument("gguf_file")
    g.add_argument("out_dir")
    g.add_argument("--dtype", default="bfloat16", help="存成 bfloat16（默认）或 float32")
    a = p.parse_args(argv)
    try:
        if a.cmd == "check":
            print(describe(inspect_model_dir(a.folder)))
        else:
            print(PROXY_NOTE.format(dtype=a.dtype))
            out = from_gguf(a.gguf_file, a.out_dir, a.dtype)
            print(describe(inspect_model_dir(out)))
    except (ModelDirError, GGUFError) as err:
        print(f"错误：{err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
