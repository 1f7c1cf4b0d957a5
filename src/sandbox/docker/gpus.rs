//! How many GPUs a Docker engine can give a container, for [`crate::sandbox::Sandbox::gpus`].
//!
//! The Engine API has no "GPU count". What it does say:
//! - `DiscoveredDevices` (engines with API 1.50 and later): devices found by the engine's
//!   device drivers, e.g. CDI ids `nvidia.com/gpu=0`; each GPU id other than `=all` counts;
//! - `Runtimes`: a registered `nvidia` runtime (what `nvidia-ctk runtime configure` adds)
//!   means the engine can serve GPU device requests; the GPUs are then counted from the
//!   host's `/proc/driver/nvidia/gpus` when the engine is local, else reported as
//!   [`GPUS_UNCOUNTED`].
//!
//! Anything else is an engine without GPUs (this machine's: `runc` only). An engine that
//! serves GPUs only through the legacy prestart hook, with no runtime registered, looks the
//! same from the API and is reported as having none.

use bollard::Docker;

use crate::sandbox::SandboxError;

/// The backend can give containers GPUs but cannot say how many.
pub const GPUS_UNCOUNTED: u32 = u32::MAX;

/// Host directory with one entry per NVIDIA GPU (the kernel driver's).
const NVIDIA_GPUS_DIR: &str = "/proc/driver/nvidia/gpus";

/// What the engine's `info` says about GPUs, in the terms the decision needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GpuFacts {
    /// Names of the registered runtimes, and the default one.
    pub runtimes: Vec<String>,
    /// Ids of the devices the engine discovered (`DiscoveredDevices`).
    pub device_ids: Vec<String>,
    /// GPUs the host's driver lists, when the engine is local and the driver is loaded.
    pub local_gpus: Option<u32>,
}

/// The GPUs a container can be given, from the engine's facts (see the module doc).
pub(crate) fn count_gpus(facts: &GpuFacts) -> u32 {
    let discovered = facts
        .device_ids
        .iter()
        .filter(|id| {
            id.split_once('=').is_some_and(|(kind, which)| {
                kind.rsplit('/').next() == Some("gpu") && which != "all"
            })
        })
        .count();
    if discovered > 0 {
        return u32::try_from(discovered).unwrap_or(GPUS_UNCOUNTED);
    }
    let nvidia = facts
        .runtimes
        .iter()
        .any(|r| r.to_ascii_lowercase().contains("nvidia"));
    if !nvidia {
        return 0;
    }
    match facts.local_gpus {
        Some(n) if n > 0 => n,
        _ => GPUS_UNCOUNTED,
    }
}

/// Ask the engine (one `info` call) how many GPUs a container can be given.
pub(super) async fn docker_gpus(docker: &Docker) -> Result<u32, SandboxError> {
    let info = docker.info().await.map_err(super::error::engine("info"))?;
    let mut runtimes: Vec<String> = info
        .runtimes
        .map(|r| r.into_keys().collect())
        .unwrap_or_default();
    runtimes.extend(info.default_runtime);
    let device_ids = info
        .discovered_devices
        .unwrap_or_default()
        .into_iter()
        .filter_map(|d| d.id)
        .collect();
    let facts = GpuFacts {
        runtimes,
        device_ids,
        local_gpus: if engine_is_local() {
            local_gpu_count()
        } else {
            None
        },
    };
    let gpus = count_gpus(&facts);
    tracing::debug!(?facts, gpus, "engine GPUs");
    Ok(gpus)
}

/// The engine runs on this host (the default socket or a `unix://` `DOCKER_HOST`).
fn engine_is_local() -> bool {
    std::env::var("DOCKER_HOST").map_or(true, |host| host.starts_with("unix://"))
}

fn local_gpu_count() -> Option<u32> {
    let entries = std::fs::read_dir(NVIDIA_GPUS_DIR).ok()?;
    u32::try_from(entries.flatten().count()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(runtimes: &[&str], devices: &[&str], local: Option<u32>) -> GpuFacts {
        GpuFacts {
            runtimes: runtimes.iter().map(|s| s.to_string()).collect(),
            device_ids: devices.iter().map(|s| s.to_string()).collect(),
            local_gpus: local,
        }
    }

    #[test]
    fn gpus_are_counted_from_what_the_engine_says() {
        let cases = [
            // This machine: runc only.
            (
                facts(&["io.containerd.runc.v2", "runc", "runc"], &[], None),
                0,
            ),
            // A driver loaded on the host is not enough without a runtime.
            (facts(&["runc"], &[], Some(2)), 0),
            (facts(&["nvidia", "runc", "runc"], &[], Some(4)), 4),
            (facts(&["runc", "nvidia"], &[], None), GPUS_UNCOUNTED),
            (facts(&["nvidia"], &[], Some(0)), GPUS_UNCOUNTED),
            (
                facts(
                    &["runc"],
                    &["nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=all"],
                    None,
                ),
                2,
            ),
            // Discovered devices that are not GPUs.
            (facts(&["runc"], &["vendor.com/fpga=0", "nogpu"], None), 0),
        ];
        for (facts, want) in cases {
            assert_eq!(count_gpus(&facts), want, "{facts:?}");
        }
    }
}
