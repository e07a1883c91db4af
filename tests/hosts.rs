//! Several hosts on one PostgreSQL store, each host a process with a mirror root of its
//! own: a worker paused inside its publishing transaction past its lease and past the
//! server's idle timeout never makes its version current on any host, and every mirror
//! converges to the version that was committed.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{Env, Run, bin};
use crate::support::pg;
use crate::support::{sha256_hex, spawn_paused};

/// A host: a mirror root of its own, its commands all pointed at the store.
pub(crate) struct Host {
    pub root: Env,
    url: String,
}

impl Host {
    pub(crate) fn new(url: &str) -> Host {
        Host {
            root: Env::new(),
            url: url.to_string(),
        }
    }

    /// A `fencepost` command on this host: `--root` its mirror, `--store` the store.
    pub(crate) fn fp(&self, args: &[&str]) -> Run {
        self.root.fp(args).env("FENCEPOST_STORE", &self.url)
    }

    /// Claims `res` as A at tick 0 and writes `bytes` under epoch 1 at tick 1.
    #[track_caller]
    pub(crate) fn claim_and_write(&self, res: &str, bytes: &str) {
        self.fp(&["claim", res, "--owner", "A", "--ttl", "10"])
            .now(0)
            .expect_stdout(0, "1");
        self.fp(&["write", res, "--epoch", "1"])
            .now(1)
            .stdin(bytes)
            .expect_stdout(0, "written");
    }

    /// The mirror's copy of `res`.
    pub(crate) fn file(&self, res: &str) -> Option<Vec<u8>> {
        self.root.read(res)
    }
}

/// `fencepost mirror --follow --json` on `host`, in the background; its stdout's lines
/// arrive on a channel, its start line already read. Killed when dropped.
pub(crate) struct Follower {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// The start line: `outcome` `following`, with the store, root, rescan and pid.
    pub started: Value,
}

impl Follower {
    pub(crate) fn start(host: &Host) -> Follower {
        let mut cmd = Follower::command(host, &["--json", "mirror", "--follow"]);
        cmd.stderr(Stdio::null());
        Follower::spawn(cmd)
    }

    /// The follower's command on `host` (`args` after `--root`), to add to before
    /// [`Follower::spawn`].
    pub(crate) fn command(host: &Host, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.env_clear()
            .env("FENCEPOST_STORE", &host.url)
            .current_dir(host.root.root())
            .arg("--root")
            .arg(host.root.root())
            .args(args);
        cmd
    }

    /// Starts `cmd`, a `--json mirror --follow`, and waits for its start line.
    pub(crate) fn spawn(mut cmd: Command) -> Follower {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn mirror --follow");
        Follower::of(child)
    }

    /// A follower already started, its stdout piped: waits for its start line.
    pub(crate) fn of(mut child: Child) -> Follower {
        let stdout = child.stdout.take().expect("stdout");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let line = lines
            .recv_timeout(Duration::from_secs(30))
            .expect("mirror --follow printed no start line in time");
        let started: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(started["outcome"], "following", "{started}");
        Follower {
            child,
            lines,
            started,
        }
    }

    /// The next pass it reports, within `deadline`.
    #[track_caller]
    pub(crate) fn next_pass(&self, deadline: Duration) -> Value {
        let line = self
            .lines
            .recv_timeout(deadline)
            .expect("mirror --follow reported no pass in time");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends it SIGTERM and waits for it: see [`Follower::finish`].
    pub(crate) fn terminate(self) -> (std::process::ExitStatus, Vec<Value>) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("a pid"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        self.finish()
    }

    /// Waits for it to exit: its exit status and the lines it printed after the last one
    /// read (its stop line last).
    pub(crate) fn finish(mut self) -> (std::process::ExitStatus, Vec<Value>) {
        let status = self.child.wait().expect("wait");
        let rest = self
            .lines
            .iter()
            .map(|line| serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect();
        (status, rest)
    }
}

/// A follower the test did not stop is killed, so none outlives its test.
impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `path` holds `want`, failing after `deadline`; never a fixed sleep.
#[track_caller]
pub(crate) fn wait_for_file(path: &Path, want: &[u8], deadline: Duration) {
    let start = Instant::now();
    loop {
        if std::fs::read(path).ok().as_deref() == Some(want) {
            return;
        }
        assert!(
            start.elapsed() < deadline,
            "{} never came to hold the expected {} bytes",
            path.display(),
            want.len()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The `write` events the store's log holds for `res`: (owner, epoch, sha256).
fn logged_writes(host: &Host, res: &str) -> Vec<(Value, Value, Value)> {
    let log = host.fp(&["--json", "log", res]).now(20).expect(0).json();
    log["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["event"] == "write")
        .map(|e| (e["owner"].clone(), e["epoch"].clone(), e["sha256"].clone()))
        .collect()
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_worker_paused_inside_its_commit_past_lease_and_idle_timeout_publishes_nothing() {
    let store = pg::store();
    // The server ends a session idle inside its transaction after 1 s: A's, paused.
    let url = store.url_with(&["idle_in_transaction_session_timeout=1s"]);
    let (a, b, c) = (Host::new(&url), Host::new(&url), Host::new(&url));
    let a_bytes = b"A's report, prepared before the pause\n".to_vec();
    let b_bytes = b"B's report\n".to_vec();
    let res = "doc.md";

    a.fp(&["claim", res, "--owner", "A", "--ttl", "10"])
        .now(0)
        .expect_stdout(0, "1");
    // A third host follows the store. Its first pass applies what is published already,
    // and it listens before that pass: once it reports, no later publish is missed.
    b.fp(&["claim", "hello.md", "--owner", "B", "--ttl", "10"])
        .now(0)
        .expect_stdout(0, "1");
    b.fp(&["write", "hello.md", "--epoch", "1"])
        .now(0)
        .stdin("hello")
        .expect_stdout(0, "written");
    let follower = Follower::start(&c);
    let first = follower.next_pass(Duration::from_secs(30));
    assert_eq!(first["applied"][0]["resource"], "hello.md", "{first}");
    assert_eq!(c.file("hello.md").as_deref(), Some(&b"hello"[..]));

    // A's write stops inside its transaction: the sink's rules passed, the resource's
    // row is locked, the sink points at A's blob, COMMIT not yet sent.
    let args = [
        "--store", &url, "write", res, "--epoch", "1", "--owner", "A",
    ];
    let paused = spawn_paused(&a.root, &args, Some(5), &a_bytes, "txn.before_commit");

    // B takes over at the deadline. Its claim waits for A's row lock until the server
    // ends A's session, then finds A's lease expired.
    let j = b
        .fp(&["--json", "claim", res, "--owner", "B", "--ttl", "10"])
        .now(10)
        .expect(0)
        .json_contract();
    assert_eq!(j["epoch"], 2, "{j}");
    assert_eq!(j["previous"]["owner"], "A", "{j}");
    b.fp(&["write", res, "--epoch", "2", "--owner", "B"])
        .now(11)
        .stdin(b_bytes.clone())
        .expect_stdout(0, "written");
    // B's own mirror took the version at once; the follower takes it from the notice.
    assert_eq!(b.file(res), Some(b_bytes.clone()));
    wait_for_file(&c.root.path(res), &b_bytes, Duration::from_secs(30));
    b.fp(&["complete", res, "--owner", "B", "--epoch", "2"])
        .now(12)
        .expect_stdout(0, "completed");

    // A resumes: its session is gone, so its COMMIT cannot happen.
    let out = paused.resume();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "A's late commit: {stderr}");
    assert!(stderr.starts_with("fencepost: "), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");

    only_b_published(&a, &url, res, &b_bytes);

    // Every mirror converges to B's bytes: A's by a pass of its own, B's and the
    // follower's already there.
    let j = a.fp(&["--json", "mirror"]).expect(0).json();
    assert_eq!(j["applied"][0]["outcome"], "applied", "{j}");
    assert_eq!(j["applied"][0]["epoch"], 2, "{j}");
    b.fp(&["mirror"])
        .expect_stdout(0, "up to date (2 documents)");
    for host in [&a, &b, &c] {
        assert_eq!(host.file(res), Some(b_bytes.clone()));
        host.fp(&["verify"]).now(13).expect(0);
    }
    let pass = follower.next_pass(Duration::from_secs(30));
    let applied = pass["applied"].as_array().expect("applied");
    assert_eq!(applied.len(), 1, "{pass}");
    assert_eq!(applied[0]["resource"], res, "{pass}");
    assert_eq!(applied[0]["epoch"], 2, "{pass}");
    assert_eq!(applied[0]["sha256"], sha256_hex(&b_bytes), "{pass}");
    assert!(
        follower.lines.try_recv().is_err(),
        "the follower applied something after B's version"
    );
    drop(follower);
    drop(store);
}

/// The store holds B's version as current and logs no write of A's.
fn only_b_published(a: &Host, url: &str, res: &str, b_bytes: &[u8]) {
    // The store: B's version is current, A's never was.
    let status = a.fp(&["--json", "status", res]).now(13).expect(0).json();
    let row = &status["resources"][0];
    assert_eq!(row["sink"]["content_epoch"], 2, "{row}");
    assert_eq!(row["sink"]["sha256"], sha256_hex(b_bytes), "{row}");
    assert_eq!(row["lease"]["owner"], "B", "{row}");
    assert_eq!(row["lease"]["state"], "completed", "{row}");
    let cat = Command::new(bin())
        .env_clear()
        .args(["--store", url, "cat", res])
        .current_dir(crate::harness::scratch())
        .output()
        .expect("run cat");
    assert_eq!(cat.stdout, b_bytes);
    assert_eq!(
        logged_writes(a, res),
        [(
            Value::from("B"),
            Value::from(2),
            Value::from(sha256_hex(b_bytes))
        )]
    );
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_claim_that_waited_for_the_lock_judges_the_lease_at_the_time_it_got_it() {
    let store = pg::store();
    // On the wall clock: A's lease lasts 3 s; A's write then holds the resource's row,
    // paused inside its transaction, until the server ends its session after 5 s idle.
    let url = store.url_with(&["idle_in_transaction_session_timeout=5s"]);
    let (a, b) = (Host::new(&url), Host::new(&url));
    a.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "3s"])
        .expect_stdout(0, "1");
    let args = ["--store", &url, "write", "doc.md", "--epoch", "1"];
    let paused = spawn_paused(&a.root, &args, None, b"A's", "txn.before_commit");
    // B asks while A's lease is live and waits for the row until A's session ends, past
    // A's deadline: judged when B got the row, A's lease has expired, and B takes over.
    let j = b
        .fp(&["--json", "claim", "doc.md", "--owner", "B", "--ttl", "60s"])
        .env("FENCEPOST_BUSY_TIMEOUT", "30s")
        .expect(0)
        .json_contract();
    assert_eq!(j["epoch"], 2, "{j}");
    assert_eq!(j["previous"]["owner"], "A", "{j}");
    assert_eq!(paused.resume().status.code(), Some(1));
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn claim_wait_waits_through_a_row_locked_past_the_busy_timeout() {
    let store = pg::store();
    let b = Host::new(store.url());
    b.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "1ms"])
        .expect_stdout(0, "1");
    // Another session holds the resource's row, as one stuck on a cut network does.
    let mut holder = store.client();
    let mut lock = holder.transaction().expect("BEGIN");
    lock.query(
        "SELECT resource FROM fencepost_lock WHERE resource = 'doc.md' FOR UPDATE",
        &[],
    )
    .expect("lock the row");
    let mut claim = Command::new(bin())
        .env_clear()
        .env("FENCEPOST_STORE", store.url())
        .current_dir(b.root.root())
        .arg("--root")
        .arg(b.root.root())
        .args(["--busy-timeout", "200ms", "--json", "claim", "doc.md"])
        .args(["--owner", "B", "--ttl", "30s", "--wait", "60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn claim");
    // Its lock waits end with `busy` after 200 ms: seen as a second wait for the lock
    // begun after the first (a new statement of the same session), the claim still on.
    let mut watch = store.client();
    let waits = |watch: &mut postgres::Client| -> Vec<String> {
        watch
            .query(
                "SELECT query_start::text FROM pg_stat_activity
                 WHERE application_name = $1 AND wait_event_type = 'Lock'",
                &[&store.name()],
            )
            .expect("pg_stat_activity")
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let started = Instant::now();
    let mut first: Option<String> = None;
    loop {
        if let Some(status) = claim.try_wait().expect("try_wait") {
            let out = claim.wait_with_output().expect("output");
            panic!(
                "claim --wait gave up ({status}) while the row was locked: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        let now = waits(&mut watch);
        match (&first, now.first()) {
            (None, Some(at)) => first = Some(at.clone()),
            (Some(seen), Some(at)) if at != seen => break,
            _ => {}
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "claim --wait never waited for the lock again"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    lock.commit().expect("COMMIT");
    let out = claim.wait_with_output().expect("claim");
    assert!(
        out.status.success(),
        "claim --wait: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Value = serde_json::from_slice(&out.stdout).expect("claim --json");
    assert_eq!(j["epoch"], 2, "{j}");
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_wait_that_ran_out_on_a_locked_row_says_how_long_it_waited() {
    let store = pg::store();
    let b = Host::new(store.url());
    b.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "1ms"])
        .expect_stdout(0, "1");
    let mut holder = store.client();
    let mut lock = holder.transaction().expect("BEGIN");
    lock.query(
        "SELECT resource FROM fencepost_lock WHERE resource = 'doc.md' FOR UPDATE",
        &[],
    )
    .expect("lock the row");
    let done = b
        .fp(&[
            "--busy-timeout",
            "100ms",
            "--json",
            "claim",
            "doc.md",
            "--owner",
            "B",
            "--ttl",
            "30s",
            "--wait",
            "700ms",
        ])
        .expect(7);
    let j = done.json_contract();
    assert_eq!(j["outcome"], "busy", "{j}");
    let message = j["error"].as_str().expect("error");
    let waited: u64 = message
        .rsplit_once("(waited ")
        .and_then(|(_, rest)| rest.strip_suffix(" ms)"))
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("how long it waited: {message}"));
    assert!(waited >= 700, "{message}");
    lock.rollback().expect("ROLLBACK");
}
