//! Crash safety of `write --tree` (docs/crash-safety.md, "A tree publish"): every failpoint
//! a tree publish on a local root passes, hit as a returned error, as a real crash
//! (`abort`) and as a SIGKILL while blocked there, for a first publish, a takeover's
//! replacement of a tree and a lease's `--seq 2` over its seq 1; then `status` before
//! recovery, the next command (the same publish again, a takeover's claim, `recover`) and
//! the invariants: before the COMMIT the old tree stands (none for a first publish) once
//! recovered, from it the new one; whole either way, never a mix; no marker, staged
//! tree or expired old tree left; `verify` passes. The trees are compared entry by entry
//! through a manifest this module computes from the files themselves, in the format the
//! tree hash covers, so the record's hash is checked against the bytes on disk too.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use super::{MODES, Mode, Next, crash};
use crate::harness::{Env, scratch};
use crate::support::{sha256_hex, status_row, version};

/// The tree resource every case publishes.
const SITE: &str = "site";

/// Every failpoint of a tree publish on a local root, in the order it reaches them.
const TREE_POINTS: [&str; 11] = [
    "tree.before_stage",
    "tree.after_copy",
    "tree.after_sync",
    "tree.before_lock",
    "txn.after_begin",
    "tree.after_marker",
    "tree.after_swap",
    "tree.after_dir_fsync",
    "txn.before_commit",
    "txn.after_commit",
    "tree.before_cleanup",
];

/// How far a tree publish got when it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Staging, or under the lock before its marker: nothing beside the resource names
    /// the staged tree but its own `tmp-` name.
    Unmarked,
    /// The marker names the staged tree; the resource is still the old tree.
    Marked,
    /// The staged tree is at the resource's name (the old one at the staged name), the
    /// record is the old one: recovery swaps back.
    Swapped,
    /// COMMIT happened: the new tree and record stand; the marker (and the old tree, at
    /// the staged name) may be left.
    Committed,
}

fn stage_of(point: &str) -> Stage {
    match point {
        "tree.before_stage" | "tree.after_copy" | "tree.after_sync" | "tree.before_lock"
        | "txn.after_begin" => Stage::Unmarked,
        "tree.after_marker" => Stage::Marked,
        "tree.after_swap" | "tree.after_dir_fsync" | "txn.before_commit" => Stage::Swapped,
        "txn.after_commit" | "tree.before_cleanup" => Stage::Committed,
        other => panic!("unknown tree failpoint {other}"),
    }
}

/// One entry of a source tree: its path, a file's bytes (`None` for a folder), its mode.
type Entry = (&'static str, Option<Vec<u8>>, u32);

/// A source folder for `write --tree`, outside the publish root, removed when dropped.
struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    /// Makes a folder holding `entries` (folders before what they hold), its own mode
    /// 0755.
    fn new(entries: &[Entry]) -> Tree {
        let dir = tempfile::Builder::new()
            .prefix("fencepost-tree-source-")
            .tempdir_in(scratch())
            .expect("source folder");
        for (path, bytes, _) in entries {
            let at = dir.path().join(path);
            match bytes {
                Some(bytes) => std::fs::write(&at, bytes).expect("source file"),
                None => std::fs::create_dir(&at).expect("source folder"),
            }
        }
        // Modes last, deepest first: a folder without write permission is filled first.
        for (path, _, mode) in entries.iter().rev() {
            let at = dir.path().join(path);
            std::fs::set_permissions(&at, std::fs::Permissions::from_mode(*mode)).expect("chmod");
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        Tree { dir }
    }

    fn path(&self) -> &str {
        self.dir.path().to_str().expect("utf-8 path")
    }

    fn manifest(&self) -> String {
        manifest(self.dir.path()).expect("the source is a folder")
    }

    /// The tree hash fencepost records for this tree.
    fn sha256(&self) -> String {
        sha256_hex(self.manifest().as_bytes())
    }

    /// The bytes of its files together (the record's size).
    fn size(&self) -> u64 {
        self.manifest()
            .lines()
            .filter(|l| l.starts_with("f "))
            .map(|l| {
                l.split(' ')
                    .nth(2)
                    .and_then(|s| s.parse::<u64>().ok())
                    .expect("a size")
            })
            .sum()
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        // Folders without write permission for the owner would stop the removal.
        let _ = std::process::Command::new("chmod")
            .args(["-R", "u+rwx"])
            .arg(self.dir.path())
            .status();
    }
}

/// The three trees of a case: the one standing before the crash, the crashing publish's,
/// and a takeover's afterwards. Each has several files of different sizes, subfolders
/// and an empty folder, and each differs from the others in content, in shape (entries
/// added and removed) and in modes, so that no mix of two can pass for either.
struct Trees {
    old: Tree,
    new: Tree,
    newer: Tree,
}

impl Trees {
    fn new() -> Trees {
        Trees {
            old: Tree::new(&[
                ("index.html", Some(version("old index", 3000)), 0o644),
                ("sub", None, 0o755),
                ("sub/page.txt", Some(version("old page", 1200)), 0o644),
                ("sub/deep", None, 0o750),
                ("sub/deep/note", Some(version("old note", 90)), 0o640),
                ("empty", None, 0o755),
            ]),
            new: Tree::new(&[
                ("index.html", Some(version("new index", 5000)), 0o644),
                ("sub", None, 0o755),
                ("sub/page.txt", Some(version("new page", 700)), 0o600),
                ("sub/added.txt", Some(version("added", 2500)), 0o644),
                ("fresh", None, 0o700),
                ("readonly", None, 0o555),
                ("readonly/kept", Some(version("kept", 64)), 0o444),
            ]),
            newer: Tree::new(&[
                ("index.html", Some(version("newer index", 700)), 0o644),
                ("assets", None, 0o755),
            ]),
        }
    }
}

/// The manifest of the folder `top` in the format fencepost hashes a tree by
/// (src/tree.rs), computed here from the files themselves: one `KIND MODE SIZE SHA256
/// PATH` line per entry (`d`, `f` or `l`; a folder's size 0 and hash `-`; the top folder's
/// path `.`), sorted by path component by component. `None` when nothing is at `top`;
/// a file there fails the test.
fn manifest(top: &Path) -> Option<String> {
    let meta = std::fs::symlink_metadata(top).ok()?;
    assert!(meta.is_dir(), "{} is not a folder", top.display());
    let mut lines = Vec::new();
    manifest_into(top, &mut Vec::new(), &mut lines);
    lines.sort();
    Some(lines.into_iter().map(|(_, line)| line).collect())
}

fn manifest_into(dir: &Path, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    use std::os::unix::fs::MetadataExt as _;
    let shown = |path: &[String]| {
        if path.is_empty() {
            ".".to_string()
        } else {
            path.join("/")
        }
    };
    let mode = std::fs::symlink_metadata(dir).expect("stat").mode() & 0o7777;
    out.push((path.clone(), format!("d {mode:04o} 0 - {}\n", shown(path))));
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let entry = entry.expect("entry");
        let at = entry.path();
        let meta = std::fs::symlink_metadata(&at).expect("stat");
        path.push(entry.file_name().to_str().expect("utf-8 name").to_string());
        if meta.is_dir() {
            manifest_into(&at, path, out);
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&at).expect("readlink");
            let target = target.as_os_str().as_encoded_bytes();
            let line = format!(
                "l 0777 {} {} {}\n",
                target.len(),
                sha256_hex(target),
                shown(path)
            );
            out.push((path.clone(), line));
        } else {
            let bytes = std::fs::read(&at).expect("read");
            let line = format!(
                "f {:04o} {} {} {}\n",
                meta.mode() & 0o7777,
                bytes.len(),
                sha256_hex(&bytes),
                shown(path)
            );
            out.push((path.clone(), line));
        }
        path.pop();
    }
}

/// The names beside the resource that are the tool's (staged trees, markers, old trees,
/// links), but for old trees still within their grace period at `now`
/// (`.<name>.fencepost-old-<token>-<deadline>`, kept for readers until `deadline`).
fn leftovers(env: &Env, now: i64) -> Vec<String> {
    let old = format!(".{SITE}.fencepost-old-");
    names(env)
        .into_iter()
        .filter(|n| n.contains(".fencepost-"))
        .filter(|n| {
            let deadline = n
                .strip_prefix(&old)
                .and_then(|rest| rest.rsplit_once('-'))
                .and_then(|(_, d)| d.parse::<i64>().ok());
            deadline.is_none_or(|d| d <= now)
        })
        .collect()
}

/// The names in the root, `.fencepost/` aside, sorted.
fn names(env: &Env) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(env.root())
        .expect("read the root")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".fencepost")
        .collect();
    names.sort();
    names
}

/// The markers of tree publishes beside the resource.
fn markers(env: &Env) -> Vec<String> {
    let prefix = format!(".{SITE}.fencepost-tree-");
    names(env)
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

/// The staged trees (and old trees waiting at a staged name) beside the resource.
fn staged(env: &Env) -> Vec<String> {
    let prefix = format!(".{SITE}.fencepost-tmp-");
    names(env)
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

/// The kinds of problem `verify --json` lists at `now`, in its order (none: exit 0).
fn problems(env: &Env, now: i64) -> Vec<String> {
    let done = env.fp(&["--json", "verify"]).now(now).output();
    let found: Vec<String> = done.json()["problems"]
        .as_array()
        .expect("a list of problems")
        .iter()
        .map(|p| p["problem"].as_str().expect("a kind").to_string())
        .collect();
    let code = if found.is_empty() { 0 } else { 9 };
    assert_eq!(done.code, code, "verify: {done:?}");
    found
}

/// A tree version as the tests name it: the tree, its epoch and seq.
type Version<'t> = (&'t Tree, i64, i64);

/// The record in `row` is the version `want` of a tree (`None`: no content recorded).
fn assert_record(row: &serde_json::Value, want: Option<Version<'_>>, what: &str) {
    match want {
        Some((tree, epoch, seq)) => {
            let sink = &row["sink"];
            assert_eq!(sink["content_epoch"], epoch, "{what}: {row}");
            assert_eq!(sink["seq"], seq, "{what}: {row}");
            assert_eq!(sink["removed"], false, "{what}: {row}");
            assert_eq!(sink["tree_sha256"], tree.sha256(), "{what}: {row}");
            assert_eq!(sink["size"], tree.size(), "{what}: {row}");
            assert!(sink["sha256"].is_null(), "{what}: {row}");
        }
        None => assert!(
            row["sink"].is_null() || row["sink"]["content_epoch"].is_null(),
            "{what}: {row}"
        ),
    }
}

/// The folder at the resource's name is the tree `want`, whole (`None`: nothing there).
#[track_caller]
fn assert_on_disk(env: &Env, want: Option<&Tree>, what: &str) {
    let found = manifest(&env.path(SITE));
    let want = want.map(Tree::manifest);
    assert!(
        found == want,
        "{what}: the resource is not the tree wanted\nfound:\n{}\nwanted:\n{}",
        found.as_deref().unwrap_or("(nothing)"),
        want.as_deref().unwrap_or("(nothing)")
    );
}

/// The resource is the version `want`, whole, and its record says so: `status` reads the
/// tree as matching, with the record's hash, which is the hash of the tree on disk; or,
/// for `None`, no tree and no recorded content. `verify` passes.
#[track_caller]
fn assert_tree(env: &Env, now: i64, want: Option<Version<'_>>, what: &str) {
    assert_on_disk(env, want.map(|(tree, _, _)| tree), what);
    let row = status_row(env, SITE, Some(now));
    assert_record(&row, want, what);
    match want {
        Some((tree, _, _)) => {
            assert_eq!(row["document"]["state"], "matches", "{what}: {row}");
            assert_eq!(row["document"]["sha256"], tree.sha256(), "{what}: {row}");
        }
        None => assert_eq!(row["document"]["state"], "absent", "{what}: {row}"),
    }
    env.fp(&["verify"]).now(now).expect(0);
}

/// Who publishes the crashing tree, and over what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Publishing {
    /// Claimed, never published: the first tree at the name (a rename, no exchange).
    First,
    /// Epoch 1 published the old tree; the takeover's epoch 2 replaces it.
    Takeover,
    /// One lease published the old tree as seq 1, and replaces it as seq 2.
    NextSeq,
}

const PUBLISHINGS: [Publishing; 3] = [Publishing::First, Publishing::Takeover, Publishing::NextSeq];

impl Publishing {
    /// Sets the scene; returns the crashing publish's `(epoch, seq)` and the version of
    /// the old tree standing before it.
    fn setup<'t>(self, env: &Env, trees: &'t Trees) -> ((i64, i64), Option<Version<'t>>) {
        match self {
            Publishing::First => {
                assert_eq!(env.claim(SITE, "A", 100, 0), 1);
                ((1, 0), None)
            }
            Publishing::Takeover => {
                assert_eq!(env.claim(SITE, "A", 10, 0), 1);
                env.fp(&strs(&publish_args((1, 0), &trees.old)))
                    .now(1)
                    .expect_stdout(0, "written");
                assert_eq!(env.claim(SITE, "B", 100, 10), 2);
                ((2, 0), Some((&trees.old, 1, 0)))
            }
            Publishing::NextSeq => {
                assert_eq!(env.claim(SITE, "A", 100, 0), 1);
                env.fp(&strs(&publish_args((1, 1), &trees.old)))
                    .now(1)
                    .expect_stdout(0, "written");
                ((1, 2), Some((&trees.old, 1, 1)))
            }
        }
    }
}

/// `write SITE --epoch E [--seq S] --tree DIR`.
fn publish_args((epoch, seq): (i64, i64), tree: &Tree) -> Vec<String> {
    let mut args: Vec<String> = ["write", SITE, "--epoch"]
        .iter()
        .map(ToString::to_string)
        .collect();
    args.push(epoch.to_string());
    args.extend(["--tree".to_string(), tree.path().to_string()]);
    if seq != 0 {
        args.extend(["--seq".to_string(), seq.to_string()]);
    }
    args
}

/// Arguments as the harness takes them.
fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// One tree publish stopped at `point` in `mode`, then `next`, checked before and after.
fn tree_case(point: &str, mode: Mode, how: Publishing, next: Next) {
    let what = format!("write --tree: {point} {mode:?} {how:?} then {next:?}");
    let env = Env::new();
    let trees = Trees::new();
    let (version, before) = how.setup(&env, &trees);
    let args = publish_args(version, &trees.new);
    let args = strs(&args);
    crash(&env, &args, 20, b"", point, mode, &what);

    let stage = stage_of(point);
    let committed = stage == Stage::Committed;
    let new_version = (&trees.new, version.0, version.1);
    let mut standing = if committed { Some(new_version) } else { before };

    let crashed = mode != Mode::Error;
    before_recovery(&env, &trees, stage, crashed, (before, standing), &what);

    let now = match next {
        Next::Retry => {
            let outcome = if committed { "replay" } else { "written" };
            env.fp(&args).now(21).expect_stdout(0, outcome);
            standing = Some(new_version);
            21
        }
        Next::Claim => {
            assert_eq!(env.claim(SITE, "C", 100, 200), version.0 + 1, "{what}");
            200
        }
        Next::Recover => {
            let done = env.fp(&["recover"]).now(200).expect(0);
            let said = recovered(mode, stage, how, point);
            assert_eq!(done.stdout.trim(), said, "{what}");
            200
        }
    };
    assert_eq!(markers(&env), Vec::<String>::new(), "{what}: markers");
    assert_eq!(staged(&env), Vec::<String>::new(), "{what}: staged trees");
    assert_eq!(
        leftovers(&env, now),
        Vec::<String>::new(),
        "{what}: leftovers"
    );
    assert_tree(&env, 201, standing, &what);

    // Seq 1 again, from a writer that did not hear of seq 2: stale once seq 2 (or a
    // takeover) stands, else the tree that stands, a replay.
    if how == Publishing::NextSeq {
        let late = env.fp(&strs(&publish_args((1, 1), &trees.old))).now(202);
        if standing.is_some_and(|(_, _, seq)| seq == 2) || next == Next::Claim {
            late.expect_stdout(5, "stale");
        } else {
            late.expect_stdout(0, "replay");
        }
        assert_tree(&env, 203, standing, &what);
    }

    // The resource works on: a takeover publishes a third tree (its old one not kept),
    // and nothing is left beside it; the claim's recovery removed the expired old trees.
    let e3 = env.claim(SITE, "D", 100, 300);
    let mut third = publish_args((e3, 0), &trees.newer);
    third.extend(["--keep-old".to_string(), "0".to_string()]);
    env.fp(&strs(&third)).now(301).expect_stdout(0, "written");
    assert_eq!(names(&env), vec![SITE.to_string()], "{what}");
    assert_tree(&env, 302, Some((&trees.newer, e3, 0)), &what);
}

/// What a crashed (or failed) tree publish leaves before any recovery, as `status` and
/// `verify` (which only look) and the folder show it: `before` is the version that stood
/// before the publish, `standing` the one recovery will keep.
fn before_recovery(
    env: &Env,
    trees: &Trees,
    stage: Stage,
    crashed: bool,
    (before, standing): (Option<Version<'_>>, Option<Version<'_>>),
    what: &str,
) {
    // Before any recovery: status only looks. The resource is one whole tree; the record
    // describes the committed state.
    let row = status_row(env, SITE, Some(20));
    if crashed && stage == Stage::Swapped {
        assert_eq!(row["document"]["state"], "interrupted", "{what}: {row}");
        assert_on_disk(env, Some(&trees.new), what);
        // The old tree waits whole at the staged name, for recovery to swap back.
        if let Some((old, _, _)) = before {
            let at = staged(env);
            assert_eq!(at.len(), 1, "{what}: {:?}", names(env));
            assert_eq!(manifest(&env.path(&at[0])), Some(old.manifest()), "{what}");
        }
    } else {
        let want = if standing.is_some() {
            "matches"
        } else {
            "absent"
        };
        assert_eq!(row["document"]["state"], want, "{what}: {row}");
        assert_on_disk(env, standing.map(|(t, _, _)| t), what);
    }
    assert_record(&row, standing, what);
    let marked = crashed && stage != Stage::Unmarked;
    assert_eq!(
        markers(env).len(),
        usize::from(marked),
        "{what}: {:?}",
        names(env)
    );
    if !crashed {
        // A publish that fails (rather than dies) undoes its own work, or, past its
        // COMMIT, finishes it: only an old tree within its grace period may be there.
        assert_eq!(
            leftovers(env, 20),
            Vec::<String>::new(),
            "{what}: leftovers"
        );
    }
    // verify says what recovery has to do: undo a swap (`interrupted`), tidy a marker
    // (`leftover-links`), remove a dead writer's staged tree (`leftover-temp`); nothing
    // once the publish undid or finished its own work.
    let mut want: Vec<&str> = match (crashed, stage) {
        (false, _) | (true, Stage::Unmarked) => vec![],
        (true, Stage::Marked | Stage::Committed) => vec!["leftover-links"],
        (true, Stage::Swapped) => vec!["interrupted"],
    };
    if crashed && !staged(env).is_empty() {
        want.push("leftover-temp");
    }
    assert_eq!(problems(env, 20), want, "{what}: {:?}", names(env));
}

/// What `recover` says after a publish stopped at `point` of `stage` in `mode`.
fn recovered(mode: Mode, stage: Stage, how: Publishing, point: &str) -> String {
    let did = match (mode, stage) {
        // A failed publish undid or finished its own work (an old tree it kept for its
        // grace period goes silently once the grace period is over).
        (Mode::Error, _) => return "nothing to recover".into(),
        (_, Stage::Unmarked) if point == "tree.before_stage" => {
            return "nothing to recover".into();
        }
        (_, Stage::Unmarked) => "nothing to do, 1 temp file removed",
        (_, Stage::Marked) => {
            "undid a tree publish that never swapped in (its staged tree kept until its deadline), 0 temp files removed"
        }
        (_, Stage::Swapped) if how == Publishing::First => {
            "rolled back an uncommitted first tree publish (the tree taken off its name, kept until its deadline), 0 temp files removed"
        }
        (_, Stage::Swapped) => {
            "rolled back an uncommitted tree publish (previous tree restored), 0 temp files removed"
        }
        (_, Stage::Committed) => {
            "finished a committed tree publish (its old tree kept until its deadline), 0 temp files removed"
        }
    };
    format!("{SITE}: {did}")
}

fn tree_point(point: &str) {
    for mode in MODES {
        for how in PUBLISHINGS {
            for next in [Next::Retry, Next::Claim, Next::Recover] {
                tree_case(point, mode, how, next);
            }
        }
    }
}

/// The matrix covers every failpoint of a tree publish on a local root: `TREE_POINTS`
/// lists each `tree.*` point of its sources (a store's tree publish, in
/// `publish/store_tree.rs`, uploads and commits in the store: its points are a store's),
/// and each of its points has its test here.
#[test]
fn every_tree_failpoint_has_its_crash_test() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut named = Vec::new();
    for file in ["publish/tree.rs", "tree.rs", "recovery.rs"] {
        let text = std::fs::read_to_string(src.join(file)).expect("read the source");
        for (at, _) in text.match_indices("failpoint!(\"tree.") {
            let rest = &text[at + "failpoint!(\"".len()..];
            named.push(rest[..rest.find('"').expect("a closing quote")].to_string());
        }
    }
    assert!(named.len() >= 8, "the tree's failpoints moved: {named:?}");
    for point in &named {
        assert!(
            TREE_POINTS.contains(&point.as_str()),
            "{point} is not in TREE_POINTS"
        );
    }
    let tests = include_str!("trees.rs");
    for point in TREE_POINTS {
        assert!(
            tests.contains(&format!("tree_point(\"{point}\")")),
            "no crash test stops a tree publish at {point}"
        );
    }
}

#[test]
fn tree_before_stage() {
    tree_point("tree.before_stage");
}

#[test]
fn tree_after_copy() {
    tree_point("tree.after_copy");
}

#[test]
fn tree_after_sync() {
    tree_point("tree.after_sync");
}

#[test]
fn tree_before_lock() {
    tree_point("tree.before_lock");
}

#[test]
fn tree_after_begin() {
    tree_point("txn.after_begin");
}

#[test]
fn tree_after_marker() {
    tree_point("tree.after_marker");
}

#[test]
fn tree_after_swap() {
    tree_point("tree.after_swap");
}

#[test]
fn tree_after_dir_fsync() {
    tree_point("tree.after_dir_fsync");
}

#[test]
fn tree_before_commit() {
    tree_point("txn.before_commit");
}

#[test]
fn tree_after_commit() {
    tree_point("txn.after_commit");
}

#[test]
fn tree_before_cleanup() {
    tree_point("tree.before_cleanup");
}

/// A tree edited by hand after a publish died between its swap and its COMMIT is not
/// the staged tree any more: recovery keeps it (only the marker and the staged name's
/// folder go) rather than roll the edit back with the crashed publish, and `status`
/// reports the replaced tree drifted from its record.
#[test]
fn a_tree_edited_by_hand_after_an_uncommitted_swap_is_kept() {
    for how in [Publishing::Takeover, Publishing::First] {
        let what = format!("{how:?}");
        let env = Env::new();
        let trees = Trees::new();
        let (version, before) = how.setup(&env, &trees);
        let args = publish_args(version, &trees.new);
        let args = strs(&args);
        crash(&env, &args, 20, b"", "tree.after_swap", Mode::Abort, &what);
        let page = env.path(&format!("{SITE}/sub/page.txt"));
        std::fs::set_permissions(&page, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        std::fs::write(&page, "by hand\n").expect("edit in place");
        let hand = manifest(&env.path(SITE)).expect("the tree");
        env.fp(&["recover"]).now(21).expect(0);
        assert_eq!(manifest(&env.path(SITE)), Some(hand), "{what}: edit lost");
        assert_eq!(leftovers(&env, 21), Vec::<String>::new(), "{what}");
        let row = status_row(&env, SITE, Some(22));
        assert_record(&row, before, &what);
        if before.is_some() {
            assert_eq!(row["document"]["state"], "drifted", "{what}: {row}");
            let done = env.fp(&["verify"]).now(22).expect(9);
            assert!(
                done.stdout.contains("changed sub/page.txt"),
                "{what}: {}",
                done.stdout
            );
        }
    }
}

/// Recovery that stops part way through taking an uncommitted first tree away must not
/// leave part of that tree standing as the resource, which the next recovery would keep
/// as an edit made by hand: the resource is the whole tree or nothing, and once the grace
/// period of what it took away is over, nothing of the tree is left. Stopped two ways,
/// with the immutable flag (`chattr +i`): on the root folder (nothing at the resource's
/// name can be renamed or removed: the recovery itself stops), and on a folder inside the
/// tree (its entries cannot be removed: the removal of the tree taken away stops, once its
/// grace period is over). Needs root, and a filesystem that keeps the flag.
#[test]
#[cfg_attr(fp_missing = "root", ignore = "needs root (chattr +i)")]
fn a_recovery_stopped_while_it_takes_a_first_tree_away_leaves_none_of_it() {
    crate::support::needs::root();
    for inside in [false, true] {
        let what = if inside {
            "a folder of the tree immutable"
        } else {
            "the root immutable"
        };
        let env = Env::new();
        let trees = Trees::new();
        let (version, _) = Publishing::First.setup(&env, &trees);
        let args = publish_args(version, &trees.new);
        let args = strs(&args);
        crash(&env, &args, 20, b"", "txn.before_commit", Mode::Abort, what);
        assert_on_disk(&env, Some(&trees.new), what);
        let locked = if inside {
            env.path(&format!("{SITE}/readonly"))
        } else {
            env.root().to_path_buf()
        };
        let ok = std::process::Command::new("chattr")
            .arg("+i")
            .arg(&locked)
            .status()
            .expect("run chattr")
            .success();
        assert!(ok, "chattr +i {}", locked.display());
        if inside {
            // Taken away whole, kept for its grace period.
            env.fp(&["recover"]).now(1000).expect(0);
            assert_on_disk(&env, None, what);
        }
        let stopped = env.fp(&["recover"]).now(2000).output();
        // Wherever recovery left the locked folder (a tree taken away moves it).
        std::process::Command::new("chattr")
            .args(["-R", "-i"])
            .arg(env.root())
            // It says it cannot change the markers' flags (symlinks): they have none.
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run chattr");
        assert_ne!(stopped.code, 0, "{what}: recover went through: {stopped:?}");
        // Whatever the stopped recovery did, the resource is the whole new tree or
        // nothing.
        let found = manifest(&env.path(SITE));
        assert!(
            found.is_none() || found == Some(trees.new.manifest()),
            "{what}: a part of the tree stands:\n{}",
            found.unwrap_or_default()
        );
        env.fp(&["recover"]).now(2001).expect(0);
        assert_eq!(leftovers(&env, 2001), Vec::<String>::new(), "{what}: left");
        assert_tree(&env, 2001, None, what);
        env.fp(&["recover"]).now(3000).expect(0);
        assert_eq!(names(&env), Vec::<String>::new(), "{what}: left");
        // And the publish goes through when sent again.
        let e2 = env.claim(SITE, "B", 100, 3001);
        env.fp(&strs(&publish_args((e2, 0), &trees.new)))
            .now(3002)
            .expect_stdout(0, "written");
        assert_tree(&env, 3003, Some((&trees.new, e2, 0)), what);
    }
}

/// An old tree retired by a publish is kept for its grace period (`--keep-old`, 60 ticks
/// by default), for readers still walking it, and removed by the first recovery after
/// its deadline; `verify` does not count it as debris meanwhile.
#[test]
fn an_old_tree_is_kept_for_its_grace_period_then_removed() {
    let env = Env::new();
    let trees = Trees::new();
    let (version, _) = Publishing::Takeover.setup(&env, &trees);
    env.fp(&strs(&publish_args(version, &trees.new)))
        .now(20)
        .expect_stdout(0, "written");
    let old: Vec<String> = names(&env)
        .into_iter()
        .filter(|n| n.starts_with(&format!(".{SITE}.fencepost-old-")))
        .collect();
    assert_eq!(old.len(), 1, "{:?}", names(&env));
    assert!(old[0].ends_with("-80"), "{old:?}");
    assert_eq!(
        manifest(&env.path(&old[0])),
        Some(trees.old.manifest()),
        "the old tree is kept whole"
    );
    assert_tree(
        &env,
        21,
        Some((&trees.new, 2, 0)),
        "within the grace period",
    );
    env.fp(&["recover"]).now(79).expect(0);
    assert_eq!(names(&env).len(), 2, "removed before its deadline");
    env.fp(&["recover"]).now(80).expect(0);
    assert_eq!(names(&env), vec![SITE.to_string()]);
    assert_tree(&env, 81, Some((&trees.new, 2, 0)), "after the deadline");
}
