//! The lying-disk mode: random power cuts on a disk with a volatile cache, one boot each.
//!
//! The guest's only disk is an NBD export served by nbdkit with its cache filter in
//! writeback mode: writes stay in nbdkit's cache until the guest flushes, and a flush
//! writes them back block by block. Killing nbdkit (SIGKILL) at a random moment loses
//! what it had not written back, possibly part of a flush, which is a harsher disk than
//! the log's in-order one. The marks come over the console; the file behind the export is
//! then mounted and judged like a replayed state. Each cycle boots a guest, so this is
//! slow and random: a tool for long runs beside the benchmarks, not for the test suite.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use crate::guest::{self, DATA_BYTES, Kernel, Mode, io};
use crate::replay::{Checked, Judge, Recovery, States};
use crate::{Config, Error, tool};

/// What the cycles found.
#[derive(Debug, Default)]
pub struct LyingReport {
    pub seed: u64,
    pub cycles: u32,
    /// Acknowledgements the guests marked before their disk died.
    pub acks: u64,
    /// Cycles whose state needed recovery.
    pub recovered: u32,
    /// One line per cycle whose state lost or corrupted an acknowledged write.
    pub violations: Vec<String>,
    pub seconds: f64,
}

impl LyingReport {
    pub fn summary(&self) -> String {
        format!(
            "seed {}: {} power cuts, {} acknowledged writes before them, {} states needed \
             recovery, {} violations; {:.1} s",
            self.seed,
            self.cycles,
            self.acks,
            self.recovered,
            self.violations.len(),
            self.seconds
        )
    }
}

/// Runs `cycles` boots, each cut at a random moment of a random round.
pub fn lying_disk(cfg: &Config, cycles: u32, seed: Option<u64>) -> Result<LyingReport, Error> {
    let started = Instant::now();
    let seed = seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let mut rng = Rng(seed | 1);
    let kernel = Kernel::find(&cfg.kernel)?;
    let initrd = cfg.work.join("initrd-direct.cpio");
    guest::initramfs(cfg, Mode::Direct, &kernel, &initrd)?;
    let states = States::new(cfg, 0)?;
    let mut report = LyingReport {
        seed,
        ..LyingReport::default()
    };
    for cycle in 1..=cycles {
        // Cut during round `round`: up to three seconds after it started.
        let round = rng.below(u64::from(cfg.rounds)) + 1;
        let delay = Duration::from_millis(rng.below(3000));
        let (console, data) = cycle_once(cfg, &kernel, &initrd, round, delay)?;
        let mut judge = Judge::default();
        for line in console.lines() {
            if let Some(mark) = line.strip_prefix("powerloss-mark: ") {
                judge.mark(mark.trim_end())?;
            }
        }
        report.cycles += 1;
        report.acks += judge.acks;
        match states.check(&data, &judge)? {
            Checked::Fine(fine) => {
                report.recovered += u32::from(fine.recovery != Recovery::None);
            }
            Checked::Violated(what) => {
                let keep = cfg.work.join(format!("violation-{cycle}.img"));
                std::fs::rename(&data, &keep).map_err(|e| io("cannot keep", &keep, e))?;
                report.violations.push(format!(
                    "cycle {cycle} (cut {} ms into round {round}, after {}): {what}; image \
                     kept in {}",
                    delay.as_millis(),
                    judge.last_mark,
                    keep.display()
                ));
            }
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Boots one guest on a fresh disk behind nbdkit and kills nbdkit `delay` after round
/// `round` started. Returns the console and the disk.
fn cycle_once(
    cfg: &Config,
    kernel: &Kernel,
    initrd: &Path,
    round: u64,
    delay: Duration,
) -> Result<(String, std::path::PathBuf), Error> {
    let data = cfg.work.join("lying.img");
    let file = std::fs::File::create(&data).map_err(|e| io("cannot create", &data, e))?;
    file.set_len(DATA_BYTES)
        .map_err(|e| io("cannot size", &data, e))?;
    let socket = cfg.work.join("nbd.sock");
    let _ = std::fs::remove_file(&socket);
    let mut nbdkit = Killed(
        Command::new(tool("nbdkit")?)
            .args(["--foreground", "--exit-with-parent", "--unix"])
            .arg(&socket)
            .args(["--filter=cache", "file"])
            .arg(format!("file={}", data.display()))
            .arg("cache=writeback")
            .env("TMPDIR", &cfg.work)
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| Error::new(format!("cannot start nbdkit: {e}")))?,
    );
    wait_for(&socket)?;
    let mut qemu = Killed(
        Command::new(tool("qemu-system-x86_64")?)
            .args(["-accel", "tcg", "-cpu", "max", "-m", "512", "-smp", "1"])
            .args([
                "-nodefaults",
                "-display",
                "none",
                "-monitor",
                "none",
                "-no-reboot",
            ])
            .args(["-serial", "stdio", "-kernel"])
            .arg(&kernel.image)
            .arg("-initrd")
            .arg(initrd)
            .args(["-append", "console=ttyS0 quiet panic=-1 rdinit=/init"])
            .arg("-drive")
            .arg(format!(
                "file=nbd+unix:///?socket={},format=raw,if=virtio,cache=writeback",
                socket.display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::new(format!("cannot start qemu-system-x86_64: {e}")))?,
    );
    let stdout = qemu
        .0
        .stdout
        .take()
        .ok_or_else(|| Error::new("no console"))?;
    let (lines, receive) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let cue = if round <= 1 {
        "powerloss-guest: filesystem ready".to_string()
    } else {
        format!("powerloss-guest: round {} done at", round - 1)
    };
    let deadline = Instant::now() + cfg.guest_timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match receive.recv_timeout(left) {
            Ok(line) if line.starts_with(&cue) || line.starts_with("powerloss-guest: done") => {
                break;
            }
            Ok(line) if line.starts_with("powerloss-guest: FAILED") => {
                return Err(Error::new(format!("the guest failed: {line}")));
            }
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break, // the guest is gone
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(Error::new("the guest did not reach its cut in time"));
            }
        }
    }
    std::thread::sleep(delay);
    nbdkit.kill();
    qemu.kill();
    let console = reader.join().unwrap_or_default();
    if !console.contains("powerloss-guest: filesystem ready") {
        return Err(Error::new(format!(
            "the guest never made its filesystem\n{}",
            guest::tail(&console, 25)
        )));
    }
    Ok((console, data))
}

/// Waits (up to ten seconds) for nbdkit's socket.
fn wait_for(socket: &Path) -> Result<(), Error> {
    let until = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        if Instant::now() > until {
            return Err(Error::new(format!(
                "nbdkit never made {}",
                socket.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A child process killed (SIGKILL) and reaped when dropped, if not before.
struct Killed(Child);

impl Killed {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// xorshift64*: enough randomness to spread the cuts, and a seed that replays them.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}
