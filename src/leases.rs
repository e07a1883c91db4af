//! Leases: a claim that takes one (or waits for it) and gets a new epoch, and a holder's
//! changes to its own (renew, complete, release) as compare-and-sets. Each runs in one
//! write transaction of the session, deciding with the rules of `lease.rs`.

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use crate::audit::{Event, EventKind};
use crate::error::{Error, Refusal, Result};
use crate::failpoints::failpoint;
use crate::lease::{ClaimRefusal, Lease, LeaseState, above, claim_is_replay, next_epoch};
use crate::outcome::{Claimed, LeaseView, RefusalDetail};
use crate::resource::Resource;
use crate::session::{Ctx, check_epoch, check_owner, check_result, lost};
use crate::store::{self, ReadTxn, Txn};

/// What a claim asks for, its durations resolved: the resource (checked by [`claimable`]),
/// the owner, the lease's length on the session's clock, and how long to wait for a
/// held lease (`None`: not at all).
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    pub resource: &'a Resource,
    pub owner: &'a str,
    pub ttl: i64,
    pub wait: Option<Duration>,
    /// Leave the sink's fence where it is: old holders' writes are refused only after
    /// this holder's first write.
    pub lazy_fence: bool,
}

/// The identity a holder presents to renew, complete or release its lease.
#[derive(Debug, Clone, Copy)]
pub struct Holder<'a> {
    pub resource: &'a OsStr,
    pub owner: &'a str,
    pub epoch: i64,
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
pub fn take(ctx: &Ctx, claim: &ClaimRequest<'_>) -> Result<(Claimed, Instant)> {
    take_or_replay(ctx, claim, false).map_err(|e| e.retry_tells(RUN_RETRY))
}

/// What `run` tells when its claim's COMMIT's answer is lost: unlike `claim`, it never
/// takes a live lease of its own owner back.
const RUN_RETRY: &str = "if the claim was made, the lease is held under this owner until its \
                         deadline and `run` answers `held` until then (`fencepost status` shows \
                         its epoch, and `fencepost release` with it frees the lease); if not, \
                         running it again decides afresh";

/// Claims a lease: a claim by the live lease's own owner, while nothing was written
/// under it, is answered with that lease (see `lease::claim_is_replay`).
pub fn claim(ctx: &Ctx, claim: &ClaimRequest<'_>) -> Result<Claimed> {
    take_or_replay(ctx, claim, true).map(|(claimed, _)| claimed)
}

/// [`take`]; with `replays`, a claim by the live lease's own owner is answered with that
/// lease (see `lease::claim_is_replay`): the claim of `claim`.
fn take_or_replay(
    ctx: &Ctx,
    claim: &ClaimRequest<'_>,
    replays: bool,
) -> Result<(Claimed, Instant)> {
    let (ttl, wait) = (claim.ttl, claim.wait);
    let resource = claim.resource.clone();
    check_owner(claim.owner)?;
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
            && is_replay(&*tx, &resource, lease, claim.owner, now)?
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
                        return Err(held(ctx, &resource, claim.owner, holder, now, waited));
                    }
                }
            }
        };
        let deadline = now
            .checked_add(ttl)
            .ok_or_else(|| Error::usage(format!("--ttl {ttl} overflows the clock")))?;
        let lease = Lease {
            owner: claim.owner.to_string(),
            epoch,
            deadline,
            state: LeaseState::Held,
            result: None,
        };
        return grant(ctx, tx, claim, &resource, &lease, current.as_ref(), now)
            .map(|claimed| (claimed, asked));
    }
}

/// Checks a claim's resource before the state file is opened (bad input never creates
/// one): its name, and that its document could ever be written.
pub fn claimable(ctx: &Ctx, raw: &OsStr) -> Result<Resource> {
    let resource = ctx.resource(raw)?;
    // Neither the state file nor a file SQLite keeps beside it is ever a document, and a
    // document that is a symlink or a special file can never be written: refuse the claim
    // now, before any lease is recorded. A folder is refused too, unless the sink records a
    // tree there (`write --tree`) or a tree publish's marker stands beside it (a first
    // publish that crashed, which the claim's recovery resolves).
    // With a store, the document is the store's: a mirror root's copy is not checked here.
    let local = ctx.remote.is_none();
    if local {
        crate::session::refuse_state_path(ctx, &resource)?;
    }
    if local && let Some(doc) = crate::resource::locate(&ctx.root, &resource, false)? {
        crate::session::refuse_state_file(ctx, &doc, &resource)?;
        if let Err(refused) = crate::atomic::inspect_document(&doc)
            && !is_recorded_tree(ctx, &doc, &resource)?
        {
            return Err(refused);
        }
    }
    Ok(resource)
}

/// Whether a folder stands at the resource's name and the sink recorded a tree there
/// (`write --tree`): the folder is then the resource's own, and its lease is claimed and
/// taken over as a document's is. Read without creating a state file.
fn is_recorded_tree(
    ctx: &Ctx,
    doc: &crate::resource::DocPath,
    resource: &Resource,
) -> Result<bool> {
    let folder = doc
        .folder
        .stat(&doc.name)?
        .is_some_and(|e| e.kind == crate::folder::Kind::Folder);
    if !folder {
        return Ok(false);
    }
    if crate::recovery::tree_marked(doc)? {
        return Ok(true);
    }
    let Some(mut store) = store::open_read_only(&ctx.db, ctx.busy)? else {
        return Ok(false);
    };
    let content = store.snapshot()?.sink(resource)?.and_then(|r| r.content);
    Ok(content.is_some_and(|c| c.tree))
}

/// Whether a claim by `owner` is a retry of the claim that made `lease` (see
/// `lease::claim_is_replay`); the sink is read only when the owner's lease is live.
fn is_replay(
    tx: &dyn ReadTxn,
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
fn epoch_floor(ctx: &Ctx, tx: &dyn ReadTxn, resource: &Resource) -> Result<i64> {
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

/// Records the granted `lease` under the lock of `tx` (raising the sink's fence unless
/// `--lazy-fence`), logs the claim or takeover of `previous`, and commits.
fn grant(
    ctx: &Ctx,
    tx: Box<dyn Txn + '_>,
    claim: &ClaimRequest<'_>,
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
fn replayed(tx: &dyn ReadTxn, resource: &Resource, lease: &Lease) -> Result<Claimed> {
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

/// Runs a holder's compare-and-set (renew, complete, release) in one IMMEDIATE
/// transaction. Zero rows changed is a `lost` refusal that says why, never a success.
pub fn change_held(
    ctx: &Ctx,
    holder: &Holder<'_>,
    change: store::HolderChange<'_>,
) -> Result<(Resource, i64)> {
    change_held_noting(ctx, holder, change, None)
}

/// [`change_held`], with a note for the audit log's detail (why `run` released).
pub fn change_held_noting(
    ctx: &Ctx,
    holder: &Holder<'_>,
    change: store::HolderChange<'_>,
    note: Option<&str>,
) -> Result<(Resource, i64)> {
    change_held_or_replay(ctx, holder, change, note).map(|done| (done.resource, done.now))
}

/// What a holder's change did: the resource, the time it was decided at, and whether it
/// was a replay of the same change made before (nothing was changed).
#[derive(Debug)]
pub struct HeldChanged {
    pub resource: Resource,
    pub now: i64,
    pub replay: bool,
}

/// What each holder's change tells when its COMMIT's answer is lost.
fn retry_tells(change: store::HolderChange<'_>) -> &'static str {
    match change {
        store::HolderChange::Renew { .. } => {
            "renew again: it renews the lease from now if it is still yours (`lost` if it \
             expired meanwhile)"
        }
        store::HolderChange::Complete { .. } => {
            "complete again with the same --result: if it was made, the answer is \
             `completed`, marked as a replay; if not, it is made now (`lost` if the lease \
             expired meanwhile)"
        }
        store::HolderChange::Release => {
            "release again: if it was made, the answer is `released`, marked as a replay; \
             if not, it is made now (`lost` if the lease expired meanwhile)"
        }
    }
}

/// [`change_held_noting`]; a complete or release already made in the same way by this
/// owner and epoch (`lease::finish_is_replay`) is answered as a replay.
pub fn change_held_or_replay(
    ctx: &Ctx,
    holder: &Holder<'_>,
    change: store::HolderChange<'_>,
    note: Option<&str>,
) -> Result<HeldChanged> {
    let resource = ctx.resource(holder.resource)?;
    check_owner(holder.owner)?;
    check_epoch(holder.epoch)?;
    if let store::HolderChange::Complete { result } = change {
        check_result(result)?;
    }
    let mut store = ctx.store()?;
    let tx = ctx.begin(&mut *store, &resource)?;
    // Read once the lock is held: waiting for it may take a while.
    let now = ctx.now();
    if let store::HolderChange::Renew { ttl } = change {
        // Inside the renewal's transaction, its lock held (`run`'s partition tests).
        failpoint!("renew.locked");
        if now.checked_add(ttl).is_none() {
            return Err(Error::usage(format!("--ttl {ttl} overflows the clock")));
        }
    }
    let request = store::HolderRequest {
        owner: holder.owner,
        epoch: holder.epoch,
        now,
        change,
    };
    if tx.update_held_lease(&resource, &request)? {
        let (kind, detail) = match change {
            store::HolderChange::Renew { ttl } => (
                EventKind::Renew,
                format!("deadline {}", now.saturating_add(ttl)),
            ),
            store::HolderChange::Complete { result } => (
                EventKind::Complete,
                result.map(|r| format!("result {r}")).unwrap_or_default(),
            ),
            store::HolderChange::Release => (EventKind::Release, String::new()),
        };
        let mut event = Event::new(now, resource.as_str(), kind)
            .owner(Some(holder.owner))
            .epoch(Some(holder.epoch));
        let detail = match note {
            Some(note) if detail.is_empty() => note.to_string(),
            Some(note) => format!("{detail}; {note}"),
            None => detail,
        };
        if !detail.is_empty() {
            event = event.detail(detail);
        }
        ctx.log(&*tx, &event)?;
        tx.commit()
            .map_err(|e| e.retry_tells(retry_tells(change)))?;
        return Ok(HeldChanged {
            resource,
            now,
            replay: false,
        });
    }
    let current = tx.lease(&resource)?;
    let finish = match change {
        store::HolderChange::Renew { .. } => None,
        store::HolderChange::Complete { result } => Some(crate::lease::Finish::Complete(result)),
        store::HolderChange::Release => Some(crate::lease::Finish::Release),
    };
    match crate::lease::unmade_change(current.as_ref(), holder.owner, holder.epoch, now, finish) {
        // A replay reads only: the transaction is dropped (rolled back) and nothing is
        // logged, as the change it replays is in the log already.
        Ok(()) => Ok(HeldChanged {
            resource,
            now,
            replay: true,
        }),
        Err(reason) => Err(lost(
            &resource,
            holder.owner,
            holder.epoch,
            current.as_ref(),
            reason,
            now,
        )),
    }
}
