//! The agent's `/logs` in one archive request (issue 16): `/logs/agent` and Harbor's
//! `/logs/artifacts` fetched together and split per part, each part with the bounds a fetch of
//! it alone has.

use std::path::Path;

use crate::sandbox::{ContainerId, FetchResult, Sandbox};
use crate::trial::plan::Phase;

use super::artifacts::{AGENT_LOGS_LIMIT, ARTIFACT_LIMIT, LOGS_ARTIFACTS};
use super::{Ctx, Infra, infra};

/// `/logs/agent` unpacked into `logs_dir`, and, when Harbor's `/logs/artifacts` is collected
/// too (not named by the task's artifacts), that unpacked into `artifacts/logs/artifacts` from
/// the same archive request of `/logs` (issue 16). Each part keeps its own bounds: it is
/// re-packed alone and unpacked with the limits a fetch of it alone has, and a part over its
/// byte limit is `Failed` as it would be. Anything but a plain `/logs` directory within the two
/// limits together (a symlink, an engine error, more than the limits hold) falls back to a
/// request per path, as before.
pub(super) async fn fetch_logs<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    id: &ContainerId,
    logs_dir: &Path,
) -> Result<(FetchResult, Option<FetchResult>), Infra> {
    let fail = || infra(Phase::Collect);
    let with_artifacts = !ctx
        .plan
        .task
        .artifacts
        .iter()
        .any(|p| p.trim_end_matches('/') == LOGS_ARTIFACTS);
    if with_artifacts
        && let Some(both) = fetch_logs_together(ctx, id, logs_dir)
            .await
            .map_err(fail())?
    {
        return Ok(both);
    }
    let logs = ctx
        .fetch(id, "/logs/agent", logs_dir, AGENT_LOGS_LIMIT)
        .await
        .map_err(fail())?;
    Ok((logs, None))
}

/// One archive request of `/logs`, split: `None` when a request per path must decide.
async fn fetch_logs_together<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    id: &ContainerId,
    logs_dir: &Path,
) -> Result<Option<(FetchResult, Option<FetchResult>)>, crate::sandbox::SandboxError> {
    use crate::sandbox::{Fetched, SandboxError};
    const SLACK: u64 = 1024 * 1024;
    let scratch = ctx.path(".logs.tar");
    let limit = AGENT_LOGS_LIMIT + ARTIFACT_LIMIT + 2 * SLACK;
    let fetched = ctx
        .sb
        .download(
            id,
            crate::sandbox::Download::whole("/logs", &scratch, limit),
        )
        .await;
    if !matches!(fetched, Ok(Fetched::Archive { .. })) {
        let _ = std::fs::remove_file(&scratch);
    }
    match fetched {
        Ok(Fetched::Archive { .. }) => {}
        Ok(_) => return Ok(None),
        Err(e @ (SandboxError::Cancelled | SandboxError::Io { .. })) => return Err(e),
        Err(e) => {
            tracing::debug!(trial = ctx.plan.id, "fetch of /logs: {e}");
            return Ok(None);
        }
    }
    let parts = [
        ("agent", AGENT_LOGS_LIMIT, logs_dir.to_path_buf()),
        (
            "artifacts",
            ARTIFACT_LIMIT,
            ctx.path("artifacts").join("logs/artifacts"),
        ),
    ];
    let outs: Vec<std::path::PathBuf> = parts
        .iter()
        .map(|(name, _, _)| ctx.path(&format!(".logs-{name}.tar")))
        .collect();
    let names = parts.each_ref().map(|(name, _, _)| *name);
    let split = split_logs_archive(&scratch, &names, &outs);
    let _ = std::fs::remove_file(&scratch);
    let present = match split {
        Ok(Some(present)) => present,
        Ok(None) | Err(_) => {
            for out in &outs {
                let _ = std::fs::remove_file(out);
            }
            return Ok(None);
        }
    };
    let mut results = Vec::new();
    for (((_, limit, dest), part), present) in parts.into_iter().zip(&outs).zip(present) {
        let size = std::fs::metadata(part).map_or(0, |m| m.len());
        let result = if !present {
            FetchResult::Missing
        } else if size > limit.saturating_add(SLACK) {
            // What a fetch of the path alone would have refused.
            FetchResult::Failed(format!("larger than {} bytes", limit + SLACK))
        } else {
            let limits = crate::sandbox::ExtractLimits {
                max_bytes: limit,
                max_entries: 10_000,
            };
            match crate::sandbox::extract_tar_file(part, &dest, limits) {
                Ok(report) => FetchResult::Ok(report),
                Err(e) => FetchResult::Failed(format!("unpacking: {e}")),
            }
        };
        let _ = std::fs::remove_file(part);
        results.push(result);
    }
    let artifacts = results.pop();
    let logs = results.pop().unwrap_or(FetchResult::Missing);
    Ok(Some((logs, artifacts)))
}

/// The entries under `logs/<name>` of an archive of `/logs`, re-packed into `outs[i]` as an
/// archive of that path alone (names relative to `/logs`, as the engine packs `/logs/<name>`);
/// returns which names were there. `Ok(None)` when the archive's root is not a plain `logs`
/// directory.
fn split_logs_archive(
    tar_path: &Path,
    names: &[&str],
    outs: &[std::path::PathBuf],
) -> std::io::Result<Option<Vec<bool>>> {
    let mut archive = tar::Archive::new(std::fs::File::open(tar_path)?);
    let mut builders: Vec<Option<tar::Builder<std::io::BufWriter<std::fs::File>>>> =
        names.iter().map(|_| None).collect();
    let mut root_is_dir = false;
    for entry in archive.entries()? {
        let entry = entry?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let name = raw.trim_start_matches("./").trim_end_matches('/');
        if name == "logs" {
            root_is_dir = entry.header().entry_type().is_dir();
            continue;
        }
        let Some(rest) = name.strip_prefix("logs/") else {
            // Not an archive of `/logs` as the engine packs one.
            return Ok(None);
        };
        let top = rest.split('/').next().unwrap_or(rest);
        let Some(i) = names.iter().position(|n| *n == top) else {
            continue;
        };
        let builder = match &mut builders[i] {
            Some(builder) => builder,
            slot @ None => slot.insert(tar::Builder::new(std::io::BufWriter::new(
                std::fs::File::create(&outs[i])?,
            ))),
        };
        let mut header = entry.header().clone();
        if entry.header().entry_type().is_file() {
            builder.append_data(&mut header, rest, entry)?;
        } else {
            match entry.link_name()?.map(|l| l.into_owned()) {
                Some(link) => builder.append_link(&mut header, rest, link)?,
                None => builder.append_data(&mut header, rest, std::io::empty())?,
            }
        }
    }
    if !root_is_dir {
        return Ok(None);
    }
    let mut present = Vec::new();
    for builder in builders {
        present.push(builder.is_some());
        if let Some(builder) = builder {
            use std::io::Write;
            builder.into_inner()?.flush()?;
        }
    }
    Ok(Some(present))
}

#[cfg(test)]
mod tests {
    use crate::sandbox::concat_archives;

    fn archive(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, content) in files {
            let mut header = tar::Header::new_gnu();
            header.set_mode(0o644);
            header.set_size(content.len() as u64);
            builder
                .append_data(&mut header, path, *content)
                .expect("append");
        }
        builder.into_inner().expect("finish")
    }

    fn listing(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
        use std::io::Read;
        let mut archive = tar::Archive::new(bytes);
        archive
            .entries()
            .expect("entries")
            .map(|e| {
                let mut e = e.expect("entry");
                let path = e.path().expect("path").display().to_string();
                let mut content = Vec::new();
                e.read_to_end(&mut content).expect("read");
                (path, content)
            })
            .collect()
    }

    /// Every entry of every part, in order, readable by a reader that stops at the first
    /// end-of-archive marker (as the engine's does), long names included.
    #[test]
    fn concatenated_archives_hold_every_entry_in_order() {
        let long = format!("solution/{}/solve.sh", "d".repeat(150));
        let first = archive(&[("arbiter/instruction.md", b"do it"), ("a", b"")]);
        let second = archive(&[(long.as_str(), b"echo hi\n"), ("a", b"again")]);
        let merged = concat_archives(&[&first, &second]).expect("merged");
        assert_eq!(merged.len() % 512, 0);
        let got = listing(&merged);
        let want: Vec<(String, Vec<u8>)> = [
            ("arbiter/instruction.md", &b"do it"[..]),
            ("a", b""),
            (long.as_str(), b"echo hi\n"),
            ("a", b"again"),
        ]
        .iter()
        .map(|(p, c)| (p.to_string(), c.to_vec()))
        .collect();
        assert_eq!(got, want);
        assert_eq!(
            listing(&concat_archives(&[&first]).expect("one")),
            listing(&first)
        );
    }

    fn engine_archive(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, kind, content) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(*kind);
            header.set_mode(0o755);
            header.set_size(content.len() as u64);
            if kind.is_symlink() {
                header.set_size(0);
                builder
                    .append_link(&mut header, path, "/etc")
                    .expect("link");
            } else {
                builder
                    .append_data(&mut header, path, *content)
                    .expect("append");
            }
        }
        builder.into_inner().expect("finish")
    }

    /// An archive's (path, content) entries.
    type Listing = Vec<(String, Vec<u8>)>;

    fn split(archive: &[u8]) -> Option<Vec<Option<Listing>>> {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = dir.path().join("logs.tar");
        std::fs::write(&src, archive).expect("write");
        let outs = [dir.path().join("a.tar"), dir.path().join("b.tar")];
        let present =
            super::split_logs_archive(&src, &["agent", "artifacts"], &outs).expect("split")?;
        Some(
            present
                .into_iter()
                .zip(&outs)
                .map(|(there, out)| there.then(|| listing(&std::fs::read(out).expect("part"))))
                .collect(),
        )
    }

    /// An archive of `/logs` becomes one archive per part, named as the engine names an
    /// archive of that path alone; what else the agent put in `/logs` is in neither.
    #[test]
    fn a_logs_archive_splits_into_its_parts() {
        use tar::EntryType::{Directory, Regular};
        let archive = engine_archive(&[
            ("logs/", Directory, b""),
            ("logs/agent/", Directory, b""),
            ("logs/agent/outcome.json", Regular, b"{}"),
            ("logs/verifier/", Directory, b""),
            ("logs/verifier/reward.txt", Regular, b"1"),
            ("logs/artifacts/", Directory, b""),
            ("logs/artifacts/report.txt", Regular, b"done"),
            ("logs/agentx", Regular, b"not the agent's logs"),
        ]);
        let parts = split(&archive).expect("a plain /logs");
        let names = |part: &Option<Listing>| -> Vec<String> {
            part.as_ref()
                .expect("present")
                .iter()
                .map(|(p, _)| p.trim_end_matches('/').to_string())
                .collect()
        };
        assert_eq!(names(&parts[0]), ["agent", "agent/outcome.json"]);
        assert_eq!(names(&parts[1]), ["artifacts", "artifacts/report.txt"]);
        assert_eq!(parts[1].as_ref().expect("present")[1].1, b"done");
        // A part that is not there is missing, as a fetch of it alone would be.
        let only_agent =
            engine_archive(&[("logs/", Directory, b""), ("logs/agent/", Directory, b"")]);
        let parts = split(&only_agent).expect("a plain /logs");
        assert!(parts[0].is_some());
        assert!(parts[1].is_none());
    }

    /// `/logs` replaced by a symlink (or anything but a directory) is not split: a fetch per
    /// path decides, as before.
    #[test]
    fn a_logs_symlink_is_not_split() {
        use tar::EntryType::Symlink;
        assert!(split(&engine_archive(&[("logs", Symlink, b"")])).is_none());
        let elsewhere = engine_archive(&[("other/", tar::EntryType::Directory, b"")]);
        assert!(split(&elsewhere).is_none());
    }

    /// A part that is not a whole archive is refused, not uploaded half.
    #[test]
    fn a_truncated_part_is_refused() {
        let whole = archive(&[("f", &[7u8; 2000])]);
        assert!(concat_archives(&[&whole[..1024]]).is_err());
    }
}
