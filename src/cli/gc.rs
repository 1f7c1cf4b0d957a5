//! `arbiter gc`: remove what arbiter processes that are gone left on the engine.

use std::fmt;

use crate::job::{LABEL_OWNER, Owner};
use crate::sandbox::{Resource, Sandbox, SandboxError, Selector};

#[derive(Debug, Default)]
pub(crate) struct GcReport {
    pub dry_run: bool,
    pub containers: usize,
    pub images: usize,
    /// Resources of live arbiter processes (never touched).
    pub live: usize,
    /// Resources owned by processes on another host (cannot tell whether they live).
    pub foreign: usize,
    /// Managed resources without an owner label (e.g. cached environment images): kept.
    pub unowned: usize,
}

impl fmt::Display for GcReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = if self.dry_run {
            "would remove"
        } else {
            "removed"
        };
        write!(
            f,
            "gc: {verb} {} container(s) and {} image(s) of dead jobs; kept {} of live jobs, {} owned by other hosts, {} without an owner (cached environment images)",
            self.containers, self.images, self.live, self.foreign, self.unowned
        )
    }
}

/// Whether a resource with these labels belongs to a dead owner on this host.
fn judge(labels: &std::collections::BTreeMap<String, String>, report: &mut GcReport) -> bool {
    match labels.get(LABEL_OWNER).and_then(|l| Owner::parse(l)) {
        None => {
            report.unowned += 1;
            false
        }
        Some(owner) => match owner.is_alive() {
            Some(true) => {
                report.live += 1;
                false
            }
            None => {
                report.foreign += 1;
                false
            }
            Some(false) => true,
        },
    }
}

pub(crate) async fn collect<S: Sandbox + ?Sized>(
    sandbox: &S,
    dry_run: bool,
) -> Result<GcReport, SandboxError> {
    let mut report = GcReport {
        dry_run,
        ..GcReport::default()
    };
    let mut found = sandbox.list(&Selector::Managed).await?;
    // Containers before the frozen filesystems they may have started from.
    found.sort_by(|a, b| a.resource.cmp(&b.resource));
    for listed in found {
        if judge(&listed.labels, &mut report) {
            if !dry_run {
                sandbox.remove(&listed.resource).await?;
            }
            match listed.resource {
                Resource::Container(_) => report.containers += 1,
                Resource::Frozen(_) | Resource::Image(_) => report.images += 1,
            }
        }
    }
    Ok(report)
}
