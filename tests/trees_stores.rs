//! Trees (`write --tree`) on both stores: a local root, a PostgreSQL store read back with
//! `cat TREE/PATH`, the same store with a mirror root (which must hold what `cat`
//! prints), and through PgBouncer. The rules are the documents' (replay, conflict, stale,
//! `--seq`), and a tree is published whole.

use std::path::Path;

use crate::support::{Backend, both_stores};

/// A folder of `files` (path, content) in a fresh temporary folder, with an empty
/// folder `empty/` beside them.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary folder");
    for (path, content) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("make folders");
        std::fs::write(path, content).expect("write a file");
    }
    std::fs::create_dir_all(dir.path().join("empty")).expect("an empty folder");
    dir
}

/// `write RES --epoch E [--seq N] --tree DIR` at tick `now`, its exit code asserted; the
/// outcome word printed.
#[track_caller]
fn publish(
    env: &Backend,
    res: &str,
    epoch: i64,
    seq: i64,
    dir: &Path,
    now: i64,
    code: i32,
) -> String {
    let epoch = epoch.to_string();
    let seq_text = seq.to_string();
    let dir = dir.to_str().expect("a UTF-8 path");
    let mut args = vec!["write", res, "--epoch", &epoch, "--tree", dir];
    if seq != 0 {
        args.extend(["--seq", &seq_text]);
    }
    env.fp(&args)
        .now(now)
        .expect(code)
        .stdout
        .trim()
        .to_string()
}

/// The file `path` of the tree `res` as text (`None` when there is none).
fn file(env: &Backend, res: &str, path: &str) -> Option<String> {
    env.read(&format!("{res}/{path}"))
        .map(|bytes| String::from_utf8(bytes).expect("utf-8"))
}

both_stores!(
    a_tree_is_published_whole_and_replaced_whole,
    a_late_tree_is_stale_after_a_takeover_and_changes_nothing,
    a_tree_is_removed_under_its_fence,
);

fn a_tree_is_published_whole_and_replaced_whole(env: &Backend) {
    let epoch = env.claim("site", "A", 100, 0);
    let one = tree(&[("index.html", "one"), ("css/site.css", "one css")]);
    assert_eq!(publish(env, "site", epoch, 0, one.path(), 1, 0), "written");
    assert_eq!(file(env, "site", "index.html").as_deref(), Some("one"));
    assert_eq!(
        file(env, "site", "css/site.css").as_deref(),
        Some("one css")
    );
    // The same tree, copied from another folder: a replay.
    let copy = tree(&[("index.html", "one"), ("css/site.css", "one css")]);
    assert_eq!(publish(env, "site", epoch, 0, copy.path(), 2, 0), "replay");
    // Another tree under the same version: a conflict, nothing changes.
    let other = tree(&[("index.html", "other")]);
    publish(env, "site", epoch, 0, other.path(), 3, 6);
    assert_eq!(
        file(env, "site", "css/site.css").as_deref(),
        Some("one css")
    );
    // The next version of the lease replaces the whole tree: the old file is gone.
    let two = tree(&[("index.html", "two"), ("about.html", "about")]);
    assert_eq!(publish(env, "site", epoch, 1, two.path(), 4, 0), "written");
    assert_eq!(file(env, "site", "index.html").as_deref(), Some("two"));
    assert_eq!(file(env, "site", "about.html").as_deref(), Some("about"));
    assert_eq!(file(env, "site", "css/site.css"), None);
    // An older seq of the epoch is stale.
    publish(env, "site", epoch, 0, one.path(), 5, 5);
    assert_eq!(file(env, "site", "index.html").as_deref(), Some("two"));
    let row = env
        .fp(&["--json", "status", "site"])
        .now(6)
        .expect(0)
        .json();
    let sink = &row["resources"][0]["sink"];
    assert_eq!(sink["seq"], 1, "{row}");
    assert!(
        sink["tree_sha256"].as_str().is_some_and(|s| s.len() == 64),
        "{row}"
    );
    assert!(sink["sha256"].is_null(), "{row}");
    if env.is_local() || env.is_mirror() {
        env.fp(&["verify"]).now(6).expect(0);
    }
}

fn a_late_tree_is_stale_after_a_takeover_and_changes_nothing(env: &Backend) {
    let a = env.claim("site", "A", 10, 0);
    let old = tree(&[("page", "A's")]);
    publish(env, "site", a, 0, old.path(), 1, 0);
    let b = env.claim("site", "B", 10, 10);
    let new = tree(&[("page", "B's")]);
    publish(env, "site", b, 0, new.path(), 11, 0);
    // A, paused past its lease, publishes the tree it prepared.
    let late = tree(&[("page", "A's late")]);
    publish(env, "site", a, 5, late.path(), 12, 5);
    assert_eq!(file(env, "site", "page").as_deref(), Some("B's"));
    assert_eq!(env.debris(), Vec::<String>::new());
}

fn a_tree_is_removed_under_its_fence(env: &Backend) {
    let epoch = env.claim("site", "A", 100, 0);
    let one = tree(&[("page", "one")]);
    publish(env, "site", epoch, 1, one.path(), 1, 0);
    env.fp(&[
        "remove",
        "site",
        "--epoch",
        &epoch.to_string(),
        "--seq",
        "2",
    ])
    .now(2)
    .expect_stdout(0, "removed");
    assert_eq!(file(env, "site", "page"), None);
    let row = env
        .fp(&["--json", "status", "site"])
        .now(3)
        .expect(0)
        .json();
    assert_eq!(row["resources"][0]["document"]["state"], "removed", "{row}");
    // A document cannot take a tree's name, removed or not.
    env.write("site", epoch, "a document", 4, 2);
    // A later version publishes a tree again.
    let two = tree(&[("page", "two")]);
    publish(env, "site", epoch, 3, two.path(), 5, 0);
    assert_eq!(file(env, "site", "page").as_deref(), Some("two"));
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_store_uploads_only_the_files_it_does_not_hold() {
    let env = Backend::postgres();
    let blobs = || -> i64 {
        env.pg_client()
            .query_one("SELECT count(*) FROM fencepost_blob", &[])
            .expect("count blobs")
            .get(0)
    };
    let epoch = env.claim("site", "A", 100, 0);
    let one = tree(&[("a", "same"), ("b", "old"), ("c", "same too")]);
    publish(&env, "site", epoch, 1, one.path(), 1, 0);
    // Three contents and the manifest.
    assert_eq!(blobs(), 4);
    let two = tree(&[("a", "same"), ("b", "new"), ("c", "same too")]);
    publish(&env, "site", epoch, 2, two.path(), 2, 0);
    // One new content and the new manifest; the unchanged files' blobs are reused.
    assert_eq!(blobs(), 6);
    // The old tree's manifest and its file nobody else names go once `recover` may
    // collect them; the files the new tree names stay.
    env.fp(&["recover", "--grace", "0"]).now(3).expect(0);
    assert_eq!(blobs(), 4);
    assert_eq!(file(&env, "site", "a").as_deref(), Some("same"));
    assert_eq!(file(&env, "site", "b").as_deref(), Some("new"));
}
