//! A bounded torture of the PostgreSQL store, as tests/torture.rs is of the local state
//! file: workers loop claim, write, complete on a few resources (the wall clock, short
//! leases) against a server of the test's own; followers (`mirror --follow`) keep mirror
//! roots; a reader `cat`s the store and reads the mirrors' files all along; a chaos loop
//! chooses, by a seeded RNG, among SIGKILL and SIGSTOP/SIGCONT of a worker's command or a
//! follower, `pg_terminate_backend` of a fencepost session, and a crash of the server
//! (`pg_ctl stop -m immediate`, then a restart that replays the WAL). A quarter of the
//! commands are slowed at one step of a write, and half the followers at one step of
//! every apply (a `sleep` failpoint), to widen the windows the chaos can land in; half
//! the time a killed follower's root is recovered (`recover`) before it starts again.
//!
//! All along: every version a reader sees is one complete version that was offered, and
//! no reader sees a resource's epoch go back (on the store or on a mirror). At the end:
//! every acknowledged write (exit 0 `written` or `replay`) is in the store's log and is
//! current or superseded by a higher epoch, the followers converge, and after a final
//! `mirror` pass `verify` passes on the store and on every mirror, which hold what the
//! store serves.
//!
//! The seed is printed at the start and in every failure;
//! `FENCEPOST_TORTURE_SEED=N` replays the chaos's decisions (thread timing still varies),
//! `FENCEPOST_TORTURE_SECS` sets the time under chaos (default 20, as tests/torture.rs).

use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};

use crate::harness::{Env, Run, bin};
use crate::hosts::Host;
use crate::support::pg::PrivateCluster;
use crate::support::{WRITE_POINTS, sha256_hex, signal};
use crate::torture::{Rng, check_version, make_version};

const RESOURCES: [&str; 3] = ["r0.txt", "r1.txt", "deep/r2.txt"];
const WORKERS: usize = 4;
const FOLLOWERS: usize = 2;
const TTL: &str = "1s";
const BUSY: &str = "3s";

/// What the test counts, for the summary.
#[derive(Debug, Default)]
struct Stats {
    spawned: AtomicUsize,
    killed: AtomicUsize,
    stopped: AtomicUsize,
    terminated: AtomicUsize,
    crashes: AtomicUsize,
    slowed: AtomicUsize,
    follower_restarts: AtomicUsize,
    recovered: AtomicUsize,
    claims: AtomicUsize,
    held: AtomicUsize,
    written: AtomicUsize,
    replayed: AtomicUsize,
    refused: AtomicUsize,
    busy: AtomicUsize,
    errors: AtomicUsize,
    cats: AtomicUsize,
    mirror_reads: AtomicUsize,
}

fn add(counter: &AtomicUsize) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn get(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::Relaxed)
}

/// An acknowledged write.
#[derive(Debug, Clone)]
struct Ack {
    res: String,
    epoch: i64,
    sha256: String,
}

/// What every thread shares.
struct Shared {
    seed: u64,
    url: String,
    /// The folder commands against the store run in (no root).
    cwd: Env,
    stats: Stats,
    acks: Mutex<Vec<Ack>>,
    /// Every content ever offered: SHA-256 -> (resource, epoch).
    offered: Mutex<HashMap<String, (String, i64)>>,
    /// The pids of live processes the chaos may signal. A process is reaped only with
    /// this lock held and leaves the list at once, so no pid here is ever reused.
    live: Mutex<Vec<u32>>,
    /// What went wrong; the first ends the chaos.
    violations: Mutex<Vec<String>>,
    /// Set when the chaos is over (or something went wrong).
    done: AtomicBool,
}

impl Shared {
    fn violation(&self, what: String) {
        self.violations.lock().expect("lock").push(what);
        self.done.store(true, Ordering::SeqCst);
    }

    fn done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    /// A command against the store, as the harness runs it.
    fn fp(&self, args: &[&str]) -> Run {
        self.cwd
            .fp(args)
            .inside(self.cwd.root())
            .env("FENCEPOST_STORE", &self.url)
    }

    fn summary(&self) -> String {
        let s = &self.stats;
        format!(
            "store torture seed {} (replay: FENCEPOST_TORTURE_SEED={}): {} processes: {} \
             SIGKILLed, {} SIGSTOPped, {} slowed; {} sessions terminated, {} server crashes, {} follower \
             restarts ({} after a recover); {} claims ({} held), {} written, {} replayed, {} refused, {} busy, {} errors; {} \
             cats, {} mirror reads",
            self.seed,
            self.seed,
            get(&s.spawned),
            get(&s.killed),
            get(&s.stopped),
            get(&s.slowed),
            get(&s.terminated),
            get(&s.crashes),
            get(&s.follower_restarts),
            get(&s.recovered),
            get(&s.claims),
            get(&s.held),
            get(&s.written),
            get(&s.replayed),
            get(&s.refused),
            get(&s.busy),
            get(&s.errors),
            get(&s.cats),
            get(&s.mirror_reads),
        )
    }
}

/// How a process ended: its exit code (`None` if a signal ended it), stdout, stderr.
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Polls `child`, registered in `shared.live`, until it exits (killing it first when
/// `stop` is set); reaps it with the lock held and deregisters it.
fn wait_registered(shared: &Shared, mut child: Child, stop: Option<&AtomicBool>) -> Output {
    let pid = child.id();
    loop {
        {
            let mut live = shared.live.lock().expect("lock");
            if stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
                let _ = child.kill();
            }
            if child.try_wait().expect("try_wait").is_some() {
                live.retain(|p| *p != pid);
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    child.wait_with_output().expect("wait")
}

/// `FAILPOINTS` slowing one step of a write by 1-30 ms, a quarter of the time: a wider
/// window for a kill, a pause or a crash to land in.
fn slowed(rng: &mut Rng, stats: &Stats) -> String {
    if rng.below(4) != 0 {
        return String::new();
    }
    add(&stats.slowed);
    let point = WRITE_POINTS[rng.below(WRITE_POINTS.len() as u64) as usize];
    format!("{point}=sleep({})", 1 + rng.below(30))
}

/// Runs one `fencepost` command against the store, open to the chaos while it runs.
fn chaos_run(shared: &Shared, rng: &mut Rng, args: &[&str], stdin: &[u8]) -> Outcome {
    let mut child = Command::new(bin())
        .env_clear()
        .env("FAILPOINTS", slowed(rng, &shared.stats))
        .env("FENCEPOST_STORE", &shared.url)
        .current_dir(shared.cwd.root())
        .args(["--busy-timeout", BUSY])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fencepost");
    add(&shared.stats.spawned);
    shared.live.lock().expect("lock").push(child.id());
    {
        let mut input = child.stdin.take().expect("stdin");
        // Small enough for the pipe buffer; a process killed first gives EPIPE.
        let _ = input.write_all(stdin);
    }
    let out = wait_registered(shared, child, None);
    let out = Outcome {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    };
    // An error is one `fencepost: ` line (and maybe a hint), never a panic.
    if out.code.is_some_and(|c| c != 0) && !out.stderr.starts_with("fencepost: ") {
        shared.violation(format!(
            "fencepost {args:?} exited {:?} without a `fencepost: ` line: {:?}",
            out.code, out.stderr
        ));
    }
    out
}

/// One worker: claim a resource, write a version under the epoch, complete half the
/// time.
fn worker(shared: &Shared, rng: &mut Rng, owner: &str) {
    let stats = &shared.stats;
    while !shared.done() {
        let res = RESOURCES[rng.below(RESOURCES.len() as u64) as usize];
        let out = chaos_run(
            shared,
            rng,
            &["claim", res, "--owner", owner, "--ttl", TTL],
            b"",
        );
        let epoch = match out.code {
            Some(0) => {
                add(&stats.claims);
                out.stdout.parse::<i64>().expect("claim prints the epoch")
            }
            Some(1) => {
                add(&stats.errors);
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Some(3 | 7) | None => {
                if out.code == Some(3) {
                    add(&stats.held);
                }
                std::thread::sleep(Duration::from_millis(rng.below(20)));
                continue;
            }
            Some(code) => {
                shared.violation(format!("claim {res} exited {code}: {}", out.stderr));
                return;
            }
        };
        if !write(shared, rng, res, epoch, owner) {
            return;
        }
        let e = epoch.to_string();
        if rng.below(2) == 0 {
            let complete = ["complete", res, "--owner", owner, "--epoch", &e];
            let out = chaos_run(shared, rng, &complete, b"");
            if !matches!(out.code, None | Some(0 | 1 | 4 | 7)) {
                shared.violation(format!(
                    "complete {res} -e {e} exited {:?}: {}",
                    out.code, out.stderr
                ));
                return;
            }
        }
    }
}

/// Writes a new version of `res` under `epoch`, retrying the same bytes after an
/// unknown outcome, as a real worker would. False after a violation.
fn write(shared: &Shared, rng: &mut Rng, res: &str, epoch: i64, owner: &str) -> bool {
    let stats = &shared.stats;
    let content = make_version(res, epoch, owner, 200 + rng.below(12_000) as usize);
    let sha = sha256_hex(&content);
    shared
        .offered
        .lock()
        .expect("lock")
        .insert(sha.clone(), (res.to_string(), epoch));
    let e = epoch.to_string();
    for _ in 0..3 {
        let write = ["write", res, "--epoch", &e, "--owner", owner];
        let out = chaos_run(shared, rng, &write, &content);
        match (out.code, out.stdout.as_str()) {
            (Some(0), "written" | "replay") => {
                add(if out.stdout == "written" {
                    &stats.written
                } else {
                    &stats.replayed
                });
                shared.acks.lock().expect("lock").push(Ack {
                    res: res.to_string(),
                    epoch,
                    sha256: sha,
                });
                return true;
            }
            (Some(5 | 6 | 8), _) => {
                add(&stats.refused);
                return true;
            }
            (Some(7), _) => add(&stats.busy),
            (Some(1), _) => add(&stats.errors),
            (None, _) => {}
            (code, stdout) => {
                shared.violation(format!(
                    "write {res} -e {e} exited {code:?}: {stdout} {}",
                    out.stderr
                ));
                return false;
            }
        }
    }
    true
}

/// A follower on `host`, restarted whenever the chaos kills it, until the test says
/// `stop`. One that exits by itself (not by a signal) is a violation: it must outlive
/// the server's crashes and its sessions' ends.
fn follower(shared: &Shared, host: &Host, rng: &mut Rng, stop: &AtomicBool) {
    let mut first = true;
    while !stop.load(Ordering::SeqCst) {
        let child = Command::new(bin())
            .env_clear()
            .env("FAILPOINTS", slowed_apply(rng, &shared.stats))
            .env("FENCEPOST_STORE", &shared.url)
            .current_dir(host.root.root())
            .arg("--root")
            .arg(host.root.root())
            .args(["mirror", "--follow", "--rescan", "2s"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn mirror --follow");
        if !first {
            add(&shared.stats.follower_restarts);
        }
        first = false;
        shared.live.lock().expect("lock").push(child.id());
        let out = wait_registered(shared, child, Some(stop));
        if out.status.signal().is_none() {
            shared.violation(format!(
                "mirror --follow on {} exited {}: {}",
                host.root.root().display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            return;
        }
        // Half the time the host's service recovers the root before it starts the
        // follower again, as an operator would after a crash.
        if !stop.load(Ordering::SeqCst) && rng.below(2) == 0 {
            add(&shared.stats.recovered);
            // The chaos may end recover's own session or crash the server under it: that
            // is an error it reports (exit 1: the connection closed, a broken pipe, the
            // store out of reach), and the operator runs it again, as here, a few times
            // while the chaos lasts. One that fails every time is still a violation.
            let mut out = host.fp(&["recover"]).output();
            for _ in 0..5 {
                if out.code != 1 || stop.load(Ordering::SeqCst) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
                out = host.fp(&["recover"]).output();
            }
            if out.code != 0 {
                shared.violation(format!(
                    "recover on {} after its follower was killed: {out:?}",
                    host.root.root().display()
                ));
                return;
            }
        }
    }
}

/// The steps of a mirror's local apply between its first link and its COMMIT: where a
/// killed follower leaves an apply for the next one, or `recover`, to finish.
const APPLY_POINTS: [&str; 5] = [
    "write.after_pre_link",
    "write.after_new_link",
    "write.after_rename",
    "write.after_dir_fsync",
    "txn.before_commit",
];

/// `FAILPOINTS` for a follower: half of them slowed by 1-200 ms at one step of every
/// apply, a window for the chaos's SIGKILL.
fn slowed_apply(rng: &mut Rng, stats: &Stats) -> String {
    if rng.below(2) != 0 {
        return String::new();
    }
    add(&stats.slowed);
    let point = APPLY_POINTS[rng.below(APPLY_POINTS.len() as u64) as usize];
    format!("{point}=sleep({})", 1 + rng.below(200))
}

/// A reader of the store (`cat`) and of every mirror's files: each version it sees is
/// complete and was offered, and no resource's epoch goes back, where it reads.
fn reader(shared: &Shared, mirrors: &[Host]) {
    let mut newest: HashMap<(String, String), i64> = HashMap::new();
    let mut saw = |place: &str, res: &str, bytes: &[u8]| {
        let epoch = match check_version(res, bytes) {
            Ok(epoch) => epoch,
            Err(why) => {
                shared.violation(format!("{place} serves {res} as no one version: {why}"));
                return;
            }
        };
        let offered = shared
            .offered
            .lock()
            .expect("lock")
            .get(&sha256_hex(bytes))
            .cloned();
        if offered != Some((res.to_string(), epoch)) {
            shared.violation(format!("{place} serves bytes of {res} nobody offered"));
        }
        let key = (place.to_string(), res.to_string());
        let before = newest.entry(key).or_insert(epoch);
        if epoch < *before {
            shared.violation(format!(
                "{place}: {res} went back from epoch {before} to epoch {epoch}"
            ));
        }
        *before = epoch.max(*before);
    };
    while !shared.done() {
        for res in RESOURCES {
            let out = Command::new(bin())
                .env_clear()
                .env("FENCEPOST_STORE", &shared.url)
                .current_dir(shared.cwd.root())
                .args(["cat", res])
                .output()
                .expect("run cat");
            // Before the first write, or while the server is down: nothing to judge.
            if out.status.success() {
                add(&shared.stats.cats);
                saw("the store", res, &out.stdout);
            }
            for (m, mirror) in mirrors.iter().enumerate() {
                if let Some(bytes) = mirror.file(res) {
                    add(&shared.stats.mirror_reads);
                    saw(&format!("mirror {m}"), res, &bytes);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The chaos: until `until`, every 20-150 ms, one thing chosen by the seeded RNG.
fn chaos(shared: &Shared, cluster: &PrivateCluster, rng: &mut Rng, until: Instant) {
    let mut admin: Option<Client> = None;
    // At most one crash every 8 s or so: each costs a second or two of restart.
    let max_crashes = (until - Instant::now()).as_secs() / 8 + 1;
    while Instant::now() < until && !shared.done() {
        std::thread::sleep(Duration::from_millis(20 + rng.below(130)));
        let roll = rng.below(100);
        if roll < 65 {
            // A live process: SIGKILL, or SIGSTOP for up to 1.5 s (past its lease).
            // Signalled with the list locked: the process is not reaped meanwhile, so
            // the pid is still its own (maybe a zombie's).
            let live = shared.live.lock().expect("lock");
            if live.is_empty() {
                continue;
            }
            let pid = live[rng.below(live.len() as u64) as usize];
            if roll < 35 {
                signal(pid, "KILL");
                add(&shared.stats.killed);
                continue;
            }
            signal(pid, "STOP");
            drop(live);
            // A stopped process cannot exit, so it is not reaped before SIGCONT (one that
            // had exited already may be, and the SIGCONT then meets whoever has its pid:
            // harmless).
            std::thread::sleep(Duration::from_millis(50 + rng.below(1450)));
            // kill(1) fails only for a pid gone by now.
            let _ = Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
            add(&shared.stats.stopped);
        } else if roll < 90 {
            // A fencepost session ended by the server.
            if admin.is_none() {
                admin = Client::connect(&cluster.url(), NoTls).ok();
            }
            let Some(client) = admin.as_mut() else {
                continue;
            };
            let pids: Vec<i32> = match client.query(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'fencepost'
                 ORDER BY pid",
                &[],
            ) {
                Ok(rows) => rows.iter().map(|r| r.get(0)).collect(),
                Err(_) => {
                    admin = None;
                    continue;
                }
            };
            if pids.is_empty() {
                continue;
            }
            let pid = pids[rng.below(pids.len() as u64) as usize];
            if client
                .execute("SELECT pg_terminate_backend($1)", &[&pid])
                .is_ok()
            {
                add(&shared.stats.terminated);
            }
        } else if roll < 95 && (get(&shared.stats.crashes) as u64) < max_crashes {
            admin = None;
            cluster.stop_immediate();
            std::thread::sleep(Duration::from_millis(rng.below(500)));
            cluster.start_again();
            add(&shared.stats.crashes);
        }
    }
}

/// Sets both flags when dropped: everything stops, on a panic too.
struct StopAll<'a>(&'a AtomicBool, &'a AtomicBool);

impl Drop for StopAll<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
        self.1.store(true, Ordering::SeqCst);
    }
}

/// A thread's end; a panic in it fails the test with the seed and the summary.
fn joined(shared: &Shared, who: &str, result: std::thread::Result<()>) {
    if let Err(panic) = result {
        let why = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_default();
        panic!("{}: {who} panicked: {why}", shared.summary());
    }
}

/// The seed: `FENCEPOST_TORTURE_SEED`, or the clock.
fn seed() -> u64 {
    std::env::var("FENCEPOST_TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn store_torture_kill_stop_terminate_and_crash_under_workers_and_followers() {
    let cluster = PrivateCluster::start();
    let seed = seed();
    let secs: u64 = std::env::var("FENCEPOST_TORTURE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    eprintln!("store torture: seed {seed} (replay: FENCEPOST_TORTURE_SEED={seed}), {secs} s");
    let shared = Shared {
        seed,
        url: cluster.url(),
        cwd: Env::new(),
        stats: Stats::default(),
        acks: Mutex::default(),
        offered: Mutex::default(),
        live: Mutex::default(),
        violations: Mutex::default(),
        done: AtomicBool::new(false),
    };
    // The store gets its tables before anyone follows it.
    shared
        .fp(&["claim", RESOURCES[0], "--owner", "setup", "--ttl", "1ms"])
        .expect(0);
    let mirrors: Vec<Host> = (0..FOLLOWERS).map(|_| Host::new(&shared.url)).collect();
    // One RNG per worker, per follower, and the chaos's.
    let mut rngs: Vec<Rng> = (0..(WORKERS + FOLLOWERS + 1) as u64)
        .map(|id| Rng::new(seed ^ (id + 1).wrapping_mul(0xA24B_AED4_963E_E407)))
        .collect();
    let mut follower_rngs = rngs.split_off(WORKERS);
    let mut chaos_rng = follower_rngs.pop().expect("the chaos's rng");
    let stop_followers = AtomicBool::new(false);
    let until = Instant::now() + Duration::from_secs(secs);
    std::thread::scope(|s| {
        let shared = &shared;
        // A panic here (the chaos's, a thread's) stops every thread before the scope
        // waits for them.
        let _stop = StopAll(&shared.done, &stop_followers);
        let followers: Vec<_> = mirrors
            .iter()
            .zip(follower_rngs.iter_mut())
            .map(|(host, rng)| {
                let stop = &stop_followers;
                s.spawn(move || follower(shared, host, rng, stop))
            })
            .collect();
        let readers = s.spawn(|| reader(shared, &mirrors));
        let workers: Vec<_> = rngs
            .iter_mut()
            .enumerate()
            .map(|(id, rng)| s.spawn(move || worker(shared, rng, &format!("w{id}"))))
            .collect();
        chaos(shared, &cluster, &mut chaos_rng, until);
        shared.done.store(true, Ordering::SeqCst);
        for w in workers {
            joined(shared, "a worker", w.join());
        }
        joined(shared, "the reader", readers.join());
        // The followers, unharmed now, must catch up by themselves.
        converge(shared, &mirrors, Duration::from_secs(30));
        stop_followers.store(true, Ordering::SeqCst);
        for f in followers {
            joined(shared, "a follower", f.join());
        }
    });
    let summary = shared.summary();
    eprintln!("{summary}");
    let violations = shared.violations.lock().expect("lock").clone();
    assert!(
        violations.is_empty(),
        "{summary}:\n{}",
        violations.join("\n")
    );
    check_end(&shared, &mirrors, &summary);
    assert!(
        get(&shared.stats.written) >= 5,
        "too little happened: {summary}"
    );
    assert!(get(&shared.stats.killed) >= 3, "too few kills: {summary}");
}

/// What `cat` serves for `res` on the store (`None` before its first write).
fn served(shared: &Shared, res: &str) -> Option<Vec<u8>> {
    let out = Command::new(bin())
        .env_clear()
        .env("FENCEPOST_STORE", &shared.url)
        .current_dir(shared.cwd.root())
        .args(["cat", res])
        .output()
        .expect("run cat");
    out.status.success().then_some(out.stdout)
}

/// Waits until every mirror holds what the store serves, or records a violation.
fn converge(shared: &Shared, mirrors: &[Host], deadline: Duration) {
    let start = Instant::now();
    loop {
        let behind: Vec<String> = RESOURCES
            .iter()
            .flat_map(|res| {
                let want = served(shared, res);
                mirrors.iter().enumerate().filter_map(move |(m, host)| {
                    let want = want.clone()?;
                    let held = host.file(res);
                    (held.as_deref() != Some(&want[..])).then(|| {
                        let epoch = |b: Option<&[u8]>| b.map(|b| check_version(res, b));
                        format!(
                            "mirror {m}: {res} holds {:?}, the store serves {:?}",
                            epoch(held.as_deref()),
                            epoch(Some(&want[..]))
                        )
                    })
                })
            })
            .collect();
        if behind.is_empty() {
            return;
        }
        if start.elapsed() > deadline {
            let verify: Vec<String> = mirrors
                .iter()
                .enumerate()
                .map(|(m, host)| {
                    let out = host.fp(&["verify"]).output();
                    format!(
                        "verify --root on mirror {m}: exit {}: {}{}",
                        out.code, out.stdout, out.stderr
                    )
                })
                .collect();
            shared.violation(format!(
                "the followers did not converge within {deadline:?} of the chaos's end: {}\n{}",
                behind.join(", "),
                verify.join("\n")
            ));
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The end state, every process gone: acknowledged writes kept, the store and the
/// mirrors verified, the mirrors holding what the store serves.
fn check_end(shared: &Shared, mirrors: &[Host], summary: &str) {
    let acks = shared.acks.lock().expect("lock").clone();
    let offered = shared.offered.lock().expect("lock").clone();
    for res in RESOURCES {
        let mine: Vec<&Ack> = acks.iter().filter(|a| a.res == res).collect();
        let Some(bytes) = served(shared, res) else {
            assert!(
                mine.is_empty(),
                "{summary}: {res} serves nothing, yet {mine:?}"
            );
            continue;
        };
        let epoch =
            check_version(res, &bytes).unwrap_or_else(|why| panic!("{summary}: {res}: {why}"));
        let sha = sha256_hex(&bytes);
        assert_eq!(
            offered.get(&sha),
            Some(&(res.to_string(), epoch)),
            "{summary}: {res} serves bytes nobody offered"
        );
        let log = shared.fp(&["--json", "log", res]).expect(0).json();
        let logged: Vec<(i64, String)> = log["events"]
            .as_array()
            .expect("events")
            .iter()
            .filter(|e| e["event"] == "write")
            .map(|e| {
                (
                    e["epoch"].as_i64().expect("epoch"),
                    e["sha256"].as_str().expect("sha256").to_string(),
                )
            })
            .collect();
        for ack in mine {
            assert!(
                logged.contains(&(ack.epoch, ack.sha256.clone())),
                "{summary}: acknowledged write {ack:?} is not in the store's log"
            );
            assert!(
                ack.epoch < epoch || (ack.epoch == epoch && ack.sha256 == sha),
                "{summary}: acknowledged write {ack:?} is lost (the store serves epoch {epoch})"
            );
        }
    }
    let verify = shared.fp(&["verify"]).output();
    assert_eq!(verify.code, 0, "{summary}: verify on the store: {verify:?}");
    for (m, host) in mirrors.iter().enumerate() {
        let pass = host.fp(&["mirror"]).output();
        assert_eq!(
            pass.code, 0,
            "{summary}: the final mirror pass on mirror {m}: {pass:?}"
        );
        let verify = host.fp(&["verify"]).output();
        assert_eq!(
            verify.code, 0,
            "{summary}: verify --root on mirror {m}: {verify:?}"
        );
        for res in RESOURCES {
            assert_eq!(
                host.file(res),
                served(shared, res),
                "{summary}: mirror {m} holds another {res} than the store serves"
            );
        }
    }
}
