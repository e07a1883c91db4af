//! The integer clock every deadline is measured on.
//!
//! Two kinds exist and a state file is bound to the first one it sees: logical ticks
//! (`--now N`, for scripts and tests that must be deterministic) and wall-clock
//! milliseconds since the Unix epoch. Mixing them would silently break every deadline,
//! so [`ClockKind`] is recorded in the state file and checked on every change.

use std::time::{SystemTime, UNIX_EPOCH};

/// Which clock a time value belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockKind {
    Logical,
    Wall,
}

impl ClockKind {
    /// The name stored in the state file.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ClockKind::Logical => "logical",
            ClockKind::Wall => "wall",
        }
    }

    /// Parses the stored name.
    #[must_use]
    pub fn parse(s: &str) -> Option<ClockKind> {
        match s {
            "logical" => Some(ClockKind::Logical),
            "wall" => Some(ClockKind::Wall),
            _ => None,
        }
    }
}

/// The clock of one command: a fixed logical tick or the wall clock.
#[derive(Debug, Clone, Copy)]
pub enum Clock {
    Logical(i64),
    Wall,
}

impl Clock {
    #[must_use]
    pub fn kind(self) -> ClockKind {
        match self {
            Clock::Logical(_) => ClockKind::Logical,
            Clock::Wall => ClockKind::Wall,
        }
    }

    /// The current time on this clock.
    #[must_use]
    pub fn now(self) -> i64 {
        match self {
            Clock::Logical(n) => n,
            Clock::Wall => wall_millis(),
        }
    }
}

/// Wall-clock milliseconds since the Unix epoch.
#[must_use]
pub fn wall_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A time on a `kind` clock as a person reads it: logical ticks as they are, wall-clock
/// milliseconds as a UTC timestamp (`2026-11-30T06:09:33.374Z`). For plain output only;
/// `--json` keeps the integer.
#[must_use]
pub fn show(kind: ClockKind, t: i64) -> String {
    if kind == ClockKind::Logical {
        return t.to_string();
    }
    let (days, ms) = (t.div_euclid(86_400_000), t.rem_euclid(86_400_000));
    let (y, m, d) = civil_date(days);
    let (h, min, sec, milli) = (
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1_000 % 60,
        ms % 1_000,
    );
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{sec:02}.{milli:03}Z")
}

/// The proleptic Gregorian (year, month, day) of a count of days since 1970-01-01,
/// counted in 400-year eras of 146,097 days that start on March 1st, so the leap day
/// falls at the end of each era's year.
#[must_use]
pub fn civil_date(days: i64) -> (i64, i64, i64) {
    let shifted = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_times_show_as_utc_and_logical_ticks_as_they_are() {
        let w = ClockKind::Wall;
        assert_eq!(show(ClockKind::Logical, 1_796_018_173_374), "1796018173374");
        assert_eq!(show(w, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(show(w, 1_796_018_173_374), "2026-11-30T05:56:13.374Z");
        // Leap days, a century that is not a leap year, and one that is.
        assert_eq!(show(w, 951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(show(w, 4_107_542_399_999), "2100-02-28T23:59:59.999Z");
        assert_eq!(show(w, 4_107_542_400_000), "2100-03-01T00:00:00.000Z");
        assert_eq!(show(w, 1_709_164_800_000), "2024-02-29T00:00:00.000Z");
        assert_eq!(show(w, 1_735_689_599_000), "2024-12-31T23:59:59.000Z");
    }
}
