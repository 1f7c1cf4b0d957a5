#!/bin/sh
mkdir -p /logs/verifier
if [ -f /app/out.md ] && [ ! -L /app/out.md ] && [ -s /app/out.md ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
