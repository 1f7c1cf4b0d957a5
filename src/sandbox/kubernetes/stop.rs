//! The stop of a pod: every process but PID 1 killed, its OOM kills counted, and what the
//! trial reads next sent along (`/logs`, the change set's walk, what changed: after_stop.rs);
//! its exec then kept for the pod's next command (parked.rs).

use super::KubernetesSandbox;
use super::after_stop::{
    CHANGED_MAX, LOGS_MAX, SEND_CHANGED, SEND_LOGS, SEND_PARTS, SEND_WALK, WALK_MAX,
};
use super::ended::Ended;
use super::error::KubeError;
use super::exec::RawEnd;
use crate::sandbox::toolbox::toolbox_argv;
use crate::sandbox::{ContainerId, Lost, SandboxError, Stopped};

/// Kill every process but PID 1 (and the keep-alive's own sleep, which PID 1 starts again)
/// until none is left; print the memory cgroup's OOM-kill count read before.
const STOP: &str = concat!(
    r#"B=/.arbiter/toolbox/busybox; o=0
for f in /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events; do
  [ -r "$f" ] || continue
  while read -r k v; do [ "$k" = oom_kill ] && o=$v; done <"$f"; break
done
"#,
    super::after_stop::kill_all!(),
    r#"[ "$n" = 0 ] || { echo "$n process(es) left after SIGKILL" >&2; exit 3; }
echo "oom_kill=${o:-0}""#
);

impl KubernetesSandbox {
    /// [`Sandbox::stop`](crate::sandbox::Sandbox::stop).
    pub(super) async fn stop_pod(&self, id: &ContainerId) -> Result<Stopped, SandboxError> {
        let pod = id.as_str();
        // The stop ends every process: a relay not started yet never will be.
        self.forget_carrier(pod);
        // No status read first: an exec into a pod that ended fails, and then its status
        // says how it ended (one request less per stop).
        // Once every process is gone, the stop sends `/logs` along (after_stop.rs): what
        // the trial reads next, read without another exec.
        // An agent's pod's first stop also sends the change set's walk along, and an archive
        // of what changed recently (what the change set reads next).
        let walk = self
            .states
            .lock()
            .await
            .get_mut(pod)
            .is_some_and(|s| std::mem::take(&mut s.walk_on_stop));
        let script = format!(
            "_lc=$1 _wk=$2 _wf=$3 _cc=$4 _pk=$5 _rp=\n{STOP}\n{SEND_LOGS}\n{SEND_WALK}\n{SEND_CHANGED}\n{SEND_PARTS}\n{}",
            super::parked::park_lines()
        );
        let cap = (LOGS_MAX + 1).to_string();
        let (walk_cap, changed_cap) = if walk {
            ((WALK_MAX + 1).to_string(), (CHANGED_MAX + 1).to_string())
        } else {
            (String::new(), String::new())
        };
        let argv = |park: &str| {
            toolbox_argv(
                "sh",
                &[
                    "-c",
                    &script,
                    "arbiter-stop",
                    &cap,
                    &walk_cap,
                    super::walk::STAT_FORMAT,
                    &changed_cap,
                    park,
                ],
            )
        };
        // Not kept in the pod (`kept.rs`): the stop kills every process but PID 1, the
        // keeping wrapper too. It is idempotent instead: an exit whose count line did not
        // arrive is run again.
        let out_cap =
            (LOGS_MAX + if walk { WALK_MAX + CHANGED_MAX } else { 0 }) as usize + 64 * 1024;
        // A pod's main container confirmed running parks its stop's exec for the pod's next
        // command (parked.rs); one that did not end as it should is stopped again the old way.
        if let Some(old) = self.warm.take_hot(pod) {
            old.abort();
        }
        if !pod.contains('/') && !self.is_unconfirmed(pod).await {
            match self.stop_parked(pod, &argv("1"), out_cap).await {
                Ok(Some((out, hot))) if String::from_utf8_lossy(&out).contains("oom_kill=") => {
                    self.warm.keep_hot(pod, hot);
                    return Ok(self.stopped_with(pod, &out));
                }
                Ok(Some((_, hot))) => hot.abort(),
                Ok(None) => {}
                // No exec opened: the pod ended (or is ending), as the old way would find.
                Err(e) => return self.stop_failed(pod, e).await,
            }
        }
        let argv = argv("");
        let mut stopped = self.streamed(pod, &argv, out_cap).await;
        for _ in 0..2 {
            match &stopped {
                Ok((RawEnd::Exited(0), out, _))
                    if !String::from_utf8_lossy(out).contains("oom_kill=") =>
                {
                    tracing::warn!(pod, "the stop's count line did not arrive; stopping again");
                    stopped = self.streamed(pod, &argv, out_cap).await;
                }
                _ => break,
            }
        }
        let (end, out, err) = match stopped {
            Ok(done) => done,
            Err(e) => return self.stop_failed(pod, e).await,
        };
        match end {
            RawEnd::Exited(0) => Ok(self.stopped_with(pod, &out)),
            other => {
                // PID 1 itself may have died (the OOM killer picks the largest process).
                if let Some(how) = self.pod_settled(pod).await {
                    return stopped_after(pod, how);
                }
                Err(KubeError::Exec {
                    pod: pod.to_string(),
                    message: format!(
                        "stopping its processes: {} ({other:?})",
                        String::from_utf8_lossy(&err).trim()
                    ),
                }
                .into())
            }
        }
    }

    /// A stop whose exec failed with `e`: the pod ended while it was being stopped (or just
    /// before: its status may not say so yet), or `e`.
    async fn stop_failed(&self, pod: &str, e: SandboxError) -> Result<Stopped, SandboxError> {
        match self.pod_settled(pod).await {
            Some(how) => stopped_after(pod, how),
            None => Err(e),
        }
    }

    /// A stop that ended as it should, `out` its stdout: its count line read, what it sent
    /// along kept.
    fn stopped_with(&self, pod: &str, out: &[u8]) -> Stopped {
        let kills = String::from_utf8_lossy(out)
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill="))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0);
        self.stopped_logs.keep(pod, out);
        Stopped {
            oom_killed: kills > 0,
            lost: None,
        }
    }
}

/// A stop of a pod that had already ended: what ran in it ended it (the agent's result, its
/// filesystem lost), or the cluster did (infrastructure).
fn stopped_after(pod: &str, how: Ended) -> Result<Stopped, SandboxError> {
    match how {
        Ended::ByWorkload(lost) => Ok(Stopped {
            oom_killed: lost == Lost::Oom,
            lost: Some(lost),
        }),
        Ended::ByCluster(why) => Err(KubeError::PodGone {
            pod: pod.to_string(),
            why,
        }
        .into()),
    }
}
