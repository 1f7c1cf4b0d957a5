//! The pod of one [`ContainerSpec`] (pure: tested without a cluster).
//!
//! - the harness toolbox (its static busybox and relay) from two ConfigMaps
//!   (toolbox_maps.rs), projected read-only at the path the Docker backend bind-mounts it
//!   (`/.arbiter/toolbox`), so every harness command has the same argv on both backends and
//!   no container starts before the main one; a root-only scratch emptyDir beside it;
//! - for network `none` only, one init container of the task's image: it alone has
//!   `NET_ADMIN` and takes every interface but loopback down (addresses flushed) with the
//!   toolbox's busybox before the main container starts; the main container never gets a
//!   capability Docker would not give it;
//! - container `main`: the task's image, PID 1 arbiter's keep-alive (or the image's
//!   ENTRYPOINT with the keep-alive as its arguments, Harbor's semantics: `args` without
//!   `command`), run as root so that harness execs are root and switch to the exec's user
//!   themselves (a pod has no per-exec user); requests = limits from [`ContainerLimits`];
//! - host directories as emptyDirs (a read-only one filled by an init container of its
//!   image: mounts.rs); extra `/etc/hosts` entries (compose service names) as `hostAliases`;
//! - `restartPolicy: Never`, no service-account token, no service links, `dnsPolicy: Default`,
//!   `activeDeadlineSeconds` as a backstop only.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, Pod, PodSpec, ResourceRequirements,
    SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::config::Resolved;
use super::names::{
    ANNOTATION_LABELS, LABEL_NETWORK, LABEL_POD, NETWORK_NONE, NO_NETWORK_POLICY, object_labels,
    root,
};
use crate::sandbox::toolbox::{TOOLBOX_MOUNT, keepalive_argv};
use crate::sandbox::{
    Base, ContainerLimits, ContainerSpec, Network, Process, SandboxError, StartSpec,
};

pub(super) use super::names::{ANNOTATION_USER, MAIN, SCRATCH, TOOLBOX_VOLUME};
use super::toolbox_maps::ToolboxMaps;
pub(super) use crate::sandbox::handover::KEEPALIVE_MARKER;

const SCRATCH_VOLUME: &str = "arbiter-scratch";

/// Takes every interface but loopback down and flushes its addresses (run with NET_ADMIN).
const NET_DOWN: &str = "B=/.arbiter/toolbox/busybox; for d in /sys/class/net/*; do i=${d##*/}; [ \"$i\" = lo ] && continue; $B ip link set \"$i\" down || exit 1; $B ip addr flush dev \"$i\" || exit 1; done";

/// Everything the pod of one container spec is made from.
pub(crate) struct PodPlan<'a> {
    pub name: &'a str,
    /// The main container's image (a reference the kubelet can pull, by digest when built).
    pub image: &'a str,
    /// The toolbox's ConfigMaps (toolbox_maps.rs).
    pub toolbox: &'a ToolboxMaps,
    pub spec: &'a ContainerSpec,
    pub resolved: &'a Resolved,
    /// The user an exec without one runs as (the image's `USER`), when not root.
    pub default_user: Option<&'a str>,
    /// The spec's host directories, as emptyDirs (mounts.rs).
    pub mounts: &'a [super::mounts::PlannedMount],
}

fn unsupported(op: &'static str) -> SandboxError {
    SandboxError::Unsupported {
        op,
        backend: "kubernetes",
    }
}

/// The pod, or what of the spec the backend cannot give (refused, never dropped).
pub(crate) fn pod_for(plan: &PodPlan<'_>) -> Result<Pod, SandboxError> {
    let spec = plan.spec;
    if let Base::Frozen(_) = spec.base {
        return Err(unsupported("a container of a frozen filesystem"));
    }
    if spec.mounts.len() != plan.mounts.len() {
        return Err(unsupported("host directories not prepared for a pod"));
    }
    let StartSpec {
        process,
        join,
        hosts,
        user,
        healthcheck,
    } = &spec.start;
    // Sidecars are ephemeral containers of the pod they join (sidecar.rs), never pods.
    if join.is_some() {
        return Err(unsupported(
            "sidecar containers (a shared network namespace)",
        ));
    }
    if healthcheck.is_some() {
        return Err(unsupported("healthchecks of a pod's main container"));
    }
    if spec.network == Network::Host {
        return Err(unsupported("network host"));
    }
    let mut keepalive = keepalive_argv();
    keepalive.push(KEEPALIVE_MARKER.to_string());
    let (command, args) = match process {
        Process::Keepalive => (Some(keepalive), None),
        // Harbor: the image's ENTRYPOINT (if any) with the keep-alive as its arguments.
        Process::ImageEntrypoint => (None, Some(keepalive)),
        Process::Service { .. } => return Err(unsupported("compose services")),
    };
    let mut labels = object_labels(&spec.owner.labels());
    labels.insert(LABEL_POD.to_string(), plan.name.to_string());
    if spec.network == Network::None {
        labels.insert(LABEL_NETWORK.to_string(), NETWORK_NONE.to_string());
    }
    let mut annotations = BTreeMap::from([(
        ANNOTATION_LABELS.to_string(),
        serde_json::to_string(&spec.owner.labels()).unwrap_or_default(),
    )]);
    let default_user = user.as_deref().or(plan.default_user);
    if let Some(user) = default_user {
        annotations.insert(ANNOTATION_USER.to_string(), user.to_string());
    }
    let main_resources = resources(&spec.limits, plan.resolved.cpu_request);
    let main_cpu_millis = main_resources
        .requests
        .as_ref()
        .and_then(|r| r.get("cpu"))
        .and_then(|q| q.0.strip_suffix('m'))
        .and_then(|m| m.parse::<u64>().ok())
        .unwrap_or(HARNESS_CPU_MILLIS);
    let mut init: Vec<Container> = (spec.network == Network::None)
        .then(|| net_none_init(plan.image, main_cpu_millis))
        .into_iter()
        .collect();
    let (mount_init, mount_volumes, mount_mounts) =
        super::mounts::pod_parts(plan.mounts, &spec.limits, plan.resolved.cpu_request);
    init.extend(mount_init);
    let main = Container {
        name: MAIN.to_string(),
        image: Some(plan.image.to_string()),
        command,
        args,
        env: Some(
            spec.env
                .iter()
                .map(|(k, v)| k8s_openapi::api::core::v1::EnvVar {
                    name: k.clone(),
                    value: Some(v.clone()),
                    value_from: None,
                })
                .collect(),
        ),
        working_dir: spec.workdir.clone(),
        resources: Some(main_resources),
        security_context: Some(root()),
        volume_mounts: Some(
            vec![
                VolumeMount {
                    name: TOOLBOX_VOLUME.to_string(),
                    mount_path: TOOLBOX_MOUNT.to_string(),
                    read_only: Some(true),
                    ..Default::default()
                },
                VolumeMount {
                    name: SCRATCH_VOLUME.to_string(),
                    mount_path: SCRATCH.to_string(),
                    ..Default::default()
                },
            ]
            .into_iter()
            .chain(mount_mounts)
            .collect(),
        ),
        ..Default::default()
    };
    let settings = &plan.resolved.settings;
    Ok(Pod {
        metadata: ObjectMeta {
            name: Some(plan.name.to_string()),
            namespace: Some(plan.resolved.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".to_string()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            dns_policy: Some("Default".to_string()),
            active_deadline_seconds: Some(plan.resolved.backstop.as_secs().max(1) as i64),
            termination_grace_period_seconds: Some(1),
            runtime_class_name: settings.runtime_class.clone(),
            node_selector: (!settings.node_selector.is_empty())
                .then(|| settings.node_selector.clone()),
            tolerations: (!settings.tolerations.is_empty()).then(|| settings.tolerations.clone()),
            service_account_name: settings.service_account.clone(),
            init_containers: (!init.is_empty()).then_some(init),
            containers: vec![main],
            host_aliases: host_aliases(hosts),
            volumes: Some(
                vec![
                    plan.toolbox.volume(),
                    Volume {
                        name: SCRATCH_VOLUME.to_string(),
                        empty_dir: Some(EmptyDirVolumeSource::default()),
                        ..Default::default()
                    },
                ]
                .into_iter()
                .chain(mount_volumes)
                .collect(),
            ),
            ..Default::default()
        }),
        status: None,
    })
}

/// The network-`none` init container's CPU limit.
const HARNESS_CPU_MILLIS: u64 = 100;

/// Small resources for the network-`none` init container: 100m CPU and 32 MiB at most; its
/// CPU request is no more than the main container's (`main_cpu_millis`), so that the pod's
/// request (the larger of the init's and the main container's) is the main container's and
/// a small `cpu_request` share packs as many pods on a node as it says.
fn harness_resources(main_cpu_millis: u64) -> ResourceRequirements {
    let limits = BTreeMap::from([
        (
            "cpu".to_string(),
            Quantity(format!("{HARNESS_CPU_MILLIS}m")),
        ),
        ("memory".to_string(), Quantity("32Mi".to_string())),
    ]);
    let mut requests = limits.clone();
    requests.insert(
        "cpu".to_string(),
        Quantity(format!("{}m", main_cpu_millis.clamp(1, HARNESS_CPU_MILLIS))),
    );
    ResourceRequirements {
        limits: Some(limits),
        requests: Some(requests),
        ..Default::default()
    }
}

/// Network `none`'s init container: of the task's image (pulled for the main container
/// anyway), the only container of the pod with `NET_ADMIN`, it takes every interface but
/// loopback down with the toolbox's busybox (mounted read-only) before the main container
/// starts.
fn net_none_init(image: &str, main_cpu_millis: u64) -> Container {
    Container {
        name: "harness-net-none".to_string(),
        image: Some(image.to_string()),
        command: Some(vec![
            format!("{TOOLBOX_MOUNT}/busybox"),
            "sh".to_string(),
            "-c".to_string(),
            NET_DOWN.to_string(),
        ]),
        resources: Some(harness_resources(main_cpu_millis)),
        security_context: Some(SecurityContext {
            capabilities: Some(Capabilities {
                add: Some(vec!["NET_ADMIN".to_string()]),
                drop: None,
            }),
            ..root()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: TOOLBOX_VOLUME.to_string(),
            mount_path: TOOLBOX_MOUNT.to_string(),
            read_only: Some(true),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// Limits: the task's CPUs, memory, GPUs and storage bound. Requests: the same, but CPU
/// times `cpu_request` (the backend's setting) and a small ephemeral-storage request.
fn resources(limits: &ContainerLimits, cpu_request: f64) -> ResourceRequirements {
    let millis = (limits.cpus * 1000.0).round().max(1.0) as u64;
    let mut amounts = BTreeMap::from([
        ("cpu".to_string(), Quantity(format!("{millis}m"))),
        (
            "memory".to_string(),
            Quantity(format!("{}Mi", limits.memory_mb.max(4))),
        ),
    ]);
    if limits.gpus > 0 {
        amounts.insert(
            "nvidia.com/gpu".to_string(),
            Quantity(limits.gpus.to_string()),
        );
    }
    let mut requests = amounts.clone();
    if cpu_request < 1.0 {
        let asked = ((limits.cpus * cpu_request * 1000.0).round() as u64).max(1);
        requests.insert("cpu".to_string(), Quantity(format!("{asked}m")));
    }
    if let Some(mb) = limits.storage_mb {
        // The kubelet evicts a pod over it ("exceeded its local ephemeral storage limit"):
        // the agent's result. Headroom over the trial's own bound for the harness's files and
        // the container's log. Requested small: the scheduler would otherwise reserve the
        // whole bound on a node's disk for every pod.
        amounts.insert(
            "ephemeral-storage".to_string(),
            Quantity(format!("{}Mi", mb.saturating_add(STORAGE_HEADROOM_MB))),
        );
        requests.insert(
            "ephemeral-storage".to_string(),
            Quantity(format!("{STORAGE_REQUEST_MB}Mi")),
        );
    }
    ResourceRequirements {
        limits: Some(amounts),
        requests: Some(requests),
        ..Default::default()
    }
}

/// Ephemeral storage a pod may use beyond its container's storage bound (the toolbox, the
/// harness's scratch files, the container's log).
const STORAGE_HEADROOM_MB: u64 = 256;
/// Ephemeral storage a pod asks the scheduler for.
const STORAGE_REQUEST_MB: u64 = 64;

/// The namespace's NetworkPolicy denying all ingress and egress of every arbiter pod with
/// network `none` (the second wall where the cluster enforces policies; the first is the pod's
/// interfaces, taken down before anything of the task runs). One per namespace, shared by
/// every job there and created before the first such pod, so no pod runs a moment without
/// it; it selects nothing else and stays (one per pod cost a request per trial).
pub(crate) fn no_network_policy() -> NetworkPolicy {
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(NO_NETWORK_POLICY.to_string()),
            labels: Some(BTreeMap::from([(
                crate::sandbox::LABEL_MANAGED.to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(no_network_policy_spec()),
    }
}

/// What [`no_network_policy`] says: its pods, no rule either way.
pub(crate) fn no_network_policy_spec() -> NetworkPolicySpec {
    NetworkPolicySpec {
        pod_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([
                (
                    crate::sandbox::LABEL_MANAGED.to_string(),
                    "true".to_string(),
                ),
                (LABEL_NETWORK.to_string(), NETWORK_NONE.to_string()),
            ])),
            ..Default::default()
        }),
        policy_types: Some(vec!["Ingress".to_string(), "Egress".to_string()]),
        ingress: None,
        egress: None,
    }
}

/// `hostAliases` of the pod: the `/etc/hosts` entries, grouped by address.
pub(super) fn host_aliases(
    hosts: &[(String, String)],
) -> Option<Vec<k8s_openapi::api::core::v1::HostAlias>> {
    if hosts.is_empty() {
        return None;
    }
    let mut by_ip: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (name, ip) in hosts {
        by_ip.entry(ip.as_str()).or_default().push(name.clone());
    }
    Some(
        by_ip
            .into_iter()
            .map(|(ip, hostnames)| k8s_openapi::api::core::v1::HostAlias {
                ip: ip.to_string(),
                hostnames: Some(hostnames),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::{ImageRef, Owner, Role};
    use std::time::Duration;

    fn resolved() -> Resolved {
        Resolved {
            kubeconfig: "/k".into(),
            context: "c".into(),
            namespace: "ns".into(),
            registry: Some("127.0.0.1:5000".into()),
            settings: super::super::KubeSettings {
                runtime_class: Some("gvisor".into()),
                ..Default::default()
            },
            cpu_request: 1.0,
            backstop: Duration::from_secs(3600),
        }
    }

    fn spec(network: Network) -> ContainerSpec {
        ContainerSpec {
            base: Base::Image(ImageRef::new("img")),
            owner: Owner {
                job: "job".into(),
                trial: "t".into(),
                role: Role::Agent,
                extra: BTreeMap::from([("arbiter.owner".into(), "h/1/2".into())]),
            },
            env: vec![("A".into(), "1".into())],
            limits: ContainerLimits {
                cpus: 1.5,
                memory_mb: 512,
                pids_limit: 100,
                gpus: 0,
                storage_mb: None,
            },
            network,
            workdir: None,
            mounts: Vec::new(),
            start: StartSpec::for_role(Role::Agent),
        }
    }

    #[test]
    fn the_pod_keeps_every_rule_of_the_backend() {
        let resolved = resolved();
        let spec = spec(Network::None);
        let pod = pod_for(&PodPlan {
            name: "p",
            image: "reg/img@sha256:ab",
            toolbox: &ToolboxMaps::of("cd"),
            spec: &spec,
            resolved: &resolved,
            default_user: Some("1000"),
            mounts: &[],
        })
        .unwrap();
        let meta = &pod.metadata;
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels["arbiter.managed"], "true");
        assert!(labels["arbiter.owner"].starts_with("h-"));
        let exact: BTreeMap<String, String> =
            serde_json::from_str(&meta.annotations.as_ref().unwrap()[ANNOTATION_LABELS]).unwrap();
        assert_eq!(exact["arbiter.owner"], "h/1/2");
        let ps = pod.spec.unwrap();
        assert_eq!(ps.restart_policy.as_deref(), Some("Never"));
        assert_eq!(ps.automount_service_account_token, Some(false));
        assert_eq!(ps.enable_service_links, Some(false));
        assert_eq!(ps.dns_policy.as_deref(), Some("Default"));
        assert_eq!(ps.active_deadline_seconds, Some(3600));
        assert_eq!(ps.runtime_class_name.as_deref(), Some("gvisor"));
        let init = ps.init_containers.unwrap();
        assert_eq!(init.len(), 1);
        let caps = |c: &Container| {
            c.security_context
                .as_ref()
                .and_then(|s| s.capabilities.as_ref())
                .and_then(|c| c.add.clone())
                .unwrap_or_default()
        };
        assert_eq!(caps(&init[0]), ["NET_ADMIN"]);
        assert_eq!(
            init[0].image.as_deref(),
            Some("reg/img@sha256:ab"),
            "of the task's image: nothing more to pull"
        );
        assert_eq!(
            init[0].command.as_ref().unwrap()[0],
            "/.arbiter/toolbox/busybox"
        );
        let toolbox = ps.volumes.as_ref().unwrap();
        assert_eq!(toolbox[0].name, TOOLBOX_VOLUME);
        assert!(
            toolbox[0].projected.is_some(),
            "the toolbox from its ConfigMaps"
        );
        let main = &ps.containers[0];
        assert!(
            caps(main).is_empty(),
            "the agent's container gets no capability"
        );
        assert_eq!(main.command, None, "the image's ENTRYPOINT stays");
        assert_eq!(
            main.args.as_ref().unwrap().last().unwrap(),
            KEEPALIVE_MARKER
        );
        let res = main.resources.as_ref().unwrap();
        assert_eq!(res.limits, res.requests);
        assert_eq!(res.limits.as_ref().unwrap()["cpu"].0, "1500m");
        assert_eq!(res.limits.as_ref().unwrap()["memory"].0, "512Mi");
        let mounts = main.volume_mounts.as_ref().unwrap();
        assert!(
            mounts
                .iter()
                .any(|m| m.mount_path == TOOLBOX_MOUNT && m.read_only == Some(true))
        );
    }

    #[test]
    fn a_cpu_request_share_asks_for_part_of_the_limit_and_storage_is_bounded() {
        let mut limits = spec(Network::None).limits;
        limits.storage_mb = Some(1024);
        let whole = resources(&limits, 1.0);
        let (l, r) = (whole.limits.unwrap(), whole.requests.unwrap());
        assert_eq!(
            (l["cpu"].0.as_str(), r["cpu"].0.as_str()),
            ("1500m", "1500m")
        );
        assert_eq!(l["ephemeral-storage"].0, "1280Mi");
        assert_eq!(r["ephemeral-storage"].0, "64Mi");
        let init = harness_resources(10);
        assert_eq!(init.requests.as_ref().unwrap()["cpu"].0, "10m");
        assert_eq!(init.limits.as_ref().unwrap()["cpu"].0, "100m");
        assert_eq!(harness_resources(1500).requests.unwrap()["cpu"].0, "100m");
        let packed = resources(&limits, 0.25);
        let (l, r) = (packed.limits.unwrap(), packed.requests.unwrap());
        assert_eq!(
            (l["cpu"].0.as_str(), r["cpu"].0.as_str()),
            ("1500m", "375m")
        );
        assert_eq!(l["memory"], r["memory"], "memory is requested whole");
    }

    #[test]
    fn a_pod_network_has_no_init_container_and_refusals_are_typed() {
        let resolved = resolved();
        let maps = ToolboxMaps::of("t");
        let bridge = spec(Network::Bridge);
        let plan = |spec| PodPlan {
            name: "p",
            image: "i",
            toolbox: &maps,
            spec,
            resolved: &resolved,
            default_user: None,
            mounts: &[],
        };
        let pod = pod_for(&plan(&bridge)).unwrap();
        let ps = pod.spec.unwrap();
        assert!(
            ps.init_containers.is_none(),
            "no container starts before the main one"
        );
        let main = &ps.containers[0];
        assert!(
            main.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == TOOLBOX_VOLUME && m.read_only == Some(true))
        );
        let host = spec(Network::Host);
        assert!(matches!(
            pod_for(&plan(&host)),
            Err(SandboxError::Unsupported { .. })
        ));
        let mut mounted = spec(Network::None);
        mounted.mounts.push(crate::sandbox::Mount {
            host: "/h".into(),
            container: "/c".into(),
            read_only: true,
        });
        assert!(matches!(
            pod_for(&plan(&mounted)),
            Err(SandboxError::Unsupported { .. })
        ));
    }

    #[test]
    fn the_no_network_policy_selects_network_none_pods_and_allows_nothing() {
        let policy = no_network_policy();
        assert_eq!(policy.metadata.name.as_deref(), Some(NO_NETWORK_POLICY));
        let rules = policy.spec.unwrap();
        let selects = rules.pod_selector.unwrap().match_labels.unwrap();
        assert_eq!(selects[LABEL_NETWORK], NETWORK_NONE);
        assert_eq!(selects[crate::sandbox::LABEL_MANAGED], "true");
        assert_eq!(rules.policy_types.unwrap(), ["Ingress", "Egress"]);
        assert!(rules.ingress.is_none() && rules.egress.is_none());
        // Which pods carry the label: network none only.
        let resolved = resolved();
        let maps = ToolboxMaps::of("t");
        let labels = |network| {
            let spec = spec(network);
            pod_for(&PodPlan {
                name: "p",
                image: "i",
                toolbox: &maps,
                spec: &spec,
                resolved: &resolved,
                default_user: None,
                mounts: &[],
            })
            .unwrap()
            .metadata
            .labels
            .unwrap()
        };
        assert_eq!(labels(Network::None)[LABEL_NETWORK], NETWORK_NONE);
        assert!(!labels(Network::Bridge).contains_key(LABEL_NETWORK));
    }
}
