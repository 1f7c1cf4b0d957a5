#!/bin/sh
# Disk fill: write 16 MiB files until stopped (at most 640 MiB, so that a broken limit cannot
# hurt the machine running the test).
i=0
while [ "$i" -lt 40 ]; do
  dd if=/dev/zero of="/app/fill.$i" bs=1M count=16 2>/dev/null
  i=$((i + 1))
  sleep 0.2
done
echo 42 > /app/answer
