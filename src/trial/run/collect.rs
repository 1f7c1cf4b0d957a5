//! The collect phase: what the agent left (logs, outcome record, trajectory, artifacts,
//! deliverables, completion record, control root), fetched without trusting it.

use super::*;

impl Trial<'_> {
    pub(super) async fn fetch<S: Sandbox>(
        &self,
        sb: &S,
        id: &str,
        path: &str,
        dest: &Path,
        limit: u64,
    ) -> Result<FetchResult, Infra> {
        let tmp = self.plan.dir.join(".fetch.tar");
        let fetched = sb
            .get_archive(id, path, &tmp, limit.saturating_add(1024 * 1024))
            .await
            .map_err(infra(Phase::Collect))?;
        let result = match fetched {
            Fetched::NotFound => FetchResult::Missing,
            Fetched::TooLarge { limit } => {
                FetchResult::Failed(format!("larger than {limit} bytes"))
            }
            Fetched::Archive { .. } => {
                let limits = ExtractLimits {
                    max_bytes: limit,
                    max_entries: 10_000,
                };
                match extract_tar_file(&tmp, dest, limits) {
                    Ok(report) => FetchResult::Ok(report),
                    Err(e) => FetchResult::Failed(format!("unpacking: {e}")),
                }
            }
        };
        let _ = std::fs::remove_file(&tmp);
        Ok(result)
    }

    pub(super) async fn collect<S: Sandbox>(&mut self, sb: &S, id: &str) -> Result<(), Infra> {
        let logs_dir = self.path("agent/logs");
        if let FetchResult::Failed(why) = self
            .fetch(sb, id, "/logs/agent", &logs_dir, AGENT_LOGS_LIMIT)
            .await?
        {
            tracing::warn!(trial = self.plan.id, "agent logs not collected: {why}");
        }
        let outcome_path = self
            .agent_plan
            .as_ref()
            .map(|p| p.outcome_path.clone())
            .unwrap_or_default();
        let outcome_bytes = self.read_outcome(sb, id, &outcome_path).await?;
        let stderr = read_capped(
            &self.path("agent/stderr.log"),
            self.plan.settings.log_cap_bytes,
        );
        self.rec.claim = match outcome_bytes {
            Ok(bytes) => collect_claim(bytes.as_deref(), &stderr),
            Err(why) => Claim {
                status: crate::outcome::ClaimStatus::Invalid,
                source: Some(crate::outcome::ClaimSource::File),
                error: Some(why),
                ..collect_claim(None, &stderr)
            },
        };
        self.collect_trajectory();
        self.collect_completion_record();
        let artifacts = self.plan.task.artifacts.clone();
        for path in artifacts {
            let (entry, _) = self.fetch_artifact(sb, id, &path).await?;
            self.rec.artifacts.push(entry);
        }
        self.check_deliverables(sb, id).await?;
        let manifest =
            serde_json::to_vec_pretty(&self.rec.artifacts).map_err(infra(Phase::Collect))?;
        std::fs::write(self.path("artifacts/manifest.json"), manifest)
            .map_err(infra(Phase::Collect))?;
        self.save_control_root()?;
        let record_required = self.agent_plan.as_ref().is_some_and(|p| p.record_required);
        if record_required
            && self.rec.termination.kind == TerminationKind::Exited
            && self.rec.termination.exit_code == Some(0)
            && self.rec.claim.status == crate::outcome::ClaimStatus::Missing
        {
            return Err(Infra {
                phase: Phase::Agent,
                message: format!(
                    "the agent exited 0 without an outcome record (no {} and no AWORLD_RUN_OUTCOME= line on stderr); aworld-cli does this when it rejects an argument — see agent/stderr.log",
                    self.agent_plan
                        .as_ref()
                        .map(|p| p.outcome_path.as_str())
                        .unwrap_or("outcome file")
                ),
            });
        }
        Ok(())
    }

    /// Fetch `path` into `artifacts/`, describing what was found.
    async fn fetch_artifact<S: Sandbox>(
        &self,
        sb: &S,
        id: &str,
        path: &str,
    ) -> Result<(ArtifactEntry, Option<crate::sandbox::ExtractReport>), Infra> {
        let entry = |status, detail: Option<String>| ArtifactEntry {
            path: path.to_string(),
            status,
            size: None,
            sha256: None,
            detail,
        };
        let Some(relative) = safe_relative(path) else {
            return Ok((
                entry(
                    ArtifactStatus::Failed,
                    Some("not a plain absolute path (no `..`)".to_string()),
                ),
                None,
            ));
        };
        let dest = self.path("artifacts").join(relative);
        Ok(
            match self.fetch(sb, id, path, &dest, ARTIFACT_LIMIT).await? {
                FetchResult::Missing => (entry(ArtifactStatus::Missing, None), None),
                FetchResult::Failed(why) => (entry(ArtifactStatus::Failed, Some(why)), None),
                FetchResult::Ok(report) => {
                    let size = report.files.iter().map(|f| f.size).sum();
                    let single = report.files.iter().find(|f| f.relative.is_empty());
                    let mut notes: Vec<String> = report
                        .skipped
                        .iter()
                        .map(|s| format!("{}: {}", s.path, s.reason))
                        .collect();
                    if report.truncated {
                        notes.push("truncated".to_string());
                    }
                    let found = ArtifactEntry {
                        path: path.to_string(),
                        status: ArtifactStatus::Ok,
                        size: Some(size),
                        sha256: single.map(|f| f.sha256.clone()),
                        detail: if notes.is_empty() {
                            None
                        } else {
                            Some(notes.join("; "))
                        },
                    };
                    (found, Some(report))
                }
            },
        )
    }

    /// Check the task's declared deliverables (saved as artifacts) and any absolute paths the
    /// agent's completion record names.
    async fn check_deliverables<S: Sandbox>(&mut self, sb: &S, id: &str) -> Result<(), Infra> {
        let declared = self
            .plan
            .task
            .completion
            .as_ref()
            .map(|c| c.deliverables.clone())
            .unwrap_or_default();
        for d in &declared {
            let check = self
                .check_file(
                    sb,
                    id,
                    &d.path,
                    d.goal.clone(),
                    d.non_empty,
                    d.sha256.clone(),
                )
                .await?;
            self.rec.deliverables.push(check);
        }
        let named = self
            .completion
            .as_ref()
            .map(CompletionRecord::named_paths)
            .unwrap_or_default();
        for path in named
            .into_iter()
            .filter(|p| !declared.iter().any(|d| &d.path == p))
            .take(MAX_OBSERVED_PATHS)
        {
            let check = self.check_file(sb, id, &path, None, true, None).await?;
            self.rec.observed_files.push(check);
        }
        Ok(())
    }

    async fn check_file<S: Sandbox>(
        &mut self,
        sb: &S,
        id: &str,
        path: &str,
        goal: Option<String>,
        non_empty: bool,
        expected: Option<String>,
    ) -> Result<FileCheck, Infra> {
        let (entry, report) = self.fetch_artifact(sb, id, path).await?;
        let status = match (&entry.status, &report) {
            (ArtifactStatus::Missing, _) => FileStatus::Missing,
            (ArtifactStatus::Failed, _) | (_, None) => FileStatus::Unreadable,
            (ArtifactStatus::Ok, Some(report)) => {
                let single = report.files.iter().find(|f| f.relative.is_empty());
                match (single, &expected) {
                    (None, Some(_)) => FileStatus::Unreadable,
                    (None, None) if report.files.is_empty() && !report.skipped.is_empty() => {
                        FileStatus::Unreadable
                    }
                    (None, None) if non_empty && report.files.is_empty() => FileStatus::Empty,
                    (Some(f), _) if non_empty && f.size == 0 => FileStatus::Empty,
                    (Some(f), Some(want)) if &f.sha256 != want => FileStatus::HashMismatch,
                    _ => FileStatus::Ok,
                }
            }
        };
        let detail = match status {
            FileStatus::Unreadable => entry.detail.clone().or_else(|| {
                Some(if expected.is_some() {
                    "not a regular file, so it has no sha256".to_string()
                } else {
                    "no regular file could be read back".to_string()
                })
            }),
            _ => entry.detail.clone(),
        };
        if !self.rec.artifacts.iter().any(|a| a.path == path) {
            self.rec.artifacts.push(entry.clone());
        }
        Ok(FileCheck {
            path: path.to_string(),
            goal,
            status,
            size: entry.size,
            sha256: entry.sha256,
            expected_sha256: expected,
            detail,
        })
    }

    /// Copy the agent's trajectory (already fetched with `/logs/agent`) to `agent/`.
    fn collect_trajectory(&mut self) {
        let Some(path) = self
            .agent_plan
            .as_ref()
            .and_then(|p| p.trajectory_path.clone())
        else {
            return;
        };
        let Some(rel) = path
            .strip_prefix("/logs/agent/")
            .filter(|r| !r.contains(".."))
        else {
            return;
        };
        let src = self.path("agent/logs").join(rel);
        let name = Path::new(rel)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "trajectory.json".to_string());
        let entry = match std::fs::symlink_metadata(&src) {
            Ok(meta) if meta.is_file() => {
                let copied = std::fs::copy(&src, self.path("agent").join(&name));
                ArtifactEntry {
                    path,
                    status: if copied.is_ok() {
                        ArtifactStatus::Ok
                    } else {
                        ArtifactStatus::Failed
                    },
                    size: Some(meta.len()),
                    sha256: None,
                    detail: copied.err().map(|e| e.to_string()),
                }
            }
            _ => ArtifactEntry {
                path,
                status: ArtifactStatus::Missing,
                size: None,
                sha256: None,
                detail: None,
            },
        };
        self.rec.trajectory = Some(entry);
    }

    /// Read `/logs/agent/completion.json` (fetched with `/logs/agent`), if the agent wrote one.
    fn collect_completion_record(&mut self) {
        let src = self.path("agent/logs/completion.json");
        match std::fs::symlink_metadata(&src) {
            Ok(meta) if meta.is_file() => {}
            _ => return,
        }
        let bytes = read_capped(&src, OUTCOME_LIMIT);
        let _ = std::fs::write(self.path("agent/completion.json"), &bytes);
        self.rec.completion = Some(match CompletionRecord::parse(&bytes) {
            Ok(record) => {
                self.completion = Some(record);
                CompletionSummary {
                    status: "present".to_string(),
                    error: None,
                    record: serde_json::from_slice(&bytes).ok(),
                }
            }
            Err(error) => CompletionSummary {
                status: "invalid".to_string(),
                error: Some(error),
                record: None,
            },
        });
    }

    /// Save the control root to `agent/control/` and empty it, so that a live verifier finds
    /// nothing there.
    fn save_control_root(&mut self) -> Result<(), Infra> {
        let Some(dir) = self.control_dir.clone() else {
            return Ok(());
        };
        let report =
            control::save(&dir, &self.path("agent/control")).map_err(infra(Phase::Collect))?;
        control::empty(&dir).map_err(infra(Phase::Collect))?;
        let plan_control = self.agent_plan.as_ref().and_then(|p| p.control.clone());
        self.rec.control_root = Some(ControlRootInfo {
            container_path: plan_control
                .as_ref()
                .map(|c| c.container_path.clone())
                .unwrap_or_default(),
            template: plan_control
                .and_then(|c| c.template)
                .map(|t| t.display().to_string()),
            saved_to: "agent/control".to_string(),
            files: report.files,
            bytes: report.bytes,
            skipped: report.skipped,
        });
        Ok(())
    }

    /// The agent's outcome file: `Ok(None)` if absent, `Err` if present but unreadable.
    async fn read_outcome<S: Sandbox>(
        &self,
        sb: &S,
        id: &str,
        path: &str,
    ) -> Result<Result<Option<Vec<u8>>, String>, Infra> {
        let dest = self.path("agent/outcome.json");
        let local = match path.strip_prefix("/logs/agent/") {
            Some(rel) if !rel.contains("..") => {
                let src = self.path("agent/logs").join(rel);
                match std::fs::symlink_metadata(&src) {
                    Ok(meta) if meta.is_file() => {
                        if meta.len() > OUTCOME_LIMIT {
                            return Ok(Err(format!(
                                "outcome record larger than {OUTCOME_LIMIT} bytes"
                            )));
                        }
                        let _ = std::fs::copy(&src, &dest);
                        return Ok(Ok(Some(read_capped(&src, OUTCOME_LIMIT))));
                    }
                    _ => return Ok(Ok(None)),
                }
            }
            _ => self.fetch(sb, id, path, &dest, OUTCOME_LIMIT).await?,
        };
        Ok(match local {
            FetchResult::Missing => Ok(None),
            FetchResult::Failed(why) => Err(format!("outcome record not readable: {why}")),
            FetchResult::Ok(report) if report.files.iter().any(|f| f.relative.is_empty()) => {
                Ok(Some(read_capped(&dest, OUTCOME_LIMIT)))
            }
            FetchResult::Ok(_) => Err("outcome record is not a regular file".to_string()),
        })
    }
}
