//! Crash safety (docs/crash-safety.md): every failpoint of `write`, `remove` and `claim`
//! hit as a returned error, as a real crash (`abort`) and as a SIGKILL while the process
//! is blocked at that step; then `status` before recovery, the next command, and the
//! invariants. Also: temp files of a live (paused) writer versus an abandoned one, hand
//! edits after a crash, refused writes, and a state file held locked by another process.
//! "Promise N" is the Nth promise of docs/crash-safety.md. The helpers it shares with
//! other modules are in `support`.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use crate::harness::{Env, Run};
use crate::support::{
    DbHolder, REMOVE_POINTS, RES, Scenario, assert_consistent, assert_removed, assert_version,
    gone_files, link_files, new, newer, old, setup, sha256_hex, signal, spawn_paused,
    spawn_paused_via, status_row, temp_files, tool_files, version,
};

mod trees;

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

/// How far a write (or a removal) got when it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Nothing visible changed: the old document and record stand.
    BeforeRename,
    /// The new bytes are in place (a removal: the document is renamed aside), the record
    /// is the old one: recovery rolls back.
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
/// The command run after the crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// The same writer retries the same bytes (or the same removal) under the same version.
    Retry,
    /// Another worker takes over (claim runs recovery for the resource).
    Claim,
    /// `fencepost recover` (all resources).
    Recover,
}
/// Makes `fencepost ARGS` stop at `point` in `mode`.
fn crash(env: &Env, args: &[&str], now: i64, stdin: &[u8], point: &str, mode: Mode, what: &str) {
    crash_with(env, &[], args, now, stdin, point, mode, what);
}

/// `crash`, with the environment variables `vars` set for the process.
#[expect(clippy::too_many_arguments, reason = "crash's, and the variables")]
fn crash_with(
    env: &Env,
    vars: &[(&str, &str)],
    args: &[&str],
    now: i64,
    stdin: &[u8],
    point: &str,
    mode: Mode,
    what: &str,
) {
    let with_vars = |run: Run| vars.iter().fold(run, |run, (k, v)| run.env(k, v));
    match mode {
        Mode::Error => {
            let done = with_vars(env.fp(args))
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
            let done = with_vars(env.fp(args))
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
        Mode::Kill => {
            let set: Vec<String> = vars.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let wrapper: Vec<&str> = std::iter::once("env")
                .chain(set.iter().map(String::as_str))
                .collect();
            let wrapper = if vars.is_empty() { &[][..] } else { &wrapper };
            spawn_paused_via(wrapper, env, args, Some(now), stdin, point).kill();
        }
    }
}

fn write_case(point: &str, mode: Mode, scenario: Scenario, next: Next) {
    write_case_from(point, mode, scenario, next, false);
}

/// A small `--from` file's fsync runs on a second thread whatever the machine's load (a
/// build with failpoints reads this; see `cpu_to_spare` in the write).
const OVERLAP_ALWAYS: &[(&str, &str)] = &[("FENCEPOST_TEST_OVERLAP", "always")];

/// `write_case`, the content given on stdin or, with `from`, as a small `--from` file
/// (staged before the state file opens, its fsync on a second thread meanwhile).
fn write_case_from(point: &str, mode: Mode, scenario: Scenario, next: Next, from: bool) {
    let what = format!("{point} {mode:?} {scenario:?} then {next:?}, from a file: {from}");
    let env = Env::new();
    let (epoch, before) = setup(&env, scenario);
    let before = before.as_ref().map(|(b, e)| (b.as_slice(), *e));
    let (new, newer) = (new(), newer());
    let e = epoch.to_string();
    let content = tempfile::NamedTempFile::new().expect("content file");
    std::fs::write(content.path(), &new).expect("content");
    let content = content.path().to_str().expect("utf-8 path");
    let mut args = vec!["write", RES, "--epoch", e.as_str()];
    if from {
        args.extend(["--from", content]);
    }
    let args = args.as_slice();
    let vars = if from { OVERLAP_ALWAYS } else { &[] };
    crash_with(&env, vars, args, 20, &new, point, mode, &what);

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
            env.fp(args)
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

/// The failpoints a small `--from` write meets while it stages beside the state file's
/// open, each hit in every mode: the same outcomes as on stdin.
#[test]
fn small_from_writes_stopped_while_they_stage() {
    for point in [
        "write.before_stage",
        "write.after_temp_write",
        "write.after_temp_fsync",
    ] {
        for mode in MODES {
            for scenario in [Scenario::First, Scenario::Rewrite] {
                for next in [Next::Retry, Next::Recover] {
                    write_case_from(point, mode, scenario, next, true);
                }
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

/// A lease's second version (`--seq 2`, over seq 1's document) stopped at `point` in
/// `mode`, then `next`. Before its COMMIT seq 1's document and record stand once
/// recovered, and seq 1 sent again is a replay; from its COMMIT on seq 2's stand, and seq 1
/// sent again is stale: an acknowledged version never goes back to an earlier one of the
/// same lease. The retry of seq 2 is written (a replay once committed).
fn seq_write_case(point: &str, mode: Mode, next: Next) {
    let what = format!("write --seq 2: {point} {mode:?} then {next:?}");
    let env = Env::new();
    let (first, second) = (old(), new());
    assert_eq!(env.claim(RES, "A", 100, 0), 1);
    let seq1 = ["write", RES, "--epoch", "1", "--seq", "1"];
    env.fp(&seq1)
        .now(1)
        .stdin(first.clone())
        .expect_stdout(0, "written");
    let seq2 = ["write", RES, "--epoch", "1", "--seq", "2"];
    crash(&env, &seq2, 20, &second, point, mode, &what);

    let stage = stage_of(point);
    let committed = stage == Stage::Committed;
    let (first_version, second_version) = ((first.clone(), 1, 1), (second.clone(), 1, 2));
    let mut standing = if committed {
        &second_version
    } else {
        &first_version
    };

    // Before any recovery: status only looks.
    let row = status_row(&env, RES, Some(20));
    let doc = env.read(RES);
    if mode != Mode::Error && stage == Stage::Renamed {
        assert_eq!(row["document"]["state"], "interrupted", "{what}: {row}");
        assert!(doc == Some(second.clone()), "{what}: not seq 2's bytes");
    } else {
        assert_eq!(row["document"]["state"], "matches", "{what}: {row}");
        assert!(
            doc.as_ref() == Some(&standing.0),
            "{what}: document changed"
        );
    }
    assert_record(&row, Some(standing), &what);
    if mode == Mode::Error {
        assert_eq!(tool_files(&env), Vec::<String>::new(), "{what}: leftovers");
    }

    match next {
        Next::Retry => {
            let outcome = if committed { "replay" } else { "written" };
            env.fp(&seq2)
                .now(21)
                .stdin(second.clone())
                .expect_stdout(0, outcome);
            standing = &second_version;
        }
        Next::Claim => {
            assert_eq!(env.claim(RES, "C", 100, 200), 2, "{what}");
        }
        Next::Recover => {
            env.fp(&["recover"]).now(200).expect(0);
        }
    }
    assert_version(&env, RES, Some(201), Some(borrowed(standing)), &what);
    env.fp(&["verify"]).now(201).expect(0);

    // Seq 1 again, from a writer that did not hear of seq 2: stale once seq 2 (or a
    // takeover) stands, else the version that stands, a replay.
    let late = env.fp(&seq1).now(202).stdin(first.clone());
    if standing.2 == 2 || next == Next::Claim {
        late.expect_stdout(5, "stale");
    } else {
        late.expect_stdout(0, "replay");
    }
    assert_version(&env, RES, Some(203), Some(borrowed(standing)), &what);
    assert_eq!(tool_files(&env), Vec::<String>::new(), "{what}: leftovers");
}

fn seq_write_point(point: &str) {
    for mode in MODES {
        for next in [Next::Retry, Next::Claim, Next::Recover] {
            seq_write_case(point, mode, next);
        }
    }
}

#[test]
fn seq_write_after_rename() {
    seq_write_point("write.after_rename");
}

#[test]
fn seq_write_before_commit() {
    seq_write_point("txn.before_commit");
}

#[test]
fn seq_write_after_commit() {
    seq_write_point("txn.after_commit");
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

/// How far a removal got when it stopped (`Renamed`: the document is taken aside, to its
/// `-gone` name, and the record is still the version before the removal).
fn removal_stage(point: &str) -> Stage {
    match point {
        "remove.before_lock" | "txn.after_begin" => Stage::BeforeRename,
        "remove.after_rename"
        | "remove.after_dir_fsync"
        | "remove.before_commit"
        | "txn.before_commit" => Stage::Renamed,
        "txn.after_commit" | "remove.before_cleanup" => Stage::Committed,
        other => panic!("unknown remove failpoint {other}"),
    }
}

/// Whose removal crashes, and what it removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Removing {
    /// Epoch 1 wrote the document; the takeover's epoch 2 removes it.
    Takeover,
    /// The lease that wrote the document as seq 1 removes it as seq 2.
    NextSeq,
    /// Claimed, never written: the removal records a tombstone only (there is no file to
    /// take aside, so the removal never reaches its rename's failpoints).
    Nothing,
}

/// A version as the tests name it: bytes, epoch, seq.
type Version = (Vec<u8>, i64, i64);

/// `version` as `assert_version` takes it.
fn borrowed(version: &Version) -> (&[u8], i64, i64) {
    (&version.0, version.1, version.2)
}

impl Removing {
    /// Sets the scene; returns the removal's `(epoch, seq)` and the version standing
    /// before it.
    fn setup(self, env: &Env) -> ((i64, i64), Option<Version>) {
        match self {
            Removing::Takeover => {
                let (epoch, before) = setup(env, Scenario::Rewrite);
                let (bytes, e) = before.expect("a rewrite has a version before it");
                ((epoch, 0), Some((bytes, e, 0)))
            }
            Removing::NextSeq => {
                assert_eq!(env.claim(RES, "A", 100, 0), 1);
                env.fp(&["write", RES, "--epoch", "1", "--seq", "1"])
                    .now(1)
                    .stdin(old())
                    .expect_stdout(0, "written");
                ((1, 2), Some((old(), 1, 1)))
            }
            Removing::Nothing => {
                assert_eq!(env.claim(RES, "A", 100, 0), 1);
                ((1, 0), None)
            }
        }
    }

    /// Whether its removal reaches `point`.
    fn reaches(self, point: &str) -> bool {
        self != Removing::Nothing
            || !matches!(point, "remove.after_rename" | "remove.after_dir_fsync")
    }
}

/// The arguments of a command on `RES` at `(epoch, seq)` (`--seq` only when not 0).
fn versioned_args(command: &str, (epoch, seq): (i64, i64)) -> Vec<String> {
    let mut args: Vec<String> = [command, RES, "--epoch"]
        .iter()
        .map(ToString::to_string)
        .collect();
    args.push(epoch.to_string());
    if seq != 0 {
        args.extend(["--seq".to_string(), seq.to_string()]);
    }
    args
}

/// The record in `row` is the version `want` (`None`: no content recorded).
fn assert_record(row: &serde_json::Value, want: Option<&Version>, what: &str) {
    match want {
        Some((bytes, epoch, seq)) => {
            assert_eq!(row["sink"]["content_epoch"], *epoch, "{what}: {row}");
            assert_eq!(row["sink"]["seq"], *seq, "{what}: {row}");
            assert_eq!(row["sink"]["removed"], false, "{what}: {row}");
            assert_eq!(row["sink"]["sha256"], sha256_hex(bytes), "{what}: {row}");
        }
        None => assert!(
            row["sink"].is_null() || row["sink"]["content_epoch"].is_null(),
            "{what}: {row}"
        ),
    }
}

/// One removal stopped at `point` in `mode`, then `next`. Before its COMMIT the removal
/// never happened once recovered: the document is back with its bytes and the record is
/// the version before it (`status` says `interrupted` while the document is taken aside).
/// From its COMMIT on it stands: no document, the record a tombstone. Either way nothing
/// of the tool's is left after recovery, and `verify` passes.
fn remove_case(point: &str, mode: Mode, how: Removing, next: Next) {
    let what = format!("remove: {point} {mode:?} {how:?} then {next:?}");
    let env = Env::new();
    let (version, before) = how.setup(&env);
    let args = versioned_args("remove", version);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    crash(&env, &args, 20, b"", point, mode, &what);

    let stage = removal_stage(point);
    let committed = stage == Stage::Committed;
    let old_bytes = before.as_ref().map(|(bytes, _, _)| bytes.as_slice());

    // Before any recovery: status only looks, and says what happened.
    let row = status_row(&env, RES, Some(20));
    let doc = env.read(RES);
    if committed {
        assert_eq!(row["document"]["state"], "removed", "{what}: {row}");
        assert_eq!(doc, None, "{what}: the document is there");
        assert_eq!(row["sink"]["removed"], true, "{what}: {row}");
        assert_eq!(row["sink"]["content_epoch"], version.0, "{what}: {row}");
        assert_eq!(row["sink"]["seq"], version.1, "{what}: {row}");
    } else {
        let aside = mode != Mode::Error && stage == Stage::Renamed && before.is_some();
        if aside {
            assert_eq!(row["document"]["state"], "interrupted", "{what}: {row}");
            assert_eq!(doc, None, "{what}: the document was not taken aside");
            assert_eq!(gone_files(&env).len(), 1, "{what}: {:?}", env.files());
        } else {
            let want = if before.is_some() {
                "matches"
            } else {
                "absent"
            };
            assert_eq!(row["document"]["state"], want, "{what}: {row}");
            assert!(doc.as_deref() == old_bytes, "{what}: the document changed");
        }
        assert_record(&row, before.as_ref(), &what);
    }
    if mode == Mode::Error {
        // A removal that fails (rather than dies) undoes its own work, or, past its
        // COMMIT, finishes it.
        assert_eq!(tool_files(&env), Vec::<String>::new(), "{what}: leftovers");
    }

    match next {
        Next::Retry => {
            let outcome = if committed { "replay" } else { "removed" };
            env.fp(&args).now(21).expect_stdout(0, outcome);
        }
        Next::Claim => {
            assert_eq!(env.claim(RES, "C", 100, 200), version.0 + 1, "{what}");
        }
        Next::Recover => {
            env.fp(&["recover"]).now(200).expect(0);
        }
    }
    // A removal stages nothing, so even a claim (which sweeps no temp file) leaves nothing.
    assert_eq!(tool_files(&env), Vec::<String>::new(), "{what}: leftovers");
    if committed || next == Next::Retry {
        assert_removed(&env, RES, 201, version, &what);
        // The tombstone keeps the fence: the version it replaced, sent again by its
        // writer, is stale and does not bring the document back.
        if let Some((bytes, epoch, seq)) = &before {
            let late = versioned_args("write", (*epoch, *seq));
            let late: Vec<&str> = late.iter().map(String::as_str).collect();
            env.fp(&late)
                .now(202)
                .stdin(bytes.clone())
                .expect_stdout(5, "stale");
            assert_removed(&env, RES, 203, version, &what);
        }
    } else {
        assert_version(&env, RES, Some(201), before.as_ref().map(borrowed), &what);
        env.fp(&["verify"]).now(201).expect(0);
    }

    // The resource works on: a takeover writes it again and leaves no files.
    let e3 = env.claim(RES, "D", 100, 300);
    env.fp(&["write", RES, "--epoch", &e3.to_string()])
        .now(301)
        .stdin(newer())
        .expect_stdout(0, "written");
    assert_eq!(env.files(), vec![RES.to_string()], "{what}");
    assert_version(&env, RES, Some(302), Some((&newer(), e3, 0)), &what);
}

fn remove_point(point: &str) {
    for mode in MODES {
        for how in [Removing::Takeover, Removing::NextSeq, Removing::Nothing] {
            if !how.reaches(point) {
                continue;
            }
            for next in [Next::Retry, Next::Claim, Next::Recover] {
                remove_case(point, mode, how, next);
            }
        }
    }
}

/// The matrix covers every failpoint a removal on a local root names: `REMOVE_POINTS`
/// lists each `remove.*` point of the sources, and each has its test here.
#[test]
fn every_removal_failpoint_has_its_crash_test() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut named = Vec::new();
    for file in ["publish/remove.rs", "atomic.rs"] {
        let text = std::fs::read_to_string(src.join(file)).expect("read the source");
        for (at, _) in text.match_indices("failpoint!(\"remove.") {
            let rest = &text[at + "failpoint!(\"".len()..];
            named.push(rest[..rest.find('"').expect("a closing quote")].to_string());
        }
    }
    assert!(
        named.len() >= 5,
        "the removal's failpoints moved: {named:?}"
    );
    for point in &named {
        assert!(
            REMOVE_POINTS.contains(&point.as_str()),
            "{point} is not in REMOVE_POINTS"
        );
    }
    let tests = include_str!("crash.rs");
    for point in REMOVE_POINTS {
        assert!(
            tests.contains(&format!("remove_point(\"{point}\")")),
            "no crash test stops a removal at {point}"
        );
    }
}

#[test]
fn remove_before_lock() {
    remove_point("remove.before_lock");
}

#[test]
fn remove_after_begin() {
    remove_point("txn.after_begin");
}

#[test]
fn remove_after_rename() {
    remove_point("remove.after_rename");
}

#[test]
fn remove_after_dir_fsync() {
    remove_point("remove.after_dir_fsync");
}

#[test]
fn remove_before_commit() {
    remove_point("remove.before_commit");
}

#[test]
fn remove_txn_before_commit() {
    remove_point("txn.before_commit");
}

#[test]
fn remove_txn_after_commit() {
    remove_point("txn.after_commit");
}

#[test]
fn remove_before_cleanup() {
    remove_point("remove.before_cleanup");
}

/// A write stopped by SIGTERM, SIGINT or SIGHUP before it was accepted under the lock
/// (staged and waiting for the lock, still writing its temp file, or holding the lock
/// before the decision) removes its staged file and dies by the signal: nothing is left
/// for `verify` to report, and the document and its record are as they were.
#[test]
fn a_write_stopped_by_a_signal_removes_its_staged_file_and_dies_by_it() {
    let env = Env::new();
    let old = old();
    assert_eq!(env.claim(RES, "A", 100, 0), 1);
    env.write(RES, 1, std::str::from_utf8(&old).expect("utf-8"), 1, 0);
    let args = ["write", RES, "--epoch", "1"];
    for (sig, number, point) in [
        ("TERM", 15, "write.before_lock"),
        ("INT", 2, "write.before_lock"),
        ("HUP", 1, "write.before_lock"),
        ("TERM", 15, "write.after_temp_write"),
        ("TERM", 15, "txn.after_begin"),
    ] {
        let paused = spawn_paused(&env, &args, Some(2), &new(), point);
        assert_eq!(temp_files(&env).len(), 1, "staged at {point}");
        let out = paused.stop_by(sig);
        let what = format!("SIG{sig} at {point}");
        assert_eq!(out.status.signal(), Some(number), "{what}: {out:?}");
        assert_eq!(tool_files(&env), Vec::<String>::new(), "{what} left files");
        env.fp(&["verify"]).now(3).expect(0);
        assert_consistent(&env, RES, Some(3), Some((&old, 1)), &what);
    }
}

/// A signal the write was started with ignored (nohup's SIGHUP) stays ignored: the write
/// goes on when let go, and publishes.
#[test]
fn a_write_started_with_sighup_ignored_keeps_ignoring_it() {
    let env = Env::new();
    let new = new();
    assert_eq!(env.claim(RES, "A", 100, 0), 1);
    let nohup = ["sh", "-c", "trap '' HUP; exec \"$0\" \"$@\""];
    let args = ["write", RES, "--epoch", "1"];
    let paused = spawn_paused_via(&nohup, &env, &args, Some(1), &new, "write.before_lock");
    signal(paused.pid, "HUP");
    let out = paused.resume();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "written");
    assert_consistent(
        &env,
        RES,
        Some(2),
        Some((&new, 1)),
        "after SIGHUP under nohup",
    );
}

/// A signal that comes once the write was accepted under the lock (here between its two
/// recovery links) does not take the staged file from it: the write ends (committed),
/// then the process dies by the signal, and nothing is left behind.
#[test]
fn a_signal_past_the_point_of_no_return_lets_the_write_end_first() {
    let env = Env::new();
    let (old, new) = (old(), new());
    assert_eq!(env.claim(RES, "A", 100, 0), 1);
    env.write(RES, 1, std::str::from_utf8(&old).expect("utf-8"), 1, 0);
    assert_eq!(env.claim(RES, "B", 100, 200), 2);
    let args = ["write", RES, "--epoch", "2"];
    let paused = spawn_paused(&env, &args, Some(201), &new, "write.after_pre_link");
    signal(paused.pid, "TERM");
    wait_until_a_thread_waits_on_a_lock(paused.pid);
    assert_eq!(temp_files(&env).len(), 1, "the signal took the staged file");
    let out = paused.resume();
    assert_eq!(out.status.signal(), Some(15), "{out:?}");
    assert_eq!(out.stdout, b"", "an answer after the signal: {out:?}");
    assert_eq!(tool_files(&env), Vec::<String>::new(), "left files");
    env.fp(&["verify"]).now(202).expect(0);
    assert_consistent(&env, RES, Some(202), Some((&new, 2)), "after the signal");
}

/// Waits until a thread of `pid` other than its first waits in a futex (the kernel's
/// `wchan`): a writer's signal thread that got the signal and waits for the write to end.
/// Until then it waits in a read, and the first thread at its failpoint in another.
fn wait_until_a_thread_waits_on_a_lock(pid: u32) {
    let started = Instant::now();
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the writer's threads");
        let waiting = tasks.flatten().any(|task| {
            task.file_name() != *pid.to_string()
                && std::fs::read_to_string(task.path().join("wchan"))
                    .is_ok_and(|wchan| wchan.contains("futex"))
        });
        if waiting {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no thread of the writer took the signal"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Promise 5: a writer still alive (here blocked between staging and locking, then also
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
        done.stdout.contains("1 temp file removed"),
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

/// Promise 7: a document replaced behind the tool's back after a write died between
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

/// Promise 7 for an edit made in place (same inode) to a document left `interrupted` by a
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

/// Promise 7 after a committed write that died before removing its links: the document
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

/// Promise 7 when the write died before its rename: an in-place edit also changes the
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

/// Promise 6: stale, conflict and unissued writes change neither the document nor the
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

/// Promise 8: with the state file's write lock held by another process past the busy
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
