//! The PostgreSQL store: the authority several hosts share (`--store URL`).
//!
//! Leases, the sink's records, the audit log and the documents' contents live in tables
//! named `fencepost_*` of one database. Every change is one transaction; the rules need
//! the resource locked from the first read to COMMIT, which [`Txn::lock`] does with an
//! upsert of the resource's row of `fencepost_lock` (it waits for the row, and holds
//! it, as `SELECT ... FOR UPDATE` does). Where SQLite's
//! write lock is a kernel lock a paused process keeps, a PostgreSQL session can lose its
//! lock while its process is paused (an idle timeout, a killed backend, a failover); what
//! keeps a late writer out then is that the place a version becomes current *is* the
//! COMMIT, which a session that lost its lock can no longer make.
//!
//! Contents are immutable blobs (`fencepost_blob`, its bytes in 1 MiB rows of
//! `fencepost_chunk`); a document of one chunk goes in with the fenced transaction that
//! publishes it, a larger one is uploaded before it, one short transaction per chunk
//! with no lock on any resource, each committed without waiting for the disk
//! (`synchronous_commit = off`): the fenced COMMIT that points a resource at the blob
//! waits for the WAL up to itself, which holds every chunk written before it. A crash
//! before that COMMIT leaves at most an orphan blob, which `recover` removes once it is
//! older than its grace period. Blobs are found again by their SHA-256, so publishing
//! bytes the store already holds keeps one copy.
//!
//! Deadlines are on the server's clock (read at connect, and again once a resource's lock
//! is granted, and counted on from there with the local monotonic clock), so hosts'
//! clocks do not matter; `--now` ticks bind the
//! store to logical time as they bind a state file.

use std::cell::{Cell, RefCell};
use std::io::{Read, Write};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use postgres::error::{DbError, SqlState};
use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls, Row};
use sha2::{Digest, Sha256};

pub use super::conninfo::redact;
use super::conninfo::{self, Form};
use super::roles;
use super::tls::{self, Tls};
use super::{Blob, Blobs, HolderRequest, Published, ReadTxn, Store, Txn, WriteRecord};
use crate::audit::{Event, EventKind};
use crate::clock::ClockKind;
use crate::error::{Error, Result};
use crate::lease::{Lease, LeaseState};
use crate::resource::Resource;
use crate::sink::{Content, SinkRecord};

/// A statement's parameters, each with its type. Sent so, a statement needs no prepared
/// statement on the server: it is parsed, bound and run in one round trip, and nothing
/// named outlives it there, which a pooler that hands each transaction to any server
/// session (PgBouncer in transaction mode) needs.
type Params<'a> = &'a [(&'a (dyn ToSql + Sync), Type)];

/// A value fencepost passes as a statement parameter, and its PostgreSQL type.
trait Param: ToSql + Sync {
    const TYPE: Type;
}

impl Param for i64 {
    const TYPE: Type = Type::INT8;
}
impl Param for i32 {
    const TYPE: Type = Type::INT4;
}
impl Param for bool {
    const TYPE: Type = Type::BOOL;
}
impl Param for &str {
    const TYPE: Type = Type::TEXT;
}
impl Param for String {
    const TYPE: Type = Type::TEXT;
}
impl Param for &[u8] {
    const TYPE: Type = Type::BYTEA;
}
impl Param for Vec<&str> {
    const TYPE: Type = Type::TEXT_ARRAY;
}
impl Param for &[String] {
    const TYPE: Type = Type::TEXT_ARRAY;
}
impl<T: Param> Param for Option<T> {
    const TYPE: Type = T::TYPE;
}

/// One parameter with its type.
fn typed<T: Param>(value: &T) -> (&(dyn ToSql + Sync), Type) {
    (value, T::TYPE)
}

/// A statement's parameters: `args![a, b]` is `a` and `b` with their types ([`Params`]).
macro_rules! args {
    ($($value:expr),* $(,)?) => {
        &[$(typed(&$value)),*]
    };
}

/// Schema versions this build knows; `fencepost_meta.schema` is how many have run.
const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE fencepost_meta (
        key   text PRIMARY KEY,
        value bytea NOT NULL
    );
    CREATE TABLE fencepost_lock (
        resource text PRIMARY KEY
    );
    CREATE TABLE fencepost_lease (
        resource   text PRIMARY KEY,
        owner      text NOT NULL,
        epoch      bigint NOT NULL CHECK (epoch > 0),
        deadline   bigint NOT NULL,
        state      text NOT NULL CHECK (state IN ('held', 'released', 'completed')),
        result     text,
        updated_at bigint NOT NULL
    );
    CREATE TABLE fencepost_blob (
        id         bigserial PRIMARY KEY,
        sha256     text,
        size       bigint,
        complete   boolean NOT NULL DEFAULT false,
        created_at timestamptz NOT NULL DEFAULT now(),
        -- When a resource last stopped pointing at it: `recover` keeps it for its grace
        -- period from then, for readers that learnt of it just before.
        released_at timestamptz
    );
    CREATE INDEX fencepost_blob_by_hash ON fencepost_blob (sha256) WHERE complete;
    CREATE TABLE fencepost_chunk (
        blob bigint NOT NULL REFERENCES fencepost_blob (id) ON DELETE CASCADE,
        seq  integer NOT NULL,
        data bytea NOT NULL,
        PRIMARY KEY (blob, seq)
    );
    ALTER TABLE fencepost_chunk ALTER COLUMN data SET STORAGE EXTERNAL;
    CREATE TABLE fencepost_sink (
        resource      text PRIMARY KEY,
        fence         bigint NOT NULL CHECK (fence >= 0),
        content_epoch bigint,
        sha256        text,
        size          bigint,
        written_at    bigint,
        owner         text,
        blob          bigint REFERENCES fencepost_blob (id),
        unfenced      boolean NOT NULL DEFAULT false
    );
    CREATE TABLE fencepost_log (
        id         bigserial PRIMARY KEY,
        at         bigint NOT NULL,
        resource   text NOT NULL,
        event      text NOT NULL,
        owner      text,
        epoch      bigint,
        prev_owner text,
        prev_epoch bigint,
        sha256     text,
        pid        bigint NOT NULL,
        host       text NOT NULL,
        detail     text
    );
    CREATE INDEX fencepost_log_by_resource ON fencepost_log (resource, id);
",
    "
    -- The highest epoch each mirror root holds of each resource, as the mirror reported
    -- it: a store that lost history (a failover without synchronous replication, a
    -- restore) issues its next epoch above these, never one a mirror has seen.
    CREATE TABLE fencepost_seen (
        resource text NOT NULL,
        mirror   text NOT NULL,
        epoch    bigint NOT NULL,
        at       timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (resource, mirror)
    );
",
    "
    -- Several versions per epoch (`write --seq`) and removals (tombstones).
    -- IF NOT EXISTS: a schema whose recorded version was set back by hand runs it again.
    ALTER TABLE fencepost_sink ADD COLUMN IF NOT EXISTS seq bigint NOT NULL DEFAULT 0
        CHECK (seq >= 0);
    ALTER TABLE fencepost_sink ADD COLUMN IF NOT EXISTS removed boolean NOT NULL DEFAULT false;
    ALTER TABLE fencepost_log ADD COLUMN IF NOT EXISTS seq bigint;
",
    "
    -- Trees (`write --tree`): the kind of a resource, and the content blobs each tree's
    -- manifest (a blob itself, which the sink points at) names, so that they are kept
    -- while it is.
    ALTER TABLE fencepost_sink ADD COLUMN IF NOT EXISTS tree boolean NOT NULL DEFAULT false;
    CREATE TABLE IF NOT EXISTS fencepost_tree_blob (
        manifest bigint NOT NULL REFERENCES fencepost_blob (id) ON DELETE CASCADE,
        sha256   text NOT NULL,
        blob     bigint NOT NULL REFERENCES fencepost_blob (id),
        PRIMARY KEY (manifest, sha256)
    );
    CREATE INDEX IF NOT EXISTS fencepost_tree_blob_by_blob ON fencepost_tree_blob (blob);
",
];

/// The first schema version with `fencepost_seen`.
const SEEN_SCHEMA: usize = 2;

/// The first schema version with versions' seqs and removals.
const VERSIONS_SCHEMA: usize = 3;

/// The first schema version with trees.
const TREES_SCHEMA: usize = 4;

/// The tables a fencepost store consists of; one of them in a database without
/// `fencepost_meta` is someone else's.
const TABLES: &[&str] = &[
    "fencepost_meta",
    "fencepost_lock",
    "fencepost_lease",
    "fencepost_blob",
    "fencepost_chunk",
    "fencepost_sink",
    "fencepost_log",
    "fencepost_seen",
    "fencepost_tree_blob",
];

/// The channel a publishing transaction notifies, with the resource's name as payload.
pub const CHANNEL: &str = "fencepost_published";

/// Bytes per chunk row: big enough that a 1 GiB document is about a thousand
/// statements, small enough that a chunk in flight costs little memory.
const CHUNK: usize = super::SMALL_BLOB;

/// How long a session may sit idle inside a transaction before the server ends it (and
/// with it the transaction and its locks), unless the URL's `options` set another, or
/// the server a shorter one for the session (a role's or database's setting, a pooler's
/// `connect_query`): a paused writer then blocks the resource for at most this long.
/// Liveness only: a writer whose session ended cannot COMMIT, so it cannot publish.
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(30);

/// Automatic pruning runs when an event id is a multiple of this.
const PRUNE_EVERY: i64 = 1_000;

/// Drops the log's oldest events but the newest `$1`, at most `$2` of them.
const PRUNE: &str = "DELETE FROM fencepost_log WHERE id IN (
     SELECT id FROM fencepost_log
     WHERE id <= (SELECT max(id) FROM fencepost_log) - $1
     ORDER BY id LIMIT $2)";

/// Key of the advisory lock that serialises creating the schema.
const SCHEMA_LOCK: i64 = 0x4650_5354;

/// An open connection to a PostgreSQL store.
pub struct PgStore {
    client: Client,
    /// The URL as shown in messages (no password).
    shown: String,
    busy: Duration,
    /// The store's identity, made with its schema: a mirror root is bound to it.
    id: String,
    /// The server's clock at connect, in ms since the epoch, and when that was here.
    server_clock: (i64, Instant),
    /// What each transaction sets first (`SET LOCAL`, see [`connect`]), the durability
    /// of a publish among it where the server's default is lower.
    local: String,
    /// How many of [`MIGRATIONS`] the store has run (an older schema this session could
    /// not upgrade lacks the later tables).
    schema: usize,
    /// The URL, to ask a new session what became of a COMMIT whose session broke.
    url: StoreUrl,
    /// How long a COMMIT may wait before it is cancelled (`--commit-timeout`).
    commit_timeout: Duration,
    /// The warnings the server sent on this session.
    notices: Notices,
    /// What cancels a COMMIT that waits past `commit_timeout`.
    timer: CommitTimer,
    /// The session's role, and whether it holds what every change needs
    /// ([`roles::CHANGE`]): a change it cannot make is refused before it starts, naming
    /// the privileges it lacks.
    role: String,
    may_change: bool,
}

/// The warnings and notices a session received, kept until a statement looks at them:
/// the one that matters is the server's warning that a COMMIT's wait for its
/// synchronous standbys was cancelled, which comes as a notice, not as an error.
#[derive(Clone, Default)]
struct Notices(Arc<Mutex<Vec<DbError>>>);

impl Notices {
    fn push(&self, notice: DbError) {
        if let Ok(mut kept) = self.0.lock() {
            kept.push(notice);
        }
    }

    fn take(&self) -> Vec<DbError> {
        self.0
            .lock()
            .map(|mut kept| std::mem::take(&mut *kept))
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("store", &self.shown)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// A `--store` connection string, checked: the form a user typed (for connecting) and
/// the form shown in messages (see [`redact`]).
#[derive(Clone)]
pub struct StoreUrl {
    pub url: String,
    pub shown: String,
    /// Its TLS (`sslmode` and the files), read once: the driver is handed the string
    /// without those parameters.
    pub(crate) tls: Tls,
}

/// Shows the masked form only: the other holds the password.
impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreUrl")
            .field("shown", &self.shown)
            .finish_non_exhaustive()
    }
}

/// What `--store` takes, for hints.
const STORE_FORMS: &str = "pass postgresql://USER@HOST/DB, postgresql:///DB?host=/run/postgresql \
                           for a Unix socket, or key=value: host=HOST dbname=DB user=USER";

impl StoreUrl {
    /// Checks a `--store` value: a `postgres://` or `postgresql://` URL, or a key=value
    /// connection string, that the driver parses and that names a server.
    pub fn parse(text: &str) -> Result<StoreUrl> {
        let shown = redact(text);
        let keywords = match Form::of(text) {
            Form::Url("postgres" | "postgresql") => false,
            Form::Keywords => true,
            Form::Url(_) | Form::Other => {
                return Err(Error::usage_hint(
                    format!("--store {shown}: not a PostgreSQL URL"),
                    format!(
                        "{STORE_FORMS}; leave --store (FENCEPOST_STORE) unset for the local \
                         state file"
                    ),
                ));
            }
        };
        if keywords && let Err(wrong) = conninfo::check_keywords(text) {
            return Err(Error::usage_hint(
                format!(
                    "--store {shown}: not a key=value connection string: {} at byte {}",
                    wrong.why, wrong.at
                ),
                format!("{STORE_FORMS}; quote a value with white space in it: key='a b'"),
            ));
        }
        // A URL's `?host=a,b`, a list as libpq reads it, is what the driver connects with
        // as `?host=a&host=b`.
        let taken = conninfo::one_host_each(text);
        let (for_driver, tls_params) = tls::take(&taken);
        let mut config = match for_driver.parse::<postgres::Config>() {
            Ok(config) => config,
            // The driver's own text is "invalid connection string"; what is wrong is its
            // cause's (naming the parameter, never its value).
            Err(e) => {
                let cause = root_cause(&e);
                let why = if cause == e.to_string() {
                    cause
                } else {
                    format!("{e}: {cause}")
                };
                return Err(Error::usage(format!("--store {shown}: {why}")));
            }
        };
        if let Err(why) = from_environment(&mut config, |name| std::env::var_os(name)) {
            return Err(Error::usage(format!("--store {shown}: {why}")));
        }
        // The driver takes no default server (libpq's socket folder): a string without
        // one, and no PGHOST, can never connect, which is bad input, not an unreachable
        // server.
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            let what = if keywords {
                "names no server (no host= or hostaddr=)"
            } else {
                "names no server (no host in the URL, and no host= parameter)"
            };
            return Err(Error::usage_hint(
                format!("--store {shown}: {what}"),
                format!("{STORE_FORMS}; or set PGHOST"),
            ));
        }
        // A Unix socket never has TLS: a string of sockets alone reads no TLS file.
        let sockets_only = config.get_hostaddrs().is_empty()
            && config
                .get_hosts()
                .iter()
                .all(|h| matches!(h, postgres::config::Host::Unix(_)));
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let tls = tls::settings(
            &tls_params,
            |name| std::env::var_os(name),
            sockets_only,
            home.as_deref(),
        )
        .map_err(|why| Error::usage(format!("--store {shown}: {why}")))?;
        Ok(StoreUrl {
            url: taken.into_owned(),
            shown,
            tls,
        })
    }
}

/// The libpq environment variables a store reads, with what each gives, for the manual
/// page. Every `PG*` name read under `src/store/` is here: a test of the suite reads the
/// sources and checks each against the page.
pub const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "PGHOST",
        "host names or socket folders, comma separated, when the store string names no host",
    ),
    (
        "PGPORT",
        "one port, or one per host, when the string names none",
    ),
    ("PGUSER", "the user, when the string names none"),
    ("PGDATABASE", "the database, when the string names none"),
    (
        "PGPASSWORD",
        "the password, when the string has none (never shown in a message)",
    ),
    (
        "PGPASSFILE",
        "the password file read next (default ~/.pgpass)",
    ),
    ("PGAPPNAME", "the application_name the server shows"),
    (
        "PGSSLMODE",
        "sslmode: disable, prefer (the default), require, verify-ca, verify-full",
    ),
    (
        "PGSSLROOTCERT",
        "sslrootcert: the CA certificates (a file, or system)",
    ),
    ("PGSSLCERT", "sslcert: the client certificate"),
    ("PGSSLKEY", "sslkey: the client certificate's key"),
];

/// Fills in what a connection string leaves out from the libpq environment variables
/// (`var` reads one), as libpq does: `PGHOST` (host names or socket folders, comma
/// separated), `PGPORT` (one port, or one per host), `PGUSER`, `PGDATABASE`,
/// `PGPASSWORD` and `PGAPPNAME`. What the string says always wins; a variable unset or
/// empty says nothing. `PGHOST` is read only when the string names no host and no
/// `hostaddr` (the driver pairs the two lists one to one). The error names the variable
/// and its value, but for `PGPASSWORD`, whose value it never holds.
fn from_environment(
    config: &mut postgres::Config,
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> std::result::Result<(), String> {
    use std::os::unix::ffi::OsStringExt;
    let said = |name: &str| var(name).filter(|v| !v.is_empty());
    let text = |name: &str| match said(name) {
        None => Ok(None),
        Some(v) => v
            .into_string()
            .map(Some)
            .map_err(|_| format!("{name} is not valid UTF-8")),
    };
    if config.get_hosts().is_empty()
        && config.get_hostaddrs().is_empty()
        && let Some(hosts) = text("PGHOST")?
    {
        for host in hosts.split(',') {
            if host.is_empty() {
                return Err(format!(
                    "PGHOST={hosts}: an empty host in the list (fencepost knows no default \
                     socket folder: name it)"
                ));
            }
            config.host(host);
        }
    }
    if config.get_ports().is_empty()
        && let Some(ports) = text("PGPORT")?
    {
        for port in ports.split(',') {
            // An empty entry is the default port, as in libpq.
            let port = if port.is_empty() {
                Ok(5432)
            } else {
                port.parse::<u16>()
            };
            match port {
                Ok(port) if port != 0 => config.port(port),
                _ => return Err(format!("PGPORT={ports}: not a port number (1 to 65535)")),
            };
        }
    }
    if config.get_user().is_none()
        && let Some(user) = text("PGUSER")?
    {
        config.user(&user);
    }
    if config.get_dbname().is_none()
        && let Some(dbname) = text("PGDATABASE")?
    {
        config.dbname(&dbname);
    }
    if config.get_password().is_none()
        && let Some(password) = said("PGPASSWORD")
    {
        config.password(password.into_vec());
    }
    if config.get_application_name().is_none()
        && let Some(name) = text("PGAPPNAME")?
    {
        config.application_name(&name);
    }
    if config.get_password().is_none()
        && let Some(password) = password_file(config, &var)
    {
        config.password(password);
    }
    Ok(())
}

/// The password the libpq password file (`PGPASSFILE`, else `~/.pgpass`) gives the
/// connection `config` names (its first host and port, its database and user, with
/// libpq's defaults: port 5432, the user running this, a database named after the user);
/// a socket folder also matches an entry for `localhost`. A file that is not a plain file,
/// or that its group or others may read or write, is not read, as libpq does not.
fn password_file(
    config: &postgres::Config,
    var: &impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let path = match var("PGPASSFILE").filter(|v| !v.is_empty()) {
        Some(path) => std::path::PathBuf::from(path),
        None => std::path::PathBuf::from(var("HOME")?).join(".pgpass"),
    };
    let meta = std::fs::metadata(&path).ok()?;
    if !meta.is_file() || meta.permissions().mode() & 0o077 != 0 {
        return None;
    }
    let contents = std::fs::read_to_string(&path).ok()?;
    let (host, socket) = match config.get_hosts().first()? {
        postgres::config::Host::Tcp(name) => (name.clone(), false),
        postgres::config::Host::Unix(folder) => (folder.display().to_string(), true),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = match config.get_user() {
        Some(user) => user.to_string(),
        None => var("USER")?.into_string().ok()?,
    };
    let database = config.get_dbname().unwrap_or(&user).to_string();
    let find = |host: &str| conninfo::pgpass_password(&contents, (host, &port, &database, &user));
    find(&host).or_else(|| if socket { find("localhost") } else { None })
}

impl PgStore {
    /// Connects to the store at `url`, creating its schema if `create` and missing.
    /// `None` when the database has no fencepost schema and `create` is false.
    /// With a `deadline`, every wait on the network ends by then (see [`connect`]); a
    /// COMMIT that waits longer than `commit_timeout` is cancelled.
    pub fn open(
        url: &StoreUrl,
        busy: Duration,
        deadline: Option<Instant>,
        commit_timeout: Duration,
        create: bool,
    ) -> Result<Option<PgStore>> {
        let notices = Notices::default();
        let Session {
            mut client,
            mut settings,
        } = connect(url, busy, deadline, &notices)?;
        let local = set_local(&settings);
        // Started here, so that its start overlaps the round trips that follow.
        let timer = CommitTimer::start(client.cancel_token(), url.tls.connector.clone());
        let header = read_header(&mut client, &url.shown, busy)?;
        let header = match header {
            Some(h) => h,
            None if !create => return Ok(None),
            None => {
                create_schema(&mut client, &url.shown, busy, &local)?;
                // Its COMMIT is the first one: one the standbys did not confirm is said.
                if let Some(warning) = notices.take().into_iter().find(sync_wait_cancelled) {
                    return Err(not_confirmed(&url.shown, &warning, None));
                }
                read_header(&mut client, &url.shown, busy)?.ok_or(Error::Internal(
                    "a store's schema was made but cannot be read",
                ))?
            }
        };
        let here = Instant::now();
        let schema = upgrade(&mut client, &url.shown, busy, header.schema, &local)?;
        // An acknowledged write must be on disk (and on synchronous standbys) at COMMIT:
        // a server or role that does not wait is overruled for fencepost's sessions; one
        // that waits longer (remote_apply) is kept.
        let durable = match header.synchronous_commit.as_str() {
            "remote_write" => "remote_write",
            "remote_apply" => "remote_apply",
            _ => "on",
        };
        if durable != header.synchronous_commit {
            settings.push(("synchronous_commit", "on".to_string()));
        }
        // A shorter idle limit the session has already is kept.
        if header
            .idle_limit
            .is_some_and(|limit| limit < IDLE_IN_TRANSACTION)
        {
            settings.retain(|(name, _)| *name != "idle_in_transaction_session_timeout");
        }
        let local = set_local(&settings);
        let (id, server_now) = (header.id, header.now);
        let (role, may_change) = (header.role, header.may_change);
        Ok(Some(PgStore {
            local,
            client,
            shown: url.shown.clone(),
            busy,
            id,
            server_clock: (server_now, here),
            schema,
            url: url.clone(),
            commit_timeout,
            notices,
            timer,
            role,
            may_change,
        }))
    }

    /// Makes the store's schema if it has none (`fencepost store init`, by a role that
    /// may create tables, once); an older one is upgraded. Refuses, saying why, when this
    /// role may not make or upgrade it.
    pub fn init(url: &StoreUrl, busy: Duration, commit_timeout: Duration) -> Result<Initialized> {
        let (store, made) = match PgStore::open(url, busy, None, commit_timeout, false)? {
            Some(store) => (store, false),
            None => (
                PgStore::open(url, busy, None, commit_timeout, true)?.ok_or(Error::Internal(
                    "a store opened to be created had no schema",
                ))?,
                true,
            ),
        };
        if store.schema < MIGRATIONS.len() {
            return Err(Error::usage_hint(
                format!(
                    "the store {} has schema version {} and the role {} may not upgrade it to \
                     version {}",
                    url.shown,
                    store.schema,
                    store.role,
                    MIGRATIONS.len()
                ),
                "run `fencepost store init` as the owner of its tables",
            ));
        }
        Ok(Initialized {
            made,
            schema: store.schema,
        })
    }

    /// Refuses a change by a role that lacks a privilege of a writer on one of
    /// `objects` (see [`roles::CHANGE`]). What the role lacks is asked for only when the
    /// connect's answer does not already say it holds them: reading every object's
    /// privileges costs the server more than the rest of a connect.
    fn may(&mut self, objects: &[&str]) -> Result<()> {
        if self.may_change && objects == roles::CHANGE {
            return Ok(());
        }
        let lacking: Vec<String> = self
            .client
            .query_typed_one(&format!("SELECT {}", roles::lacking_sql()), args![])
            .map_err(|e| pg_error(&self.shown, self.busy, e))?
            .get(0);
        let Some(first) = roles::lacks_on(&lacking, objects) else {
            return Ok(());
        };
        Err(Error::usage_hint(
            format!(
                "the role {} may not change the store {}: it lacks {}",
                self.role,
                self.shown,
                roles::lacking_words(&lacking, first)
            ),
            roles::grants_hint(&self.role),
        ))
    }
}

/// What `store init` found or did.
#[derive(Debug, Clone, Copy)]
pub struct Initialized {
    /// It made the schema (else the schema was there).
    pub made: bool,
    /// The schema version the store has now.
    pub schema: usize,
}

/// Opens a session, and says the settings each of its transactions starts with
/// ([`Session::settings`]): the lock timeout is the busy timeout, an idle transaction ends
/// after [`IDLE_IN_TRANSACTION`], and the server gives up on a client it cannot reach
/// after [`SERVER_TCP`] (so a partitioned client's session, and the row locks it holds,
/// do not outlast its lease by long). They are set per transaction (`SET LOCAL`, sent
/// with its BEGIN in one message), not for the session: behind a pooler in transaction
/// mode, the next transaction may run on another server session, and a session setting
/// would stay behind on this one for another client. A setting the URL's `options` give
/// is theirs: fencepost leaves it out.
///
/// With a `deadline` (`run`'s renewals), every wait is bounded by the time left until
/// it: the connect, each statement (`statement_timeout`), each lock (`lock_timeout`),
/// and data left unacknowledged on the socket (TCP user timeout). The server's warnings
/// go to `notices`.
fn connect(
    url: &StoreUrl,
    busy: Duration,
    deadline: Option<Instant>,
    notices: &Notices,
) -> Result<Session> {
    let mut config: postgres::Config = tls::take(&url.url)
        .0
        .parse()
        .map_err(|e| Error::usage(format!("--store {}: {e}", url.shown)))?;
    from_environment(&mut config, |name| std::env::var_os(name))
        .map_err(|why| Error::usage(format!("--store {}: {why}", url.shown)))?;
    config.ssl_mode(url.tls.driver_mode());
    // The driver has no name to give TLS for a server named by `hostaddr` alone (and then
    // refuses): the address is that name, which `verify-full` checks the certificate for.
    if url.tls.connector.is_some() && config.get_hosts().is_empty() {
        for addr in config.get_hostaddrs().to_vec() {
            config.host(&addr.to_string());
        }
    }
    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    if left.is_some_and(|l| l.is_zero()) {
        return Err(Error::Remote {
            message: format!("cannot reach the store {} before the deadline", url.shown),
            hint: None,
        });
    }
    // PostgreSQL reads 0 as "wait forever"; fencepost's 0 means "do not wait".
    let lock_ms = left.map_or(busy, |l| busy.min(l)).as_millis().max(1);
    let mut settings = vec![
        ("lock_timeout", lock_ms.to_string()),
        (
            "idle_in_transaction_session_timeout",
            IDLE_IN_TRANSACTION.as_millis().to_string(),
        ),
    ];
    settings.extend(SERVER_TCP.iter().map(|(n, v)| (*n, (*v).to_string())));
    if let Some(left) = left {
        settings.push(("statement_timeout", left.as_millis().max(1).to_string()));
    }
    let theirs = config.get_options().map(option_names).unwrap_or_default();
    settings.retain(|(name, _)| !theirs.iter().any(|t| t == name));
    if config.get_application_name().is_none() {
        config.application_name("fencepost");
    }
    let bounded = |d: Duration| left.map_or(d, |l| d.min(l));
    let connect_timeout = config
        .get_connect_timeout()
        .copied()
        .unwrap_or(CONNECT_TIMEOUT);
    config.connect_timeout(bounded(connect_timeout).max(Duration::from_millis(1)));
    // A `mirror --follow` across a network learns of a dead peer in about a minute, not
    // the two hours of the system's default; data the server does not acknowledge breaks
    // the session after TCP_USER_TIMEOUT (at most the time left) instead of the
    // system's retransmissions (about 15 minutes).
    config.keepalives_idle(Duration::from_secs(30));
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(Duration::from_secs(10));
    }
    if config.get_keepalives_retries().is_none() {
        config.keepalives_retries(3);
    }
    let user_timeout = config
        .get_tcp_user_timeout()
        .copied()
        .filter(|t| !t.is_zero())
        .unwrap_or(TCP_USER_TIMEOUT);
    config.tcp_user_timeout(bounded(user_timeout).max(Duration::from_millis(1)));
    let kept = notices.clone();
    config.notice_callback(move |notice| kept.push(notice));
    let connected = match &url.tls.connector {
        Some(tls) => config.connect(tls.clone()),
        None => config.connect(NoTls),
    };
    let client = connected.map_err(|e| unreachable(url, &e))?;
    Ok(Session { client, settings })
}

/// A new session, and what its transactions set first.
struct Session {
    client: Client,
    /// Fencepost's settings the URL's `options` leave to it (see [`connect`]), by name.
    settings: Vec<(&'static str, String)>,
}

/// `SET LOCAL` statements for `settings`, `; `-separated.
fn set_local(settings: &[(&str, String)]) -> String {
    settings
        .iter()
        .map(|(name, value)| format!("SET LOCAL {name} = '{value}'"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The settings an `options` string (`-c name=value`, `--name=value`) gives, by name
/// (a dash in a name read as `_`, as the server does).
fn option_names(options: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut words = options.split_whitespace();
    while let Some(word) = words.next() {
        let setting = match word {
            "-c" => words.next(),
            _ => word.strip_prefix("--").or_else(|| word.strip_prefix("-c")),
        };
        if let Some((name, _)) = setting.and_then(|s| s.split_once('=')) {
            names.push(name.replace('-', "_"));
        }
    }
    names
}

/// A failed connect's error: TLS failures say whose side lacks what; a server that takes
/// only TLS from here, asked for plain text, says so.
fn unreachable(url: &StoreUrl, e: &postgres::Error) -> Error {
    if let Some((what, hint)) = tls::failure(&url.tls, e) {
        return Error::Remote {
            message: format!("cannot reach the store {}: {what}", url.shown),
            hint: Some(hint),
        };
    }
    let cause = root_cause(e);
    let hint = if cause.contains("no encryption") && url.tls.connector.is_none() {
        format!(
            "the server takes only TLS connections from this host, and this one is plain \
             text (sslmode={}): ask for sslmode=require or verify-full; nothing was changed",
            url.tls.mode.name()
        )
    } else {
        "is the server up, and the URL's host, port, database and user right? \
         nothing was changed"
            .to_string()
    };
    Error::Remote {
        message: format!("cannot reach the store {}: {cause}", url.shown),
        hint: Some(hint),
    }
}

/// How long a connect may take, unless the URL says (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long data sent to the server may go unacknowledged before the session is given
/// up, unless the URL says (`tcp_user_timeout`).
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);

/// The server's side of a session over TCP: keepalive probes after 5 s of silence, every
/// 2 s, 3 unanswered end it; replies unacknowledged for 10 s end it. A client cut off
/// inside a transaction so loses its session (and its locks) within about 11 s. The
/// server ignores them on a Unix socket; the URL's `options` override them.
const SERVER_TCP: [(&str, &str); 4] = [
    ("tcp_keepalives_idle", "5"),
    ("tcp_keepalives_interval", "2"),
    ("tcp_keepalives_count", "3"),
    ("tcp_user_timeout", "10000"),
];

/// The innermost error's text: the crate's outer text for a failed connect ("error
/// connecting to server") says less than its source ("Connection refused").
fn root_cause(e: &postgres::Error) -> String {
    use std::error::Error as _;
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text = s.to_string();
        source = s.source();
    }
    text
}

/// What a store says of itself at connect.
struct Header {
    /// Its identity, made with its schema.
    id: String,
    /// The server's clock, ms since the Unix epoch.
    now: i64,
    /// The session's `synchronous_commit`.
    synchronous_commit: String,
    /// The session's `idle_in_transaction_session_timeout` (`None`: no limit).
    idle_limit: Option<Duration>,
    /// How many of [`MIGRATIONS`] have run.
    schema: usize,
    /// The session's role (`current_user`).
    role: String,
    /// The role holds what every change needs (see [`roles::holds_sql`]).
    may_change: bool,
}

/// The store's identity and the server's clock, or `None` for a database without a
/// fencepost schema. Refuses a schema that is not fencepost's, or newer than this build.
fn read_header(client: &mut Client, shown: &str, busy: Duration) -> Result<Option<Header>> {
    read_header_once(client, shown, busy, true)
}

/// [`read_header`]; with `again`, a database that had no `fencepost_meta` when it was
/// read, but has one of our tables when it is looked at next, is read once more: another
/// process's first claim may have committed the schema in between (all its tables in one
/// transaction), and it is not someone else's then.
fn read_header_once(
    client: &mut Client,
    shown: &str,
    busy: Duration,
    again: bool,
) -> Result<Option<Header>> {
    // Whether the role may change the store is read in the same round trip (computed
    // once, not per row).
    let rows = client.query_typed(
        &format!(
            "SELECT key, value, (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
                    current_setting('synchronous_commit'),
                    (extract(epoch FROM current_setting('idle_in_transaction_session_timeout')
                        ::interval) * 1000)::bigint,
                    current_user::text, {}
             FROM fencepost_meta WHERE key IN ('application', 'schema', 'id')",
            roles::holds_sql(roles::CHANGE)
        ),
        args![],
    );
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => {
            if again {
                crate::failpoints::failpoint!("store.no_schema_seen");
            }
            return match refuse_foreign_tables(client, shown, busy) {
                Err(Error::Usage { .. }) if again => read_header_once(client, shown, busy, false),
                checked => checked.map(|()| None),
            };
        }
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_COLUMN) => {
            return Err(foreign(shown, "fencepost_meta"));
        }
        // Only reads: what the role lacks on a table here is SELECT.
        Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
            let table = server_words(&e).contains(" for table ");
            return Err(permission_denied(shown, &e, table.then_some("SELECT")));
        }
        Err(e) => return Err(pg_error(shown, busy, e)),
    };
    // Read with `try_get`: a table of that name with other column types is someone else's.
    let value = |key: &str| {
        rows.iter()
            .find(|r| r.try_get::<_, &str>(0).is_ok_and(|k| k == key))
            .and_then(|r| r.try_get::<_, Vec<u8>>(1).ok())
            .and_then(|v| String::from_utf8(v).ok())
    };
    if value("application").as_deref() != Some("fencepost") {
        return Err(foreign(shown, "fencepost_meta"));
    }
    let schema: usize = value("schema").and_then(|v| v.parse().ok()).unwrap_or(0);
    if schema > MIGRATIONS.len() {
        return Err(Error::usage(format!(
            "the store {shown} has schema version {schema}, newer than this fencepost knows ({}): upgrade fencepost",
            MIGRATIONS.len()
        )));
    }
    let id = value("id").ok_or_else(|| foreign(shown, "fencepost_meta"))?;
    let now: i64 = rows.first().and_then(|r| r.try_get(2).ok()).unwrap_or(0);
    let synchronous_commit: String = rows
        .first()
        .and_then(|r| r.try_get(3).ok())
        .unwrap_or_default();
    let idle_ms: Option<i64> = rows.first().and_then(|r| r.try_get(4).ok());
    let idle_limit = idle_ms
        .filter(|ms| *ms > 0)
        .map(|ms| Duration::from_millis(ms.unsigned_abs()));
    let role: String = rows
        .first()
        .and_then(|r| r.try_get(5).ok())
        .unwrap_or_default();
    let may_change: bool = rows.first().and_then(|r| r.try_get(6).ok()).unwrap_or(true);
    Ok(Some(Header {
        id,
        now,
        synchronous_commit,
        idle_limit,
        schema,
        role,
        may_change,
    }))
}

/// A database without `fencepost_meta` may still hold one of our table names, made by
/// someone else: using it would mix their rows with ours.
fn refuse_foreign_tables(client: &mut Client, shown: &str, busy: Duration) -> Result<()> {
    let names: Vec<&str> = TABLES.to_vec();
    let row = client
        .query_typed_opt(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_name = ANY($1) LIMIT 1",
            args![names],
        )
        .map_err(|e| pg_error(shown, busy, e))?;
    match row {
        Some(row) => Err(foreign(shown, row.get(0))),
        None => Ok(()),
    }
}

fn foreign(shown: &str, table: &str) -> Error {
    Error::usage_hint(
        format!("the store {shown} has a table {table} that fencepost did not make"),
        "point --store (FENCEPOST_STORE) at a database of its own for fencepost",
    )
}

/// The `fencepost_meta` key of a store made for the reproduction of the unprotected sink
/// (`fixtures/reproduce.sh --store`, in a throwaway database of its own): the one kind of
/// store that takes `write --unfenced`.
///
/// `--unfenced` accepts any epoch and never raises the fence. On a shared store that
/// would let any host make old bytes current for every reader and mirror, so a store
/// refuses it unless it carries this key; and a store gets the key only as its schema is
/// made, by a build with the `failpoints` feature (the reproduction's own build, never
/// the installed one) run with `FENCEPOST_REPRODUCTION_STORE=1`. A production store never has
/// it and cannot gain it: an existing schema is never made again.
pub const REPRODUCTION_KEY: &str = "reproduction";

/// The variable that asks a failpoints build to mark the store whose schema it makes as
/// the reproduction's (see [`REPRODUCTION_KEY`]); documented in fixtures/README.md, not
/// in `--help`.
const REPRODUCTION_VAR: &str = "FENCEPOST_REPRODUCTION_STORE";

/// True when the schema this process makes is to be marked as the reproduction's.
fn for_reproduction() -> bool {
    cfg!(feature = "failpoints") && std::env::var_os(REPRODUCTION_VAR).is_some_and(|v| v == "1")
}

/// Creates the schema (once, whoever else is creating it at the same moment).
fn create_schema(client: &mut Client, shown: &str, busy: Duration, local: &str) -> Result<()> {
    let fail = |e| pg_error(shown, busy, e);
    let mut tx = client.transaction().map_err(fail)?;
    tx.batch_execute(local).map_err(fail)?;
    tx.execute_typed("SELECT pg_advisory_xact_lock($1)", args![SCHEMA_LOCK])
        .map_err(fail)?;
    let made: bool = tx
        .query_typed_one("SELECT to_regclass('fencepost_meta') IS NOT NULL", args![])
        .map_err(fail)?
        .get(0);
    if made {
        return tx.commit().map_err(fail);
    }
    for (i, step) in MIGRATIONS.iter().enumerate() {
        match tx.batch_execute(step) {
            Ok(()) => {}
            Err(e) if e.code() == Some(&SqlState::DUPLICATE_TABLE) => {
                return Err(foreign(shown, "fencepost_*"));
            }
            Err(e)
                if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE)
                    || e.code() == Some(&SqlState::INVALID_SCHEMA_NAME) =>
            {
                drop(tx);
                return Err(cannot_create(client, shown, &e));
            }
            Err(e) => return Err(fail(e)),
        }
        let version = (i + 1).to_string();
        tx.execute_typed(
            "INSERT INTO fencepost_meta (key, value) VALUES ('schema', $1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            args![version.as_bytes()],
        )
        .map_err(fail)?;
    }
    let id = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
    tx.execute_typed(
        "INSERT INTO fencepost_meta (key, value) VALUES ('application', 'fencepost'), ('id', $1)",
        args![id.as_bytes()],
    )
    .map_err(fail)?;
    if for_reproduction() {
        tx.execute_typed(
            "INSERT INTO fencepost_meta (key, value) VALUES ($1, '1')",
            args![REPRODUCTION_KEY],
        )
        .map_err(fail)?;
    }
    tx.commit().map_err(fail)
}

/// The role may not make the schema (`e`: the server's refusal, its transaction rolled
/// back), or the URL's `search_path` names no schema that exists: said with what to do.
fn cannot_create(client: &mut Client, shown: &str, e: &postgres::Error) -> Error {
    let cause = server_words(e);
    if e.code() == Some(&SqlState::INVALID_SCHEMA_NAME) {
        return Error::usage_hint(
            format!(
                "the store {shown} has no schema to make fencepost's tables in: its \
                 search_path names none that exists ({cause})"
            ),
            "make the schema first (CREATE SCHEMA NAME, as the database's owner), or name an \
             existing one in the URL's options: options=-c search_path=NAME",
        );
    }
    // The session is still up: it says who it is and where it would make the tables.
    let asked = client
        .query_typed_one("SELECT current_user::text, current_schema()::text", args![])
        .ok();
    let role = asked
        .as_ref()
        .and_then(|r| r.try_get::<_, String>(0).ok())
        .unwrap_or_else(|| role_in(shown));
    let schema = asked
        .as_ref()
        .and_then(|r| r.try_get::<_, String>(1).ok())
        .or_else(|| roles::denied_object(&cause).map(|(_, name)| name.to_string()))
        .unwrap_or_else(|| "public".to_string());
    Error::usage_hint(
        format!(
            "the store {shown} has no fencepost tables yet, and the role {role} may not make \
             them: it lacks CREATE on schema {schema} ({cause})"
        ),
        format!(
            "run `fencepost store init` once as the database's owner (or a role with CREATE \
             on schema {schema}), then the grants `fencepost store init --print-grants {role} \
             --writer` prints"
        ),
    )
}

/// The role a store URL connects as: its user, else `PGUSER`, else the user running this
/// (as libpq defaults it).
fn role_in(shown: &str) -> String {
    let said = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    shown
        .parse::<postgres::Config>()
        .ok()
        .and_then(|c| c.get_user().map(str::to_string))
        .or_else(|| said("PGUSER"))
        .or_else(|| said("USER"))
        .unwrap_or_else(|| "(unknown)".to_string())
}

/// The server's own words for a failure, without the driver's `ERROR: ` in front.
fn server_words(e: &postgres::Error) -> String {
    e.as_db_error()
        .map_or_else(|| root_cause(e), |db| db.message().to_string())
}

/// The server refused a statement for a privilege the role lacks (`privilege`, when the
/// statement says which): said with the role, the object and what a writer has on it,
/// and where the grants are.
fn permission_denied(shown: &str, e: &postgres::Error, privilege: Option<&str>) -> Error {
    let role = role_in(shown);
    let cause = server_words(e);
    let message = match roles::denied_object(&cause) {
        Some((kind, name)) => match (privilege, roles::writer_has(kind, name)) {
            (Some(privilege), _) => {
                format!("the role {role} lacks {privilege} on {kind} {name} ({cause})")
            }
            (None, Some(has)) if kind == "schema" => {
                format!("the role {role} lacks {has} on schema {name} ({cause})")
            }
            (None, Some(has)) => format!(
                "the role {role} lacks a privilege this needs on {kind} {name} (a writer has \
                 {has} on it): {cause}"
            ),
            (None, None) => {
                format!("the role {role} lacks a privilege on {kind} {name} ({cause})")
            }
        },
        None => format!("the role {role} lacks a privilege this needs ({cause})"),
    };
    Error::usage_hint(
        format!("store {shown}: {message}"),
        roles::grants_hint(&role),
    )
}

/// Runs the migrations a store made by an older fencepost lacks (each additive), once,
/// whoever else upgrades it at the same moment. A role without the privilege to create
/// tables keeps the older schema: returns how many have run.
fn upgrade(
    client: &mut Client,
    shown: &str,
    busy: Duration,
    schema: usize,
    local: &str,
) -> Result<usize> {
    if schema >= MIGRATIONS.len() {
        return Ok(schema);
    }
    let fail = |e| pg_error(shown, busy, e);
    let mut tx = client.transaction().map_err(fail)?;
    tx.batch_execute(local).map_err(fail)?;
    tx.execute_typed("SELECT pg_advisory_xact_lock($1)", args![SCHEMA_LOCK])
        .map_err(fail)?;
    let row = tx
        .query_typed_one(
            "SELECT convert_from(value, 'UTF8') FROM fencepost_meta WHERE key = 'schema'",
            args![],
        )
        .map_err(fail)?;
    let mut done: usize = row.get::<_, String>(0).parse().unwrap_or(schema);
    for (i, step) in MIGRATIONS.iter().enumerate().skip(done) {
        match tx.batch_execute(step) {
            Ok(()) => {}
            // Rolled back as a whole when `tx` drops: none of this round's steps stand.
            Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => return Ok(schema),
            Err(e) => return Err(fail(e)),
        }
        let version = (i + 1).to_string();
        let recorded = tx.execute_typed(
            "UPDATE fencepost_meta SET value = $1 WHERE key = 'schema'",
            args![version.as_bytes()],
        );
        match recorded {
            Ok(_) => {}
            Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => return Ok(schema),
            Err(e) => return Err(fail(e)),
        }
        done = i + 1;
    }
    match tx.commit() {
        Ok(()) => Ok(done),
        Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => Ok(schema),
        Err(e) => Err(fail(e)),
    }
}

impl Store for PgStore {
    fn immediate(&mut self) -> Result<Box<dyn Txn + '_>> {
        self.may(roles::CHANGE)?;
        Ok(Box::new(self.begin("BEGIN")?))
    }

    fn snapshot(&mut self) -> Result<Box<dyn ReadTxn + '_>> {
        Ok(Box::new(self.begin(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        )?))
    }

    fn server_clock(&self) -> Option<(i64, Instant)> {
        Some(self.server_clock)
    }

    fn identity(&self) -> Option<&str> {
        Some(&self.id)
    }
}

impl PgStore {
    /// Streams a blob's chunks to `out` and checks them against the record. A tree's
    /// blob is its manifest, whose hash is the tree's; the size recorded is its files'.
    fn read_chunks(&mut self, published: &Published, out: &mut dyn Write) -> Result<()> {
        let blob = published
            .blob
            .ok_or(Error::Internal("a removal has no bytes to read"))?;
        let size = (!published.tree).then_some(published.size);
        let what = format!("{} (epoch {})", published.resource, published.epoch);
        self.read_checked(blob, &published.sha256, size, &what, out)
    }

    /// Streams the chunks of `blob` to `out`, checking them against `sha256` (and `size`,
    /// when given); `what` names it in the error.
    fn read_checked(
        &mut self,
        blob: i64,
        expected_sha: &str,
        expected_size: Option<u64>,
        what: &str,
        out: &mut dyn Write,
    ) -> Result<()> {
        let (shown, busy) = (self.shown.clone(), self.busy);
        let fail = |e| pg_error(&shown, busy, e);
        let select = "SELECT data FROM fencepost_chunk WHERE blob = $1 AND seq = $2";
        let mut hasher = Sha256::new();
        let mut size: u64 = 0;
        let mut seq: i32 = 0;
        while let Some(row) = self
            .client
            .query_typed_opt(select, args![blob, seq])
            .map_err(fail)?
        {
            let data: &[u8] = row.get(0);
            hasher.update(data);
            size += data.len() as u64;
            out.write_all(data)
                .map_err(Error::io("cannot write", "the output"))?;
            seq += 1;
        }
        let sha256 = crate::text::hex(&hasher.finalize());
        if sha256 != expected_sha || expected_size.is_some_and(|s| s != size) {
            let recorded = expected_size.map_or_else(String::new, |s| format!("{s} bytes with "));
            return Err(Error::Damaged {
                message: format!(
                    "the store's copy of {what} does not match its record: \
                     {size} bytes with SHA-256 {sha256}, recorded {recorded}{expected_sha}"
                ),
                hint: Some("the store's tables were changed by hand, or damaged".to_string()),
            });
        }
        Ok(())
    }

    fn begin(&mut self, how: &str) -> Result<PgTxn<'_>> {
        let (shown, busy) = (self.shown.as_str(), self.busy);
        self.client
            .batch_execute(&format!("{how}; {}", self.local))
            .map_err(|e| pg_error(shown, busy, e))?;
        Ok(PgTxn {
            client: RefCell::new(&mut self.client),
            shown,
            busy,
            seen: self.schema >= SEEN_SCHEMA,
            versions: self.schema >= VERSIONS_SCHEMA,
            trees: self.schema >= TREES_SCHEMA,
            open: Cell::new(true),
            now: Cell::new(None),
            url: &self.url,
            commit_timeout: self.commit_timeout,
            notices: &self.notices,
            timer: &self.timer,
            xid: RefCell::new(None),
            clock_read: RefCell::new(None),
            idle_limit: Cell::new(None),
            last_reply: Cell::new(Instant::now()),
        })
    }
}

/// One transaction on the store. Dropped without [`Txn::commit`], it rolls back.
#[allow(
    missing_debug_implementations,
    reason = "it holds the connection: PgStore's Debug shows the store"
)]
pub struct PgTxn<'a> {
    client: RefCell<&'a mut Client>,
    shown: &'a str,
    busy: Duration,
    /// The store has `fencepost_seen`.
    seen: bool,
    /// The schema has the sink's `seq` and `removed` (version [`VERSIONS_SCHEMA`]).
    versions: bool,
    /// The schema has the sink's `tree` (version [`TREES_SCHEMA`]).
    trees: bool,
    open: Cell<bool>,
    /// The server's clock once the resource's lock was granted.
    now: Cell<Option<i64>>,
    url: &'a StoreUrl,
    commit_timeout: Duration,
    notices: &'a Notices,
    timer: &'a CommitTimer,
    /// The transaction's id (`pg_current_xact_id()`), read with the clock once the lock
    /// was granted: what a new session asks about when this one broke at COMMIT.
    xid: RefCell<Option<String>>,
    /// The store's clock binding (`fencepost_meta`'s `clock`) as the lock's statement read
    /// it, once it has (`Some(None)`: not bound then).
    clock_read: RefCell<Option<Option<Vec<u8>>>>,
    /// The session's `idle_in_transaction_session_timeout`, read with the clock (`None`
    /// when not read, or 0: no limit).
    idle_limit: Cell<Option<Duration>>,
    /// When the last answer arrived: a session that broke after sitting idle longer than
    /// [`Self::idle_limit`] was ended by the server's idle timeout.
    last_reply: Cell<Instant>,
}

impl Drop for PgTxn<'_> {
    fn drop(&mut self) {
        if self.open.get() {
            // Best effort: a session that is gone has rolled back already.
            let _ = self.client.get_mut().batch_execute("ROLLBACK");
        }
    }
}

impl PgTxn<'_> {
    fn fail(&self) -> impl Fn(postgres::Error) -> Error + '_ {
        move |e| pg_error(self.shown, self.busy, e)
    }

    /// Runs one statement, noting when its answer came; a session that broke while the
    /// transaction sat idle past the server's limit is said to have been ended by it.
    fn statement<T>(
        &self,
        run: impl FnOnce(&mut Client) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        let sent = Instant::now();
        let done = run(&mut self.client.borrow_mut());
        match done {
            Ok(answer) => {
                self.last_reply.set(Instant::now());
                Ok(answer)
            }
            Err(e) if broken(&e) && self.idled_out(sent) => Err(idle_ended(self.shown)),
            Err(e) => Err(pg_error(self.shown, self.busy, e)),
        }
    }

    /// True when the transaction sat idle, up to `sent`, at least as long as the
    /// server's `idle_in_transaction_session_timeout`.
    fn idled_out(&self, sent: Instant) -> bool {
        self.idle_limit
            .get()
            .is_some_and(|limit| sent.saturating_duration_since(self.last_reply.get()) >= limit)
    }

    fn query(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>> {
        self.statement(|c| c.query_typed(sql, params))
    }

    fn query_opt(&self, sql: &str, params: Params<'_>) -> Result<Option<Row>> {
        self.statement(|c| c.query_typed_opt(sql, params))
    }

    fn execute(&self, sql: &str, params: Params<'_>) -> Result<u64> {
        self.statement(|c| c.execute_typed(sql, params))
    }

    /// Sends `sql`, which ends with COMMIT, and says what became of it: committed (and
    /// confirmed, as far as the server waits for its standbys); committed on the primary
    /// but not confirmed by its synchronous standbys (the server warned that the wait was
    /// cancelled: by `--commit-timeout`, an operator or a shutdown); rolled back; or, when
    /// the session broke and a new one cannot tell, unknown.
    fn finish(&self, sql: &str) -> Result<()> {
        crate::failpoints::failpoint!("txn.before_commit");
        self.open.set(false);
        let _ = self.notices.take();
        let sent = Instant::now();
        self.timer.arm(self.commit_timeout);
        let done = self.client.borrow_mut().batch_execute(sql);
        let timed_out = self.timer.disarm();
        let warned = self.notices.take().into_iter().find(sync_wait_cancelled);
        if let Some(warning) = warned {
            return Err(not_confirmed(
                self.shown,
                &warning,
                timed_out.then_some(self.commit_timeout),
            ));
        }
        match done {
            Ok(()) => {}
            Err(e) if e.code() == Some(&SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT) => {
                return Err(idle_ended(self.shown));
            }
            Err(e) if broken(&e) => {
                let idled_out = self.idled_out(sent);
                let xid = self.xid.borrow_mut().take();
                return match xid.and_then(|xid| xact_status(self.url, self.busy, &xid)) {
                    Some(status) if status == "committed" => Ok(()),
                    Some(status) if status == "aborted" && idled_out => Err(idle_ended(self.shown)),
                    Some(status) if status == "aborted" => Err(rolled_back(self.shown, &e)),
                    _ => Err(unknown_outcome(self.shown, &e)),
                };
            }
            Err(e) => return Err(pg_error(self.shown, self.busy, e)),
        }
        crate::failpoints::failpoint!("txn.after_commit");
        Ok(())
    }
}

/// True for a failure that ended the session rather than the statement: the connection
/// closed or failed, or the server said it is ending the session (shutdown, a
/// terminated backend, the idle timeout).
fn broken(e: &postgres::Error) -> bool {
    e.is_closed()
        || match e.code() {
            None => true,
            Some(code) => {
                let code = code.code();
                code.starts_with("08") || code.starts_with("57P") || code == "25P03"
            }
        }
}

/// True for the server's warning that a COMMIT's wait for its synchronous standbys
/// was cancelled (by a cancel request or a statement timeout: "canceling wait for
/// synchronous replication ...", or by a terminated backend or a shutdown: "canceling
/// the wait for synchronous replication and terminating connection ..."): the
/// transaction committed on the primary, and no standby confirmed it. A COMMIT draws no
/// other warning, so any warning during one is read as that, whatever the server's
/// language.
fn sync_wait_cancelled(notice: &DbError) -> bool {
    match notice.parsed_severity() {
        Some(severity) => severity == postgres::error::Severity::Warning,
        // A server older than 9.6 sends the severity in its own language only.
        None => notice.severity() == "WARNING",
    }
}

/// A duration as `--commit-timeout` takes it: `2s`, `1500ms`.
fn shown_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// The store answered that a COMMIT is in effect on the primary, but not confirmed by
/// its synchronous standbys; `timeout` when fencepost's commit timeout cancelled the
/// wait.
fn not_confirmed(shown: &str, warning: &DbError, timeout: Option<Duration>) -> Error {
    let why = match timeout {
        Some(d) => format!(
            "the store {shown} did not confirm the COMMIT within {}",
            shown_duration(d)
        ),
        None => format!("the store {shown} cancelled the wait for its COMMIT"),
    };
    Error::Remote {
        message: format!(
            "{why}: committed on the primary, not confirmed by its synchronous standby ({})",
            warning.message()
        ),
        hint: Some(
            "the change is in effect on the primary, but a failover to a standby that lacks \
             it would lose it: check the standby (pg_stat_replication, \
             synchronous_standby_names); once it has caught up the change is as safe as any"
                .to_string(),
        ),
    }
}

/// The session broke at COMMIT and its outcome could not be learnt from a new one.
fn unknown_outcome(shown: &str, e: &postgres::Error) -> Error {
    Error::OutcomeUnknown {
        message: format!(
            "the connection to {shown} broke at COMMIT: the change may or may not have been \
             made ({})",
            root_cause(e)
        ),
        retry: None,
    }
}

/// The session broke at COMMIT, and a new one learnt that the transaction rolled back.
fn rolled_back(shown: &str, e: &postgres::Error) -> Error {
    Error::Remote {
        message: format!(
            "the connection to {shown} broke at COMMIT, and the transaction rolled back: \
             nothing was changed ({})",
            root_cause(e)
        ),
        hint: Some("run the same command again".to_string()),
    }
}

/// The server ended the session for sitting idle in its transaction.
fn idle_ended(shown: &str) -> Error {
    Error::Remote {
        message: format!(
            "the store {shown} ended this session: it sat idle in its transaction past \
             idle_in_transaction_session_timeout; the transaction rolled back, nothing was \
             changed"
        ),
        hint: Some(
            "run the command again; a process paused inside a transaction (a debugger, \
             SIGSTOP) loses it this way"
                .to_string(),
        ),
    }
}

/// How long a new session may take to say what became of a broken COMMIT.
const RESOLVE_WITHIN: Duration = Duration::from_secs(3);

/// `pg_xact_status` of the transaction `xid`, asked on a new session, within
/// [`RESOLVE_WITHIN`]: `committed`, `aborted`, `in progress`, or `None` when the
/// server could not be asked in time.
fn xact_status(url: &StoreUrl, busy: Duration, xid: &str) -> Option<String> {
    may_resolve().ok()?;
    let (send, answer) = mpsc::channel();
    let (url, xid) = (url.clone(), xid.to_string());
    // A thread of its own, so that a server that does not answer costs at most the
    // bound; left behind then, it ends with the process.
    std::thread::Builder::new()
        .name("fencepost-resolve".into())
        .spawn(move || {
            let within = Some(Instant::now() + RESOLVE_WITHIN);
            let status = connect(&url, busy, within, &Notices::default())
                .ok()
                .and_then(|Session { client: mut c, .. }| {
                    c.query_typed_one("SELECT pg_xact_status($1::text::xid8)", args![xid])
                        .ok()
                        .and_then(|r| r.get::<_, Option<String>>(0))
                });
            let _ = send.send(status);
        })
        .ok()?;
    answer.recv_timeout(RESOLVE_WITHIN).ok().flatten()
}

/// The failpoint `txn.resolving`, where a broken COMMIT is about to be resolved: with it
/// failed, the server is taken to be unable to tell (the outcome stays unknown), as when
/// it is down or out of reach.
fn may_resolve() -> Result<()> {
    crate::failpoints::failpoint!("txn.resolving");
    Ok(())
}

/// Cancels a session's COMMIT that waits too long (the server's `statement_timeout`
/// does not cover the wait for synchronous standbys at COMMIT: the server turns the
/// timer off before it commits). One thread per session, started with it, so that its
/// start overlaps the connect's round trips instead of delaying a COMMIT; each COMMIT
/// arms it and disarms it.
struct CommitTimer {
    /// Arms the timer for one COMMIT; `None` when no thread could be started (a COMMIT
    /// then waits as long as it takes).
    arm: Option<mpsc::Sender<Duration>>,
    /// Disarms it: the COMMIT answered.
    done: Option<mpsc::Sender<()>>,
    fired: Arc<std::sync::atomic::AtomicBool>,
}

impl CommitTimer {
    /// `tls` is the session's own: a cancel request is a connection of its own, made as
    /// the session's was.
    fn start(
        token: postgres::CancelToken,
        tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    ) -> CommitTimer {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (arm, armed) = mpsc::channel::<Duration>();
        let (done, answered) = mpsc::channel::<()>();
        let fired = Arc::new(AtomicBool::new(false));
        let flag = fired.clone();
        // A small stack: the thread mostly sleeps.
        let spawned = std::thread::Builder::new()
            .name("fencepost-commit-timer".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                while let Ok(after) = armed.recv() {
                    match answered.recv_timeout(after) {
                        Ok(()) => {}
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            flag.store(true, Ordering::SeqCst);
                            let _ = match &tls {
                                Some(tls) => token.cancel_query(tls.clone()),
                                None => token.cancel_query(NoTls),
                            };
                            // The COMMIT's answer (the server's warning) comes next.
                            if answered.recv().is_err() {
                                return;
                            }
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
            });
        match spawned {
            Ok(_) => CommitTimer {
                arm: Some(arm),
                done: Some(done),
                fired,
            },
            Err(_) => CommitTimer {
                arm: None,
                done: None,
                fired,
            },
        }
    }

    /// Starts counting `after` for a COMMIT about to be sent.
    fn arm(&self, after: Duration) {
        self.fired.store(false, std::sync::atomic::Ordering::SeqCst);
        if let Some(arm) = &self.arm {
            let _ = arm.send(after);
        }
    }

    /// The COMMIT answered; true if the timer had cancelled it.
    fn disarm(&self) -> bool {
        if let Some(done) = &self.done {
            let _ = done.send(());
        }
        self.fired.swap(false, std::sync::atomic::Ordering::SeqCst)
    }
}

impl ReadTxn for PgTxn<'_> {
    fn check_clock(&self, kind: ClockKind) -> Result<()> {
        match self.clock()? {
            Some(bound) if bound != kind => Err(clock_mismatch(self.shown, bound)),
            _ => Ok(()),
        }
    }

    fn meta_bytes(&self, key: &str) -> Result<Option<Vec<u8>>> {
        if key == "clock"
            && let Some(read) = self.clock_read.borrow().as_ref()
        {
            return Ok(read.clone());
        }
        Ok(self
            .query_opt(
                "SELECT value FROM fencepost_meta WHERE key = $1",
                args![key],
            )?
            .map(|r| r.get(0)))
    }

    fn lease(&self, resource: &Resource) -> Result<Option<Lease>> {
        self.lease_named(resource.as_str())
    }

    fn lease_named(&self, name: &str) -> Result<Option<Lease>> {
        let row = self.query_opt(
            "SELECT owner, epoch, deadline, state, result FROM fencepost_lease WHERE resource = $1",
            args![name],
        )?;
        Ok(row.map(|r| Lease {
            owner: r.get(0),
            epoch: r.get(1),
            deadline: r.get(2),
            state: LeaseState::parse(r.get(3)).unwrap_or(LeaseState::Held),
            result: r.get(4),
        }))
    }

    fn sink(&self, resource: &Resource) -> Result<Option<SinkRecord>> {
        self.sink_named(resource.as_str())
    }

    fn sink_named(&self, name: &str) -> Result<Option<SinkRecord>> {
        let row = self.query_opt(
            &format!(
                "SELECT fence, content_epoch, sha256, size, written_at, {}
                 FROM fencepost_sink WHERE resource = $1",
                self.version_columns()
            ),
            args![name],
        )?;
        Ok(row.map(|r| sink_row(&r)))
    }

    fn events(&self, resource: Option<&Resource>, since: Option<i64>) -> Result<Vec<Event>> {
        let rows = self.query(
            &format!(
                "SELECT id, at, resource, event, owner, epoch, prev_owner, prev_epoch, sha256,
                        pid, host, detail, {}
                 FROM fencepost_log
                 WHERE ($1::text IS NULL OR resource = $1) AND ($2::bigint IS NULL OR at >= $2)
                 ORDER BY id",
                if self.versions { "seq" } else { "NULL::bigint" }
            ),
            args![resource.map(Resource::as_str), since],
        )?;
        Ok(rows
            .iter()
            .map(|r| Event {
                id: r.get(0),
                at: r.get(1),
                resource: r.get(2),
                kind: EventKind::parse(r.get(3)),
                owner: r.get(4),
                epoch: r.get(5),
                prev_owner: r.get(6),
                prev_epoch: r.get(7),
                sha256: r.get(8),
                pid: u32::try_from(r.get::<_, i64>(9)).unwrap_or(0),
                host: r.get(10),
                detail: r.get(11),
                seq: r.get(12),
            })
            .collect())
    }

    fn issued_to(&self, resource: &Resource, epoch: i64) -> Result<Option<String>> {
        if let Some(lease) = self.lease(resource)?
            && lease.epoch == epoch
        {
            return Ok(Some(lease.owner));
        }
        Ok(self
            .query_opt(
                "SELECT owner FROM fencepost_log
                 WHERE resource = $1 AND epoch = $2 AND event IN ($3, $4)
                 ORDER BY id DESC LIMIT 1",
                args![
                    resource.as_str(),
                    epoch,
                    EventKind::Claim.as_str(),
                    EventKind::Takeover.as_str(),
                ],
            )?
            .and_then(|r| r.get(0)))
    }

    fn resources(&self) -> Result<Vec<String>> {
        Ok(self
            .query(
                "SELECT resource FROM fencepost_lease UNION SELECT resource FROM fencepost_sink
                 ORDER BY 1",
                args![],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    fn published(&self, resource: &str) -> Result<Option<Published>> {
        let row = self.query_opt(
            &format!(
                "SELECT resource, content_epoch, sha256, size, blob, owner, unfenced, {}
                 FROM fencepost_sink WHERE resource = $1 AND {}",
                self.version_columns(),
                self.published_rows()
            ),
            args![resource],
        )?;
        Ok(row.map(|r| published_row(&r)))
    }

    fn all_published(&self) -> Result<Vec<Published>> {
        let rows = self.query(
            &format!(
                "SELECT resource, content_epoch, sha256, size, blob, owner, unfenced, {}
                 FROM fencepost_sink WHERE {} ORDER BY resource",
                self.version_columns(),
                self.published_rows()
            ),
            args![],
        )?;
        Ok(rows.iter().map(published_row).collect())
    }

    fn epoch_floor(&self, resource: &Resource) -> Result<i64> {
        // One round trip for both.
        let seen = if self.seen {
            "(SELECT max(epoch) FROM fencepost_seen WHERE resource = $1)"
        } else {
            "NULL::bigint"
        };
        let row = self.query_opt(
            &format!(
                "SELECT greatest(coalesce((SELECT fence FROM fencepost_sink WHERE resource = $1), 0),
                                 coalesce({seen}, 0))"
            ),
            args![resource.as_str()],
        )?;
        Ok(row.and_then(|r| r.get::<_, Option<i64>>(0)).unwrap_or(0))
    }
}

impl Txn for PgTxn<'_> {
    fn commit(self: Box<Self>) -> Result<()> {
        self.finish("COMMIT")
    }

    fn commit_unreplicated(self: Box<Self>) -> Result<()> {
        // Flushed to the primary's disk, not waited for on standbys: in one message with
        // the COMMIT, so it costs no round trip.
        self.finish("SET LOCAL synchronous_commit = local; COMMIT")
    }

    fn lock(&self, resource: &Resource) -> Result<()> {
        // One statement, one round trip: the resource's row made or, when it exists,
        // locked (an upsert that meets the row waits for it as `FOR UPDATE` does, then
        // holds it to COMMIT); then, as the row it returns is made once the lock is
        // granted, the server's clock, so decisions use the time they are made at. With
        // it, what tells a broken COMMIT's outcome and cause later: the transaction's id
        // (the row lock gave it one) and the server's idle limit; and the clock the store
        // is bound to, which the first change binds once (read in the statement's
        // snapshot: one bound meanwhile is found by `bind_clock`'s own insert).
        let row = self.query_opt(
            "INSERT INTO fencepost_lock (resource) VALUES ($1)
             ON CONFLICT (resource) DO UPDATE SET resource = excluded.resource
             RETURNING (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
                       pg_current_xact_id()::text,
                       (extract(epoch FROM current_setting('idle_in_transaction_session_timeout')
                           ::interval) * 1000)::bigint,
                       (SELECT value FROM fencepost_meta WHERE key = 'clock')",
            args![resource.as_str()],
        )?;
        self.now.set(row.as_ref().and_then(|r| r.try_get(0).ok()));
        *self.xid.borrow_mut() = row.as_ref().and_then(|r| r.try_get(1).ok());
        let idle_ms: Option<i64> = row.as_ref().and_then(|r| r.try_get(2).ok());
        self.idle_limit.set(
            idle_ms
                .filter(|ms| *ms > 0)
                .map(|ms| Duration::from_millis(ms.unsigned_abs())),
        );
        let bound: Option<Vec<u8>> = row.as_ref().and_then(|r| r.try_get(3).ok()).flatten();
        *self.clock_read.borrow_mut() = Some(bound);
        Ok(())
    }

    fn server_now(&self) -> Option<i64> {
        self.now.get()
    }

    fn bind_clock(&self, kind: ClockKind) -> Result<()> {
        match self.clock()? {
            Some(bound) if bound == kind => Ok(()),
            Some(bound) => Err(clock_mismatch(self.shown, bound)),
            None => {
                self.execute(
                    "INSERT INTO fencepost_meta (key, value) VALUES ('clock', $1)
                     ON CONFLICT (key) DO NOTHING",
                    args![kind.as_str().as_bytes()],
                )?;
                // Another first change may have bound it at the same moment: read anew.
                *self.clock_read.borrow_mut() = None;
                match self.clock()? {
                    Some(bound) if bound != kind => Err(clock_mismatch(self.shown, bound)),
                    _ => Ok(()),
                }
            }
        }
    }

    fn set_meta_bytes(&self, key: &str, value: &[u8]) -> Result<()> {
        if key == "clock" {
            *self.clock_read.borrow_mut() = None;
        }
        self.execute(
            "INSERT INTO fencepost_meta (key, value) VALUES ($1, $2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            args![key, value],
        )?;
        Ok(())
    }

    fn put_lease(&self, resource: &Resource, lease: &Lease, now: i64) -> Result<()> {
        self.execute(
            "INSERT INTO fencepost_lease (resource, owner, epoch, deadline, state, result, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (resource) DO UPDATE SET owner = $2, epoch = $3, deadline = $4,
                 state = $5, result = $6, updated_at = $7",
            args![
                resource.as_str(),
                lease.owner,
                lease.epoch,
                lease.deadline,
                lease.state.as_str(),
                lease.result,
                now,
            ],
        )?;
        Ok(())
    }

    fn update_held_lease(&self, resource: &Resource, request: &HolderRequest<'_>) -> Result<bool> {
        let (state, deadline, result) = request.change.columns(request.now);
        let rows = self.execute(
            "UPDATE fencepost_lease SET state = $1, deadline = coalesce($2, deadline),
                 result = coalesce($3, result), updated_at = $4
             WHERE resource = $5 AND owner = $6 AND epoch = $7 AND state = 'held'
               AND deadline > $4",
            args![
                state,
                deadline,
                result,
                request.now,
                resource.as_str(),
                request.owner,
                request.epoch,
            ],
        )?;
        Ok(rows == 1)
    }

    fn raise_fence(&self, resource: &Resource, epoch: i64) -> Result<()> {
        self.execute(
            "INSERT INTO fencepost_sink (resource, fence) VALUES ($1, $2)
             ON CONFLICT (resource) DO UPDATE
                 SET fence = greatest(fencepost_sink.fence, excluded.fence)",
            args![resource.as_str(), epoch],
        )?;
        Ok(())
    }

    fn record_write(&self, resource: &Resource, write: &WriteRecord<'_>) -> Result<()> {
        let WriteRecord {
            fence,
            content,
            owner,
            blob,
            unfenced,
            manifest: _,
        } = *write;
        self.check_versions(content)?;
        let size = i64::try_from(content.size).unwrap_or(i64::MAX);
        // A schema without versions takes the same statement without their columns
        // (`check_versions` refused any version it cannot hold).
        let (columns, values, set) = match (self.versions, self.trees) {
            (true, true) => (
                ", seq, removed, tree",
                ", $11, $12, $13",
                ", seq = $11, removed = $12, tree = $13",
            ),
            (true, false) => (", seq, removed", ", $11, $12", ", seq = $11, removed = $12"),
            _ => ("", "", ""),
        };
        let sql = format!(
            "WITH released AS (
                 UPDATE fencepost_blob SET released_at = now()
                 WHERE id = (SELECT blob FROM fencepost_sink WHERE resource = $1)
                   AND id IS DISTINCT FROM $8
             )
             INSERT INTO fencepost_sink
                 (resource, fence, content_epoch, sha256, size, written_at, owner, blob,
                  unfenced{columns})
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9{values})
             ON CONFLICT (resource) DO UPDATE SET fence = $2, content_epoch = $3, sha256 = $4,
                 size = $5, written_at = $6, owner = $7, blob = $8, unfenced = $9{set}
             RETURNING pg_notify($10, $1)"
        );
        let name = resource.as_str();
        let all = args![
            name,
            fence,
            content.epoch,
            content.sha256,
            size,
            content.written_at,
            owner,
            blob,
            unfenced,
            CHANNEL,
            content.seq,
            content.removed,
            content.tree,
        ];
        let params = match (self.versions, self.trees) {
            (true, true) => &all[..],
            (true, false) => &all[..12],
            _ => &all[..10],
        };
        // One statement, one round trip: the blob the resource pointed at is marked
        // released (its subquery reads the sink row as it was before this statement, as
        // every part of a statement reads one snapshot), the sink points at the new one
        // (none for a removal), and the notification goes out with the COMMIT (the
        // upsert returns one row, so it notifies once).
        let sent = Instant::now();
        let pointed = self.client.borrow_mut().execute_typed(&sql, params);
        match pointed {
            Err(e) if e.code() == Some(&SqlState::FOREIGN_KEY_VIOLATION) => {
                return Err(Error::Remote {
                    message: format!(
                        "the content uploaded for {resource} was removed before it could be \
                         published (`recover --grace` shorter than the upload): nothing was \
                         published"
                    ),
                    hint: Some("write it again; give `recover` a longer --grace".to_string()),
                });
            }
            Err(e) if broken(&e) && self.idled_out(sent) => return Err(idle_ended(self.shown)),
            pointed => {
                pointed.map_err(self.fail())?;
                self.last_reply.set(Instant::now());
            }
        }
        Ok(())
    }

    fn append(&self, event: &Event, keep: i64) -> Result<()> {
        let (column, value) = if self.versions {
            (", seq", ", $12")
        } else {
            ("", "")
        };
        let (kind, pid) = (event.kind.as_str(), i64::from(event.pid));
        let all = args![
            event.at,
            event.resource,
            kind,
            event.owner,
            event.epoch,
            event.prev_owner,
            event.prev_epoch,
            event.sha256,
            pid,
            event.host,
            event.detail,
            event.seq,
        ];
        let params = if self.versions { &all[..] } else { &all[..11] };
        let row = self.query_opt(
            &format!(
                "INSERT INTO fencepost_log (at, resource, event, owner, epoch, prev_owner,
                                            prev_epoch, sha256, pid, host, detail{column})
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11{value}) RETURNING id"
            ),
            params,
        )?;
        let id: i64 = row.map_or(0, |r| r.get(0));
        if id % PRUNE_EVERY == 0 {
            // Under a savepoint: a role that may not delete from the log still makes its
            // change, and leaves the pruning to `log --prune` by one that may.
            self.execute("SAVEPOINT fencepost_prune", args![])?;
            let limit = Some(2 * PRUNE_EVERY);
            let pruned = self
                .client
                .borrow_mut()
                .execute_typed(PRUNE, args![keep.max(0), limit]);
            match pruned {
                Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
                    self.execute("ROLLBACK TO SAVEPOINT fencepost_prune", args![])?;
                }
                Err(e) => return Err(pg_error(self.shown, self.busy, e)),
                Ok(_) => {
                    self.execute("RELEASE SAVEPOINT fencepost_prune", args![])?;
                }
            }
        }
        Ok(())
    }

    fn prune(&self, keep: i64, limit: Option<i64>) -> Result<usize> {
        let dropped = self.execute(PRUNE, args![keep.max(0), limit])?;
        Ok(usize::try_from(dropped).unwrap_or(usize::MAX))
    }

    fn report_seen(&self, resource: &str, mirror: &str, epoch: i64) -> Result<()> {
        if !self.seen {
            return Err(Error::Remote {
                message: format!(
                    "the store {} has no table for what mirrors hold (schema older than \
                     version {SEEN_SCHEMA}, and this role may not upgrade it)",
                    self.shown
                ),
                hint: None,
            });
        }
        self.execute(
            "INSERT INTO fencepost_seen (resource, mirror, epoch) VALUES ($1, $2, $3)
             ON CONFLICT (resource, mirror) DO UPDATE
                 SET epoch = greatest(fencepost_seen.epoch, excluded.epoch), at = now()",
            args![resource, mirror, epoch],
        )?;
        Ok(())
    }

    fn put_small_blob(&self, bytes: &[u8], sha256: &str) -> Result<i64> {
        debug_assert!(bytes.len() <= CHUNK, "a small blob is one chunk");
        let size = i64::try_from(bytes.len()).unwrap_or(i64::MAX);
        // One statement: an older copy of the same bytes (locked, as in `reuse_blob`), or
        // a new blob and its one chunk.
        let row = self.query_opt(
            "WITH found AS (
                 SELECT id FROM fencepost_blob WHERE sha256 = $1 AND complete
                 ORDER BY id LIMIT 1 FOR KEY SHARE
             ), made AS (
                 INSERT INTO fencepost_blob (sha256, size, complete)
                 SELECT $1, $2, true WHERE NOT EXISTS (SELECT 1 FROM found)
                 RETURNING id
             ), chunk AS (
                 INSERT INTO fencepost_chunk (blob, seq, data) SELECT id, 0, $3 FROM made
             )
             SELECT id FROM found UNION ALL SELECT id FROM made",
            args![sha256, size, bytes],
        )?;
        row.map(|r| r.get(0))
            .ok_or(Error::Internal("a small blob was neither found nor made"))
    }

    fn link_tree(&self, manifest: i64, contents: &[String]) -> Result<()> {
        if !self.trees {
            return Err(Error::Internal("a tree linked in a store without trees"));
        }
        // Each content's oldest complete blob, locked (as `reuse_blob` does) so that
        // `recover` cannot remove it before this transaction links it.
        let linked = self.query(
            "WITH locked AS (
                 SELECT id, sha256 FROM fencepost_blob
                 WHERE sha256 = ANY($2::text[]) AND complete FOR KEY SHARE
             ), picked AS (
                 SELECT DISTINCT ON (sha256) id, sha256 FROM locked ORDER BY sha256, id
             )
             INSERT INTO fencepost_tree_blob (manifest, sha256, blob)
             SELECT $1, sha256, id FROM picked ON CONFLICT DO NOTHING
             RETURNING blob",
            args![manifest, contents],
        )?;
        if linked.len() != contents.len() {
            return Err(Error::Remote {
                message: format!(
                    "{} of the tree's {} contents were removed from the store before it could \
                     be published (`recover --grace` shorter than the upload): nothing was \
                     published",
                    contents.len() - linked.len(),
                    contents.len()
                ),
                hint: Some("write it again; give `recover` a longer --grace".to_string()),
            });
        }
        Ok(())
    }

    fn reuse_blob(&self, blob: &Blob) -> Result<i64> {
        // A copy of the same bytes made earlier, locked so that `recover` cannot remove
        // it before this transaction points at it (or after: it is then referenced).
        let older = self.query_opt(
            "SELECT id FROM fencepost_blob WHERE sha256 = $1 AND complete AND id < $2
             ORDER BY id LIMIT 1 FOR KEY SHARE",
            args![blob.sha256, blob.id],
        )?;
        Ok(older.map_or(blob.id, |r| r.get(0)))
    }
}

/// A published version from `resource, content_epoch, sha256, size, blob, owner,
/// unfenced, seq, removed`.
fn published_row(r: &Row) -> Published {
    Published {
        resource: r.get(0),
        epoch: r.get(1),
        seq: r.get(7),
        removed: r.get(8),
        tree: r.get(9),
        sha256: r.get::<_, Option<String>>(2).unwrap_or_default(),
        size: u64::try_from(r.get::<_, Option<i64>>(3).unwrap_or(0)).unwrap_or(0),
        blob: r.get(4),
        owner: r.get(5),
        unfenced: r.get(6),
    }
}

impl PgTxn<'_> {
    /// The sink's `seq, removed`, or what they are in a schema without them.
    fn version_columns(&self) -> &'static str {
        match (self.versions, self.trees) {
            (true, true) => "seq, removed, tree",
            (true, false) => "seq, removed, false",
            _ => "0::bigint, false, false",
        }
    }

    /// The sink rows that publish a version: content, or a removal.
    fn published_rows(&self) -> &'static str {
        if self.versions {
            "content_epoch IS NOT NULL AND (blob IS NOT NULL OR removed)"
        } else {
            "blob IS NOT NULL"
        }
    }

    /// Refuses a version this store's schema cannot record (a seq, a removal).
    fn check_versions(&self, content: &Content) -> Result<()> {
        if content.tree && !self.trees {
            return Err(Error::usage_hint(
                format!(
                    "the store {} has no place for trees (schema older than version \
                     {TREES_SCHEMA}, and this role may not upgrade it)",
                    self.shown
                ),
                "run `fencepost store init` as the owner of its tables",
            ));
        }
        if self.versions || (content.seq == 0 && !content.removed) {
            return Ok(());
        }
        Err(Error::usage_hint(
            format!(
                "the store {} has no place for {} (schema older than version                  {VERSIONS_SCHEMA}, and this role may not upgrade it)",
                self.shown,
                if content.removed {
                    "removals"
                } else {
                    "versions' seqs"
                }
            ),
            "run `fencepost store init` as the owner of its tables",
        ))
    }
}

fn sink_row(r: &Row) -> SinkRecord {
    let content_epoch: Option<i64> = r.get(1);
    SinkRecord {
        fence: r.get(0),
        content: content_epoch.map(|epoch| Content {
            epoch,
            seq: r.get(5),
            removed: r.get(6),
            tree: r.get(7),
            sha256: r.get::<_, Option<String>>(2).unwrap_or_default(),
            size: u64::try_from(r.get::<_, Option<i64>>(3).unwrap_or(0)).unwrap_or(0),
            written_at: r.get::<_, Option<i64>>(4).unwrap_or(0),
            file: None,
        }),
    }
}

impl PgStore {
    /// Runs one statement of an upload as a transaction of its own whose COMMIT does not
    /// wait for the disk (`SET LOCAL synchronous_commit = off`): the fenced COMMIT that
    /// publishes the blob waits for the WAL up to itself, which holds this one. Set for
    /// the transaction, never for the session, which a pooler may hand to another client
    /// next. Three round trips, for a chunk of up to a MiB.
    fn unsynced(
        &mut self,
        sql: &str,
        params: Params<'_>,
    ) -> std::result::Result<Vec<Row>, postgres::Error> {
        self.client.batch_execute(&format!(
            "BEGIN; {}; SET LOCAL synchronous_commit = off",
            self.local
        ))?;
        let rows = self.client.query_typed(sql, params);
        let end = self
            .client
            .batch_execute(if rows.is_ok() { "COMMIT" } else { "ROLLBACK" });
        let rows = rows?;
        end?;
        Ok(rows)
    }

    /// Uploads the chunks of the blob `id` from `source` and marks it complete.
    fn upload_chunks(&mut self, id: i64, source: &mut dyn Read) -> Result<Blob> {
        let fail = |shown: &str, busy, e| pg_error(shown, busy, e);
        let (shown, busy) = (self.shown.clone(), self.busy);
        let insert = "INSERT INTO fencepost_chunk (blob, seq, data) VALUES ($1, $2, $3)";
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; CHUNK];
        let mut size: u64 = 0;
        let mut seq: i32 = 0;
        loop {
            let n = fill(source, &mut buf).map_err(|e| Error::Io {
                context: "cannot read the content for",
                path: "the store".into(),
                source: e,
            })?;
            if n == 0 && seq > 0 {
                break;
            }
            hasher.update(&buf[..n]);
            size += n as u64;
            self.unsynced(insert, args![id, seq, &buf[..n]])
                .map_err(|e| fail(&shown, busy, e))?;
            crate::failpoints::failpoint!("write.uploading");
            seq += 1;
            if n < buf.len() {
                break;
            }
        }
        let sha256 = crate::text::hex(&hasher.finalize());
        let size_i = i64::try_from(size).unwrap_or(i64::MAX);
        self.unsynced(
            "UPDATE fencepost_blob SET sha256 = $2, size = $3, complete = true WHERE id = $1",
            args![id, sha256, size_i],
        )
        .map_err(|e| fail(&shown, busy, e))?;
        Ok(Blob { id, sha256, size })
    }
}

impl Blobs for PgStore {
    fn upload(&mut self, source: &mut dyn Read) -> Result<Blob> {
        self.may(roles::UPLOAD)?;
        let (shown, busy) = (self.shown.clone(), self.busy);
        let id: i64 = self
            .unsynced(
                "INSERT INTO fencepost_blob DEFAULT VALUES RETURNING id",
                args![],
            )
            .map_err(|e| upload_error(&shown, busy, e))?
            .first()
            .ok_or(Error::Internal("a new blob has no id"))?
            .get(0);
        let uploaded = self.upload_chunks(id, source).map_err(|e| match e {
            Error::Remote { message, hint } => uploading(message, hint),
            other => other,
        });
        if uploaded.is_err() {
            // A full disk, a source that failed: what was uploaded is of no use (best
            // effort).
            self.discard(id);
        }
        uploaded
    }

    fn discard(&mut self, id: i64) {
        // Best effort: `recover` removes what is left. Not waited for on the disk or on
        // standbys (as the upload was not): a refused write answers at once.
        let _ = self.client.batch_execute(&format!(
            "BEGIN; SET LOCAL synchronous_commit = off;
             DELETE FROM fencepost_blob b WHERE id = {id}
             AND NOT EXISTS (SELECT 1 FROM fencepost_sink s WHERE s.blob = b.id)
             {};
             COMMIT",
            self.named_by_a_tree()
        ));
        // A failed statement leaves the transaction open (ROLLBACK is a no-op if not).
        let _ = self.client.batch_execute("ROLLBACK");
    }

    fn read(&mut self, published: &Published, out: &mut dyn Write) -> Result<()> {
        let (shown, busy) = (self.shown.clone(), self.busy);
        let fail = |e| pg_error(&shown, busy, e);
        // Every chunk from one snapshot: removals committed meanwhile do not show.
        self.client
            .batch_execute(&format!(
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; {}",
                self.local
            ))
            .map_err(fail)?;
        let read = self.read_chunks(published, out);
        let end = self
            .client
            .batch_execute(if read.is_ok() { "COMMIT" } else { "ROLLBACK" });
        read?;
        end.map_err(fail)
    }

    fn has(&mut self, sha256: &str) -> Result<bool> {
        let (shown, busy) = (self.shown.clone(), self.busy);
        let row = self
            .client
            .query_typed_opt(
                "SELECT 1 FROM fencepost_blob WHERE sha256 = $1 AND complete LIMIT 1",
                args![sha256],
            )
            .map_err(|e| pg_error(&shown, busy, e))?;
        Ok(row.is_some())
    }

    fn read_blob(
        &mut self,
        manifest: i64,
        sha256: &str,
        size: u64,
        out: &mut dyn Write,
    ) -> Result<()> {
        let (shown, busy) = (self.shown.clone(), self.busy);
        let fail = |e| pg_error(&shown, busy, e);
        self.client
            .batch_execute(&format!(
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; {}",
                self.local
            ))
            .map_err(fail)?;
        let read = (|| {
            let id: i64 = self
                .client
                .query_typed_opt(
                    "SELECT blob FROM fencepost_tree_blob WHERE manifest = $1 AND sha256 = $2",
                    args![manifest, sha256],
                )
                .map_err(|e| pg_error(&shown, busy, e))?
                .ok_or_else(|| Error::Damaged {
                    message: format!("the store's tree names no content with SHA-256 {sha256}"),
                    hint: Some("the store's tables were changed by hand, or damaged".to_string()),
                })?
                .get(0);
            self.read_checked(
                id,
                sha256,
                Some(size),
                &format!("the content {sha256}"),
                out,
            )
        })();
        let end = self
            .client
            .batch_execute(if read.is_ok() { "COMMIT" } else { "ROLLBACK" });
        read?;
        end.map_err(|e| pg_error(&shown, busy, e))
    }

    fn collect(&mut self, grace: Duration) -> Result<usize> {
        // A tree's contents are named by its manifest until the manifest goes: a second
        // round collects what the first one's manifests named alone.
        let first = self.collect_round(grace)?;
        let second = if first > 0 {
            self.collect_round(grace)?
        } else {
            0
        };
        Ok(first + second)
    }

    fn listen(&mut self) -> Result<()> {
        let (shown, busy) = (self.shown.clone(), self.busy);
        self.client
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .map_err(|e| pg_error(&shown, busy, e))
    }

    fn wait(&mut self, timeout: Duration) -> Result<Vec<String>> {
        use postgres::fallible_iterator::FallibleIterator;
        let (shown, busy) = (self.shown.clone(), self.busy);
        let mut names = Vec::new();
        let mut notes = self.client.notifications();
        let first = notes.timeout_iter(timeout).next();
        if let Some(n) = first.map_err(|e| pg_error(&shown, busy, e))? {
            names.push(n.payload().to_string());
        }
        // Whatever else arrived meanwhile.
        let mut rest = notes.iter();
        while let Some(n) = rest.next().map_err(|e| pg_error(&shown, busy, e))? {
            names.push(n.payload().to_string());
        }
        Ok(names)
    }
}

impl PgStore {
    /// The condition that a blob `b` is not a tree's content, in a schema with trees.
    fn named_by_a_tree(&self) -> &'static str {
        if self.schema >= TREES_SCHEMA {
            "AND NOT EXISTS (SELECT 1 FROM fencepost_tree_blob t WHERE t.blob = b.id)"
        } else {
            ""
        }
    }

    /// One round of [`Blobs::collect`]: the blobs nothing points at, older than `grace`.
    fn collect_round(&mut self, grace: Duration) -> Result<usize> {
        let (shown, busy) = (self.shown.clone(), self.busy);
        let fail = |e| pg_error(&shown, busy, e);
        let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        let named = self.named_by_a_tree();
        let candidates: Vec<i64> = self
            .client
            .query_typed(
                &format!(
                    "SELECT id FROM fencepost_blob b
                     WHERE coalesce(released_at, created_at)
                           < now() - make_interval(secs => $1::bigint / 1000.0)
                       AND NOT EXISTS (SELECT 1 FROM fencepost_sink s WHERE s.blob = b.id)
                       {named}"
                ),
                args![grace_ms],
            )
            .map_err(fail)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut removed = 0;
        for id in candidates {
            // One at a time: a write that points at this blob meanwhile holds a key-share
            // lock on it, and then this delete fails on the reference and skips it.
            match self.client.execute_typed(
                &format!(
                    "DELETE FROM fencepost_blob b WHERE id = $1
                     AND NOT EXISTS (SELECT 1 FROM fencepost_sink s WHERE s.blob = b.id)
                     {named}"
                ),
                args![id],
            ) {
                Ok(n) => removed += usize::try_from(n).unwrap_or(0),
                Err(e) if e.code() == Some(&SqlState::FOREIGN_KEY_VIOLATION) => {}
                Err(e) => return Err(fail(e)),
            }
        }
        Ok(removed)
    }
}

/// Reads until `buf` is full or the source ends; returns how many bytes.
fn fill(source: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match source.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn clock_mismatch(shown: &str, bound: ClockKind) -> Error {
    match bound {
        ClockKind::Logical => Error::usage_hint(
            format!("the store {shown} runs on logical ticks, but this call uses the wall clock"),
            "pass --now N (FENCEPOST_NOW), or use another database for wall-clock leases",
        ),
        ClockKind::Wall => Error::usage_hint(
            format!("the store {shown} runs on the wall clock, but this call passes --now"),
            "drop --now, or use another database for logical ticks",
        ),
    }
}

/// An upload's failure: [`pg_error`], saying that nothing was published.
fn upload_error(shown: &str, busy: Duration, e: postgres::Error) -> Error {
    match pg_error(shown, busy, e) {
        Error::Remote { message, hint } => uploading(message, hint),
        other => other,
    }
}

/// A failure while uploading content, said so, with the hint that nothing was published.
fn uploading(message: String, hint: Option<String>) -> Error {
    Error::Remote {
        message: format!("cannot upload the content: {message}"),
        hint: Some(hint.map_or_else(
            || "nothing was published; the partial upload was removed".to_string(),
            |h| format!("{h}; nothing was published"),
        )),
    }
}

/// True when the server says its disk is full: SQLSTATE 53100, or a file it could not
/// extend or write for lack of space (e.g. "could not extend file ...: No space left on
/// device").
fn disk_full(e: &postgres::Error) -> bool {
    if e.code() == Some(&SqlState::DISK_FULL) {
        return true;
    }
    let text = root_cause(e);
    text.contains("No space left on device") || text.contains("could not extend file")
}

/// Maps the server's answers to ours: a lock not granted within the busy timeout is
/// `busy` (exit 7); a privilege the role lacks is bad input (exit 2), naming the role and
/// where the grants are; a full disk, a session the server ended, or any other failure
/// is exit 1 with the server's words.
fn pg_error(shown: &str, busy: Duration, e: postgres::Error) -> Error {
    if disk_full(&e) {
        return Error::Remote {
            message: format!("the store's disk is full: {shown}: {}", root_cause(&e)),
            hint: Some(
                "free space on the database server's disk (or give it more), then run the \
                 command again"
                    .to_string(),
            ),
        };
    }
    if e.is_closed() || e.code().is_some_and(|c| c.code().starts_with("57P")) {
        return Error::Remote {
            message: format!(
                "the store {shown} closed the connection: the server was stopped, crashed or \
                 restarted, or this session was terminated ({})",
                root_cause(&e)
            ),
            hint: Some("see the server's log; run the command again once it is up".to_string()),
        };
    }
    match e.code() {
        Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE => Error::RemoteBusy {
            store: shown.to_string(),
            waited_ms: u64::try_from(busy.as_millis()).unwrap_or(u64::MAX),
        },
        Some(c) if *c == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT => idle_ended(shown),
        Some(c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => permission_denied(shown, &e, None),
        _ => Error::Remote {
            message: format!("store {shown}: {}", root_cause(&e)),
            hint: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use postgres::Config;
    use postgres::config::Host;

    use super::from_environment;

    /// `text` parsed, then filled in from the variables `vars` alone.
    fn filled(text: &str, vars: &[(&str, &str)]) -> Result<Config, String> {
        let mut config: Config = text.parse().expect("a connection string");
        from_environment(&mut config, |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        })?;
        Ok(config)
    }

    #[test]
    fn the_variables_fill_in_what_the_string_leaves_out() {
        let vars = [
            ("PGHOST", "/run/pg,db.example"),
            ("PGPORT", "5433,"),
            ("PGUSER", "app"),
            ("PGDATABASE", "jobs"),
            ("PGPASSWORD", "s3cr3t"),
            ("PGAPPNAME", "nightly"),
        ];
        let config = filled("postgresql://", &vars).expect("filled in");
        assert_eq!(
            config.get_hosts(),
            [Host::Unix("/run/pg".into()), Host::Tcp("db.example".into())]
        );
        assert_eq!(config.get_ports(), [5433, 5432]);
        assert_eq!(config.get_user(), Some("app"));
        assert_eq!(config.get_dbname(), Some("jobs"));
        assert_eq!(config.get_password(), Some(&b"s3cr3t"[..]));
        assert_eq!(config.get_application_name(), Some("nightly"));
    }

    #[test]
    fn the_string_wins_over_the_variables() {
        let vars = [
            ("PGHOST", "elsewhere"),
            ("PGPORT", "1"),
            ("PGUSER", "nobody"),
            ("PGDATABASE", "nowhere"),
            ("PGPASSWORD", "wrong"),
            ("PGAPPNAME", "other"),
        ];
        for text in [
            "postgresql://app:pw@db:5433/jobs?application_name=mine",
            "host=db port=5433 user=app password=pw dbname=jobs application_name=mine",
        ] {
            let config = filled(text, &vars).expect("filled in");
            assert_eq!(config.get_hosts(), [Host::Tcp("db".into())], "{text}");
            assert_eq!(config.get_ports(), [5433], "{text}");
            assert_eq!(config.get_user(), Some("app"), "{text}");
            assert_eq!(config.get_dbname(), Some("jobs"), "{text}");
            assert_eq!(config.get_password(), Some(&b"pw"[..]), "{text}");
            assert_eq!(config.get_application_name(), Some("mine"), "{text}");
        }
        // A hostaddr without a host takes no PGHOST: the driver pairs the two lists.
        let config = filled("hostaddr=127.0.0.1", &vars).expect("filled in");
        assert!(config.get_hosts().is_empty());
    }

    #[test]
    fn an_empty_variable_says_nothing_and_a_bad_one_is_named() {
        let empty = [("PGHOST", ""), ("PGUSER", ""), ("PGPASSWORD", "")];
        let config = filled("dbname=x", &empty).expect("filled in");
        assert!(config.get_hosts().is_empty());
        assert_eq!((config.get_user(), config.get_password()), (None, None));
        assert_eq!(
            filled("dbname=x", &[("PGPORT", "54x")]).map(|_| ()),
            Err("PGPORT=54x: not a port number (1 to 65535)".to_string())
        );
        assert_eq!(
            filled("dbname=x", &[("PGPORT", "0")]).map(|_| ()),
            Err("PGPORT=0: not a port number (1 to 65535)".to_string())
        );
        assert!(
            filled("dbname=x", &[("PGHOST", "a,,b")])
                .map(|_| ())
                .is_err_and(|e| e.starts_with("PGHOST=a,,b: an empty host"))
        );
    }
}
