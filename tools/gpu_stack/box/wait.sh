#!/bin/bash
# wait.sh 秒数 个数：等到 /tmp/runs 下有「个数」个 eval_after.json 或到时；运行目录（不带 checkpoint）和日志打成一个包
end=$((SECONDS + $1))
while [ $SECONDS -lt $end ]; do
  [ "$(ls /tmp/runs/*/eval_after.json 2>/dev/null | wc -l)" -ge "$2" ] && break
  sleep 10
done
cat /tmp/logs/started
for d in /tmp/runs/*/; do
  b=$(basename "$d")
  echo "== $b"; du -sb "$d"; ls -l --time-style=full-iso "$d" | grep checkpoint; tail -c 300 "/tmp/logs/$b.log"; echo
done
tar czf "$OUT/runs.tgz" --exclude='checkpoint*' -C /tmp runs logs
nvidia-smi --query-gpu=memory.used --format=csv,noheader; df -h /tmp | tail -1
