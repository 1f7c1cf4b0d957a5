# reward.sh — tiny reusable helper for arbiter / Harbor task verifiers.
#
# Copy this file into a task's tests/ directory and source it from tests/test.sh:
#
#     source "$(dirname "$0")/reward.sh"
#     check "report exists"            test -f /app/out/report.txt
#     check_eq "line count" 7 "$(wc -l < /app/out/report.txt)"
#     finish
#
# Every check prints PASS/FAIL with its description (and the failing command's output),
# and failures are counted. `finish` writes /logs/verifier/reward.txt: `1` if at least one
# check ran and none failed, else `0`. If the script exits before `finish` (error, `exit`,
# `set -e` abort), an EXIT trap still writes `0`, so a reward file is ALWAYS produced.
#
# Deliberately bash-only (no python needed), safe under `set -u`, never `set -e`-fatal.

REWARD_DIR="${REWARD_DIR:-/logs/verifier}"
_RW_CHECKS=0
_RW_FAILS=0
_RW_FINISHED=0

# check "<description>" cmd [args...]  — passes when cmd exits 0. Output shown only on failure.
check() {
    local desc="$1"; shift
    local out rc
    _RW_CHECKS=$((_RW_CHECKS + 1))
    out="$("$@" 2>&1)"; rc=$?
    if [ "$rc" -eq 0 ]; then
        echo "PASS: $desc"
        return 0
    fi
    _RW_FAILS=$((_RW_FAILS + 1))
    echo "FAIL: $desc (exit $rc)"
    [ -n "$out" ] && printf '%s\n' "$out" | head -n 60 | sed 's/^/    | /'
    return 1
}

# check_eq "<description>" expected actual  — string equality, shows both on failure.
check_eq() {
    local desc="$1" expected="$2" actual="$3"
    _RW_CHECKS=$((_RW_CHECKS + 1))
    if [ "$expected" == "$actual" ]; then
        echo "PASS: $desc"
        return 0
    fi
    _RW_FAILS=$((_RW_FAILS + 1))
    echo "FAIL: $desc"
    printf '    expected: %q\n    actual:   %q\n' "$expected" "$actual"
    return 1
}

# fail "<description>" ["reason"]  — record an unconditional failure.
fail() {
    _RW_CHECKS=$((_RW_CHECKS + 1))
    _RW_FAILS=$((_RW_FAILS + 1))
    echo "FAIL: $1${2:+ — $2}"
    return 1
}

# failures  — prints the number of failed checks so far (e.g. to skip dependent checks).
failures() { echo "$_RW_FAILS"; }

_rw_write() {
    mkdir -p "$REWARD_DIR" 2>/dev/null
    echo "$1" > "$REWARD_DIR/reward.txt"
}

# finish  — write reward.txt (1 iff >=1 check and 0 failures), print a summary, exit 0.
finish() {
    _RW_FINISHED=1
    local reward=0
    if [ "$_RW_CHECKS" -gt 0 ] && [ "$_RW_FAILS" -eq 0 ]; then reward=1; fi
    _rw_write "$reward"
    echo "checks: $_RW_CHECKS, failed: $_RW_FAILS, reward: $reward"
    exit 0
}

_rw_on_exit() {
    if [ "$_RW_FINISHED" -eq 0 ]; then
        echo "verifier exited before finish (checks: $_RW_CHECKS, failed: $_RW_FAILS): reward 0"
        _rw_write 0
    fi
}
trap _rw_on_exit EXIT
