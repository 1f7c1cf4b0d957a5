#!/usr/bin/env bash
# Verifier for fix-python-bug: runs the hidden unittest suite against /app/booking/ranges.py.
source "$(dirname "$0")/reward.sh"

MOD=/app/booking/ranges.py
check "module $MOD exists" test -f "$MOD"

# Run the hidden tests from a scratch dir so nothing the agent left in /app/tests interferes.
work=$(mktemp -d)
cp "$(dirname "$0")/test_hidden.py" "$work/"
check "public API unchanged (parse_booking, nights, occupied_nights, merge_bookings)" \
    env PYTHONPATH=/app python3 -c '
import inspect, booking.ranges as r
want = {"parse_booking": ["text"], "nights": ["checkin", "checkout"],
        "occupied_nights": ["checkin", "checkout"], "merge_bookings": ["bookings"]}
for name, params in want.items():
    got = list(inspect.signature(getattr(r, name)).parameters)
    assert got == params, "%s%s, expected %s" % (name, got, params)
'
check "hidden unit tests pass" \
    bash -c "cd '$work' && PYTHONPATH=/app timeout 30 python3 -m unittest test_hidden 2>&1"
rm -rf "$work"
finish
