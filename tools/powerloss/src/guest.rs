//! The recording half: a QEMU guest (software emulation, no KVM needed) that runs
//! fencepost rounds on an ext4 filesystem over a `log-writes` device.
//!
//! The guest is Debian's cloud kernel, unpacked from its package, with an initramfs of
//! busybox, the fencepost binary under test, `dmsetup` and `mke2fs` (each with the shared
//! libraries `ldd` names) and the kernel modules the disks need. Its init script
//! (`guest.sh`) makes the filesystem, runs the rounds and marks the log after every
//! acknowledged write; the log disk is what the replay reads.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Config, Error, tool};

/// The guest's init script.
const INIT: &str = include_str!("guest.sh");

/// Size of the data disk the filesystem lives on.
pub(crate) const DATA_BYTES: u64 = 32 << 20;
/// Size of the log disk (sparse; a run of ten rounds uses about 20 MiB).
const LOG_BYTES: u64 = 512 << 20;

/// The modules the guest loads (with what they depend on), unless built in.
const MODULES: &[&str] = &["virtio_pci", "virtio_blk", "dm-log-writes", "ext4"];

/// What a finished guest left behind.
#[derive(Debug)]
pub(crate) struct Recording {
    pub(crate) log: PathBuf,
    pub(crate) console: String,
    pub(crate) seconds: f64,
}

/// An unpacked `linux-image-*-cloud-amd64` package.
#[derive(Debug)]
pub(crate) struct Kernel {
    pub(crate) image: PathBuf,
    pub(crate) modules: PathBuf,
}

impl Kernel {
    /// Finds the kernel image and its module tree under `dir` (a `dpkg-deb -x` of the
    /// package).
    pub(crate) fn find(dir: &Path) -> Result<Kernel, Error> {
        let boot = dir.join("boot");
        let image = newest(&boot, "vmlinuz-").ok_or_else(|| {
            Error::new(format!(
                "no kernel (boot/vmlinuz-*) in {}: unpack a linux-image-*-cloud-amd64 \
                 package there (tools/powerloss/fetch-kernel.sh does)",
                dir.display()
            ))
        })?;
        let name = image.file_name().unwrap_or_default().to_string_lossy();
        let version = name.trim_start_matches("vmlinuz-").to_string();
        let modules = ["lib/modules", "usr/lib/modules"]
            .iter()
            .map(|base| dir.join(base).join(&version))
            .find(|p| p.is_dir())
            .ok_or_else(|| {
                Error::new(format!("no module tree for {version} in {}", dir.display()))
            })?;
        Ok(Kernel { image, modules })
    }

    /// The modules to load, dependencies first: each name with a plain `.ko` file
    /// (decompressed into `work` if the package compresses it).
    fn module_files(&self, work: &Path) -> Result<Vec<(String, PathBuf)>, Error> {
        let mut found = Vec::new();
        walk(&self.modules.join("kernel"), &mut found)
            .map_err(|e| Error::new(format!("cannot list {}: {e}", self.modules.display())))?;
        let builtin = fs::read_to_string(self.modules.join("modules.builtin")).unwrap_or_default();
        let mut order = Vec::new();
        let mut seen = BTreeSet::new();
        for name in MODULES {
            self.resolve(name, &found, &builtin, work, &mut seen, &mut order)?;
        }
        Ok(order)
    }

    fn resolve(
        &self,
        name: &str,
        found: &[PathBuf],
        builtin: &str,
        work: &Path,
        seen: &mut BTreeSet<String>,
        order: &mut Vec<(String, PathBuf)>,
    ) -> Result<(), Error> {
        let key = name.replace('-', "_");
        if !seen.insert(key.clone()) {
            return Ok(());
        }
        let file = found
            .iter()
            .find(|p| module_name(p).is_some_and(|n| n.replace('-', "_") == key));
        let Some(file) = file else {
            let built_in = builtin.lines().any(|line| {
                module_name(Path::new(line)).is_some_and(|n| n.replace('-', "_") == key)
            });
            if built_in {
                return Ok(());
            }
            return Err(Error::new(format!(
                "the kernel in {} has no module {name} and does not build it in",
                self.modules.display()
            )));
        };
        let plain = uncompressed(file, work)?;
        let bytes = fs::read(&plain).map_err(|e| io("cannot read", &plain, e))?;
        for dep in depends(&bytes) {
            self.resolve(&dep, found, builtin, work, seen, order)?;
        }
        order.push((module_name(file).unwrap_or_default(), plain));
        Ok(())
    }
}

/// The module names in a module's `depends=` field.
fn depends(ko: &[u8]) -> Vec<String> {
    let needle = b"depends=";
    let Some(at) = ko.windows(needle.len()).position(|w| w == needle) else {
        return Vec::new();
    };
    let rest = &ko[at + needle.len()..];
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end])
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            walk(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// The file in `dir` whose name starts with `prefix` and sorts last.
fn newest(dir: &Path, prefix: &str) -> Option<PathBuf> {
    let mut names: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect();
    names.sort();
    names.pop()
}

/// Boots the guest, lets it run `cfg.rounds` rounds, and returns its log disk.
pub(crate) fn record(cfg: &Config) -> Result<Recording, Error> {
    let kernel = Kernel::find(&cfg.kernel)?;
    let initrd = cfg.work.join("initrd.cpio");
    initramfs(cfg, Mode::Log, &kernel, &initrd)?;
    let data = cfg.work.join("data.img");
    let log = cfg.work.join("log.img");
    for (path, size) in [(&data, DATA_BYTES), (&log, LOG_BYTES)] {
        let file = fs::File::create(path).map_err(|e| io("cannot create", path, e))?;
        file.set_len(size).map_err(|e| io("cannot size", path, e))?;
    }
    let console = cfg.work.join("console.log");
    let started = Instant::now();
    let qemu = Command::new(tool("timeout")?)
        .arg("--kill-after=5")
        .arg(cfg.guest_timeout.as_secs().to_string())
        .arg(tool("qemu-system-x86_64")?)
        .args(["-accel", "tcg", "-cpu", "max", "-m", "512", "-smp", "1"])
        .args([
            "-nodefaults",
            "-display",
            "none",
            "-monitor",
            "none",
            "-no-reboot",
        ])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-kernel")
        .arg(&kernel.image)
        .arg("-initrd")
        .arg(&initrd)
        .args(["-append", "console=ttyS0 quiet panic=-1 rdinit=/init"])
        .arg("-drive")
        .arg(drive(&data))
        .arg("-drive")
        .arg(drive(&log))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| Error::new(format!("cannot start qemu-system-x86_64: {e}")))?;
    let seconds = started.elapsed().as_secs_f64();
    let text = fs::read_to_string(&console).unwrap_or_default();
    finished(cfg, &qemu, &text)?;
    Ok(Recording {
        log,
        console: text,
        seconds,
    })
}

/// Whether the guest ran every round, from what its console and QEMU said.
fn finished(cfg: &Config, qemu: &std::process::Output, console: &str) -> Result<(), Error> {
    let tail = tail(console, 25);
    if let Some(line) = console
        .lines()
        .find(|l| l.starts_with("powerloss-guest: FAILED"))
    {
        return Err(Error::new(format!("the guest failed: {line}\n{tail}")));
    }
    if console
        .lines()
        .any(|l| l.trim_end() == "powerloss-guest: done")
    {
        return Ok(());
    }
    let how = match qemu.status.code() {
        Some(124) | Some(137) => format!("timed out after {} s", cfg.guest_timeout.as_secs()),
        _ => format!(
            "qemu exited with {} ({})",
            qemu.status,
            String::from_utf8_lossy(&qemu.stderr).trim()
        ),
    };
    Err(Error::new(format!(
        "the guest did not finish: {how}\n{tail}"
    )))
}

pub(crate) fn drive(path: &Path) -> String {
    // cache=writeback: the guest sees a volatile write cache and has to flush.
    format!(
        "file={},format=raw,if=virtio,cache=writeback",
        path.display()
    )
}

pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Writes the initramfs: busybox, fencepost, dmsetup and mke2fs with their libraries, the
/// kernel modules, the init script and its settings.
/// What the guest's data disk is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A log-writes device over `/dev/vda`, logging to `/dev/vdb`; marks go to the log.
    Log,
    /// `/dev/vda` itself, whose power the host cuts; marks go to the console.
    Direct,
}

pub(crate) fn initramfs(
    cfg: &Config,
    mode: Mode,
    kernel: &Kernel,
    out: &Path,
) -> Result<(), Error> {
    let mut stage = Stage::new(cfg.work.join("initramfs"))?;
    let busybox = tool("busybox")?;
    let fencepost = cfg.fencepost.clone();
    let dmsetup = tool("dmsetup")?;
    let mke2fs = tool("mke2fs")?;
    stage.place(&busybox, "/bin/busybox")?;
    stage.place(&fencepost, "/bin/fencepost")?;
    stage.place(&dmsetup, "/sbin/dmsetup")?;
    stage.place(&mke2fs, "/sbin/mke2fs")?;
    let conf = Path::new("/etc/mke2fs.conf");
    if conf.exists() {
        stage.place(conf, "/etc/mke2fs.conf")?;
    }
    let mut libs = BTreeSet::new();
    for bin in [&busybox, &fencepost, &dmsetup, &mke2fs] {
        libs.extend(shared_libraries(bin)?);
    }
    for lib in &libs {
        stage.place(lib, &lib.to_string_lossy())?;
    }
    let mut names = Vec::new();
    for (name, ko) in kernel.module_files(&cfg.work)? {
        stage.place(&ko, &format!("/modules/{name}.ko"))?;
        names.push(name);
    }
    stage.write("init", INIT, 0o755)?;
    let settings = format!(
        "rounds={}\nmode={}\nmodules='{}'\n",
        cfg.rounds,
        if mode == Mode::Log { "log" } else { "direct" },
        names.join(" ")
    );
    stage.write("powerloss.env", &settings, 0o644)?;
    for dir in ["proc", "sys", "dev", "mnt", "tmp"] {
        stage.dir(dir)?;
    }
    stage.archive(&busybox, out)
}

/// The initramfs as a folder of symlinks to the real files, and the list of what to
/// archive, which busybox's `cpio -o -H newc -L` turns into the files the links point to.
struct Stage {
    root: PathBuf,
    entries: BTreeSet<PathBuf>,
}

impl Stage {
    fn new(root: PathBuf) -> Result<Stage, Error> {
        fs::create_dir_all(&root).map_err(|e| io("cannot create", &root, e))?;
        Ok(Stage {
            root,
            entries: BTreeSet::new(),
        })
    }

    /// Puts `file` at the absolute path `at` in the initramfs.
    fn place(&mut self, file: &Path, at: &str) -> Result<(), Error> {
        let at = Path::new(at.trim_start_matches('/'));
        let mut parent = at.parent();
        while let Some(dir) = parent.filter(|d| !d.as_os_str().is_empty()) {
            self.dir(&dir.to_string_lossy())?;
            parent = dir.parent();
        }
        let real = fs::canonicalize(file).map_err(|e| io("cannot find", file, e))?;
        let link = self.root.join(at);
        symlink(&real, &link).map_err(|e| io("cannot link", &link, e))?;
        self.entries.insert(at.to_path_buf());
        Ok(())
    }

    /// Writes a file of the initramfs from `text`, with `mode`.
    fn write(&mut self, name: &str, text: &str, mode: u32) -> Result<(), Error> {
        let file = self.root.with_file_name(format!("initramfs-{name}"));
        fs::write(&file, text).map_err(|e| io("cannot write", &file, e))?;
        fs::set_permissions(&file, fs::Permissions::from_mode(mode))
            .map_err(|e| io("cannot set the mode of", &file, e))?;
        self.place(&file, name)
    }

    /// Makes a folder of the initramfs.
    fn dir(&mut self, name: &str) -> Result<(), Error> {
        let path = self.root.join(name);
        fs::create_dir_all(&path).map_err(|e| io("cannot create", &path, e))?;
        self.entries.insert(PathBuf::from(name));
        Ok(())
    }

    fn archive(&self, busybox: &Path, out: &Path) -> Result<(), Error> {
        let list: String = self
            .entries
            .iter()
            .map(|p| format!("{}\n", p.display()))
            .collect();
        let archive = fs::File::create(out).map_err(|e| io("cannot create", out, e))?;
        let mut child = Command::new(busybox)
            .args(["cpio", "-o", "-H", "newc", "-L", "-R", "0:0"])
            .current_dir(&self.root)
            .stdin(Stdio::piped())
            .stdout(archive)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| io("cannot run", busybox, e))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(list.as_bytes())
                .map_err(|e| io("cannot feed", busybox, e))?;
        }
        let done = child
            .wait_with_output()
            .map_err(|e| io("cannot run", busybox, e))?;
        if !done.status.success() {
            return Err(Error::new(format!(
                "busybox cpio failed: {}",
                String::from_utf8_lossy(&done.stderr).trim()
            )));
        }
        Ok(())
    }
}

pub(crate) fn io(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::new(format!("{what} {}: {e}", path.display()))
}

/// A module's name from its file name (`dm-log-writes.ko`, `.ko.xz`, `.ko.zst`).
fn module_name(path: &Path) -> Option<String> {
    let file = path.file_name()?.to_str()?;
    ["ko", "ko.xz", "ko.zst"]
        .iter()
        .find_map(|ext| file.strip_suffix(&format!(".{ext}")))
        .map(str::to_string)
}

/// The module itself, or a decompressed copy in `work` (busybox's insmod takes plain
/// `.ko` files; Debian compresses modules from its 6.12 kernels on).
fn uncompressed(module: &Path, work: &Path) -> Result<PathBuf, Error> {
    let file = module.to_string_lossy();
    let tool_name = if file.ends_with(".ko.xz") {
        "xz"
    } else if file.ends_with(".ko.zst") {
        "zstd"
    } else {
        return Ok(module.to_path_buf());
    };
    let name = module_name(module).unwrap_or_default();
    let out = work.join(format!("module-{name}.ko"));
    let plain = fs::File::create(&out).map_err(|e| io("cannot create", &out, e))?;
    let status = Command::new(tool(tool_name)?)
        .arg("-dc")
        .arg(module)
        .stdout(plain)
        .status()
        .map_err(|e| io("cannot decompress", module, e))?;
    if !status.success() {
        return Err(Error::new(format!("{tool_name} cannot decompress {file}")));
    }
    Ok(out)
}

/// The shared libraries (and the loader) `ldd` says `bin` needs; none for a static binary.
fn shared_libraries(bin: &Path) -> Result<Vec<PathBuf>, Error> {
    let out = Command::new(tool("ldd")?)
        .arg(bin)
        .output()
        .map_err(|e| Error::new(format!("cannot run ldd: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|line| {
            let path = match line.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => line.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

/// How long a guest may take before it counts as hung.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(900);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names_drop_the_extension_whatever_the_compression() {
        for file in [
            "kernel/drivers/md/dm-log-writes.ko",
            "dm-log-writes.ko.xz",
            "dm-log-writes.ko.zst",
        ] {
            assert_eq!(
                module_name(Path::new(file)).as_deref(),
                Some("dm-log-writes")
            );
        }
        assert_eq!(module_name(Path::new("modules.builtin")), None);
    }

    #[test]
    fn depends_lists_the_modules_a_module_needs() {
        let ko = b"\0license=GPL\0depends=dm-mod,virtio\0name=x\0";
        assert_eq!(depends(ko), ["dm-mod", "virtio"]);
        assert!(depends(b"\0depends=\0").is_empty());
        assert!(depends(b"no field").is_empty());
    }
}
