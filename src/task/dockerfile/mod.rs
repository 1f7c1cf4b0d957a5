//! Dockerfiles read the way Docker's BuildKit frontend reads them, without building: what a
//! task's image is built from (so a failed build can name the base image it could not get)
//! and the working dir its final stage sets (what `arbiter tasks load` reports).
//!
//! - `lines.rs`: text → instructions (parser directives, line continuations, comments,
//!   heredocs), after BuildKit's `frontend/dockerfile/parser`;
//! - `words.rs`: shell words and `$VAR` / `${VAR…}` substitution, after its `shell` lexer;
//! - `stages.rs`: instructions → build stages (`ARG` scopes, `FROM`, `ENV`, `WORKDIR`),
//!   after its `dockerfile2llb` dispatcher.
//!
//! A reading without the base images is best effort where only the image can tell: its own
//! `WORKDIR` and `ENV` (a relative `WORKDIR` is joined to `/`; a variable the Dockerfile
//! never sets is left as written).

mod lines;
mod stages;
mod words;

#[cfg(test)]
mod tests;

pub use lines::{DockerfileError, Heredoc};
pub use words::WordError;

/// A Dockerfile as BuildKit reads it: its instructions (heredoc bodies attached to theirs,
/// never read as instructions) and its build stages.
#[derive(Debug, Clone)]
pub struct Dockerfile {
    parsed: lines::Parsed,
    stages: Vec<stages::Stage>,
}

impl Dockerfile {
    /// Reads `text`; what BuildKit's parser refuses is kept in [`Dockerfile::error`], with the
    /// instructions before it.
    pub fn parse(text: &str) -> Dockerfile {
        let parsed = lines::parse(text);
        let stages = stages::stages(&parsed.instructions, parsed.escape);
        Dockerfile { parsed, stages }
    }

    /// Why `docker build` (BuildKit) would refuse this file before running any step.
    pub fn error(&self) -> Option<&DockerfileError> {
        self.parsed.error.as_ref()
    }

    /// Every heredoc of every instruction, in order.
    pub fn heredocs(&self) -> impl Iterator<Item = &Heredoc> {
        self.parsed.instructions.iter().flat_map(|i| &i.heredocs)
    }

    /// The base images of the `FROM` lines, in order, without duplicates: `ARG`s declared
    /// before the first `FROM` substituted, earlier stages (`FROM x AS build`, then
    /// `FROM build`) and `scratch` left out.
    pub fn base_images(&self) -> Vec<String> {
        let mut images: Vec<String> = Vec::new();
        for stage in &self.stages {
            if stage.parent.is_none()
                && !stage.base.eq_ignore_ascii_case("scratch")
                && !images.contains(&stage.base)
            {
                images.push(stage.base.clone());
            }
        }
        images
    }

    /// The working dir the final stage leaves its image with, as far as the Dockerfile sets
    /// it (a stage built `FROM` an earlier stage starts from that stage's); `None` when it
    /// sets none (the base image's own applies, which only the image can tell) or when
    /// BuildKit would refuse the file.
    pub fn workdir(&self) -> Option<String> {
        if self.error().is_some() {
            return None;
        }
        self.stages.last().and_then(|stage| stage.workdir.clone())
    }
}

/// [`Dockerfile::base_images`] of `dockerfile`. The trial calls this on the Dockerfile of a
/// build that failed and puts the result in the error, e.g. "could not build
/// environment/Dockerfile (base image python:3.12-slim)".
pub fn dockerfile_base_images(dockerfile: &str) -> Vec<String> {
    Dockerfile::parse(dockerfile).base_images()
}

/// [`Dockerfile::workdir`] of `dockerfile`: a static reading for reports such as
/// `arbiter tasks load`.
pub fn dockerfile_workdir(dockerfile: &str) -> Option<String> {
    Dockerfile::parse(dockerfile).workdir()
}
