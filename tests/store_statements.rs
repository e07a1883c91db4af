//! What a publish on a PostgreSQL store asks of the server, read from the server's own
//! log (`log_statement = all`): every round trip is a statement there, so a statement a
//! command does not need, or a second one where one does, shows up as a count. Each of a
//! publish's processes starts with one statement that reads the store's header and
//! whether the role may change the store (not every object's privileges, which costs
//! the server more than the rest of the connect); a write points the sink at its
//! content, marks the content it replaces released and notifies the mirrors in one.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{bin, scratch};
use crate::support::pg::{self, PrivateCluster};

/// `fencepost --store URL ARGS`; its stdout, trimmed. Panics unless it exits 0.
#[track_caller]
fn fencepost(url: &str, args: &[&str]) -> String {
    let out = Command::new(bin())
        .env_clear()
        .current_dir(scratch())
        .arg("--store")
        .arg(url)
        .args(args)
        .output()
        .expect("run fencepost");
    assert!(
        out.status.success(),
        "fencepost {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// claim, write (`file`), complete: one publish, three processes.
#[track_caller]
fn publish(url: &str, file: &str) {
    let epoch = fencepost(url, &["claim", "doc.md", "--owner", "w", "--ttl", "60s"]);
    fencepost(
        url,
        &[
            "-q", "write", "doc.md", "--epoch", &epoch, "--owner", "w", "--from", file,
        ],
    );
    fencepost(
        url,
        &[
            "-q", "complete", "doc.md", "--epoch", &epoch, "--owner", "w",
        ],
    );
}

/// The statements the server logged after byte `from` of its log, by session (in the
/// order the sessions started), each one's text.
fn statements(log: &str, from: usize) -> Vec<Vec<String>> {
    let mut sessions: Vec<(&str, Vec<String>)> = Vec::new();
    // The session whose statement the log's last line began, which lines that start
    // with a tab continue.
    let mut last: Option<usize> = None;
    for line in log[from..].lines() {
        if let Some(more) = line.strip_prefix('\t') {
            if let Some(text) = last.and_then(|i| sessions[i].1.last_mut()) {
                text.push('\n');
                text.push_str(more);
            }
            continue;
        }
        last = None;
        let Some((pid, rest)) = line
            .strip_prefix("fp[")
            .and_then(|l| l.split_once("] LOG:  "))
        else {
            continue;
        };
        let Some(text) = rest
            .strip_prefix("statement: ")
            .or_else(|| rest.strip_prefix("execute <unnamed>: "))
        else {
            continue;
        };
        let i = match sessions.iter().position(|(p, _)| *p == pid) {
            Some(i) => i,
            None => {
                sessions.push((pid, Vec::new()));
                sessions.len() - 1
            }
        };
        sessions[i].1.push(text.to_string());
        last = Some(i);
    }
    sessions.into_iter().map(|(_, texts)| texts).collect()
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_publish_sends_the_server_one_statement_per_step_and_no_privilege_survey() {
    let cluster = PrivateCluster::start();
    let url = cluster.url();
    let file = scratch().join("statements-4k");
    std::fs::write(&file, vec![b'x'; 4096]).expect("write the content");
    let file = file.to_str().expect("a UTF-8 path");
    // The first publish makes the schema; the one counted finds it.
    publish(&url, file);
    cluster.configure(&[("log_statement", "'all'"), ("log_line_prefix", "'fp[%p] '")]);
    let started = Instant::now();
    while pg::connect(&url)
        .query_one("SHOW log_statement", &[])
        .map(|r| r.get::<_, String>(0))
        .ok()
        .as_deref()
        != Some("all")
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the server kept its settings"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let log_path = cluster.dir().join("log");
    let from = std::fs::read_to_string(&log_path)
        .expect("the server's log")
        .len();
    publish(&url, file);
    let log = std::fs::read_to_string(&log_path).expect("the server's log");

    let ours: Vec<Vec<String>> = statements(&log, from)
        .into_iter()
        .filter(|s| !s.iter().any(|t| t.contains("SHOW log_statement")))
        .collect();
    let counts: Vec<usize> = ours.iter().map(Vec::len).collect();
    // claim: header, BEGIN, lock, lease, epoch floor, lease, fence, log, COMMIT; write:
    // header, BEGIN, lock, lease, sink, content, sink (with the release and the
    // notification), log, COMMIT; complete: header, BEGIN, lock, lease, log, COMMIT.
    assert_eq!(counts, [9, 9, 6], "statements per process: {ours:#?}");
    for session in &ours {
        assert!(
            session[0].contains("FROM fencepost_meta")
                && !session[0].contains("has_sequence_privilege"),
            "each process opens with the header alone: {}",
            session[0]
        );
    }
    assert!(
        !ours
            .iter()
            .flatten()
            .any(|s| s.starts_with("SELECT pg_notify")),
        "the write notifies within its sink's statement: {ours:#?}"
    );
    assert!(
        !log[from..].contains("ERROR:"),
        "the server logged an error: {}",
        &log[from..]
    );
}
