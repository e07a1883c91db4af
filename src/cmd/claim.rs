//! `fencepost claim`: take a resource's lease and get a new epoch.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use clap::Args;

use super::{Ctx, Report, check_owner};
use crate::audit::{Event, EventKind};
use crate::clock::{Clock, Zero, parse_duration};
use crate::error::{Error, Refusal, Result};
use crate::failpoints::failpoint;
use crate::lease::{ClaimRefusal, Lease, LeaseState, above, next_epoch};
use crate::outcome::{Claimed, LeaseView, Outcome, RefusalDetail};
use crate::resource::Resource;
use crate::store::Txn;

/// Claim RESOURCE for OWNER and print the new epoch (and nothing else).
///
/// Succeeds when there is no lease, the lease was released or completed, or its deadline
/// has passed (`now >= deadline`). The epoch goes up by one on every successful claim,
/// even when the same owner claims again. By default the claim also registers the new
/// epoch with the sink, so writes carrying an older epoch are refused from this moment on.
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
    #[arg(short, long, env = "FENCEPOST_WAIT", value_name = "DURATION")]
    pub wait: Option<String>,
}

pub(crate) fn run(ctx: &Ctx, claim: &ClaimArgs) -> Result<Report> {
    let claimed = take(ctx, claim)?;
    let changed = format!(
        "the lease on {} is held by {} as epoch {} until {}",
        claimed.resource,
        claimed.owner,
        claimed.epoch,
        crate::clock::show(ctx.clock.kind(), claimed.deadline),
    );
    Ok(Report::new(claimed.epoch.to_string(), Outcome::Claimed(claimed)).changed(changed))
}

/// Takes the lease (waiting for it with `--wait`): the claim of `claim` and `run`.
pub(crate) fn take(ctx: &Ctx, claim: &ClaimArgs) -> Result<Claimed> {
    let args = &claim.request;
    let (resource, ttl, wait) = check_request(ctx, args)?;
    let started = Instant::now();
    let mut pause = Duration::from_millis(10);
    let mut store = ctx.create_store(&resource)?;
    loop {
        // Read once the lock is held: waiting for it may take a while.
        let tx = ctx.begin(&mut *store, &resource)?;
        let now = ctx.now();
        let current = tx.lease(&resource)?;
        // A shared store may have lost history a mirror still holds: never issue an
        // epoch at or below the sink's fence or what a mirror reported holding.
        let floor = match ctx.remote {
            Some(_) => tx.epoch_floor(&resource)?,
            None => 0,
        };
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
        return grant(ctx, tx, claim, &resource, &lease, current.as_ref(), now);
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
    tx.commit()?;
    Ok(Claimed {
        resource: resource.to_string(),
        epoch: lease.epoch,
        owner: lease.owner.clone(),
        deadline: lease.deadline,
        fenced_at_sink: !claim.lazy_fence,
        previous: LeaseView::at(previous, now),
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
