//! What a test needs of this machine, checked where a test first uses it. `build.rs`
//! looks for each tool when the suite is built: a test that needs a missing one carries
//! `#[cfg_attr(fp_missing = "NAME", ignore = "why")]`, so cargo lists it as ignored with
//! its reason and never runs it. These checks catch the test that forgot its attribute:
//! reached in a build where the tool is missing, they fail the test, naming the attribute
//! it lacks. Under `CI=true` the build marks nothing missing, so a test whose tool is not
//! there runs and fails on its own.

/// Fails the test when the build found `name` missing (see the module's doc). With
/// `FENCEPOST_TEST_NEEDS_LOG=FILE`, also appends the test's name and `name` to FILE: a
/// full run then lists which test needs what, to check the attributes against.
#[track_caller]
fn present(name: &str, missing: bool) {
    if let Some(log) = std::env::var_os("FENCEPOST_TEST_NEEDS_LOG") {
        use std::io::Write as _;
        let test = std::thread::current().name().unwrap_or("?").to_string();
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("open FENCEPOST_TEST_NEEDS_LOG");
        writeln!(file, "{test}\t{name}").expect("write FENCEPOST_TEST_NEEDS_LOG");
    }
    assert!(
        !missing,
        "this test needs {name}, which this build found missing, and lacks \
         #[cfg_attr(fp_missing = \"{name}\", ignore = \"...\")] (see build.rs)"
    );
}

/// PostgreSQL's server programs and psql.
#[track_caller]
pub(crate) fn postgres() {
    present("postgres", cfg!(fp_missing = "postgres"));
}

/// PgBouncer.
#[track_caller]
pub(crate) fn pgbouncer() {
    present("pgbouncer", cfg!(fp_missing = "pgbouncer"));
}

/// Running as root.
#[track_caller]
pub(crate) fn root() {
    present("root", cfg!(fp_missing = "root"));
}

/// strace.
#[track_caller]
pub(crate) fn strace() {
    present("strace", cfg!(fp_missing = "strace"));
}

/// Root and `ip`, for network namespaces.
#[track_caller]
pub(crate) fn netns() {
    present("netns", cfg!(fp_missing = "netns"));
}

/// Root, losetup and mkfs.ext4.
#[track_caller]
pub(crate) fn loop_devices() {
    present("loop", cfg!(fp_missing = "loop"));
}

/// Root, QEMU, busybox, dmsetup and mke2fs.
#[track_caller]
pub(crate) fn powerloss() {
    present("powerloss", cfg!(fp_missing = "powerloss"));
}

/// The kernel's `fs.protected_hardlinks=1`.
#[track_caller]
pub(crate) fn protected_hardlinks() {
    present("hardlinks", cfg!(fp_missing = "hardlinks"));
}

/// fencepost installed by its Debian package (`/usr/bin/fencepost`, known to dpkg).
#[track_caller]
pub(crate) fn package() {
    present("package", cfg!(fp_missing = "package"));
}
