//! Images for pods: the task environments, built with the
//! local Docker engine and pushed to the registry once per content key however many trials
//! ask at the same time (a per-key async once-cell; across processes the registry itself is
//! asked first), used by digest. Named images are left to the kubelet.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bollard::query_parameters::{PushImageOptionsBuilder, TagImageOptionsBuilder};
use futures_util::StreamExt;
use tokio::sync::OnceCell;

use super::KubernetesSandbox;
use super::error::KubeError;
use super::registry::{
    Backoff, Failure, Reference, Registry, after_attempts, retrying, transient_status,
};
use crate::sandbox::docker::DockerSandbox;
use crate::sandbox::{ImageConfig, ImageRecipe, ImageRef, ImageSpec, Sandbox, SandboxError};

/// A prepared environment: the reference pods use, and what its config sets.
#[derive(Debug, Clone)]
pub(super) struct Prepared {
    pub reference: String,
    pub config: Option<ImageConfig>,
    pub digest: Option<String>,
}

impl KubernetesSandbox {
    pub(super) fn registry(&self) -> Result<Registry, SandboxError> {
        let host = self.resolved.registry.as_deref().ok_or_else(|| {
            KubeError::Setup(
                "no registry to push images to: pass --registry, set backend.registry or ARBITER_K8S_REGISTRY".to_string(),
            )
        })?;
        // A registry may carry a path (`host/team`): the host is its first component.
        let host = host.split('/').next().unwrap_or(host);
        Ok(Registry::new(host)?)
    }

    /// `registry[/path]/repository`.
    pub(super) fn pushed_name(&self, repository: &str) -> Result<(String, String), SandboxError> {
        let base = self.resolved.registry.as_deref().unwrap_or("");
        let (host, path) = base.split_once('/').unwrap_or((base, ""));
        let repo = if path.is_empty() {
            repository.to_string()
        } else {
            format!("{}/{repository}", path.trim_matches('/'))
        };
        Ok((format!("{host}/{repo}"), repo))
    }

    /// The local engine that builds and pushes (connected on first use).
    pub(super) async fn engine(&self) -> Result<Arc<DockerSandbox>, SandboxError> {
        self.engine
            .get_or_try_init(|| async {
                let engine = DockerSandbox::connect().await?;
                Ok::<_, SandboxError>(Arc::new(match &self.toolbox {
                    Some(toolbox) => engine.with_toolbox(toolbox),
                    None => engine,
                }))
            })
            .await
            .cloned()
    }

    /// Push `name:tag` with the local engine: one push (however many attempts), tried again
    /// while the registry hiccups (a 5xx, a 429, a dropped connection; [`Backoff::REGISTRY`]),
    /// never after a refusal.
    pub(super) async fn push(&self, name: &str, tag: &str) -> Result<(), SandboxError> {
        let engine = self.engine().await?;
        let docker = engine.client();
        self.pushes.fetch_add(1, Ordering::SeqCst);
        tracing::info!(image = name, tag, "pushing image");
        let image = format!("{name}:{tag}");
        retrying(Backoff::REGISTRY, &image, || push_once(docker, name, tag))
            .await
            .map_err(|(failure, attempts)| KubeError::Push {
                image: image.clone(),
                message: after_attempts(&failure.message, attempts),
            })?;
        Ok(())
    }

    /// [`Sandbox::prepare_image`]: a build is built locally, pushed once and used by digest;
    /// a named image is the kubelet's to pull (its config read from its registry when it
    /// can be).
    pub(super) async fn prepare(&self, spec: &ImageSpec) -> Result<ImageRef, SandboxError> {
        let key = spec.reference().to_string();
        let cell = {
            let mut cells = self.images.lock().await;
            cells
                .entry(key.clone())
                .or_insert_with(|| Arc::new(OnceCell::new()))
                .clone()
        };
        let prepared = cell
            .get_or_try_init(|| async {
                match &spec.recipe {
                    ImageRecipe::Named(name) => Ok::<_, SandboxError>(Prepared {
                        reference: name.clone(),
                        config: self.named_config(name).await,
                        digest: None,
                    }),
                    ImageRecipe::Build { .. } => {
                        let built = tokio::time::timeout(spec.timeout, self.build_and_push(spec));
                        match built.await {
                            Ok(result) => result,
                            Err(_) => Err(SandboxError::Build {
                                tag: key.clone(),
                                message: format!(
                                    "build and push timed out after {}s",
                                    spec.timeout.as_secs()
                                ),
                            }),
                        }
                    }
                }
            })
            .await?
            .clone();
        let reference = prepared.reference.clone();
        self.prepared
            .lock()
            .await
            .insert(reference.clone(), prepared);
        Ok(ImageRef::new(reference))
    }

    async fn build_and_push(&self, spec: &ImageSpec) -> Result<Prepared, SandboxError> {
        let key = spec.reference();
        let (repository, tag) = key.rsplit_once(':').unwrap_or((key, "latest"));
        let (name, repo) = self.pushed_name(repository)?;
        let registry = self.registry()?;
        let engine = self.engine().await?;
        let digest = match registry.digest(&repo, tag).await? {
            Some(digest) => digest,
            None => {
                if !engine.has_image(key).await? {
                    self.builds.fetch_add(1, Ordering::SeqCst);
                }
                let local = engine.prepare_image(spec).await?;
                engine
                    .client()
                    .tag_image(
                        local.as_str(),
                        Some(TagImageOptionsBuilder::new().repo(&name).tag(tag).build()),
                    )
                    .await
                    .map_err(|e| KubeError::Push {
                        image: name.clone(),
                        message: format!("tag: {e}"),
                    })?;
                self.push(&name, tag).await?;
                registry
                    .digest(&repo, tag)
                    .await?
                    .ok_or_else(|| KubeError::Push {
                        image: format!("{name}:{tag}"),
                        message: "pushed, but the registry does not list it".to_string(),
                    })?
            }
        };
        // The config as built: the local engine has it, else the registry.
        let config = match engine.image_config(&ImageRef::new(key)).await {
            Ok(config) => Some(config),
            Err(_) => registry.image_config(&repo, &digest).await.ok(),
        };
        Ok(Prepared {
            reference: format!("{name}@{digest}"),
            config,
            digest: Some(digest),
        })
    }

    /// A named image's config from its registry; `None` (with a note) when it cannot be read.
    async fn named_config(&self, name: &str) -> Option<ImageConfig> {
        let r = Reference::parse(name);
        let registry = Registry::new(&r.host).ok()?;
        match registry.image_config(&r.repository, &r.reference).await {
            Ok(config) => Some(config),
            Err(e) => {
                tracing::warn!(
                    image = name,
                    "image config not readable ({e}): execs without a user run as root"
                );
                None
            }
        }
    }

    /// The config of a prepared image, when known.
    pub(super) async fn config_of(&self, image: &str) -> Option<ImageConfig> {
        self.prepared
            .lock()
            .await
            .get(image)
            .and_then(|p| p.config.clone())
    }

    /// The user execs without one run as in containers of `image` (its `USER`).
    pub(super) async fn image_user(&self, image: &str) -> Option<String> {
        self.config_of(image).await.and_then(|c| c.user)
    }

    /// The digest of a prepared image, when it was built here.
    pub(super) async fn digest_of(&self, image: &str) -> Option<String> {
        self.prepared
            .lock()
            .await
            .get(image)
            .and_then(|p| p.digest.clone())
    }
}

/// One attempt at pushing `name:tag`: the engine's stream read to its end.
async fn push_once(docker: &bollard::Docker, name: &str, tag: &str) -> Result<(), Failure> {
    let options = PushImageOptionsBuilder::new().tag(tag).build();
    let mut stream = docker.push_image(name, Some(options), None);
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| match &e {
            // The engine's own words (its answer, or an error in its stream): judged by what
            // they say of the registry.
            bollard::errors::Error::DockerResponseServerError { .. }
            | bollard::errors::Error::DockerStreamError { .. } => push_failure(&e.to_string()),
            // The engine's connection dropped mid-push: another attempt may go through.
            _ => Failure::transient(e.to_string()),
        })?;
        if let Some(detail) = info.error_detail {
            return Err(push_failure(&detail.message.unwrap_or_default()));
        }
    }
    Ok(())
}

/// A push's failure as the engine words the registry's answer: a hiccup (the registry's 5xx
/// or 429, a connection refused, reset or cut short, a timeout) is worth another attempt; a
/// refusal (unauthorized, denied, unknown, any other 4xx) is not, nor anything unrecognised.
pub(crate) fn push_failure(message: &str) -> Failure {
    let lower = message.to_ascii_lowercase();
    let refusal = [
        "unauthorized",
        "denied",
        "forbidden",
        "name unknown",
        "manifest invalid",
        "does not exist locally",
    ];
    if refusal.iter().any(|r| lower.contains(r)) {
        return Failure::refused(message);
    }
    if let Some(code) = http_status_in(&lower) {
        return if transient_status(code) {
            Failure::transient(message)
        } else {
            Failure::refused(message)
        };
    }
    let hiccup = [
        "toomanyrequests",
        "too many requests",
        "internal server error",
        "bad gateway",
        "service unavailable",
        "gateway timeout",
        "connection refused",
        "connection reset",
        "broken pipe",
        "timeout",
        "timed out",
        "unexpected eof",
        ": eof",
    ];
    let transient = hiccup.iter().any(|h| lower.contains(h)) || lower.trim_end().ends_with("eof");
    Failure {
        message: message.to_string(),
        transient,
    }
}

/// The HTTP status a message names (`… HTTP status: 500 …`, `status code 503`, `HTTP 429`).
fn http_status_in(lower: &str) -> Option<u16> {
    ["http status: ", "status code ", "status: ", "http "]
        .iter()
        .find_map(|marker| {
            lower.match_indices(marker).find_map(|(at, m)| {
                let digits: String = lower[at + m.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_digit())
                    .collect();
                (digits.len() == 3)
                    .then(|| digits.parse::<u16>().ok())
                    .flatten()
                    .filter(|c| (100..600).contains(c))
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_is_tried_again_on_the_registrys_hiccups_never_on_a_refusal() {
        for hiccup in [
            "received unexpected HTTP status: 500 Internal Server Error",
            "received unexpected HTTP status: 503 Service Unavailable",
            "toomanyrequests: retry later",
            "Put \"http://127.0.0.1:5000/v2/x/blobs/uploads/abc\": EOF",
            "read tcp 127.0.0.1:4242->127.0.0.1:5000: read: connection reset by peer",
            "Get \"http://127.0.0.1:5000/v2/\": dial tcp 127.0.0.1:5000: connect: connection refused",
            "net/http: request canceled (Client.Timeout exceeded while awaiting headers)",
            "Docker stream error: received unexpected HTTP status: 500 Internal Server Error",
        ] {
            assert!(push_failure(hiccup).transient, "{hiccup}");
        }
        for refusal in [
            "unauthorized: authentication required",
            "denied: requested access to the resource is denied",
            "received unexpected HTTP status: 404 Not Found",
            "received unexpected HTTP status: 401 Unauthorized",
            "name unknown: repository name not known to registry",
            "An image does not exist locally with the tag: 127.0.0.1:5000/x",
            "something nobody said before",
            "Docker stream error: unauthorized: authentication required",
            "Docker responded with status code 404: No such image: x:y",
        ] {
            assert!(!push_failure(refusal).transient, "{refusal}");
        }
        assert_eq!(http_status_in("http status: 502 bad gateway"), Some(502));
        assert_eq!(http_status_in("no status here"), None);
    }
}
