"""Load every file of a Harbor job folder with Harbor's own pydantic models.

Usage: python validate.py JOB_FOLDER [JOB_FOLDER...]

Each job folder's config.json (JobConfig) and result.json (JobResult), and each trial dir's
config.json (TrialConfig) and result.json (TrialResult), are loaded with
`model_validate_json`. Pydantic ignores keys a model does not have, so each file is also held
to the model's own dump: a key the model does not write is a misnamed field. Prints one line
per file; exits 1 on the first problem of any file, after printing all of them.
"""

import json
import sys
from pathlib import Path

from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.result import TrialResult


def unknown_keys(ours, theirs, path=""):
    """Keys of `ours` (our JSON) that the model's dump `theirs` lacks, as dotted paths."""
    out = []
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for k, v in ours.items():
            if k not in theirs:
                out.append(f"{path}{k}")
            else:
                out.extend(unknown_keys(v, theirs[k], f"{path}{k}."))
    elif isinstance(ours, list) and isinstance(theirs, list):
        for i, (a, b) in enumerate(zip(ours, theirs)):
            out.extend(unknown_keys(a, b, f"{path}{i}."))
    return out


# Free-form dicts whose keys are data, not fields.
FREE = ("metadata", "kwargs", "rewards", "evals", "pass_at_k", "reward_stats",
        "exception_stats", "model_usage", "env")


def strip_free(value):
    if isinstance(value, dict):
        return {k: ({} if k in FREE else strip_free(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [strip_free(v) for v in value]
    return value


def check(model, path):
    text = path.read_text()
    obj = model.model_validate_json(text)
    dumped = obj.model_dump(mode="json")
    extra = unknown_keys(strip_free(json.loads(text)), strip_free(dumped))
    if extra:
        raise ValueError(f"keys {model.__name__} has no field for: {', '.join(extra)}")
    return obj


def main(folders):
    problems = 0
    for folder in map(Path, folders):
        files = [(JobConfig, folder / "config.json"), (JobResult, folder / "result.json")]
        for trial in sorted(p for p in folder.iterdir() if (p / "result.json").is_file()):
            files.append((TrialConfig, trial / "config.json"))
            files.append((TrialResult, trial / "result.json"))
        for model, path in files:
            try:
                obj = check(model, path)
                extra = ""
                if isinstance(obj, TrialResult):
                    extra = f" reward_valid={obj.reward_valid}"
                print(f"ok {model.__name__} {path}{extra}")
            except Exception as e:  # noqa: BLE001 - every refusal is reported
                problems += 1
                first = str(e).replace("\n", " | ")
                print(f"REFUSED {model.__name__} {path}: {first}")
    print(f"{problems} refused")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
