//! Files out of a container, unpacked without trusting them (see [`extract_tar_file`]).

use std::path::Path;

use super::{
    ContainerId, ExtractLimits, ExtractReport, Fetched, Sandbox, SandboxError, extract_tar_file,
};

/// What fetching a path gave.
#[derive(Debug)]
pub(crate) enum FetchResult {
    Ok(ExtractReport),
    Missing,
    /// The path exists but could not be taken (too large, not unpackable): the agent's doing.
    Failed(String),
}

/// Fetch `path` from the container and unpack it under `dest`, at most `limit` bytes
/// (`scratch` is a temporary archive file, removed afterwards).
pub(crate) async fn fetch<S: Sandbox + ?Sized>(
    sb: &S,
    id: &ContainerId,
    path: &str,
    dest: &Path,
    limit: u64,
    scratch: &Path,
) -> Result<FetchResult, SandboxError> {
    let fetched = sb
        .download(
            id,
            crate::sandbox::Download::whole(path, scratch, limit.saturating_add(1024 * 1024)),
        )
        .await?;
    let result = match fetched {
        Fetched::NotFound => FetchResult::Missing,
        Fetched::TooLarge { limit } => FetchResult::Failed(format!("larger than {limit} bytes")),
        Fetched::Archive { .. } => {
            let limits = ExtractLimits {
                max_bytes: limit,
                max_entries: 10_000,
            };
            match extract_tar_file(scratch, dest, limits) {
                Ok(report) => FetchResult::Ok(report),
                Err(e) => FetchResult::Failed(format!("unpacking: {e}")),
            }
        }
    };
    let _ = std::fs::remove_file(scratch);
    Ok(result)
}

/// At most `cap` bytes of a host file (empty when it cannot be read): for files a fetch wrote.
pub(crate) fn read_capped(path: &Path, cap: u64) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    if let Ok(file) = std::fs::File::open(path) {
        let _ = file.take(cap).read_to_end(&mut out);
    }
    out
}
