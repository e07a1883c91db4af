//! The two places the protocol's state can live, behind one interface, so that one test
//! body proves a behaviour of both: a local publish root (its SQLite state file, the
//! documents as files in it) and a PostgreSQL store (`--store`), seen from a host
//! without a root (the documents read back with `fencepost cat`) and from a host with a
//! mirror root (every command given `--root`, so each write applies there at once; the
//! documents read from the mirror, which must hold what `cat` prints), and the same store
//! reached through PgBouncer in transaction mode, where each transaction may run on
//! another server session.
//!
//! [`both_stores!`] turns a list of test bodies, each a `fn(&Backend)`, into four tests
//! apiece, `local::NAME`, `postgres::NAME`, `postgres_mirror::NAME` and
//! `postgres_pooled::NAME`; the last three are ignored, with the reason, where the build
//! found no PostgreSQL (see `build.rs`), the pooled one also without PgBouncer. The store without a root also checks, when the
//! test ends, that no command made a file in the folder it ran in.

#![allow(dead_code)]

use std::os::unix::fs::MetadataExt as _;

use crate::harness::{Done, Env, Run, bin};
use crate::support::pg::{self, Pooler, TestStore};
use crate::support::{Paused, spawn_paused_also, spawn_paused_command_also};

/// Where a behaviour test keeps its state.
pub(crate) struct Backend {
    /// The publish root (local), the mirror root, or the empty folder commands run in
    /// (a store without a root).
    env: Env,
    /// PgBouncer in transaction mode, which commands reach the store through (stopped
    /// before the schema is dropped: declared first).
    pooler: Option<Pooler>,
    /// The store's schema, for PostgreSQL.
    pg: Option<TestStore>,
    /// Commands against the store also get `--root`: the host's mirror.
    mirror: bool,
}

impl Backend {
    /// A fresh local publish root.
    pub(crate) fn local() -> Backend {
        Backend {
            env: Env::new(),
            pooler: None,
            pg: None,
            mirror: false,
        }
    }

    /// A fresh PostgreSQL store, used without a root.
    #[track_caller]
    pub(crate) fn postgres() -> Backend {
        Backend {
            env: Env::new(),
            pooler: None,
            pg: Some(pg::store()),
            mirror: false,
        }
    }

    /// A fresh PostgreSQL store reached through PgBouncer in transaction mode, used
    /// without a root.
    #[track_caller]
    pub(crate) fn postgres_pooled() -> Backend {
        let store = pg::store();
        Backend {
            env: Env::new(),
            pooler: Some(Pooler::in_front_of(&store, "", 4)),
            pg: Some(store),
            mirror: false,
        }
    }

    /// A fresh PostgreSQL store, used from a host with a mirror root.
    #[track_caller]
    pub(crate) fn postgres_mirror() -> Backend {
        Backend {
            env: Env::new(),
            pooler: None,
            pg: Some(pg::store()),
            mirror: true,
        }
    }

    /// A client of the store's schema (PostgreSQL only).
    #[track_caller]
    pub(crate) fn pg_client(&self) -> postgres::Client {
        self.pg.as_ref().expect("a PostgreSQL backend").client()
    }

    pub(crate) fn is_local(&self) -> bool {
        self.pg.is_none()
    }

    /// The store's URL (PostgreSQL only): the pooler's, for a store behind one.
    #[track_caller]
    pub(crate) fn url(&self) -> &str {
        match &self.pooler {
            Some(pooler) => pooler.url(),
            None => self.pg.as_ref().expect("a PostgreSQL backend").url(),
        }
    }

    /// The folder commands run in: the publish root, the mirror root, or an empty folder.
    pub(crate) fn env(&self) -> &Env {
        &self.env
    }

    /// A `fencepost` invocation against this backend: `--root` for a local root; for a
    /// store, `FENCEPOST_STORE` and no root (names are the store's), or `--root` the
    /// mirror.
    pub(crate) fn fp(&self, args: &[&str]) -> Run {
        let run = self.env.fp(args);
        match &self.pg {
            None => run,
            Some(_) if self.mirror => run.env("FENCEPOST_STORE", self.url()),
            Some(_) => run
                .inside(self.env.root())
                .env("FENCEPOST_STORE", self.url()),
        }
    }

    /// Shorthand: claim at tick `now`, asserting success, returning the epoch.
    #[track_caller]
    pub(crate) fn claim(&self, res: &str, owner: &str, ttl: i64, now: i64) -> i64 {
        let out = self
            .fp(&["claim", res, "--owner", owner, "--ttl", &ttl.to_string()])
            .now(now)
            .expect(0);
        out.stdout.trim().parse().expect("claim prints an epoch")
    }

    /// Shorthand: write `content` with `epoch` at tick `now`, asserting the exit code.
    #[track_caller]
    pub(crate) fn write(&self, res: &str, epoch: i64, content: &str, now: i64, code: i32) -> Done {
        self.fp(&["write", res, "--epoch", &epoch.to_string()])
            .now(now)
            .stdin(content)
            .expect(code)
    }

    /// `fencepost ARGS` at tick `now` with `stdin`, blocked at the failpoint `point` (see
    /// `spawn_paused`).
    pub(crate) fn spawn_paused(
        &self,
        args: &[&str],
        now: i64,
        stdin: &[u8],
        point: &str,
    ) -> Paused {
        self.spawn_paused_also(args, now, stdin, point, "")
    }

    /// [`Self::spawn_paused`] with more failpoints set (`also`, in the `FAILPOINTS`
    /// syntax), to hit once the process is resumed.
    pub(crate) fn spawn_paused_also(
        &self,
        args: &[&str],
        now: i64,
        stdin: &[u8],
        point: &str,
        also: &str,
    ) -> Paused {
        if self.pg.is_none() {
            return spawn_paused_also(&[], &self.env, args, Some(now), stdin, point, also);
        }
        if self.mirror {
            let mut all = vec!["--store", self.url()];
            all.extend(args);
            return spawn_paused_also(&[], &self.env, &all, Some(now), stdin, point, also);
        }
        let mut cmd = std::process::Command::new(bin());
        cmd.env_clear()
            .env("FENCEPOST_STORE", self.url())
            .current_dir(self.env.root())
            .arg("--now")
            .arg(now.to_string())
            .args(args);
        spawn_paused_command_also(cmd, stdin, point, also)
    }

    /// The document's current bytes: the file in the root, or what `cat` prints (`None`
    /// when nothing was published); for a mirror, its file, which must be what `cat`
    /// prints.
    #[track_caller]
    pub(crate) fn read(&self, res: &str) -> Option<Vec<u8>> {
        if self.is_local() {
            return self.env.read(res);
        }
        let served = self.cat(res);
        if self.mirror {
            let file = self.env.read(res);
            assert_eq!(
                file, served,
                "the mirror's {res} is not what the store serves"
            );
        }
        served
    }

    /// The document as the authority serves it: the root's file, or what `cat` prints,
    /// whatever a mirror holds.
    #[track_caller]
    pub(crate) fn served(&self, res: &str) -> Option<Vec<u8>> {
        if self.is_local() {
            self.env.read(res)
        } else {
            self.cat(res)
        }
    }

    /// Whether commands run with a mirror root.
    pub(crate) fn is_mirror(&self) -> bool {
        self.mirror
    }

    /// What `cat` prints, or `None` when nothing was published.
    #[track_caller]
    fn cat(&self, res: &str) -> Option<Vec<u8>> {
        let done = self.fp(&["cat", res]).output();
        match done.code {
            0 => {
                assert_eq!(done.stderr, "", "cat {res}");
                Some(done.stdout.into_bytes())
            }
            2 => {
                assert_eq!(done.stdout, "", "cat {res} printed a refusal's bytes");
                None
            }
            code => panic!("cat {res}: exit {code}: {}", done.stderr),
        }
    }

    /// The document as text; panics if absent.
    #[track_caller]
    pub(crate) fn text(&self, res: &str) -> String {
        let Some(bytes) = self.read(res) else {
            panic!("{res} is absent");
        };
        String::from_utf8(bytes).expect("utf-8 document")
    }

    /// The documents that exist, sorted: the root's (or mirror's) files, or the resources
    /// the store publishes content for.
    pub(crate) fn documents(&self) -> Vec<String> {
        match &self.pg {
            Some(store) if !self.mirror => store
                .client()
                .query(
                    "SELECT resource FROM fencepost_sink WHERE blob IS NOT NULL ORDER BY 1",
                    &[],
                )
                .map(|rows| rows.iter().map(|r| r.get(0)).collect())
                .unwrap_or_default(),
            _ => self.env.files(),
        }
    }

    /// What a write leaves behind when it did not publish, which must be nothing: temp
    /// files and recovery links beside the documents, a mirror's downloads, and blobs of
    /// bytes no write ever published (a version superseded since keeps its blob until
    /// `recover`).
    pub(crate) fn debris(&self) -> Vec<String> {
        let mut left: Vec<String> = self
            .env
            .files()
            .into_iter()
            .filter(|f| f.contains(".fencepost-"))
            // A replaced tree kept for readers until its deadline (`--keep-old`) is not
            // left behind: the next write or `recover` after it removes it.
            .filter(|f| !f.contains(".fencepost-old-"))
            .collect();
        if let Ok(dir) = std::fs::read_dir(self.env.path(".fencepost")) {
            left.extend(
                dir.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("incoming-")),
            );
        }
        if let Some(store) = &self.pg {
            let blobs = store
                .client()
                .query(
                    "SELECT 'blob ' || id FROM fencepost_blob b
                     WHERE NOT EXISTS (SELECT 1 FROM fencepost_sink s WHERE s.blob = b.id)
                       AND NOT EXISTS (SELECT 1 FROM fencepost_tree_blob t WHERE t.blob = b.id)
                       AND NOT EXISTS (SELECT 1 FROM fencepost_log l
                                       WHERE l.event = 'write' AND l.sha256 = b.sha256)",
                    &[],
                )
                .map(|rows| rows.iter().map(|r| r.get::<_, String>(0)).collect())
                .unwrap_or_else(|_| Vec::new());
            left.extend(blobs);
        }
        left
    }

    /// What would change if the document were rewritten: the file's inode and times, or
    /// the blob the store points the resource at.
    #[track_caller]
    pub(crate) fn stamp(&self, res: &str) -> String {
        match &self.pg {
            Some(store) if !self.mirror => {
                let row = store
                    .client()
                    .query_one(
                        "SELECT blob, written_at FROM fencepost_sink WHERE resource = $1",
                        &[&res],
                    )
                    .expect("the resource's sink row");
                let (blob, at): (Option<i64>, Option<i64>) = (row.get(0), row.get(1));
                format!("blob {blob:?} written at {at:?}")
            }
            _ => {
                let m = std::fs::symlink_metadata(self.env.path(res)).expect("document exists");
                format!(
                    "inode {} mtime {}.{} ctime {}",
                    m.ino(),
                    m.mtime(),
                    m.mtime_nsec(),
                    m.ctime_nsec()
                )
            }
        }
    }

    /// `document.state` in `status` for a document that holds what the sink recorded:
    /// `matches` (a file, hashed) or `stored` (the store keeps the bytes, no file here).
    pub(crate) fn current(&self) -> &'static str {
        if self.pg.is_some() && !self.mirror {
            "stored"
        } else {
            "matches"
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if self.pg.is_some() && !self.mirror && !std::thread::panicking() {
            let left = std::fs::read_dir(self.env.root())
                .map(|d| d.count())
                .unwrap_or(0);
            assert_eq!(
                left,
                0,
                "a command against the store made files in {}: {:?}",
                self.env.root().display(),
                self.env.files()
            );
        }
    }
}

/// Makes `local::NAME`, `postgres::NAME`, `postgres_mirror::NAME` and
/// `postgres_pooled::NAME` tests of each `NAME: fn(&Backend)`.
macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod local {
            $(
                #[test]
                fn $name() {
                    super::$name(&crate::support::Backend::local());
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                #[cfg_attr(fp_missing = "postgres", ignore = "needs PostgreSQL (Debian: postgresql)")]
                fn $name() {
                    super::$name(&crate::support::Backend::postgres());
                }
            )*
        }
        mod postgres_mirror {
            $(
                #[test]
                #[cfg_attr(fp_missing = "postgres", ignore = "needs PostgreSQL (Debian: postgresql)")]
                fn $name() {
                    super::$name(&crate::support::Backend::postgres_mirror());
                }
            )*
        }
        mod postgres_pooled {
            $(
                #[test]
                #[cfg_attr(
                    any(fp_missing = "postgres", fp_missing = "pgbouncer"),
                    ignore = "needs PostgreSQL and PgBouncer (Debian: postgresql pgbouncer)"
                )]
                fn $name() {
                    super::$name(&crate::support::Backend::postgres_pooled());
                }
            )*
        }
    };
}
pub(crate) use both_stores;
