//! Looks for the programs and privileges some integration tests need, so that a test whose
//! tool is missing shows up in cargo's summary as *ignored, with its reason*, never as a
//! pass that ran nothing. Each missing one sets `fp_missing = "NAME"`; a test that needs
//! it carries `#[cfg_attr(fp_missing = "NAME", ignore = "why")]`, and the test helpers
//! panic if they are reached without it (the test forgot its attribute).
//!
//! Under `CI=true` nothing is ever missing: the tests run, and a tool that is not there
//! fails them. `FENCEPOST_TEST_MISSING=a,b` pretends tools are missing (to check that
//! every test that needs them says so). The library and the binary read none of this.
//!
//! The script is rerun when the folders programs are installed into change (a package
//! installed later turns its tests on), or when one of the variables read here does.

use std::path::{Path, PathBuf};

/// Every name `fp_missing` may take, with what it stands for.
const NAMES: [&str; 9] = [
    "postgres",  // PostgreSQL's server programs (initdb, pg_ctl, postgres) and psql
    "pgbouncer", // PgBouncer
    "root",      // running as root (other users, mounts, network namespaces)
    "strace",    // strace, for the fault-injection tests
    "netns",     // root and `ip`, for the partition tests
    "loop",      // root, losetup and mkfs.ext4, for the disk-full tests
    "powerloss", // root, QEMU, busybox, dmsetup, mke2fs, for the power-loss test
    "hardlinks", // the kernel's fs.protected_hardlinks=1, which one test is about
    "package",   // fencepost installed by its Debian package (tools/deb.sh), /usr/bin/fencepost
];

fn main() {
    for dir in [
        "/usr/bin",
        "/usr/sbin",
        "/bin",
        "/sbin",
        "/usr/lib/postgresql",
    ] {
        if Path::new(dir).is_dir() {
            println!("cargo::rerun-if-changed={dir}");
        }
    }
    for var in [
        "CI",
        "PATH",
        "FENCEPOST_TEST_PGBIN",
        "FENCEPOST_TEST_MISSING",
    ] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    println!("cargo::rerun-if-changed=build.rs");
    let values: Vec<String> = NAMES.iter().map(|n| format!("\"{n}\"")).collect();
    println!(
        "cargo::rustc-check-cfg=cfg(fp_missing, values({}))",
        values.join(", ")
    );
    // The server programs' folder the tests start their own servers from, when found.
    let pgbin = pg_bin();
    if let Some(bin) = &pgbin {
        println!("cargo::rustc-env=FENCEPOST_BUILD_PGBIN={}", bin.display());
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        return;
    }
    let pretend = std::env::var("FENCEPOST_TEST_MISSING").unwrap_or_default();
    let root = is_root();
    let has = |name: &str| program(name).is_some();
    for name in NAMES {
        let present = match name {
            "postgres" => pgbin.is_some() && has("psql"),
            "pgbouncer" => has("pgbouncer"),
            "root" => root,
            "strace" => has("strace"),
            "netns" => root && has("ip"),
            "loop" => root && has("losetup") && has("mkfs.ext4"),
            "powerloss" => {
                root && ["qemu-system-x86_64", "busybox", "dmsetup", "mke2fs"]
                    .iter()
                    .all(|p| has(p))
            }
            "hardlinks" => std::fs::read_to_string("/proc/sys/fs/protected_hardlinks")
                .is_ok_and(|v| v.trim() == "1"),
            // dpkg's list of the package's files: a /usr/bin/fencepost copied there by hand
            // is not the package.
            "package" => {
                Path::new("/usr/bin/fencepost").is_file()
                    && Path::new("/var/lib/dpkg/info/fencepost.list").is_file()
            }
            _ => unreachable!("every name is matched"),
        };
        if !present || pretend.split(',').any(|p| p.trim() == name) {
            println!("cargo::rustc-cfg=fp_missing=\"{name}\"");
        }
    }
}

/// `FENCEPOST_TEST_PGBIN`, else the newest `/usr/lib/postgresql/*/bin` with `initdb`.
fn pg_bin() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("FENCEPOST_TEST_PGBIN").filter(|b| !b.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// A program on PATH or in the system's folders (`pgbouncer` is in /usr/sbin, which a
/// user's PATH may lack).
fn program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Whether the build runs as root (the tests run as the same user).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}
