//! An arbiter job directory read for export: the resolved config (`job.yaml`), the lock, the
//! job id and the trial records. Read-only; every problem names its file.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::HarborError;
use crate::trial::TrialRecord;

/// One agent of the job, as `job.yaml` lists it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct AgentDef {
    pub kind: Option<String>,
    pub version: Option<String>,
    /// `provider`, `name` of its `model:`.
    pub model: Option<(String, String)>,
}

/// A job directory's records and what its config says.
#[derive(Debug, Clone)]
pub(crate) struct ArbiterJob {
    pub dir: PathBuf,
    pub name: String,
    pub job_id: Option<String>,
    pub attempts: u32,
    pub concurrency: u32,
    pub max_retries: u32,
    pub pass_threshold: f64,
    /// agent, verifier, build, install.
    pub timeouts: [f64; 4],
    /// Task directories in config order.
    pub task_dirs: Vec<PathBuf>,
    /// Task name → its directory.
    pub task_dir_of: BTreeMap<String, PathBuf>,
    /// Task name → the checksum the job ran it at (`lock.json`).
    pub checksums: BTreeMap<String, String>,
    pub agents: BTreeMap<String, AgentDef>,
    /// Agent names in config order.
    pub agent_order: Vec<String>,
    /// The final record of each trial, in file order (a later line of the same id wins).
    pub records: Vec<TrialRecord>,
}

/// The `[task] name` of a task dir, else the dir's name (as arbiter names tasks).
pub(crate) fn task_name_of(dir: &Path) -> String {
    let from_toml = std::fs::read_to_string(dir.join("task.toml"))
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .and_then(|t| t.get("task")?.get("name")?.as_str().map(str::to_string));
    from_toml.unwrap_or_else(|| {
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    })
}

fn f64_at(v: &serde_yaml::Value, key: &str) -> Option<f64> {
    v.get(key).and_then(serde_yaml::Value::as_f64)
}

pub(crate) fn read(dir: &Path) -> Result<ArbiterJob, HarborError> {
    if let Some(marker) = crate::job::imported_marker(dir) {
        return Err(HarborError::input(
            marker.display(),
            "from",
            "an imported job dir holds only what the other harness recorded: export the folder it came from (its `source`)",
        ));
    }
    let yaml_path = dir.join("job.yaml");
    let text = std::fs::read_to_string(&yaml_path).map_err(|e| {
        HarborError::input(
            yaml_path.display(),
            "file",
            format!("{e}: not an arbiter job directory"),
        )
    })?;
    let config: serde_yaml::Value = serde_yaml::from_str(&text)
        .map_err(|e| HarborError::input(yaml_path.display(), "file", e.to_string()))?;
    let lock_path = dir.join("lock.json");
    let lock: Value = match std::fs::read(&lock_path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| HarborError::input(lock_path.display(), "file", e.to_string()))?,
        Err(_) => Value::Null,
    };
    let name = config
        .get("name")
        .and_then(|n| n.as_str())
        .map(str::to_string)
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "job".into());
    let task_dirs: Vec<PathBuf> = config
        .get("tasks")
        .and_then(|t| t.as_sequence())
        .map(|s| {
            s.iter()
                .filter_map(|t| t.as_str())
                .map(PathBuf::from)
                .collect()
        })
        .unwrap_or_default();
    let task_dir_of = task_dirs
        .iter()
        .map(|d| (task_name_of(d), d.clone()))
        .collect();
    let checksums = lock
        .get("tasks")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.get("checksum")?.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let mut agents = BTreeMap::new();
    let mut agent_order = Vec::new();
    for entry in config
        .get("agents")
        .and_then(|a| a.as_sequence())
        .into_iter()
        .flatten()
    {
        let (name, def) = match entry {
            serde_yaml::Value::String(s) => (s.clone(), AgentDef::default()),
            other => {
                let Some(name) = other.get("name").and_then(|n| n.as_str()) else {
                    continue;
                };
                let model = other.get("model").and_then(|m| {
                    Some((
                        m.get("provider")?.as_str()?.to_string(),
                        m.get("name")?.as_str()?.to_string(),
                    ))
                });
                let text = |k: &str| other.get(k).and_then(|v| v.as_str()).map(str::to_string);
                (
                    name.to_string(),
                    AgentDef {
                        kind: text("kind"),
                        version: text("version"),
                        model,
                    },
                )
            }
        };
        agent_order.push(name.clone());
        agents.insert(name, def);
    }
    let timeouts = config.get("timeouts");
    let t = |k: &str| timeouts.and_then(|v| f64_at(v, k)).unwrap_or(1.0);
    let attempts = lock
        .get("attempts")
        .and_then(Value::as_u64)
        .or_else(|| config.get("attempts").and_then(|a| a.as_u64()))
        .unwrap_or(1) as u32;
    let job_id = std::fs::read_to_string(dir.join(crate::job::JOB_ID_FILE))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    Ok(ArbiterJob {
        dir: dir.to_path_buf(),
        name,
        job_id,
        attempts,
        concurrency: config
            .get("concurrency")
            .and_then(|c| c.as_u64())
            .unwrap_or(4)
            .max(1) as u32,
        max_retries: config
            .get("retries")
            .and_then(|r| r.get("max"))
            .and_then(|m| m.as_u64())
            .unwrap_or(0) as u32,
        pass_threshold: config
            .get("pass_threshold")
            .and_then(|p| p.as_f64())
            .unwrap_or(1.0),
        timeouts: [t("agent"), t("verifier"), t("build"), t("install")],
        task_dirs,
        task_dir_of,
        checksums,
        agents,
        agent_order,
        records: records(dir)?,
    })
}

/// `trials.jsonl`, each line a trial record; a later line of the same trial replaces it.
fn records(dir: &Path) -> Result<Vec<TrialRecord>, HarborError> {
    let path = dir.join("trials.jsonl");
    let file = std::fs::File::open(&path).map_err(|e| {
        HarborError::input(
            path.display(),
            "file",
            format!("{e}: the job has no trials"),
        )
    })?;
    let out =
        crate::trial::final_records(std::io::BufReader::new(file).lines()).map_err(
            |e| match e {
                crate::trial::JsonlError::Read(e) => HarborError::io(&path)(e),
                crate::trial::JsonlError::Invalid { line, source } => HarborError::input(
                    path.display(),
                    format!("line {line}"),
                    format!("not a trial record this arbiter reads ({source})"),
                ),
            },
        )?;
    if out.is_empty() {
        return Err(HarborError::input(
            path.display(),
            "file",
            "the job has no finished trials",
        ));
    }
    Ok(out)
}
