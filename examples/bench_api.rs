//! Rows 8a and 8b of the benchmarks (`bench/bench.py` runs this program and reads what it
//! prints): what fenced publishing costs a program that keeps a [`fencepost::Client`]
//! open, against the least the same durable work takes in the same process.
//!
//! ```text
//! bench_api local DIR [--rounds N] [--samples N] [--warmup N]
//! bench_api store URL [--rounds N] [--samples N] [--warmup N]
//! ```
//!
//! `local` (row 8a) makes a publish root in DIR. A: a timed 4 KiB `write` through one
//! client kept open, each after an untimed claim of its own, so that every write is a new
//! version under a new epoch (never a replay). B: a durable replace of another document
//! in the same folder: temp file, write, fsync, rename over the document, folder fsync.
//!
//! `store` (row 8b) works on the PostgreSQL store at URL. A: claim + 4 KiB write +
//! complete through one client. B: one connection of the `postgres` crate making three
//! committed transactions on a table of its own in the same database (an UPDATE of a lease
//! row, an INSERT of 4 KiB into a bytea column, an UPDATE), each one statement prepared
//! once and committed on its own, as the server commits by default: three WAL flushes.
//!
//! In every sample A and B both run, in an order drawn from a seeded generator; the first
//! WARMUP samples of a round are discarded. Each round prints one JSON line: the row, the
//! round, "a" and "b" (seconds per sample), and A's parts where it has several.
//!
//! Every sample writes other bytes (its number in the first eight), so that no two
//! versions are the same and a store never finds a version's content already uploaded.

use std::error::Error;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fencepost::{Client, Content, LeaseId, Options, RefusalKind};

const SIZE: usize = 4096;

type Outcome<T> = Result<T, Box<dyn Error>>;

fn main() -> Outcome<()> {
    let args = Args::parse(std::env::args().skip(1))?;
    let mut content = vec![0u8; SIZE];
    let mut rng = fastrand::Rng::with_seed(0x8a8b);
    rng.fill(&mut content);
    match args.mode.as_str() {
        "local" => local(&args, Path::new(&args.place), content),
        "store" => store(&args, &args.place, content),
        other => Err(format!("bench_api: unknown mode {other} (local or store)").into()),
    }
}

struct Args {
    mode: String,
    place: String,
    rounds: usize,
    samples: usize,
    warmup: usize,
}

impl Args {
    fn parse(mut args: impl Iterator<Item = String>) -> Outcome<Args> {
        let usage =
            "usage: bench_api local DIR | store URL [--rounds N] [--samples N] [--warmup N]";
        let mode = args.next().ok_or(usage)?;
        let place = args.next().ok_or(usage)?;
        let mut parsed = Args {
            mode,
            place,
            rounds: 5,
            samples: 100,
            warmup: 10,
        };
        while let Some(flag) = args.next() {
            let value: usize = args.next().ok_or(usage)?.parse()?;
            match flag.as_str() {
                "--rounds" => parsed.rounds = value,
                "--samples" => parsed.samples = value,
                "--warmup" => parsed.warmup = value,
                _ => return Err(usage.into()),
            }
        }
        if parsed.rounds == 0 || parsed.samples == 0 {
            return Err("bench_api: --rounds and --samples must be at least 1".into());
        }
        Ok(parsed)
    }
}

/// The seconds since `start`.
fn since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}

/// Marks the content as sample `n`'s.
fn stamp(content: &mut [u8], n: u64) {
    content[..8].copy_from_slice(&n.to_le_bytes());
}

/// Runs `rounds` rounds of `warmup + samples` samples; `sample(n, a_first)` runs one
/// sample (both sides, A first or not) and returns its timings; the first `warmup` of a
/// round are dropped.
fn rounds<T>(args: &Args, mut sample: impl FnMut(u64, bool) -> Outcome<T>) -> Outcome<Vec<Vec<T>>> {
    let mut order = fastrand::Rng::with_seed(0x0a0b);
    let mut n = 0u64;
    let mut all = Vec::with_capacity(args.rounds);
    for _ in 0..args.rounds {
        let mut kept = Vec::with_capacity(args.samples);
        for i in 0..args.warmup + args.samples {
            n += 1;
            let timed = sample(n, order.bool())?;
            if i >= args.warmup {
                kept.push(timed);
            }
        }
        all.push(kept);
    }
    Ok(all)
}

// ------------------------------------------------------------------ row 8a

/// One 8a sample: the claim (untimed for the row, reported), the write, the replace.
struct LocalSample {
    claim: f64,
    write: f64,
    replace: f64,
}

fn local(args: &Args, dir: &Path, mut content: Vec<u8>) -> Outcome<()> {
    let root = dir.join("api-root");
    std::fs::create_dir_all(&root)?;
    let client = Client::open(&root)?;
    // The first claim makes the root and its state file; the client keeps that open.
    client.claim("doc.md", "bench", Duration::from_millis(1))?;
    let floor = root.join("floor.md");
    let results = rounds(args, |n, a_first| {
        stamp(&mut content, n);
        let t = Instant::now();
        let epoch = claim_free(&client, "doc.md")?;
        let claim = since(t);
        let mut write = 0.0;
        let mut replace = 0.0;
        for side in if a_first {
            [true, false]
        } else {
            [false, true]
        } {
            let t = Instant::now();
            if side {
                let written = client.write("doc.md", epoch, Content::Bytes(&content))?;
                write = since(t);
                if written.replay {
                    return Err("bench_api: a write was a replay".into());
                }
            } else {
                durable_replace(&floor, &content)?;
                replace = since(t);
            }
        }
        Ok(LocalSample {
            claim,
            write,
            replace,
        })
    })?;
    if std::fs::read(root.join("doc.md"))? != content || std::fs::read(&floor)? != content {
        return Err("bench_api: the documents do not hold the last sample's bytes".into());
    }
    for (round, samples) in results.iter().enumerate() {
        let line = serde_json::json!({
            "row": "8a",
            "round": round,
            "a": samples.iter().map(|s| s.write).collect::<Vec<_>>(),
            "b": samples.iter().map(|s| s.replace).collect::<Vec<_>>(),
            "claim": samples.iter().map(|s| s.claim).collect::<Vec<_>>(),
        });
        println!("{line}");
    }
    Ok(())
}

/// A new epoch of `resource`: the bench's leases last 1 ms, so the one before is over by
/// the next sample's claim, or a moment later.
fn claim_free(client: &Client, resource: &str) -> Outcome<i64> {
    loop {
        match client.claim(resource, "bench", Duration::from_millis(1)) {
            Ok(claimed) => return Ok(claimed.epoch),
            Err(fencepost::Error::Refused(r)) if r.kind() == RefusalKind::Held => {
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The physical floor of an atomic, durable replace of `dest` with `content`: a temp
/// file beside it, written and fsynced, renamed over it, the folder fsynced (the steps
/// of `bench/floor.c`, in this process).
fn durable_replace(dest: &Path, content: &[u8]) -> Outcome<()> {
    let folder = dest
        .parent()
        .ok_or("bench_api: a document without a folder")?;
    let name = dest
        .file_name()
        .ok_or("bench_api: a document without a name")?;
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".floor-tmp-{}", std::process::id()));
    let temp: PathBuf = folder.join(temp_name);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)?;
    file.write_all(content)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temp, dest)?;
    File::open(folder)?.sync_all()?;
    Ok(())
}

// ------------------------------------------------------------------ row 8b

/// One 8b sample: A's three calls and B's three transactions.
struct StoreSample {
    claim: f64,
    write: f64,
    complete: f64,
    floor: [f64; 3],
}

/// The least the same three commits take: prepared statements on one connection.
struct Floor {
    client: postgres::Client,
    claim: postgres::Statement,
    write: postgres::Statement,
    complete: postgres::Statement,
}

impl Floor {
    fn connect(url: &str) -> Outcome<Floor> {
        let mut client = url.parse::<postgres::Config>()?.connect(postgres::NoTls)?;
        client.batch_execute(
            "CREATE TABLE IF NOT EXISTS bench_floor_lease (
                 id    integer PRIMARY KEY,
                 owner text NOT NULL,
                 epoch bigint NOT NULL,
                 state text NOT NULL
             );
             CREATE TABLE IF NOT EXISTS bench_floor_content (
                 id    bigserial PRIMARY KEY,
                 epoch bigint NOT NULL,
                 data  bytea NOT NULL
             );
             ALTER TABLE bench_floor_content ALTER COLUMN data SET STORAGE EXTERNAL;
             INSERT INTO bench_floor_lease VALUES (1, 'bench', 0, 'completed')
                 ON CONFLICT DO NOTHING;",
        )?;
        let claim = client.prepare(
            "UPDATE bench_floor_lease SET owner = $1, epoch = epoch + 1, state = 'held'
             WHERE id = 1 RETURNING epoch",
        )?;
        let write =
            client.prepare("INSERT INTO bench_floor_content (epoch, data) VALUES ($1, $2)")?;
        let complete = client.prepare(
            "UPDATE bench_floor_lease SET state = 'completed' WHERE id = 1 AND epoch = $1",
        )?;
        Ok(Floor {
            client,
            claim,
            write,
            complete,
        })
    }

    /// The three transactions, each timed.
    fn publish(&mut self, content: &[u8]) -> Outcome<[f64; 3]> {
        let t = Instant::now();
        let epoch: i64 = self.client.query_one(&self.claim, &[&"bench"])?.get(0);
        let claim = since(t);
        let t = Instant::now();
        self.client.execute(&self.write, &[&epoch, &content])?;
        let write = since(t);
        let t = Instant::now();
        if self.client.execute(&self.complete, &[&epoch])? != 1 {
            return Err("bench_api: the floor's lease row was not completed".into());
        }
        Ok([claim, write, since(t)])
    }
}

fn store(args: &Args, url: &str, mut content: Vec<u8>) -> Outcome<()> {
    let client = Client::connect(url, None, &Options::default())?;
    let mut floor = Floor::connect(url)?;
    let results = rounds(args, |n, a_first| {
        stamp(&mut content, n);
        let mut sample = StoreSample {
            claim: 0.0,
            write: 0.0,
            complete: 0.0,
            floor: [0.0; 3],
        };
        for side in if a_first {
            [true, false]
        } else {
            [false, true]
        } {
            if side {
                let t = Instant::now();
                let claimed = client.claim("job.md", "bench", Duration::from_secs(60))?;
                sample.claim = since(t);
                let t = Instant::now();
                let written = client.write("job.md", claimed.epoch, Content::Bytes(&content))?;
                sample.write = since(t);
                if written.replay {
                    return Err("bench_api: a write was a replay".into());
                }
                let t = Instant::now();
                client.complete(&LeaseId::from(&claimed), None)?;
                sample.complete = since(t);
            } else {
                sample.floor = floor.publish(&content)?;
            }
        }
        Ok(sample)
    })?;
    for (round, samples) in results.iter().enumerate() {
        let line = serde_json::json!({
            "row": "8b",
            "round": round,
            "a": samples.iter().map(|s| s.claim + s.write + s.complete).collect::<Vec<_>>(),
            "b": samples.iter().map(|s| s.floor.iter().sum::<f64>()).collect::<Vec<_>>(),
            "claim": samples.iter().map(|s| s.claim).collect::<Vec<_>>(),
            "write": samples.iter().map(|s| s.write).collect::<Vec<_>>(),
            "complete": samples.iter().map(|s| s.complete).collect::<Vec<_>>(),
            "b_claim": samples.iter().map(|s| s.floor[0]).collect::<Vec<_>>(),
            "b_write": samples.iter().map(|s| s.floor[1]).collect::<Vec<_>>(),
            "b_complete": samples.iter().map(|s| s.floor[2]).collect::<Vec<_>>(),
        });
        println!("{line}");
    }
    Ok(())
}
