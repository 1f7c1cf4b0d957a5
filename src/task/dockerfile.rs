//! What a Dockerfile builds from, so a failed build can name the base image it
//! could not get.

/// The base images of `dockerfile`'s `FROM` lines, in order, without
/// duplicates: `--platform=…` flags skipped, `ARG`s declared before the first
/// `FROM` substituted (`$NAME`, `${NAME}`, `${NAME:-default}`; best effort — an
/// unknown variable is left as written), earlier stages (`FROM x AS build`,
/// then `FROM build`) and `scratch` excluded. Line continuations and comments
/// are understood, including a `# escape=` directive.
///
/// The trial should call this on the Dockerfile of an `ImageSource::Build`
/// when the build fails and put the result in the error, e.g. "could not build
/// environment/Dockerfile (base image python:3.12-slim)".
pub fn dockerfile_base_images(dockerfile: &str) -> Vec<String> {
    let escape = escape_char(dockerfile);
    let mut args: Vec<(String, String)> = Vec::new();
    let mut stages: Vec<String> = Vec::new();
    let mut images: Vec<String> = Vec::new();
    let mut seen_from = false;
    for line in instructions(dockerfile, escape) {
        let mut words = line.split_whitespace();
        let Some(keyword) = words.next() else {
            continue;
        };
        if keyword.eq_ignore_ascii_case("ARG") && !seen_from {
            for decl in words {
                let (name, value) = match decl.split_once('=') {
                    Some((n, v)) => (n, unquote(v)),
                    None => (decl, String::new()),
                };
                args.retain(|(n, _)| n != name);
                args.push((name.to_string(), value));
            }
        } else if keyword.eq_ignore_ascii_case("FROM") {
            seen_from = true;
            let rest: Vec<&str> = words.filter(|w| !w.starts_with("--")).collect();
            let Some(image) = rest.first() else {
                continue;
            };
            let image = substitute(image, &args);
            // A stage name is looked up among the stages before this one.
            let is_stage = stages.contains(&image.to_ascii_lowercase());
            if let [_, as_kw, alias, ..] = rest.as_slice()
                && as_kw.eq_ignore_ascii_case("AS")
            {
                stages.push(alias.to_ascii_lowercase());
            }
            if is_stage || image.eq_ignore_ascii_case("scratch") || images.contains(&image) {
                continue;
            }
            images.push(image);
        }
    }
    images
}

/// The working directory the final stage of `dockerfile` sets with `WORKDIR`, as written
/// (a relative `WORKDIR` joined to the one before it; a stage built `FROM` an earlier stage
/// starts from that stage's), or `None` when the final stage sets none (the base image's
/// own applies, which only the image can tell). A best-effort static reading for reports
/// such as `arbiter tasks load`: variables in the path are left as written.
pub fn dockerfile_workdir(dockerfile: &str) -> Option<String> {
    let escape = escape_char(dockerfile);
    let mut stages: Vec<(String, Option<String>)> = Vec::new();
    let mut alias: Option<String> = None;
    let mut current: Option<String> = None;
    for line in instructions(dockerfile, escape) {
        let mut words = line.split_whitespace();
        let Some(keyword) = words.next() else {
            continue;
        };
        if keyword.eq_ignore_ascii_case("FROM") {
            if let Some(name) = alias.take() {
                stages.push((name, current.take()));
            }
            let rest: Vec<&str> = words.filter(|w| !w.starts_with("--")).collect();
            let base = rest.first().map(|b| b.to_ascii_lowercase());
            current = stages
                .iter()
                .rev()
                .find(|(name, _)| Some(name) == base.as_ref())
                .and_then(|(_, dir)| dir.clone());
            if let [_, as_kw, name, ..] = rest.as_slice()
                && as_kw.eq_ignore_ascii_case("AS")
            {
                alias = Some(name.to_ascii_lowercase());
            }
        } else if keyword.eq_ignore_ascii_case("WORKDIR") {
            let path = unquote(line.trim_start()[keyword.len()..].trim());
            if path.is_empty() {
                continue;
            }
            current = Some(if path.starts_with('/') || path.starts_with('$') {
                path
            } else {
                let parent = current.as_deref().unwrap_or("/");
                format!("{}/{path}", parent.trim_end_matches('/'))
            });
        }
    }
    current
}

/// The `# escape=` parser directive, else `\`.
fn escape_char(text: &str) -> char {
    for line in text.lines() {
        let Some(directive) = line.trim().strip_prefix('#') else {
            break;
        };
        if let Some((key, value)) = directive.split_once('=')
            && key.trim().eq_ignore_ascii_case("escape")
            && let Some(c) = value.trim().chars().next()
        {
            return c;
        }
    }
    '\\'
}

/// Logical instructions: comments dropped, continuation lines joined.
fn instructions(text: &str, escape: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') {
            continue;
        }
        match trimmed.strip_suffix(escape) {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                if !current.trim().is_empty() {
                    out.push(std::mem::take(&mut current));
                }
                current.clear();
            }
        }
    }
    if !current.trim().is_empty() {
        out.push(current);
    }
    out
}

fn unquote(value: &str) -> String {
    let v = value.trim();
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|s| s.strip_suffix(q)) {
            return inner.to_string();
        }
    }
    v.to_string()
}

/// `$NAME`, `${NAME}`, `${NAME:-default}` from `args`; unknown ones kept.
fn substitute(text: &str, args: &[(String, String)]) -> String {
    let lookup = |name: &str| {
        args.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(braced) = after.strip_prefix('{')
            && let Some(end) = braced.find('}')
        {
            let body = &braced[..end];
            let (name, default) = match body.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (body, None),
            };
            match (lookup(name), default) {
                (Some(v), _) => out.push_str(&v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => out.push_str(&rest[i..i + 2 + end + 1]),
            }
            rest = &braced[end + 1..];
            continue;
        }
        let len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        match lookup(&after[..len]) {
            Some(v) if len > 0 => out.push_str(&v),
            _ => out.push_str(&rest[i..i + 1 + len]),
        }
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_images_of_real_shaped_dockerfiles() {
        let cases: &[(&str, &[&str])] = &[
            ("FROM python:3.12-slim\nRUN true\n", &["python:3.12-slim"]),
            (
                "ARG BASE=ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624\nFROM ${BASE}\n",
                &["ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624"],
            ),
            (
                "ARG PY=3.11\nFROM --platform=linux/amd64 python:${PY}-slim AS build\nRUN make\nFROM debian:bookworm\nCOPY --from=build /out /out\n",
                &["python:3.11-slim", "debian:bookworm"],
            ),
            (
                "FROM golang:1.22 AS builder\nFROM builder AS test\nFROM scratch\nCOPY --from=builder /app /app\n",
                &["golang:1.22"],
            ),
            (
                "# syntax=docker/dockerfile:1\n# comment\nfrom \\\n  ubuntu:22.04\nFROM ubuntu:22.04\n",
                &["ubuntu:22.04"],
            ),
            ("ARG TAG\nFROM node:${TAG:-20}\n", &["node:20"]),
            ("FROM $UNKNOWN_BASE\n", &["$UNKNOWN_BASE"]),
            ("# escape=`\nFROM `\n  alpine:3.20\n", &["alpine:3.20"]),
            ("FROM alpine AS Alpine\nFROM alpine\n", &["alpine"]),
            ("RUN echo no from\n", &[]),
        ];
        for (dockerfile, expected) in cases {
            assert_eq!(
                dockerfile_base_images(dockerfile),
                *expected,
                "{dockerfile}"
            );
        }
    }

    #[test]
    fn final_stage_workdir() {
        let cases: &[(&str, Option<&str>)] = &[
            ("FROM python:3.12-slim\nWORKDIR /app\n", Some("/app")),
            (
                "FROM ubuntu:24.04\nWORKDIR /workspace\nWORKDIR src\n",
                Some("/workspace/src"),
            ),
            ("FROM ubuntu:24.04\nWORKDIR rel\n", Some("/rel")),
            ("FROM ubuntu:24.04\nRUN true\n", None),
            (
                "FROM golang:1.22 AS build\nWORKDIR /src\nFROM debian:bookworm\nCOPY --from=build /src/app /usr/bin/\n",
                None,
            ),
            (
                "FROM python:3.11 AS base\nWORKDIR /app\nFROM base AS test\nRUN pytest\n",
                Some("/app"),
            ),
            ("from alpine\nworkdir \"/home/user\"\n", Some("/home/user")),
            ("FROM alpine\nWORKDIR \\\n  /tmp/x\n", Some("/tmp/x")),
            ("FROM alpine\nWORKDIR $HOME/w\n", Some("$HOME/w")),
        ];
        for (dockerfile, expected) in cases {
            assert_eq!(
                dockerfile_workdir(dockerfile).as_deref(),
                *expected,
                "{dockerfile}"
            );
        }
    }
}
