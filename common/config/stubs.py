"""Is a learner's function still a stub? The fail-fast check before a script trains with `--impl exercises`.

    L = exercises_impl if cfg.impl == "exercises" else solutions_impl  # the script's functions
    require_written(L, skip=("tis_weights",))                     # exits in Chinese if any is a stub

A stub is a function whose body is only a docstring and `raise NotImplementedError(...)` (the shape of
every exercise in exercises/). The module is given by the caller: common/ never imports the learner's
code or the answer key itself.
"""

from __future__ import annotations

import ast
import inspect
import sys
import types


def is_stub(fn) -> bool:
    """The function body is only a docstring + `raise NotImplementedError(...)`: not written yet."""
    try:
        node = ast.parse(inspect.getsource(fn).lstrip()).body[0]
    except (
        OSError,
        TypeError,
        SyntaxError,
    ):  # no source (built-in, generated): count it as written
        return False
    if not isinstance(node, ast.FunctionDef):
        return False
    body = [
        s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
    ]
    exc = body[0].exc if len(body) == 1 and isinstance(body[0], ast.Raise) else None
    target = exc.func if isinstance(exc, ast.Call) else exc
    return isinstance(target, ast.Name) and target.id == "NotImplementedError"


def _package(module: types.ModuleType) -> str:
    return module.__name__.split(".")[0]


def unwritten(module: types.ModuleType, skip: tuple[str, ...] = ()) -> list[str]:
    """'exercises/l2_0x.py 里的 name()' for every stub among the functions `module` offers (less
    `skip`), and among the functions of the same package that those call (e.g. kl_k3 inside
    grpo_loss; checked even when named in `skip`: a function in use needs them, unless only
    `module` itself imported them); sorted."""
    package = _package(module)
    offered = [
        fn
        for name, fn in vars(module).items()
        if callable(fn)
        and name not in skip
        and (getattr(fn, "__module__", "") or "").startswith(package + ".")
    ]
    check = list(offered)
    for fn in offered:  # what that function's own module imported from other lessons
        for dep in vars(sys.modules[fn.__module__]).values():
            dep_module = getattr(dep, "__module__", None) or ""
            if (
                callable(dep)
                and dep_module.startswith(package + ".")
                and dep_module != fn.__module__
                and (fn.__module__ != module.__name__ or getattr(dep, "__name__", "") not in skip)
            ):
                check.append(dep)
    return sorted(
        {f"{f.__module__.replace('.', '/')}.py 里的 {f.__name__}()" for f in check if is_stub(f)}
    )


def require_written(module: types.ModuleType, skip: tuple[str, ...] = ()) -> None:
    """Exit with one Chinese message listing every stub `module` would use (see `unwritten`)."""
    missing = unwritten(module, skip)
    if missing:
        sys.exit(
            f"--impl {_package(module)} 要用到的这些练习还没写完：\n  - "
            + "\n  - ".join(missing)
            + "\n先让 `pytest --impl exercises tests/L2` 通过，再用你自己的函数训练。"
        )
