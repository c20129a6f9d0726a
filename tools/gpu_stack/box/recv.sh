#!/bin/bash
# 接一块到 /tmp/model.gguf 末尾
set -e
cat "$1" >> /tmp/model.gguf
ls -l /tmp/model.gguf
