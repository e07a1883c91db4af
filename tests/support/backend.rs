//! The two places the protocol's state can live, behind one interface, so that one test
//! body proves a behaviour of both: a local publish root (its SQLite state file, the
//! documents as files in it) and a PostgreSQL store (`--store`, no root on this host,
//! the documents read back with `fencepost cat`).
//!
//! [`both_stores!`] turns a list of test bodies, each a `fn(&Backend)`, into two tests
//! apiece, `local::NAME` and `postgres::NAME`; the second says "skipped" without a
//! server (see `pg`). The PostgreSQL half also checks, when the test ends, that no
//! command made a file in the folder it ran in: without a root, nothing local exists.

#![allow(dead_code)]

use std::os::unix::fs::MetadataExt as _;

use crate::harness::{Done, Env, Run, bin};
use crate::support::pg::{self, TestStore};
use crate::support::{Paused, spawn_paused, spawn_paused_command};

/// Where a behaviour test keeps its state.
pub(crate) struct Backend {
    /// The publish root (local), or the empty folder commands run in (PostgreSQL).
    env: Env,
    /// The store's database, for PostgreSQL.
    pg: Option<TestStore>,
}

impl Backend {
    /// A fresh local publish root.
    pub(crate) fn local() -> Backend {
        Backend {
            env: Env::new(),
            pg: None,
        }
    }

    /// A fresh PostgreSQL store, or `None` (the test is skipped) without a server.
    #[track_caller]
    pub(crate) fn postgres() -> Option<Backend> {
        Some(Backend {
            env: Env::new(),
            pg: Some(pg::store()?),
        })
    }

    pub(crate) fn is_local(&self) -> bool {
        self.pg.is_none()
    }

    /// The store's URL (PostgreSQL only).
    #[track_caller]
    pub(crate) fn url(&self) -> &str {
        self.pg.as_ref().expect("a PostgreSQL backend").url()
    }

    /// The folder commands run in: the publish root, or (PostgreSQL) an empty folder.
    pub(crate) fn env(&self) -> &Env {
        &self.env
    }

    /// A `fencepost` invocation against this backend: `--root` for a local root; for a
    /// store, `FENCEPOST_STORE` and no root (names are the store's).
    pub(crate) fn fp(&self, args: &[&str]) -> Run {
        let run = self.env.fp(args);
        match &self.pg {
            None => run,
            Some(store) => run
                .inside(self.env.root())
                .env("FENCEPOST_STORE", store.url()),
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
        let Some(store) = &self.pg else {
            return spawn_paused(&self.env, args, Some(now), stdin, point);
        };
        let mut cmd = std::process::Command::new(bin());
        cmd.env_clear()
            .env("FENCEPOST_STORE", store.url())
            .current_dir(self.env.root())
            .arg("--now")
            .arg(now.to_string())
            .args(args);
        spawn_paused_command(cmd, stdin, point)
    }

    /// The document's current bytes: the file in the root, or what `cat` prints (`None`
    /// when nothing was published).
    #[track_caller]
    pub(crate) fn read(&self, res: &str) -> Option<Vec<u8>> {
        if self.is_local() {
            return self.env.read(res);
        }
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

    /// The documents that exist, sorted: the root's files, or the resources the store
    /// publishes content for.
    pub(crate) fn documents(&self) -> Vec<String> {
        match &self.pg {
            None => self.env.files(),
            Some(store) => store
                .client()
                .query(
                    "SELECT resource FROM fencepost_sink WHERE blob IS NOT NULL ORDER BY 1",
                    &[],
                )
                .map(|rows| rows.iter().map(|r| r.get(0)).collect())
                .unwrap_or_default(),
        }
    }

    /// What a write leaves behind when it did not publish, which must be nothing: temp
    /// files and recovery links beside the documents, or blobs of bytes no write ever
    /// published (a version superseded since keeps its blob until `recover`).
    pub(crate) fn debris(&self) -> Vec<String> {
        match &self.pg {
            None => self
                .env
                .files()
                .into_iter()
                .filter(|f| f.contains(".fencepost-"))
                .collect(),
            Some(store) => store
                .client()
                .query(
                    "SELECT 'blob ' || id FROM fencepost_blob b
                     WHERE NOT EXISTS (SELECT 1 FROM fencepost_sink s WHERE s.blob = b.id)
                       AND NOT EXISTS (SELECT 1 FROM fencepost_log l
                                       WHERE l.event = 'write' AND l.sha256 = b.sha256)",
                    &[],
                )
                .map(|rows| rows.iter().map(|r| r.get(0)).collect())
                .unwrap_or_default(),
        }
    }

    /// What would change if the document were rewritten: the file's inode and times, or
    /// the blob the store points the resource at.
    #[track_caller]
    pub(crate) fn stamp(&self, res: &str) -> String {
        match &self.pg {
            None => {
                let m = std::fs::symlink_metadata(self.env.path(res)).expect("document exists");
                format!(
                    "inode {} mtime {}.{} ctime {}",
                    m.ino(),
                    m.mtime(),
                    m.mtime_nsec(),
                    m.ctime_nsec()
                )
            }
            Some(store) => {
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
        }
    }

    /// `document.state` in `status` for a document that holds what the sink recorded:
    /// `matches` (a file, hashed) or `stored` (the store keeps the bytes).
    pub(crate) fn current(&self) -> &'static str {
        if self.is_local() { "matches" } else { "stored" }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if self.pg.is_some() && !std::thread::panicking() {
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

/// Makes `local::NAME` and `postgres::NAME` tests of each `NAME: fn(&Backend)`.
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
                fn $name() {
                    if let Some(backend) = crate::support::Backend::postgres() {
                        super::$name(&backend);
                    }
                }
            )*
        }
    };
}
pub(crate) use both_stores;
