//! The sink (`write`): written, replay, conflict, stale, unissued, resource scoping,
//! takeover fencing versus `--lazy-fence`, `--unfenced`, and the main scenario of docs/protocol.md.

use serde_json::Value;

use crate::harness::Env;
use crate::support::{Backend, both_stores, sha256_hex};

/// `status RES --json` at tick `now`: the resource's row.
fn row(env: &Backend, res: &str, now: i64) -> Value {
    let j = env.fp(&["--json", "status", res]).now(now).expect(0).json();
    j["resources"][0].clone()
}

/// The SHA-256 of the document a status row describes: as `status` hashed the file, or,
/// for a store (whose `status` hashes nothing), of what `cat` prints.
fn document_sha256(env: &Backend, r: &Value) -> Value {
    if env.is_local() {
        return r["document"]["sha256"].clone();
    }
    let res = r["resource"].as_str().expect("a row names its resource");
    let bytes = env.read(res).expect("the store publishes the document");
    Value::from(sha256_hex(&bytes))
}

/// A `--json` write at tick `now`, asserting the exit code and the JSON contract.
fn write_json(env: &Backend, res: &str, epoch: i64, content: &str, now: i64, code: i32) -> Value {
    env.fp(&["--json", "write", res, "--epoch", &epoch.to_string()])
        .now(now)
        .stdin(content)
        .expect(code)
        .json_contract()
}

fn write_with_issued_epoch_is_written(env: &Backend) {
    let e = env.claim("doc.md", "A", 10, 0);
    let done = env.write("doc.md", e, "hello\n", 1, 0);
    assert_eq!(done.stdout.trim(), "written");
    assert_eq!(env.text("doc.md"), "hello\n");
    assert_eq!(env.documents(), ["doc.md"]);
    assert_eq!(env.debris(), Vec::<String>::new());
    let r = row(env, "doc.md", 1);
    assert_eq!(r["sink"]["fence"], 1);
    assert_eq!(r["sink"]["content_epoch"], 1);
    assert_eq!(r["sink"]["size"], 6);
    assert_eq!(r["sink"]["written_at"], 1);
    assert_eq!(r["document"]["state"], env.current());
    assert_eq!(document_sha256(env, &r), r["sink"]["sha256"]);
}

fn write_json_reports_hash_size_and_previous_fence(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    let j = write_json(env, "doc.md", 1, "abc", 1, 0);
    assert_eq!(j["outcome"], "written");
    assert_eq!(j["resource"], "doc.md");
    assert_eq!(j["epoch"], 1);
    assert_eq!(j["size"], 3);
    // SHA-256("abc").
    assert_eq!(
        j["sha256"],
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    // The takeover claim registered epoch 1 with the sink already.
    assert_eq!(j["previous_fence"], 1);
}

fn same_epoch_same_bytes_is_replay_and_file_is_not_rewritten(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    env.write("doc.md", 1, "v1", 1, 0);
    let before = env.stamp("doc.md");
    let row_before = row(env, "doc.md", 1);
    // Make any rewrite visible in the mtime even on coarse-grained filesystems.
    std::thread::sleep(std::time::Duration::from_millis(20));
    env.fp(&["write", "doc.md", "--epoch", "1"])
        .now(2)
        .stdin("v1")
        .expect_stdout(0, "replay");
    let j = write_json(env, "doc.md", 1, "v1", 3, 0);
    assert_eq!(j["outcome"], "replay");
    assert_eq!(
        env.stamp("doc.md"),
        before,
        "a replay must not touch the file"
    );
    assert_eq!(env.text("doc.md"), "v1");
    // The record keeps the original write time.
    assert_eq!(row(env, "doc.md", 1), row_before);
    assert_eq!(env.debris(), Vec::<String>::new());
}

fn same_epoch_different_bytes_is_conflict_and_file_is_unchanged(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    env.write("doc.md", 1, "v1", 1, 0);
    let before = env.stamp("doc.md");
    env.fp(&["write", "doc.md", "--epoch", "1"])
        .now(2)
        .stdin("v2")
        .expect_stdout(6, "conflict");
    let j = write_json(env, "doc.md", 1, "v2", 2, 6);
    assert_eq!(j["outcome"], "conflict");
    assert_eq!(j["epoch"], 1);
    assert_eq!(
        j["recorded_sha256"],
        row(env, "doc.md", 2)["sink"]["sha256"]
    );
    assert_eq!(env.text("doc.md"), "v1");
    assert_eq!(env.stamp("doc.md"), before);
    assert_eq!(env.documents(), ["doc.md"]);
    assert_eq!(
        env.debris(),
        Vec::<String>::new(),
        "nothing left after a conflict"
    );
    assert_eq!(row(env, "doc.md", 2)["document"]["state"], env.current());
}

fn lower_epoch_than_accepted_is_stale_and_file_is_unchanged(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    env.claim("doc.md", "B", 10, 10);
    env.write("doc.md", 2, "B's", 11, 0);
    let before = env.stamp("doc.md");
    let row_before = row(env, "doc.md", 12);
    env.fp(&["write", "doc.md", "--epoch", "1"])
        .now(12)
        .stdin("A's")
        .expect_stdout(5, "stale");
    let j = write_json(env, "doc.md", 1, "A's", 12, 5);
    assert_eq!(j["outcome"], "stale");
    assert_eq!(j["resource"], "doc.md");
    assert_eq!(j["epoch"], 1);
    assert_eq!(j["fence"], 2);
    assert_eq!(env.text("doc.md"), "B's");
    assert_eq!(env.stamp("doc.md"), before);
    assert_eq!(row(env, "doc.md", 12), row_before);
    assert_eq!(env.documents(), ["doc.md"]);
    assert_eq!(env.debris(), Vec::<String>::new());
}

fn higher_issued_epoch_replaces_document(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    env.write("doc.md", 1, "old", 1, 0);
    env.claim("doc.md", "B", 10, 10);
    env.write("doc.md", 2, "new", 11, 0);
    assert_eq!(env.text("doc.md"), "new");
    let r = row(env, "doc.md", 11);
    assert_eq!(r["sink"]["fence"], 2);
    assert_eq!(r["sink"]["content_epoch"], 2);
    assert_eq!(r["document"]["state"], env.current());
}

fn never_claimed_resource_is_unissued(env: &Backend) {
    env.claim("other.md", "X", 10, 0);
    let j = write_json(env, "doc.md", 1, "x", 0, 8);
    assert_eq!(j["outcome"], "unissued");
    assert_eq!(j["resource"], "doc.md");
    assert_eq!(j["epoch"], 1);
    assert_eq!(j["issued"], Value::Null);
    assert_eq!(env.documents(), Vec::<String>::new());
    assert_eq!(env.debris(), Vec::<String>::new());
    env.fp(&["write", "doc.md", "--epoch", "1"])
        .now(0)
        .stdin("x")
        .expect_stdout(8, "unissued");
    assert_eq!(env.read("doc.md"), None);
}

fn epoch_above_highest_issued_is_unissued(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    env.write("doc.md", 1, "ok", 1, 0);
    // An unauthenticated huge epoch must not block later legitimate writers.
    let j = write_json(env, "doc.md", 1_000_000, "evil", 2, 8);
    assert_eq!(j["outcome"], "unissued");
    assert_eq!(j["issued"], 1);
    write_json(env, "doc.md", 2, "evil", 2, 8);
    assert_eq!(env.text("doc.md"), "ok");
    assert_eq!(row(env, "doc.md", 2)["sink"]["fence"], 1);
    // The next legitimate holder is not blocked.
    env.claim("doc.md", "B", 10, 10);
    env.write("doc.md", 2, "B", 11, 0);
    assert_eq!(env.text("doc.md"), "B");
}

fn owner_mismatch_is_unissued(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    let j = env
        .fp(&["--json", "write", "doc.md", "--epoch", "1", "--owner", "B"])
        .now(1)
        .stdin("B pretending")
        .expect(8)
        .json_contract();
    assert_eq!(j["outcome"], "unissued");
    assert_eq!(j["issued_to"], "A");
    assert_eq!(j["owner"], "B");
    assert_eq!(env.read("doc.md"), None);
    assert_eq!(env.documents(), Vec::<String>::new());
    assert_eq!(env.debris(), Vec::<String>::new());
    // The right owner is accepted.
    env.fp(&["write", "doc.md", "--epoch", "1", "--owner", "A"])
        .now(1)
        .stdin("A")
        .expect_stdout(0, "written");
    assert_eq!(env.text("doc.md"), "A");
}

fn epoch_of_one_resource_does_not_fence_another(env: &Backend) {
    let mut epoch = 0;
    for now in 0..99 {
        epoch = env.claim("x.md", "A", 1, now);
    }
    assert_eq!(epoch, 99);
    env.write("x.md", 99, "x at 99", 99, 0);
    assert_eq!(env.claim("y.md", "B", 10, 100), 1);
    env.write("y.md", 1, "y at 1", 100, 0);
    assert_eq!(env.text("y.md"), "y at 1");
    // And the other way round: y's epoch 1 is no claim on x.
    write_json(env, "x.md", 1, "x at 1", 100, 5);
    assert_eq!(env.text("x.md"), "x at 99");
    // Nor does an epoch issued for x count as issued for y.
    let j = write_json(env, "y.md", 99, "y at 99", 100, 8);
    assert_eq!(j["issued"], 1);
    assert_eq!(row(env, "x.md", 100)["sink"]["fence"], 99);
    assert_eq!(row(env, "y.md", 100)["sink"]["fence"], 1);
}

fn takeover_fences_old_holder_before_new_holder_writes(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    env.write("doc.md", 1, "A v1", 5, 0);
    let j = env
        .fp(&["--json", "claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(10)
        .expect(0)
        .json_contract();
    assert_eq!(j["fenced_at_sink"], true);
    // B has only claimed; the sink already knows epoch 2.
    assert_eq!(row(env, "doc.md", 10)["sink"]["fence"], 2);
    let j = write_json(env, "doc.md", 1, "A v2", 11, 5);
    assert_eq!(j["fence"], 2);
    assert_eq!(env.text("doc.md"), "A v1");
    env.write("doc.md", 2, "B", 12, 0);
    assert_eq!(env.text("doc.md"), "B");
}

fn takeover_fences_old_holder_even_on_first_write(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    env.claim("doc.md", "B", 10, 10);
    write_json(env, "doc.md", 1, "A", 11, 5);
    assert_eq!(env.read("doc.md"), None);
    assert_eq!(env.documents(), Vec::<String>::new());
    assert_eq!(env.debris(), Vec::<String>::new());
}

fn lazy_fence_accepts_old_epoch_until_new_holder_writes(env: &Backend) {
    // The lazy-fence table of docs/protocol.md: B has claimed epoch 2 but the sink
    // learns it only from B's first write.
    assert_eq!(env.claim("doc.md", "A", 10, 0), 1);
    let j = env
        .fp(&[
            "--json",
            "claim",
            "doc.md",
            "--owner",
            "B",
            "--ttl",
            "10",
            "--lazy-fence",
        ])
        .now(10)
        .expect(0)
        .json_contract();
    assert_eq!(j["epoch"], 2);
    assert_eq!(j["fenced_at_sink"], false);
    // A, epoch 1 (B has only claimed): written.
    assert_eq!(
        write_json(env, "doc.md", 1, "A old", 11, 0)["outcome"],
        "written"
    );
    assert_eq!(env.text("doc.md"), "A old");
    // B, epoch 2: written.
    assert_eq!(
        write_json(env, "doc.md", 2, "B new", 11, 0)["outcome"],
        "written"
    );
    assert_eq!(env.text("doc.md"), "B new");
    // A, epoch 1 again: stale; the document stays new.
    assert_eq!(
        write_json(env, "doc.md", 1, "A old", 11, 5)["outcome"],
        "stale"
    );
    assert_eq!(env.text("doc.md"), "B new");
    let r = row(env, "doc.md", 11);
    assert_eq!(r["sink"]["fence"], 2);
    assert_eq!(r["document"]["state"], env.current());
}

fn unfenced_write_accepts_old_epoch_reproducing_the_bug(env: &Backend) {
    // The "no fencing" row of docs/protocol.md: the table says B, the document says A.
    // A store takes --unfenced only when made for the reproduction, as its first claim
    // here makes it (the variable means nothing to a state file).
    env.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(0)
        .env("FENCEPOST_REPRODUCTION_STORE", "1")
        .expect_stdout(0, "1");
    env.claim("doc.md", "B", 10, 10);
    env.write("doc.md", 2, "B new", 10, 0);
    env.fp(&["complete", "doc.md", "--owner", "B", "--epoch", "2"])
        .now(11)
        .expect(0);
    let j = env
        .fp(&["--json", "write", "doc.md", "--epoch", "1", "--unfenced"])
        .now(11)
        .stdin("A old")
        .expect(0)
        .json_contract();
    assert_eq!(j["outcome"], "written");
    assert_eq!(j["unfenced"], true);
    env.fp(&["complete", "doc.md", "--owner", "A", "--epoch", "1"])
        .now(11)
        .expect_stdout(4, "lost");
    assert_eq!(env.served("doc.md").as_deref(), Some(&b"A old"[..]));
    if env.is_mirror() {
        // A mirror applies an unfenced version unfenced, as the store took it: the
        // unprotected sink's failure shows on every host's file, as it must to be
        // reproduced there.
        assert_eq!(env.env().read("doc.md").as_deref(), Some(&b"A old"[..]));
    }
    let r = row(env, "doc.md", 11);
    assert_eq!(r["lease"]["owner"], "B");
    assert_eq!(r["lease"]["state"], "completed");
    // An unfenced write never raises (or lowers) the fence.
    assert_eq!(r["sink"]["fence"], 2);
    assert_eq!(r["sink"]["content_epoch"], 1);
    // And a fenced writer with epoch 1 is still refused afterwards.
    write_json(env, "doc.md", 1, "A again", 12, 5);
    assert_eq!(env.served("doc.md").as_deref(), Some(&b"A old"[..]));
}

#[test]
fn unfenced_is_documented_as_dangerous_in_help() {
    let env = Env::new();
    let help = env.fp(&["write", "--help"]).expect(0).stdout;
    let at = help.find("--unfenced").expect("--unfenced in write --help");
    let text = &help[at..];
    assert!(
        text.contains("DANGER") && text.contains("bug"),
        "--unfenced help must say it reproduces the bug: {text}"
    );
}

fn seed_main_scenario_late_write_of_taken_over_worker_is_stale(env: &Backend) {
    // A claims at 0 with deadline 10, then pauses.
    assert_eq!(env.claim("doc.md", "A", 10, 0), 1);
    // B takes over at 10, writes and completes.
    assert_eq!(env.claim("doc.md", "B", 10, 10), 2);
    env.fp(&["write", "doc.md", "--epoch", "2", "--owner", "B"])
        .now(10)
        .stdin("B's report\n")
        .expect_stdout(0, "written");
    env.fp(&[
        "complete", "doc.md", "--owner", "B", "--epoch", "2", "--result", "done",
    ])
    .now(10)
    .expect_stdout(0, "completed");
    // A resumes at 11 with the write it prepared before pausing.
    let j = env
        .fp(&["--json", "write", "doc.md", "--epoch", "1", "--owner", "A"])
        .now(11)
        .stdin("A's report\n")
        .expect(5)
        .json_contract();
    assert_eq!(j["outcome"], "stale");
    assert_eq!(j["fence"], 2);
    let j = env
        .fp(&[
            "--json", "complete", "doc.md", "--owner", "A", "--epoch", "1",
        ])
        .now(11)
        .expect(4)
        .json_contract();
    assert_eq!(j["outcome"], "lost");
    assert_eq!(j["lease"]["owner"], "B");
    // The document holds B's bytes; both tables agree.
    assert_eq!(env.text("doc.md"), "B's report\n");
    assert_eq!(env.documents(), ["doc.md"]);
    assert_eq!(env.debris(), Vec::<String>::new());
    let status = env.fp(&["--json", "status"]).now(11).expect(0).json();
    let rows = status["resources"].as_array().expect("resources");
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r["resource"], "doc.md");
    assert_eq!(r["lease"]["owner"], "B");
    assert_eq!(r["lease"]["epoch"], 2);
    assert_eq!(r["lease"]["state"], "completed");
    assert_eq!(r["lease"]["result"], "done");
    assert_eq!(r["sink"]["fence"], 2);
    assert_eq!(r["sink"]["content_epoch"], 2);
    assert_eq!(r["document"]["state"], env.current());
    assert_eq!(document_sha256(env, r), r["sink"]["sha256"]);
}

#[test]
fn status_reports_drifted_document() {
    // A file edited by hand: a root's own documents (a store's bytes are not files).
    let env = &Backend::local();
    env.claim("doc.md", "A", 10, 0);
    env.write("doc.md", 1, "recorded", 1, 0);
    std::fs::write(env.env().path("doc.md"), "edited by hand").expect("edit");
    let r = row(env, "doc.md", 2);
    assert_eq!(r["document"]["state"], "drifted");
    assert_ne!(r["document"]["sha256"], r["sink"]["sha256"]);
}

fn status_plain_shows_table(env: &Backend) {
    // No state file yet: nothing to show is said on stderr, with exit 2.
    env.fp(&["status"]).now(0).expect_stdout(2, "");
    env.claim("doc.md", "A", 10, 0);
    env.write("doc.md", 1, "x", 1, 0);
    let out = env.fp(&["status"]).now(1).expect(0).stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with("RESOURCE"), "{out}");
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(cells[0], "doc.md", "{out}");
    assert!(lines[1].ends_with(env.current()), "{out}");
}

fn plain_output_shows_wall_clock_times_in_utc_and_json_keeps_milliseconds(env: &Backend) {
    env.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "1h"])
        .expect_stdout(0, "1");
    let j = env
        .fp(&["--json", "status", "doc.md"])
        .expect(0)
        .json_contract();
    let deadline = j["resources"][0]["lease"]["deadline"]
        .as_i64()
        .expect("deadline in milliseconds");
    // The UTC rendering, from GNU date rather than from the code under test.
    let date = std::process::Command::new("date")
        .args(["-u", "-d", &format!("@{}", deadline / 1000)])
        .arg("+%Y-%m-%dT%H:%M:%S")
        .output()
        .expect("run date");
    let utc = format!(
        "{}.{:03}Z",
        String::from_utf8_lossy(&date.stdout).trim(),
        deadline % 1000
    );
    let table = env.fp(&["status"]).expect(0).stdout;
    assert!(table.contains(&utc), "no {utc} in:\n{table}");
    let held = env
        .fp(&["claim", "doc.md", "--owner", "B", "--ttl", "1h"])
        .expect(3);
    assert!(
        held.stderr
            .contains(&format!("held by A (epoch 1) until {utc}")),
        "stderr: {}",
        held.stderr
    );
    let log = env.fp(&["log"]).expect(0).stdout;
    assert!(log.contains(&format!("deadline {utc}")), "log:\n{log}");
    // The stored detail, which --json shows, keeps milliseconds like every stored time.
    let events = env.fp(&["--json", "log"]).expect(0).json();
    assert_eq!(
        events["events"][0]["detail"],
        format!("deadline {deadline}"),
        "{events}"
    );
    // renew's stdout stays the integer a script compares.
    let renewed: i64 = env
        .fp(&[
            "renew", "doc.md", "--owner", "A", "--epoch", "1", "--ttl", "2h",
        ])
        .expect(0)
        .stdout
        .trim()
        .parse()
        .expect("renew prints milliseconds");
    assert!(renewed > deadline);
}

/// One command after another on `d.md`, each with its tick, stdin, exit code and
/// `outcome`.
const JSON_CASES: &[(&[&str], i64, &str, i32, &str)] = &[
    (
        &["claim", "d.md", "--owner", "A", "--ttl", "10"],
        0,
        "",
        0,
        "claimed",
    ),
    (
        &["claim", "d.md", "--owner", "B", "--ttl", "10"],
        1,
        "",
        3,
        "held",
    ),
    (
        &[
            "renew", "d.md", "--owner", "A", "--epoch", "1", "--ttl", "10",
        ],
        2,
        "",
        0,
        "renewed",
    ),
    (&["write", "d.md", "--epoch", "1"], 3, "one", 0, "written"),
    (&["write", "d.md", "--epoch", "1"], 3, "one", 0, "replay"),
    (&["write", "d.md", "--epoch", "1"], 3, "two", 6, "conflict"),
    (&["write", "d.md", "--epoch", "7"], 3, "two", 8, "unissued"),
    (&["status", "d.md"], 3, "", 0, "status"),
    (
        &["complete", "d.md", "--owner", "A", "--epoch", "1"],
        4,
        "",
        0,
        "completed",
    ),
    (
        &["complete", "d.md", "--owner", "A", "--epoch", "1"],
        4,
        "",
        0,
        "completed",
    ),
    (
        &[
            "complete", "d.md", "--owner", "A", "--epoch", "1", "--result", "x",
        ],
        4,
        "",
        4,
        "lost",
    ),
    (
        &["claim", "d.md", "--owner", "B", "--ttl", "10"],
        5,
        "",
        0,
        "claimed",
    ),
    (&["write", "d.md", "--epoch", "1"], 5, "three", 5, "stale"),
    (
        &["release", "d.md", "--owner", "B", "--epoch", "2"],
        6,
        "",
        0,
        "released",
    ),
    (
        &["release", "d.md", "--owner", "B", "--epoch", "2"],
        6,
        "",
        0,
        "released",
    ),
    (
        &["release", "d.md", "--owner", "B", "--epoch", "1"],
        6,
        "",
        4,
        "lost",
    ),
    (&["status"], 6, "", 0, "status"),
];

fn every_command_prints_one_json_object_with_outcome_resource_epoch(env: &Backend) {
    for &(args, now, stdin, code, outcome) in JSON_CASES {
        let mut a = vec!["--json"];
        a.extend(args);
        let j = env
            .fp(&a)
            .now(now)
            .stdin(stdin)
            .expect(code)
            .json_contract();
        assert_eq!(j["outcome"], outcome, "{args:?}: {j}");
        if args.contains(&"d.md") {
            assert_eq!(j["resource"], "d.md", "{args:?}: {j}");
        }
    }
}

fn status_json_of_one_resource_carries_its_epoch(env: &Backend) {
    // Never claimed: there is nothing to show, and the answer still names it.
    let j = env
        .fp(&["--json", "status", "d.md"])
        .now(0)
        .expect(2)
        .json_contract();
    assert_eq!(j["resource"], "d.md");
    assert_eq!(j["epoch"], Value::Null);
    env.claim("d.md", "A", 10, 0);
    env.claim("d.md", "B", 10, 10);
    let j = env
        .fp(&["--json", "status", "d.md"])
        .now(10)
        .expect(0)
        .json_contract();
    assert_eq!(j["epoch"], 2);
    // Without a resource there is no single epoch: the keys are there, null.
    let j = env
        .fp(&["--json", "status"])
        .now(10)
        .expect(0)
        .json_contract();
    assert_eq!(j["resource"], Value::Null);
    assert_eq!(j["epoch"], Value::Null);
}

both_stores!(
    lazy_fence_accepts_old_epoch_until_new_holder_writes,
    unfenced_write_accepts_old_epoch_reproducing_the_bug,
    write_with_issued_epoch_is_written,
    write_json_reports_hash_size_and_previous_fence,
    same_epoch_same_bytes_is_replay_and_file_is_not_rewritten,
    same_epoch_different_bytes_is_conflict_and_file_is_unchanged,
    lower_epoch_than_accepted_is_stale_and_file_is_unchanged,
    higher_issued_epoch_replaces_document,
    never_claimed_resource_is_unissued,
    epoch_above_highest_issued_is_unissued,
    owner_mismatch_is_unissued,
    epoch_of_one_resource_does_not_fence_another,
    takeover_fences_old_holder_before_new_holder_writes,
    takeover_fences_old_holder_even_on_first_write,
    seed_main_scenario_late_write_of_taken_over_worker_is_stale,
    status_plain_shows_table,
    plain_output_shows_wall_clock_times_in_utc_and_json_keeps_milliseconds,
    every_command_prints_one_json_object_with_outcome_resource_epoch,
    status_json_of_one_resource_carries_its_epoch,
);
