#!/usr/bin/env bash
# Verifier for fix-broken-config.
source "$(dirname "$0")/reward.sh"

SVC=/app/service/metricsd.py
CFG=/app/config/metricsd.ini
OUT=/app/out/summary.txt
EXP="$(dirname "$0")/expected_summary.txt"

# The service and the data must be untouched: only the config may change.
check "service code unchanged" bash -c "echo '7df572d06a77ab040c3a33f0b7ac5599c78664f51d82707e5fb6182d8676868b  $SVC' | sha256sum -c --quiet"
check "sample data unchanged"  bash -c "echo 'e88f77c72866f3bfe292e45b38c5342b78d606f3d427bffe68702242b5bd7409  /app/data/samples.csv' | sha256sum -c --quiet"
check "config file exists" test -f "$CFG"
check "metricsd --check succeeds" timeout 20 python3 "$SVC" --check
check "[service] log_level is info" python3 -c '
import configparser, sys
p = configparser.ConfigParser(interpolation=None); p.read(sys.argv[1])
v = p.get("service", "log_level", fallback="<missing>").strip().lower()
assert v == "info", "log_level = %r" % v' "$CFG"

# The summary the agent left behind must be the right one ...
check "$OUT exists" test -f "$OUT"
[ -f "$OUT" ] && check "$OUT matches the ticket (15-min windows, count/mean/p95, 1 decimal, bad lines skipped)" \
    diff -u "$EXP" "$OUT"

# ... and the repaired config must reproduce it (the file was not hand-written).
[ -f "$OUT" ] && mv "$OUT" /tmp/summary.agent.txt
check "running metricsd with the repaired config succeeds" timeout 20 python3 "$SVC"
check "a fresh run writes the expected summary to $OUT" diff -u "$EXP" "$OUT"
finish
