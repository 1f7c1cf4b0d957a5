//! What an exec's status says: the command's exit code, or why it did not run; and the
//! status a command carried by a loopback relay (`relay.rs`) is given, from its exit code.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};

/// An exec's failure status saying that the container does not run (yet): the kubelet found
/// no running container to exec in, so nothing ran.
pub(super) fn not_running_yet(message: &str) -> bool {
    message.contains("container not found") || message.contains("not running")
}

/// The exit code a finished exec's status reports.
pub(super) fn exit_code_of(status: &Status) -> Result<i64, String> {
    if status.status.as_deref() == Some("Success") {
        return Ok(0);
    }
    if status.reason.as_deref() == Some("NonZeroExitCode") {
        let code = status
            .details
            .as_ref()
            .and_then(|d| d.causes.as_ref())
            .and_then(|causes| {
                causes
                    .iter()
                    .find(|c| c.reason.as_deref() == Some("ExitCode"))
            })
            .and_then(|c| c.message.as_deref())
            .and_then(|m| m.trim().parse::<i64>().ok());
        if let Some(code) = code {
            return Ok(code);
        }
    }
    Err(status
        .message
        .clone()
        .or_else(|| status.reason.clone())
        .unwrap_or_else(|| "no exit code in the exec's status".to_string()))
}

/// The status the API sends for a command that exited with `code`.
pub(super) fn status_of(code: i64) -> Status {
    if code == 0 {
        return Status {
            status: Some("Success".to_string()),
            ..Status::default()
        };
    }
    Status {
        status: Some("Failure".to_string()),
        reason: Some("NonZeroExitCode".to_string()),
        details: Some(StatusDetails {
            causes: Some(vec![StatusCause {
                reason: Some("ExitCode".to_string()),
                message: Some(code.to_string()),
                field: None,
            }]),
            ..StatusDetails::default()
        }),
        ..Status::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_status_that_found_no_running_container_is_not_running_yet() {
        assert!(not_running_yet(
            "Internal error occurred: unable to upgrade connection: container not found (\"main\")"
        ));
        assert!(!not_running_yet(
            "command terminated with non-zero exit code: error executing command [sh], exit code 2"
        ));
        assert!(!not_running_yet(
            "Internal error occurred: error sending request"
        ));
    }

    #[test]
    fn exit_codes_come_from_the_status() {
        let ok = Status {
            status: Some("Success".into()),
            ..Default::default()
        };
        assert_eq!(exit_code_of(&ok), Ok(0));
        let failed = Status {
            status: Some("Failure".into()),
            reason: Some("NonZeroExitCode".into()),
            details: Some(StatusDetails {
                causes: Some(vec![StatusCause {
                    reason: Some("ExitCode".into()),
                    message: Some("42".into()),
                    field: None,
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(exit_code_of(&failed), Ok(42));
        let broken = Status {
            status: Some("Failure".into()),
            message: Some("container not found".into()),
            ..Default::default()
        };
        assert_eq!(exit_code_of(&broken), Err("container not found".into()));
    }

    #[test]
    fn a_relayed_commands_status_reads_back_as_its_exit_code() {
        for code in [0, 1, 42, 143] {
            assert_eq!(exit_code_of(&status_of(code)), Ok(code));
        }
    }
}
