//! A model of publishing a folder as one version (`fencepost write RES --tree SRC`),
//! explored exhaustively with `stateright` as `model.rs` explores a document's write:
//! every interleaving of a few workers that claim (taking over expired leases), publish a
//! tree in the protocol's steps, pause between any two of them, crash at any of them, lose
//! power, of a `recover` that can run at any time, and of a reader that walks the tree.
//!
//! A tree write's steps, each a step of the model: stage (`.<name>.fencepost-tmp-R/`
//! created beside RES, the tree copied in, every file and folder fsynced bottom-up, the
//! staged folder flocked for the writer's whole life; its inode T names the write);
//! `BEGIN IMMEDIATE`; recovery under the lock, one change at a time; the decision
//! (`sink::decide`, each worker's tree its own hash); the marker symlink
//! `.<name>.fencepost-tree-T`, whose target names R; the swap (`renameat2(tmp-R, RES,
//! RENAME_EXCHANGE)` when RES exists, so that `tmp-R` then holds the old tree, else a
//! plain rename); fsync the parent folder; COMMIT (the tree's inode and hash recorded);
//! then without the lock: rename `tmp-R` (the old tree) to `.<name>.fencepost-old-T-D`,
//! kept until its deadline D for the readers that opened RES before the swap, and unlink
//! the marker.
//!
//! Recovery, for each marker `tree-T` (see [`tree_recovery`]): a committed write (the
//! record names T) has its old tree retired and its marker dropped; a write whose swap
//! happened without its commit is swapped back (or, for a first publish, RES taken
//! away), the parent fsynced, the new tree taken away and the marker dropped; a write
//! that never swapped has its staged tree taken away with its marker. Without a marker, a
//! `tmp-*` folder whose flock is free (its writer is gone) is swept. `old-*` folders past
//! their deadline are removed; the model has no clock, and takes every `old-*` folder that
//! no reader walks to be past its deadline (the grace period is assumed longer than a
//! walk).
//!
//! What the checker found, and [`Protocol::CURRENT`] (what `write --tree` does) therefore
//! has: a tree that recovery took away and removed at once would cut short the walk of a
//! reader that resolved RES while an uncommitted tree was there (its writer died between
//! the swap and the COMMIT), so recovery retires the tree it takes away to `old-T-D`, as a
//! write does with the tree it swaps out. A filesystem that may keep any subset of the
//! operations since the last fsync needs two more parent fsyncs: after the marker, before
//! the swap, and in recovery before it drops the marker of a write that never swapped (or
//! was swapped back); the current protocol makes both. And the swap keeps a walk whole
//! only for a reader that reads through the handle it opened, not one that looks RES up
//! again for each file.
//!
//! The folder is the parent's names (RES, a `tmp-*` per worker, a marker and an `old-*`
//! per write) to inodes. A tree is one unit: its files and subfolders are durable before
//! the swap, so only the parent's names are at stake in a power loss. Each worker stages
//! one tree, whose inode is the worker's number, and so is the marker's T. A tree has two
//! files: the folder protocol never changes a tree's files, but the broken protocol that
//! renames them one by one into RES does (its renames in RES are taken as durable at
//! once: the counterexamples it must give need no power loss).
//!
//! The reader resolves RES once (a handle on the folder it names), then reads the first
//! file and the second through that handle, as a walk does (or, in one configuration,
//! looks RES up again for each file); once per run, at any time.
//! A tree no name holds any more is gone (its files unlinked): a read from it finds
//! nothing.
//!
//! Not modelled: the bytes (each worker's tree is its own content), `--seq`, hand edits,
//! errors other than crashes, `complete`/`release` (a takeover after expiry is the harder
//! case), a reader slower than the grace period, and inode numbers reused (the model's
//! inodes are unique; a marker is dropped under the lock before its number could name
//! another write's). A `claim` runs recovery first, in one step. The state file's COMMIT is
//! durable when it returns.

use std::collections::BTreeSet;
use std::time::Instant;

use fencepost::lease::{Lease, LeaseState, next_epoch};
use fencepost::sink::{
    self, Body, Content, FileId, Offer, SinkRecord, WriteDecision, fence_after_write,
};
use stateright::{Checker, HasDiscoveries, Model, Path, Property};

/// The protocol's choices. [`Protocol::CURRENT`] is the design of `write --tree` with the
/// one change this model asks for: recovery retires a tree it takes away instead of
/// removing it at once (`retire_rolled_back`).
#[derive(Debug, Clone, Copy)]
struct Protocol {
    /// The sink checks the epoch (`false`: `write --unfenced`).
    fenced: bool,
    /// Publish by swapping the staged folder with RES. `false`: rename the staged files
    /// one by one into RES (each rename atomic on its own).
    swap_folder: bool,
    /// fsync the parent after the marker, before the swap.
    fsync_before_swap: bool,
    /// fsync the parent after the swap, before COMMIT.
    fsync_after_swap: bool,
    /// Recovery fsyncs the parent before it drops the marker of a write that never swapped
    /// (an earlier recovery's undoing of the swap may not be durable yet).
    fsync_before_unmark: bool,
    /// Recovery renames a tree it takes away from RES (a rolled-back one) to an `old-*`
    /// name with a deadline, as a write does with the tree it swaps out. `false`: it
    /// removes it at once.
    retire_rolled_back: bool,
}

impl Protocol {
    const CURRENT: Protocol = Protocol {
        fenced: true,
        swap_folder: true,
        fsync_before_swap: true,
        fsync_after_swap: true,
        fsync_before_unmark: true,
        retire_rolled_back: true,
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
struct TreeModel {
    workers: u8,
    protocol: Protocol,
    power_loss: PowerLoss,
    /// How many power losses one run may have.
    max_power_losses: u8,
    /// Whether a reader walks the tree.
    reader: bool,
    /// The reader resolves RES anew for each file (`false`: once, then reads through the
    /// folder's handle).
    reader_by_path: bool,
    /// The steps of an accepted write, from `protocol`.
    steps: Vec<Step>,
}

/// A name in RES's parent folder. The `u8` of a `tmp-*` folder is its writer; that of a
/// marker or an `old-*` folder is its write's T.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Name {
    Res,
    Tmp(u8),
    Marker(u8),
    Old(u8),
}

/// One change to the folder's names, as the page cache has it: one name or two (a
/// rename, an exchange) set at once, to a tree's inode (the worker that staged it), a
/// marker's target (its T) or [`EMPTY`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Change {
    One(Name, u8),
    Two(Name, u8, Name, u8),
}

/// The names of the folder, one slot per name (`EMPTY`: absent): small and `Copy`, since
/// the checker clones and hashes millions of states.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Names([u8; SLOTS]);

/// RES, and a `tmp-*`, a marker and an `old-*` per worker.
const SLOTS: usize = 1 + 3 * MAX_WORKERS;
const MAX_WORKERS: usize = 4;
const EMPTY: u8 = u8::MAX;

impl std::fmt::Debug for Names {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Names {
    const NONE: Names = Names([EMPTY; SLOTS]);

    fn slot(name: Name) -> usize {
        match name {
            Name::Res => 0,
            Name::Tmp(w) => 1 + usize::from(w),
            Name::Marker(t) => 1 + MAX_WORKERS + usize::from(t),
            Name::Old(t) => 1 + 2 * MAX_WORKERS + usize::from(t),
        }
    }

    fn name(slot: usize) -> Name {
        let w = |first: usize| u8::try_from(slot - first).expect("a worker");
        match slot {
            0 => Name::Res,
            s if s <= MAX_WORKERS => Name::Tmp(w(1)),
            s if s <= 2 * MAX_WORKERS => Name::Marker(w(1 + MAX_WORKERS)),
            _ => Name::Old(w(1 + 2 * MAX_WORKERS)),
        }
    }

    fn get(&self, name: Name) -> Option<u8> {
        Some(self.0[Names::slot(name)]).filter(|&ino| ino != EMPTY)
    }

    /// Every name present, with its inode (a marker: its T).
    fn iter(&self) -> impl Iterator<Item = (Name, u8)> + '_ {
        (0..SLOTS)
            .filter(|&i| self.0[i] != EMPTY)
            .map(|i| (Names::name(i), self.0[i]))
    }

    /// Whether a name holds tree `ino` (a marker holds no tree).
    fn holds_tree(&self, ino: u8) -> bool {
        self.iter()
            .any(|(name, i)| i == ino && !matches!(name, Name::Marker(_)))
    }

    fn apply(&mut self, change: Change) {
        match change {
            Change::One(name, ino) => self.0[Names::slot(name)] = ino,
            Change::Two(a, ino_a, b, ino_b) => {
                self.0[Names::slot(a)] = ino_a;
                self.0[Names::slot(b)] = ino_b;
            }
        }
    }

    /// The names as they matter after a power loss: without the staged trees that were
    /// never swapped (a `tmp-*` folder holding its own writer's tree), which recovery
    /// would only remove, since every writer is gone.
    fn lasting(mut self) -> Names {
        for w in 0..MAX_WORKERS {
            let slot = Names::slot(Name::Tmp(w as u8));
            if usize::from(self.0[slot]) == w {
                self.0[slot] = EMPTY;
            }
        }
        self
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
/// loss may leave of them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Folder {
    cached: Names,
    durable: Durable,
}

impl Folder {
    fn new(names: Names, power_loss: Option<PowerLoss>) -> Folder {
        let durable = match power_loss {
            Some(PowerLoss::Prefix) => Durable::Prefixes(vec![names.lasting()]),
            Some(PowerLoss::AnySubset) => Durable::Log(names, Vec::new()),
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
            Durable::Log(_, log) => log.push(change),
            Durable::Untracked => {}
        }
    }

    fn set(&mut self, name: Name, ino: u8) {
        self.change(Change::One(name, ino));
    }

    /// Removes a name if it is there (a tree removed with all it holds, or a marker).
    fn remove(&mut self, name: Name) {
        if self.get(name).is_some() {
            self.change(Change::One(name, EMPTY));
        }
    }

    /// `rename(from, to)` of a folder; fails if `from` is gone or `to` is there (a
    /// folder that is not empty).
    fn rename(&mut self, from: Name, to: Name) -> Result<(), ()> {
        let ino = self.get(from).ok_or(())?;
        if self.get(to).is_some() {
            return Err(());
        }
        self.change(Change::Two(from, EMPTY, to, ino));
        Ok(())
    }

    /// `renameat2(a, b, RENAME_EXCHANGE)`; fails unless both are there.
    fn exchange(&mut self, a: Name, b: Name) -> Result<(), ()> {
        let (ino_a, ino_b) = (self.get(a).ok_or(())?, self.get(b).ok_or(())?);
        self.change(Change::Two(a, ino_b, b, ino_a));
        Ok(())
    }

    fn fsync(&mut self) {
        let now = self.cached;
        match &mut self.durable {
            Durable::Prefixes(states) => *states = vec![now.lasting()],
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
                names.lasting()
            }
            Durable::Untracked => unreachable!("no power loss is left to come"),
        }
    }
}

/// What recovery does for the write of a marker `tree-T`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TreeRecovery {
    /// The write committed: retire `tmp-R` (the tree it swapped out) if it is still
    /// there, drop the marker.
    Retire,
    /// The swap happened, the commit did not: exchange back, fsync, take `tmp-R` (now the
    /// new tree) away, drop the marker.
    SwapBack,
    /// The same for a first publish (RES did not exist before): take RES away, fsync,
    /// drop the marker.
    RemoveRes,
    /// The swap never happened (or was undone): take `tmp-R` (the staged tree) away,
    /// drop the marker.
    RemoveStaged,
}

/// The product's recovery rule (`sink::tree_recovery`) for marker `tree-T`: `recorded`
/// is the tree inode the record names, `res` RES's inode, `tmp` whether `tmp-R` (the
/// marker's target) exists.
fn tree_recovery(recorded: Option<u8>, t: u8, res: Option<u8>, tmp: bool) -> TreeRecovery {
    let recorded = recorded.map(|ino| {
        sink::Recorded::Placed(sink::FileId {
            ino: u64::from(ino),
            size: 0,
        })
    });
    let found = sink::TreeLeftovers {
        staged: u64::from(t),
        current: res.map(u64::from),
        other: tmp,
    };
    match sink::tree_recovery(recorded, found) {
        sink::TreeRecovery::Retire => TreeRecovery::Retire,
        sink::TreeRecovery::SwapBack => TreeRecovery::SwapBack,
        sink::TreeRecovery::RemoveNew => TreeRecovery::RemoveRes,
        sink::TreeRecovery::DropStaged => TreeRecovery::RemoveStaged,
    }
}

/// One step of a recovery, planned under the lock and carried out one at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    /// Remove a name: a tree with all it holds, or a marker.
    Unlink(Name),
    /// Rename a tree to `old-T-D` (nothing if it is gone already: the writer, after its
    /// COMMIT, may have done it).
    Retire(Name, u8),
    /// Exchange `tmp-R` of this marker back with RES.
    SwapBack(u8),
    Fsync,
}

/// The steps of an accepted write after the decision, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Marker,
    Fsync,
    /// Swap the staged folder with RES (rename it, if there is no RES).
    Swap,
    /// The broken protocol: rename the staged tree's file 0 or 1 into RES (the whole
    /// folder, if there is no RES).
    File(u8),
    Commit,
    /// Rename `tmp-R` (the swapped-out tree) to `old-T-D`, without the lock.
    Retire,
    /// Unlink the marker, without the lock.
    Unmark,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    Claimed,
    /// The tree is staged, fsynced and flocked.
    Staged,
    /// Holds the lock; recovery's steps still to do, then the decision.
    Recovering(Vec<Op>),
    /// Accepted; the index of the next [`Step`].
    Writing(u8),
    /// Exited 0 with `written`: acknowledged.
    Done,
    Refused(&'static str),
    /// Exited with an error (a step that could not be done).
    Failed,
    /// Crashed.
    Dead,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Worker {
    /// The epoch `claim` gave it (0: none yet).
    epoch: u8,
    phase: Phase,
}

impl Worker {
    /// A running process (its staged folder's flock is held).
    fn alive(&self) -> bool {
        matches!(
            self.phase,
            Phase::Claimed | Phase::Staged | Phase::Recovering(_) | Phase::Writing(_)
        )
    }
}

/// The `recover` command, which an operator may run at any time, again and again. `quiet`:
/// no writer was running when it planned.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Recoverer {
    Idle,
    Recovering(Vec<Op>, bool),
    /// Done, lock still held: the moment "after recovery".
    Recovered(bool),
}

/// The reader's one walk: RES resolved to a tree, then file 0 read (`EMPTY`: found
/// nothing), then file 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Reader {
    Idle,
    Opened(u8),
    Read(u8, u8),
    /// Read one tree's two files.
    Whole,
    /// Read two trees' files.
    Torn,
    /// Found a file missing: the tree was taken away during the walk.
    Cut,
    /// Died with the power.
    Gone,
}

impl Reader {
    /// The tree the reader walks, if it is walking.
    fn walking(self) -> Option<u8> {
        match self {
            Reader::Opened(tree) | Reader::Read(tree, _) => Some(tree),
            _ => None,
        }
    }
}

/// The lease: only its epoch. Each claim is made at the current lease's deadline, so the
/// model needs no clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct LeaseRow {
    epoch: u8,
}

/// The write a sink record names: its epoch and its tree (the writer's inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Written {
    epoch: u8,
    writer: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SinkRow {
    fence: u8,
    content: Option<Written>,
}

/// A tree's two files: which worker's version each one is, packed in a nibble each.
type Files = u8;

/// The files of worker `w`'s tree.
fn whole(w: u8) -> Files {
    (w << 4) | w
}

/// File `i` of `files`.
fn file(files: Files, i: u8) -> u8 {
    if i == 0 { files >> 4 } else { files & 0xf }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    workers: Vec<Worker>,
    recoverer: Recoverer,
    reader: Reader,
    lease: Option<LeaseRow>,
    sink: Option<SinkRow>,
    folder: Folder,
    /// Each tree's files, by inode.
    files: [Files; MAX_WORKERS],
    power_losses: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Claim(u8),
    Stage(u8),
    Begin(u8),
    Step(u8),
    Crash(u8),
    RecoverBegin,
    RecoverStep,
    RecoverCommit,
    RecoverCrash,
    /// The reader resolves RES.
    Open,
    /// The reader reads its next file.
    Read,
    /// Which changes since the last fsync survive: a prefix, or a bit set.
    PowerLoss(u32),
}

/// Every lease's deadline, in ticks; claims come at that time.
const DEADLINE: i64 = 10;

/// The hash of worker `w`'s tree, as it stands in the record.
fn hash(w: u8) -> String {
    format!("{w:064x}")
}

impl TreeModel {
    fn new(workers: u8, protocol: Protocol, power_loss: PowerLoss) -> TreeModel {
        assert!(
            usize::from(workers) <= MAX_WORKERS,
            "at most {MAX_WORKERS} workers"
        );
        let mut steps = vec![Step::Marker];
        if protocol.fsync_before_swap {
            steps.push(Step::Fsync);
        }
        if protocol.swap_folder {
            steps.push(Step::Swap);
        } else {
            steps.extend([Step::File(0), Step::File(1)]);
        }
        if protocol.fsync_after_swap {
            steps.push(Step::Fsync);
        }
        steps.extend([Step::Commit, Step::Retire, Step::Unmark]);
        TreeModel {
            workers,
            protocol,
            power_loss,
            max_power_losses: 2,
            reader: true,
            reader_by_path: false,
            steps,
        }
    }

    fn power_losses(self, max_power_losses: u8) -> TreeModel {
        TreeModel {
            max_power_losses,
            ..self
        }
    }

    fn without_reader(self) -> TreeModel {
        TreeModel {
            reader: false,
            ..self
        }
    }

    fn reader_by_path(self) -> TreeModel {
        TreeModel {
            reader_by_path: true,
            ..self
        }
    }

    fn holds_lock(&self, worker: &Worker) -> bool {
        match worker.phase {
            Phase::Recovering(_) => true,
            Phase::Writing(i) => self.steps[usize::from(i)..].contains(&Step::Commit),
            _ => false,
        }
    }

    fn lock_free(&self, s: &State) -> bool {
        s.recoverer == Recoverer::Idle && !s.workers.iter().any(|w| self.holds_lock(w))
    }

    /// The sink record as the product's rules see it.
    fn record(s: &State) -> Option<SinkRecord> {
        s.sink.map(|row| SinkRecord {
            fence: i64::from(row.fence),
            content: row.content.map(|c| Content {
                epoch: i64::from(c.epoch),
                seq: 0,
                removed: false,
                tree: true,
                sha256: hash(c.writer),
                size: 2,
                written_at: 0,
                file: Some(FileId {
                    ino: u64::from(c.writer) + 100,
                    size: 2,
                }),
            }),
        })
    }

    /// The tree the record names.
    fn recorded(s: &State) -> Option<u8> {
        s.sink.and_then(|row| row.content).map(|c| c.writer)
    }

    /// The epoch a claim gets now, by the product's lease rules.
    fn claimable(s: &State) -> Option<u8> {
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

    /// How recovery takes away a tree that was, or may have been, at RES.
    fn take_away(&self, name: Name, t: u8) -> Op {
        if self.protocol.retire_rolled_back {
            Op::Retire(name, t)
        } else {
            Op::Unlink(name)
        }
    }

    /// Recovery's plan for the folder as it is: each marker's action from
    /// [`tree_recovery`], all decided against the folder as found; the committed and
    /// never-swapped writes first, then the one rollback, if any; then the `tmp-*` folders
    /// of dead writers that no marker names, and the `old-*` folders no reader walks.
    fn recovery_plan(&self, s: &State) -> Vec<Op> {
        let names = s.folder.cached;
        let (mut plan, mut rollbacks) = (Vec::new(), Vec::new());
        for (name, _) in names.iter() {
            let Name::Marker(t) = name else { continue };
            let tmp = names.get(Name::Tmp(t)).is_some();
            let unmark = Op::Unlink(name);
            match tree_recovery(Self::recorded(s), t, names.get(Name::Res), tmp) {
                TreeRecovery::Retire if tmp => plan.extend([Op::Retire(Name::Tmp(t), t), unmark]),
                TreeRecovery::Retire => plan.push(unmark),
                TreeRecovery::RemoveStaged => {
                    if self.protocol.fsync_before_unmark {
                        plan.push(Op::Fsync);
                    }
                    plan.extend([self.take_away(Name::Tmp(t), t), unmark]);
                }
                TreeRecovery::SwapBack => rollbacks.extend([
                    Op::SwapBack(t),
                    Op::Fsync,
                    self.take_away(Name::Tmp(t), t),
                    unmark,
                ]),
                TreeRecovery::RemoveRes => {
                    rollbacks.extend([self.take_away(Name::Res, t), Op::Fsync, unmark]);
                }
            }
        }
        plan.extend(rollbacks);
        for (name, ino) in names.iter() {
            let swept = match name {
                // The flock is on the folder: held by the writer that staged it.
                Name::Tmp(w) => {
                    names.get(Name::Marker(w)).is_none() && !s.workers[usize::from(ino)].alive()
                }
                Name::Old(_) => s.reader.walking() != Some(ino),
                Name::Res | Name::Marker(_) => false,
            };
            if swept {
                plan.push(Op::Unlink(name));
            }
        }
        plan
    }

    /// Recovery in one step, as a claim runs it.
    fn recover_all(&self, s: &mut State) -> Result<(), ()> {
        let plan = self.recovery_plan(s);
        plan.into_iter()
            .try_for_each(|op| run_op(&mut s.folder, op))
    }

    /// The sink's answer to worker `w` now (`sha256`: its tree's hash, or "" for the
    /// early check made before staging).
    fn decision(&self, s: &State, w: u8, sha256: &str) -> WriteDecision {
        sink::decide(
            Self::record(s).as_ref(),
            s.lease.map(|row| i64::from(row.epoch)),
            &Offer {
                epoch: i64::from(s.workers[usize::from(w)].epoch),
                seq: 0,
                body: Body::Bytes(sha256),
            },
            !self.protocol.fenced,
        )
    }

    /// Worker `w` stages its tree, unless the early check (no lock, no recovery) already
    /// finds its epoch stale.
    fn stage(&self, s: &mut State, w: u8) {
        let phase = match self.decision(s, w, "") {
            WriteDecision::Stale { .. } => Phase::Refused("stale"),
            WriteDecision::Unissued { .. } => Phase::Refused("unissued"),
            _ => {
                s.folder.set(Name::Tmp(w), w);
                Phase::Staged
            }
        };
        s.workers[usize::from(w)].phase = phase;
    }

    /// Worker `w` takes the lock and plans its recovery; with an empty plan it decides
    /// at once.
    fn begin(&self, s: &mut State, w: u8) {
        let plan = self.recovery_plan(s);
        if plan.is_empty() {
            self.decide(s, w);
        } else {
            s.workers[usize::from(w)].phase = Phase::Recovering(plan);
        }
    }

    /// Worker `w`, its recovery done, asks the sink.
    fn decide(&self, s: &mut State, w: u8) {
        let phase = match self.decision(s, w, &hash(w)) {
            WriteDecision::Write => Phase::Writing(0),
            WriteDecision::Replay => Phase::Done,
            WriteDecision::Stale { .. } => Phase::Refused("stale"),
            WriteDecision::Conflict { .. } => Phase::Refused("conflict"),
            WriteDecision::Unissued { .. } => Phase::Refused("unissued"),
        };
        if phase != Phase::Writing(0) {
            // The staged tree goes with the refused (or replayed) write.
            s.folder.remove(Name::Tmp(w));
        }
        s.workers[usize::from(w)].phase = phase;
    }

    /// Worker `w` does the next step of its recovery, and decides once there is none.
    fn recovery_step(&self, s: &mut State, w: u8, mut plan: Vec<Op>) {
        if run_op(&mut s.folder, plan.remove(0)).is_err() {
            s.folder.remove(Name::Tmp(w));
            s.workers[usize::from(w)].phase = Phase::Failed;
        } else if plan.is_empty() {
            self.decide(s, w);
        } else {
            s.workers[usize::from(w)].phase = Phase::Recovering(plan);
        }
    }

    /// Worker `w` does step `i` of its accepted write.
    fn write_step(&self, s: &mut State, w: u8, i: u8) {
        let done = match self.steps[usize::from(i)] {
            Step::Marker => {
                s.folder.set(Name::Marker(w), w);
                Ok(())
            }
            Step::Fsync => {
                s.folder.fsync();
                Ok(())
            }
            Step::Swap if s.folder.get(Name::Res).is_some() => {
                s.folder.exchange(Name::Tmp(w), Name::Res)
            }
            Step::Swap => s.folder.rename(Name::Tmp(w), Name::Res),
            Step::File(f) => Self::rename_file(s, w, f),
            Step::Commit => {
                Self::commit(s, w, self.protocol.fenced);
                Ok(())
            }
            Step::Retire => {
                // Nothing to retire after a first publish, or once a recovery did it.
                let _ = s.folder.rename(Name::Tmp(w), Name::Old(w));
                Ok(())
            }
            Step::Unmark => {
                s.folder.remove(Name::Marker(w));
                Ok(())
            }
        };
        let next = i + 1;
        s.workers[usize::from(w)].phase = if done.is_err() {
            Phase::Failed
        } else if usize::from(next) == self.steps.len() {
            Phase::Done
        } else {
            Phase::Writing(next)
        };
    }

    /// The broken protocol's rename of file `f` of worker `w`'s tree into RES: the whole
    /// staged folder when there is no RES yet (then the second rename has nothing to do).
    fn rename_file(s: &mut State, w: u8, f: u8) -> Result<(), ()> {
        match s.folder.get(Name::Res) {
            None if f == 0 => s.folder.rename(Name::Tmp(w), Name::Res),
            Some(res) if res != w => {
                let files = &mut s.files[usize::from(res)];
                *files = if f == 0 {
                    (w << 4) | (*files & 0xf)
                } else {
                    (*files & 0xf0) | w
                };
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn commit(s: &mut State, w: u8, fenced: bool) {
        let record = Self::record(s);
        let epoch = s.workers[usize::from(w)].epoch;
        let fence = fence_after_write(record.as_ref(), i64::from(epoch), !fenced);
        s.sink = Some(SinkRow {
            fence: u8::try_from(fence).expect("small epochs"),
            content: Some(Written { epoch, writer: w }),
        });
    }

    fn power_loss(&self, s: &mut State, choice: u32) {
        for worker in &mut s.workers {
            if worker.alive() {
                worker.phase = Phase::Dead;
            }
        }
        s.recoverer = Recoverer::Idle;
        if s.reader.walking().is_some() {
            // A walk after the power loss is another run's.
            s.reader = Reader::Gone;
        }
        s.power_losses += 1;
        let more = (s.power_losses < self.max_power_losses).then_some(self.power_loss);
        s.folder = Folder::new(s.folder.after_power_loss(choice as usize), more);
    }

    /// What the reader finds in file `f` of tree `tree` now (`EMPTY`: the tree is gone).
    fn read(s: &State, tree: u8, f: u8) -> u8 {
        if s.folder.cached.holds_tree(tree) {
            file(s.files[usize::from(tree)], f)
        } else {
            EMPTY
        }
    }

    /// The reader reads its next file: through its handle on the tree it resolved, or,
    /// by path, from the tree RES names now.
    fn reader_step(&self, s: &mut State) {
        let now = |tree| {
            if self.reader_by_path {
                s.folder.get(Name::Res).unwrap_or(EMPTY)
            } else {
                tree
            }
        };
        s.reader = match s.reader {
            Reader::Opened(tree) => Reader::Read(tree, Self::read(s, now(tree), 0)),
            Reader::Read(tree, first) => {
                let second = Self::read(s, now(tree), 1);
                if first == EMPTY || second == EMPTY {
                    Reader::Cut
                } else if first == second {
                    Reader::Whole
                } else {
                    Reader::Torn
                }
            }
            other => other,
        };
    }

    fn worker_actions(&self, s: &State, w: u8, actions: &mut Vec<Action>) {
        let worker = &s.workers[usize::from(w)];
        match worker.phase {
            // Workers are alike until they claim: they claim in their order, which
            // changes nothing but the numbering and spares the checker the permutations.
            Phase::Idle => {
                let turn = w == 0 || s.workers[usize::from(w) - 1].phase != Phase::Idle;
                if turn && self.lock_free(s) && Self::claimable(s).is_some() {
                    actions.push(Action::Claim(w));
                }
            }
            Phase::Claimed => actions.push(Action::Stage(w)),
            Phase::Staged if self.lock_free(s) => actions.push(Action::Begin(w)),
            Phase::Recovering(_) | Phase::Writing(_) => actions.push(Action::Step(w)),
            _ => {}
        }
        if worker.alive() {
            actions.push(Action::Crash(w));
        }
    }
}

/// Carries out one recovery step on the folder; a swap back that finds a name gone fails
/// (and so does the command).
fn run_op(folder: &mut Folder, op: Op) -> Result<(), ()> {
    match op {
        Op::Unlink(name) => folder.remove(name),
        Op::Retire(name, t) => {
            let _ = folder.rename(name, Name::Old(t));
        }
        Op::SwapBack(t) => folder.exchange(Name::Tmp(t), Name::Res)?,
        Op::Fsync => folder.fsync(),
    }
    Ok(())
}

impl Model for TreeModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            workers: vec![
                Worker {
                    epoch: 0,
                    phase: Phase::Idle,
                };
                usize::from(self.workers)
            ],
            recoverer: Recoverer::Idle,
            reader: Reader::Idle,
            lease: None,
            sink: None,
            folder: Folder::new(
                Names::NONE,
                (self.max_power_losses > 0).then_some(self.power_loss),
            ),
            files: [0, 1, 2, 3].map(whole),
            power_losses: 0,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for w in 0..self.workers {
            self.worker_actions(s, w, actions);
        }
        match s.recoverer {
            Recoverer::Idle if self.lock_free(s) => actions.push(Action::RecoverBegin),
            Recoverer::Idle => {}
            Recoverer::Recovering(..) => {
                actions.extend([Action::RecoverStep, Action::RecoverCrash])
            }
            Recoverer::Recovered(_) => {
                actions.extend([Action::RecoverCommit, Action::RecoverCrash]);
            }
        }
        match s.reader {
            Reader::Idle if self.reader && s.folder.get(Name::Res).is_some() => {
                actions.push(Action::Open);
            }
            Reader::Opened(_) | Reader::Read(..) => actions.push(Action::Read),
            _ => {}
        }
        let outcomes = s.folder.outcomes() as u32;
        actions.extend((0..outcomes).map(Action::PowerLoss));
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Claim(w) => self.claim(&mut s, w)?,
            Action::Stage(w) => self.stage(&mut s, w),
            Action::Begin(w) => self.begin(&mut s, w),
            Action::Step(w) => match s.workers[usize::from(w)].phase.clone() {
                Phase::Recovering(plan) => self.recovery_step(&mut s, w, plan),
                Phase::Writing(i) => self.write_step(&mut s, w, i),
                _ => return None,
            },
            Action::Crash(w) => s.workers[usize::from(w)].phase = Phase::Dead,
            Action::RecoverBegin => {
                let plan = self.recovery_plan(&s);
                let quiet = !s.workers.iter().any(Worker::alive);
                s.recoverer = if plan.is_empty() {
                    Recoverer::Recovered(quiet)
                } else {
                    Recoverer::Recovering(plan, quiet)
                };
            }
            Action::RecoverStep => {
                let Recoverer::Recovering(mut plan, quiet) = s.recoverer.clone() else {
                    return None;
                };
                s.recoverer = if run_op(&mut s.folder, plan.remove(0)).is_err() {
                    Recoverer::Idle
                } else if plan.is_empty() {
                    Recoverer::Recovered(quiet)
                } else {
                    Recoverer::Recovering(plan, quiet)
                };
            }
            Action::RecoverCommit | Action::RecoverCrash => s.recoverer = Recoverer::Idle,
            Action::Open => s.reader = Reader::Opened(s.folder.get(Name::Res)?),
            Action::Read => self.reader_step(&mut s),
            Action::PowerLoss(choice) => self.power_loss(&mut s, choice),
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(MIXED, res_is_one_tree),
            Property::always(NOT_RECORDED, recovered_is_recorded),
            Property::always(ACKED_LOST, no_acked_write_lost),
            Property::always(LOWER_EPOCH, no_lower_epoch),
            Property::always(LEFT_OVER, nothing_left_over),
            Property::sometimes(INTERRUPTED_SWAP, interrupted_swap),
            Property::sometimes(SWAPPED_BACK, swaps_back),
            Property::sometimes(FIRST_UNDONE, first_publish_undone),
            Property::sometimes(STALE, stale_refused),
            Property::sometimes(ALL_ACKED, all_acked),
        ];
        if self.reader {
            properties.extend([
                Property::always(TORN, walk_not_torn),
                Property::sometimes(WALK_SURVIVES, walk_survives_a_swap),
            ]);
            properties.push(Property::always(CUT, walk_not_cut));
        }
        properties
    }
}

const MIXED: &str = "RES names one writer's whole tree, or nothing";
const TORN: &str = "a reader's walk reads one tree";
const CUT: &str = "a reader's tree is not taken away during its walk";
const NOT_RECORDED: &str = "after recovery RES is the recorded tree";
const ACKED_LOST: &str = "no acknowledged tree is lost";
const LOWER_EPOCH: &str = "a lower epoch never becomes current after a higher one was acknowledged";
const LEFT_OVER: &str = "after a recovery with no writer running, no marker or tmp-* is left";
const INTERRUPTED_SWAP: &str = "a write dies between its swap and its commit";
const SWAPPED_BACK: &str = "recovery swaps an uncommitted tree back out";
const FIRST_UNDONE: &str = "recovery takes away an uncommitted first publish";
const WALK_SURVIVES: &str = "a reader walks a tree that a write swapped out";
const STALE: &str = "a late write is refused as stale";
const ALL_ACKED: &str = "every worker's write is acknowledged in turn";

impl TreeModel {
    /// A claim: recovery first, in its transaction; then the lease, and the epoch
    /// registered with the sink (the fence only goes up). `None` if no claim can be made.
    fn claim(&self, s: &mut State, w: u8) -> Option<()> {
        let epoch = Self::claimable(s)?;
        if self.recover_all(s).is_err() {
            s.workers[usize::from(w)].phase = Phase::Failed;
            return Some(());
        }
        s.lease = Some(LeaseRow { epoch });
        let row = s.sink.get_or_insert(SinkRow {
            fence: 0,
            content: None,
        });
        row.fence = row.fence.max(epoch);
        s.workers[usize::from(w)] = Worker {
            epoch,
            phase: Phase::Claimed,
        };
        Some(())
    }

    /// RES's files, if there is a RES.
    fn res_files(s: &State) -> Option<Files> {
        s.folder.get(Name::Res).map(|res| s.files[usize::from(res)])
    }

    /// The worker whose whole tree RES is (`None`: no RES, or a mixed one).
    fn res_tree(&self, s: &State) -> Option<u8> {
        let files = Self::res_files(s)?;
        (0..self.workers).find(|&w| files == whole(w))
    }

    /// The highest acknowledged write: its epoch and worker.
    fn highest_acked(s: &State) -> Option<(u8, u8)> {
        (0..s.workers.len())
            .filter(|&w| s.workers[w].phase == Phase::Done)
            .map(|w| (s.workers[w].epoch, u8::try_from(w).expect("few workers")))
            .max()
    }

    /// A process holds the lock, its recovery finished, and has changed nothing since.
    fn recovered(s: &State) -> bool {
        matches!(s.recoverer, Recoverer::Recovered(_))
            || s.workers.iter().any(|w| w.phase == Phase::Writing(0))
    }
}

fn res_is_one_tree(m: &TreeModel, s: &State) -> bool {
    TreeModel::res_files(s).is_none() || m.res_tree(s).is_some()
}

fn walk_not_torn(_: &TreeModel, s: &State) -> bool {
    s.reader != Reader::Torn
}

fn walk_not_cut(_: &TreeModel, s: &State) -> bool {
    s.reader != Reader::Cut
}

fn recovered_is_recorded(_: &TreeModel, s: &State) -> bool {
    !TreeModel::recovered(s) || TreeModel::res_files(s) == TreeModel::recorded(s).map(whole)
}

/// RES is the highest acknowledged tree, or a tree of a higher epoch.
fn no_acked_write_lost(m: &TreeModel, s: &State) -> bool {
    TreeModel::highest_acked(s).is_none_or(|(epoch, w)| {
        m.res_tree(s)
            .is_some_and(|res| res == w || s.workers[usize::from(res)].epoch > epoch)
    })
}

fn no_lower_epoch(m: &TreeModel, s: &State) -> bool {
    let acked = TreeModel::highest_acked(s).map_or(0, |(epoch, _)| epoch);
    m.res_tree(s)
        .is_none_or(|res| s.workers[usize::from(res)].epoch >= acked)
}

/// After a quiet recovery no marker and no `tmp-*` folder is left; `old-*` folders (the
/// ones this recovery retired) wait for their deadline, and the next recovery removes
/// them.
fn nothing_left_over(_: &TreeModel, s: &State) -> bool {
    s.recoverer != Recoverer::Recovered(true)
        || s.folder
            .cached
            .iter()
            .all(|(name, _)| matches!(name, Name::Res | Name::Old(_)))
}

/// A crashed writer's tree is RES, and the record does not name it.
fn interrupted_swap(_: &TreeModel, s: &State) -> bool {
    s.folder.get(Name::Res).is_some_and(|res| {
        s.workers[usize::from(res)].phase == Phase::Dead && TreeModel::recorded(s) != Some(res)
    })
}

/// A recovery is about to do `op`.
fn plans(s: &State, op: impl Fn(&Op) -> bool) -> bool {
    let worker = |w: &Worker| matches!(&w.phase, Phase::Recovering(plan) if plan.iter().any(&op));
    matches!(&s.recoverer, Recoverer::Recovering(plan, _) if plan.iter().any(&op))
        || s.workers.iter().any(worker)
}

fn swaps_back(_: &TreeModel, s: &State) -> bool {
    plans(s, |op| matches!(op, Op::SwapBack(_)))
}

fn first_publish_undone(_: &TreeModel, s: &State) -> bool {
    plans(s, |op| {
        matches!(op, Op::Unlink(Name::Res) | Op::Retire(Name::Res, _))
    })
}

/// The reader has read one file of a tree that is no longer RES, and the tree is there.
fn walk_survives_a_swap(_: &TreeModel, s: &State) -> bool {
    matches!(s.reader, Reader::Read(tree, first)
        if first != EMPTY && s.folder.get(Name::Res) != Some(tree)
            && s.folder.cached.holds_tree(tree))
}

fn stale_refused(_: &TreeModel, s: &State) -> bool {
    s.workers.iter().any(|w| w.phase == Phase::Refused("stale"))
}

fn all_acked(_: &TreeModel, s: &State) -> bool {
    s.workers.iter().all(|w| w.phase == Phase::Done)
}

/// Explores every state, checks every property, and prints what it explored.
fn assert_holds(model: TreeModel) {
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
fn counterexample(model: TreeModel, property: &'static str) -> Path<State, Action> {
    let what = format!("{model}");
    let started = Instant::now();
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
    println!(
        "model of {what}: counterexample to {property:?} ({} distinct states, {:.2?}):",
        checker.unique_state_count(),
        started.elapsed()
    );
    for action in path.clone().into_actions() {
        println!("  {action:?}");
    }
    println!("  ending in {:?}", path.last_state());
    path
}

impl std::fmt::Display for TreeModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let loss = match self.power_loss {
            PowerLoss::Prefix => "in-order",
            PowerLoss::AnySubset => "any-subset",
        };
        let reader = match (self.reader, self.reader_by_path) {
            (false, _) => "no reader",
            (true, false) => "a reader",
            (true, true) => "a reader by path",
        };
        write!(
            f,
            "{} workers, {reader}, up to {} {loss} power losses, {}",
            self.workers, self.max_power_losses, self.protocol
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
                self.swap_folder != now.swap_folder,
                "files renamed one by one",
            ),
            (
                self.fsync_before_swap != now.fsync_before_swap,
                "no fsync before the swap",
            ),
            (
                self.fsync_after_swap != now.fsync_after_swap,
                "no fsync after the swap",
            ),
            (
                self.fsync_before_unmark != now.fsync_before_unmark,
                "no recovery fsync before dropping a marker",
            ),
            (
                self.retire_rolled_back != now.retire_rolled_back,
                "rolled-back trees removed at once",
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
fn model_tree_three_workers_publish_whole_trees() {
    assert_holds(TreeModel::new(3, Protocol::CURRENT, PowerLoss::Prefix));
}

#[test]
fn model_tree_four_workers_publish_whole_trees() {
    // Without the reader: with it, four workers take six times as long, and three
    // workers already give the reader every kind of write to walk through.
    assert_holds(TreeModel::new(4, Protocol::CURRENT, PowerLoss::Prefix).without_reader());
}

#[test]
fn model_tree_finds_a_mixed_tree_when_files_are_renamed_one_by_one() {
    let protocol = Protocol {
        swap_folder: false,
        ..Protocol::CURRENT
    };
    let model = || TreeModel::new(3, protocol, PowerLoss::Prefix).power_losses(0);
    // Between the two renames RES holds the new first file and the old second one; a
    // reader walking then reads both; a crash there leaves it so, recovery or not (the
    // old file is gone).
    counterexample(model(), MIXED);
    counterexample(model(), TORN);
    counterexample(model(), NOT_RECORDED);
}

#[test]
fn model_tree_finds_a_lost_tree_without_the_parent_fsync() {
    let protocol = Protocol {
        fsync_after_swap: false,
        ..Protocol::CURRENT
    };
    counterexample(TreeModel::new(3, protocol, PowerLoss::Prefix), ACKED_LOST);
}

#[test]
fn model_tree_finds_an_older_epoch_over_a_newer_one_when_trees_are_unfenced() {
    let protocol = Protocol {
        fenced: false,
        ..Protocol::CURRENT
    };
    let model = TreeModel::new(3, protocol, PowerLoss::Prefix).power_losses(0);
    counterexample(model, LOWER_EPOCH);
}

#[test]
fn model_tree_finds_a_walk_cut_short_when_a_rolled_back_tree_is_removed_at_once() {
    // A reader that resolved RES while an uncommitted tree was there (its writer died
    // between the swap and the commit) walks a tree that recovery then swaps back out and
    // removes: the files it has not read yet are gone.
    let protocol = Protocol {
        retire_rolled_back: false,
        ..Protocol::CURRENT
    };
    let model = TreeModel::new(3, protocol, PowerLoss::Prefix).power_losses(0);
    counterexample(model, CUT);
}

#[test]
fn model_tree_finds_a_torn_walk_when_the_reader_resolves_each_path() {
    // The swap keeps a walk whole only through the handle the reader opened: a reader
    // that looks up RES again for each file reads the old tree's first file and the new
    // tree's second.
    let model = TreeModel::new(3, Protocol::CURRENT, PowerLoss::Prefix)
        .power_losses(0)
        .reader_by_path();
    counterexample(model, TORN);
}

#[test]
fn model_tree_any_subset_power_loss_needs_both_extra_parent_fsyncs() {
    // Without the fsync before the swap, a power loss may keep the swap and lose the
    // marker: nothing tells recovery that RES is an uncommitted tree, and the committed
    // one, in `tmp-R`, is swept as a dead writer's. Without the fsync before a marker is
    // dropped, a power loss may keep the drop and lose an earlier recovery's undoing.
    // The current protocol has both (a tree publish is heavy enough that one more fsync
    // of its parent costs little), so a filesystem that orders nothing keeps it safe.
    for protocol in [
        Protocol {
            fsync_before_swap: false,
            fsync_before_unmark: false,
            ..Protocol::CURRENT
        },
        Protocol {
            fsync_before_swap: false,
            ..Protocol::CURRENT
        },
        Protocol {
            fsync_before_unmark: false,
            ..Protocol::CURRENT
        },
    ] {
        counterexample(
            TreeModel::new(3, protocol, PowerLoss::AnySubset),
            NOT_RECORDED,
        );
    }
    assert_holds(TreeModel::new(3, Protocol::CURRENT, PowerLoss::AnySubset).without_reader());
    assert_holds(TreeModel::new(2, Protocol::CURRENT, PowerLoss::AnySubset));
}
