//! Documents behave like files people publish: the usual mode under the caller's umask,
//! a rewrite keeps the mode, parent folders are made, `--from FILE` and big stdin
//! streams work, and no temp file is ever left behind.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use serde_json::Value;

use crate::harness::Env;
use crate::support::sha256_hex;

fn mode(env: &Env, rel: &str) -> u32 {
    std::fs::metadata(env.path(rel))
        .expect("document")
        .permissions()
        .mode()
        & 0o7777
}

/// Every name in the root (recursively, `.fencepost/` excluded) that is not a document:
/// temp files and recovery links all carry `.fencepost-`.
fn debris(env: &Env) -> Vec<String> {
    env.files()
        .into_iter()
        .filter(|f| f.contains(".fencepost-"))
        .collect()
}

fn row(env: &Env, res: &str, now: i64) -> Value {
    env.fp(&["--json", "status", res]).now(now).expect(0).json()["resources"][0].clone()
}

#[test]
fn new_document_gets_umask_mode_not_tempfile_private_mode() {
    for (mask, want) in [
        (0o022, 0o644),
        (0o027, 0o640),
        (0o002, 0o664),
        (0o077, 0o600),
    ] {
        let env = Env::new();
        env.claim("doc.md", "A", 10, 0);
        env.fp(&["write", "doc.md", "--epoch", "1"])
            .now(1)
            .stdin("x")
            .umask(mask)
            .expect_stdout(0, "written");
        assert_eq!(mode(&env, "doc.md"), want, "umask {mask:03o}");
    }
}

#[test]
fn rewrite_keeps_existing_document_mode() {
    let env = Env::new();
    env.claim("doc.md", "A", 10, 0);
    env.write("doc.md", 1, "v1", 1, 0);
    std::fs::set_permissions(env.path("doc.md"), std::fs::Permissions::from_mode(0o640))
        .expect("chmod");
    env.claim("doc.md", "B", 10, 10);
    // Under a umask that would give 0644 (or 0600) to a new file.
    env.fp(&["write", "doc.md", "--epoch", "2"])
        .now(11)
        .stdin("v2")
        .umask(0o077)
        .expect_stdout(0, "written");
    assert_eq!(env.text("doc.md"), "v2");
    assert_eq!(mode(&env, "doc.md"), 0o640);
    // A pre-existing document the tool never wrote keeps its mode too.
    std::fs::write(env.path("old.md"), "hand made").expect("write");
    std::fs::set_permissions(env.path("old.md"), std::fs::Permissions::from_mode(0o604))
        .expect("chmod");
    env.claim("old.md", "A", 10, 20);
    env.write("old.md", 1, "published", 21, 0);
    assert_eq!(env.text("old.md"), "published");
    assert_eq!(mode(&env, "old.md"), 0o604);
}

#[test]
fn rewrite_replaces_the_file_atomically_with_a_new_inode() {
    let env = Env::new();
    env.claim("doc.md", "A", 10, 0);
    env.write("doc.md", 1, "v1", 1, 0);
    let old = std::fs::metadata(env.path("doc.md")).expect("doc").ino();
    env.claim("doc.md", "B", 10, 10);
    env.write("doc.md", 2, "v2", 11, 0);
    let new = std::fs::metadata(env.path("doc.md")).expect("doc").ino();
    assert_ne!(old, new, "a rewrite renames a new file into place");
    assert_eq!(env.files(), ["doc.md"]);
}

#[test]
fn parent_folders_of_new_resource_are_created() {
    let env = Env::new();
    env.claim("reports/2026/daily.md", "A", 10, 0);
    // A claim alone creates nothing.
    assert!(!env.path("reports").exists());
    env.write("reports/2026/daily.md", 1, "report\n", 1, 0);
    assert_eq!(env.text("reports/2026/daily.md"), "report\n");
    assert_eq!(env.files(), ["reports/2026/daily.md"]);
    assert!(env.path("reports/2026").is_dir());
    assert_eq!(
        row(&env, "reports/2026/daily.md", 1)["document"]["state"],
        "matches"
    );
}

#[test]
fn refused_write_creates_no_parent_folders() {
    let env = Env::new();
    env.claim("other.md", "X", 10, 0);
    env.fp(&["write", "a/b/c.md", "--epoch", "1"])
        .now(0)
        .stdin("x")
        .expect(8);
    env.claim("a/b/c.md", "A", 10, 0);
    env.claim("a/b/c.md", "B", 10, 10);
    env.fp(&["write", "a/b/c.md", "--epoch", "1"])
        .now(11)
        .stdin("x")
        .expect(5);
    assert!(!env.path("a").exists(), "a refused write made folders");
}

#[test]
fn write_from_file_works() {
    let env = Env::new();
    let input = tempfile::NamedTempFile::new().expect("input");
    std::fs::write(input.path(), b"from a file\n\x00\xff binary ok\n").expect("input");
    let from = input.path().to_str().expect("utf-8");
    env.claim("doc.bin", "A", 10, 0);
    let j = env
        .fp(&["--json", "write", "doc.bin", "--epoch", "1", "--from", from])
        .now(1)
        .stdin("ignored stdin")
        .expect(0)
        .json_contract();
    assert_eq!(j["outcome"], "written");
    assert_eq!(
        env.read("doc.bin").expect("doc"),
        b"from a file\n\x00\xff binary ok\n"
    );
    assert_eq!(j["size"], 25);
    // The same file again is a replay; the input file itself is untouched.
    env.fp(&["write", "doc.bin", "--epoch", "1", "--from", from])
        .now(2)
        .expect_stdout(0, "replay");
    assert_eq!(
        std::fs::read(input.path()).expect("input"),
        b"from a file\n\x00\xff binary ok\n"
    );
    assert_eq!(env.files(), ["doc.bin"]);
}

#[test]
fn empty_document_is_a_valid_write_when_asked_for() {
    let env = Env::new();
    env.claim("empty.md", "A", 10, 0);
    env.fp(&["write", "empty.md", "--epoch", "1", "--allow-empty"])
        .now(1)
        .expect_stdout(0, "written");
    assert_eq!(env.read("empty.md").expect("doc"), b"");
    let r = row(&env, "empty.md", 1);
    assert_eq!(r["sink"]["size"], 0);
    // SHA-256 of nothing.
    assert_eq!(
        r["sink"]["sha256"],
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

#[test]
fn no_temp_files_after_written_replay_or_refused_writes() {
    let env = Env::new();
    std::fs::create_dir(env.path("sub")).expect("mkdir");
    env.claim("sub/doc.md", "A", 10, 0);
    env.write("sub/doc.md", 1, "v1", 1, 0);
    assert!(debris(&env).is_empty(), "after written: {:?}", env.files());
    env.write("sub/doc.md", 1, "v1", 2, 0);
    assert!(debris(&env).is_empty(), "after replay: {:?}", env.files());
    env.write("sub/doc.md", 1, "other", 2, 6);
    assert!(debris(&env).is_empty(), "after conflict: {:?}", env.files());
    env.write("sub/doc.md", 9, "other", 2, 8);
    assert!(debris(&env).is_empty(), "after unissued: {:?}", env.files());
    env.claim("sub/doc.md", "B", 10, 10);
    env.write("sub/doc.md", 1, "late", 11, 5);
    assert!(debris(&env).is_empty(), "after stale: {:?}", env.files());
    env.fp(&["write", "sub/doc.md", "--epoch", "2", "--owner", "C"])
        .now(11)
        .stdin("wrong owner")
        .expect(8);
    assert!(
        debris(&env).is_empty(),
        "after owner mismatch: {:?}",
        env.files()
    );
    assert_eq!(env.files(), ["sub/doc.md"]);
    assert_eq!(env.text("sub/doc.md"), "v1");
}

#[test]
fn abandoned_temp_file_of_a_dead_writer_is_removed_by_next_write() {
    let env = Env::new();
    env.claim("doc.md", "A", 10, 0);
    // What a writer killed while staging leaves: an unlocked temp file.
    std::fs::write(env.path(".doc.md.fencepost-tmp-deadbeef"), "half").expect("temp");
    env.write("doc.md", 1, "whole", 1, 0);
    assert_eq!(env.files(), ["doc.md"]);
    assert_eq!(env.text("doc.md"), "whole");
}

#[test]
fn documents_around_the_copy_chunk_size_keep_every_byte_and_hash() {
    let env = Env::new();
    // Content that ends inside the first 128 KiB chunk is hashed in series; longer
    // content goes through the hashing thread. Both sides of that line, by stdin and
    // by --from, must record the digest of exactly the bytes sent.
    const CHUNK: usize = 128 * 1024;
    let sizes = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 3 * CHUNK + 5];
    for (i, size) in sizes.into_iter().enumerate() {
        let content: Vec<u8> = (0..size).map(|b| (b * 7 + i) as u8).collect();
        for (way, epoch) in [("stdin", 1), ("from", 2)] {
            let res = format!("doc{i}.bin");
            let now = epoch * 10;
            assert_eq!(env.claim(&res, "A", 5, now), epoch);
            let epoch_text = epoch.to_string();
            let mut args = vec!["--json", "write", res.as_str(), "--epoch", &epoch_text];
            if size == 0 {
                args.push("--allow-empty");
            }
            let source = env.path(&format!("src{i}"));
            std::fs::write(&source, &content).expect("write the source");
            let source_text = source.to_string_lossy().into_owned();
            let mut run = if way == "from" {
                args.extend(["--from", source_text.as_str()]);
                env.fp(&args)
            } else {
                env.fp(&args).stdin(content.clone())
            };
            run = run.now(now + 1);
            let j = run.expect(0).json_contract();
            assert_eq!(j["size"], size as u64, "{size} bytes by {way}");
            assert_eq!(
                j["sha256"],
                sha256_hex(&content).as_str(),
                "{size} bytes by {way}"
            );
            assert!(
                env.read(&res).expect("doc") == content,
                "{size} bytes by {way}: the document differs"
            );
        }
    }
}

#[test]
fn multi_mebibyte_document_streams_from_stdin() {
    let env = Env::new();
    // 12 MiB of non-repeating-looking bytes.
    let size = 12 * 1024 * 1024;
    let mut content = Vec::with_capacity(size);
    let mut x: u32 = 0x9e37_79b9;
    while content.len() < size {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        content.extend_from_slice(&x.to_le_bytes());
    }
    env.claim("big.bin", "A", 10, 0);
    let j = env
        .fp(&["--json", "write", "big.bin", "--epoch", "1"])
        .now(1)
        .stdin(content.clone())
        .expect(0)
        .json_contract();
    assert_eq!(j["outcome"], "written");
    assert_eq!(j["size"], size as u64);
    // The hash is computed beside the copy (a second thread): check it against one
    // computed here from the bytes sent.
    assert_eq!(j["sha256"], sha256_hex(&content).as_str());
    assert!(env.read("big.bin").expect("doc") == content, "bytes differ");
    let r = row(&env, "big.bin", 1);
    assert_eq!(r["document"]["state"], "matches");
    assert_eq!(r["document"]["size"], size as u64);
    assert_eq!(r["sink"]["sha256"], j["sha256"]);
    // The same bytes again are a replay; one byte different is a conflict.
    env.fp(&["write", "big.bin", "--epoch", "1"])
        .now(2)
        .stdin(content.clone())
        .expect_stdout(0, "replay");
    let mut changed = content.clone();
    changed[size / 2] ^= 1;
    env.fp(&["write", "big.bin", "--epoch", "1"])
        .now(2)
        .stdin(changed)
        .expect_stdout(6, "conflict");
    assert!(env.read("big.bin").expect("doc") == content);
    assert_eq!(env.files(), ["big.bin"]);
}

#[test]
fn a_content_read_error_changes_nothing_and_leaves_no_temp_file() {
    let env = Env::new();
    env.claim("doc.md", "A", 10, 0);
    env.write("doc.md", 1, "v1", 1, 0);
    env.claim("doc.md", "B", 10, 11);
    std::fs::create_dir(env.path("folder")).expect("folder");
    // stdin opened on a folder: the open succeeds, the first read fails (EISDIR).
    let out = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg("exec \"$0\" --root \"$1\" --now 12 write doc.md --epoch 2 < \"$1/folder\"")
        .arg(crate::harness::bin())
        .arg(env.path(""))
        .env_clear()
        .output()
        .expect("run fencepost");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "stderr: {stderr}");
    assert!(
        stderr.starts_with("fencepost: cannot read the content for"),
        "stderr: {stderr}"
    );
    assert_eq!(env.text("doc.md"), "v1");
    assert_eq!(debris(&env), Vec::<String>::new());
    let r = row(&env, "doc.md", 13);
    assert_eq!(r["sink"]["content_epoch"], 1);
    assert_eq!(r["sink"]["fence"], 2);
    assert_eq!(r["document"]["state"], "matches");
}

#[test]
fn document_names_with_spaces_and_unicode_work() {
    let env = Env::new();
    let res = "rapports/résumé du jour.md";
    env.claim(res, "A", 10, 0);
    env.write(res, 1, "ok", 1, 0);
    assert_eq!(env.text(res), "ok");
    assert_eq!(row(&env, res, 1)["resource"], res);
}

#[test]
fn equivalent_spellings_name_the_same_resource() {
    let env = Env::new();
    env.claim("reports/daily.md", "A", 10, 0);
    // `./reports//daily.md` is the same lease: held, and its epoch writes the document.
    env.fp(&[
        "claim",
        "./reports//daily.md",
        "--owner",
        "B",
        "--ttl",
        "10",
    ])
    .now(1)
    .expect_stdout(3, "held");
    env.write("./reports//daily.md", 1, "same", 1, 0);
    assert_eq!(env.text("reports/daily.md"), "same");
}

/// Fails the test unless it runs as root, as CI does, and so may run commands as
/// `nobody`. A test that calls it carries `#[cfg_attr(fp_missing = "root", ignore = ...)]`.
#[track_caller]
pub(crate) fn needs_root() {
    crate::support::needs::root();
    let me = std::fs::metadata("/proc/self").expect("/proc/self").uid();
    assert_eq!(
        me, 0,
        "this test runs commands as another user: it needs root"
    );
}

/// A folder `rw` in the env that belongs to `nobody` (the env's root opened to all), for
/// tests that run fencepost as another user (see [`needs_root`]).
#[track_caller]
pub(crate) fn nobodys_folder(env: &Env) -> std::path::PathBuf {
    needs_root();
    std::fs::set_permissions(env.root(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let dir = env.path("rw");
    std::fs::create_dir(&dir).expect("mkdir");
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).expect("chown");
    dir
}

/// The command line that runs the rest of it as `nobody`, with no groups.
const AS_NOBODY: [&str; 4] = [
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

/// Runs fencepost as `nobody` (through setpriv) in `root` at tick `now`.
pub(crate) fn as_nobody(
    root: &std::path::Path,
    now: i64,
    args: &[&str],
    stdin: &str,
) -> std::process::Output {
    as_nobody_under(&[], root, now, args, stdin)
}

/// The same, started through `wrapper` (e.g. `prlimit --nproc=1:1`) before setpriv.
fn as_nobody_under(
    wrapper: &[&str],
    root: &std::path::Path,
    now: i64,
    args: &[&str],
    stdin: &str,
) -> std::process::Output {
    use std::io::Write as _;
    let mut line = wrapper.iter().chain(&AS_NOBODY);
    let mut child = std::process::Command::new(line.next().expect("a program"))
        .args(line)
        .arg(crate::harness::bin())
        .arg("--root")
        .arg(root)
        .arg("--now")
        .arg(now.to_string())
        .args(args)
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run setpriv");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("feed stdin");
    child.wait_with_output().expect("wait")
}

#[test]
#[cfg_attr(fp_missing = "hardlinks", ignore = "needs fs.protected_hardlinks=1")]
#[cfg_attr(fp_missing = "root", ignore = "needs root")]
fn a_document_the_kernel_will_not_let_the_writer_link_fails_with_a_hint() {
    // The kernel's rule this test is about.
    let protected =
        std::fs::read_to_string("/proc/sys/fs/protected_hardlinks").is_ok_and(|v| v.trim() == "1");
    crate::support::needs::protected_hardlinks();
    assert!(
        protected,
        "this test is about fs.protected_hardlinks=1, which is off"
    );
    let env = Env::new();
    let dir = nobodys_folder(&env);
    let out = as_nobody(
        &dir,
        1,
        &["claim", "b.md", "--owner", "n", "--ttl", "10"],
        "",
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The document belongs to root, mode 644: nobody may rename over it (the folder is
    // theirs) but not hard-link it.
    std::fs::write(dir.join("b.md"), "root's").expect("write as root");
    std::fs::set_permissions(dir.join("b.md"), std::fs::Permissions::from_mode(0o644))
        .expect("chmod");
    let out = as_nobody(&dir, 2, &["write", "b.md", "--epoch", "1"], "nobody's");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "stderr: {stderr}");
    assert!(
        lines[0].starts_with("fencepost: cannot link pre-image"),
        "{stderr}"
    );
    assert!(
        lines[1].starts_with("hint: ") && lines[1].contains("protected_hardlinks"),
        "{stderr}"
    );
    assert_eq!(env.text("rw/b.md"), "root's");
    assert_eq!(debris(&env), Vec::<String>::new());
}

#[test]
#[cfg_attr(fp_missing = "root", ignore = "needs root")]
fn a_user_who_may_only_read_the_state_file_can_run_status_verify_and_log() {
    needs_root();
    let env = Env::new();
    std::fs::set_permissions(env.root(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    env.claim("doc.md", "A", 10, 1);
    env.write("doc.md", 1, "v1", 2, 0);
    // The state file and its folder belong to root, mode 644/755: nobody may read them
    // but create nothing beside them.
    let state = env.path(".fencepost");
    for entry in std::fs::read_dir(&state).expect("state folder") {
        let meta = entry.expect("entry").metadata().expect("meta");
        assert_eq!(meta.uid(), 0);
    }
    let state_files = || {
        let mut names: Vec<String> = std::fs::read_dir(&state)
            .expect("state folder")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = state_files();
    let status = as_nobody(env.root(), 3, &["--json", "status", "doc.md"], "");
    assert_eq!(status.status.code(), Some(0), "{status:?}");
    let j: Value = serde_json::from_slice(&status.stdout).expect("json");
    assert_eq!(j["resources"][0]["document"]["state"], "matches");
    assert_eq!(j["resources"][0]["lease"]["owner"], "A");
    let verify = as_nobody(env.root(), 3, &["verify"], "");
    assert_eq!(verify.status.code(), Some(0), "{verify:?}");
    let log = as_nobody(env.root(), 3, &["--json", "log", "doc.md"], "");
    assert_eq!(log.status.code(), Some(0), "{log:?}");
    assert!(
        String::from_utf8_lossy(&log.stdout).contains("\"write\""),
        "{log:?}"
    );
    // Reading changed nothing and created nothing.
    assert_eq!(state_files(), before);
    // A state change by nobody is refused with one line and a hint, not a panic.
    let out = as_nobody(
        env.root(),
        4,
        &["claim", "other.md", "--owner", "n", "--ttl", "5"],
        "",
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        matches!(lines.as_slice(), [first, hint] if first.starts_with("fencepost: ") && hint.starts_with("hint: ")),
        "{out:?}"
    );
}

#[test]
#[cfg_attr(fp_missing = "root", ignore = "needs root")]
fn a_document_the_reader_may_not_read_is_unreadable_and_the_others_still_reported() {
    needs_root();
    let env = Env::new();
    std::fs::set_permissions(env.root(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    env.claim("doc.md", "A", 10, 1);
    env.write("doc.md", 1, "v1", 2, 0);
    env.claim("private/doc.md", "A", 10, 1);
    env.write("private/doc.md", 1, "secret", 2, 0);
    std::fs::set_permissions(env.path("private"), std::fs::Permissions::from_mode(0o700))
        .expect("chmod");
    let status = as_nobody(env.root(), 3, &["--json", "status"], "");
    assert_eq!(status.status.code(), Some(0), "{status:?}");
    let j: Value = serde_json::from_slice(&status.stdout).expect("json");
    let states: Vec<(String, String)> = j["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| {
            (
                r["resource"].as_str().unwrap_or_default().to_string(),
                r["document"]["state"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    assert!(
        states.contains(&("doc.md".into(), "matches".into()))
            && states.contains(&("private/doc.md".into(), "unreadable".into())),
        "{states:?}"
    );
    let verify = as_nobody(env.root(), 3, &["--json", "verify"], "");
    assert_eq!(verify.status.code(), Some(9), "{verify:?}");
    let j: Value = serde_json::from_slice(&verify.stdout).expect("json");
    let problems = j["problems"].as_array().expect("problems");
    assert_eq!(problems.len(), 1, "{j}");
    assert_eq!(problems[0]["resource"], "private/doc.md");
    assert_eq!(problems[0]["problem"], "unreadable");
    assert!(
        problems[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("ermission denied")),
        "{j}"
    );
    // root may read everything: all is well.
    env.fp(&["verify"]).now(3).expect(0);
}

#[test]
#[cfg_attr(fp_missing = "root", ignore = "needs root")]
fn a_frozen_read_keeps_writers_from_checkpointing_under_it() {
    needs_root();
    let env = Env::new();
    std::fs::set_permissions(env.root(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    env.claim("doc.md", "A", 10, 1);
    let wal = env.path(".fencepost/state.db-wal");
    assert!(wal.exists(), "the last writer did not keep its WAL");
    // Another SQLite program, closing the state file last, checkpoints and deletes it.
    let script = "import sqlite3, sys\n\
                  c = sqlite3.connect(sys.argv[1])\n\
                  c.execute('PRAGMA wal_checkpoint(TRUNCATE)').fetchall()\n\
                  c.close()\n";
    let status = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(env.path(".fencepost/state.db"))
        .status()
        .expect("python3 is needed to remove the WAL");
    assert!(status.success() && !wal.exists(), "the WAL is still there");
    // nobody may not create the WAL index beside the state file, so status reads the
    // file as immutable; it pauses there, holding its lock.
    let reader = crate::support::spawn_paused_via(
        &AS_NOBODY,
        &env,
        &["--json", "status"],
        Some(2),
        b"",
        "read.frozen",
    );
    // Writers commit meanwhile, 60 claims of new resources (3 or 4 changed pages each),
    // well past the 128 pages at which a process that opens the state file alone
    // checkpoints the WAL. They would checkpoint it into the file the reader reads: the
    // reader's lock must stop that.
    let db = env.path(".fencepost/state.db");
    let frozen = std::fs::read(&db).expect("state file");
    env.claim("other.md", "B", 10, 2);
    for more in 0..60 {
        env.claim(&format!("more/{more}.md"), "B", 10, 2);
    }
    assert!(
        std::fs::metadata(&wal).map_or(0, |m| m.len()) > 128 * 4120,
        "the WAL did not grow past the checkpoint size"
    );
    env.claim("last.md", "B", 10, 2);
    assert!(
        std::fs::read(&db).expect("state file") == frozen,
        "a writer checkpointed under an immutable read"
    );
    let out = reader.resume();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let j: Value = serde_json::from_slice(&out.stdout).expect("json");
    let names: Vec<&str> = j["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["resource"].as_str())
        .collect();
    assert_eq!(names, ["doc.md"], "the state as of the read's start");
    // With the read over, the next writer checkpoints.
    env.claim("third.md", "C", 10, 3);
    assert!(
        std::fs::read(&db).expect("state file") != frozen,
        "the WAL was not checkpointed once the read was over"
    );
    assert_eq!(
        crate::support::status_row(&env, "other.md", Some(3))["lease"]["owner"],
        "B"
    );
}

#[test]
#[cfg_attr(fp_missing = "root", ignore = "needs root")]
fn a_write_that_cannot_start_a_thread_still_hashes_in_series() {
    let env = Env::new();
    let dir = nobodys_claim(&env, "b.bin");
    let content: String = (0..300_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    // One process allowed to nobody (the writer itself): no thread can be started.
    let out = as_nobody_under(
        &["prlimit", "--nproc=1:1"],
        &dir,
        2,
        &["--json", "write", "b.bin", "--epoch", "1"],
        &content,
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let j: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(j["sha256"], sha256_hex(content.as_bytes()).as_str());
    assert_eq!(env.text("rw/b.bin"), content);
}

/// The same for a small `--from` file, whose fsync would run on a second thread while the
/// state file opens: with no thread to be had, the writer syncs it itself (it panicked,
/// exit 101 and no JSON, before).
#[test]
#[cfg_attr(fp_missing = "root", ignore = "needs root")]
fn a_small_from_write_that_cannot_start_a_thread_syncs_on_its_own() {
    let env = Env::new();
    let dir = nobodys_claim(&env, "s.txt");
    let from = dir.join("content.txt");
    std::fs::write(&from, "small and durable\n").expect("content");
    let from = from.to_str().expect("utf-8 path");
    let out = as_nobody_under(
        &[
            "env",
            "FENCEPOST_TEST_OVERLAP=always",
            "prlimit",
            "--nproc=1:1",
        ],
        &dir,
        2,
        &["--json", "write", "s.txt", "--epoch", "1", "--from", from],
        "",
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let j: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(j["outcome"], "written", "{j}");
    assert_eq!(env.text("rw/s.txt"), "small and durable\n");
    let out = as_nobody(&dir, 3, &["verify"], "");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// [`nobodys_folder`], with `res` claimed there by nobody at tick 1 (epoch 1).
fn nobodys_claim(env: &Env, res: &str) -> std::path::PathBuf {
    let dir = nobodys_folder(env);
    let out = as_nobody(&dir, 1, &["claim", res, "--owner", "n", "--ttl", "10"], "");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    dir
}
