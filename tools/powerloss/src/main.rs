//! `fencepost-powerloss`: the power-loss test from the command line, for longer runs than
//! the test suite's (more rounds, every log entry) and for looking at a failure.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use fencepost_powerloss::{Config, Report};

/// Records fencepost rounds in a QEMU guest on a log-writes device, then replays the log
/// to every flush point and checks that no acknowledged write is lost. Run as root.
///
/// Example (from the repository):
///   cargo build --features failpoints
///   tools/powerloss/fetch-kernel.sh target/powerloss-kernel
///   cargo run -p fencepost-powerloss -- --fencepost target/debug/fencepost --rounds 30
#[derive(Debug, Parser)]
#[command(verbatim_doc_comment)]
struct Args {
    /// The fencepost binary to test (built with --features failpoints).
    #[arg(long)]
    fencepost: PathBuf,

    /// An unpacked linux-image-*-cloud-amd64 package.
    #[arg(long, default_value = "target/powerloss-kernel")]
    kernel: PathBuf,

    /// Rounds the guest runs (ten kinds in turn: plain, killed after COMMIT, takeover
    /// with a stale late writer, killed before COMMIT, killed before the rename, seq 1
    /// and seq 2 then a removal killed after COMMIT, a tree publish killed before COMMIT
    /// then a takeover's, a tree's seq 1 and seq 2, a tree publish killed after COMMIT, a
    /// removal killed before COMMIT then made).
    #[arg(long, default_value_t = 20)]
    rounds: u32,

    /// Check the state after every log entry, not only at flush points.
    #[arg(long)]
    every_entry: bool,

    /// Keep the disk images, the initramfs and the console in this folder (created).
    #[arg(long)]
    keep: Option<PathBuf>,

    /// Only replay this log (the log.img of a kept folder) instead of recording one.
    #[arg(long)]
    replay: Option<PathBuf>,

    /// Instead of the log: cut the power this many times at random, on a guest whose
    /// disk is served by nbdkit's cache filter (writeback) and killed (needs nbdkit).
    #[arg(long, value_name = "CYCLES")]
    lying_disk: Option<u32>,

    /// The seed of --lying-disk's random cuts (printed with its figures).
    #[arg(long)]
    seed: Option<u64>,

    /// Seconds the guest may run.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let temp;
    let work = match &args.keep {
        Some(dir) => {
            if let Err(e) = std::fs::create_dir_all(dir) {
                eprintln!("fencepost-powerloss: cannot create {}: {e}", dir.display());
                return ExitCode::from(2);
            }
            dir.clone()
        }
        None => match fencepost_powerloss::scratch() {
            Ok(dir) => {
                temp = dir;
                temp.path().to_path_buf()
            }
            Err(e) => {
                eprintln!("fencepost-powerloss: cannot create a scratch folder: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let mut cfg = Config::new(args.fencepost, args.kernel, work);
    cfg.rounds = args.rounds;
    cfg.every_entry = args.every_entry;
    cfg.guest_timeout = Duration::from_secs(args.timeout);
    if args.replay.is_none() {
        let mut missing = fencepost_powerloss::unavailable(&cfg);
        if args.lying_disk.is_some() && fencepost_powerloss::unavailable_nbdkit() {
            missing.push("nbdkit is missing (Debian: apt-get install nbdkit)".into());
        }
        if !missing.is_empty() {
            for why in missing {
                eprintln!("fencepost-powerloss: {why}");
            }
            return ExitCode::from(2);
        }
    }
    if let Some(cycles) = args.lying_disk {
        return match fencepost_powerloss::lying_disk(&cfg, cycles, args.seed) {
            Ok(report) => {
                println!("{}", report.summary());
                for v in &report.violations {
                    println!("violation: {v}");
                }
                if report.violations.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(9)
                }
            }
            Err(e) => {
                eprintln!("fencepost-powerloss: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let result = match &args.replay {
        Some(log) => fencepost_powerloss::replay_only(&cfg, log),
        None => fencepost_powerloss::run(&cfg),
    };
    match result {
        Ok(report) => print(&report),
        Err(e) => {
            eprintln!("fencepost-powerloss: {e}");
            ExitCode::FAILURE
        }
    }
}

fn print(report: &Report) -> ExitCode {
    println!("{}", report.summary());
    for v in &report.violations {
        println!("violation: {v}");
    }
    if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(9)
    }
}
