//! `fencepost write`: the sink's command. Reads the content (stdin or `--from`), hands
//! the request to `publish::write`, and says what it did.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, IsTerminal, Read};
use std::path::PathBuf;

use clap::Args;
use nix::fcntl::{FcntlArg, fcntl};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use super::Report;
use fencepost::atomic::{Source, interrupt};
use fencepost::error::{Error, Result};
use fencepost::outcome::Outcome;
use fencepost::publish::{self, WriteRequest};
use fencepost::resource::Resource;
use fencepost::session::{Ctx, Kept};

/// Replace RESOURCE's document with stdin (or --from FILE) if EPOCH is still current.
///
/// Prints `written`, or `replay` when this epoch already wrote these exact bytes (exit 0,
/// file untouched). Refusals change nothing: `stale` (exit 5) when a newer epoch was
/// accepted or registered by a takeover claim, `conflict` (6) for different bytes under
/// the same epoch, `unissued` (8) for an epoch `claim` never gave out for this resource.
/// The new content is written and fsynced before the state file is locked; then it
/// replaces the document by an atomic rename. A new document gets the usual mode under
/// your umask; a rewrite keeps the document's mode.
///
/// Stopped by SIGTERM, SIGINT or SIGHUP (as run stops its command on a lost lease), a
/// write removes its staged .fencepost-tmp-* file and dies by the signal, as run does.
/// A signal that comes once the write has been accepted under the lock lets it end first
/// (committed, or undone), then ends it without an answer: status and log tell which.
/// A signal ignored when the write started (nohup's SIGHUP) stays ignored.
///
/// With stdin, whatever arrives before end-of-file is published: render to a file and
/// use --from when the producer can fail half-way.
///
/// With --tree DIR the resource is a folder, published whole: DIR is copied beside it
/// (files, folders, modes; symlinks only with --allow-symlinks, never followed), flushed,
/// hashed (its manifest's SHA-256 decides replay and conflict), then swapped in under the
/// lock in one step (renameat2 RENAME_EXCHANGE). The replaced tree stays beside it as
/// .NAME.fencepost-old-* for --keep-old, for readers still walking it. A resource is a
/// document or a tree for its whole life. Limits (exit 2 before anything is copied):
/// --max-entries, --max-size, --max-depth.
///
/// Example:
///   render-report > out.tmp && fencepost write reports/daily.md --epoch "$epoch" --from out.tmp
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct WriteArgs {
    /// The document's path under the root, e.g. reports/daily.md (from the current folder
    /// when the root was found from it, without --root).
    #[arg(env = "FENCEPOST_RESOURCE")]
    pub resource: OsString,

    /// The epoch `claim` printed for this resource.
    #[arg(short, long, env = "FENCEPOST_EPOCH", allow_negative_numbers = true)]
    pub epoch: i64,

    /// The writer's owner name; if given, the epoch must have been issued to it.
    #[arg(short, long, env = "FENCEPOST_OWNER")]
    pub owner: Option<String>,

    /// This version's number within the epoch, for a lease that publishes several: a
    /// whole number from 1, higher for each new version, the same when retrying one.
    ///
    /// Versions are ordered by (epoch, seq): a lower seq than the one recorded under
    /// this epoch is stale (exit 5), the same seq is a replay or a conflict as for an
    /// epoch. Without --seq a write is seq 0: the epoch's one version.
    #[arg(long, env = "FENCEPOST_SEQ", value_parser = super::parse_seq)]
    pub seq: Option<i64>,

    /// Read the content from FILE instead of stdin.
    #[arg(short, long, value_name = "FILE")]
    pub from: Option<PathBuf>,

    /// Publish empty content, which is refused (exit 2) without it.
    ///
    /// Under cron, stdin is /dev/null: a script that forgot --from would otherwise wipe
    /// the document.
    #[arg(long)]
    pub allow_empty: bool,

    /// DANGER, for reproducing the bug only: accept any epoch, as a sink without fencing
    /// would. A paused old worker can then overwrite a newer document.
    #[arg(long, hide_short_help = true)]
    pub unfenced: bool,

    /// Publish the folder DIR as the tree RESOURCE, whole, in one step (README: "Publishing
    /// a folder").
    #[arg(long, value_name = "DIR", conflicts_with_all = ["from", "allow_empty", "unfenced"])]
    pub tree: Option<PathBuf>,

    /// With --tree: copy symlinks as symlinks (never followed); without it a symlink in
    /// DIR is refused.
    #[arg(long, requires = "tree", hide_short_help = true)]
    pub allow_symlinks: bool,

    /// With --tree: keep the replaced tree this long beside the new one, for readers still
    /// walking it (default 60s; ticks under --now, default 60).
    #[arg(
        long,
        value_name = "DURATION",
        requires = "tree",
        hide_short_help = true
    )]
    pub keep_old: Option<String>,

    /// With --tree: most entries (files, folders, symlinks) DIR may hold.
    #[arg(long, value_name = "N", requires = "tree", default_value_t = fencepost::tree::DEFAULT_MAX_ENTRIES, hide_short_help = true)]
    pub max_entries: u64,

    /// With --tree: most bytes DIR's files may hold together.
    #[arg(long, value_name = "BYTES", requires = "tree", default_value_t = fencepost::tree::DEFAULT_MAX_BYTES, hide_short_help = true)]
    pub max_size: u64,

    /// With --tree: most folders a path in DIR may go down.
    #[arg(long, value_name = "N", requires = "tree", default_value_t = fencepost::tree::DEFAULT_MAX_DEPTH, hide_short_help = true)]
    pub max_depth: usize,
}

impl WriteArgs {
    /// The request as the engine takes it.
    pub(crate) fn request(&self) -> WriteRequest<'_> {
        WriteRequest {
            resource: &self.resource,
            epoch: self.epoch,
            seq: self.seq.unwrap_or(0),
            owner: self.owner.as_deref(),
            from: self.from.as_deref(),
            allow_empty: self.allow_empty,
            unfenced: self.unfenced,
            applied: false,
        }
    }
}

pub(crate) fn run(ctx: &Ctx, args: &WriteArgs) -> Result<Report> {
    watch_signals();
    // The store the write opens serves the mirror's update after it too.
    let ctx = &Ctx {
        kept: Kept::on(),
        ..ctx.clone()
    };
    let request = args.request();
    let outcome = match &args.tree {
        Some(src) => publish::write_tree(ctx, &request, &tree_request(ctx, args, src)?)?,
        None => publish::write(ctx, &request, || content_source(args))?,
    };
    let resource = match &outcome {
        Outcome::Written(w) | Outcome::Replay(w) => ctx.stored(&w.resource)?,
        _ => {
            return Err(Error::Internal(
                "a write answered neither written nor replay",
            ));
        }
    };
    if ctx.remote.as_ref().is_some_and(|r| r.mirror) {
        // Published: a mirror root on this host is brought up to it at once.
        fencepost::mirror::apply_after_write(
            ctx,
            &mut *ctx.shared_store("nothing was ever claimed here")?,
            &resource,
        );
    }
    report(&resource, args, outcome)
}

/// Watches SIGTERM, SIGINT and SIGHUP on a thread of its own: on the first, the staged
/// file goes unless the write has committed to it (`interrupt::stop`, which waits for a
/// write past that point to end), and the process dies by the signal. A signal ignored
/// when the process started stays ignored. Best effort: without a thread the signals
/// keep their default action (the staged file is then left to recovery, as before).
fn watch_signals() {
    // The thread first, then the handlers: handlers with no thread to act on them would
    // swallow the signals.
    let (send, receive) = std::sync::mpsc::sync_channel::<Signals>(1);
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let Ok(mut signals) = receive.recv() else {
                return;
            };
            if let Some(signal) = signals.forever().next() {
                interrupt::stop();
                super::run::die_by(128 + signal);
            }
        });
    if spawned.is_err() {
        return;
    }
    let ignored = ignored_signals();
    let watched = [SIGTERM, SIGINT, SIGHUP]
        .into_iter()
        .filter(|&signal| !is_in(ignored, signal));
    if let Ok(signals) = Signals::new(watched) {
        let _ = send.send(signals);
    }
}

/// The signals this process ignores (`SigIgn` in `/proc/self/status`, a mask whose bit
/// N-1 is signal N), as it inherited them; none if that cannot be read.
fn ignored_signals() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .as_deref()
        .and_then(sig_ign)
        .unwrap_or(0)
}

/// The `SigIgn` mask of a `/proc/PID/status` text.
fn sig_ign(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("SigIgn:"))?;
    u64::from_str_radix(line.trim(), 16).ok()
}

/// Whether `signal` is in the mask `set`.
fn is_in(set: u64, signal: i32) -> bool {
    (1..=64).contains(&signal) && set & (1 << (signal - 1)) != 0
}

/// What `--tree` asks for. Stdin is not read: content piped in beside `--tree` is bad
/// input, said so rather than dropped.
fn tree_request<'a>(
    ctx: &Ctx,
    args: &WriteArgs,
    src: &'a std::path::Path,
) -> Result<publish::TreeRequest<'a>> {
    if stdin_has_bytes() {
        return Err(Error::usage_hint(
            "write --tree takes its content from the folder; stdin holds bytes too",
            "drop the pipe (a tree's files come from --tree DIR only)",
        ));
    }
    let keep_old = match &args.keep_old {
        Some(text) => crate::cli::durations::parse_duration(
            text,
            ctx.clock.kind(),
            "--keep-old",
            crate::cli::durations::Zero::Allowed,
        )?,
        None => fencepost::recovery::keep_old(ctx.clock.kind()),
    };
    Ok(publish::TreeRequest {
        src,
        allow_symlinks: args.allow_symlinks,
        keep_old,
        limits: fencepost::tree::Limits {
            entries: args.max_entries,
            bytes: args.max_size,
            depth: args.max_depth,
        },
    })
}

/// Whether stdin is a regular file with bytes, or a pipe with bytes waiting (a terminal,
/// `/dev/null` or an empty pipe is not).
fn stdin_has_bytes() -> bool {
    let stdin = io::stdin();
    match rustix::fs::fstat(&stdin) {
        Ok(st)
            if rustix::fs::FileType::from_raw_mode(st.st_mode)
                == rustix::fs::FileType::RegularFile =>
        {
            st.st_size > 0
        }
        Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Fifo => {
            rustix::io::ioctl_fionread(&stdin).is_ok_and(|n| n > 0)
        }
        _ => false,
    }
}

/// The plain answer of a write that published (or replayed) `outcome`.
fn report(resource: &Resource, args: &WriteArgs, outcome: Outcome) -> Result<Report> {
    let (plain, changed) = match outcome {
        Outcome::Written(_) => (
            "written",
            format!(
                "{resource} was written under {}",
                fencepost::mirror::place((args.epoch, args.seq.unwrap_or(0)))
            ),
        ),
        _ => ("replay", "nothing was changed (a replay)".to_string()),
    };
    Ok(Report::new(plain, outcome).changed(changed))
}

/// The content to publish: `--from FILE`, or stdin (never a terminal).
fn content_source(args: &WriteArgs) -> Result<Source<'static>> {
    if let Some(path) = &args.from {
        return Ok(Source::File(open_source(path)?));
    }
    let stdin = io::stdin();
    if stdin.is_terminal() {
        return Err(Error::usage_hint(
            "write reads the document from stdin, which is a terminal",
            "pipe the content in (`render | fencepost write ...`) or pass --from FILE",
        ));
    }
    Ok(Source::Stream(Box::new(Piped {
        stdin: stdin.lock(),
        read: 0,
        widened: false,
    })))
}

/// Stdin, whose pipe is widened (`widen_pipe`) once the content has proved big.
struct Piped {
    stdin: io::StdinLock<'static>,
    read: u64,
    widened: bool,
}

/// Content read from stdin before its pipe is widened. Small documents, the common case
/// and often many at once, keep the default pipe: a wider one counts against the user's
/// pipe budget (`/proc/sys/fs/pipe-user-pages-soft`), shared with all their programs.
const WIDEN_AFTER: u64 = 1 << 20;

impl Read for Piped {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.stdin.read(buf)?;
        self.read += n as u64;
        if !self.widened && self.read >= WIDEN_AFTER {
            self.widened = true;
            widen_pipe(&io::stdin());
        }
        Ok(n)
    }
}

/// Piped content arrives at most 64 KiB per read by default (the pipe's capacity), so
/// the producer and the copy take turns many times per megabyte. Ask the kernel for a
/// 1 MiB pipe (the unprivileged limit by default); if it says no, or stdin is not a
/// pipe, the copy is only slower. Never shrinks a pipe that is already larger.
fn widen_pipe(stdin: &io::Stdin) {
    const WANT: i32 = 1 << 20;
    if fcntl(stdin, FcntlArg::F_GETPIPE_SZ).is_ok_and(|size| size < WANT) {
        let _ = fcntl(stdin, FcntlArg::F_SETPIPE_SZ(WANT));
    }
}

fn open_source(path: &PathBuf) -> Result<File> {
    let file = File::open(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied => {
            Error::usage(format!("cannot read --from {}: {e}", path.display()))
        }
        _ => Error::io("cannot open", path)(e),
    })?;
    match file.metadata() {
        Ok(meta) if meta.is_dir() => Err(Error::usage(format!(
            "cannot read --from {}: it is a folder",
            path.display()
        ))),
        _ => Ok(file),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ignored_signals_are_read_from_the_sigign_mask() {
        let status = "Name:\tfencepost\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000001\n";
        let ignored = sig_ign(status).expect("a SigIgn line");
        assert!(is_in(ignored, SIGHUP));
        assert!(!is_in(ignored, SIGINT));
        assert!(!is_in(ignored, SIGTERM));
        let ignored = sig_ign("SigIgn:\t0000000000004002\n").expect("a SigIgn line");
        assert!(is_in(ignored, SIGINT) && is_in(ignored, SIGTERM) && !is_in(ignored, SIGHUP));
        assert_eq!(sig_ign("Name:\tx\n"), None);
        assert!(!is_in(u64::MAX, 0) && !is_in(u64::MAX, 65));
    }
}
