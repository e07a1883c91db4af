//! `fencepost man`: the manual pages, generated from the clap definitions so they can never
//! drift from the real options. clap_mangen renders the sections clap knows (name,
//! synopsis, description, options, commands); ENVIRONMENT is gathered from the options'
//! `env` attributes and the store's own list of libpq variables, and EXIT STATUS from the
//! exit-code table of `--help`, as `.TP` paragraphs that `man` cannot reflow into one.

use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory};
use roff::{Roff, bold, roman};

use super::Report;
use fencepost::error::{Error, Result};
use fencepost::outcome::{Generated, Outcome};
use fencepost::store::postgres::ENVIRONMENT as LIBPQ;

/// Print the man page (roff), or write it and one page per command into a manual folder.
///
/// Example:
///   fencepost man --dir /usr/local/share/man
///   MANPATH=/usr/local/share/man man fencepost-claim
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct ManArgs {
    /// Write fencepost.1 and a fencepost-COMMAND.1 page for each command (which
    /// fencepost.1 refers to) into DIR/man1/, created if needed, where `man` finds them
    /// with DIR in MANPATH, instead of printing fencepost.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// The commands whose pages leave out the libpq variables: they open no store.
const STORELESS: [&str; 3] = ["completions", "man", "init"];

pub(crate) fn man(args: &ManArgs) -> Result<Report> {
    let top = man_command();
    let Some(dir) = &args.dir else {
        let page = render(&top, &top).map_err(Error::io("cannot render", "the man page"))?;
        return super::completions::text(page);
    };
    if dir.exists() && !dir.is_dir() {
        return Err(Error::usage(format!(
            "--dir {} is not a folder",
            dir.display()
        )));
    }
    let section = dir.join("man1");
    std::fs::create_dir_all(&section).map_err(Error::io("cannot create", &section))?;
    write_pages(&top, &top, &section)?;
    Ok(Report::new(
        format!("wrote man pages to {}", section.display()),
        Outcome::Generated(Generated {
            dir: Some(dir.to_string_lossy().into_owned()),
        }),
    )
    .changed(format!(
        "the man pages were written to {}",
        section.display()
    )))
}

/// Writes the page of `cmd` and of each of its commands, below it, into `section`.
fn write_pages(top: &clap::Command, cmd: &clap::Command, section: &Path) -> Result<()> {
    let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name());
    let path = section.join(format!("{name}.1"));
    let page = render(top, cmd).map_err(Error::io("cannot render", &path))?;
    std::fs::write(&path, page).map_err(Error::io("cannot write", &path))?;
    for sub in shown(cmd) {
        write_pages(top, sub, section)?;
    }
    Ok(())
}

/// The commands of `cmd` that get pages: not hidden, and never `help`, which only prints
/// the pages' own text again.
fn shown(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands()
        .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help")
}

/// The page of `cmd` (`top`: the whole command line, whose page lists every variable).
fn render(top: &clap::Command, cmd: &clap::Command) -> std::io::Result<Vec<u8>> {
    let source = format!(
        "{} {}",
        top.get_name(),
        top.get_version().unwrap_or_default()
    );
    let man = clap_mangen::Man::new(cmd.clone()).source(source);
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    description(cmd).to_writer(&mut page)?;
    if cmd.get_arguments().any(|arg| !arg.is_hide_set()) {
        man.render_options_section(&mut page)?;
    }
    if shown(cmd).next().is_some() {
        man.render_subcommands_section(&mut page)?;
    }
    environment(top, cmd).to_writer(&mut page)?;
    exit_status().to_writer(&mut page)?;
    if cmd.get_version().is_some() {
        man.render_version_section(&mut page)?;
    }
    Ok(page)
}

/// The DESCRIPTION section: the long help's paragraphs, filled, and its indented lines
/// (examples, lists) kept as they are written, which `man` would otherwise run together.
fn description(cmd: &clap::Command) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["DESCRIPTION"]);
    let about = cmd
        .get_long_about()
        .or_else(|| cmd.get_about())
        .map(ToString::to_string)
        .unwrap_or_default();
    let mut kept = false;
    for line in about.lines() {
        let indented = line.starts_with(char::is_whitespace) && !line.trim().is_empty();
        if indented != kept {
            roff.control(if indented { "nf" } else { "fi" }, []);
            kept = indented;
        }
        if line.trim().is_empty() {
            roff.control("PP", []);
        } else {
            roff.text([roman(line)]);
        }
    }
    if kept {
        roff.control("fi", []);
    }
    roff
}

/// A variable clap reads for an option, and where: the option as typed and the commands
/// that take it (empty for a global option).
struct Variable {
    name: String,
    option: String,
    commands: Vec<String>,
}

/// Every variable the options of `cmd` and its commands read, in the order met (the
/// global options first), each once.
fn variables(cmd: &clap::Command) -> Vec<Variable> {
    fn walk(cmd: &clap::Command, path: &str, found: &mut Vec<Variable>) {
        for arg in cmd.get_arguments().filter(|arg| !arg.is_hide_set()) {
            let Some(name) = arg.get_env().and_then(|name| name.to_str()) else {
                continue;
            };
            let option = match arg.get_long() {
                Some(long) => format!("--{long}"),
                None => arg
                    .get_value_names()
                    .and_then(|names| names.first())
                    .map_or_else(
                        || arg.get_id().to_string().to_uppercase(),
                        ToString::to_string,
                    ),
            };
            let index = match found.iter().position(|v| v.name == name) {
                Some(index) => index,
                None => {
                    found.push(Variable {
                        name: name.to_string(),
                        option,
                        commands: Vec::new(),
                    });
                    found.len() - 1
                }
            };
            if !arg.is_global_set() && !path.is_empty() {
                let commands = &mut found[index].commands;
                if !commands.iter().any(|c| c == path) {
                    commands.push(path.to_string());
                }
            }
        }
        for sub in shown(cmd) {
            let name = sub.get_name();
            let path = if path.is_empty() {
                name.to_string()
            } else {
                format!("{path} {name}")
            };
            walk(sub, &path, found);
        }
    }
    let mut found = Vec::new();
    walk(cmd, "", &mut found);
    found
}

/// The ENVIRONMENT section of `cmd`'s page.
fn environment(top: &clap::Command, cmd: &clap::Command) -> Roff {
    let whole = std::ptr::eq(top, cmd);
    let mut roff = Roff::new();
    roff.control("SH", ["ENVIRONMENT"]);
    roff.text([roman(
        "Each variable gives its option when the command line does not. A switch \
         (--json, --quiet, --no-create) is off when its variable is empty, 0, false, no, \
         n, f or off.",
    )]);
    for variable in variables(cmd) {
        let mut what = format!("Gives {}", variable.option);
        if whole {
            if variable.commands.is_empty() {
                what.push_str(" (every command)");
            } else {
                what.push_str(&format!(" ({})", variable.commands.join(", ")));
            }
        }
        what.push('.');
        roff.control("TP", []);
        roff.text([bold(variable.name)]);
        roff.text([roman(what)]);
    }
    if whole {
        roff.control("PP", []);
        roff.text([roman(
            "With --store, the libpq variables give what the store string leaves out (the \
             string wins over them):",
        )]);
        for (name, what) in LIBPQ {
            roff.control("TP", []);
            roff.text([bold(*name)]);
            roff.text([roman(format!("{what}."))]);
        }
    } else if !STORELESS.contains(&cmd.get_name()) {
        let names: Vec<&str> = LIBPQ.iter().map(|(name, _)| *name).collect();
        roff.control("PP", []);
        roff.text([roman(format!(
            "With --store, the libpq variables that fencepost(1) describes give what the \
             store string leaves out: {}.",
            names.join(", ")
        ))]);
    }
    roff
}

/// The EXIT STATUS section: the exit-code table of `--help`, one paragraph per code, so
/// that `man` never runs two codes together.
fn exit_status() -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    let mut codes: Vec<(String, String)> = Vec::new();
    for line in super::app::EXIT_CODES.lines().skip(1) {
        let trimmed = line.trim();
        // A code's line has its code after two spaces; a longer indent goes on.
        match (line.starts_with("   "), codes.last_mut()) {
            (true, Some((_, what))) => {
                what.push(' ');
                what.push_str(trimmed);
            }
            _ => {
                let (code, what) = trimmed
                    .split_once(char::is_whitespace)
                    .unwrap_or((trimmed, ""));
                codes.push((
                    code.trim_end_matches(':').to_string(),
                    what.trim().to_string(),
                ));
            }
        }
    }
    for (code, what) in codes {
        roff.control("TP", []);
        roff.text([bold(code)]);
        roff.text([roman(what)]);
    }
    roff
}

/// The command line as the man pages show it: every option described, including those
/// kept out of the short help (whose one-line help is all they have), each page's
/// synopsis in the help's own usage form, which names every required value, and no
/// `help` command.
fn man_command() -> clap::Command {
    let describe_all = |arg: clap::Arg| match arg.get_help().cloned() {
        Some(help) if arg.is_hide_short_help_set() && arg.get_long_help().is_none() => {
            arg.long_help(help)
        }
        _ => arg,
    };
    let mut cmd = super::app::Cli::command()
        .disable_help_subcommand(true)
        .mut_args(describe_all)
        .mut_subcommands(|sub| sub.mut_args(describe_all).disable_help_subcommand(true));
    cmd.build();
    let usages: Vec<(String, String)> = cmd
        .get_subcommands_mut()
        .map(|sub| {
            let usage = sub.render_usage().to_string();
            let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage).to_string();
            (sub.get_name().to_string(), usage)
        })
        .collect();
    for (name, usage) in usages {
        cmd = cmd.mut_subcommand(name, |sub| sub.override_usage(usage));
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variable an option of any command reads is on the main page, under
    /// ENVIRONMENT; and nothing but codes is under EXIT STATUS.
    #[test]
    fn every_variable_clap_knows_is_in_the_environment_section() {
        fn all(cmd: &clap::Command, out: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                if let Some(name) = arg.get_env() {
                    out.push(name.to_string_lossy().into_owned());
                }
            }
            for sub in cmd.get_subcommands() {
                all(sub, out);
            }
        }
        let mut names = Vec::new();
        all(&super::super::app::Cli::command(), &mut names);
        assert!(names.len() > 15, "{names:?}");
        let top = man_command();
        let page = String::from_utf8(render(&top, &top).expect("render")).expect("utf-8");
        let (_, environment) = page.split_once(".SH ENVIRONMENT").expect("ENVIRONMENT");
        let (environment, exit) = environment
            .split_once(".SH \"EXIT STATUS\"")
            .expect("EXIT STATUS after it");
        for name in &names {
            assert!(
                environment.contains(&format!("\\fB{name}\\fR")),
                "{name} is not under ENVIRONMENT"
            );
        }
        for (name, _) in LIBPQ {
            assert!(environment.contains(&format!("\\fB{name}\\fR")), "{name}");
        }
        let codes: Vec<&str> = exit
            .lines()
            .filter_map(|line| line.strip_prefix("\\fB")?.strip_suffix("\\fR"))
            .collect();
        assert_eq!(
            codes,
            ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "other"]
        );
    }
}
