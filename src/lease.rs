//! The scheduler's rules: who may act on a resource, as pure functions over plain values.
//!
//! A lease is valid while `now < deadline` (half-open: at the deadline it has expired).
//! Every successful claim gets the previous epoch plus one, so an epoch is never reused
//! and never goes backwards, even when the same owner name claims again. Renew,
//! complete and release are compare-and-set: owner AND epoch must match a live lease.
//! The store runs these functions inside one `BEGIN IMMEDIATE` transaction.

/// What happened to the lease last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// Claimed (and maybe renewed); live until its deadline.
    Held,
    /// Given up by its holder before the deadline.
    Released,
    /// Finished with a result by its holder before the deadline.
    Completed,
}

impl LeaseState {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseState::Held => "held",
            LeaseState::Released => "released",
            LeaseState::Completed => "completed",
        }
    }

    #[must_use]
    pub fn parse(s: &str) -> Option<LeaseState> {
        match s {
            "held" => Some(LeaseState::Held),
            "released" => Some(LeaseState::Released),
            "completed" => Some(LeaseState::Completed),
            _ => None,
        }
    }
}

/// One resource's lease row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub owner: String,
    pub epoch: i64,
    pub deadline: i64,
    pub state: LeaseState,
    pub result: Option<String>,
}

impl Lease {
    /// True while the holder may still act: held and `now < deadline`.
    #[must_use]
    pub fn is_live(&self, now: i64) -> bool {
        self.state == LeaseState::Held && now < self.deadline
    }

    /// The state as a person reads it: `held`, `expired`, `released`, `completed`.
    #[must_use]
    pub fn view(&self, now: i64) -> &'static str {
        match self.state {
            LeaseState::Held if now < self.deadline => "held",
            LeaseState::Held => "expired",
            other => other.as_str(),
        }
    }
}

/// Why a claim was not granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimRefusal {
    /// Someone holds a live lease.
    Held,
    /// The epoch counter is exhausted (never in practice; refused rather than wrapped).
    EpochExhausted,
}

/// The epoch a claim at `now` gets, or why it is refused.
///
/// # Errors
///
/// [`ClaimRefusal::Held`] while the current lease is live; [`ClaimRefusal::EpochExhausted`]
/// when the epoch counter would overflow.
pub fn next_epoch(current: Option<&Lease>, now: i64) -> Result<i64, ClaimRefusal> {
    match current {
        None => Ok(1),
        Some(lease) if lease.is_live(now) => Err(ClaimRefusal::Held),
        Some(lease) => lease
            .epoch
            .checked_add(1)
            .ok_or(ClaimRefusal::EpochExhausted),
    }
}

/// The epoch a claim issues when the store knows of epochs above its lease's (`floor`:
/// the sink's fence, or the highest a mirror root reported holding, after a store lost
/// history): `epoch`, or the one after `floor` if that is higher. An epoch a mirror has
/// seen is never issued again.
///
/// # Errors
///
/// [`ClaimRefusal::EpochExhausted`] when the epoch after `floor` would overflow.
pub fn above(epoch: i64, floor: i64) -> Result<i64, ClaimRefusal> {
    if floor < epoch {
        return Ok(epoch);
    }
    floor.checked_add(1).ok_or(ClaimRefusal::EpochExhausted)
}

/// Why a holder's renew, complete or release was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LostReason {
    /// No lease was ever issued for this resource.
    NoLease,
    /// The lease now has another epoch (taken over, or reclaimed under the same name).
    Superseded,
    /// The epoch is higher than any claim gave out: it never held the lease.
    NeverIssued,
    /// Same epoch but another owner name: the request does not hold this lease.
    WrongOwner,
    /// The deadline has passed (`now >= deadline`).
    Expired,
    /// The lease was already released or completed.
    Finished(LeaseState),
    /// A complete of a lease this owner and epoch already completed with another result.
    OtherResult,
}

impl LostReason {
    #[must_use]
    pub fn describe(&self) -> &'static str {
        match self {
            LostReason::NoLease => "no lease was ever claimed",
            LostReason::Superseded => "the lease has a newer epoch",
            LostReason::NeverIssued => "no claim ever issued that epoch",
            LostReason::WrongOwner => "the lease belongs to another owner",
            LostReason::Expired => "the lease expired",
            LostReason::Finished(LeaseState::Completed) => "the lease was already completed",
            LostReason::Finished(_) => "the lease was already released",
            LostReason::OtherResult => "the lease was already completed with another result",
        }
    }
}

/// The compare-and-set behind renew, complete and release: the lease must be live and
/// carry exactly this owner and epoch. `complete` relies on this being the same test as
/// `UPDATE lease ... WHERE owner=? AND epoch=? AND deadline > ?`.
///
/// # Errors
///
/// The [`LostReason`] the request does not hold the lease for.
pub fn check_holder(
    current: Option<&Lease>,
    owner: &str,
    epoch: i64,
    now: i64,
) -> Result<(), LostReason> {
    let lease = current.ok_or(LostReason::NoLease)?;
    if epoch > lease.epoch {
        return Err(LostReason::NeverIssued);
    }
    if lease.epoch != epoch {
        return Err(LostReason::Superseded);
    }
    if lease.owner != owner {
        return Err(LostReason::WrongOwner);
    }
    if lease.state != LeaseState::Held {
        return Err(LostReason::Finished(lease.state));
    }
    if now >= lease.deadline {
        return Err(LostReason::Expired);
    }
    Ok(())
}

/// True when a claim by `owner` at `now` is a retry of the claim that made the current
/// lease: the lease is live, held under this very owner name, and nothing was written
/// under its epoch yet (`written`: the epoch of the sink's recorded content). Such a claim
/// is answered with that lease and its epoch, unchanged (a replay), instead of `held`:
/// after a claim whose answer was lost (its COMMIT made, the reply not delivered), the
/// retry learns the epoch it holds rather than being told that it is held by itself.
///
/// A write under the epoch proves the claim was answered: a claim after it is a new one
/// by a worker that forgot to finish its lease, and handing it the old epoch would only
/// lead it to a `conflict` (one value per epoch), so it is `held` as any claim on a live
/// lease. An owner name must still name one worker: two processes claiming under one
/// name before either writes would both be answered with the same lease.
#[must_use]
pub fn claim_is_replay(
    current: Option<&Lease>,
    owner: &str,
    now: i64,
    written: Option<i64>,
) -> bool {
    current.is_some_and(|lease| {
        lease.is_live(now) && lease.owner == owner && written != Some(lease.epoch)
    })
}

/// What a holder asked to finish its lease with: `complete` (and its result) or
/// `release`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish<'a> {
    Complete(Option<&'a str>),
    Release,
}

/// True when `finish` by `owner` with `epoch` was already made: the lease is this
/// owner's and epoch's, and was finished the same way (completed with the same result,
/// or released). A retry after an unknown outcome is then a replay, answered as a
/// success that changes nothing; whatever else [`check_holder`] refuses stays refused
/// (a lease completed with another result, or released instead of completed, is not
/// the change asked for). Renew needs no such rule: retried on a live lease, it simply
/// renews again.
#[must_use]
pub fn finish_is_replay(current: Option<&Lease>, owner: &str, epoch: i64, finish: Finish) -> bool {
    let Some(lease) = current else {
        return false;
    };
    if lease.owner != owner || lease.epoch != epoch {
        return false;
    }
    match finish {
        Finish::Complete(result) => {
            lease.state == LeaseState::Completed && lease.result.as_deref() == result
        }
        Finish::Release => lease.state == LeaseState::Released,
    }
}

/// The answer to a holder's change the compare-and-set did not make (`finish`: `None`
/// for a renew): `Ok` when it is a replay of the same finish made before
/// ([`finish_is_replay`]), else why it is lost. A complete of a lease this owner and
/// epoch completed with another result says so.
///
/// # Errors
///
/// The [`LostReason`] the change is refused for.
pub fn unmade_change(
    current: Option<&Lease>,
    owner: &str,
    epoch: i64,
    now: i64,
    finish: Option<Finish>,
) -> Result<(), LostReason> {
    if finish.is_some_and(|f| finish_is_replay(current, owner, epoch, f)) {
        return Ok(());
    }
    match check_holder(current, owner, epoch, now) {
        Err(LostReason::Finished(LeaseState::Completed))
            if matches!(finish, Some(Finish::Complete(_))) =>
        {
            Err(LostReason::OtherResult)
        }
        Err(reason) => Err(reason),
        // The store's compare-and-set and `check_holder` are the same test; should they
        // ever differ, the change was not made, and the lease is taken as expired.
        Ok(()) => Err(LostReason::Expired),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `check_holder` on an existing lease.
    fn holds(lease: &Lease, owner: &str, epoch: i64, now: i64) -> Result<(), LostReason> {
        check_holder(Some(lease), owner, epoch, now)
    }

    fn held(owner: &str, epoch: i64, deadline: i64) -> Lease {
        Lease {
            owner: owner.into(),
            epoch,
            deadline,
            state: LeaseState::Held,
            result: None,
        }
    }

    #[test]
    fn first_claim_gets_epoch_one() {
        assert_eq!(next_epoch(None, 0), Ok(1));
    }

    #[test]
    fn a_claim_issues_above_any_epoch_the_store_knows_of() {
        assert_eq!(above(1, 0), Ok(1));
        assert_eq!(above(3, 2), Ok(3));
        assert_eq!(above(2, 2), Ok(3));
        assert_eq!(above(2, 7), Ok(8));
        assert_eq!(above(2, i64::MAX), Err(ClaimRefusal::EpochExhausted));
    }

    #[test]
    fn lease_is_half_open_at_the_deadline() {
        let a = held("A", 1, 10);
        assert_eq!(next_epoch(Some(&a), 9), Err(ClaimRefusal::Held));
        assert_eq!(next_epoch(Some(&a), 10), Ok(2));
        assert_eq!(holds(&a, "A", 1, 9), Ok(()));
        assert_eq!(holds(&a, "A", 1, 10), Err(LostReason::Expired));
    }

    #[test]
    fn released_or_completed_lease_is_claimable_before_its_deadline() {
        for state in [LeaseState::Released, LeaseState::Completed] {
            let lease = Lease {
                state,
                ..held("A", 4, 100)
            };
            assert_eq!(next_epoch(Some(&lease), 1), Ok(5));
            assert_eq!(holds(&lease, "A", 4, 1), Err(LostReason::Finished(state)));
        }
    }

    #[test]
    fn same_name_with_old_epoch_is_refused() {
        let reclaimed = held("A", 2, 30);
        assert_eq!(holds(&reclaimed, "A", 1, 20), Err(LostReason::Superseded));
        assert_eq!(holds(&reclaimed, "B", 2, 20), Err(LostReason::WrongOwner));
        assert_eq!(check_holder(None, "A", 1, 0), Err(LostReason::NoLease));
    }

    #[test]
    fn an_epoch_above_the_lease_was_never_issued_not_superseded() {
        let lease = held("A", 1, 30);
        assert_eq!(holds(&lease, "A", 2, 20), Err(LostReason::NeverIssued));
    }

    #[test]
    fn epoch_counter_never_wraps() {
        let last = held("A", i64::MAX, 0);
        assert_eq!(
            next_epoch(Some(&last), 1),
            Err(ClaimRefusal::EpochExhausted)
        );
    }

    #[test]
    fn a_claim_by_the_live_holder_is_a_replay_and_nobody_elses_is() {
        let a = held("A", 3, 10);
        assert!(claim_is_replay(Some(&a), "A", 9, None));
        // Content of an older epoch is no answer to this claim.
        assert!(claim_is_replay(Some(&a), "A", 9, Some(2)));
        assert!(!claim_is_replay(Some(&a), "B", 9, None));
        // A write under the epoch proves the claim was answered: a new claim, held.
        assert!(!claim_is_replay(Some(&a), "A", 9, Some(3)));
        // At the deadline the lease is over: a new claim, with the next epoch.
        assert!(!claim_is_replay(Some(&a), "A", 10, None));
        assert!(!claim_is_replay(None, "A", 0, None));
        for state in [LeaseState::Released, LeaseState::Completed] {
            let finished = Lease { state, ..a.clone() };
            assert!(!claim_is_replay(Some(&finished), "A", 1, None));
        }
    }

    #[test]
    fn a_finish_already_made_the_same_way_is_a_replay() {
        let completed = Lease {
            state: LeaseState::Completed,
            result: Some("ok".into()),
            ..held("A", 2, 10)
        };
        let ok = Finish::Complete(Some("ok"));
        assert!(finish_is_replay(Some(&completed), "A", 2, ok));
        assert!(!finish_is_replay(
            Some(&completed),
            "A",
            2,
            Finish::Complete(Some("failed"))
        ));
        assert!(!finish_is_replay(
            Some(&completed),
            "A",
            2,
            Finish::Complete(None)
        ));
        assert!(!finish_is_replay(Some(&completed), "A", 2, Finish::Release));
        assert!(!finish_is_replay(Some(&completed), "B", 2, ok));
        assert!(!finish_is_replay(Some(&completed), "A", 1, ok));
        let released = Lease {
            state: LeaseState::Released,
            ..held("A", 2, 10)
        };
        assert!(finish_is_replay(Some(&released), "A", 2, Finish::Release));
        assert!(!finish_is_replay(
            Some(&released),
            "A",
            2,
            Finish::Complete(None)
        ));
        // A live lease was not finished: the change is made, not replayed.
        assert!(!finish_is_replay(
            Some(&held("A", 2, 10)),
            "A",
            2,
            Finish::Release
        ));
        assert!(!finish_is_replay(None, "A", 2, Finish::Release));
    }

    #[test]
    fn an_unmade_change_is_a_replay_or_says_why_it_is_lost() {
        let completed = Lease {
            state: LeaseState::Completed,
            result: Some("ok".into()),
            ..held("A", 2, 10)
        };
        let c = Some(&completed);
        assert_eq!(
            unmade_change(c, "A", 2, 20, Some(Finish::Complete(Some("ok")))),
            Ok(())
        );
        assert_eq!(
            unmade_change(c, "A", 2, 5, Some(Finish::Complete(Some("no")))),
            Err(LostReason::OtherResult)
        );
        assert_eq!(
            unmade_change(c, "A", 2, 5, Some(Finish::Release)),
            Err(LostReason::Finished(LeaseState::Completed))
        );
        assert_eq!(
            unmade_change(c, "A", 2, 5, None),
            Err(LostReason::Finished(LeaseState::Completed))
        );
        assert_eq!(
            unmade_change(c, "A", 1, 5, Some(Finish::Complete(Some("ok")))),
            Err(LostReason::Superseded)
        );
        let live = held("A", 2, 10);
        assert_eq!(
            unmade_change(Some(&live), "A", 2, 10, Some(Finish::Release)),
            Err(LostReason::Expired)
        );
    }
}
