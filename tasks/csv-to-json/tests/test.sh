#!/usr/bin/env bash
# Verifier for csv-to-json: compares /app/out/orders.json with tests/expected.json,
# value by value and type by type (1 != 1.0 != "1" != true).
source "$(dirname "$0")/reward.sh"

OUT=/app/out/orders.json
EXP="$(dirname "$0")/expected.json"

check "$OUT exists and is a regular file" test -f "$OUT"
check "$OUT is valid UTF-8 JSON" python3 -c 'import json,sys; json.load(open(sys.argv[1], encoding="utf-8"))' "$OUT"

if [ "$(failures)" -eq 0 ]; then
    check "content matches the specification" python3 - "$OUT" "$EXP" <<'PY'
import json, sys

got = json.load(open(sys.argv[1], encoding="utf-8"))
exp = json.load(open(sys.argv[2], encoding="utf-8"))

def canon(v):
    # type-exact canonical form: bool/int/float/str/None are distinguished by json.dumps
    return json.dumps(v, sort_keys=True, ensure_ascii=True)

problems = []
if not isinstance(got, dict):
    print("top level must be an object, got %s" % type(got).__name__)
    sys.exit(1)
if set(got) != set(exp):
    problems.append("top-level keys %s, expected %s" % (sorted(got), sorted(exp)))
for k in ("count", "total_cents"):
    if canon(got.get(k)) != canon(exp[k]):
        problems.append("%s = %s, expected %s" % (k, canon(got.get(k)), canon(exp[k])))
orders = got.get("orders")
if not isinstance(orders, list):
    problems.append("orders must be an array")
else:
    ids = [o.get("id") if isinstance(o, dict) else None for o in orders]
    exp_ids = [o["id"] for o in exp["orders"]]
    if ids != exp_ids:
        problems.append("order ids (in file order) %s, expected %s" % (ids, exp_ids))
    by_id = {o["id"]: o for o in exp["orders"]}
    for o in orders:
        if not isinstance(o, dict):
            problems.append("order entry is not an object: %r" % (o,))
            continue
        e = by_id.get(o.get("id"))
        if e is None:
            continue
        if set(o) != set(e):
            problems.append("order %s: keys %s, expected %s" % (o.get("id"), sorted(o), sorted(e)))
        for k in e:
            if k in o and canon(o[k]) != canon(e[k]):
                problems.append("order %s: %s = %s, expected %s" % (o["id"], k, canon(o[k]), canon(e[k])))
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
PY
fi
finish
