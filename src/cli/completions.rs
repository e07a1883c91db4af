//! `fencepost completions` and `fencepost man`: generated from the clap definitions, so
//! they can never drift from the real options.

use clap::{Args, CommandFactory, ValueEnum};

use super::Report;
use fencepost::error::{Error, Result};
use fencepost::outcome::{Generated, Outcome};

/// The shells completions can be generated for.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Shell {
    Bash,
    Zsh,
    Fish,
    Elvish,
    Powershell,
}

/// Print a shell completion script.
///
/// Example:
///   fencepost completions bash > /etc/bash_completion.d/fencepost
///   fencepost completions powershell >> $PROFILE
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct CompletionsArgs {
    pub shell: Shell,
}

/// Print the man page (roff), or write it and one page per command into a folder.
///
/// Example:
///   fencepost man --dir /usr/local/share/man/man1
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct ManArgs {
    /// Write fencepost.1 and a fencepost-COMMAND.1 page for each command (which
    /// fencepost.1 refers to) into this folder, created if needed, instead of printing
    /// fencepost.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<std::path::PathBuf>,
}

pub(crate) fn completions(args: &CompletionsArgs) -> Result<Report> {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
        Shell::Elvish => clap_complete::Shell::Elvish,
        Shell::Powershell => clap_complete::Shell::PowerShell,
    };
    let mut buf = Vec::new();
    clap_complete::generate(
        shell,
        &mut super::app::Cli::command(),
        "fencepost",
        &mut buf,
    );
    text(buf)
}

pub(crate) fn man(args: &ManArgs) -> Result<Report> {
    if let Some(dir) = &args.dir {
        if dir.exists() && !dir.is_dir() {
            return Err(Error::usage(format!(
                "--dir {} is not a folder",
                dir.display()
            )));
        }
        std::fs::create_dir_all(dir).map_err(Error::io("cannot create", dir))?;
        clap_mangen::generate_to(man_command(), dir)
            .map_err(Error::io("cannot write man pages to", dir))?;
        return Ok(Report::new(
            format!("wrote man pages to {}", dir.display()),
            Outcome::Generated(Generated {
                dir: Some(dir.to_string_lossy().into_owned()),
            }),
        )
        .changed(format!("the man pages were written to {}", dir.display())));
    }
    let mut buf = Vec::new();
    clap_mangen::Man::new(man_command())
        .render(&mut buf)
        .map_err(Error::io("cannot render", "the man page"))?;
    text(buf)
}

/// The command line as the man pages show it: every option described, including those
/// kept out of the short help (whose one-line help is all they have), and each page's
/// synopsis in the help's own usage form, which names every required value.
fn man_command() -> clap::Command {
    let describe_all = |arg: clap::Arg| match arg.get_help().cloned() {
        Some(help) if arg.is_hide_short_help_set() && arg.get_long_help().is_none() => {
            arg.long_help(help)
        }
        _ => arg,
    };
    let mut cmd = super::app::Cli::command()
        .mut_args(describe_all)
        .mut_subcommands(|sub| sub.mut_args(describe_all));
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

fn text(buf: Vec<u8>) -> Result<Report> {
    let text = String::from_utf8_lossy(&buf).trim_end().to_string();
    Ok(Report::new(
        text,
        Outcome::Generated(Generated { dir: None }),
    ))
}
