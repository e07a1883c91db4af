//! The experiment of docs/protocol.md ("The results the reproduction shows"), reproduced by `fixtures/reproduce.sh` (bash scenario scripts
//! driving this build's binary as separate processes) and checked against the archived
//! record `fixtures/expected.json`, so a change in behaviour fails the suite. With
//! `FENCEPOST_TEST_STORE` (a PostgreSQL server URL whose user may CREATE DATABASE), also
//! against a store, whose run must give the state file's rows.

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
    assert!(stderr.contains("1 difference"), "stderr:\n{stderr}");
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

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs a binary built with --features failpoints"
)]
fn the_reproduction_against_a_store_gives_the_state_files_rows() {
    let server = crate::support::pg::server_url();
    // A fresh run on a state file, then the same scenarios on the store, compared with it
    // field by field (only the documented crash fields of rollback-crash set aside).
    let dir = tempfile::tempdir().expect("temp dir");
    let local = dir.path().join("state-file.json");
    let local = local.to_str().expect("utf-8 path");
    let (code, stdout, stderr) = reproduce(&harness::bin(), &["--output", local]);
    assert_eq!(
        code, 0,
        "state file run\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );

    let (code, stdout, stderr) =
        reproduce(&harness::bin(), &["--store", &server, "--check", local]);
    assert_eq!(
        code, 0,
        "the store's run differs from the state file's\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for wanted in [
        "All 8 rows agree with docs/protocol.md",
        "Against a store (--store)",
        "--check: this run (on a store) matches",
        "scenarios.rollback-crash.events[6].response.resources[*].action (what recover did)",
    ] {
        assert!(
            stdout.contains(wanted),
            "{wanted:?} missing from the output:\n{stdout}"
        );
    }
    // Nothing beyond the crash's fields, the count of orphan uploads its `recover`
    // reports, each scenario's store marker, the store's mark on the `unfenced`
    // scenario's unfenced version, and the epochs `status` gives on a mirror root (the
    // store's runs publish into one) set aside.
    let lines = stdout
        .lines()
        .skip_while(|l| !l.starts_with("--check: this run (on a store)"))
        .skip(1)
        .take_while(|l| l.starts_with("  "));
    let (epochs, lines): (Vec<&str>, Vec<&str>) = lines
        .filter(|l| !l.trim_end().ends_with(".settings.store"))
        .partition(|l| l.contains(".mirror_epoch, store_epoch (a mirror's)"));
    assert!(!epochs.is_empty(), "no mirror epochs set aside:\n{stdout}");
    let (marks, aside): (Vec<&str>, Vec<&str>) = lines
        .into_iter()
        .partition(|l| l.contains(".sink.unfenced"));
    assert!(
        !marks.is_empty() && marks.iter().all(|l| l.contains("scenarios.unfenced.")),
        "the store marks the unfenced scenario's version, and only it: {marks:#?}"
    );
    assert_eq!(aside.len(), 5, "set aside: {aside:#?}");
    assert!(
        aside.iter().all(|l| l.contains("rollback")),
        "set aside: {aside:#?}"
    );
}

/// Runs one scenario script on its own, with `envs` added to its environment.
fn scenario(name: &str, args: &[&str], envs: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new("bash")
        .arg(fixtures().join("scenarios").join(format!("{name}.sh")))
        .args(args)
        .env("FENCEPOST", harness::bin())
        .env("TMPDIR", harness::scratch())
        .envs(envs.iter().copied())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run a scenario script");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs a binary built with --features failpoints"
)]
fn an_exported_store_setting_does_not_reach_the_state_file_run() {
    // A user's FENCEPOST_STORE (here a server that does not exist) must not send the
    // fixtures' commands to a store: without --store they run on the state file.
    let (code, stdout, stderr) = scenario(
        "fenced",
        &[],
        &[(
            "FENCEPOST_STORE",
            "postgresql:///nowhere?host=/nonexistent/socket/dir&user=nobody",
        )],
    );
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("-> stale (exit 5), document now new (B)"),
        "stdout:\n{stdout}"
    );
    assert!(!stdout.contains("store: database"), "stdout:\n{stdout}");
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs a binary built with --features failpoints"
)]
fn a_store_that_is_not_a_postgres_url_is_refused_before_anything_runs() {
    let (code, stdout, stderr) = scenario("fenced", &["--store", "mysql://db/x"], &[]);
    assert_eq!(code, 2, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stderr.contains("--store mysql://db/x is not a postgres:// or postgresql:// URL"),
        "stderr:\n{stderr}"
    );
    assert_eq!(stdout, "", "nothing runs");
}

/// Runs `python3 fixtures/record.py compare EXPECTED ACTUAL`.
fn compare_records(expected: &Path, actual: &Path) -> (i32, String, String) {
    let out = Command::new("python3")
        .arg(fixtures().join("record.py"))
        .arg("compare")
        .args([expected, actual])
        .output()
        .expect("run python3 fixtures/record.py");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_store_run_may_differ_from_the_archive_only_where_the_crash_lands() {
    // A record made as a store run would be: every scenario marked, and rollback-crash's
    // state right after the crash and recover's action as a store gives them.
    let text = std::fs::read_to_string(fixtures().join("expected.json")).expect("read archive");
    let mut record: Value = serde_json::from_str(&text).expect("archive is JSON");
    for scenario in record["scenarios"]
        .as_object_mut()
        .expect("scenarios")
        .values_mut()
    {
        scenario["settings"]["store"] = "postgresql".into();
    }
    let crash = &mut record["scenarios"]["rollback-crash"]["events"];
    for event in crash.as_array_mut().expect("events") {
        if event["snapshot"] == "after-failure" {
            event["response"]["resources"][0]["document"]["state"] = "matches".into();
            event["document_after"] = "old (A)".into();
            event["files"] = serde_json::json!(["doc.md"]);
        }
        if event["verb"] == "recover" {
            event["response"]["resources"][0]["action"] = "nothing to do".into();
        }
    }
    record["tables"]["rollback"][1]["recovery"] = "`fencepost recover`: nothing to do".into();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("store.json");
    let save = |value: &Value| {
        std::fs::write(&store, serde_json::to_string_pretty(value).expect("json")).expect("write")
    };
    save(&record);
    let (code, stdout, stderr) = compare_records(&fixtures().join("expected.json"), &store);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("this run (on a store) matches"),
        "stdout:\n{stdout}"
    );
    assert!(
        stdout.contains("tables.rollback[crash]: right after the failure, recovery"),
        "stdout:\n{stdout}"
    );

    // Anything else still counts: the document at the end of the unfenced scenario.
    record["scenarios"]["unfenced"]["final"]["documents"]["doc.md"]["label"] = "new (B)".into();
    save(&record);
    let (code, stdout, stderr) = compare_records(&fixtures().join("expected.json"), &store);
    assert_eq!(code, 1, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("1 difference"), "stderr:\n{stderr}");
    assert!(
        stderr.contains("scenarios.unfenced.final.documents.doc.md.label"),
        "stderr:\n{stderr}"
    );
}
