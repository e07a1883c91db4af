//! The command line: the clap definition of every command and the global options,
//! parsing (with a small tree for the one command named), resolving the global options
//! into a session, dispatch, and printing the answer (the plain line, the `--json`
//! object, or one `fencepost:` line and a hint on stderr) with its exit code.

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use serde_json::{Value, json};

use super::Report;
use super::durations::{Zero, parse_duration};
use crate::cli as cmd;
use fencepost::clock::{Clock, ClockKind};
use fencepost::error::{Error, Result};
use fencepost::session::{self, Ctx};
use fencepost::{failpoints, outcome, store};

/// `--version`: says when the crash-test failpoints are compiled in.
const VERSION: &str = if cfg!(feature = "failpoints") {
    concat!(env!("CARGO_PKG_VERSION"), " (failpoints)")
} else {
    env!("CARGO_PKG_VERSION")
};

/// The exit-code table of `--help`, as a literal so the short help can add to it.
macro_rules! exit_codes {
    () => {
        "\
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
     128+N: killed by signal N); run --held-exit-code/--lost-exit-code replace 3 and 4"
    };
}

/// The exit-code table of `--help`, which the man pages' EXIT STATUS is made from.
pub(crate) const EXIT_CODES: &str = exit_codes!();

/// Fenced, atomic document publishing for workers whose jobs can be taken over.
///
/// A worker claims a resource and gets an epoch; `write` replaces the document only
/// while that epoch is the newest, so a paused worker whose lease was taken over cannot
/// overwrite its successor's result.
#[derive(Debug, Parser)]
#[command(
    name = "fencepost",
    version = VERSION,
    after_help = concat!(
        "Global options, taken by every command (explained by --help): -r/--root DIR, --db PATH,\n",
        "--store URL, --now N, --json, -q/--quiet, --busy-timeout DURATION, --log-keep N.\n\n",
        exit_codes!()
    ),
    after_long_help = exit_codes!(),
    max_term_width = 100
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub global: Global,

    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes. They have a heading of their own in `--help` and the
/// man pages, and stay out of each command's short help (`-h`), which is about the
/// command.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Global options")]
pub(crate) struct Global {
    /// Publish root: resources are paths relative to it [default: the nearest folder
    /// from the current one up that holds .fencepost/, where names typed on the command
    /// line are relative to the current folder; else the current folder].
    #[arg(
        short,
        long,
        global = true,
        hide_short_help = true,
        env = "FENCEPOST_ROOT",
        value_name = "DIR"
    )]
    pub root: Option<PathBuf>,

    /// State file [default: the one the root's .fencepost/ names, else
    /// <root>/.fencepost/state.db].
    #[arg(
        long,
        global = true,
        hide_short_help = true,
        env = "FENCEPOST_DB",
        value_name = "PATH"
    )]
    pub db: Option<PathBuf>,

    /// Keep leases, fences and contents in a PostgreSQL database shared by several hosts
    /// instead of a state file: postgresql://USER@HOST/DB, or postgresql:///DB?host=/run/postgresql
    /// for a Unix socket. The root, if any, is then a mirror of the store's documents
    /// (`fencepost mirror`).
    #[arg(
        long,
        global = true,
        hide_short_help = true,
        env = "FENCEPOST_STORE",
        // Its value may hold a password: --help names the variable, never its value.
        hide_env_values = true,
        value_name = "URL"
    )]
    pub store: Option<String>,

    /// Use logical tick N as the current time instead of the wall clock; durations are
    /// then ticks too. A state file stays on the clock it was first used with.
    #[arg(
        long,
        global = true,
        hide_short_help = true,
        env = "FENCEPOST_NOW",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub now: Option<i64>,

    /// Print one JSON object on stdout (refusals and errors too).
    #[arg(
        long,
        global = true,
        hide_short_help = true,
        env = "FENCEPOST_JSON",
        value_parser = clap::builder::FalseyValueParser::new()
    )]
    pub json: bool,

    /// Print nothing that a script does not need: no `written`, `completed`, `released`,
    /// `renewed` or refusal words on stdout, and no line on stderr for a refusal (held,
    /// lost, stale, conflict, unissued), as `flock -n` is silent when the lock is taken:
    /// the exit code says it all. Errors still go to stderr; claim's epoch, status, log
    /// and verify still print.
    #[arg(
        short,
        long,
        global = true,
        hide_short_help = true,
        env = "FENCEPOST_QUIET",
        value_parser = clap::builder::FalseyValueParser::new()
    )]
    pub quiet: bool,

    /// How long to wait for another process's lock on the state file before exiting 7:
    /// seconds or with units (500ms, 1m), 0 for not at all. Real time, even with --now.
    #[arg(
        long,
        global = true,
        hide_short_help = true,
        env = "FENCEPOST_BUSY_TIMEOUT",
        default_value = "10s",
        value_name = "DURATION",
        allow_negative_numbers = true
    )]
    pub busy_timeout: String,

    /// With --store: how long a change waits for the store to confirm its COMMIT (its
    /// synchronous standbys, when the server has them) before exiting 1 saying it is
    /// committed on the primary but not confirmed. Real time, even with --now.
    #[arg(
        long,
        global = true,
        hide_short_help = true,
        env = "FENCEPOST_COMMIT_TIMEOUT",
        default_value = "30s",
        value_name = "DURATION",
        allow_negative_numbers = true
    )]
    pub commit_timeout: String,

    /// How many audit-log events to keep. Checked every 1000 events (dropping at most 2000
    /// older ones per check); `log --prune` drops all the excess at once.
    #[arg(
        long,
        global = true,
        hide_short_help = true,
        env = "FENCEPOST_LOG_KEEP",
        default_value_t = store::DEFAULT_LOG_KEEP,
        value_name = "N"
    )]
    pub log_keep: i64,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    Init(cmd::init::InitArgs),
    Claim(cmd::claim::ClaimArgs),
    Renew(cmd::renew::RenewArgs),
    Complete(cmd::complete::CompleteArgs),
    Release(cmd::release::ReleaseArgs),
    Write(cmd::write::WriteArgs),
    Remove(cmd::remove::RemoveArgs),
    Status(cmd::status::StatusArgs),
    Recover(cmd::recover::RecoverArgs),
    Run(cmd::run::RunArgs),
    Log(cmd::log::LogArgs),
    Verify(cmd::verify::VerifyArgs),
    Mirror(cmd::mirror::MirrorArgs),
    Cat(cmd::cat::CatArgs),
    Store(cmd::store::StoreArgs),
    Completions(cmd::completions::CompletionsArgs),
    Man(cmd::man::ManArgs),
}

/// Runs the command line and returns the process exit code. Prints results on stdout
/// and one-line errors (`fencepost: ...`) on stderr.
pub(crate) fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let _scenario = failpoints::setup();
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let (cli, typed) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let run = |store: Option<&str>| {
        context(&cli.global, store, &cli.command, typed).and_then(|ctx| {
            dispatch(&ctx, &cli.command, &cli.global).inspect_err(|err| {
                if let Error::Refused(refusal) = err
                    && !refusal.logged
                {
                    session::log_refusal(&ctx, refusal);
                }
            })
        })
    };
    let result = match run(cli.global.store.as_deref()) {
        // Checking a mirror root is checking it against its store: without --store, the
        // one it is bound to.
        Err(Error::MirrorRoot { store, .. }) if cli.global.store.is_none() => run(Some(&store)),
        other => other,
    };
    match result {
        Ok(report) => answer(&cli, report),
        Err(err) => answer_error(&cli, &err),
    }
}

/// Parses the command line: the options, and whether the resource was typed on it
/// (see [`typed`]). `Err`: the exit code, once help, the version or a usage error has been
/// printed.
fn parse(args: &[OsString]) -> std::result::Result<(Cli, bool), i32> {
    if let Some(parsed) = parse_one(args) {
        return Ok(parsed);
    }
    let parsed = Cli::command().try_get_matches_from(args).and_then(into_cli);
    match parsed {
        Ok(parsed) => Ok(parsed),
        Err(e)
            if !e.use_stderr()
                || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            let code = if e.use_stderr() { 2 } else { 0 };
            Err(match e.print() {
                Err(failed) if !e.use_stderr() => {
                    stdout_failed(&failed, code, "nothing was changed")
                }
                _ => code,
            })
        }
        Err(e) => {
            // Bad usage is bad input like any other: one `fencepost:` line (and a hint),
            // and the `--json` object a script parses. Only fencepost's own arguments
            // count: a `--json` after `--` belongs to run's command.
            let own = args.iter().skip(1).take_while(|a| *a != "--");
            let json = own.clone().any(|a| a == "--json")
                || std::env::var("FENCEPOST_JSON").is_ok_and(|v| {
                    !matches!(
                        v.to_ascii_lowercase().as_str(),
                        "" | "0" | "n" | "no" | "f" | "false" | "off"
                    )
                });
            let command = own
                .filter_map(|a| a.to_str())
                .find(|a| Cli::command().find_subcommand(a).is_some());
            let named = json!({ "resource": null, "epoch": null });
            report_error(&clap_usage_error(&e, command), json, false, object(&named));
            Err(2)
        }
    }
}

/// Parses a command line that names a command with a tree that holds only that command.
/// Every command is a fresh process, and the whole tree (fifteen commands, the global
/// options copied into each) cost a 4 KiB write about a fifth of its instructions and 40
/// page faults, to build and to free. The small tree is the whole one minus the other
/// commands, so a command line it accepts means the same in the whole one (unit tests
/// compare them); anything it does not accept (help, `--version`, a typo, bad input) is
/// parsed again by the whole tree, which prints what it always did.
fn parse_one(args: &[OsString]) -> Option<(Cli, bool)> {
    let command = args
        .iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .find_map(|a| a.to_str().and_then(one_command))?;
    let matches = top_command()
        .subcommand(command)
        .try_get_matches_from(args)
        .ok()?;
    into_cli(matches).ok()
}

/// The options of a parsed command line, and [`typed`]. The values are moved out of the
/// matches rather than copied (`from_arg_matches` would clone them all first).
fn into_cli(mut matches: clap::ArgMatches) -> clap::error::Result<(Cli, bool)> {
    let typed = typed(&matches);
    Ok((Cli::from_arg_matches_mut(&mut matches)?, typed))
}

/// Whether `write`'s resource, if any, was typed on the command line rather than taken
/// from FENCEPOST_RESOURCE, which names a resource under the root wherever the command
/// runs.
fn typed(matches: &clap::ArgMatches) -> bool {
    matches
        .subcommand()
        .filter(|(name, _)| *name == "write")
        .and_then(|(_, m)| m.value_source("resource"))
        .is_none_or(|source| source != clap::parser::ValueSource::EnvVariable)
}

/// The top of the command tree as [`Cli`]'s attributes make it, without the commands
/// and without what only help prints (help is left to the whole tree).
fn top_command() -> clap::Command {
    use clap::Args;
    Global::augment_args(clap::Command::new("fencepost").version(VERSION))
        .subcommand_required(true)
        .arg_required_else_help(true)
}

/// One command of [`Command`], built as the derived tree builds it.
fn one_command(name: &str) -> Option<clap::Command> {
    use clap::{Args, Command as C};
    Some(match name {
        "init" => cmd::init::InitArgs::augment_args(C::new("init")),
        "claim" => cmd::claim::ClaimArgs::augment_args(C::new("claim")),
        "renew" => cmd::renew::RenewArgs::augment_args(C::new("renew")),
        "complete" => cmd::complete::CompleteArgs::augment_args(C::new("complete")),
        "release" => cmd::release::ReleaseArgs::augment_args(C::new("release")),
        "write" => cmd::write::WriteArgs::augment_args(C::new("write")),
        "remove" => cmd::remove::RemoveArgs::augment_args(C::new("remove")),
        "status" => cmd::status::StatusArgs::augment_args(C::new("status")),
        "recover" => cmd::recover::RecoverArgs::augment_args(C::new("recover")),
        "run" => cmd::run::RunArgs::augment_args(C::new("run")),
        "log" => cmd::log::LogArgs::augment_args(C::new("log")),
        "verify" => cmd::verify::VerifyArgs::augment_args(C::new("verify")),
        "mirror" => cmd::mirror::MirrorArgs::augment_args(C::new("mirror")),
        "cat" => cmd::cat::CatArgs::augment_args(C::new("cat")),
        "store" => cmd::store::StoreArgs::augment_args(C::new("store")),
        "completions" => cmd::completions::CompletionsArgs::augment_args(C::new("completions")),
        "man" => cmd::man::ManArgs::augment_args(C::new("man")),
        _ => return None,
    })
}

/// Prints a successful command's answer (plain, or its JSON object); returns the exit
/// code.
fn answer(cli: &Cli, report: Report) -> i32 {
    let json = cli.global.json;
    let quiet_success = cli.global.quiet && !json && cli.command.is_confirmation();
    // A script or page printed as it is; `man --dir` prints a report like others.
    let generated = match &cli.command {
        Command::Completions(_) => true,
        Command::Man(args) => args.dir.is_none(),
        _ => false,
    };
    let left = match report.changed {
        Some(changed) => changed,
        None if cli.command.changes_nothing() => "nothing was changed".to_string(),
        None => "`fencepost status` shows the state it left".to_string(),
    };
    let text = if json && !generated {
        let mut map = object(&report.outcome);
        map.entry("resource").or_insert(Value::Null);
        map.entry("epoch").or_insert(Value::Null);
        Value::Object(map).to_string()
    } else {
        report.plain
    };
    if !text.is_empty()
        && !quiet_success
        && let Err(e) = emit(&text)
    {
        return stdout_failed(&e, 0, &left);
    }
    0
}

/// Prints a failed command's answer; returns the exit code.
fn answer_error(cli: &Cli, err: &Error) -> i32 {
    // run may give held and lost codes of the caller's choosing, and says in its JSON
    // which side an exit came from.
    let (code, mut extra) = match &cli.command {
        Command::Run(args) => {
            let code = args.exit_code(err);
            let from = match err {
                Error::Child { ran, .. } => ran.exit.exit_from,
                _ => "fencepost",
            };
            let extra = outcome::Exit {
                exit_code: code,
                exit_from: from,
            };
            (code, object(&extra))
        }
        _ => (err.exit_code(), serde_json::Map::new()),
    };
    let (resource, epoch) = cli.command.named();
    extra.insert("resource".into(), resource);
    extra.insert("epoch".into(), epoch);
    let by_signal = extra
        .get("exit_from")
        .is_some_and(|f| f == cmd::run::EXIT_FROM_SIGNAL);
    report_error(err, cli.global.json, cli.global.quiet, extra);
    if by_signal {
        // After the answer: run was stopped by a signal, and dies by it.
        return cmd::run::die_by(code);
    }
    code
}

/// The answer could not be written to stdout. A closed pipe (`| head -0`) is the reader's
/// choice, as ripgrep treats it: exit quietly with the code the command earned. Any
/// other failure (a full disk, an I/O error) means the caller never got the answer,
/// perhaps an epoch it needs: exit 1 with a line saying what the command left behind.
fn stdout_failed(e: &io::Error, code: i32, left: &str) -> i32 {
    if e.kind() == io::ErrorKind::BrokenPipe {
        return code;
    }
    let _ = writeln!(
        io::stderr(),
        "fencepost: cannot write the result to stdout: {e}; {left}"
    );
    1
}

/// A clap parse error as one line, built from its kind and context (never from its
/// rendered text): what was wrong, and as the hint clap's "did you mean" suggestion, or
/// where to read the command's options. `command`: the subcommand named, if any.
fn clap_usage_error(e: &clap::Error, command: Option<&str>) -> Error {
    use clap::error::{ContextKind, ErrorKind};
    let one = |kind| clap_context(e, kind).into_iter().next().unwrap_or_default();
    // `name` is for the hint's command to type; the message says only the command, since
    // the line already starts with `fencepost:`.
    let name = command.map_or_else(|| "fencepost".to_string(), |c| format!("fencepost {c}"));
    let subject = command.unwrap_or("fencepost");
    let arg = one(ContextKind::InvalidArg);
    let value = one(ContextKind::InvalidValue);
    let message = match e.kind() {
        ErrorKind::InvalidSubcommand => {
            format!("unknown command '{}'", one(ContextKind::InvalidSubcommand))
        }
        // `--ttl -5s`: not an option, a value no option takes.
        ErrorKind::UnknownArgument if negative(&arg) => {
            return Error::usage_hint(
                format!("{subject} has no option '{arg}', and no value may be negative"),
                "durations and counts are zero or more: e.g. --ttl 30s",
            );
        }
        ErrorKind::UnknownArgument if arg.starts_with('-') => {
            format!("{subject} has no option '{arg}'")
        }
        ErrorKind::UnknownArgument => format!("unexpected argument '{arg}' for {subject}"),
        ErrorKind::InvalidValue if value.is_empty() => format!("{arg} needs a value"),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation => {
            let cause = std::error::Error::source(e)
                .map(|c| format!(": {c}"))
                .unwrap_or_default();
            format!("invalid value '{value}' for {arg}{cause}")
        }
        ErrorKind::MissingRequiredArgument => format!(
            "{subject} needs {}",
            clap_context(e, ContextKind::InvalidArg).join(", ")
        ),
        ErrorKind::ArgumentConflict => format!(
            "{arg} cannot be used with {}",
            clap_context(e, ContextKind::PriorArg).join(", ")
        ),
        ErrorKind::MissingSubcommand => "no command given".to_string(),
        ErrorKind::InvalidUtf8 => "an argument is not valid UTF-8".to_string(),
        ErrorKind::TooManyValues => format!("unexpected value '{value}' for {arg}"),
        ErrorKind::NoEquals => format!("{arg} needs its value after '='"),
        kind => match (kind.as_str(), arg.is_empty()) {
            (Some(what), true) => what.to_string(),
            (Some(what), false) => format!("{what}: {arg}"),
            (None, _) => "bad usage".to_string(),
        },
    };
    Error::usage_hint(message, clap_hint(e, command.is_some(), &name))
}

/// True for an argument that reads as a negative number, with or without a unit (`-5`,
/// `-1.5`, `-5s`): clap takes it for an option, and its tip (`use '-- -5'`) would fail too.
fn negative(arg: &str) -> bool {
    arg.strip_prefix('-')
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit() || c == '.'))
}

/// The hint under a clap parse error: clap's suggestions first ("did you mean"), then
/// its other tips and the values it would take, else where to read the options.
fn clap_hint(e: &clap::Error, has_command: bool, name: &str) -> String {
    use clap::error::{ContextKind, ErrorKind};
    let suggested: Vec<String> = [
        ContextKind::SuggestedSubcommand,
        ContextKind::SuggestedArg,
        ContextKind::SuggestedValue,
    ]
    .into_iter()
    .flat_map(|kind| clap_context(e, kind))
    .map(|word| format!("'{word}'"))
    .collect();
    let valid = clap_context(e, ContextKind::ValidValue);
    if !suggested.is_empty() && !valid.is_empty() {
        format!(
            "did you mean {}? possible values: {}",
            suggested.join(" or "),
            valid.join(", ")
        )
    } else if !suggested.is_empty() {
        format!("did you mean {}?", suggested.join(" or "))
    } else if let Some(tip) = clap_context(e, ContextKind::Suggested).first() {
        format!("see {name} --help; {tip}")
    } else if !valid.is_empty() {
        format!("possible values: {}", valid.join(", "))
    } else if e.kind() == ErrorKind::InvalidSubcommand || !has_command {
        "fencepost --help lists the commands".to_string()
    } else {
        format!("see {name} --help")
    }
}

/// One context value of a clap error, as plain strings.
fn clap_context(e: &clap::Error, kind: clap::error::ContextKind) -> Vec<String> {
    use clap::error::ContextValue;
    match e.get(kind) {
        Some(ContextValue::String(s)) => vec![s.clone()],
        Some(ContextValue::Strings(v)) => v.clone(),
        Some(ContextValue::StyledStr(s)) => vec![s.to_string()],
        Some(ContextValue::StyledStrs(v)) => v.iter().map(ToString::to_string).collect(),
        Some(ContextValue::Number(n)) => vec![n.to_string()],
        _ => Vec::new(),
    }
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
            Command::Remove(a) => (text(&a.resource), json!(a.epoch)),
            Command::Status(a) => (a.resource.as_deref().map_or(Value::Null, text), Value::Null),
            Command::Recover(a) => (a.resource.as_deref().map_or(Value::Null, text), Value::Null),
            Command::Log(a) => (a.resource.as_deref().map_or(Value::Null, text), Value::Null),
            Command::Verify(a) => (a.resource.as_deref().map_or(Value::Null, text), Value::Null),
            Command::Mirror(a) => (a.resource.as_deref().map_or(Value::Null, text), Value::Null),
            Command::Cat(a) => (text(&a.resource), Value::Null),
            Command::Init(_) | Command::Store(_) | Command::Completions(_) | Command::Man(_) => {
                (Value::Null, Value::Null)
            }
        }
    }

    /// Commands that only read: whatever happens to their output, nothing changed.
    fn changes_nothing(&self) -> bool {
        match self {
            Command::Status(_) | Command::Verify(_) | Command::Cat(_) | Command::Completions(_) => {
                true
            }
            Command::Log(args) => !args.prune,
            Command::Man(args) => args.dir.is_none(),
            Command::Store(args) => args.prints_only(),
            _ => false,
        }
    }

    /// Commands whose stdout only confirms what the exit code already says.
    fn is_confirmation(&self) -> bool {
        matches!(
            self,
            Command::Write(_)
                | Command::Remove(_)
                | Command::Init(_)
                | Command::Renew(_)
                | Command::Complete(_)
                | Command::Release(_)
                | Command::Recover(_)
        )
    }
}

fn dispatch(ctx: &Ctx, command: &Command, global: &Global) -> Result<Report> {
    let json = global.json;
    match command {
        Command::Init(_) => cmd::init::run(ctx),
        Command::Claim(a) => cmd::claim::run(ctx, a),
        Command::Renew(a) => cmd::renew::run(ctx, a),
        Command::Complete(a) => cmd::complete::run(ctx, a),
        Command::Release(a) => cmd::release::run(ctx, a),
        Command::Write(a) => cmd::write::run(ctx, a),
        Command::Remove(a) => cmd::remove::run(ctx, a),
        Command::Status(a) => cmd::status::run(ctx, a),
        Command::Recover(a) => cmd::recover::run(ctx, a),
        Command::Run(a) => cmd::run::run(
            ctx,
            a,
            cmd::run::Shown {
                json,
                quiet: global.quiet,
            },
        ),
        Command::Log(a) => cmd::log::run(ctx, a),
        Command::Verify(a) => cmd::verify::run(ctx, a),
        Command::Mirror(a) => cmd::mirror::run(ctx, a, json),
        Command::Cat(a) => cmd::cat::run(ctx, a, json),
        Command::Store(a) => cmd::store::run(ctx, a),
        Command::Completions(a) => cmd::completions::completions(a),
        Command::Man(a) => cmd::man::man(a),
    }
}

/// `--busy-timeout`, on real time even under --now; zero means "do not wait at all"
/// (exit 7 at once if the state file is locked).
fn busy_timeout(global: &Global) -> Result<Duration> {
    let busy_ms = parse_duration(
        &global.busy_timeout,
        ClockKind::Wall,
        "--busy-timeout",
        Zero::Allowed,
    )?;
    // SQLite counts the busy timeout in an int of milliseconds (about 24.8 days).
    if busy_ms > i64::from(i32::MAX) {
        return Err(Error::usage(format!(
            "--busy-timeout {} is too large: at most {}ms (about 24 days)",
            global.busy_timeout.trim(),
            i32::MAX
        )));
    }
    Ok(Duration::from_millis(busy_ms.unsigned_abs()))
}

/// Resolves the global options. `typed`: the resource was typed on the command line
/// (not read from `FENCEPOST_RESOURCE`), so under a found root it starts in the current
/// folder.
fn context(global: &Global, store: Option<&str>, command: &Command, typed: bool) -> Result<Ctx> {
    let clock = match global.now {
        Some(n) if n < 0 => {
            return Err(Error::usage(format!(
                "--now must be zero or positive, got {n}"
            )));
        }
        Some(n) => Clock::Logical(n),
        None => Clock::Wall,
    };
    if matches!(command, Command::Completions(_) | Command::Man(_)) {
        // Generated from the CLI definition alone: no root, no state file.
        return Ok(Ctx::detached(clock, global.log_keep));
    }
    let busy = busy_timeout(global)?;
    // Long enough that a healthy standby under load, or a slow disk, is not reported as
    // a failure; no longer than a paused writer may hold a resource (the store's idle
    // limit, 30 s), so a standby that is down stops a command no longer than that.
    let commit_ms = parse_duration(
        &global.commit_timeout,
        ClockKind::Wall,
        "--commit-timeout",
        Zero::Refused,
    )?;
    if global.log_keep < 1 {
        return Err(Error::usage(format!(
            "--log-keep must be at least 1, got {}",
            global.log_keep
        )));
    }
    // init makes the folder it names a root: never one found above it.
    let root = match command {
        Command::Init(args) => Some(
            args.dir
                .as_deref()
                .or(global.root.as_deref())
                .unwrap_or(std::path::Path::new(".")),
        ),
        _ => global.root.as_deref(),
    };
    let mut ctx = Ctx::open(&session::Settings {
        root,
        db: global.db.as_deref(),
        store,
        mirror: session::MirrorRoot::IfGivenOrFound,
        clock,
        busy,
        commit_timeout: Duration::from_millis(commit_ms.unsigned_abs()),
        log_keep: global.log_keep,
    })?;
    ctx.here = ctx.here.take().filter(|_| typed);
    ctx.warn = session::Warn(std::sync::Arc::new(|message| {
        let _ = writeln!(io::stderr(), "fencepost: warning: {message}");
    }));
    ctx.create = create(global, command);
    Ok(ctx)
}

/// Whether the command may make a new publish root (`--no-create`), and the line that
/// says it made one (none with `-q`).
fn create(global: &Global, command: &Command) -> session::Create {
    let refused = match command {
        Command::Claim(a) => a.request.create.no_create,
        Command::Run(a) => a.request.create.no_create,
        Command::Mirror(a) => a.create.no_create,
        _ => false,
    };
    // init's own answer says it made the root.
    let made = if global.quiet || matches!(command, Command::Init(_)) {
        session::Made::default()
    } else {
        session::Made(std::sync::Arc::new(|root| {
            let _ = writeln!(
                io::stderr(),
                "fencepost: made a new publish root: {}",
                root.display()
            );
        }))
    };
    session::Create { refused, made }
}

/// The members of the JSON object `value` serializes to (its keys sorted). The answers
/// are plain structs of strings and numbers, which always serialize.
fn object(value: &impl serde::Serialize) -> serde_json::Map<String, Value> {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    }
}

/// Prints a result line and flushes it, so a failed write is seen here.
fn emit(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    writeln!(out, "{text}").and_then(|()| out.flush())
}

/// Prints a failed command's answer: its JSON object or refusal word on stdout, and one
/// `fencepost:` line (and a hint) on stderr. With `-q`, a refusal prints neither: its
/// exit code is the whole answer, as with `flock -n`. The exit code stays the error's
/// even when stdout cannot be written, since it is the answer.
///
/// `defaults`: JSON fields for what the error's own do not say (the resource and epoch
/// the command line named).
fn report_error(err: &Error, json: bool, quiet: bool, defaults: serde_json::Map<String, Value>) {
    let mut written = Ok(());
    if json {
        let mut map = match err {
            Error::Refused(r) => object(r),
            Error::Diverged { found, .. } => object(found),
            Error::Child { ran, .. } => object(ran),
            Error::Partial { done, .. } => object(done),
            Error::Following { root, pid } => object(&json!({"root": root, "holder_pid": pid})),
            _ => serde_json::Map::new(),
        };
        map.insert("outcome".into(), json!(err.outcome()));
        map.insert("error".into(), json!(err.to_string()));
        for (key, value) in defaults {
            map.entry(key).or_insert(value);
        }
        written = emit(&Value::Object(map).to_string());
    } else if matches!(err, Error::Refused(_) | Error::Following { .. }) {
        if !quiet {
            written = emit(err.outcome());
        }
    } else if let Error::Diverged { report, .. } | Error::Partial { report, .. } = err {
        written = emit(report);
    }
    let mut stderr = io::stderr().lock();
    if let Err(e) = written
        && e.kind() != io::ErrorKind::BrokenPipe
    {
        let _ = writeln!(stderr, "fencepost: cannot write the answer to stdout: {e}");
    }
    if quiet && matches!(err, Error::Refused(_) | Error::Following { .. }) {
        return;
    }
    let _ = writeln!(stderr, "fencepost: {err}");
    if let Some(hint) = err.hint() {
        let _ = writeln!(stderr, "hint: {hint}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each command of the small tree is the whole tree's: the same arguments, the global
    /// ones included, with the same settings, and the same top-level arguments.
    #[test]
    fn the_one_command_trees_match_the_whole_tree() {
        let mut whole = Cli::command();
        whole.build();
        let args = |c: &clap::Command| format!("{:?}", c.get_arguments().collect::<Vec<_>>());
        let mut names = Vec::new();
        for full in whole.get_subcommands().filter(|c| c.get_name() != "help") {
            let name = full.get_name().to_string();
            let mut small = top_command().subcommand(
                one_command(&name).unwrap_or_else(|| panic!("no one_command for {name}")),
            );
            small.build();
            assert_eq!(
                args(&small),
                args(&whole),
                "top-level arguments with {name}"
            );
            let one = small.find_subcommand(&name).expect("the command");
            assert_eq!(args(one), args(full), "arguments of {name}");
            assert_eq!(
                format!("{:?}", one.get_groups().collect::<Vec<_>>()),
                format!("{:?}", full.get_groups().collect::<Vec<_>>()),
                "groups of {name}"
            );
            names.push(name);
        }
        assert_eq!(names.len(), 17, "every command is covered: {names:?}");
        assert!(one_command("help").is_none());
    }

    /// Command lines parse to the same values through either tree, and the ones the small
    /// tree refuses are left to the whole one.
    #[test]
    fn a_command_line_means_the_same_through_either_tree() {
        let args = |line: &str| line.split(' ').map(OsString::from).collect::<Vec<_>>();
        let whole = |line: &str| {
            Cli::command()
                .try_get_matches_from(args(line))
                .ok()
                .and_then(|m| Cli::from_arg_matches(&m).ok())
                .map(|cli| format!("{cli:?}"))
        };
        let small = |line: &str| parse_one(&args(line)).map(|(cli, _)| format!("{cli:?}"));
        for line in [
            "fencepost -q write doc.md --epoch 3 --from in",
            "fencepost write doc.md --epoch 3 -q --json",
            "fencepost --now -5 claim a/b.md -o w --ttl 1ms",
            "fencepost -r /tmp release doc.md -o w --epoch 2",
            "fencepost run doc.md -o w --ttl 5s -- sh -c write",
            "fencepost status",
            "fencepost log --json doc.md",
            "fencepost --busy-timeout 0 verify",
        ] {
            assert!(whole(line).is_some(), "{line:?} is a good command line");
            assert_eq!(small(line), whole(line), "{line:?}");
        }
        // A root named like a command: the small tree of `write` refuses the line, and
        // the whole tree reads it as it always did.
        let named = "fencepost --root write claim x -o w --ttl 5s";
        assert!(small(named).is_none());
        assert!(whole(named).is_some_and(|cli| cli.contains("Claim")));
        for refused in [
            "fencepost write --help",
            "fencepost --version",
            "fencepost help write",
            "fencepost write doc.md --epoch x",
            "fencepost claim x --bogus",
            "fencepost -- write",
        ] {
            assert!(
                small(refused).is_none(),
                "{refused:?} is left to the whole tree"
            );
        }
    }
}
