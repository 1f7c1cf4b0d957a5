"""Independent reference for the report (used to create expected_report.txt at authoring
time, and re-run by the verifier only to print a helpful diff; the verdict uses the stored
expected_report.txt so a tampered /app/inputs cannot change the answer)."""
import hashlib
import os
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "/app/inputs"
rootb = os.fsencode(root)
entries = []
for dirpath, dirnames, filenames in os.walk(rootb):  # does not descend into dir symlinks
    for name in filenames:
        full = os.path.join(dirpath, name)
        if os.path.islink(full) or not os.path.isfile(full):
            continue
        data = open(full, "rb").read()
        rel = os.path.relpath(full, rootb)
        entries.append((rel, hashlib.sha256(data).hexdigest(), len(data), data.count(b"\n")))
entries.sort()
out = b"# inventory of /app/inputs\nfiles: %d\nbytes: %d\n" % (len(entries), sum(e[2] for e in entries))
for rel, h, size, lines in entries:
    out += b"%s  %d  %d  %s\n" % (h.encode(), size, lines, rel)
out += b"digest: %s\n" % hashlib.sha256(out).hexdigest().encode()
sys.stdout.buffer.write(out)
