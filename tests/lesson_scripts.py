"""Import a lesson's script as a module: lesson folders start with a digit, so `import` cannot reach them."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_script(path: Path, name: str | None = None) -> ModuleType:
    """The module of the Python file at ``path`` (executed once per call), named ``name`` or its stem."""
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
