//! fencepost: publish a document safely when a job can be taken over.
//!
//! A worker claims a resource and gets an *epoch*; the sink (`write`) replaces the
//! document only while that epoch is still the newest, checking it in the same
//! transaction as the rename. A paused or late worker whose lease was taken over is
//! refused (`stale`) instead of overwriting the new holder's document.
//!
//! The binary is a thin shell over [`run`]: parsing, dispatch and error printing live
//! here so they can be tested in-process.

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use serde_json::{Value, json};

pub mod atomic;
pub mod audit;
pub mod clock;
pub mod cmd;
pub mod error;
#[cfg(feature = "failpoints")]
pub mod failpoints;
pub mod folder;
pub mod lease;
pub mod resource;
pub mod root;
pub mod sink;
pub mod store;

use clock::{Clock, ClockKind, parse_duration};
use cmd::{Ctx, Report};
use error::{Error, Result};

/// `--version`: says when the crash-test failpoints are compiled in.
const VERSION: &str = if cfg!(feature = "failpoints") {
    concat!(env!("CARGO_PKG_VERSION"), " (failpoints)")
} else {
    env!("CARGO_PKG_VERSION")
};

const EXIT_CODES: &str = "\
Exit codes:
  0  success (including `replay`)
  1  I/O or internal error
  2  bad usage or bad input (nothing was changed)
  3  held: someone else holds a live lease (claim)
  4  lost: not your lease any more, or expired (renew, complete, release, run)
  5  stale: a newer epoch was accepted for this resource (write)
  6  conflict: this epoch already wrote different content (write)
  7  busy: the state file stayed locked past --busy-timeout
  8  unissued: claim never issued this epoch for this resource (write)
  9  diverged: verify found a document, record or lease out of step
  other: run passes its command's exit code through (127: the command cannot be started;
     128+N: killed by signal N)";

/// Fenced, atomic document publishing for workers whose jobs can be taken over.
///
/// A worker claims a resource and gets an epoch; `write` replaces the document only
/// while that epoch is the newest, so a paused worker whose lease was taken over cannot
/// overwrite its successor's result.
#[derive(Debug, Parser)]
#[command(name = "fencepost", version = VERSION, after_help = EXIT_CODES, max_term_width = 100)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,

    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, clap::Args)]
pub struct Global {
    /// Publish root: resources are paths relative to it [default: the nearest folder
    /// from the current one up that holds .fencepost/, where names typed on the command
    /// line are relative to the current folder; else the current folder].
    #[arg(long, global = true, env = "FENCEPOST_ROOT", value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// State file [default: the one the root's .fencepost/ names, else
    /// <root>/.fencepost/state.db].
    #[arg(long, global = true, env = "FENCEPOST_DB", value_name = "PATH")]
    pub db: Option<PathBuf>,

    /// Use logical tick N as the current time instead of wall-clock milliseconds.
    /// A state file stays on the clock it was first used with.
    #[arg(
        long,
        global = true,
        env = "FENCEPOST_NOW",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub now: Option<i64>,

    /// Print one JSON object on stdout (refusals and errors too).
    #[arg(
        long,
        global = true,
        env = "FENCEPOST_JSON",
        value_parser = clap::builder::FalseyValueParser::new()
    )]
    pub json: bool,

    /// Print nothing on stdout that a script does not need: no `written`, `completed`,
    /// `released`, `renewed` or refusal words (exit codes still say it all; errors still
    /// go to stderr). claim's epoch, status, log and verify still print.
    #[arg(short, long, global = true, env = "FENCEPOST_QUIET", value_parser = clap::builder::FalseyValueParser::new())]
    pub quiet: bool,

    /// How long to wait for another process's lock on the state file before exiting 7
    /// (0: do not wait).
    #[arg(
        long,
        global = true,
        env = "FENCEPOST_BUSY_TIMEOUT",
        default_value = "10s",
        value_name = "DURATION"
    )]
    pub busy_timeout: String,

    /// How many audit-log events to keep. Checked every 1000 events (dropping at most 2000
    /// older ones per check); `log --prune` drops all the excess at once.
    #[arg(
        long,
        global = true,
        env = "FENCEPOST_LOG_KEEP",
        default_value_t = store::DEFAULT_LOG_KEEP,
        value_name = "N"
    )]
    pub log_keep: i64,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Claim(cmd::claim::ClaimArgs),
    Renew(cmd::renew::RenewArgs),
    Complete(cmd::complete::CompleteArgs),
    Release(cmd::release::ReleaseArgs),
    Write(cmd::write::WriteArgs),
    Status(cmd::status::StatusArgs),
    Recover(cmd::recover::RecoverArgs),
    Run(cmd::run::RunArgs),
    Log(cmd::log::LogArgs),
    Verify(cmd::verify::VerifyArgs),
    Completions(cmd::completions::CompletionsArgs),
    Man(cmd::completions::ManArgs),
}

/// Runs the command line and returns the process exit code. Prints results on stdout
/// and one-line errors (`fencepost: ...`) on stderr.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    #[cfg(feature = "failpoints")]
    let _scenario = fail::FailScenario::setup();
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let parsed = Cli::command()
        .try_get_matches_from(&args)
        .and_then(|matches| Cli::from_arg_matches(&matches).map(|cli| (cli, matches)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e)
            if !e.use_stderr()
                || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
        Err(e) => {
            // Bad usage is bad input like any other: one `fencepost:` line (and a usage
            // hint), and the `--json` object a script parses.
            let json = args.iter().any(|a| a == "--json")
                || std::env::var("FENCEPOST_JSON").is_ok_and(|v| {
                    !matches!(
                        v.to_ascii_lowercase().as_str(),
                        "" | "0" | "n" | "no" | "f" | "false" | "off"
                    )
                });
            report_error(
                &usage_from_clap(&e),
                json,
                false,
                (Value::Null, Value::Null),
            );
            return 2;
        }
    };
    let json = cli.global.json;
    let quiet = cli.global.quiet && !json;
    let quiet_success = quiet && cli.command.is_confirmation();
    // FENCEPOST_RESOURCE names a resource under the root, wherever the command runs.
    let typed = matches
        .subcommand_matches("write")
        .and_then(|m| m.value_source("resource"))
        .is_none_or(|source| source != clap::parser::ValueSource::EnvVariable);
    let result = context(&cli.global, &cli.command, typed).and_then(|ctx| {
        dispatch(&ctx, &cli.command).inspect_err(|err| {
            if let Error::Refused(refusal) = err {
                cmd::log_refusal(&ctx, refusal);
            }
        })
    });
    match result {
        Ok(report) => {
            // A script or page printed as it is; `man --dir` prints a report like others.
            let generated = match &cli.command {
                Command::Completions(_) => true,
                Command::Man(args) => args.dir.is_none(),
                _ => false,
            };
            let text = if json && !generated {
                let mut map = report.json;
                map.entry("outcome").or_insert(json!("ok"));
                map.entry("resource").or_insert(Value::Null);
                map.entry("epoch").or_insert(Value::Null);
                Value::Object(map).to_string()
            } else {
                report.plain
            };
            if !text.is_empty() && !quiet_success {
                emit(&text);
            }
            0
        }
        Err(err) => {
            report_error(&err, json, quiet, cli.command.named());
            err.exit_code()
        }
    }
}

/// A clap parse error as one line: clap's message without its `error:` prefix, its
/// indented continuation lines joined, and its usage line as the hint.
fn usage_from_clap(e: &clap::Error) -> Error {
    let text = e.render().to_string();
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let mut message = first
        .strip_prefix("error: ")
        .unwrap_or(first)
        .trim()
        .to_string();
    for line in lines.by_ref().take_while(|l| !l.trim().is_empty()) {
        message.push(' ');
        message.push_str(line.trim());
    }
    let hint = match text.lines().find_map(|l| l.strip_prefix("Usage: ")) {
        Some(usage) => format!("usage: {usage} (see --help)"),
        None => "see fencepost --help".to_string(),
    };
    Error::usage_hint(message, hint)
}

impl Command {
    /// The resource and epoch the command line names, as given, for the JSON object of
    /// an error that happened before the command could name them itself.
    fn named(&self) -> (Value, Value) {
        let text = |raw: &std::ffi::OsStr| json!(raw.to_string_lossy());
        match self {
            Command::Claim(a) => (text(&a.request.resource), Value::Null),
            Command::Run(a) => (text(&a.request.resource), Value::Null),
            Command::Renew(a) => (text(&a.holder.resource), json!(a.holder.epoch)),
            Command::Complete(a) => (text(&a.holder.resource), json!(a.holder.epoch)),
            Command::Release(a) => (text(&a.holder.resource), json!(a.holder.epoch)),
            Command::Write(a) => (text(&a.resource), json!(a.epoch)),
            Command::Status(a) => (a.resource.as_deref().map_or(Value::Null, text), Value::Null),
            Command::Recover(a) => (a.resource.as_deref().map_or(Value::Null, text), Value::Null),
            Command::Log(a) => (a.resource.as_deref().map_or(Value::Null, text), Value::Null),
            Command::Verify(a) => (a.resource.as_deref().map_or(Value::Null, text), Value::Null),
            Command::Completions(_) | Command::Man(_) => (Value::Null, Value::Null),
        }
    }

    /// Commands whose stdout only confirms what the exit code already says.
    fn is_confirmation(&self) -> bool {
        matches!(
            self,
            Command::Write(_)
                | Command::Renew(_)
                | Command::Complete(_)
                | Command::Release(_)
                | Command::Recover(_)
        )
    }
}

fn dispatch(ctx: &Ctx, command: &Command) -> Result<Report> {
    match command {
        Command::Claim(a) => cmd::claim::run(ctx, a),
        Command::Renew(a) => cmd::renew::run(ctx, a),
        Command::Complete(a) => cmd::complete::run(ctx, a),
        Command::Release(a) => cmd::release::run(ctx, a),
        Command::Write(a) => cmd::write::run(ctx, a),
        Command::Status(a) => cmd::status::run(ctx, a),
        Command::Recover(a) => cmd::recover::run(ctx, a),
        Command::Run(a) => cmd::run::run(ctx, a),
        Command::Log(a) => cmd::log::run(ctx, a),
        Command::Verify(a) => cmd::verify::run(ctx, a),
        Command::Completions(a) => cmd::completions::completions(a),
        Command::Man(a) => cmd::completions::man(a),
    }
}

/// Resolves the global options. `typed`: the resource was typed on the command line
/// (not read from FENCEPOST_RESOURCE), so under a found root it starts in the current
/// folder.
fn context(global: &Global, command: &Command, typed: bool) -> Result<Ctx> {
    let clock = Clock::from_option(global.now)?;
    if matches!(command, Command::Completions(_) | Command::Man(_)) {
        // Generated from the CLI definition alone: no root, no state file.
        return Ok(Ctx {
            root: PathBuf::new(),
            db: PathBuf::new(),
            clock,
            busy: Duration::ZERO,
            log_keep: global.log_keep,
            how: root::How::Given,
            here: None,
            state_files: root::StateFiles::default(),
        });
    }
    // 0 means "do not wait at all" (exit 7 at once if the state file is locked).
    let busy_ms = match global.busy_timeout.trim() {
        "0" | "0ms" | "0s" => 0,
        text => parse_duration(text, ClockKind::Wall, "--busy-timeout")?,
    };
    // SQLite counts the busy timeout in an int of milliseconds (about 24.8 days).
    if busy_ms > i64::from(i32::MAX) {
        return Err(Error::usage(format!(
            "--busy-timeout {} is too large: at most {}ms (about 24 days)",
            global.busy_timeout.trim(),
            i32::MAX
        )));
    }
    if global.log_keep < 1 {
        return Err(Error::usage(format!(
            "--log-keep must be at least 1, got {}",
            global.log_keep
        )));
    }
    let place = root::resolve(global.root.as_deref(), global.db.as_deref())?;
    let db = place.db;
    if db.is_dir() {
        return Err(Error::usage_hint(
            format!("state file {} is a folder", db.display()),
            "point --db (FENCEPOST_DB) at a file, e.g. <folder>/state.db",
        ));
    }
    Ok(Ctx {
        root: place.root,
        state_files: root::StateFiles::of(&db),
        db,
        clock,
        busy: Duration::from_millis(busy_ms.unsigned_abs()),
        log_keep: global.log_keep,
        how: place.how,
        here: place.here.filter(|_| typed),
    })
}

/// Prints a result line; a closed stdout (e.g. `| head`) is not an error.
fn emit(text: &str) {
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

fn report_error(err: &Error, json: bool, quiet: bool, named: (Value, Value)) {
    if json {
        let mut map = match err {
            Error::Refused(r) => r.fields.clone(),
            Error::Diverged { fields, .. }
            | Error::Child { fields, .. }
            | Error::Partial { fields, .. } => fields.as_object().cloned().unwrap_or_default(),
            _ => serde_json::Map::new(),
        };
        map.insert("outcome".into(), json!(err.outcome()));
        map.insert("error".into(), json!(err.to_string()));
        let (resource, epoch) = named;
        map.entry("resource").or_insert(resource);
        map.entry("epoch").or_insert(epoch);
        emit(&Value::Object(map).to_string());
    } else if let Error::Refused(r) = err {
        if !quiet {
            emit(r.kind.outcome());
        }
    } else if let Error::Diverged { report, .. } | Error::Partial { report, .. } = err {
        emit(report);
    }
    let mut stderr = io::stderr().lock();
    let _ = writeln!(stderr, "fencepost: {err}");
    if let Some(hint) = err.hint() {
        let _ = writeln!(stderr, "hint: {hint}");
    }
}
