//! The terminal packet of `--json`: one JSON object on stdout when a command ends, for the
//! machines that read arbiter's output (CI supervisors, schedulers).
//!
//! Shape (`arbiter.packet.v1`, documented in docs/json-packet.md):
//!
//! ```json
//! {"schema":"arbiter.packet.v1","command":"run","status":"infra_error","complete":true,
//!  "phase":"finished","code":"infra_errors","exit_code":3,
//!  "counts":{"planned":4,"finished":4,"passed":2,"failed":1,"unverified":0,"infra_error":1,"not_run":0},
//!  "job_dir":"jobs/nightly","error":null}
//! ```
//!
//! Every ending has the same keys: a finished job, an interrupted one, and a refusal before
//! anything started (`phase` `arguments` or `configuration`). A refusal's packet says *what
//! kind* of error it was (`code`, a stable string, and `error.field`, a field or flag name)
//! but never the raw argument value or a message that could quote one (a secret passed on the
//! command line, a path): the human one-line error still goes to stderr.
//!
//! How to call it (from `verify`, `tasks check`, or any command):
//! - at the end of a command that ran: [`Packet::finished`] with the exit code, the [`Counts`]
//!   and whether every planned item finished, then [`Packet::print`];
//! - on an error: [`Packet::refused`] with the phase, a stable code and an optional field;
//!   `CliError`s map with [`Packet::of_error`] in `cli/mod.rs`;
//! - on a clap parse error with `--json` anywhere in argv: [`wants_json`] then
//!   [`Packet::of_clap`].

use std::ffi::OsString;

use serde::Serialize;

use super::exit;

pub(crate) const PACKET_SCHEMA: &str = "arbiter.packet.v1";

/// How the command ended, from its exit code (SPEC §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    /// Exit 0: the command did what was asked (failing tasks included).
    Ok,
    /// Exit 3: finished, but some trials still have `infra_error`.
    InfraError,
    /// Exit 4: a gate failed.
    GateFailed,
    /// Exit 130: interrupted; resumable.
    Interrupted,
    /// Exit 1 or 2: refused or failed.
    Error,
}

impl Status {
    pub(crate) fn of_exit(code: u8) -> Status {
        match code {
            exit::OK => Status::Ok,
            exit::INFRA => Status::InfraError,
            exit::GATE => Status::GateFailed,
            exit::INTERRUPTED => Status::Interrupted,
            _ => Status::Error,
        }
    }
}

/// How far the command got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Phase {
    /// The command line did not parse.
    Arguments,
    /// A config, task or job directory was refused; nothing started.
    Configuration,
    /// The machine is not ready (no engine, no toolbox, job dir in use); nothing started.
    Environment,
    /// Stopped while running (an interrupt, a job-store failure).
    Run,
    /// Ran to the end.
    Finished,
}

/// Counts per outcome of the items a command ran (trials, for `run` and `resume`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Counts {
    pub planned: usize,
    pub finished: usize,
    pub passed: usize,
    /// Scored and not passed (a failed reward or no reward).
    pub failed: usize,
    /// Of `failed`: the verifier gave no reward (error or skipped).
    pub unverified: usize,
    /// Harness or engine failures, never counted as failed.
    pub infra_error: usize,
    /// Trials the user cancelled (`arbiter serve`), never counted as failed; absent when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub cancelled: usize,
    /// Planned and not finished (an interrupt).
    pub not_run: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Counts {
    /// Counts of a job from its per-arm summary and the number of planned trials.
    pub(crate) fn of_job(arms: &[crate::job::ArmSummary], planned: usize) -> Counts {
        let mut c = Counts {
            planned,
            ..Counts::default()
        };
        for a in arms {
            c.finished += a.trials;
            c.passed += a.passed;
            c.failed += a.failed;
            c.unverified += a.unverified;
            c.infra_error += a.infra;
            c.cancelled += a.cancelled;
        }
        c.not_run = planned.saturating_sub(c.finished);
        c
    }
}

/// What kind of error ended the command: never its message (it can quote a value).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ErrorInfo {
    /// The field, flag or file kind concerned (`--attempts`, `agents[0]`, `task.toml`), when
    /// one is known.
    pub field: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Packet {
    pub schema: &'static str,
    /// The subcommand (`run`, `resume`, ...); `null` when argv names none.
    pub command: Option<String>,
    pub status: Status,
    /// Every planned item finished.
    pub complete: bool,
    pub phase: Phase,
    /// A stable word for the ending: `ok`, `infra_errors`, `gate_failed`, `interrupted`, or
    /// the error kind (`unknown_argument`, `config_invalid`, `engine_unavailable`, ...).
    pub code: &'static str,
    /// The process's exit code (SPEC §9).
    pub exit_code: u8,
    pub counts: Counts,
    pub job_dir: Option<String>,
    pub error: Option<ErrorInfo>,
}

impl Packet {
    /// A command that ran: its exit code, counts and job dir.
    pub(crate) fn finished(
        command: &str,
        exit_code: u8,
        counts: Counts,
        job_dir: Option<String>,
    ) -> Packet {
        let status = Status::of_exit(exit_code);
        let code = match status {
            Status::Ok => "ok",
            Status::InfraError => "infra_errors",
            Status::GateFailed => "gate_failed",
            Status::Interrupted => "interrupted",
            Status::Error => "failed",
        };
        let phase = if status == Status::Interrupted {
            Phase::Run
        } else {
            Phase::Finished
        };
        Packet {
            schema: PACKET_SCHEMA,
            command: Some(command.to_string()),
            status,
            complete: status != Status::Interrupted && counts.not_run == 0,
            phase,
            code,
            exit_code,
            counts,
            job_dir,
            error: None,
        }
    }

    /// A command refused or failed before it finished.
    pub(crate) fn refused(
        command: Option<&str>,
        phase: Phase,
        code: &'static str,
        exit_code: u8,
        field: Option<String>,
    ) -> Packet {
        Packet {
            schema: PACKET_SCHEMA,
            command: command.map(str::to_string),
            status: Status::of_exit(exit_code),
            complete: false,
            phase,
            code,
            exit_code,
            counts: Counts::default(),
            job_dir: None,
            error: Some(ErrorInfo { field }),
        }
    }

    /// The packet of a clap parse error (exit 2). `None` for `--help` and `--version`, which
    /// are not errors.
    pub(crate) fn of_clap(err: &clap::Error, argv: &[OsString]) -> Option<Packet> {
        use clap::error::{ContextKind, ContextValue, ErrorKind};
        let code = match err.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => return None,
            ErrorKind::InvalidValue | ErrorKind::ValueValidation => "invalid_value",
            ErrorKind::UnknownArgument => "unknown_argument",
            ErrorKind::InvalidSubcommand => "unknown_command",
            ErrorKind::NoEquals => "missing_equals",
            ErrorKind::TooManyValues | ErrorKind::TooFewValues | ErrorKind::WrongNumberOfValues => {
                "wrong_number_of_values"
            }
            ErrorKind::ArgumentConflict => "argument_conflict",
            ErrorKind::MissingRequiredArgument => "missing_argument",
            ErrorKind::MissingSubcommand => "missing_command",
            ErrorKind::InvalidUtf8 => "invalid_utf8",
            _ => "invalid_arguments",
        };
        // The flag's name only, and only for kinds where clap's context holds a declared
        // argument (an unknown argument's "name" is what the user typed).
        let field = match err.kind() {
            ErrorKind::UnknownArgument | ErrorKind::InvalidSubcommand => None,
            _ => match err.get(ContextKind::InvalidArg) {
                Some(ContextValue::String(s)) => Some(flag_name(s)),
                Some(ContextValue::Strings(v)) => v.first().map(|s| flag_name(s)),
                _ => None,
            },
        };
        Some(Packet::refused(
            command_of(argv),
            Phase::Arguments,
            code,
            exit::USAGE,
            field,
        ))
    }

    /// The packet of an error that ended `command` (its exit code is [`CliError::code`]).
    pub(super) fn of_error(command: &str, err: &super::CliError) -> Packet {
        use super::CliError;
        use crate::job::{ConfigError, RunError};
        use crate::task::TaskErrorKind as K;
        let (phase, code, field) = match err {
            CliError::Config(ConfigError::Field { field, .. }) => {
                (Phase::Configuration, "config_invalid", Some(field.clone()))
            }
            CliError::Config(ConfigError::Task(t)) => {
                let code = match t.kind() {
                    K::NotATaskDir => "task_not_found",
                    K::Syntax => "task_syntax",
                    K::Type | K::Value | K::UnknownKey | K::Conflict => "task_invalid",
                    K::File | K::Path => "task_file_invalid",
                    K::Io => "task_unreadable",
                    K::Duplicate => "task_duplicate",
                };
                (Phase::Configuration, code, t.field().map(str::to_string))
            }
            CliError::Connect(e) => (Phase::Environment, e.code, None),
            CliError::Sandbox(_) => (Phase::Environment, "engine_unavailable", None),
            CliError::Preflight(_) => (Phase::Environment, "cluster_not_ready", None),
            CliError::Toolbox(_) => (Phase::Environment, "toolbox_missing", None),
            CliError::Run(RunError::Busy { .. }) => (Phase::Environment, "job_busy", None),
            CliError::Run(RunError::Gateway(_)) => (Phase::Run, "gateway_failed", None),
            CliError::Run(RunError::Store(_)) | CliError::Store(_) => {
                (Phase::Run, "job_store_failed", None)
            }
            CliError::Report(crate::report::ReportError::Io { .. }) => {
                (Phase::Run, "report_io_failed", None)
            }
            CliError::Report(_) => (Phase::Configuration, "report_invalid", None),
            CliError::Results(_) => (Phase::Run, "results_store_failed", None),
            CliError::Harbor(_) => (Phase::Run, "interop_failed", None),
            CliError::Otlp(_) => (Phase::Run, "interop_failed", None),
            CliError::Serve(_) => (Phase::Environment, "serve_failed", None),
            CliError::Regrade(crate::regrade::RegradeError::Usage { field, .. }) => {
                (Phase::Arguments, "invalid_value", Some(field.clone()))
            }
            CliError::Regrade(crate::regrade::RegradeError::Busy { .. }) => {
                (Phase::Environment, "job_busy", None)
            }
            CliError::Regrade(crate::regrade::RegradeError::Store(_)) => {
                (Phase::Run, "job_store_failed", None)
            }
        };
        Packet::refused(Some(command), phase, code, err.code(), field)
    }

    /// One line of JSON on stdout.
    pub(crate) fn print(&self) {
        println!("{}", self.to_line());
    }

    pub(crate) fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            // plain strings and numbers do not fail to serialise; keep stdout one JSON object
            tracing::error!(error = %e, "cannot serialise the packet");
            format!(
                "{{\"schema\":\"{PACKET_SCHEMA}\",\"status\":\"error\",\"code\":\"packet_failed\",\"exit_code\":{}}}",
                self.exit_code
            )
        })
    }
}

/// `--json` anywhere in argv before a `--` (clap did not get to say whether it was meant).
pub(crate) fn wants_json(argv: &[OsString]) -> bool {
    argv.iter()
        .skip(1)
        .take_while(|a| a.as_os_str() != "--")
        .any(|a| a.as_os_str() == "--json")
}

/// The subcommand argv names: the first argument that is one of arbiter's commands.
fn command_of(argv: &[OsString]) -> Option<&'static str> {
    const COMMANDS: [&str; 10] = [
        "run", "resume", "gc", "report", "compare", "check", "agents", "verify", "tasks", "help",
    ];
    argv.iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find(|a| !a.starts_with('-'))
        .and_then(|a| COMMANDS.iter().find(|c| **c == a).copied())
}

/// `--attempts <ATTEMPTS>` → `--attempts`; `[TASK_DIR]...` → `TASK_DIR`.
fn flag_name(s: &str) -> String {
    let head = s.split([' ', '=']).next().unwrap_or(s);
    head.trim_matches(|c| matches!(c, '<' | '>' | '[' | ']' | '.'))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn argv(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    fn clap_packet(a: &[&str]) -> Option<Packet> {
        let v = argv(a);
        let err = crate::cli::Cli::try_parse_from(&v).expect_err("does not parse");
        Packet::of_clap(&err, &v)
    }

    #[test]
    fn exit_codes_map_to_statuses() {
        assert_eq!(Status::of_exit(0), Status::Ok);
        assert_eq!(Status::of_exit(3), Status::InfraError);
        assert_eq!(Status::of_exit(4), Status::GateFailed);
        assert_eq!(Status::of_exit(130), Status::Interrupted);
        assert_eq!(Status::of_exit(2), Status::Error);
        assert_eq!(Status::of_exit(1), Status::Error);
    }

    #[test]
    fn a_finished_job_is_complete_and_an_interrupted_one_is_not() {
        let counts = Counts {
            planned: 3,
            finished: 3,
            passed: 2,
            failed: 1,
            ..Counts::default()
        };
        let p = Packet::finished("run", 0, counts, Some("jobs/x".into()));
        assert!(p.complete);
        assert_eq!(
            (p.phase, p.code, p.status),
            (Phase::Finished, "ok", Status::Ok)
        );
        let short = Counts {
            finished: 1,
            not_run: 2,
            ..counts
        };
        let p = Packet::finished("run", 130, short, None);
        assert!(!p.complete);
        assert_eq!((p.phase, p.code), (Phase::Run, "interrupted"));
        let p = Packet::finished("resume", 3, counts, None);
        assert_eq!(
            (p.status, p.code, p.complete),
            (Status::InfraError, "infra_errors", true)
        );
    }

    #[test]
    fn counts_add_up_the_arms() {
        let arm = |trials, passed, failed, unverified, infra| crate::job::ArmSummary {
            agent: "a".into(),
            variant: "v".into(),
            trials,
            passed,
            failed,
            unverified,
            infra,
            cancelled: 0,
        };
        let c = Counts::of_job(&[arm(3, 1, 1, 1, 1), arm(2, 2, 0, 0, 0)], 6);
        assert_eq!(
            c,
            Counts {
                planned: 6,
                finished: 5,
                passed: 3,
                failed: 1,
                unverified: 1,
                infra_error: 1,
                cancelled: 0,
                not_run: 1
            }
        );
    }

    #[test]
    fn every_packet_has_the_same_keys() {
        let keys = |p: &Packet| -> Vec<String> {
            let v: serde_json::Value = serde_json::from_str(&p.to_line()).expect("json");
            v.as_object().expect("object").keys().cloned().collect()
        };
        let done = Packet::finished("run", 0, Counts::default(), None);
        let refused = Packet::refused(Some("run"), Phase::Configuration, "config_invalid", 2, None);
        assert_eq!(keys(&done), keys(&refused));
        assert_eq!(
            keys(&done),
            [
                "code",
                "command",
                "complete",
                "counts",
                "error",
                "exit_code",
                "job_dir",
                "phase",
                "schema",
                "status"
            ]
        );
    }

    #[test]
    fn clap_errors_name_the_kind_and_flag_but_never_the_value() {
        let p = clap_packet(&["arbiter", "run", "--json", "-k", "sk-secret-123"]).expect("packet");
        assert_eq!(
            (p.phase, p.code, p.exit_code),
            (Phase::Arguments, "invalid_value", 2)
        );
        assert_eq!(p.command.as_deref(), Some("run"));
        assert_eq!(
            p.error.as_ref().and_then(|e| e.field.as_deref()),
            Some("--attempts")
        );
        assert!(!p.to_line().contains("sk-secret"), "{}", p.to_line());

        let p =
            clap_packet(&["arbiter", "run", "--json", "--api-key=sk-secret-123"]).expect("packet");
        assert_eq!(p.code, "unknown_argument");
        assert_eq!(p.error.as_ref().and_then(|e| e.field.clone()), None);
        assert!(!p.to_line().contains("sk-secret"));

        let p = clap_packet(&["arbiter", "frobnicate", "--json"]).expect("packet");
        assert_eq!((p.code, p.command.as_deref()), ("unknown_command", None));

        let p = clap_packet(&["arbiter", "resume", "--json"]).expect("packet");
        assert_eq!(p.code, "missing_argument");
        assert_eq!(p.error.and_then(|e| e.field).as_deref(), Some("JOB_DIR"));

        assert_eq!(
            clap_packet(&["arbiter", "run", "--help"]),
            None,
            "help is no error"
        );
    }

    #[test]
    fn json_is_wanted_anywhere_before_a_double_dash() {
        assert!(wants_json(&argv(&["arbiter", "--json", "run"])));
        assert!(wants_json(&argv(&["arbiter", "run", "x", "--json"])));
        assert!(!wants_json(&argv(&["arbiter", "run", "--", "--json"])));
        assert!(!wants_json(&argv(&["arbiter", "run", "--jsonx"])));
        assert!(!wants_json(&argv(&["--json"])), "argv[0] is the program");
    }
}
