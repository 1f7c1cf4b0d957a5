//! The change set: what the agent added, modified and deleted, as saved in
//! `agent/changes.json`, and the pure steps that turn the engine's raw list into it
//! (sorting, collapsing the parent directories the engine lists, hash caps, the summary).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::paths::{is_at_or_under, is_under, normalize, order_key};

/// Schema tag of `agent/changes.json`.
pub const CHANGES_SCHEMA: &str = "arbiter.changes.v1";
/// Where the change set is saved, relative to the trial dir (the summary's `file`).
pub const CHANGES_FILE: &str = "agent/changes.json";
/// Where the harness toolbox is mounted; its mount points show up as added directories in
/// the engine's change list and are dropped by [`collapse`].
const HARNESS_ROOT: &str = "/.arbiter";

/// How a path changed (Docker's `Kind` 0/1/2 = modified/added/deleted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

impl ChangeKind {
    /// From the engine's `Kind` in `GET /containers/{id}/changes` (0 modified, 1 added,
    /// 2 deleted); `None` for anything else.
    pub fn from_docker(kind: i64) -> Option<Self> {
        match kind {
            0 => Some(ChangeKind::Modified),
            1 => Some(ChangeKind::Added),
            2 => Some(ChangeKind::Deleted),
            _ => None,
        }
    }
}

/// What is at a changed path after the agent phase. For a deleted path: what was there in
/// the environment image when the builder knew it, else `other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileType {
    File,
    Dir,
    Symlink,
    Other,
}

/// Why a regular file carries no `sha256`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HashSkip {
    /// Inside the working dir: the task's own files and deliverables (artifacts hash those).
    InWorkdir,
    /// Larger than [`HashCaps::max_file_bytes`].
    TooLarge,
    /// Beyond [`HashCaps::max_files`].
    OverCount,
    /// Would take the total past [`HashCaps::max_total_bytes`].
    OverBytes,
    /// The size is unknown, or reading it failed.
    Unreadable,
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeEntry {
    pub path: String,
    pub kind: ChangeKind,
    pub file_type: FileType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Permission bits and file-type bits as `st_mode` has them (or just the permissions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// A modified directory listed only because something beneath it changed (the engine
    /// lists every parent of a change). Not counted in the summary, never a finding by itself.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub implied: bool,
    /// Why a regular file has no `sha256`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_skipped: Option<HashSkip>,
}

impl ChangeEntry {
    /// An entry with only path, kind and type known (what the engine's list gives).
    pub fn new(path: impl Into<String>, kind: ChangeKind, file_type: FileType) -> Self {
        ChangeEntry {
            path: path.into(),
            kind,
            file_type,
            size: None,
            mode: None,
            link_target: None,
            sha256: None,
            implied: false,
            hash_skipped: None,
        }
    }
}

/// `agent/changes.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangesFile {
    pub schema: String,
    pub workdir: String,
    pub hashing: HashReport,
    pub entries: Vec<ChangeEntry>,
}

impl ChangesFile {
    pub fn new(workdir: &str, hashing: HashReport, entries: Vec<ChangeEntry>) -> Self {
        ChangesFile {
            schema: CHANGES_SCHEMA.to_string(),
            workdir: workdir.to_string(),
            hashing,
            entries,
        }
    }
}

/// The record's `changes` field (SPEC §7). Implied parent directories are not counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeSummary {
    pub added: usize,
    pub modified: usize,
    pub deleted: usize,
    /// Changes (of any kind) at paths outside the working dir.
    pub outside_workdir: usize,
    /// The change set's file, relative to the trial dir.
    pub file: String,
}

/// Sort the engine's change list (parents right before their children), merge duplicate
/// paths (the later report wins), drop the harness toolbox's own mount points, and mark the
/// modified directories that are listed only because something beneath them changed
/// (`implied`). Paths are normalised.
pub fn collapse(entries: Vec<ChangeEntry>) -> Vec<ChangeEntry> {
    let mut keyed: Vec<(Vec<u8>, ChangeEntry)> = entries
        .into_iter()
        .filter_map(|mut entry| {
            entry.path = normalize(&entry.path);
            (entry.path != "/" && !is_mount_point(&entry)).then(|| (order_key(&entry.path), entry))
        })
        .collect();
    // Stable: of two reports of one path, the later stays later and wins below.
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out: Vec<ChangeEntry> = Vec::with_capacity(keyed.len());
    for (_, entry) in keyed {
        match out.last_mut() {
            Some(last) if last.path == entry.path => *last = entry,
            _ => out.push(entry),
        }
    }
    for i in 0..out.len() {
        let has_child = out
            .get(i + 1)
            .is_some_and(|next| is_under(&next.path, &out[i].path));
        let entry = &mut out[i];
        entry.implied =
            has_child && entry.kind == ChangeKind::Modified && entry.file_type == FileType::Dir;
    }
    out
}

/// `/.arbiter` and `/.arbiter/toolbox` as directories: created by the engine for the bind
/// mount, not by the agent. Anything else under `/.arbiter` stays (and is a finding).
fn is_mount_point(entry: &ChangeEntry) -> bool {
    entry.file_type == FileType::Dir
        && entry.kind != ChangeKind::Deleted
        && (entry.path == HARNESS_ROOT || entry.path == crate::sandbox::toolbox::TOOLBOX_MOUNT)
}

/// Count the change set for the record.
pub fn summarize(changes: &[ChangeEntry], workdir: &str) -> ChangeSummary {
    let workdir = normalize(workdir);
    let mut summary = ChangeSummary {
        added: 0,
        modified: 0,
        deleted: 0,
        outside_workdir: 0,
        file: CHANGES_FILE.to_string(),
    };
    for entry in changes.iter().filter(|e| !e.implied) {
        match entry.kind {
            ChangeKind::Added => summary.added += 1,
            ChangeKind::Modified => summary.modified += 1,
            ChangeKind::Deleted => summary.deleted += 1,
        }
        if !in_workdir(&entry.path, &workdir) {
            summary.outside_workdir += 1;
        }
    }
    summary
}

/// A path inside the working dir. A working dir of `/` contains nothing (otherwise every
/// path would be exempt from what the working dir is exempt from).
pub(crate) fn in_workdir(path: &str, workdir: &str) -> bool {
    workdir != "/" && is_at_or_under(path, workdir)
}

/// Limits on hashing regular files outside the working dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HashCaps {
    pub max_file_bytes: u64,
    pub max_files: usize,
    pub max_total_bytes: u64,
}

impl Default for HashCaps {
    fn default() -> Self {
        HashCaps {
            max_file_bytes: 16 << 20,
            max_files: 2_000,
            max_total_bytes: 256 << 20,
        }
    }
}

/// What hashing did, saved in `changes.json` (`hashing`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HashReport {
    pub caps: HashCaps,
    /// Regular files that were to be hashed.
    pub planned: usize,
    pub planned_bytes: u64,
    /// Regular files left without a hash, by reason.
    pub skipped: BTreeMap<HashSkip, usize>,
}

/// Decide which regular files get a `sha256`: added or modified regular files outside the
/// working dir, each at most `max_file_bytes`, at most `max_files` of them and
/// `max_total_bytes` in all. Files in `first` (the findings' paths) go first, then modified
/// files, then added ones, each in path order. Every regular file not chosen gets its
/// `hash_skipped` reason. Returns the indices (into `changes`) to hash, in order, and the
/// report; the caller hashes them (see [`record_hash`]).
pub fn plan_hashes(
    changes: &mut [ChangeEntry],
    workdir: &str,
    caps: &HashCaps,
    first: &BTreeSet<String>,
) -> (Vec<usize>, HashReport) {
    let workdir = normalize(workdir);
    let mut report = HashReport {
        caps: *caps,
        planned: 0,
        planned_bytes: 0,
        skipped: BTreeMap::new(),
    };
    let mut candidates: Vec<(u8, usize)> = Vec::new();
    for (i, entry) in changes.iter_mut().enumerate() {
        entry.hash_skipped = None;
        if entry.kind == ChangeKind::Deleted || entry.file_type != FileType::File {
            continue;
        }
        let skip = if in_workdir(&entry.path, &workdir) {
            Some(HashSkip::InWorkdir)
        } else {
            match entry.size {
                None => Some(HashSkip::Unreadable),
                Some(size) if size > caps.max_file_bytes => Some(HashSkip::TooLarge),
                Some(_) => None,
            }
        };
        match skip {
            Some(reason) => skip_entry(entry, reason, &mut report),
            None => {
                let rank = if first.contains(&entry.path) {
                    0
                } else if entry.kind == ChangeKind::Modified {
                    1
                } else {
                    2
                };
                candidates.push((rank, i));
            }
        }
    }
    // `changes` is in path order already when it came from `collapse`; keep it stable.
    candidates.sort_by_key(|&(rank, i)| (rank, i));
    let mut chosen = Vec::new();
    for (_, i) in candidates {
        let size = changes[i].size.unwrap_or(0);
        if chosen.len() >= caps.max_files {
            skip_entry(&mut changes[i], HashSkip::OverCount, &mut report);
        } else if report.planned_bytes + size > caps.max_total_bytes {
            skip_entry(&mut changes[i], HashSkip::OverBytes, &mut report);
        } else {
            report.planned += 1;
            report.planned_bytes += size;
            chosen.push(i);
        }
    }
    (chosen, report)
}

fn skip_entry(entry: &mut ChangeEntry, reason: HashSkip, report: &mut HashReport) {
    entry.hash_skipped = Some(reason);
    *report.skipped.entry(reason).or_insert(0) += 1;
}

/// Store the outcome of hashing one planned file: the digest, or `Unreadable` when reading
/// it failed (counted in the report).
pub fn record_hash(entry: &mut ChangeEntry, digest: Option<String>, report: &mut HashReport) {
    match digest {
        Some(d) => entry.sha256 = Some(d),
        None => {
            report.planned = report.planned.saturating_sub(1);
            report.planned_bytes = report.planned_bytes.saturating_sub(entry.size.unwrap_or(0));
            skip_entry(entry, HashSkip::Unreadable, report);
        }
    }
}
