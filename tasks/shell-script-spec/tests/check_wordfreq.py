"""Runs wordfreq.sh on a set of cases and compares with a reference implementation."""
import collections
import os
import re
import subprocess
import sys
import tempfile

SCRIPT = sys.argv[1]
work = tempfile.mkdtemp()


def write(name, data):
    path = os.path.join(work, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


text1 = b"The quick brown fox jumps over the lazy dog. The dog didn't care;\n" \
        b"the fox, however, jumped AGAIN -- and again, and again (3 times in 2024).\n"
text2 = (b"Zebra apple Apple zebra apple\r\nmango\tMango  mango-MANGO\r\n"
         b"abc123def caf\xc3\xa9 na\xc3\xafve o'clock don't won't\n")
ties = b"delta charlie bravo alpha echo alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima\n"
nonl = b"last line without newline last"
f1 = write("one.txt", text1)
f2 = write("two words.txt", text2)  # space in the name
f3 = write("ties.txt", ties)
f4 = write("nonl.txt", nonl)
empty = write("empty.txt", b"")
nowords = write("nowords.txt", b"123 456 -- ... !!! \xc3\xa9\xc3\xa9 \n\n\t\n")
unreadable = write("secret.txt", b"secret words\n")
os.chmod(unreadable, 0)
missing = os.path.join(work, "does-not-exist.txt")


def reference(args, stdin):
    n, fold, files = 10, False, []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-i":
            fold = True
        elif a == "-n":
            n = args[i + 1]
            i += 1
        elif a.startswith("-n") and len(a) > 2:
            n = a[2:]
        else:
            files = args[i:]
            break
        i += 1
    data = b""
    for f in files or ["-"]:
        data += stdin if f == "-" else open(f, "rb").read()
    if fold:
        data = data.lower()
    counts = collections.Counter(re.findall(rb"[A-Za-z]+", data))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: int(n)]
    return b"".join(b"%d %s\n" % (c, w) for w, c in ranked)


# (description, args, stdin, expected exit status or None for "success, compare output")
cases = [
    ("default N, one file", [f1], b"", None),
    ("-n 3", ["-n", "3", f1], b"", None),
    ("-n3 (attached value)", ["-n3", f1], b"", None),
    ("-i", ["-i", f1], b"", None),
    ("-i -n 2", ["-i", "-n", "2", f1], b"", None),
    ("-n 4 -i (other order)", ["-n", "4", "-i", f1], b"", None),
    ("case-sensitive byte order of ties", [f2], b"", None),
    ("-i merges cases", ["-i", f2], b"", None),
    ("digits/apostrophes/non-ASCII split words, file name with space", ["-n", "50", f2], b"", None),
    ("many ties, default N=10 cut", [f3], b"", None),
    ("N larger than number of words", ["-n", "100", f3], b"", None),
    ("file without trailing newline", [f4], b"", None),
    ("stdin when no file", ["-n", "5"], text1, None),
    ("'-' means stdin, between files", ["-n", "7", f3, "-", f4], b"alpha Omega omega alpha\n", None),
    ("several files concatenated", ["-i", "-n", "6", f1, f2, f4], b"", None),
    ("empty file prints nothing", [empty], b"", None),
    ("input without words prints nothing", ["-i", nowords], b"", None),
    ("empty stdin prints nothing", [], b"", None),
    ("-n 007 is 7", ["-n", "007", f3], b"", None),
    ("-n 0 rejected", ["-n", "0", f1], b"", 2),
    ("-n -3 rejected", ["-n", "-3", f1], b"", 2),
    ("-n abc rejected", ["-n", "abc", f1], b"", 2),
    ("-n 5x rejected", ["-n", "5x", f1], b"", 2),
    ("-n without value rejected", ["-n"], b"", 2),
    ("unknown option rejected", ["-x", f1], b"", 2),
    ("missing file", [missing], b"", 1),
    ("missing file after a good one: no partial output", [f1, missing], b"", 1),
]
if os.geteuid() != 0:  # root can read mode-000 files, so only meaningful for other users
    cases.append(("unreadable file", [unreadable], b"", 1))

failed = 0
for desc, args, stdin, want_rc in cases:
    try:
        p = subprocess.run([SCRIPT] + args, input=stdin, capture_output=True, timeout=5, cwd=work)
    except subprocess.TimeoutExpired:
        print("FAIL %-60s timed out (reads stdin when it should not?)" % desc)
        failed += 1
        continue
    problems = []
    if want_rc is None:
        want = reference(args, stdin)
        if p.returncode != 0:
            problems.append("exit status %d, expected 0 (stderr: %r)" % (p.returncode, p.stderr[:200]))
        if p.stdout != want:
            problems.append("stdout differs\n      expected: %r\n      got:      %r" % (want, p.stdout))
    else:
        if p.returncode != want_rc:
            problems.append("exit status %d, expected %d" % (p.returncode, want_rc))
        if p.stdout:
            problems.append("stdout must be empty on error, got %r" % p.stdout[:200])
        if not p.stderr.strip():
            problems.append("expected an error message on stderr")
    shown = " ".join(os.path.basename(a) if a.startswith(work) else a for a in args)
    if problems:
        failed += 1
        print("FAIL %-60s [wordfreq.sh %s]" % (desc, shown))
        for pr in problems:
            print("      " + pr)
print("%d/%d cases passed" % (len(cases) - failed, len(cases)))
sys.exit(1 if failed else 0)
