#!/bin/sh
# A careless verifier: prints its own secret and whatever the agent left behind.
mkdir -p /logs/verifier
echo "verifier token: $VERIFIER_TOKEN"
echo "verifier token: $VERIFIER_TOKEN" > /logs/verifier/debug.txt
cat /app/loot/* 2>/dev/null
echo 1 > /logs/verifier/reward.txt
