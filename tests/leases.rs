//! The scheduler's side: claim, renew, complete, release, at the deadline boundary.

use crate::harness::Env;

#[test]
fn first_claim_prints_epoch_one() {
    let env = Env::new();
    env.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(0)
        .expect_stdout(0, "1");
}

#[test]
fn takeover_at_deadline_is_allowed() {
    let env = Env::new();
    assert_eq!(env.claim("doc.md", "A", 10, 0), 1);
    let held = env
        .fp(&["--json", "claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(9)
        .expect(3);
    let j = held.json();
    assert_eq!(j["outcome"], "held");
    assert_eq!(j["holder"], "A");
    assert_eq!(j["epoch"], 1);
    assert_eq!(env.claim("doc.md", "B", 10, 10), 2);
}
