//! Durations and times as the command line takes them: `30`, `1.5`, `500ms`, `2m30s` on
//! the wall clock, whole ticks under `--now`, and points in time as `show` prints them.
//! The library takes `Duration`s and integers; only the command line parses text.

use fencepost::clock::{ClockKind, civil_date};
use fencepost::error::{Error, Result};

/// Parses a point in time: a bare integer (a tick, or wall-clock milliseconds since the
/// Unix epoch), or a UTC timestamp as [`show`] prints it, `2026-11-30T05:58:10Z` with
/// optional milliseconds. The second value is true for a timestamp, which only a
/// wall-clock state file can use.
pub(crate) fn parse_time(text: &str, what: &str) -> Result<(i64, bool)> {
    let text = text.trim();
    if let Ok(n) = text.parse::<i64>() {
        return Ok((n, false));
    }
    let bad = || {
        Error::usage_hint(
            format!(
                "{what} must be a tick, milliseconds since the Unix epoch, or a UTC time; got {text:?}"
            ),
            "write UTC times as log prints them: 2026-11-30T05:58:10Z (milliseconds optional)",
        )
    };
    // UTC only, spelled as RFC 3339 allows: `Z`, `z` or `+00:00`.
    let stamp = ["Z", "z", "+00:00"]
        .iter()
        .find_map(|utc| text.strip_suffix(utc))
        .ok_or_else(bad)?;
    let (date, time) = stamp.split_once(['T', 't']).ok_or_else(bad)?;
    let (clock, milli) = time.split_once('.').unwrap_or((time, "0"));
    let number = |s: &str, digits: std::ops::RangeInclusive<usize>| -> Result<i64> {
        if digits.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit()) {
            s.parse().map_err(|_| bad())
        } else {
            Err(bad())
        }
    };
    let fields = |s: &str, sep: char| -> Vec<String> { s.split(sep).map(String::from).collect() };
    let (d, c) = (fields(date, '-'), fields(clock, ':'));
    let ([y, mo, day], [h, mi, se]) = (d.as_slice(), c.as_slice()) else {
        return Err(bad());
    };
    let (y, mo, day) = (number(y, 4..=4)?, number(mo, 2..=2)?, number(day, 2..=2)?);
    let (h, mi, se) = (number(h, 2..=2)?, number(mi, 2..=2)?, number(se, 2..=2)?);
    let milli = number(milli, 1..=3)? * 10_i64.pow(3 - milli.len() as u32);
    let days = days_from_civil(y, mo, day);
    // A day that does not exist (February 30th) comes back as another date.
    if !(1..=12).contains(&mo) || civil_date(days) != (y, mo, day) || h > 23 || mi > 59 || se > 59 {
        return Err(bad());
    }
    Ok((
        days * 86_400_000 + ((h * 60 + mi) * 60 + se) * 1_000 + milli,
        true,
    ))
}

/// Days since 1970-01-01 of a proleptic Gregorian date: the inverse of [`civil_date`].
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = year - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Whether an option takes a duration of zero. Every spelling of zero (`0`, `0s`, `0m`,
/// `0.0`) is the same zero: where zero means "do not wait" it is taken, where it would be
/// meaningless (a lease that is over before it starts) it is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Zero {
    Allowed,
    Refused,
}

/// The units a wall-clock duration may carry, in milliseconds.
const UNITS: [(&str, i128); 5] = [
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

/// Parses a duration (a TTL, a wait, a grace period) into units of the `kind` clock.
///
/// On the wall clock: a bare number is seconds (`30`, `1.5`), or numbers each followed by
/// a unit, `ms`, `s`, `m`, `h` or `d`, largest unit first, each unit at most once and
/// nothing between them (`500ms`, `0.5s`, `1.5m`, `2m30s`, `1h`, `1d`; not `1m30`, `30s2m`,
/// `1w`, `5sec` or `.5`). This is not what `sleep`, `timeout` and `flock -w` take: those
/// refuse `500ms`, `2m30s` and (`flock -w`) `1m`. The result is in milliseconds and must be
/// a whole number of them. On the logical clock (`--now`) a duration is a whole number of
/// ticks: units and fractions are refused, since a tick has no length in seconds.
pub(crate) fn parse_duration(text: &str, kind: ClockKind, what: &str, zero: Zero) -> Result<i64> {
    let text = text.trim();
    // Refused before its digits are read: `-5` is not a duration of any unit.
    if text.starts_with('-') {
        let wanted = match zero {
            Zero::Allowed => "zero or more",
            Zero::Refused => "positive",
        };
        return Err(Error::usage(format!(
            "{what} must be {wanted}, got {text:?}"
        )));
    }
    let value = match kind {
        ClockKind::Logical => logical_ticks(text, what)?,
        ClockKind::Wall => wall_millis_of(text, what)?,
    };
    if value == 0 && zero == Zero::Refused {
        return Err(Error::usage(format!(
            "{what} must be more than zero, got {text:?}"
        )));
    }
    Ok(value)
}

/// A duration on the logical clock: a whole number of ticks.
fn logical_ticks(text: &str, what: &str) -> Result<i64> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse()
            .map_err(|_| Error::usage(format!("{what} {text:?} is too large")));
    }
    if text.starts_with(|c: char| c.is_ascii_digit()) && text.contains(|c: char| c.is_alphabetic())
    {
        return Err(Error::usage_hint(
            format!("{what} {text:?} has a unit, but --now sets a logical clock"),
            "with --now, give durations as bare ticks (e.g. --ttl 10)",
        ));
    }
    Err(Error::usage_hint(
        format!("{what} must be a whole number of ticks with --now; got {text:?}"),
        "with --now, give durations as bare ticks (e.g. --ttl 10)",
    ))
}

/// A duration on the wall clock, in milliseconds: seconds, or numbers with units.
fn wall_millis_of(text: &str, what: &str) -> Result<i64> {
    let bad = || {
        Error::usage_hint(
            format!(
                "{what} must be a duration like 30 (seconds), 1.5, 500ms, 2m30s, 1h or 1d; got {text:?}"
            ),
            "a bare number is seconds; units: ms, s, m, h, d (with --now: bare ticks)",
        )
    };
    let too_large = || Error::usage(format!("{what} {text:?} is too large"));
    if text.is_empty() {
        return Err(bad());
    }
    let mut rest = text;
    let mut total: i128 = 0;
    let mut last_factor = i128::MAX;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let factor = match unit {
            // A bare number is seconds, and only on its own.
            "" if rest.len() == text.len() && after.is_empty() => 1_000,
            "" => return Err(bad()),
            _ => {
                UNITS
                    .iter()
                    .find(|(name, _)| *name == unit)
                    .ok_or_else(bad)?
                    .1
            }
        };
        // Largest unit first, each unit once: `2m30s`, not `30s2m` or `1m1m`.
        if factor >= last_factor {
            return Err(bad());
        }
        last_factor = factor;
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty()
            || !whole.bytes().all(|b| b.is_ascii_digit())
            || !fraction.bytes().all(|b| b.is_ascii_digit())
            || (number.contains('.') && fraction.is_empty())
        {
            return Err(bad());
        }
        // Whole digits past 24 overflow any clock; fractional ones past 9 only add
        // precision finer than the millisecond checked below.
        if whole.trim_start_matches('0').len() > 24 || fraction.len() > 9 {
            return Err(if fraction.len() > 9 {
                bad()
            } else {
                too_large()
            });
        }
        let whole: i128 = whole.parse().map_err(|_| too_large())?;
        let scale = 10_i128.pow(fraction.len() as u32);
        let fraction: i128 = if fraction.is_empty() {
            0
        } else {
            fraction.parse().map_err(|_| bad())?
        };
        if fraction * factor % scale != 0 {
            return Err(Error::usage_hint(
                format!("{what} {text:?} is finer than a millisecond"),
                "durations count whole milliseconds (e.g. 1.5s, 0.25s, 500ms)",
            ));
        }
        total = whole
            .checked_mul(factor)
            .and_then(|ms| ms.checked_add(fraction * factor / scale))
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(too_large)?;
        rest = after;
    }
    i64::try_from(total).map_err(|_| too_large())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencepost::clock::show;

    #[test]
    fn utc_times_parse_back_to_what_show_printed() {
        for t in [0, 951_782_400_000, 1_796_018_173_374, 4_107_542_399_999] {
            assert_eq!(
                parse_time(&show(ClockKind::Wall, t), "--since").ok(),
                Some((t, true))
            );
        }
        assert_eq!(
            parse_time("2026-11-30T05:56:13Z", "--since").ok(),
            Some((1_796_018_173_000, true))
        );
        assert_eq!(
            parse_time("2026-11-30T05:56:13.5Z", "--since").ok(),
            Some((1_796_018_173_500, true))
        );
        for same in ["2026-11-30t05:56:13z", "2026-11-30T05:56:13+00:00"] {
            assert_eq!(
                parse_time(same, "--since").ok(),
                Some((1_796_018_173_000, true)),
                "{same}"
            );
        }
        assert_eq!(parse_time("42", "--since").ok(), Some((42, false)));
        for bad in [
            "2026-11-30T05:56:13", // no Z: local time or UTC?
            "2026-11-30T05:56:13+01:00",
            "2026-02-30T00:00:00Z", // no such day
            "2026-13-01T00:00:00Z",
            "2026-11-30T24:00:00Z",
            "2026-11-30 05:56:13Z",
            "2026-11-30T05:56Z",
            "2026-11-30T05:56:13.1234Z",
            "yesterday",
            "",
        ] {
            assert!(parse_time(bad, "--since").is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn a_bare_number_is_seconds_and_units_scale_on_the_wall_clock() {
        let texts = [
            "30",
            "1.5",
            "0.5s",
            "500ms",
            "2m",
            "2m30s",
            "1h30m",
            "1.5h",
            "1d",
            "1d2h3m4s5ms",
            " 10s ",
            "0.001",
        ];
        let millis = [
            30_000, 1_500, 500, 500, 120_000, 150_000, 5_400_000, 5_400_000, 86_400_000,
            93_784_005, 10_000, 1,
        ];
        for (text, want) in texts.into_iter().zip(millis) {
            let got = parse_duration(text, ClockKind::Wall, "--ttl", Zero::Refused).ok();
            assert_eq!(got, Some(want), "{text:?}");
        }
    }

    #[test]
    fn logical_clock_takes_whole_ticks_only() {
        let ticks = |t: &str| parse_duration(t, ClockKind::Logical, "--ttl", Zero::Refused);
        assert_eq!(ticks("10").ok(), Some(10));
        for bad in ["10s", "1.5", "2m30s", "1d", "", "-1", "x"] {
            assert!(ticks(bad).is_err(), "{bad:?} accepted as ticks");
        }
    }

    #[test]
    fn every_spelling_of_zero_is_the_same_zero() {
        for zero in ["0", "0s", "0ms", "0m", "0h", "0d", "0.0", "0m0s", "00"] {
            assert_eq!(
                parse_duration(zero, ClockKind::Wall, "--wait", Zero::Allowed).ok(),
                Some(0),
                "{zero:?}"
            );
            assert!(
                parse_duration(zero, ClockKind::Wall, "--ttl", Zero::Refused).is_err(),
                "{zero:?} accepted as a TTL"
            );
        }
        assert_eq!(
            parse_duration("0", ClockKind::Logical, "--last", Zero::Allowed).ok(),
            Some(0)
        );
        assert!(parse_duration("0", ClockKind::Logical, "--ttl", Zero::Refused).is_err());
    }

    #[test]
    fn negative_garbage_odd_orders_and_overflow_are_refused() {
        let w = ClockKind::Wall;
        for bad in [
            "-5",
            "",
            "s",
            "5x",
            "1.",
            ".5",
            "1..5",
            "1.5.2s",
            "30s2m",
            "1m1m",
            "2m30",
            "1 m",
            "1e3",
            "0.0001",
            "0.5ms",
            "1.0000000001s",
            "99999999999999999999",
            "9999999999999999h",
            "999999999999999999999999999d",
        ] {
            assert!(
                parse_duration(bad, w, "--ttl", Zero::Allowed).is_err(),
                "{bad:?} accepted"
            );
        }
    }
}
