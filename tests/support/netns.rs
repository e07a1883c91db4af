//! Network namespaces for the partition tests: a server's namespace and a client's, each
//! joined to the other (and the server's to this one) by a veth pair with addresses in
//! the benchmarking range 198.18.0.0/15, and the cuts a test makes between them
//! (blackhole routes for one direction, a link set down for both).
//!
//! Needs root and `ip` (iproute2): [`available`] fails the test when they are not there
//! (the build marks such a test ignored, see `build.rs`). Everything made is removed when the
//! [`Net`] is dropped, also when the test panics: the namespaces (and with them their
//! veths and routes) and the veth left in this namespace.

#![allow(dead_code)]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Fails the test unless it can make namespaces (root and `ip`). A test that calls it
/// carries `#[cfg_attr(fp_missing = "netns", ignore = ...)]`.
#[track_caller]
pub(crate) fn available() {
    crate::support::needs::netns();
    assert!(
        is_root(),
        "the partition tests need root to make network namespaces"
    );
    assert!(
        Command::new("ip")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success()),
        "the partition tests need `ip` (iproute2) to make network namespaces"
    );
}

/// Whether this process runs as root (from /proc: the tests use no libc).
pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// Runs `ip ARGS`, panicking with its stderr if it fails.
#[track_caller]
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// Runs `ip ARGS`, ignoring failure (cleanup of what may already be gone).
fn ip_quiet(args: &[&str]) {
    let _ = Command::new("ip").args(args).output();
}

/// Two namespaces of the test's own: `server` and `client`. The server's namespace has
/// `server_addr` towards this namespace (reached from here through `host_addr`) and
/// `server_addr_for_client` towards the client's namespace, whose own address is
/// `client_addr`.
pub(crate) struct Net {
    pub server: String,
    pub client: String,
    /// The veth end in this namespace.
    host_link: String,
    /// The veth end in the client's namespace.
    client_link: String,
    pub host_addr: String,
    pub server_addr: String,
    pub client_addr: String,
    pub server_addr_for_client: String,
}

/// Numbers the namespaces of one test binary apart.
static MADE: AtomicU32 = AtomicU32::new(0);

impl Net {
    /// Makes both namespaces and both veth pairs, each pair with a /30 of 198.18.0.0/15.
    #[track_caller]
    pub(crate) fn new() -> Net {
        let tag = format!(
            "{:x}{}",
            std::process::id() & 0xfffff,
            MADE.fetch_add(1, Ordering::Relaxed)
        );
        // One of the range's 512 /24s for this Net, no route here using it yet: its first
        // and second /30 are the two pairs.
        let block = (0..64)
            .map(|_| fastrand::u32(0..512))
            .find(|b| {
                let prefix = format!("198.{}.{}.", 18 + b / 256, b % 256);
                let routes = Command::new("ip")
                    .args(["-4", "route", "show", "table", "all"])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                !routes.contains(&prefix)
            })
            .expect("a free block of 198.18.0.0/15");
        let (second, third) = (18 + block / 256, block % 256);
        let addr = |host: u32| format!("198.{second}.{third}.{host}");
        let net = Net {
            server: format!("fp-s{tag}"),
            client: format!("fp-c{tag}"),
            host_link: format!("fph{tag}"),
            client_link: format!("fpc{tag}"),
            host_addr: addr(1),
            server_addr: addr(2),
            client_addr: addr(5),
            server_addr_for_client: addr(6),
        };
        // From here on, a panic removes whatever was made.
        ip(&["netns", "add", &net.server]);
        ip(&["netns", "add", &net.client]);
        for ns in [&net.server, &net.client] {
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        // This namespace to the server's, and the client's to the server's.
        veth(
            End::new(None, &net.host_link, &net.host_addr),
            End::new(Some(&net.server), &format!("fps{tag}"), &net.server_addr),
        );
        veth(
            End::new(Some(&net.client), &net.client_link, &net.client_addr),
            End::new(
                Some(&net.server),
                &format!("fpt{tag}"),
                &net.server_addr_for_client,
            ),
        );
        net
    }

    /// The server's replies to the client are dropped without a word (a blackhole route
    /// in the server's namespace); the client's requests still arrive.
    #[track_caller]
    pub(crate) fn drop_replies_to_client(&self) {
        ip(&[
            "-n",
            &self.server,
            "route",
            "add",
            "blackhole",
            &format!("{}/32", self.client_addr),
        ]);
    }

    /// The client's requests to the server are dropped without a word (a blackhole route
    /// in the client's namespace).
    #[track_caller]
    pub(crate) fn drop_requests_from_client(&self) {
        ip(&[
            "-n",
            &self.client,
            "route",
            "add",
            "blackhole",
            &format!("{}/32", self.server_addr_for_client),
        ]);
    }

    /// The client's link to the server is down: nothing passes either way, and the
    /// client's sends fail at once (no route).
    #[track_caller]
    pub(crate) fn link_down(&self) {
        ip(&["-n", &self.client, "link", "set", &self.client_link, "down"]);
    }

    /// A command run inside the client's namespace: `ip netns exec CLIENT PROGRAM`, which
    /// execs PROGRAM in its own process.
    pub(crate) fn in_client(&self, program: &std::path::Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.client]).arg(program);
        cmd
    }
}

/// One end of a veth pair: its namespace (`None`: this one), its name and its address.
struct End<'a> {
    ns: Option<&'a str>,
    name: &'a str,
    addr: &'a str,
}

impl<'a> End<'a> {
    fn new(ns: Option<&'a str>, name: &'a str, addr: &'a str) -> End<'a> {
        End { ns, name, addr }
    }

    /// `ip` with `-n NS` for this end's namespace.
    #[track_caller]
    fn ip(&self, args: &[&str]) {
        let mut all: Vec<&str> = Vec::new();
        if let Some(ns) = self.ns {
            all.extend(["-n", ns]);
        }
        all.extend(args);
        ip(&all);
    }
}

/// Makes a veth pair from `a` to `b`, each end with its /30 address, both up.
#[track_caller]
fn veth(a: End<'_>, b: End<'_>) {
    let peer_ns = b.ns.expect("the peer end is in a namespace of the test");
    a.ip(&[
        "link", "add", a.name, "type", "veth", "peer", "name", b.name, "netns", peer_ns,
    ]);
    for end in [&a, &b] {
        let addr = format!("{}/30", end.addr);
        end.ip(&["addr", "add", &addr, "dev", end.name]);
        end.ip(&["link", "set", end.name, "up"]);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // The namespaces take their veths (and so both ends of each pair) and routes
        // with them; a namespace a process still runs in lingers until it exits, so the
        // veth here is removed by name as well.
        ip_quiet(&["link", "del", &self.host_link]);
        ip_quiet(&["netns", "del", &self.client]);
        ip_quiet(&["netns", "del", &self.server]);
    }
}
