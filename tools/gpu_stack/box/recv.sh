#!/bin/bash
# recv.sh 块 偏移：把一块接到 /tmp/model.gguf 末尾。接之前核对：start.sh 在这台机器上跑过，已经接了「偏移」字节。
# 不对就是机器中途换了（一次调用没回话，机器被收回，下一次调用拿到一台新的）：什么都不接，退出码 3，从 start.sh 重来。
set -e
have=$(stat -c %s /tmp/model.gguf 2>/dev/null || echo missing)
if [ ! -d /tmp/site ] || [ "$have" != "$2" ]; then
  echo "recv.sh：/tmp/model.gguf 应该已有 $2 字节，实际是 $have；/tmp/site $([ -d /tmp/site ] && echo 在 || echo 不在)。" >&2
  echo "机器换过了：从 plan 的第 1 条（start.sh）重新发。" >&2
  exit 3
fi
cat "$1" >> /tmp/model.gguf
ls -l /tmp/model.gguf
