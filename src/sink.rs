//! The sink's rules: when may a write replace the document, and what does recovery do
//! after a crash. Pure functions over plain values; `publish::write` runs them inside the
//! same `BEGIN IMMEDIATE` transaction that renames the document and records the epoch.
//!
//! The sink keeps, per resource, its *fence* (the highest epoch it has accepted, from a
//! write or from a takeover claim) and the identity of the content it last wrote.

/// Identity of a file on disk: inode number and size. A committed write records the
/// identity of the file it renamed into place, so recovery can tell "this document is the
/// one the record describes" without hashing it. No device number: it changes when the
/// same filesystem is mounted through another device, and a committed write would then
/// look uncommitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    pub ino: u64,
    pub size: u64,
}

/// What the sink recorded about the content it wrote last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content {
    /// The epoch the content was written under.
    pub epoch: i64,
    /// Lower-case hex SHA-256 of the bytes.
    pub sha256: String,
    pub size: u64,
    /// When it was written, on the state file's clock.
    pub written_at: i64,
    /// The file that was renamed into place.
    pub file: Option<FileId>,
}

/// One resource's sink row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkRecord {
    /// Highest epoch accepted: by a fenced write or registered by a takeover claim.
    pub fence: i64,
    /// The content last written, if any.
    pub content: Option<Content>,
}

/// What the sink does with a write request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteDecision {
    /// Replace the document and record the epoch.
    Write,
    /// Same epoch, same bytes: success, the file is not rewritten.
    Replay,
    /// A newer epoch was accepted already.
    Stale { fence: i64 },
    /// Same epoch, different bytes: one value per epoch.
    Conflict { recorded_sha256: String },
    /// `claim` never issued this epoch for this resource.
    Unissued { issued: Option<i64> },
}

/// The fencing rule. `issued` is the highest epoch `claim` has issued for the resource
/// (`None` if never claimed); `sha256` is the hash of the bytes offered.
#[must_use]
pub fn decide(
    record: Option<&SinkRecord>,
    issued: Option<i64>,
    epoch: i64,
    sha256: &str,
    unfenced: bool,
) -> WriteDecision {
    if unfenced {
        return WriteDecision::Write;
    }
    if issued.is_none_or(|issued| epoch > issued) {
        return WriteDecision::Unissued { issued };
    }
    let Some(record) = record else {
        return WriteDecision::Write;
    };
    if epoch < record.fence {
        return WriteDecision::Stale {
            fence: record.fence,
        };
    }
    match &record.content {
        Some(content) if content.epoch == epoch && content.sha256 == sha256 => {
            WriteDecision::Replay
        }
        Some(content) if content.epoch == epoch => WriteDecision::Conflict {
            recorded_sha256: content.sha256.clone(),
        },
        _ => WriteDecision::Write,
    }
}

/// The fence after an accepted write: fenced writes raise it, `--unfenced` ones (a sink
/// without fencing, kept to reproduce the failure of docs/protocol.md) leave it where it
/// was.
#[must_use]
pub fn fence_after_write(record: Option<&SinkRecord>, epoch: i64, unfenced: bool) -> i64 {
    let old = record.map_or(0, |r| r.fence);
    if unfenced { old } else { old.max(epoch) }
}

/// What a crashed write left behind, as found by recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leftovers {
    /// The `-new` link: the file a writer was about to rename into place.
    pub new: Option<FileId>,
    /// Whether the `-pre` link (the document before that write) exists.
    pub pre: bool,
    /// The document as it is now.
    pub doc: Option<FileId>,
}

/// What recovery must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// No write was in flight.
    Nothing,
    /// The write committed, or never reached its rename: only remove the links.
    DropLinks,
    /// The rename happened but the commit did not: put the pre-image back.
    RestorePre,
    /// Same, for a first write: the document did not exist before, so remove it.
    RemoveDoc,
    /// On a mirror root, what would be either of the two above: the write was an apply of
    /// a version the shared store committed, so its document is kept (rolled forward,
    /// never back) and only the links are removed; the next apply records it.
    KeepApplied,
}

/// The recovery rule. A write links `-pre` to the old document and `-new` to its staged
/// file, renames, and commits the new file's identity. So: if the record names the `-new`
/// file, the commit happened; if the document is the `-new` file but the record does not
/// name it, the rename happened without a commit and must be undone. Anything else (a
/// document edited or replaced by someone else) is left alone for `status` to report.
#[must_use]
pub fn recovery(recorded: Option<FileId>, found: Leftovers) -> Recovery {
    let Some(new) = found.new else {
        return if found.pre {
            Recovery::DropLinks
        } else {
            Recovery::Nothing
        };
    };
    let committed = recorded == Some(new);
    if committed || found.doc != Some(new) {
        Recovery::DropLinks
    } else if found.pre {
        Recovery::RestorePre
    } else {
        Recovery::RemoveDoc
    }
}

/// The recovery rule on a mirror root: a rollback becomes [`Recovery::KeepApplied`], as
/// every version a mirror applies was committed in the store before.
#[must_use]
pub fn on_mirror(action: Recovery) -> Recovery {
    match action {
        Recovery::RestorePre | Recovery::RemoveDoc => Recovery::KeepApplied,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H1: &str = "aa";
    const H2: &str = "bb";

    /// Refused: epoch 2 was accepted already.
    const STALE_AT_2: WriteDecision = WriteDecision::Stale { fence: 2 };

    /// `decide` for a fenced write of `sha256` under `epoch`, `issued` being the highest
    /// epoch claimed.
    fn fenced(record: Option<&SinkRecord>, issued: i64, epoch: i64, sha256: &str) -> WriteDecision {
        decide(record, Some(issued), epoch, sha256, false)
    }

    fn record(fence: i64, content_epoch: Option<i64>) -> SinkRecord {
        SinkRecord {
            fence,
            content: content_epoch.map(|epoch| Content {
                epoch,
                sha256: H1.into(),
                size: 2,
                written_at: 0,
                file: None,
            }),
        }
    }

    #[test]
    fn a_mirror_keeps_what_recovery_would_roll_back() {
        for action in [Recovery::RestorePre, Recovery::RemoveDoc] {
            assert_eq!(on_mirror(action), Recovery::KeepApplied);
        }
        for action in [Recovery::Nothing, Recovery::DropLinks] {
            assert_eq!(on_mirror(action), action);
        }
    }

    #[test]
    fn lower_epoch_is_stale() {
        let r = record(2, Some(2));
        assert_eq!(fenced(Some(&r), 2, 1, H2), STALE_AT_2);
    }

    #[test]
    fn same_epoch_same_bytes_is_replay_and_different_bytes_conflict() {
        let r = record(2, Some(2));
        assert_eq!(fenced(Some(&r), 2, 2, H1), WriteDecision::Replay);
        let conflict = WriteDecision::Conflict {
            recorded_sha256: H1.into(),
        };
        assert_eq!(fenced(Some(&r), 2, 2, H2), conflict);
    }

    #[test]
    fn higher_issued_epoch_is_written() {
        let r = record(1, Some(1));
        assert_eq!(fenced(Some(&r), 2, 2, H2), WriteDecision::Write);
        assert_eq!(fenced(None, 1, 1, H2), WriteDecision::Write);
    }

    #[test]
    fn fence_registered_by_takeover_accepts_its_own_first_write() {
        // B's claim raised the fence to 2 without content: B's write is new, A's is stale.
        let r = record(2, Some(1));
        assert_eq!(fenced(Some(&r), 2, 2, H2), WriteDecision::Write);
        assert_eq!(fenced(Some(&r), 2, 1, H2), STALE_AT_2);
    }

    #[test]
    fn never_issued_epoch_is_refused() {
        assert_eq!(
            decide(None, None, 1, H1, false),
            WriteDecision::Unissued { issued: None }
        );
        assert_eq!(
            fenced(None, 3, 99, H1),
            WriteDecision::Unissued { issued: Some(3) }
        );
    }

    #[test]
    fn unfenced_accepts_anything_and_never_raises_the_fence() {
        let r = record(5, Some(5));
        assert_eq!(decide(Some(&r), Some(5), 1, H2, true), WriteDecision::Write);
        assert_eq!(fence_after_write(Some(&r), 1, true), 5);
        assert_eq!(fence_after_write(Some(&r), 7, false), 7);
        assert_eq!(fence_after_write(None, 3, false), 3);
    }

    /// What recovery finds: the `-new` link, whether `-pre` exists, the document.
    fn leftovers(new: Option<FileId>, pre: bool, doc: Option<FileId>) -> Leftovers {
        Leftovers { new, pre, doc }
    }

    const OLD: FileId = FileId { ino: 10, size: 3 };
    const NEW: FileId = FileId { ino: 11, size: 4 };

    #[test]
    fn renamed_but_uncommitted_write_is_rolled_back() {
        let found = leftovers(Some(NEW), true, Some(NEW));
        assert_eq!(recovery(Some(OLD), found), Recovery::RestorePre);
        let first = Leftovers {
            pre: false,
            ..found
        };
        assert_eq!(recovery(None, first), Recovery::RemoveDoc);
    }

    #[test]
    fn committed_write_keeps_its_document() {
        let found = leftovers(Some(NEW), true, Some(NEW));
        assert_eq!(recovery(Some(NEW), found), Recovery::DropLinks);
    }

    #[test]
    fn write_that_never_renamed_only_drops_links() {
        let found = leftovers(Some(NEW), true, Some(OLD));
        assert_eq!(recovery(Some(OLD), found), Recovery::DropLinks);
        let only_pre = leftovers(None, true, Some(OLD));
        assert_eq!(recovery(Some(OLD), only_pre), Recovery::DropLinks);
    }

    #[test]
    fn document_replaced_by_hand_is_never_rolled_back() {
        let hand = FileId { ino: 99, size: 7 };
        let found = leftovers(Some(NEW), true, Some(hand));
        assert_eq!(recovery(Some(NEW), found), Recovery::DropLinks);
        assert_eq!(recovery(Some(OLD), found), Recovery::DropLinks);
    }

    #[test]
    fn nothing_in_flight_does_nothing() {
        let found = leftovers(None, false, Some(OLD));
        assert_eq!(recovery(Some(OLD), found), Recovery::Nothing);
    }
}
