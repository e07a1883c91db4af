//! Mirror roots and the store's names, as hosts that differ see them: one document a
//! host cannot hold never keeps the others from it; a name is the store's on every host,
//! never resolved through one host's symlinks; a root that is not this store's mirror is
//! refused before anything is done; a mirror's clock is its own; a replaced version
//! outlives its replacement by the grace period; `cat` into a closed pipe is no error.

use postgres::Client;

use crate::harness::{Env, NEW_ROOT};
use crate::hosts::Host;
use crate::support::pg;

/// Publishes `bytes` to `res` from a host with no root, on the wall clock: claim, write,
/// complete. Returns the epoch.
fn publish(url: &str, res: &str, bytes: &str) -> i64 {
    let dir = Env::new();
    let run = |args: &[&str]| dir.fp(args).inside(dir.root()).env("FENCEPOST_STORE", url);
    let epoch = run(&["claim", res, "--owner", "P", "--ttl", "60"])
        .expect(0)
        .stdout
        .trim()
        .to_string();
    run(&["write", res, "--epoch", &epoch])
        .stdin(bytes)
        .expect_stdout(0, "written");
    run(&["complete", res, "--owner", "P", "--epoch", &epoch]).expect(0);
    epoch.parse().expect("an epoch")
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_document_this_host_cannot_hold_does_not_keep_the_others_from_it() {
    let store = pg::store();
    publish(store.url(), "x", "a file named x");
    publish(store.url(), "x/y", "a file under a folder named x");
    publish(store.url(), "zz.md", "the last one");
    let host = Host::new(store.url());
    let done = host.fp(&["--json", "mirror"]).expect(2);
    let j = done.json();
    assert_eq!(j["outcome"], "incomplete", "{j}");
    let outcome = |res: &str| {
        j["applied"]
            .as_array()
            .expect("a list")
            .iter()
            .find(|a| a["resource"] == res)
            .map(|a| a["outcome"].clone())
    };
    assert_eq!(outcome("x"), Some("applied".into()), "{j}");
    assert_eq!(outcome("x/y"), Some("failed".into()), "{j}");
    assert_eq!(outcome("zz.md"), Some("applied".into()), "{j}");
    assert_eq!(host.file("zz.md").as_deref(), Some(&b"the last one"[..]));
    // Plain: one line per document applied or failed, and the reason on stderr.
    let done = host.fp(&["mirror"]).expect(2);
    assert!(done.stdout.contains("failed x/y (epoch 1): "), "{done:?}");
    assert!(
        done.stderr
            .starts_with("fencepost: 1 of 3 documents not mirrored"),
        "{done:?}"
    );
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_name_is_the_stores_on_every_host_never_resolved_through_a_symlink() {
    let store = pg::store();
    let host = Host::new(store.url());
    std::fs::create_dir(host.root.path("cur")).expect("mkdir");
    std::os::unix::fs::symlink("cur", host.root.path("link")).expect("symlink");
    // Claimed through the symlink on this host: the store knows the name as typed.
    let epoch = host
        .fp(&["claim", "link/doc.md", "--owner", "W", "--ttl", "60"])
        .expect(0)
        .stdout
        .trim()
        .to_string();
    let status = host.fp(&["--json", "status"]).expect(0).json();
    let names: Vec<_> = status["resources"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["resource"].clone())
        .collect();
    assert_eq!(names, ["link/doc.md"], "{status}");
    // Published under that name, it is not applied here: on this host it would land in
    // cur/doc.md, another document of the store.
    let done = host
        .fp(&["write", "link/doc.md", "--epoch", &epoch])
        .stdin("through the link")
        .output();
    assert_eq!((done.code, done.stdout.trim()), (0, "written"), "{done:?}");
    assert!(
        done.stderr.contains("reaches through a symlink"),
        "{}",
        done.stderr
    );
    assert_eq!(host.file("cur/doc.md"), None);
    publish(store.url(), "other.md", "others are copied");
    let done = host.fp(&["mirror"]).expect(2);
    assert!(done.stdout.contains("failed link/doc.md"), "{done:?}");
    assert_eq!(
        host.file("other.md").as_deref(),
        Some(&b"others are copied"[..])
    );
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_root_that_is_not_this_stores_mirror_is_refused_before_anything_is_done() {
    let first = pg::store();
    let second = pg::store();
    publish(first.url(), "doc.md", "first");
    let host = Host::new(first.url());
    host.fp(&["mirror"]).expect(0);
    let mut client = second.client();
    let before = second_rows(&mut client);
    // A claim through another store with this mirror root changes nothing anywhere.
    let done = host
        .fp(&["claim", "new.md", "--owner", "Q", "--ttl", "10"])
        .env("FENCEPOST_STORE", second.url())
        .expect(2);
    assert!(
        done.stderr.contains("mirrors another store"),
        "{}",
        done.stderr
    );
    assert_eq!(second_rows(&mut client), before);

    // Inside a publish root with leases of its own, --store is refused: the names typed
    // there would be that root's, not the store's.
    let local = Env::new();
    local
        .fp(&["claim", "own.md", "--owner", "L", "--ttl", "10"])
        .expect(0);
    std::fs::create_dir(local.path("sub")).expect("mkdir");
    let done = local
        .fp(&["claim", "x.md", "--owner", "Q", "--ttl", "10"])
        .inside(&local.path("sub"))
        .env("FENCEPOST_STORE", second.url())
        .expect(2);
    assert!(done.stderr.contains("leases of its own"), "{}", done.stderr);
    assert_eq!(second_rows(&mut client), before);
}

/// The second store's leases, as text (empty before its first claim).
fn second_rows(client: &mut Client) -> Vec<String> {
    client
        .query(
            "SELECT resource FROM fencepost_lease UNION ALL SELECT 'no tables'
             WHERE to_regclass('fencepost_lease') IS NULL",
            &[],
        )
        .map(|rows| rows.iter().map(|r| r.get::<_, String>(0)).collect())
        .unwrap_or_else(|_| vec!["no tables".to_string()])
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_mirrors_clock_is_its_own_and_now_never_binds_it() {
    let store = pg::store();
    publish(store.url(), "doc.md", "v1");
    let host = Host::new(store.url());
    // A pass with --now (as a script on logical ticks would run it), then one without:
    // both work, and the mirror root takes neither clock from the other.
    host.fp(&["mirror"]).now(7).expect(0);
    publish(store.url(), "doc.md", "v2");
    host.fp(&["mirror"])
        .expect_stdout(0, "applied doc.md (epoch 2)");
    host.fp(&["mirror"]).now(9).expect(0);
    assert_eq!(host.file("doc.md").as_deref(), Some(&b"v2"[..]));
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_replaced_version_is_kept_for_the_grace_period_from_its_replacement() {
    let store = pg::store();
    publish(store.url(), "doc.md", "the old version");
    let mut client = store.client();
    // The old version was uploaded long ago.
    client
        .execute(
            "UPDATE fencepost_blob SET created_at = now() - interval '2 hours'",
            &[],
        )
        .expect("age the blob");
    publish(store.url(), "doc.md", "the new version");
    let blobs = |client: &mut Client| -> i64 {
        client
            .query_one("SELECT count(*) FROM fencepost_blob", &[])
            .expect("count")
            .get(0)
    };
    let dir = Env::new();
    let recover = |grace: &str| {
        dir.fp(&["--json", "recover", "--grace", grace])
            .inside(dir.root())
            .env("FENCEPOST_STORE", store.url())
            .expect(0)
            .json()
    };
    // Replaced just now: a reader that learnt of it a moment ago may still read it.
    assert_eq!(recover("1h")["blobs_removed"], 0);
    assert_eq!(blobs(&mut client), 2);
    assert_eq!(recover("0")["blobs_removed"], 1);
    assert_eq!(blobs(&mut client), 1);
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn cat_into_a_reader_that_stopped_is_no_error() {
    let store = pg::store();
    let big = "line\n".repeat(400_000);
    publish(store.url(), "big.txt", &big);
    let dir = Env::new();
    let script = format!(
        "set -o pipefail; '{}' cat big.txt | head -c 10 >/dev/null",
        crate::harness::bin().display()
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .current_dir(dir.root())
        .env("FENCEPOST_STORE", store.url())
        .output()
        .expect("run bash");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_mirror_root_made_by_its_first_document_is_said_and_no_create_refuses_it() {
    let store = pg::store();
    // A claim with --no-create makes no tables in an empty store.
    let dir = Env::new();
    let done = dir
        .fp(&["claim", "doc.md", "-o", "P", "-t", "60", "--no-create"])
        .inside(dir.root())
        .env("FENCEPOST_STORE", store.url())
        .expect(2);
    assert!(
        done.stderr
            .contains("has no fencepost tables, and --no-create"),
        "{}",
        done.stderr
    );
    assert!(done.stderr.contains("hint: run `fencepost store init`"));
    publish(store.url(), "doc.md", "v1");
    let host = Host::new(store.url());
    let done = host.fp(&["mirror", "--no-create"]).expect(2);
    assert!(
        done.stderr.contains("forbids making one"),
        "{}",
        done.stderr
    );
    assert_eq!(host.file("doc.md"), None);
    let done = host
        .fp(&["mirror"])
        .expect_stdout(0, "applied doc.md (epoch 1)");
    assert!(done.stderr.starts_with(NEW_ROOT), "{}", done.stderr);
    assert_eq!(host.file("doc.md").as_deref(), Some(&b"v1"[..]));
    // Made once: the next pass, --no-create or not, is silent.
    let done = host
        .fp(&["mirror", "--no-create"])
        .expect_stdout(0, "up to date (1 document)");
    assert_eq!(done.stderr, "");
}
