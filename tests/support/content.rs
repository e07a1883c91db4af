//! The documents the crash and durability tests write: versions of different sizes, so a
//! torn or mixed document cannot pass for one, and the two starting points of a crash
//! (a first write, a rewrite).

use sha2::{Digest, Sha256};

use crate::harness::Env;

pub(crate) const RES: &str = "doc.md";

/// Contents of different sizes, so a torn or mixed document cannot pass for a version.
pub(crate) fn version(tag: &str, size: usize) -> Vec<u8> {
    let line = format!("{tag}: the quick brown fox jumps over the lazy dog\n");
    line.bytes().cycle().take(size.max(line.len())).collect()
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    /// The document does not exist yet (no pre-image).
    First,
    /// The document holds epoch 1's bytes; epoch 2 rewrites it.
    Rewrite,
}

pub(crate) fn old() -> Vec<u8> {
    version("old", 3000)
}
pub(crate) fn new() -> Vec<u8> {
    version("new", 5000)
}
pub(crate) fn newer() -> Vec<u8> {
    version("newer", 700)
}

/// Sets up the scenario; returns the crashing writer's epoch and what stands before it.
pub(crate) fn setup(env: &Env, scenario: Scenario) -> (i64, Option<(Vec<u8>, i64)>) {
    match scenario {
        Scenario::First => {
            assert_eq!(env.claim(RES, "A", 100, 0), 1);
            (1, None)
        }
        Scenario::Rewrite => {
            assert_eq!(env.claim(RES, "A", 10, 0), 1);
            env.fp(&["write", RES, "--epoch", "1"])
                .now(1)
                .stdin(old())
                .expect_stdout(0, "written");
            assert_eq!(env.claim(RES, "B", 100, 10), 2);
            (2, Some((old(), 1)))
        }
    }
}

/// Every failpoint of a write, in the order a write reaches them.
pub(crate) const WRITE_POINTS: [&str; 12] = [
    "write.before_stage",
    "write.after_temp_write",
    "write.after_temp_fsync",
    "write.before_lock",
    "txn.after_begin",
    "write.after_pre_link",
    "write.after_new_link",
    "write.after_rename",
    "write.after_dir_fsync",
    "txn.before_commit",
    "txn.after_commit",
    "write.before_cleanup",
];

/// Every failpoint of a removal on a local root, in the order a removal reaches them.
pub(crate) const REMOVE_POINTS: [&str; 8] = [
    "remove.before_lock",
    "txn.after_begin",
    "remove.after_rename",
    "remove.after_dir_fsync",
    "remove.before_commit",
    "txn.before_commit",
    "txn.after_commit",
    "remove.before_cleanup",
];
