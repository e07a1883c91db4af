//! The experiment of docs/protocol.md ("The results the reproduction shows"), reproduced by `fixtures/reproduce.sh` (bash scenario scripts
//! driving this build's binary as separate processes) and checked against the archived
//! record `fixtures/expected.json`, so a change in behaviour fails the suite.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::harness;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Runs `fixtures/reproduce.sh ARGS` with `FENCEPOST` set to `fencepost`.
fn reproduce(fencepost: &Path, args: &[&str]) -> (i32, String, String) {
    let mut command = Command::new("bash");
    command.env("FENCEPOST", fencepost);
    finish(command, args)
}

fn finish(mut command: Command, args: &[&str]) -> (i32, String, String) {
    let out: Output = command
        .arg(fixtures().join("reproduce.sh"))
        .args(args)
        // Scratch folders outside the system's temp folder (see `harness::scratch`).
        .env("TMPDIR", harness::scratch())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run bash fixtures/reproduce.sh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Writes an executable shell script.
fn script(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write script");
    let mut perms = std::fs::metadata(path).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(path, perms).expect("chmod");
}

/// Runs `fixtures/reproduce.sh ARGS` as the README's first command does, without
/// `FENCEPOST`, on a machine whose PATH holds an installed build without failpoints. The
/// script must build its own failpoints build with cargo: here a stand-in cargo that
/// records its arguments and "builds" by copying this test build (which has
/// failpoints) where it was asked to. Returns the result and cargo's arguments.
fn reproduce_as_a_user(args: &[&str]) -> ((i32, String, String), String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    script(
        &bin.join("fencepost"),
        "#!/bin/sh\necho 'fencepost 0.1.0'\n",
    );
    let called = dir.path().join("cargo-args");
    script(
        &bin.join("cargo"),
        &format!(
            "#!/bin/sh\necho \"$@\" > '{called}'\n\
             while [ $# -gt 0 ]; do [ \"$1\" = --target-dir ] && dir=$2; shift; done\n\
             mkdir -p \"$dir/debug\" && cp '{built}' \"$dir/debug/fencepost\"\n",
            called = called.display(),
            built = harness::bin().display(),
        ),
    );
    let mut command = Command::new("bash");
    command
        .env_remove("FENCEPOST")
        .env_remove("CARGO")
        .env("CARGO_TARGET_DIR", dir.path().join("target"))
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()));
    let result = finish(command, args);
    let cargo = std::fs::read_to_string(&called).unwrap_or_default();
    (result, cargo)
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs a binary built with --features failpoints"
)]
fn reproduction_builds_its_own_failpoints_build_and_matches_the_archive() {
    let expected = fixtures().join("expected.json");
    let ((code, stdout, stderr), cargo) =
        reproduce_as_a_user(&["--check", expected.to_str().expect("utf-8 path")]);
    assert_eq!(
        code, 0,
        "reproduce.sh --check failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    // It built with failpoints, in a target folder of its own, never the installed one.
    assert!(
        cargo.starts_with("build ") && cargo.contains("--features failpoints"),
        "cargo {cargo}"
    );
    assert!(cargo.contains("--locked"), "cargo {cargo}");
    assert!(cargo.contains("/failpoints"), "cargo {cargo}");
    for wanted in [
        // Table 1, the two rows of docs/protocol.md and the paused-inside-write variant.
        "| sink policy ",
        "| no fencing (`write --unfenced`) ",
        "| atomic fencing ",
        "A's write `stale` (exit 5); its completion `lost` (exit 4)",
        // Table 2, the lazy-fence ordering table with the takeover-fencing column beside it.
        "| A, epoch 1 (B has only claimed) ",
        "takeover fencing (default)",
        // Table 3, rollback by error and by crash.
        "| crash: `return(abort)` ",
        "All 8 rows agree with docs/protocol.md",
        "--check: this run matches",
    ] {
        assert!(
            stdout.contains(wanted),
            "{wanted:?} missing from the output:\n{stdout}"
        );
    }
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs a binary built with --features failpoints"
)]
fn a_tampered_archive_fails_the_check_with_a_readable_diff() {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).expect("read archive");
    let mut record: Value = serde_json::from_str(&text).expect("archive is JSON");
    // Claim that A's late write in the fenced scenario was accepted.
    let events = record["scenarios"]["fenced"]["events"]
        .as_array_mut()
        .expect("fenced scenario has events");
    let (index, event) = events
        .iter_mut()
        .enumerate()
        .find(|(_, e)| e["who"] == "A" && e["verb"] == "write")
        .expect("A's write in the fenced scenario");
    assert_eq!(event["outcome"], "stale", "the archive itself changed");
    event["outcome"] = "written".into();
    let dir = tempfile::tempdir().expect("temp dir");
    let tampered = dir.path().join("tampered.json");
    std::fs::write(
        &tampered,
        serde_json::to_string_pretty(&record).expect("json"),
    )
    .expect("write tampered copy");

    let (code, stdout, stderr) = reproduce(
        &harness::bin(),
        &["--check", tampered.to_str().expect("utf-8 path")],
    );
    assert_eq!(
        code, 1,
        "a tampered archive must fail --check\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stderr.contains("1 difference(s)"), "stderr:\n{stderr}");
    let path = format!("scenarios.fenced.events[{index}]");
    let line = stderr
        .lines()
        .find(|l| l.contains(&path))
        .unwrap_or_else(|| panic!("no diff line for {path}:\n{stderr}"));
    assert!(
        line.trim_end().ends_with(".outcome"),
        "diff names the field: {line}"
    );
    assert!(
        line.contains("A: fencepost"),
        "diff says whose command: {line}"
    );
    assert!(
        stderr.contains("expected: \"written\""),
        "stderr:\n{stderr}"
    );
    assert!(stderr.contains("got:      \"stale\""), "stderr:\n{stderr}");
    // The fresh run's tables are still printed: the run itself is fine.
    assert!(stdout.contains("All 8 rows agree"), "stdout:\n{stdout}");
}

#[test]
fn a_build_without_failpoints_is_refused_clearly() {
    // A stand-in binary that reports a plain build: the script must stop before running
    // anything and say which build it needs.
    let dir = tempfile::tempdir().expect("temp dir");
    let fake = dir.path().join("fencepost");
    std::fs::write(&fake, "#!/bin/sh\necho 'fencepost 0.1.0'\n").expect("write stand-in");
    let mut perms = std::fs::metadata(&fake).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&fake, perms).expect("chmod");

    let (code, stdout, stderr) = reproduce(&fake, &[]);
    assert_eq!(code, 2, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("WITHOUT failpoints"), "stderr:\n{stderr}");
    assert!(
        stderr.contains("leave FENCEPOST unset"),
        "stderr:\n{stderr}"
    );
    assert_eq!(stdout, "", "nothing runs without failpoints");
}
