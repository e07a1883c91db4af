//! Versions ordered by (epoch, seq), and removals as one more version: `write --seq`
//! row by row (a higher seq written, the same seq a replay or a conflict, a lower one
//! stale, a takeover's epoch beating any seq of the old one), and `fencepost remove`
//! under the same rules (removed, replay, conflict, stale, unissued), with what a
//! removal leaves: a fence that keeps late writers out, epochs that never restart, a
//! document state `removed` that `status`, `cat`, `verify`, `complete` and mirrors all
//! honour.

use serde_json::Value;

use crate::harness::Env;
use crate::hosts::Host;
use crate::support::{Backend, both_stores, pg};

/// The arguments of `CMD RES --epoch EPOCH [--seq SEQ] EXTRA…`, `--json` first when
/// `json`.
fn args(
    json: bool,
    cmd: &str,
    res: &str,
    epoch: i64,
    seq: Option<i64>,
    extra: &[&str],
) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    if json {
        all.push("--json".into());
    }
    all.extend([cmd.into(), res.into(), "--epoch".into(), epoch.to_string()]);
    if let Some(seq) = seq {
        all.extend(["--seq".into(), seq.to_string()]);
    }
    all.extend(extra.iter().map(|s| s.to_string()));
    all
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// A plain `write RES -e EPOCH [--seq SEQ]` of `content` at tick `now`, asserting its
/// exit code and its one word on stdout; returns stderr.
#[track_caller]
fn write(
    env: &Backend,
    res: &str,
    (epoch, seq): (i64, Option<i64>),
    content: &str,
    now: i64,
    (code, word): (i32, &str),
) -> String {
    let a = args(false, "write", res, epoch, seq, &[]);
    env.fp(&strs(&a))
        .now(now)
        .stdin(content)
        .expect_stdout(code, word)
        .stderr
}

/// The same write with `--json`: asserts the exit code and the JSON contract, returns
/// the object.
#[track_caller]
fn write_json(
    env: &Backend,
    res: &str,
    (epoch, seq): (i64, Option<i64>),
    content: &str,
    now: i64,
    code: i32,
) -> Value {
    let a = args(true, "write", res, epoch, seq, &[]);
    env.fp(&strs(&a))
        .now(now)
        .stdin(content)
        .expect(code)
        .json_contract()
}

/// A plain `remove RES -e EPOCH [--seq SEQ]` at tick `now`, asserting its exit code and
/// its one word on stdout; returns stderr.
#[track_caller]
fn remove(
    env: &Backend,
    res: &str,
    (epoch, seq): (i64, Option<i64>),
    now: i64,
    (code, word): (i32, &str),
) -> String {
    let a = args(false, "remove", res, epoch, seq, &[]);
    env.fp(&strs(&a)).now(now).expect_stdout(code, word).stderr
}

/// The same removal with `--json` (and `extra` arguments): asserts the exit code and
/// the JSON contract, returns the object.
#[track_caller]
fn remove_json(
    env: &Backend,
    res: &str,
    (epoch, seq): (i64, Option<i64>),
    extra: &[&str],
    now: i64,
    code: i32,
) -> Value {
    let a = args(true, "remove", res, epoch, seq, extra);
    env.fp(&strs(&a)).now(now).expect(code).json_contract()
}

/// `status RES --json` at tick `now`: the resource's row.
#[track_caller]
fn row(env: &Backend, res: &str, now: i64) -> Value {
    let j = env.fp(&["--json", "status", res]).now(now).expect(0).json();
    j["resources"][0].clone()
}

/// The names `status --json [EXTRA]` lists at tick `now`.
#[track_caller]
fn listed(env: &Backend, extra: &[&str], now: i64) -> Vec<String> {
    let mut a = vec!["--json", "status"];
    a.extend(extra);
    let j = env.fp(&a).now(now).expect(0).json();
    j["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("status lists no resources: {j}"))
        .iter()
        .map(|r| r["resource"].as_str().expect("a row's name").to_string())
        .collect()
}

/// Asserts that the resource has no document anywhere: no file in the root (or on the
/// mirror), nothing the store serves, nothing counted among the documents, and nothing
/// left beside where it was.
#[track_caller]
fn assert_gone(env: &Backend, res: &str) {
    assert_eq!(env.read(res), None, "{res} is still there");
    if env.is_mirror() || env.is_local() {
        assert_eq!(env.env().read(res), None, "{res}'s file is still there");
    }
    assert!(
        !env.documents().iter().any(|d| d == res),
        "{res} is still among the documents: {:?}",
        env.documents()
    );
    assert_eq!(env.debris(), Vec::<String>::new(), "left behind by {res}");
}

// ---------------------------------------------------------------------------------
// write --seq

/// E = e, N > n: written, each version replacing the last; the JSON says its seq, and
/// `status` the recorded one.
fn a_higher_seq_of_the_same_epoch_is_written(env: &Backend) {
    assert_eq!(env.claim("doc.md", "A", 10, 0), 1);
    write(env, "doc.md", (1, Some(1)), "v1", 1, (0, "written"));
    assert_eq!(env.text("doc.md"), "v1");
    let j = write_json(env, "doc.md", (1, Some(2)), "v2", 2, 0);
    assert_eq!(j["outcome"], "written", "{j}");
    assert_eq!(j["epoch"], 1, "{j}");
    assert_eq!(j["seq"], 2, "{j}");
    assert_eq!(env.text("doc.md"), "v2");
    // Seqs need not be consecutive: any higher one is a newer version.
    write(env, "doc.md", (1, Some(7)), "v7", 3, (0, "written"));
    assert_eq!(env.text("doc.md"), "v7");
    let r = row(env, "doc.md", 3);
    assert_eq!(r["sink"]["fence"], 1, "{r}");
    assert_eq!(r["sink"]["content_epoch"], 1, "{r}");
    assert_eq!(r["sink"]["seq"], 7, "{r}");
    assert_eq!(r["document"]["state"], env.current(), "{r}");
    assert_eq!(env.debris(), Vec::<String>::new());
}

/// E = e, N = n, same bytes: `replay`, exit 0, the file untouched and the record kept.
fn the_same_seq_with_the_same_bytes_is_a_replay_and_touches_nothing(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    write(env, "doc.md", (1, Some(2)), "v2", 1, (0, "written"));
    let before = (env.stamp("doc.md"), row(env, "doc.md", 1));
    write(env, "doc.md", (1, Some(2)), "v2", 2, (0, "replay"));
    let j = write_json(env, "doc.md", (1, Some(2)), "v2", 3, 0);
    assert_eq!(j["outcome"], "replay", "{j}");
    assert_eq!(j["seq"], 2, "{j}");
    assert_eq!(
        (env.stamp("doc.md"), row(env, "doc.md", 1)),
        before,
        "a replay rewrote the document or its record"
    );
    assert_eq!(env.text("doc.md"), "v2");
    assert_eq!(env.debris(), Vec::<String>::new());
}

/// E = e, N = n, different bytes: `conflict`, exit 6, nothing changed.
fn the_same_seq_with_other_bytes_is_a_conflict(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    write(env, "doc.md", (1, Some(2)), "v2", 1, (0, "written"));
    let before = (env.stamp("doc.md"), row(env, "doc.md", 1));
    write(env, "doc.md", (1, Some(2)), "other", 2, (6, "conflict"));
    let j = write_json(env, "doc.md", (1, Some(2)), "other", 2, 6);
    assert_eq!(j["outcome"], "conflict", "{j}");
    assert_eq!(j["epoch"], 1, "{j}");
    assert_eq!(j["seq"], 2, "{j}");
    assert_eq!((env.stamp("doc.md"), row(env, "doc.md", 2)), before);
    assert_eq!(env.text("doc.md"), "v2");
    assert_eq!(env.debris(), Vec::<String>::new());
}

/// E = e, N < n: `stale`, exit 5; the message says which version superseded it, and the
/// JSON carries the recorded seq and the fence.
fn a_lower_seq_of_the_same_epoch_is_stale_and_says_what_superseded_it(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    write(env, "doc.md", (1, Some(3)), "v3", 1, (0, "written"));
    let before = (env.stamp("doc.md"), row(env, "doc.md", 1));
    let said = write(env, "doc.md", (1, Some(2)), "v2", 2, (5, "stale"));
    assert!(
        said.contains("superseded by epoch 1 seq 3"),
        "stderr: {said:?}"
    );
    let j = write_json(env, "doc.md", (1, Some(2)), "v2", 2, 5);
    assert_eq!(j["outcome"], "stale", "{j}");
    assert_eq!(j["resource"], "doc.md", "{j}");
    assert_eq!(j["epoch"], 1, "{j}");
    assert_eq!(j["fence"], 1, "{j}");
    assert_eq!(j["seq"], 3, "{j}");
    // A retry of seq 1, older still, is stale the same way.
    let j = write_json(env, "doc.md", (1, Some(1)), "v1", 2, 5);
    assert_eq!(
        (j["outcome"].clone(), j["seq"].clone()),
        ("stale".into(), 3.into())
    );
    assert_eq!((env.stamp("doc.md"), row(env, "doc.md", 1)), before);
    assert_eq!(env.text("doc.md"), "v3");
    assert_eq!(env.debris(), Vec::<String>::new());
}

/// A write without --seq is seq 0: after seq 3 of its epoch it is stale (0 < 3).
fn a_write_without_seq_after_seq_3_of_its_epoch_is_stale(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    write(env, "doc.md", (1, Some(3)), "v3", 1, (0, "written"));
    let said = write(env, "doc.md", (1, None), "plain", 2, (5, "stale"));
    assert!(
        said.contains("superseded by epoch 1 seq 3"),
        "stderr: {said:?}"
    );
    let j = write_json(env, "doc.md", (1, None), "plain", 2, 5);
    assert_eq!(j["outcome"], "stale", "{j}");
    assert_eq!(j["fence"], 1, "{j}");
    assert_eq!(j["seq"], 3, "{j}");
    assert_eq!(env.text("doc.md"), "v3");
}

/// Every write's JSON carries `seq`, 0 included: written, replay and conflict without
/// --seq say 0.
fn write_json_says_seq_0_without_seq(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    let j = write_json(env, "doc.md", (1, None), "one", 1, 0);
    assert_eq!(
        (j["outcome"].clone(), j["seq"].clone()),
        ("written".into(), 0.into()),
        "{j}"
    );
    let j = write_json(env, "doc.md", (1, None), "one", 2, 0);
    assert_eq!(
        (j["outcome"].clone(), j["seq"].clone()),
        ("replay".into(), 0.into()),
        "{j}"
    );
    let j = write_json(env, "doc.md", (1, None), "two", 2, 6);
    assert_eq!(
        (j["outcome"].clone(), j["seq"].clone()),
        ("conflict".into(), 0.into()),
        "{j}"
    );
    // Then seq 1 of the same epoch is a newer version than seq 0.
    let j = write_json(env, "doc.md", (1, Some(1)), "two", 3, 0);
    assert_eq!(
        (j["outcome"].clone(), j["seq"].clone()),
        ("written".into(), 1.into()),
        "{j}"
    );
    assert_eq!(env.text("doc.md"), "two");
    assert_eq!(row(env, "doc.md", 3)["sink"]["seq"], 1);
}

/// The refusals that never reach the order carry `seq` too: every write's JSON does.
/// An unissued epoch (never claimed, above the highest issued, issued to another owner)
/// says the seq it was offered.
fn an_unissued_writes_json_carries_its_seq_too(env: &Backend) {
    env.claim("other.md", "X", 10, 0);
    let j = write_json(env, "doc.md", (1, Some(2)), "x", 1, 8);
    assert_eq!(
        (j["outcome"].clone(), j["seq"].clone()),
        ("unissued".into(), 2.into()),
        "{j}"
    );
    env.claim("doc.md", "A", 10, 1);
    let j = write_json(env, "doc.md", (9, None), "x", 2, 8);
    assert_eq!(
        (j["outcome"].clone(), j["seq"].clone()),
        ("unissued".into(), 0.into()),
        "{j}"
    );
    let a = args(true, "write", "doc.md", 1, Some(3), &["--owner", "B"]);
    let j = env
        .fp(&strs(&a))
        .now(2)
        .stdin("x")
        .expect(8)
        .json_contract();
    assert_eq!(
        (j["outcome"].clone(), j["seq"].clone()),
        ("unissued".into(), 3.into()),
        "{j}"
    );
    assert_gone(env, "doc.md");
}

/// FENCEPOST_SEQ is --seq.
fn the_seq_may_come_from_the_environment(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    env.fp(&["write", "doc.md", "--epoch", "1"])
        .env("FENCEPOST_SEQ", "4")
        .now(1)
        .stdin("v4")
        .expect_stdout(0, "written");
    assert_eq!(row(env, "doc.md", 1)["sink"]["seq"], 4);
    let done = env
        .fp(&["write", "doc.md", "--epoch", "1"])
        .env("FENCEPOST_SEQ", "3")
        .now(2)
        .stdin("v3")
        .expect_stdout(5, "stale");
    assert!(
        done.stderr.contains("superseded by epoch 1 seq 4"),
        "{done:?}"
    );
    assert_eq!(env.text("doc.md"), "v4");
}

/// Order is lexicographic: a takeover's epoch (a claim by another owner after expiry)
/// beats any seq of the old epoch, whatever its own seq, and the old epoch's higher
/// seqs are stale from then on.
fn a_takeovers_epoch_beats_any_seq_of_the_old_epoch(env: &Backend) {
    assert_eq!(env.claim("doc.md", "A", 10, 0), 1);
    write(env, "doc.md", (1, Some(5)), "A v5", 1, (0, "written"));
    assert_eq!(env.claim("doc.md", "B", 10, 10), 2);
    // E > e, E issued: written, seq 0 and all.
    let j = write_json(env, "doc.md", (2, None), "B v0", 11, 0);
    assert_eq!(
        (j["outcome"].clone(), j["seq"].clone()),
        ("written".into(), 0.into()),
        "{j}"
    );
    assert_eq!(env.text("doc.md"), "B v0");
    // A's later versions of epoch 1 are stale however high their seq.
    for seq in [6, 1000] {
        let said = write(env, "doc.md", (1, Some(seq)), "A late", 12, (5, "stale"));
        assert!(said.contains("stale"), "{said:?}");
        let j = write_json(env, "doc.md", (1, Some(seq)), "A late", 12, 5);
        assert_eq!(j["outcome"], "stale", "{j}");
        assert_eq!(j["fence"], 2, "{j}");
        assert!(j.get("seq").is_some(), "the stale JSON lacks seq: {j}");
    }
    // B's own next version goes on from seq 0.
    write(env, "doc.md", (2, Some(1)), "B v1", 13, (0, "written"));
    assert_eq!(env.text("doc.md"), "B v1");
    let r = row(env, "doc.md", 13);
    assert_eq!(r["sink"]["fence"], 2, "{r}");
    assert_eq!(r["sink"]["content_epoch"], 2, "{r}");
    assert_eq!(r["sink"]["seq"], 1, "{r}");
    assert_eq!(env.debris(), Vec::<String>::new());
}

/// A takeover's claim fences the old epoch at the sink before the new holder wrote
/// anything: the old holder's next seq is stale, and the document keeps its bytes.
fn a_takeover_fences_the_old_epochs_next_seq_before_any_write(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    write(env, "doc.md", (1, Some(1)), "A v1", 1, (0, "written"));
    env.claim("doc.md", "B", 10, 10);
    let j = write_json(env, "doc.md", (1, Some(2)), "A v2", 11, 5);
    assert_eq!(j["outcome"], "stale", "{j}");
    assert_eq!(j["fence"], 2, "{j}");
    assert_eq!(env.text("doc.md"), "A v1");
    assert_eq!(env.debris(), Vec::<String>::new());
}

/// `log` shows a version's seq where it is not 0: `write e1 seq 3` in the timeline, and
/// `seq 3` on the write's line of the table; a write without --seq says no seq.
fn log_shows_the_seq_where_it_is_not_0(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    write(env, "doc.md", (1, None), "v0", 1, (0, "written"));
    write(env, "doc.md", (1, Some(3)), "v3", 2, (0, "written"));
    let timeline = env
        .fp(&["log", "doc.md", "--timeline"])
        .now(3)
        .expect(0)
        .stdout;
    assert!(timeline.contains("write e1 seq 3"), "{timeline}");
    assert!(!timeline.contains("seq 0"), "{timeline}");
    let table = env.fp(&["log", "doc.md"]).now(3).expect(0).stdout;
    let writes: Vec<&str> = table
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some("write"))
        .collect();
    assert_eq!(writes.len(), 2, "{table}");
    assert!(!writes[0].contains("seq"), "{table}");
    assert!(writes[1].contains("seq 3"), "{table}");
}

// ---------------------------------------------------------------------------------
// remove

/// A lease that wrote removes its document with a higher --seq: `removed`, the document
/// gone (from the mirror too), nothing left beside it; the JSON names the resource, the
/// version and the owner.
fn remove_takes_the_document_away(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    write(env, "doc.md", (1, None), "v0", 1, (0, "written"));
    remove(env, "doc.md", (1, Some(1)), 2, (0, "removed"));
    assert_gone(env, "doc.md");
    let r = row(env, "doc.md", 2);
    assert_eq!(r["document"]["state"], "removed", "{r}");
    assert_eq!(r["sink"]["fence"], 1, "{r}");
    assert_eq!(r["sink"]["content_epoch"], 1, "{r}");
    assert_eq!(r["sink"]["seq"], 1, "{r}");

    env.claim("other.md", "A", 10, 0);
    write(env, "other.md", (1, None), "other", 1, (0, "written"));
    let j = remove_json(env, "other.md", (1, Some(4)), &["--owner", "A"], 2, 0);
    assert_eq!(j["outcome"], "removed", "{j}");
    assert_eq!(j["resource"], "other.md", "{j}");
    assert_eq!(j["epoch"], 1, "{j}");
    assert_eq!(j["seq"], 4, "{j}");
    assert_eq!(j["owner"], "A", "{j}");
    assert_gone(env, "other.md");
}

/// The same removal repeated is a `replay` (exit 0; JSON `removed: true`), and changes
/// nothing.
fn the_same_removal_repeated_is_a_replay(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    write(env, "doc.md", (1, None), "v0", 1, (0, "written"));
    remove(env, "doc.md", (1, Some(1)), 2, (0, "removed"));
    let before = row(env, "doc.md", 3);
    remove(env, "doc.md", (1, Some(1)), 3, (0, "replay"));
    let j = remove_json(env, "doc.md", (1, Some(1)), &[], 3, 0);
    assert_eq!(j["outcome"], "replay", "{j}");
    assert_eq!(j["removed"], true, "{j}");
    assert_eq!(j["epoch"], 1, "{j}");
    assert_eq!(j["seq"], 1, "{j}");
    assert_eq!(row(env, "doc.md", 3), before);
    assert_gone(env, "doc.md");
}

/// A removal at the very version that published bytes is a `conflict` (exit 6): one
/// body per (epoch, seq). The document stays; a higher seq then removes it.
fn removing_at_the_version_that_wrote_is_a_conflict(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    write(env, "doc.md", (1, None), "v0", 1, (0, "written"));
    write(env, "doc.md", (1, Some(2)), "v2", 2, (0, "written"));
    let before = (env.stamp("doc.md"), row(env, "doc.md", 2));
    remove(env, "doc.md", (1, Some(2)), 3, (6, "conflict"));
    let j = remove_json(env, "doc.md", (1, Some(2)), &[], 3, 6);
    assert_eq!(j["outcome"], "conflict", "{j}");
    assert_eq!(j["epoch"], 1, "{j}");
    assert_eq!(j["seq"], 2, "{j}");
    assert_eq!((env.stamp("doc.md"), row(env, "doc.md", 3)), before);
    assert_eq!(env.text("doc.md"), "v2");
    remove(env, "doc.md", (1, Some(3)), 4, (0, "removed"));
    assert_gone(env, "doc.md");
}

/// A removal under an epoch older than the fence is `stale` (exit 5), as is one under a
/// lower seq of the recorded epoch; neither touches the document.
fn an_older_removal_is_stale(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    env.claim("doc.md", "B", 10, 10);
    write(env, "doc.md", (2, Some(3)), "B v3", 11, (0, "written"));
    let before = (env.stamp("doc.md"), row(env, "doc.md", 11));
    // E < F.
    remove(env, "doc.md", (1, Some(9)), 12, (5, "stale"));
    let j = remove_json(env, "doc.md", (1, Some(9)), &[], 12, 5);
    assert_eq!(j["outcome"], "stale", "{j}");
    assert_eq!(j["fence"], 2, "{j}");
    // E = e, N < n.
    let said = remove(env, "doc.md", (2, Some(2)), 12, (5, "stale"));
    assert!(
        said.contains("superseded by epoch 2 seq 3"),
        "stderr: {said:?}"
    );
    let j = remove_json(env, "doc.md", (2, Some(2)), &[], 12, 5);
    assert_eq!(j["outcome"], "stale", "{j}");
    assert_eq!(j["fence"], 2, "{j}");
    assert_eq!(j["seq"], 3, "{j}");
    // Without --seq: seq 0 < 3.
    remove(env, "doc.md", (2, None), 12, (5, "stale"));
    assert_eq!((env.stamp("doc.md"), row(env, "doc.md", 12)), before);
    assert_eq!(env.text("doc.md"), "B v3");
    assert_eq!(env.debris(), Vec::<String>::new());
}

/// A removal under an epoch `claim` never gave out is `unissued` (exit 8): for a
/// resource never claimed, above the highest issued, or issued to another owner.
fn a_removal_under_an_unissued_epoch_is_refused(env: &Backend) {
    env.claim("other.md", "X", 10, 0);
    remove(env, "doc.md", (1, None), 1, (8, "unissued"));
    let j = remove_json(env, "doc.md", (1, None), &[], 1, 8);
    assert_eq!(j["outcome"], "unissued", "{j}");
    assert_eq!(j["resource"], "doc.md", "{j}");
    env.claim("doc.md", "A", 10, 2);
    write(env, "doc.md", (1, None), "v0", 3, (0, "written"));
    let j = remove_json(env, "doc.md", (7, Some(1)), &[], 4, 8);
    assert_eq!(j["outcome"], "unissued", "{j}");
    assert_eq!(j["issued"], 1, "{j}");
    let j = remove_json(env, "doc.md", (1, Some(1)), &["--owner", "B"], 4, 8);
    assert_eq!(j["outcome"], "unissued", "{j}");
    assert_eq!(env.text("doc.md"), "v0");
    assert_eq!(row(env, "doc.md", 4)["document"]["state"], env.current());
    // The epoch's own owner may.
    let j = remove_json(env, "doc.md", (1, Some(1)), &["-o", "A"], 4, 0);
    assert_eq!(j["outcome"], "removed", "{j}");
    assert_gone(env, "doc.md");
}

/// A later version of the same epoch (a higher seq) may write the document again; the
/// removal's own version cannot (a conflict), nor can a lower one (stale).
fn a_higher_seq_writes_the_document_again_after_a_removal(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    write(env, "doc.md", (1, None), "v0", 1, (0, "written"));
    remove(env, "doc.md", (1, Some(1)), 2, (0, "removed"));
    write(env, "doc.md", (1, Some(1)), "back", 3, (6, "conflict"));
    let said = write(env, "doc.md", (1, None), "back", 3, (5, "stale"));
    assert!(said.contains("superseded by epoch 1 seq 1"), "{said:?}");
    assert_gone(env, "doc.md");
    let j = write_json(env, "doc.md", (1, Some(2)), "back", 4, 0);
    assert_eq!(j["outcome"], "written", "{j}");
    assert_eq!(j["seq"], 2, "{j}");
    assert_eq!(env.text("doc.md"), "back");
    let r = row(env, "doc.md", 4);
    assert_eq!(r["document"]["state"], env.current(), "{r}");
    assert_eq!(r["sink"]["seq"], 2, "{r}");
    assert!(env.documents().contains(&"doc.md".to_string()));
}

/// Removing a resource that has no document (claimed, never written) leaves a tombstone
/// all the same.
fn removing_a_resource_never_written_leaves_a_tombstone(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    remove(env, "doc.md", (1, None), 1, (0, "removed"));
    assert_gone(env, "doc.md");
    let r = row(env, "doc.md", 1);
    assert_eq!(r["document"]["state"], "removed", "{r}");
    assert_eq!(r["sink"]["content_epoch"], 1, "{r}");
    assert_eq!(r["sink"]["seq"], 0, "{r}");
    // The tombstone is the version (1, 0): bytes under it conflict.
    write(env, "doc.md", (1, None), "x", 2, (6, "conflict"));
    remove(env, "doc.md", (1, None), 2, (0, "replay"));
    assert_gone(env, "doc.md");
}

/// After a removal the fence stays: a late writer with an older epoch is `stale` and
/// cannot bring the document back.
fn a_late_writer_cannot_bring_a_removed_document_back(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    write(env, "doc.md", (1, Some(1)), "A v1", 1, (0, "written"));
    env.claim("doc.md", "B", 10, 10);
    // E > e, E issued: B's removal needs no seq.
    remove(env, "doc.md", (2, None), 11, (0, "removed"));
    assert_gone(env, "doc.md");
    for seq in [None, Some(2), Some(100)] {
        let j = write_json(env, "doc.md", (1, seq), "A late", 12, 5);
        assert_eq!(j["outcome"], "stale", "{j}");
        assert_eq!(j["fence"], 2, "{j}");
    }
    write(env, "doc.md", (1, Some(2)), "A late", 12, (5, "stale"));
    assert_gone(env, "doc.md");
    let r = row(env, "doc.md", 12);
    assert_eq!(r["sink"]["fence"], 2, "{r}");
    assert_eq!(r["document"]["state"], "removed", "{r}");
}

/// A claim after a removal continues from the fence: epochs never restart, and the new
/// holder may publish again.
fn a_claim_after_a_removal_continues_from_the_fence(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    env.claim("doc.md", "B", 10, 10);
    write(env, "doc.md", (2, None), "B", 11, (0, "written"));
    remove(env, "doc.md", (2, Some(1)), 12, (0, "removed"));
    env.fp(&["complete", "doc.md", "--owner", "B", "--epoch", "2"])
        .now(13)
        .expect_stdout(0, "completed");
    let next = env.claim("doc.md", "C", 10, 14);
    assert!(next > 2, "a claim after the removal got epoch {next}");
    assert_eq!(next, 3);
    write(env, "doc.md", (next, None), "C", 15, (0, "written"));
    assert_eq!(env.text("doc.md"), "C");
    let r = row(env, "doc.md", 15);
    assert_eq!(r["sink"]["fence"], 3, "{r}");
    assert_eq!(r["document"]["state"], env.current(), "{r}");
}

/// `status RES` always shows a removed document (state `removed`, in the table too); the
/// whole list hides it unless `--all`.
fn status_shows_removed_and_the_list_hides_it_unless_all(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    write(env, "doc.md", (1, None), "v0", 1, (0, "written"));
    env.claim("kept.md", "K", 10, 0);
    write(env, "kept.md", (1, None), "kept", 1, (0, "written"));
    let mut both = listed(env, &[], 1);
    both.sort();
    assert_eq!(both, ["doc.md", "kept.md"]);
    remove(env, "doc.md", (1, Some(1)), 2, (0, "removed"));
    assert_eq!(listed(env, &[], 2), ["kept.md"]);
    let mut all = listed(env, &["--all"], 2);
    all.sort();
    assert_eq!(all, ["doc.md", "kept.md"]);
    let plain = env.fp(&["status"]).now(2).expect(0).stdout;
    assert!(!plain.contains("doc.md"), "{plain}");
    assert!(plain.contains("kept.md"), "{plain}");
    let plain = env.fp(&["status", "--all"]).now(2).expect(0).stdout;
    let line = plain
        .lines()
        .find(|l| l.starts_with("doc.md"))
        .unwrap_or_else(|| panic!("status --all lacks doc.md:\n{plain}"));
    assert!(line.ends_with("removed"), "{plain}");
    // One resource named: always shown.
    let j = env
        .fp(&["--json", "status", "doc.md"])
        .now(2)
        .expect(0)
        .json_contract();
    assert_eq!(j["resources"][0]["resource"], "doc.md", "{j}");
    assert_eq!(j["resources"][0]["document"]["state"], "removed", "{j}");
    assert_eq!(j["resources"][0]["sink"]["seq"], 1, "{j}");
    let plain = env.fp(&["status", "doc.md"]).now(2).expect(0).stdout;
    let lines: Vec<&str> = plain.lines().collect();
    assert_eq!(lines.len(), 2, "{plain}");
    assert!(lines[1].starts_with("doc.md"), "{plain}");
    assert!(lines[1].ends_with("removed"), "{plain}");
}

/// `cat` of a removed resource exits 2 saying it was removed (a store's readers; a
/// local root's documents are plain files).
fn cat_of_a_removed_resource_says_it_was_removed(env: &Backend) {
    if env.is_local() {
        return;
    }
    env.claim("doc.md", "A", 10, 0);
    write(env, "doc.md", (1, None), "v0", 1, (0, "written"));
    remove(env, "doc.md", (1, Some(1)), 2, (0, "removed"));
    let done = env.fp(&["cat", "doc.md"]).now(3).expect(2);
    assert_eq!(done.stdout, "", "{done:?}");
    assert!(done.stderr.contains("removed"), "{done:?}");
}

/// `verify` takes a removed document's absence as it should be (exit 0), and alerts
/// (exit 9, `reappeared`) when a file stands there again without a write.
fn verify_accepts_the_absence_and_alerts_on_a_reappearance(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    write(env, "doc.md", (1, None), "v0", 1, (0, "written"));
    remove(env, "doc.md", (1, Some(1)), 2, (0, "removed"));
    env.fp(&["verify"]).now(3).expect(0);
    env.fp(&["verify", "doc.md"]).now(3).expect(0);
    if !env.is_local() && !env.is_mirror() {
        // No file here to reappear.
        return;
    }
    std::fs::write(env.env().path("doc.md"), "back by hand").expect("put a file back");
    let done = env.fp(&["--json", "verify"]).now(4).expect(9);
    let j = done.json();
    let problems: Vec<&Value> = j["problems"]
        .as_array()
        .unwrap_or_else(|| panic!("no problems listed: {j}"))
        .iter()
        .filter(|p| p["resource"] == "doc.md")
        .collect();
    assert!(problems.iter().any(|p| p["problem"] == "reappeared"), "{j}");
    let plain = env.fp(&["verify"]).now(4).expect(9);
    assert!(plain.stdout.contains("doc.md: reappeared: "), "{plain:?}");
}

/// `complete` after `remove` works as after a write, and leaves nothing for `verify` to
/// report.
fn complete_after_remove_works(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    write(env, "doc.md", (1, None), "v0", 1, (0, "written"));
    remove(env, "doc.md", (1, Some(1)), 2, (0, "removed"));
    let j = env
        .fp(&[
            "--json", "complete", "doc.md", "--owner", "A", "--epoch", "1",
        ])
        .now(3)
        .expect(0)
        .json_contract();
    assert_eq!(j["outcome"], "completed", "{j}");
    // A lease that only removed completes too.
    env.claim("gone.md", "A", 10, 0);
    remove(env, "gone.md", (1, None), 1, (0, "removed"));
    env.fp(&["complete", "gone.md", "--owner", "A", "--epoch", "1"])
        .now(3)
        .expect_stdout(0, "completed");
    env.fp(&["verify"]).now(4).expect(0);
    let r = row(env, "doc.md", 4);
    assert_eq!(r["lease"]["state"], "completed", "{r}");
    assert_eq!(r["document"]["state"], "removed", "{r}");
}

/// `log` records a removal with its version.
fn log_records_the_removal(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    write(env, "doc.md", (1, None), "v0", 1, (0, "written"));
    remove(env, "doc.md", (1, Some(2)), 2, (0, "removed"));
    let timeline = env
        .fp(&["log", "doc.md", "--timeline"])
        .now(3)
        .expect(0)
        .stdout;
    let last = timeline.lines().last().unwrap_or_default();
    assert!(last.contains("e1 seq 2"), "{timeline}");
    assert!(last.contains("remove"), "{timeline}");
}

/// A removal that fails, or crashes, before its COMMIT removes nothing: the document
/// and its record stay as they were (after `recover`, for a crash, which leaves a local
/// removal's file put aside), nothing is left beside it, and the same removal then
/// succeeds. As for a write, the failed command's own answer is the error; it is no
/// later command's job to bring the document back.
fn a_removal_failing_before_its_commit_removes_nothing(env: &Backend) {
    let cases = [
        ("remove.before_commit", "fail"),
        ("txn.before_commit", "fail"),
        ("txn.before_commit", "abort"),
    ];
    for (i, (point, action)) in cases.into_iter().enumerate() {
        let res = &format!("doc{i}.md");
        env.claim(res, "A", 10, 0);
        write(env, res, (1, None), "kept", 1, (0, "written"));
        let before = row(env, res, 2);
        let a = args(false, "remove", res, 1, Some(1), &[]);
        let failed = env
            .fp(&strs(&a))
            .now(2)
            .env("FAILPOINTS", &format!("{point}=return({action})"));
        if action == "fail" {
            failed.expect(1);
        } else {
            let done = failed.output();
            assert_eq!(done.code, -1, "killed by SIGABRT: {done:?}");
            env.fp(&["recover", res, "--grace", "0"]).now(2).expect(0);
        }
        let what = format!("{point}={action}");
        let after = row(env, res, 2);
        assert_eq!(after["sink"], before["sink"], "{what}: {after}");
        assert_eq!(after["document"]["state"], env.current(), "{what}: {after}");
        assert_eq!(env.read(res).as_deref(), Some(&b"kept"[..]), "{what}");
        assert_eq!(env.debris(), Vec::<String>::new(), "{what}");
        remove(env, res, (1, Some(1)), 3, (0, "removed"));
        assert_gone(env, res);
    }
}

both_stores!(
    a_higher_seq_of_the_same_epoch_is_written,
    the_same_seq_with_the_same_bytes_is_a_replay_and_touches_nothing,
    the_same_seq_with_other_bytes_is_a_conflict,
    a_lower_seq_of_the_same_epoch_is_stale_and_says_what_superseded_it,
    a_write_without_seq_after_seq_3_of_its_epoch_is_stale,
    write_json_says_seq_0_without_seq,
    an_unissued_writes_json_carries_its_seq_too,
    the_seq_may_come_from_the_environment,
    a_takeovers_epoch_beats_any_seq_of_the_old_epoch,
    a_takeover_fences_the_old_epochs_next_seq_before_any_write,
    log_shows_the_seq_where_it_is_not_0,
    remove_takes_the_document_away,
    the_same_removal_repeated_is_a_replay,
    removing_at_the_version_that_wrote_is_a_conflict,
    an_older_removal_is_stale,
    a_removal_under_an_unissued_epoch_is_refused,
    a_higher_seq_writes_the_document_again_after_a_removal,
    removing_a_resource_never_written_leaves_a_tombstone,
    a_late_writer_cannot_bring_a_removed_document_back,
    a_claim_after_a_removal_continues_from_the_fence,
    status_shows_removed_and_the_list_hides_it_unless_all,
    cat_of_a_removed_resource_says_it_was_removed,
    verify_accepts_the_absence_and_alerts_on_a_reappearance,
    complete_after_remove_works,
    log_records_the_removal,
    a_removal_failing_before_its_commit_removes_nothing,
);

// ---------------------------------------------------------------------------------
// Refused before anything is looked at

/// `--seq` is a whole number from 1: 0 (what no --seq means), a negative number or a
/// word are refused with exit 2 and one line, from the flag or the environment, by write
/// and remove alike, and nothing changes.
#[test]
fn a_seq_that_is_not_a_whole_number_from_1_is_refused_and_changes_nothing() {
    let env = Env::new();
    env.claim("doc.md", "A", 10, 0);
    let bad: [&[&str]; 5] = [
        &["--seq", "0"],
        &["--seq", "-1"],
        &["--seq=-1"],
        &["--seq", "x"],
        &["--seq", "1.5"],
    ];
    for cmd in ["write", "remove"] {
        for extra in bad {
            let mut a = vec![cmd, "doc.md", "--epoch", "1"];
            a.extend(extra);
            let done = env.fp(&a).now(1).stdin("bytes").expect(2);
            assert_eq!(done.stdout, "", "{a:?}: {done:?}");
            let first = done.stderr.lines().next().unwrap_or_default();
            // A negative number is refused as one, whatever the option.
            assert!(
                first.contains("seq") || first.contains("negative"),
                "{a:?}: {done:?}"
            );
        }
        let done = env
            .fp(&[cmd, "doc.md", "--epoch", "1"])
            .env("FENCEPOST_SEQ", "0")
            .now(1)
            .stdin("bytes")
            .expect(2);
        assert!(done.stderr.contains("seq"), "{cmd}: {done:?}");
    }
    assert_eq!(env.read("doc.md"), None);
    let j = env
        .fp(&["--json", "status", "doc.md"])
        .now(2)
        .expect(0)
        .json();
    let r = &j["resources"][0];
    assert!(
        r["sink"].is_null() || r["sink"]["content_epoch"].is_null(),
        "a refused --seq recorded something: {r}"
    );
    let log = env.fp(&["--json", "log"]).now(2).expect(0).json();
    let events: Vec<&str> = log["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["event"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(events, ["claim"], "{log}");
}

/// `remove --help` and `write --help` describe the version's seq.
#[test]
fn help_describes_seq_and_remove() {
    let env = Env::new();
    let help = env.fp(&["write", "--help"]).expect(0).stdout;
    assert!(help.contains("--seq"), "{help}");
    assert!(help.contains("FENCEPOST_SEQ"), "{help}");
    let help = env.fp(&["remove", "--help"]).expect(0).stdout;
    for words in ["--epoch", "--owner", "--seq", "removed"] {
        assert!(help.contains(words), "remove --help lacks {words}:\n{help}");
    }
}

/// A removal published through the store reaches every host's mirror: a host that
/// applied the document drops its copy at its next `mirror`.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_removal_reaches_another_hosts_mirror() {
    let store = pg::store();
    let a = Host::new(store.url());
    let b = Host::new(store.url());
    a.claim_and_write("doc.md", "A's version");
    b.fp(&["mirror"]).expect(0);
    assert_eq!(b.file("doc.md").as_deref(), Some(&b"A's version"[..]));
    a.fp(&["remove", "doc.md", "--epoch", "1", "--seq", "1"])
        .now(2)
        .expect_stdout(0, "removed");
    assert_eq!(a.file("doc.md"), None, "the remover's own mirror");
    b.fp(&["mirror"]).expect(0);
    assert_eq!(b.file("doc.md"), None, "the other host's mirror");
    let j = b
        .fp(&["--json", "status", "doc.md"])
        .now(3)
        .expect(0)
        .json();
    assert_eq!(j["resources"][0]["document"]["state"], "removed", "{j}");
    b.fp(&["verify"]).now(3).expect(0);
    // A second pass has nothing to do.
    b.fp(&["mirror"]).expect(0);
    assert_eq!(b.file("doc.md"), None);
}
