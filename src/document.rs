//! One document against the sink's record of it: where its path leads, whether a crashed
//! write awaits recovery beside it, and whether its bytes are the ones recorded. The
//! answer is a [`DocState`], decided here once for `status`, `verify` and the mirror's
//! passes; each reads the parts it needs from the same [`Examined`]. Looking changes
//! nothing on disk.

use std::path::Path;

use crate::atomic;
use crate::error::{Error, Result};
use crate::recovery::{self, Pending};
use crate::resource::{DocPath, Resource, locate};
use crate::sink::{Content, Recovery};

/// The state of a document against its record, as `status` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocState {
    /// Its bytes are the ones recorded.
    Matches,
    /// It was changed behind the tool's back (or, looked at by identity only, it is not
    /// the file that was recorded).
    Drifted,
    /// The recorded document is gone.
    Missing,
    /// The resource was removed (`fencepost remove`), and no file is there.
    Removed,
    /// The resource was removed, and a file is there again with no write recorded.
    Reappeared,
    /// A file exists but no write was recorded.
    Untracked,
    /// No file and no record.
    Absent,
    /// A mirror root's copy holds a version the store does not know.
    Ahead,
    /// A mirror root has not applied the version the store publishes yet.
    Behind,
    /// A crashed write awaits recovery.
    Interrupted,
    /// A writer is between its rename and its clean-up.
    InProgress,
    /// A symlink, folder or special file stands at the document's path.
    NotAFile,
    /// The path no longer leads to a document of this root.
    Unreachable,
    /// The path is the state file or one of its companions.
    StateFile,
    /// This user may not read the document or search a folder on its path.
    Unreadable,
    /// The stored name no longer passes the name rules.
    Invalid,
    /// The document could not be checked.
    CheckFailed,
    /// A shared store keeps the contents itself, and this host has no copy to compare.
    Stored,
}

impl DocState {
    /// The state's word in `status` and its `--json`.
    #[must_use]
    pub fn word(self) -> &'static str {
        match self {
            DocState::Matches => "matches",
            DocState::Drifted => "drifted",
            DocState::Missing => "missing",
            DocState::Removed => "removed",
            DocState::Reappeared => "reappeared",
            DocState::Untracked => "untracked",
            DocState::Absent => "absent",
            DocState::Ahead => "ahead",
            DocState::Behind => "behind",
            DocState::Interrupted => "interrupted",
            DocState::InProgress => "in-progress",
            DocState::NotAFile => "not-a-file",
            DocState::Unreachable => "unreachable",
            DocState::StateFile => "state-file",
            DocState::Unreadable => "unreadable",
            DocState::Invalid => "invalid",
            DocState::CheckFailed => "error",
            DocState::Stored => "stored",
        }
    }

    /// The state of no file: `Removed` when the record is a removal, `Missing` when a
    /// document was recorded, else `Absent`.
    #[must_use]
    pub fn gone(recorded: Option<&Content>) -> DocState {
        match recorded {
            Some(c) if c.removed => DocState::Removed,
            Some(_) => DocState::Missing,
            None => DocState::Absent,
        }
    }
}

/// How closely to look at a document's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// Hash a recorded document (unless a crashed write awaits recovery): an edit in
    /// place is found (`verify`, `mirror`).
    Hash,
    /// Hash any regular file there, recorded or not, so its SHA-256 and size can be shown
    /// (`status`).
    HashAny,
    /// Only check it is the file that was recorded, by inode and size, reading no
    /// document (`mirror --follow`'s passes, which a 1 GiB document would make slow).
    Identity,
}

/// What to look at, and how.
pub struct Examine<'a> {
    pub root: &'a Path,
    pub resource: &'a Resource,
    /// The sink's record of its content, if any.
    pub recorded: Option<&'a Content>,
    pub look: Look,
    /// Look for the links of a crashed write (a mirror's passes leave them to recovery).
    pub recovery: bool,
    /// Also count the temp files of dead writers beside it.
    pub debris: bool,
    /// True for the state file and its companions, which are never documents.
    pub is_state_file: &'a dyn Fn(&DocPath) -> Result<bool>,
}

impl std::fmt::Debug for Examine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Examine")
            .field("root", &self.root)
            .field("resource", &self.resource)
            .field("look", &self.look)
            .finish_non_exhaustive()
    }
}

/// What a look at a document found.
#[derive(Debug)]
pub struct Examined {
    pub state: DocState,
    /// The document, when its path led to one.
    pub doc: Option<DocPath>,
    /// What recovery would do for it, when it was looked for and could be found.
    pub pending: Option<Pending>,
    /// How many temp files of dead writers lie beside it, when they were counted.
    pub temps: Option<usize>,
    /// Its SHA-256 and size, when its bytes were read.
    pub hashed: Option<(String, u64)>,
    /// Why it is `Unreachable`, `NotAFile`, `Unreadable` or `CheckFailed`.
    pub why: Option<Error>,
    /// A tree's manifest as found on disk, when it was read.
    pub manifest: Option<crate::tree::Manifest>,
}

/// Looks at one document. A document that cannot be checked is a state of its own
/// (`Unreadable` for a permission denied, else `CheckFailed`), with what was found
/// before the failure kept.
#[must_use]
pub fn examine(what: &Examine<'_>) -> Examined {
    let mut found = Examined {
        state: DocState::Absent,
        doc: None,
        pending: None,
        temps: None,
        hashed: None,
        why: None,
        manifest: None,
    };
    if let Err(e) = look(what, &mut found) {
        found.state = if permission_denied(&e) {
            DocState::Unreadable
        } else {
            DocState::CheckFailed
        };
        found.why = Some(e);
    }
    found
}

fn look(what: &Examine<'_>, found: &mut Examined) -> Result<()> {
    let recorded = what.recorded;
    let doc = match locate(what.root, what.resource, false) {
        Ok(Some(doc)) => doc,
        Ok(None) => {
            found.state = DocState::gone(recorded);
            return Ok(());
        }
        // A folder on the way was replaced by a file, by a symlink leading outside the
        // root, or by another publish root.
        Err(e @ Error::Usage { .. }) => {
            found.state = DocState::Unreachable;
            found.why = Some(e);
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    if (what.is_state_file)(&doc)? {
        found.state = DocState::StateFile;
        return Ok(());
    }
    // A first tree publish has no record yet; its marker says what the folder is.
    let tree = match recorded {
        Some(c) => c.tree,
        None => what.recovery && recovery::tree_marked(&doc)?,
    };
    if tree {
        let looked = look_at_tree(what, &doc, found);
        found.doc = Some(doc);
        return looked;
    }
    let doc = found.doc.insert(doc);
    let entry = atomic::inspect_document(doc);
    if what.recovery {
        found.pending = Some(recovery::pending(
            doc,
            recorded.and_then(crate::sink::Recorded::of),
        )?);
    }
    if what.debris {
        found.temps = Some(atomic::abandoned_temps(doc)?);
    }
    let entry = match entry {
        Ok(Some(entry)) => entry,
        Ok(None) => {
            found.state = match found.pending {
                Some(p) if p.action == Recovery::RestoreRemoved => DocState::Interrupted,
                Some(p) if p.in_progress => DocState::InProgress,
                _ => DocState::gone(recorded),
            };
            return Ok(());
        }
        Err(e) => {
            found.state = DocState::NotAFile;
            found.why = Some(e);
            return Ok(());
        }
    };
    let pending = found.pending.unwrap_or(Pending {
        action: Recovery::Nothing,
        in_progress: false,
    });
    let interrupted = matches!(pending.action, Recovery::RestorePre | Recovery::RemoveDoc);
    let hash = match what.look {
        Look::HashAny => true,
        Look::Hash => recorded.is_some_and(|c| !c.removed) && !interrupted,
        Look::Identity => false,
    };
    if hash {
        found.hashed = Some(atomic::hash_document(doc)?);
    }
    found.state = if interrupted {
        DocState::Interrupted
    } else if pending.in_progress {
        // A writer between its rename and its clean-up: the document may already hold
        // its bytes before (or just after) their COMMIT. In progress, not drift.
        DocState::InProgress
    } else {
        against_record(what, recorded, &entry, found.hashed.as_ref())
    };
    Ok(())
}

/// [`look`] for a tree: the folder at the resource's name against the recorded tree (by
/// its hash, or by the folder's inode with `Look::Identity`), and a tree publish that
/// crashed or is in progress beside it.
fn look_at_tree(what: &Examine<'_>, doc: &DocPath, found: &mut Examined) -> Result<()> {
    let recorded = what.recorded;
    if what.debris {
        found.temps = Some(atomic::abandoned_temps(doc)?);
    }
    if what.recovery
        && let Some(pending) =
            recovery::pending_tree(doc, recorded.and_then(crate::sink::Recorded::of))?
    {
        found.pending = Some(pending);
        // As for a document: a swap recovery would undo is interrupted; a publish whose
        // writer lives is in progress; a committed publish's leftovers, or a staged tree
        // that never swapped in, leave the tree to be judged as it stands.
        if matches!(pending.action, Recovery::RestorePre | Recovery::RemoveDoc) {
            found.state = DocState::Interrupted;
            return Ok(());
        }
        if pending.in_progress {
            found.state = DocState::InProgress;
            return Ok(());
        }
    }
    let entry = match doc.folder.stat(&doc.name)? {
        None => {
            found.state = DocState::gone(recorded);
            return Ok(());
        }
        Some(e) if e.kind == crate::folder::Kind::Folder => e,
        Some(_) => {
            found.state = DocState::NotAFile;
            return Ok(());
        }
    };
    let Some(c) = recorded else {
        // A first publish's tree that recovery would keep (edited by hand since its crash).
        found.state = DocState::Untracked;
        return Ok(());
    };
    if c.removed {
        found.state = DocState::Reappeared;
        return Ok(());
    }
    let same = if what.look == Look::Identity {
        c.file.is_some_and(|f| f.ino == entry.ino)
    } else {
        let crate::folder::Child::Folder(dir) = doc.folder.child(&doc.name)? else {
            found.state = DocState::NotAFile;
            return Ok(());
        };
        let manifest = crate::tree::read_manifest(&dir)?;
        let sha256 = manifest.sha256();
        let same = sha256 == c.sha256;
        found.hashed = Some((sha256, manifest.size()));
        found.manifest = Some(manifest);
        same
    };
    found.state = if same {
        DocState::Matches
    } else {
        DocState::Drifted
    };
    Ok(())
}

/// A file found where `recorded` was written (`hashed`: its SHA-256, when read).
fn against_record(
    what: &Examine<'_>,
    recorded: Option<&Content>,
    entry: &crate::folder::Entry,
    hashed: Option<&(String, u64)>,
) -> DocState {
    match recorded {
        None => DocState::Untracked,
        Some(c) if c.removed => DocState::Reappeared,
        Some(c) => {
            let same = if what.look == Look::Identity {
                c.file
                    .is_some_and(|f| f.ino == entry.ino && f.size == entry.size)
            } else {
                hashed.is_some_and(|(sha256, _)| *sha256 == c.sha256)
            };
            if same {
                DocState::Matches
            } else {
                DocState::Drifted
            }
        }
    }
}

/// True for an I/O error that says this user may not read or search something.
fn permission_denied(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied)
}
