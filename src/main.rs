//! The `fencepost` binary: the command line (`cli/`: clap, the commands, rendering, exit
//! codes, durations as text) over the library's engine.

mod cli;

fn main() {
    std::process::exit(cli::app::run(std::env::args_os()));
}
