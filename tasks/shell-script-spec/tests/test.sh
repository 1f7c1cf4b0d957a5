#!/usr/bin/env bash
# Verifier for shell-script-spec: runs /app/wordfreq.sh on many inputs and compares stdout,
# stderr emptiness and exit status with a reference implementation (tests/check_wordfreq.py).
source "$(dirname "$0")/reward.sh"

S=/app/wordfreq.sh
check "$S exists" test -f "$S"
check "$S is executable" test -x "$S"
check "$S has a shebang" bash -c "head -c 2 '$S' | grep -q '^#!'"
if [ "$(failures)" -eq 0 ]; then
    check "behaviour matches the specification on all cases" \
        python3 "$(dirname "$0")/check_wordfreq.py" "$S"
fi
finish
