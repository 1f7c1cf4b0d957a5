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

/// Seconds since the Unix epoch, now (with the fraction).
pub(crate) fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// `2026-11-30T02:31:48.250000Z` for now.
pub(crate) fn now_rfc3339_micros() -> String {
    rfc3339_micros(now_secs())
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

/// Seconds since the Unix epoch of an RFC 3339 UTC time (`2026-11-30T02:31:48Z`, with an
/// optional fraction; a `+00:00` offset or none is read as UTC too). `None` when it is not one.
pub(crate) fn parse_rfc3339(s: &str) -> Option<f64> {
    let s = s.trim();
    let s = s
        .strip_suffix('Z')
        .or_else(|| s.strip_suffix("+00:00"))
        .unwrap_or(s);
    let (date, time) = s.split_once('T').or_else(|| s.split_once(' '))?;
    let mut d = date.splitn(3, '-');
    let y: i64 = d.next()?.parse().ok()?;
    let m: u32 = d.next()?.parse().ok()?;
    let day: u32 = d.next()?.parse().ok()?;
    let mut t = time.splitn(3, ':');
    let hh: u64 = t.next()?.parse().ok()?;
    let mm: u64 = t.next()?.parse().ok()?;
    let ss: f64 = t.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss >= 61.0 {
        return None;
    }
    let days = days_from_civil(y, m, day);
    Some(days as f64 * 86_400.0 + (hh * 3600 + mm * 60) as f64 + ss)
}

/// `2026-11-30T02:31:48.250000Z` for `secs` since the Unix epoch (microseconds, as Python's
/// `datetime.isoformat` writes them).
pub(crate) fn rfc3339_micros(secs: f64) -> String {
    let micros = (secs * 1e6).round() as i64;
    let whole = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000);
    let (y, m, d) = civil_from_days(whole.div_euclid(86_400));
    let rem = whole.rem_euclid(86_400);
    format!(
        "{y}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Howard Hinnant's civil-to-days algorithm (the inverse of [`civil_from_days`]).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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

    #[test]
    fn rfc3339_round_trips() {
        for days in [0, 11_016, 20_787, -1] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        let t = parse_rfc3339("2026-11-30T02:31:48Z").expect("parses");
        assert_eq!(t, 20_787.0 * 86_400.0 + 2.0 * 3600.0 + 31.0 * 60.0 + 48.0);
        assert_eq!(rfc3339_micros(t + 0.25), "2026-11-30T02:31:48.250000Z");
        assert_eq!(parse_rfc3339("2026-11-30T02:31:48.250000Z"), Some(t + 0.25));
        assert_eq!(parse_rfc3339("2026-11-30T02:31:48.25"), Some(t + 0.25));
        assert_eq!(parse_rfc3339("2026-11-30T02:31:48+00:00"), Some(t));
        assert_eq!(parse_rfc3339("yesterday"), None);
    }
}
