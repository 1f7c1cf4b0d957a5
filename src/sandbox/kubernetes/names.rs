//! Names and labels in the API's syntax: pod names (DNS-1123), label values (at most 63
//! characters of `[A-Za-z0-9._-]`, alphanumeric at both ends) and label selectors.
//!
//! An owner label whose value the API would refuse (the owner `host/pid/start` has slashes; a
//! job or trial id may be longer than 63) is stored as a digest of the value, the same digest
//! the selector asks for; the exact labels ride along in one annotation, which is what
//! [`Sandbox::list`](crate::sandbox::Sandbox::list) reports.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::SecurityContext;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::digest::sha256_hex;
use crate::sandbox::{LABEL_JOB, LABEL_MANAGED, LABEL_TRIAL, Role, Selector};

/// The main container's name.
pub(crate) const MAIN: &str = "main";
/// Where a read-only mount's image keeps its busybox (mounts.rs).
pub(crate) const IMAGE_BUSYBOX: &str = "/toolbox/busybox";
/// A root-only directory beside the toolbox, for transfers checked before they are unpacked.
pub(crate) const SCRATCH: &str = "/.arbiter/scratch";
/// Annotation with the user execs run as when they name none (the image's `USER`).
pub(crate) const ANNOTATION_USER: &str = "arbiter.default-user";

pub(super) const TOOLBOX_VOLUME: &str = "arbiter-toolbox";

/// `(pod, container)` of a container id: a sidecar's is `pod/container`, a pod's its name.
pub(super) fn target(id: &str) -> (&str, &str) {
    id.split_once('/').unwrap_or((id, MAIN))
}

/// Whether `id` names a sidecar.
pub(super) fn is_sidecar(id: &str) -> bool {
    id.contains('/')
}

/// Annotation holding an object's owner labels exactly (JSON object).
pub(crate) const ANNOTATION_LABELS: &str = "arbiter.labels";

/// An object's owner labels as its [`ANNOTATION_LABELS`] has them (`None`: no such annotation,
/// or not a JSON object of strings).
pub(crate) fn annotated_labels(meta: &ObjectMeta) -> Option<BTreeMap<String, String>> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_LABELS))
        .and_then(|json| serde_json::from_str(json).ok())
}

/// Runs as root (uid and gid 0), whatever the image's `USER`.
pub(super) fn root() -> SecurityContext {
    SecurityContext {
        run_as_user: Some(0),
        run_as_group: Some(0),
        run_as_non_root: Some(false),
        ..Default::default()
    }
}

/// Label naming the pod itself.
pub(crate) const LABEL_POD: &str = "arbiter.pod";
/// Label of a pod with network `none` (value [`NETWORK_NONE`]): what the namespace's
/// deny-all NetworkPolicy selects.
pub(crate) const LABEL_NETWORK: &str = "arbiter.network";
pub(crate) const NETWORK_NONE: &str = "none";
/// The namespace's deny-all NetworkPolicy of the pods labelled network `none`.
pub(crate) const NO_NETWORK_POLICY: &str = "arbiter-no-network";

/// A label value the API accepts that stands for `value`: the value itself when valid, else
/// `h-` and 40 hex digits of its sha256.
pub(crate) fn label_value(value: &str) -> String {
    if is_label_value(value) {
        value.to_string()
    } else {
        format!("h-{}", &sha256_hex(value.as_bytes())[..40])
    }
}

fn is_label_value(value: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    value.is_empty()
        || (value.len() <= 63
            && value.chars().all(ok_char)
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// The labels an object with these owner labels carries (values made valid).
pub(crate) fn object_labels(owner: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    owner
        .iter()
        .map(|(k, v)| (k.clone(), label_value(v)))
        .collect()
}

/// The API's label selector for a [`Selector`].
pub(crate) fn label_selector(selector: &Selector) -> String {
    match selector {
        Selector::Managed => format!("{LABEL_MANAGED}=true"),
        Selector::Job(job) => format!("{LABEL_MANAGED}=true,{LABEL_JOB}={}", label_value(job)),
        Selector::Trial { job, trial } => format!(
            "{LABEL_MANAGED}=true,{LABEL_JOB}={},{LABEL_TRIAL}={}",
            label_value(job),
            label_value(trial)
        ),
    }
}

/// `s` in a DNS label's characters: ASCII letters and digits lower-cased, anything else `-`.
pub(super) fn dns_chars(s: &str) -> impl Iterator<Item = char> + '_ {
    s.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '-'
        }
    })
}

/// A pod name: `arb-`, a readable part of the trial id, the role, and `suffix` (random hex):
/// at most 63 characters of `[a-z0-9-]`, alphanumeric at both ends.
pub(crate) fn pod_name(trial: &str, role: Role, suffix: &str) -> String {
    let mut readable: String = dns_chars(trial).collect();
    while readable.contains("--") {
        readable = readable.replace("--", "-");
    }
    let role = role.as_str();
    let room = 63usize.saturating_sub(4 + role.len() + suffix.len() + 2);
    let readable: String = readable.trim_matches('-').chars().take(room).collect();
    let readable = readable.trim_end_matches('-');
    if readable.is_empty() {
        format!("arb-{role}-{suffix}")
    } else {
        format!("arb-{readable}-{role}-{suffix}")
    }
}

/// Random hex for names (8 characters).
pub(crate) fn random_suffix() -> String {
    let mut bytes = [0u8; 4];
    if getrandom::fill(&mut bytes).is_err() {
        // Names only need to differ; the clock is enough when the OS has no entropy for us.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        bytes = nanos.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_label_values_become_digests_the_selector_asks_for() {
        assert_eq!(label_value("hello__oracle__1"), "hello__oracle__1");
        assert_eq!(label_value("true"), "true");
        let owner = "host/123/456";
        let v = label_value(owner);
        assert!(v.starts_with("h-") && v.len() == 42, "{v}");
        assert!(is_label_value(&v));
        let long = "x".repeat(64);
        assert!(label_value(&long).starts_with("h-"));
        assert!(label_value("-leading").starts_with("h-"));
        let labels = BTreeMap::from([
            (LABEL_JOB.to_string(), "job/with/slashes".to_string()),
            (LABEL_TRIAL.to_string(), "t1".to_string()),
        ]);
        let object = object_labels(&labels);
        let selector = label_selector(&Selector::Trial {
            job: "job/with/slashes".into(),
            trial: "t1".into(),
        });
        assert!(selector.contains(&format!("{LABEL_JOB}={}", object[LABEL_JOB])));
        assert!(selector.ends_with(&format!("{LABEL_TRIAL}=t1")));
        assert_eq!(label_selector(&Selector::Managed), "arbiter.managed=true");
    }

    #[test]
    fn pod_names_are_dns_labels() {
        let name = pod_name("csv-to-json__oracle__default__1", Role::Agent, "0a1b2c3d");
        assert_eq!(name, "arb-csv-to-json-oracle-default-1-agent-0a1b2c3d");
        let long = pod_name(&"A_".repeat(80), Role::ValidationSnapshot, "ffffffff");
        assert!(long.len() <= 63, "{long}");
        assert!(
            long.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert!(!long.contains("--"));
        assert_eq!(pod_name("__", Role::Verifier, "01"), "arb-verifier-01");
        assert_eq!(random_suffix().len(), 8);
    }
}
