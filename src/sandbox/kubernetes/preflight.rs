//! Before any trial (SPEC §14): the namespace exists, the credentials may create, exec into
//! and delete pods there, the registry answers, the toolbox's ConfigMaps are there, and — for
//! network `none` — a pod with a `NET_ADMIN` init container is admitted. Each failure is one
//! line naming what and how to fix it.

use std::sync::atomic::Ordering;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, ResourceRule, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

use super::KubernetesSandbox;
use super::error::api_status;
use crate::sandbox::{
    Base, ContainerLimits, ContainerSpec, ImageRef, Network, Owner, Role, StartSpec,
};

/// What the backend needs to be allowed (verb, resource, subresource).
const NEEDED: &[(&str, &str, &str)] = &[
    ("create", "pods", ""),
    ("get", "pods", ""),
    ("list", "pods", ""),
    ("watch", "pods", ""),
    ("delete", "pods", ""),
    ("create", "pods", "exec"),
    ("get", "pods", "log"),
    // Compose sidecars are ephemeral containers added to the agent's pod (sidecar.rs).
    ("patch", "pods", "ephemeralcontainers"),
    // The harness toolbox every pod mounts (toolbox_maps.rs).
    ("list", "configmaps", ""),
    ("create", "configmaps", ""),
];

impl KubernetesSandbox {
    /// Check the cluster; the problems found, one line each (empty: ready).
    pub(crate) async fn check_ready(&self) -> Vec<String> {
        let ns = &self.resolved.namespace;
        let ctx = &self.resolved.context;
        let mut problems = Vec::new();
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        match namespaces.get(ns).await {
            Ok(_) => {}
            Err(e) if api_status(&e) == Some(404) => {
                problems.push(format!(
                    "kubernetes: namespace {ns} does not exist in context {ctx}: create it (kubectl create namespace {ns}) or pass --namespace"
                ));
                return problems;
            }
            // May not read namespaces: the dry-run create below tells whether it exists.
            Err(e) if api_status(&e) == Some(403) => {}
            Err(e) => {
                problems.push(format!(
                    "kubernetes: cannot reach the API server of context {ctx} ({}): check KUBECONFIG and that the cluster runs",
                    one_line(&e.to_string())
                ));
                return problems;
            }
        }
        // What the namespace's rules grant, in one request; what they do not show (an
        // authorizer that cannot list its rules) is asked one access review each.
        let rules = self.resource_rules().await;
        let reviews: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
        for (verb, resource, sub) in NEEDED {
            if !granted(&rules, verb, "", resource, sub)
                && !self.allowed(&reviews, verb, "", resource, sub).await
            {
                let what = if sub.is_empty() {
                    resource.to_string()
                } else {
                    format!("{resource}/{sub}")
                };
                problems.push(format!(
                    "kubernetes: the credentials of context {ctx} may not {verb} {what} in namespace {ns}: grant the Role in docs/kubernetes-rbac.yaml"
                ));
            }
        }
        let policies = granted(&rules, "create", "networking.k8s.io", "networkpolicies", "")
            || self
                .allowed(
                    &reviews,
                    "create",
                    "networking.k8s.io",
                    "networkpolicies",
                    "",
                )
                .await;
        self.policies.store(policies, Ordering::SeqCst);
        if !problems.is_empty() {
            return problems;
        }
        match self.registry_answers().await {
            Ok(()) => {}
            Err(line) => {
                problems.push(line);
                return problems;
            }
        }
        if let Err(e) = self.toolbox_maps().await {
            problems.push(format!(
                "kubernetes: the harness toolbox's ConfigMaps could not be made in namespace {ns}: {}",
                one_line(&e.to_string())
            ));
            return problems;
        }
        // Network `none` needs an init container with NET_ADMIN: a server-side dry run.
        match self.net_admin_admitted().await {
            Ok(admitted) => self.net_admin.store(admitted, Ordering::SeqCst),
            Err(line) => problems.push(line),
        }
        problems
    }

    async fn registry_answers(&self) -> Result<(), String> {
        let Some(registry) = self.resolved.registry.as_deref() else {
            // Only built images need one; a job of named images runs without.
            return Ok(());
        };
        let host = registry.split('/').next().unwrap_or(registry);
        let client = super::registry::Registry::new(host).map_err(|e| e.to_string())?;
        client.ping().await.map_err(|e| {
            format!(
                "kubernetes: {}: start it or pass --registry",
                one_line(&e.to_string())
            )
        })
    }

    /// The resource rules the credentials have in the namespace (a rules review; empty when
    /// it fails).
    async fn resource_rules(&self) -> Vec<ResourceRule> {
        let reviews: Api<SelfSubjectRulesReview> = Api::all(self.client.clone());
        let review = SelfSubjectRulesReview {
            spec: SelfSubjectRulesReviewSpec {
                namespace: Some(self.resolved.namespace.clone()),
            },
            ..Default::default()
        };
        match reviews.create(&PostParams::default(), &review).await {
            Ok(done) => done.status.map(|s| s.resource_rules).unwrap_or_default(),
            Err(e) => {
                tracing::debug!("rules review failed: {e}");
                Vec::new()
            }
        }
    }

    async fn allowed(
        &self,
        reviews: &Api<SelfSubjectAccessReview>,
        verb: &str,
        group: &str,
        resource: &str,
        sub: &str,
    ) -> bool {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(self.resolved.namespace.clone()),
                    verb: Some(verb.to_string()),
                    group: Some(group.to_string()),
                    resource: Some(resource.to_string()),
                    subresource: (!sub.is_empty()).then(|| sub.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        match reviews.create(&PostParams::default(), &review).await {
            Ok(done) => done.status.is_some_and(|s| s.allowed),
            Err(e) => {
                tracing::debug!(verb, resource, "access review failed: {e}");
                false
            }
        }
    }

    /// Whether the namespace admits a pod with arbiter's network-`none` init container
    /// (Pod Security `baseline` forbids NET_ADMIN). `Err`: a line for the user (the
    /// namespace is missing).
    async fn net_admin_admitted(&self) -> Result<bool, String> {
        // Never pulled: a dry run only admits or refuses.
        let image = "arbiter-preflight:dry-run";
        let toolbox = self.toolbox_maps().await.map_err(|e| e.to_string())?;
        let spec = ContainerSpec {
            base: Base::Image(ImageRef::new(image)),
            owner: Owner {
                job: "preflight".to_string(),
                trial: "preflight".to_string(),
                role: Role::Agent,
                extra: Default::default(),
            },
            env: Vec::new(),
            limits: ContainerLimits {
                cpus: 0.1,
                memory_mb: 32,
                pids_limit: 64,
                gpus: 0,
                storage_mb: None,
            },
            network: Network::None,
            workdir: None,
            mounts: Vec::new(),
            start: StartSpec::default(),
        };
        let pod = super::pod::pod_for(&super::pod::PodPlan {
            name: "arb-preflight",
            image,
            toolbox: &toolbox,
            spec: &spec,
            resolved: &self.resolved,
            default_user: None,
            mounts: &[],
        })
        .map_err(|e| e.to_string())?;
        let params = PostParams {
            dry_run: true,
            ..Default::default()
        };
        match self.pods().create(&params, &pod).await {
            Ok(_) => Ok(true),
            Err(e) if api_status(&e) == Some(404) => Err(format!(
                "kubernetes: namespace {} does not exist in context {}: create it or pass --namespace",
                self.resolved.namespace, self.resolved.context
            )),
            Err(e) if api_status(&e) == Some(403) => {
                tracing::info!("a pod with a NET_ADMIN init container is not admitted: {e}");
                Ok(false)
            }
            Err(e) => Err(format!(
                "kubernetes: a trial pod was refused by a dry run: {}",
                one_line(&e.to_string())
            )),
        }
    }
}

/// Whether one of `rules` grants `verb` on `group`'s `resource` (its subresource `sub`, when
/// not empty) whatever the object's name, as RBAC matches them (`*`, and `*/sub` for a
/// subresource); a rule for some names only grants nothing here.
fn granted(rules: &[ResourceRule], verb: &str, group: &str, resource: &str, sub: &str) -> bool {
    let combined = if sub.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}/{sub}")
    };
    let any = |list: &[String], want: &str| list.iter().any(|v| v == "*" || v == want);
    rules.iter().any(|rule| {
        rule.resource_names.as_ref().is_none_or(Vec::is_empty)
            && any(&rule.verbs, verb)
            && any(rule.api_groups.as_deref().unwrap_or_default(), group)
            && rule
                .resources
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|r| {
                    r == "*"
                        || *r == combined
                        || (!sub.is_empty() && r.strip_prefix("*/") == Some(sub))
                })
    })
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> ResourceRule {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        ResourceRule {
            verbs: strings(verbs),
            api_groups: Some(strings(groups)),
            resources: Some(strings(resources)),
            resource_names: (!names.is_empty()).then(|| strings(names)),
        }
    }

    #[test]
    fn rules_grant_as_rbac_matches_them() {
        // docs/kubernetes-rbac.yaml's Role, as a rules review lists it.
        let role = [
            rule(
                &["create", "get", "list", "watch", "delete"],
                &[""],
                &["pods"],
                &[],
            ),
            rule(&["create"], &[""], &["pods/exec"], &[]),
            rule(&["get"], &[""], &["pods/log"], &[]),
            rule(&["patch"], &[""], &["pods/ephemeralcontainers"], &[]),
            rule(&["list", "create"], &[""], &["configmaps"], &[]),
        ];
        for (verb, resource, sub) in NEEDED {
            assert!(
                granted(&role, verb, "", resource, sub),
                "{verb} {resource}/{sub}"
            );
        }
        assert!(!granted(&role, "update", "", "pods", ""));
        assert!(
            !granted(&role, "get", "", "pods", "exec"),
            "a subresource is its own"
        );
        assert!(!granted(
            &role,
            "create",
            "networking.k8s.io",
            "networkpolicies",
            ""
        ));
        assert!(!granted(&[], "get", "", "pods", ""));
        // Wildcards: cluster-admin's rule, and `*/sub`.
        let admin = [rule(&["*"], &["*"], &["*"], &[])];
        assert!(granted(
            &admin,
            "create",
            "networking.k8s.io",
            "networkpolicies",
            ""
        ));
        assert!(granted(&admin, "create", "", "pods", "exec"));
        let any_exec = [rule(&["create"], &[""], &["*/exec"], &[])];
        assert!(granted(&any_exec, "create", "", "pods", "exec"));
        assert!(!granted(&any_exec, "create", "", "pods", ""));
        // Another group's pods; some names only.
        assert!(!granted(
            &[rule(&["*"], &["apps"], &["*"], &[])],
            "get",
            "",
            "pods",
            ""
        ));
        assert!(!granted(
            &[rule(&["*"], &[""], &["pods"], &["one"])],
            "get",
            "",
            "pods",
            ""
        ));
    }
}
