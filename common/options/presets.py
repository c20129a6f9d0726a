"""The named presets of the training scripts, read from the TOML file that pyproject.toml names.

    preset = get_preset("qwen3-0.6b")
    preset.overrides      # {"data": "gsm8k", ..., "model": "Qwen/Qwen3-0.6B", "lora_rank": 0}
    preset.why            # one line, Chinese
    gpu_recipe()          # the GPU recipe alone: what `--model DIR` without --preset starts from

The file sits beside grpo_train.py so that a learner reads the 5090 recipe next to the script; it is
data (TOML), not code. Which lesson owns it is the course's layout, not this library's: the path is
pyproject.toml's `[tool.rl-course] presets` (relative to the repo root), the one place it is written.
A preset with `recipe = "gpu"` is the [recipe.gpu] table with the preset's own lines on top (and,
with lora_rank > 0, the [recipe.lora] table between them).
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

COURSE_ROOT = Path(__file__).resolve().parents[2]
# its [tool.rl-course] table says where the presets are
PROJECT_FILE = COURSE_ROOT / "pyproject.toml"
DEFAULT_PRESET = "tiny"


class PresetError(ValueError):
    """An unknown preset, or a preset this machine cannot run; the message says what to change."""


@dataclass(frozen=True)
class Preset:
    name: str
    why: str
    overrides: dict = field(
        default_factory=dict
    )  # config field -> value, the recipe's lines included

    @property
    def model(self) -> str | None:
        """The hub id the preset trains (None: the course's tiny model)."""
        return self.overrides.get("model")

    @property
    def lora_rank(self) -> int:
        return self.overrides.get("lora_rank", 0)


@functools.cache
def presets_file() -> Path:
    """The presets file of the course: pyproject.toml's `[tool.rl-course] presets`."""
    try:
        project = tomllib.loads(PROJECT_FILE.read_text(encoding="utf-8"))
        return COURSE_ROOT / project["tool"]["rl-course"]["presets"]
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as err:
        raise PresetError(
            f"{PROJECT_FILE} 里读不出预设文件的位置（[tool.rl-course] presets；{err!r}）："
            "用 git checkout 恢复它"
        ) from None


@functools.cache
def _read() -> dict:
    path = presets_file()
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise PresetError(f"读不出预设文件 {path}（{err}）：用 git checkout 恢复它") from None


def _lines(table: dict) -> dict:
    return {k: v for k, v in table.items() if k not in ("why", "recipe")}


def gpu_recipe() -> dict:
    """The [recipe.gpu] overrides: the GRPO values of every GPU preset and of `--model DIR`."""
    return _lines(_read()["recipe"]["gpu"])


def lora_recipe() -> dict:
    """The [recipe.lora] overrides: what LoRA changes on top of the GPU recipe (its lr)."""
    return _lines(_read()["recipe"]["lora"])


def preset_names() -> tuple[str, ...]:
    return tuple(_read()["preset"])


def get_preset(name: str) -> Preset:
    """The preset called `name`; PresetError (Chinese, lists the choices) for an unknown one."""
    presets = _read()["preset"]
    if name not in presets:
        raise PresetError(f"未知的模型预设 {name!r}；可选：{', '.join(presets)}")
    table = presets[name]
    recipes = _read().get("recipe", {})
    base = _lines(recipes[table["recipe"]]) if "recipe" in table else {}
    if base and table.get("lora_rank", 0) > 0:  # a LoRA preset: [recipe.lora] on top of its recipe
        base = {**base, **lora_recipe()}
    return Preset(name, table.get("why", ""), {**base, **_lines(table)})
