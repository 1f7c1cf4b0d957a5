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
from harbor.metrics.mean import Mean
from harbor.models.job.result import JobStats
from harbor.models.task.task import Task
from harbor.utils.pass_at_k import compute_pass_at_k_by_evals


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


def same_stats(job, trials):
    """Our job stats against Harbor's own computation over the same trial results."""
    ours = job.stats
    theirs = JobStats.from_trial_results(trials, n_total_trials=len(trials))
    for key, rewards in group_rewards(trials).items():
        theirs.evals[key].metrics.append(Mean().compute(rewards))
    for key, pass_at_k in compute_pass_at_k_by_evals(trials).items():
        theirs.evals[key].pass_at_k = pass_at_k
    diffs = []
    for field in ("n_completed_trials", "n_errored_trials", "n_cancelled_trials",
                  "n_input_tokens", "n_output_tokens", "n_cache_tokens"):
        if getattr(ours, field) != getattr(theirs, field):
            diffs.append(f"{field}: {getattr(ours, field)} != {getattr(theirs, field)}")
    if set(ours.evals) != set(theirs.evals):
        diffs.append(f"evals: {sorted(ours.evals)} != {sorted(theirs.evals)}")
    for key in set(ours.evals) & set(theirs.evals):
        a, b = ours.evals[key], theirs.evals[key]
        for field in ("n_trials", "n_errors", "pass_at_k", "metrics"):
            if getattr(a, field) != getattr(b, field):
                diffs.append(f"{key}.{field}: {getattr(a, field)} != {getattr(b, field)}")
        as_sets = lambda d: {k: set(v) for k, v in d.items()}  # noqa: E731
        if as_sets(a.exception_stats) != as_sets(b.exception_stats):
            diffs.append(f"{key}.exception_stats differ")
        nested = lambda d: {k: {float(x): set(v) for x, v in m.items()} for k, m in d.items()}  # noqa: E731
        if nested(a.reward_stats) != nested(b.reward_stats):
            diffs.append(f"{key}.reward_stats differ")
    return diffs


def checksum_problem(trial):
    """Harbor's own checksum of the task dir, where it still exists, against task_checksum
    (arbiter writes its own `sha256:` digest only where it could not compute Harbor's)."""
    path = trial.config.task.path
    if path is None or not Path(path).is_dir() or trial.task_checksum.startswith("sha256:"):
        return None
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = Task(path).checksum
    if theirs != trial.task_checksum:
        return f"task_checksum {trial.task_checksum} is not Harbor's {theirs} of {path}"
    return None


def group_rewards(trials):
    out = {}
    for t in trials:
        key = JobStats.format_agent_evals_key(
            t.agent_info.name, t.agent_info.model_info.name if t.agent_info.model_info else None,
            t.source or "adhoc")
        if t.reward_valid and t.verifier_result is not None:
            out.setdefault(key, []).append(t.verifier_result.rewards)
    return out


def main(folders):
    problems = 0
    for folder in map(Path, folders):
        files = [(JobConfig, folder / "config.json"), (JobResult, folder / "result.json")]
        for trial in sorted(p for p in folder.iterdir() if (p / "result.json").is_file()):
            files.append((TrialConfig, trial / "config.json"))
            files.append((TrialResult, trial / "result.json"))
        job, trials = None, []
        for model, path in files:
            try:
                obj = check(model, path)
                extra = ""
                if isinstance(obj, TrialResult):
                    extra = f" reward_valid={obj.reward_valid}"
                    trials.append(obj)
                    problem = checksum_problem(obj)
                    if problem:
                        raise ValueError(problem)
                if isinstance(obj, JobResult):
                    job = obj
                print(f"ok {model.__name__} {path}{extra}")
            except Exception as e:  # noqa: BLE001 - every refusal is reported
                problems += 1
                first = str(e).replace("\n", " | ")
                print(f"REFUSED {model.__name__} {path}: {first}")
        if job is not None:
            diffs = same_stats(job, trials)
            for d in diffs:
                problems += 1
                print(f"STATS {folder}: {d}")
            if not diffs:
                print(f"ok stats {folder}: as Harbor computes them")
    print(f"{problems} refused")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
