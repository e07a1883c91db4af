//! `fencepost mirror`: bring this host's mirror root up to the shared store.

use std::ffi::OsString;
use std::io::Write as _;

use clap::Args;

use super::Report;
use crate::cli::durations::{Zero, parse_duration};
use fencepost::clock::ClockKind;
use fencepost::error::{Error, Result};
use fencepost::outcome::{Mirrored, Outcome, Stopped};
use fencepost::session::Ctx;
use fencepost::text::count;

/// Copy the documents the shared store (--store) publishes into this host's root.
///
/// Each version newer than the root holds is applied through the same fenced, atomic
/// write a local publish uses, under the epoch the store gave it: epochs only rise on
/// every host, so a version that arrives late or twice never replaces a newer one. The
/// root becomes a mirror with its first document and then takes no claim or write of its
/// own. Prints one line per document applied (or `up to date`).
///
/// With --follow it keeps running: it wakes on each publish (the store notifies), checks
/// everything every --rescan, and reconnects with back-off when the connection drops.
/// It prints a start line (store, root, rescan, pid), then a line per document applied
/// and per warning, each after the time in UTC (with --json, an object per line with
/// `time`, wall-clock milliseconds). SIGTERM or SIGINT stops it after the apply under
/// way, with a last line and exit 0. One follower per root: a second is refused as
/// `held` (exit 3), naming the first one's pid; a plain `mirror` may run beside it. Its
/// passes know a document they hold by inode and size; a plain `mirror` hashes each one
/// and repairs one edited in place. A document this host cannot hold (its path is a file
/// here, or reaches through a symlink) is listed as failed, and the others are copied;
/// so is a version whose bytes in the store no longer match their record (--follow
/// retries it with back-off). A document the mirror holds a newer version of than the
/// store publishes (the store lost history) is listed as ahead and left as it is (exit 9).
/// --follow started before the store's first claim waits for it.
///
/// Example:
///   fencepost mirror --store postgresql:///fencepost?host=/run/postgresql --root /srv/reports --follow
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct MirrorArgs {
    /// Only this document (a path under the root).
    #[arg(env = "FENCEPOST_RESOURCE")]
    pub resource: Option<OsString>,

    /// Keep running: apply each version as it is published.
    #[arg(short, long)]
    pub follow: bool,

    /// With --follow, the longest time between two full checks: seconds or with units.
    #[arg(
        long,
        default_value = "60s",
        value_name = "DURATION",
        allow_negative_numbers = true
    )]
    pub rescan: String,

    #[command(flatten)]
    pub create: super::CreateArgs,
}

pub(crate) fn run(ctx: &Ctx, args: &MirrorArgs, json: bool) -> Result<Report> {
    let Some(remote) = &ctx.remote else {
        return Err(Error::usage_hint(
            "mirror copies from a shared store: pass --store URL (FENCEPOST_STORE)",
            "without --store, the root's own state file is the authority: there is nothing to mirror",
        ));
    };
    if !remote.mirror {
        return Err(Error::usage_hint(
            "mirror needs a root to copy into",
            "pass --root DIR (FENCEPOST_ROOT), or run it inside a mirror root",
        ));
    }
    let rescan = parse_duration(&args.rescan, ClockKind::Wall, "--rescan", Zero::Refused)?;
    let only = args
        .resource
        .as_deref()
        .map(|raw| ctx.resource(raw))
        .transpose()?;
    if args.follow {
        if only.is_some() {
            return Err(Error::usage(
                "--follow mirrors every document: drop RESOURCE",
            ));
        }
        return follow(ctx, rescan, json, &remote.url.shown);
    }
    let mut store = ctx.shared_store("nothing was ever claimed here")?;
    let done = fencepost::mirror::sync(
        ctx,
        &mut *store,
        only.as_ref().map(|r| r.as_str()),
        fencepost::mirror::Look::Hash,
    )?;
    let plain = plain(&done);
    let failed: Vec<_> = done
        .applied
        .iter()
        .filter(|a| a.outcome == "failed")
        .collect();
    let ahead = done.applied.iter().filter(|a| a.outcome == "ahead").count();
    if let Some(first) = failed.first() {
        // The others were copied; say which were not, and exit with the first's code.
        return Err(Error::Partial {
            code: first.code,
            message: format!(
                "{} of {} not mirrored; first: {}: {}",
                failed.len(),
                count(done.applied.len(), "document", "documents"),
                first.resource,
                first.error.as_deref().unwrap_or("")
            ),
            report: plain,
            done: Box::new(Outcome::Mirrored(done)),
        });
    }
    if ahead > 0 {
        // Not an error of this host's: the store went back. Exit 9, as `verify` does.
        return Err(Error::Partial {
            code: 9,
            message: format!(
                "{ahead} of {} ahead of the store: it lost history the mirror holds",
                count(done.applied.len(), "document", "documents")
            ),
            report: plain,
            done: Box::new(Outcome::Mirrored(done)),
        });
    }
    Ok(Report::new(plain, Outcome::Mirrored(done)))
}

/// The plain answer: one line per document applied or found stale, else `up to date`.
fn plain(done: &Mirrored) -> String {
    let lines: Vec<String> = done
        .applied
        .iter()
        .filter(|a| a.outcome != "current")
        .map(|a| {
            let what = format!(
                "{} {} ({}{})",
                a.outcome,
                a.resource,
                fencepost::mirror::place((a.epoch, a.seq)),
                if a.removed { ", a removal" } else { "" }
            );
            match &a.error {
                Some(why) => format!("{what}: {why}"),
                None => what,
            }
        })
        .collect();
    if lines.is_empty() {
        format!(
            "up to date ({})",
            count(done.applied.len(), "document", "documents")
        )
    } else {
        lines.join("\n")
    }
}

/// `mirror --follow`: takes the root's follower lock, prints the start line, follows
/// until SIGTERM or SIGINT (an apply under way is finished first), and answers with the
/// line saying it stopped (exit 0). Every line it prints starts with the time (UTC), so
/// that one run by hand or in a container, without journald's times, still has them.
fn follow(ctx: &Ctx, rescan_ms: i64, json: bool, shown: &str) -> Result<Report> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let lock = fencepost::mirror::lock_follower(ctx)?;
    // Watched before the start line, so a supervisor that signals as soon as it reads it
    // stops the follower the clean way. A second SIGINT (a second ^C) ends it at once.
    let stop = Arc::new(AtomicBool::new(false));
    let signal = Arc::new(AtomicUsize::new(0));
    let watch = |sig: i32| -> std::io::Result<()> {
        if sig == signal_hook::consts::SIGINT {
            // Registered first, so it sees the flag as the earlier ^C left it.
            signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&stop))?;
        }
        let number = usize::try_from(sig).unwrap_or_default();
        signal_hook::flag::register_usize(sig, Arc::clone(&signal), number)?;
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
        Ok(())
    };
    watch(signal_hook::consts::SIGTERM).map_err(Error::io("cannot watch", "SIGTERM"))?;
    watch(signal_hook::consts::SIGINT).map_err(Error::io("cannot watch", "SIGINT"))?;
    // Warnings too start with the time.
    let mut ctx = ctx.clone();
    ctx.warn = fencepost::session::Warn(Arc::new(|message| {
        let _ = writeln!(
            std::io::stderr(),
            "{} fencepost: warning: {message}",
            stamp()
        );
    }));
    let ctx = &ctx;
    let root = ctx.root.display().to_string();
    let rescan = std::time::Duration::from_millis(rescan_ms.unsigned_abs());
    let started = if json {
        serde_json::json!({"outcome": "following", "resource": null, "epoch": null,
                           "time": now(), "root": root, "store": shown,
                           "rescan_ms": rescan_ms, "pid": std::process::id()})
        .to_string()
    } else {
        format!(
            "{} following {shown} into {root}, rescan {} (pid {})",
            stamp(),
            shown_duration(rescan_ms),
            std::process::id()
        )
    };
    print_line(&started);
    fencepost::mirror::follow(ctx, &lock, rescan, &stop, |pass| print_pass(pass, json))?;
    let name = match signal.load(Ordering::SeqCst) {
        0 => "a stop".to_string(),
        n => i32::try_from(n)
            .ok()
            .and_then(|n| nix::sys::signal::Signal::try_from(n).ok())
            .map_or_else(|| format!("signal {n}"), |s| s.as_str().to_string()),
    };
    let time = now();
    Ok(Report::new(
        format!(
            "{} stopped following {shown} into {root} on {name}",
            fencepost::clock::show(ClockKind::Wall, time)
        ),
        Outcome::Stopped(Stopped {
            root,
            store: shown.to_string(),
            signal: name,
            time,
        }),
    ))
}

/// Wall-clock milliseconds now, for the `time` of --follow's JSON lines.
fn now() -> i64 {
    fencepost::clock::wall_millis()
}

/// Now as a UTC timestamp, for the start of --follow's plain lines.
pub(crate) fn stamp() -> String {
    fencepost::clock::show(ClockKind::Wall, now())
}

/// A duration as a person reads it: `60s`, `1.5s`, `250ms`.
fn shown_duration(ms: i64) -> String {
    match ms {
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms if ms >= 1000 => format!("{}s", ms as f64 / 1000.0),
        ms => format!("{ms}ms"),
    }
}

/// Prints one line on stdout and flushes it, so a reader (journald, a pipe) has it at
/// once.
fn print_line(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

/// With --follow: each pass that applied something, as it happens: a JSON object per
/// line with --json (the keys of a single pass's answer, `resource` and `epoch` null as
/// there, and `time`, wall-clock milliseconds), else its lines, each after the time.
fn print_pass(done: &Mirrored, json: bool) {
    if done.applied.iter().all(|a| a.outcome == "current") {
        return;
    }
    let text = if json {
        serde_json::json!({"outcome": "mirrored", "resource": null, "epoch": null,
                           "time": now(), "root": done.root, "store": done.store,
                           "applied": done.applied})
        .to_string()
    } else {
        let at = stamp();
        plain(done)
            .lines()
            .map(|line| format!("{at} {line}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    print_line(&text);
}
