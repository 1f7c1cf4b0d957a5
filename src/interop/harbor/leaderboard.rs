//! `--leaderboard terminal-bench-2.0`: the submission's `metadata.yaml`, and the checks the
//! leaderboard's submission bot makes, made before anything is written.
//!
//! The bot's rules (the leaderboard dataset's README): `timeout_multiplier` 1.0 and no agent,
//! verifier or resource overrides; every trial dir with a valid `result.json`; pass@k from at
//! least 5 attempts per task. arbiter adds what the bot cannot see but would count wrong: every
//! task of the dataset present, no trial left with an infra error, and (when the dataset's task
//! dirs are at hand) every task run at the dataset's own content.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::HarborError;
use super::model::{SubmissionMetadata, SubmissionModel};
use super::source::{ArbiterJob, task_name_of};

/// The leaderboards arbiter knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leaderboard {
    TerminalBench2,
}

impl Leaderboard {
    pub const NAMES: &'static str = "terminal-bench-2.0";

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "terminal-bench-2.0" => Some(Leaderboard::TerminalBench2),
            _ => None,
        }
    }

    /// Attempts per task the leaderboard's pass@k needs.
    pub fn min_attempts(self) -> u32 {
        match self {
            Leaderboard::TerminalBench2 => 5,
        }
    }
}

/// A submission: the board, its metadata flags, and the dataset's task dirs to hold the job to.
#[derive(Debug, Clone)]
pub struct Submission {
    pub board: Leaderboard,
    pub flags: MetadataFlags,
    /// The dataset directory (a directory of task dirs); default: the one directory holding
    /// all of the job's task dirs.
    pub dataset: Option<PathBuf>,
}

/// The metadata flags as given; each one missing is its own refusal line.
#[derive(Debug, Clone, Default)]
pub struct MetadataFlags {
    pub agent_url: Option<String>,
    pub agent_display_name: Option<String>,
    pub agent_org: Option<String>,
    /// `PROVIDER/NAME:DISPLAY NAME:ORG`, one per model.
    pub models: Vec<String>,
}

/// `--model PROVIDER/NAME:DISPLAY NAME:ORG`.
pub fn parse_model(raw: &str) -> Result<SubmissionModel, String> {
    let mut parts = raw.splitn(3, ':');
    let id = parts.next().unwrap_or_default();
    let (display, org) = (parts.next(), parts.next());
    let Some((provider, name)) = id.split_once('/') else {
        return Err(format!(
            "expected PROVIDER/NAME:DISPLAY NAME:ORG, as anthropic/claude-sonnet-4-5:Claude Sonnet 4.5:Anthropic (got {raw:?})"
        ));
    };
    let (Some(display), Some(org)) = (display, org) else {
        return Err(format!(
            "{raw:?} needs its display name and organisation: PROVIDER/NAME:DISPLAY NAME:ORG"
        ));
    };
    if [provider, name, display, org]
        .iter()
        .any(|s| s.trim().is_empty())
    {
        return Err(format!(
            "{raw:?}: no part of PROVIDER/NAME:DISPLAY NAME:ORG may be empty"
        ));
    }
    Ok(SubmissionModel {
        model_name: name.to_string(),
        model_provider: provider.to_string(),
        model_display_name: display.to_string(),
        model_org_display_name: org.to_string(),
    })
}

/// The metadata, or one refusal line per missing or malformed flag.
pub fn metadata(flags: &MetadataFlags) -> Result<SubmissionMetadata, HarborError> {
    let mut problems = Vec::new();
    let mut need = |v: &Option<String>, flag: &str, field: &str| match v {
        Some(s) if !s.trim().is_empty() => s.clone(),
        _ => {
            problems.push(format!(
                "metadata.yaml:{field}: required by the leaderboard; give {flag}"
            ));
            String::new()
        }
    };
    let agent_url = need(&flags.agent_url, "--agent-url URL", "agent_url");
    let agent_display_name = need(
        &flags.agent_display_name,
        "--agent-display-name NAME",
        "agent_display_name",
    );
    let agent_org = need(
        &flags.agent_org,
        "--agent-org ORG",
        "agent_org_display_name",
    );
    let mut models = Vec::new();
    if flags.models.is_empty() {
        problems.push(
            "metadata.yaml:models: required by the leaderboard; give --model PROVIDER/NAME:DISPLAY NAME:ORG for each model the agent used".into(),
        );
    }
    for raw in &flags.models {
        match parse_model(raw) {
            Ok(m) => models.push(m),
            Err(e) => problems.push(format!("--model: {e}")),
        }
    }
    if !problems.is_empty() {
        return Err(HarborError::Refused(problems));
    }
    Ok(SubmissionMetadata {
        agent_url,
        agent_display_name,
        agent_org_display_name: agent_org,
        models,
    })
}

/// The task dirs of a dataset directory (the directories in it that have a `task.toml`).
fn dataset_tasks(dir: &Path) -> Result<BTreeMap<String, PathBuf>, HarborError> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(HarborError::io(dir))? {
        let path = entry.map_err(HarborError::io(dir))?.path();
        if path.join("task.toml").is_file() {
            out.insert(task_name_of(&path), path);
        }
    }
    Ok(out)
}

/// The dataset directory to hold the job to.
fn dataset_dir(job: &ArbiterJob, sub: &Submission) -> Result<PathBuf, HarborError> {
    if let Some(d) = &sub.dataset {
        return Ok(d.clone());
    }
    let parents: BTreeSet<PathBuf> = job
        .task_dirs
        .iter()
        .filter_map(|d| d.parent().map(Path::to_path_buf))
        .collect();
    match parents.len() {
        1 => Ok(parents.into_iter().next().expect("one")),
        _ => Err(HarborError::input(
            job.dir.join("job.yaml").display(),
            "tasks",
            "the job's tasks are not all in one dataset directory; name the dataset with --dataset DIR",
        )),
    }
}

/// The metadata, or everything the submission bot would refuse (or count wrong) in this job
/// and its metadata, one line each.
pub fn check(job: &ArbiterJob, sub: &Submission) -> Result<SubmissionMetadata, HarborError> {
    let jsonl = job.dir.join("trials.jsonl").display().to_string();
    let yaml = job.dir.join("job.yaml").display().to_string();
    let (metadata, mut problems) = match metadata(&sub.flags) {
        Ok(m) => (Some(m), Vec::new()),
        Err(HarborError::Refused(lines)) => (None, lines),
        Err(other) => return Err(other),
    };

    let arms: BTreeSet<(&str, &str)> = job
        .records
        .iter()
        .map(|r| (r.agent.as_str(), r.variant.as_str()))
        .collect();
    if arms.len() > 1 {
        let names: Vec<String> = arms.iter().map(|(a, v)| format!("{a}/{v}")).collect();
        problems.push(format!(
            "{yaml}:agents: a submission is one agent configuration; this job has {} ({}): export a job of one",
            arms.len(),
            names.join(", ")
        ));
    }
    for (which, m) in ["agent", "verifier", "build", "install"]
        .iter()
        .zip(job.timeouts)
    {
        if m != 1.0 {
            problems.push(format!(
                "{yaml}:timeouts.{which}: {m}; the leaderboard takes only runs at the tasks' own timeouts (multiplier 1.0)"
            ));
        }
    }
    let infra: Vec<&str> = job
        .records
        .iter()
        .filter(|r| r.is_infra())
        .map(|r| r.id.as_str())
        .collect();
    if !infra.is_empty() {
        problems.push(format!(
            "{jsonl}:infra_error: {} trial(s) ended in a harness error ({}{}); run them again with: arbiter resume {} --retry-infra",
            infra.len(),
            infra.iter().take(3).copied().collect::<Vec<_>>().join(", "),
            if infra.len() > 3 { ", …" } else { "" },
            job.dir.display()
        ));
    }
    // Attempts of each task by each arm (the board reads one arm; more is refused above).
    let mut per_arm_task: BTreeMap<(&str, &str, &str), u32> = BTreeMap::new();
    for r in &job.records {
        *per_arm_task
            .entry((r.task.as_str(), r.agent.as_str(), r.variant.as_str()))
            .or_default() += 1;
    }
    let mut per_task: BTreeMap<&str, u32> = BTreeMap::new();
    for ((task, _, _), n) in &per_arm_task {
        let e = per_task.entry(task).or_insert(*n);
        *e = (*e).min(*n);
    }
    let min = sub.board.min_attempts();
    let short: Vec<String> = per_task
        .iter()
        .filter(|(_, n)| **n < min)
        .map(|(t, n)| format!("{t} ({n})"))
        .collect();
    if !short.is_empty() {
        problems.push(format!(
            "{jsonl}:attempt: the leaderboard's pass@k needs at least {min} attempts per task; {} task(s) have fewer: {}{}; add attempts with: arbiter run -c {yaml} --job-dir {} -k {min}",
            short.len(),
            short.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
            if short.len() > 3 { ", …" } else { "" },
            job.dir.display()
        ));
    }
    let dataset = dataset_dir(job, sub)?;
    let tasks = dataset_tasks(&dataset)?;
    if tasks.is_empty() {
        problems.push(format!(
            "{}:tasks: no task dirs in the dataset directory (give the dataset with --dataset DIR)",
            dataset.display()
        ));
    }
    let missing: Vec<&str> = tasks
        .keys()
        .filter(|t| !per_task.contains_key(t.as_str()))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "{yaml}:tasks: {} task(s) of the dataset {} were not run: {}{}",
            missing.len(),
            dataset.display(),
            missing
                .iter()
                .take(5)
                .copied()
                .collect::<Vec<_>>()
                .join(", "),
            if missing.len() > 5 { ", …" } else { "" }
        ));
    }
    let mut changed = Vec::new();
    for (name, dir) in &tasks {
        let Some(ran) = job.checksums.get(name) else {
            continue;
        };
        if let Ok(task) = crate::task::load(dir)
            && &task.checksum != ran
        {
            changed.push(name.as_str());
        }
    }
    if !changed.is_empty() {
        problems.push(format!(
            "{}:tasks: {} task(s) ran at other content than the dataset's: {}{}",
            job.dir.join("lock.json").display(),
            changed.len(),
            changed
                .iter()
                .take(5)
                .copied()
                .collect::<Vec<_>>()
                .join(", "),
            if changed.len() > 5 { ", …" } else { "" }
        ));
    }
    match metadata {
        Some(m) if problems.is_empty() => Ok(m),
        _ => Err(HarborError::Refused(problems)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_names_provider_name_display_and_org() {
        let m = parse_model("anthropic/claude-sonnet-4-5:Claude Sonnet 4.5:Anthropic").unwrap();
        assert_eq!(m.model_provider, "anthropic");
        assert_eq!(m.model_name, "claude-sonnet-4-5");
        assert_eq!(m.model_display_name, "Claude Sonnet 4.5");
        assert_eq!(m.model_org_display_name, "Anthropic");
        assert!(parse_model("claude").unwrap_err().contains("PROVIDER/NAME"));
        assert!(
            parse_model("a/b:Display")
                .unwrap_err()
                .contains("organisation")
        );
        assert!(parse_model("a/b::Org").unwrap_err().contains("empty"));
    }

    #[test]
    fn each_missing_flag_is_one_line() {
        let Err(HarborError::Refused(lines)) = metadata(&MetadataFlags::default()) else {
            panic!("refused");
        };
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines[0].starts_with("metadata.yaml:agent_url: "));
        let ok = metadata(&MetadataFlags {
            agent_url: Some("https://example.org/agent".into()),
            agent_display_name: Some("Agent".into()),
            agent_org: Some("Org".into()),
            models: vec!["openai/gpt-5:GPT-5:OpenAI".into()],
        })
        .expect("complete");
        assert_eq!(ok.models[0].model_name, "gpt-5");
    }
}
