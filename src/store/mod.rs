//! The state store's interface: what the commands ask of the place that keeps leases,
//! the sink's records, the audit log and the state file's bindings, whatever keeps them.
//!
//! The fencing rules need one thing of a store: a transaction that holds the write lock
//! from its first read to its COMMIT (`BEGIN IMMEDIATE`), so that a decision (may this
//! epoch claim, may this write replace the document) cannot be split from the change it
//! decides by another writer. [`Store`] gives such transactions (and read-only
//! snapshots); [`Txn`] is what a command does inside one:
//!
//! | operation | methods |
//! |---|---|
//! | claim | [`Txn::lease`], [`Txn::put_lease`], [`Txn::raise_fence`] |
//! | renew, complete, release | [`Txn::update_held_lease`] (a compare-and-set) |
//! | decide and publish a write | [`Txn::lease`], [`Txn::sink`], [`Txn::issued_to`], [`Txn::record_write`] |
//! | read records | [`Txn::lease_named`], [`Txn::sink_named`], [`Txn::resources`] |
//! | append and read events | [`Txn::append`], [`Txn::events`], [`Txn::prune`] |
//! | bind the clock and the root | [`Txn::bind_clock`], [`Txn::check_clock`], [`Txn::meta_bytes`] |
//!
//! The one implementation is [`sqlite::SqliteStore`] (a file beside the root). A second
//! (a database server shared by several hosts, such as PostgreSQL) is a module beside it
//! implementing both traits, chosen in [`open`] and [`open_read_only`] by the form of
//! `--db`; the commands do not change. The document side of a write (staging, links,
//! rename, recovery) is not the store's: it is `atomic.rs`, `folder.rs` and
//! `recovery.rs`.

use std::path::Path;
use std::time::Duration;

use crate::audit::Event;
use crate::clock::ClockKind;
use crate::error::Result;
use crate::lease::Lease;
use crate::resource::Resource;
use crate::sink::{Content, SinkRecord};

pub(crate) mod sqlite;

/// How many log events are kept by default (`log --prune`, `FENCEPOST_LOG_KEEP`).
pub(crate) const DEFAULT_LOG_KEEP: i64 = 100_000;

/// An open state store.
pub(crate) trait Store: std::fmt::Debug {
    /// Begins a transaction that holds the write lock until [`Txn::commit`] (or until
    /// dropped, which rolls back): the start of every change.
    fn immediate(&mut self) -> Result<Box<dyn Txn + '_>>;

    /// Begins a read-only transaction: a consistent snapshot for reports.
    fn snapshot(&mut self) -> Result<Box<dyn Txn + '_>>;
}

/// One transaction on the state store. Dropped without [`Txn::commit`], it changes
/// nothing.
pub(crate) trait Txn {
    /// Commits: the single point where a change becomes real.
    fn commit(self: Box<Self>) -> Result<()>;

    /// Binds the store to a clock on its first change, and refuses the other one.
    fn bind_clock(&self, kind: ClockKind) -> Result<()>;

    /// Refuses to read deadlines on the other clock (without binding a fresh store).
    fn check_clock(&self, kind: ClockKind) -> Result<()>;

    /// The clock the store is bound to, if it has seen a change yet.
    fn clock(&self) -> Result<Option<ClockKind>>;

    /// A setting kept as bytes (a path need not be UTF-8).
    fn meta_bytes(&self, key: &str) -> Result<Option<Vec<u8>>>;

    /// Sets a setting kept as bytes.
    fn set_meta_bytes(&self, key: &str, value: &[u8]) -> Result<()>;

    /// The resource's lease.
    fn lease(&self, resource: &Resource) -> Result<Option<Lease>>;

    /// The lease stored under `name`, which may no longer pass the name rules (for
    /// reports that must show every row).
    fn lease_named(&self, name: &str) -> Result<Option<Lease>>;

    /// Records a claim's lease (`now`: when).
    fn put_lease(&self, resource: &Resource, lease: &Lease, now: i64) -> Result<()>;

    /// The holder's compare-and-set: owner, epoch and a live deadline must all match, or
    /// nothing changes and it returns false (the caller is refused).
    fn update_held_lease(&self, resource: &Resource, request: &HolderRequest<'_>) -> Result<bool>;

    /// The resource's sink record.
    fn sink(&self, resource: &Resource) -> Result<Option<SinkRecord>>;

    /// The sink record stored under `name`, which may no longer pass the name rules.
    fn sink_named(&self, name: &str) -> Result<Option<SinkRecord>>;

    /// Raises the sink's fence without touching its content record (takeover fencing).
    fn raise_fence(&self, resource: &Resource, epoch: i64) -> Result<()>;

    /// Records an accepted write: the fence and the content now on disk.
    fn record_write(&self, resource: &Resource, write: &WriteRecord<'_>) -> Result<()>;

    /// Appends an event to the audit log, keeping about the newest `keep`.
    fn append(&self, event: &Event, keep: i64) -> Result<()>;

    /// Drops all but the newest `keep` events, at most `limit` of them (the oldest
    /// first); returns how many were dropped.
    fn prune(&self, keep: i64, limit: Option<i64>) -> Result<usize>;

    /// Events, oldest first, optionally for one resource and from a time on.
    fn events(&self, resource: Option<&Resource>, since: Option<i64>) -> Result<Vec<Event>>;

    /// Who `claim` issued `epoch` of `resource` to (None once forgotten).
    fn issued_to(&self, resource: &Resource, epoch: i64) -> Result<Option<String>>;

    /// Every resource with a lease or a sink record, sorted by name.
    fn resources(&self) -> Result<Vec<String>>;
}

/// A holder's request to change its own lease: who asks (owner and epoch), when, and
/// what.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HolderRequest<'a> {
    pub owner: &'a str,
    pub epoch: i64,
    pub now: i64,
    pub change: HolderChange<'a>,
}

/// An accepted write as the sink records it: the new fence, the content now on disk
/// and who wrote it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteRecord<'a> {
    pub fence: i64,
    pub content: &'a Content,
    pub owner: Option<&'a str>,
}

/// A holder's change to its own lease.
#[derive(Debug, Clone, Copy)]
pub(crate) enum HolderChange<'a> {
    Renew { deadline: i64 },
    Complete { result: Option<&'a str> },
    Release,
}

/// Opens the state store at `db` for changes, creating it if `create` and missing;
/// `None` when it does not exist and `create` is false.
pub(crate) fn open(db: &Path, busy: Duration, create: bool) -> Result<Option<Box<dyn Store>>> {
    Ok(sqlite::SqliteStore::open(db, busy, create)?.map(|s| Box::new(s) as Box<dyn Store>))
}

/// Opens an existing state store for reading only (`status`, `verify`, `log`); `None`
/// when there is none.
pub(crate) fn open_read_only(db: &Path, busy: Duration) -> Result<Option<Box<dyn Store>>> {
    Ok(sqlite::SqliteStore::open_read_only(db, busy)?.map(|s| Box::new(s) as Box<dyn Store>))
}
