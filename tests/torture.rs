//! A bounded kill -9 torture test of the promises of docs/crash-safety.md.
//!
//! Several worker threads drive real `fencepost` processes (claim, write, complete) on a
//! few resources with the wall clock and short leases. Each process may be SIGKILLed at a
//! random instant, SIGSTOPped for longer than a lease and then continued, crashed by an
//! `abort` failpoint, or slowed at a random step (a `sleep` failpoint) to widen the
//! windows a kill can land in. A reader checks all along that every document it sees is
//! one complete version. At the end, after `recover`: every invariant, and every
//! acknowledged write (exit 0 `written`/`replay`) is accounted for: the document holds
//! its content or content from a higher epoch.
//!
//! The seed is printed; `FENCEPOST_TORTURE_SEED=N` replays the same decisions (thread
//! timing still varies), `FENCEPOST_TORTURE_SECS` sets the running time (default 20).

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::harness::Env;
use crate::support::{WRITE_POINTS, command, sha256_hex, signal, status_row, tool_files};

const RESOURCES: [&str; 3] = ["r0.txt", "r1.txt", "deep/r2.txt"];
const WORKERS: usize = 6;
const TTL: &str = "250ms";

const CLAIM_POINTS: [&str; 3] = [
    "claim.before_commit",
    "txn.before_commit",
    "txn.after_commit",
];
const RECOVER_POINTS: [&str; 4] = [
    "recover.before_apply",
    "txn.before_commit",
    "txn.after_commit",
    "txn.after_begin",
];

/// xorshift64*: small, seedable, good enough to pick actions.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// A document version that checks itself: a header naming resource, epoch, owner and
/// length, a body generated from the header, and a trailer. A torn, truncated or mixed
/// file fails [`check_version`].
pub(crate) fn make_version(res: &str, epoch: i64, owner: &str, len: usize) -> Vec<u8> {
    let header = format!("torture res={res} epoch={epoch} owner={owner} n={len}\n");
    let mut out = header.clone().into_bytes();
    out.extend(body(&header, len));
    out.extend_from_slice(b"\nend\n");
    out
}

fn body(header: &str, len: usize) -> Vec<u8> {
    let seed = header.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let mut rng = Rng::new(seed);
    (0..len).map(|_| b'a' + rng.below(26) as u8).collect()
}

/// The epoch of a valid version of `res`, or why it is not one.
pub(crate) fn check_version(res: &str, bytes: &[u8]) -> Result<i64, String> {
    let nl = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("no header line")?;
    let header = std::str::from_utf8(&bytes[..=nl]).map_err(|_| "header not utf-8")?;
    let field = |key: &str| {
        header
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .ok_or(format!("no {key} in {header:?}"))
    };
    if field("res=")? != res {
        return Err(format!("header of another resource: {header:?}"));
    }
    let epoch: i64 = field("epoch=")?.parse().map_err(|_| "bad epoch")?;
    let len: usize = field("n=")?.parse().map_err(|_| "bad length")?;
    let rest = &bytes[nl + 1..];
    if rest.len() != len + 5 {
        return Err(format!(
            "{} bytes after the header, wanted {}",
            rest.len(),
            len + 5
        ));
    }
    if rest[..len] != body(header, len)[..] || &rest[len..] != b"\nend\n" {
        return Err(format!(
            "body or trailer does not match its header {header:?}"
        ));
    }
    Ok(epoch)
}

#[derive(Debug, Default)]
struct Stats {
    spawned: AtomicUsize,
    killed: AtomicUsize,
    stopped: AtomicUsize,
    aborted: AtomicUsize,
    slowed: AtomicUsize,
    claims: AtomicUsize,
    written: AtomicUsize,
    replayed: AtomicUsize,
    refused: AtomicUsize,
    busy: AtomicUsize,
    reads: AtomicUsize,
}

impl Stats {
    fn add(counter: &AtomicUsize) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
    fn get(counter: &AtomicUsize) -> usize {
        counter.load(Ordering::Relaxed)
    }
}

/// An acknowledged write.
#[derive(Debug, Clone)]
struct Ack {
    res: String,
    epoch: i64,
    sha256: String,
}

struct Outcome {
    code: Option<i32>,
    stdout: String,
}

/// Runs one `fencepost` process and maybe does something nasty to it.
fn chaos_run(
    env: &Env,
    args: &[&str],
    stdin: &[u8],
    points: &[&str],
    rng: &mut Rng,
    stats: &Stats,
) -> Outcome {
    let roll = rng.below(100);
    let mut cmd = command(env, args, None);
    if roll >= 96 {
        cmd.env("FAILPOINTS", format!("{}=return(abort)", rng.pick(points)));
        Stats::add(&stats.aborted);
    } else if rng.below(100) < 30 {
        let ms = 1 + rng.below(8);
        cmd.env("FAILPOINTS", format!("{}=sleep({ms})", rng.pick(points)));
        Stats::add(&stats.slowed);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn fencepost");
    Stats::add(&stats.spawned);
    {
        use std::io::Write as _;
        let mut input = child.stdin.take().expect("stdin");
        // Small enough for the pipe buffer; a process killed first gives EPIPE.
        let _ = input.write_all(stdin);
    }
    if (60..80).contains(&roll) {
        std::thread::sleep(Duration::from_micros(rng.below(25_000)));
        if child.try_wait().expect("try_wait").is_none() {
            child.kill().expect("SIGKILL");
            Stats::add(&stats.killed);
        }
    } else if (80..96).contains(&roll) {
        std::thread::sleep(Duration::from_micros(rng.below(10_000)));
        // Not reaped yet, so the pid is still this process (maybe a zombie).
        if child.try_wait().expect("try_wait").is_none() {
            signal(child.id(), "STOP");
            Stats::add(&stats.stopped);
            std::thread::sleep(Duration::from_millis(50 + rng.below(550)));
            signal(child.id(), "CONT");
        }
    }
    let out = child.wait_with_output().expect("wait");
    if out.status.signal().is_some() {
        return Outcome {
            code: None,
            stdout: String::new(),
        };
    }
    Outcome {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).trim().to_string(),
    }
}

/// What the workers share.
#[derive(Default)]
struct Shared {
    stats: Stats,
    /// Acknowledged writes, all rounds.
    acks: Mutex<Vec<Ack>>,
    /// Every content ever offered: SHA-256 -> (resource, epoch).
    offered: Mutex<HashMap<String, (String, i64)>>,
}

fn worker(env: &Env, shared: &Shared, rng: &mut Rng, owner: &str, until: Instant) {
    let stats = &shared.stats;
    let busy = ["--busy-timeout", "5s"];
    while Instant::now() < until {
        if rng.below(10) == 0 {
            // Someone tidying up while others write: live writers' files must survive.
            let recover = [&busy[..], &["recover"]].concat();
            let out = chaos_run(env, &recover, b"", &RECOVER_POINTS, rng, stats);
            assert!(
                matches!(out.code, None | Some(0) | Some(7)),
                "recover exited {:?}",
                out.code
            );
        }
        let res = rng.pick(&RESOURCES);
        let claim = [&busy[..], &["claim", res, "--owner", owner, "--ttl", TTL]].concat();
        let out = chaos_run(env, &claim, b"", &CLAIM_POINTS, rng, stats);
        let epoch = match out.code {
            Some(0) => {
                Stats::add(&stats.claims);
                out.stdout.parse::<i64>().expect("claim prints the epoch")
            }
            Some(3 | 7) | None => {
                std::thread::sleep(Duration::from_millis(rng.below(20)));
                continue;
            }
            Some(code) => panic!("claim exited {code}: {}", out.stdout),
        };
        let len = 200 + rng.below(12_000) as usize;
        let content = make_version(res, epoch, owner, len);
        let sha = sha256_hex(&content);
        shared
            .offered
            .lock()
            .expect("lock")
            .insert(sha.clone(), (res.to_string(), epoch));
        let e = epoch.to_string();
        let write = [&busy[..], &["write", res, "--epoch", &e, "--owner", owner]].concat();
        // A writer whose process died retries the same bytes, as a real worker would.
        for _ in 0..3 {
            let out = chaos_run(env, &write, &content, &WRITE_POINTS, rng, stats);
            match (out.code, out.stdout.as_str()) {
                (Some(0), "written" | "replay") => {
                    let counter = if out.stdout == "written" {
                        &stats.written
                    } else {
                        &stats.replayed
                    };
                    Stats::add(counter);
                    shared.acks.lock().expect("lock").push(Ack {
                        res: res.to_string(),
                        epoch,
                        sha256: sha.clone(),
                    });
                    break;
                }
                (Some(5 | 6 | 8), _) => {
                    Stats::add(&stats.refused);
                    break;
                }
                (Some(7), _) => Stats::add(&stats.busy),
                (None, _) => {}
                (code, stdout) => panic!("write exited {code:?}: {stdout}"),
            }
        }
        if rng.below(2) == 0 {
            let complete = [
                &busy[..],
                &["complete", res, "--owner", owner, "--epoch", &e],
            ]
            .concat();
            let out = chaos_run(env, &complete, b"", &CLAIM_POINTS, rng, stats);
            assert!(
                matches!(out.code, None | Some(0 | 4 | 7)),
                "complete exited {:?}",
                out.code
            );
        }
    }
}

/// The end of a worker's round: one more write, crashed (`abort`) at a random step, so
/// that the last thing to happen to a resource is often a crash inside the write, for
/// the check that follows to see before any later write covers it.
fn last_gasp(env: &Env, shared: &Shared, rng: &mut Rng, owner: &str) {
    let res = rng.pick(&RESOURCES);
    let claim = ["claim", res, "--owner", owner, "--ttl", TTL, "--wait", "2s"];
    let out = env.fp(&claim).output();
    if out.code != 0 {
        return;
    }
    let epoch: i64 = out.stdout.trim().parse().expect("claim prints the epoch");
    let content = make_version(res, epoch, owner, 100 + rng.below(5000) as usize);
    shared
        .offered
        .lock()
        .expect("lock")
        .insert(sha256_hex(&content), (res.to_string(), epoch));
    let e = epoch.to_string();
    let point = rng.pick(&WRITE_POINTS);
    let out = env
        .fp(&["write", res, "--epoch", &e, "--owner", owner])
        .stdin(content)
        .env("FAILPOINTS", &format!("{point}=return(abort)"))
        .output();
    assert!(matches!(out.code, -1 | 5), "last gasp at {point}: {out:?}");
    Stats::add(&shared.stats.aborted);
}

/// One burst of chaos: the workers and a reader until `until`.
fn round(env: &Env, shared: &Shared, rngs: &mut [Rng], until: Instant, ctx: &str) {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        // Promise 1, all along: whatever instant a reader looks, a document is one
        // complete version.
        let reader = s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                for res in RESOURCES {
                    if let Ok(bytes) = std::fs::read(env.path(res)) {
                        Stats::add(&shared.stats.reads);
                        if let Err(why) = check_version(res, &bytes) {
                            panic!("{ctx}: {res} is not one complete version: {why}");
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let workers: Vec<_> = rngs
            .iter_mut()
            .enumerate()
            .map(|(id, rng)| {
                s.spawn(move || {
                    let owner = format!("w{id}");
                    worker(env, shared, rng, &owner, until);
                    last_gasp(env, shared, rng, &owner);
                })
            })
            .collect();
        let mut failed = None;
        for w in workers {
            if let Err(panic) = w.join() {
                failed.get_or_insert(panic);
            }
        }
        done.store(true, Ordering::Relaxed);
        let read = reader.join();
        if let Some(panic) = failed {
            std::panic::resume_unwind(panic);
        }
        if let Err(panic) = read {
            std::panic::resume_unwind(panic);
        }
    });
}

/// Every invariant, with all processes gone: before recovery (status), then after it.
fn check(env: &Env, shared: &Shared, summary: &str) {
    // Before recovery: a crashed write may await recovery (`interrupted`), but the
    // document is one complete version and nothing has drifted or gone missing.
    for res in RESOURCES {
        let row = status_row(env, res, None);
        let state = row["document"]["state"].as_str().unwrap_or("?").to_string();
        assert!(
            ["matches", "absent", "interrupted"].contains(&state.as_str()),
            "{summary}: {res} before recovery: {row}"
        );
        if let Some(doc) = env.read(res) {
            check_version(res, &doc).unwrap_or_else(|why| panic!("{summary}: {res}: {why}"));
        }
    }
    env.fp(&["recover"]).expect(0);
    assert_eq!(
        tool_files(env),
        Vec::<String>::new(),
        "{summary}: leftovers after recover"
    );
    let acks = shared.acks.lock().expect("acks");
    let offered = shared.offered.lock().expect("offered");
    for res in RESOURCES {
        let row = status_row(env, res, None);
        let mine: Vec<&Ack> = acks.iter().filter(|a| a.res == res).collect();
        let Some(doc) = env.read(res) else {
            assert!(
                mine.is_empty(),
                "{summary}: {res} is gone but writes were acknowledged: {row}"
            );
            assert_eq!(row["document"]["state"], "absent", "{summary}: {row}");
            continue;
        };
        // Promise 1: one complete version, one that was offered for this resource.
        let epoch =
            check_version(res, &doc).unwrap_or_else(|why| panic!("{summary}: {res}: {why}"));
        let sha = sha256_hex(&doc);
        assert_eq!(
            offered.get(&sha),
            Some(&(res.to_string(), epoch)),
            "{summary}: {res} holds bytes nobody offered"
        );
        // Promise 3: the record describes exactly these bytes.
        assert_eq!(row["document"]["state"], "matches", "{summary}: {row}");
        assert_eq!(row["sink"]["content_epoch"], epoch, "{summary}: {row}");
        assert_eq!(row["sink"]["sha256"], sha, "{summary}: {row}");
        let fence = row["sink"]["fence"].as_i64().expect("fence");
        let issued = row["lease"]["epoch"].as_i64().expect("lease epoch");
        assert!(epoch <= fence && fence <= issued, "{summary}: {row}");
        // Promise 2: every acknowledged write is there, or was superseded by a higher
        // epoch.
        for ack in mine {
            assert!(
                ack.epoch < epoch || (ack.epoch == epoch && ack.sha256 == sha),
                "{summary}: acknowledged write {ack:?} of {res} is lost (document: epoch {epoch})"
            );
        }
    }
}

fn summary(ctx: &str, stats: &Stats) -> String {
    format!(
        "{ctx}: {} processes: {} SIGKILLed, {} SIGSTOPped, {} aborted, {} slowed; {} claims, \
         {} written, {} replayed, {} refused, {} busy; {} reads",
        Stats::get(&stats.spawned),
        Stats::get(&stats.killed),
        Stats::get(&stats.stopped),
        Stats::get(&stats.aborted),
        Stats::get(&stats.slowed),
        Stats::get(&stats.claims),
        Stats::get(&stats.written),
        Stats::get(&stats.replayed),
        Stats::get(&stats.refused),
        Stats::get(&stats.busy),
        Stats::get(&stats.reads),
    )
}

#[test]
fn torture_kill_stop_and_crash_writers_and_claimers() {
    let seed = std::env::var("FENCEPOST_TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let secs: u64 = std::env::var("FENCEPOST_TORTURE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    eprintln!("torture: seed {seed} (replay: FENCEPOST_TORTURE_SEED={seed}), {secs} s");

    let env = Env::new();
    std::fs::create_dir(env.path("deep")).expect("mkdir");
    // The root gets its state file before the workers start: a `recover` run before any
    // claim would otherwise meet a root without one, which is bad input (exit 2), not an
    // outcome of the chaos. A claim that lapses at once, as a worker's that never wrote.
    env.fp(&["claim", RESOURCES[0], "--owner", "setup", "--ttl", "1ms"])
        .expect(0);
    let shared = Shared::default();
    let mut rngs: Vec<Rng> = (0..WORKERS as u64)
        .map(|id| Rng::new(seed ^ (id + 1).wrapping_mul(0xA24B_AED4_963E_E407)))
        .collect();
    // Rounds of chaos; after each, every process is gone and the invariants are checked
    // (so a bad state is seen before a later write papers over it).
    let rounds = (secs * 2 / 5).max(1);
    let start = Instant::now();
    for r in 1..=rounds {
        let ctx = format!("torture seed {seed}, round {r}/{rounds}");
        let until = start + Duration::from_millis(secs * 1000 * r / rounds);
        round(&env, &shared, &mut rngs, until, &ctx);
        check(&env, &shared, &summary(&ctx, &shared.stats));
    }
    let summary = summary(&format!("torture seed {seed}"), &shared.stats);
    eprintln!("{summary}");
    assert!(
        Stats::get(&shared.stats.written) >= 5,
        "too little happened: {summary}"
    );
    assert!(
        Stats::get(&shared.stats.killed) >= 3,
        "too few kills: {summary}"
    );

    // The state file is still usable by everyone.
    for res in RESOURCES {
        let out = env
            .fp(&[
                "claim", res, "--owner", "final", "--ttl", "1m", "--wait", "10s",
            ])
            .expect(0);
        let epoch = out.stdout.trim().to_string();
        let content = make_version(res, epoch.parse().expect("epoch"), "final", 64);
        env.fp(&["write", res, "--epoch", &epoch])
            .stdin(content.clone())
            .expect_stdout(0, "written");
        assert_eq!(env.read(res), Some(content));
    }
    assert_eq!(tool_files(&env), Vec::<String>::new(), "{summary}");
}

#[test]
fn torture_versions_detect_tearing() {
    let v = make_version("r0.txt", 7, "w1", 100);
    assert_eq!(check_version("r0.txt", &v), Ok(7));
    assert!(
        check_version("r0.txt", &v[..v.len() - 1]).is_err(),
        "truncated"
    );
    assert!(check_version("r1.txt", &v).is_err(), "other resource");
    let w = make_version("r0.txt", 8, "w2", 100);
    let mut mixed = v[..60].to_vec();
    mixed.extend_from_slice(&w[60..]);
    assert!(check_version("r0.txt", &mixed).is_err(), "mixed");
    assert!(check_version("r0.txt", b"").is_err(), "empty");
}
