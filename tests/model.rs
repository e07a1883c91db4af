//! A model of the write protocol, explored exhaustively with `stateright`: every
//! interleaving of a few workers that claim (taking over expired leases), write in the
//! protocol's steps, pause between any two of them, crash at any of them, lose power, and
//! of a `recover` that can run at any time. The folder is names to inodes, with the view
//! the page cache gives and what a power loss may leave of it.
//!
//! Each worker holds one epoch and publishes its versions under it, one `write` process
//! at a time per version. In the model of one version, each worker writes seq 1 once,
//! with up to two power losses. In the model of versions ([`WriteModel::versions`]),
//! worker 1 publishes seq 1 then seq 2 (`write --seq`), pausing between them for as
//! long as it likes (others claim and write meanwhile), with no power loss, and:
//! - a write whose process crashed may be retried, by any worker, with the same seq and
//!   content (a retry after an unknown outcome: it must be written or replayed, never a
//!   conflict), as long as its worker has not gone on to its next version;
//! - worker 1 may go on to seq 2 without waiting for seq 1's write, while that one has
//!   not taken the lock yet (a timeout, with the process hung rather than dead): seq 1's
//!   write runs on, and may reach the sink after seq 2. That is the only way a lower seq
//!   of an epoch meets a higher one recorded, the case the seq rule's `<` is for. (A
//!   write that holds the lock decides and commits before any other can, and past its
//!   COMMIT only removes its own links: going on from there is going on from its crash.)
//!
//! The model decides nothing itself: the epochs come from `lease::next_epoch`, the sink's
//! answers from `sink::decide` and `sink::fence_after_write`, recovery's (one per link
//! set) from `sink::recovery`. The protocol is a set of flags ([`Protocol`]): the current
//! protocol is one setting, and the old or broken behaviours (no fencing, no folder
//! fsync, link names shared by all writers, file identity with the device number, seqs
//! compared for equality only) are others, for which the checker must find
//! counterexamples, or the model proves nothing.
//!
//! A write's steps, each a step of the model: stage (temp file created, written, fsynced,
//! flocked); `BEGIN IMMEDIATE`; recovery under the lock, one change at a time; the
//! decision; link `-pre-<token>`, link `-new-<token>`; rename; fsync the folder; COMMIT;
//! remove its own links, without the lock. A link's token is the staged file's inode
//! number, unique among live files; in the model each version's staged file is its own
//! inode (numbered `10 * worker + seq`), so the token is the version. A retry's staged
//! file gets the number of the attempt it retries: inode numbers are reused, and the
//! retry's recovery, under the lock, deals with the dead attempt's links before the
//! retry makes its own.
//!
//! Not modelled: the bytes (each version has its own content, so an inode stands for a
//! version), the `-sum` link and hand edits (it only matters for a document edited by hand
//! after a crash), errors other than crashes, removals (tombstones), and
//! `complete`/`release` (a takeover after expiry is the harder case). A `claim` runs
//! recovery first, in its transaction, in one step (a `recover` covers the crashes inside
//! a recovery). Each write's content is fsynced before its rename, so only names are at
//! stake in a power loss; the state file's COMMIT is durable when it returns.

use std::collections::BTreeSet;
use std::time::Instant;

use fencepost::lease::{Lease, LeaseState, next_epoch};
use fencepost::sink::{
    self, Body, Content, FileId, Leftovers, Offer, Recorded, Recovery, SinkRecord, WriteDecision,
    fence_after_write,
};
use stateright::{Checker, HasDiscoveries, Model, Path, Property};

/// The protocol's choices. [`Protocol::CURRENT`] is what `fencepost write` does.
#[derive(Debug, Clone, Copy)]
struct Protocol {
    /// The sink checks the epoch (`false`: `write --unfenced`).
    fenced: bool,
    /// fsync the folder after the links, before the rename.
    fsync_before_rename: bool,
    /// fsync the folder after the rename, before COMMIT.
    fsync_after_rename: bool,
    /// Recovery fsyncs the folder before it removes the links of a write that committed
    /// or never renamed (an earlier recovery's rename back may not be durable yet).
    fsync_before_drop: bool,
    /// Each write's links carry its own token. `false`: the shared `-pre`/`-new` names,
    /// which every writer removes by name after its COMMIT, without the lock.
    own_links: bool,
    /// A file's identity includes the device number, which a remount can change.
    identity_has_dev: bool,
    /// Within an epoch, a seq under the recorded one is stale. `false`: seqs are only
    /// compared for equality (the same seq is a replay or a conflict, any other one is
    /// written), so an older version of the epoch replaces a newer one.
    seq_order: bool,
}

impl Protocol {
    const CURRENT: Protocol = Protocol {
        fenced: true,
        fsync_before_rename: false,
        fsync_after_rename: true,
        fsync_before_drop: false,
        own_links: true,
        identity_has_dev: false,
        seq_order: true,
    };
}

/// What of the folder's operations since its last fsync survives a power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PowerLoss {
    /// An in-order prefix (ext4 and xfs journal metadata operations in order).
    Prefix,
    /// Any subset, applied in order (a filesystem that orders nothing without fsync).
    AnySubset,
}

/// One configuration of the model.
#[derive(Debug, Clone)]
struct WriteModel {
    workers: u8,
    protocol: Protocol,
    power_loss: PowerLoss,
    /// How many power losses one run may have.
    max_power_losses: u8,
    /// The worker that publishes two versions, seq 1 then seq 2 (the others publish
    /// one, seq 1).
    versioned: Option<u8>,
    /// A write whose process crashed may be retried.
    retries: bool,
    /// Steps as coarse as the product's failpoints: recovery under the lock, the
    /// decision and the pre-image link are one step (so is a `recover`), since the
    /// product has no failpoint between them. For replaying paths with real processes.
    coarse: bool,
    /// The steps of an accepted write, from `protocol`.
    steps: Vec<Step>,
}

/// A name in the document's folder. The `u8` of a temp file is its version's inode (see
/// [`ino`]); that of a link is its write's token ([`SHARED`] for the old shared names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Name {
    Doc,
    Tmp(u8),
    Pre(u8),
    New(u8),
}

/// The token of the old protocol's link names, the same for every writer.
const SHARED: u8 = u8::MAX;

/// One change to the folder's names, as the page cache has it. An inode is the version
/// whose content it holds (see [`ino`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Change {
    Set(Name, u8),
    Remove(Name),
    Move(Name, Name, u8),
}

/// The names of the folder, one slot per name (`EMPTY`: absent): small and `Copy`, since
/// the checker clones and hashes millions of states.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Names([u8; SLOTS]);

/// The document, a temp file per version, and a `-pre` and a `-new` per token (each
/// version's, and the shared one).
const SLOTS: usize = 1 + INODES + 2 * (INODES + 1);
const MAX_WORKERS: usize = 4;
/// The most versions a worker publishes.
const MAX_VERSIONS: usize = 2;
/// One inode per version of each worker.
const INODES: usize = MAX_WORKERS * MAX_VERSIONS;
const EMPTY: u8 = u8::MAX;

/// The inode of worker `w`'s version `seq` (from 1): `10 * w + seq`, so that a path's
/// names read as versions (12 is worker 1's seq 2).
fn ino(w: u8, seq: u8) -> u8 {
    10 * w + seq
}

/// The worker and seq of inode `ino`.
fn version_of(ino: u8) -> (u8, u8) {
    (ino / 10, ino % 10)
}

/// The dense index, below [`INODES`], of inode `ino` (or of token `ino`).
fn index(ino: u8) -> usize {
    let (w, seq) = version_of(ino);
    usize::from(w) * MAX_VERSIONS + usize::from(seq) - 1
}

/// The inode whose dense index is `i`.
fn ino_at(i: usize) -> u8 {
    ino((i / MAX_VERSIONS) as u8, (i % MAX_VERSIONS) as u8 + 1)
}

impl std::fmt::Debug for Names {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Names {
    const NONE: Names = Names([EMPTY; SLOTS]);

    fn slot(name: Name) -> usize {
        let token = |t: u8| if t == SHARED { INODES } else { index(t) };
        match name {
            Name::Doc => 0,
            Name::Tmp(i) => 1 + index(i),
            Name::Pre(t) => 1 + INODES + token(t),
            Name::New(t) => 2 + 2 * INODES + token(t),
        }
    }

    fn name(slot: usize) -> Name {
        let token = |i: usize| if i == INODES { SHARED } else { ino_at(i) };
        match slot {
            0 => Name::Doc,
            s if s <= INODES => Name::Tmp(ino_at(s - 1)),
            s if s <= 2 * INODES + 1 => Name::Pre(token(s - 1 - INODES)),
            s => Name::New(token(s - 2 - 2 * INODES)),
        }
    }

    fn get(&self, name: Name) -> Option<u8> {
        Some(self.0[Names::slot(name)]).filter(|&ino| ino != EMPTY)
    }

    /// Every name present, with its inode.
    fn iter(&self) -> impl Iterator<Item = (Name, u8)> + '_ {
        (0..SLOTS)
            .filter(|&i| self.0[i] != EMPTY)
            .map(|i| (Names::name(i), self.0[i]))
    }

    fn apply(&mut self, change: Change) {
        match change {
            Change::Set(name, ino) => self.0[Names::slot(name)] = ino,
            Change::Remove(name) => self.0[Names::slot(name)] = EMPTY,
            Change::Move(from, to, ino) => {
                self.0[Names::slot(from)] = EMPTY;
                self.0[Names::slot(to)] = ino;
            }
        }
    }
}

/// What a power loss may leave of the folder.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Durable {
    /// In order: the folder as of its last fsync and after each change since, sorted and
    /// without repeats (a power loss keeps one of them; their order no longer matters).
    Prefixes(Vec<Names>),
    /// Any subset: the folder as of its last fsync, and the changes since in order.
    Log(Names, Vec<Change>),
    /// No power loss is left to come: nothing to keep track of.
    Untracked,
}

/// The folder: the names as every process sees them (the page cache) and what a power
/// loss may leave of them. Temp files are not carried through a power loss: after one,
/// every writer is gone, and recovery would only remove them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Folder {
    cached: Names,
    durable: Durable,
}

impl Names {
    /// The names without temp files.
    fn lasting(mut self) -> Names {
        for i in 0..INODES {
            self.0[Names::slot(Name::Tmp(ino_at(i)))] = EMPTY;
        }
        self
    }
}

impl Change {
    /// The change as it matters after a power loss (see [`Names::lasting`]).
    fn lasting(self) -> Option<Change> {
        match self {
            Change::Set(Name::Tmp(_), _) | Change::Remove(Name::Tmp(_)) => None,
            Change::Move(Name::Tmp(_), to, ino) => Some(Change::Set(to, ino)),
            change => Some(change),
        }
    }
}

impl Folder {
    fn new(names: Names, power_loss: Option<PowerLoss>) -> Folder {
        let lasting = names.lasting();
        let durable = match power_loss {
            Some(PowerLoss::Prefix) => Durable::Prefixes(vec![lasting]),
            Some(PowerLoss::AnySubset) => Durable::Log(lasting, Vec::new()),
            None => Durable::Untracked,
        };
        Folder {
            cached: names,
            durable,
        }
    }

    fn get(&self, name: Name) -> Option<u8> {
        self.cached.get(name)
    }

    fn change(&mut self, change: Change) {
        self.cached.apply(change);
        match &mut self.durable {
            Durable::Prefixes(states) => {
                let now = self.cached.lasting();
                if let Err(at) = states.binary_search(&now) {
                    states.insert(at, now);
                }
            }
            Durable::Log(_, log) => log.extend(change.lasting()),
            Durable::Untracked => {}
        }
    }

    /// Removes a name if it is there (an unlink of a missing name changes nothing).
    fn remove(&mut self, name: Name) {
        if self.get(name).is_some() {
            self.change(Change::Remove(name));
        }
    }

    fn fsync(&mut self) {
        let now = self.cached.lasting();
        match &mut self.durable {
            Durable::Prefixes(states) => *states = vec![now],
            Durable::Log(durable, log) => {
                *durable = now;
                log.clear();
            }
            Durable::Untracked => {}
        }
    }

    /// How many ways a power loss can go now.
    fn outcomes(&self) -> usize {
        match &self.durable {
            Durable::Prefixes(states) => states.len(),
            Durable::Log(_, log) => {
                assert!(log.len() < 20, "too many changes since the last fsync");
                1 << log.len()
            }
            Durable::Untracked => 0,
        }
    }

    /// The names after a power loss that went the `choice`th way.
    fn after_power_loss(&self, choice: usize) -> Names {
        match &self.durable {
            Durable::Prefixes(states) => states[choice],
            Durable::Log(durable, log) => {
                let mut names = *durable;
                for (i, &change) in log.iter().enumerate() {
                    if choice & (1 << i) != 0 {
                        names.apply(change);
                    }
                }
                names
            }
            Durable::Untracked => unreachable!("no power loss is left to come"),
        }
    }
}

/// One step of a recovery, planned under the lock and carried out one at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Unlink(Name),
    /// Rename the pre-image of this token back over the document.
    Restore(u8),
    Fsync,
}

/// The steps of an accepted write after the decision, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    LinkPre,
    LinkNew,
    Fsync,
    Rename,
    Commit,
    Cleanup,
}

/// Where the write of one version is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    /// Not started.
    Idle,
    /// The temp file is written, fsynced and flocked.
    Staged,
    /// Holds the lock; recovery's steps still to do, then the decision.
    Recovering(Vec<Op>),
    /// Accepted; the index of the next [`Step`].
    Writing(u8),
    /// Exited 0, with `written` or `replay`: acknowledged.
    Done(&'static str),
    Refused(&'static str),
    /// Exited with an error (a recovery step that could not be done; for a worker's
    /// first version, also a claim whose recovery could not be done).
    Failed,
    /// Crashed.
    Dead,
}

impl Phase {
    /// A running process (its temp file's flock is held).
    fn alive(&self) -> bool {
        matches!(
            self,
            Phase::Staged | Phase::Recovering(_) | Phase::Writing(_)
        )
    }

    fn acked(&self) -> bool {
        matches!(self, Phase::Done(_))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Worker {
    /// The epoch `claim` gave it (0: none yet).
    epoch: u8,
    /// The write of each of its versions, seq 1 first.
    writes: [Phase; MAX_VERSIONS],
}

impl Worker {
    /// The write of version `seq`.
    fn write(&self, seq: u8) -> &Phase {
        &self.writes[usize::from(seq) - 1]
    }

    /// It claimed, or tried to (a claim that failed leaves its first write `Failed`).
    fn came(&self) -> bool {
        self.epoch != 0 || self.writes[0] != Phase::Idle
    }
}

/// The `recover` command, which an operator may run at any time, again and again.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Recoverer {
    Idle,
    Recovering(Vec<Op>),
    /// Done, lock still held: the moment "after recovery".
    Recovered,
}

/// The lease: only its epoch. Nothing but a claim looks at a lease's deadline, so each
/// claim is made at the current lease's deadline (when the lease rules allow a takeover)
/// and the model needs no clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct LeaseRow {
    epoch: u8,
}

/// The write a sink record names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Written {
    epoch: u8,
    seq: u8,
    /// The version's inode (see [`ino`]).
    file: u8,
    /// The device number the file had when the write was recorded.
    dev: u8,
}

impl Written {
    fn version(self) -> (u8, u8) {
        (self.epoch, self.seq)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SinkRow {
    fence: u8,
    content: Option<Written>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    workers: Vec<Worker>,
    recoverer: Recoverer,
    lease: Option<LeaseRow>,
    sink: Option<SinkRow>,
    folder: Folder,
    /// The folder's device number: a remount may change it.
    dev: u8,
    power_losses: u8,
    /// The highest `(epoch, seq)` the sink has recorded so far (`(0, 0)`: none). Only
    /// for [`WENT_BACK`]: where the protocol holds, it is the recorded version, and adds
    /// no state.
    peak: (u8, u8),
}

/// The checker's steps. A write's are `(worker, seq)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Claim(u8),
    /// The worker starts a version: its first version, or the next one once the write of
    /// the one before was acknowledged, crashed, or is left running before the lock.
    Stage(u8, u8),
    /// The worker writes a version again, after its process crashed.
    Retry(u8, u8),
    Begin(u8, u8),
    Step(u8, u8),
    Crash(u8, u8),
    RecoverBegin,
    RecoverStep,
    RecoverCommit,
    RecoverCrash,
    /// Which changes since the last fsync survive: a prefix length, or a bit set.
    PowerLoss(u32),
}

/// Every lease's deadline, in ticks; claims come at that time.
const DEADLINE: i64 = 10;

/// The content of the version of inode `ino`, as its SHA-256 stands in the record.
fn hash(ino: u8) -> String {
    format!("{ino:064x}")
}

impl WriteModel {
    fn new(workers: u8, protocol: Protocol, power_loss: PowerLoss) -> WriteModel {
        assert!(
            usize::from(workers) <= MAX_WORKERS,
            "at most {MAX_WORKERS} workers"
        );
        let mut steps = vec![Step::LinkPre, Step::LinkNew];
        if protocol.fsync_before_rename {
            steps.push(Step::Fsync);
        }
        steps.push(Step::Rename);
        if protocol.fsync_after_rename {
            steps.push(Step::Fsync);
        }
        steps.extend([Step::Commit, Step::Cleanup]);
        WriteModel {
            workers,
            versioned: None,
            retries: false,
            protocol,
            power_loss,
            max_power_losses: 2,
            coarse: false,
            steps,
        }
    }

    fn coarse(self) -> WriteModel {
        WriteModel {
            coarse: true,
            ..self
        }
    }

    fn power_losses(self, max_power_losses: u8) -> WriteModel {
        WriteModel {
            max_power_losses,
            ..self
        }
    }

    /// The model of versions: worker 1 publishes two, and every write whose process
    /// crashed may be retried. Worker 1 is the second to claim: an older epoch's late
    /// writes can meet its versions, and a takeover can come between them. With no power
    /// loss (each one lets every writer retry, and the states would be too many for four
    /// workers): what a power loss leaves of the folder is the same for any version, and
    /// the model of one version each checks it.
    fn versions(self) -> WriteModel {
        assert!(self.workers >= 2, "worker 1 publishes the versions");
        WriteModel {
            versioned: Some(1),
            retries: true,
            ..self
        }
        .power_losses(0)
    }

    /// How many versions worker `w` publishes.
    fn versions_of(&self, w: u8) -> u8 {
        if self.versioned == Some(w) {
            MAX_VERSIONS as u8
        } else {
            1
        }
    }

    /// The token of the links of version `seq` of worker `w`.
    fn token(&self, w: u8, seq: u8) -> u8 {
        if self.protocol.own_links {
            ino(w, seq)
        } else {
            SHARED
        }
    }

    /// The identity the product computes for inode `ino` on device `dev`.
    /// With `identity_has_dev`, the device number is folded into the identity, as the
    /// old protocol's `(device, inode, size)` compared it.
    fn file_id(&self, ino: u8, dev: u8) -> FileId {
        let dev = if self.protocol.identity_has_dev {
            u64::from(dev)
        } else {
            0
        };
        FileId {
            ino: (dev << 32) | (u64::from(ino) + 100),
            size: 2,
        }
    }

    fn holds_lock(&self, phase: &Phase) -> bool {
        match phase {
            Phase::Recovering(_) => true,
            Phase::Writing(i) => self.steps[usize::from(*i)..].contains(&Step::Commit),
            _ => false,
        }
    }

    fn lock_free(&self, s: &State) -> bool {
        s.recoverer == Recoverer::Idle && !writes(s).any(|(_, _, phase)| self.holds_lock(phase))
    }

    /// The sink record as the product's rules see it.
    fn record(&self, s: &State) -> Option<SinkRecord> {
        s.sink.map(|row| SinkRecord {
            fence: i64::from(row.fence),
            content: row.content.map(|c| Content {
                epoch: i64::from(c.epoch),
                seq: i64::from(c.seq),
                removed: false,
                tree: false,
                sha256: hash(c.file),
                size: 2,
                written_at: 0,
                file: Some(self.file_id(c.file, c.dev)),
            }),
        })
    }

    /// The epoch a claim gets now, by the product's lease rules.
    fn claimable(&self, s: &State) -> Option<u8> {
        let lease = s.lease.map(|row| Lease {
            owner: format!("worker-{}", row.epoch),
            epoch: i64::from(row.epoch),
            deadline: DEADLINE,
            state: LeaseState::Held,
            result: None,
        });
        let epoch = next_epoch(lease.as_ref(), DEADLINE).ok()?;
        u8::try_from(epoch).ok()
    }

    /// Recovery's plan for the folder as it is: each link set's action from
    /// `sink::recovery`, all decided against the document as found; the links to drop
    /// first, then the one rollback, if any; then the temp files of dead writers.
    fn recovery_plan(&self, s: &State) -> Vec<Op> {
        let names = s.folder.cached;
        let recorded = s
            .sink
            .and_then(|row| row.content)
            .map(|c| Recorded::Placed(self.file_id(c.file, c.dev)));
        let tokens: BTreeSet<u8> = names
            .iter()
            .filter_map(|(name, _)| match name {
                Name::Pre(t) | Name::New(t) => Some(t),
                _ => None,
            })
            .collect();
        let id = |name| names.get(name).map(|ino| self.file_id(ino, s.dev));
        let (mut drops, mut rollbacks) = (Vec::new(), Vec::new());
        for t in tokens {
            let found = Leftovers {
                new: id(Name::New(t)),
                pre: names.get(Name::Pre(t)).is_some(),
                gone: None,
                doc: id(Name::Doc),
            };
            let drop_set = [Op::Unlink(Name::New(t)), Op::Unlink(Name::Pre(t))];
            match sink::recovery(recorded, found) {
                Recovery::Nothing => {}
                // Only a mirror root's recovery keeps an apply (`sink::on_mirror`).
                Recovery::DropLinks | Recovery::KeepApplied => {
                    if self.protocol.fsync_before_drop {
                        drops.push(Op::Fsync);
                    }
                    drops.extend(drop_set);
                }
                Recovery::RestorePre => {
                    rollbacks.extend([Op::Restore(t), Op::Fsync]);
                    rollbacks.extend(drop_set);
                }
                Recovery::RemoveDoc => {
                    rollbacks.extend([Op::Unlink(Name::Doc), Op::Fsync]);
                    rollbacks.extend(drop_set);
                }
                Recovery::RestoreRemoved => unreachable!("the model makes no removals"),
            }
        }
        let mut plan = drops;
        plan.extend(rollbacks);
        for (name, _) in names.iter() {
            if let Name::Tmp(i) = name
                && !process(s, i).alive()
            {
                plan.push(Op::Unlink(name));
            }
        }
        plan
    }

    /// Carries out one recovery step on the folder; a pre-image that is gone cannot be
    /// restored (the product's rename fails, and so does the command). A dead write's
    /// temp file that a retry of its version replaced meanwhile is gone already: the
    /// retry's own temp file has another name in the product, so the unlink leaves it.
    fn run_op(&self, s: &mut State, op: Op) -> Result<(), ()> {
        match op {
            Op::Unlink(Name::Tmp(i)) if process(s, i).alive() => {}
            Op::Unlink(name) => s.folder.remove(name),
            Op::Restore(t) => {
                let ino = s.folder.get(Name::Pre(t)).ok_or(())?;
                s.folder.change(Change::Move(Name::Pre(t), Name::Doc, ino));
            }
            Op::Fsync => s.folder.fsync(),
        }
        Ok(())
    }

    /// Recovery in one step, as a claim runs it (the failpoints see no step inside it).
    fn recover_all(&self, s: &mut State) -> Result<(), ()> {
        let plan = self.recovery_plan(s);
        plan.into_iter().try_for_each(|op| self.run_op(s, op))
    }

    /// The sink's answer to version `seq` of worker `w` now (`sha256`: its content's
    /// hash, or "" for the early check made before staging). Without `seq_order`, a
    /// version refused for a higher seq of its own epoch is written instead.
    fn decision(&self, s: &State, w: u8, seq: u8, sha256: &str) -> WriteDecision {
        let epoch = i64::from(s.workers[usize::from(w)].epoch);
        let decision = sink::decide(
            self.record(s).as_ref(),
            s.lease.map(|row| i64::from(row.epoch)),
            &Offer {
                epoch,
                seq: i64::from(seq),
                body: Body::Bytes(sha256),
            },
            !self.protocol.fenced,
        );
        match decision {
            WriteDecision::Stale { fence, .. } if fence == epoch && !self.protocol.seq_order => {
                WriteDecision::Write
            }
            decision => decision,
        }
    }

    /// Version `seq` of worker `w` stages its content (again, for a retry), unless the
    /// early check (no lock, no recovery) already finds it stale.
    fn stage(&self, s: &mut State, w: u8, seq: u8) {
        let phase = match self.decision(s, w, seq, "") {
            WriteDecision::Stale { .. } => Phase::Refused("stale"),
            WriteDecision::Unissued { .. } => Phase::Refused("unissued"),
            _ => {
                let i = ino(w, seq);
                s.folder.change(Change::Set(Name::Tmp(i), i));
                Phase::Staged
            }
        };
        *phase_mut(s, w, seq) = phase;
    }

    /// Version `seq` of worker `w` takes the lock and plans its recovery. With an empty
    /// plan it decides at once; with `coarse`, it also recovers, decides and links its
    /// pre-image in this one step.
    fn begin(&self, s: &mut State, w: u8, seq: u8) {
        *phase_mut(s, w, seq) = Phase::Recovering(self.recovery_plan(s));
        while let Phase::Recovering(plan) = phase_mut(s, w, seq).clone() {
            if !plan.is_empty() && !self.coarse {
                break;
            }
            self.recovery_step(s, w, seq, plan);
        }
        if self.coarse && *phase_mut(s, w, seq) == Phase::Writing(0) {
            self.write_step(s, w, seq, 0);
        }
    }

    /// Version `seq` of worker `w`, its recovery done, asks the sink. A replay whose
    /// document no longer holds the version's bytes publishes them again, as the product
    /// does (unreachable while recovery leaves the recorded version in place, which
    /// [`NOT_RECORDED`] checks).
    fn decide(&self, s: &mut State, w: u8, seq: u8) {
        let i = ino(w, seq);
        let phase = match self.decision(s, w, seq, &hash(i)) {
            WriteDecision::Write => Phase::Writing(0),
            WriteDecision::Replay if s.folder.get(Name::Doc) != Some(i) => Phase::Writing(0),
            WriteDecision::Replay => Phase::Done("replay"),
            WriteDecision::Stale { .. } => Phase::Refused("stale"),
            WriteDecision::Conflict { .. } => Phase::Refused("conflict"),
            WriteDecision::Unissued { .. } => Phase::Refused("unissued"),
        };
        if phase != Phase::Writing(0) {
            // The staged temp file goes with the refused (or replayed) write.
            s.folder.remove(Name::Tmp(i));
        }
        *phase_mut(s, w, seq) = phase;
    }

    /// Version `seq` of worker `w` does the next step of its recovery, and decides once
    /// there is none.
    fn recovery_step(&self, s: &mut State, w: u8, seq: u8, mut plan: Vec<Op>) {
        if !plan.is_empty() && self.run_op(s, plan.remove(0)).is_err() {
            s.folder.remove(Name::Tmp(ino(w, seq)));
            *phase_mut(s, w, seq) = Phase::Failed;
        } else if plan.is_empty() {
            self.decide(s, w, seq);
        } else {
            *phase_mut(s, w, seq) = Phase::Recovering(plan);
        }
    }

    /// Version `seq` of worker `w` does step `i` of its accepted write.
    fn write_step(&self, s: &mut State, w: u8, seq: u8, i: u8) {
        let t = self.token(w, seq);
        let file = ino(w, seq);
        match self.steps[usize::from(i)] {
            Step::LinkPre => {
                // Names of this token left by a dead writer (the shared names, or a
                // reused inode number) go first.
                s.folder.remove(Name::Pre(t));
                s.folder.remove(Name::New(t));
                if let Some(doc) = s.folder.get(Name::Doc) {
                    s.folder.change(Change::Set(Name::Pre(t), doc));
                }
            }
            Step::LinkNew => s.folder.change(Change::Set(Name::New(t), file)),
            Step::Fsync => s.folder.fsync(),
            Step::Rename => s
                .folder
                .change(Change::Move(Name::Tmp(file), Name::Doc, file)),
            Step::Commit => {
                let record = self.record(s);
                let epoch = s.workers[usize::from(w)].epoch;
                let fence =
                    fence_after_write(record.as_ref(), i64::from(epoch), !self.protocol.fenced);
                let written = Written {
                    epoch,
                    seq,
                    file,
                    dev: s.dev,
                };
                s.sink = Some(SinkRow {
                    fence: u8::try_from(fence).expect("small epochs"),
                    content: Some(written),
                });
                s.peak = s.peak.max(written.version());
            }
            Step::Cleanup => {
                s.folder.remove(Name::New(t));
                s.folder.remove(Name::Pre(t));
            }
        }
        let next = i + 1;
        *phase_mut(s, w, seq) = if usize::from(next) == self.steps.len() {
            Phase::Done("written")
        } else {
            Phase::Writing(next)
        };
    }

    fn power_loss(&self, s: &mut State, choice: u32) {
        for worker in &mut s.workers {
            for phase in &mut worker.writes {
                if phase.alive() {
                    *phase = Phase::Dead;
                }
            }
        }
        s.recoverer = Recoverer::Idle;
        s.power_losses += 1;
        let more = (s.power_losses < self.max_power_losses).then_some(self.power_loss);
        s.folder = Folder::new(s.folder.after_power_loss(choice as usize), more);
        if self.protocol.identity_has_dev {
            // The same filesystem comes back through another device. Only this
            // configuration reads the number; the others keep it, so equal states stay
            // equal.
            s.dev += 1;
        }
    }

    fn worker_actions(&self, s: &State, w: u8, actions: &mut Vec<Action>) {
        let worker = &s.workers[usize::from(w)];
        if !worker.came() {
            // Workers are alike until they claim: they claim in their order, which
            // changes nothing but the numbering and spares the checker the permutations
            // (the versioned worker is the second to claim, see `WriteModel::versions`).
            let turn = w == 0 || s.workers[usize::from(w) - 1].came();
            if turn && self.lock_free(s) && self.claimable(s).is_some() {
                actions.push(Action::Claim(w));
            }
            return;
        }
        if worker.epoch == 0 {
            return;
        }
        let versions = self.versions_of(w);
        for seq in 1..=versions {
            let next_idle = seq == versions || *worker.write(seq + 1) == Phase::Idle;
            match worker.write(seq) {
                // A version starts once the one before was acknowledged, crashed, or is
                // left running before the lock; not after a refusal or an error.
                Phase::Idle => {
                    let before = (seq > 1).then(|| worker.write(seq - 1));
                    let gone_on = |b: &Phase| b.acked() || *b == Phase::Staged || *b == Phase::Dead;
                    if before.is_none_or(gone_on) {
                        actions.push(Action::Stage(w, seq));
                    }
                    break;
                }
                Phase::Dead if next_idle && self.retries => actions.push(Action::Retry(w, seq)),
                Phase::Staged if self.lock_free(s) => actions.push(Action::Begin(w, seq)),
                Phase::Recovering(_) | Phase::Writing(_) => actions.push(Action::Step(w, seq)),
                _ => {}
            }
            if worker.write(seq).alive() {
                actions.push(Action::Crash(w, seq));
            }
        }
    }
}

/// Every version's write: worker, seq, and where it is.
fn writes(s: &State) -> impl Iterator<Item = (u8, u8, &Phase)> + '_ {
    s.workers.iter().zip(0u8..).flat_map(|(worker, w)| {
        worker
            .writes
            .iter()
            .zip(1u8..)
            .map(move |(phase, seq)| (w, seq, phase))
    })
}

/// The write of the version of inode `ino`.
fn process(s: &State, ino: u8) -> &Phase {
    let (w, seq) = version_of(ino);
    s.workers[usize::from(w)].write(seq)
}

fn phase_mut(s: &mut State, w: u8, seq: u8) -> &mut Phase {
    &mut s.workers[usize::from(w)].writes[usize::from(seq) - 1]
}

impl Model for WriteModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            workers: vec![
                Worker {
                    epoch: 0,
                    writes: std::array::from_fn(|_| Phase::Idle),
                };
                usize::from(self.workers)
            ],
            recoverer: Recoverer::Idle,
            lease: None,
            sink: None,
            folder: Folder::new(
                Names::NONE,
                (self.max_power_losses > 0).then_some(self.power_loss),
            ),
            dev: 0,
            power_losses: 0,
            peak: (0, 0),
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for w in 0..self.workers {
            self.worker_actions(s, w, actions);
        }
        match s.recoverer {
            Recoverer::Idle if self.lock_free(s) => actions.push(Action::RecoverBegin),
            Recoverer::Idle => {}
            Recoverer::Recovering(_) => actions.extend([Action::RecoverStep, Action::RecoverCrash]),
            Recoverer::Recovered => actions.extend([Action::RecoverCommit, Action::RecoverCrash]),
        }
        let outcomes = s.folder.outcomes() as u32;
        actions.extend((0..outcomes).map(Action::PowerLoss));
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Claim(w) => {
                let epoch = self.claimable(&s)?;
                // A claim recovers the resource first, in its transaction.
                if self.recover_all(&mut s).is_err() {
                    s.workers[usize::from(w)].writes[0] = Phase::Failed;
                    return Some(s);
                }
                s.lease = Some(LeaseRow { epoch });
                // A claim registers its epoch with the sink (the fence only goes up).
                let row = s.sink.get_or_insert(SinkRow {
                    fence: 0,
                    content: None,
                });
                row.fence = row.fence.max(epoch);
                s.workers[usize::from(w)].epoch = epoch;
            }
            Action::Stage(w, seq) | Action::Retry(w, seq) => self.stage(&mut s, w, seq),
            Action::Begin(w, seq) => self.begin(&mut s, w, seq),
            Action::Step(w, seq) => match phase_mut(&mut s, w, seq).clone() {
                Phase::Recovering(plan) => self.recovery_step(&mut s, w, seq, plan),
                Phase::Writing(i) => self.write_step(&mut s, w, seq, i),
                _ => return None,
            },
            Action::Crash(w, seq) => *phase_mut(&mut s, w, seq) = Phase::Dead,
            Action::RecoverBegin => {
                let plan = if self.coarse {
                    // `recover` has no failpoint between its changes.
                    if self.recover_all(&mut s).is_err() {
                        return Some(s);
                    }
                    Vec::new()
                } else {
                    self.recovery_plan(&s)
                };
                s.recoverer = if plan.is_empty() {
                    Recoverer::Recovered
                } else {
                    Recoverer::Recovering(plan)
                };
            }
            Action::RecoverStep => {
                let Recoverer::Recovering(mut plan) = s.recoverer.clone() else {
                    return None;
                };
                s.recoverer = if self.run_op(&mut s, plan.remove(0)).is_err() {
                    Recoverer::Idle
                } else if plan.is_empty() {
                    Recoverer::Recovered
                } else {
                    Recoverer::Recovering(plan)
                };
            }
            Action::RecoverCommit | Action::RecoverCrash => s.recoverer = Recoverer::Idle,
            Action::PowerLoss(choice) => self.power_loss(&mut s, choice),
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(LOWER_EPOCH, no_lower_epoch),
            Property::always(ACKED_LOST, no_acked_write_lost),
            Property::always(WENT_BACK, never_goes_back),
            Property::always(NOT_RECORDED, recovered_is_recorded),
            Property::always(CONFLICT, no_conflict),
            Property::sometimes(INTERRUPTED_RENAME, interrupted_rename),
            Property::sometimes(ROLLED_BACK, rolls_back),
            Property::sometimes(STALE, stale_refused),
            Property::sometimes(ALL_ACKED, all_acked),
        ];
        // What only the model of versions can reach: each is checked to happen there.
        if self.versioned.is_some() {
            properties.push(Property::sometimes(SEQ_STALE, older_seq_refused));
        }
        if self.retries {
            properties.push(Property::sometimes(REPLAYED, retry_replayed));
        }
        properties
    }
}

const LOWER_EPOCH: &str = "a lower epoch never becomes current after a higher one was acknowledged";
const ACKED_LOST: &str =
    "every acknowledged (epoch, seq) is current or superseded by a higher (epoch, seq)";
const WENT_BACK: &str = "the current version never goes back in (epoch, seq) order";
const NOT_RECORDED: &str = "after recovery the document is the recorded version";
const CONFLICT: &str = "a retry of a version is never refused as a conflict";
const INTERRUPTED_RENAME: &str = "a write dies between its rename and its commit";
const ROLLED_BACK: &str = "recovery rolls back an uncommitted rename";
const STALE: &str = "a late write is refused as stale";
const SEQ_STALE: &str =
    "a write of an older seq is refused as stale after a newer seq of its epoch";
const REPLAYED: &str = "a retry of a committed version is acknowledged as a replay";
const ALL_ACKED: &str = "every version of every worker is acknowledged in turn";

/// A version's place in the order: `(epoch, seq)`; `(0, 0)` is below every version.
type Version = (u8, u8);

impl WriteModel {
    /// The version of inode `ino`.
    fn version(&self, s: &State, ino: u8) -> Version {
        let (w, seq) = version_of(ino);
        (s.workers[usize::from(w)].epoch, seq)
    }

    /// The version the document holds, if there is a document.
    fn doc_version(&self, s: &State) -> Option<Version> {
        Some(self.version(s, s.folder.get(Name::Doc)?))
    }

    /// The highest acknowledged version.
    fn highest_acked(&self, s: &State) -> Option<Version> {
        writes(s)
            .filter(|(_, _, phase)| phase.acked())
            .map(|(w, seq, _)| self.version(s, ino(w, seq)))
            .max()
    }

    /// A process holds the lock, its recovery finished, and has changed nothing since.
    fn recovered(&self, s: &State) -> bool {
        s.recoverer == Recoverer::Recovered
            || writes(s).any(|(_, _, phase)| *phase == Phase::Writing(0))
    }
}

fn no_lower_epoch(m: &WriteModel, s: &State) -> bool {
    let acked = m.highest_acked(s).map_or(0, |(epoch, _)| epoch);
    m.doc_version(s).is_none_or(|(epoch, _)| epoch >= acked)
}

/// The document is the highest acknowledged version (each version is its own inode), or
/// a higher one.
fn no_acked_write_lost(m: &WriteModel, s: &State) -> bool {
    m.highest_acked(s)
        .is_none_or(|acked| m.doc_version(s).is_some_and(|doc| doc >= acked))
}

/// The record never names a version below one it named before, and the document never
/// holds one (nor goes missing) once a version was recorded. The document may be ahead
/// of the record: a rename comes before its COMMIT.
fn never_goes_back(m: &WriteModel, s: &State) -> bool {
    let recorded = s
        .sink
        .and_then(|row| row.content)
        .map_or((0, 0), Written::version);
    let doc = m.doc_version(s).unwrap_or((0, 0));
    recorded == s.peak && doc >= s.peak
}

fn recovered_is_recorded(m: &WriteModel, s: &State) -> bool {
    !m.recovered(s) || s.folder.get(Name::Doc) == s.sink.and_then(|r| r.content).map(|c| c.file)
}

/// Each version has one content, so its retries never conflict.
fn no_conflict(_: &WriteModel, s: &State) -> bool {
    writes(s).all(|(_, _, phase)| *phase != Phase::Refused("conflict"))
}

/// A crashed writer's file is the document, and the record does not name it.
fn interrupted_rename(_: &WriteModel, s: &State) -> bool {
    let doc = s.folder.get(Name::Doc);
    let recorded = s.sink.and_then(|r| r.content).map(|c| c.file);
    writes(s).any(|(w, seq, phase)| {
        let file = Some(ino(w, seq));
        *phase == Phase::Dead && doc == file && recorded != file
    })
}

/// A recovery is about to put a pre-image back, or remove an uncommitted first document.
fn rolls_back(_: &WriteModel, s: &State) -> bool {
    let undoes = |plan: &[Op]| {
        plan.iter()
            .any(|op| matches!(op, Op::Restore(_) | Op::Unlink(Name::Doc)))
    };
    matches!(&s.recoverer, Recoverer::Recovering(plan) if undoes(plan))
        || writes(s).any(|(_, _, phase)| matches!(phase, Phase::Recovering(plan) if undoes(plan)))
}

fn stale_refused(_: &WriteModel, s: &State) -> bool {
    writes(s).any(|(_, _, phase)| *phase == Phase::Refused("stale"))
}

/// A version was refused as stale, and the record holds a higher seq of its epoch, with
/// no newer epoch claimed (the fence only goes up: it was refused for its seq).
fn older_seq_refused(_: &WriteModel, s: &State) -> bool {
    let Some((fence, Some(recorded))) = s.sink.map(|row| (row.fence, row.content)) else {
        return false;
    };
    writes(s).any(|(w, seq, phase)| {
        *phase == Phase::Refused("stale")
            && s.workers[usize::from(w)].epoch == recorded.epoch
            && fence == recorded.epoch
            && seq < recorded.seq
    })
}

fn retry_replayed(_: &WriteModel, s: &State) -> bool {
    writes(s).any(|(_, _, phase)| *phase == Phase::Done("replay"))
}

fn all_acked(m: &WriteModel, s: &State) -> bool {
    s.workers
        .iter()
        .zip(0..)
        .all(|(worker, w)| (1..=m.versions_of(w)).all(|seq| worker.write(seq).acked()))
}

/// Explores every state, checks every property, and prints what it explored.
fn assert_holds(model: WriteModel) {
    let what = format!("{model}");
    let started = Instant::now();
    let checker = model.checker().spawn_bfs().join();
    println!(
        "model of {what}: {} states explored ({} distinct), {} steps deep, in {:.2?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker.assert_properties();
}

/// Searches for a counterexample to `property`, prints the shortest, and returns it.
fn counterexample(model: WriteModel, property: &'static str) -> Path<State, Action> {
    let what = format!("{model}");
    let checker = model
        .checker()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .spawn_bfs()
        .join();
    let path = checker.discovery(property).unwrap_or_else(|| {
        panic!(
            "no counterexample to {property:?} in {} states of {what}",
            checker.unique_state_count()
        )
    });
    println!("model of {what}: counterexample to {property:?}:");
    for action in path.clone().into_actions() {
        println!("  {action:?}");
    }
    println!("  ending in {:?}", path.last_state());
    path
}

impl std::fmt::Display for WriteModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let loss = match self.power_loss {
            PowerLoss::Prefix => "in-order",
            PowerLoss::AnySubset => "any-subset",
        };
        write!(f, "{} workers, ", self.workers)?;
        if let Some(w) = self.versioned {
            write!(f, "worker {w} publishing seqs 1 and 2, ")?;
        }
        if self.retries {
            write!(f, "crashed writes retried, ")?;
        }
        write!(
            f,
            "up to {} {loss} power losses, {}",
            self.max_power_losses, self.protocol
        )
    }
}

impl std::fmt::Display for Protocol {
    /// The protocol as its differences from the current one.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let now = Protocol::CURRENT;
        let changes: Vec<&str> = [
            (self.fenced != now.fenced, "unfenced"),
            (
                self.fsync_before_rename != now.fsync_before_rename,
                "fsync before the rename",
            ),
            (
                self.fsync_after_rename != now.fsync_after_rename,
                "no fsync after the rename",
            ),
            (
                self.fsync_before_drop != now.fsync_before_drop,
                "recovery fsyncs before dropping links",
            ),
            (self.own_links != now.own_links, "shared link names"),
            (
                self.identity_has_dev != now.identity_has_dev,
                "identity with the device number",
            ),
            (
                self.seq_order != now.seq_order,
                "seqs compared for equality only",
            ),
        ]
        .into_iter()
        .filter_map(|(differs, what)| differs.then_some(what))
        .collect();
        if changes.is_empty() {
            write!(f, "the current protocol")
        } else {
            write!(f, "the current protocol with {}", changes.join(", "))
        }
    }
}

#[test]
fn model_three_workers_keep_every_acknowledged_write() {
    assert_holds(WriteModel::new(3, Protocol::CURRENT, PowerLoss::Prefix));
    assert_holds(WriteModel::new(3, Protocol::CURRENT, PowerLoss::Prefix).versions());
}

#[test]
fn model_four_workers_keep_every_acknowledged_write() {
    assert_holds(WriteModel::new(4, Protocol::CURRENT, PowerLoss::Prefix));
    assert_holds(WriteModel::new(4, Protocol::CURRENT, PowerLoss::Prefix).versions());
}

#[test]
fn model_finds_an_older_epoch_over_a_newer_one_when_writes_are_unfenced() {
    let protocol = Protocol {
        fenced: false,
        ..Protocol::CURRENT
    };
    let model = WriteModel::new(3, protocol, PowerLoss::Prefix).power_losses(0);
    counterexample(model, LOWER_EPOCH);
}

#[test]
fn model_finds_an_older_seq_over_a_newer_one_when_seqs_are_compared_for_equality() {
    let protocol = Protocol {
        seq_order: false,
        ..Protocol::CURRENT
    };
    let model = WriteModel::new(3, protocol, PowerLoss::Prefix).versions();
    let path = counterexample(model.clone(), WENT_BACK);
    // The older seq won over the newer one of the same epoch, not over another epoch.
    let last = path.last_state();
    let (epoch, _) = last.peak;
    assert_eq!(
        model.doc_version(last).map(|(e, _)| e),
        Some(epoch),
        "{last:?}"
    );
}

#[test]
fn model_finds_a_lost_write_when_the_folder_fsync_is_skipped() {
    let protocol = Protocol {
        fsync_after_rename: false,
        ..Protocol::CURRENT
    };
    counterexample(WriteModel::new(3, protocol, PowerLoss::Prefix), ACKED_LOST);
}

#[test]
fn model_finds_a_lost_write_with_shared_link_names_removed_without_the_lock() {
    let protocol = Protocol {
        own_links: false,
        ..Protocol::CURRENT
    };
    let model = WriteModel::new(3, protocol, PowerLoss::Prefix).power_losses(0);
    counterexample(model, ACKED_LOST);
}

#[test]
fn model_finds_a_committed_write_rolled_back_when_identity_has_the_device() {
    let protocol = Protocol {
        identity_has_dev: true,
        ..Protocol::CURRENT
    };
    counterexample(
        WriteModel::new(3, protocol, PowerLoss::Prefix),
        NOT_RECORDED,
    );
}

#[test]
fn model_any_subset_power_loss_needs_two_more_folder_fsyncs() {
    // Without either fsync, a power loss that keeps a later change and drops an earlier
    // one leaves a document its record does not name.
    for protocol in [
        Protocol::CURRENT,
        Protocol {
            fsync_before_rename: true,
            ..Protocol::CURRENT
        },
        Protocol {
            fsync_before_drop: true,
            ..Protocol::CURRENT
        },
    ] {
        counterexample(
            WriteModel::new(3, protocol, PowerLoss::AnySubset),
            NOT_RECORDED,
        );
    }
    let protocol = Protocol {
        fsync_before_rename: true,
        fsync_before_drop: true,
        ..Protocol::CURRENT
    };
    assert_holds(WriteModel::new(3, protocol, PowerLoss::AnySubset));
}

mod replay;
