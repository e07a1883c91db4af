//! Resource identity and the edges found in review: one file has one lease and one
//! fence whatever its spelling; no path reaches `.fencepost/` or leaves the root, even
//! when a folder is swapped mid-write; every change sweeps dead writers' temp files; the
//! log names who was refused; a replay restores a document that went missing; one
//! state file serves one root, and a root does not reach into another.

use std::path::Path;

use crate::harness::{self, Env};

/// Every entry (name) in a folder.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn two_spellings_of_one_file_share_one_lease_and_one_fence() {
    let env = Env::new();
    std::fs::create_dir_all(env.path("releases/v1")).expect("mkdir");
    std::os::unix::fs::symlink("releases/v1", env.path("current")).expect("symlink");
    let a = env.claim("current/report.md", "A", 10, 0);
    // B takes over through the other spelling: a takeover of the same lease, epoch 2.
    let b = env
        .fp(&[
            "--json",
            "claim",
            "releases/v1/report.md",
            "--owner",
            "B",
            "--ttl",
            "10",
        ])
        .now(10)
        .expect(0)
        .json();
    assert_eq!(b["epoch"], 2, "{b}");
    assert_eq!(b["previous"]["owner"], "A", "{b}");
    assert_eq!(b["resource"], "releases/v1/report.md");
    env.write("releases/v1/report.md", 2, "new (B)", 10, 0);
    // A's late write through its own spelling is stale, and the document keeps B's bytes.
    let late = env
        .fp(&[
            "--json",
            "write",
            "current/report.md",
            "--epoch",
            &a.to_string(),
        ])
        .now(11)
        .stdin("old (A)")
        .expect(5)
        .json();
    assert_eq!(late["outcome"], "stale");
    assert_eq!(late["fence"], 2);
    assert_eq!(env.text("releases/v1/report.md"), "new (B)");
    let status = env.fp(&["--json", "status"]).now(12).expect(0).json();
    let names: Vec<&str> = status["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r["resource"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        ["releases/v1/report.md"],
        "one resource, by its real path"
    );
}

#[test]
fn a_symlink_back_to_the_root_does_not_reach_the_state_folder() {
    let env = Env::new();
    std::os::unix::fs::symlink(".", env.path("self")).expect("symlink");
    env.fp(&["claim", "self/x.md", "--owner", "A", "--ttl", "10"])
        .now(0)
        .expect_stdout(0, "1");
    let before = entries(&env.path(".fencepost"));
    let done = env
        .fp(&[
            "claim",
            "self/.fencepost/evil",
            "--owner",
            "A",
            "--ttl",
            "10",
        ])
        .now(0)
        .expect(2);
    assert!(done.stderr.contains(".fencepost"), "{}", done.stderr);
    env.fp(&["write", "self/.fencepost/evil", "--epoch", "1"])
        .now(0)
        .stdin("payload")
        .expect(2);
    assert_eq!(
        entries(&env.path(".fencepost")),
        before,
        "state folder changed"
    );
}

#[test]
fn a_folder_swapped_for_an_outside_symlink_mid_write_is_refused() {
    let env = Env::new();
    let outside = tempfile::tempdir().expect("outside");
    std::fs::create_dir(env.path("reports")).expect("mkdir");
    let epoch = env.claim("reports/x.md", "A", 10, 0);
    let gate = env.path("gate");
    for end in ["ready", "resume"] {
        let fifo = format!("{}.{end}", gate.display());
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
    }
    // The writer stops under the lock, after its recovery links, before the rename.
    let writer = std::process::Command::new(harness::bin())
        .env_clear()
        .env(
            "FAILPOINTS",
            format!("write.after_new_link=return(wait:{})", gate.display()),
        )
        .args(["--root"])
        .arg(env.root())
        .args([
            "--now",
            "1",
            "write",
            "reports/x.md",
            "--epoch",
            &epoch.to_string(),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn writer");
    let mut writer = writer;
    {
        use std::io::Write;
        let mut stdin = writer.stdin.take().expect("stdin");
        stdin.write_all(b"data").expect("stdin");
    }
    std::fs::read(format!("{}.ready", gate.display())).expect("writer ready");
    // The attacker moves the folder out of the root and leaves a symlink to it.
    let moved = outside.path().join("reports");
    std::fs::rename(env.path("reports"), &moved).expect("move out");
    std::os::unix::fs::symlink(&moved, env.path("reports")).expect("symlink");
    std::fs::write(format!("{}.resume", gate.display()), "go").expect("resume");
    let out = writer.wait_with_output().expect("writer");
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !moved.join("x.md").exists(),
        "the write landed outside the root: {:?}",
        entries(&moved)
    );
}

#[test]
fn claim_sweeps_temp_files_of_dead_writers() {
    let env = Env::new();
    let epoch = env.claim("doc.md", "A", 10, 0);
    env.write("doc.md", epoch, "v1", 1, 0);
    // What a writer killed while staging leaves: an unlocked temp file.
    std::fs::write(env.path(".doc.md.fencepost-tmp-deadbeef"), "half").expect("temp");
    env.fp(&["release", "doc.md", "--owner", "A", "--epoch", "1"])
        .now(2)
        .expect(0);
    assert_eq!(env.files(), ["doc.md"]);
    std::fs::write(env.path(".doc.md.fencepost-tmp-deadbee2"), "half").expect("temp");
    env.claim("doc.md", "B", 10, 3);
    assert_eq!(env.files(), ["doc.md"]);
}

#[test]
fn refused_claimant_and_unnamed_writers_get_their_own_lanes() {
    let env = Env::new();
    let a = env.claim("doc.md", "A", 10, 0);
    env.fp(&["claim", "doc.md", "--owner", "C", "--ttl", "10"])
        .now(5)
        .expect(3);
    let b = env.claim("doc.md", "B", 10, 10);
    env.write("doc.md", b, "new", 10, 0); // no --owner: logged as B, who holds epoch 2
    env.write("doc.md", a, "old", 11, 5); // no --owner: logged as A, who claimed epoch 1
    let events = env.fp(&["--json", "log"]).now(12).expect(0).json()["events"].clone();
    let find = |kind: &str| {
        events
            .as_array()
            .expect("events")
            .iter()
            .find(|e| e["event"] == kind)
            .unwrap_or_else(|| panic!("no {kind} event in {events}"))
            .clone()
    };
    assert_eq!(find("held")["owner"], "C");
    assert_eq!(find("held")["prev_owner"], "A");
    assert_eq!(find("write")["owner"], "B");
    assert_eq!(find("stale")["owner"], "A");
    assert_eq!(find("stale")["prev_epoch"], 2);
    let timeline = env.fp(&["log", "--timeline"]).now(12).expect(0).stdout;
    let header: Vec<&str> = timeline
        .lines()
        .next()
        .expect("header")
        .split_whitespace()
        .collect();
    assert_eq!(header, ["AT", "A", "C", "B"], "{timeline}");
}

#[test]
fn replay_restores_a_document_that_went_missing() {
    let env = Env::new();
    let epoch = env.claim("doc.md", "A", 10, 0);
    env.write("doc.md", epoch, "v1", 1, 0);
    env.fp(&["write", "doc.md", "--epoch", "1"])
        .now(2)
        .stdin("v1")
        .expect_stdout(0, "replay");
    std::fs::remove_file(env.path("doc.md")).expect("rm");
    env.fp(&["write", "doc.md", "--epoch", "1"])
        .now(3)
        .stdin("v1")
        .expect_stdout(0, "written");
    assert_eq!(env.text("doc.md"), "v1");
    let row = env
        .fp(&["--json", "status", "doc.md"])
        .now(4)
        .expect(0)
        .json();
    assert_eq!(row["resources"][0]["document"]["state"], "matches");
    // Different bytes under the same epoch stay a conflict, missing document or not.
    std::fs::remove_file(env.path("doc.md")).expect("rm");
    env.write("doc.md", epoch, "v2", 5, 6);
    assert!(env.read("doc.md").is_none());
}

#[test]
fn bad_settings_are_refused_before_anything_changes() {
    let env = Env::new();
    env.fp(&[
        "--log-keep=0",
        "claim",
        "doc.md",
        "--owner",
        "A",
        "--ttl",
        "10",
    ])
    .now(0)
    .expect(2);
    std::fs::create_dir(env.path("adir")).expect("mkdir");
    env.fp(&[
        "--db", "adir", "claim", "doc.md", "--owner", "A", "--ttl", "10",
    ])
    .now(0)
    .expect(2);
    env.fp(&["log", "doc.md", "--prune"]).now(0).expect(2);
    assert_eq!(entries(env.root()), ["adir"], "something was created");
    assert!(entries(&env.path("adir")).is_empty());
}

#[test]
fn verify_reports_links_left_by_a_write_that_committed_then_crashed() {
    let env = Env::new();
    let epoch = env.claim("doc.md", "A", 10, 0);
    env.fp(&["write", "doc.md", "--epoch", &epoch.to_string()])
        .now(1)
        .stdin("v1")
        .env("FAILPOINTS", "txn.after_commit=return(abort)")
        .output();
    let out = env.fp(&["--json", "verify"]).now(2).expect(9).json();
    let problems: Vec<&str> = out["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .map(|p| p["problem"].as_str().expect("kind"))
        .collect();
    assert_eq!(problems, ["leftover-links"], "{out}");
    env.fp(&["recover"]).now(2).expect(0);
    env.fp(&["verify"]).now(2).expect(0);
    assert_eq!(env.text("doc.md"), "v1");
}

#[test]
fn a_document_that_can_never_be_written_cannot_be_claimed() {
    let env = Env::new();
    std::fs::create_dir(env.path("folder.md")).expect("mkdir");
    std::os::unix::fs::symlink("elsewhere", env.path("link.md")).expect("symlink");
    for res in ["folder.md", "link.md"] {
        env.fp(&["claim", res, "--owner", "A", "--ttl", "10"])
            .now(0)
            .expect(2);
    }
    assert!(!env.path(".fencepost").exists(), "a state file was created");
}

#[test]
fn busy_timeout_zero_is_accepted() {
    let env = Env::new();
    env.fp(&[
        "--busy-timeout",
        "0",
        "claim",
        "doc.md",
        "--owner",
        "A",
        "--ttl",
        "10",
    ])
    .now(0)
    .expect_stdout(0, "1");
}

#[test]
fn json_errors_name_the_resource_and_epoch_given() {
    let env = Env::new();
    let bad = env
        .fp(&["--json", "write", "../x", "--epoch", "3"])
        .now(0)
        .stdin("x")
        .expect(2)
        .json_contract();
    assert_eq!(bad["outcome"], "usage");
    assert_eq!(bad["resource"], "../x");
    assert_eq!(bad["epoch"], 3);
}

#[test]
fn a_root_does_not_reach_into_a_nested_root() {
    let env = Env::new();
    std::fs::create_dir(env.path("pub")).expect("mkdir");
    let inner = env.path("pub");
    env.fp(&["claim", "a.md", "--owner", "A", "--ttl", "100"])
        .root(&inner)
        .now(1)
        .expect_stdout(0, "1");
    env.fp(&["write", "a.md", "--epoch", "1"])
        .root(&inner)
        .now(2)
        .stdin("inner")
        .expect_stdout(0, "written");
    // The outer root would have its own lease and fence for the same file: refused.
    let done = env
        .fp(&["claim", "pub/a.md", "--owner", "C", "--ttl", "100"])
        .now(3)
        .expect(2);
    assert!(
        done.stderr.contains("another publish root"),
        "{}",
        done.stderr
    );
    env.fp(&["write", "pub/a.md", "--epoch", "1"])
        .now(4)
        .stdin("outer")
        .expect(2);
    // Nor can it write the inner root's state file.
    env.fp(&["write", "pub/.fencepost/state.db", "--epoch", "1"])
        .now(4)
        .stdin("garbage")
        .expect(2);
    assert_eq!(env.text("pub/a.md"), "inner");
    assert!(
        !env.path(".fencepost").exists(),
        "the outer root got a state file"
    );
    env.fp(&["status"]).root(&inner).now(5).expect(0);
}

#[test]
fn one_state_file_serves_one_root() {
    let env = Env::new();
    std::fs::create_dir_all(env.path("a/sub")).expect("mkdir");
    let db = env.path("shared.db");
    let db = db.to_str().expect("utf-8");
    env.fp(&[
        "--db", db, "claim", "sub/x.md", "--owner", "A", "--ttl", "100",
    ])
    .root(&env.path("a"))
    .now(1)
    .expect_stdout(0, "1");
    // The same file from the parent folder as root, with the same state file: refused,
    // for claims and writes and reads alike, and nothing changes.
    for args in [
        vec![
            "--db",
            db,
            "claim",
            "a/sub/x.md",
            "--owner",
            "C",
            "--ttl",
            "100",
        ],
        vec!["--db", db, "write", "a/sub/x.md", "--epoch", "1"],
        vec!["--db", db, "status"],
        vec!["--db", db, "verify"],
    ] {
        let done = env.fp(&args).now(2).stdin("late").expect(2);
        // Claims and writes see first that a/ is a publish root of its own (it marks
        // itself even with its state file elsewhere); reads meet the state file's root.
        assert!(
            done.stderr.contains("belongs to the publish root")
                || done.stderr.contains("a, another publish root"),
            "{args:?}: {}",
            done.stderr
        );
    }
    assert!(!env.path("a/sub/x.md").exists());
    // Bad input to `recover --root-moved` changes nothing, not even the root's record.
    env.fp(&["--db", db, "recover", "--root-moved", "../x.md"])
        .root(&env.path("a"))
        .now(2)
        .expect(2);
    env.fp(&["--db", db, "status"])
        .root(&env.path("a"))
        .now(2)
        .expect(0);
    // `log` reads another root's state file no more than `status` does.
    env.fp(&["--db", db, "log"]).now(2).expect(2);
    // The root moved: once told, the state file follows it.
    std::fs::rename(env.path("a"), env.path("b")).expect("move the root");
    env.fp(&["--db", db, "status"])
        .root(&env.path("b"))
        .now(3)
        .expect(2);
    env.fp(&["--db", db, "recover", "--root-moved"])
        .root(&env.path("b"))
        .now(3)
        .expect(0);
    env.fp(&["--db", db, "write", "sub/x.md", "--epoch", "1"])
        .root(&env.path("b"))
        .now(4)
        .stdin("moved")
        .expect_stdout(0, "written");
    assert_eq!(env.text("b/sub/x.md"), "moved");
}

#[test]
fn a_root_with_its_own_state_folder_can_be_moved_whole() {
    let env = Env::new();
    std::fs::create_dir(env.path("a")).expect("mkdir");
    env.fp(&["claim", "x.md", "--owner", "A", "--ttl", "100"])
        .root(&env.path("a"))
        .now(1)
        .expect_stdout(0, "1");
    std::fs::rename(env.path("a"), env.path("b")).expect("move the root");
    env.fp(&["write", "x.md", "--epoch", "1"])
        .root(&env.path("b"))
        .now(2)
        .stdin("v1")
        .expect_stdout(0, "written");
    assert_eq!(env.text("b/x.md"), "v1");
}

#[test]
fn the_state_file_cannot_be_claimed() {
    let env = Env::new();
    for res in ["my.db", "my.db-wal", "my.db-shm", "my.db-journal"] {
        let done = env
            .fp(&["--db", "my.db", "claim", res, "--owner", "A", "--ttl", "10"])
            .now(1)
            .expect(2);
        assert!(done.stderr.contains("state file itself"), "{}", done.stderr);
    }
    // Once the state file exists too.
    env.fp(&[
        "--db", "my.db", "claim", "doc.md", "--owner", "A", "--ttl", "10",
    ])
    .now(1)
    .expect_stdout(0, "1");
    assert!(env.path("my.db").exists());
    let done = env
        .fp(&[
            "--db", "my.db", "claim", "my.db", "--owner", "A", "--ttl", "10",
        ])
        .now(2)
        .expect(2);
    assert!(done.stderr.contains("state file itself"), "{}", done.stderr);
}

#[test]
fn a_busy_timeout_sqlite_cannot_hold_is_bad_usage() {
    let env = Env::new();
    let done = env
        .fp(&[
            "--busy-timeout",
            "600h",
            "claim",
            "doc.md",
            "--owner",
            "A",
            "--ttl",
            "10",
        ])
        .now(1)
        .expect(2);
    assert!(done.stderr.contains("too large"), "{}", done.stderr);
    assert!(entries(env.root()).is_empty(), "something was created");
}

#[test]
fn a_result_with_control_characters_is_refused() {
    let env = Env::new();
    env.claim("doc.md", "A", 10, 1);
    for bad in ["two\nlines", "\u{1b}[31mred"] {
        env.fp(&[
            "complete", "doc.md", "--owner", "A", "--epoch", "1", "--result", bad,
        ])
        .now(2)
        .expect(2);
    }
    env.fp(&[
        "complete", "doc.md", "--owner", "A", "--epoch", "1", "--result", "ok",
    ])
    .now(2)
    .expect_stdout(0, "completed");
}

#[test]
fn a_dangling_symlinked_folder_is_bad_input() {
    let env = Env::new();
    std::os::unix::fs::symlink("nowhere", env.path("dang")).expect("symlink");
    let done = env
        .fp(&["claim", "dang/r.md", "--owner", "A", "--ttl", "10"])
        .now(1)
        .expect(2);
    assert!(done.stderr.contains("leads nowhere"), "{}", done.stderr);
    assert_eq!(entries(env.root()), ["dang"]);
}

#[test]
fn recover_without_a_state_file_creates_none() {
    let env = Env::new();
    let done = env.fp(&["recover"]).expect_stdout(2, "");
    assert!(
        done.stderr.contains("nothing to recover"),
        "{}",
        done.stderr
    );
    env.fp(&["recover", "a.md"]).expect(2);
    env.fp(&["recover", "../a.md"]).expect(2);
    assert!(entries(env.root()).is_empty(), "something was created");
}

#[test]
fn a_caller_that_never_held_the_lease_is_told_so() {
    let env = Env::new();
    env.claim("doc.md", "A", 10, 1);
    let done = env
        .fp(&[
            "renew", "doc.md", "--owner", "B", "--epoch", "1", "--ttl", "10",
        ])
        .now(2)
        .expect(4);
    assert!(
        done.stderr
            .contains("B epoch 1 does not hold the lease on doc.md"),
        "{}",
        done.stderr
    );
}

#[test]
fn a_symlink_does_not_jump_into_a_nested_root_or_its_state_folder() {
    let env = Env::new();
    std::fs::create_dir_all(env.path("sub/deeper")).expect("mkdir");
    env.fp(&["claim", "x.md", "--owner", "A", "--ttl", "10"])
        .root(&env.path("sub"))
        .now(1)
        .expect(0);
    std::os::unix::fs::symlink("sub/deeper", env.path("link")).expect("symlink");
    std::os::unix::fs::symlink("sub/.fencepost", env.path("state")).expect("symlink");
    for res in ["link/doc.md", "state/state.db"] {
        let done = env
            .fp(&["claim", res, "--owner", "C", "--ttl", "10"])
            .now(1)
            .expect(2);
        assert!(
            done.stderr.contains("another publish root")
                || done.stderr.contains(".fencepost folder"),
            "{res}: {}",
            done.stderr
        );
        env.fp(&["write", res, "--epoch", "1"])
            .now(1)
            .stdin("garbage")
            .expect(2);
    }
    assert!(!env.path("sub/deeper/doc.md").exists());
    env.fp(&["status"]).root(&env.path("sub")).now(2).expect(0);
}
