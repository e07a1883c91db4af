//! What a command says of its COMMIT on a PostgreSQL store when the server cannot
//! confirm it: a synchronous standby that is down (a COMMIT committed on the primary,
//! never confirmed, is not a success; `--commit-timeout` bounds the wait; a refusal
//! answers at once), a session that broke before or at COMMIT (the server's idle
//! timeout, a terminated backend: rolled back, and said so), a full disk under an
//! upload (its partial blob removed), and a role that may not prune the log.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::harness::bin;
use crate::hosts::Host;
use crate::support::pg::{self, PrivateCluster};
use crate::support::spawn_paused;

/// A standby name no standby has: with it in `synchronous_standby_names`, every
/// durable COMMIT waits for a confirmation that never comes.
const NO_STANDBY: (&str, &str) = ("synchronous_standby_names", "'fencepost_test_standby'");

/// A generous bound for a command that must not hang; a hung one is killed and fails
/// the test.
const HANG: Duration = Duration::from_secs(60);

/// `fencepost --store URL ARGS` with `envs`, started in the background.
fn start(url: &str, args: &[&str], envs: &[(&str, &str)]) -> std::process::Child {
    Command::new(bin())
        .env_clear()
        .envs(envs.iter().copied())
        .current_dir(crate::harness::scratch())
        .arg("--store")
        .arg(url)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fencepost")
}

/// Waits for `child` for at most [`HANG`]: its output and how long it took.
#[track_caller]
fn finish(mut child: std::process::Child, started: Instant) -> (Output, Duration) {
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            let out = child.wait_with_output().expect("output");
            return (out, started.elapsed());
        }
        if started.elapsed() > HANG {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "still running after {HANG:?} (hung on its COMMIT): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until a session of `application` is in `state` (SQL `LIKE`) and, if
/// `wait_event` is given, waiting on it; returns its backend's pid.
#[track_caller]
fn session(admin: &str, application: &str, state: &str, wait_event: Option<&str>) -> i32 {
    let mut client = pg::connect(admin);
    let started = Instant::now();
    loop {
        let row = client
            .query_opt(
                "SELECT pid FROM pg_stat_activity
                 WHERE application_name = $1 AND state LIKE $2
                   AND ($3::text IS NULL OR wait_event = $3) LIMIT 1",
                &[&application, &state, &wait_event],
            )
            .expect("pg_stat_activity");
        if let Some(row) = row {
            return row.get(0);
        }
        assert!(
            started.elapsed() < HANG,
            "no session of {application} {state} {wait_event:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the backend `pid` is gone.
#[track_caller]
fn gone(admin: &str, pid: i32) {
    let mut client = pg::connect(admin);
    let started = Instant::now();
    while client
        .query_opt("SELECT 1 FROM pg_stat_activity WHERE pid = $1", &[&pid])
        .expect("pg_stat_activity")
        .is_some()
    {
        assert!(started.elapsed() < HANG, "backend {pid} never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A private cluster whose store has its tables and a lease (A, epoch 1, on `doc.md`,
/// ticks 0-10), then made to wait at every durable COMMIT for a standby that is down.
fn standby_down() -> (PrivateCluster, String) {
    let cluster = PrivateCluster::start();
    let url = cluster.url();
    let host = Host::new(&url);
    host.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(0)
        .expect_stdout(0, "1");
    cluster.configure(&[NO_STANDBY]);
    (cluster, url)
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_commit_whose_standby_wait_is_cancelled_is_not_reported_as_success() {
    let (cluster, url) = standby_down();
    let started = Instant::now();
    let claim = start(
        &url,
        &[
            "--now", "1", "claim", "new.md", "--owner", "B", "--ttl", "10",
        ],
        &[],
    );
    // The claim's COMMIT waits for the standby; an operator (a "kill long queries" job)
    // cancels the wait. The server says the transaction committed locally only.
    let pid = session(&cluster.url(), "fencepost", "active", Some("SyncRep"));
    let mut admin = pg::connect(&cluster.url());
    admin
        .execute("SELECT pg_cancel_backend($1)", &[&pid])
        .expect("pg_cancel_backend");
    let (out, _) = finish(claim, started);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("committed on the primary, not confirmed by its synchronous standby"),
        "{stderr}"
    );
    assert!(stderr.contains("\nhint: "), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_commit_the_standby_never_confirms_stops_at_the_commit_timeout() {
    let (_cluster, url) = standby_down();
    // Through the variable, so that a build without the option hangs here (and is
    // killed by the bound) rather than refusing an unknown flag.
    let started = Instant::now();
    let claim = start(
        &url,
        &[
            "--now", "1", "claim", "new.md", "--owner", "B", "--ttl", "10",
        ],
        &[("FENCEPOST_COMMIT_TIMEOUT", "1s")],
    );
    let (out, took) = finish(claim, started);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "did not confirm the COMMIT within 1s: committed on the primary, not \
             confirmed by its synchronous standby"
        ),
        "{stderr}"
    );
    // A safety bound, with slack for a loaded machine: the 1 s timeout, a cancel
    // request, the answer.
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_stale_write_is_refused_at_once_while_the_standby_is_down() {
    let cluster = PrivateCluster::start();
    let url = cluster.url();
    let host = Host::new(&url);
    host.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(0)
        .expect_stdout(0, "1");
    host.fp(&["claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(10)
        .expect_stdout(0, "2");
    cluster.configure(&[NO_STANDBY]);
    // A's late write: refused as stale, its refusal logged without waiting for the
    // standby. The commit timeout is left at its default (30 s), which the answer must
    // not wait for.
    let started = Instant::now();
    let mut write = start(
        &url,
        &[
            "--now", "11", "write", "doc.md", "--epoch", "1", "--owner", "A",
        ],
        &[],
    );
    drop(write.stdin.take());
    let (out, took) = finish(write, started);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("stale"), "{stderr}");
    assert!(
        !stderr.contains("warning"),
        "the refusal was not logged: {stderr}"
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_session_ended_by_the_idle_timeout_before_commit_says_nothing_was_changed() {
    let store = pg::store();
    let url = store.url_with(&["idle_in_transaction_session_timeout=1s"]);
    let host = Host::new(&url);
    let args = [
        "--store", &url, "claim", "doc.md", "--owner", "A", "--ttl", "10",
    ];
    let paused = spawn_paused(&host.root, &args, Some(0), b"", "txn.before_commit");
    // The server ends the session idle inside its transaction.
    let pid = session(store.admin(), store.name(), "idle in transaction%", None);
    gone(store.admin(), pid);
    let out = paused.resume();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("idle_in_transaction_session_timeout")
            && stderr.contains("nothing was changed"),
        "{stderr}"
    );
    assert!(!stderr.contains("may or may not"), "{stderr}");
    // Nothing was: the next claim gets epoch 1.
    host.fp(&["claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(1)
        .expect_stdout(0, "1");
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_session_ended_by_the_idle_timeout_inside_its_transaction_says_so() {
    let store = pg::store();
    let url = store.url_with(&["idle_in_transaction_session_timeout=1s"]);
    let host = Host::new(&url);
    host.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(0)
        .expect_stdout(0, "1");
    let args = ["--store", &url, "write", "doc.md", "--epoch", "1"];
    let paused = spawn_paused(&host.root, &args, Some(1), b"A's", "txn.after_begin");
    let pid = session(store.admin(), store.name(), "idle in transaction%", None);
    gone(store.admin(), pid);
    let out = paused.resume();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("idle_in_transaction_session_timeout")
            && stderr.contains("nothing was changed"),
        "{stderr}"
    );
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
    let status = host
        .fp(&["--json", "status", "doc.md"])
        .now(2)
        .expect(0)
        .json();
    assert!(
        status["resources"][0]["sink"]["content_epoch"].is_null(),
        "{status}"
    );
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_backend_terminated_before_commit_is_reported_as_rolled_back() {
    let store = pg::store();
    let url = store.url().to_string();
    let host = Host::new(&url);
    let args = [
        "--store", &url, "claim", "doc.md", "--owner", "A", "--ttl", "10",
    ];
    let paused = spawn_paused(&host.root, &args, Some(0), b"", "txn.before_commit");
    let pid = session(store.admin(), store.name(), "idle in transaction%", None);
    pg::connect(store.admin())
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .expect("pg_terminate_backend");
    gone(store.admin(), pid);
    let out = paused.resume();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("rolled back: nothing was changed"),
        "{stderr}"
    );
    host.fp(&["claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(1)
        .expect_stdout(0, "1");
}

#[test]
fn a_commit_timeout_of_zero_is_bad_input() {
    let env = crate::harness::Env::new();
    let done = env
        .fp(&["--commit-timeout", "0", "status"])
        .now(0)
        .expect(2);
    assert!(
        done.stderr
            .starts_with("fencepost: --commit-timeout must be more than zero"),
        "{}",
        done.stderr
    );
}

/// A role dropped (with its privileges) when the test ends.
struct Role {
    admin: String,
    name: String,
}

impl Drop for Role {
    fn drop(&mut self) {
        let dropped = postgres::Client::connect(&self.admin, postgres::NoTls).and_then(|mut c| {
            c.batch_execute(&format!(
                "DROP OWNED BY {0}; DROP ROLE IF EXISTS {0}",
                self.name
            ))
        });
        if let Err(e) = dropped {
            eprintln!(
                "warning: could not drop role {}: {}",
                self.name,
                pg::chain(&e)
            );
        }
    }
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_claim_by_a_role_that_may_not_prune_the_log_succeeds() {
    let store = pg::store();
    let host = Host::new(store.url());
    host.fp(&["claim", "setup.md", "--owner", "A", "--ttl", "10"])
        .now(0)
        .expect_stdout(0, "1");
    let role = Role {
        admin: store.admin().to_string(),
        name: format!("fp_role_{:08x}", fastrand::u32(..)),
    };
    let (schema, name) = (store.name(), &role.name);
    pg::connect(store.admin())
        .batch_execute(&format!(
            "CREATE ROLE {name} LOGIN;
             GRANT USAGE ON SCHEMA {schema} TO {name};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {name};
             REVOKE DELETE ON {schema}.fencepost_log FROM {name};
             GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO {name};
             SELECT setval('{schema}.fencepost_log_id_seq', 999);"
        ))
        .expect("a role without DELETE on the log");
    // The claim's event is the log's 1,000th: the automatic prune runs inside it.
    let as_role = store
        .url()
        .replace("user=postgres", &format!("user={name}"));
    assert_ne!(as_role, store.url(), "the test store's URL names its user");
    let claimer = Host::new(&as_role);
    claimer
        .fp(&["claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(1)
        .expect_stdout(0, "1");
    let log = host.fp(&["--json", "log", "doc.md"]).expect(0).json();
    assert_eq!(log["events"][0]["id"], 1000, "{log}");
    drop(role);
}

/// A small tmpfs holding a PostgreSQL tablespace; the tablespace dropped and the tmpfs
/// unmounted when dropped (after the store whose tables were in it).
struct SmallTablespace {
    admin: String,
    name: String,
    dir: tempfile::TempDir,
}

impl SmallTablespace {
    #[track_caller]
    fn new(admin: &str, size: &str) -> SmallTablespace {
        let dir = tempfile::Builder::new()
            .prefix("fencepost-full-")
            .tempdir()
            .expect("temp dir");
        let at = dir.path().to_str().expect("utf-8 path").to_string();
        let run = |program: &str, args: &[&str]| {
            let ok = Command::new(program)
                .args(args)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "{program} {args:?}");
        };
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "fencepost-full",
                &at,
            ],
        );
        let mut space = SmallTablespace {
            admin: admin.to_string(),
            name: String::new(),
            dir,
        };
        run("chmod", &["755", &at]);
        run("mkdir", &[&format!("{at}/ts")]);
        run("chown", &["postgres:", &format!("{at}/ts")]);
        let name = format!("fp_full_{:08x}", fastrand::u32(..));
        pg::connect(admin)
            .batch_execute(&format!("CREATE TABLESPACE {name} LOCATION '{at}/ts'"))
            .expect("create tablespace");
        space.name = name;
        space
    }
}

impl Drop for SmallTablespace {
    fn drop(&mut self) {
        if !self.name.is_empty() {
            let dropped = postgres::Client::connect(&self.admin, postgres::NoTls)
                .and_then(|mut c| c.batch_execute(&format!("DROP TABLESPACE {}", self.name)));
            if let Err(e) = dropped {
                eprintln!(
                    "warning: could not drop tablespace {}: {}",
                    self.name,
                    pg::chain(&e)
                );
            }
        }
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
#[cfg_attr(fp_missing = "root", ignore = "needs root")]
fn an_upload_that_fills_the_servers_disk_says_so_and_leaves_no_partial_blob() {
    crate::support::needs::root();
    let admin = pg::server_url();
    let space = SmallTablespace::new(&admin, "16m");
    let store = pg::store();
    let setting = format!("default_tablespace={}", space.name);
    let url = store.url_with(&[&setting]);
    let host = Host::new(&url);
    host.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(0)
        .expect_stdout(0, "1");
    let big = vec![b'x'; 40 << 20];
    let done = host
        .fp(&["write", "doc.md", "--epoch", "1"])
        .now(1)
        .stdin(big)
        .output();
    let mut client = pg::connect(store.admin());
    let mut count = |sql: &str| -> i64 {
        client
            .query_one(&sql.replace("S.", &format!("{}.", store.name())), &[])
            .expect("count")
            .get(0)
    };
    assert_eq!(count("SELECT count(*) FROM S.fencepost_chunk"), 0);
    assert_eq!(
        count("SELECT count(*) FROM S.fencepost_blob WHERE NOT complete"),
        0
    );
    drop(client);
    assert_eq!(done.code, 1, "{}", done.stderr);
    assert!(
        done.stderr.contains("the store's disk is full"),
        "{}",
        done.stderr
    );
    assert!(done.stderr.contains("\nhint: "), "{}", done.stderr);
    drop(store);
    drop(space);
}
