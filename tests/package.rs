//! The Debian package (`tools/deb.sh`, metadata in Cargo.toml) and the systemd units it
//! installs. The units' own tests run everywhere: `fencepost-run@.service`'s command is
//! run as systemd would run it, from an environment file. The tests of what the package
//! installed need it installed (`fp_missing = "package"`, see build.rs); the README's
//! Quick start and cron line with the installed binary are in `readme`. `.ci/run` also
//! checks the installed units with `systemd-analyze verify`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::harness::{self, Env};

fn dist(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("dist/systemd")
        .join(name)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// A unit's section's settings, in order (a name may repeat: `Environment=`); the
/// unit tests of `readme` and `mirror_service` read units with it too.
pub(crate) fn settings(text: &str, section: &str) -> Vec<(String, String)> {
    let mut inside = false;
    let mut found = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == format!("[{section}]");
        } else if inside
            && !line.starts_with('#')
            && let Some((key, value)) = line.split_once('=')
        {
            found.push((key.to_string(), value.to_string()));
        }
    }
    found
}

/// The value of `key` in `settings` (its last, as systemd takes a name set twice).
pub(crate) fn setting(settings: &[(String, String)], key: &str) -> String {
    settings
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {key}="))
}

/// Seconds in a systemd or fencepost duration (`30s`, `20s`, `2m`).
pub(crate) fn seconds(text: &str) -> u64 {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = number.parse().expect("a number");
    match unit {
        "s" | "" => n,
        "m" | "min" => n * 60,
        other => panic!("unit {other} in {text}"),
    }
}

/// `fencepost-run@INSTANCE.service`'s command as systemd runs it: the unit's
/// `Environment=` lines, then the environment file (which `env_file` stands for), then
/// `ExecStart` with `%H`, `%i` and `${NAME}` (one word each) replaced; `/usr/bin/fencepost`
/// is this build.
fn run_unit_command(instance: &str, env_file: &str) -> Command {
    let unit = read(&dist("fencepost-run@.service"));
    let service = settings(&unit, "Service");
    assert_eq!(
        setting(&service, "EnvironmentFile"),
        "/etc/fencepost/run/%i.env"
    );
    let mut env = BTreeMap::new();
    let assignments = service
        .iter()
        .filter(|(k, _)| k == "Environment")
        .flat_map(|(_, v)| v.split_whitespace().map(str::to_string))
        .chain(
            env_file
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                .map(str::to_string),
        )
        .collect::<Vec<_>>();
    for assignment in assignments {
        let (key, value) = assignment.split_once('=').expect("KEY=VALUE");
        env.insert(key.to_string(), value.to_string());
    }
    let host = read(Path::new("/proc/sys/kernel/hostname"));
    let exec = setting(&service, "ExecStart");
    let words: Vec<String> = exec
        .split_whitespace()
        .map(|w| {
            let w = w.replace("%H", host.trim()).replace("%i", instance);
            match w.strip_prefix("${").and_then(|n| n.strip_suffix('}')) {
                Some(name) => env.get(name).cloned().unwrap_or_default(),
                None => w,
            }
        })
        .collect();
    assert_eq!(words[0], "/usr/bin/fencepost", "{exec}");
    let mut command = Command::new(harness::bin());
    command
        .args(&words[1..])
        .env_clear()
        .envs(&env)
        .env("PATH", "/usr/bin:/bin")
        .current_dir(setting(&service, "WorkingDirectory"))
        .stdin(Stdio::null());
    command
}

fn output(mut command: Command) -> Output {
    command.output().expect("run the unit's command")
}

#[test]
fn the_run_unit_runs_the_job_of_its_environment_file_and_is_silent_when_held() {
    let env = Env::with_root();
    let job = tempfile::tempdir().expect("temp dir");
    let script = job.path().join("publish-daily");
    std::fs::write(
        &script,
        "#!/bin/sh\nset -eu\nout=$(mktemp)\ntrap 'rm -f \"$out\"' EXIT\n\
         echo \"the daily numbers from $FENCEPOST_OWNER\" > \"$out\"\n\
         \"$FENCEPOST_BIN\" write \"$FENCEPOST_RESOURCE\" --from \"$out\"\n",
    )
    .expect("write the job");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // The environment file as the unit's comments show it; FENCEPOST_BIN stands for
    // /usr/bin/fencepost, which the job would find on PATH.
    let env_file = format!(
        "FENCEPOST_ROOT={}\nFENCEPOST_RESOURCE=reports/daily.md\n\
         FENCEPOST_COMMAND={}\nFENCEPOST_BIN={}\n",
        env.root().display(),
        script.display(),
        harness::bin().display()
    );
    let out = output(run_unit_command("daily", &env_file));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    // -q reaches the job's own write: the journal gets nothing on success.
    assert_eq!((&*stdout, &*stderr), ("", ""));
    let host = read(Path::new("/proc/sys/kernel/hostname"));
    assert_eq!(
        env.text("reports/daily.md"),
        format!("the daily numbers from {}-daily\n", host.trim())
    );
    let j = env
        .fp(&["--json", "status", "reports/daily.md"])
        .expect(0)
        .json();
    assert_eq!(j["resources"][0]["lease"]["state"], "completed", "{j}");

    // Another host holds the lease: exit 0 (--held-exit-code 0), nothing printed.
    env.fp(&[
        "claim",
        "reports/daily.md",
        "--owner",
        "other-host",
        "--ttl",
        "1h",
    ])
    .expect(0);
    let out = output(run_unit_command("daily", &env_file));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!((&*out.stdout, &*out.stderr), (&b""[..], &b""[..]));
}

#[test]
fn the_run_unit_refuses_to_make_a_root_where_its_file_names_none() {
    // FENCEPOST_NO_CREATE=1 in the unit: a root that went missing fails the job (exit 2)
    // instead of starting a second root, with epochs from 1.
    let gone = tempfile::tempdir_in(harness::scratch()).expect("temp dir");
    let env_file = format!(
        "FENCEPOST_ROOT={}\nFENCEPOST_RESOURCE=reports/daily.md\nFENCEPOST_COMMAND=true\n",
        gone.path().display()
    );
    let out = output(run_unit_command("daily", &env_file));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!gone.path().join(".fencepost").exists());
}

#[test]
fn the_run_unit_stops_as_systemd_expects() {
    let unit = read(&dist("fencepost-run@.service"));
    let service = settings(&unit, "Service");
    assert_eq!(setting(&service, "Type"), "oneshot");
    assert_eq!(setting(&service, "KillMode"), "mixed");
    // run dies by SIGTERM once the lease is released: a clean stop for a oneshot only
    // with SuccessExitStatus.
    assert!(
        setting(&service, "SuccessExitStatus")
            .split_whitespace()
            .any(|s| s == "SIGTERM")
    );
    let exec = setting(&service, "ExecStart");
    let grace = exec
        .split_whitespace()
        .skip_while(|w| *w != "--grace")
        .nth(1)
        .expect("ExecStart gives --grace");
    assert!(
        seconds(&setting(&service, "TimeoutStopSec")) > seconds(grace),
        "TimeoutStopSec is not above --grace"
    );
    for word in ["-q", "--owner %H-%i", "--held-exit-code 0"] {
        assert!(exec.contains(word), "{word} in {exec}");
    }
    // The timer starts the service of its own name, on a schedule a drop-in can replace.
    let timer = read(&dist("fencepost-run@.timer"));
    let schedule = settings(&timer, "Timer");
    assert_eq!(setting(&schedule, "OnCalendar"), "hourly");
    assert!(timer.contains("systemctl edit fencepost-run@daily.timer"));
    assert_eq!(
        setting(&settings(&timer, "Install"), "WantedBy"),
        "timers.target"
    );
}

/// The units the package installs, from dist/systemd/.
const UNITS: [&str; 3] = [
    "fencepost-mirror@.service",
    "fencepost-run@.service",
    "fencepost-run@.timer",
];

#[test]
fn every_unit_in_dist_is_packaged() {
    let manifest = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"));
    let mut found: Vec<String> = std::fs::read_dir(dist(""))
        .expect("dist/systemd")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    assert_eq!(found, UNITS);
    for unit in UNITS {
        assert!(
            manifest.contains(&format!(
                "[\"dist/systemd/{unit}\", \"usr/lib/systemd/system/\", \"644\"]"
            )),
            "{unit} is not in Cargo.toml's [package.metadata.deb] assets"
        );
    }
}

#[test]
#[cfg_attr(
    fp_missing = "package",
    ignore = "needs fencepost installed by its package (tools/deb.sh, then apt install ./target/debian/fencepost_*.deb)"
)]
fn the_package_installs_this_version_of_fencepost() {
    crate::support::needs::package();
    let out = Command::new("fencepost")
        .arg("--version")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("run fencepost");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("fencepost {}\n", env!("CARGO_PKG_VERSION"))
    );
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", "${Version} ${Status}", "fencepost"])
        .output()
        .expect("dpkg-query");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}-1 install ok installed", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
#[cfg_attr(
    fp_missing = "package",
    ignore = "needs fencepost installed by its package (tools/deb.sh, then apt install ./target/debian/fencepost_*.deb)"
)]
fn man_finds_the_installed_pages() {
    crate::support::needs::package();
    for page in ["fencepost", "fencepost-run", "fencepost-write"] {
        let out = Command::new("man")
            .args(["-w", page])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .expect("run man");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("/usr/share/man/man1/{page}.1.gz\n"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
#[cfg_attr(
    fp_missing = "package",
    ignore = "needs fencepost installed by its package (tools/deb.sh, then apt install ./target/debian/fencepost_*.deb)"
)]
fn the_shell_completions_are_where_the_shells_load_them() {
    crate::support::needs::package();
    for (path, shell) in [
        ("/usr/share/bash-completion/completions/fencepost", "bash"),
        ("/usr/share/zsh/vendor-completions/_fencepost", "zsh"),
        (
            "/usr/share/fish/vendor_completions.d/fencepost.fish",
            "fish",
        ),
    ] {
        let script = Command::new(harness::bin())
            .args(["completions", shell])
            .output()
            .expect("fencepost completions");
        assert_eq!(
            read(Path::new(path)),
            String::from_utf8_lossy(&script.stdout),
            "{path}"
        );
    }
    // bash-completion loads the file by the command's name and registers it.
    let out = Command::new("bash")
        .args([
            "-c",
            ". /usr/share/bash-completion/completions/fencepost && complete -p fencepost",
        ])
        .output()
        .expect("run bash");
    assert!(
        String::from_utf8_lossy(&out.stdout).ends_with(" fencepost\n"),
        "{out:?}"
    );
}

#[test]
#[cfg_attr(
    fp_missing = "package",
    ignore = "needs fencepost installed by its package (tools/deb.sh, then apt install ./target/debian/fencepost_*.deb)"
)]
fn the_installed_units_are_those_of_dist() {
    crate::support::needs::package();
    for unit in UNITS {
        let installed = Path::new("/usr/lib/systemd/system").join(unit);
        assert_eq!(
            read(&installed),
            read(&dist(unit)),
            "{unit}: the installed package is not this tree's (tools/deb.sh, then apt install \
             ./target/debian/fencepost_*.deb)"
        );
    }
    for doc in ["README.md", "changelog.gz", "copyright"] {
        assert!(
            Path::new("/usr/share/doc/fencepost").join(doc).is_file(),
            "/usr/share/doc/fencepost/{doc}"
        );
    }
}
