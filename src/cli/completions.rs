//! `fencepost completions`: shell completion scripts generated from the clap definitions,
//! so they can never drift from the real options.

use clap::{Args, CommandFactory, ValueEnum};

use super::Report;
use fencepost::error::Result;
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

pub(crate) fn text(buf: Vec<u8>) -> Result<Report> {
    let text = String::from_utf8_lossy(&buf).trim_end().to_string();
    Ok(Report::new(
        text,
        Outcome::Generated(Generated { dir: None }),
    ))
}
