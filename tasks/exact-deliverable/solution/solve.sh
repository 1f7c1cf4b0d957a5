#!/usr/bin/env bash
# Reference solution (bash + coreutils + findutils).
set -euo pipefail
export LC_ALL=C
cd /app/inputs
mkdir -p /app/out
tmp=$(mktemp)
body=$(mktemp)
n=0
total=0
while IFS= read -r -d '' f; do
    sum=$(sha256sum < "$f" | cut -c1-64)
    size=$(stat -c %s -- "$f")
    lines=$(wc -l < "$f")
    printf '%s  %s  %s  %s\n' "$sum" "$size" "$lines" "$f" >> "$body"
    n=$((n + 1))
    total=$((total + size))
done < <(find . -type f -printf '%P\0' | sort -z)
{
    echo "# inventory of /app/inputs"
    echo "files: $n"
    echo "bytes: $total"
    cat "$body"
} > "$tmp"
echo "digest: $(sha256sum < "$tmp" | cut -c1-64)" >> "$tmp"
mv "$tmp" /app/out/report.txt
chmod 644 /app/out/report.txt
rm -f "$body"
cat /app/out/report.txt
