//! Bad inputs: each is exit 2 with one `fencepost: ` line on stderr (and at most a
//! `hint:`), a `--json` object with outcome `usage`, and nothing changed on disk: no
//! document, no folder, no temp file, the same leases and sink records.

use std::path::Path;

use serde_json::Value;

use crate::harness::{Done, Env, bin};

/// Everything a bad input could change: each file under the root with its bytes, and
/// the state as `status --json` shows it (without its `now`).
#[derive(Debug, PartialEq)]
struct Snapshot {
    files: Vec<(String, Vec<u8>)>,
    state: Value,
}

fn snapshot(env: &Env, now: Option<i64>) -> Snapshot {
    let files = env
        .files()
        .into_iter()
        .map(|f| {
            // Only regular files are read: a fifo would block.
            let path = env.path(&f);
            let regular = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file());
            let bytes = if regular {
                std::fs::read(&path).unwrap_or_default()
            } else {
                Vec::new()
            };
            (f, bytes)
        })
        .collect();
    let mut run = env.fp(&["--json", "status"]);
    if let Some(now) = now {
        run = run.now(now);
    }
    let mut state = run.expect(0).json();
    if let Some(map) = state.as_object_mut() {
        map.remove("now");
    }
    Snapshot { files, state }
}

/// A root with state: `keep.md` written under epoch 1, `doc.md` held by A (epoch 1) until
/// tick 100.
fn populated() -> Env {
    let env = Env::new();
    env.claim("keep.md", "A", 100, 0);
    env.write("keep.md", 1, "kept\n", 1, 0);
    env.claim("doc.md", "A", 100, 1);
    env
}

/// The tick `refused` reads the state at (the populated roots are on logical ticks).
const STATUS_NOW: i64 = 5;

/// Asserts the shape of a bad-input failure.
fn assert_usage(done: &Done, what: &str) {
    let lines: Vec<&str> = done.stderr.lines().collect();
    assert!(
        !lines.is_empty() && lines.len() <= 2,
        "{what}: one line and maybe a hint: {:?}",
        done.stderr
    );
    assert!(
        lines[0].starts_with("fencepost: "),
        "{what}: stderr must start with 'fencepost: ': {:?}",
        done.stderr
    );
    if let Some(hint) = lines.get(1) {
        assert!(hint.starts_with("hint: "), "{what}: {:?}", done.stderr);
    }
}

/// Runs `args` plain and with `--json` at `now`, asserting exit 2, the one-line error,
/// the `usage` JSON object, and that nothing changed on disk. Returns the stderr line.
fn refused(env: &Env, args: &[&str], now: Option<i64>, stdin: &str) -> String {
    let what = args.join(" ");
    let before = snapshot(env, Some(STATUS_NOW));
    let run = |json: bool| {
        let mut a = Vec::new();
        if json {
            a.push("--json");
        }
        a.extend(args);
        let mut run = env.fp(&a).stdin(stdin);
        if let Some(now) = now {
            run = run.now(now);
        }
        run.expect(2)
    };
    let plain = run(false);
    assert_usage(&plain, &what);
    assert_eq!(
        plain.stdout, "",
        "{what}: a usage error prints nothing on stdout"
    );
    let json = run(true);
    assert_usage(&json, &what);
    let j = json.json_contract();
    assert_eq!(j["outcome"], "usage", "{what}: {j}");
    assert!(j["error"].is_string(), "{what}: {j}");
    assert_eq!(
        snapshot(env, Some(STATUS_NOW)),
        before,
        "{what} changed something"
    );
    plain.stderr.lines().next().unwrap_or_default().to_string()
}

/// On a fresh root, a bad input leaves no trace at all: no state folder, no file.
fn refused_fresh(args: &[&str], stdin: &str) {
    let env = Env::new();
    let done = env.fp(args).now(5).stdin(stdin).output();
    assert_eq!(done.code, 2, "{args:?}: {done:?}");
    assert_usage(&done, &args.join(" "));
    let entries: Vec<_> = std::fs::read_dir(env.root())
        .expect("root")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(
        entries.is_empty(),
        "{args:?} left {entries:?} in a fresh root"
    );
}

#[test]
fn absolute_resource_is_refused() {
    let env = populated();
    let abs = env.path("abs.md");
    let abs = abs.to_str().expect("utf-8 path");
    let line = refused(
        &env,
        &["claim", abs, "--owner", "B", "--ttl", "10"],
        Some(5),
        "",
    );
    assert!(line.contains("absolute"), "{line}");
    refused(&env, &["write", abs, "--epoch", "1"], Some(5), "x");
    refused(
        &env,
        &[
            "renew", "/doc.md", "--owner", "A", "--epoch", "1", "--ttl", "9",
        ],
        Some(5),
        "",
    );
    refused(&env, &["status", "/doc.md"], Some(5), "");
    refused_fresh(&["claim", abs, "--owner", "B", "--ttl", "10"], "");
    refused_fresh(&["write", abs, "--epoch", "1"], "x");
}

#[test]
fn empty_resource_is_refused() {
    let env = populated();
    let line = refused(
        &env,
        &["claim", "", "--owner", "B", "--ttl", "10"],
        Some(5),
        "",
    );
    assert!(line.contains("empty"), "{line}");
    refused(&env, &["write", "", "--epoch", "1"], Some(5), "x");
    refused(
        &env,
        &["release", "", "--owner", "A", "--epoch", "1"],
        Some(5),
        "",
    );
    refused_fresh(&["claim", "", "--owner", "B", "--ttl", "10"], "");
}

#[test]
fn dotdot_resource_is_refused() {
    let env = populated();
    for res in ["../escape.md", "a/../../escape.md", "a/../doc.md", ".."] {
        let line = refused(
            &env,
            &["claim", res, "--owner", "B", "--ttl", "10"],
            Some(5),
            "",
        );
        assert!(line.contains(".."), "{line}");
        refused(&env, &["write", res, "--epoch", "1"], Some(5), "x");
    }
    let parent = env.root().parent().expect("parent");
    assert!(!parent.join("escape.md").exists());
    refused_fresh(&["write", "../escape.md", "--epoch", "1"], "x");
}

#[test]
fn resource_in_state_folder_is_refused() {
    let env = populated();
    for res in [
        ".fencepost/state.db",
        "./.fencepost/other.md",
        ".fencepost/x/y.md",
    ] {
        let line = refused(
            &env,
            &["claim", res, "--owner", "B", "--ttl", "10"],
            Some(5),
            "",
        );
        assert!(line.contains(".fencepost"), "{line}");
        refused(&env, &["write", res, "--epoch", "1"], Some(5), "garbage");
    }
    assert!(!env.path(".fencepost/other.md").exists());
    assert!(!env.path(".fencepost/x").exists());
}

#[test]
fn resource_through_symlink_leading_outside_root_is_refused() {
    let env = populated();
    let outside = tempfile::tempdir().expect("outside dir");
    std::os::unix::fs::symlink(outside.path(), env.path("out")).expect("symlink");
    let line = refused(
        &env,
        &["claim", "out/x.md", "--owner", "B", "--ttl", "10"],
        Some(5),
        "",
    );
    assert!(line.contains("outside the root"), "{line}");
    refused(
        &env,
        &["claim", "out/deep/x.md", "--owner", "B", "--ttl", "10"],
        Some(5),
        "",
    );
    // The refused claims recorded nothing: status has nothing to show for it.
    let done = env.fp(&["status", "out/x.md"]).now(5).expect(2);
    assert!(
        done.stderr.contains("never seen out/x.md"),
        "{}",
        done.stderr
    );
    assert_no_entries(outside.path());
}

#[test]
fn write_through_symlink_planted_after_claim_lands_nowhere() {
    // The attacker swaps a folder for a link after the worker claimed.
    let env = populated();
    let outside = tempfile::tempdir().expect("outside dir");
    std::fs::create_dir(env.path("reports")).expect("mkdir");
    assert_eq!(env.claim("reports/daily.md", "B", 100, 5), 1);
    std::fs::remove_dir(env.path("reports")).expect("rmdir");
    std::os::unix::fs::symlink(outside.path(), env.path("reports")).expect("symlink");
    let line = refused(
        &env,
        &["write", "reports/daily.md", "--epoch", "1"],
        Some(6),
        "evil",
    );
    assert!(line.contains("outside the root"), "{line}");
    assert_no_entries(outside.path());
    // status still lists every resource, and says this one cannot be reached.
    let all = env.fp(&["--json", "status"]).now(6).expect(0).json();
    let rows = all["resources"].as_array().expect("resources");
    let daily = rows
        .iter()
        .find(|r| r["resource"] == "reports/daily.md")
        .expect("row");
    assert_eq!(daily["document"]["state"], "unreachable");
    assert_eq!(rows.len(), 3);
    // Relative links count too.
    std::fs::remove_file(env.path("reports")).expect("unlink");
    let rel = Path::new("..").join(outside.path().file_name().expect("name"));
    std::os::unix::fs::symlink(&rel, env.path("reports")).expect("symlink");
    if env.path("reports").is_dir() {
        refused(
            &env,
            &["write", "reports/daily.md", "--epoch", "1"],
            Some(6),
            "evil",
        );
        assert_no_entries(outside.path());
    }
}

#[test]
fn symlink_into_state_folder_is_refused() {
    let env = populated();
    std::os::unix::fs::symlink(env.path(".fencepost"), env.path("state")).expect("symlink");
    refused(
        &env,
        &["claim", "state/state.db", "--owner", "B", "--ttl", "10"],
        Some(5),
        "",
    );
    refused(
        &env,
        &["claim", "state/new.md", "--owner", "B", "--ttl", "10"],
        Some(5),
        "",
    );
}

#[test]
fn symlink_to_folder_inside_root_is_followed() {
    let env = Env::new();
    std::fs::create_dir(env.path("real")).expect("mkdir");
    std::os::unix::fs::symlink("real", env.path("alias")).expect("symlink");
    env.claim("alias/doc.md", "A", 10, 0);
    env.write("alias/doc.md", 1, "inside", 1, 0);
    assert_eq!(env.text("real/doc.md"), "inside");
    assert!(
        env.path("alias").is_symlink(),
        "the link itself is not replaced"
    );
}

fn assert_no_entries(dir: &Path) {
    let entries: Vec<_> = std::fs::read_dir(dir)
        .expect("outside dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(entries.is_empty(), "written outside the root: {entries:?}");
}

#[test]
fn document_that_is_a_symlink_is_refused_not_replaced() {
    let env = populated();
    let outside = tempfile::tempdir().expect("outside dir");
    let victim = outside.path().join("victim.txt");
    std::fs::write(&victim, "victim\n").expect("victim");
    std::fs::write(env.path("target.md"), "target\n").expect("target");
    env.claim("inner.md", "B", 100, 5);
    env.claim("outer.md", "B", 100, 5);
    std::os::unix::fs::symlink("target.md", env.path("inner.md")).expect("symlink");
    std::os::unix::fs::symlink(&victim, env.path("outer.md")).expect("symlink");
    let line = refused(&env, &["write", "inner.md", "--epoch", "1"], Some(6), "new");
    assert!(line.contains("symlink"), "{line}");
    refused(&env, &["write", "outer.md", "--epoch", "1"], Some(6), "new");
    assert!(env.path("inner.md").is_symlink());
    assert!(env.path("outer.md").is_symlink());
    assert_eq!(env.text("target.md"), "target\n");
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "victim\n"
    );
}

#[test]
fn document_that_is_a_folder_is_refused() {
    let env = populated();
    // Claimed while it was free; a folder appears before the write.
    env.claim("dir.md", "B", 100, 5);
    std::fs::create_dir(env.path("dir.md")).expect("mkdir");
    std::fs::write(env.path("dir.md/inner"), "inner").expect("inner");
    // A claim of a folder is refused outright.
    env.fp(&["claim", "dir.md", "--owner", "C", "--ttl", "10"])
        .now(200)
        .expect(2);
    let line = refused(&env, &["write", "dir.md", "--epoch", "1"], Some(6), "new");
    assert!(line.contains("folder"), "{line}");
    assert!(env.path("dir.md").is_dir());
    assert_eq!(env.text("dir.md/inner"), "inner");
}

#[test]
fn document_that_is_a_fifo_is_refused_without_blocking() {
    let env = populated();
    env.claim("pipe.md", "B", 100, 5);
    let made = std::process::Command::new("mkfifo")
        .arg(env.path("pipe.md"))
        .status()
        .is_ok_and(|s| s.success());
    assert!(made, "mkfifo (coreutils) is needed by this test");
    let before = snapshot(&env, Some(6));
    let done = env
        .fp(&["write", "pipe.md", "--epoch", "1"])
        .now(6)
        .stdin("x")
        .expect(2);
    assert!(done.stderr.contains("special file"), "{}", done.stderr);
    let meta = std::fs::symlink_metadata(env.path("pipe.md")).expect("fifo");
    assert!(!meta.is_file(), "the fifo was replaced");
    assert_eq!(snapshot(&env, Some(6)), before);
}

#[test]
fn bad_ttl_is_refused() {
    let env = populated();
    for ttl in [
        "0",
        "-5",
        "99999999999999999999",
        "ten",
        "",
        "1.5",
        "10x",
        "10s",
        "500ms",
        "2m",
    ] {
        // `--ttl=-5` reaches the TTL check; `--ttl -5` is refused by the parser (an
        // unexpected argument), still exit 2 with one line.
        let joined = format!("--ttl={ttl}");
        let line = refused(
            &env,
            &["claim", "new.md", "--owner", "B", &joined],
            Some(5),
            "",
        );
        assert!(line.contains("--ttl"), "{ttl:?}: {line}");
        refused(
            &env,
            &["claim", "new.md", "--owner", "B", "--ttl", ttl],
            Some(5),
            "",
        );
        refused(
            &env,
            &[
                "renew", "doc.md", "--owner", "A", "--epoch", "1", "--ttl", ttl,
            ],
            Some(5),
            "",
        );
        refused_fresh(&["claim", "new.md", "--owner", "B", "--ttl", ttl], "");
    }
}

#[test]
fn ttl_that_overflows_the_clock_is_refused() {
    let env = populated();
    let max = i64::MAX.to_string();
    let line = refused(
        &env,
        &["claim", "new.md", "--owner", "B", "--ttl", &max],
        Some(5),
        "",
    );
    assert!(line.contains("overflow"), "{line}");
    refused(
        &env,
        &[
            "renew", "doc.md", "--owner", "A", "--epoch", "1", "--ttl", &max,
        ],
        Some(5),
        "",
    );
    // With units on the wall clock, in a fresh root: no state file is left behind.
    let fresh = Env::new();
    let done = fresh
        .fp(&[
            "claim",
            "new.md",
            "--owner",
            "B",
            "--ttl",
            "9999999999999999h",
        ])
        .expect(2);
    assert_usage(&done, "--ttl 9999999999999999h");
    assert!(!fresh.path(".fencepost").exists());
}

#[test]
fn bad_epoch_is_refused() {
    let env = populated();
    for epoch in ["0", "-1", "99999999999999999999", "one", ""] {
        let line = refused(&env, &["write", "doc.md", "--epoch", epoch], Some(5), "x");
        assert!(line.contains("--epoch"), "{epoch:?}: {line}");
        refused(
            &env,
            &[
                "renew", "doc.md", "--owner", "A", "--epoch", epoch, "--ttl", "9",
            ],
            Some(5),
            "",
        );
        refused(
            &env,
            &["complete", "doc.md", "--owner", "A", "--epoch", epoch],
            Some(5),
            "",
        );
        refused(
            &env,
            &["release", "doc.md", "--owner", "A", "--epoch", epoch],
            Some(5),
            "",
        );
        refused_fresh(&["write", "doc.md", "--epoch", epoch], "x");
    }
    assert_eq!(env.read("doc.md"), None);
}

#[test]
fn empty_owner_is_refused() {
    let env = populated();
    let line = refused(
        &env,
        &["claim", "new.md", "--owner", "", "--ttl", "10"],
        Some(5),
        "",
    );
    assert!(line.contains("owner"), "{line}");
    refused(
        &env,
        &["write", "doc.md", "--epoch", "1", "--owner", ""],
        Some(5),
        "x",
    );
    refused(
        &env,
        &[
            "renew", "doc.md", "--owner", "", "--epoch", "1", "--ttl", "9",
        ],
        Some(5),
        "",
    );
    refused(
        &env,
        &["complete", "doc.md", "--owner", "", "--epoch", "1"],
        Some(5),
        "",
    );
    refused_fresh(&["claim", "new.md", "--owner", "", "--ttl", "10"], "");
}

#[test]
fn owner_with_control_character_is_refused() {
    let env = populated();
    for owner in ["A\nB", "A\tB", "A\u{7}", "\u{1b}[31mred", "A\u{7f}"] {
        let line = refused(
            &env,
            &["claim", "new.md", "--owner", owner, "--ttl", "10"],
            Some(5),
            "",
        );
        assert!(line.contains("control"), "{owner:?}: {line}");
        assert_eq!(line.lines().count(), 1);
        refused(
            &env,
            &["write", "doc.md", "--epoch", "1", "--owner", owner],
            Some(5),
            "x",
        );
        refused(
            &env,
            &["release", "doc.md", "--owner", owner, "--epoch", "1"],
            Some(5),
            "",
        );
    }
}

#[test]
fn from_missing_file_is_refused() {
    let env = populated();
    let missing = env.path("no-such-input.md");
    let missing = missing.to_str().expect("utf-8");
    let line = refused(
        &env,
        &["write", "doc.md", "--epoch", "1", "--from", missing],
        Some(5),
        "",
    );
    assert!(line.contains("--from"), "{line}");
    assert_eq!(env.read("doc.md"), None);
    std::fs::create_dir(env.path("in-dir")).expect("mkdir");
    let dir = env.path("in-dir");
    refused(
        &env,
        &[
            "write",
            "doc.md",
            "--epoch",
            "1",
            "--from",
            dir.to_str().expect("utf-8"),
        ],
        Some(5),
        "",
    );
    refused_fresh(
        &["write", "doc.md", "--epoch", "1", "--from", "/no/such/file"],
        "",
    );
}

#[test]
fn text_file_as_state_file_is_refused_and_untouched() {
    let env = Env::new();
    std::fs::write(env.path("notes.txt"), "my notes, not a database\n").expect("notes");
    for args in [
        vec!["claim", "doc.md", "--owner", "A", "--ttl", "10"],
        vec!["write", "doc.md", "--epoch", "1"],
        vec![
            "renew", "doc.md", "--owner", "A", "--epoch", "1", "--ttl", "10",
        ],
        vec!["status"],
    ] {
        let mut a = vec!["--db", "notes.txt"];
        a.extend(&args);
        let done = env.fp(&a).now(0).stdin("x").expect(2);
        assert_usage(&done, &args.join(" "));
        assert!(
            done.stderr.contains("not a fencepost state file"),
            "{}",
            done.stderr
        );
        assert_eq!(env.files(), ["notes.txt"], "{args:?}");
        assert_eq!(env.text("notes.txt"), "my notes, not a database\n");
    }
}

/// A SQLite database of some other application, made by python3's sqlite3 module (or,
/// where python3 is missing, by the bundled SQLite).
fn foreign_db(path: &Path) {
    let script = "import sqlite3, sys\n\
        c = sqlite3.connect(sys.argv[1])\n\
        c.execute('CREATE TABLE lease (resource TEXT, owner TEXT)')\n\
        c.execute(\"INSERT INTO lease VALUES ('doc.md', 'payroll')\")\n\
        c.commit()\n\
        c.close()\n";
    let made = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(path)
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        eprintln!("python3 unavailable; making the foreign database with rusqlite");
        let c = rusqlite::Connection::open(path).expect("open");
        c.execute_batch(
            "CREATE TABLE lease (resource TEXT, owner TEXT);
             INSERT INTO lease VALUES ('doc.md', 'payroll');",
        )
        .expect("create");
    }
}

#[test]
fn foreign_sqlite_database_as_state_file_is_refused_and_untouched() {
    let env = Env::new();
    foreign_db(&env.path("app.db"));
    let bytes = std::fs::read(env.path("app.db")).expect("app.db");
    for args in [
        vec!["claim", "doc.md", "--owner", "A", "--ttl", "10"],
        vec!["write", "doc.md", "--epoch", "1"],
        vec!["complete", "doc.md", "--owner", "A", "--epoch", "1"],
        vec!["status"],
        vec!["status", "doc.md"],
    ] {
        let mut a = vec!["--json", "--db", "app.db"];
        a.extend(&args);
        let done = env.fp(&a).now(0).stdin("x").expect(2);
        assert_usage(&done, &args.join(" "));
        assert!(
            done.stderr.contains("not a fencepost state file"),
            "{}",
            done.stderr
        );
        assert_eq!(done.json_contract()["outcome"], "usage");
        // Not even its journal mode may change, and no -wal/-shm files appear.
        assert_eq!(env.files(), ["app.db"], "{args:?}");
        assert!(
            std::fs::read(env.path("app.db")).expect("app.db") == bytes,
            "{args:?} modified the foreign database"
        );
    }
}

#[test]
fn wall_clock_call_on_logical_state_is_refused() {
    let env = populated();
    let line = refused(
        &env,
        &["claim", "new.md", "--owner", "B", "--ttl", "30s"],
        None,
        "",
    );
    assert!(line.contains("logical"), "{line}");
    refused(
        &env,
        &["claim", "new.md", "--owner", "B", "--ttl", "10"],
        None,
        "",
    );
    refused(
        &env,
        &[
            "renew", "doc.md", "--owner", "A", "--epoch", "1", "--ttl", "10",
        ],
        None,
        "",
    );
    refused(&env, &["write", "doc.md", "--epoch", "1"], None, "x");
    refused(
        &env,
        &["release", "doc.md", "--owner", "A", "--epoch", "1"],
        None,
        "",
    );
    // (refused() compares the state through status with --now; status without it is
    // refused too.)
    let done = env.fp(&["status"]).expect(2);
    assert_usage(&done, "status");
}

#[test]
fn logical_call_on_wall_clock_state_is_refused() {
    let env = Env::new();
    env.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "1h"])
        .expect_stdout(0, "1");
    let before = snapshot(&env, None);
    for args in [
        vec!["claim", "new.md", "--owner", "B", "--ttl", "10"],
        vec!["claim", "doc.md", "--owner", "B", "--ttl", "10"],
        vec![
            "renew", "doc.md", "--owner", "A", "--epoch", "1", "--ttl", "10",
        ],
        vec!["write", "doc.md", "--epoch", "1"],
        vec!["complete", "doc.md", "--owner", "A", "--epoch", "1"],
        vec!["status"],
    ] {
        let done = env.fp(&args).now(i64::MAX / 2).stdin("x").expect(2);
        assert_usage(&done, &args.join(" "));
        assert!(done.stderr.contains("wall clock"), "{}", done.stderr);
    }
    assert_eq!(snapshot(&env, None), before);
    assert_eq!(env.read("doc.md"), None);
    // The lease is still A's and works on the wall clock.
    env.fp(&["complete", "doc.md", "--owner", "A", "--epoch", "1"])
        .expect_stdout(0, "completed");
}

#[test]
fn negative_now_is_refused() {
    let env = populated();
    refused(
        &env,
        &[
            "--now", "-1", "claim", "new.md", "--owner", "B", "--ttl", "10",
        ],
        None,
        "",
    );
}

#[test]
fn missing_root_is_refused_and_not_created() {
    let base = tempfile::tempdir().expect("base");
    let missing = base.path().join("no-such-root");
    let file = base.path().join("a-file");
    std::fs::write(&file, "x").expect("file");
    for root in [&missing, &file] {
        for json in [false, true] {
            let mut cmd = assert_cmd::Command::new(bin());
            cmd.env_clear()
                .current_dir(base.path())
                .arg("--root")
                .arg(root);
            if json {
                cmd.arg("--json");
            }
            let out = cmd
                .args([
                    "--now", "0", "claim", "doc.md", "--owner", "A", "--ttl", "10",
                ])
                .output()
                .expect("run");
            let done = Done {
                code: out.status.code().unwrap_or(-1),
                signal: None,
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            };
            assert_eq!(done.code, 2, "{done:?}");
            assert_usage(&done, "--root");
            if json {
                assert_eq!(done.json_contract()["outcome"], "usage");
            }
        }
    }
    assert!(!missing.exists(), "the missing root was created");
    let mut entries: Vec<_> = std::fs::read_dir(base.path())
        .expect("base")
        .map(|e| e.expect("entry").file_name())
        .collect();
    entries.sort();
    assert_eq!(entries, ["a-file"]);
}

#[test]
fn missing_required_option_is_a_one_line_usage_error() {
    let env = populated();
    let line = refused(&env, &["claim", "new.md", "--owner", "B"], Some(5), "");
    assert!(line.contains("--ttl"), "{line}");
    refused(&env, &["write", "doc.md"], Some(5), "x");
    refused(
        &env,
        &["claim", "new.md", "--owner", "B", "--ttl", "1", "--bogus"],
        Some(5),
        "",
    );
}
