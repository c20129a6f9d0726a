"""Run grpo_train.py with one injected fault; used by tests/L2/test_faults.py (a test helper, not a test).

    FAULT=kill:replace=checkpoint.pt:2 python tests/fault_inject.py --out runs/x ...

FAULT = <what>:<where>:<n>, the fault fires at the n-th time <where> happens:
  what   kill (SIGKILL: no cleanup at all), sigint (Ctrl-C), sigint2 (Ctrl-C twice, 10 ms
         apart), sigterm (kill, a scheduler), sighup (the SSH session dropped),
         enospc (a full disk), nan, none
  where  replace=<file>  just before os.replace(<file>.tmp, <file>): the .tmp is complete
         append          inside a metrics.jsonl append, after half of the line is on disk
         savefig         inside matplotlib's Figure.savefig (curves.png)
         torch.save      inside torch.save of the checkpoint, after some bytes are written
         adamw.step      right after an AdamW step (what=nan: 7 NaNs into exp_avg)
         backward        right after a loss.backward() (what=nan: one NaN into a gradient, with
                         the loss itself finite: what a NaN born in the backward pass looks like)
         access=<dir>    os.access(<dir>, W_OK) says no (a read-only folder, when the OS
                         cannot make one: we run as root without user namespaces)
The script runs unchanged (runpy), with the real common/ and solutions/ of this checkout.
"""

from __future__ import annotations

import errno
import os
import runpy
import signal
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "L2_algorithm" / "07_grpo_train" / "grpo_train.py"
WHAT, WHERE, NTH = os.environ["FAULT"].rsplit(":", 2)
seen = 0
if WHAT in ("sigint", "sigint2"):
    # Started in the background (CI, `cmd &`), a process inherits SIGINT ignored and Python then
    # installs no KeyboardInterrupt handler: give it the one a terminal's Ctrl-C would meet.
    signal.signal(signal.SIGINT, signal.default_int_handler)


def due() -> bool:
    global seen
    seen += 1
    return seen == int(NTH)


def fire() -> None:
    if WHAT == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif WHAT == "sigint":
        os.kill(os.getpid(), signal.SIGINT)  # KeyboardInterrupt at the next bytecode
    elif WHAT == "sigint2":  # Ctrl-C twice, 10 ms apart: the second lands in the clean exit
        import threading

        os.kill(os.getpid(), signal.SIGINT)
        threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGINT)).start()
    elif WHAT == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
    elif WHAT == "sighup":
        os.kill(os.getpid(), signal.SIGHUP)
    elif WHAT == "enospc":
        err = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
        err.__context__ = OSError(errno.ENOSPC, "No space left on device")
        raise err  # what torch.save raises when the disk fills up under it


if WHERE.startswith("replace="):
    real_replace = os.replace

    def replace(src, dst, *args, **kwargs):
        if Path(dst).name == WHERE.removeprefix("replace=") and due():
            fire()
        return real_replace(src, dst, *args, **kwargs)

    os.replace = replace
elif WHERE == "append":
    import common.run.metrics as metrics

    real_append = metrics.append_line

    def append_line(path, line):
        if due():
            with open(path, "a", encoding="utf-8") as f:
                f.write(line[: len(line) // 2])
            fire()
        return real_append(path, line)

    metrics.append_line = append_line
elif WHERE == "savefig":
    from matplotlib.figure import Figure

    real_savefig = Figure.savefig

    def savefig(self, *args, **kwargs):
        if due():
            fire()
        return real_savefig(self, *args, **kwargs)

    Figure.savefig = savefig
elif WHERE == "torch.save":
    import torch

    real_save = torch.save

    def save(obj, f, *args, **kwargs):
        if due():
            f.write(b"PK\x03\x04 partial checkpoint bytes")
            fire()
        return real_save(obj, f, *args, **kwargs)

    torch.save = save
elif WHERE == "adamw.step":
    import torch

    real_step = torch.optim.AdamW.step

    def step(self, *args, **kwargs):
        out = real_step(self, *args, **kwargs)
        if due():
            state = self.state[self.param_groups[0]["params"][0]]
            state["exp_avg"].view(-1)[:7] = float("nan")
        return out

    torch.optim.AdamW.step = step
elif WHERE == "backward":
    import torch

    real_backward = torch.Tensor.backward

    def backward(self, *args, **kwargs):
        out = real_backward(self, *args, **kwargs)
        if due():
            import gc

            params = [o for o in gc.get_objects() if isinstance(o, torch.nn.Parameter)]
            grads = [p for p in params if p.grad is not None]
            grads[0].grad.view(-1)[0] = float("nan")
        return out

    torch.Tensor.backward = backward
elif WHERE.startswith("access="):
    real_access = os.access
    blocked = Path(WHERE.removeprefix("access=")).resolve()

    def access(path, mode, *args, **kwargs):
        if mode & os.W_OK and Path(path).resolve() == blocked:
            return False
        return real_access(path, mode, *args, **kwargs)

    os.access = access
else:
    raise SystemExit(f"fault_inject.py: unknown FAULT where={WHERE!r}")

sys.argv = [str(SCRIPT), *sys.argv[1:]]
runpy.run_path(str(SCRIPT), run_name="__main__")
