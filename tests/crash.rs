//! Crash safety (issue 4, docs/crash-safety.md): every failpoint of `write` and `claim`
//! hit as a returned error, as a real crash (`abort`) and as a SIGKILL while the process
//! is blocked at that step; then `status` before recovery, the next command, and the
//! invariants. Also: temp files of a live (paused) writer versus an abandoned one, hand
//! edits after a crash, refused writes, and a state file held locked by another process.
//!
//! The helpers are shared with `strace.rs` and `torture.rs`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};
use tempfile::TempDir;

use crate::harness::{Env, bin};

pub const RES: &str = "doc.md";

/// Contents of different sizes, so a torn or mixed document cannot pass for a version.
pub fn version(tag: &str, size: usize) -> Vec<u8> {
    let line = format!("{tag}: the quick brown fox jumps over the lazy dog\n");
    line.bytes().cycle().take(size.max(line.len())).collect()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A `fencepost` command for `env`, as the harness runs it, but not yet started.
pub fn command(env: &Env, args: &[&str], now: Option<i64>) -> Command {
    let mut cmd = Command::new(bin());
    cmd.env_clear()
        .current_dir(env.root())
        .arg("--root")
        .arg(env.root());
    if let Some(now) = now {
        cmd.arg("--now").arg(now.to_string());
    }
    cmd.args(args);
    cmd
}

/// One resource's row of `status --json`.
pub fn status_row(env: &Env, res: &str, now: Option<i64>) -> Value {
    let mut run = env.fp(&["--json", "status", res]);
    if let Some(now) = now {
        run = run.now(now);
    }
    let j = run.expect(0).json();
    j["resources"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["resource"] == res))
        .cloned()
        .unwrap_or_else(|| panic!("status has no row for {res}: {j}"))
}

/// Files the tool owns next to documents: temp files and recovery links.
pub fn tool_files(env: &Env) -> Vec<String> {
    env.files()
        .into_iter()
        .filter(|f| f.contains(".fencepost-"))
        .collect()
}

pub fn temp_files(env: &Env) -> Vec<String> {
    env.files()
        .into_iter()
        .filter(|f| f.contains(".fencepost-tmp-"))
        .collect()
}

pub fn link_files(env: &Env) -> Vec<String> {
    env.files()
        .into_iter()
        .filter(|f| f.contains(".fencepost-pre-") || f.contains(".fencepost-new-"))
        .collect()
}

/// Invariant 3: the document is `want` (bytes and the epoch they were written under),
/// and the record's epoch and SHA-256 describe exactly those bytes; or, for `None`, no
/// document and no recorded content.
pub fn assert_consistent(
    env: &Env,
    res: &str,
    now: Option<i64>,
    want: Option<(&[u8], i64)>,
    what: &str,
) {
    let row = status_row(env, res, now);
    let doc = env.read(res);
    match want {
        Some((bytes, epoch)) => {
            assert!(
                doc.as_deref() == Some(bytes),
                "{what}: document is not the expected version ({} bytes, wanted {}); row {row}",
                doc.as_ref().map_or(0, Vec::len),
                bytes.len()
            );
            assert_eq!(row["document"]["state"], "matches", "{what}: {row}");
            assert_eq!(row["sink"]["content_epoch"], epoch, "{what}: {row}");
            assert_eq!(row["sink"]["sha256"], sha256_hex(bytes), "{what}: {row}");
            assert_eq!(
                row["document"]["sha256"],
                sha256_hex(bytes),
                "{what}: {row}"
            );
        }
        None => {
            assert_eq!(doc, None, "{what}: a document exists");
            assert_eq!(row["document"]["state"], "absent", "{what}: {row}");
            assert!(
                row["sink"].is_null() || row["sink"]["content_epoch"].is_null(),
                "{what}: {row}"
            );
        }
    }
}

/// Runs `mkfifo`.
pub fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo")
        .success();
    assert!(ok, "mkfifo {}", path.display());
}

/// Sends a signal with kill(1) (the tests use no libc).
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// A `fencepost` process blocked at a failpoint (`return(wait:PATH)`).
pub struct Paused {
    /// `None` once finished; a `Paused` dropped early (a failing test) SIGKILLs it.
    child: Option<Child>,
    pub pid: u32,
    point: String,
    resume: PathBuf,
    _fifos: TempDir,
}

/// Starts `fencepost ARGS` with `stdin` and waits until it is blocked at `point`.
pub fn spawn_paused(
    env: &Env,
    args: &[&str],
    now: Option<i64>,
    stdin: &[u8],
    point: &str,
) -> Paused {
    spawn_paused_via(&[], env, args, now, stdin, point)
}

/// The same, started through `wrapper` (e.g. setpriv, to run as another user), which
/// must exec fencepost in its own process.
pub fn spawn_paused_via(
    wrapper: &[&str],
    env: &Env,
    args: &[&str],
    now: Option<i64>,
    stdin: &[u8],
    point: &str,
) -> Paused {
    spawn_paused_also(wrapper, env, args, now, stdin, point, "")
}

/// [`spawn_paused_via`] with more failpoints set (`also`, in the `FAILPOINTS` syntax,
/// e.g. `write.after_rename=return(abort)`), to hit once the process is resumed.
pub fn spawn_paused_also(
    wrapper: &[&str],
    env: &Env,
    args: &[&str],
    now: Option<i64>,
    stdin: &[u8],
    point: &str,
    also: &str,
) -> Paused {
    let fifos = tempfile::Builder::new()
        .prefix("fencepost-fifo-")
        .tempdir()
        .expect("fifo dir");
    let base = fifos.path().join("fp");
    let ready = PathBuf::from(format!("{}.ready", base.display()));
    let resume = PathBuf::from(format!("{}.resume", base.display()));
    mkfifo(&resume);
    let mut cmd = command(env, args, now);
    if let Some((program, rest)) = wrapper.split_first() {
        // Another user must be able to signal and wait through the FIFOs.
        let open = |path: &Path, mode| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod")
        };
        open(fifos.path(), 0o777);
        open(&resume, 0o666);
        let inner = cmd;
        cmd = Command::new(program);
        cmd.args(rest)
            .arg(inner.get_program())
            .args(inner.get_args())
            .env_clear()
            .current_dir(env.root());
    }
    let mut child = cmd
        .env(
            "FAILPOINTS",
            format!("{point}=return(wait:{});{also}", base.display()),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fencepost");
    {
        let mut input = child.stdin.take().expect("stdin");
        input.write_all(stdin).expect("write stdin");
    }
    let started = Instant::now();
    let pid = loop {
        if let Ok(text) = std::fs::read_to_string(&ready)
            && let Some(line) = text.strip_suffix('\n')
        {
            break line.trim().parse::<u32>().expect("pid in the ready file");
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            let out = child.wait_with_output().expect("output");
            panic!(
                "fencepost {args:?} exited ({status}) before reaching {point}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "fencepost {args:?} never reached {point}"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    assert_eq!(
        pid,
        child.id(),
        "the ready file names the process we started"
    );
    Paused {
        child: Some(child),
        pid,
        point: point.to_string(),
        resume,
        _fifos: fifos,
    }
}

impl Paused {
    /// SIGKILLs the process where it is blocked.
    pub fn kill(mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        let status = child.wait().expect("wait");
        assert_eq!(
            status.signal(),
            Some(9),
            "killed at {}: {status}",
            self.point
        );
    }

    /// Lets it go on from the failpoint and waits for it to finish.
    pub fn resume(mut self) -> Output {
        drop(
            std::fs::OpenOptions::new()
                .write(true)
                .open(&self.resume)
                .expect("open the resume fifo"),
        );
        let child = self.child.take().expect("running");
        child.wait_with_output().expect("wait")
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Another process (python3's sqlite3) with the state file open, having run `sql`
/// (e.g. `BEGIN IMMEDIATE` to hold the write lock), until [`DbHolder::finish`] or
/// [`DbHolder::kill`].
pub struct DbHolder {
    child: Child,
}

impl DbHolder {
    pub fn start(env: &Env, sql: &str) -> DbHolder {
        let script = "import sqlite3, sys\n\
                      c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=0)\n\
                      c.execute(sys.argv[2]).fetchall()\n\
                      print('ready', flush=True)\n\
                      sys.stdin.read()\n";
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(env.path(".fencepost/state.db"))
            .arg(sql)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 is needed to hold the state file open");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read");
        assert_eq!(line.trim(), "ready", "the python3 holder did not start");
        DbHolder { child }
    }

    /// Lets it close the connection and exit.
    pub fn finish(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().expect("wait").success());
    }

    /// SIGKILLs it: its connection is never closed.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }
}

pub fn killed_by(status: ExitStatus) -> Option<i32> {
    status.signal()
}

/// How the process meets the failpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `return(...)`: the command fails with an error and cleans up.
    Error,
    /// `return(abort)`: `std::process::abort()`, no destructors, no cleanup.
    Abort,
    /// `return(wait:...)`, then SIGKILL while blocked there.
    Kill,
}

const MODES: [Mode; 3] = [Mode::Error, Mode::Abort, Mode::Kill];

/// How far a write got when it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Nothing visible changed: the old document and record stand.
    BeforeRename,
    /// The new bytes are in place, the record is the old one: recovery rolls back.
    Renamed,
    /// COMMIT happened: the new document and record stand.
    Committed,
}

fn stage_of(point: &str) -> Stage {
    match point {
        "write.before_stage"
        | "write.after_temp_write"
        | "write.after_temp_fsync"
        | "write.before_lock"
        | "txn.after_begin"
        | "write.after_pre_link"
        | "write.after_new_link" => Stage::BeforeRename,
        "write.after_rename" | "write.after_dir_fsync" | "txn.before_commit" => Stage::Renamed,
        "txn.after_commit" | "write.before_cleanup" => Stage::Committed,
        other => panic!("unknown write failpoint {other}"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// The document does not exist yet (no pre-image).
    First,
    /// The document holds epoch 1's bytes; epoch 2 rewrites it.
    Rewrite,
}

/// The command run after the crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// The same writer retries the same bytes under the same epoch.
    Retry,
    /// Another worker takes over (claim runs recovery for the resource).
    Claim,
    /// `fencepost recover` (all resources).
    Recover,
}

pub fn old() -> Vec<u8> {
    version("old", 3000)
}
pub fn new() -> Vec<u8> {
    version("new", 5000)
}
pub fn newer() -> Vec<u8> {
    version("newer", 700)
}

/// Sets up the scenario; returns the crashing writer's epoch and what stands before it.
pub fn setup(env: &Env, scenario: Scenario) -> (i64, Option<(Vec<u8>, i64)>) {
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

/// Makes `fencepost ARGS` stop at `point` in `mode`.
fn crash(env: &Env, args: &[&str], now: i64, stdin: &[u8], point: &str, mode: Mode, what: &str) {
    match mode {
        Mode::Error => {
            let done = env
                .fp(args)
                .now(now)
                .stdin(stdin)
                .env("FAILPOINTS", &format!("{point}=return(injected)"))
                .expect(1);
            assert!(
                done.stderr.contains(&format!("failpoint {point} fired")),
                "{what}: {}",
                done.stderr
            );
            assert_eq!(
                done.stdout, "",
                "{what}: a failed command reports no outcome"
            );
        }
        Mode::Abort => {
            let done = env
                .fp(args)
                .now(now)
                .stdin(stdin)
                .env("FAILPOINTS", &format!("{point}=return(abort)"))
                .output();
            assert_eq!(done.code, -1, "{what}: not killed by abort: {done:?}");
            assert_eq!(
                done.stdout, "",
                "{what}: a crashed command reports no outcome"
            );
        }
        Mode::Kill => spawn_paused(env, args, Some(now), stdin, point).kill(),
    }
}

fn write_case(point: &str, mode: Mode, scenario: Scenario, next: Next) {
    let what = format!("{point} {mode:?} {scenario:?} then {next:?}");
    let env = Env::new();
    let (epoch, before) = setup(&env, scenario);
    let before = before.as_ref().map(|(b, e)| (b.as_slice(), *e));
    let (new, newer) = (new(), newer());
    let e = epoch.to_string();
    let args = ["write", RES, "--epoch", e.as_str()];
    crash(&env, &args, 20, &new, point, mode, &what);

    let stage = stage_of(point);
    let committed = stage == Stage::Committed;
    let mut standing = if committed {
        Some((new.as_slice(), epoch))
    } else {
        before
    };

    // Before any recovery: status is read-only and says what happened. The document is
    // one complete version; the record describes the committed state.
    let row = status_row(&env, RES, Some(20));
    let doc = env.read(RES);
    if mode != Mode::Error && stage == Stage::Renamed {
        assert_eq!(row["document"]["state"], "interrupted", "{what}: {row}");
        assert!(
            doc.as_deref() == Some(new.as_slice()),
            "{what}: not the staged version"
        );
    } else {
        let want = if standing.is_some() {
            "matches"
        } else {
            "absent"
        };
        assert_eq!(row["document"]["state"], want, "{what}: {row}");
        assert!(
            doc.as_deref() == standing.map(|s| s.0),
            "{what}: document changed"
        );
    }
    match standing {
        Some((bytes, e)) => {
            assert_eq!(row["sink"]["content_epoch"], e, "{what}: {row}");
            assert_eq!(row["sink"]["sha256"], sha256_hex(bytes), "{what}: {row}");
        }
        None => assert!(row["sink"]["content_epoch"].is_null(), "{what}: {row}"),
    }
    if mode == Mode::Error {
        // A command that fails (rather than dies) undoes its own work.
        assert_eq!(tool_files(&env), Vec::<String>::new(), "{what}: leftovers");
    }

    match next {
        Next::Retry => {
            let outcome = if committed { "replay" } else { "written" };
            env.fp(&args)
                .now(21)
                .stdin(new.clone())
                .expect_stdout(0, outcome);
            standing = Some((new.as_slice(), epoch));
            assert_eq!(tool_files(&env), Vec::<String>::new(), "{what}: leftovers");
        }
        Next::Claim => {
            assert_eq!(env.claim(RES, "C", 100, 200), epoch + 1, "{what}");
            // claim recovers the document; only write and recover sweep temp files.
            assert_eq!(link_files(&env), Vec::<String>::new(), "{what}: links left");
        }
        Next::Recover => {
            env.fp(&["recover"]).now(200).expect(0);
            assert_eq!(tool_files(&env), Vec::<String>::new(), "{what}: leftovers");
        }
    }
    assert_consistent(&env, RES, Some(201), standing, &what);

    // The resource works on: a takeover writes a third version and leaves no files.
    let e3 = env.claim(RES, "D", 100, 300);
    env.fp(&["write", RES, "--epoch", &e3.to_string()])
        .now(301)
        .stdin(newer.clone())
        .expect_stdout(0, "written");
    assert_eq!(env.files(), vec![RES.to_string()], "{what}");
    assert_consistent(&env, RES, Some(302), Some((&newer, e3)), &what);
}

fn write_point(point: &str) {
    for mode in MODES {
        for scenario in [Scenario::First, Scenario::Rewrite] {
            for next in [Next::Retry, Next::Claim, Next::Recover] {
                write_case(point, mode, scenario, next);
            }
        }
    }
}

#[test]
fn write_before_stage() {
    write_point("write.before_stage");
}

#[test]
fn write_after_begin() {
    write_point("txn.after_begin");
}

#[test]
fn write_before_cleanup() {
    write_point("write.before_cleanup");
}

#[test]
fn write_after_temp_write() {
    write_point("write.after_temp_write");
}

#[test]
fn write_after_temp_fsync() {
    write_point("write.after_temp_fsync");
}

#[test]
fn write_before_lock() {
    write_point("write.before_lock");
}

#[test]
fn write_after_pre_link() {
    write_point("write.after_pre_link");
}

#[test]
fn write_after_new_link() {
    write_point("write.after_new_link");
}

#[test]
fn write_after_rename() {
    write_point("write.after_rename");
}

#[test]
fn write_after_dir_fsync() {
    write_point("write.after_dir_fsync");
}

#[test]
fn write_before_commit() {
    write_point("txn.before_commit");
}

#[test]
fn write_after_commit() {
    write_point("txn.after_commit");
}

/// A takeover claim that stops at a failpoint either happened entirely (new lease, fence
/// raised) or not at all (old lease, old fence, and the next claim gets the same epoch).
fn claim_point(point: &str) {
    let committed = point == "txn.after_commit";
    for mode in MODES {
        let what = format!("claim {point} {mode:?}");
        let env = Env::new();
        let old = old();
        assert_eq!(env.claim(RES, "A", 10, 0), 1);
        env.fp(&["write", RES, "--epoch", "1"])
            .now(1)
            .stdin(old.clone())
            .expect_stdout(0, "written");
        let args = ["claim", RES, "--owner", "B", "--ttl", "100"];
        crash(&env, &args, 10, b"", point, mode, &what);

        let row = status_row(&env, RES, Some(11));
        let (owner, epoch) = if committed { ("B", 2) } else { ("A", 1) };
        assert_eq!(row["lease"]["owner"], owner, "{what}: {row}");
        assert_eq!(row["lease"]["epoch"], epoch, "{what}: {row}");
        assert_eq!(row["sink"]["fence"], epoch, "{what}: {row}");
        assert_consistent(&env, RES, Some(11), Some((&old, 1)), &what);
        assert_eq!(env.files(), vec![RES.to_string()], "{what}");

        // The old holder is fenced off exactly when the takeover committed.
        let late = env
            .fp(&["write", RES, "--epoch", "1"])
            .now(11)
            .stdin(old.clone());
        if committed {
            late.expect(5);
            env.fp(&["claim", RES, "--owner", "C", "--ttl", "5"])
                .now(11)
                .expect(3);
        } else {
            late.expect_stdout(0, "replay");
            assert_eq!(env.claim(RES, "C", 5, 11), 2, "{what}: an epoch was lost");
        }
        assert_consistent(&env, RES, Some(12), Some((&old, 1)), &what);
    }
}

#[test]
fn claim_before_commit() {
    claim_point("claim.before_commit");
}

#[test]
fn claim_txn_before_commit() {
    claim_point("txn.before_commit");
}

#[test]
fn claim_txn_after_commit() {
    claim_point("txn.after_commit");
}

/// Invariant 5: a writer still alive (here blocked between staging and locking, then also
/// SIGSTOPped) keeps its temp file through other processes' `write` and `recover`; once
/// it goes on, it cleans up after itself. An abandoned temp file (writer SIGKILLed) is
/// removed by `recover`, or by the next `write` of that document.
#[test]
fn live_writers_temp_survives_others_and_abandoned_temp_is_removed() {
    let env = Env::new();
    let (old, new, newer) = (old(), new(), newer());
    assert_eq!(env.claim(RES, "A", 10, 0), 1);
    env.write(RES, 1, std::str::from_utf8(&old).expect("utf-8"), 1, 0);
    assert_eq!(env.claim(RES, "B", 100, 10), 2);

    let paused = spawn_paused(
        &env,
        &["write", RES, "--epoch", "2"],
        Some(11),
        &new,
        "write.before_lock",
    );
    let temps = temp_files(&env);
    assert_eq!(temps.len(), 1, "the paused writer's staged file: {temps:?}");
    env.fp(&["recover"]).now(12).expect(0);
    assert_eq!(
        temp_files(&env),
        temps,
        "recover removed a live writer's temp file"
    );
    signal(paused.pid, "STOP");
    assert_eq!(env.claim(RES, "C", 100, 200), 3);
    env.fp(&["write", RES, "--epoch", "3"])
        .now(201)
        .stdin(newer.clone())
        .expect_stdout(0, "written");
    env.fp(&["recover"]).now(202).expect(0);
    assert_eq!(
        temp_files(&env),
        temps,
        "another write or recover removed a paused writer's temp file"
    );
    signal(paused.pid, "CONT");
    let out = paused.resume();
    assert_eq!(
        out.status.code(),
        Some(5),
        "the late writer is stale: {out:?}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "stale");
    assert_eq!(
        env.files(),
        vec![RES.to_string()],
        "the refused writer left files"
    );
    assert_consistent(
        &env,
        RES,
        Some(203),
        Some((&newer, 3)),
        "after the late writer",
    );

    // Abandoned: SIGKILLed while holding a staged file. status only looks; recover removes.
    assert_eq!(env.claim(RES, "D", 100, 400), 4);
    let args = ["write", RES, "--epoch", "4"];
    spawn_paused(&env, &args, Some(401), &new, "write.before_lock").kill();
    assert_eq!(temp_files(&env).len(), 1);
    let row = status_row(&env, RES, Some(402));
    assert_eq!(row["document"]["state"], "matches", "{row}");
    assert_eq!(temp_files(&env).len(), 1, "status is read-only");
    let done = env.fp(&["recover"]).now(402).expect(0);
    assert!(
        done.stdout.contains("1 temp file(s) removed"),
        "{}",
        done.stdout
    );
    assert_eq!(env.files(), vec![RES.to_string()]);

    // Or by the next write of the document.
    spawn_paused(&env, &args, Some(403), &new, "write.after_temp_fsync").kill();
    assert_eq!(temp_files(&env).len(), 1);
    env.fp(&args)
        .now(404)
        .stdin(new.clone())
        .expect_stdout(0, "written");
    assert_eq!(env.files(), vec![RES.to_string()]);
    assert_consistent(
        &env,
        RES,
        Some(405),
        Some((&new, 4)),
        "after the next write",
    );
}

/// Crashes an epoch-2 rewrite at `point` (abort); returns the env, as the next
/// command would find it.
fn crashed_rewrite(point: &str) -> Env {
    let env = Env::new();
    setup(&env, Scenario::Rewrite);
    crash(
        &env,
        &["write", RES, "--epoch", "2"],
        20,
        &new(),
        point,
        Mode::Abort,
        point,
    );
    env
}

/// Replaces the document the way editors and other programs do: a new file renamed over.
fn replace_by_hand(env: &Env, bytes: &[u8]) {
    let tmp = env.path("hand-edit.tmp");
    std::fs::write(&tmp, bytes).expect("write");
    std::fs::rename(&tmp, env.path(RES)).expect("rename");
}

fn assert_drifted(env: &Env, hand: &[u8], recorded: (&[u8], i64), what: &str) {
    let row = status_row(env, RES, Some(30));
    assert_eq!(row["document"]["state"], "drifted", "{what}: {row}");
    assert_eq!(
        env.read(RES).as_deref(),
        Some(hand),
        "{what}: hand edit lost"
    );
    assert_eq!(row["sink"]["content_epoch"], recorded.1, "{what}: {row}");
    assert_eq!(
        row["sink"]["sha256"],
        sha256_hex(recorded.0),
        "{what}: adopted"
    );
}

/// Invariant 7: a document replaced behind the tool's back after a write died between
/// its rename and its commit is reported drifted, and neither recovery nor a refused
/// write restores the pre-image over it or adopts it into the record.
#[test]
fn hand_replaced_document_after_uncommitted_crash_is_drifted_never_restored_over() {
    let env = crashed_rewrite("write.after_rename");
    assert_eq!(
        status_row(&env, RES, Some(21))["document"]["state"],
        "interrupted"
    );
    let hand = version("by hand", 1234);
    replace_by_hand(&env, &hand);
    assert_drifted(&env, &hand, (&old(), 1), "after the hand edit");
    env.fp(&["recover"]).now(22).expect(0);
    assert_drifted(&env, &hand, (&old(), 1), "after recover");
    assert_eq!(tool_files(&env), Vec::<String>::new());
    // A refused (stale) write changes nothing either.
    env.fp(&["write", RES, "--epoch", "1"])
        .now(23)
        .stdin("x")
        .expect(5);
    assert_drifted(&env, &hand, (&old(), 1), "after a refused write");
    // A claim runs recovery too.
    assert_eq!(env.claim(RES, "C", 100, 200), 3);
    assert_drifted(&env, &hand, (&old(), 1), "after a claim");
    // An accepted write replaces the document: that is its job.
    env.fp(&["write", RES, "--epoch", "3"])
        .now(201)
        .stdin(newer())
        .expect_stdout(0, "written");
    assert_consistent(&env, RES, Some(202), Some((&newer(), 3)), "after a write");
}

/// Invariant 7 for an edit made in place (same inode) to a document left `interrupted` by a
/// write that died between its rename and its commit: the edited file is no longer the
/// staged content, so recovery keeps it and `status` calls it drifted (untracked for a
/// first write), rather than rolling the edit back with the crashed write.
#[test]
fn hand_edit_in_place_of_interrupted_document_is_kept() {
    for scenario in [Scenario::Rewrite, Scenario::First] {
        let env = Env::new();
        let (epoch, _) = setup(&env, scenario);
        let e = epoch.to_string();
        let what = format!("{scenario:?}");
        crash(
            &env,
            &["write", RES, "--epoch", &e],
            20,
            &new(),
            "write.after_rename",
            Mode::Abort,
            &what,
        );
        assert_eq!(
            status_row(&env, RES, Some(21))["document"]["state"],
            "interrupted"
        );
        let hand = version("by hand", 5000);
        std::fs::write(env.path(RES), &hand).expect("edit in place");
        let want = if scenario == Scenario::First {
            "untracked"
        } else {
            "drifted"
        };
        assert_eq!(
            status_row(&env, RES, Some(21))["document"]["state"],
            want,
            "{what}"
        );
        env.fp(&["recover"]).now(22).expect(0);
        let row = status_row(&env, RES, Some(22));
        assert_eq!(row["document"]["state"], want, "{what}: {row}");
        assert_eq!(
            env.read(RES).as_deref(),
            Some(hand.as_slice()),
            "{what}: edit lost"
        );
        if scenario == Scenario::Rewrite {
            assert_drifted(&env, &hand, (&old(), 1), &what);
        }
        assert_eq!(tool_files(&env), Vec::<String>::new(), "{what}");
    }
}

/// Invariant 7 after a committed write that died before removing its links: the document
/// is edited in place (same inode as the recorded file and the `-new` link).
#[test]
fn hand_edit_in_place_after_committed_crash_is_drifted_never_restored_over() {
    let env = crashed_rewrite("txn.after_commit");
    assert_eq!(link_files(&env).len(), 2, "the crash left both links");
    let hand = version("by hand", 5000);
    std::fs::write(env.path(RES), &hand).expect("edit in place");
    assert_drifted(&env, &hand, (&new(), 2), "after the hand edit");
    assert_eq!(env.claim(RES, "C", 100, 200), 3);
    assert_drifted(&env, &hand, (&new(), 2), "after a claim");
    assert_eq!(link_files(&env), Vec::<String>::new());
    env.fp(&["recover"]).now(201).expect(0);
    assert_drifted(&env, &hand, (&new(), 2), "after recover");
}

/// Invariant 7 when the write died before its rename: an in-place edit also changes the
/// `-pre` link (same inode), and a replacement is a new file; recovery keeps both.
#[test]
fn hand_edit_after_crash_before_rename_is_drifted_never_restored_over() {
    for in_place in [true, false] {
        let env = crashed_rewrite("write.after_new_link");
        let hand = version("by hand", 3000);
        if in_place {
            std::fs::write(env.path(RES), &hand).expect("edit in place");
        } else {
            replace_by_hand(&env, &hand);
        }
        let what = if in_place { "in place" } else { "replaced" };
        assert_drifted(&env, &hand, (&old(), 1), what);
        env.fp(&["recover"]).now(22).expect(0);
        assert_drifted(&env, &hand, (&old(), 1), what);
        assert_eq!(tool_files(&env), Vec::<String>::new(), "{what}");
    }
}

/// A first write that died after its rename, then a file put there by hand: recovery does
/// not remove it (it is not the staged file), and status calls it untracked.
#[test]
fn hand_made_document_after_uncommitted_first_write_is_kept() {
    let env = Env::new();
    setup(&env, Scenario::First);
    crash(
        &env,
        &["write", RES, "--epoch", "1"],
        20,
        &new(),
        "write.after_rename",
        Mode::Abort,
        "first",
    );
    assert_eq!(
        status_row(&env, RES, Some(21))["document"]["state"],
        "interrupted"
    );
    let hand = version("by hand", 100);
    replace_by_hand(&env, &hand);
    env.fp(&["recover"]).now(22).expect(0);
    let row = status_row(&env, RES, Some(22));
    assert_eq!(row["document"]["state"], "untracked", "{row}");
    assert_eq!(env.read(RES).as_deref(), Some(hand.as_slice()));
    assert_eq!(env.files(), vec![RES.to_string()]);
}

/// Invariant 6: stale, conflict and unissued writes change neither the document nor the
/// record, and leave no file behind (the conflict is found only after staging).
#[test]
fn refused_writes_leave_nothing() {
    let env = Env::new();
    setup(&env, Scenario::Rewrite);
    let new = new();
    env.fp(&["write", RES, "--epoch", "2"])
        .now(20)
        .stdin(new.clone())
        .expect_stdout(0, "written");
    for (epoch, code, outcome) in [
        ("1", 5, "stale"),
        ("2", 6, "conflict"),
        ("9", 8, "unissued"),
    ] {
        let done = env
            .fp(&["--json", "write", RES, "--epoch", epoch])
            .now(21)
            .stdin(version("refused", 4000))
            .expect(code);
        assert_eq!(done.json()["outcome"], outcome);
        assert_eq!(env.files(), vec![RES.to_string()], "{outcome} left files");
        assert_consistent(&env, RES, Some(21), Some((&new, 2)), outcome);
    }
}

/// Invariant 8: with the state file's write lock held by another process past the busy
/// timeout, `write` exits 7, the document is untouched and no temp file remains.
#[test]
fn write_blocked_by_a_held_lock_exits_7_and_changes_nothing() {
    let env = Env::new();
    setup(&env, Scenario::Rewrite);
    let holder = DbHolder::start(&env, "BEGIN IMMEDIATE");

    let started = Instant::now();
    let done = env
        .fp(&["--busy-timeout", "200ms", "write", RES, "--epoch", "2"])
        .now(20)
        .stdin(new())
        .expect(7);
    let waited = started.elapsed();
    assert!(done.stderr.contains("locked"), "{}", done.stderr);
    assert!(
        waited >= Duration::from_millis(200),
        "gave up after {waited:?}"
    );
    assert_eq!(
        env.files(),
        vec![RES.to_string()],
        "a busy write left files"
    );
    assert_eq!(env.read(RES), Some(old()));

    holder.finish();
    assert_consistent(
        &env,
        RES,
        Some(21),
        Some((&old(), 1)),
        "after the busy write",
    );
    env.fp(&["write", RES, "--epoch", "2"])
        .now(21)
        .stdin(new())
        .expect_stdout(0, "written");
}
