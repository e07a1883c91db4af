//! No acknowledged write is lost: the two interleavings that lost one, replayed with real
//! processes. A writer paused between its COMMIT and its clean-up must not remove the next
//! writer's recovery links; a committed write's leftover links must still read as
//! committed after the filesystem is mounted through another device. Also: a write in
//! progress (its writer alive between its rename and its clean-up) is reported as such,
//! never as a crash or a drift.

use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::Env;
use crate::support::{RES, spawn_paused, spawn_paused_also, status_row, version};

/// Publishes `content` as `owner` with a fresh claim at tick `now` (TTL 10).
fn publish(env: &Env, owner: &str, now: i64, content: &[u8]) -> i64 {
    let epoch = env.claim(RES, owner, 10, now);
    env.fp(&["write", RES, "--epoch", &epoch.to_string()])
        .now(now + 1)
        .stdin(content.to_vec())
        .expect(0);
    epoch
}

/// B's write is acknowledged (`written`) while B is paused between its COMMIT and the
/// removal of its links; A, which took over, is paused with its pre-image linked, and
/// dies after its rename once B went on. Recovery must put back B's acknowledged bytes.
#[test]
fn a_writer_paused_after_commit_never_removes_the_next_writers_pre_image() {
    let env = Env::new();
    publish(&env, "Z", 0, &version("v0", 700));
    let v1 = version("v1 by B", 900);
    let v2 = version("v2 by A", 1100);
    let eb = env.claim(RES, "B", 10, 20);
    let epoch_b = eb.to_string();
    let b = spawn_paused(
        &env,
        &["write", RES, "--epoch", &epoch_b],
        Some(21),
        &v1,
        "txn.after_commit",
    );
    let ea = env.claim(RES, "A", 10, 40);
    assert!(ea > eb, "A took over");
    let epoch_a = ea.to_string();
    let a = spawn_paused_also(
        &[],
        &env,
        &["write", RES, "--epoch", &epoch_a],
        Some(41),
        &v2,
        "write.after_pre_link",
        "write.after_rename=return(abort)",
    );
    let out = b.resume();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "written");
    let out = a.resume();
    assert_eq!(
        out.status.signal(),
        Some(6),
        "A dies after its rename: {out:?}"
    );

    let recovered = env.fp(&["recover"]).now(42).expect(0);
    let doc = env.read(RES);
    assert!(
        doc.as_deref() == Some(v1.as_slice()),
        "B's acknowledged v1 must be the document; recover said {:?}, the document is {}",
        recovered.stdout,
        doc.map_or("missing".into(), |d| String::from_utf8_lossy(&d[..40])
            .into_owned())
    );
    env.fp(&["verify"]).now(42).expect(0);
    let row = status_row(&env, RES, Some(42));
    assert_eq!(row["sink"]["content_epoch"], eb, "{row}");
    assert_eq!(row["document"]["state"], "matches", "{row}");
}

/// The same pause, but the next writer commits too: both acknowledged, the newer one is
/// the document, and the paused writer's clean-up touches nothing of it.
#[test]
fn a_late_clean_up_leaves_a_newer_committed_write_alone() {
    let env = Env::new();
    publish(&env, "Z", 0, &version("v0", 700));
    let v1 = version("v1 by B", 900);
    let v2 = version("v2 by A", 1100);
    let eb = env.claim(RES, "B", 10, 20).to_string();
    let b = spawn_paused(
        &env,
        &["write", RES, "--epoch", &eb],
        Some(21),
        &v1,
        "write.before_cleanup",
    );
    let ea = env.claim(RES, "A", 10, 40).to_string();
    env.fp(&["write", RES, "--epoch", &ea])
        .now(41)
        .stdin(v2.clone())
        .expect(0);
    let out = b.resume();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(env.read(RES).as_deref(), Some(v2.as_slice()));
    env.fp(&["verify"]).now(42).expect(0);
    assert_eq!(
        crate::support::tool_files(&env),
        Vec::<String>::new(),
        "no link or temp file is left"
    );
}

/// While a writer is alive between its rename and its COMMIT, `status` says the write is
/// in progress and `verify` raises no alarm; once it is gone without committing, both
/// say it was interrupted.
#[test]
fn a_live_write_is_in_progress_not_interrupted() {
    let env = Env::new();
    publish(&env, "Z", 0, &version("v0", 700));
    let e = env.claim(RES, "B", 10, 20).to_string();
    let b = spawn_paused(
        &env,
        &["write", RES, "--epoch", &e],
        Some(21),
        &version("v1", 900),
        "write.after_dir_fsync",
    );
    let row = status_row(&env, RES, Some(22));
    assert_eq!(row["document"]["state"], "in-progress", "{row}");
    env.fp(&["verify"]).now(22).expect(0);
    b.kill();
    let row = status_row(&env, RES, Some(23));
    assert_eq!(row["document"]["state"], "interrupted", "{row}");
    env.fp(&["verify"]).now(23).expect(9);
    env.fp(&["recover"]).now(24).expect(0);
    assert_eq!(env.read(RES), Some(version("v0", 700)));
    env.fp(&["verify"]).now(24).expect(0);
}

/// A loop-mounted ext4 image, unmounted and detached when dropped.
struct Mounted {
    image: PathBuf,
    dir: PathBuf,
    loops: Vec<String>,
}

impl Mounted {
    /// Attaches `image` to a new loop device and mounts it on `dir`; returns the device.
    fn attach(&mut self) -> String {
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&self.image)
            .output()
            .expect("losetup");
        assert!(out.status.success(), "losetup: {out:?}");
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        self.loops.push(dev.clone());
        run(Command::new("mount").arg(&dev).arg(&self.dir));
        dev
    }

    fn unmount(&self) {
        run(Command::new("umount").arg(&self.dir));
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
        for dev in &self.loops {
            let _ = Command::new("losetup").arg("-d").arg(dev).status();
        }
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run");
    assert!(out.status.success(), "{cmd:?}: {out:?}");
}

/// Fails the test unless loop devices can be set up (root, `losetup`, `mkfs.ext4`). A
/// test that calls it carries `#[cfg_attr(fp_missing = "loop", ignore = ...)]`.
#[track_caller]
fn needs_loop_devices() {
    crate::support::needs::loop_devices();
    let root =
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("/proc/self"))
            == 0;
    let tools = ["losetup", "mkfs.ext4", "mount"].iter().all(|tool| {
        Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    assert!(
        root && tools && Path::new("/dev/loop-control").exists(),
        "the remount test needs root, loop devices, losetup and mkfs.ext4: root {root}, tools {tools}"
    );
}

/// A write killed right after its COMMIT leaves its links; the filesystem is then
/// mounted through another loop device (another device number). Recovery must see the
/// write as committed and keep it.
#[test]
#[cfg_attr(fp_missing = "loop", ignore = "needs root, losetup and mkfs.ext4")]
fn a_committed_write_survives_a_remount_through_another_device() {
    needs_loop_devices();
    let scratch = tempfile::Builder::new()
        .prefix("fencepost-remount-")
        .tempdir()
        .expect("scratch");
    let image = scratch.path().join("fs.img");
    let dir = scratch.path().join("mnt");
    std::fs::create_dir(&dir).expect("mount point");
    run(Command::new("truncate").arg("-s").arg("16M").arg(&image));
    run(Command::new("mkfs.ext4").arg("-q").arg(&image));
    let mut mounted = Mounted {
        image,
        dir: dir.clone(),
        loops: Vec::new(),
    };
    let first = mounted.attach();
    let root = dir.join("root");
    std::fs::create_dir(&root).expect("root");
    let fp = |args: &[&str], stdin: &[u8], now: i64| {
        let mut cmd = fp_command(&root, args, now);
        run_with_stdin(&mut cmd, stdin)
    };
    let v0 = version("v0", 700);
    let v1 = version("v1", 900);
    assert_eq!(
        fp(&["claim", RES, "--owner", "Z", "--ttl", "10"], b"", 0).0,
        Some(0)
    );
    assert_eq!(fp(&["write", RES, "--epoch", "1"], &v0, 1).0, Some(0));
    assert_eq!(
        fp(&["claim", RES, "--owner", "B", "--ttl", "10"], b"", 20).0,
        Some(0)
    );
    let mut cmd = fp_command(&root, &["write", RES, "--epoch", "2"], 21);
    cmd.env("FAILPOINTS", "txn.after_commit=return(abort)");
    let (code, _) = run_with_stdin(&mut cmd, &v1);
    assert_eq!(code, None, "the write is killed after its COMMIT");
    mounted.unmount();
    let second = mounted.attach();
    assert_ne!(first, second, "mounted through another device");
    let out = fp(&["recover"], b"", 30);
    assert_eq!(out.0, Some(0), "{}", out.1);
    assert_eq!(
        std::fs::read(root.join(RES)).ok(),
        Some(v1),
        "the committed v1 is kept: {}",
        out.1
    );
    let out = fp(&["verify"], b"", 30);
    assert_eq!(out.0, Some(0), "{}", out.1);
}

/// `fencepost --root ROOT --now NOW ARGS`, with a clean environment.
fn fp_command(root: &Path, args: &[&str], now: i64) -> Command {
    let mut cmd = Command::new(crate::harness::bin());
    cmd.env_clear()
        .current_dir(root)
        .arg("--root")
        .arg(root)
        .arg("--now")
        .arg(now.to_string())
        .args(args);
    cmd
}

/// Runs `cmd` with `stdin`; its exit code (None if killed) and its stdout and stderr.
fn run_with_stdin(cmd: &mut Command, stdin: &[u8]) -> (Option<i32>, String) {
    use std::io::Write as _;
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn fencepost");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}
