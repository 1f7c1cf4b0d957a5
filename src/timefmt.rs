//! UTC timestamps without a date crate.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A duration in seconds as a message shows it: `10`, or `2.5` when it has a fraction.
pub(crate) fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", s as u64)
    } else {
        format!("{s:.1}")
    }
}

/// `2026-11-30T02:31:48Z` for now.
pub(crate) fn now_rfc3339() -> String {
    let (date, time) = parts(SystemTime::now());
    format!(
        "{}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        date.0, date.1, date.2, time.0, time.1, time.2
    )
}

/// `20261130T023148Z` for now (used in default job dir names).
pub(crate) fn now_compact() -> String {
    let (date, time) = parts(SystemTime::now());
    format!(
        "{}{:02}{:02}T{:02}{:02}{:02}Z",
        date.0, date.1, date.2, time.0, time.1, time.2
    )
}

fn parts(at: SystemTime) -> ((i64, u32, u32), (u64, u64, u64)) {
    let secs = at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    (
        civil_from_days(days),
        (rem / 3600, rem % 3600 / 60, rem % 60),
    )
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_787), (2026, 11, 30));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
