#!/usr/bin/env bash
# Reference solution: parse with the csv module, exact decimal arithmetic for cents.
set -euo pipefail
mkdir -p /app/out
python3 - <<'PY'
import csv, json
from decimal import Decimal

def cents(amount):
    a = amount.strip().lstrip("$").replace(",", "")
    return int((Decimal(a) * 100).to_integral_exact())

orders = []
with open("/app/data/orders.csv", encoding="utf-8-sig", newline="") as f:
    for row in csv.DictReader(f):
        status = row["status"].strip().lower()
        if status == "cancelled":
            continue
        note = row["note"].strip().replace("\r\n", "\n").replace("\r", "\n")
        orders.append({
            "id": int(row["order_id"]),
            "customer": row["customer"].strip(),
            "email": row["email"].strip().lower(),
            "items": [i.strip() for i in row["items"].split(";") if i.strip()],
            "total_cents": cents(row["amount"]),
            "status": status,
            "note": note or None,
        })
orders.sort(key=lambda o: o["id"])
out = {"count": len(orders), "total_cents": sum(o["total_cents"] for o in orders), "orders": orders}
with open("/app/out/orders.json", "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, indent=2)
    f.write("\n")
PY
