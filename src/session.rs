//! A session: where the state lives and how this process works on it. A local one is a
//! publish root with its state file; a shared one is a PostgreSQL store (`--store`) with,
//! optionally, a mirror root on this host. The session opens the store, names resources
//! under its root, and starts every change ([`Ctx::begin`]: the write lock, the clock and
//! root bindings, crash recovery). It also holds what a mirror root is bound to: the
//! store it copies, and the refusal of changes of its own.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::audit::{Event, EventKind};
use crate::clock::Clock;
use crate::error::{Error, Refusal, Result};
use crate::lease::{Lease, LostReason};
use crate::outcome::{LeaseView, RefusalDetail};
use crate::recovery;
use crate::resource::{self, Resource};
use crate::root::{self, How, StateFiles};
use crate::store::{self, ReadTxn, SharedStore, Store, Txn};
use crate::text::first_misleading;

/// The global options, resolved.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The publish root, canonical.
    pub root: PathBuf,
    /// The state file.
    pub db: PathBuf,
    pub clock: Clock,
    pub busy: Duration,
    /// Audit-log events to keep.
    pub log_keep: i64,
    /// How the root was chosen.
    pub how: How,
    /// The current folder under a found root, where names typed on the command line start
    /// (`None`: they are relative to the root).
    pub here: Option<PathBuf>,
    /// The state file and SQLite's files beside it, by device and inode.
    pub state_files: StateFiles,
    /// The shared store (`--store`), when the state is not a local state file.
    pub remote: Option<Remote>,
    /// Applying a shared store's version to its mirror root (`mirror.rs`): the one kind of
    /// change a mirror root takes.
    pub applying: bool,
    /// The store's clock and when it was read here (see [`Ctx::now`]).
    pub server_clock: std::cell::Cell<Option<(i64, std::time::Instant)>>,
    /// When every wait on the shared store's network must be over (`run`'s renewals: its
    /// lease's deadline); `None`: the usual timeouts alone.
    pub deadline: Option<std::time::Instant>,
    /// The store kept open across this session's calls, when it keeps one (a `Client`).
    pub kept: Kept,
    /// Where warnings go: what went wrong beside an answer that stands (a refusal that
    /// could not be logged, a mirror not updated after a publish).
    pub warn: Warn,
    /// Whether a change may make a new publish root (or a shared store's tables), and who
    /// hears of a root made.
    pub create: Create,
}

/// Whether the first claim (or a mirror's first document) may make the state it needs: a
/// publish root with its state file, or a shared store's tables. A cron job whose
/// `FENCEPOST_ROOT` went missing would otherwise start a second root with epochs from 1
/// in whatever folder it runs in.
#[derive(Debug, Clone, Default)]
pub struct Create {
    /// Refuse to make any (`--no-create`): the root, its state file, or the store's
    /// tables must exist already.
    pub refused: bool,
    /// Told the folder of each publish root this session makes. The library prints
    /// nothing: the command line says it on stderr, a program decides for itself.
    pub made: Made,
}

/// A receiver of the folders made publish roots (by default, none).
#[derive(Clone)]
pub struct Made(pub std::sync::Arc<dyn Fn(&Path) + Send + Sync>);

impl Default for Made {
    fn default() -> Made {
        Made(std::sync::Arc::new(|_| {}))
    }
}

impl std::fmt::Debug for Made {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Made")
    }
}

/// A receiver of warnings. The library prints nothing: the command line prints them on
/// stderr, a program decides for itself (by default they are dropped).
#[derive(Clone)]
pub struct Warn(pub std::sync::Arc<dyn Fn(&str) + Send + Sync>);

impl Default for Warn {
    fn default() -> Warn {
        Warn(std::sync::Arc::new(|_| {}))
    }
}

impl std::fmt::Debug for Warn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Warn")
    }
}

/// A store kept open across the calls of one session: the first change opens it, later
/// calls reuse it, so a long-lived program pays the open (and SQLite's checks of the
/// file) once. Cloning a session never shares it: a variant (another busy timeout, a
/// mirror root's own side) opens its own store.
#[derive(Default)]
pub struct Kept(Option<Slots>);

/// The kept store: a state file's, or a shared store's (which keeps contents too).
#[derive(Default)]
struct Slots {
    local: Mutex<Option<Box<dyn Store>>>,
    shared: Mutex<Option<Box<dyn SharedStore>>>,
}

impl Kept {
    /// A session that keeps its store open.
    #[must_use]
    pub fn on() -> Kept {
        Kept(Some(Slots::default()))
    }
}

impl Clone for Kept {
    fn clone(&self) -> Kept {
        Kept(None)
    }
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Kept(on)"
        } else {
            "Kept(off)"
        })
    }
}

/// An open store of type `S`: the session's kept one, or one of this call's own (closed
/// when dropped). A call that finds the kept store in use (the recovery after a failed
/// COMMIT, while the write still holds it) opens its own.
pub enum Handle<'k, S: ?Sized> {
    Own(Box<S>),
    Kept(MutexGuard<'k, Option<Box<S>>>),
}

/// Why a kept handle always holds a store.
const FILLED: &str = "a kept store is filled before it is handed out";

impl<S: ?Sized> std::ops::Deref for Handle<'_, S> {
    type Target = S;
    fn deref(&self) -> &S {
        match self {
            Handle::Own(store) => store,
            Handle::Kept(guard) => guard.as_deref().unwrap_or_else(|| unreachable!("{FILLED}")),
        }
    }
}

impl<S: ?Sized> std::ops::DerefMut for Handle<'_, S> {
    fn deref_mut(&mut self) -> &mut S {
        match self {
            Handle::Own(store) => store,
            Handle::Kept(guard) => guard
                .as_deref_mut()
                .unwrap_or_else(|| unreachable!("{FILLED}")),
        }
    }
}

impl<S: ?Sized> std::fmt::Debug for Handle<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Handle::Own(_) => "Handle::Own",
            Handle::Kept(_) => "Handle::Kept",
        })
    }
}

/// The kept store in `slot` (opened by `open` if it holds none yet: `None` from `open`
/// is nothing to open), or, with no slot or one in use, a store of this call's own.
fn kept_in<'k, S: ?Sized>(
    slot: Option<&'k Mutex<Option<Box<S>>>>,
    open: impl FnOnce() -> Result<Option<Box<S>>>,
) -> Result<Option<Handle<'k, S>>> {
    if let Some(slot) = slot
        && let Ok(mut guard) = slot.try_lock()
    {
        if guard.is_none() {
            match open()? {
                Some(store) => *guard = Some(store),
                None => return Ok(None),
            }
        }
        return Ok(Some(Handle::Kept(guard)));
    }
    Ok(open()?.map(Handle::Own))
}

/// The open state of a session: a state file's store, or a shared store (which is one
/// too, and keeps contents: [`Ctx::shared_store`]).
pub enum Opened<'k> {
    Local(Handle<'k, dyn Store>),
    Shared(Handle<'k, dyn SharedStore>),
}

impl std::fmt::Debug for Opened<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Opened::Local(store) => write!(f, "Opened::Local({store:?})"),
            Opened::Shared(store) => write!(f, "Opened::Shared({store:?})"),
        }
    }
}

impl std::ops::Deref for Opened<'_> {
    type Target = dyn Store;
    fn deref(&self) -> &(dyn Store + 'static) {
        match self {
            Opened::Local(store) => &**store,
            Opened::Shared(store) => &**store,
        }
    }
}

impl std::ops::DerefMut for Opened<'_> {
    fn deref_mut(&mut self) -> &mut (dyn Store + 'static) {
        match self {
            Opened::Local(store) => &mut **store,
            Opened::Shared(store) => &mut **store,
        }
    }
}

/// A shared store named by `--store`, and whether a local root mirrors it.
#[derive(Debug, Clone)]
pub struct Remote {
    pub url: store::postgres::StoreUrl,
    /// A root was given or found: the mirror of the store's documents on this host
    /// (`root` and `db` of the [`Ctx`] are its).
    pub mirror: bool,
    /// How long a COMMIT may wait for the store's confirmation (`--commit-timeout`).
    pub commit_timeout: Duration,
}

/// What a session is opened from: where the state is, and how to work on it.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'a> {
    /// The publish root (`None`: the nearest one from the current folder up, else the
    /// current folder).
    pub root: Option<&'a Path>,
    /// The state file, when not the one the root names.
    pub db: Option<&'a Path>,
    /// A shared store's URL: the state lives there instead of a state file.
    pub store: Option<&'a str>,
    /// With a shared store, whether the root is its mirror.
    pub mirror: MirrorRoot,
    pub clock: Clock,
    pub busy: Duration,
    pub commit_timeout: Duration,
    pub log_keep: i64,
}

/// Whether a session on a shared store has a mirror root on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirrorRoot {
    /// The root given, or found above the current folder, is its mirror; the current
    /// folder is not (the command line's rule).
    IfGivenOrFound,
    /// No mirror root, wherever this runs.
    None,
}

impl Ctx {
    /// Opens a session: resolves the root and the state file (or parses the store's URL);
    /// nothing is opened yet.
    pub fn open(settings: &Settings<'_>) -> Result<Ctx> {
        let url = settings
            .store
            .map(store::postgres::StoreUrl::parse)
            .transpose()?;
        if url.is_some() && settings.db.is_some() {
            return Err(Error::usage_hint(
                "--db and --store name two places for the state: pass one",
                "with --store (FENCEPOST_STORE) the leases live in the database; unset --db \
                 (FENCEPOST_DB)",
            ));
        }
        let place = root::resolve(settings.root, settings.db)?;
        let remote = url.map(|url| Remote {
            url,
            mirror: settings.mirror == MirrorRoot::IfGivenOrFound && place.how != How::Current,
            commit_timeout: settings.commit_timeout,
        });
        let db = place.db;
        if db.is_dir() {
            return Err(Error::usage_hint(
                format!("state file {} is a folder", db.display()),
                "point --db (FENCEPOST_DB) at a file, e.g. <folder>/state.db",
            ));
        }
        Ok(Ctx {
            root: place.root,
            state_files: StateFiles::of(&db),
            db,
            clock: settings.clock,
            busy: settings.busy,
            log_keep: settings.log_keep,
            how: place.how,
            here: place.here,
            remote,
            applying: false,
            server_clock: std::cell::Cell::new(None),
            deadline: None,
            kept: Kept::default(),
            warn: Warn::default(),
            create: Create::default(),
        })
    }

    /// A session with no root and no state (what generating completions needs).
    #[must_use]
    pub fn detached(clock: Clock, log_keep: i64) -> Ctx {
        Ctx {
            root: PathBuf::new(),
            db: PathBuf::new(),
            clock,
            busy: Duration::ZERO,
            log_keep,
            how: How::Given,
            here: None,
            state_files: StateFiles::default(),
            remote: None,
            applying: false,
            server_clock: std::cell::Cell::new(None),
            deadline: None,
            kept: Kept::default(),
            warn: Warn::default(),
            create: Create::default(),
        }
    }

    /// Passes a warning on (see [`Warn`]).
    pub fn warn(&self, message: &str) {
        (self.warn.0)(message);
    }

    /// The current time: `--now`'s tick; the shared store's clock, as read when the store
    /// was opened or, later, when a resource's lock was granted, counted on from there
    /// by this host's monotonic clock; or this host's wall clock.
    pub fn now(&self) -> i64 {
        match (self.clock, self.server_clock.get()) {
            (Clock::Wall, Some((base, at))) => {
                base.saturating_add(i64::try_from(at.elapsed().as_millis()).unwrap_or(i64::MAX))
            }
            (clock, _) => clock.now(),
        }
    }

    /// Opens the shared store: `None` when its database has no fencepost schema yet and
    /// `create` is false.
    fn open_remote(&self, remote: &Remote, create: bool) -> Result<Option<Box<dyn SharedStore>>> {
        let opened = match store::postgres::PgStore::open(
            &remote.url,
            self.busy,
            self.deadline,
            remote.commit_timeout,
            false,
        )? {
            Some(opened) => opened,
            None if !create => return Ok(None),
            None => {
                // A store without tables yet: a root bound to any store, or with leases
                // of its own, is not its mirror; refused before the tables are made.
                if remote.mirror {
                    check_mirror_root(self, remote, "")?;
                }
                store::postgres::PgStore::open(
                    &remote.url,
                    self.busy,
                    self.deadline,
                    remote.commit_timeout,
                    true,
                )?
                .ok_or(Error::Internal(
                    "a store opened to be created had no schema",
                ))?
            }
        };
        if let Some(clock) = store::Store::server_clock(&opened) {
            self.server_clock.set(Some(clock));
        }
        if remote.mirror
            && let Some(id) = store::Store::identity(&opened)
        {
            check_mirror_root(self, remote, id)?;
        }
        Ok(Some(Box::new(opened)))
    }

    /// "Nothing was ever claimed in this store".
    fn empty_remote(&self, remote: &Remote, what: &str) -> Error {
        Error::usage_hint(
            format!(
                "the store {} has no fencepost state: {what}",
                remote.url.shown
            ),
            "a store gets its tables from `fencepost store init` (or its first claim); check --store \
             (FENCEPOST_STORE)",
        )
    }

    /// The shared store, or `None` while it has no fencepost schema yet (before its first
    /// claim): what `mirror --follow` waits for. Never the kept one: a connection a
    /// broken network left behind is not reused.
    pub fn remote_store(&self) -> Result<Option<Box<dyn SharedStore>>> {
        match &self.remote {
            Some(remote) => self.open_remote(remote, false),
            None => Err(Error::Internal("a shared store without --store")),
        }
    }

    /// The session's shared store, with its contents: `what` says what there is nothing
    /// of when it has no schema yet. Only a session with `--store` has one.
    pub fn shared_store(&self, what: &str) -> Result<Handle<'_, dyn SharedStore>> {
        let remote = self
            .remote
            .as_ref()
            .ok_or(Error::Internal("a shared store without --store"))?;
        self.kept_shared(|| self.open_remote(remote, false))?
            .ok_or_else(|| self.empty_remote(remote, what))
    }

    fn kept_shared(
        &self,
        open: impl FnOnce() -> Result<Option<Box<dyn SharedStore>>>,
    ) -> Result<Option<Handle<'_, dyn SharedStore>>> {
        kept_in(self.kept.0.as_ref().map(|s| &s.shared), open)
    }

    /// [`Ctx::kept_or`] for an `open` that may find nothing to open: a local state
    /// file's store.
    pub fn kept_or_none(
        &self,
        open: impl FnOnce() -> Result<Option<Box<dyn Store>>>,
    ) -> Result<Option<Opened<'_>>> {
        Ok(kept_in(self.kept.0.as_ref().map(|s| &s.local), open)?.map(Opened::Local))
    }

    /// The kept local store (opened by `open` if the session has none yet), or a store
    /// of this call's own.
    fn kept_or(&self, open: impl FnOnce() -> Result<Box<dyn Store>>) -> Result<Opened<'_>> {
        self.kept_or_none(|| open().map(Some))?
            .ok_or(Error::Internal("a store opened was not there"))
    }

    /// Opens the state file of a command that changes a resource. Only `claim` creates
    /// one ([`Ctx::create_store`]): any other change on a root without one is a mistake
    /// (a wrong root or `--db`), never a reason to start a new one.
    pub fn store(&self) -> Result<Opened<'_>> {
        if self.remote.is_some() {
            return self
                .shared_store("nothing was ever claimed here")
                .map(Opened::Shared);
        }
        self.kept_or(|| {
            store::open(&self.db, self.busy, false)?
                .ok_or_else(|| self.no_state_file("nothing was ever claimed here"))
        })
    }

    /// Closes the kept store, if any: after a failure that may have broken its connection,
    /// the next call opens a new one.
    pub fn forget_store(&self) {
        if let Some(slots) = &self.kept.0 {
            match slots.local.lock() {
                Ok(mut guard) => *guard = None,
                Err(poisoned) => *poisoned.into_inner() = None,
            }
            match slots.shared.lock() {
                Ok(mut guard) => *guard = None,
                Err(poisoned) => *poisoned.into_inner() = None,
            }
        }
    }

    /// Opens the state file for `claim`, making the root and its state file on the first
    /// claim (refused inside another root, and with [`Create::refused`]); a root made is
    /// told to [`Create::made`].
    pub fn create_store(&self, resource: &Resource) -> Result<Opened<'_>> {
        let create = !self.create.refused;
        if let Some(remote) = &self.remote {
            return self
                .kept_shared(|| {
                    self.open_remote(remote, create)?
                        .ok_or_else(|| self.not_created())
                        .map(Some)
                })?
                .map(Opened::Shared)
                .ok_or(Error::Internal(
                    "a store opened to be created had no schema",
                ));
        }
        if !create && !root::is_root(&self.root) {
            return Err(self.not_created());
        }
        let made = root::establish(&self.place(), Some(resource))?;
        let opened = self.kept_or(|| {
            store::open(&self.db, self.busy, create)?.ok_or_else(|| self.not_created())
        })?;
        if made {
            (self.create.made.0)(&self.root);
        }
        Ok(opened)
    }

    /// Makes the session's root a publish root with its state file, as a first claim
    /// would but claiming nothing (`fencepost init`): true when it made either, false when
    /// both were there. A root made is told to [`Create::made`].
    pub fn create_root(&self) -> Result<bool> {
        if self.remote.is_some() {
            return Err(Error::usage_hint(
                "init makes a local publish root, not a shared store's tables",
                "run `fencepost store init` for the store's tables; a mirror root is made by \
                 `fencepost mirror` with its first document",
            ));
        }
        let made = root::establish(&self.place(), None)?;
        let new_file = match store::open(&self.db, self.busy, false)? {
            Some(_) => false,
            None => {
                store::open(&self.db, self.busy, true)?.ok_or(Error::Internal(
                    "a state file opened to be created was not there",
                ))?;
                true
            }
        };
        if made {
            (self.create.made.0)(&self.root);
        }
        Ok(made || new_file)
    }

    /// The root and state file as [`root::establish`] takes them.
    fn place(&self) -> root::Place {
        root::Place {
            root: self.root.clone(),
            db: self.db.clone(),
            how: self.how,
            here: self.here.clone(),
        }
    }

    /// The refusal of `--no-create` when the state a change needs is not there.
    fn not_created(&self) -> Error {
        if let Some(remote) = &self.remote {
            return Error::usage_hint(
                format!(
                    "the store {} has no fencepost tables, and --no-create (FENCEPOST_NO_CREATE) \
                     forbids making them",
                    remote.url.shown
                ),
                "run `fencepost store init` once as the database's owner, or check --store \
                 (FENCEPOST_STORE)",
            );
        }
        let root = self.root.display();
        let (message, hint) = if !root::is_root(&self.root) && self.how == How::Current {
            (
                format!(
                    "no publish root in {root} or above it, and --no-create \
                     (FENCEPOST_NO_CREATE) forbids making one"
                ),
                format!(
                    "pass --root DIR (FENCEPOST_ROOT) naming the root, or make this folder \
                     one with `fencepost init {root}`"
                ),
            )
        } else if !root::is_root(&self.root) {
            (
                format!(
                    "{root} is not a publish root (it has no {}/), and --no-create \
                     (FENCEPOST_NO_CREATE) forbids making one",
                    resource::STATE_DIR
                ),
                format!(
                    "check --root (FENCEPOST_ROOT), or make it a root with `fencepost init \
                     {root}`"
                ),
            )
        } else {
            (
                format!(
                    "no state file at {}, and --no-create (FENCEPOST_NO_CREATE) forbids \
                     starting one (its epochs would start again from 1)",
                    self.db.display()
                ),
                "check --db (FENCEPOST_DB); `fencepost init` starts one on purpose".to_string(),
            )
        };
        Error::usage_hint(message, hint)
    }

    /// Opens the state file of a command that only reads it; none is bad input (`what`
    /// says what there is nothing of: "nothing to verify"). A kept store, if the
    /// session has one open, serves.
    pub fn read_store(&self, what: &str) -> Result<Opened<'_>> {
        if self.remote.is_some() {
            return self.shared_store(what).map(Opened::Shared);
        }
        if let Some(slots) = &self.kept.0
            && let Ok(guard) = slots.local.try_lock()
            && guard.is_some()
        {
            return Ok(Opened::Local(Handle::Kept(guard)));
        }
        store::open_read_only(&self.db, self.busy)?
            .map(|store| Opened::Local(Handle::Own(store)))
            .ok_or_else(|| self.no_state_file(what))
    }

    /// "No state file here", with a hint that says where one may be.
    pub fn no_state_file(&self, what: &str) -> Error {
        let message = format!("no state file at {}: {what}", self.db.display());
        let hint = match (root::enclosing(&self.root), self.how) {
            (Some(outer), _) => format!(
                "{} is inside the publish root {}: run from inside it without --root, or pass --root {}",
                self.root.display(),
                outer.display(),
                outer.display()
            ),
            (None, How::Current) => format!(
                "no publish root (a folder with {}/) in {} or above it; pass --root DIR \
                 (FENCEPOST_ROOT), or make this folder one with `fencepost init` (a first \
                 claim does too)",
                resource::STATE_DIR,
                self.root.display()
            ),
            (None, _) => "a publish root gets its state file from `fencepost init` or its first \
                 claim; check --root (FENCEPOST_ROOT) and --db (FENCEPOST_DB)"
                .to_string(),
        };
        Error::usage_hint(message, hint)
    }

    /// Refuses `resource` when the state file has no lease and no record for it (a typo
    /// must not read as "all is well").
    pub fn refuse_unseen(&self, tx: &dyn ReadTxn, resource: &Resource, what: &str) -> Result<()> {
        if tx.lease(resource)?.is_some() || tx.sink(resource)?.is_some() {
            return Ok(());
        }
        Err(Error::usage_hint(
            format!(
                "{} has never seen {resource}: {what}",
                self.remote.as_ref().map_or_else(
                    || format!("the state file at {}", self.db.display()),
                    |r| format!("the store {}", r.url.shown)
                )
            ),
            format!(
                "`fencepost status` lists the resources it knows; names are relative to {}",
                if self.here.is_some() {
                    "the current folder"
                } else {
                    "the root"
                }
            ),
        ))
    }

    /// Opens the state file, takes the write lock, checks the clock and the root, and
    /// recovers the resource's document from any crashed write: the first steps of
    /// every change.
    pub fn begin<'s>(
        &self,
        store: &'s mut dyn Store,
        resource: &Resource,
    ) -> Result<Box<dyn Txn + 's>> {
        if self.remote.is_some() {
            let tx = store.immediate()?;
            tx.lock(resource)?;
            if let Some(now) = tx.server_now() {
                self.server_clock
                    .set(Some((now, std::time::Instant::now())));
            }
            crate::failpoints::failpoint!("txn.after_begin");
            tx.bind_clock(self.clock.kind())?;
            return Ok(tx);
        }
        // Resolved before the lock: it walks the state file's path.
        let pin = self.root_pin();
        let tx = store.immediate()?;
        crate::failpoints::failpoint!("txn.after_begin");
        // A mirror root takes only its store's versions; said before any clock binding.
        if !self.applying {
            refuse_local_change(self, &*tx)?;
        }
        self.bind(&*tx, &pin)?;
        self.recover(&*tx, resource)?;
        Ok(tx)
    }

    /// Recovers `resource`'s document from any crashed write, under `tx`'s lock, against
    /// the sink's record.
    pub fn recover(&self, tx: &dyn ReadTxn, resource: &Resource) -> Result<recovery::Done> {
        recovery::recover(
            &self.root,
            resource,
            || {
                Ok(tx
                    .sink(resource)?
                    .and_then(|r| r.content)
                    .as_ref()
                    .and_then(crate::sink::Recorded::of))
            },
            || Ok(tx.meta_bytes(MIRROR_OF)?.is_some()),
            (self.now(), recovery::keep_old(self.clock.kind())),
        )
    }

    /// Binds a state file to this clock and this root (`pin`, from [`Ctx::root_pin`]) on
    /// its first change, and refuses it to any other.
    pub fn bind(&self, tx: &dyn Txn, pin: &[u8]) -> Result<()> {
        tx.bind_clock(self.clock.kind())?;
        match tx.meta_bytes(ROOT_KEY)? {
            None => tx.set_meta_bytes(ROOT_KEY, pin),
            Some(bound) => self.same_root(&bound, pin),
        }
    }

    /// Refuses a state file that belongs to another root (without binding a fresh one):
    /// the check of commands that only read.
    pub fn check_root(&self, tx: &dyn ReadTxn) -> Result<()> {
        if self.remote.is_some() {
            return Ok(());
        }
        match tx.meta_bytes(ROOT_KEY)? {
            None => Ok(()),
            Some(bound) => self.same_root(&bound, &self.root_pin()),
        }
    }

    /// Records this root (`pin`) as the state file's root, whatever it was (`recover
    /// --root-moved`).
    pub fn rebind_root(&self, tx: &dyn Txn, pin: &[u8]) -> Result<()> {
        tx.set_meta_bytes(ROOT_KEY, pin)
    }

    /// How a state file names this root (see `root::pin`). Resolving it walks the state
    /// file's path: do it before taking the lock.
    pub fn root_pin(&self) -> Vec<u8> {
        root::pin(&self.root, &self.db)
    }

    fn same_root(&self, bound: &[u8], pin: &[u8]) -> Result<()> {
        if bound == pin {
            return Ok(());
        }
        Err(Error::usage_hint(
            format!(
                "state file {} belongs to the publish root {}, not {}",
                self.db.display(),
                root::pinned_root(&self.db, bound).display(),
                self.root.display()
            ),
            "pass that --root (one root per state file); if the root itself moved, run \
             `fencepost recover --root-moved` once with the new --root",
        ))
    }

    /// Parses a resource argument and names it by its real path under the root (see
    /// `resource::canonical`). Checked before the state file is opened, so bad input
    /// never creates one.
    pub fn resource(&self, raw: &std::ffi::OsStr) -> Result<Resource> {
        match &self.remote {
            // No root on this host: the name is the store's, as typed.
            Some(remote) if !remote.mirror => return Resource::parse(raw),
            // The store's names are the same on every host: never resolved through this
            // host's symlinks (a mirror refuses to apply a name that would be).
            Some(_) => return self.spelled(raw),
            None => {}
        }
        let spelled = self.spelled(raw)?;
        root::refuse_nested(&self.root, &spelled)?;
        let real = resource::canonical(&self.root, &spelled)?;
        root::fits(&self.root, &real)?;
        Ok(real)
    }

    /// A resource argument as spelled, under the root (typed names under a found root
    /// start in the current folder), checked by the name rules and the length limits;
    /// symlinks are not resolved.
    pub fn spelled(&self, raw: &std::ffi::OsStr) -> Result<Resource> {
        let text = root::under(&self.root, self.here.as_deref(), raw)?;
        let resource = Resource::parse(&text)?;
        root::fits(&self.root, &resource)?;
        Ok(resource)
    }

    /// A name read back from the state file, checked as a typed one would be (it may
    /// predate today's rules, or have been put there by hand).
    pub fn stored(&self, name: &str) -> Result<Resource> {
        let resource = Resource::parse(std::ffi::OsStr::new(name))?;
        if self.remote.is_some() {
            return Ok(resource);
        }
        root::fits(&self.root, &resource)?;
        Ok(resource)
    }

    /// [`Ctx::resource`] for an optional argument ("this one, or all").
    pub fn resource_opt(&self, raw: Option<&std::ffi::OsStr>) -> Result<Option<Resource>> {
        raw.map(|raw| self.resource(raw)).transpose()
    }

    /// Appends an event to the audit log inside `tx`.
    pub fn log(&self, tx: &dyn Txn, event: &Event) -> Result<()> {
        tx.append(event, self.log_keep)
    }
}

/// Records a refusal in the audit log, in a transaction of its own. Best effort: the
/// refusal is the command's answer whether or not it could be logged (e.g. when the
/// state file is busy).
pub fn log_refusal(ctx: &Ctx, refusal: &Refusal) {
    let (prev_owner, prev_epoch) = refusal.detail.previous();
    let event = Event::new(
        ctx.now(),
        &refusal.resource,
        EventKind::Refused(refusal.kind()),
    )
    .owner(refusal.owner.as_deref())
    .epoch(refusal.epoch)
    .seq(refusal.seq)
    .previous(prev_owner, prev_epoch)
    .detail(refusal.message.clone());
    let opened = if ctx.remote.is_some() {
        ctx.store().map(Some)
    } else {
        // No state file is no place to log in (a refusal made before the first claim).
        ctx.kept_or_none(|| store::open(&ctx.db, ctx.busy, false))
    };
    let logged = opened.and_then(|store| {
        let Some(mut store) = store else {
            return Ok(());
        };
        let tx = store.immediate()?;
        tx.bind_clock(ctx.clock.kind())?;
        ctx.log(&*tx, &event)?;
        // The refusal is the answer, logged or not: it does not wait for standbys.
        tx.commit_unreplicated()
    });
    // A busy state file is the likely cause, and its refusal already has its line; other
    // failures are worth a warning.
    if let Err(e) = logged
        && !matches!(e, Error::Busy { .. } | Error::RemoteBusy { .. })
    {
        ctx.warn(&format!("refusal not logged: {e}"));
    }
}

/// Refuses an owner name that is empty or has control or invisible characters.
pub fn check_owner(owner: &str) -> Result<()> {
    if owner.is_empty() {
        return Err(Error::usage("owner name is empty"));
    }
    if let Some(c) = first_misleading(owner) {
        return Err(Error::usage(format!(
            "owner name {owner:?} contains a control or invisible character ({c})"
        )));
    }
    Ok(())
}

/// Refuses a `--result` text with control or invisible characters: it is printed by
/// `status` and `log`, one event per line, and must not break lines, reach a terminal as
/// escapes, or show as other text.
pub fn check_result(result: Option<&str>) -> Result<()> {
    match result.and_then(|text| Some((text, first_misleading(text)?))) {
        Some((text, c)) => Err(Error::usage(format!(
            "--result {text:?} contains a control or invisible character ({c}: newlines, \
             escapes, direction overrides)"
        ))),
        None => Ok(()),
    }
}

/// Refuses an epoch that is not positive.
pub fn check_epoch(epoch: i64) -> Result<()> {
    if epoch <= 0 {
        return Err(Error::usage(format!(
            "--epoch must be positive, got {epoch}"
        )));
    }
    Ok(())
}

/// The `lost` refusal of renew, complete and release, with the current holder.
#[must_use]
pub fn lost(
    resource: &Resource,
    owner: &str,
    epoch: i64,
    current: Option<&Lease>,
    reason: LostReason,
    now: i64,
) -> Error {
    let holder = match current {
        Some(l) => format!(
            "; current: owner {} epoch {}, {}{}",
            l.owner,
            l.epoch,
            l.view(now),
            // The result recorded, when that is why the completion is refused.
            match (&l.result, &reason) {
                (Some(result), LostReason::OtherResult) => format!(" with result {result:?}"),
                _ => String::new(),
            }
        ),
        None => String::new(),
    };
    // Only a lease that was this caller's can be lost; a wrong name or an epoch never
    // issued never held it.
    let holds = match reason {
        LostReason::NoLease | LostReason::WrongOwner | LostReason::NeverIssued => "does not hold",
        _ => "no longer holds",
    };
    // The reason in brackets, not after a colon: the line already starts `lost: `, and a
    // resource may itself be called anything.
    Error::refused(Refusal::new(
        format!(
            "{owner} epoch {epoch} {holds} the lease on {resource} ({}{holder})",
            reason.describe()
        ),
        resource.as_str(),
        Some(epoch),
        Some(owner),
        RefusalDetail::Lost {
            reason: reason.describe(),
            lease: LeaseView::at(current, now),
        },
    ))
}

/// The `meta` key naming the publish root a state file belongs to.
const ROOT_KEY: &str = "root";

/// Refuses a resource whose document is the state file or one of SQLite's files beside
/// it, however it is spelled: `dir` is the device and inode of the document's folder,
/// `name` its file name there, `doc` the device and inode of the document (`None` if it
/// does not exist). No lease and no write for it: writing it would lose every lease and
/// fence, and opening it with a plain file descriptor would drop SQLite's POSIX locks in
/// this process when closed.
pub fn refuse_state_identity(
    ctx: &Ctx,
    resource: &Resource,
    dir: (u64, u64),
    name: &std::ffi::OsStr,
    doc: Option<(u64, u64)>,
) -> Result<()> {
    if ctx.state_files.holds(dir, name, doc) {
        return Err(state_file_refusal(ctx, resource));
    }
    Ok(())
}

/// [`refuse_state_identity`] for a located document.
pub fn refuse_state_file(ctx: &Ctx, doc: &resource::DocPath, resource: &Resource) -> Result<()> {
    match doc_identity(doc)? {
        Some((dir, id)) => refuse_state_identity(ctx, resource, dir, &doc.name, id),
        None => Ok(()),
    }
}

/// Refuses a resource whose path under the root is where the state file or one of its
/// companions is or will be: the check for a document whose folder does not exist yet.
pub fn refuse_state_path(ctx: &Ctx, resource: &Resource) -> Result<()> {
    if ctx.state_files.at(&ctx.root.join(resource.as_str())) {
        return Err(state_file_refusal(ctx, resource));
    }
    Ok(())
}

fn state_file_refusal(ctx: &Ctx, resource: &Resource) -> Error {
    Error::usage(format!(
        "resource {resource} is the state file itself ({}) or one of SQLite's files beside it",
        ctx.db.display()
    ))
}

/// True when a located document is the state file or one of its companions (`status`
/// and `verify` never hash it).
pub fn is_state_file(ctx: &Ctx, doc: &resource::DocPath) -> Result<bool> {
    Ok(match doc_identity(doc)? {
        Some((dir, id)) => ctx.state_files.holds(dir, &doc.name, id),
        None => false,
    })
}

/// Device and inode of a document's folder (through its handle) and of the document
/// itself (`None` if absent).
fn doc_identity(doc: &resource::DocPath) -> Result<Option<DevIno>> {
    let dir = doc.folder.id()?;
    let id = doc.folder.stat(&doc.name)?.map(|e| (e.dev, e.ino));
    Ok(Some((dir, id)))
}

/// A folder's device and inode, and its document's if it exists.
type DevIno = ((u64, u64), Option<(u64, u64)>);

/// The state file's setting naming the store a mirror root copies (its identity).
pub const MIRROR_OF: &str = "mirror_of";

/// The same store's URL as shown in messages, for hints.
pub const MIRROR_URL: &str = "mirror_url";

/// Refuses a claim or write of a mirror root's own (`tx`: its state file): the store
/// decides for it, and a local version would be overwritten by the next apply.
pub fn refuse_local_change(ctx: &Ctx, tx: &dyn ReadTxn) -> Result<()> {
    if tx.meta_bytes(MIRROR_OF)?.is_none() {
        return Ok(());
    }
    let url = mirror_url(tx)?;
    Err(Error::usage_hint(
        format!(
            "{} is a mirror of the store {url}: it takes no claim or write of its own",
            ctx.root.display()
        ),
        format!("claim and write through the store: pass --store '{url}' (FENCEPOST_STORE)"),
    ))
}

/// The URL of the store a mirror root copies, as shown in messages: masked again, since
/// a state file written by an older fencepost may hold a password its masking missed.
fn mirror_url(tx: &dyn ReadTxn) -> Result<String> {
    Ok(tx
        .meta_bytes(MIRROR_URL)?
        .map(|u| store::postgres::redact(&String::from_utf8_lossy(&u)))
        .unwrap_or_default())
}

/// Refuses to read a mirror root (`tx`: its state file) as a root of its own when this
/// session has no store: a mirror is checked against the store it copies, which
/// [`Error::MirrorRoot`] names as a connection string to open. The root records the
/// store as messages show it, so a password it had is not there: libpq's `PGPASSWORD`
/// or password file gives it. The mirror's own context ([`local`]) reads it as a root.
pub fn refuse_unbound_read(ctx: &Ctx, tx: &dyn ReadTxn) -> Result<()> {
    if ctx.remote.is_some() || ctx.applying || tx.meta_bytes(MIRROR_OF)?.is_none() {
        return Ok(());
    }
    let shown = mirror_url(tx)?;
    Err(Error::MirrorRoot {
        root: ctx.root.clone(),
        store: store::conninfo::unmasked(&shown),
        shown,
    })
}

/// The mirror root's own context: its state file, names relative to it, no store, and
/// the wall clock whatever `--now` says. A mirror's clock only dates its applies (the
/// store decided everything else), so one mirror root serves a store on logical ticks
/// and one on the wall clock alike, and `--now` never binds it.
pub fn local(ctx: &Ctx) -> Ctx {
    Ctx {
        remote: None,
        here: None,
        clock: crate::clock::Clock::Wall,
        applying: true,
        ..ctx.clone()
    }
}

/// Refuses, when a shared store is opened with a root, a root that is not a mirror of it:
/// one bound to another store, or a publish root with leases of its own. A root with no
/// state file yet, or an empty one, becomes this store's mirror with its first document.
pub fn check_mirror_root(ctx: &Ctx, remote: &Remote, id: &str) -> Result<()> {
    let Some(mut local) = crate::store::open_read_only(&ctx.db, ctx.busy)? else {
        return Ok(());
    };
    bound(ctx, remote, &*local.snapshot()?, id).map(|_| ())
}

/// Whether the root's state file (`tx`) is bound to the store `id` already; refuses one
/// bound to another store, or unbound with leases or records of its own.
pub fn bound(ctx: &Ctx, remote: &Remote, tx: &dyn ReadTxn, id: &str) -> Result<bool> {
    match tx.meta_bytes(MIRROR_OF)? {
        Some(bound) if bound == id.as_bytes() => Ok(true),
        Some(_) => {
            let url = mirror_url(tx)?;
            Err(Error::usage_hint(
                format!(
                    "{} mirrors another store ({url}), not {}",
                    ctx.root.display(),
                    remote.url.shown
                ),
                "one store per mirror root: pass that store, or another --root (FENCEPOST_ROOT)",
            ))
        }
        None if !tx.resources()?.is_empty() => Err(Error::usage_hint(
            format!(
                "{} is a publish root with leases of its own, not a mirror of {}",
                ctx.root.display(),
                remote.url.shown
            ),
            "with --store, run outside that root, or pass --root DIR of a mirror (or of a new folder)",
        )),
        None => Ok(false),
    }
}
