//! The SQLite store: leases, the sink's records, the audit log and the bindings, in one
//! SQLite file beside (or named by) the publish root.
//!
//! All SQL lives here, behind the interface of [`super::Store`] and [`super::Txn`].
//! Every state change is one `BEGIN IMMEDIATE` transaction: the write lock is taken
//! before the first read, so the reads that decide a change cannot be split from it by
//! another writer.
//!
//! Durability: WAL with `synchronous=FULL`. FULL fsyncs the WAL at every commit, so an
//! acknowledged write survives power loss. WAL rather than a rollback journal because a
//! writer that holds the WAL write lock cannot get BUSY at COMMIT; in rollback-journal
//! mode COMMIT can be BUSY (readers holding SHARED), and that would become a rollback
//! after the document was already renamed.
//!
//! The WAL outlives the process. Each fencepost process runs one or two transactions, so
//! SQLite's default life cycle (create the WAL, sync its header and its folder, checkpoint
//! and delete it at close) would cost five fsyncs per process on top of the one COMMIT
//! needs. Instead the WAL and its index are kept (`SQLITE_FCNTL_PERSIST_WAL`, no checkpoint
//! at close). A process that opens the state file alone and finds more than
//! `WAL_CHECKPOINT_FRAMES` frames in the WAL checkpoints them; its own commit then starts
//! the WAL over from its first frame. So the next process, which rebuilds the WAL index by
//! reading every valid frame, never reads much, and the WAL file keeps its size: commits
//! overwrite it in place rather than grow it, which makes their fsync cheaper. The folder
//! holding the WAL is fsynced by the process that finds the WAL empty or missing, before
//! anything commits into it; SQLite's own folder sync, whose errors it ignores, is compiled
//! out (`SQLITE_DISABLE_DIRSYNC`, `.cargo/config.toml`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::types::ValueRef;
use rusqlite::{
    Connection, ErrorCode, FileControl, MAIN_DB, OpenFlags, OptionalExtension, TransactionBehavior,
    params,
};

use super::{HolderRequest, ReadTxn, Store, Txn, WriteRecord};
use crate::audit::{Event, EventKind};
use crate::clock::ClockKind;
use crate::error::{Error, Result};
use crate::lease::{Lease, LeaseState};
use crate::resource::Resource;
use crate::sink::{Content, FileId, SinkRecord};

/// `PRAGMA application_id` of a fencepost state file ("FPST").
const APPLICATION_ID: i32 = 0x4650_5354;

/// Numbered migrations; `PRAGMA user_version` is how many have run.
const MIGRATIONS: &[&str] = &[
    // 1: leases, sink records, settings.
    "CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE lease (
        resource   TEXT PRIMARY KEY,
        owner      TEXT NOT NULL,
        epoch      INTEGER NOT NULL CHECK (epoch > 0),
        deadline   INTEGER NOT NULL,
        state      TEXT NOT NULL CHECK (state IN ('held', 'released', 'completed')),
        result     TEXT,
        updated_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE sink (
        resource      TEXT PRIMARY KEY,
        fence         INTEGER NOT NULL CHECK (fence >= 0),
        content_epoch INTEGER,
        sha256        TEXT,
        size          INTEGER,
        written_at    INTEGER,
        dev           INTEGER,
        ino           INTEGER,
        owner         TEXT
    ) WITHOUT ROWID;",
    // 2: the audit log.
    "CREATE TABLE log (
        id         INTEGER PRIMARY KEY,
        at         INTEGER NOT NULL,
        resource   TEXT NOT NULL,
        event      TEXT NOT NULL,
        owner      TEXT,
        epoch      INTEGER,
        prev_owner TEXT,
        prev_epoch INTEGER,
        sha256     TEXT,
        pid        INTEGER NOT NULL,
        host       TEXT NOT NULL,
        detail     TEXT
    );
    CREATE INDEX log_by_resource ON log (resource, id);",
    // 3: several versions per epoch (`write --seq`) and removals (tombstones).
    "ALTER TABLE sink ADD COLUMN seq INTEGER NOT NULL DEFAULT 0 CHECK (seq >= 0);
    ALTER TABLE sink ADD COLUMN removed INTEGER NOT NULL DEFAULT 0 CHECK (removed IN (0, 1));
    ALTER TABLE log ADD COLUMN seq INTEGER;",
    // 4: trees (`write --tree`): the kind of a resource, and its tree's manifest.
    "ALTER TABLE sink ADD COLUMN tree INTEGER NOT NULL DEFAULT 0 CHECK (tree IN (0, 1));
    ALTER TABLE sink ADD COLUMN manifest BLOB;",
];

/// Automatic pruning runs when an event id is a multiple of this.
const PRUNE_EVERY: i64 = 1_000;

/// Most events one automatic prune drops, so a lowered --log-keep never makes a single
/// write hold the lock for seconds (measured: 5 s for 900,000 rows at once). Twice
/// `PRUNE_EVERY`, so an oversized log still shrinks steadily.
const PRUNE_BATCH: i64 = 2 * PRUNE_EVERY;

/// Frames (changed pages) past which a process that opens the state file alone
/// checkpoints the WAL: 128 pages of 4 KiB, about 40 claims and writes (each changes 3 or
/// 4 pages). Each new process reads every frame to rebuild the WAL index, so the WAL is
/// kept short; each checkpoint costs three fsyncs (the WAL, the database file, and the
/// header of the restarted WAL), shared by the commits since the last one. Measured on
/// tmpfs, where an fsync costs nothing, 32, 64 and 128 pages gave the same write time
/// within 0.05 ms; 1000 pages (SQLite's default) cost about 2 ms more per process.
const WAL_CHECKPOINT_FRAMES: u32 = 128;

/// An open SQLite state file.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    busy: Duration,
    /// For a reader of an immutable database file: the lock that keeps writers from
    /// checkpointing into it meanwhile (see `hold_shared`). Dropped after `conn`.
    _frozen: Option<std::fs::File>,
}

impl SqliteStore {
    /// Opens the state file, creating it (and its folder) if `create` and missing.
    /// Returns `Ok(None)` when it does not exist and `create` is false.
    pub fn open(path: &Path, busy: Duration, create: bool) -> Result<Option<SqliteStore>> {
        if !create && !path.exists() {
            return Ok(None);
        }
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        let is_new = create && !path.exists();
        let mut new_dirs = Vec::new();
        if is_new && let Some(dir) = dir {
            // Remember which folders are made here: their parents are fsynced below.
            let mut missing = Some(dir);
            while let Some(d) = missing.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
                new_dirs.push(d.to_path_buf());
                missing = d.parent();
            }
            std::fs::create_dir_all(dir).map_err(Error::io("cannot create folder", dir))?;
        }
        let flags = if create {
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE
        } | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let started = std::time::Instant::now();
        let is_busy = |e: &Error| matches!(e, Error::Busy { .. });
        let mut store = retry_busy(busy, is_busy, |left| {
            let conn =
                Connection::open_with_flags(path, flags).map_err(|e| db_error(path, left, e))?;
            // Set up waiting no longer than the time left; transactions get the whole
            // busy timeout again.
            let mut store = SqliteStore {
                conn,
                path: path.to_path_buf(),
                busy: left,
                _frozen: None,
            };
            store.configure()?;
            store.keep_wal()?;
            store.busy = busy;
            store
                .conn
                .busy_timeout(busy)
                .map_err(|e| db_error(path, busy, e))?;
            Ok(store)
        })
        .map_err(|e| waited_since(e, started))?;
        if is_new {
            // A new state file (and any folder made for it) must survive a power loss as
            // surely as its first commit: fsync the folders that now name them.
            crate::folder::fsync_dir(crate::folder::folder_of(path))?;
            for made in &new_dirs {
                crate::folder::fsync_dir(crate::folder::folder_of(made))?;
            }
        } else if wal_is_new(path) {
            crate::folder::fsync_dir(crate::folder::folder_of(path))?;
        }
        store.checkpoint_if_big()?;
        Ok(Some(store))
    }

    /// Opens an existing state file for reading only (`status`, `verify`, `log`), so a
    /// monitoring user who may read the file but not write it can run them. `None` if
    /// there is no state file, or one that was never initialised.
    pub fn open_read_only(path: &Path, busy: Duration) -> Result<Option<SqliteStore>> {
        if !path.exists() {
            return Ok(None);
        }
        let started = std::time::Instant::now();
        let fail = |e| waited_since(db_error(path, busy, e), started);
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        // As in `open`: an early SQLITE_BUSY (a writer creating the file) is waited out.
        let opened = retry_busy(busy, sqlite_busy, |left| {
            let conn = Connection::open_with_flags(path, flags)?;
            conn.busy_timeout(left)?;
            let found = header(&conn)?;
            conn.busy_timeout(busy)?;
            Ok((conn, found))
        });
        let mut frozen = None;
        let (conn, (app_id, version, tables)) = match opened {
            Ok(done) => done,
            // A WAL file is read through its shared-memory index, which a reader must be
            // able to create when no writer has made it (the folder is not ours to write).
            // With no WAL file, no writer is between a commit and its checkpoint: the
            // database file alone is the whole state, and can be read as immutable. A
            // writer starting meanwhile commits into a new WAL, which this read does not
            // see (it reads the state as of its start); the lock below keeps that writer
            // from checkpointing into the file under the read when it closes.
            Err(e) if read_only_refused(&e) && !wal_path(path).exists() => {
                frozen = Some(hold_shared(path, busy)?);
                let conn = Connection::open_with_flags(
                    immutable_uri(path),
                    flags | OpenFlags::SQLITE_OPEN_URI,
                )
                .map_err(fail)?;
                let h = conn
                    .busy_timeout(busy)
                    .and_then(|()| header(&conn))
                    .map_err(fail)?;
                crate::failpoints::failpoint!("read.frozen");
                (conn, h)
            }
            Err(e) => return Err(fail(e)),
        };
        if app_id == 0 && version == 0 && tables == 0 {
            return Ok(None);
        }
        if app_id != APPLICATION_ID {
            return Err(not_ours(path));
        }
        let known = MIGRATIONS.len() as i64;
        // Written by an older fencepost: upgrade it, as any command would, if we may.
        if version < known
            && let Ok(store) = SqliteStore::open(path, busy, false)
        {
            return Ok(store);
        }
        if version != known {
            let (what, fix) = if version < known {
                (
                    "older",
                    "run any command that changes it (e.g. `fencepost recover`) to upgrade it",
                )
            } else {
                ("newer", "upgrade fencepost")
            };
            return Err(Error::usage_hint(
                format!(
                    "state file {} has schema version {version}, {what} than this fencepost's ({known})",
                    path.display()
                ),
                fix,
            ));
        }
        Ok(Some(SqliteStore {
            conn,
            path: path.to_path_buf(),
            busy,
            _frozen: frozen,
        }))
    }

    /// Keeps the WAL and its index when this connection closes: no checkpoint, no delete
    /// (`checkpoint_if_big` checkpoints instead, when a process opens the file alone).
    fn keep_wal(&self) -> Result<()> {
        let fail = |e| db_error(&self.path, self.busy, e);
        self.conn
            .set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(fail)?;
        self.conn
            .file_control(Some(MAIN_DB), FileControl::PersistWal(&mut 1))
            .map_err(fail)
    }

    /// Checkpoints the WAL when it holds more than [`WAL_CHECKPOINT_FRAMES`] frames and no
    /// other process has the state file open. This process's next commit then restarts
    /// the WAL at its first frame (SQLite does so when every frame is checkpointed and
    /// nobody reads the WAL). Run at open, before any change: an fsync error here fails
    /// the command with nothing changed.
    ///
    /// Alone, because an immutable reader (see `open_read_only`) reads the database file
    /// without SQLite's locks, holding only the SHARED bytes: the check sees it like any
    /// connection, and no checkpoint writes into the file under it. (SQLite's own
    /// checkpoint once the WAL reaches 1000 pages does not look; see docs/crash-safety.md.)
    fn checkpoint_if_big(&mut self) -> Result<()> {
        let Ok(index) = peek(&shm_path(&self.path)) else {
            return Ok(());
        };
        if wal_frames(index) <= WAL_CHECKPOINT_FRAMES {
            return Ok(());
        }
        let probe = peek(&self.path).map_err(Error::io("cannot open", &self.path))?;
        if others_hold_shared(probe, &self.path)? {
            return Ok(());
        }
        let fail = |e| db_error(&self.path, self.busy, e);
        // PASSIVE: never waits; a frame that a reader still needs is left for next time.
        self.conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(0))
            .map_err(fail)?;
        Ok(())
    }

    fn configure(&mut self) -> Result<()> {
        let (path, busy) = (self.path.clone(), self.busy);
        let fail = |e| db_error(&path, busy, e);
        self.conn.busy_timeout(busy).map_err(fail)?;
        let (app_id, version, _) = header(&self.conn).map_err(fail)?;
        if app_id == APPLICATION_ID && version == MIGRATIONS.len() as i64 {
            self.conn
                .pragma_update(None, "synchronous", "FULL")
                .map_err(fail)?;
            return Ok(());
        }
        self.migrate()
    }

    /// Initialises a new file or brings an older one up to date, refusing files that are
    /// not ours. Runs in an IMMEDIATE transaction so two first users cannot both create.
    fn migrate(&mut self) -> Result<()> {
        let (path, busy) = (self.path.clone(), self.busy);
        let fail = |e| db_error(&path, busy, e);
        // Refuse another application's database before writing anything to it, even its
        // journal mode (checked again below, under the lock).
        let (app_id, _, tables) = header(&self.conn).map_err(fail)?;
        if app_id != APPLICATION_ID && (app_id != 0 || tables != 0) {
            return Err(not_ours(&path));
        }
        // journal_mode cannot change inside a transaction; it is persistent once set.
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(fail)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::usage(format!(
                "state file {} cannot use WAL journaling (got {mode}); is it on a network filesystem?",
                path.display()
            )));
        }
        self.conn
            .pragma_update(None, "synchronous", "FULL")
            .map_err(fail)?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(fail)?;
        let (app_id, version, tables) = header(&tx).map_err(fail)?;
        let fresh = app_id == 0 && version == 0 && tables == 0;
        if !fresh && app_id != APPLICATION_ID {
            return Err(not_ours(&path));
        }
        let version = usize::try_from(version).unwrap_or(usize::MAX);
        if version > MIGRATIONS.len() {
            return Err(Error::usage_hint(
                format!(
                    "state file {} has schema version {version}, newer than this fencepost knows ({})",
                    path.display(),
                    MIGRATIONS.len()
                ),
                "upgrade fencepost",
            ));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
            tx.execute_batch(sql).map_err(fail)?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)
                .map_err(fail)?;
        }
        tx.pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(fail)?;
        tx.commit().map_err(fail)
    }
}

impl SqliteStore {
    /// Begins a transaction of `behavior` on the connection.
    fn begin(&mut self, behavior: TransactionBehavior) -> Result<SqliteTxn<'_>> {
        let tx = self
            .conn
            .transaction_with_behavior(behavior)
            .map_err(|e| db_error(&self.path, self.busy, e))?;
        Ok(SqliteTxn {
            tx,
            path: &self.path,
            busy: self.busy,
        })
    }
}

impl Store for SqliteStore {
    fn immediate(&mut self) -> Result<Box<dyn Txn + '_>> {
        Ok(Box::new(self.begin(TransactionBehavior::Immediate)?))
    }

    fn snapshot(&mut self) -> Result<Box<dyn ReadTxn + '_>> {
        Ok(Box::new(self.begin(TransactionBehavior::Deferred)?))
    }
}

/// One transaction on the SQLite state file.
#[derive(Debug)]
pub struct SqliteTxn<'a> {
    tx: rusqlite::Transaction<'a>,
    path: &'a Path,
    busy: Duration,
}

impl SqliteTxn<'_> {
    fn fail(&self) -> impl Fn(rusqlite::Error) -> Error + '_ {
        move |e| db_error(self.path, self.busy, e)
    }
}

impl ReadTxn for SqliteTxn<'_> {
    /// A `meta` value kept as bytes (a path need not be UTF-8).
    fn meta_bytes(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.tx
            .query_row(
                "SELECT value FROM meta WHERE key = ?1",
                [key],
                |r| match r.get_ref(0)? {
                    ValueRef::Blob(b) | ValueRef::Text(b) => Ok(Some(b.to_vec())),
                    _ => Ok(None),
                },
            )
            .optional()
            .map(Option::flatten)
            .map_err(self.fail())
    }

    /// Refuses to read deadlines on the other clock (without binding a fresh file).
    fn check_clock(&self, kind: ClockKind) -> Result<()> {
        match self.clock()? {
            Some(bound) if bound != kind => Err(clock_mismatch(self.path, bound)),
            _ => Ok(()),
        }
    }

    fn lease(&self, resource: &Resource) -> Result<Option<Lease>> {
        self.lease_named(resource.as_str())
    }

    /// The lease stored under `name`, which may no longer pass the name rules (for
    /// reports that must show every row).
    fn lease_named(&self, name: &str) -> Result<Option<Lease>> {
        self.tx
            .query_row(
                "SELECT owner, epoch, deadline, state, result FROM lease WHERE resource = ?1",
                [name],
                lease_row,
            )
            .optional()
            .map_err(self.fail())
    }

    fn sink(&self, resource: &Resource) -> Result<Option<SinkRecord>> {
        self.sink_named(resource.as_str())
    }

    fn manifest(&self, resource: &Resource) -> Result<Option<Vec<u8>>> {
        self.tx
            .query_row(
                "SELECT manifest FROM sink WHERE resource = ?1",
                [resource.as_str()],
                |r| r.get::<_, Option<Vec<u8>>>(0),
            )
            .optional()
            .map(Option::flatten)
            .map_err(self.fail())
    }

    /// The sink record stored under `name`, which may no longer pass the name rules.
    fn sink_named(&self, name: &str) -> Result<Option<SinkRecord>> {
        self.tx
            .query_row(
                "SELECT fence, content_epoch, sha256, size, written_at, dev, ino, seq, removed, tree
                 FROM sink WHERE resource = ?1",
                [name],
                sink_row,
            )
            .optional()
            .map_err(self.fail())
    }

    /// Events, oldest first, optionally for one resource and from a time on.
    fn events(&self, resource: Option<&Resource>, since: Option<i64>) -> Result<Vec<Event>> {
        let mut stmt = self
            .tx
            .prepare(
                "SELECT id, at, resource, event, owner, epoch, prev_owner, prev_epoch, sha256,
                        pid, host, detail, seq
                 FROM log
                 WHERE (?1 IS NULL OR resource = ?1) AND (?2 IS NULL OR at >= ?2)
                 ORDER BY id",
            )
            .map_err(self.fail())?;
        let rows = stmt
            .query_map(params![resource.map(Resource::as_str), since], |r| {
                Ok(Event {
                    id: r.get(0)?,
                    at: r.get(1)?,
                    resource: r.get(2)?,
                    kind: EventKind::parse(&r.get::<_, String>(3)?),
                    owner: r.get(4)?,
                    epoch: r.get(5)?,
                    prev_owner: r.get(6)?,
                    prev_epoch: r.get(7)?,
                    sha256: r.get(8)?,
                    pid: r.get(9)?,
                    host: r.get(10)?,
                    detail: r.get(11)?,
                    seq: r.get(12)?,
                })
            })
            .map_err(self.fail())?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.fail())
    }

    /// Who `claim` issued `epoch` of `resource` to: the current lease's owner, or for an
    /// older epoch the claim recorded in the audit log (None once pruned).
    fn issued_to(&self, resource: &Resource, epoch: i64) -> Result<Option<String>> {
        if let Some(lease) = self.lease(resource)?
            && lease.epoch == epoch
        {
            return Ok(Some(lease.owner));
        }
        self.tx
            .query_row(
                "SELECT owner FROM log
                 WHERE resource = ?1 AND epoch = ?2 AND event IN (?3, ?4)
                 ORDER BY id DESC LIMIT 1",
                params![
                    resource.as_str(),
                    epoch,
                    EventKind::Claim.as_str(),
                    EventKind::Takeover.as_str()
                ],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.fail())
    }

    /// Every resource with a lease or a sink record, sorted by name.
    fn resources(&self) -> Result<Vec<String>> {
        let mut stmt = self
            .tx
            .prepare("SELECT resource FROM lease UNION SELECT resource FROM sink ORDER BY 1")
            .map_err(self.fail())?;
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(self.fail())?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.fail())
    }
}

impl Txn for SqliteTxn<'_> {
    fn commit(self: Box<Self>) -> Result<()> {
        let (path, busy) = (self.path, self.busy);
        crate::failpoints::failpoint!("txn.before_commit");
        self.tx.commit().map_err(|e| db_error(path, busy, e))?;
        crate::failpoints::failpoint!("txn.after_commit");
        Ok(())
    }

    /// Binds the state file to a clock on its first change, and refuses the other one.
    fn bind_clock(&self, kind: ClockKind) -> Result<()> {
        match self.clock()? {
            Some(bound) if bound == kind => Ok(()),
            Some(bound) => Err(clock_mismatch(self.path, bound)),
            None => {
                self.tx
                    .execute(
                        "INSERT INTO meta (key, value) VALUES ('clock', ?1)",
                        [kind.as_str()],
                    )
                    .map_err(self.fail())?;
                Ok(())
            }
        }
    }

    /// Sets a `meta` value kept as bytes.
    fn set_meta_bytes(&self, key: &str, value: &[u8]) -> Result<()> {
        self.tx
            .execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![key, value],
            )
            .map_err(self.fail())?;
        Ok(())
    }

    fn put_lease(&self, resource: &Resource, lease: &Lease, now: i64) -> Result<()> {
        self.tx
            .execute(
                "INSERT INTO lease (resource, owner, epoch, deadline, state, result, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (resource) DO UPDATE SET owner = ?2, epoch = ?3, deadline = ?4,
                     state = ?5, result = ?6, updated_at = ?7",
                params![
                    resource.as_str(),
                    lease.owner,
                    lease.epoch,
                    lease.deadline,
                    lease.state.as_str(),
                    lease.result,
                    now
                ],
            )
            .map_err(self.fail())?;
        Ok(())
    }

    /// The holder's compare-and-set (docs/protocol.md, leases): owner, epoch and a live
    /// deadline must all match, or zero rows change and the caller is refused.
    fn update_held_lease(&self, resource: &Resource, request: &HolderRequest<'_>) -> Result<bool> {
        let (state, deadline, result) = request.change.columns(request.now);
        let rows = self
            .tx
            .execute(
                "UPDATE lease SET state = ?1, deadline = coalesce(?2, deadline),
                     result = coalesce(?3, result), updated_at = ?4
                 WHERE resource = ?5 AND owner = ?6 AND epoch = ?7 AND state = 'held'
                   AND deadline > ?4",
                params![
                    state,
                    deadline,
                    result,
                    request.now,
                    resource.as_str(),
                    request.owner,
                    request.epoch
                ],
            )
            .map_err(self.fail())?;
        Ok(rows == 1)
    }

    /// Raises the sink's fence without touching its content record (takeover fencing).
    fn raise_fence(&self, resource: &Resource, epoch: i64) -> Result<()> {
        self.tx
            .execute(
                "INSERT INTO sink (resource, fence) VALUES (?1, ?2)
                 ON CONFLICT (resource) DO UPDATE SET fence = max(fence, ?2)",
                params![resource.as_str(), epoch],
            )
            .map_err(self.fail())?;
        Ok(())
    }

    /// Records an accepted write: the fence and the content now on disk.
    fn record_write(&self, resource: &Resource, write: &WriteRecord<'_>) -> Result<()> {
        let WriteRecord {
            fence,
            content,
            owner,
            blob: _,
            unfenced: _,
            manifest,
        } = *write;
        let file = content.file;
        self.tx
            .execute(
                "INSERT INTO sink (resource, fence, content_epoch, sha256, size, written_at, dev, ino,
                                   owner, seq, removed, tree, manifest)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
                 ON CONFLICT (resource) DO UPDATE SET fence = ?2, content_epoch = ?3, sha256 = ?4,
                     size = ?5, written_at = ?6, dev = ?7, ino = ?8, owner = ?9, seq = ?10,
                     removed = ?11, tree = ?12, manifest = ?13",
                params![
                    resource.as_str(),
                    fence,
                    content.epoch,
                    content.sha256,
                    content.size as i64,
                    content.written_at,
                    // The `dev` column is no longer written (a device number changes across
                    // remounts); files of older versions may still hold one, unread.
                    Option::<i64>::None,
                    file.map(|f| f.ino as i64),
                    owner,
                    content.seq,
                    content.removed,
                    content.tree,
                    manifest
                ],
            )
            .map_err(self.fail())?;
        Ok(())
    }

    /// Appends an event to the audit log, in this transaction. Every `PRUNE_EVERY`
    /// events, the oldest beyond `keep` are dropped, so the log stays bounded.
    fn append(&self, event: &Event, keep: i64) -> Result<()> {
        self.tx
            .execute(
                "INSERT INTO log (at, resource, event, owner, epoch, prev_owner, prev_epoch,
                                  sha256, pid, host, detail, seq)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![
                    event.at,
                    event.resource,
                    event.kind.as_str(),
                    event.owner,
                    event.epoch,
                    event.prev_owner,
                    event.prev_epoch,
                    event.sha256,
                    event.pid,
                    event.host,
                    event.detail,
                    event.seq
                ],
            )
            .map_err(self.fail())?;
        let id = self.tx.last_insert_rowid();
        if id % PRUNE_EVERY == 0 {
            self.prune(keep, Some(PRUNE_BATCH))?;
        }
        Ok(())
    }

    /// Drops all but the newest `keep` events, at most `limit` of them (the oldest
    /// first); returns how many were dropped.
    fn prune(&self, keep: i64, limit: Option<i64>) -> Result<usize> {
        self.tx
            .execute(
                "DELETE FROM log WHERE id IN (
                     SELECT id FROM log WHERE id <= (SELECT max(id) FROM log) - ?1
                     ORDER BY id LIMIT ?2)",
                params![keep.max(0), limit.unwrap_or(-1)],
            )
            .map_err(self.fail())
    }
}

fn lease_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Lease> {
    let state: String = r.get(3)?;
    Ok(Lease {
        owner: r.get(0)?,
        epoch: r.get(1)?,
        deadline: r.get(2)?,
        state: LeaseState::parse(&state).unwrap_or(LeaseState::Held),
        result: r.get(4)?,
    })
}

fn sink_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SinkRecord> {
    let content_epoch: Option<i64> = r.get(1)?;
    let content = match content_epoch {
        None => None,
        Some(epoch) => {
            let ino: Option<i64> = r.get(6)?;
            let size: i64 = r.get::<_, Option<i64>>(3)?.unwrap_or(0);
            Some(Content {
                epoch,
                seq: r.get(7)?,
                removed: r.get(8)?,
                tree: r.get(9)?,
                sha256: r.get::<_, Option<String>>(2)?.unwrap_or_default(),
                size: size as u64,
                written_at: r.get::<_, Option<i64>>(4)?.unwrap_or(0),
                file: ino.map(|ino| FileId {
                    ino: ino as u64,
                    size: size as u64,
                }),
            })
        }
    };
    Ok(SinkRecord {
        fence: r.get(0)?,
        content,
    })
}

fn clock_mismatch(path: &Path, bound: ClockKind) -> Error {
    match bound {
        ClockKind::Logical => Error::usage_hint(
            format!(
                "state file {} runs on logical ticks, but this call uses the wall clock",
                path.display()
            ),
            "pass --now N (FENCEPOST_NOW), or use another --db for wall-clock leases",
        ),
        ClockKind::Wall => Error::usage_hint(
            format!(
                "state file {} runs on the wall clock, but this call passes --now",
                path.display()
            ),
            "drop --now, or use another --db for logical ticks",
        ),
    }
}

/// Runs `attempt` again while its error is a busy state file (`is_busy`) and the busy
/// timeout has time left; `attempt` is given that time, to wait no longer than it.
///
/// SQLite waits out a busy state file through its busy handler, but some of its lock
/// steps return `SQLITE_BUSY` at once instead. Eight processes making their first claim on a
/// fresh root at the same moment met that about 5 times in 1200 (while one turns the new
/// file to WAL). Retried here, a caller meets `busy` only after really waiting.
fn retry_busy<T, E>(
    busy: Duration,
    is_busy: impl Fn(&E) -> bool,
    mut attempt: impl FnMut(Duration) -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    let started = std::time::Instant::now();
    let mut nap = Duration::from_millis(1);
    loop {
        match attempt(busy.saturating_sub(started.elapsed())) {
            Err(e) if is_busy(&e) && started.elapsed() + nap < busy => {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(20));
            }
            done => return done,
        }
    }
}

/// True for SQLite's busy and locked errors.
fn sqlite_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// A `Busy` error that says how long this call really waited, since `started`.
fn waited_since(e: Error, started: std::time::Instant) -> Error {
    match e {
        Error::Busy { path, .. } => Error::Busy {
            path,
            waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        },
        other => other,
    }
}

/// The bytes SQLite's SHARED lock covers in its unix VFS: 510 bytes from 2^30 + 2.
const SHARED_FIRST: nix::libc::off_t = (1 << 30) + 2;
const SHARED_SIZE: nix::libc::off_t = 510;

/// Takes a read lock on the bytes SQLite's SHARED lock covers, as a reader connection
/// would. While it is held, a fencepost process sees another process on the state file
/// and does not checkpoint (`checkpoint_if_big`), and no other SQLite program gets the
/// EXCLUSIVE lock that its checkpoint at close needs, so the database file does not
/// change under an immutable read. (SQLite's own checkpoint after a commit that grew the
/// WAL past 1000 pages looks at neither; no fencepost transaction but an unbounded
/// `log --prune` is that big.) Retried while a checkpoint holds the lock, up to the busy
/// timeout ([`retry_busy`]).
fn hold_shared(path: &Path, busy: Duration) -> Result<std::fs::File> {
    use nix::fcntl::{FcntlArg, fcntl};
    use nix::libc;
    let file = std::fs::File::open(path).map_err(Error::io("cannot open", path))?;
    let lock = libc::flock {
        l_type: libc::F_RDLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: SHARED_FIRST,
        l_len: SHARED_SIZE,
        l_pid: 0,
    };
    let started = std::time::Instant::now();
    let locked = retry_busy(
        busy,
        |e| matches!(e, Error::Busy { .. }),
        |_| match fcntl(&file, FcntlArg::F_SETLK(&lock)) {
            Ok(_) => Ok(()),
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EACCES) => Err(Error::Busy {
                path: path.to_path_buf(),
                waited_ms: 0,
            }),
            Err(e) => Err(Error::io("cannot lock", path)(e.into())),
        },
    );
    locked.map_err(|e| waited_since(e, started))?;
    Ok(file)
}

/// What a state file says of itself: its application id, schema version and number of
/// schema objects (0, 0, 0 for a file nobody has initialised). The objects are counted
/// only when the id is 0: any other id settles whether the file is ours. Plain pragmas
/// rather than one SELECT over `pragma_application_id` and `pragma_user_version`: those
/// table-valued forms make SQLite declare a virtual table for each, in every process
/// (3% of a claim's instructions, 1.3% of a write's). The reads share one read
/// transaction (a savepoint, which also nests in a caller's transaction): read one by one,
/// a first claim committing the schema in another process between them would give an
/// id of 0 with a count of our tables, which reads as another application's file.
fn header(conn: &Connection) -> rusqlite::Result<(i32, i64, i64)> {
    conn.execute_batch("SAVEPOINT header")?;
    let read = (|| -> rusqlite::Result<(i32, i64, i64)> {
        let app_id: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let tables: i64 = if app_id == 0 {
            conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?
        } else {
            0
        };
        Ok((app_id, version, tables))
    })();
    let released = conn.execute_batch("RELEASE header");
    let read = read?;
    released.map(|()| read)
}

/// SQLite's answer when a read-only connection would have to create a file.
fn read_only_refused(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::ReadOnly | ErrorCode::CannotOpen)
    )
}

/// The WAL file beside a state file.
fn wal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push("-wal");
    PathBuf::from(name)
}

/// How many frames the WAL holds, from the WAL index's header (`mxFrame`, a native-endian
/// u32 at offset 16 of the `-shm` file, in the layout SQLite documents for it): 0 if it
/// cannot be read. Read after this connection's first read, which rebuilt the index if it
/// had to.
fn wal_frames(index: &std::fs::File) -> u32 {
    use std::os::unix::fs::FileExt;
    let mut word = [0u8; 4];
    index
        .read_exact_at(&mut word, 16)
        .map_or(0, |()| u32::from_ne_bytes(word))
}

/// A descriptor of `path` for reading, one per file for the life of the process: opened
/// by the first store that looks at the file, then reused, and never closed. POSIX
/// locks belong to the process, not to a descriptor: closing any descriptor of a file
/// drops every lock this process holds on it, those of every SQLite connection to it
/// included. A store is closed while other connections of the same process (another
/// client, a lease keeper's renewal) stay open on the same file; if its descriptors were
/// closed with it, those connections would lose their locks, and another process would
/// take itself for the only one on the file and reset the WAL index under them.
fn peek(path: &Path) -> std::io::Result<&'static std::fs::File> {
    use std::os::unix::fs::MetadataExt;
    use std::sync::Mutex;
    type Peeked = Vec<((u64, u64), &'static std::fs::File)>;
    static PEEKED: Mutex<Peeked> = Mutex::new(Vec::new());
    let mut peeked = PEEKED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let id = |meta: &std::fs::Metadata| (meta.dev(), meta.ino());
    // A command's process finds the table empty: no lookup, one open.
    if !peeked.is_empty()
        && let Ok(meta) = std::fs::metadata(path)
        && let Some((_, file)) = peeked.iter().find(|(known, _)| *known == id(&meta))
    {
        return Ok(file);
    }
    let file: &'static std::fs::File = Box::leak(Box::new(std::fs::File::open(path)?));
    peeked.push((id(&file.metadata()?), file));
    Ok(file)
}

/// The WAL index beside a state file.
fn shm_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push("-shm");
    PathBuf::from(name)
}

/// Whether another process holds a lock on the bytes SQLite's SHARED lock covers: every
/// other connection to the state file does, and so does an immutable reader
/// (`hold_shared`). This process's own locks are not reported.
fn others_hold_shared(file: &std::fs::File, path: &Path) -> Result<bool> {
    use nix::fcntl::{FcntlArg, fcntl};
    use nix::libc;
    let mut lock = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: SHARED_FIRST,
        l_len: SHARED_SIZE,
        l_pid: 0,
    };
    fcntl(file, FcntlArg::F_GETLK(&mut lock))
        .map_err(|e| Error::io("cannot inspect the locks of", path)(e.into()))?;
    Ok(lock.l_type != libc::F_UNLCK as libc::c_short)
}

/// Whether the WAL beside a state file is empty or missing: then no commit has gone into
/// it since it was created (or truncated), and its folder must be fsynced before one
/// does, so that the WAL's name is as durable as the commit. A WAL with content was
/// checked the same way by the process that first committed into it.
fn wal_is_new(path: &Path) -> bool {
    std::fs::metadata(wal_path(path)).map_or(true, |meta| meta.len() == 0)
}

/// `file:PATH?immutable=1`, with the characters a URI gives meaning to escaped.
fn immutable_uri(path: &Path) -> PathBuf {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let mut uri = b"file:".to_vec();
    for &b in path.as_os_str().as_bytes() {
        match b {
            b'%' | b'?' | b'#' => uri.extend_from_slice(format!("%{b:02x}").as_bytes()),
            _ => uri.push(b),
        }
    }
    uri.extend_from_slice(b"?immutable=1");
    PathBuf::from(std::ffi::OsString::from_vec(uri))
}

fn not_ours(path: &Path) -> Error {
    Error::usage_hint(
        format!("{} is not a fencepost state file", path.display()),
        "point --db at a fencepost state file, or at a path that does not exist yet",
    )
}

/// Maps SQLite's errors to ours: busy (exit 7), a foreign file (exit 2), the rest (1).
fn db_error(path: &Path, busy: Duration, e: rusqlite::Error) -> Error {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Error::Busy {
            path: path.to_path_buf(),
            waited_ms: u64::try_from(busy.as_millis()).unwrap_or(u64::MAX),
        },
        Some(ErrorCode::NotADatabase) => not_ours(path),
        _ => Error::Database {
            path: path.to_path_buf(),
            source: e,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `retry_busy` with a 10 s timeout over attempts that answer `answers` in turn (the
    /// last one again once they run out): what it returns, and how many tries it made.
    fn retried(
        answers: &[std::result::Result<u32, &'static str>],
    ) -> (std::result::Result<u32, &'static str>, usize) {
        let mut tries = 0;
        let done = retry_busy(
            Duration::from_secs(10),
            |e| *e == "busy",
            |_| {
                tries += 1;
                answers[(tries - 1).min(answers.len() - 1)]
            },
        );
        (done, tries)
    }

    #[test]
    fn the_header_tells_a_fresh_file_a_foreign_one_and_ours_apart() {
        let conn = Connection::open_in_memory().expect("an in-memory database");
        assert_eq!(header(&conn).expect("a header"), (0, 0, 0), "fresh");
        conn.execute_batch("CREATE TABLE t (x); CREATE INDEX t_x ON t (x);")
            .expect("a foreign schema");
        assert_eq!(header(&conn).expect("a header"), (0, 0, 2), "foreign");
        conn.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 7;"
        ))
        .expect("our id");
        let (app_id, version, _) = header(&conn).expect("a header");
        assert_eq!((app_id, version), (APPLICATION_ID, 7), "ours");
        conn.execute_batch("PRAGMA application_id = 12345;")
            .expect("another id");
        assert_eq!(header(&conn).expect("a header").0, 12345, "another app");
    }

    /// The SQLite compiled in is the one `.cargo/config.toml` describes: its own folder
    /// sync out (fencepost makes and checks that fsync), the short-process options in,
    /// and none of the extensions every connection would register at its open.
    #[test]
    fn sqlite_is_built_with_the_options_of_cargo_config() {
        let conn = Connection::open_in_memory().expect("an in-memory database");
        let mut stmt = conn.prepare("PRAGMA compile_options").expect("a pragma");
        let options = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .expect("the options")
            .collect::<rusqlite::Result<Vec<_>>>()
            .expect("the options");
        for wanted in [
            "DISABLE_DIRSYNC",
            "DEFAULT_PCACHE_INITSZ=0",
            "DEFAULT_MEMSTATUS=0",
            "DEFAULT_LOOKASIDE=1200,24",
        ] {
            assert!(options.iter().any(|o| o == wanted), "{wanted}: {options:?}");
        }
        for unwanted in [
            "ENABLE_FTS3",
            "ENABLE_FTS5",
            "ENABLE_RTREE",
            "ENABLE_DBSTAT_VTAB",
            "ENABLE_STAT4",
            "ENABLE_COLUMN_METADATA",
            "SOUNDEX",
        ] {
            assert!(
                !options.iter().any(|o| o == unwanted),
                "{unwanted}: {options:?}"
            );
        }
    }

    #[test]
    fn an_early_busy_is_retried_until_the_attempt_succeeds() {
        let busy = Err("busy");
        assert_eq!(retried(&[busy, busy, busy, Ok(7)]), (Ok(7), 4));
    }

    #[test]
    fn other_errors_are_not_retried() {
        assert_eq!(retried(&[Err("broken")]), (Err("broken"), 1));
    }

    #[test]
    fn a_lasting_busy_ends_with_the_timeout_and_each_try_gets_only_the_time_left() {
        let busy = Duration::from_millis(60);
        let mut given = Vec::new();
        let started = std::time::Instant::now();
        let done: std::result::Result<u32, &str> = retry_busy(
            busy,
            |e| *e == "busy",
            |left| {
                given.push(left);
                Err("busy")
            },
        );
        assert_eq!(done, Err("busy"));
        assert!(given.len() > 1, "never retried");
        assert!(given[0] <= busy);
        assert!(
            given.windows(2).all(|w| w[1] < w[0]),
            "the time left must shrink: {given:?}"
        );
        // It gave up only when the next nap would have run past the timeout (naps are at
        // most 20 ms), never at once.
        assert!(started.elapsed() + Duration::from_millis(20) >= busy);
        // No busy timeout: one try.
        let mut tries = 0;
        let _: std::result::Result<u32, &str> = retry_busy(
            Duration::ZERO,
            |_| true,
            |_| {
                tries += 1;
                Err("busy")
            },
        );
        assert_eq!(tries, 1);
    }
}
