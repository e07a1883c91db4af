//! `fencepost verify`: a cron-friendly check that the lease table, the sink's records and
//! the documents on disk all tell the same story.

use std::ffi::OsString;

use clap::Args;

use super::Report;
use super::status::printable;
use crate::cli::durations::{Zero, parse_duration};
use fencepost::clock::ClockKind;
use fencepost::error::{Error, Result};
use fencepost::outcome::{Outcome, Verified};
use fencepost::session::Ctx;
use fencepost::text::count;

/// Check every resource (or one) and exit 9 if any is inconsistent; 0 when all is well.
///
/// Finds: a document whose bytes differ from the recorded SHA-256 (changed behind the
/// tool's back), that is missing, that its path no longer reaches, or that this user may
/// not read; a lease completed by epoch E while the document holds content from an
/// older epoch; a file that reappeared where a resource was removed (`fencepost remove`:
/// the removed document's absence is no problem); a completed lease with no write at all ("completed but never
/// published"); a crashed write awaiting recovery, or the recovery links a finished one
/// left; temp files of dead writers; a name in the state file that no longer passes the
/// name rules or the length limits, or a document that could not be checked; with
/// --store, a published version written with --unfenced.
/// On a mirror root, without --store, it checks the root against the store it is bound
/// to (its password from PGPASSWORD or the password file; exit 1 when the store cannot be
/// reached). A mirror that does not hold the store's version is `behind`, with the
/// epochs on both sides and since when (when the store published the first version it
/// lacks); with --max-lag, one behind for less than that is noted, not a problem, so a
/// follower between two applies passes and one stuck for longer exits 9.
/// Exit 2 when there is no state file, or the resource named was never claimed or written.
/// Read-only, but for one report: with a store and a mirror root, a mirror that holds a
/// version the store does not know (`ahead`: the store lost history) tells the store the
/// epoch it holds. Prints one line per problem (or one JSON object with --json).
///
/// Example (cron):
///   fencepost --root /srv/publish verify || mail -s "fencepost: divergence" ops < /dev/null
///   fencepost --root /srv/reports verify --max-lag 5m   # a mirror, for monitoring
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct VerifyArgs {
    /// Only this resource (default: every resource in the state file).
    pub resource: Option<OsString>,

    /// A mirror behind its store for less than this is fine: seconds or with units
    /// (ticks under --now).
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub max_lag: Option<String>,
}

pub(crate) fn run(ctx: &Ctx, args: &VerifyArgs) -> Result<Report> {
    let max_lag = args
        .max_lag
        .as_deref()
        .map(|text| parse_duration(text, ctx.clock.kind(), "--max-lag", Zero::Allowed))
        .transpose()?;
    let mut verified = fencepost::reports::verify(ctx, args.resource.as_deref())?;
    if let Some(max_lag) = max_lag {
        // The store's clock, as the store was read: `since` is on it.
        let now = ctx.now();
        let (lagging, problems) = verified
            .problems
            .into_iter()
            .partition(|p| p.behind.as_ref().is_some_and(|b| now - b.since < max_lag));
        verified.problems = problems;
        verified.lagging = lagging;
    }
    conclude(verified, ctx.clock.kind(), ctx.now())
}

/// The answer: `ok` (and a line per mirror document behind within --max-lag), or exit 9
/// listing every problem.
fn conclude(verified: Verified, clock: ClockKind, now: i64) -> Result<Report> {
    let checked = verified.checked;
    let problems = &verified.problems;
    if problems.is_empty() {
        let mut lines = vec![format!(
            "ok: {} consistent",
            count(checked, "resource", "resources")
        )];
        for p in &verified.lagging {
            if let Some(b) = &p.behind {
                let held = b.mirror_epoch.map_or("none".to_string(), |e| e.to_string());
                lines.push(format!(
                    "{}: behind for {} (mirror epoch {held}, store epoch {}), within --max-lag",
                    printable(&p.resource),
                    shown_span(clock, now - b.since),
                    b.store_epoch,
                ));
            }
        }
        return Ok(Report::new(lines.join("\n"), Outcome::Ok(verified)));
    }
    let lines: Vec<String> = problems
        .iter()
        .map(|p| format!("{}: {}: {}", printable(&p.resource), p.problem, p.message))
        .collect();
    Err(Error::Diverged {
        message: format!(
            "{} in {} checked",
            count(problems.len(), "inconsistency", "inconsistencies"),
            count(checked, "resource", "resources"),
        ),
        report: lines.join("\n"),
        found: Box::new(verified),
    })
}

/// A span of time as a person reads it: ticks as they are, wall-clock milliseconds as
/// `12s` or `4m05s`.
fn shown_span(clock: ClockKind, span: i64) -> String {
    if clock == ClockKind::Logical {
        return count(span, "tick", "ticks");
    }
    let secs = span.max(0) / 1000;
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}
