//! Record fields as the short text a person reads on a trial page — limits, budgets,
//! overrides, rewards, change-set counts — never raw JSON.

use serde_json::{Map, Value};

use super::model::usd;
use crate::verifier::integrity::ChangeSummary;

/// `cpus 2 · memory 4 GiB · pids 1024 · network none · disk 10 GiB (enforced, 12 MiB
/// used) · files 100000 (42 used, counted by the watchdog)`: the record's `limits`.
pub(crate) fn limits(v: &Value) -> String {
    let Some(m) = v.as_object() else {
        return plain(v);
    };
    let num = |k: &str| m.get(k).and_then(Value::as_f64);
    let count = |k: &str| m.get(k).and_then(Value::as_u64);
    let mut parts = Vec::new();
    if let Some(cpus) = num("cpus") {
        parts.push(format!("cpus {}", number(cpus)));
    }
    if let Some(mb) = count("memory_mb") {
        parts.push(format!("memory {}", mib(mb)));
    }
    if let Some(pids) = m.get("pids_limit").and_then(Value::as_i64) {
        parts.push(match pids {
            p if p > 0 => format!("pids {p}"),
            _ => "pids unlimited".to_string(),
        });
    }
    match m.get("network").and_then(Value::as_str) {
        Some("no-network") => parts.push("network none".to_string()),
        Some(network) => parts.push(format!("network {network}")),
        None => {}
    }
    let enforced = m.get("storage_enforced").and_then(Value::as_bool);
    let disk_limit = count("storage_limit_mb")
        .filter(|&n| n > 0)
        .or(count("storage_mb"));
    let mut disk = Vec::new();
    match enforced {
        Some(true) => disk.push("enforced".to_string()),
        Some(false) => disk.push("not enforced".to_string()),
        None => {}
    }
    if let Some(used) = count("storage_used_mb") {
        disk.push(format!("{} used", mib(used)));
    }
    match disk_limit {
        Some(limit) => parts.push(with_notes(format!("disk {}", mib(limit)), &disk)),
        None if !disk.is_empty() => parts.push(format!("disk {}", disk.join(", "))),
        None => {}
    }
    let files_limit = count("files_limit")
        .filter(|&n| n > 0)
        .or(count("max_files"));
    if let Some(limit) = files_limit {
        let mut notes = Vec::new();
        if let Some(used) = count("files_used") {
            notes.push(format!("{used} used"));
        }
        match m.get("files_counted").and_then(Value::as_str) {
            Some("watchdog") => notes.push("counted by the watchdog".to_string()),
            Some("change_set") => notes.push("counted in the change set".to_string()),
            Some(other) => notes.push(format!("counted by {other}")),
            None => {}
        }
        parts.push(with_notes(format!("files {limit}"), &notes));
    }
    const SHOWN: [&str; 12] = [
        "cpus",
        "memory_mb",
        "pids_limit",
        "network",
        "storage_enforced",
        "storage_limit_mb",
        "storage_mb",
        "storage_used_mb",
        "files_limit",
        "max_files",
        "files_used",
        "files_counted",
    ];
    parts.extend(
        m.iter()
            .filter(|(k, _)| !SHOWN.contains(&k.as_str()))
            .map(|(k, v)| format!("{} {}", words(k), plain(v))),
    );
    parts.join(" · ")
}

/// `max cost $2.00 · max requests 10 · exhausted`: the usage's `budget`.
pub(crate) fn budget(v: &Value) -> String {
    let Some(m) = v.as_object() else {
        return plain(v);
    };
    let mut parts = Vec::new();
    if let Some(x) = m.get("max_cost_usd").and_then(Value::as_f64) {
        parts.push(format!("max cost {}", usd(x)));
    }
    for (k, label) in [
        ("max_requests", "max requests"),
        ("max_tokens", "max tokens"),
    ] {
        if let Some(n) = m.get(k).and_then(Value::as_u64) {
            parts.push(format!("{label} {n}"));
        }
    }
    if let Some(exhausted) = m.get("exhausted").and_then(Value::as_bool) {
        parts.push(
            if exhausted {
                "exhausted"
            } else {
                "not exhausted"
            }
            .to_string(),
        );
    }
    parts.extend(
        m.iter()
            .filter(|(k, _)| {
                !["max_cost_usd", "max_requests", "max_tokens", "exhausted"].contains(&k.as_str())
            })
            .map(|(k, v)| format!("{} {}", words(k), plain(v))),
    );
    parts.join(" · ")
}

/// `agent.timeout_sec = 600 · cpus = 2`: the record's `overrides`.
pub(crate) fn overrides(m: &Map<String, Value>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} = {}", plain(v)))
        .collect::<Vec<_>>()
        .join(" · ")
}

/// The verifier's reward, once: its primary value (the `reward` key, else the mean of all, as
/// the pass rule reads it), the other values, and the file it came from (`source`: the
/// reward file kept in the trial dir, when one is).
pub(crate) fn reward(m: &Map<String, Value>, source: Option<&str>) -> String {
    let values: Vec<(&str, f64)> = m
        .iter()
        .filter_map(|(k, v)| Some((k.as_str(), v.as_f64()?)))
        .collect();
    let others = |skip: &str| {
        values
            .iter()
            .filter(|(k, _)| *k != skip)
            .map(|(k, v)| format!("{k} {}", number(*v)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut text = match m.get("reward").and_then(Value::as_f64) {
        Some(primary) if values.len() > 1 => {
            format!("{} (also {})", number(primary), others("reward"))
        }
        Some(primary) => number(primary),
        None if values.is_empty() => plain(&Value::Object(m.clone())),
        None => {
            let mean = values.iter().map(|(_, v)| v).sum::<f64>() / values.len() as f64;
            format!("{} (mean of {})", number(mean), others(""))
        }
    };
    let source = match source {
        Some(file) => format!("from {file}"),
        None if values.iter().any(|(k, _)| *k != "reward") => "from reward.json".to_string(),
        None => "from reward.txt or reward.json (not kept in the trial dir)".to_string(),
    };
    text.push_str(" · ");
    text.push_str(&source);
    text
}

/// A change set's counts as the record's `changes` has them: parent directories the engine
/// lists only because something beneath them changed are not counted. The facts card and the
/// change-set table both show this text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChangeCounts {
    pub(crate) added: u64,
    pub(crate) modified: u64,
    pub(crate) deleted: u64,
    /// Unknown for a change-set file of another shape.
    pub(crate) outside_workdir: Option<u64>,
}

impl ChangeCounts {
    /// From the record's `changes`.
    pub(crate) fn of_record(v: &Value) -> Option<ChangeCounts> {
        let n = |k: &str| v.get(k).and_then(Value::as_u64);
        Some(ChangeCounts {
            added: n("added")?,
            modified: n("modified")?,
            deleted: n("deleted")?,
            outside_workdir: n("outside_workdir"),
        })
    }

    pub(crate) fn of_summary(s: &ChangeSummary) -> ChangeCounts {
        ChangeCounts {
            added: s.added as u64,
            modified: s.modified as u64,
            deleted: s.deleted as u64,
            outside_workdir: Some(s.outside_workdir as u64),
        }
    }

    /// `2 added, 3 modified, 1 deleted; 4 outside the working dir`.
    pub(crate) fn text(&self) -> String {
        let mut text = format!(
            "{} added, {} modified, {} deleted",
            self.added, self.modified, self.deleted
        );
        if let Some(n) = self.outside_workdir {
            text.push_str(&format!("; {n} outside the working dir"));
        }
        text
    }
}

/// `2`, `0.5`, `1.25`: a number without a trailing `.0`.
fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// `512 MiB`, `4 GiB`, `1.5 GiB`.
fn mib(n: u64) -> String {
    match n {
        n if n >= 1024 && n % 1024 == 0 => format!("{} GiB", n / 1024),
        n if n >= 1024 => format!("{:.1} GiB", n as f64 / 1024.0),
        n => format!("{n} MiB"),
    }
}

fn with_notes(head: String, notes: &[String]) -> String {
    if notes.is_empty() {
        head
    } else {
        format!("{head} ({})", notes.join(", "))
    }
}

/// `storage_used_mb` → `storage used mb`.
fn words(key: &str) -> String {
    key.replace('_', " ")
}

/// Any value as words: strings as they are, numbers without `.0`, objects as `key value`
/// pairs, arrays joined with commas.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "–".to_string(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.to_string(),
        Value::Number(n) => n.as_f64().map(number).unwrap_or_else(|| n.to_string()),
        Value::Array(items) => items.iter().map(plain).collect::<Vec<_>>().join(", "),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{} {}", words(k), plain(v)))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_read_as_words() {
        let cases = [
            (
                json!({"cpus": 2.0, "memory_mb": 4096, "pids_limit": 1024, "network": "no-network",
                       "storage_enforced": true, "storage_limit_mb": 10240, "storage_used_mb": 12,
                       "files_limit": 100000, "files_used": 42, "files_counted": "watchdog"}),
                "cpus 2 · memory 4 GiB · pids 1024 · network none · disk 10 GiB (enforced, 12 MiB used) · files 100000 (42 used, counted by the watchdog)",
            ),
            (
                json!({"cpus": 0.5, "memory_mb": 1536, "pids_limit": -1, "network": "bridge",
                       "storage_enforced": false}),
                "cpus 0.5 · memory 1.5 GiB · pids unlimited · network bridge · disk not enforced",
            ),
            (
                json!({"cpus": 1.0, "memory_mb": 512, "pids_limit": 64, "network": "host",
                       "storage_mb": 2048, "storage_enforced": false, "future_key": {"a": 1}}),
                "cpus 1 · memory 512 MiB · pids 64 · network host · disk 2 GiB (not enforced) · future key a 1",
            ),
        ];
        for (v, text) in cases {
            assert_eq!(limits(&v), text);
        }
    }

    #[test]
    fn budgets_overrides_and_rewards_read_as_words() {
        assert_eq!(
            budget(&json!({"max_cost_usd": 2.0, "max_requests": 10, "exhausted": false})),
            "max cost $2.00 · max requests 10 · not exhausted"
        );
        let o = json!({"agent.timeout_sec": "600", "cpus": 2});
        assert_eq!(
            overrides(o.as_object().unwrap()),
            "agent.timeout_sec = 600 · cpus = 2"
        );
        let r = |v: Value, source| reward(v.as_object().unwrap(), source);
        assert_eq!(
            r(json!({"reward": 1.0}), Some("verifier/reward.txt")),
            "1 · from verifier/reward.txt"
        );
        assert_eq!(
            r(
                json!({"reward": 0.5, "accuracy": 0.75}),
                Some("verifier/reward.json")
            ),
            "0.5 (also accuracy 0.75) · from verifier/reward.json"
        );
        assert_eq!(
            r(json!({"a": 0.5, "b": 1.0}), None),
            "0.75 (mean of a 0.5, b 1) · from reward.json"
        );
        assert_eq!(
            r(json!({"reward": 0.0}), None),
            "0 · from reward.txt or reward.json (not kept in the trial dir)"
        );
    }
}
