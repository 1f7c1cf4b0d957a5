//! Interop with other harnesses' formats: Harbor job folders out and in (`harbor/`), and
//! OpenTelemetry traces out (`otlp/`).
//! Nothing here changes what a record means: a field of another format gets only what means
//! the same there, and the rest goes where that format keeps extra data.

pub(crate) mod harbor;
pub(crate) mod otlp;
