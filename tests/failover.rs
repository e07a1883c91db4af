//! Failover to a real streaming standby (`pg_basebackup -R`), the clients reaching
//! whichever server is the primary through one multi-host URL
//! (`postgresql://%2Fprimary,%2Fstandby/...?target_session_attrs=read-write`), as the README's
//! "Several hosts" limits describe it.
//!
//! Synchronous replication (`synchronous_standby_names` naming the standby): writers loop
//! while the test cancels every COMMIT that waits for the standby (`pg_cancel_backend` of
//! the sessions in `SyncRep`), stops the standby so that every COMMIT waits, kills the
//! primary (`pg_ctl stop -m immediate`) and promotes the standby. No acknowledged claim
//! or write may be lost on the promoted server, no older epoch may be current, and a late
//! writer with an older epoch is refused. A cancelled wait leaves a COMMIT made on the
//! primary only: reported as success, it is lost with the primary.
//!
//! Asynchronous replication: the same loop, the primary killed with writes in flight.
//! What the standby had replayed is kept; later acknowledged writes may be lost (the
//! README says so), and a mirror that applied a lost version says it is `ahead` of the
//! store, which then does not issue that epoch again.
//!
//! Each phase prints what it did, so a failure tells its story.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};

use crate::harness::{Done, Env, Run};
use crate::hosts::Host;
use crate::support::pg::{self, PrivateCluster, STANDBY_NAME};
use crate::support::{sha256_hex, version};

/// Resources, one looping writer each.
const WRITERS: usize = 3;

/// A primary and its streaming standby.
struct Pair {
    primary: PrivateCluster,
    standby: PrivateCluster,
}

impl Pair {
    /// Both servers.
    fn start() -> Pair {
        let primary = PrivateCluster::start();
        let standby = PrivateCluster::standby_of(&primary);
        Pair { primary, standby }
    }

    /// The URL the clients use: both sockets, the one that takes writes chosen. The
    /// hosts go in the authority, each socket folder percent-encoded: the `postgres`
    /// crate reads a `host=` query parameter as one host, commas and all (libpq would
    /// split it).
    fn url(&self) -> String {
        let encoded = |c: &PrivateCluster| c.dir().display().to_string().replace('/', "%2F");
        format!(
            "postgresql://{},{}/postgres?user=postgres&target_session_attrs=read-write",
            encoded(&self.primary),
            encoded(&self.standby)
        )
    }

    /// Waits until the primary streams to the standby in `sync_state`.
    #[track_caller]
    fn wait_streaming(&self, sync_state: &str) {
        let mut admin = pg::connect(&self.primary.url());
        let start = Instant::now();
        loop {
            let rows = admin
                .query(
                    "SELECT 1 FROM pg_stat_replication
                     WHERE application_name = $1 AND state = 'streaming' AND sync_state = $2",
                    &[&STANDBY_NAME, &sync_state],
                )
                .expect("pg_stat_replication");
            if !rows.is_empty() {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the standby never streamed as {sync_state}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The primary's current WAL position, as text (`pg_lsn`).
    fn primary_lsn(&self) -> String {
        let mut admin = pg::connect(&self.primary.url());
        admin
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .expect("pg_current_wal_lsn")
            .get(0)
    }

    /// Waits until the standby has replayed the primary's WAL up to `lsn`.
    #[track_caller]
    fn wait_replayed(&self, lsn: &str) {
        let mut standby = pg::connect(&self.standby.url());
        let start = Instant::now();
        loop {
            let done: bool = standby
                .query_one(
                    "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                    &[&lsn],
                )
                .expect("pg_last_wal_replay_lsn")
                .get(0);
            if done {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the standby never replayed up to {lsn}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A command against the store, run in `cwd` without a root.
fn fp(cwd: &Env, url: &str, args: &[&str]) -> Run {
    cwd.fp(args).inside(cwd.root()).env("FENCEPOST_STORE", url)
}

/// What one writer saw.
#[derive(Default, Debug)]
struct Seen {
    /// Claims acknowledged (exit 0, an epoch printed).
    claims: Vec<i64>,
    /// Writes acknowledged (exit 0 `written`), as (epoch, SHA-256), in order: a prefix
    /// taken at a replication barrier is what the standby must have.
    acked: Vec<(i64, String)>,
    /// Commands that did not succeed (unreachable server, cancelled, unknown outcome).
    failures: usize,
    /// Commands run.
    commands: usize,
}

/// The writers' shared state.
struct Writers {
    stop: AtomicBool,
    seen: Vec<Mutex<Seen>>,
}

impl Writers {
    fn new() -> Writers {
        Writers {
            stop: AtomicBool::new(false),
            seen: (0..WRITERS).map(|_| Mutex::default()).collect(),
        }
    }

    fn count(&self, what: fn(&Seen) -> usize) -> Vec<usize> {
        self.seen
            .iter()
            .map(|s| what(&s.lock().expect("lock")))
            .collect()
    }

    /// Waits until every writer's count of `what` has grown by `more`.
    #[track_caller]
    fn wait_for(&self, what: fn(&Seen) -> usize, more: usize, story: &str) {
        let from = self.count(what);
        let start = Instant::now();
        while self
            .count(what)
            .iter()
            .zip(&from)
            .any(|(now, then)| *now < then + more)
        {
            assert!(
                start.elapsed() < Duration::from_secs(40),
                "the writers stalled ({story}): {:?}",
                self.seen
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Every writer's acknowledged writes so far, resource by resource.
    fn acked(&self) -> Vec<Vec<(i64, String)>> {
        self.seen
            .iter()
            .map(|s| s.lock().expect("lock").acked.clone())
            .collect()
    }

    fn totals(&self) -> String {
        let sum = |what: fn(&Seen) -> usize| self.count(what).iter().sum::<usize>();
        format!(
            "{} commands, {} claims and {} writes acknowledged, {} failed",
            sum(|s| s.commands),
            sum(|s| s.claims.len()),
            sum(|s| s.acked.len()),
            sum(|s| s.failures),
        )
    }
}

/// Sets its flags when dropped: the threads of a scope stop, on a panic too, before the
/// scope waits for them.
struct StopAll<'a>(Vec<&'a AtomicBool>);

impl Drop for StopAll<'_> {
    fn drop(&mut self) {
        for flag in &self.0 {
            flag.store(true, Ordering::SeqCst);
        }
    }
}

/// One writer's loop on `r{w}.md` until told to stop: claim, write, complete, at ticks
/// of its own (10 a round, the lease 5, so each claim finds the last one expired or
/// completed). A command that fails is not retried: the next round claims again.
fn writer(cwd: &Env, url: &str, w: usize, writers: &Writers) {
    let res = format!("r{w}.md");
    let owner = format!("w{w}");
    let seen = &writers.seen[w];
    let failed = || {
        seen.lock().expect("lock").failures += 1;
        // The servers may be down for a while: do not spin.
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut round: i64 = 0;
    while !writers.stop.load(Ordering::SeqCst) {
        round += 1;
        let tick = |k: i64| round * 10 + k;
        seen.lock().expect("lock").commands += 1;
        let claim = fp(cwd, url, &["claim", &res, "--owner", &owner, "--ttl", "5"])
            .now(tick(0))
            .output();
        let epoch = match (claim.code, claim.stdout.trim().parse::<i64>()) {
            (0, Ok(epoch)) => epoch,
            _ => {
                failed();
                continue;
            }
        };
        seen.lock().expect("lock").claims.push(epoch);
        let bytes = version(&format!("{owner} round {round} epoch {epoch}"), 2000);
        let e = epoch.to_string();
        seen.lock().expect("lock").commands += 1;
        let write = fp(cwd, url, &["write", &res, "--epoch", &e, "--owner", &owner])
            .now(tick(1))
            .stdin(bytes.clone())
            .output();
        if write.code != 0 || write.stdout.trim() != "written" {
            failed();
            continue;
        }
        seen.lock()
            .expect("lock")
            .acked
            .push((epoch, sha256_hex(&bytes)));
        seen.lock().expect("lock").commands += 1;
        let complete = fp(
            cwd,
            url,
            &["complete", &res, "--owner", &owner, "--epoch", &e],
        )
        .now(tick(2))
        .output();
        if complete.code != 0 {
            failed();
        }
    }
}

/// Cancels, every few milliseconds until `stop`, each session whose COMMIT waits for the
/// synchronous standby, as a "cancel long queries" job would. Counts them in `cancelled`.
fn canceller(primary_url: &str, stop: &AtomicBool, cancelled: &AtomicUsize) {
    let mut admin: Option<Client> = None;
    while !stop.load(Ordering::SeqCst) {
        if admin.is_none() {
            admin = Client::connect(primary_url, NoTls).ok();
        }
        if let Some(client) = admin.as_mut() {
            match client.query(
                "SELECT pg_cancel_backend(pid) FROM pg_stat_activity
                 WHERE wait_event = 'SyncRep' AND pid <> pg_backend_pid()",
                &[],
            ) {
                Ok(rows) => {
                    let n = rows.iter().filter(|r| r.get::<_, bool>(0)).count();
                    cancelled.fetch_add(n, Ordering::SeqCst);
                }
                // The primary went down.
                Err(_) => admin = None,
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The store's current version of `res` (content epoch, SHA-256; `None` before any
/// write) and its newest issued epoch (0 for a resource it does not know).
fn current(cwd: &Env, url: &str, res: &str) -> (Option<(i64, String)>, i64) {
    let out = fp(cwd, url, &["--json", "status", res])
        .now(1_000_000)
        .output();
    if out.code == 2 {
        return (None, 0);
    }
    assert_eq!(out.code, 0, "status {res}: {out:?}");
    let row = &out.json()["resources"][0];
    let version = match (
        row["sink"]["content_epoch"].as_i64(),
        row["sink"]["sha256"].as_str(),
    ) {
        (Some(epoch), Some(sha)) => Some((epoch, sha.to_string())),
        _ => None,
    };
    let issued = row["lease"]["epoch"].as_i64().unwrap_or(0);
    (version, issued)
}

/// The writes the store's log holds for `res`: (epoch, SHA-256).
fn logged_writes(cwd: &Env, url: &str, res: &str) -> Vec<(i64, String)> {
    let out = fp(cwd, url, &["--json", "log", res]).output();
    if out.code == 2 {
        return Vec::new();
    }
    assert_eq!(out.code, 0, "log {res}: {out:?}");
    out.json()["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["event"] == "write")
        .map(|e| {
            let epoch = e["epoch"].as_i64().expect("epoch");
            (epoch, e["sha256"].as_str().expect("sha256").to_string())
        })
        .collect()
}

/// The problems with `res` on the promoted server against what was acknowledged: a lost
/// claim (the issued epoch below an acknowledged one), a lost write (the current version
/// older than an acknowledged one, or the same epoch with other bytes, or an acknowledged
/// write missing from the log, which a later epoch would otherwise hide).
fn lost(cwd: &Env, url: &str, res: &str, claims: &[i64], acked: &[(i64, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    let (version, issued) = current(cwd, url, res);
    let logged = logged_writes(cwd, url, res);
    if let Some(claim) = claims.iter().max()
        && issued < *claim
    {
        problems.push(format!(
            "{res}: the acknowledged claim of epoch {claim} is lost: the promoted server's \
             newest epoch is {issued}"
        ));
    }
    for (epoch, sha) in acked {
        let kept = version
            .as_ref()
            .is_some_and(|(e, s)| e > epoch || (e == epoch && s == sha));
        if !logged.contains(&(*epoch, sha.clone())) {
            problems.push(format!(
                "{res}: the acknowledged write of epoch {epoch} ({}) is not in the promoted \
                 server's log",
                &sha[..12]
            ));
        } else if !kept {
            problems.push(format!(
                "{res}: the acknowledged write of epoch {epoch} ({}) is lost: current is {:?}",
                &sha[..12],
                version.as_ref().map(|(e, s)| (e, &s[..12]))
            ));
        }
    }
    problems
}

/// The output of a command, for a failure message.
fn shown(done: &Done) -> String {
    format!(
        "exit {}, stdout {:?}, stderr {:?}",
        done.code,
        done.stdout.trim(),
        done.stderr.trim()
    )
}

/// The end of a failover test: every problem found, with the story of the phases.
#[track_caller]
fn report(what: &str, problems: &[String], mut story: Vec<String>, started: Instant) {
    story.push(format!("{:.1} s in all", started.elapsed().as_secs_f64()));
    let story = story.join("\n");
    assert!(
        problems.is_empty(),
        "after failover to the {what} standby:\n{}\n{story}",
        problems.join("\n")
    );
    eprintln!("{story}");
}

/// The bytes B writes to `fence.md` in the synchronous test.
const B_BYTES: &[u8] = b"B's bytes\n";

/// B's takeover of `fence.md` while the standby is down: its claim and, if that was
/// acknowledged, its write.
struct Takeover {
    claim: Done,
    write: Option<Done>,
}

impl Takeover {
    /// What B was told it holds: its acknowledged claim's epoch and acknowledged write.
    fn acked(&self) -> (Vec<i64>, Vec<(i64, String)>) {
        let Ok(epoch) = self.claim.stdout.trim().parse::<i64>() else {
            return (Vec::new(), Vec::new());
        };
        if self.claim.code != 0 {
            return (Vec::new(), Vec::new());
        }
        let written = self
            .write
            .as_ref()
            .is_some_and(|w| w.code == 0 && w.stdout.trim() == "written");
        let writes = if written {
            vec![(epoch, sha256_hex(B_BYTES))]
        } else {
            Vec::new()
        };
        (vec![epoch], writes)
    }
}

/// The synchronous test's phases, writers looping and sync waits cancelled throughout:
/// both servers up; the standby down (B takes `fence.md` over from A); the primary
/// killed and the standby promoted.
fn sync_phases(pair: &Pair, cwd: &Env, writers: &Writers, story: &mut Vec<String>) -> Takeover {
    let url = pair.url();
    let stop_cancel = AtomicBool::new(false);
    let cancelled = AtomicUsize::new(0);
    let cancels = || cancelled.load(Ordering::SeqCst);
    std::thread::scope(|scope| {
        let _stop = StopAll(vec![&writers.stop, &stop_cancel]);
        for w in 0..WRITERS {
            let url = url.as_str();
            scope.spawn(move || writer(cwd, url, w, writers));
        }
        let primary_url = pair.primary.url();
        let (stop_cancel, cancelled) = (&stop_cancel, &cancelled);
        scope.spawn(move || canceller(&primary_url, stop_cancel, cancelled));

        writers.wait_for(|s| s.acked.len(), 3, "both up");
        story.push(format!(
            "phase 1, both up: {}; {} sync waits cancelled",
            writers.totals(),
            cancels()
        ));

        // The standby is down, so every COMMIT waits for it, until cancelled.
        pair.standby.stop_immediate();
        let claim = fp(
            cwd,
            &url,
            &["claim", "fence.md", "--owner", "B", "--ttl", "100"],
        )
        .now(20)
        .output();
        let write = (claim.code == 0).then(|| {
            let e = claim.stdout.trim();
            fp(
                cwd,
                &url,
                &["write", "fence.md", "--epoch", e, "--owner", "B"],
            )
            .now(21)
            .stdin(B_BYTES)
            .output()
        });
        writers.wait_for(|s| s.commands, 2, "standby down");
        story.push(format!(
            "phase 2, standby down: {}; {} sync waits cancelled; B's claim: {}; B's write: {}",
            writers.totals(),
            cancels(),
            shown(&claim),
            write.as_ref().map_or("-".into(), shown),
        ));

        // The primary dies with commands in flight; the standby comes back and is
        // promoted; the clients find it through the same URL.
        pair.primary.stop_immediate();
        stop_cancel.store(true, Ordering::SeqCst);
        writers.wait_for(|s| s.failures, 1, "primary down");
        pair.standby.start_again();
        pair.standby.promote();
        writers.wait_for(|s| s.acked.len(), 2, "promoted");
        writers.stop.store(true, Ordering::SeqCst);
        story.push(format!(
            "phase 3, primary killed, standby promoted: {}",
            writers.totals()
        ));
        Takeover { claim, write }
    })
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn failover_to_a_synchronous_standby_loses_no_acknowledged_claim_or_write() {
    let pair = Pair::start();
    let started = Instant::now();
    let mut admin = pg::connect(&pair.primary.url());
    // Two statements: ALTER SYSTEM cannot run in the transaction a batch makes.
    admin
        .batch_execute(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'"
        ))
        .expect("synchronous_standby_names");
    admin
        .batch_execute("SELECT pg_reload_conf()")
        .expect("pg_reload_conf");
    drop(admin);
    pair.wait_streaming("sync");
    let (url, cwd) = (pair.url(), Env::new());
    // A holds fence.md at epoch 1, replicated (the standby is up and synchronous).
    let fence = "fence.md";
    fp(&cwd, &url, &["claim", fence, "--owner", "A", "--ttl", "10"])
        .now(0)
        .expect_stdout(0, "1");
    let writers = Writers::new();
    let mut story = Vec::new();
    let takeover = sync_phases(&pair, &cwd, &writers, &mut story);

    // What was acknowledged is on the promoted server.
    let promoted = pair.standby.url();
    let mut problems = Vec::new();
    for (w, seen) in writers.seen.iter().enumerate() {
        let seen = seen.lock().expect("lock");
        let res = format!("r{w}.md");
        problems.extend(lost(&cwd, &promoted, &res, &seen.claims, &seen.acked));
    }
    let (b_claims, b_writes) = takeover.acked();
    problems.extend(lost(&cwd, &promoted, fence, &b_claims, &b_writes));
    // B, told its claim or write was not confirmed, does it again on the new primary.
    if b_writes.is_empty() {
        let claim = ["claim", fence, "--owner", "B", "--ttl", "100"];
        let e = fp(&cwd, &url, &claim).now(30).expect(0).stdout;
        let write = ["write", fence, "--epoch", e.trim(), "--owner", "B"];
        fp(&cwd, &url, &write)
            .now(31)
            .stdin(B_BYTES)
            .expect_stdout(0, "written");
        story.push(format!("B claimed and wrote again: epoch {}", e.trim()));
    }
    // A, late, writes under its old epoch: B's newer one was acknowledged, so A is
    // refused, and B's bytes stay current.
    let late = fp(
        &cwd,
        &url,
        &["write", fence, "--epoch", "1", "--owner", "A"],
    )
    .now(40)
    .stdin("A's bytes, written late under epoch 1\n")
    .output();
    story.push(format!("A's late write under epoch 1: {}", shown(&late)));
    if late.code == 0 {
        problems.push(format!(
            "{fence}: A's late write under epoch 1 was accepted after B's epoch was \
             acknowledged: {}",
            shown(&late)
        ));
    }
    let cat = fp(&cwd, &url, &["cat", fence]).output();
    if cat.stdout.as_bytes() != B_BYTES {
        problems.push(format!(
            "{fence}: cat serves {:?}, not B's bytes",
            cat.stdout
        ));
    }
    report("synchronous", &problems, story, started);
    fp(&cwd, &url, &["verify"]).now(1_000_000).expect(0);
}

/// C's document in the asynchronous test: version 1 replicated, version 2 written while
/// the standby is down and applied on a mirror, the version the failover loses.
const LOST_DOC: &str = "lost.md";
const V1: &[u8] = b"C's version 1\n";
const V2: &[u8] = b"C's version 2, never replicated\n";

/// The asynchronous test's phases, writers looping throughout: both servers up, to a
/// replication barrier; the standby down (C writes version 2, the mirror applies it);
/// the primary killed and the standby promoted. Returns each writer's writes
/// acknowledged before the barrier, which the standby has.
fn async_phases(
    pair: &Pair,
    cwd: &Env,
    mirror: &Host,
    writers: &Writers,
    story: &mut Vec<String>,
) -> Vec<Vec<(i64, String)>> {
    let url = pair.url();
    std::thread::scope(|scope| {
        let _stop = StopAll(vec![&writers.stop]);
        for w in 0..WRITERS {
            let url = url.as_str();
            scope.spawn(move || writer(cwd, url, w, writers));
        }
        writers.wait_for(|s| s.acked.len(), 3, "both up");
        fp(
            cwd,
            &url,
            &["claim", LOST_DOC, "--owner", "C", "--ttl", "5"],
        )
        .now(0)
        .expect_stdout(0, "1");
        fp(
            cwd,
            &url,
            &["write", LOST_DOC, "--epoch", "1", "--owner", "C"],
        )
        .now(1)
        .stdin(V1)
        .expect_stdout(0, "written");
        // What was acknowledged before this WAL position is on the standby once it has
        // replayed that far.
        let replicated = writers.acked();
        let lsn = pair.primary_lsn();
        pair.wait_replayed(&lsn);
        story.push(format!(
            "phase 1, both up: {}; replayed to {lsn}",
            writers.totals()
        ));

        // The standby is down; the primary acknowledges alone.
        pair.standby.stop_immediate();
        fp(
            cwd,
            &url,
            &["claim", LOST_DOC, "--owner", "C", "--ttl", "5"],
        )
        .now(10)
        .expect_stdout(0, "2");
        fp(
            cwd,
            &url,
            &["write", LOST_DOC, "--epoch", "2", "--owner", "C"],
        )
        .now(11)
        .stdin(V2)
        .expect_stdout(0, "written");
        mirror.fp(&["mirror"]).expect(0);
        assert_eq!(
            mirror.file(LOST_DOC).as_deref(),
            Some(V2),
            "the mirror took v2"
        );
        writers.wait_for(|s| s.acked.len(), 1, "standby down");
        story.push(format!(
            "phase 2, standby down: {}; the mirror applied {LOST_DOC} epoch 2",
            writers.totals()
        ));

        // The primary dies with writes in flight; the standby is promoted.
        pair.primary.stop_immediate();
        writers.wait_for(|s| s.failures, 1, "primary down");
        pair.standby.start_again();
        pair.standby.promote();
        writers.wait_for(|s| s.acked.len(), 2, "promoted");
        writers.stop.store(true, Ordering::SeqCst);
        story.push(format!(
            "phase 3, primary killed, standby promoted: {}",
            writers.totals()
        ));
        replicated
    })
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn failover_to_an_asynchronous_standby_loses_only_unreplicated_writes_and_mirrors_see_it() {
    let pair = Pair::start();
    let started = Instant::now();
    pair.wait_streaming("async");
    let (url, cwd) = (pair.url(), Env::new());
    let mirror = Host::new(&url);
    let writers = Writers::new();
    let mut story = Vec::new();
    let replicated = async_phases(&pair, &cwd, &mirror, &writers, &mut story);

    // Every write acknowledged before the barrier is kept; later ones may be lost (and
    // their epochs issued again): counted, not asserted.
    let promoted = pair.standby.url();
    let mut problems = Vec::new();
    let mut lost_later = 0;
    for (w, seen) in writers.seen.iter().enumerate() {
        let seen = seen.lock().expect("lock");
        let res = format!("r{w}.md");
        problems.extend(lost(&cwd, &promoted, &res, &[], &replicated[w]));
        let later = &seen.acked[replicated[w].len()..];
        lost_later += lost(&cwd, &promoted, &res, &[], later).len();
    }
    story.push(format!(
        "{lost_later} writes acknowledged after the barrier lost (the README allows it)"
    ));
    // The loss the README states: C's version 2 is gone, version 1 current.
    assert_eq!(
        current(&cwd, &promoted, LOST_DOC),
        (Some((1, sha256_hex(V1))), 1),
        "{LOST_DOC} on the promoted server\n{}",
        story.join("\n")
    );
    fp(&cwd, &url, &["verify"]).now(1_000_000).expect(0);

    // The mirror holds a version the store does not know: it is ahead, and says so.
    let verify = mirror.fp(&["verify"]).now(1_000_000).output();
    story.push(format!("verify --root on the mirror: {}", shown(&verify)));
    let says_ahead = verify
        .stdout
        .lines()
        .any(|l| l.starts_with(&format!("{LOST_DOC}: ")) && l.contains("ahead"));
    if verify.code != 9 || !says_ahead {
        problems.push(format!(
            "the mirror holding the lost epoch 2 is not reported ahead: {}",
            shown(&verify)
        ));
    }
    // Once the mirror has been heard from, the store does not issue its epoch again.
    let pass = mirror.fp(&["mirror"]).output();
    story.push(format!("mirror on the mirror: {}", shown(&pass)));
    let claim = ["claim", LOST_DOC, "--owner", "D", "--ttl", "5"];
    let claim = fp(&cwd, &url, &claim).now(100).output();
    story.push(format!("D's claim of {LOST_DOC}: {}", shown(&claim)));
    match claim.stdout.trim().parse::<i64>() {
        Ok(epoch) if claim.code == 0 && epoch > 2 => {}
        _ => problems.push(format!(
            "{LOST_DOC}: the store issued the mirror's epoch 2 again: {}",
            shown(&claim)
        )),
    }
    report("asynchronous", &problems, story, started);
}
