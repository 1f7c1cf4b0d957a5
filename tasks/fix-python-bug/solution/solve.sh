#!/usr/bin/env bash
# Reference solution: fix the three bugs in place.
set -euo pipefail
python3 - <<'PY'
import re
p = "/app/booking/ranges.py"
s = open(p).read()
s = s.replace("if checkout < checkin:", "if checkout <= checkin:")
s = s.replace('"checkout %s is before checkin %s"', '"checkout %s is not after checkin %s"')
s = s.replace("range(nights(checkin, checkout) + 1)", "range(nights(checkin, checkout))")
s = s.replace("for checkin, checkout in bookings:", "for checkin, checkout in sorted(bookings):")
s = s.replace("if blocks and checkin < blocks[-1][1]:", "if blocks and checkin <= blocks[-1][1]:")
open(p, "w").write(s)
PY
cd /app && python3 -m unittest discover -s tests
