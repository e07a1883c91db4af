//! The state store's interface: what the engine asks of the place that keeps leases,
//! the sink's records, the audit log and the state file's bindings, whatever keeps them.
//!
//! The fencing rules need one thing of a store: a transaction that holds the write lock
//! from its first read to its COMMIT (`BEGIN IMMEDIATE`), so that a decision (may this
//! epoch claim, may this write replace the document) cannot be split from the change it
//! decides by another writer. [`Store`] gives such transactions ([`Txn`]) and read-only
//! snapshots ([`ReadTxn`], which has only the reads; a `Txn` has them too):
//!
//! | operation | methods |
//! |---|---|
//! | claim | [`ReadTxn::lease`], [`Txn::put_lease`], [`Txn::raise_fence`] |
//! | renew, complete, release | [`Txn::update_held_lease`] (a compare-and-set) |
//! | decide and publish a write | [`ReadTxn::lease`], [`ReadTxn::sink`], [`ReadTxn::issued_to`], [`Txn::record_write`] |
//! | read records | [`ReadTxn::lease_named`], [`ReadTxn::sink_named`], [`ReadTxn::resources`] |
//! | append and read events | [`Txn::append`], [`ReadTxn::events`], [`Txn::prune`] |
//! | bind the clock and the root | [`Txn::bind_clock`], [`ReadTxn::check_clock`], [`ReadTxn::meta_bytes`] |
//!
//! Two implementations: [`sqlite::SqliteStore`] (the state file beside a root, opened by
//! [`open`] and [`open_read_only`]) and [`postgres::PgStore`] (a database shared by
//! several hosts, `--store`), which keeps the documents' contents too ([`Blobs`]; a store
//! that does is a [`SharedStore`]). The session chooses one; the engine does not change.
//! The document side of a write (staging, links, rename, recovery) is not the store's: it
//! is `atomic.rs`, `folder.rs` and `recovery.rs`.

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::audit::Event;
use crate::clock::ClockKind;
use crate::error::Result;
use crate::lease::Lease;
use crate::resource::Resource;
use crate::sink::{Content, SinkRecord};

pub mod conninfo;
pub mod postgres;
pub mod roles;
pub mod sqlite;
pub(crate) mod tls;

/// How many log events are kept by default (`log --prune`, `FENCEPOST_LOG_KEEP`).
pub const DEFAULT_LOG_KEEP: i64 = 100_000;

/// An open state store.
pub trait Store: std::fmt::Debug + Send {
    /// Begins a transaction that holds the write lock until [`Txn::commit`] (or until
    /// dropped, which rolls back): the start of every change.
    fn immediate(&mut self) -> Result<Box<dyn Txn + '_>>;

    /// Begins a read-only transaction: a consistent snapshot for reports.
    fn snapshot(&mut self) -> Result<Box<dyn ReadTxn + '_>>;

    /// The store's own clock, for a store shared by hosts whose clocks differ: its time
    /// in ms since the Unix epoch, and when it was read here. `None`: this host's clock.
    fn server_clock(&self) -> Option<(i64, Instant)> {
        None
    }

    /// The identity of a shared store, made with its schema: what a mirror root is bound
    /// to. `None` for a local state file.
    fn identity(&self) -> Option<&str> {
        None
    }
}

/// A store shared by several hosts, which keeps the documents' contents too: what a
/// write to it, a mirror's apply and `cat` hold, so the contents API is a type, not a
/// question asked at run time.
pub trait SharedStore: Store + Blobs {}

impl<T: Store + Blobs> SharedStore for T {}

/// A content blob, uploaded and hashed.
#[derive(Debug, Clone)]
pub struct Blob {
    pub id: i64,
    pub sha256: String,
    pub size: u64,
}

/// A resource's current content as a shared store publishes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub resource: String,
    pub epoch: i64,
    /// The version's seq within its epoch (0 without `--seq`).
    pub seq: i64,
    /// The version removed the resource: no blob, no bytes.
    pub removed: bool,
    /// The resource is a tree: the blob is its manifest.
    pub tree: bool,
    pub sha256: String,
    pub size: u64,
    /// The blob holding the content (`None` for a removal).
    pub blob: Option<i64>,
    pub owner: Option<String>,
    /// Published by an `--unfenced` write: mirrors apply it unfenced too, as the
    /// reproduction of the unprotected sink needs.
    pub unfenced: bool,
}

impl Published {
    /// The version as mirrors compare them: `(epoch, seq)` and the bytes' SHA-256 (empty
    /// for a removal).
    #[must_use]
    pub fn version(&self) -> ((i64, i64), &str) {
        ((self.epoch, self.seq), &self.sha256)
    }
}

/// Documents' contents kept in the store itself: immutable blobs, uploaded before the
/// fenced transaction that makes one current.
/// The largest document a write to a shared store puts in with its publishing
/// transaction ([`Txn::put_small_blob`]); a larger one is uploaded first
/// ([`Blobs::upload`]), with no lock held.
pub const SMALL_BLOB: usize = 1 << 20;

pub trait Blobs {
    /// Streams `source` into a new blob, hashing it as it passes. No resource is locked.
    fn upload(&mut self, source: &mut dyn Read) -> Result<Blob>;

    /// Removes a blob nothing points at (best effort: `recover` removes what is left).
    fn discard(&mut self, id: i64);

    /// Streams a published blob to `out`, checking its size and SHA-256 against the
    /// record at the end.
    fn read(&mut self, published: &Published, out: &mut dyn Write) -> Result<()>;

    /// Whether a complete blob with this SHA-256 is in the store (a tree's content that
    /// need not be uploaded again).
    fn has(&mut self, sha256: &str) -> Result<bool>;

    /// Streams the content with this SHA-256 that the tree manifest blob `manifest` links
    /// to `out`, checking its size and hash at the end.
    fn read_blob(
        &mut self,
        manifest: i64,
        sha256: &str,
        size: u64,
        out: &mut dyn Write,
    ) -> Result<()>;

    /// Removes blobs nothing points at that are older than `grace`; returns how many.
    fn collect(&mut self, grace: Duration) -> Result<usize>;

    /// Subscribes to publish notifications.
    fn listen(&mut self) -> Result<()>;

    /// Waits up to `timeout` for publish notifications; returns the resources named.
    fn wait(&mut self, timeout: Duration) -> Result<Vec<String>>;
}

/// A read-only transaction: a consistent snapshot that can change nothing (reports, the
/// early answer of a write), and the reading half of every write transaction.
pub trait ReadTxn {
    /// The content a shared store publishes for `resource` (`None`: none yet, or a store
    /// without blobs).
    fn published(&self, _resource: &str) -> Result<Option<Published>> {
        Ok(None)
    }

    /// [`ReadTxn::published`] for every resource, sorted by name.
    fn all_published(&self) -> Result<Vec<Published>> {
        Ok(Vec::new())
    }

    /// The highest epoch the store knows of for `resource` besides its lease: the sink's
    /// fence and, in a shared store, the highest epoch a mirror root reported holding. A
    /// claim issues its epoch above it.
    fn epoch_floor(&self, resource: &Resource) -> Result<i64> {
        Ok(self.sink(resource)?.map_or(0, |s| s.fence))
    }

    /// Refuses to read deadlines on the other clock (without binding a fresh store).
    fn check_clock(&self, kind: ClockKind) -> Result<()>;

    /// The clock the store is bound to, if it has seen a change yet.
    fn clock(&self) -> Result<Option<ClockKind>> {
        let value = self.meta_bytes("clock")?;
        Ok(value
            .as_deref()
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(ClockKind::parse))
    }

    /// A setting kept as bytes (a path need not be UTF-8).
    fn meta_bytes(&self, key: &str) -> Result<Option<Vec<u8>>>;

    /// The resource's lease.
    fn lease(&self, resource: &Resource) -> Result<Option<Lease>>;

    /// The lease stored under `name`, which may no longer pass the name rules (for
    /// reports that must show every row).
    fn lease_named(&self, name: &str) -> Result<Option<Lease>>;

    /// The resource's sink record.
    fn sink(&self, resource: &Resource) -> Result<Option<SinkRecord>>;

    /// The sink record stored under `name`, which may no longer pass the name rules.
    fn sink_named(&self, name: &str) -> Result<Option<SinkRecord>>;

    /// The manifest of the tree the sink records for `resource` (`None`: not a tree, or
    /// a store that keeps manifests as blobs).
    fn manifest(&self, _resource: &Resource) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }

    /// Events, oldest first, optionally for one resource and from a time on.
    fn events(&self, resource: Option<&Resource>, since: Option<i64>) -> Result<Vec<Event>>;

    /// Who `claim` issued `epoch` of `resource` to (None once forgotten).
    fn issued_to(&self, resource: &Resource, epoch: i64) -> Result<Option<String>>;

    /// Every resource with a lease or a sink record, sorted by name.
    fn resources(&self) -> Result<Vec<String>>;
}

/// A write transaction: it holds the write lock from its first read to its COMMIT, so a
/// decision made from what it reads cannot be split from the change it decides.
/// A write transaction: it holds the write lock from its first read to its COMMIT, so a
/// decision made from what it reads cannot be split from the change it decides.
/// Dropped without [`Txn::commit`], it changes nothing.
pub trait Txn: ReadTxn {
    /// Commits: the single point where a change becomes real.
    fn commit(self: Box<Self>) -> Result<()>;

    /// Commits a change whose loss would cost only a line of the audit log (a refusal's
    /// record): a shared store does not wait for its synchronous standbys to confirm it,
    /// so a refusal is answered while they are down.
    fn commit_unreplicated(self: Box<Self>) -> Result<()> {
        self.commit()
    }

    /// Locks `resource` until the end of the transaction, for a store whose
    /// transactions do not lock everything from their start (SQLite's `BEGIN IMMEDIATE`
    /// does).
    fn lock(&self, _resource: &Resource) -> Result<()> {
        Ok(())
    }

    /// A shared store's clock (ms since the Unix epoch) read once [`Txn::lock`] was
    /// granted; `None` for a store on this host's clock.
    fn server_now(&self) -> Option<i64> {
        None
    }

    /// Records that the mirror root `mirror` holds `epoch` of `resource` (the highest
    /// it held is kept). Fails for a role without the privilege to write it.
    fn report_seen(&self, _resource: &str, _mirror: &str, _epoch: i64) -> Result<()> {
        Ok(())
    }

    /// Links the tree manifest blob `manifest` to the blobs of its `contents` (distinct
    /// SHA-256s, all uploaded), which are kept while it is. Shared stores only.
    fn link_tree(&self, _manifest: i64, _contents: &[String]) -> Result<()> {
        Err(crate::error::Error::Internal(
            "a store without a place for contents was given a tree",
        ))
    }

    /// The blob to point a resource at for `blob`'s bytes: an older copy of the same
    /// bytes, kept from removal until this transaction ends, or `blob` itself.
    fn reuse_blob(&self, blob: &Blob) -> Result<i64> {
        Ok(blob.id)
    }

    /// The blob to point a resource at for a small document's `bytes` (at most
    /// [`SMALL_BLOB`]), whose SHA-256 is `sha256`: an older copy of them, kept from removal
    /// until this transaction ends, or a new blob made in this transaction, so that a
    /// small write is one transaction, upload included. Shared stores only.
    fn put_small_blob(&self, _bytes: &[u8], _sha256: &str) -> Result<i64> {
        Err(crate::error::Error::Internal(
            "a store without a place for contents was given a document's bytes",
        ))
    }

    /// Binds the store to a clock on its first change, and refuses the other one.
    fn bind_clock(&self, kind: ClockKind) -> Result<()>;

    /// Sets a setting kept as bytes.
    fn set_meta_bytes(&self, key: &str, value: &[u8]) -> Result<()>;

    /// Records a claim's lease (`now`: when).
    fn put_lease(&self, resource: &Resource, lease: &Lease, now: i64) -> Result<()>;

    /// The holder's compare-and-set: owner, epoch and a live deadline must all match, or
    /// nothing changes and it returns false (the caller is refused).
    fn update_held_lease(&self, resource: &Resource, request: &HolderRequest<'_>) -> Result<bool>;

    /// Raises the sink's fence without touching its content record (takeover fencing).
    fn raise_fence(&self, resource: &Resource, epoch: i64) -> Result<()>;

    /// Records an accepted write: the fence and the content now on disk.
    fn record_write(&self, resource: &Resource, write: &WriteRecord<'_>) -> Result<()>;

    /// Appends an event to the audit log, keeping about the newest `keep`.
    fn append(&self, event: &Event, keep: i64) -> Result<()>;

    /// Drops all but the newest `keep` events, at most `limit` of them (the oldest
    /// first); returns how many were dropped.
    fn prune(&self, keep: i64, limit: Option<i64>) -> Result<usize>;
}

/// A holder's request to change its own lease: who asks (owner and epoch), when, and
/// what.
#[derive(Debug, Clone, Copy)]
pub struct HolderRequest<'a> {
    pub owner: &'a str,
    pub epoch: i64,
    pub now: i64,
    pub change: HolderChange<'a>,
}

/// An accepted write as the sink records it: the new fence, the content now on disk
/// and who wrote it.
#[derive(Debug, Clone, Copy)]
pub struct WriteRecord<'a> {
    pub fence: i64,
    pub content: &'a Content,
    pub owner: Option<&'a str>,
    /// The blob holding the content, in a store that keeps contents.
    pub blob: Option<i64>,
    /// Written with `--unfenced` (mirrors apply it the same way).
    pub unfenced: bool,
    /// A tree's manifest, kept with the record by a local state file.
    pub manifest: Option<&'a [u8]>,
}

/// A holder's change to its own lease.
#[derive(Debug, Clone, Copy)]
pub enum HolderChange<'a> {
    /// A new deadline `ttl` after the request's `now`.
    Renew {
        ttl: i64,
    },
    Complete {
        result: Option<&'a str>,
    },
    Release,
}

impl<'a> HolderChange<'a> {
    /// The lease row's new state, deadline and result for this change made at `now`
    /// (`None`: left as it is): what every store's compare-and-set writes.
    #[must_use]
    pub fn columns(self, now: i64) -> (&'static str, Option<i64>, Option<&'a str>) {
        match self {
            HolderChange::Renew { ttl } => ("held", Some(now.saturating_add(ttl)), None),
            HolderChange::Complete { result } => ("completed", None, result),
            HolderChange::Release => ("released", None, None),
        }
    }
}

/// Opens the state store at `db` for changes, creating it if `create` and missing;
/// `None` when it does not exist and `create` is false.
pub fn open(db: &Path, busy: Duration, create: bool) -> Result<Option<Box<dyn Store>>> {
    Ok(sqlite::SqliteStore::open(db, busy, create)?.map(|s| Box::new(s) as Box<dyn Store>))
}

/// Opens an existing state store for reading only (`status`, `verify`, `log`); `None`
/// when there is none.
pub fn open_read_only(db: &Path, busy: Duration) -> Result<Option<Box<dyn Store>>> {
    Ok(sqlite::SqliteStore::open_read_only(db, busy)?.map(|s| Box::new(s) as Box<dyn Store>))
}
