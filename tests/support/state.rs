//! What a test reads back after a crash: a resource's row of `status --json`, the files
//! the tool keeps beside documents, and the invariant that the document and its record
//! tell the same story.

use serde_json::Value;

use super::sha256_hex;
use crate::harness::Env;

/// One resource's row of `status --json`.
pub(crate) fn status_row(env: &Env, res: &str, now: Option<i64>) -> Value {
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
pub(crate) fn tool_files(env: &Env) -> Vec<String> {
    env.files()
        .into_iter()
        .filter(|f| f.contains(".fencepost-"))
        .collect()
}

pub(crate) fn temp_files(env: &Env) -> Vec<String> {
    env.files()
        .into_iter()
        .filter(|f| f.contains(".fencepost-tmp-"))
        .collect()
}

/// The `-gone` files of removals waiting for their COMMIT (or for recovery).
pub(crate) fn gone_files(env: &Env) -> Vec<String> {
    env.files()
        .into_iter()
        .filter(|f| f.contains(".fencepost-gone-"))
        .collect()
}

pub(crate) fn link_files(env: &Env) -> Vec<String> {
    env.files()
        .into_iter()
        .filter(|f| f.contains(".fencepost-pre-") || f.contains(".fencepost-new-"))
        .collect()
}

/// Promise 3: the document is `want` (bytes and the epoch they were written under),
/// and the record's epoch and SHA-256 describe exactly those bytes; or, for `None`, no
/// document and no recorded content.
pub(crate) fn assert_consistent(
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

/// The record is the version `want` (`(bytes, epoch, seq)`, as [`assert_consistent`] says
/// it) and names its seq; `None` as there.
pub(crate) fn assert_version(
    env: &Env,
    res: &str,
    now: Option<i64>,
    want: Option<(&[u8], i64, i64)>,
    what: &str,
) {
    assert_consistent(env, res, now, want.map(|(b, e, _)| (b, e)), what);
    if let Some((_, _, seq)) = want {
        let row = status_row(env, res, now);
        assert_eq!(row["sink"]["seq"], seq, "{what}: {row}");
        assert_eq!(row["sink"]["removed"], false, "{what}: {row}");
    }
}

/// The resource is removed at `(epoch, seq)`: no document, the record a tombstone of that
/// version (no bytes), `status` says `removed`, and `verify` finds nothing to report.
pub(crate) fn assert_removed(env: &Env, res: &str, now: i64, (epoch, seq): (i64, i64), what: &str) {
    let row = status_row(env, res, Some(now));
    assert_eq!(
        env.read(res),
        None,
        "{what}: the document is there; row {row}"
    );
    assert_eq!(row["document"]["state"], "removed", "{what}: {row}");
    assert_eq!(row["sink"]["removed"], true, "{what}: {row}");
    assert_eq!(row["sink"]["content_epoch"], epoch, "{what}: {row}");
    assert_eq!(row["sink"]["seq"], seq, "{what}: {row}");
    assert_eq!(row["sink"]["sha256"], "", "{what}: {row}");
    assert!(
        row["sink"]["fence"].as_i64().is_some_and(|f| f >= epoch),
        "{what}: the fence is under the removal's epoch: {row}"
    );
    env.fp(&["verify"]).now(now).expect(0);
}
