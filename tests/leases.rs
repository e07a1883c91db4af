//! The scheduler's side: claim, renew, complete, release, at the deadline boundary. Each
//! behaviour runs against a local root and against a PostgreSQL store (`both_stores!`).

use crate::harness::Env;
use crate::support::{Backend, both_stores};

fn first_claim_prints_epoch_one(env: &Backend) {
    env.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(0)
        .expect_stdout(0, "1");
}

fn takeover_at_deadline_is_allowed(env: &Backend) {
    assert_eq!(env.claim("doc.md", "A", 10, 0), 1);
    let held = env
        .fp(&["--json", "claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(9)
        .expect(3);
    let j = held.json();
    assert_eq!(j["outcome"], "held");
    assert_eq!(j["holder"], "A");
    assert_eq!(j["holder_epoch"], 1);
    assert_eq!(j["epoch"], serde_json::Value::Null);
    assert_eq!(env.claim("doc.md", "B", 10, 10), 2);
}

/// `status RES --json` for one resource at tick `now`: its row.
fn row(env: &Backend, res: &str, now: i64) -> serde_json::Value {
    let j = env.fp(&["--json", "status", res]).now(now).expect(0).json();
    j["resources"][0].clone()
}

fn holder(verb: &str, res: &str, owner: &str, epoch: i64) -> Vec<String> {
    [
        "--json",
        verb,
        res,
        "--owner",
        owner,
        "--epoch",
        &epoch.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn claim_before_deadline_is_held_and_changes_nothing(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    let before = row(env, "doc.md", 9);
    env.fp(&["claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(9)
        .expect_stdout(3, "held");
    assert_eq!(row(env, "doc.md", 9), before);
    assert_eq!(before["lease"]["owner"], "A");
    assert_eq!(before["lease"]["epoch"], 1);
    assert_eq!(before["lease"]["deadline"], 10);
}

fn claim_at_deadline_records_new_owner_epoch_and_deadline(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    let j = env
        .fp(&["--json", "claim", "doc.md", "--owner", "B", "--ttl", "7"])
        .now(10)
        .expect(0)
        .json_contract();
    assert_eq!(j["outcome"], "claimed");
    assert_eq!(j["resource"], "doc.md");
    assert_eq!(j["epoch"], 2);
    assert_eq!(j["owner"], "B");
    assert_eq!(j["deadline"], 17);
    assert_eq!(j["previous"]["owner"], "A");
    assert_eq!(j["previous"]["state"], "expired");
    let lease = &row(env, "doc.md", 10)["lease"];
    assert_eq!(lease["owner"], "B");
    assert_eq!(lease["epoch"], 2);
    assert_eq!(lease["deadline"], 17);
    assert_eq!(lease["state"], "held");
}

fn renew_before_deadline_extends_it_and_delays_takeover(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    env.fp(&[
        "renew", "doc.md", "--owner", "A", "--epoch", "1", "--ttl", "10",
    ])
    .now(9)
    .expect_stdout(0, "19");
    // At the old deadline the lease is still A's.
    let held = env
        .fp(&["--json", "claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(10)
        .expect(3)
        .json_contract();
    assert_eq!(held["holder"], "A");
    assert_eq!(held["deadline"], 19);
    env.fp(&["claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(18)
        .expect_stdout(3, "held");
    // At the new deadline it has expired.
    assert_eq!(env.claim("doc.md", "B", 10, 19), 2);
}

fn renew_at_deadline_is_lost(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    let v = holder("renew", "doc.md", "A", 1);
    let mut a = args(&v);
    a.extend(["--ttl", "10"]);
    let j = env.fp(&a).now(10).expect(4).json_contract();
    assert_eq!(j["outcome"], "lost");
    assert_eq!(j["epoch"], 1);
    assert_eq!(j["reason"], "the lease expired");
    // The refused renew did not move the deadline: B can take over at 10.
    assert_eq!(row(env, "doc.md", 10)["lease"]["deadline"], 10);
    assert_eq!(env.claim("doc.md", "B", 10, 10), 2);
}

fn taken_over_holder_cannot_renew_complete_or_release(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    assert_eq!(env.claim("doc.md", "B", 10, 10), 2);
    let before = row(env, "doc.md", 11);
    for verb in ["renew", "complete", "release"] {
        let v = holder(verb, "doc.md", "A", 1);
        let mut a = args(&v);
        if verb == "renew" {
            a.extend(["--ttl", "100"]);
        }
        let done = env.fp(&a).now(11).expect(4);
        let j = done.json_contract();
        assert_eq!(j["outcome"], "lost", "{verb}");
        assert_eq!(j["resource"], "doc.md", "{verb}");
        assert_eq!(j["epoch"], 1, "{verb}: the refused request's epoch");
        assert_eq!(j["lease"]["owner"], "B", "{verb}: shows the current holder");
        assert_eq!(j["lease"]["epoch"], 2, "{verb}: shows the current epoch");
        assert_eq!(j["lease"]["state"], "held", "{verb}");
        assert!(
            done.stderr.contains("current: owner B epoch 2"),
            "{verb}: {}",
            done.stderr
        );
        assert_eq!(row(env, "doc.md", 11), before, "{verb} changed the lease");
    }
}

fn plain_refusal_prints_outcome_word(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    env.claim("doc.md", "B", 10, 10);
    env.fp(&["complete", "doc.md", "--owner", "A", "--epoch", "1"])
        .now(11)
        .expect_stdout(4, "lost");
}

fn same_name_reclaim_gets_new_epoch_and_old_epoch_is_refused(env: &Backend) {
    assert_eq!(env.claim("doc.md", "A", 10, 0), 1);
    env.write("doc.md", 1, "first", 1, 0);
    assert_eq!(env.claim("doc.md", "A", 10, 10), 2);
    for verb in ["renew", "complete", "release"] {
        let v = holder(verb, "doc.md", "A", 1);
        let mut a = args(&v);
        if verb == "renew" {
            a.extend(["--ttl", "100"]);
        }
        let j = env.fp(&a).now(11).expect(4).json_contract();
        assert_eq!(j["reason"], "the lease has a newer epoch", "{verb}");
        assert_eq!(j["lease"]["owner"], "A", "{verb}");
        assert_eq!(j["lease"]["epoch"], 2, "{verb}");
    }
    let j = env
        .fp(&["--json", "write", "doc.md", "--epoch", "1", "--owner", "A"])
        .now(11)
        .stdin("late")
        .expect(5)
        .json_contract();
    assert_eq!(j["outcome"], "stale");
    assert_eq!(env.text("doc.md"), "first");
    // The new epoch works.
    env.fp(&[
        "renew", "doc.md", "--owner", "A", "--epoch", "2", "--ttl", "10",
    ])
    .now(11)
    .expect_stdout(0, "21");
}

fn complete_after_expiry_is_refused_and_records_nothing(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    let j = env
        .fp(&[
            "--json", "complete", "doc.md", "--owner", "A", "--epoch", "1", "--result", "ok",
        ])
        .now(10)
        .expect(4)
        .json_contract();
    assert_eq!(j["outcome"], "lost");
    assert_eq!(j["reason"], "the lease expired");
    assert_eq!(j["lease"]["state"], "expired");
    let lease = &row(env, "doc.md", 10)["lease"];
    assert_eq!(lease["state"], "expired");
    assert_eq!(lease["result"], serde_json::Value::Null);
}

fn complete_by_wrong_owner_is_refused(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    let j = env
        .fp(&[
            "--json", "complete", "doc.md", "--owner", "B", "--epoch", "1",
        ])
        .now(5)
        .expect(4)
        .json_contract();
    assert_eq!(j["reason"], "the lease belongs to another owner");
    assert_eq!(row(env, "doc.md", 5)["lease"]["state"], "held");
}

fn holder_commands_on_unclaimed_resource_are_lost(env: &Backend) {
    env.claim("other.md", "X", 10, 0);
    let j = env
        .fp(&[
            "--json", "release", "doc.md", "--owner", "A", "--epoch", "1",
        ])
        .now(0)
        .expect(4)
        .json_contract();
    assert_eq!(j["reason"], "no lease was ever claimed");
    assert_eq!(j["lease"], serde_json::Value::Null);
}

fn release_lets_next_claim_succeed_at_once_with_next_epoch(env: &Backend) {
    assert_eq!(env.claim("doc.md", "A", 100, 0), 1);
    let j = env
        .fp(&[
            "--json", "release", "doc.md", "--owner", "A", "--epoch", "1",
        ])
        .now(5)
        .expect(0)
        .json_contract();
    assert_eq!(j["outcome"], "released");
    assert_eq!(j["epoch"], 1);
    assert_eq!(row(env, "doc.md", 5)["lease"]["state"], "released");
    // Long before the old deadline of 100.
    assert_eq!(env.claim("doc.md", "B", 10, 6), 2);
    // A released lease cannot be released, renewed or completed again.
    env.fp(&["release", "doc.md", "--owner", "A", "--epoch", "1"])
        .now(7)
        .expect_stdout(4, "lost");
}

/// A release run again after it was made (its first answer lost) is a replay: exit 0,
/// marked, nothing changed; released under another epoch or never held, it is lost.
fn release_retried_after_it_was_made_is_a_replay(env: &Backend) {
    env.claim("doc.md", "A", 100, 0);
    env.fp(&["release", "doc.md", "--owner", "A", "--epoch", "1"])
        .now(5)
        .expect_stdout(0, "released");
    let log_before = env.fp(&["--json", "log", "doc.md"]).expect(0).json();
    let j = env
        .fp(&[
            "--json", "release", "doc.md", "--owner", "A", "--epoch", "1",
        ])
        .now(6)
        .expect(0)
        .json_contract();
    assert_eq!(j["outcome"], "released");
    assert_eq!(j["replay"], true);
    env.fp(&["release", "doc.md", "--owner", "A", "--epoch", "1"])
        .now(7)
        .expect_stdout(0, "released");
    let log_after = env.fp(&["--json", "log", "doc.md"]).expect(0).json();
    assert_eq!(log_after, log_before, "a replay logs nothing");
    let j = env
        .fp(&[
            "--json", "complete", "doc.md", "--owner", "A", "--epoch", "1",
        ])
        .now(8)
        .expect(4)
        .json_contract();
    assert_eq!(j["reason"], "the lease was already released");
    env.fp(&["release", "doc.md", "--owner", "B", "--epoch", "1"])
        .now(8)
        .expect_stdout(4, "lost");
}

/// A claim whose COMMIT was made but whose answer never came (killed right after it), run
/// again by the same owner: it gets its own lease and epoch back, marked as a replay,
/// and nothing changes; another owner is still `held`, and the lease works.
fn a_claim_retried_after_its_answer_was_lost_gets_its_epoch_back(env: &Backend) {
    env.claim("other.md", "Z", 10, 0);
    let lost = env
        .fp(&["claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(1)
        .env("FAILPOINTS", "txn.after_commit=return(abort)")
        .output();
    assert_eq!(lost.code, -1, "killed after its COMMIT: {}", lost.stderr);
    assert_eq!(lost.stdout, "", "no answer was delivered");
    let before = row(env, "doc.md", 2);
    let log_before = env.fp(&["--json", "log", "doc.md"]).expect(0).json();
    env.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(2)
        .expect_stdout(0, "1");
    let j = env
        .fp(&["--json", "claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(3)
        .expect(0)
        .json_contract();
    assert_eq!(j["outcome"], "claimed");
    assert_eq!(j["epoch"], 1);
    assert_eq!(j["replay"], true);
    assert_eq!(j["deadline"], 11, "the lease as it was made, not extended");
    assert_eq!(j["fenced_at_sink"], true);
    assert_eq!(row(env, "doc.md", 2), before, "a replay changes nothing");
    let log_after = env.fp(&["--json", "log", "doc.md"]).expect(0).json();
    assert_eq!(log_after, log_before, "a replay logs nothing");
    env.fp(&["claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(4)
        .expect_stdout(3, "held");
    env.write("doc.md", 1, "by A", 5, 0);
    // At its deadline the lease is over: the same owner's claim is a new one.
    assert_eq!(env.claim("doc.md", "A", 10, 11), 2);
}

/// A claim by the live lease's own owner after a write under that lease is no retry of the
/// claim that made it (the write proves its answer came): it is `held`, as before replays
/// existed, not the old epoch back, which could only end in a `conflict` for new bytes.
fn a_claim_by_the_holder_after_it_wrote_is_held(env: &Backend) {
    assert_eq!(env.claim("doc.md", "A", 10, 0), 1);
    env.write("doc.md", 1, "by A", 1, 0);
    let j = env
        .fp(&["--json", "claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(2)
        .expect(3)
        .json();
    assert_eq!(j["outcome"], "held", "{j}");
    assert_eq!(j["holder"], "A", "{j}");
    assert_eq!(j["holder_epoch"], 1, "{j}");
    // Once the lease is over, the same owner's claim is a new one.
    assert_eq!(env.claim("doc.md", "A", 10, 11), 2);
}

/// A renew whose COMMIT was made but whose answer never came, run again, simply renews
/// again from the time of the retry: no rule of its own is needed.
fn a_renew_retried_after_its_answer_was_lost_renews_again(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    let renew = [
        "renew", "doc.md", "--owner", "A", "--epoch", "1", "--ttl", "10",
    ];
    let lost = env
        .fp(&renew)
        .now(5)
        .env("FAILPOINTS", "txn.after_commit=return(abort)")
        .output();
    assert_eq!(lost.code, -1, "killed after its COMMIT: {}", lost.stderr);
    assert_eq!(
        row(env, "doc.md", 6)["lease"]["deadline"],
        15,
        "it was made"
    );
    env.fp(&renew).now(6).expect_stdout(0, "16");
    assert_eq!(row(env, "doc.md", 6)["lease"]["deadline"], 16);
}

/// `run` does not take a live lease even under its own owner name: two overlapping runs
/// of one cron job (`--owner "$(hostname)"`) must not both run their command.
fn run_refuses_a_live_lease_of_its_own_owner(env: &Backend) {
    env.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "1h"])
        .expect_stdout(0, "1");
    env.fp(&["run", "doc.md", "--owner", "A", "--ttl", "1h", "--", "true"])
        .expect_stdout(3, "held");
}

/// A complete whose COMMIT was made but whose answer never came, run again: with the
/// same result it is a replay (exit 0, marked, nothing changed); with another result it
/// stays lost, and says the lease was completed with another one.
fn a_complete_retried_after_its_answer_was_lost_is_a_replay(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    let complete = ["complete", "doc.md", "--owner", "A", "--epoch", "1"];
    let lost = env
        .fp(&[&complete[..], &["--result", "ok"]].concat())
        .now(1)
        .env("FAILPOINTS", "txn.after_commit=return(abort)")
        .output();
    assert_eq!(lost.code, -1, "killed after its COMMIT: {}", lost.stderr);
    let before = row(env, "doc.md", 2);
    let log_before = env.fp(&["--json", "log", "doc.md"]).expect(0).json();
    env.fp(&[&complete[..], &["--result", "ok"]].concat())
        .now(2)
        .expect_stdout(0, "completed");
    // After the deadline too: the completion was made before it.
    let j = env
        .fp(&[&["--json"][..], &complete, &["--result", "ok"]].concat())
        .now(20)
        .expect(0)
        .json_contract();
    assert_eq!(j["outcome"], "completed");
    assert_eq!(j["replay"], true);
    assert_eq!(j["result"], "ok");
    assert_eq!(row(env, "doc.md", 2), before, "a replay changes nothing");
    let log_after = env.fp(&["--json", "log", "doc.md"]).expect(0).json();
    assert_eq!(log_after, log_before, "a replay logs nothing");
    let other = env
        .fp(&[&["--json"][..], &complete, &["--result", "failed"]].concat())
        .now(3)
        .expect(4);
    let j = other.json_contract();
    assert_eq!(
        j["reason"],
        "the lease was already completed with another result"
    );
    assert_eq!(j["lease"]["result"], "ok");
    let plain = env
        .fp(&[&complete[..], &["--result", "failed"]].concat())
        .now(3)
        .expect(4);
    assert!(
        plain.stderr.contains("result \"ok\""),
        "the refusal names the recorded result: {}",
        plain.stderr
    );
    // Without a result, where one was recorded: another result too.
    env.fp(&complete).now(3).expect_stdout(4, "lost");
    // The next claim is a new lease whatever the owner.
    assert_eq!(env.claim("doc.md", "A", 10, 4), 2);
}

fn complete_records_result_in_status(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    let j = env
        .fp(&[
            "--json", "complete", "doc.md", "--owner", "A", "--epoch", "1", "--result", "42 rows",
        ])
        .now(9)
        .expect(0)
        .json_contract();
    assert_eq!(j["outcome"], "completed");
    assert_eq!(j["result"], "42 rows");
    let lease = &row(env, "doc.md", 9)["lease"];
    assert_eq!(lease["state"], "completed");
    assert_eq!(lease["result"], "42 rows");
    assert_eq!(lease["owner"], "A");
    assert_eq!(lease["epoch"], 1);
    // The result is kept after the deadline passes.
    assert_eq!(row(env, "doc.md", 50)["lease"]["result"], "42 rows");
    // A finished lease cannot be completed again with another result.
    let again = env
        .fp(&[
            "--json", "complete", "doc.md", "--owner", "A", "--epoch", "1", "--result", "x",
        ])
        .now(9)
        .expect(4)
        .json_contract();
    assert_eq!(
        again["reason"],
        "the lease was already completed with another result"
    );
    assert_eq!(row(env, "doc.md", 9)["lease"]["result"], "42 rows");
}

fn claim_after_complete_gets_next_epoch(env: &Backend) {
    assert_eq!(env.claim("doc.md", "A", 10, 0), 1);
    env.fp(&["complete", "doc.md", "--owner", "A", "--epoch", "1"])
        .now(3)
        .expect_stdout(0, "completed");
    // Before the old deadline: the finished lease does not block.
    assert_eq!(env.claim("doc.md", "B", 10, 4), 2);
    let lease = &row(env, "doc.md", 4)["lease"];
    assert_eq!(lease["owner"], "B");
    assert_eq!(lease["result"], serde_json::Value::Null);
}

fn epochs_never_repeat_across_claims_releases_and_expiries(env: &Backend) {
    assert_eq!(env.claim("doc.md", "A", 10, 0), 1);
    assert_eq!(env.claim("doc.md", "A", 10, 10), 2);
    env.fp(&["release", "doc.md", "--owner", "A", "--epoch", "2"])
        .now(11)
        .expect(0);
    assert_eq!(env.claim("doc.md", "B", 10, 11), 3);
    env.fp(&["complete", "doc.md", "--owner", "B", "--epoch", "3"])
        .now(12)
        .expect(0);
    assert_eq!(env.claim("doc.md", "A", 10, 12), 4);
}

fn leases_are_per_resource(env: &Backend) {
    assert_eq!(env.claim("a.md", "A", 10, 0), 1);
    assert_eq!(env.claim("b.md", "B", 10, 0), 1);
    env.fp(&["claim", "a.md", "--owner", "B", "--ttl", "10"])
        .now(5)
        .expect_stdout(3, "held");
}

fn renew_prints_new_deadline_in_json(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    let j = env
        .fp(&[
            "--json", "renew", "doc.md", "--owner", "A", "--epoch", "1", "--ttl", "30",
        ])
        .now(4)
        .expect(0)
        .json_contract();
    assert_eq!(j["outcome"], "renewed");
    assert_eq!(j["resource"], "doc.md");
    assert_eq!(j["epoch"], 1);
    assert_eq!(j["deadline"], 34);
    assert_eq!(row(env, "doc.md", 4)["lease"]["deadline"], 34);
}

fn claim_wait_takes_over_when_wall_clock_lease_expires(env: &Backend) {
    // A's TTL leaves room for a slow machine to start the next claim before it ends.
    env.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "1500ms"])
        .expect_stdout(0, "1");
    // Without --wait B is refused at once; with it, B gets the lease when A's expires.
    env.fp(&["claim", "doc.md", "--owner", "B", "--ttl", "10s"])
        .expect_stdout(3, "held");
    let j = env
        .fp(&[
            "--json", "claim", "doc.md", "--owner", "B", "--ttl", "10s", "--wait", "20s",
        ])
        .expect(0)
        .json_contract();
    assert_eq!(j["epoch"], 2);
    assert_eq!(j["owner"], "B");
}

fn claim_wait_gives_up_with_held_after_its_duration(env: &Backend) {
    env.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "1h"])
        .expect_stdout(0, "1");
    let j = env
        .fp(&[
            "--json", "claim", "doc.md", "--owner", "B", "--ttl", "10s", "--wait", "200ms",
        ])
        .expect(3)
        .json_contract();
    assert_eq!(j["outcome"], "held");
    assert_eq!(j["holder"], "A");
}

fn claim_wait_with_logical_clock_is_bad_usage(env: &Backend) {
    env.claim("doc.md", "A", 10, 0);
    env.fp(&[
        "claim", "doc.md", "--owner", "B", "--ttl", "10", "--wait", "5s",
    ])
    .now(5)
    .expect(2);
    let lease = &row(env, "doc.md", 5)["lease"];
    assert_eq!(lease["owner"], "A");
}

#[test]
fn first_claims_racing_on_a_fresh_root_wait_instead_of_failing_busy() {
    // Eight processes make their first claim on a fresh root at once: one creates the
    // state file and turns it to WAL while the others open it. SQLite answers some of
    // those opens SQLITE_BUSY at once, without its busy handler; none may reach the
    // caller as `busy` (exit 7) when the --busy-timeout (10 s) has not run out.
    for round in 0..80 {
        let env = Env::new();
        let claims: Vec<std::process::Child> = (0..8)
            .map(|w| {
                std::process::Command::new(crate::harness::bin())
                    .env_clear()
                    .args(["--root"])
                    .arg(env.root())
                    .args(["--now", "1", "claim", &format!("d{w}.md")])
                    .args(["--owner", &format!("w{w}"), "--ttl", "10"])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("spawn a claim")
            })
            .collect();
        for claim in claims {
            let out = claim.wait_with_output().expect("wait for a claim");
            assert_eq!(
                out.status.code(),
                Some(0),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

both_stores!(
    first_claim_prints_epoch_one,
    takeover_at_deadline_is_allowed,
    claim_before_deadline_is_held_and_changes_nothing,
    claim_at_deadline_records_new_owner_epoch_and_deadline,
    renew_before_deadline_extends_it_and_delays_takeover,
    renew_at_deadline_is_lost,
    taken_over_holder_cannot_renew_complete_or_release,
    plain_refusal_prints_outcome_word,
    same_name_reclaim_gets_new_epoch_and_old_epoch_is_refused,
    complete_after_expiry_is_refused_and_records_nothing,
    complete_by_wrong_owner_is_refused,
    holder_commands_on_unclaimed_resource_are_lost,
    release_lets_next_claim_succeed_at_once_with_next_epoch,
    release_retried_after_it_was_made_is_a_replay,
    a_claim_retried_after_its_answer_was_lost_gets_its_epoch_back,
    a_claim_by_the_holder_after_it_wrote_is_held,
    run_refuses_a_live_lease_of_its_own_owner,
    a_renew_retried_after_its_answer_was_lost_renews_again,
    a_complete_retried_after_its_answer_was_lost_is_a_replay,
    complete_records_result_in_status,
    claim_after_complete_gets_next_epoch,
    epochs_never_repeat_across_claims_releases_and_expiries,
    leases_are_per_resource,
    renew_prints_new_deadline_in_json,
    claim_wait_takes_over_when_wall_clock_lease_expires,
    claim_wait_gives_up_with_held_after_its_duration,
    claim_wait_with_logical_clock_is_bad_usage,
);
