#!/usr/bin/env bash
# Verifier for exact-deliverable: /app/out/report.txt must equal tests/expected_report.txt
# byte for byte; the extra checks explain what is wrong when it does not.
source "$(dirname "$0")/reward.sh"
export LC_ALL=C

R=/app/out/report.txt
EXP="$(dirname "$0")/expected_report.txt"

is_regular_file()   { test -f "$R" && ! test -L "$R"; }
ends_with_newline() { test -s "$R" && test -z "$(tail -c 1 "$R")"; }
no_cr()             { ! grep -c $'\r' "$R"; }
no_blank_or_trailing_space() { ! grep -nE ' $|^$' "$R"; }
digest_consistent() {
    local want got
    want="digest: $(head -n -1 "$R" | sha256sum | cut -c1-64)"
    got="$(tail -n 1 "$R")"
    [ "$got" = "$want" ] || { echo "last line: $got"; echo "expected:  $want"; return 1; }
}

check "$R exists and is a regular file (not a symlink)" is_regular_file
if [ -f "$R" ]; then
    check "ends with a newline" ends_with_newline
    check "no CR bytes" no_cr
    check "no trailing spaces, no blank lines" no_blank_or_trailing_space
    check_eq "number of lines" "$(wc -l < "$EXP")" "$(wc -l < "$R")"
    check "digest line is the sha256 of the preceding lines" digest_consistent
    check "report matches the expected inventory byte for byte" diff -u "$EXP" "$R"
fi
finish
