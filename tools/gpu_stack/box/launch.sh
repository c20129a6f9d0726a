#!/bin/bash
# 在后台起一条训练命令（活过这次调用，直到机器被收回）：launch.sh 参数……；日志在 /tmp/logs/<--out 的目录名>.log
set -e
out=""
prev=""
for a in "$@"; do [ "$prev" = "--out" ] && out=$(basename "$a"); prev=$a; done
[ -n "$out" ] || { echo "launch.sh：命令里要有 --out" >&2; exit 2; }
PYTHONPATH=/tmp/site setsid nohup "$@" > "/tmp/logs/$out.log" 2>&1 < /dev/null &
echo "$(date -u +%T) $out" >> /tmp/logs/started
