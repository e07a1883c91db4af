//! Power loss, for real: a QEMU guest runs fencepost rounds on ext4 over the kernel's
//! `log-writes` target, and every flush point of the recorded log is replayed, mounted
//! on this machine through a loop device, recovered and judged (tools/powerloss and
//! docs/crash-safety.md say how).
//!
//! Needs root, `qemu-system-x86`, `busybox-static`, `dmsetup`, `e2fsprogs` and the kernel
//! that `tools/powerloss/fetch-kernel.sh` unpacks (the test runs it when the kernel is
//! missing; `.ci/run` installs the rest). Without them cargo lists the test as ignored,
//! with the reason, except under `CI=true`, where it runs and fails.

use std::path::PathBuf;

use fencepost_powerloss::Config;

use crate::harness::bin;

/// Rounds the suite runs: two of each of the guest's ten kinds of round
/// (`FENCEPOST_POWERLOSS_ROUNDS` sets another number).
const ROUNDS: u32 = 20;

/// The guest's kinds of round, in turn (round `r` is of kind `r % 10`), with the
/// acknowledgements (`fp:ack` and `fp:seen` marks) each makes.
const KINDS: [(&str, u64); 10] = [
    (
        "a removal killed before its COMMIT, then made (seq 1 written, seq 2 removed)",
        2,
    ),
    ("a plain claim, write and complete", 1),
    ("a write killed right after its COMMIT", 1),
    ("a takeover, and the first owner's late write refused", 1),
    ("a write killed before its COMMIT", 0),
    (
        "a write killed before its rename, recovered, then written",
        1,
    ),
    (
        "seq 1 and seq 2 of one lease, then a removal killed right after its COMMIT",
        3,
    ),
    (
        "a tree publish killed before its COMMIT (the first at the name, the first time), \
         then a takeover's",
        1,
    ),
    ("a tree's seq 1, then its seq 2 replacing it", 2),
    ("a tree publish killed right after its COMMIT", 1),
];

/// Acknowledgements the guest marks in `rounds` rounds.
fn acks_planned(rounds: u32) -> u64 {
    (1..=rounds).map(|r| KINDS[(r % 10) as usize].1).sum()
}

/// The unpacked kernel: `FENCEPOST_POWERLOSS_KERNEL`, else where `.ci/run` puts it.
fn kernel() -> PathBuf {
    std::env::var_os("FENCEPOST_POWERLOSS_KERNEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/powerloss-kernel")
        })
}

/// Fetches the guest's kernel (`tools/powerloss/fetch-kernel.sh`, Debian's cloud kernel
/// package unpacked, nothing installed) when it is not there yet and no other was named.
fn fetch_kernel_if_missing() {
    if std::env::var_os("FENCEPOST_POWERLOSS_KERNEL").is_some() || kernel().exists() {
        return;
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/powerloss/fetch-kernel.sh");
    let out = std::process::Command::new(script)
        .arg(kernel())
        .output()
        .expect("run tools/powerloss/fetch-kernel.sh");
    assert!(
        out.status.success(),
        "fetch the power-loss guest's kernel: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[cfg_attr(
    fp_missing = "powerloss",
    ignore = "needs root, qemu-system-x86, busybox-static, dmsetup and e2fsprogs"
)]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature (cargo test --all-features)"
)]
fn power_loss_at_every_flush_point_loses_no_acknowledged_write() {
    let work = fencepost_powerloss::scratch().expect("scratch folder");
    let mut cfg = Config::new(bin(), kernel(), work.path().to_path_buf());
    cfg.rounds = std::env::var("FENCEPOST_POWERLOSS_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(ROUNDS);
    // The long mode: every log entry, not only the flush points.
    cfg.every_entry = std::env::var_os("FENCEPOST_POWERLOSS_EVERY_ENTRY").is_some();
    crate::support::needs::powerloss();
    fetch_kernel_if_missing();
    let missing = fencepost_powerloss::unavailable(&cfg);
    assert!(
        missing.is_empty(),
        "the power-loss test cannot run: {}",
        missing.join("; ")
    );
    let report = fencepost_powerloss::run(&cfg).unwrap_or_else(|e| panic!("power-loss run: {e}"));
    eprintln!("power loss: {}", report.summary());
    let violations: Vec<String> = report.violations.iter().map(|v| v.to_string()).collect();
    assert!(
        violations.is_empty(),
        "{} of {} replayed states lose or corrupt an acknowledged write:\n{}",
        violations.len(),
        report.states_checked,
        violations.join("\n")
    );
    // Not vacuous: the guest ran every round, the replay saw every acknowledgement it
    // marked, and some states held a crashed write for recovery to roll back, others
    // only links or temp files to remove (a committed write's links among them).
    assert_eq!(
        report.guest_acks,
        Some(report.acks),
        "acknowledgements marked vs seen"
    );
    assert_eq!(
        report.acks,
        acks_planned(cfg.rounds),
        "acknowledgements planned vs seen"
    );
    assert!(
        report.rolled_back > 0,
        "no state to roll back: {}",
        report.summary()
    );
    assert!(
        report.recovered > report.rolled_back,
        "no links to tidy: {}",
        report.summary()
    );
    assert!(
        report.states_checked > u64::from(cfg.rounds),
        "{}",
        report.summary()
    );
    // With a tree publish killed before its COMMIT (the seventh round): some states held
    // a tree, and some an uncommitted tree publish for recovery to undo.
    if cfg.rounds >= 7 {
        assert!(
            report.trees > 0,
            "no state held a tree: {}",
            report.summary()
        );
        assert!(
            report.trees_rolled_back > 0,
            "no tree publish to undo: {}",
            report.summary()
        );
    }
    // With a removal round (the tenth kind): some states held a tombstone, and some an
    // uncommitted removal for recovery to put back.
    if cfg.rounds >= 10 {
        assert!(
            report.tombstones > 0,
            "no state recorded a removal: {}",
            report.summary()
        );
        assert!(
            report.removals_rolled_back > 0,
            "no removal to put back: {}",
            report.summary()
        );
    }
}
