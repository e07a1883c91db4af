//! The walls around the fence: nothing is ever written outside the publish root, however
//! its folders are swapped during a write or a recovery; a name reached through a symlink
//! passes the same rules as a typed one; a failed write leaves no folder behind; a rewrite
//! keeps the document's set-user-ID and set-group-ID bits.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use crate::harness::Env;
use crate::support::{WRITE_POINTS, spawn_paused, spawn_paused_also, version};

/// The document the swap tests publish, in a folder that gets swapped.
const DOC: &str = "reports/doc.md";

/// How a paused process ends after its folder was swapped.
#[derive(Debug, Clone, Copy)]
enum End {
    /// It goes on to its end.
    Resume,
    /// It goes on and dies at the next failpoint (what it made after the swap stays).
    AbortAtNext,
    /// SIGKILL where it is paused.
    Kill,
}

/// Replaces `reports/` with a symlink to `outside` (the real folder moves aside, still
/// inside the root), as a hostile user with write access to the root could.
fn swap(env: &Env, outside: &Path) {
    std::fs::rename(env.path("reports"), env.path("reports.moved")).expect("move the folder");
    std::os::unix::fs::symlink(outside, env.path("reports")).expect("symlink out of the root");
}

fn assert_empty(outside: &Path, what: &str) {
    let names: Vec<_> = std::fs::read_dir(outside)
        .expect("list outside")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(
        names.is_empty(),
        "{what}: written outside the root: {names:?}"
    );
}

/// A root with `reports/doc.md` published at epoch 1 and claimed by B at epoch 2, and a
/// folder outside the root.
fn published() -> (Env, tempfile::TempDir) {
    let env = Env::new();
    let outside = tempfile::Builder::new()
        .prefix("fencepost-outside-")
        .tempdir()
        .expect("outside");
    let e = env.claim(DOC, "A", 10, 0);
    env.write(DOC, e, "v0 by A\n", 1, 0);
    assert_eq!(env.claim(DOC, "B", 10, 20), 2);
    (env, outside)
}

/// A write paused at each of its failpoints, its folder swapped for a symlink out of
/// the root, then resumed, aborted at the next step or killed: nothing at all appears
/// outside the root, neither then nor after `recover`, and every command ends with a
/// defined exit code.
#[test]
fn a_folder_swapped_at_any_step_of_a_write_never_lets_a_byte_out_of_the_root() {
    for (i, point) in WRITE_POINTS.iter().enumerate() {
        for end in [End::Resume, End::AbortAtNext, End::Kill] {
            let what = format!("paused at {point}, then {end:?}");
            let (env, outside) = published();
            let also = match (end, WRITE_POINTS.get(i + 1)) {
                (End::AbortAtNext, Some(next)) => format!("{next}=return(abort)"),
                (End::AbortAtNext, None) => continue,
                _ => String::new(),
            };
            let paused = spawn_paused_also(
                &[],
                &env,
                &["write", DOC, "--epoch", "2"],
                Some(21),
                &version("v1 by B", 3000),
                point,
                &also,
            );
            swap(&env, outside.path());
            match end {
                End::Kill => paused.kill(),
                End::Resume | End::AbortAtNext => {
                    let out = paused.resume();
                    let code = out.status.code();
                    assert!(matches!(code, Some(0..=2) | None), "{what}: {out:?}");
                    if code.is_some() {
                        let stderr = String::from_utf8_lossy(&out.stderr);
                        assert!(!stderr.contains("panicked"), "{what}: {stderr}");
                    }
                    // Swapped before its folder checks under the lock: refused; swapped
                    // once renamed: published in the real folder, which moved aside.
                    let expected = match (end, i) {
                        (End::Resume, 0..=4) => Some(Some(2)),
                        (End::Resume, 7..) => Some(Some(0)),
                        _ => None,
                    };
                    if let Some(expected) = expected {
                        assert_eq!(code, expected, "{what}: {out:?}");
                    }
                }
            }
            assert_empty(outside.path(), &what);
            let out = env.fp(&["recover"]).now(30).output();
            assert!(matches!(out.code, 0..=2), "{what}: recover: {}", out.stderr);
            assert_empty(outside.path(), &format!("{what}, after recover"));
        }
    }
}

/// `recover` paused with a crashed write to roll back, the folder swapped meanwhile:
/// the rollback happens in the real folder, and nothing appears outside the root.
#[test]
fn a_folder_swapped_during_recovery_never_lets_a_byte_out_of_the_root() {
    for end in [End::Resume, End::Kill] {
        let what = format!("recover paused, then {end:?}");
        let (env, outside) = published();
        let content = env.path("v1.txt");
        std::fs::write(&content, "v1 by B\n").expect("content");
        let content = content.to_str().expect("utf-8 path");
        let mut crashed = crate::support::command(
            &env,
            &["write", DOC, "--epoch", "2", "--from", content],
            Some(21),
        );
        crashed.env("FAILPOINTS", "write.after_rename=return(abort)");
        let out = crashed.output().expect("run the crashing write");
        assert_eq!(out.status.code(), None, "{what}: the write crashed");
        let paused = spawn_paused(&env, &["recover"], Some(30), b"", "recover.before_apply");
        swap(&env, outside.path());
        match end {
            End::Kill => paused.kill(),
            _ => {
                let out = paused.resume();
                assert_eq!(out.status.code(), Some(0), "{what}: {out:?}");
                assert_eq!(
                    std::fs::read(env.path("reports.moved/doc.md")).ok(),
                    Some(b"v0 by A\n".to_vec()),
                    "{what}: rolled back in the real folder"
                );
            }
        }
        assert_empty(outside.path(), &what);
        env.fp(&["recover"]).now(31).output();
        assert_empty(outside.path(), &format!("{what}, after recover"));
    }
}

/// A symlink inside the root may lead to another folder of the root, but the real name it
/// leads to passes the name rules: no reserved `.fencepost-` part, no control character,
/// nothing that is not UTF-8. Nothing is claimed or written.
#[test]
fn a_name_reached_through_a_symlink_passes_the_same_rules_as_a_typed_one() {
    use std::os::unix::ffi::OsStrExt as _;
    let cases: [(&[u8], &str); 3] = [
        (b"x.fencepost-y", "reserved"),
        (b"nl\nfolder", "control characters"),
        (b"bad\xff", "UTF-8"),
    ];
    for (real, why) in cases {
        let env = Env::new();
        let real = std::ffi::OsStr::from_bytes(real);
        std::fs::create_dir(env.root().join(real)).expect("mkdir");
        std::os::unix::fs::symlink(real, env.path("link")).expect("symlink");
        let out = env
            .fp(&["claim", "link/doc.md", "--owner", "A", "--ttl", "10"])
            .now(0)
            .expect(2);
        assert!(out.stderr.contains(why), "{why}: {}", out.stderr);
        env.fp(&["write", "link/doc.md", "--epoch", "1"])
            .now(1)
            .stdin("x")
            .expect(2);
        assert!(
            std::fs::read_dir(env.root().join(real))
                .expect("list")
                .next()
                .is_none(),
            "{why}: nothing written in the real folder"
        );
        let names: Vec<_> = std::fs::read_dir(env.root())
            .expect("list root")
            .map(|e| e.expect("entry").file_name())
            .filter(|n| n.as_bytes().starts_with(b"bad"))
            .collect();
        assert!(
            names.len() <= 1,
            "{why}: no lossy copy of the folder: {names:?}"
        );
    }
}

/// A write that fails after its folders were made removes them again.
#[test]
fn a_failed_write_leaves_no_folder_behind() {
    let env = Env::new();
    let res = "a/b/c/doc.md";
    let e = env.claim(res, "A", 10, 0).to_string();
    std::fs::write(env.path("v0.txt"), "v0\n").expect("content");
    let from = env.path("v0.txt");
    let from = from.to_str().expect("utf-8 path");
    let mut cmd = crate::support::command(
        &env,
        &["write", res, "--epoch", &e, "--from", from],
        Some(1),
    );
    cmd.env("FAILPOINTS", "write.after_temp_write=return(fail)");
    let out = cmd.output().expect("run");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(!env.path("a").exists(), "a/b/c/ was left behind");
    env.write(res, 1, "v1", 2, 0);
    assert_eq!(env.text(res), "v1");
}

/// A rewrite by the document's (non-root) owner keeps set-user-ID and set-group-ID: the
/// mode is set once the bytes are written (a write clears those bits).
#[test]
#[cfg_attr(fp_missing = "root", ignore = "needs root")]
fn a_rewrite_keeps_setuid_and_setgid_bits() {
    let env = Env::new();
    let rw = crate::documents::nobodys_folder(&env);
    let as_nobody = crate::documents::as_nobody;
    let out = as_nobody(
        &rw,
        0,
        &["claim", "tool.sh", "--owner", "n", "--ttl", "10"],
        "",
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = as_nobody(&rw, 1, &["write", "tool.sh", "--epoch", "1"], "v0\n");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let doc = rw.join("tool.sh");
    std::fs::set_permissions(&doc, std::fs::Permissions::from_mode(0o6755)).expect("chmod");
    let out = as_nobody(
        &rw,
        20,
        &["claim", "tool.sh", "--owner", "n", "--ttl", "10"],
        "",
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = as_nobody(&rw, 21, &["write", "tool.sh", "--epoch", "2"], "v1\n");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let meta = std::fs::metadata(&doc).expect("stat");
    assert_eq!(std::fs::read(&doc).expect("read"), b"v1\n");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o6755);
}
