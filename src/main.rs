//! The `fencepost` binary: everything lives in the library; this only sets the exit code.

fn main() {
    std::process::exit(fencepost::run(std::env::args_os()));
}
