//! The PostgreSQL server crashing under a loop of writers (`pg_ctl stop -m immediate`,
//! then a restart that replays the WAL): no acknowledged write is lost, no blob is served
//! with a wrong hash, `verify` finds nothing wrong, and mirrors converge, one of them a
//! `mirror --follow` that lived through the crash.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{Env, Run};
use crate::hosts::{Host, wait_for_file};
use crate::support::pg::PrivateCluster;
use crate::support::{sha256_hex, version};

/// Resources, one writer each.
const WRITERS: usize = 3;

/// What one writer saw: writes acknowledged (exit 0 and `written`) and writes whose
/// outcome it cannot know (any other answer), each as (epoch, bytes); and how many of
/// its commands failed.
#[derive(Default)]
struct Seen {
    acked: Vec<(i64, Vec<u8>)>,
    unknown: Vec<(i64, Vec<u8>)>,
    failures: usize,
}

/// A command against the store, run in `cwd` without a root.
fn fp(cwd: &Env, url: &str, args: &[&str]) -> Run {
    cwd.fp(args).inside(cwd.root()).env("FENCEPOST_STORE", url)
}

/// One writer's loop on `res` until `stop`: claim, write, complete, at ticks of its own
/// (10 per round, so each claim finds the last lease finished or expired).
fn writer(cwd: &Env, url: &str, w: usize, stop: &AtomicBool, seen: &Mutex<Seen>) {
    let res = format!("r{w}.md");
    let owner = format!("w{w}");
    let mut round: i64 = 0;
    while !stop.load(Ordering::SeqCst) {
        round += 1;
        let tick = |k: i64| round * 10 + k;
        let claim = fp(cwd, url, &["claim", &res, "--owner", &owner, "--ttl", "5"])
            .now(tick(0))
            .output();
        let Ok(epoch) = claim.stdout.trim().parse::<i64>() else {
            seen.lock().expect("lock").failures += 1;
            continue;
        };
        // Every third version spans two chunks of the store.
        let size = if round % 3 == 0 {
            (1 << 20) + 4096
        } else {
            3000
        };
        let bytes = version(&format!("{owner} round {round} epoch {epoch}"), size);
        let write = fp(cwd, url, &["write", &res, "--epoch", &epoch.to_string()])
            .now(tick(1))
            .stdin(bytes.clone())
            .output();
        let acked = write.code == 0 && write.stdout.trim() == "written";
        let mut s = seen.lock().expect("lock");
        if acked {
            s.acked.push((epoch, bytes));
        } else {
            s.unknown.push((epoch, bytes));
            s.failures += 1;
            continue;
        }
        drop(s);
        let epoch = epoch.to_string();
        let complete = fp(
            cwd,
            url,
            &["complete", &res, "--owner", &owner, "--epoch", &epoch],
        )
        .now(tick(2))
        .output();
        if complete.code != 0 {
            seen.lock().expect("lock").failures += 1;
        }
    }
}

/// Each writer's count of `what` (acknowledged writes, failures).
fn counts(seen: &[Mutex<Seen>], what: fn(&Seen) -> usize) -> Vec<usize> {
    seen.iter()
        .map(|s| what(&s.lock().expect("lock")))
        .collect()
}

/// Waits until every writer's count of `what` has grown by `more` from `from`, failing
/// after `deadline`.
#[track_caller]
fn wait_for(
    seen: &[Mutex<Seen>],
    what: fn(&Seen) -> usize,
    from: &[usize],
    more: usize,
    deadline: Duration,
) {
    let start = Instant::now();
    while counts(seen, what)
        .iter()
        .zip(from)
        .any(|(now, then)| *now < then + more)
    {
        assert!(start.elapsed() < deadline, "the writers stalled");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_server_crash_under_writers_loses_no_acknowledged_write() {
    let cluster = PrivateCluster::start();
    let url = cluster.url();
    let cwd = Env::new();
    let stop = AtomicBool::new(false);
    let seen: Vec<Mutex<Seen>> = (0..WRITERS).map(|_| Mutex::default()).collect();
    // A host that follows the store through the crash, reconnecting after it.
    let follower_host = Host::new(&url);
    let mut follower = None;
    let acked = |s: &Seen| s.acked.len();
    let failures = |s: &Seen| s.failures;
    let minute = Duration::from_secs(60);
    std::thread::scope(|scope| {
        for (w, seen) in seen.iter().enumerate() {
            let (cwd, url, stop) = (&cwd, url.as_str(), &stop);
            scope.spawn(move || writer(cwd, url, w, stop, seen));
        }
        wait_for(&seen, acked, &[0; WRITERS], 2, 2 * minute);
        follower = Some(crate::hosts::Follower::start(&follower_host));
        // The crash, while the writers go on: each sees its commands fail, then
        // succeed again after the restart.
        cluster.stop_immediate();
        wait_for(&seen, failures, &counts(&seen, failures), 1, minute);
        cluster.start_again();
        wait_for(&seen, acked, &counts(&seen, acked), 2, 2 * minute);
        stop.store(true, Ordering::SeqCst);
    });

    let mirror = Host::new(&url);
    mirror.fp(&["mirror"]).expect(0);
    for (w, seen) in seen.iter().enumerate() {
        let res = format!("r{w}.md");
        let seen = seen.lock().expect("lock");
        let sha256 = check_resource(&cwd, &url, &res, &seen);
        let current = fp(&cwd, &url, &["cat", &res]).output();
        assert_eq!(current.code, 0, "cat {res}: {}", current.stderr);
        let bytes = current.stdout.as_bytes();
        assert_eq!(sha256_hex(bytes), sha256, "cat {res}");
        // Both mirrors hold what the store serves: one by a pass after the restart, one
        // by following through the crash (its back-off is at most 10 s).
        assert_eq!(mirror.file(&res).as_deref(), Some(bytes), "{res}");
        wait_for_file(
            &follower_host.root.path(&res),
            bytes,
            Duration::from_secs(60),
        );
    }
    drop(follower);
    fp(&cwd, &url, &["verify"]).now(1_000_000).expect(0);
    for host in [&mirror, &follower_host] {
        host.fp(&["verify"]).now(1_000_000).expect(0);
    }
}

/// The store's account of `res` against what its writer saw.
///
/// A write the writer saw acknowledged must be in the store's log (the log row commits
/// with the version) and, if it was the writer's last, be current. A write whose
/// process failed while the server went down may or may not have committed: its COMMIT
/// may have reached the server's WAL before the crash with the answer lost on the way
/// back, so the store may hold it (then the next claim simply supersedes it); but only
/// such a write, never an older one, may be current instead of the last acknowledged.
/// Returns the current version's SHA-256.
fn check_resource(cwd: &Env, url: &str, res: &str, seen: &Seen) -> String {
    let status = fp(cwd, url, &["--json", "status", res])
        .now(1_000_000)
        .expect(0)
        .json();
    let sink = &status["resources"][0]["sink"];
    let current = (
        sink["content_epoch"].as_i64().expect("content epoch"),
        sink["sha256"].as_str().expect("sha256").to_string(),
    );
    let log = fp(cwd, url, &["--json", "log", res]).expect(0).json();
    let logged: BTreeMap<i64, Value> = log["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["event"] == "write")
        .map(|e| (e["epoch"].as_i64().expect("epoch"), e["sha256"].clone()))
        .collect();
    for (epoch, bytes) in &seen.acked {
        assert_eq!(
            logged.get(epoch),
            Some(&Value::from(sha256_hex(bytes))),
            "{res}: the acknowledged write of epoch {epoch} was lost"
        );
    }
    let (last_epoch, last) = seen.acked.last().expect("acknowledged writes");
    if current != (*last_epoch, sha256_hex(last)) {
        assert!(
            current.0 > *last_epoch
                && seen
                    .unknown
                    .iter()
                    .any(|(e, b)| (*e, sha256_hex(b)) == current),
            "{res}: current {current:?} is neither the last acknowledged write nor a later one"
        );
    }
    current.1
}
