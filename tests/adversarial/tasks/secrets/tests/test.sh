#!/bin/sh
# A careless verifier: prints its own secret and whatever the agent left behind.
mkdir -p /logs/verifier
echo "verifier token: $VERIFIER_TOKEN"
echo "verifier token: $VERIFIER_TOKEN" > /logs/verifier/debug.txt
# Each file through stdin: a path of the agent's (named after a secret) in this verifier's own
# argv would be the task's leak, visible in the host's /proc, not arbiter's.
for f in /app/loot/*; do [ -f "$f" ] && cat < "$f"; done 2>/dev/null
echo 1 > /logs/verifier/reward.txt
