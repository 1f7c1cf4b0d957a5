#!/usr/bin/env bash
# Verifier for sqlite-report: /app/answer.csv must equal tests/expected_answer.csv
# (computed at authoring time from the seed data, independently of the SQL solution).
source "$(dirname "$0")/reward.sh"

A=/app/answer.csv
EXP="$(dirname "$0")/expected_answer.csv"

check "$A exists" test -f "$A"
if [ -f "$A" ]; then
    check_eq "header line" "country,orders,customers,net_cents" "$(head -n 1 "$A" | tr -d '\r')"
    check_eq "countries (in order)" "$(cut -d, -f1 "$EXP" | tr '\n' ' ')" "$(tr -d '\r' < "$A" | cut -d, -f1 | tr '\n' ' ')"
    check "answer matches the expected report exactly" diff -u "$EXP" "$A"
fi
finish
