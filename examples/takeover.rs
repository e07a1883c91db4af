//! The overwritten-document experiment through the Rust API: worker A claims a report,
//! pauses past its lease's end (a GC pause, a stopped VM), and resumes to publish; worker
//! B has meanwhile taken the lease over and published its own report. A's late write
//! must be refused (`stale`) and B's report must be the one on disk.
//!
//! Run it with `cargo run --example takeover`; it exits 0 only if A's late write was
//! refused and the document holds B's report.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use fencepost::{ClaimOptions, Client, Content, LeaseId, RefusalKind};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scratch = tempfile::tempdir()?;
    let root = scratch.path().to_path_buf();
    let ttl = Duration::from_millis(300);
    let (b_may_start, b_waits) = mpsc::channel::<()>();
    let (a_may_resume, a_waits) = mpsc::channel::<()>();

    let a_root = root.clone();
    let worker_a = thread::spawn(move || -> Result<String, fencepost::Error> {
        let a = Client::open(&a_root)?;
        let lease = a.claim("reports/daily.md", "worker-a", ttl)?;
        println!(
            "A: claimed epoch {}, then pauses past its lease",
            lease.epoch
        );
        let _ = b_may_start.send(());
        // Paused: A does not run again until B has published.
        let _ = a_waits.recv();
        let late = a.write(
            "reports/daily.md",
            lease.epoch,
            Content::Bytes(b"report by A (late)\n"),
        );
        Ok(match late {
            Ok(_) => "written (the late write overwrote B's report)".to_string(),
            Err(fencepost::Error::Refused(refusal)) => format!("refused: {refusal}"),
            Err(other) => return Err(other),
        })
    });

    let b_root = root.clone();
    let worker_b = thread::spawn(move || -> Result<(), fencepost::Error> {
        let b = Client::open(&b_root)?;
        let _ = b_waits.recv();
        // Held by A until its lease runs out: B waits for it, then takes it over.
        let wait = ClaimOptions::default().wait(Duration::from_secs(10));
        let claimed = b.claim_with(
            "reports/daily.md",
            "worker-b",
            Duration::from_secs(30),
            &wait,
        )?;
        println!("B: took the lease over as epoch {}", claimed.epoch);
        b.write(
            "reports/daily.md",
            claimed.epoch,
            Content::Bytes(b"report by B\n"),
        )?;
        println!("B: wrote its report");
        b.complete(&LeaseId::from(&claimed), Some("published"))?;
        let _ = a_may_resume.send(());
        Ok(())
    });

    worker_b.join().map_err(|_| "worker B panicked")??;
    let a_got = worker_a.join().map_err(|_| "worker A panicked")??;
    println!("A: resumed and wrote: {a_got}");
    let on_disk = std::fs::read_to_string(root.join("reports/daily.md"))?;
    println!("the document: {}", on_disk.trim_end());

    // The verdict is the typed refusal, not its text.
    let client = Client::open(&root)?;
    let refused = match client.write(
        "reports/daily.md",
        1,
        Content::Bytes(b"report by A (late)\n"),
    ) {
        Err(fencepost::Error::Refused(r)) => r.kind() == RefusalKind::Stale,
        _ => false,
    };
    if refused && on_disk == "report by B\n" && a_got.starts_with("refused") {
        println!("fenced: A's late write was refused and B's report stands");
        Ok(())
    } else {
        Err("A's late write was not refused: the document was overwritten".into())
    }
}
