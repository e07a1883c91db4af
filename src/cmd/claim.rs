//! `fencepost claim`: take a resource's lease and get a new epoch.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use clap::Args;

use super::{Ctx, Report, check_owner};
use crate::audit::{Event, EventKind};
use crate::clock::Clock;
use crate::cmd::durations::{Zero, parse_duration};
use crate::error::{Error, Refusal, Result};
use crate::failpoints::failpoint;
use crate::lease::{ClaimRefusal, Lease, LeaseState, above, claim_is_replay, next_epoch};
use crate::outcome::{Claimed, LeaseView, Outcome, RefusalDetail};
use crate::resource::Resource;
use crate::store::Txn;

/// Claim RESOURCE for OWNER and print the new epoch (and nothing else).
///
/// Succeeds when there is no lease, the lease was released or completed, or its deadline
/// has passed (`now >= deadline`). The epoch goes up by one on every successful claim,
/// even when the same owner claims again. A claim by the owner of the live lease (a
/// retry whose first answer was lost) is answered with that lease's epoch, unchanged,
/// marked as a replay in --json, while nothing was written under it; after a write it is
/// held. An owner name must name one worker. By default the
/// claim also registers the new epoch with the sink, so writes carrying an older epoch
/// are refused from this moment on.
///
/// Example:
///   epoch=$(fencepost claim reports/daily.md --owner worker-b --ttl 30s)
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct ClaimArgs {
    #[command(flatten)]
    pub request: LeaseRequest,

    /// Do not register the new epoch with the sink; old holders' writes are refused
    /// only after this holder's first write (a sink that learns epochs from writes only).
    #[arg(long)]
    pub lazy_fence: bool,
}

/// What a claim asks for; shared by `claim` and `run`.
#[derive(Debug, Clone, Args)]
pub(crate) struct LeaseRequest {
    /// The document's path under the root, e.g. reports/daily.md (from the current folder
    /// when the root was found from it, without --root).
    pub resource: OsString,

    /// Who is claiming (free text: host, pid, job id).
    #[arg(short, long, env = "FENCEPOST_OWNER")]
    pub owner: String,

    /// Lease length: seconds (30, 1.5) or with units (500ms, 2m30s, 1h, 1d); with --now,
    /// ticks.
    #[arg(short, long, env = "FENCEPOST_TTL", value_name = "DURATION")]
    pub ttl: String,

    /// If the lease is held, wait up to this long for it to become claimable: seconds or
    /// with units, 0 for not at all (wall clock only; polls with back-off, never spins).
    /// A resource locked by another session past --busy-timeout is waited through too.
    #[arg(short, long, env = "FENCEPOST_WAIT", value_name = "DURATION")]
    pub wait: Option<String>,
}

pub(crate) fn run(ctx: &Ctx, claim: &ClaimArgs) -> Result<Report> {
    let (claimed, _) = take_or_replay(ctx, claim, true)?;
    if claimed.replay {
        let plain = claimed.epoch.to_string();
        return Ok(Report::new(plain, Outcome::Claimed(claimed))
            .changed("nothing was changed (a replay of the claim that made the lease)"));
    }
    let changed = format!(
        "the lease on {} is held by {} as epoch {} until {}",
        claimed.resource,
        claimed.owner,
        claimed.epoch,
        crate::clock::show(ctx.clock.kind(), claimed.deadline),
    );
    Ok(Report::new(claimed.epoch.to_string(), Outcome::Claimed(claimed)).changed(changed))
}

/// What `claim` tells when its COMMIT's answer is lost.
const RETRY: &str = "claim again: if it was made, you get the same epoch back, marked as a \
                     replay; if not, it is decided afresh (`held` if another owner claimed \
                     it meanwhile)";

/// Takes the lease (waiting for it with `--wait`): the claim of `run`, which refuses
/// a live lease whoever holds it: two overlapping runs under one owner name (a cron job
/// with `--owner "$(hostname)"`) must not both run their command. Also returns when the
/// transaction that granted it began here: the lease's deadline is at least its TTL
/// after that, on any clock.
pub(crate) fn take(ctx: &Ctx, claim: &ClaimArgs) -> Result<(Claimed, Instant)> {
    take_or_replay(ctx, claim, false).map_err(|e| e.retry_tells(RUN_RETRY))
}

/// What `run` tells when its claim's COMMIT's answer is lost: unlike `claim`, it never
/// takes a live lease of its own owner back.
const RUN_RETRY: &str = "if the claim was made, the lease is held under this owner until its \
                         deadline and `run` answers `held` until then (`fencepost status` shows \
                         its epoch, and `fencepost release` with it frees the lease); if not, \
                         running it again decides afresh";

/// [`take`]; with `replays`, a claim by the live lease's own owner is answered with that
/// lease (see `lease::claim_is_replay`): the claim of `claim`.
fn take_or_replay(ctx: &Ctx, claim: &ClaimArgs, replays: bool) -> Result<(Claimed, Instant)> {
    let args = &claim.request;
    let (resource, ttl, wait) = check_request(ctx, args)?;
    let started = Instant::now();
    let mut pause = Duration::from_millis(10);
    // Waiting for the resource's lock is part of the wait: no lock wait may outlast it.
    let wait_ctx;
    let ctx = match wait {
        Some(w) if w < ctx.busy => {
            wait_ctx = Ctx {
                busy: w,
                ..ctx.clone()
            };
            &wait_ctx
        }
        _ => ctx,
    };
    let mut store = ctx.create_store(&resource)?;
    loop {
        let asked = Instant::now();
        // Read once the lock is held: waiting for it may take a while.
        let tx = match ctx.begin(&mut *store, &resource) {
            Ok(tx) => tx,
            // The lock is held by another session (one stuck on a cut network holds it
            // until the server drops it): with time left to wait, wait on.
            Err(Error::Busy { .. } | Error::RemoteBusy { .. })
                if wait.is_some_and(|w| started.elapsed() < w) =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
                continue;
            }
            Err(e) => return Err(busy_for(e, wait.map(|_| started.elapsed()))),
        };
        let now = ctx.now();
        let current = tx.lease(&resource)?;
        if replays
            && let Some(lease) = current.as_ref()
            && is_replay(&*tx, &resource, lease, &args.owner, now)?
        {
            // Read-only: dropped, the transaction rolls back.
            return replayed(&*tx, &resource, lease).map(|claimed| (claimed, asked));
        }
        let floor = epoch_floor(ctx, &*tx, &resource)?;
        let epoch = match next_epoch(current.as_ref(), now).and_then(|e| above(e, floor)) {
            Ok(epoch) => epoch,
            Err(ClaimRefusal::EpochExhausted) => {
                return Err(Error::usage(format!("epochs of {resource} are exhausted")));
            }
            Err(ClaimRefusal::Held) => {
                drop(tx);
                let holder = current.as_ref();
                let left = wait.and_then(|w| w.checked_sub(started.elapsed()));
                match left {
                    Some(left) if !left.is_zero() => {
                        // Sleep until the holder's deadline or the next poll, whichever is
                        // sooner: a release or completion can free it early.
                        let until_deadline = holder.map_or(0, |l| l.deadline - now).max(1);
                        let nap = pause
                            .min(left)
                            .min(Duration::from_millis(until_deadline.unsigned_abs()));
                        std::thread::sleep(nap);
                        // Capped low: a waiter that sleeps long after a release leaves
                        // the lease idle (a 500 ms cap made 8 claimers taking turns
                        // about 1.2x slower than 50 ms; bench/notes.md).
                        pause = (pause * 2).min(Duration::from_millis(50));
                        continue;
                    }
                    _ => {
                        let waited = wait.map(|_| started.elapsed());
                        return Err(held(ctx, &resource, &args.owner, holder, now, waited));
                    }
                }
            }
        };
        let deadline = now
            .checked_add(ttl)
            .ok_or_else(|| Error::usage(format!("--ttl {} overflows the clock", args.ttl)))?;
        let lease = Lease {
            owner: args.owner.clone(),
            epoch,
            deadline,
            state: LeaseState::Held,
            result: None,
        };
        return grant(ctx, tx, claim, &resource, &lease, current.as_ref(), now)
            .map(|claimed| (claimed, asked));
    }
}

/// Whether a claim by `owner` is a retry of the claim that made `lease` (see
/// `lease::claim_is_replay`); the sink is read only when the owner's lease is live.
fn is_replay(
    tx: &dyn Txn,
    resource: &Resource,
    lease: &Lease,
    owner: &str,
    now: i64,
) -> Result<bool> {
    if !claim_is_replay(Some(lease), owner, now, None) {
        return Ok(false);
    }
    let written = tx.sink(resource)?.and_then(|s| s.content).map(|c| c.epoch);
    Ok(claim_is_replay(Some(lease), owner, now, written))
}

/// The epoch a claim must issue above: a shared store may have lost history a mirror
/// still holds, so never at or below the sink's fence or what a mirror reported holding.
fn epoch_floor(ctx: &Ctx, tx: &dyn Txn, resource: &Resource) -> Result<i64> {
    match ctx.remote {
        Some(_) => tx.epoch_floor(resource),
        None => Ok(0),
    }
}

/// A `busy` that ended a `--wait` says how long the whole wait was (`waited`), not only
/// its last lock wait; other errors pass unchanged.
fn busy_for(e: Error, waited: Option<Duration>) -> Error {
    let Some(waited) = waited else { return e };
    let waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
    match e {
        Error::Busy { path, .. } => Error::Busy { path, waited_ms },
        Error::RemoteBusy { store, .. } => Error::RemoteBusy { store, waited_ms },
        other => other,
    }
}

/// Checks a claim before the state file is opened (bad input never creates one): the
/// resource, the owner name, that the document could ever be written, and the
/// durations. Returns the resource, the TTL and how long `--wait` may wait.
fn check_request(ctx: &Ctx, args: &LeaseRequest) -> Result<(Resource, i64, Option<Duration>)> {
    let resource = ctx.resource(&args.resource)?;
    check_owner(&args.owner)?;
    // Neither the state file nor a file SQLite keeps beside it is ever a document, and a
    // document that is a symlink, a folder or a special file can never be written: refuse
    // the claim now, before any lease is recorded.
    // With a store, the document is the store's: a mirror root's copy is not checked here.
    let local = ctx.remote.is_none();
    if local {
        super::refuse_state_path(ctx, &resource)?;
    }
    if local && let Some(doc) = crate::resource::locate(&ctx.root, &resource, false)? {
        super::refuse_state_file(ctx, &doc, &resource)?;
        crate::atomic::inspect_document(&doc)?;
    }
    let kind = ctx.clock.kind();
    let ttl = parse_duration(&args.ttl, kind, "--ttl", Zero::Refused)?;
    let wait = match &args.wait {
        None => None,
        Some(_) if matches!(ctx.clock, Clock::Logical(_)) => {
            return Err(Error::usage_hint(
                "--wait needs the wall clock: with --now, time does not pass",
                "drop --now, or retry the claim with a later --now",
            ));
        }
        Some(text) => Some(Duration::from_millis(
            parse_duration(text, kind, "--wait", Zero::Allowed)?.unsigned_abs(),
        )),
    };
    Ok((resource, ttl, wait))
}

/// Records the granted `lease` under the lock of `tx` (raising the sink's fence unless
/// `--lazy-fence`), logs the claim or takeover of `previous`, and commits.
fn grant(
    ctx: &Ctx,
    tx: Box<dyn Txn + '_>,
    claim: &ClaimArgs,
    resource: &Resource,
    lease: &Lease,
    previous: Option<&Lease>,
    now: i64,
) -> Result<Claimed> {
    tx.put_lease(resource, lease, now)?;
    if !claim.lazy_fence {
        tx.raise_fence(resource, lease.epoch)?;
    }
    let kind = match previous {
        Some(l) if l.state == LeaseState::Held => EventKind::Takeover,
        _ => EventKind::Claim,
    };
    let fence = if claim.lazy_fence { ", lazy fence" } else { "" };
    let event = Event::new(now, resource.as_str(), kind)
        .owner(Some(&lease.owner))
        .epoch(Some(lease.epoch))
        .previous(
            previous.map(|l| l.owner.as_str()),
            previous.map(|l| l.epoch),
        )
        .detail(format!("deadline {}{fence}", lease.deadline));
    ctx.log(&*tx, &event)?;
    failpoint!("claim.before_commit");
    tx.commit().map_err(|e| e.retry_tells(RETRY))?;
    Ok(Claimed {
        resource: resource.to_string(),
        epoch: lease.epoch,
        owner: lease.owner.clone(),
        deadline: lease.deadline,
        fenced_at_sink: !claim.lazy_fence,
        previous: LeaseView::at(previous, now),
        replay: false,
    })
}

/// The answer to a claim retried by the live `lease`'s owner: that lease, unchanged,
/// marked as a replay. Nothing is written (the transaction is rolled back), not even to the audit log: the claim that
/// made the lease is logged already, and a second line would read as a second claim.
/// `fenced_at_sink` says whether the sink's fence stands at the lease's epoch.
fn replayed(tx: &dyn Txn, resource: &Resource, lease: &Lease) -> Result<Claimed> {
    let fence = tx.sink(resource)?.map_or(0, |r| r.fence);
    Ok(Claimed {
        resource: resource.to_string(),
        epoch: lease.epoch,
        owner: lease.owner.clone(),
        deadline: lease.deadline,
        fenced_at_sink: fence >= lease.epoch,
        previous: None,
        replay: true,
    })
}

/// The `held` refusal. Its `epoch` is the caller's, which it has none of yet (null); the
/// holder's is `holder_epoch`. `waited`: how long `--wait` waited before giving up.
fn held(
    ctx: &Ctx,
    resource: &Resource,
    claimant: &str,
    holder: Option<&Lease>,
    now: i64,
    waited: Option<Duration>,
) -> Error {
    let (who, epoch, deadline) =
        holder.map_or(("?", 0, 0), |l| (l.owner.as_str(), l.epoch, l.deadline));
    let waited_ms = waited.map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX));
    let gave_up = waited.map_or_else(String::new, |w| {
        format!("; gave up after waiting {:.1}s", w.as_secs_f64())
    });
    Error::refused(Refusal::new(
        format!(
            "{resource} is held by {who} (epoch {epoch}) until {}{gave_up}",
            crate::clock::show(ctx.clock.kind(), deadline)
        ),
        resource.as_str(),
        None,
        Some(claimant),
        RefusalDetail::Held {
            holder: who.to_string(),
            holder_epoch: epoch,
            deadline,
            waited_ms,
            lease: LeaseView::at(holder, now),
        },
    ))
}
