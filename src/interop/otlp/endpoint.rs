//! The collector's address as a user gives it (`--otlp URL`, `otlp: {endpoint: URL}`).

/// The path OTLP/HTTP receivers take traces on.
pub(crate) const TRACES_PATH: &str = "/v1/traces";

/// The URL traces are POSTed to, from what the user gave: an `http://` or `https://` URL with
/// a host and no credentials (a header such as `Authorization` goes in
/// `OTEL_EXPORTER_OTLP_HEADERS`, never in job.yaml). As for `OTEL_EXPORTER_OTLP_ENDPOINT`,
/// `/v1/traces` is appended to its path unless the path already ends with it, so both
/// `http://localhost:4318` and `http://localhost:4318/v1/traces` work. `Err` is the message
/// for the field.
pub(crate) fn traces_url(raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    let url = reqwest::Url::parse(raw)
        .map_err(|e| format!("not a URL ({e}): expected e.g. http://localhost:4318"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "expected an http:// or https:// URL (OTLP/HTTP), got scheme {:?}",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("the URL has no host".to_string());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "credentials in the URL are refused (they would be saved in job.yaml): pass them as a header in OTEL_EXPORTER_OTLP_HEADERS"
                .to_string(),
        );
    }
    if url.fragment().is_some() {
        return Err("the URL has a #fragment".to_string());
    }
    let mut url = url;
    if !url.path().ends_with(TRACES_PATH) {
        let path = format!("{}{TRACES_PATH}", url.path().trim_end_matches('/'));
        url.set_path(&path);
    }
    Ok(url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_get_the_traces_path_and_full_ones_keep_theirs() {
        for (raw, want) in [
            ("http://localhost:4318", "http://localhost:4318/v1/traces"),
            ("http://localhost:4318/", "http://localhost:4318/v1/traces"),
            (
                "https://otlp.example.com/otlp",
                "https://otlp.example.com/otlp/v1/traces",
            ),
            (
                "http://127.0.0.1:4318/v1/traces",
                "http://127.0.0.1:4318/v1/traces",
            ),
            (
                " http://[::1]:4318/v1/traces ",
                "http://[::1]:4318/v1/traces",
            ),
        ] {
            assert_eq!(traces_url(raw).as_deref(), Ok(want), "{raw}");
        }
    }

    #[test]
    fn bad_endpoints_say_why() {
        for (raw, says) in [
            ("localhost:4318", "expected an http:// or https:// URL"),
            ("4318", "not a URL"),
            (
                "grpc://collector:4317",
                "expected an http:// or https:// URL",
            ),
            (
                "http://user:secret@collector:4318",
                "credentials in the URL are refused",
            ),
            ("http://collector:4318/#x", "fragment"),
            ("", "not a URL"),
        ] {
            let err = traces_url(raw).expect_err(raw);
            assert!(err.contains(says), "{raw}: {err}");
        }
    }
}
