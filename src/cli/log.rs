//! `fencepost log`: the audit log, as a table, as lanes, or as JSON. The engine is
//! `upkeep::log` (and `upkeep::prune`); drawing the events is this command's.

use std::ffi::OsString;

use clap::Args;
use unicode_width::UnicodeWidthStr;

use super::Report;
use super::durations::{Zero, parse_duration, parse_time};
use fencepost::audit::{Event, align};
use fencepost::clock::{ClockKind, show};
use fencepost::error::Result;
use fencepost::outcome::Outcome;
use fencepost::session::Ctx;
use fencepost::text::count;
use fencepost::upkeep::Since;

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
    #[arg(
        long,
        value_name = "DURATION",
        allow_negative_numbers = true,
        conflicts_with = "since"
    )]
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
    if args.prune {
        let pruned = fencepost::upkeep::prune(ctx)?;
        let dropped = pruned.dropped;
        return Ok(Report::new(
            format!("pruned {}", count(dropped, "event", "events")),
            Outcome::Pruned(pruned),
        )
        .changed(format!(
            "{} pruned from the audit log",
            if dropped == 1 {
                "1 event was".to_string()
            } else {
                format!("{dropped} events were")
            }
        )));
    }
    let since = match (&args.last, &args.since) {
        (Some(text), _) => Some(Since::Last(parse_duration(
            text,
            ctx.clock.kind(),
            "--last",
            Zero::Allowed,
        )?)),
        (None, Some(text)) => match parse_time(text, "--since")? {
            (time, true) => Some(Since::Wall(time)),
            (time, false) => Some(Since::At(time)),
        },
        (None, None) => None,
    };
    let log = fencepost::upkeep::log(ctx, args.resource.as_deref(), since)?;
    let events: Vec<&Event> = log.events.iter().map(|e| &e.event).collect();
    let plain = if args.timeline {
        timeline(&events, log.clock)
    } else {
        table(&events, log.clock)
    };
    Ok(Report::new(plain, Outcome::Log(log)))
}

/// The events as a table, one per line.
fn table(events: &[&Event], clock: ClockKind) -> String {
    if events.is_empty() {
        return "no events".to_string();
    }
    let mut rows = vec![["AT", "RESOURCE", "EVENT", "OWNER", "EPOCH", "DETAIL"].map(String::from)];
    for e in events {
        rows.push([
            show(clock, e.at),
            fencepost::text::display_name(&e.resource),
            e.kind.as_str().to_string(),
            e.owner.clone().unwrap_or_else(|| "-".into()),
            e.epoch.map_or_else(
                || "-".into(),
                |x| match e.seq {
                    Some(seq) => format!("{x} seq {seq}"),
                    None => x.to_string(),
                },
            ),
            e.detail
                .as_deref()
                .map(|d| show_detail(d, clock))
                .unwrap_or_default(),
        ]);
    }
    align(&rows)
}

/// A stored detail for the table: the deadline that claims and renewals record (as an
/// integer, like every stored time) shown the way [`show`] shows times.
fn show_detail(detail: &str, clock: ClockKind) -> String {
    let Some(rest) = detail.strip_prefix("deadline ") else {
        return detail.to_string();
    };
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    match rest[..digits].parse::<i64>() {
        Ok(deadline) => format!("deadline {}{}", show(clock, deadline), &rest[digits..]),
        Err(_) => detail.to_string(),
    }
}

/// How wide the timeline may grow before its lanes give way to one OWNER column.
const TIMELINE_WIDTH: usize = 100;

/// The story as lanes: one column per owner (in order of first appearance), one row
/// per event, so a takeover and a refused late write stand out at a glance. With more
/// owners than fit in [`TIMELINE_WIDTH`] columns (each run of a job under its own name),
/// one row per event with the owner in a column of its own.
fn timeline(events: &[&Event], clock: ClockKind) -> String {
    let lanes = lanes(events, clock);
    if lanes.lines().all(|l| l.width() <= TIMELINE_WIDTH) {
        return lanes;
    }
    let several = events.iter().any(|e| e.resource != events[0].resource);
    let mut header = vec!["AT".to_string()];
    if several {
        header.push("RESOURCE".into());
    }
    header.extend(["OWNER".to_string(), "EVENT".to_string()]);
    let mut rows = vec![header];
    for e in events {
        let mut row = vec![show(clock, e.at)];
        if several {
            row.push(fencepost::text::display_name(&e.resource));
        }
        row.push(e.owner.clone().unwrap_or_else(|| "?".into()));
        row.push(e.summary());
        rows.push(row);
    }
    align(&rows)
}

/// The timeline with a lane per owner.
fn lanes(events: &[&Event], clock: ClockKind) -> String {
    if events.is_empty() {
        return "no events".to_string();
    }
    let mut owners: Vec<String> = Vec::new();
    for e in events {
        let owner = e.owner.clone().unwrap_or_else(|| "?".into());
        if !owners.contains(&owner) {
            owners.push(owner);
        }
    }
    let several = events.iter().any(|e| e.resource != events[0].resource);
    let mut header = vec!["AT".to_string()];
    if several {
        header.push("RESOURCE".into());
    }
    header.extend(owners.iter().cloned());
    let mut rows = vec![header];
    for e in events {
        let owner = e.owner.clone().unwrap_or_else(|| "?".into());
        let mut row = vec![show(clock, e.at)];
        if several {
            row.push(fencepost::text::display_name(&e.resource));
        }
        row.extend(owners.iter().map(|o| {
            if *o == owner {
                e.summary()
            } else {
                String::new()
            }
        }));
        rows.push(row);
    }
    align(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencepost::audit::EventKind;

    fn ev(at: i64, kind: &str, owner: &str, epoch: i64) -> Event {
        Event::new(at, "doc.md", EventKind::parse(kind))
            .owner(Some(owner))
            .epoch(Some(epoch))
    }

    #[test]
    fn timeline_puts_each_owner_in_its_own_lane() {
        let events = [
            ev(0, "claim", "A", 1),
            ev(10, "takeover", "B", 2).previous(Some("A"), Some(1)),
            ev(11, "stale", "A", 1).previous(None, Some(2)),
        ];
        let text = timeline(&events.each_ref(), ClockKind::Logical);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["AT", "A", "B"]
        );
        assert!(lines[2].contains("takeover e2 (from A e1)"));
        let b_col = lines[0].find('B').unwrap_or(0);
        assert!(lines[2].find("takeover").unwrap_or(0) >= b_col);
        assert!(lines[3].contains("STALE e1 (fence 2)"));
        assert!(lines[3].find("STALE").unwrap_or(usize::MAX) < b_col);
    }

    #[test]
    fn many_owners_fall_back_to_an_owner_column_within_100_columns() {
        let events: Vec<Event> = (0..8)
            .map(|i| ev(i, "claim", &format!("worker-host-{}", 40_000 + i), i + 1))
            .collect();
        let text = timeline(&events.iter().collect::<Vec<_>>(), ClockKind::Wall);
        assert!(text.lines().all(|l| l.width() <= TIMELINE_WIDTH), "{text}");
        let header: Vec<&str> = text
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert_eq!(header, ["AT", "OWNER", "EVENT"]);
        assert!(text.contains("worker-host-40007  claim e8"), "{text}");
        // Two owners still get lanes.
        let text = timeline(&events[..2].iter().collect::<Vec<_>>(), ClockKind::Wall);
        assert!(
            text.lines()
                .next()
                .unwrap_or_default()
                .contains("worker-host-40001")
        );
    }
}
