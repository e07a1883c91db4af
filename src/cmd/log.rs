//! `fencepost log`: the audit log, as a table, as lanes, or as JSON.

use std::ffi::OsString;

use clap::Args;

use super::Report;
use crate::audit;
use crate::clock::ClockKind;
use crate::error::{Error, Result};
use crate::outcome::{Log, LoggedEvent, Outcome, Pruned};
use crate::session::Ctx;

/// Show the audit log: every change and every refusal, with time, owner, epoch, pid, host.
///
/// Changes are claims, takeovers, renewals, completions, releases and writes; refusals
/// are held, lost, stale, conflict and unissued.
///
/// `--timeline` draws one column per owner, so a takeover and a refused late write stand
/// out; when the lanes would be wider than 100 columns (many owners, such as one per
/// run), it puts the owner in one column instead. The log keeps the newest --log-keep
/// events (FENCEPOST_LOG_KEEP); `--prune` drops the older ones now. Exit 2 when there is
/// no state file, or the resource named was never claimed, written or refused.
///
/// Example:
///   fencepost log reports/daily.md --timeline
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct LogArgs {
    /// Only this resource (default: all).
    pub resource: Option<OsString>,

    /// Only events at or after this time: a tick, or on the wall clock a UTC time as the
    /// table prints it (2026-11-30T05:58:10Z) or milliseconds since the Unix epoch.
    #[arg(long, value_name = "TIME", allow_negative_numbers = true)]
    pub since: Option<String>,

    /// Only events of the last DURATION: 600 (seconds), 10m, 2h, 1d (ticks with --now).
    #[arg(long, value_name = "DURATION", conflicts_with = "since")]
    pub last: Option<String>,

    /// Draw lanes: one column per owner (or one OWNER column past 100 columns), one row
    /// per event.
    #[arg(long, conflicts_with = "prune")]
    pub timeline: bool,

    /// Drop all but the newest --log-keep events (of all resources), and print how many
    /// were dropped.
    #[arg(long, conflicts_with_all = ["resource", "since", "last"])]
    pub prune: bool,
}

pub(crate) fn run(ctx: &Ctx, args: &LogArgs) -> Result<Report> {
    let only = ctx.resource_opt(args.resource.as_deref())?;
    if args.prune {
        let mut store = if ctx.remote.is_some() {
            ctx.store()?
        } else {
            ctx.kept_or_none(|| crate::store::open(&ctx.db, ctx.busy, false))?
                .ok_or_else(|| ctx.no_state_file("nothing to prune"))?
        };
        let tx = store.immediate()?;
        ctx.check_root(&*tx)?;
        let dropped = tx.prune(ctx.log_keep, None)?;
        tx.commit()?;
        let pruned = Pruned {
            dropped,
            keep: ctx.log_keep,
        };
        return Ok(Report::new(
            format!("pruned {dropped} event(s)"),
            Outcome::Pruned(pruned),
        )
        .changed(format!("{dropped} event(s) were pruned from the audit log")));
    }
    // `utc`: --since was given as a UTC time, which only a wall-clock file can use.
    let (since, utc) = match (&args.last, &args.since) {
        (Some(text), _) => {
            let span = crate::cmd::durations::parse_duration(
                text,
                ctx.clock.kind(),
                "--last",
                crate::cmd::durations::Zero::Allowed,
            )?;
            (Some(ctx.now().saturating_sub(span)), false)
        }
        (None, Some(text)) => {
            let (time, utc) = crate::cmd::durations::parse_time(text, "--since")?;
            (Some(time), utc)
        }
        (None, None) => (None, false),
    };
    // Times show on the state file's own clock: `log` reads a logical-tick file without
    // --now.
    let mut store = ctx.read_store("no log to show")?;
    let tx = store.snapshot()?;
    ctx.check_root(&*tx)?;
    if args.last.is_some() {
        // "The last 10 minutes" means nothing on a state file that counts ticks.
        tx.check_clock(ctx.clock.kind())?;
    }
    let clock = tx.clock()?.unwrap_or(ctx.clock.kind());
    if utc && clock == ClockKind::Logical {
        return Err(Error::usage_hint(
            "--since is a UTC time, but the state file counts logical ticks",
            "give --since as a tick",
        ));
    }
    let events = tx.events(only.as_ref(), since)?;
    // A name the state file never saw (a typo) is not "no events".
    if let Some(resource) = &only
        && events.is_empty()
        && tx.events(Some(resource), None)?.is_empty()
    {
        ctx.refuse_unseen(&*tx, resource, "no log to show")?;
    }
    let plain = if args.timeline {
        audit::timeline(&events, clock)
    } else {
        audit::table(&events, clock)
    };
    let log = Log {
        events: events
            .into_iter()
            .map(|event| LoggedEvent {
                refused: event.is_refusal(),
                event,
            })
            .collect(),
        resource: only.map(|r| r.to_string()),
    };
    Ok(Report::new(plain, Outcome::Log(log)))
}
