//! `fencepost verify`: a cron-friendly check that the lease table, the sink's records and
//! the documents on disk all tell the same story.

use std::ffi::OsString;

use clap::Args;

use super::Report;
use super::status::printable;
use fencepost::error::{Error, Result};
use fencepost::outcome::{Outcome, Verified};
use fencepost::session::Ctx;

/// Check every resource (or one) and exit 9 if any is inconsistent; 0 when all is well.
///
/// Finds: a document whose bytes differ from the recorded SHA-256 (changed behind the
/// tool's back), that is missing, that its path no longer reaches, or that this user may
/// not read; a lease completed by epoch E while the document holds content from an
/// older epoch; a completed lease with no write at all ("completed but never
/// published"); a crashed write awaiting recovery, or the recovery links a finished one
/// left; temp files of dead writers; a name in the state file that no longer passes the
/// name rules or the length limits, or a document that could not be checked; with
/// --store, a published version written with --unfenced.
/// Exit 2 when there is no state file, or the resource named was never claimed or written.
/// Read-only, but for one report: with --store and a mirror root, a mirror that holds a
/// version the store does not know (`ahead`: the store lost history) tells the store the
/// epoch it holds. Prints one line per problem (or one JSON object with --json).
///
/// Example (cron):
///   fencepost --root /srv/publish verify || mail -s "fencepost: divergence" ops < /dev/null
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct VerifyArgs {
    /// Only this resource (default: every resource in the state file).
    pub resource: Option<OsString>,
}

pub(crate) fn run(ctx: &Ctx, args: &VerifyArgs) -> Result<Report> {
    let verified = fencepost::reports::verify(ctx, args.resource.as_deref())?;
    conclude(verified)
}

/// The answer: `ok`, or exit 9 listing every problem.
fn conclude(verified: Verified) -> Result<Report> {
    let checked = verified.checked;
    let problems = &verified.problems;
    if problems.is_empty() {
        return Ok(Report::new(
            format!("ok: {checked} resource(s) consistent"),
            Outcome::Ok(verified),
        ));
    }
    let lines: Vec<String> = problems
        .iter()
        .map(|p| format!("{}: {}: {}", printable(&p.resource), p.problem, p.message))
        .collect();
    Err(Error::Diverged {
        message: format!(
            "{} inconsistenc{} in {checked} resource(s) checked",
            problems.len(),
            if problems.len() == 1 { "y" } else { "ies" },
        ),
        report: lines.join("\n"),
        found: verified,
    })
}
