#!/bin/sh
# Runs in a fresh container from the snapshot: the bomb's processes are gone.
mkdir -p /logs/verifier
if [ -f /app/before ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
