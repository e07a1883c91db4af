//! Mirror roots at the edges of the store: a mirror that holds a version the store lost
//! (a failover without synchronous replication, a restore) says it is `ahead`, and the
//! store's next claim starts above what mirrors hold; a mirror's crashed apply of a
//! version the store committed is rolled forward, never back; one damaged blob is that
//! document's failure, never the others'; `mirror --follow` started before the store's
//! first claim waits for it.

use std::time::Duration;

use postgres::Client;

use crate::harness::{Done, Env, Run};
use crate::hosts::{Follower, Host, wait_for_file};
use crate::support::pg;
use crate::support::sha256_hex;

/// Publishes `bytes` to `res` from a host with no root, on the wall clock: claim, write,
/// complete, as `owner`. Returns the epoch.
pub(crate) fn publish(url: &str, res: &str, owner: &str, bytes: &str) -> i64 {
    let dir = Env::new();
    let run = |args: &[&str]| dir.fp(args).inside(dir.root()).env("FENCEPOST_STORE", url);
    let epoch = run(&["claim", res, "--owner", owner, "--ttl", "60"])
        .expect(0)
        .stdout
        .trim()
        .to_string();
    run(&["write", res, "--epoch", &epoch, "--owner", owner])
        .stdin(bytes)
        .expect_stdout(0, "written");
    run(&["complete", res, "--owner", owner, "--epoch", &epoch]).expect(0);
    epoch.parse().expect("an epoch")
}

/// The `applied` entry of `res` in a mirror pass's JSON.
fn entry(pass: &serde_json::Value, res: &str) -> serde_json::Value {
    pass["applied"]
        .as_array()
        .expect("a list")
        .iter()
        .find(|a| a["resource"] == res)
        .cloned()
        .unwrap_or_else(|| panic!("no entry for {res}: {pass}"))
}

/// The problems `verify --json` lists for `res`, as (problem, message).
fn problems(done: &Done, res: &str) -> Vec<(String, String)> {
    let j = done.json();
    j["problems"]
        .as_array()
        .unwrap_or_else(|| panic!("no problems: {j}"))
        .iter()
        .filter(|p| p["resource"] == res)
        .map(|p| {
            (
                p["problem"].as_str().unwrap_or("").to_string(),
                p["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// What an asynchronous failover that lost the last epoch leaves: the store's rows of
/// `res` put back by hand to its version of epoch `back` (`bytes`), the lease and the
/// log as they were then.
fn lose_history(client: &mut Client, res: &str, back: i64, bytes: &str) {
    let sha = sha256_hex(bytes.as_bytes());
    let size = i64::try_from(bytes.len()).expect("size");
    client
        .execute(
            "UPDATE fencepost_sink SET fence = $2, content_epoch = $2, sha256 = $3, size = $4,
                 blob = (SELECT id FROM fencepost_blob WHERE sha256 = $3 ORDER BY id LIMIT 1)
             WHERE resource = $1",
            &[&res, &back, &sha, &size],
        )
        .expect("put the sink back");
    client
        .execute(
            "UPDATE fencepost_lease SET epoch = $2 WHERE resource = $1",
            &[&res, &back],
        )
        .expect("put the lease back");
    client
        .execute(
            "DELETE FROM fencepost_log WHERE resource = $1 AND epoch > $2",
            &[&res, &back],
        )
        .expect("put the log back");
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_mirror_ahead_of_a_store_that_lost_history_says_so_and_the_next_claim_starts_above_it() {
    let store = pg::store();
    let url = store.url();
    let res = "doc.md";
    publish(url, res, "A", "A's version, epoch 1");
    let m = Host::new(url);
    m.fp(&["mirror"])
        .expect_stdout(0, "applied doc.md (epoch 1)");
    publish(url, res, "B", "B's version, epoch 2");
    m.fp(&["mirror"])
        .expect_stdout(0, "applied doc.md (epoch 2)");
    let mut client = store.client();
    lose_history(&mut client, res, 1, "A's version, epoch 1");

    // The mirror holds a version the store no longer knows: `ahead`, not `behind`.
    let done = m.fp(&["--json", "verify"]).expect(9);
    let found = problems(&done, res);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "ahead", "{found:?}");
    let b_sha = sha256_hex(b"B's version, epoch 2");
    for words in [
        "the mirror holds epoch 2 (sha ".to_string(),
        b_sha[..12].to_string(),
        "the store publishes epoch 1".to_string(),
        "the store lost history".to_string(),
    ] {
        assert!(found[0].1.contains(&words), "{words}: {found:?}");
    }
    let plain = m.fp(&["verify"]).expect(9);
    assert!(plain.stdout.contains("doc.md: ahead: "), "{plain:?}");
    let status = m.fp(&["--json", "status", res]).expect(0).json();
    assert_eq!(
        status["resources"][0]["document"]["state"], "ahead",
        "{status}"
    );
    // `mirror` says the same, changes nothing, and exits 9.
    let done = m.fp(&["--json", "mirror"]).expect(9);
    assert_eq!(
        entry(&done.json(), res)["outcome"],
        "ahead",
        "{}",
        done.stdout
    );
    let plain = m.fp(&["mirror"]).expect(9);
    assert!(
        plain.stdout.starts_with("ahead doc.md (epoch 1): "),
        "{plain:?}"
    );
    assert_eq!(m.file(res).as_deref(), Some(&b"B's version, epoch 2"[..]));

    // The mirror told the store what it holds, and the store's fence is back at it: a
    // write under the epoch the store forgot was superseded is stale again.
    let dir = Env::new();
    dir.fp(&["write", res, "--epoch", "1", "--owner", "B"])
        .inside(dir.root())
        .env("FENCEPOST_STORE", url)
        .stdin("a late write under epoch 1")
        .expect_stdout(5, "stale");
    // The next claim is issued above it, and the new version reaches the mirror.
    let epoch = publish(url, res, "C", "C's version");
    assert_eq!(epoch, 3, "the claim reissued an epoch a mirror holds");
    m.fp(&["mirror"])
        .expect_stdout(0, "applied doc.md (epoch 3)");
    assert_eq!(m.file(res).as_deref(), Some(&b"C's version"[..]));
    m.fp(&["verify"]).expect(0);
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_store_made_by_an_older_version_gets_the_table_of_what_mirrors_hold() {
    let store = pg::store();
    let url = store.url();
    publish(url, "doc.md", "A", "v1");
    let mut client = store.client();
    // The store as an older build made it: schema version 1, no fencepost_seen, no
    // versions' seqs or removals, no trees.
    client
        .batch_execute(
            "DROP TABLE IF EXISTS fencepost_seen;
             DROP TABLE fencepost_tree_blob;
             ALTER TABLE fencepost_sink DROP COLUMN seq, DROP COLUMN removed, DROP COLUMN tree;
             ALTER TABLE fencepost_log DROP COLUMN seq;
             UPDATE fencepost_meta SET value = '1'::bytea WHERE key = 'schema'",
        )
        .expect("go back to version 1");
    let m = Host::new(url);
    m.fp(&["mirror"])
        .expect_stdout(0, "applied doc.md (epoch 1)");
    let schema: Vec<u8> = client
        .query_one("SELECT value FROM fencepost_meta WHERE key = 'schema'", &[])
        .expect("schema")
        .get(0);
    assert_eq!(schema, b"4");
    let seen: i64 = client
        .query_one("SELECT count(*) FROM fencepost_seen", &[])
        .expect("the table of what mirrors hold")
        .get(0);
    assert_eq!(seen, 0);
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_store_made_by_the_version_before_gets_versions_and_removals_with_its_history_kept() {
    let store = pg::store();
    let url = store.url();
    publish(url, "doc.md", "A", "v1");
    let mut client = store.client();
    // Schema version 2: no seqs, no removals, no trees.
    client
        .batch_execute(
            "DROP TABLE fencepost_tree_blob;
             ALTER TABLE fencepost_sink DROP COLUMN seq, DROP COLUMN removed, DROP COLUMN tree;
             ALTER TABLE fencepost_log DROP COLUMN seq;
             UPDATE fencepost_meta SET value = '2'::bytea WHERE key = 'schema'",
        )
        .expect("go back to version 2");
    let dir = Env::new();
    let run = |args: &[&str]| dir.fp(args).inside(dir.root()).env("FENCEPOST_STORE", url);
    run(&["claim", "doc.md", "--owner", "B", "--ttl", "1h"]).expect_stdout(0, "2");
    run(&["write", "doc.md", "--epoch", "2", "--seq", "1"])
        .stdin("v2")
        .expect_stdout(0, "written");
    let schema: Vec<u8> = client
        .query_one("SELECT value FROM fencepost_meta WHERE key = 'schema'", &[])
        .expect("schema")
        .get(0);
    assert_eq!(schema, b"4");
    // The version the older build published reads as seq 0, and a removal takes.
    run(&["remove", "doc.md", "--epoch", "2", "--seq", "2"]).expect_stdout(0, "removed");
    let log = run(&["log", "doc.md"]).expect(0).stdout;
    assert!(log.contains("2 seq 1"), "{log}");
    assert!(log.contains("2 seq 2"), "{log}");
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_mirror_that_holds_a_resource_the_store_lost_altogether_is_ahead() {
    let store = pg::store();
    let url = store.url();
    publish(url, "kept.md", "A", "kept");
    publish(url, "lost.md", "A", "only on the lost primary");
    let m = Host::new(url);
    m.fp(&["mirror"]).expect(0);
    // The failover lost lost.md's first claim and write: the store has no row of it.
    let mut client = store.client();
    client
        .batch_execute(
            "DELETE FROM fencepost_sink WHERE resource = 'lost.md';
             DELETE FROM fencepost_lease WHERE resource = 'lost.md';
             DELETE FROM fencepost_log WHERE resource = 'lost.md';
             DO $$ BEGIN IF to_regclass('fencepost_seen') IS NOT NULL THEN
                 DELETE FROM fencepost_seen;
             END IF; END $$",
        )
        .expect("lose the resource");
    let done = m.fp(&["--json", "verify"]).expect(9);
    let found = problems(&done, "lost.md");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "ahead", "{found:?}");
    assert!(
        found[0].1.contains("the store publishes nothing of it"),
        "{found:?}"
    );
    let done = m.fp(&["--json", "mirror"]).expect(9);
    let j = done.json();
    assert_eq!(entry(&j, "lost.md")["outcome"], "ahead", "{j}");
    assert_eq!(entry(&j, "kept.md")["outcome"], "current", "{j}");
    // The next claim of it is above the epoch the mirror holds.
    assert_eq!(publish(url, "lost.md", "C", "C's"), 2);
    m.fp(&["mirror"])
        .expect_stdout(0, "applied lost.md (epoch 2)");
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_mirror_that_holds_other_bytes_under_the_stores_epoch_is_ahead() {
    let store = pg::store();
    let url = store.url();
    let res = "doc.md";
    publish(url, res, "A", "A's version, epoch 1");
    publish(url, res, "B", "B's version, epoch 2");
    let m = Host::new(url);
    m.fp(&["mirror"]).expect(0);
    // Epoch 2 lost, and then issued again (by a build that did not ask mirrors) and
    // written with other bytes: the mirror holds epoch 2 as the store does, not its bytes.
    let mut client = store.client();
    lose_history(&mut client, res, 1, "A's version, epoch 1");
    client
        .batch_execute(
            "DO $$ BEGIN IF to_regclass('fencepost_seen') IS NOT NULL THEN
                 DELETE FROM fencepost_seen;
             END IF; END $$",
        )
        .expect("forget what mirrors reported");
    publish(url, res, "C", "C's version, epoch 2 again");
    let done = m.fp(&["--json", "verify"]).expect(9);
    let found = problems(&done, res);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "ahead", "{found:?}");
    assert!(found[0].1.contains("other bytes"), "{found:?}");
    let done = m.fp(&["--json", "mirror"]).expect(9);
    assert_eq!(
        entry(&done.json(), res)["outcome"],
        "ahead",
        "{}",
        done.stdout
    );
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_mirror_without_the_privilege_to_report_still_says_ahead() {
    let store = pg::store();
    let url = store.url();
    let res = "doc.md";
    publish(url, res, "A", "A's version, epoch 1");
    publish(url, res, "B", "B's version, epoch 2");
    let m = Host::new(url);
    m.fp(&["mirror"]).expect(0);
    let mut client = store.client();
    lose_history(&mut client, res, 1, "A's version, epoch 1");
    // A role that may read the store and nothing else.
    let role = format!("{}_reader", store.name());
    client
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN;
             GRANT USAGE ON SCHEMA {s} TO {role};
             GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {role};",
            s = store.name()
        ))
        .expect("a read-only role");
    let reader = pg::with_params(url, &[format!("user={role}")]);
    let done = m
        .fp(&["--json", "mirror"])
        .env("FENCEPOST_STORE", &reader)
        .expect(9);
    let ahead = entry(&done.json(), res);
    assert_eq!(ahead["outcome"], "ahead", "{}", done.stdout);
    assert!(
        ahead["error"]
            .as_str()
            .is_some_and(|e| e.contains("could not tell the store")),
        "{ahead}"
    );
    drop(client);
    let mut client = store.client();
    client
        .batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .expect("drop the role");
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_mirrors_crashed_apply_of_a_committed_version_is_rolled_forward_never_back() {
    let store = pg::store();
    let url = store.url();
    let res = "doc.md";
    publish(url, res, "A", "v5");
    let m = Host::new(url);
    m.fp(&["mirror"]).expect(0);
    publish(url, res, "B", "v6");
    // The apply of v6 crashes after its rename, before the mirror's own COMMIT.
    crashed(
        m.fp(&["mirror"])
            .env("FAILPOINTS", "write.after_rename=return(abort)"),
    );
    assert_eq!(m.file(res).as_deref(), Some(&b"v6"[..]));
    let found = problems(&m.fp(&["--json", "verify"]).expect(9), res);
    assert!(found.iter().any(|(p, _)| p == "interrupted"), "{found:?}");
    // Recovery keeps the store's committed version: readers who saw v6 never see v5.
    let done = m.fp(&["recover"]).expect(0);
    assert!(!done.stdout.contains("rolled back"), "{done:?}");
    assert!(done.stdout.contains("rolled forward"), "{done:?}");
    assert_eq!(m.file(res).as_deref(), Some(&b"v6"[..]));
    m.fp(&["verify"]).expect(0);
    m.fp(&["mirror"])
        .expect_stdout(0, "up to date (1 document)");

    // The same crash, and then the next apply (of a newer version) stopped after its
    // own recovery: the document is never the older version meanwhile.
    publish(url, res, "C", "v7");
    crashed(
        m.fp(&["mirror"])
            .env("FAILPOINTS", "write.after_rename=return(abort)"),
    );
    publish(url, res, "D", "v8");
    crashed(
        m.fp(&["mirror"])
            .env("FAILPOINTS", "write.after_pre_link=return(abort)"),
    );
    assert_eq!(m.file(res).as_deref(), Some(&b"v7"[..]));
    m.fp(&["mirror"])
        .expect_stdout(0, "applied doc.md (epoch 4)");
    assert_eq!(m.file(res).as_deref(), Some(&b"v8"[..]));
    m.fp(&["verify"]).expect(0);
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_mirrors_own_recovery_without_the_store_keeps_a_crashed_apply() {
    let store = pg::store();
    let url = store.url();
    publish(url, "doc.md", "A", "v5");
    let m = Host::new(url);
    m.fp(&["mirror"]).expect(0);
    publish(url, "doc.md", "B", "v6");
    crashed(
        m.fp(&["mirror"])
            .env("FAILPOINTS", "write.after_rename=return(abort)"),
    );
    // Recovery of the mirror root's state file alone (no --store): the bytes stay.
    let done = m.root.fp(&["recover"]).expect(0);
    assert!(
        done.stdout
            .contains("doc.md: rolled forward a crashed apply"),
        "{done:?}"
    );
    assert_eq!(m.file("doc.md").as_deref(), Some(&b"v6"[..]));
    // The next pass records the version (applying it again) and all is consistent.
    m.fp(&["mirror"])
        .expect_stdout(0, "applied doc.md (epoch 2)");
    assert_eq!(m.file("doc.md").as_deref(), Some(&b"v6"[..]));
    m.fp(&["verify"]).expect(0);
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_crashed_first_apply_is_interrupted_and_rolled_forward() {
    let store = pg::store();
    let url = store.url();
    publish(url, "doc.md", "A", "first");
    let m = Host::new(url);
    crashed(
        m.fp(&["mirror"])
            .env("FAILPOINTS", "write.after_rename=return(abort)"),
    );
    let found = problems(&m.fp(&["--json", "verify"]).expect(9), "doc.md");
    assert!(found.iter().any(|(p, _)| p == "interrupted"), "{found:?}");
    // The next pass keeps the bytes it had renamed into place and records them.
    m.fp(&["mirror"])
        .expect_stdout(0, "applied doc.md (epoch 1)");
    assert_eq!(m.file("doc.md").as_deref(), Some(&b"first"[..]));
    m.fp(&["verify"]).expect(0);
}

/// Runs `run`, which must die of the abort a failpoint injects (a crash: no clean-up).
#[track_caller]
fn crashed(run: Run) {
    let done = run.output();
    assert_eq!(done.code, -1, "not killed by its failpoint: {done:?}");
}

/// Replaces the bytes of `res`'s current blob in the store, leaving its record.
fn damage(client: &mut Client, res: &str) {
    client
        .execute(
            "UPDATE fencepost_chunk SET data = 'damaged'::bytea
             WHERE blob = (SELECT blob FROM fencepost_sink WHERE resource = $1)",
            &[&res],
        )
        .expect("damage the blob");
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn one_damaged_blob_is_that_documents_failure_and_the_others_are_applied() {
    let store = pg::store();
    let url = store.url();
    for res in ["a.md", "b.md", "c.md"] {
        publish(url, res, "A", &format!("{res} v1"));
    }
    let m = Host::new(url);
    m.fp(&["mirror"]).expect(0);
    for res in ["a.md", "b.md", "c.md"] {
        publish(url, res, "B", &format!("{res} v2"));
    }
    let mut client = store.client();
    damage(&mut client, "b.md");
    let done = m.fp(&["--json", "mirror"]).expect(1);
    let j = done.json();
    assert_eq!(j["outcome"], "incomplete", "{j}");
    assert_eq!(entry(&j, "a.md")["outcome"], "applied", "{j}");
    assert_eq!(entry(&j, "c.md")["outcome"], "applied", "{j}");
    let b = entry(&j, "b.md");
    assert_eq!(b["outcome"], "failed", "{j}");
    assert!(
        b["error"]
            .as_str()
            .is_some_and(|e| e.contains("does not match its record")),
        "{b}"
    );
    assert_eq!(m.file("c.md").as_deref(), Some(&b"c.md v2"[..]));
    assert_eq!(m.file("b.md").as_deref(), Some(&b"b.md v1"[..]));
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_follower_applies_the_others_past_a_damaged_blob_and_retries_it() {
    let store = pg::store();
    let url = store.url();
    publish(url, "a.md", "A", "a.md v1");
    publish(url, "b.md", "A", "b.md v1");
    let mut client = store.client();
    damage(&mut client, "a.md");
    let m = Host::new(url);
    let follower = Follower::start(&m);
    let first = follower.next_pass(Duration::from_secs(30));
    assert_eq!(entry(&first, "a.md")["outcome"], "failed", "{first}");
    assert_eq!(entry(&first, "b.md")["outcome"], "applied", "{first}");
    // A later publish is applied at once, the damaged one still failing.
    publish(url, "c.md", "A", "c.md v1");
    wait_for_file(&m.root.path("c.md"), b"c.md v1", Duration::from_secs(30));
    // Repaired, it is applied at its next retry, well before the rescan (60 s).
    client
        .execute(
            "UPDATE fencepost_chunk SET data = 'a.md v1'::bytea
             WHERE blob = (SELECT blob FROM fencepost_sink WHERE resource = 'a.md')",
            &[],
        )
        .expect("repair the blob");
    wait_for_file(&m.root.path("a.md"), b"a.md v1", Duration::from_secs(40));
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_follower_started_before_the_stores_first_claim_waits_for_it() {
    let store = pg::store();
    let url = store.url();
    let m = Host::new(url);
    // Plain `mirror` keeps its answer: there is nothing to mirror yet.
    let done = m.fp(&["mirror"]).expect(2);
    assert!(done.stderr.contains("no fencepost state"), "{done:?}");
    let follower = Follower::start(&m);
    publish(url, "doc.md", "A", "the first version");
    wait_for_file(
        &m.root.path("doc.md"),
        b"the first version",
        Duration::from_secs(30),
    );
    let pass = follower.next_pass(Duration::from_secs(30));
    assert_eq!(entry(&pass, "doc.md")["outcome"], "applied", "{pass}");
}
