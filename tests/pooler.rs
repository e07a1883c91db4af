//! The store reached through PgBouncer in transaction mode, where each transaction may
//! run on another server session and a statement outside one on any: fencepost's
//! settings hold for each of its transactions and stay on no server session, and a
//! writer paused inside its transaction still cannot publish after a takeover. (The
//! lease and sink behaviours run through the pooler too: `postgres_pooled::` in
//! `leases`, `sink` and `stores`.)

use crate::hosts::Host;
use crate::support::pg::{self, Pooler};
use crate::support::{sha256_hex, spawn_paused};

#[test]
#[cfg_attr(
    fp_missing = "pgbouncer",
    ignore = "needs PgBouncer (Debian: pgbouncer)"
)]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_writer_paused_inside_its_transaction_behind_the_pooler_cannot_publish_after_a_takeover() {
    let store = pg::store();
    // The pooler's server sessions end a transaction left idle for 1 s (an operator's
    // connect_query): fencepost keeps that shorter limit.
    let session = "SET idle_in_transaction_session_timeout = '1s'";
    let pooler = Pooler::in_front_of(&store, session, 4);
    let url = pooler.url();
    let (a, b) = (Host::new(url), Host::new(url));
    let res = "doc.md";
    a.fp(&["claim", res, "--owner", "A", "--ttl", "10"])
        .now(0)
        .expect_stdout(0, "1");
    // A's write stops inside its transaction, the resource's row locked, COMMIT not sent.
    let args = ["--store", url, "write", res, "--epoch", "1", "--owner", "A"];
    let paused = spawn_paused(
        &a.root,
        &args,
        Some(5),
        b"A's late report\n",
        "txn.before_commit",
    );
    // B's claim waits for A's row lock until the server ends A's session.
    let j = b
        .fp(&[
            "--json",
            "--busy-timeout",
            "20s",
            "claim",
            res,
            "--owner",
            "B",
            "--ttl",
            "10",
        ])
        .now(10)
        .expect(0)
        .json_contract();
    assert_eq!(j["epoch"], 2, "{j}\n{}", pooler.log());
    b.fp(&["write", res, "--epoch", "2", "--owner", "B"])
        .now(11)
        .stdin("B's report\n")
        .expect_stdout(0, "written");
    b.fp(&["complete", res, "--owner", "B", "--epoch", "2"])
        .now(12)
        .expect_stdout(0, "completed");
    let out = paused.resume();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "A's late commit: {stderr}");
    assert!(stderr.starts_with("fencepost: "), "{stderr}");
    // Only B's version was ever current, on the store and on both mirrors.
    let status = a.fp(&["--json", "status", res]).now(13).expect(0).json();
    let row = &status["resources"][0];
    assert_eq!(row["sink"]["content_epoch"], 2, "{row}");
    assert_eq!(row["sink"]["sha256"], sha256_hex(b"B's report\n"), "{row}");
    let log = a.fp(&["--json", "log", res]).now(13).expect(0).json();
    let writes: Vec<_> = log["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["event"] == "write")
        .map(|e| (e["owner"].clone(), e["epoch"].clone()))
        .collect();
    assert_eq!(writes, [("B".into(), 2.into())], "{log}");
    a.fp(&["mirror"]).now(13).expect(0);
    assert_eq!(a.file(res).as_deref(), Some(&b"B's report\n"[..]));
    assert_eq!(b.file(res).as_deref(), Some(&b"B's report\n"[..]));
}

#[test]
#[cfg_attr(
    fp_missing = "pgbouncer",
    ignore = "needs PgBouncer (Debian: pgbouncer)"
)]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn fencepost_leaves_no_setting_on_the_poolers_server_session() {
    let store = pg::store();
    // One server session: every client's transactions run on it, one after another.
    let pooler = Pooler::in_front_of(&store, "", 1);
    let host = Host::new(pooler.url());
    host.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(0)
        .expect_stdout(0, "1");
    // Larger than one chunk: uploaded before the publish, without waiting for the disk.
    host.fp(&["write", "doc.md", "--epoch", "1"])
        .now(1)
        .stdin("x".repeat((1 << 20) + 1))
        .expect_stdout(0, "written");
    host.fp(&[
        "renew", "doc.md", "--owner", "A", "--epoch", "1", "--ttl", "10",
    ])
    .now(2)
    .expect(0);
    host.fp(&["complete", "doc.md", "--owner", "A", "--epoch", "1"])
        .now(3)
        .expect_stdout(0, "completed");
    host.fp(&["cat", "doc.md"]).expect(0);
    // The server's own values, on a session of its own, against what the pooler's one
    // session has after all that.
    let show = |client: &mut postgres::Client, name: &str| -> String {
        client
            .query_one(&format!("SHOW {name}"), &[])
            .expect("SHOW")
            .get(0)
    };
    let (mut pooled, mut direct) = (pg::connect(pooler.url()), pg::connect(store.admin()));
    for name in [
        "synchronous_commit",
        "lock_timeout",
        "idle_in_transaction_session_timeout",
        "statement_timeout",
        "tcp_keepalives_idle",
        "tcp_user_timeout",
    ] {
        assert_eq!(
            show(&mut pooled, name),
            show(&mut direct, name),
            "{name} left on the server session\n{}",
            pooler.log()
        );
    }
}
