//! The image registry over the distribution API: does it answer, which digest a tag names,
//! and what an image's config sets (its `Env`, `WorkingDir`, `User`). Plain HTTP for a
//! registry on the loopback (as `docker push` allows), HTTPS elsewhere; anonymous bearer
//! tokens when a registry asks for one.
//!
//! A registry hiccups: under load it answers 500 or 503, rate-limits with 429, or drops a
//! connection. Every request here (and every push, images.rs) is tried again on those, a
//! bounded number of times with a doubling pause ([`Backoff`]), never on a refusal (any
//! other 4xx); what still fails is an error naming the registry and the last status.

use std::future::Future;
use std::time::Duration;

use serde::Deserialize;

use super::error::KubeError;
use crate::sandbox::ImageConfig;

const MANIFEST_TYPES: &str = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

/// A registry host (`host[:port]`) and how to reach it.
#[derive(Debug, Clone)]
pub(crate) struct Registry {
    pub host: String,
    base: String,
    http: reqwest::Client,
    backoff: Backoff,
}

/// `host[:port]/repo/path:tag` or `…@sha256:…` split into its parts; Docker Hub's implicit
/// host and `library/` are made explicit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reference {
    pub host: String,
    pub repository: String,
    /// A tag or a digest.
    pub reference: String,
}

impl Reference {
    pub(crate) fn parse(image: &str) -> Reference {
        let (first, rest) = image.split_once('/').unwrap_or(("", image));
        let explicit_host = !first.is_empty()
            && (first.contains('.') || first.contains(':') || first == "localhost");
        let (host, path) = if explicit_host {
            (first.to_string(), rest.to_string())
        } else {
            ("registry-1.docker.io".to_string(), image.to_string())
        };
        let (path, reference) = match path.split_once('@') {
            Some((p, digest)) => (p.to_string(), digest.to_string()),
            None => match path.rsplit_once(':') {
                Some((p, tag)) if !tag.contains('/') => (p.to_string(), tag.to_string()),
                _ => (path.clone(), "latest".to_string()),
            },
        };
        let repository = if host == "registry-1.docker.io" && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        Reference {
            host,
            repository,
            reference,
        }
    }
}

#[derive(Deserialize)]
struct Manifest {
    #[serde(rename = "mediaType", default)]
    media_type: Option<String>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Descriptor {
    digest: String,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Deserialize)]
struct Platform {
    architecture: String,
    os: String,
}

#[derive(Deserialize)]
struct ConfigBlob {
    #[serde(default)]
    config: Option<ConfigFields>,
}

#[derive(Deserialize)]
struct ConfigFields {
    #[serde(rename = "Env", default)]
    env: Option<Vec<String>>,
    #[serde(rename = "WorkingDir", default)]
    working_dir: Option<String>,
    #[serde(rename = "User", default)]
    user: Option<String>,
    #[serde(rename = "Entrypoint", default)]
    entrypoint: Option<Vec<String>>,
}

/// How many times a registry request (or a push) is tried and how long it waits between
/// attempts: `first`, then twice as long each time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    pub attempts: u32,
    pub first: Duration,
}

impl Backoff {
    /// Five attempts, 0.25 s, 0.5 s, 1 s and 2 s apart (3.75 s of waiting at most).
    pub(crate) const REGISTRY: Backoff = Backoff {
        attempts: 5,
        first: Duration::from_millis(250),
    };

    /// The pause after attempt `attempt` (1-based) failed.
    fn pause(&self, attempt: u32) -> Duration {
        self.first
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
    }
}

/// A status worth another attempt: the registry's own failure (5xx) or its rate limit (429).
pub(crate) fn transient_status(code: u16) -> bool {
    code == 429 || (500..=599).contains(&code)
}

/// One failed attempt: what happened, and whether another attempt may go otherwise.
#[derive(Debug)]
pub(crate) struct Failure {
    pub message: String,
    pub transient: bool,
}

impl Failure {
    pub(crate) fn refused(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            transient: false,
        }
    }

    pub(crate) fn transient(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            transient: true,
        }
    }

    /// A transport failure: a connection refused, reset or dropped, a timeout, a body cut
    /// short are hiccups; a request that could not even be built is not.
    fn from_http(context: &str, e: &reqwest::Error) -> Failure {
        Failure {
            message: format!("{context}{e}"),
            transient: !(e.is_builder() || e.is_redirect()),
        }
    }
}

/// `attempt` until it succeeds, fails for good, or `backoff.attempts` ran out; the failure
/// returned says after how many attempts (`what`: for the log line of each retry).
pub(crate) async fn retrying<T, F, Fut>(
    backoff: Backoff,
    what: &str,
    mut attempt: F,
) -> Result<T, (Failure, u32)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let mut tried = 0;
    loop {
        tried += 1;
        match attempt().await {
            Ok(done) => return Ok(done),
            Err(failure) if failure.transient && tried < backoff.attempts => {
                let pause = backoff.pause(tried);
                tracing::warn!(
                    what,
                    attempt = tried,
                    of = backoff.attempts,
                    pause_ms = pause.as_millis() as u64,
                    "registry hiccup, trying again: {}",
                    failure.message
                );
                tokio::time::sleep(pause).await;
            }
            Err(failure) => return Err((failure, tried)),
        }
    }
}

/// `message`, with how many attempts it took when there was more than one.
pub(crate) fn after_attempts(message: &str, attempts: u32) -> String {
    if attempts > 1 {
        format!("{message} (after {attempts} attempts)")
    } else {
        message.to_string()
    }
}

/// An answer read whole: its status, headers and body.
struct Reply {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

/// Whether `host` is this machine (plain HTTP, as `docker push` does for it).
fn is_loopback(host: &str) -> bool {
    let name = host.rsplit_once(':').map_or(host, |(h, _)| h);
    name == "localhost" || name.starts_with("127.") || name == "[::1]"
}

impl Registry {
    pub(crate) fn new(host: &str) -> Result<Registry, KubeError> {
        let scheme = if is_loopback(host) { "http" } else { "https" };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| KubeError::Registry {
                registry: host.to_string(),
                message: e.to_string(),
            })?;
        Ok(Registry {
            host: host.to_string(),
            base: format!("{scheme}://{host}"),
            http,
            backoff: Backoff::REGISTRY,
        })
    }

    /// The same registry, tried `backoff`'s way (tests: short pauses).
    #[cfg(test)]
    fn with_backoff(mut self, backoff: Backoff) -> Registry {
        self.backoff = backoff;
        self
    }

    fn failed(&self, message: impl Into<String>) -> KubeError {
        KubeError::Registry {
            registry: self.host.clone(),
            message: message.into(),
        }
    }

    /// `GET /v2/`: 200, or 401 (it answers; credentials are another matter).
    pub(crate) async fn ping(&self) -> Result<(), KubeError> {
        let url = format!("{}/v2/", self.base);
        let url = url.as_str();
        let attempt = || async move {
            let got = self
                .http
                .get(url)
                .timeout(Duration::from_secs(5))
                .send()
                .await
                .map_err(|e| Failure::from_http("does not answer: ", &e))?;
            match got.status().as_u16() {
                200 | 401 => Ok(()),
                code => Err(Failure {
                    message: format!("answered HTTP {code} to /v2/"),
                    transient: transient_status(code),
                }),
            }
        };
        retrying(self.backoff, "registry ping", attempt)
            .await
            .map_err(|(f, n)| self.failed(after_attempts(&f.message, n)))
    }

    /// A GET (or HEAD) with an anonymous bearer token when the registry asks for one, its
    /// body read whole; tried again on a 5xx, a 429 or a dropped connection. Any other status
    /// is the caller's to judge; `what` names the object in the error.
    async fn fetch(
        &self,
        head: bool,
        url: &str,
        accept: &str,
        what: &str,
    ) -> Result<Reply, KubeError> {
        let attempt = || async move {
            let got = self.request(head, url, accept).await?;
            let status = got.status().as_u16();
            if transient_status(status) {
                return Err(Failure::transient(format!("HTTP {status} for {what}")));
            }
            let headers = got.headers().clone();
            let body = got
                .bytes()
                .await
                .map_err(|e| Failure::from_http(&format!("{what}: "), &e))?;
            Ok(Reply {
                status,
                headers,
                body: body.to_vec(),
            })
        };
        retrying(self.backoff, what, attempt)
            .await
            .map_err(|(f, n)| self.failed(after_attempts(&f.message, n)))
    }

    /// One GET (or HEAD), with an anonymous bearer token when the registry asks for one.
    async fn request(
        &self,
        head: bool,
        url: &str,
        accept: &str,
    ) -> Result<reqwest::Response, Failure> {
        let send = |token: Option<&str>| {
            let mut req = if head {
                self.http.head(url)
            } else {
                self.http.get(url)
            };
            req = req.header("Accept", accept);
            if let Some(token) = token {
                req = req.bearer_auth(token);
            }
            req.send()
        };
        let got = send(None).await.map_err(|e| Failure::from_http("", &e))?;
        if got.status().as_u16() != 401 {
            return Ok(got);
        }
        let challenge = got
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let token = self.anonymous_token(&challenge).await?;
        send(Some(&token))
            .await
            .map_err(|e| Failure::from_http("", &e))
    }

    async fn anonymous_token(&self, challenge: &str) -> Result<String, Failure> {
        let Some(params) = challenge.strip_prefix("Bearer ") else {
            return Err(Failure::refused(
                "asks for credentials arbiter does not have",
            ));
        };
        let field = |name: &str| {
            params.split(',').find_map(|kv| {
                let (k, v) = kv.trim().split_once('=')?;
                (k == name).then(|| v.trim_matches('"').to_string())
            })
        };
        let realm =
            field("realm").ok_or_else(|| Failure::refused("token challenge without a realm"))?;
        let mut query = Vec::new();
        for key in ["service", "scope"] {
            if let Some(v) = field(key) {
                query.push((key, v));
            }
        }
        #[derive(Deserialize)]
        struct Token {
            #[serde(default)]
            token: Option<String>,
            #[serde(default)]
            access_token: Option<String>,
        }
        let got = self
            .http
            .get(&realm)
            .query(&query)
            .send()
            .await
            .map_err(|e| Failure::from_http("token: ", &e))?;
        let status = got.status().as_u16();
        if status != 200 {
            return Err(Failure {
                message: format!("token: HTTP {status} from {realm}"),
                transient: transient_status(status),
            });
        }
        let body = got
            .bytes()
            .await
            .map_err(|e| Failure::from_http("token: ", &e))?;
        let got: Token =
            serde_json::from_slice(&body).map_err(|e| Failure::refused(format!("token: {e}")))?;
        got.token
            .or(got.access_token)
            .ok_or_else(|| Failure::refused("token reply without a token"))
    }

    /// The digest `repository:reference` names, or `None` when the registry has no such
    /// manifest.
    pub(crate) async fn digest(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<Option<String>, KubeError> {
        let url = format!("{}/v2/{repository}/manifests/{reference}", self.base);
        let what = format!("the manifest of {repository}:{reference}");
        let got = self.fetch(true, &url, MANIFEST_TYPES, &what).await?;
        match got.status {
            200 => got
                .headers
                .get("docker-content-digest")
                .and_then(|v| v.to_str().ok())
                .map(|d| Some(d.to_string()))
                .ok_or_else(|| self.failed("manifest without Docker-Content-Digest")),
            404 => Ok(None),
            code => Err(self.failed(format!("HTTP {code} for {what}"))),
        }
    }

    /// What the image's config sets (for linux/amd64 when the reference is an index).
    pub(crate) async fn image_config(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<ImageConfig, KubeError> {
        let fields = self.config_fields(repository, reference).await?;
        Ok(ImageConfig {
            env: fields
                .as_ref()
                .and_then(|c| c.env.clone())
                .unwrap_or_default(),
            workdir: fields
                .as_ref()
                .and_then(|c| c.working_dir.clone())
                .filter(|d| d.starts_with('/')),
            user: fields
                .as_ref()
                .and_then(|c| c.user.clone())
                .filter(|u| !u.is_empty()),
        })
    }

    /// The image's ENTRYPOINT (`None`: it has none).
    pub(crate) async fn image_entrypoint(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<Option<Vec<String>>, KubeError> {
        let fields = self.config_fields(repository, reference).await?;
        Ok(fields.and_then(|c| c.entrypoint).filter(|e| !e.is_empty()))
    }

    async fn config_fields(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<Option<ConfigFields>, KubeError> {
        let mut reference = reference.to_string();
        for _ in 0..2 {
            let url = format!("{}/v2/{repository}/manifests/{reference}", self.base);
            let what = format!("the manifest of {repository}:{reference}");
            let got = self.fetch(false, &url, MANIFEST_TYPES, &what).await?;
            if !(200..300).contains(&got.status) {
                return Err(self.failed(format!("HTTP {} for {what}", got.status)));
            }
            let manifest: Manifest = serde_json::from_slice(&got.body)
                .map_err(|e| self.failed(format!("manifest: {e}")))?;
            if let Some(config) = manifest.config {
                let url = format!("{}/v2/{repository}/blobs/{}", self.base, config.digest);
                let what = format!("the config of {repository}@{}", config.digest);
                let got = self.fetch(false, &url, "*/*", &what).await?;
                if !(200..300).contains(&got.status) {
                    return Err(self.failed(format!("HTTP {} for {what}", got.status)));
                }
                let blob: ConfigBlob = serde_json::from_slice(&got.body)
                    .map_err(|e| self.failed(format!("config: {e}")))?;
                return Ok(blob.config);
            }
            let chosen = manifest
                .manifests
                .iter()
                .find(|m| {
                    m.platform
                        .as_ref()
                        .is_some_and(|p| p.os == "linux" && p.architecture == "amd64")
                })
                .or_else(|| manifest.manifests.first())
                .ok_or_else(|| {
                    self.failed(format!(
                        "manifest of {repository}:{reference} ({}) names no image",
                        manifest.media_type.unwrap_or_default()
                    ))
                })?;
            reference = chosen.digest.clone();
        }
        Err(self.failed(format!("nested indexes for {repository}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn references_are_split_as_the_engine_does() {
        let r = Reference::parse("127.0.0.1:5000/arbiter-env/hello:abc");
        assert_eq!(r.host, "127.0.0.1:5000");
        assert_eq!(r.repository, "arbiter-env/hello");
        assert_eq!(r.reference, "abc");
        let hub = Reference::parse("debian:bookworm-slim");
        assert_eq!(hub.host, "registry-1.docker.io");
        assert_eq!(hub.repository, "library/debian");
        let digest = Reference::parse("ghcr.io/o/i@sha256:00");
        assert_eq!(digest.repository, "o/i");
        assert_eq!(digest.reference, "sha256:00");
        assert_eq!(Reference::parse("localhost/x").reference, "latest");
        assert!(is_loopback("127.0.0.1:5000") && !is_loopback("registry.example.com"));
    }

    /// A registry on the loopback that answers each request with the next of `script`'s
    /// statuses (the last one once the script runs out), a digest with every 200; the
    /// requests it saw.
    async fn scripted(script: &[u16]) -> (Registry, Arc<AtomicUsize>) {
        use axum::http::{HeaderMap, StatusCode};
        let seen = Arc::new(AtomicUsize::new(0));
        let script = Arc::new(script.to_vec());
        let app = axum::Router::new().fallback({
            let seen = Arc::clone(&seen);
            move || {
                let n = seen.fetch_add(1, Ordering::SeqCst);
                let code = script[n.min(script.len() - 1)];
                async move {
                    let mut headers = HeaderMap::new();
                    headers.insert("docker-content-digest", "sha256:ab".parse().unwrap());
                    let body = r#"{"config":{"digest":"sha256:cf"},"manifests":[]}"#;
                    (StatusCode::from_u16(code).unwrap(), headers, body)
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let registry = Registry::new(&host).unwrap().with_backoff(FAST);
        (registry, seen)
    }

    const FAST: Backoff = Backoff {
        attempts: 5,
        first: Duration::from_millis(1),
    };

    #[test]
    fn the_pauses_double_from_a_quarter_second() {
        let b = Backoff::REGISTRY;
        assert_eq!(b.attempts, 5);
        let pauses: Vec<u128> = (1..b.attempts).map(|n| b.pause(n).as_millis()).collect();
        assert_eq!(pauses, [250, 500, 1000, 2000]);
        assert!(transient_status(500) && transient_status(503) && transient_status(429));
        assert!(!transient_status(401) && !transient_status(404) && !transient_status(400));
    }

    #[tokio::test]
    async fn a_registry_that_answers_500_a_few_times_is_asked_again_until_it_answers() {
        let (registry, seen) = scripted(&[500, 503, 429, 200]).await;
        let digest = registry.digest("r", "t").await.expect("digest");
        assert_eq!(digest.as_deref(), Some("sha256:ab"));
        assert_eq!(seen.load(Ordering::SeqCst), 4);
        // A GET of the manifest and one of its config blob, each past a hiccup.
        let (registry, seen) = scripted(&[502, 200, 500, 200]).await;
        registry.image_config("r", "t").await.expect("config");
        assert_eq!(seen.load(Ordering::SeqCst), 4);
        let (registry, seen) = scripted(&[500, 200]).await;
        registry.ping().await.expect("ping");
        assert_eq!(seen.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_registry_that_always_answers_500_is_an_error_naming_it_and_the_status() {
        let (registry, seen) = scripted(&[500]).await;
        let err = registry.digest("r", "t").await.expect_err("always 500");
        assert_eq!(seen.load(Ordering::SeqCst), 5, "bounded: five attempts");
        let text = err.to_string();
        assert!(matches!(&err, KubeError::Registry { registry: r, .. } if *r == registry.host));
        assert!(text.contains(&registry.host), "{text}");
        assert!(text.contains("HTTP 500"), "{text}");
        assert!(text.contains("after 5 attempts"), "{text}");
        // The neutral error the trial sees: an infrastructure failure, the words kept.
        let neutral = crate::sandbox::SandboxError::from(err);
        assert!(neutral.to_string().contains("HTTP 500"), "{neutral}");
    }

    #[tokio::test]
    async fn a_refusal_is_never_asked_again() {
        let (registry, seen) = scripted(&[404]).await;
        assert_eq!(registry.digest("r", "t").await.expect("absent"), None);
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        let (registry, seen) = scripted(&[401]).await;
        let err = registry.digest("r", "t").await.expect_err("401");
        assert!(err.to_string().contains("credentials"), "{err}");
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        let (registry, seen) = scripted(&[403]).await;
        let err = registry.digest("r", "t").await.expect_err("403");
        assert!(err.to_string().contains("HTTP 403"), "{err}");
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        let (registry, seen) = scripted(&[404]).await;
        let err = registry.image_config("r", "t").await.expect_err("404");
        assert!(err.to_string().contains("HTTP 404"), "{err}");
        assert_eq!(seen.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_dropped_connection_is_a_hiccup() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                if n < 2 {
                    // Read the request, answer nothing: the connection closes under it.
                    drop(conn);
                    continue;
                }
                let reply = "HTTP/1.1 200 OK\r\nDocker-Content-Digest: sha256:ab\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                let _ = conn.write_all(reply.as_bytes()).await;
            }
        });
        let registry = Registry::new(&host).unwrap().with_backoff(FAST);
        let digest = registry.digest("r", "t").await.expect("digest");
        assert_eq!(digest.as_deref(), Some("sha256:ab"));
        assert_eq!(seen.load(Ordering::SeqCst), 3);
        // Nobody listening at all: the same bounded attempts, then the registry named.
        let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = gone.local_addr().unwrap().to_string();
        drop(gone);
        let registry = Registry::new(&host).unwrap().with_backoff(FAST);
        let err = registry.ping().await.expect_err("refused");
        let text = err.to_string();
        assert!(
            text.contains(&host) && text.contains("after 5 attempts"),
            "{text}"
        );
    }
}
