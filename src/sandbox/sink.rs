//! A capped sink for an exec's output: the first `cap` bytes go to a file, the rest is
//! counted and dropped, so no backend ever buffers an unbounded stream.

use std::path::Path;

use tokio::io::AsyncWriteExt;

use super::{ExecEnd, ExecOutcome, SandboxError};

/// What an exec did, from how it ended and its two sinks.
pub(crate) fn exec_outcome(
    end: ExecEnd,
    stdout: &CappedSink,
    stderr: &CappedSink,
    took: std::time::Duration,
) -> ExecOutcome {
    ExecOutcome {
        end,
        stdout_bytes: stdout.total,
        stderr_bytes: stderr.total,
        truncated: stdout.total > stdout.kept || stderr.total > stderr.kept,
        seconds: took.as_secs_f64(),
    }
}

/// A file that keeps the first `cap` bytes written to it and counts the rest.
pub(crate) struct CappedSink {
    file: Option<tokio::io::BufWriter<tokio::fs::File>>,
    path: Option<std::path::PathBuf>,
    cap: u64,
    pub(crate) kept: u64,
    pub(crate) total: u64,
}

impl CappedSink {
    pub(crate) async fn open(path: Option<&Path>, cap: u64) -> Result<Self, SandboxError> {
        let file = match path {
            Some(p) => Some(tokio::io::BufWriter::new(
                tokio::fs::File::create(p)
                    .await
                    .map_err(SandboxError::io(p))?,
            )),
            None => None,
        };
        Ok(CappedSink {
            file,
            path: path.map(Path::to_path_buf),
            cap,
            kept: 0,
            total: 0,
        })
    }

    pub(crate) async fn write(&mut self, bytes: &[u8]) -> Result<(), SandboxError> {
        self.total += bytes.len() as u64;
        let room = self.cap.saturating_sub(self.kept) as usize;
        let take = room.min(bytes.len());
        if let (Some(file), true) = (self.file.as_mut(), take > 0) {
            file.write_all(&bytes[..take])
                .await
                .map_err(SandboxError::io(self.path.clone().unwrap_or_default()))?;
            self.kept += take as u64;
        }
        Ok(())
    }

    /// The file the kept bytes go to, if any.
    pub(crate) fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Flush what was written so far to the file.
    pub(crate) async fn flush(&mut self) -> Result<(), SandboxError> {
        if let Some(file) = self.file.as_mut() {
            file.flush()
                .await
                .map_err(SandboxError::io(self.path.clone().unwrap_or_default()))?;
        }
        Ok(())
    }

    pub(crate) async fn finish(&mut self) -> Result<(), SandboxError> {
        if let Some(file) = self.file.as_mut() {
            if self.total > self.kept {
                let note = format!(
                    "\n[arbiter: output truncated: kept {} of {} bytes]\n",
                    self.kept, self.total
                );
                let _ = file.write_all(note.as_bytes()).await;
            }
            file.flush()
                .await
                .map_err(SandboxError::io(self.path.clone().unwrap_or_default()))?;
        }
        Ok(())
    }
}
