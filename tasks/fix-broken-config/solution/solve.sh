#!/usr/bin/env bash
# Reference solution: rewrite the config per the ticket, check it, run the service once.
set -euo pipefail
cat > /app/config/metricsd.ini <<'INI'
; metricsd configuration (repaired for ticket OPS-1142)

[service]
name = metricsd
log_level = info

[input]
path = /app/data/samples.csv
skip_invalid = yes

[aggregation]
interval_seconds = 900
functions = count, mean, p95

[output]
path = /app/out/summary.txt
precision = 1
INI
python3 /app/service/metricsd.py --check
python3 /app/service/metricsd.py
