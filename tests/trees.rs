//! Trees (`write --tree`): a folder published as one version under the same fence as a
//! document. Every rule (a first publish, a replay, a conflict, stale after a takeover,
//! unissued, `--seq`), every refusal (bad input that stages nothing and changes nothing),
//! symlinks copied as symlinks, the old tree kept for readers until its deadline, `verify`
//! and `remove` of a tree, readers that walk the tree while writers replace it, and the
//! walls around the root at each step of a tree publish.
//!
//! The tree on disk is checked entry by entry ([`snapshot`]): kind, permission bits,
//! owner, and the bytes of each file (a symlink: its target), the top folder included.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use serde_json::Value;
use tempfile::TempDir;

use crate::harness::{Env, Run, scratch};
use crate::support::{sha256_hex, spawn_paused_also, status_row};

/// The tree most tests publish.
const RES: &str = "site";

/// A folder for source trees, outside every publish root.
fn sources() -> TempDir {
    tempfile::Builder::new()
        .prefix("fencepost-trees-")
        .tempdir_in(scratch())
        .expect("sources folder")
}

/// A path as the command line takes it.
fn arg(path: &Path) -> String {
    path.to_str().expect("a UTF-8 test path").to_string()
}

/// One entry a test tree is made of.
#[derive(Debug, Clone, Copy)]
enum Make<'a> {
    /// A folder and its permission bits.
    Dir(&'a str, u32),
    /// A file, its permission bits and its bytes.
    File(&'a str, u32, &'a [u8]),
    /// A symlink and its target.
    Link(&'a str, &'a str),
}

/// Makes the folder `dir` (mode `top`) holding `items`, in order; each folder gets its
/// mode once everything is in it (a read-only folder is filled first).
fn build(dir: &Path, top: u32, items: &[Make<'_>]) -> PathBuf {
    std::fs::create_dir_all(dir).expect("mkdir");
    let mut folders = vec![(dir.to_path_buf(), top)];
    for item in items {
        match *item {
            Make::Dir(path, mode) => {
                std::fs::create_dir(dir.join(path)).expect("mkdir");
                folders.push((dir.join(path), mode));
            }
            Make::File(path, mode, bytes) => {
                std::fs::write(dir.join(path), bytes).expect("write");
                chmod(&dir.join(path), mode);
            }
            Make::Link(path, target) => {
                std::os::unix::fs::symlink(target, dir.join(path)).expect("symlink");
            }
        }
    }
    for (folder, mode) in folders.into_iter().rev() {
        chmod(&folder, mode);
    }
    dir.to_path_buf()
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A tree with what a published site holds: files of several modes (set-user-ID and
/// set-group-ID too), an empty file, a file bigger than one copy chunk, empty folders, a
/// sticky folder, folders several deep, names with spaces and non-ASCII letters, the top
/// folder not 0755. `tag` goes into `index.html`, so two tags are two trees.
fn site(dir: &Path, tag: &str) -> PathBuf {
    let index = format!("<h1>{tag}</h1>\n");
    let blob: Vec<u8> = (0..=255u8).cycle().take(200_000).collect();
    build(
        dir,
        0o750,
        &[
            Make::File("index.html", 0o644, index.as_bytes()),
            Make::Dir("bin", 0o711),
            Make::File("bin/run.sh", 0o755, b"#!/bin/sh\necho run\n"),
            Make::File("secret.key", 0o600, b"not for everyone\n"),
            Make::File("zero", 0o444, b""),
            Make::File("tool", 0o4755, b"set-user-ID\n"),
            Make::File("group-tool", 0o2750, b"set-group-ID\n"),
            Make::Dir("empty", 0o755),
            Make::Dir("drop", 0o1777),
            Make::Dir("deep", 0o755),
            Make::Dir("deep/a", 0o700),
            Make::Dir("deep/a/b", 0o555),
            Make::File("deep/a/b/leaf.txt", 0o640, b"leaf\n"),
            Make::Dir("deep/a/b/empty too", 0o750),
            Make::Dir("a dir", 0o755),
            Make::File(
                "a dir/\u{fc}n\u{ef} c\u{f4}de.txt",
                0o644,
                "\u{fc}\n".as_bytes(),
            ),
            Make::File("blob.bin", 0o644, &blob),
        ],
    )
}

/// One entry of a tree as found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    /// `d` folder, `f` file, `l` symlink, `?` anything else.
    kind: char,
    mode: u32,
    uid: u32,
    gid: u32,
    /// A file's bytes, a symlink's target, nothing for a folder.
    bytes: Vec<u8>,
}

fn seen(path: &Path) -> Seen {
    let meta = std::fs::symlink_metadata(path).expect("lstat");
    let ft = meta.file_type();
    let (kind, bytes) = if ft.is_symlink() {
        let target = std::fs::read_link(path).expect("readlink");
        ('l', target.into_os_string().into_encoded_bytes())
    } else if ft.is_dir() {
        ('d', Vec::new())
    } else if ft.is_file() {
        ('f', std::fs::read(path).expect("read"))
    } else {
        ('?', Vec::new())
    };
    Seen {
        kind,
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
        bytes,
    }
}

/// Every entry of the folder `top`, by path relative to it (`.` for `top` itself),
/// following no symlink.
fn snapshot(top: &Path) -> BTreeMap<String, Seen> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Seen>) {
        for entry in std::fs::read_dir(dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            let rel = path.strip_prefix(base).expect("prefix");
            let found = seen(&path);
            let folder = found.kind == 'd';
            out.insert(rel.to_string_lossy().into_owned(), found);
            if folder {
                walk(base, &path, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    out.insert(".".to_string(), seen(top));
    walk(top, top, &mut out);
    out
}

/// Everything under the root but the state folder: what a refusal must leave as it was.
fn root_state(env: &Env) -> BTreeMap<String, Seen> {
    snapshot(env.root())
        .into_iter()
        .filter(|(k, _)| k != ".fencepost" && !k.starts_with(".fencepost/"))
        .collect()
}

/// The names under the root (folders too) that hold `part`, e.g. `.fencepost-tmp-`.
fn names_with(env: &Env, part: &str) -> Vec<String> {
    root_state(env)
        .into_keys()
        .filter(|k| k.contains(part))
        .collect()
}

/// What a tree publish leaves only while it runs or after a crash: staged trees, their
/// markers, the recovery links of documents and the folders removals take away.
fn debris(env: &Env) -> Vec<String> {
    ["-tmp-", "-tree-", "-pre-", "-new-", "-sum-", "-gone-"]
        .iter()
        .flat_map(|what| names_with(env, &format!(".fencepost{what}")))
        .collect()
}

/// The old trees kept beside `res` (a name of the root's top folder): each one's name and
/// its deadline (the last part of the name).
fn old_trees(env: &Env, res: &str) -> Vec<(String, i64)> {
    let prefix = format!(".{res}.fencepost-old-");
    let mut found: Vec<(String, i64)> = std::fs::read_dir(env.root())
        .expect("list the root")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .map(|n| {
            let deadline = n
                .rsplit_once('-')
                .and_then(|(_, d)| d.parse().ok())
                .unwrap_or_else(|| panic!("an old tree's name ends in its deadline: {n}"));
            (n, deadline)
        })
        .collect();
    found.sort_by_key(|(_, deadline)| *deadline);
    found
}

/// `write RES --epoch E [--seq S] --tree SRC ARGS...` at tick `now`.
fn tree_write(
    env: &Env,
    res: &str,
    (epoch, seq): (i64, Option<i64>),
    src: &Path,
    now: i64,
    more: &[&str],
) -> Run {
    let (epoch, seq, src) = (epoch.to_string(), seq.map(|s| s.to_string()), arg(src));
    let mut args = vec!["write", res, "--epoch", &epoch, "--tree", &src];
    if let Some(seq) = &seq {
        args.extend(["--seq", seq.as_str()]);
    }
    args.extend(more);
    env.fp(&args).now(now)
}

/// The same with `--json`, asserting the exit code and the JSON contract.
fn tree_write_json(
    env: &Env,
    res: &str,
    version: (i64, Option<i64>),
    src: &Path,
    now: i64,
    code: i32,
) -> Value {
    tree_write(env, res, version, src, now, &["--json"])
        .expect(code)
        .json_contract()
}

/// The inode of the folder at `res`: a tree swapped in is a new folder.
fn ino(env: &Env, res: &str) -> u64 {
    std::fs::symlink_metadata(env.path(res))
        .expect("the tree is there")
        .ino()
}

/// Asserts that `res` is the tree `src`, entry by entry, that `status` says so, and that
/// the record is the version `(epoch, seq)` whose tree hash is `sha256`.
#[track_caller]
fn assert_published(env: &Env, res: &str, src: &Path, (epoch, seq): (i64, i64), now: i64) {
    assert_eq!(
        snapshot(&env.path(res)),
        snapshot(src),
        "{res} is not the tree {}",
        src.display()
    );
    let row = status_row(env, res, Some(now));
    assert_eq!(row["document"]["state"], "matches", "{row}");
    assert_eq!(row["sink"]["content_epoch"], epoch, "{row}");
    assert_eq!(row["sink"]["seq"], seq, "{row}");
    assert_eq!(row["sink"]["removed"], false, "{row}");
    assert!(
        row["sink"]["tree_sha256"]
            .as_str()
            .is_some_and(|s| s.len() == 64),
        "a tree's record holds its tree hash: {row}"
    );
    assert_eq!(
        row["document"]["sha256"], row["sink"]["tree_sha256"],
        "{row}"
    );
    assert_eq!(debris(env), Vec::<String>::new(), "left beside {res}");
}

/// The bytes of every file of the tree `src`, together.
fn tree_bytes(src: &Path) -> u64 {
    snapshot(src)
        .values()
        .filter(|s| s.kind == 'f')
        .map(|s| s.bytes.len() as u64)
        .sum()
}

// ---------------------------------------------------------------------------------------
// The rules
// ---------------------------------------------------------------------------------------

#[test]
fn a_first_publish_puts_the_folder_in_place_whole_with_its_modes() {
    let env = Env::new();
    let src = sources();
    let v1 = site(&src.path().join("v1"), "v1");
    assert_eq!(env.claim(RES, "A", 100, 0), 1);
    let j = tree_write_json(&env, RES, (1, None), &v1, 1, 0);
    assert_eq!(j["outcome"], "written");
    assert_eq!(j["tree"], true);
    assert_eq!(j["epoch"], 1);
    assert_eq!(j["seq"], 0);
    assert_eq!(j["size"], tree_bytes(&v1));
    assert_published(&env, RES, &v1, (1, 0), 2);
    let row = status_row(&env, RES, Some(2));
    assert_eq!(row["sink"]["tree_sha256"], j["sha256"], "{row}");
    assert_eq!(row["sink"]["size"], tree_bytes(&v1), "{row}");
    assert_eq!(row["sink"]["written_at"], 1, "{row}");
    // A first publish replaces nothing: no old tree is kept.
    assert_eq!(old_trees(&env, RES), []);
    // The source is left as it was.
    assert_eq!(
        snapshot(&v1),
        snapshot(&site(&src.path().join("again"), "v1"))
    );
    env.fp(&["verify"]).now(2).expect(0);
    let plain = env.fp(&["status", RES]).now(2).expect(0).stdout;
    assert!(plain.contains("tree"), "status says it is a tree: {plain}");
}

#[test]
fn a_first_publish_makes_the_folders_above_the_tree() {
    let env = Env::new();
    let src = sources();
    let v1 = site(&src.path().join("v1"), "v1");
    env.claim("a/b/site", "A", 100, 0);
    tree_write(&env, "a/b/site", (1, None), &v1, 1, &[]).expect_stdout(0, "written");
    assert_published(&env, "a/b/site", &v1, (1, 0), 2);
}

/// The tree hash is the SHA-256 of the manifest: one line per entry, sorted by path
/// component by component, `KIND MODE SIZE SHA256 PATH` (the top folder as `.`, a
/// folder's hash as `-`). Computed here from the source, it is what the record holds:
/// a host that copies the same tree gets the same hash, and a replay stays a replay
/// across versions of the tool.
#[test]
fn the_tree_hash_is_the_sha256_of_the_manifest_of_the_tree() {
    let env = Env::new();
    let src = sources();
    let v1 = site(&src.path().join("v1"), "v1");
    env.claim(RES, "A", 100, 0);
    let j = tree_write_json(&env, RES, (1, None), &v1, 1, 0);
    let mut entries: Vec<(Vec<Vec<u8>>, String)> = snapshot(&v1)
        .into_iter()
        .map(|(path, s)| {
            let parts: Vec<Vec<u8>> = if path == "." {
                Vec::new()
            } else {
                path.split('/').map(|p| p.as_bytes().to_vec()).collect()
            };
            let (kind, sha, size) = match s.kind {
                'd' => ('d', "-".to_string(), 0),
                'f' => ('f', sha256_hex(&s.bytes), s.bytes.len()),
                other => panic!("no {other} in this tree"),
            };
            let line = format!("{kind} {:04o} {size} {sha} {path}\n", s.mode);
            (parts, line)
        })
        .collect();
    entries.sort();
    let manifest: String = entries.into_iter().map(|(_, line)| line).collect();
    assert_eq!(j["sha256"], sha256_hex(manifest.as_bytes()), "{manifest}");
}

#[test]
fn the_same_tree_again_is_a_replay_that_touches_nothing() {
    let env = Env::new();
    let src = sources();
    let v1 = site(&src.path().join("v1"), "v1");
    env.claim(RES, "A", 100, 0);
    tree_write(&env, RES, (1, None), &v1, 1, &[]).expect_stdout(0, "written");
    let (before, row, inode) = (
        root_state(&env),
        status_row(&env, RES, Some(5)),
        ino(&env, RES),
    );
    // The same folder again, then the same tree made anew in another folder (other
    // inodes, other times): the same tree hash, a replay.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let copy = site(&src.path().join("elsewhere/copy"), "v1");
    for (what, from) in [("the same folder", &v1), ("a copy", &copy)] {
        tree_write(&env, RES, (1, None), from, 3, &[]).expect_stdout(0, "replay");
        let j = tree_write_json(&env, RES, (1, None), from, 4, 0);
        assert_eq!(j["outcome"], "replay", "{what}: {j}");
        assert_eq!(j["tree"], true, "{what}: {j}");
        assert_eq!(j["sha256"], row["sink"]["tree_sha256"], "{what}: {j}");
        assert_eq!(
            root_state(&env),
            before,
            "{what}: a replay changed the root"
        );
        assert_eq!(ino(&env, RES), inode, "{what}: a replay swapped the tree");
        assert_eq!(
            status_row(&env, RES, Some(5)),
            row,
            "{what}: the record changed"
        );
        assert_eq!(old_trees(&env, RES), [], "{what}");
    }
}

/// Site trees `1..=n` (index 0 unused), each with its number in its index.
fn versions(base: &Path, n: i64) -> Vec<PathBuf> {
    (0..=n)
        .map(|i| site(&base.join(format!("t{i}")), &format!("version {i}")))
        .collect()
}

/// Trees that differ from the recorded one in one thing each.
fn variants(base: &Path) -> Vec<(&'static str, PathBuf)> {
    let v = |name: &str| site(&base.join(name), "v1");
    let mut out = Vec::new();
    let one_byte = v("one-byte");
    std::fs::write(one_byte.join("deep/a/b/leaf.txt"), "leaF\n").expect("write");
    out.push(("one byte of a file", one_byte));
    let one_bit = v("one-bit");
    chmod(&one_bit.join("secret.key"), 0o640);
    out.push(("one mode bit of a file", one_bit));
    let top = v("top-mode");
    chmod(&top, 0o755);
    out.push(("the top folder's mode", top));
    let folder = v("folder-added");
    std::fs::create_dir(folder.join("empty/more")).expect("mkdir");
    out.push(("an empty folder added", folder));
    let removed = v("file-removed");
    std::fs::remove_file(removed.join("zero")).expect("rm");
    out.push(("an empty file removed", removed));
    let renamed = v("file-renamed");
    std::fs::rename(renamed.join("bin/run.sh"), renamed.join("bin/run")).expect("mv");
    out.push(("a file renamed", renamed));
    let other = site(&base.join("other"), "v2");
    out.push(("another index", other));
    out
}

#[test]
fn a_different_tree_under_the_same_version_is_a_conflict_that_changes_nothing() {
    let env = Env::new();
    let src = sources();
    let v1 = site(&src.path().join("v1"), "v1");
    env.claim(RES, "A", 100, 0);
    tree_write(&env, RES, (1, None), &v1, 1, &[]).expect_stdout(0, "written");
    let (before, row) = (root_state(&env), status_row(&env, RES, Some(5)));
    for (what, tree) in variants(src.path()) {
        tree_write(&env, RES, (1, None), &tree, 2, &[]).expect_stdout(6, "conflict");
        let j = tree_write_json(&env, RES, (1, None), &tree, 2, 6);
        assert_eq!(j["outcome"], "conflict", "{what}: {j}");
        assert_eq!(
            j["recorded_sha256"], row["sink"]["tree_sha256"],
            "{what}: {j}"
        );
        assert_eq!(
            root_state(&env),
            before,
            "{what}: a conflict changed the root"
        );
        assert_eq!(status_row(&env, RES, Some(5)), row, "{what}");
    }
    assert_published(&env, RES, &v1, (1, 0), 5);
}

#[test]
fn a_takeover_fences_the_old_holder_out_and_its_tree_replaces_the_old_one() {
    let env = Env::new();
    let src = sources();
    let (t1, late, t2) = (
        site(&src.path().join("t1"), "A's first"),
        site(&src.path().join("late"), "A's late"),
        site(&src.path().join("t2"), "B's"),
    );
    assert_eq!(env.claim(RES, "A", 10, 0), 1);
    tree_write(&env, RES, (1, None), &t1, 1, &[]).expect_stdout(0, "written");
    // A's lease runs out; B takes the tree over. The claim registers epoch 2 with the
    // sink: A is stale before B publishes anything.
    assert_eq!(env.claim(RES, "B", 100, 20), 2);
    let (before, row) = (root_state(&env), status_row(&env, RES, Some(21)));
    for (what, tree) in [("another tree", &late), ("its own tree again", &t1)] {
        let j = tree_write_json(&env, RES, (1, None), tree, 21, 5);
        assert_eq!(j["outcome"], "stale", "{what}: {j}");
        assert_eq!(j["fence"], 2, "{what}: {j}");
        assert_eq!(
            root_state(&env),
            before,
            "{what}: a stale write changed the root"
        );
        assert_eq!(status_row(&env, RES, Some(21)), row, "{what}");
    }
    // B's tree replaces A's, whole; A's is kept beside it for its readers.
    let j = tree_write_json(&env, RES, (2, None), &t2, 22, 0);
    assert_eq!(j["outcome"], "written");
    assert_eq!(j["previous_fence"], 2);
    assert_published(&env, RES, &t2, (2, 0), 23);
    let old = old_trees(&env, RES);
    assert_eq!(old.len(), 1, "{old:?}");
    assert_eq!(snapshot(&env.path(&old[0].0)), snapshot(&t1));
    // And A is still stale after B's publish.
    let (before, row) = (root_state(&env), status_row(&env, RES, Some(23)));
    tree_write(&env, RES, (1, None), &late, 23, &[]).expect_stdout(5, "stale");
    assert_eq!(root_state(&env), before);
    assert_eq!(status_row(&env, RES, Some(23)), row);
}

#[test]
fn an_epoch_never_issued_is_unissued_and_makes_no_folder() {
    let env = Env::new();
    let src = sources();
    let v1 = site(&src.path().join("v1"), "v1");
    env.claim("other", "X", 100, 0);
    let j = tree_write_json(&env, "a/b/site", (1, None), &v1, 1, 8);
    assert_eq!(j["outcome"], "unissued");
    assert_eq!(j["issued"], Value::Null);
    assert!(
        !env.path("a").exists(),
        "a folder was made for a refused tree"
    );
    assert_eq!(debris(&env), Vec::<String>::new());
    // Above the highest epoch issued: unissued, the tree published before untouched.
    env.claim(RES, "A", 100, 2);
    tree_write(&env, RES, (1, None), &v1, 3, &[]).expect_stdout(0, "written");
    let (before, row) = (root_state(&env), status_row(&env, RES, Some(4)));
    let other = site(&src.path().join("other"), "other");
    let j = tree_write_json(&env, RES, (7, None), &other, 4, 8);
    assert_eq!(j["outcome"], "unissued");
    assert_eq!(j["issued"], 1);
    assert_eq!(root_state(&env), before);
    assert_eq!(status_row(&env, RES, Some(4)), row);
    // Another owner's name with the right epoch: unissued too.
    let j = tree_write(
        &env,
        RES,
        (1, Some(2)),
        &other,
        4,
        &["--owner", "B", "--json"],
    )
    .expect(8)
    .json_contract();
    assert_eq!(j["outcome"], "unissued");
    assert_eq!(root_state(&env), before);
}

#[test]
fn seq_orders_the_trees_of_one_epoch() {
    let env = Env::new();
    let src = sources();
    let t = versions(src.path(), 3);
    let t = |n: i64| t[n as usize].clone();
    let (t1, t2, t3) = (t(1), t(2), t(3));
    env.claim(RES, "A", 1000, 0);
    tree_write(&env, RES, (1, Some(1)), &t1, 1, &[]).expect_stdout(0, "written");
    assert_published(&env, RES, &t1, (1, 1), 1);
    tree_write(&env, RES, (1, Some(2)), &t2, 2, &[]).expect_stdout(0, "written");
    assert_published(&env, RES, &t2, (1, 2), 2);
    let (before, row) = (root_state(&env), status_row(&env, RES, Some(3)));
    // A lower seq (and no seq: seq 0) is stale, the same seq with the same tree a
    // replay, with another tree a conflict: none changes anything.
    for (seq, tree, code, word) in [
        (Some(1), &t1, 5, "stale"),
        (Some(1), &t3, 5, "stale"),
        (None, &t3, 5, "stale"),
        (Some(2), &t2, 0, "replay"),
        (Some(2), &t3, 6, "conflict"),
    ] {
        tree_write(&env, RES, (1, seq), tree, 3, &[]).expect_stdout(code, word);
        assert_eq!(
            root_state(&env),
            before,
            "seq {seq:?}: {word} changed the root"
        );
        assert_eq!(status_row(&env, RES, Some(3)), row, "seq {seq:?}: {word}");
    }
    // A higher seq replaces the tree.
    tree_write(&env, RES, (1, Some(7)), &t3, 4, &[]).expect_stdout(0, "written");
    assert_published(&env, RES, &t3, (1, 7), 4);
}

/// Writers that race with different trees for the same version: each stages its own
/// copy; the first under the lock publishes, the other is a conflict whose staged copy
/// goes. The tree is the winner's, whole, and nothing is left beside it.
#[test]
fn writers_racing_for_one_version_with_different_trees_one_wins_whole() {
    let env = Env::new();
    let src = sources();
    env.claim(RES, "A", 1000, 0);
    for n in 1..=8 {
        let trees = [
            site(&src.path().join(format!("{n}-x")), &format!("x {n}")),
            site(&src.path().join(format!("{n}-y")), &format!("y {n}")),
        ];
        let answers: Vec<(i32, String)> = std::thread::scope(|s| {
            let writers: Vec<_> = trees
                .iter()
                .map(|tree| {
                    let env = &env;
                    s.spawn(move || {
                        let done = tree_write(env, RES, (1, Some(n)), tree, n, &[]).output();
                        (done.code, done.stdout.trim().to_string())
                    })
                })
                .collect();
            writers
                .into_iter()
                .map(|w| w.join().expect("a writer panicked"))
                .collect()
        });
        let won: Vec<usize> = (0..2).filter(|i| answers[*i].0 == 0).collect();
        assert_eq!(won.len(), 1, "round {n}: {answers:?}");
        let lost = 1 - won[0];
        assert_eq!(answers[won[0]].1, "written", "round {n}: {answers:?}");
        assert_eq!(answers[lost], (6, "conflict".to_string()), "round {n}");
        assert_published(&env, RES, &trees[won[0]], (1, n), n);
    }
}

/// With `--seq`, each publish keeps the tree it replaced: the newest first.
#[test]
fn each_publish_keeps_the_tree_it_replaced() {
    let env = Env::new();
    let src = sources();
    let t = versions(src.path(), 3);
    let t = |n: i64| t[n as usize].clone();
    env.claim(RES, "A", 1000, 0);
    for n in 1..=3 {
        tree_write(&env, RES, (1, Some(n)), &t(n), n, &[]).expect_stdout(0, "written");
    }
    let old = old_trees(&env, RES);
    assert_eq!(
        old.iter().map(|(_, d)| *d).collect::<Vec<_>>(),
        [62, 63],
        "{old:?}"
    );
    assert_eq!(snapshot(&env.path(&old[0].0)), snapshot(&t(1)));
    assert_eq!(snapshot(&env.path(&old[1].0)), snapshot(&t(2)));
}

/// Owners are not part of the tree hash (they depend on who copies), but a copy made by
/// root keeps them: each file's, folder's (the top one's too) and symlink's. A change of
/// owner clears set-user-ID and set-group-ID, so the copy sets the mode after the owner.
#[test]
#[cfg_attr(fp_missing = "root", ignore = "needs root")]
fn a_tree_published_by_root_keeps_every_owner() {
    crate::documents::needs_root();
    let env = Env::new();
    let src = sources();
    let v1 = site(&src.path().join("v1"), "v1");
    std::os::unix::fs::symlink("index.html", v1.join("home")).expect("symlink");
    let owners = [
        (".", 1234, 5678),
        ("index.html", 65534, 65534),
        ("tool", 4321, 0),
        ("group-tool", 0, 4321),
        ("bin", 2000, 2001),
        ("deep/a/b", 3000, 3001),
        ("deep/a/b/leaf.txt", 3002, 3003),
        ("empty", 4000, 4001),
    ];
    for (path, uid, gid) in owners {
        std::os::unix::fs::chown(v1.join(path), Some(uid), Some(gid)).expect("chown");
    }
    std::os::unix::fs::lchown(v1.join("home"), Some(5000), Some(5001)).expect("lchown");
    // chown cleared the set-ID bits: put them back.
    chmod(&v1.join("tool"), 0o4755);
    chmod(&v1.join("group-tool"), 0o2750);
    env.claim(RES, "A", 100, 0);
    tree_write(&env, RES, (1, None), &v1, 1, &["--allow-symlinks"]).expect_stdout(0, "written");
    assert_published(&env, RES, &v1, (1, 0), 2);
    let published = snapshot(&env.path(RES));
    assert_eq!(published["tool"].mode, 0o4755);
    assert_eq!(published["group-tool"].mode, 0o2750);
    assert_eq!((published["home"].uid, published["home"].gid), (5000, 5001));
    assert_eq!((published["."].uid, published["."].gid), (1234, 5678));
}

// ---------------------------------------------------------------------------------------
// Refusals
// ---------------------------------------------------------------------------------------

/// A root with the tree `site` published (epoch 1, seq 1, A holding the lease until tick
/// 100) and `a/b/new` claimed by A, never written: a refused publish to either must
/// change nothing, and make no folder for `a/b/new`.
fn with_a_tree(src: &Path) -> Env {
    let env = Env::new();
    let v1 = site(&src.join("published"), "v1");
    env.claim(RES, "A", 100, 0);
    env.claim("a/b/new", "A", 100, 0);
    tree_write(&env, RES, (1, Some(1)), &v1, 1, &[]).expect_stdout(0, "written");
    env
}

/// `write RES --tree SRC MORE...` for both of [`with_a_tree`]'s resources is bad input
/// (exit 2, one `fencepost:` line and at most a hint, the `--json` outcome `usage`), and
/// changes nothing at all: no staged tree, no folder, the same records. The publish
/// never reaches its staging (`tree.before_stage` would kill it). Returns the line.
#[track_caller]
fn refused(env: &Env, src: &Path, more: &[&str], what: &str) -> String {
    let (before, rows) = (
        root_state(env),
        [
            status_row(env, RES, Some(5)),
            status_row(env, "a/b/new", Some(5)),
        ],
    );
    let mut line = String::new();
    // A seq above any recorded: refused as bad input, never as stale.
    for (res, seq) in [(RES, 100), ("a/b/new", 100)] {
        let done = tree_write(env, res, (1, Some(seq)), src, 5, more)
            .env("FAILPOINTS", "tree.before_stage=return(abort)")
            .expect(2);
        line = done.stderr.lines().next().unwrap_or_default().to_string();
        let mut json_args = more.to_vec();
        json_args.push("--json");
        let j = tree_write(env, res, (1, Some(seq)), src, 5, &json_args)
            .env("FAILPOINTS", "tree.before_stage=return(abort)")
            .expect(2)
            .json();
        assert_eq!(j["outcome"], "usage", "{what}: {j}");
        assert_eq!(root_state(env), before, "{what}: {res}: the root changed");
        assert!(
            !env.path("a").exists(),
            "{what}: a folder was made for {res}"
        );
    }
    assert_eq!(
        [
            status_row(env, RES, Some(5)),
            status_row(env, "a/b/new", Some(5))
        ],
        rows,
        "{what}: the records changed"
    );
    line
}

#[test]
fn a_symlink_in_the_source_is_refused_without_allow_symlinks() {
    let src = sources();
    let env = with_a_tree(src.path());
    for (name, target) in [
        ("passwd", "/etc/passwd"),
        ("up", ".."),
        ("dangling", "nowhere"),
        ("deep/a/b/inside", "../../../index.html"),
    ] {
        let tree = site(&src.path().join(name), "v2");
        std::os::unix::fs::symlink(target, tree.join(name)).expect("symlink");
        let line = refused(&env, &tree, &[], name);
        assert!(
            line.contains("symlink") && line.contains(name),
            "{name}: {line}"
        );
    }
}

/// A source's names are anyone's: one that holds a newline is shown escaped, and the
/// refusal stays one `fencepost:` line that nothing in the name can add to.
#[test]
fn a_refused_entry_with_a_newline_in_its_name_is_named_on_one_line() {
    let src = sources();
    let env = with_a_tree(src.path());
    let tree = site(&src.path().join("newline"), "v2");
    std::os::unix::fs::symlink("/etc/passwd", tree.join("evil\nfencepost: written"))
        .expect("symlink");
    let line = refused(&env, &tree, &[], "a symlink named with a newline");
    assert!(line.contains(r"evil\nfencepost: written"), "{line}");
}

#[test]
fn a_fifo_or_a_socket_in_the_source_is_refused() {
    let src = sources();
    let env = with_a_tree(src.path());
    let fifo = site(&src.path().join("fifo"), "v2");
    crate::support::mkfifo(&fifo.join("deep/a/b/pipe"));
    let line = refused(&env, &fifo, &[], "a FIFO");
    assert!(line.contains("pipe"), "{line}");
    // Not even with --allow-symlinks.
    refused(
        &env,
        &fifo,
        &["--allow-symlinks"],
        "a FIFO, symlinks allowed",
    );
    let socket = site(&src.path().join("socket"), "v2");
    let _listener =
        std::os::unix::net::UnixListener::bind(socket.join("sock")).expect("bind a socket");
    let line = refused(&env, &socket, &[], "a socket");
    assert!(line.contains("sock"), "{line}");
}

#[test]
#[cfg_attr(fp_missing = "root", ignore = "needs root")]
fn a_device_in_the_source_is_refused() {
    crate::documents::needs_root();
    let src = sources();
    let env = with_a_tree(src.path());
    let tree = site(&src.path().join("device"), "v2");
    for (name, kind) in [("null", "c"), ("disk", "b")] {
        let ok = std::process::Command::new("mknod")
            .arg(tree.join(name))
            .args([kind, "1", "3"])
            .status()
            .expect("run mknod")
            .success();
        assert!(ok, "mknod {name}");
        let line = refused(&env, &tree, &["--allow-symlinks"], name);
        assert!(line.contains(name), "{line}");
        std::fs::remove_file(tree.join(name)).expect("rm");
    }
}

#[test]
fn a_source_that_is_not_a_folder_is_refused() {
    let src = sources();
    let env = with_a_tree(src.path());
    let file = src.path().join("file.html");
    std::fs::write(&file, "<h1>a file</h1>\n").expect("write");
    let line = refused(&env, &file, &[], "a file");
    assert!(line.contains("not a folder"), "{line}");
    refused(&env, &src.path().join("missing"), &[], "nothing");
}

/// A source that holds the folder the tree is published in would copy itself (and the
/// tree it copies into): refused, the root itself, a folder above it, and for a tree in a
/// sub-folder, that sub-folder.
#[test]
fn a_source_that_holds_the_resources_folder_is_refused() {
    let outer = sources();
    let env = Env::new_in(outer.path());
    let src = sources();
    let v1 = site(&src.path().join("v1"), "v1");
    env.claim("a/site", "A", 100, 0);
    tree_write(&env, "a/site", (1, Some(1)), &v1, 1, &[]).expect_stdout(0, "written");
    let before = (root_state(&env), status_row(&env, "a/site", Some(5)));
    for (what, from) in [
        ("the root", env.root().to_path_buf()),
        ("the folder above the root", outer.path().to_path_buf()),
        ("the tree's folder", env.path("a")),
    ] {
        let done = tree_write(&env, "a/site", (1, Some(2)), &from, 5, &[])
            .env("FAILPOINTS", "tree.before_stage=return(abort)")
            .expect(2);
        assert!(
            done.stderr.contains("copy itself"),
            "{what}: {}",
            done.stderr
        );
        assert_eq!(
            (root_state(&env), status_row(&env, "a/site", Some(5))),
            before,
            "{what}"
        );
    }
}

/// Each limit at its value passes; one past it is bad input, refused before a byte is
/// staged. `--max-entries` counts files, folders and symlinks (not the top folder),
/// `--max-size` the bytes of the files, `--max-depth` the folders a path goes down.
#[test]
fn each_limit_refuses_a_source_one_past_it() {
    let src = sources();
    let env = with_a_tree(src.path());
    // 5 entries: a, d1, d1/d2, d1/d2/f, e (empty); 10 bytes; f goes down 2 folders.
    let tree = build(
        &src.path().join("small"),
        0o755,
        &[
            Make::File("a", 0o644, b"12345"),
            Make::Dir("d1", 0o755),
            Make::Dir("d1/d2", 0o755),
            Make::File("d1/d2/f", 0o644, b"67890"),
            Make::Dir("e", 0o755),
        ],
    );
    for (limit, passes, refused_at, word) in [
        ("--max-entries", "5", "4", "entries"),
        ("--max-size", "10", "9", "bytes"),
        ("--max-depth", "2", "1", "deep"),
    ] {
        let line = refused(&env, &tree, &[limit, refused_at], limit);
        assert!(line.contains(word), "{limit} {refused_at}: {line}");
        let mut seq = status_row(&env, RES, Some(5))["sink"]["seq"]
            .as_i64()
            .expect("a seq");
        seq += 1;
        tree_write(&env, RES, (1, Some(seq)), &tree, 5, &[limit, passes])
            .expect_stdout(0, "written");
        assert_published(&env, RES, &tree, (1, seq), 5);
    }
    // A flat folder goes down no folder at all.
    let flat = build(
        &src.path().join("flat"),
        0o755,
        &[Make::File("only", 0o644, b"x")],
    );
    tree_write(&env, RES, (1, Some(10)), &flat, 6, &["--max-depth", "0"])
        .expect_stdout(0, "written");
    assert_published(&env, RES, &flat, (1, 10), 6);
}

#[test]
fn options_that_give_content_another_way_are_refused() {
    let src = sources();
    let env = with_a_tree(src.path());
    let tree = site(&src.path().join("v2"), "v2");
    let file = src.path().join("content");
    std::fs::write(&file, "bytes\n").expect("write");
    refused(&env, &tree, &["--from", &arg(&file)], "--from");
    refused(&env, &tree, &["--allow-empty"], "--allow-empty");
    refused(&env, &tree, &["--unfenced"], "--unfenced");
}

/// Bytes on stdin beside `--tree` are bad input, said so rather than dropped: from a
/// file, and from a pipe whose bytes are there when the write starts.
#[test]
fn bytes_on_stdin_beside_a_tree_are_refused() {
    let src = sources();
    let env = with_a_tree(src.path());
    let tree = site(&src.path().join("v2"), "v2");
    let file = src.path().join("stdin");
    std::fs::write(&file, "bytes\n").expect("write");
    let before = (root_state(&env), status_row(&env, RES, Some(5)));
    let run = |stdin: std::process::Stdio, what: &str| {
        let tree = arg(&tree);
        let out = crate::support::command(
            &env,
            &["write", RES, "--epoch", "1", "--seq", "2", "--tree", &tree],
            Some(5),
        )
        .env("FAILPOINTS", "tree.before_stage=return(abort)")
        .stdin(stdin)
        .output()
        .expect("run fencepost");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert!(
            matches!(lines.as_slice(), [first, ..] if first.starts_with("fencepost: ") && first.contains("stdin"))
                && lines.len() <= 2,
            "{what}: {stderr}"
        );
        assert_eq!(
            (root_state(&env), status_row(&env, RES, Some(5))),
            before,
            "{what}"
        );
    };
    run(File::open(&file).expect("open").into(), "a file");
    let (reader, mut writer) = std::io::pipe().expect("pipe");
    std::io::Write::write_all(&mut writer, b"bytes\n").expect("fill the pipe");
    drop(writer);
    run(reader.into(), "a pipe");
    // An empty file or pipe is no content: the tree is published.
    let empty = src.path().join("empty");
    std::fs::write(&empty, "").expect("write");
    let out = crate::support::command(
        &env,
        &["write", RES, "-e", "1", "--seq", "2", "--tree", &arg(&tree)],
        Some(5),
    )
    .stdin(File::open(&empty).expect("open"))
    .output()
    .expect("run fencepost");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn a_tree_and_a_document_never_share_a_name() {
    let env = Env::new();
    let src = sources();
    let v1 = site(&src.path().join("v1"), "v1");
    env.claim("doc.md", "A", 100, 0);
    env.claim(RES, "A", 100, 0);
    env.claim("hand-made", "A", 100, 0);
    env.write("doc.md", 1, "a document\n", 1, 0);
    tree_write(&env, RES, (1, Some(1)), &v1, 1, &[]).expect_stdout(0, "written");
    std::fs::write(env.path("hand-made"), "not the tool's\n").expect("write");
    let before = (
        root_state(&env),
        status_row(&env, "doc.md", Some(5)),
        status_row(&env, RES, Some(5)),
    );
    let after = |env: &Env| {
        (
            root_state(env),
            status_row(env, "doc.md", Some(5)),
            status_row(env, RES, Some(5)),
        )
    };
    // A tree where a document was published, or where a file stands.
    for res in ["doc.md", "hand-made"] {
        let done = tree_write(&env, res, (1, Some(2)), &v1, 5, &[])
            .env("FAILPOINTS", "tree.before_stage=return(abort)")
            .expect(2);
        assert!(done.stderr.contains(res), "{}", done.stderr);
        assert_eq!(after(&env), before, "a tree over {res}");
    }
    // A document where a tree was published.
    let done = env
        .fp(&["write", RES, "--epoch", "1", "--seq", "2"])
        .now(5)
        .stdin("a document\n")
        .expect(2);
    assert!(done.stderr.contains("is a tree"), "{}", done.stderr);
    assert_eq!(after(&env), before, "a document over a tree");
    // Still after the tree was removed: a resource is one kind for its whole life.
    env.fp(&["remove", RES, "--epoch", "1", "--seq", "3"])
        .now(6)
        .expect_stdout(0, "removed");
    env.fp(&["write", RES, "--epoch", "1", "--seq", "4"])
        .now(7)
        .stdin("a document\n")
        .expect(2);
    assert!(!env.path(RES).exists());
}

// ---------------------------------------------------------------------------------------
// Symlinks
// ---------------------------------------------------------------------------------------

#[test]
fn with_allow_symlinks_symlinks_are_copied_as_symlinks_never_followed() {
    let env = Env::new();
    let src = sources();
    let elsewhere = build(
        &src.path().join("elsewhere"),
        0o755,
        &[Make::File("outside.txt", 0o644, b"outside\n")],
    );
    let elsewhere = arg(&elsewhere);
    let v1 = build(
        &src.path().join("v1"),
        0o755,
        &[
            Make::File("index.html", 0o644, b"<h1>links</h1>\n"),
            Make::Dir("sub", 0o750),
            Make::File("sub/page.html", 0o644, b"page\n"),
            Make::Link("passwd", "/etc/passwd"),
            Make::Link("home", "index.html"),
            Make::Link("sub/up", "../index.html"),
            Make::Link("dangling", "no/such/file"),
            Make::Link("to-sub", "sub"),
            Make::Link("to-elsewhere", &elsewhere),
        ],
    );
    env.claim(RES, "A", 100, 0);
    tree_write(&env, RES, (1, Some(1)), &v1, 1, &["--allow-symlinks"]).expect_stdout(0, "written");
    assert_published(&env, RES, &v1, (1, 1), 2);
    let published = snapshot(&env.path(RES));
    for (link, target) in [
        ("passwd", "/etc/passwd"),
        ("home", "index.html"),
        ("sub/up", "../index.html"),
        ("dangling", "no/such/file"),
        ("to-sub", "sub"),
        ("to-elsewhere", elsewhere.as_str()),
    ] {
        assert_eq!(published[link].kind, 'l', "{link} is not a symlink");
        assert_eq!(published[link].bytes, target.as_bytes(), "{link}");
    }
    // Nothing behind a symlink was copied.
    assert!(!published.keys().any(|k| k.starts_with("to-sub/")));
    assert!(!published.keys().any(|k| k.starts_with("to-elsewhere/")));
    env.fp(&["verify"]).now(2).expect(0);
    // The target is the symlink's content: another target is another tree.
    std::fs::remove_file(v1.join("home")).expect("rm");
    std::os::unix::fs::symlink("sub/page.html", v1.join("home")).expect("symlink");
    tree_write(&env, RES, (1, Some(1)), &v1, 3, &["--allow-symlinks"]).expect_stdout(6, "conflict");
    // And the same tree, symlinks and all, made anew is a replay.
    std::fs::remove_file(v1.join("home")).expect("rm");
    std::os::unix::fs::symlink("index.html", v1.join("home")).expect("symlink");
    tree_write(&env, RES, (1, Some(1)), &v1, 3, &["--allow-symlinks"]).expect_stdout(0, "replay");
}

// ---------------------------------------------------------------------------------------
// The old tree
// ---------------------------------------------------------------------------------------

/// The replaced tree stays beside the new one, whole, until its deadline (`--keep-old`,
/// 60 ticks by default under `--now`); from the deadline on, a later publish or `recover`
/// removes it.
#[test]
fn the_old_tree_is_kept_whole_until_its_deadline() {
    let env = Env::new();
    let src = sources();
    let t = versions(src.path(), 5);
    let t = |n: i64| t[n as usize].clone();
    env.claim(RES, "A", 1000, 0);
    tree_write(&env, RES, (1, Some(1)), &t(1), 1, &[]).expect_stdout(0, "written");
    tree_write(&env, RES, (1, Some(2)), &t(2), 10, &[]).expect_stdout(0, "written");
    let old = old_trees(&env, RES);
    assert_eq!(
        old.iter().map(|(_, d)| *d).collect::<Vec<_>>(),
        [70],
        "{old:?}"
    );
    let first_old = old[0].0.clone();
    assert_eq!(snapshot(&env.path(&first_old)), snapshot(&t(1)));
    // Before its deadline: neither `recover` nor a publish removes it.
    env.fp(&["recover"]).now(69).expect(0);
    tree_write(&env, RES, (1, Some(3)), &t(3), 69, &["--keep-old", "30"])
        .expect_stdout(0, "written");
    let old = old_trees(&env, RES);
    assert_eq!(
        old.iter().map(|(_, d)| *d).collect::<Vec<_>>(),
        [70, 99],
        "{old:?}"
    );
    assert_eq!(snapshot(&env.path(&first_old)), snapshot(&t(1)));
    assert_eq!(snapshot(&env.path(&old[1].0)), snapshot(&t(2)));
    // At its deadline `recover` removes it, and only it.
    env.fp(&["recover"]).now(70).expect(0);
    let old = old_trees(&env, RES);
    assert_eq!(
        old.iter().map(|(_, d)| *d).collect::<Vec<_>>(),
        [99],
        "{old:?}"
    );
    assert_eq!(snapshot(&env.path(&old[0].0)), snapshot(&t(2)));
    // Past the second's deadline, the next publish removes it.
    tree_write(&env, RES, (1, Some(4)), &t(4), 120, &["--keep-old", "5"])
        .expect_stdout(0, "written");
    let old = old_trees(&env, RES);
    assert_eq!(
        old.iter().map(|(_, d)| *d).collect::<Vec<_>>(),
        [125],
        "{old:?}"
    );
    assert_eq!(snapshot(&env.path(&old[0].0)), snapshot(&t(3)));
    // `--keep-old 0`: the replaced tree goes at once (and the expired one with it).
    tree_write(&env, RES, (1, Some(5)), &t(5), 130, &["--keep-old", "0"])
        .expect_stdout(0, "written");
    assert_eq!(old_trees(&env, RES), []);
    assert_published(&env, RES, &t(5), (1, 5), 130);
    assert_eq!(names_with(&env, ".fencepost-"), Vec::<String>::new());
}

/// A writer's `--keep-old` holds even when another command recovers the resource between
/// the writer's COMMIT and its clean-up, while its marker is still there: the writer is
/// alive (it holds its tree's lock), so its marker is its own to clear, and the tree it
/// replaced is kept for as long as it asked.
#[test]
fn a_recovery_between_a_publishs_commit_and_its_clean_up_keeps_its_keep_old() {
    let env = Env::new();
    let src = sources();
    let t = versions(src.path(), 2);
    env.claim(RES, "A", 1000, 0);
    tree_write(&env, RES, (1, Some(1)), &t[1], 1, &[]).expect_stdout(0, "written");
    let t2 = arg(&t[2]);
    let paused = crate::support::spawn_paused(
        &env,
        &[
            "write",
            RES,
            "--epoch",
            "1",
            "--seq",
            "2",
            "--tree",
            &t2,
            "--keep-old",
            "600",
        ],
        Some(10),
        b"",
        "tree.before_cleanup",
    );
    env.fp(&["recover"]).now(11).expect(0);
    let out = paused.resume();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_published(&env, RES, &t[2], (1, 2), 12);
    let old = old_trees(&env, RES);
    assert_eq!(
        old.iter().map(|(_, d)| *d).collect::<Vec<_>>(),
        [610],
        "{old:?}"
    );
    assert_eq!(snapshot(&env.path(&old[0].0)), snapshot(&t[1]));
}

/// An old tree with folders its owner may not write to (a read-only folder, a file in
/// it) is removed all the same once due.
#[test]
fn an_old_tree_with_read_only_folders_is_removed_when_due() {
    let env = Env::new();
    let src = sources();
    let t1 = site(&src.path().join("t1"), "t1");
    // `deep/a/b` is 0555 in every site tree.
    env.claim(RES, "A", 1000, 0);
    tree_write(&env, RES, (1, Some(1)), &t1, 1, &[]).expect_stdout(0, "written");
    let t2 = site(&src.path().join("t2"), "t2");
    tree_write(&env, RES, (1, Some(2)), &t2, 2, &["--keep-old", "1"]).expect_stdout(0, "written");
    assert_eq!(old_trees(&env, RES).len(), 1);
    env.fp(&["recover"]).now(3).expect(0);
    assert_eq!(old_trees(&env, RES), []);
}

// ---------------------------------------------------------------------------------------
// verify and remove
// ---------------------------------------------------------------------------------------

#[test]
fn verify_names_each_entry_added_removed_or_changed_by_hand() {
    let env = Env::new();
    let src = sources();
    let v1 = site(&src.path().join("v1"), "v1");
    env.claim(RES, "A", 100, 0);
    tree_write(&env, RES, (1, Some(1)), &v1, 1, &[]).expect_stdout(0, "written");
    env.fp(&["verify"]).now(2).expect(0);
    let tree = env.path(RES);
    std::fs::write(tree.join("added.txt"), "by hand\n").expect("add");
    std::fs::create_dir(tree.join("empty/new folder")).expect("mkdir");
    std::fs::remove_file(tree.join("zero")).expect("rm");
    std::fs::write(tree.join("bin/run.sh"), "#!/bin/sh\necho edited\n").expect("edit");
    chmod(&tree.join("secret.key"), 0o644);
    let expected = [
        ("added", "added.txt"),
        ("added", "empty/new folder"),
        ("removed", "zero"),
        ("changed", "bin/run.sh"),
        ("changed", "secret.key"),
    ];
    let done = env.fp(&["verify"]).now(3).expect(9);
    let said = format!("{}{}", done.stdout, done.stderr);
    for (what, path) in expected {
        assert!(
            said.contains(&format!("{what} {path}")),
            "verify does not say {what} {path}: {said}"
        );
    }
    for untouched in ["index.html", "tool", "blob.bin", "deep/a/b/leaf.txt"] {
        assert!(
            !said.contains(&format!(" {untouched}")),
            "verify names {untouched}, which nobody touched: {said}"
        );
    }
    let j = env.fp(&["--json", "verify"]).now(3).expect(9).json();
    let problems = j["problems"].as_array().expect("problems");
    assert_eq!(problems.len(), 1, "{j}");
    assert_eq!(problems[0]["problem"], "drifted", "{j}");
    assert_eq!(problems[0]["resource"], RES, "{j}");
    let message = problems[0]["message"].as_str().expect("message");
    for (what, path) in expected {
        assert!(message.contains(&format!("{what} {path}")), "{message}");
    }
    let row = status_row(&env, RES, Some(3));
    assert_eq!(row["document"]["state"], "drifted", "{row}");
    // The top folder's mode is an entry too.
    chmod(&tree, 0o755);
    let done = env.fp(&["verify", RES]).now(3).expect(9);
    assert!(done.stdout.contains("changed ."), "{}", done.stdout);
}

/// `verify` says each drifted entry on the resource's one line: a name with a newline
/// is shown escaped, never as a line of its own.
#[test]
fn verify_shows_a_drifted_name_with_a_newline_escaped() {
    let env = Env::new();
    let src = sources();
    let v1 = site(&src.path().join("v1"), "v1");
    std::fs::write(v1.join("new\nline"), "x\n").expect("write");
    env.claim(RES, "A", 100, 0);
    tree_write(&env, RES, (1, Some(1)), &v1, 1, &[]).expect_stdout(0, "written");
    assert_published(&env, RES, &v1, (1, 1), 2);
    std::fs::write(env.path(RES).join("new\nline"), "edited\n").expect("edit");
    let done = env.fp(&["verify"]).now(3).expect(9);
    assert_eq!(done.stdout.lines().count(), 1, "{:?}", done.stdout);
    assert!(
        done.stdout.contains(r#"changed "new\nline""#),
        "{:?}",
        done.stdout
    );
}

/// A replay of the recorded version over a tree edited by hand puts the recorded tree
/// back (a replay is a no-op only while the tree is the one recorded).
#[test]
fn publishing_the_recorded_tree_again_over_a_drifted_one_puts_it_back() {
    let env = Env::new();
    let src = sources();
    let v1 = site(&src.path().join("v1"), "v1");
    env.claim(RES, "A", 100, 0);
    tree_write(&env, RES, (1, Some(1)), &v1, 1, &[]).expect_stdout(0, "written");
    std::fs::write(env.path(RES).join("index.html"), "defaced\n").expect("edit");
    env.fp(&["verify"]).now(2).expect(9);
    tree_write(&env, RES, (1, Some(1)), &v1, 3, &[]).expect(0);
    assert_published(&env, RES, &v1, (1, 1), 4);
    env.fp(&["verify"]).now(4).expect(0);
}

/// The same with a FIFO put in the tree by hand, which no tree can hold: the tree on
/// disk is not the recorded one, and the replay puts the recorded one back rather than
/// failing on it; `verify` names the entry.
#[test]
fn publishing_the_recorded_tree_again_over_a_fifo_put_in_by_hand_puts_it_back() {
    let env = Env::new();
    let src = sources();
    let v1 = site(&src.path().join("v1"), "v1");
    env.claim(RES, "A", 100, 0);
    tree_write(&env, RES, (1, Some(1)), &v1, 1, &[]).expect_stdout(0, "written");
    crate::support::mkfifo(&env.path(RES).join("deep/a/b/pipe"));
    let done = env.fp(&["verify"]).now(2).expect(9);
    assert!(done.stdout.contains("pipe"), "{}", done.stdout);
    tree_write(&env, RES, (1, Some(1)), &v1, 3, &[]).expect_stdout(0, "written");
    assert_published(&env, RES, &v1, (1, 1), 4);
    env.fp(&["verify"]).now(4).expect(0);
}

#[test]
fn removing_a_tree_takes_the_folder_away() {
    let env = Env::new();
    let src = sources();
    let v1 = site(&src.path().join("v1"), "v1");
    env.claim("a/site", "A", 100, 0);
    tree_write(&env, "a/site", (1, Some(1)), &v1, 1, &[]).expect_stdout(0, "written");
    let j = env
        .fp(&["--json", "remove", "a/site", "--epoch", "1", "--seq", "2"])
        .now(2)
        .expect(0)
        .json_contract();
    assert_eq!(j["outcome"], "removed", "{j}");
    assert_eq!(j["had_document"], true, "{j}");
    assert!(!env.path("a/site").exists(), "the tree is still there");
    let row = status_row(&env, "a/site", Some(3));
    assert_eq!(row["document"]["state"], "removed", "{row}");
    assert_eq!(row["sink"]["removed"], true, "{row}");
    assert_eq!(row["sink"]["seq"], 2, "{row}");
    env.fp(&["verify"]).now(3).expect(0);
    assert_eq!(names_with(&env, ".fencepost-"), Vec::<String>::new());
    // A removal is a version: an older tree is stale, a newer one is published.
    tree_write(&env, "a/site", (1, Some(1)), &v1, 4, &[]).expect_stdout(5, "stale");
    assert!(!env.path("a/site").exists());
    tree_write(&env, "a/site", (1, Some(3)), &v1, 5, &[]).expect_stdout(0, "written");
    assert_published(&env, "a/site", &v1, (1, 3), 6);
}

/// A tree removed by hand is `missing`; `remove` retires the record all the same.
#[test]
fn a_tree_removed_by_hand_is_missing_and_can_be_removed() {
    let env = Env::new();
    let src = sources();
    let v1 = site(&src.path().join("v1"), "v1");
    env.claim(RES, "A", 100, 0);
    tree_write(&env, RES, (1, Some(1)), &v1, 1, &[]).expect_stdout(0, "written");
    chmod(&env.path(RES).join("deep/a/b"), 0o755);
    std::fs::remove_dir_all(env.path(RES)).expect("rm -r");
    let row = status_row(&env, RES, Some(2));
    assert_eq!(row["document"]["state"], "missing", "{row}");
    env.fp(&["verify"]).now(2).expect(9);
    let j = env
        .fp(&["--json", "remove", RES, "--epoch", "1", "--seq", "2"])
        .now(3)
        .expect(0)
        .json_contract();
    assert_eq!(j["had_document"], false, "{j}");
    env.fp(&["verify"]).now(3).expect(0);
}

// ---------------------------------------------------------------------------------------
// Readers
// ---------------------------------------------------------------------------------------

/// What a reader found in one walk of the tree: each file's path and bytes.
type Walk = BTreeMap<String, Vec<u8>>;

/// Reads every file of the folder `dir` (an open folder) into `out`, through handles:
/// each name is opened relative to its folder, never by a path from the root.
fn read_all(dir: &File, prefix: &str, out: &mut Walk) -> Result<(), String> {
    use rustix::fs::{Dir, FileType, Mode, OFlags, openat};
    let entries = Dir::read_from(dir).map_err(|e| format!("{prefix}: readdir: {e}"))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{prefix}: readdir: {e}"))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let path = format!("{prefix}{}", String::from_utf8_lossy(name));
        let folder = entry.file_type() == FileType::Directory;
        let flags = OFlags::RDONLY
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC
            | if folder {
                OFlags::DIRECTORY
            } else {
                OFlags::empty()
            };
        let fd = openat(dir, entry.file_name(), flags, Mode::empty())
            .map_err(|e| format!("{path}: open: {e}"))?;
        let mut file = File::from(fd);
        if folder {
            read_all(&file, &format!("{path}/"), out)?;
        } else {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)
                .map_err(|e| format!("{path}: read: {e}"))?;
            out.insert(path, bytes);
            // A reader takes its time: a walk lasts long enough that swaps, and the
            // retirement of the tree swapped out, happen while walks are under way.
            std::thread::sleep(std::time::Duration::from_micros(300));
        }
    }
    Ok(())
}

/// The files of the reader test's version `n`: which files there are depends on the
/// version (`only-N`, and `extra/` holds `n % 4` files), and each file names its version.
fn reader_version(n: i64) -> Walk {
    let mut files = Walk::new();
    let mut add = |path: String| {
        let bytes = format!("version {n} of {path}\n").into_bytes();
        files.insert(path, bytes);
    };
    add("version".into());
    add(format!("only-{n}"));
    for i in 0..8 {
        add(format!("common/file-{i}"));
    }
    add("common/deeper/still/leaf".into());
    for i in 0..n % 4 {
        add(format!("extra/file-{i}"));
    }
    files
}

fn make_reader_version(dir: &Path, n: i64) -> PathBuf {
    for (path, bytes) in reader_version(n) {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, bytes).expect("write");
    }
    // `extra/` is there in every version, sometimes empty.
    std::fs::create_dir_all(dir.join("extra")).expect("mkdir");
    dir.to_path_buf()
}

/// One walk: opens the tree once (a folder handle) and reads every file under it.
/// Returns the version it found, after checking that every file is that version's and
/// that every file of that version is there.
fn walk_once(res: &Path) -> Result<i64, String> {
    let top = File::open(res).map_err(|e| format!("open the tree: {e}"))?;
    let mut found = Walk::new();
    read_all(&top, "", &mut found)?;
    let version = found
        .get("version")
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|t| t.strip_prefix("version "))
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse::<i64>().ok())
        .ok_or_else(|| format!("no version file in {:?}", found.keys()))?;
    if found != reader_version(version) {
        return Err(format!(
            "a walk of version {version} found a mix: {:?}",
            found
                .iter()
                .map(|(k, v)| format!("{k}={}", String::from_utf8_lossy(v).trim()))
                .collect::<Vec<_>>()
        ));
    }
    Ok(version)
}

/// Readers open the tree once and read every file through that handle while writers
/// publish 30 versions one after the other: every walk sees exactly one version, whole
/// (every file of it, none of another), and a reader never sees an older version after
/// a newer one. Each version is published by two writers at once (one writes it, the
/// other replays it), and only once a reader has seen the version before it, so every
/// version is read while the next one is swapped in.
#[test]
fn readers_that_opened_the_tree_see_one_whole_version_while_it_is_replaced() {
    use std::time::{Duration, Instant};

    const VERSIONS: i64 = 30;
    const READERS: usize = 3;
    let env = Env::new();
    let src = sources();
    env.claim(RES, "A", 1000, 0);
    let publish = |n: i64| {
        let tree = make_reader_version(&src.path().join(format!("v{n}")), n);
        publish_twice(&env, n, &tree);
    };
    publish(1);
    let res = env.path(RES);
    let seen = Readers::default();
    let walks: Vec<usize> = std::thread::scope(|s| {
        let readers: Vec<_> = (0..READERS)
            .map(|_| s.spawn(|| reader(&res, &seen)))
            .collect();
        for n in 2..=VERSIONS {
            // Not a timing assertion: a guard against a reader that hangs.
            let started = Instant::now();
            while seen.newest() < n - 1 && !seen.failed() {
                assert!(
                    started.elapsed() < Duration::from_secs(120),
                    "no reader saw version {}",
                    n - 1
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            if seen.failed() {
                break;
            }
            publish(n);
        }
        seen.stop();
        readers
            .into_iter()
            .map(|r| r.join().expect("a reader panicked"))
            .collect()
    });
    let errors = seen.errors.into_inner().expect("lock");
    assert!(
        errors.is_empty(),
        "{} of the walks ({walks:?} in all) failed; the first: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    assert_eq!(walk_once(&res), Ok(VERSIONS));
    assert!(walks.iter().all(|w| *w > 0), "walks: {walks:?}");
}

/// Two writers publish version `n` (the tree `tree`) at once, as a retried job would:
/// each stages its own copy; the first to take the lock writes it, the other finds it a
/// replay.
fn publish_twice(env: &Env, n: i64, tree: &Path) {
    let mut answers: Vec<(i32, String)> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let done = tree_write(env, RES, (1, Some(n)), tree, n, &[]).output();
                    (done.code, done.stdout.trim().to_string())
                })
            })
            .collect();
        writers
            .into_iter()
            .map(|w| w.join().expect("a writer panicked"))
            .collect()
    });
    answers.sort();
    assert_eq!(
        answers,
        [(0, "replay".to_string()), (0, "written".to_string())],
        "version {n}"
    );
}

/// What the readers tell the writer: the newest version one has seen, what went wrong,
/// and when to stop.
#[derive(Default)]
struct Readers {
    newest: std::sync::atomic::AtomicI64,
    errors: std::sync::Mutex<Vec<String>>,
    stop: std::sync::atomic::AtomicBool,
}

impl Readers {
    fn newest(&self) -> i64 {
        self.newest.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn failed(&self) -> bool {
        !self.errors.lock().expect("lock").is_empty()
    }

    fn fail(&self, error: String) {
        self.errors.lock().expect("lock").push(error);
    }

    fn stop(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A reader: walks the tree at `res` again and again until told to stop; returns how
/// many walks it made. A version older than one it saw before is an error too.
fn reader(res: &Path, seen: &Readers) -> usize {
    use std::sync::atomic::Ordering;
    let (mut walks, mut last) = (0, 0);
    while !seen.stop.load(Ordering::SeqCst) {
        match walk_once(res) {
            Ok(version) if version < last => {
                seen.fail(format!("version {version} seen after version {last}"));
            }
            Ok(version) => {
                last = version;
                seen.newest.fetch_max(version, Ordering::SeqCst);
            }
            Err(e) => seen.fail(e),
        }
        walks += 1;
    }
    walks
}

// ---------------------------------------------------------------------------------------
// Walls
// ---------------------------------------------------------------------------------------

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

/// The tree the wall tests publish, in a folder that gets swapped.
const WALLED: &str = "reports/site";

/// How a paused publish ends after its folder was swapped.
#[derive(Debug, Clone, Copy)]
enum End {
    /// It goes on to its end.
    Resume,
    /// It goes on and dies at the next failpoint.
    AbortAtNext,
    /// SIGKILL where it is paused.
    Kill,
}

/// Whether the publish replaces a tree (an exchange) or is the first (a rename).
#[derive(Debug, Clone, Copy)]
enum Before {
    Nothing,
    ATree,
}

/// A folder outside the root that looks like the resource's folder to anything that
/// would wrongly follow the symlink into it: a tree at the resource's name, an old tree
/// long due, a staged tree no writer holds. Nothing in it may ever change.
fn decoy() -> TempDir {
    let outside = tempfile::Builder::new()
        .prefix("fencepost-outside-")
        .tempdir()
        .expect("outside");
    for name in [
        "site",
        ".site.fencepost-old-1-1",
        ".site.fencepost-tmp-AAAAAAAAAAAA",
    ] {
        build(
            &outside.path().join(name),
            0o755,
            &[Make::File("keep.txt", 0o644, b"not the tool's\n")],
        );
    }
    outside
}

/// A tree publish paused at each of its failpoints, the resource's folder swapped for a
/// symlink to a folder outside the root (the real one moved aside, inside the root), then
/// resumed, aborted at the next step or killed: nothing outside the root ever changes,
/// neither then nor after `recover`; every command ends with a defined exit code; and
/// once the real folder is put back, recovery leaves the version the record names.
#[test]
fn a_folder_swapped_at_any_step_of_a_tree_publish_never_lets_a_byte_out_of_the_root() {
    let src = sources();
    let trees = (
        site(&src.path().join("t1"), "t1"),
        site(&src.path().join("t2"), "t2"),
    );
    for before in [Before::Nothing, Before::ATree] {
        for i in 0..TREE_POINTS.len() {
            for end in [End::Resume, End::AbortAtNext, End::Kill] {
                if matches!(end, End::AbortAtNext) && i + 1 == TREE_POINTS.len() {
                    continue;
                }
                swapped_during_a_publish(before, i, end, (&trees.0, &trees.1));
            }
        }
    }
}

/// One case of the test above: the publish of `t2` paused at `TREE_POINTS[i]`.
fn swapped_during_a_publish(before: Before, i: usize, end: End, (t1, t2): (&Path, &Path)) {
    let point = TREE_POINTS[i];
    let what = format!("{before:?}, paused at {point}, then {end:?}");
    let also = match end {
        End::AbortAtNext => format!("{}=return(abort)", TREE_POINTS[i + 1]),
        _ => String::new(),
    };
    let env = Env::new();
    let outside = decoy();
    let untouched = snapshot(outside.path());
    let assert_untouched = |when: &str| {
        assert_eq!(
            snapshot(outside.path()),
            untouched,
            "{what}{when}: the folder outside the root changed"
        );
    };
    std::fs::create_dir(env.path("reports")).expect("mkdir");
    env.claim(WALLED, "A", 100, 0);
    if let Before::ATree = before {
        tree_write(&env, WALLED, (1, Some(1)), t1, 1, &[]).expect_stdout(0, "written");
    }
    let t2_arg = arg(t2);
    let paused = spawn_paused_also(
        &[],
        &env,
        &[
            "write", WALLED, "--epoch", "1", "--seq", "2", "--tree", &t2_arg,
        ],
        Some(21),
        b"",
        point,
        &also,
    );
    std::fs::rename(env.path("reports"), env.path("reports.moved")).expect("move the folder");
    std::os::unix::fs::symlink(outside.path(), env.path("reports"))
        .expect("symlink out of the root");
    match end {
        End::Kill => paused.kill(),
        End::Resume | End::AbortAtNext => {
            let out = paused.resume();
            let code = out.status.code();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(matches!(code, Some(0..=2) | None), "{what}: {out:?}");
            assert!(!stderr.contains("panicked"), "{what}: {stderr}");
            // Swapped before the folder checks under the lock: refused, the staged tree
            // removed; swapped after them: published in the real folder, moved aside.
            if let End::Resume = end {
                let expected = if i <= 4 { 2 } else { 0 };
                assert_eq!(code, Some(expected), "{what}: {stderr}");
                if expected == 0 {
                    assert_eq!(
                        snapshot(&env.path("reports.moved/site")),
                        snapshot(t2),
                        "{what}"
                    );
                } else {
                    assert_eq!(debris(&env), Vec::<String>::new(), "{what}");
                }
            }
        }
    }
    assert_untouched("");
    let out = env.fp(&["recover"]).now(30).output();
    assert!(matches!(out.code, 0..=2), "{what}: recover: {}", out.stderr);
    assert_untouched(", after recover");
    // The real folder put back: recovery finishes what was left there, and the tree is
    // the version the record names.
    std::fs::remove_file(env.path("reports")).expect("rm the symlink");
    std::fs::rename(env.path("reports.moved"), env.path("reports")).expect("move it back");
    env.fp(&["recover"]).now(200).expect(0);
    assert_eq!(debris(&env), Vec::<String>::new(), "{what}, recovered");
    let row = status_row(&env, WALLED, Some(200));
    match row["sink"]["seq"].as_i64() {
        Some(2) => assert_published(&env, WALLED, t2, (1, 2), 200),
        Some(1) => assert_published(&env, WALLED, t1, (1, 1), 200),
        _ => assert!(!env.path(WALLED).exists(), "{what}: {row}"),
    }
    assert_untouched(", at the end");
}
