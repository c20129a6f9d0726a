#!/bin/bash
# 核对 sha256，把 GGUF 转成 /tmp/qwen25coder（CPU 重活，约 80 s：这时不要在机器上计时别的）
set -e
sha256sum -c "$1"
PYTHONPATH=/tmp/site python3 -m common.model.model_dir from-gguf /tmp/model.gguf /tmp/qwen25coder
