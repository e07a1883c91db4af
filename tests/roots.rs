//! The rules of the root: a command run anywhere inside a publish root works on that root
//! (names typed there start in the current folder), roots never nest, the state file and
//! SQLite's files beside it are never documents however they are spelled, and names too
//! long for the filesystem are bad input.

use std::path::{Path, PathBuf};

use crate::harness::{Env, NEW_ROOT, scratch};

fn mkdir(path: &Path) {
    std::fs::create_dir_all(path).expect("mkdir");
}

/// A folder outside every root of the test, for state files kept elsewhere.
fn elsewhere() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("fencepost-elsewhere-")
        .tempdir_in(scratch())
        .expect("temp dir")
}

/// A resource name of exactly `len` bytes: folders of 200 bytes, then a file name.
fn name_of_len(len: usize) -> String {
    let mut name = String::new();
    while len - name.len() > 300 {
        name.push_str(&"g".repeat(200));
        name.push('/');
    }
    if len - name.len() > 150 {
        name.push_str(&"g".repeat(len - name.len() - 101));
        name.push('/');
    }
    name.push_str(&"x".repeat(len - name.len()));
    name
}

#[test]
fn a_command_run_inside_a_root_works_on_that_root() {
    // `cd reports && fencepost claim daily.md` is the most natural mistake: it must name
    // reports/daily.md of the root above, held by A, not start a second root with a
    // second lease and fence over the same document.
    let env = Env::new();
    let reports = env.path("reports");
    mkdir(&reports);
    let claimed = env
        .fp(&["claim", "reports/daily.md", "--owner", "A", "--ttl", "100"])
        .inside(env.root())
        .now(0)
        .expect_stdout(0, "1");
    assert!(claimed.stderr.starts_with(NEW_ROOT), "{}", claimed.stderr);
    env.fp(&["write", "reports/daily.md", "--epoch", "1"])
        .inside(env.root())
        .now(1)
        .stdin("A-v1")
        .expect_stdout(0, "written");
    let held = env
        .fp(&[
            "--json", "claim", "daily.md", "--owner", "B", "--ttl", "100",
        ])
        .inside(&reports)
        .now(2)
        .expect(3)
        .json_contract();
    assert_eq!(held["outcome"], "held");
    assert_eq!(
        held["resource"], "reports/daily.md",
        "output names it under the root"
    );
    assert_eq!(held["holder"], "A");
    // B never got an epoch; whatever it writes from there is refused, and A's own late
    // write of other bytes under the same epoch is the sink's `conflict`, not bad input.
    env.fp(&["write", "daily.md", "--epoch", "1", "--owner", "B"])
        .inside(&reports)
        .now(3)
        .stdin("B")
        .expect(8);
    env.fp(&["write", "reports/daily.md", "--epoch", "1"])
        .inside(env.root())
        .now(4)
        .stdin("A-v2")
        .expect(6);
    // A's publication stands, written from inside the folder too.
    env.fp(&["write", "daily.md", "--epoch", "1"])
        .inside(&reports)
        .now(5)
        .stdin("A-v1")
        .expect_stdout(0, "replay");
    assert_eq!(env.text("reports/daily.md"), "A-v1");
    assert!(
        !reports.join(".fencepost").exists(),
        "a second root was made inside the first"
    );
    let status = env
        .fp(&["--json", "status"])
        .inside(&reports)
        .now(6)
        .expect(0)
        .json();
    let rows = status["resources"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{status}");
    assert_eq!(rows[0]["resource"], "reports/daily.md");
    assert_eq!(rows[0]["lease"]["owner"], "A");
    assert_eq!(rows[0]["document"]["state"], "matches");
}

#[test]
fn names_typed_inside_a_found_root_start_in_the_current_folder() {
    let env = Env::new();
    let deep = env.path("a/b");
    mkdir(&deep);
    env.claim("seed.md", "S", 100, 0);
    let claimed = env
        .fp(&["--json", "claim", "../x.md", "--owner", "A", "--ttl", "100"])
        .inside(&deep)
        .now(1)
        .expect(0)
        .json_contract();
    assert_eq!(claimed["resource"], "a/x.md");
    // Up past the root is refused, and changes nothing.
    let done = env
        .fp(&["claim", "../../../x.md", "--owner", "A", "--ttl", "100"])
        .inside(&deep)
        .now(1)
        .expect(2);
    assert!(
        done.stderr.contains("leads out of the publish root"),
        "{}",
        done.stderr
    );
    // With --root given, names are relative to the root wherever the command runs.
    env.fp(&["claim", "a/b/y.md", "--owner", "A", "--ttl", "100"])
        .env("FENCEPOST_ROOT", env.root().to_str().expect("utf-8"))
        .inside(&deep)
        .now(2)
        .expect_stdout(0, "1");
    // FENCEPOST_RESOURCE is a name under the root too (it is what `run` hands its child).
    env.fp(&["write", "--epoch", "1"])
        .env("FENCEPOST_RESOURCE", "a/x.md")
        .inside(&deep)
        .now(3)
        .stdin("from the variable")
        .expect_stdout(0, "written");
    assert_eq!(env.text("a/x.md"), "from the variable");
    assert!(!env.path("a/b/a").exists());
    let names: Vec<String> = env.fp(&["--json", "status"]).now(4).expect(0).json()["resources"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["resource"].as_str().expect("name").to_string())
        .collect();
    assert_eq!(names, ["a/b/y.md", "a/x.md", "seed.md"]);
}

/// A tmpfs mounted on a folder for the life of the guard (root only).
struct Mounted(PathBuf);

impl Mounted {
    fn try_new(at: &Path) -> Option<Mounted> {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "fencepost-test", at.to_str()?])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Mounted(at.to_path_buf()))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
#[cfg_attr(fp_missing = "root", ignore = "needs root")]
fn discovery_does_not_cross_into_another_filesystem() {
    let env = Env::new();
    env.claim("doc.md", "A", 100, 0);
    let mnt = env.path("mnt");
    mkdir(&mnt);
    crate::support::needs::root();
    let _mounted = Mounted::try_new(&mnt).expect("mount a tmpfs (root)");
    // Found from a folder on the root's filesystem...
    env.fp(&["status", "doc.md"])
        .inside(env.root())
        .now(1)
        .expect(0);
    // ...but not from the mounted one: there the current folder would be the root, and
    // making it one inside the root above is refused, naming that root.
    let done = env
        .fp(&["claim", "x.md", "--owner", "B", "--ttl", "10"])
        .inside(&mnt)
        .now(1)
        .expect(2);
    assert!(
        done.stderr.contains("is inside the publish root"),
        "{}",
        done.stderr
    );
    assert!(
        done.stderr.contains("name it mnt/x.md under"),
        "{}",
        done.stderr
    );
    assert!(!mnt.join(".fencepost").exists());
}

#[test]
fn a_root_cannot_be_made_inside_another() {
    for outside in [false, true] {
        for inner_db in [None, Some("inner.db")] {
            let env = Env::new();
            let away = elsewhere();
            let outside_db = away.path().join("outer.db");
            let outer_db = outside.then(|| outside_db.to_str().expect("utf-8"));
            let sub = env.path("sub");
            mkdir(&sub);
            let with_db = |args: &[&'static str], db: Option<&str>| -> Vec<String> {
                let mut all: Vec<String> = Vec::new();
                if let Some(db) = db {
                    all.extend(["--db".to_string(), db.to_string()]);
                }
                all.extend(args.iter().map(|a| a.to_string()));
                all
            };
            let outer = with_db(
                &["claim", "sub/doc.md", "--owner", "A", "--ttl", "100"],
                outer_db,
            );
            let outer: Vec<&str> = outer.iter().map(String::as_str).collect();
            env.fp(&outer).now(0).expect_stdout(0, "1");
            let inner = with_db(
                &["claim", "doc.md", "--owner", "B", "--ttl", "100"],
                inner_db,
            );
            let inner: Vec<&str> = inner.iter().map(String::as_str).collect();
            let done = env.fp(&inner).root(&sub).now(1).expect(2);
            let root = std::fs::canonicalize(env.root()).expect("real root");
            assert!(
                done.stderr
                    .contains(&format!("is inside the publish root {}", root.display())),
                "{outer_db:?} {inner_db:?}: {}",
                done.stderr
            );
            assert!(
                done.stderr.contains("hint: name it sub/doc.md under"),
                "{}",
                done.stderr
            );
            assert!(!sub.join(".fencepost").exists(), "the inner root was made");
            assert!(!sub.join("inner.db").exists() && !env.path("inner.db").exists());
            // The outer root still fences the document, wherever its state file is, and is
            // found from inside with it.
            env.fp(&["claim", "doc.md", "--owner", "B", "--ttl", "100"])
                .inside(&sub)
                .now(2)
                .expect(3);
        }
    }
}

#[test]
fn a_root_cannot_be_made_around_another() {
    for (inner_outside, outer_outside) in
        [(false, false), (true, false), (false, true), (true, true)]
    {
        let env = Env::new();
        let away = elsewhere();
        let outside_db = away.path().join("inner.db");
        let inner_db = inner_outside.then(|| outside_db.to_str().expect("utf-8"));
        let outer_db = away.path().join("outer.db");
        let outer_db = outer_outside.then(|| outer_db.to_str().expect("utf-8"));
        let with_outer = |args: &[&'static str]| -> Vec<String> {
            let mut all: Vec<String> = Vec::new();
            if let Some(db) = outer_db {
                all.extend(["--db".to_string(), db.to_string()]);
            }
            all.extend(args.iter().map(|a| a.to_string()));
            all
        };
        let inner = env.path("pub");
        mkdir(&inner);
        let mut args = Vec::new();
        if let Some(db) = inner_db {
            args.extend(["--db", db]);
        }
        args.extend(["claim", "a.md", "--owner", "A", "--ttl", "100"]);
        env.fp(&args).root(&inner).now(0).expect_stdout(0, "1");
        // The parent folder, as a new root (with its own default state file), would give
        // pub/a.md a second lease and fence: refused, naming the root that has it.
        let claim = with_outer(&["claim", "pub/a.md", "--owner", "C", "--ttl", "100"]);
        let done = env
            .fp(&claim.iter().map(String::as_str).collect::<Vec<_>>())
            .now(1)
            .expect(2);
        let inner_real = std::fs::canonicalize(&inner).expect("real");
        assert!(
            done.stderr
                .contains(&format!("{}, another publish root", inner_real.display())),
            "{inner_db:?} {outer_db:?}: {}",
            done.stderr
        );
        assert!(
            done.stderr.contains("hint: name it a.md under"),
            "{}",
            done.stderr
        );
        let write = with_outer(&["write", "pub/a.md", "--epoch", "1"]);
        env.fp(&write.iter().map(String::as_str).collect::<Vec<_>>())
            .now(1)
            .stdin("outer")
            .expect(2);
        assert!(!env.path(".fencepost").exists(), "the outer root was made");
        assert!(
            !away.path().join("outer.db").exists(),
            "the outer state file was made"
        );
        assert!(!env.path("pub/a.md").exists());
    }
}

#[test]
fn a_root_whose_state_file_is_elsewhere_is_found_with_it() {
    let env = Env::new();
    let away = elsewhere();
    let db = away.path().join("state.db");
    let db = db.to_str().expect("utf-8");
    mkdir(&env.path("sub"));
    env.fp(&[
        "--db",
        db,
        "claim",
        "sub/doc.md",
        "--owner",
        "A",
        "--ttl",
        "100",
    ])
    .now(0)
    .expect_stdout(0, "1");
    // From inside, without --root or --db: the root and its state file are found.
    env.fp(&["claim", "doc.md", "--owner", "B", "--ttl", "100"])
        .inside(&env.path("sub"))
        .now(1)
        .expect(3);
    env.fp(&["write", "doc.md", "--epoch", "1"])
        .inside(&env.path("sub"))
        .now(2)
        .stdin("A")
        .expect_stdout(0, "written");
    assert!(
        !env.path(".fencepost/state.db").exists(),
        "a second state file"
    );
    assert!(!env.path("sub/.fencepost").exists());
    // Another state file for this root would be a second set of leases and fences.
    let other = away.path().join("other.db");
    let done = env
        .fp(&[
            "--db",
            other.to_str().expect("utf-8"),
            "claim",
            "sub/doc.md",
            "--owner",
            "C",
            "--ttl",
            "100",
        ])
        .now(3)
        .expect(2);
    assert!(
        done.stderr.contains("keeps its state in"),
        "{}",
        done.stderr
    );
    assert!(!other.exists());
}

#[test]
fn the_state_file_is_never_a_document_however_it_is_spelled() {
    let env = Env::new();
    mkdir(&env.path("data"));
    env.fp(&[
        "--db",
        "data/state.db",
        "claim",
        "seed",
        "--owner",
        "A",
        "--ttl",
        "10",
    ])
    .now(0)
    .expect_stdout(0, "1");
    // The state file reached through a symlink that takes the default's place.
    let marker = env.path(".fencepost/state-file");
    if marker.exists() {
        std::fs::remove_file(&marker).expect("rm marker");
    }
    mkdir(&env.path(".fencepost"));
    std::os::unix::fs::symlink("../data/state.db", env.path(".fencepost/state.db"))
        .expect("symlink");
    std::fs::hard_link(env.path("data/state.db"), env.path("hard.db")).expect("hard link");
    std::os::unix::fs::symlink("data", env.path("dlink")).expect("symlink");
    let before = std::fs::read(env.path("data/state.db")).expect("state file");
    for res in [
        "data/state.db",
        "data/state.db-wal",
        "data/state.db-shm",
        "data/state.db-journal",
        "hard.db",
        "dlink/state.db",
        "dlink/state.db-wal",
    ] {
        let done = env
            .fp(&["claim", res, "--owner", "M", "--ttl", "100"])
            .now(1)
            .expect(2);
        assert!(
            done.stderr.contains("is the state file itself"),
            "{res}: {}",
            done.stderr
        );
        env.fp(&["write", res, "--epoch", "1", "--unfenced"])
            .now(1)
            .stdin("junk")
            .expect(2);
    }
    assert_eq!(
        std::fs::read(env.path("data/state.db")).expect("state file"),
        before
    );
    let status = env.fp(&["--json", "status"]).now(2).expect(0).json();
    let names: Vec<&str> = status["resources"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["resource"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["seed"], "no lease was recorded for the state file");
}

#[test]
fn names_too_long_for_the_filesystem_are_bad_input() {
    let env = Env::new();
    // 4232 bytes: 28 folders of 150 bytes.
    let long = format!("{}doc.md", format!("{}/", "f".repeat(150)).repeat(28));
    let folder_too_long = format!("{}/doc.md", "f".repeat(256));
    // Longer than the 1,024 bytes every store can index.
    let over_limit = name_of_len(1025);
    for name in [&long, &folder_too_long, &over_limit] {
        let done = env
            .fp(&["claim", name, "--owner", "A", "--ttl", "10"])
            .now(0)
            .expect(2);
        assert!(done.stderr.contains("long"), "{}", done.stderr);
        env.fp(&["write", name, "--epoch", "1"])
            .now(0)
            .stdin("x")
            .expect(2);
    }
    let done = env
        .fp(&["claim", &over_limit, "--owner", "A", "--ttl", "10"])
        .now(0)
        .expect(2);
    assert!(
        done.stderr.contains("is 1025 bytes long, longer than 1024"),
        "{}",
        done.stderr
    );
    assert!(
        env.files().is_empty(),
        "folders were made: {:?}",
        env.files()
    );
    assert!(!env.path(".fencepost").exists(), "a state file was made");
    // The longest name is fine, as is the longest folder name the filesystem takes.
    env.claim(&name_of_len(1024), "A", 10, 0);
    let longest = format!("{}/doc.md", "f".repeat(255));
    env.claim(&longest, "A", 10, 0);
    env.write(&longest, 1, "ok", 1, 0);
    env.fp(&["verify"]).now(2).expect(0);

    // Under a root whose own path is long, a shorter name fits alone but not with the
    // root, `/`, and 64 bytes for the tool's sibling names under PATH_MAX.
    let outer = elsewhere();
    let mut deep = outer.path().to_path_buf();
    for i in 0..12 {
        deep.push(format!("{i:02}{}", "d".repeat(248)));
    }
    std::fs::create_dir_all(&deep).expect("a deep root");
    let root_len = std::fs::canonicalize(&deep)
        .expect("real root")
        .as_os_str()
        .len();
    let fitting = 4096 - 1 - root_len - 1 - 64;
    assert!(fitting < 1024, "the root is long enough: {root_len} bytes");
    let done = env
        .fp(&[
            "claim",
            &name_of_len(fitting + 1),
            "--owner",
            "A",
            "--ttl",
            "10",
        ])
        .root(&deep)
        .now(0)
        .expect(2);
    assert!(done.stderr.contains("too long"), "{}", done.stderr);
}

#[test]
fn the_claim_that_makes_a_root_says_so_once() {
    // A claim in sub/ of a folder with no root makes sub/ a root: one line naming it.
    let env = Env::new();
    let sub = env.path("sub");
    mkdir(&sub);
    let real = std::fs::canonicalize(&sub).expect("real sub");
    let done = env
        .fp(&["claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .inside(&sub)
        .now(0)
        .expect_stdout(0, "1");
    assert_eq!(
        done.stderr,
        format!("{NEW_ROOT}{}\n", real.display()),
        "the first claim names the root it made"
    );
    assert!(sub.join(".fencepost/state.db").exists());
    // The next claim made nothing: silent.
    let done = env
        .fp(&["claim", "other.md", "--owner", "A", "--ttl", "10"])
        .inside(&sub)
        .now(1)
        .expect_stdout(0, "1");
    assert_eq!(done.stderr, "");
    // A root named by --root says so too; -q (or FENCEPOST_QUIET) is silent.
    let named = Env::new();
    let done = named
        .fp(&["claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(0)
        .expect(0);
    assert!(done.stderr.starts_with(NEW_ROOT), "{}", done.stderr);
    for quiet in [
        Env::new().fp(&["-q", "claim", "doc.md", "--owner", "A", "--ttl", "10"]),
        Env::new()
            .fp(&["claim", "doc.md", "--owner", "A", "--ttl", "10"])
            .env("FENCEPOST_QUIET", "1"),
    ] {
        let done = quiet.now(0).output();
        assert_eq!((done.code, &*done.stdout, &*done.stderr), (0, "1\n", ""));
    }
}

#[test]
fn no_create_refuses_to_make_a_root() {
    let env = Env::new();
    let sub = env.path("sub");
    mkdir(&sub);
    let claim = ["claim", "doc.md", "--owner", "A", "--ttl", "10"];
    let refusals = [
        env.fp(&[&claim[..], &["--no-create"]].concat())
            .inside(&sub),
        env.fp(&claim).inside(&sub).env("FENCEPOST_NO_CREATE", "1"),
        env.fp(&[&claim[..], &["--no-create"]].concat()).root(&sub),
        env.fp(&[
            "run",
            "doc.md",
            "--owner",
            "A",
            "--ttl",
            "10",
            "--no-create",
            "--",
            "true",
        ])
        .inside(&sub),
    ];
    for (i, run) in refusals.into_iter().enumerate() {
        // run renews in real time: no --now for it.
        let done = if i == 3 { run } else { run.now(0) }.expect(2);
        let mut lines = done.stderr.lines();
        let line = lines.next().unwrap_or_default();
        assert!(
            line.contains("--no-create (FENCEPOST_NO_CREATE) forbids making one"),
            "{line}"
        );
        let hint = lines.next().unwrap_or_default();
        assert!(hint.contains("fencepost init "), "{hint}");
        assert_eq!(done.stdout, "");
        assert!(!sub.join(".fencepost").exists(), "a root was made");
        assert!(!env.path(".fencepost").exists(), "a root was made");
    }
    // --json: one object, `usage`.
    let j = env
        .fp(&[
            "--json",
            "claim",
            "doc.md",
            "-o",
            "A",
            "-t",
            "10",
            "--no-create",
        ])
        .inside(&sub)
        .now(0)
        .expect(2)
        .json_contract();
    assert_eq!(j["outcome"], "usage");
    // FENCEPOST_NO_CREATE=0 is off, as the other switches read it.
    env.fp(&claim)
        .inside(&sub)
        .env("FENCEPOST_NO_CREATE", "0")
        .now(0)
        .expect_stdout(0, "1");
    // Where the root is, --no-create claims as ever.
    env.fp(&["claim", "two.md", "-o", "A", "-t", "10", "--no-create"])
        .inside(&sub)
        .now(1)
        .expect_stdout(0, "1");
    // A root whose state file went missing is not started again with epochs from 1.
    std::fs::remove_file(sub.join(".fencepost/state.db")).expect("remove the state file");
    let done = env
        .fp(&["claim", "doc.md", "-o", "A", "-t", "10", "--no-create"])
        .inside(&sub)
        .now(2)
        .expect(2);
    assert!(done.stderr.contains("no state file at"), "{}", done.stderr);
    assert!(!sub.join(".fencepost/state.db").exists());
}

#[test]
fn init_makes_a_root_on_purpose_and_again_changes_nothing() {
    let env = Env::new();
    let sub = env.path("sub");
    mkdir(&sub);
    let real = std::fs::canonicalize(&sub).expect("real sub");
    // DIR wins over --root (which the harness passes); the answer is on stdout, so no
    // line on stderr.
    env.fp(&["init", "sub"])
        .expect_stdout(0, &format!("initialized {}", real.display()));
    assert!(sub.join(".fencepost/state.db").exists());
    let j = env.fp(&["--json", "init", "sub"]).expect(0).json_contract();
    assert_eq!(j["outcome"], "ready");
    assert_eq!(j["root"], real.to_str().expect("utf-8"));
    assert_eq!(
        j["db"],
        real.join(".fencepost/state.db").to_str().expect("utf-8")
    );
    // A claim there makes nothing, even with --no-create: silent.
    let done = env
        .fp(&["claim", "doc.md", "-o", "A", "-t", "10", "--no-create"])
        .inside(&sub)
        .now(0)
        .expect_stdout(0, "1");
    assert_eq!(done.stderr, "");
    // Without DIR: the current folder (here, --root), whose first `init` is `initialized`.
    let other = Env::new();
    let j = other.fp(&["--json", "init"]).expect(0).json_contract();
    assert_eq!(j["outcome"], "initialized");
    // Roots do not nest: a folder inside one is refused, nothing made.
    mkdir(&sub.join("inner"));
    let done = env.fp(&["init", "sub/inner"]).expect(2);
    assert!(done.stderr.contains("roots do not nest"), "{}", done.stderr);
    assert!(!sub.join("inner/.fencepost").exists());
}
