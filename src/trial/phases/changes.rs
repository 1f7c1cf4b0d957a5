//! What the agent changed, and whether any of it could alter how the verifier runs (SPEC §5):
//! the backend's change list, each entry described from the agent's final filesystem (type,
//! size, mode, link target, sha256 within caps), classified against an index of the original
//! environment image, saved as `agent/changes.json`.
//!
//! Cost is bounded: the agent's side is read in a few tar downloads (one per changed subtree,
//! at most `MAX_ROOTS`, at most `MAX_READ_BYTES` in all); the image's side is indexed once per
//! image (see `image_index.rs`).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::digest::sha256_hex;
use crate::sandbox::{
    ChangeKind as EngineKind, ContainerId, Fetched, ImageRef, Sandbox, SandboxError,
};
use crate::verifier::integrity::{
    ChangeEntry, ChangeKind, ChangeSummary, ChangesFile, FileType, Filesystems, Finding, HashCaps,
    IntegrityContext, OriginalFile, classify, collapse, plan_hashes, record_hash, summarize,
};

use super::Ctx;
use super::image_index::{
    ImageIndex, ImageIndexes, MAX_TEXT_BYTES, file_type, link_target, walk, wants_text,
};

/// What the harness itself puts into the agent's container (the instruction, the agent's log
/// dir): not the agent's changes. What the agent writes under `/logs/agent` still is.
const HARNESS_PATHS: &[&str] = &[
    "/arbiter",
    "/arbiter/instruction.md",
    "/logs",
    "/logs/agent",
    "/logs/artifacts",
];
/// Where the harness toolbox is mounted (read-only): the mount point is the engine's doing, and
/// nothing the agent puts beside it is ever run.
const HARNESS_ROOT: &str = "/.arbiter";
/// Changed subtrees fetched at the same time.
const READ_AHEAD: usize = 4;
/// What the engine itself adds to every container (its init, bind-mounted by `init: true`;
/// its marker file): not the agent's changes. In a merged-`/usr` image (`/sbin` → `usr/sbin`)
/// the engine reports the init under `/usr/sbin`.
const ENGINE_PATHS: &[&str] = &["/sbin/docker-init", "/usr/sbin/docker-init", "/.dockerenv"];
/// Changed subtrees read from the agent's filesystem, at most.
const MAX_ROOTS: usize = 512;
/// Bytes of tar read from the agent's filesystem, at most.
const MAX_READ_BYTES: u64 = 512 * 1024 * 1024;
/// Regular files hashed while reading, at most this size each.
const MAX_HASH_BYTES: u64 = 16 * 1024 * 1024;

/// The benchmark-only switch `ARBITER_BENCH_NO_CHANGESET=1` (scripts/bench-integrity
/// measures what the change set costs): no change set, hence no integrity verdict, in snapshot
/// mode only (the other modes need it). Never set it for scores; a trial it applies to says so
/// in its record's `harness_overrides`.
pub(crate) const BENCH_NO_CHANGESET: &str = "ARBITER_BENCH_NO_CHANGESET";

pub(crate) fn bench_skips_change_set(plan: &crate::trial::plan::TrialPlan) -> bool {
    plan.task.verifier.mode == crate::task::VerifierMode::Snapshot
        && std::env::var_os(BENCH_NO_CHANGESET).is_some_and(|v| v == "1")
}

/// The change set of one trial.
#[derive(Debug)]
pub(crate) struct ChangeSet {
    pub summary: ChangeSummary,
    pub findings: Vec<Finding>,
    /// Entries the backend listed (for the file-count bound).
    pub listed: usize,
    /// The changed subtrees (each an added or modified path with no added ancestor), and the
    /// deleted paths: what `clean` mode replays onto the original image.
    pub roots: Vec<String>,
    pub deleted: Vec<String>,
    /// Whether the content of the changes was kept (`agent/changes.tar`) for regrading.
    pub content: crate::trial::history::ChangeContent,
}

/// Both sides for the classifier: the image's index and the agent's small texts.
struct Sides<'a> {
    image: &'a ImageIndex,
    agent_texts: &'a HashMap<String, String>,
}

impl Filesystems for Sides<'_> {
    fn original(&self, path: &str) -> Option<OriginalFile> {
        self.image.files.get(path).cloned()
    }
    fn original_text(&self, path: &str) -> Option<String> {
        self.image.texts.get(path).cloned()
    }
    fn agent_text(&self, path: &str) -> Option<String> {
        self.agent_texts.get(path).cloned()
    }
}

/// Record the agent container's change set and classify it. `id` must be stopped (or, in
/// live mode, the agent's processes are still running and may change more later).
pub(crate) async fn record<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    indexes: &ImageIndexes,
    image: &ImageRef,
    id: &ContainerId,
) -> Result<ChangeSet, SandboxError> {
    let listed = ctx.sb.changes(id).await?;
    let count = listed.len();
    let mut entries: Vec<ChangeEntry> = listed
        .into_iter()
        .filter(|c| {
            !HARNESS_PATHS.contains(&c.path.as_str())
                && !ENGINE_PATHS.contains(&c.path.as_str())
                && c.path != HARNESS_ROOT
                && !c.path.starts_with(&format!("{HARNESS_ROOT}/"))
        })
        .map(|c| {
            let kind = match c.kind {
                EngineKind::Added => ChangeKind::Added,
                EngineKind::Modified => ChangeKind::Modified,
                EngineKind::Deleted => ChangeKind::Deleted,
            };
            ChangeEntry::new(c.path, kind, FileType::Other)
        })
        .collect();
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    // A directory the engine created only to hold its own file (`/sbin` for docker-init in an
    // image without one) is not the agent's change either.
    let engine_parents: Vec<&str> = ENGINE_PATHS
        .iter()
        .filter_map(|p| p.rfind('/').map(|i| &p[..i]))
        .filter(|p| !p.is_empty())
        .collect();
    let lone: Vec<String> = entries
        .iter()
        .filter(|e| e.kind == ChangeKind::Added && engine_parents.contains(&e.path.as_str()))
        .filter(|e| {
            let prefix = format!("{}/", e.path);
            !entries.iter().any(|o| o.path.starts_with(&prefix))
        })
        .map(|e| e.path.clone())
        .collect();
    entries.retain(|e| !lone.contains(&e.path));
    let reader = super::image_index::Reader {
        sb: ctx.sb,
        owner: ctx.scope.owner(crate::sandbox::Role::Snapshot),
        limits: ctx.limits(),
        scratch: ctx.path(".index.tar"),
    };
    let index = indexes.get(&reader, image).await?;
    let mut content = crate::trial::content::ContentWriter::new(
        &ctx.plan.dir,
        ctx.plan.settings.change_content_cap_bytes,
    );
    let (digests, texts, roots) = describe(ctx, id, &mut entries, &index, &mut content).await?;
    let content = content.finish();
    let deleted: Vec<String> = entries
        .iter()
        .filter(|e| e.kind == ChangeKind::Deleted)
        .map(|e| e.path.clone())
        .collect();
    let entries = collapse(entries);
    // The working dir the container really started in: task.toml's, else the image's
    // `WORKDIR` (how 98.9% of real tasks set it), else `/`.
    let workdir = ctx
        .plan
        .task
        .environment
        .workdir
        .clone()
        .or_else(|| index.workdir.clone())
        .unwrap_or_else(|| "/".to_string());
    let sides = Sides {
        image: &index,
        agent_texts: &texts,
    };
    let mut context = IntegrityContext::new(
        &workdir,
        &index.env,
        &ctx.plan.task.verifier.protect,
        &sides,
    );
    if let Some(completion) = &ctx.plan.task.completion {
        context.deliverables = completion
            .deliverables
            .iter()
            .map(|d| d.path.clone())
            .collect();
    }
    let findings = classify(&entries, &context);
    let mut entries = entries;
    let first: BTreeSet<String> = findings.iter().map(|f| f.path.clone()).collect();
    let (chosen, mut report) = plan_hashes(&mut entries, &workdir, &HashCaps::default(), &first);
    for i in chosen {
        let digest = digests.get(&entries[i].path).cloned();
        record_hash(&mut entries[i], digest, &mut report);
    }
    let summary = summarize(&entries, &workdir);
    let file = ChangesFile::new(&workdir, report, entries);
    let bytes = serde_json::to_vec_pretty(&file).map_err(|e| SandboxError::Refused {
        op: "change set",
        message: e.to_string(),
    })?;
    let path = ctx.path("agent/changes.json");
    crate::job::write_atomic(&path, &bytes).map_err(|e| SandboxError::Io {
        path: path.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(ChangeSet {
        summary,
        findings,
        listed: count,
        roots,
        deleted,
        content,
    })
}

/// sha256 by path, small texts by path, the subtrees read.
type Described = (
    HashMap<String, String>,
    HashMap<String, String>,
    Vec<String>,
);

/// Fill in type, size, mode and link target of each entry from the agent's filesystem (and
/// from the image's index for deleted ones); returns the sha256 of the regular files read
/// (within the caps) and the small texts the classifier may read.
async fn describe<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    id: &ContainerId,
    entries: &mut [ChangeEntry],
    index: &ImageIndex,
    content: &mut crate::trial::content::ContentWriter,
) -> Result<Described, SandboxError> {
    let mut digests = HashMap::new();
    let mut texts = HashMap::new();
    // Which paths have changes beneath them (so are directories), and which subtrees to read:
    // an entry with no added ancestor, except modified directories (their own content did not
    // change; what did is listed below them).
    let mut has_children = vec![false; entries.len()];
    for i in 0..entries.len() {
        let prefix = format!("{}/", entries[i].path.trim_end_matches('/'));
        has_children[i] = entries
            .get(i + 1)
            .is_some_and(|next| next.path.starts_with(&prefix));
    }
    let mut roots: Vec<String> = Vec::new();
    let mut own_entry: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut added_dirs: Vec<String> = Vec::new();
    for (i, e) in entries.iter_mut().enumerate() {
        if e.kind == ChangeKind::Deleted {
            if let Some(orig) = index.files.get(&e.path) {
                e.file_type = orig.file_type;
                e.mode = orig.mode;
                e.link_target = orig.link_target.clone();
            }
            continue;
        }
        if has_children[i] {
            e.file_type = FileType::Dir;
        }
        let under_added = added_dirs
            .last()
            .is_some_and(|d| e.path.starts_with(&format!("{d}/")));
        if under_added {
            continue;
        }
        if e.kind == ChangeKind::Added && has_children[i] {
            added_dirs.push(e.path.clone());
        } else if has_children[i] {
            continue;
        }
        // A modified path with nothing changed beneath it: its own entry is all there is to
        // describe (a modified file with its content; a directory whose content did not
        // change, such as the one the engine put its `docker-init` in, without that content).
        if e.kind == ChangeKind::Modified {
            own_entry.insert(e.path.clone());
        }
        roots.push(e.path.clone());
    }
    let by_path: HashMap<String, usize> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.path.clone(), i))
        .collect();
    // A path the agent named after a secret must not reach the engine (Docker puts the path of
    // an archive request in a helper process's argv, visible on the host): read its nearest
    // ancestor without one instead.
    let mut roots: Vec<String> = roots
        .into_iter()
        .filter_map(|root| {
            let mut at = root.as_str();
            while crate::trial::scrub::mentions_secret(at) {
                at = &at[..at.rfind('/')?];
            }
            (!at.is_empty()).then(|| at.to_string())
        })
        .collect();
    roots.dedup();
    // Up to READ_AHEAD subtrees are fetched at once (each archive request is a round trip and a
    // helper process on the engine), then walked in order; each has its own scratch file and
    // the byte budget is split evenly over the batch.
    let mut budget = MAX_READ_BYTES;
    if let Some(first) = roots.get(MAX_ROOTS) {
        content.missing(
            first,
            &format!("over the change set's limit of {MAX_ROOTS} subtrees"),
        );
    }
    let roots: Vec<String> = roots.into_iter().take(MAX_ROOTS).collect();
    for batch in roots.chunks(READ_AHEAD) {
        if budget == 0 {
            content.missing(&batch[0], "over the change set's read limit");
            break;
        }
        let share = budget / batch.len() as u64;
        let scratches: Vec<PathBuf> = (0..batch.len())
            .map(|n| ctx.path(&format!(".changes-{n}.tar")))
            .collect();
        let wants: Vec<crate::sandbox::Download<'_>> = batch
            .iter()
            .zip(&scratches)
            .map(|(root, scratch)| {
                if own_entry.contains(root) {
                    crate::sandbox::Download::entry(root, scratch, share)
                } else {
                    crate::sandbox::Download::whole(root, scratch, share)
                }
            })
            .collect();
        let fetched = ctx.sb.download_many(id, &wants).await?;
        for ((root, scratch), got) in batch.iter().zip(&scratches).zip(fetched) {
            let got = match got {
                Ok(f) => f,
                Err(e @ (SandboxError::Cancelled | SandboxError::Io { .. })) => return Err(e),
                // A path the agent made unreadable stays undescribed.
                Err(e) => {
                    tracing::debug!(root, "change set: {e}");
                    content.missing(root, &e.to_string());
                    continue;
                }
            };
            let bytes = match got {
                Fetched::Archive { bytes } => bytes,
                Fetched::NotFound => {
                    content.missing(root, "not found in the agent's filesystem");
                    continue;
                }
                Fetched::TooLarge { limit } => {
                    content.missing(
                        root,
                        &format!("larger than the change set's read limit ({limit} bytes)"),
                    );
                    continue;
                }
            };
            budget = budget.saturating_sub(bytes);
            walk_into(scratch, root, &by_path, entries, &mut digests, &mut texts);
            content.add(root, scratch, bytes);
            let _ = std::fs::remove_file(scratch);
        }
    }
    Ok((digests, texts, roots))
}

/// Describe the entries of one fetched subtree from its archive.
fn walk_into(
    scratch: &Path,
    root: &str,
    by_path: &HashMap<String, usize>,
    entries: &mut [ChangeEntry],
    digests: &mut HashMap<String, String>,
    texts: &mut HashMap<String, String>,
) {
    {
        let walked = walk(scratch, root, |path, header, body| {
            let Some(&i) = by_path.get(&path) else {
                return;
            };
            let e = &mut entries[i];
            e.file_type = file_type(header);
            e.mode = header.mode().ok();
            e.link_target = link_target(header);
            let size = header.size().ok();
            if e.file_type == FileType::File {
                e.size = size;
                let size = size.unwrap_or(u64::MAX);
                if size <= MAX_HASH_BYTES {
                    let mut content = Vec::new();
                    if body.read_to_end(&mut content).is_ok() {
                        if wants_text(&path) && size <= MAX_TEXT_BYTES {
                            texts.insert(
                                path.clone(),
                                String::from_utf8_lossy(&content).into_owned(),
                            );
                        }
                        digests.insert(path, sha256_hex(&content));
                    }
                }
            }
        });
        if let Err(e) = walked {
            tracing::debug!(root, "change set: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::wants_text;
    use crate::verifier::integrity::{
        ChangeEntry, ChangeKind, FileType, Filesystems, IntegrityContext, OriginalFile,
        content_wanted,
    };

    struct Nothing;
    impl Filesystems for Nothing {
        fn original(&self, _path: &str) -> Option<OriginalFile> {
            None
        }
    }

    /// Every text the classifier reads from the agent's side is one the change set fetches.
    #[test]
    fn the_texts_fetched_cover_what_the_classifier_reads() {
        let paths = [
            "/usr/local/lib/python3.11/dist-packages/passall-1.0.dist-info/entry_points.txt",
            "/usr/lib/python3/dist-packages/tool.egg-info/entry_points.txt",
            "/usr/local/lib/python3.11/dist-packages/zz.pth",
            "/etc/passwd",
            "/etc/shadow",
            "/etc/ld.so.preload",
            "/root/.npmrc",
            "/usr/local/etc/npmrc",
            "/etc/pip.conf",
            "/root/.config/pip/pip.conf",
            "/etc/wgetrc",
            "/root/.gitconfig",
            "/root/.config/git/config",
            "/app/pyproject.toml",
            "/etc/profile.d/proxy.sh",
            "/etc/environment",
            "/root/.bashrc",
            "/home/dev/.zshenv",
            "/root/.local/bin/env",
            "/app/out.txt",
        ];
        let entries: Vec<ChangeEntry> = paths
            .iter()
            .map(|p| {
                let mut e = ChangeEntry::new(p.to_string(), ChangeKind::Modified, FileType::File);
                e.size = Some(10);
                e
            })
            .collect();
        let fs = Nothing;
        let ctx = IntegrityContext::new("/app", &[], &[], &fs);
        let (agent, _) = content_wanted(&entries, &ctx);
        assert!(
            agent.iter().any(|p| p.ends_with("entry_points.txt")),
            "{agent:?}"
        );
        for read in [
            "/etc/pip.conf",
            "/root/.bashrc",
            "/app/pyproject.toml",
            "/root/.gitconfig",
        ] {
            assert!(
                agent.iter().any(|p| p == read),
                "{read} not read: {agent:?}"
            );
        }
        for path in &agent {
            assert!(
                wants_text(path),
                "the classifier reads {path}, never fetched"
            );
        }
        assert!(!wants_text("/app/out.txt"));
        assert!(!wants_text("/app/entry_points.txt"));
    }
}
