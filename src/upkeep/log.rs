//! The audit log: its events for one resource or all, from a time on; and pruning it to
//! the newest events the session keeps.

use std::ffi::OsStr;

use crate::clock::ClockKind;
use crate::error::{Error, Result};
use crate::outcome::{Log, LoggedEvent, Pruned};
use crate::session::Ctx;

/// From when [`log`] reads events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// At or after this time, on the state file's clock whichever it is: a tick, or
    /// milliseconds since the Unix epoch.
    At(i64),
    /// At or after this wall-clock time (milliseconds since the Unix epoch), which a state
    /// file counting logical ticks refuses.
    Wall(i64),
    /// Of the last `span` on the session's clock (ticks, or milliseconds), which must be
    /// the state file's.
    Last(i64),
}

/// The events of `only` (or of every resource), oldest first, from `since` on. Their
/// times are on the state file's own clock, which the answer gives: a state file counting
/// logical ticks is read without `--now`. A resource the state file never saw is bad
/// input (a typo is not "no events").
pub fn log(ctx: &Ctx, only: Option<&OsStr>, since: Option<Since>) -> Result<Log> {
    let only = ctx.resource_opt(only)?;
    let from = match since {
        Some(Since::At(time) | Since::Wall(time)) => Some(time),
        Some(Since::Last(span)) => Some(ctx.now().saturating_sub(span)),
        None => None,
    };
    let mut store = ctx.read_store("no log to show")?;
    let tx = store.snapshot()?;
    ctx.check_root(&*tx)?;
    if let Some(Since::Last(_)) = since {
        // "The last 10 minutes" means nothing on a state file that counts ticks.
        tx.check_clock(ctx.clock.kind())?;
    }
    let clock = tx.clock()?.unwrap_or(ctx.clock.kind());
    if let Some(Since::Wall(_)) = since
        && clock == ClockKind::Logical
    {
        return Err(Error::usage_hint(
            "--since is a UTC time, but the state file counts logical ticks",
            "give --since as a tick",
        ));
    }
    let events = tx.events(only.as_ref(), from)?;
    // A name the state file never saw (a typo) is not "no events".
    if let Some(resource) = &only
        && events.is_empty()
        && tx.events(Some(resource), None)?.is_empty()
    {
        ctx.refuse_unseen(&*tx, resource, "no log to show")?;
    }
    Ok(Log {
        events: events
            .into_iter()
            .map(|event| LoggedEvent {
                refused: event.is_refusal(),
                event,
            })
            .collect(),
        resource: only.map(|r| r.to_string()),
        clock,
    })
}

/// Drops all but the newest events the session keeps (`log_keep`), of all resources.
pub fn prune(ctx: &Ctx) -> Result<Pruned> {
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
    Ok(Pruned {
        dropped,
        keep: ctx.log_keep,
    })
}
