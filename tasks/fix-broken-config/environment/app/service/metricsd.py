#!/usr/bin/env python3
"""metricsd — aggregates metric samples into fixed time windows.

usage: metricsd.py [--config PATH] [--check]

  --check   validate the configuration and exit (0 = valid, 1 = invalid)

Without --check, reads the samples CSV named in the config, aggregates each metric per
window and writes the summary file named in the config.
"""
import argparse
import configparser
import csv
import math
import os
import sys
from datetime import datetime, timezone

DEFAULT_CONFIG = "/app/config/metricsd.ini"
LOG_LEVELS = {"debug", "info", "warning", "error"}
FUNCTIONS = ("count", "min", "max", "mean", "p95")
REQUIRED = {
    "service": ["name", "log_level"],
    "input": ["path", "skip_invalid"],
    "aggregation": ["interval_seconds", "functions"],
    "output": ["path", "precision"],
}


class ConfigError(Exception):
    pass


def load_config(path):
    """Parse and validate the INI file. Returns a dict or raises ConfigError(list of msgs)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except OSError as e:
        raise ConfigError(["cannot read %s: %s" % (path, e.strerror)])
    except configparser.Error as e:
        raise ConfigError(["syntax error: %s" % " ".join(str(e).split())])

    errors = []
    for section, keys in REQUIRED.items():
        if not parser.has_section(section):
            errors.append("missing section [%s]" % section)
            continue
        for key in keys:
            if not parser.has_option(section, key):
                errors.append("[%s] missing key '%s'" % (section, key))
    if errors:
        raise ConfigError(errors)

    cfg = {}
    cfg["name"] = parser.get("service", "name").strip()
    if not cfg["name"]:
        errors.append("[service] name must not be empty")
    level = parser.get("service", "log_level").strip().lower()
    if level not in LOG_LEVELS:
        errors.append("[service] log_level '%s' is not one of %s" % (level, ", ".join(sorted(LOG_LEVELS))))

    cfg["input"] = parser.get("input", "path").strip()
    if not os.path.isabs(cfg["input"]):
        errors.append("[input] path must be absolute, got '%s'" % cfg["input"])
    elif not os.path.isfile(cfg["input"]):
        errors.append("[input] path '%s' does not exist" % cfg["input"])
    try:
        cfg["skip_invalid"] = parser.getboolean("input", "skip_invalid")
    except ValueError:
        errors.append("[input] skip_invalid must be a boolean (yes/no/true/false/on/off/1/0)")

    raw = parser.get("aggregation", "interval_seconds").strip()
    try:
        interval = int(raw)
        if not 60 <= interval <= 86400 or 86400 % interval:
            errors.append("[aggregation] interval_seconds must be between 60 and 86400 and divide 86400, got %d" % interval)
        cfg["interval"] = interval
    except ValueError:
        errors.append("[aggregation] interval_seconds must be an integer number of seconds, got '%s'" % raw)
    raw = parser.get("aggregation", "functions")
    funcs = [f.strip() for f in raw.split(",")]
    bad = [f for f in funcs if f not in FUNCTIONS]
    if bad:
        errors.append("[aggregation] functions: unknown %s (a comma-separated list of %s)"
                      % (", ".join(repr(b) for b in bad), ", ".join(FUNCTIONS)))
    elif len(set(funcs)) != len(funcs):
        errors.append("[aggregation] functions: duplicates in '%s'" % raw.strip())
    cfg["functions"] = funcs

    cfg["output"] = parser.get("output", "path").strip()
    if not os.path.isabs(cfg["output"]):
        errors.append("[output] path must be absolute, got '%s'" % cfg["output"])
    try:
        cfg["precision"] = parser.getint("output", "precision")
        if not 0 <= cfg["precision"] <= 6:
            errors.append("[output] precision must be between 0 and 6")
    except ValueError:
        errors.append("[output] precision must be an integer")

    if errors:
        raise ConfigError(errors)
    return cfg


def parse_ts(text):
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def p95(values):
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


AGG = {
    "count": len,
    "min": min,
    "max": max,
    "mean": lambda v: sum(v) / len(v),
    "p95": p95,
}


def run(cfg):
    windows = {}
    with open(cfg["input"], encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header != ["timestamp", "metric", "value"]:
            print("metricsd: %s: unexpected header %r" % (cfg["input"], header), file=sys.stderr)
            return 1
        for row in reader:
            if not row:
                continue
            try:
                ts, metric, value = row
                when = parse_ts(ts.strip())
                value = float(value)
                if not math.isfinite(value) or not metric.strip():
                    raise ValueError
            except ValueError:
                if cfg["skip_invalid"]:
                    continue
                print("metricsd: %s line %d: invalid sample %r (set [input] skip_invalid to skip such lines)"
                      % (cfg["input"], reader.line_num, ",".join(row)), file=sys.stderr)
                return 1
            epoch = int(when.timestamp())
            start = epoch - epoch % cfg["interval"]
            windows.setdefault((start, metric.strip()), []).append(value)

    lines = ["# %s summary interval=%ds functions=%s" % (cfg["name"], cfg["interval"], ",".join(cfg["functions"]))]
    for (start, metric), values in sorted(windows.items()):
        stamp = datetime.fromtimestamp(start, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        parts = []
        for fn in cfg["functions"]:
            v = AGG[fn](values)
            parts.append("%s=%d" % (fn, v) if fn == "count" else "%s=%.*f" % (fn, cfg["precision"], v))
        lines.append("%s %s %s" % (stamp, metric, " ".join(parts)))
    os.makedirs(os.path.dirname(cfg["output"]), exist_ok=True)
    tmp = cfg["output"] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, cfg["output"])
    print("metricsd: wrote %d windows to %s" % (len(lines) - 1, cfg["output"]))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description="aggregate metric samples into time windows")
    ap.add_argument("--config", default=DEFAULT_CONFIG)
    ap.add_argument("--check", action="store_true", help="validate the configuration and exit")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        for msg in e.args[0]:
            print("config error: %s" % msg, file=sys.stderr)
        return 1
    if args.check:
        print("config OK: %s" % args.config)
        return 0
    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
