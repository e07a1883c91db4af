//! The Rust API, used as a program uses it: `fencepost::Client`s in threads of this test
//! process, beside real `fencepost` processes on the same root. What the command line
//! proves by exit codes, these prove by typed answers: who holds a lease, which write is
//! stale, what a refusal says, and that a client kept open for many calls leaves the
//! other processes' locking of the state file intact.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use fencepost::outcome::{RefusalDetail, Written};
use fencepost::{
    Client, Clock, Content, Error, Keeping, LeaseId, Options, Refusal, RefusalKind, WriteOptions,
};

use crate::harness::{self, Env};

/// A client moves to the thread that uses it, and so does a keeper's owner.
const _: fn() = || {
    fn moves<T: Send>() {}
    moves::<Client>();
    moves::<fencepost::LeaseKeeper>();
};

/// A client on a logical clock at tick 0: time passes only by `set_now`.
fn logical(root: &Path) -> Client {
    Client::open_with(root, &Options::default().clock(Clock::Logical(0))).expect("open a client")
}

/// A TTL of `n` ticks on a logical clock (a duration's milliseconds count as ticks).
fn ticks(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The refusal an answer is, of the kind wanted; panics on anything else.
#[track_caller]
fn refused<T: std::fmt::Debug>(answer: Result<T, Error>, kind: RefusalKind) -> Box<Refusal> {
    match answer {
        Err(Error::Refused(refusal)) if refusal.kind() == kind => refusal,
        other => panic!("wanted a {} refusal, got {other:?}", kind.outcome()),
    }
}

/// A write that must have published (not a replay).
#[track_caller]
fn written(answer: Result<Written, Error>) -> Written {
    match answer {
        Ok(written) if !written.replay => written,
        other => panic!("wanted written, got {other:?}"),
    }
}

/// `status RES --json` on the wall clock: the resource's lease.
fn lease_row(env: &Env, res: &str) -> serde_json::Value {
    let j = env.fp(&["--json", "status", res]).expect(0).json();
    j["resources"][0]["lease"].clone()
}

/// What one racer saw in one round of [`race`]. A racer only records: a panic in one
/// would leave the other waiting at the barrier for ever, so the test judges afterwards.
#[derive(Debug, Default)]
struct Round {
    /// The epoch its claim got, if it won the round.
    won: Option<i64>,
    /// Who held the lease when its claim was refused, and under which epoch.
    held_by: Option<(String, i64)>,
    /// What else its claim answered, if neither.
    claim_failed: Option<String>,
    /// Its write under the epoch it won: the epoch written, or what it answered instead.
    wrote: Option<Result<i64, String>>,
    /// Its late write under the previous round's epoch, if that epoch was its own: the
    /// fence it was refused at as stale, or what it answered instead.
    late: Option<Result<i64, String>>,
    /// The document once both racers were done with the round.
    document: String,
}

/// One racer: each round, claims the resource at the same tick as the other racer (the
/// previous round's lease ends at that tick), writes under the epoch if it won, writes
/// late under the previous round's epoch if that one was its own, and reads the
/// document once both are done.
fn race(root: &Path, me: &str, barrier: &Barrier, rounds: i64) -> Vec<Round> {
    let mut client = logical(root);
    let mut mine: Option<i64> = None;
    let mut seen = Vec::new();
    for round in 1..=rounds {
        let tick = 10 * round;
        barrier.wait();
        let mut this = Round::default();
        match client
            .set_now(tick)
            .and_then(|()| client.claim("race.md", me, ticks(10)))
        {
            Ok(claimed) => this.won = Some(claimed.epoch),
            Err(Error::Refused(refusal)) => match &refusal.detail {
                RefusalDetail::Held {
                    holder,
                    holder_epoch,
                    ..
                } => this.held_by = Some((holder.clone(), *holder_epoch)),
                other => this.claim_failed = Some(format!("{other:?}")),
            },
            Err(e) => this.claim_failed = Some(e.to_string()),
        }
        barrier.wait();
        let _ = client.set_now(tick + 1);
        if let Some(epoch) = this.won {
            let bytes = format!("round {round} by {me}\n");
            this.wrote = Some(
                match client.write("race.md", epoch, Content::Bytes(bytes.as_bytes())) {
                    Ok(w) if !w.replay => Ok(w.epoch),
                    other => Err(format!("{other:?}")),
                },
            );
        }
        if let Some(old) = mine.filter(|&old| old == round - 1) {
            let late = format!("late from {me}, epoch {old}\n");
            this.late = Some(
                match client.write("race.md", old, Content::Bytes(late.as_bytes())) {
                    Err(Error::Refused(r)) => match r.detail {
                        RefusalDetail::Stale { fence, .. } => Ok(fence),
                        other => Err(format!("refused with {other:?}")),
                    },
                    other => Err(format!("{other:?}")),
                },
            );
        }
        mine = this.won.or(mine);
        barrier.wait();
        this.document = std::fs::read_to_string(root.join("race.md")).unwrap_or_default();
        seen.push(this);
    }
    seen
}

#[test]
fn two_clients_racing_for_a_lease_hold_it_one_at_a_time_and_a_late_write_is_stale() {
    const ROUNDS: i64 = 20;
    let env = Env::new();
    let barrier = Barrier::new(2);
    let (a, b) = thread::scope(|s| {
        let a = s.spawn(|| race(env.root(), "A", &barrier, ROUNDS));
        let b = s.spawn(|| race(env.root(), "B", &barrier, ROUNDS));
        (a.join().expect("racer A"), b.join().expect("racer B"))
    });
    let mut wins = [0, 0];
    for (round, (a, b)) in (1..).zip(a.iter().zip(&b)) {
        let both = format!("round {round}: A {a:?}, B {b:?}");
        // Exactly one claim won each round, with the next epoch; the other was told who
        // holds the lease, and under which epoch.
        let (winner, epoch, won, lost) = match (a.won, b.won) {
            (Some(epoch), None) => ("A", epoch, a, b),
            (None, Some(epoch)) => ("B", epoch, b, a),
            _ => panic!("both or neither claimed: {both}"),
        };
        wins[usize::from(winner == "B")] += 1;
        assert_eq!(epoch, round, "{both}");
        assert_eq!(lost.held_by, Some((winner.to_string(), epoch)), "{both}");
        assert_eq!(won.wrote, Some(Ok(epoch)), "{both}");
        // The previous round's holder wrote late under its epoch: refused as stale, at
        // this round's fence.
        let late: Vec<_> = [a, b].iter().filter_map(|r| r.late.clone()).collect();
        if round > 1 {
            assert_eq!(late, [Ok(epoch)], "{both}");
        } else {
            assert!(late.is_empty(), "{both}");
        }
        // The document holds the winner's bytes, as both read it.
        let expected = format!("round {round} by {winner}\n");
        assert_eq!((&a.document, &b.document), (&expected, &expected), "{both}");
    }
    eprintln!("rounds won by A and B: {wins:?}");
}

/// The POSIX locks this process holds on `file`, as the kernel lists them in
/// `/proc/locks`: (kind, first byte, last byte), sorted.
fn my_locks(file: &Path) -> Vec<(String, String, String)> {
    let ino = std::fs::metadata(file).expect("the locked file").ino();
    let me = std::process::id().to_string();
    let table = std::fs::read_to_string("/proc/locks").expect("read /proc/locks");
    let mut mine: Vec<_> = table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() >= 8 && f[1] == "POSIX" && f[4] == me)
        .filter(|f| f[5].rsplit(':').next() == Some(&ino.to_string()))
        .map(|f| (f[3].to_string(), f[6].to_string(), f[7].to_string()))
        .collect();
    mine.sort();
    mine
}

#[test]
fn clients_in_one_process_leave_each_other_their_locks_on_the_state_file() {
    let env = Env::new();
    let a = Client::open(env.root()).expect("open a client");
    // A WAL past the size at which a store opening checks whether to checkpoint, so
    // that an opening looks at both the WAL index and the state file.
    for i in 0..60 {
        let claimed = a
            .claim("a.md", "A", Duration::from_secs(60))
            .expect("claim");
        let bytes = format!("version {i}\n");
        written(a.write("a.md", claimed.epoch, Content::Bytes(bytes.as_bytes())));
        a.complete(&LeaseId::from(&claimed), None)
            .expect("complete");
    }
    let (db, index) = (
        env.path(".fencepost/state.db"),
        env.path(".fencepost/state.db-shm"),
    );
    let held = (my_locks(&db), my_locks(&index));
    assert!(
        !held.0.is_empty() && !held.1.is_empty(),
        "no locks: {held:?}"
    );

    // Another client of this process opens the state file, works, and is closed.
    let b = Client::open(env.root()).expect("open a client");
    let claimed = b
        .claim("b.md", "B", Duration::from_secs(60))
        .expect("claim");
    written(b.write("b.md", claimed.epoch, Content::Bytes(b"b\n")));
    drop(b);
    assert_eq!(
        (my_locks(&db), my_locks(&index)),
        held,
        "after another client closed"
    );

    // A lease keeper renews on connections of its own, opened and closed each time.
    let claimed = a
        .claim("a.md", "A", Duration::from_millis(1_500))
        .expect("claim");
    let keeper = a
        .keep(&LeaseId::from(&claimed), Duration::from_millis(1_500))
        .expect("keep the lease");
    // Past the first renewal (at a third of the TTL), well before the lease would end.
    thread::sleep(Duration::from_millis(1_000));
    assert!(matches!(keeper.stop(), Keeping::Stopped));
    assert_ne!(
        lease_row(&env, "a.md")["deadline"],
        claimed.deadline,
        "never renewed"
    );
    assert_eq!(
        (my_locks(&db), my_locks(&index)),
        held,
        "after the keeper's renewals"
    );
}

/// One CLI worker: claims and writes documents of its own under `cli/` until `done`,
/// every command succeeding. Returns how many it wrote.
fn cli_worker(env: &Env, name: &str, done: &AtomicBool) -> usize {
    let mut n = 0;
    while !done.load(Ordering::Relaxed) {
        let res = format!("cli/{name}-{n}.md");
        let out = env
            .fp(&["claim", &res, "--owner", name, "--ttl", "60"])
            .expect(0);
        let epoch = out.stdout.trim().to_string();
        env.fp(&["write", &res, "--epoch", &epoch])
            .stdin(format!("{res} by {name}\n"))
            .expect_stdout(0, "written");
        n += 1;
    }
    n
}

#[test]
fn a_client_kept_open_across_a_thousand_writes_leaves_other_processes_locking_intact() {
    const CYCLES: usize = 1_000;
    // On a tmpfs where there is one: the locks are the same as on a disk, and without a
    // disk's fsyncs (the COMMIT's, the document's, its folder's) a thousand cycles take
    // seconds instead of a minute.
    let shm = Path::new("/dev/shm");
    let env = if shm.is_dir() {
        Env::new_in(shm)
    } else {
        Env::new()
    };
    let client = Client::open(env.root()).expect("open a client");
    // The root and its state file exist before the command-line workers start.
    let first = client
        .claim("api/doc.md", "api", Duration::from_secs(60))
        .expect("the first claim");
    client.release(&LeaseId::from(&first)).expect("release");
    let done = AtomicBool::new(false);
    let cli_wrote = thread::scope(|s| {
        let workers: Vec<_> = ["cli-1", "cli-2"]
            .into_iter()
            .map(|name| s.spawn(|| cli_worker(&env, name, &done)))
            .collect();
        // A worker's loop: claim, publish a new version, complete; every call on the
        // client's one kept connection, while the processes commit beside it.
        let started = Instant::now();
        for i in 0..CYCLES {
            let claimed = client
                .claim("api/doc.md", "api", Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("claim {i}: {e}"));
            let version = format!("version {i}\n");
            let w = written(client.write(
                "api/doc.md",
                claimed.epoch,
                Content::Bytes(version.as_bytes()),
            ));
            assert_eq!((w.epoch, w.size), (claimed.epoch, version.len() as u64));
            client
                .complete(&LeaseId::from(&claimed), Some("ok"))
                .unwrap_or_else(|e| panic!("complete {i}: {e}"));
        }
        let took = started.elapsed();
        done.store(true, Ordering::Relaxed);
        let wrote: Vec<usize> = workers
            .into_iter()
            .map(|w| w.join().expect("a command-line worker"))
            .collect();
        eprintln!("{CYCLES} cycles through the client in {took:?}; the CLI wrote {wrote:?}");
        wrote
    });
    // The processes wrote for as long as the client did.
    for n in &cli_wrote {
        assert!(*n >= 5, "a command-line worker wrote only {n} documents");
    }
    assert_eq!(env.text("api/doc.md"), format!("version {}\n", CYCLES - 1));
    for (name, n) in ["cli-1", "cli-2"].iter().zip(&cli_wrote) {
        for k in 0..*n {
            let res = format!("cli/{name}-{k}.md");
            assert_eq!(env.text(&res), format!("{res} by {name}\n"));
        }
    }
    env.fp(&["verify"]).expect(0);
    // SQLite checkpoints the WAL as the client's connection commits: it stays near
    // SQLite's 1000-page threshold (4 KiB pages), where thousands of commits without a
    // checkpoint would have grown it past 20 MiB.
    let wal = std::fs::metadata(env.path(".fencepost/state.db-wal")).expect("the WAL");
    assert!(wal.len() < 8 << 20, "the WAL grew to {} bytes", wal.len());
    drop(client);
    env.fp(&["verify"]).expect(0);
}

#[test]
fn a_lease_keeper_keeps_a_lease_past_its_ttl_and_says_when_it_is_taken_over() {
    let env = Env::new();
    // Long enough that a loaded machine (a renewal waiting for a CPU and an fsync) does
    // not make a renewal late.
    let ttl = Duration::from_millis(1_500);
    let client = Client::open(env.root()).expect("open a client");
    let claimed = client.claim("job.md", "worker", ttl).expect("claim");
    let lease = LeaseId::from(&claimed);
    let keeper = client.keep(&lease, ttl).expect("keep the lease");

    // Three TTLs later the lease is still held: renewals moved its deadline.
    thread::sleep(3 * ttl);
    let Keeping::Held { deadline } = keeper.state() else {
        panic!("the keeper let the lease go: {:?}", keeper.state());
    };
    assert!(
        deadline > claimed.deadline + 1_000,
        "the deadline did not move: {deadline} after {}",
        claimed.deadline
    );
    let row = lease_row(&env, "job.md");
    assert_eq!(
        (&row["state"], &row["owner"], &row["epoch"]),
        (&"held".into(), &"worker".into(), &1.into()),
        "{row}"
    );
    env.fp(&["claim", "job.md", "--owner", "thief", "--ttl", "60"])
        .expect_stdout(3, "held");
    written(client.write("job.md", lease.epoch, Content::Bytes(b"still mine\n")));

    // Taken over: released by another of the worker's processes, then claimed by
    // another owner. The keeper's next renewal is refused, and it says so.
    env.fp(&["release", "job.md", "--owner", "worker", "--epoch", "1"])
        .expect(0);
    env.fp(&["claim", "job.md", "--owner", "thief", "--ttl", "60"])
        .expect_stdout(0, "2");
    let asked = Instant::now();
    let state = keeper.wait_lost(Duration::from_secs(10));
    let waited = asked.elapsed();
    let Keeping::Lost { why } = &state else {
        panic!("the keeper did not notice the loss: {state:?}");
    };
    assert!(why.starts_with("lost: "), "{why}");
    assert!(
        waited < ttl * 3,
        "the loss was noticed {waited:?} after it, with renewals every {:?}",
        ttl / 3
    );
    assert_eq!(keeper.stop(), state);
    let late = client.write("job.md", lease.epoch, Content::Bytes(b"late\n"));
    refused(late, RefusalKind::Stale);
    assert_eq!(env.text("job.md"), "still mine\n");
    assert_eq!(lease_row(&env, "job.md")["owner"], "thief");
}

#[test]
fn a_stopped_lease_keeper_leaves_the_lease_held_and_renews_it_no_more() {
    let env = Env::new();
    let ttl = Duration::from_millis(1_500);
    let client = Client::open(env.root()).expect("open a client");
    let claimed = client.claim("job.md", "worker", ttl).expect("claim");
    let keeper = client
        .keep(&LeaseId::from(&claimed), ttl)
        .expect("keep the lease");
    // Past its first renewal (every TTL/3).
    thread::sleep(ttl * 2 / 3);
    assert_eq!(keeper.stop(), Keeping::Stopped);
    let row = lease_row(&env, "job.md");
    assert_eq!(row["state"], "held", "{row}");
    let deadline = row["deadline"].as_i64().expect("a deadline");
    assert!(deadline > claimed.deadline, "never renewed: {row}");
    env.fp(&["claim", "job.md", "--owner", "other", "--ttl", "60"])
        .expect_stdout(3, "held");
    // A renewal period later the deadline has not moved.
    thread::sleep(ttl / 2);
    assert_eq!(lease_row(&env, "job.md")["deadline"], deadline);
    written(client.write("job.md", claimed.epoch, Content::Bytes(b"done\n")));
}

#[test]
fn refusals_are_typed_and_carry_their_facts() {
    let env = Env::new();
    let mut a = logical(env.root());
    let mut b = logical(env.root());
    let claimed = a.claim("doc.md", "A", ticks(10)).expect("claim");
    assert_eq!((claimed.epoch, claimed.deadline), (1, 10));

    // held: a second owner's claim, told who holds the lease.
    let held = refused(b.claim("doc.md", "B", ticks(10)), RefusalKind::Held);
    assert_eq!((held.resource.as_str(), held.epoch), ("doc.md", None));
    assert_eq!(held.owner.as_deref(), Some("B"));
    let RefusalDetail::Held {
        holder,
        holder_epoch,
        deadline,
        ..
    } = &held.detail
    else {
        panic!("held with {:?}", held.detail);
    };
    assert_eq!((holder.as_str(), *holder_epoch, *deadline), ("A", 1, 10));

    let first = written(a.write("doc.md", 1, Content::Bytes(b"one\n")));
    let path = env.path("doc.md");
    let before = std::fs::metadata(&path).expect("the document");

    // replay: the same bytes under the same epoch, the document untouched.
    a.set_now(5).expect("set the tick");
    let again = a
        .write("doc.md", 1, Content::Bytes(b"one\n"))
        .expect("a replay");
    assert!(again.replay, "{again:?}");
    assert_eq!(again.sha256, first.sha256);
    let after = std::fs::metadata(&path).expect("the document");
    assert_eq!(
        (after.ino(), after.mtime(), after.mtime_nsec()),
        (before.ino(), before.mtime(), before.mtime_nsec()),
        "a replay rewrote the document"
    );

    // conflict: other bytes under the same epoch.
    let other = a.write("doc.md", 1, Content::Bytes(b"two\n"));
    let conflict = refused(other, RefusalKind::Conflict);
    let RefusalDetail::Conflict {
        fence,
        recorded_sha256,
        ..
    } = &conflict.detail
    else {
        panic!("conflict with {:?}", conflict.detail);
    };
    assert_eq!((*fence, recorded_sha256), (1, &Some(first.sha256.clone())));

    // unissued: an epoch no claim gave out.
    let unissued = refused(
        a.write("doc.md", 7, Content::Bytes(b"seven\n")),
        RefusalKind::Unissued,
    );
    assert!(
        matches!(
            unissued.detail,
            RefusalDetail::Unissued {
                issued: Some(1),
                ..
            }
        ),
        "{:?}",
        unissued.detail
    );

    // stale: a newer epoch was claimed (a takeover at the lease's end).
    b.set_now(10).expect("set the tick");
    let taken = b.claim("doc.md", "B", ticks(10)).expect("a takeover");
    a.set_now(11).expect("set the tick");
    let stale = refused(
        a.write("doc.md", 1, Content::Bytes(b"late\n")),
        RefusalKind::Stale,
    );
    assert!(stale.is_stale());
    assert!(
        matches!(stale.detail, RefusalDetail::Stale { fence, .. } if fence == taken.epoch),
        "{:?}",
        stale.detail
    );
    assert_eq!(env.text("doc.md"), "one\n");
}

#[test]
fn a_lease_publishes_versions_in_seq_order_and_removes_its_resource_through_the_api() {
    let env = Env::new();
    let a = logical(env.root());
    let claimed = a.claim("doc.md", "A", ticks(100)).expect("claim");
    let seq = |n| WriteOptions::default().seq(n);
    let first = a
        .write_with("doc.md", claimed.epoch, Content::Bytes(b"one\n"), &seq(1))
        .expect("seq 1");
    assert_eq!((first.seq, first.replay), (1, false));
    a.write_with("doc.md", claimed.epoch, Content::Bytes(b"two\n"), &seq(2))
        .expect("seq 2");
    // The retry of seq 1 comes after seq 2: superseded, the recorded seq in its detail.
    let late = refused(
        a.write_with("doc.md", claimed.epoch, Content::Bytes(b"one\n"), &seq(1)),
        RefusalKind::Stale,
    );
    assert!(
        matches!(late.detail, RefusalDetail::Stale { fence: 1, seq: 2 }),
        "{:?}",
        late.detail
    );
    assert_eq!(env.text("doc.md"), "two\n");
    // A removal at the version that wrote bytes is a conflict; the next seq removes.
    refused(
        a.remove("doc.md", claimed.epoch, &seq(2)),
        RefusalKind::Conflict,
    );
    let removed = a.remove("doc.md", claimed.epoch, &seq(3)).expect("removed");
    assert!(removed.had_document && !removed.replay, "{removed:?}");
    assert!(!env.path("doc.md").exists());
    let again = a
        .remove("doc.md", claimed.epoch, &seq(3))
        .expect("a replay");
    assert!(again.replay, "{again:?}");
    // A negative seq is bad input, and changes nothing.
    let bad = a.write_with("doc.md", claimed.epoch, Content::Bytes(b"x\n"), &seq(-1));
    assert!(matches!(bad, Err(Error::Usage { .. })), "{bad:?}");
    assert!(!env.path("doc.md").exists());
}

#[test]
fn bad_input_is_a_usage_error_and_leaves_nothing_on_disk() {
    let env = Env::new();
    let outside = env.root().parent().expect("a parent").to_path_buf();
    let before_outside = entries(&outside);
    let client = logical(env.root());
    let usage = |what: &str, answer: Result<(), Error>| match answer {
        Err(Error::Usage { .. }) => {}
        other => panic!("{what}: wanted a usage error, got {other:?}"),
    };
    let ttl = ticks(10);
    usage("an empty name", client.claim("", "A", ttl).map(drop));
    usage("..", client.claim("..", "A", ttl).map(drop));
    usage(
        "a name out of the root",
        client.claim("../escape.md", "A", ttl).map(drop),
    );
    usage(
        "a zero TTL",
        client.claim("doc.md", "A", Duration::ZERO).map(drop),
    );
    usage(
        "a TTL under a tick",
        client
            .claim("doc.md", "A", Duration::from_micros(500))
            .map(drop),
    );
    let bytes = || Content::Bytes(b"x\n");
    usage(
        "a write with an empty name",
        client.write("", 1, bytes()).map(drop),
    );
    usage("a write to ..", client.write("..", 1, bytes()).map(drop));
    usage(
        "a write before any claim",
        client.write("doc.md", 1, bytes()).map(drop),
    );
    let mut wall = Client::open(env.root()).expect("open a client");
    usage("set_now on the wall clock", wall.set_now(5));
    usage(
        "a keeper on a logical clock",
        client
            .keep(
                &LeaseId {
                    resource: "doc.md".into(),
                    owner: "A".into(),
                    epoch: 1,
                },
                ttl,
            )
            .map(drop),
    );
    assert_eq!(entries(env.root()), Vec::<PathBuf>::new(), "in the root");
    assert_eq!(entries(&outside), before_outside, "beside the root");
}

/// The names in `dir`, sorted.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read the folder")
        .map(|e| PathBuf::from(e.expect("an entry").file_name()))
        .collect();
    names.sort();
    names
}

/// The compiled `examples/takeover`: `cargo test` builds the examples into `examples/`
/// beside the folder of the binary under test. A filtered run (`--test integration`)
/// does not build them: `cargo build --examples` first.
fn example(name: &str) -> PathBuf {
    let bin = harness::bin();
    let dir = bin.parent().expect("the binary's folder");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is not built: run `cargo test` (it builds the examples) or `cargo build --examples`",
        path.display()
    );
    path
}

#[test]
fn the_takeover_example_refuses_the_late_write_and_keeps_bs_report() {
    let (tx, rx) = mpsc::channel();
    let path = example("takeover");
    thread::spawn(move || {
        let out = Command::new(&path)
            .env_clear()
            .env("TMPDIR", harness::scratch())
            .stdin(Stdio::null())
            .output();
        let _ = tx.send(out);
    });
    let out = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the example finished within a minute")
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert_eq!(stderr, "");
    let lines: Vec<&str> = stdout.lines().collect();
    let [claimed, took, wrote, resumed, document, verdict] = lines.as_slice() else {
        panic!("six lines wanted:\n{stdout}");
    };
    assert_eq!(*claimed, "A: claimed epoch 1, then pauses past its lease");
    assert_eq!(*took, "B: took the lease over as epoch 2");
    assert_eq!(*wrote, "B: wrote its report");
    assert!(
        resumed.starts_with("A: resumed and wrote: refused: stale: "),
        "{resumed}"
    );
    assert_eq!(*document, "the document: report by B");
    assert_eq!(
        *verdict,
        "fenced: A's late write was refused and B's report stands"
    );
}

#[test]
fn status_verify_and_recover_answer_typed_values_and_keep_the_clients_locks() {
    let env = Env::new();
    let a = Client::open(env.root()).expect("open a client");
    let claimed = a
        .claim("r.md", "A", Duration::from_secs(60))
        .expect("claim");
    written(a.write("r.md", claimed.epoch, Content::Bytes(b"one\n")));
    let db = env.path(".fencepost/state.db");
    let held = my_locks(&db);
    assert!(!held.is_empty(), "the client holds no lock");

    // Another client's first call only reads (through a read-only connection of its own,
    // closed with the client): the first client's locks stay.
    let b = Client::open(env.root()).expect("open a client");
    let status = b.status(None).expect("status");
    assert_eq!(status.resources.len(), 1);
    let row = &status.resources[0];
    assert_eq!(row.resource, "r.md");
    assert_eq!(row.document.state, "matches");
    assert_eq!(row.lease.as_ref().map(|l| l.epoch), Some(claimed.epoch));
    drop(b);
    assert_eq!(my_locks(&db), held, "after another client's status");

    assert!(a.verify(None).expect("verify").problems.is_empty());
    std::fs::write(env.path("r.md"), "edited by hand\n").expect("edit the document");
    let found = a.verify(Some("r.md")).expect("verify");
    assert_eq!(
        found.problems.iter().map(|p| p.problem).collect::<Vec<_>>(),
        ["drifted"],
        "{found:?}"
    );
    let unseen = a.status(Some("other.md"));
    assert!(matches!(unseen, Err(Error::Usage { .. })), "{unseen:?}");

    // A dead writer's temp file is leftover; recover removes it and reports the resource.
    let temp = env.path(".r.md.fencepost-tmp-AbCd1234");
    std::fs::write(&temp, "half a write").expect("temp");
    let recovered = a.recover(Some("r.md"), Duration::ZERO).expect("recover");
    assert_eq!(recovered.resources.len(), 1, "{recovered:?}");
    assert!(
        !temp.exists(),
        "recover removes the dead writer's temp file"
    );
    assert_eq!(my_locks(&db), held, "after the client's own reads");
    let mirror = a.mirror(None);
    assert!(matches!(mirror, Err(Error::Usage { .. })), "{mirror:?}");
}
