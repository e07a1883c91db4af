//! Mirror roots: a host's copy of the documents a shared store publishes.
//!
//! A mirror root is an ordinary publish root (its own `.fencepost/` state file, the same
//! staging, rename, fsyncs and crash recovery) whose state file is bound to one store's
//! identity. Each version is applied through the local fenced write under the epoch the
//! store gave it, so the local fence only rises: an older version applied late, or
//! twice, is refused locally as `stale` (or is a replay), whatever order hosts see
//! versions in. A mirror root takes no claim or write of its own.
//!
//! Two edges. A mirror may hold a version the store no longer knows (the store lost
//! history: a failover without synchronous replication, a restore): it is `ahead`, is
//! left as it is, and tells the store the epoch it holds (raising the store's fence to
//! it), so the store's next claim issues an epoch above it. And every version a mirror applies was committed in the
//! store first, so a crashed apply is rolled forward (kept and recorded), never back: a
//! reader who saw it never sees the older version again.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::atomic::Source;
use crate::document::DocState;
pub use crate::document::Look;
use crate::error::{Error, Result};
use crate::outcome::{Applied, Mirrored, Outcome};
use crate::publish::WriteRequest;
use crate::resource::{Resource, STATE_DIR};
use crate::session::{Ctx, MIRROR_OF, MIRROR_URL, Remote, bound, local};
use crate::sink::{Content, Recovery};
use crate::store::{Published, SharedStore, WriteRecord};

/// Brings the mirror root up to the store: every published resource, or only `only`.
/// Applies what is newer and reports each resource it looked at.
pub fn sync(
    ctx: &Ctx,
    store: &mut dyn SharedStore,
    only: Option<&str>,
    look: Look,
) -> Result<Mirrored> {
    pass(ctx, store, only, look, None)
}

/// [`sync`], ending early once `stop` is set: between two applies, never inside one.
/// A pass cut short lists what it applied and looks no further (it reports nothing
/// `ahead`: it did not see everything).
fn pass(
    ctx: &Ctx,
    store: &mut dyn SharedStore,
    only: Option<&str>,
    look: Look,
    stop: Option<&AtomicBool>,
) -> Result<Mirrored> {
    let stopped = || stop.is_some_and(|s| s.load(Ordering::SeqCst));
    let remote = ctx
        .remote
        .as_ref()
        .ok_or(Error::Internal("a mirror without a store"))?;
    let wanted = {
        let tx = store.snapshot()?;
        match only {
            Some(name) => tx.published(name)?.into_iter().collect(),
            None => tx.all_published()?,
        }
    };
    let mirror = local(ctx);
    let mut done = Mirrored {
        root: ctx.root.display().to_string(),
        store: remote.url.shown.clone(),
        applied: Vec::new(),
    };
    if wanted.is_empty() {
        // Nothing to copy; a root bound to another store is still refused.
        check_binding(&mirror, store, remote, None)?;
    }
    for published in &wanted {
        if stopped() {
            return Ok(done);
        }
        // One document this host cannot hold (its path is a file here, or a symlink)
        // must not keep the others from being copied.
        let applied = match apply(&mirror, store, remote, published, look) {
            Ok(applied) => applied,
            Err(
                e @ (Error::Remote { .. }
                | Error::OutcomeUnknown { .. }
                | Error::RemoteBusy { .. }
                | Error::Internal(_)),
            ) => {
                return Err(e);
            }
            Err(e) => Applied {
                resource: published.resource.clone(),
                epoch: published.epoch,
                seq: published.seq,
                removed: published.removed,
                sha256: published.sha256.clone(),
                outcome: "failed",
                error: Some(e.to_string()),
                code: e.exit_code(),
            },
        };
        done.applied.push(applied);
    }
    // What the mirror holds of a resource the store publishes nothing of: lost with the
    // store's history (its first version, or the resource altogether).
    for (name, held) in records(ctx)? {
        if only.is_some_and(|o| o != name) || wanted.iter().any(|p| p.resource == name) {
            continue;
        }
        let mut why = ahead_message(&held, None);
        if let Err(e) = report_ahead(&mirror, store, &name, held.epoch) {
            why.push_str(&format!("; could not tell the store: {e}"));
        }
        done.applied.push(Applied {
            resource: name,
            epoch: held.epoch,
            seq: held.seq,
            removed: held.removed,
            sha256: held.sha256,
            outcome: "ahead",
            error: Some(why),
            code: 9,
        });
    }
    Ok(done)
}

/// After a write through the store on a host with a mirror root: brings that document
/// up at once. The write is published already, so a failure here is a warning (the
/// next `mirror` applies it).
pub fn apply_after_write(ctx: &Ctx, store: &mut dyn SharedStore, resource: &Resource) {
    let why = match sync(ctx, store, Some(resource.as_str()), Look::Identity) {
        Err(e) => e.to_string(),
        Ok(done) => match done.applied.into_iter().find_map(|a| a.error) {
            Some(why) => why,
            None => return,
        },
    };
    ctx.warn(&format!(
        "published, but the mirror at {} was not updated: {why}",
        ctx.root.display()
    ));
}

/// How the version a mirror root holds of a resource stands to the one the store
/// publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// The same epoch and bytes.
    Current,
    /// Nothing yet, or an older epoch: the next apply brings it up.
    Behind,
    /// A higher epoch, or the same epoch with other bytes: a version the store does not
    /// know. The store lost history; applying its version would go back.
    Ahead,
}

/// A version as mirrors compare them: its place `(epoch, seq)` and its body, the bytes'
/// SHA-256 (empty for a removal).
pub type Version<'a> = ((i64, i64), &'a str);

/// The version a record holds.
#[must_use]
pub fn version_of(content: &Content) -> Version<'_> {
    (content.version(), &content.sha256)
}

/// The rule: the mirror's `held` version against the store's `published` one, in
/// `(epoch, seq)` order. An unfenced version (the reproduction's unprotected sink) is
/// applied as it lands, so it is never judged ahead.
#[must_use]
pub fn standing(held: Option<Version<'_>>, published: Version<'_>, unfenced: bool) -> Standing {
    match held {
        None => Standing::Behind,
        Some(held) if held == published => Standing::Current,
        Some(_) if unfenced => Standing::Behind,
        // Higher, or the same place with another body: the store reissued a version it
        // had lost.
        Some((at, _)) if at >= published.0 => Standing::Ahead,
        Some(_) => Standing::Behind,
    }
}

/// A version's place in words: `epoch 3`, `epoch 3 seq 2`.
#[must_use]
pub fn place((epoch, seq): (i64, i64)) -> String {
    if seq == 0 {
        format!("epoch {epoch}")
    } else {
        format!("epoch {epoch} seq {seq}")
    }
}

/// A version's body in words: `sha 0123456789ab`, or `a removal`.
fn body(sha256: &str) -> String {
    if sha256.is_empty() {
        "a removal".to_string()
    } else {
        format!("sha {}", short(sha256))
    }
}

/// What `ahead` says: what the mirror holds, what the store publishes (`None`: nothing
/// of this resource), and why.
#[must_use]
pub fn ahead_message(held: &Content, published: Option<Version<'_>>) -> String {
    let publishes = match published {
        None => "nothing of it".to_string(),
        Some((at, "")) if at == held.version() => format!("{} as a removal", place(at)),
        Some((at, sha)) if at == held.version() => {
            format!("{} with other bytes (sha {})", place(at), short(sha))
        }
        Some((at, _)) => place(at),
    };
    format!(
        "the mirror holds {} ({}), the store publishes {publishes}: the store lost \
         history (a failover without synchronous replication, or a restore); the mirror's \
         copy is left as it is",
        place(held.version()),
        body(&held.sha256)
    )
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// This mirror root's name in the store's `fencepost_seen`: host and root.
fn mirror_id(mirror: &Ctx) -> String {
    format!("{}:{}", crate::audit::hostname(), mirror.root.display())
}

/// Tells the store that this mirror is ahead: it holds `epoch` of `resource`, which the
/// store's sink once accepted and has lost. (Only then: a report made at each apply
/// would be committed after the version it reports, so a store that lost the version
/// lost the report too.) Besides the report, the sink's fence is
/// raised to it under the resource's lock, as it was before the loss: a write under an
/// older epoch (a holder whose lease the store forgot was superseded) is `stale` again.
pub fn report_ahead(
    mirror: &Ctx,
    store: &mut dyn crate::store::Store,
    resource: &str,
    epoch: i64,
) -> Result<()> {
    let name = mirror.stored(resource)?;
    let tx = store.immediate()?;
    tx.lock(&name)?;
    tx.report_seen(resource, &mirror_id(mirror), epoch)?;
    tx.raise_fence(&name, epoch)?;
    tx.commit()
}

/// The mirror's record of `resource`, if any.
fn held(mirror: &Ctx, resource: &Resource) -> Result<Option<Content>> {
    let Some(mut local) = crate::store::open_read_only(&mirror.db, mirror.busy)? else {
        return Ok(None);
    };
    let tx = local.snapshot()?;
    Ok(tx.sink(resource)?.and_then(|r| r.content))
}

/// Applies one published version to the mirror, unless it holds it already.
fn apply(
    mirror: &Ctx,
    store: &mut dyn SharedStore,
    remote: &Remote,
    published: &Published,
    look: Look,
) -> Result<Applied> {
    let resource = mirror.stored(&published.resource)?;
    check_binding(mirror, store, remote, Some(&resource))?;
    let seen = |outcome: &'static str| Applied {
        resource: published.resource.clone(),
        epoch: published.epoch,
        seq: published.seq,
        removed: published.removed,
        sha256: published.sha256.clone(),
        outcome,
        error: None,
        code: 0,
    };
    let recorded = held(mirror, &resource)?;
    let pair = published.version();
    let held_pair = recorded.as_ref().map(version_of);
    if let Some(c) = recorded.as_ref()
        && standing(held_pair, pair, published.unfenced) == Standing::Ahead
    {
        let mut why = ahead_message(c, Some(pair));
        if let Err(e) = report_ahead(mirror, store, &published.resource, c.epoch) {
            why.push_str(&format!("; could not tell the store: {e}"));
        }
        return Ok(Applied {
            error: Some(why),
            code: 9,
            ..seen("ahead")
        });
    }
    if up_to_date(mirror, &resource, recorded.as_ref(), published, look)? {
        return Ok(seen("current"));
    }
    if published.removed {
        return apply_removal(mirror, published).map(seen);
    }
    if published.tree {
        return apply_tree(mirror, store, published).map(seen);
    }
    if roll_forward(mirror, &resource, published)?.is_some() {
        return Ok(seen("applied"));
    }
    let incoming = download(mirror, store, published)?;
    let request = WriteRequest {
        from: Some(&incoming.path),
        allow_empty: true,
        // An unfenced version (the unprotected sink, kept to reproduce the failure it
        // allows) lands on mirrors as it landed in the store.
        unfenced: published.unfenced,
        ..applied_request(published)
    };
    let opened = || {
        std::fs::File::open(&incoming.path)
            .map(Source::File)
            .map_err(Error::io("cannot open", incoming.path.clone()))
    };
    pass_word(crate::publish::write(mirror, &request, opened)).map(seen)
}

/// The local request that applies `published` to a mirror root under the store's
/// version (a document's, a removal's or a tree's; a document's gives its file).
fn applied_request(published: &Published) -> WriteRequest<'_> {
    WriteRequest {
        resource: std::ffi::OsStr::new(&published.resource),
        epoch: published.epoch,
        seq: published.seq,
        owner: published.owner.as_deref(),
        from: None,
        allow_empty: false,
        unfenced: false,
        applied: true,
    }
}

/// What an apply's local answer is in the pass: `applied` (the version was published
/// here), `current` (a replay: the mirror held it), `stale` (the mirror holds a newer
/// version: this one came late), or the error.
fn pass_word(answer: Result<Outcome>) -> Result<&'static str> {
    match answer {
        Ok(Outcome::Written(_) | Outcome::Removed(_)) => Ok("applied"),
        Ok(_) => Ok("current"),
        Err(Error::Refused(r)) if r.kind() == crate::refusal::RefusalKind::Stale => Ok("stale"),
        Err(e) => Err(e),
    }
}

/// Applies a removal the store published: the mirror removes its copy under the same
/// version, its local fence only rising. A crashed removal apply is kept by the local
/// recovery (a mirror rolls forward), and this records it.
fn apply_removal(mirror: &Ctx, published: &Published) -> Result<&'static str> {
    pass_word(crate::publish::remove(mirror, &applied_request(published)))
}

/// Applies a tree the store published: its manifest and files are downloaded into a
/// folder of the mirror's `.fencepost/` (each checked against its SHA-256), which the
/// local tree publish then stages and swaps in under the same version. A crashed apply
/// is kept by the local recovery (a mirror rolls forward), and the next one records it.
fn apply_tree(
    mirror: &Ctx,
    store: &mut dyn SharedStore,
    published: &Published,
) -> Result<&'static str> {
    let mut bytes = Vec::new();
    store.read(published, &mut bytes)?;
    let manifest = crate::tree::Manifest::parse(&bytes)?;
    let incoming = IncomingTree::make(&mirror.root.join(STATE_DIR))?;
    let manifest_blob = published
        .blob
        .ok_or(Error::Internal("a published tree has no manifest"))?;
    download_tree(store, &incoming, &manifest, manifest_blob)?;
    let keep_old = crate::recovery::keep_old(mirror.clock.kind());
    let tree = crate::publish::TreeRequest {
        src: &incoming.path,
        allow_symlinks: true,
        keep_old,
        // The store took the tree within its writer's limits.
        limits: crate::tree::Limits {
            entries: u64::MAX,
            bytes: u64::MAX,
            depth: usize::MAX,
        },
    };
    pass_word(crate::publish::write_tree(
        mirror,
        &applied_request(published),
        &tree,
    ))
}

/// A tree downloaded into the mirror's `.fencepost/`, removed when dropped.
struct IncomingTree {
    parent: crate::folder::Folder,
    name: std::ffi::OsString,
    path: PathBuf,
}

impl IncomingTree {
    fn make(dir: &Path) -> Result<IncomingTree> {
        let parent = crate::folder::Folder::open(dir)?;
        loop {
            let name: std::ffi::OsString =
                format!("incoming-{}-{:08x}", std::process::id(), fastrand::u32(..)).into();
            if !parent.make_child(&name)? {
                continue;
            }
            let path = dir.join(&name);
            return Ok(IncomingTree { parent, name, path });
        }
    }
}

impl Drop for IncomingTree {
    fn drop(&mut self) {
        let _ = crate::tree::remove_tree(&self.parent, &self.name);
    }
}

/// Makes the tree `manifest` describes in `into`, its contents read from the store:
/// folders first (in the manifest's order, each after its parent), then files and
/// symlinks, then the folders' modes, deepest first.
fn download_tree(
    store: &mut dyn SharedStore,
    into: &IncomingTree,
    manifest: &crate::tree::Manifest,
    manifest_blob: i64,
) -> Result<()> {
    use crate::tree::ItemKind;
    use std::os::unix::ffi::OsStrExt;
    let mut folders: Vec<(Vec<u8>, crate::folder::Folder, u32)> = Vec::new();
    for item in &manifest.items {
        let (parent_path, name) = match item.path.iter().rposition(|b| *b == b'/') {
            Some(i) => (&item.path[..i], &item.path[i + 1..]),
            None => (&b""[..], &item.path[..]),
        };
        if item.path.is_empty() {
            let top = crate::folder::Folder::open(&into.path)?;
            folders.push((Vec::new(), top, item.mode));
            continue;
        }
        let parent = folders
            .iter()
            .find(|(p, _, _)| p.as_slice() == parent_path)
            .map(|(_, f, _)| f)
            .ok_or(Error::Internal(
                "a tree manifest names an entry before its folder",
            ))?;
        let name = std::ffi::OsStr::from_bytes(name);
        match item.kind {
            ItemKind::Folder => {
                parent.make_child(name)?;
                let crate::folder::Child::Folder(made) = parent.child(name)? else {
                    return Err(Error::Internal("a downloaded folder is not a folder"));
                };
                folders.push((item.path.clone(), made, item.mode));
            }
            ItemKind::File => {
                let mut file = parent
                    .create_file(name, 0o600)?
                    .ok_or(Error::Internal("a tree manifest names an entry twice"))?;
                store.read_blob(manifest_blob, &item.sha256, item.size, &mut file)?;
                rustix::fs::fchmod(&file, rustix::fs::Mode::from_raw_mode(item.mode))
                    .map_err(|e| Error::io("cannot set mode of", parent.join(name))(e.into()))?;
            }
            ItemKind::Symlink => {
                let mut target = Vec::new();
                store.read_blob(manifest_blob, &item.sha256, item.size, &mut target)?;
                parent
                    .symlink(std::ffi::OsStr::from_bytes(&target), name)
                    .map_err(Error::io("cannot create the symlink", parent.join(name)))?;
            }
        }
    }
    for (_, folder, mode) in folders.iter().rev() {
        rustix::fs::fchmod(folder, rustix::fs::Mode::from_raw_mode(*mode))
            .map_err(|e| Error::io("cannot set mode of", folder.path())(e.into()))?;
    }
    Ok(())
}

/// Rolls forward a crashed apply of `published`: the document is the file that apply
/// renamed into place, its bytes are the store's version (a mirror only applies versions
/// the store committed), but the mirror's own COMMIT never happened. Records it as
/// applied and removes the apply's links, under the mirror's lock. Returns the epoch
/// rolled forward, or `None` when there was no such apply (or its bytes are another
/// version's: the local recovery then keeps them too, and the next apply replaces them).
pub fn roll_forward(
    mirror: &Ctx,
    resource: &Resource,
    published: &Published,
) -> Result<Option<i64>> {
    // A path this host cannot hold is the apply's to report, in the write's words.
    let Ok(Some(doc)) = crate::resource::locate(&mirror.root, resource, false) else {
        return Ok(None);
    };
    let sets = crate::atomic::link_sets(&doc)?;
    if sets.is_empty() {
        return Ok(None);
    }
    let Some(mut local) = crate::store::open(&mirror.db, mirror.busy, false)? else {
        return Ok(None);
    };
    let tx = local.immediate()?;
    let record = tx.sink(resource)?;
    // A version the local sink would refuse as stale is never recorded over a newer one.
    if !published.unfenced && record.as_ref().is_some_and(|r| r.fence > published.epoch) {
        return Ok(None);
    }
    let recorded = record
        .as_ref()
        .and_then(|r| r.content.as_ref())
        .and_then(crate::sink::Recorded::of);
    for set in sets {
        if crate::atomic::writer_alive(&doc, &set) {
            continue;
        }
        let found = crate::atomic::leftovers(&doc, &set)?;
        let action = crate::sink::recovery(recorded, found);
        if !matches!(action, Recovery::RestorePre | Recovery::RemoveDoc) {
            continue;
        }
        let (sha256, size) = crate::atomic::hash_document(&doc)?;
        if sha256 != published.sha256 || !crate::atomic::still_staged(&doc, &set, &sha256) {
            continue;
        }
        let content = Content {
            epoch: published.epoch,
            seq: published.seq,
            removed: false,
            tree: false,
            sha256,
            size,
            written_at: mirror.now(),
            file: found.new,
        };
        let fence =
            crate::sink::fence_after_write(record.as_ref(), published.epoch, published.unfenced);
        tx.record_write(
            resource,
            &WriteRecord {
                fence,
                content: &content,
                owner: published.owner.as_deref(),
                blob: None,
                unfenced: published.unfenced,
                manifest: None,
            },
        )?;
        let event = crate::audit::Event::new(
            content.written_at,
            resource.as_str(),
            crate::audit::EventKind::Write,
        )
        .owner(published.owner.as_deref())
        .epoch(Some(published.epoch))
        .previous(None, record.as_ref().map(|r| r.fence))
        .sha256(Some(&content.sha256))
        .detail("rolled forward: a crashed apply of the store's committed version");
        mirror.log(&*tx, &event)?;
        tx.commit()?;
        crate::atomic::drop_set(&doc, &set);
        return Ok(Some(published.epoch));
    }
    Ok(None)
}

/// Whether the mirror's state file records this version and its document holds it.
/// `recorded`: the mirror's record of it. A document this host cannot look at is the
/// pass's error.
fn up_to_date(
    mirror: &Ctx,
    resource: &Resource,
    recorded: Option<&Content>,
    published: &Published,
    look: Look,
) -> Result<bool> {
    let Some(recorded) = recorded else {
        return Ok(false);
    };
    if version_of(recorded) != published.version() {
        return Ok(false);
    }
    let found = crate::document::examine(&crate::document::Examine {
        root: &mirror.root,
        resource,
        recorded: Some(recorded),
        look,
        // A crashed apply is rolled forward by the pass, not judged here.
        recovery: false,
        debris: false,
        is_state_file: &|_| Ok(false),
    });
    match (found.state, found.why) {
        (DocState::Matches | DocState::Removed, _) => Ok(true),
        (_, Some(why)) => Err(why),
        _ => Ok(false),
    }
}

/// Binds the mirror root's state file to the store on first use (creating the root with
/// its first document), and refuses a root bound to another store or one with leases
/// of its own.
fn check_binding(
    mirror: &Ctx,
    store: &mut dyn SharedStore,
    remote: &Remote,
    resource: Option<&Resource>,
) -> Result<()> {
    let id = store
        .identity()
        .ok_or(Error::Internal("a shared store without an identity"))?
        .to_string();
    let Some(resource) = resource else {
        return crate::session::check_mirror_root(mirror, remote, &id);
    };
    let mut local = mirror.create_store(resource)?;
    let tx = local.immediate()?;
    if !bound(mirror, remote, &*tx, &id)? {
        tx.set_meta_bytes(MIRROR_OF, id.as_bytes())?;
        tx.set_meta_bytes(MIRROR_URL, remote.url.shown.as_bytes())?;
        tx.commit()?;
    }
    Ok(())
}

/// A downloaded version, removed when dropped.
struct Incoming {
    path: PathBuf,
}

impl Drop for Incoming {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Streams the version's bytes from the store into a file in the mirror's `.fencepost/`
/// (checked against the recorded SHA-256 on the way), from which the local write copies
/// them.
fn download(mirror: &Ctx, store: &mut dyn SharedStore, published: &Published) -> Result<Incoming> {
    let dir = mirror.root.join(STATE_DIR);
    let (file, path) = temp_in(&dir)?;
    let incoming = Incoming { path };
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    store.read(published, &mut out)?;
    out.flush()
        .map_err(Error::io("cannot write", incoming.path.clone()))?;
    Ok(incoming)
}

/// A new file of this process's own in `dir`.
fn temp_in(dir: &Path) -> Result<(std::fs::File, PathBuf)> {
    loop {
        let path = dir.join(format!(
            "incoming-{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => return Ok((file, path)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io("cannot create", path)(e)),
        }
    }
}

/// A mirror root's follower lock: `.fencepost/follow.lock`, `flock`ed for the life of
/// [`follow`] and naming its pid. Two followers of one root would apply every version
/// twice and race their retries; a single `mirror` pass beside a follower is safe (each
/// apply is fenced and takes the root's write lock), so it does not take this lock.
/// Released when dropped, or by the kernel when the process dies.
#[derive(Debug)]
pub struct FollowLock {
    _file: std::fs::File,
}

/// Where a root's follower lock lives.
pub const FOLLOW_LOCK: &str = "follow.lock";

/// Takes the mirror root's follower lock, or refuses (`Error::Following`, exit 3) while
/// another process holds it, naming that process when its pid can be read.
pub fn lock_follower(ctx: &Ctx) -> Result<FollowLock> {
    let dir = ctx.root.join(STATE_DIR);
    match std::fs::create_dir(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(Error::io("cannot create", dir)(e));
        }
        _ => {}
    }
    let path = dir.join(FOLLOW_LOCK);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(Error::io("cannot open", path.clone()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let pid = std::fs::read_to_string(&path)
                .ok()
                .and_then(|text| text.trim().parse().ok());
            return Err(Error::Following {
                root: ctx.root.clone(),
                pid,
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("cannot lock", path)(e)),
    }
    // The pid is for the refusal's message only: the lock itself is the flock.
    file.set_len(0)
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .map_err(Error::io("cannot write", path))?;
    Ok(FollowLock { _file: file })
}

/// How often a wait looks at `stop`: a signal ends the follower within this.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// Sleeps for `total`, or until `stop` is set; returns whether it was.
fn nap(total: Duration, stop: &AtomicBool) -> bool {
    let until = std::time::Instant::now() + total;
    loop {
        if stop.load(Ordering::SeqCst) {
            return true;
        }
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(STOP_CHECK));
    }
}

/// `fencepost mirror --follow`, under the root's follower lock (`_lock`): applies, then
/// waits for the store's notifications and applies what they name; on a broken
/// connection reconnects with back-off and applies everything again (notifications sent
/// meanwhile are lost). A store without its schema yet (no claim was ever made) is
/// waited for, polled with back-off. `rescan`: the longest wait without a full pass.
/// Runs until `stop` is set (a signal, for the command line), which it looks at between
/// two applies and during every wait: an apply under way is finished first, so the root
/// is left whole. Each pass's report goes to `report`.
pub fn follow(
    ctx: &Ctx,
    _lock: &FollowLock,
    rescan: Duration,
    stop: &AtomicBool,
    mut report: impl FnMut(&Mirrored),
) -> Result<()> {
    let mut backoff = Duration::from_millis(100);
    let mut said_empty = false;
    while !stop.load(Ordering::SeqCst) {
        let connected = ctx.remote_store();
        let mut store = match connected {
            Ok(Some(store)) => store,
            Ok(None) => {
                if !said_empty {
                    said_empty = true;
                    let shown = ctx.remote.as_ref().map_or("", |r| r.url.shown.as_str());
                    ctx.warn(&format!(
                        "the store {shown} has no fencepost state yet; waiting for its first \
                         claim"
                    ));
                }
                nap(backoff, stop);
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
            Err(e @ (Error::Usage { .. } | Error::Internal(_))) => return Err(e),
            Err(e) => {
                warn_retry(ctx, &e, backoff);
                nap(backoff, stop);
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        let session = run_session(ctx, &mut *store, rescan, stop, &mut report, &mut backoff);
        match session {
            Err(e @ (Error::Usage { .. } | Error::Internal(_) | Error::Io { .. })) => {
                return Err(e);
            }
            Err(e) => {
                warn_retry(ctx, &e, backoff);
                nap(backoff, stop);
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
            Ok(()) => {}
        }
    }
    Ok(())
}

/// Documents whose last apply failed (a damaged blob, a path this host cannot hold), by
/// name: when to try each again, and the back-off after that. They never hold up the
/// others: each is retried on its own, between the notifications.
#[derive(Debug, Default)]
struct Retries(std::collections::BTreeMap<String, (std::time::Instant, Duration)>);

impl Retries {
    /// Takes in a pass's outcomes: a failure is scheduled (its back-off doubled, from
    /// 0.1 s up to 10 s), anything else clears the document. A document this host cannot
    /// hold (bad input here, exit 2: its path is a file, or reaches through a symlink)
    /// waits for the next full pass instead: only someone's change on this host fixes it.
    fn note(&mut self, pass: &Mirrored) {
        for a in &pass.applied {
            if a.outcome == "failed" && a.code != 2 {
                let next = self
                    .0
                    .get(&a.resource)
                    .map_or(Duration::from_millis(100), |(_, b)| {
                        (*b * 2).min(Duration::from_secs(10))
                    });
                self.0
                    .insert(a.resource.clone(), (std::time::Instant::now() + next, next));
            } else {
                self.0.remove(&a.resource);
            }
        }
    }

    /// How long until the next retry is due, if any.
    fn next_in(&self) -> Option<Duration> {
        let now = std::time::Instant::now();
        self.0
            .values()
            .map(|(at, _)| at.saturating_duration_since(now))
            .min()
    }

    /// The documents due for a retry now.
    fn due(&self) -> Vec<String> {
        let now = std::time::Instant::now();
        self.0
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(name, _)| name.clone())
            .collect()
    }
}

/// One connection's life in `follow`: listen, a full pass, then passes for what the
/// notifications name (a full pass again every `rescan`), and retries of the documents
/// that failed. Returns on a store error.
fn run_session(
    ctx: &Ctx,
    store: &mut dyn SharedStore,
    rescan: Duration,
    stop: &AtomicBool,
    report: &mut impl FnMut(&Mirrored),
    backoff: &mut Duration,
) -> Result<()> {
    let stopped = || stop.load(Ordering::SeqCst);
    store.listen()?;
    let mut retries = Retries::default();
    let first = pass(ctx, store, None, Look::Identity, Some(stop))?;
    retries.note(&first);
    report(&first);
    let mut last_full = std::time::Instant::now();
    *backoff = Duration::from_millis(100);
    while !stopped() {
        let until_rescan = rescan.saturating_sub(last_full.elapsed());
        let timeout = retries
            .next_in()
            .map_or(until_rescan, |r| r.min(until_rescan));
        // Waited in slices, so that a signal is seen while nothing is published.
        let names = store.wait(timeout.min(STOP_CHECK))?;
        if stopped() {
            break;
        }
        if names.is_empty() && timeout > STOP_CHECK {
            continue;
        }
        if names.is_empty() && last_full.elapsed() >= rescan {
            let full = pass(ctx, store, None, Look::Identity, Some(stop))?;
            retries.note(&full);
            report(&full);
            last_full = std::time::Instant::now();
            continue;
        }
        let mut names = names;
        names.sort();
        names.dedup();
        for name in names {
            if stopped() {
                break;
            }
            let one = pass(ctx, store, Some(&name), Look::Identity, Some(stop))?;
            retries.note(&one);
            report(&one);
        }
        for name in retries.due() {
            if stopped() {
                break;
            }
            let again = pass(ctx, store, Some(&name), Look::Identity, Some(stop))?;
            retries.note(&again);
            // A document that failed again is not news: its first failure was reported.
            if again.applied.iter().any(|a| a.outcome != "failed") {
                report(&again);
            }
            if again.applied.is_empty() {
                retries.0.remove(&name);
            }
        }
    }
    Ok(())
}

fn warn_retry(ctx: &Ctx, e: &Error, backoff: Duration) {
    ctx.warn(&format!(
        "{e}; trying again in {:.1}s",
        backoff.as_secs_f64()
    ));
}

/// Removes the downloads (`.fencepost/incoming-PID-*`) of processes that are gone: a
/// `mirror` killed mid-download leaves one. Returns how many.
pub fn remove_dead_downloads(ctx: &Ctx) -> Result<usize> {
    let dir = ctx.root.join(STATE_DIR);
    let entries = std::fs::read_dir(&dir).map_err(Error::io("cannot read folder", dir.clone()))?;
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("incoming-"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // EPERM: alive, another user's.
        let alive = pid <= 0
            || !matches!(
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
                Err(nix::errno::Errno::ESRCH)
            );
        let gone = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            // A tree's download.
            crate::folder::Folder::open(&dir)
                .and_then(|d| crate::tree::remove_tree(&d, &name))
                .is_ok()
        } else {
            std::fs::remove_file(entry.path()).is_ok()
        };
        if !alive && gone {
            removed += 1;
        }
    }
    Ok(removed)
}

/// The mirror root's recorded contents, by resource name.
pub fn records(ctx: &Ctx) -> Result<Vec<(String, Content)>> {
    let Some(mut local) = crate::store::open_read_only(&ctx.db, ctx.busy)? else {
        return Ok(Vec::new());
    };
    let tx = local.snapshot()?;
    let mut held = Vec::new();
    for name in tx.resources()? {
        if let Some(content) = tx.sink_named(&name)?.and_then(|s| s.content) {
            held.push((name, content));
        }
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::{Standing, standing};

    #[test]
    fn a_mirror_is_ahead_when_it_holds_a_version_the_store_does_not_know() {
        let published = ((2, 0), "bb");
        assert_eq!(standing(None, published, false), Standing::Behind);
        assert_eq!(
            standing(Some(((1, 0), "aa")), published, false),
            Standing::Behind
        );
        assert_eq!(
            standing(Some(((2, 0), "bb")), published, false),
            Standing::Current
        );
        assert_eq!(
            standing(Some(((3, 0), "cc")), published, false),
            Standing::Ahead
        );
        // The same epoch with other bytes: the store reissued an epoch it had lost.
        assert_eq!(
            standing(Some(((2, 0), "aa")), published, false),
            Standing::Ahead
        );
        // An unfenced version lands as it is published, whatever the mirror holds.
        assert_eq!(
            standing(Some(((3, 0), "cc")), published, true),
            Standing::Behind
        );
    }

    #[test]
    fn a_mirror_orders_versions_by_epoch_then_seq() {
        let published = ((2, 3), "bb");
        assert_eq!(
            standing(Some(((2, 2), "aa")), published, false),
            Standing::Behind
        );
        assert_eq!(
            standing(Some(((2, 4), "cc")), published, false),
            Standing::Ahead
        );
        assert_eq!(
            standing(Some(((1, 9), "cc")), published, false),
            Standing::Behind
        );
        // A removal published at the place the mirror holds bytes: another body.
        assert_eq!(
            standing(Some(((2, 3), "bb")), ((2, 3), ""), false),
            Standing::Ahead
        );
        assert_eq!(
            standing(Some(((2, 3), "")), ((2, 3), ""), false),
            Standing::Current
        );
    }
}
