"""Write tests/fixtures/harbor-folder: a small Harbor job folder as Harbor 0.26 writes one,
built with Harbor's own models (naive timestamps, computed fields, every default), for
tests/harbor_folders.rs to import. Run with the venv of scripts/harbor-venv:

    $(scripts/harbor-venv path) tests/harbor/make_fixture.py tests/fixtures/harbor-folder
"""

import json
import sys
from datetime import datetime, timedelta
from pathlib import Path
from uuid import UUID

from harbor.models.agent.context import AgentContext
from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult, JobStats
from harbor.models.task.id import LocalTaskId
from harbor.models.trial.config import AgentConfig, TaskConfig, TrialConfig
from harbor.models.trial.result import (
    AgentInfo, ExceptionInfo, ModelInfo, TimingInfo, TrialResult)
from harbor.models.verifier.result import VerifierResult

T0 = datetime(2026, 11, 30, 2, 31, 48)
JOB_ID = UUID("00000000-0000-4000-8000-000000000001")
AGENT = AgentConfig(name="terminus-2", model_name="anthropic/claude-sonnet-4-5")

# trial name, task, reward (None: no verifier result), exception type, message
TRIALS = [
    ("hello__AAAAAAA", "hello", 1.0, None, None),
    ("hello__BBBBBBB", "hello", 0.0, None, None),
    ("hello__CCCCCCC", "hello", 0.0, "AgentTimeoutError", "Agent execution timed out after 900.0 seconds"),
    ("hello__DDDDDDD", "hello", 1.0, "NonZeroAgentExitCodeError",
     "Command failed (exit 2): claude -p ...\nstdout: \nstderr: boom"),
    ("build__EEEEEEE", "build", None, "SandboxBuildFailedError", "docker build failed"),
    ("build__FFFFFFF", "build", None, "VerifierTimeoutError", "Verifier timed out after 600 seconds"),
    ("build__GGGGGGG", "build", None, "ApiRateLimitError", "429 Too Many Requests"),
    ("build__HHHHHHH", "build", 1.0, None, None),
]


def timing(start, seconds):
    return TimingInfo(started_at=start, finished_at=start + timedelta(seconds=seconds))


def main(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = JobConfig(job_name="2026-11-30__02-31-48", n_attempts=4, agents=[AGENT],
                       tasks=[TaskConfig(path=Path("tasks/hello")), TaskConfig(path=Path("tasks/build"))])
    (out / "config.json").write_text(config.model_dump_json(indent=4))
    results = []
    for i, (name, task, reward, exc, message) in enumerate(TRIALS):
        start = T0 + timedelta(seconds=10 * i)
        trial_config = TrialConfig(task=TaskConfig(path=Path(f"tasks/{task}")), trial_name=name,
                                   trials_dir=Path("jobs/2026-11-30__02-31-48"), agent=AGENT,
                                   job_id=JOB_ID)
        result = TrialResult(
            id=UUID(int=i + 1), task_name=task, trial_name=name,
            trial_uri=f"file:///jobs/2026-11-30__02-31-48/{name}",
            task_id=LocalTaskId(path=Path(f"tasks/{task}")), source=None,
            task_checksum="0" * 64, config=trial_config,
            agent_info=AgentInfo(name="terminus-2", version="2.0.0",
                                 model_info=ModelInfo(name="claude-sonnet-4-5", provider="anthropic")),
            agent_result=AgentContext(n_input_tokens=1200, n_cache_tokens=200, n_output_tokens=300,
                                      cost_usd=0.01),
            verifier_result=None if reward is None else VerifierResult(rewards={"reward": reward}),
            verifier_environment_mode="shared",
            exception_info=None if exc is None else ExceptionInfo(
                exception_type=exc, exception_message=message, exception_traceback="Traceback ...",
                occurred_at=start + timedelta(seconds=8)),
            started_at=start, finished_at=start + timedelta(seconds=9),
            environment_setup=timing(start, 1.0), agent_setup=timing(start + timedelta(seconds=1), 0.5),
            agent_execution=timing(start + timedelta(seconds=1.5), 5.0),
            verifier=None if reward is None else timing(start + timedelta(seconds=6.5), 2.0),
        )
        results.append(result)
        d = out / name
        (d / "agent").mkdir(parents=True, exist_ok=True)
        (d / "verifier").mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(trial_config.model_dump_json(indent=4))
        (d / "result.json").write_text(result.model_dump_json(indent=4))
        (d / "trial.log").write_text("trial log\n")
        (d / "agent" / "trajectory.json").write_text(json.dumps(
            {"schema_version": "ATIF-v1.4", "session_id": name,
             "agent": {"name": "terminus-2", "version": "2.0.0"}, "steps": []}, indent=2))
        if reward is not None:
            (d / "verifier" / "reward.txt").write_text(f"{int(reward)}\n")
            (d / "verifier" / "test-stdout.txt").write_text("tests ran\n")
    job = JobResult(id=JOB_ID, started_at=T0, finished_at=T0 + timedelta(seconds=90),
                    n_total_trials=len(results),
                    stats=JobStats.from_trial_results(results, n_total_trials=len(results)))
    (out / "result.json").write_text(job.model_dump_json(indent=4, exclude={"trial_results"}))


if __name__ == "__main__":
    main(sys.argv[1])
