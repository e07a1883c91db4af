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

/// What the sink recorded about the version it published last: a document's bytes, or
/// a removal (a tombstone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content {
    /// The epoch the version was published under.
    pub epoch: i64,
    /// Its place within the epoch (`write --seq`; 0 without): versions are ordered by
    /// `(epoch, seq)`.
    pub seq: i64,
    /// The version removed the document (`fencepost remove`): `sha256` is empty, `size`
    /// 0, and `file` names the removed file while it waits beside the document for the
    /// COMMIT (recovery's proof that the removal committed).
    pub removed: bool,
    /// The resource is a tree (`write --tree`): `sha256` is the tree hash, `size` the
    /// bytes of its files, and `file` the folder (its inode, size 0). A resource is a
    /// document or a tree for its whole life; a removal keeps its kind.
    pub tree: bool,
    /// Lower-case hex SHA-256 of the bytes (empty for a removal).
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

impl Content {
    /// The version's place in the order.
    #[must_use]
    pub fn version(&self) -> (i64, i64) {
        (self.epoch, self.seq)
    }
}

/// What a request offers the sink: a document's bytes (their SHA-256), or its removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body<'a> {
    Bytes(&'a str),
    Removal,
}

impl Body<'_> {
    /// Whether `content` is this body: the same bytes, or a removal too.
    #[must_use]
    pub fn is(&self, content: &Content) -> bool {
        match self {
            Body::Bytes(sha256) => !content.removed && content.sha256 == *sha256,
            Body::Removal => content.removed,
        }
    }
}

/// A version offered to the sink: `(epoch, seq)` and what it publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer<'a> {
    pub epoch: i64,
    /// 0 when the writer gave no `--seq`.
    pub seq: i64,
    pub body: Body<'a>,
}

/// What the sink does with a write request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteDecision {
    /// Publish the version and record it.
    Write,
    /// Same version, same body: success, the file is not rewritten.
    Replay,
    /// A newer version was accepted already: a newer epoch (`fence`; `seq` is the seq the
    /// sink holds of that epoch, 0 if none), or a higher seq of this epoch (`fence` is
    /// this epoch, `seq` the recorded one).
    Stale { fence: i64, seq: i64 },
    /// Same version, another body: one body per `(epoch, seq)`. `recorded_sha256` is
    /// `None` when the recorded version was a removal.
    Conflict { recorded_sha256: Option<String> },
    /// `claim` never issued this epoch for this resource.
    Unissued { issued: Option<i64> },
}

/// The fencing rule. `issued` is the highest epoch `claim` has issued for the resource
/// (`None` if never claimed). Versions are ordered by `(epoch, seq)`: an epoch under the
/// fence is stale; within the recorded content's epoch a lower seq is stale (`<`, not
/// `!=`: a retry of the recorded seq is a replay or a conflict), a higher one is written.
#[must_use]
pub fn decide(
    record: Option<&SinkRecord>,
    issued: Option<i64>,
    offer: &Offer<'_>,
    unfenced: bool,
) -> WriteDecision {
    let epoch = offer.epoch;
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
        let seq = record
            .content
            .as_ref()
            .filter(|c| c.epoch == record.fence)
            .map_or(0, |c| c.seq);
        return WriteDecision::Stale {
            fence: record.fence,
            seq,
        };
    }
    match &record.content {
        Some(content) if content.epoch == epoch => match offer.seq.cmp(&content.seq) {
            std::cmp::Ordering::Greater => WriteDecision::Write,
            std::cmp::Ordering::Less => WriteDecision::Stale {
                fence: epoch,
                seq: content.seq,
            },
            std::cmp::Ordering::Equal if offer.body.is(content) => WriteDecision::Replay,
            std::cmp::Ordering::Equal => WriteDecision::Conflict {
                recorded_sha256: (!content.removed).then(|| content.sha256.clone()),
            },
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
    /// The `-gone` link: the document a removal took away, waiting for its COMMIT.
    pub gone: Option<FileId>,
    /// The document as it is now.
    pub doc: Option<FileId>,
}

/// What the sink's record says of the document's file: the identity of the file the last
/// version renamed into place, or of the file a removal took away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    Placed(FileId),
    Removed(FileId),
}

impl Recorded {
    /// The record of `content`, if it names a file.
    #[must_use]
    pub fn of(content: &Content) -> Option<Recorded> {
        let file = content.file?;
        Some(if content.removed {
            Recorded::Removed(file)
        } else {
            Recorded::Placed(file)
        })
    }
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
    /// A removal took the document away but did not commit: put it back.
    RestoreRemoved,
    /// On a mirror root, what would be any of the three above: the write was an apply of
    /// a version the shared store committed, so its result is kept (rolled forward,
    /// never back) and only the links are removed; the next apply records it.
    KeepApplied,
}

/// The recovery rule. A write links `-pre` to the old document and `-new` to its staged
/// file, renames, and commits the new file's identity. So: if the record names the `-new`
/// file, the commit happened; if the document is the `-new` file but the record does not
/// name it, the rename happened without a commit and must be undone. A removal renames
/// the document to `-gone` and commits a tombstone naming that file: a `-gone` file the
/// record does not name, with no document in its place, is put back. Anything else (a
/// document edited or replaced by someone else) is left alone for `status` to report.
#[must_use]
pub fn recovery(recorded: Option<Recorded>, found: Leftovers) -> Recovery {
    if let Some(gone) = found.gone {
        // A tombstone publishes no bytes: its size is 0, and a store gives the removed
        // file's identity back with that size. The inode number alone names the file (no
        // other live file has it while the `-gone` name holds it).
        let committed = matches!(recorded, Some(Recorded::Removed(file)) if file.ino == gone.ino);
        return if committed || found.doc.is_some() {
            Recovery::DropLinks
        } else {
            Recovery::RestoreRemoved
        };
    }
    let Some(new) = found.new else {
        return if found.pre {
            Recovery::DropLinks
        } else {
            Recovery::Nothing
        };
    };
    let committed = recorded == Some(Recorded::Placed(new));
    if committed || found.doc != Some(new) {
        Recovery::DropLinks
    } else if found.pre {
        Recovery::RestorePre
    } else {
        Recovery::RemoveDoc
    }
}

/// What a crashed tree publish left beside the resource: its marker
/// (`.<name>.fencepost-tree-<T>`, made under the lock before the swap; `T` is the staged
/// folder's inode), the folder at the resource's name, and whether the staged folder's
/// name (`tmp-R`, which the marker names) still holds a folder: the staged tree before the
/// swap, the old tree after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLeftovers {
    pub staged: u64,
    /// The inode of the folder at the resource's name (`None`: none there).
    pub current: Option<u64>,
    /// A folder stands at the staged name.
    pub other: bool,
}

/// What recovery does for a tree publish's leftovers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeRecovery {
    /// The publish committed: the folder at the staged name is the old tree, kept for its
    /// grace period like any retired tree; the marker goes.
    Retire,
    /// Swapped but not committed: exchange the two folders back, then remove the staged
    /// tree and the marker.
    SwapBack,
    /// A first publish (nothing stood at the name before) renamed but not committed:
    /// remove the tree at the resource's name and the marker.
    RemoveNew,
    /// Never swapped: remove the staged tree and the marker.
    DropStaged,
}

/// The tree recovery rule: a publish records its staged folder's inode, so a record
/// naming it proves the COMMIT; otherwise, a resource that is the staged folder was
/// swapped (or renamed) without a COMMIT and is undone, and one that is not was never
/// touched.
#[must_use]
pub fn tree_recovery(recorded: Option<Recorded>, found: TreeLeftovers) -> TreeRecovery {
    let committed = matches!(recorded, Some(Recorded::Placed(f)) if f.ino == found.staged);
    if committed {
        TreeRecovery::Retire
    } else if found.current == Some(found.staged) {
        if found.other {
            TreeRecovery::SwapBack
        } else {
            TreeRecovery::RemoveNew
        }
    } else {
        TreeRecovery::DropStaged
    }
}

/// The recovery rule on a mirror root: a rollback becomes [`Recovery::KeepApplied`], as
/// every version a mirror applies was committed in the store before.
#[must_use]
pub fn on_mirror(action: Recovery) -> Recovery {
    match action {
        Recovery::RestorePre | Recovery::RemoveDoc | Recovery::RestoreRemoved => {
            Recovery::KeepApplied
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H1: &str = "aa";
    const H2: &str = "bb";

    /// Refused: epoch 2 was accepted already.
    const STALE_AT_2: WriteDecision = WriteDecision::Stale { fence: 2, seq: 0 };

    /// `decide` for a fenced write of `sha256` under `epoch`, `issued` being the highest
    /// epoch claimed.
    fn fenced(record: Option<&SinkRecord>, issued: i64, epoch: i64, sha256: &str) -> WriteDecision {
        versioned(record, issued, (epoch, 0), Body::Bytes(sha256))
    }

    /// `decide` for a fenced offer of `body` at `(epoch, seq)`.
    fn versioned(
        record: Option<&SinkRecord>,
        issued: i64,
        (epoch, seq): (i64, i64),
        body: Body<'_>,
    ) -> WriteDecision {
        decide(record, Some(issued), &Offer { epoch, seq, body }, false)
    }

    fn record(fence: i64, content_epoch: Option<i64>) -> SinkRecord {
        SinkRecord {
            fence,
            content: content_epoch.map(|epoch| Content {
                epoch,
                seq: 0,
                removed: false,
                tree: false,
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
            recorded_sha256: Some(H1.into()),
        };
        assert_eq!(fenced(Some(&r), 2, 2, H2), conflict);
    }

    /// A record whose content is `body` at `(epoch, seq)`, the fence at `epoch`.
    fn at(epoch: i64, seq: i64, removed: bool) -> SinkRecord {
        SinkRecord {
            fence: epoch,
            content: Some(Content {
                epoch,
                seq,
                removed,
                tree: false,
                sha256: if removed { String::new() } else { H1.into() },
                size: 2,
                written_at: 0,
                file: None,
            }),
        }
    }

    #[test]
    fn versions_are_ordered_by_epoch_then_seq() {
        let r = at(2, 3, false);
        let bytes = Body::Bytes(H2);
        assert_eq!(versioned(Some(&r), 2, (2, 4), bytes), WriteDecision::Write);
        assert_eq!(
            versioned(Some(&r), 2, (2, 2), bytes),
            WriteDecision::Stale { fence: 2, seq: 3 }
        );
        // A takeover's epoch beats any seq of the old one, whatever its own seq.
        assert_eq!(versioned(Some(&r), 3, (3, 0), bytes), WriteDecision::Write);
        // An older epoch is stale whatever its seq; the refusal names the recorded seq.
        assert_eq!(
            versioned(Some(&r), 2, (1, 99), bytes),
            WriteDecision::Stale { fence: 2, seq: 3 }
        );
        assert_eq!(
            versioned(Some(&r), 2, (2, 3), Body::Bytes(H1)),
            WriteDecision::Replay
        );
        assert_eq!(
            versioned(Some(&r), 2, (2, 3), bytes),
            WriteDecision::Conflict {
                recorded_sha256: Some(H1.into())
            }
        );
    }

    #[test]
    fn a_removal_is_one_more_version() {
        let written = at(2, 1, false);
        let removed = at(2, 2, true);
        assert_eq!(
            versioned(Some(&written), 2, (2, 2), Body::Removal),
            WriteDecision::Write
        );
        assert_eq!(
            versioned(Some(&written), 2, (2, 1), Body::Removal),
            WriteDecision::Conflict {
                recorded_sha256: Some(H1.into())
            }
        );
        assert_eq!(
            versioned(Some(&removed), 2, (2, 2), Body::Removal),
            WriteDecision::Replay
        );
        assert_eq!(
            versioned(Some(&removed), 2, (2, 2), Body::Bytes(H1)),
            WriteDecision::Conflict {
                recorded_sha256: None
            }
        );
        assert_eq!(
            versioned(Some(&removed), 2, (2, 3), Body::Bytes(H1)),
            WriteDecision::Write
        );
        assert_eq!(
            versioned(Some(&removed), 2, (1, 5), Body::Bytes(H1)),
            WriteDecision::Stale { fence: 2, seq: 2 }
        );
    }

    #[test]
    fn an_uncommitted_removal_is_put_back_and_a_committed_one_only_drops_its_link() {
        let found = Leftovers {
            new: None,
            pre: false,
            gone: Some(OLD),
            doc: None,
        };
        let placed = Some(Recorded::Placed(OLD));
        assert_eq!(recovery(placed, found), Recovery::RestoreRemoved);
        assert_eq!(recovery(None, found), Recovery::RestoreRemoved);
        let removed = Some(Recorded::Removed(OLD));
        assert_eq!(recovery(removed, found), Recovery::DropLinks);
        // The tombstone as a store gives it back: the removed file's size is the
        // version's, 0.
        let stored = Some(Recorded::Removed(FileId { size: 0, ..OLD }));
        assert_eq!(recovery(stored, found), Recovery::DropLinks);
        // Another removed file (an older removal's) does not make this one committed.
        let other = Some(Recorded::Removed(NEW));
        assert_eq!(recovery(other, found), Recovery::RestoreRemoved);
        // A document put there since (by hand) is never replaced.
        let hand = Leftovers {
            doc: Some(NEW),
            ..found
        };
        assert_eq!(recovery(placed, hand), Recovery::DropLinks);
        // The links of the write that placed the removed file, left with the same token.
        let shared = Leftovers {
            new: Some(OLD),
            pre: true,
            ..found
        };
        assert_eq!(recovery(placed, shared), Recovery::RestoreRemoved);
        assert_eq!(recovery(removed, shared), Recovery::DropLinks);
        assert_eq!(on_mirror(Recovery::RestoreRemoved), Recovery::KeepApplied);
    }

    #[test]
    fn a_tree_publish_is_undone_unless_its_record_names_the_staged_folder() {
        let staged = 7;
        let found = |current, other| TreeLeftovers {
            staged,
            current,
            other,
        };
        let recorded = |ino| Some(Recorded::Placed(FileId { ino, size: 0 }));
        assert_eq!(
            tree_recovery(recorded(7), found(Some(7), true)),
            TreeRecovery::Retire
        );
        assert_eq!(
            tree_recovery(recorded(3), found(Some(7), true)),
            TreeRecovery::SwapBack
        );
        assert_eq!(
            tree_recovery(None, found(Some(7), false)),
            TreeRecovery::RemoveNew
        );
        assert_eq!(
            tree_recovery(recorded(3), found(Some(3), true)),
            TreeRecovery::DropStaged
        );
        assert_eq!(
            tree_recovery(None, found(None, true)),
            TreeRecovery::DropStaged
        );
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
            decide(
                None,
                None,
                &Offer {
                    epoch: 1,
                    seq: 0,
                    body: Body::Bytes(H1)
                },
                false
            ),
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
        let offer = Offer {
            epoch: 1,
            seq: 0,
            body: Body::Bytes(H2),
        };
        assert_eq!(
            decide(Some(&r), Some(5), &offer, true),
            WriteDecision::Write
        );
        assert_eq!(fence_after_write(Some(&r), 1, true), 5);
        assert_eq!(fence_after_write(Some(&r), 7, false), 7);
        assert_eq!(fence_after_write(None, 3, false), 3);
    }

    /// What recovery finds: the `-new` link, whether `-pre` exists, the document.
    fn leftovers(new: Option<FileId>, pre: bool, doc: Option<FileId>) -> Leftovers {
        Leftovers {
            new,
            pre,
            gone: None,
            doc,
        }
    }

    const OLD: FileId = FileId { ino: 10, size: 3 };
    const NEW: FileId = FileId { ino: 11, size: 4 };

    #[test]
    fn renamed_but_uncommitted_write_is_rolled_back() {
        let found = leftovers(Some(NEW), true, Some(NEW));
        assert_eq!(
            recovery(Some(Recorded::Placed(OLD)), found),
            Recovery::RestorePre
        );
        let first = Leftovers {
            pre: false,
            ..found
        };
        assert_eq!(recovery(None, first), Recovery::RemoveDoc);
    }

    #[test]
    fn committed_write_keeps_its_document() {
        let found = leftovers(Some(NEW), true, Some(NEW));
        assert_eq!(
            recovery(Some(Recorded::Placed(NEW)), found),
            Recovery::DropLinks
        );
    }

    #[test]
    fn write_that_never_renamed_only_drops_links() {
        let found = leftovers(Some(NEW), true, Some(OLD));
        assert_eq!(
            recovery(Some(Recorded::Placed(OLD)), found),
            Recovery::DropLinks
        );
        let only_pre = leftovers(None, true, Some(OLD));
        assert_eq!(
            recovery(Some(Recorded::Placed(OLD)), only_pre),
            Recovery::DropLinks
        );
    }

    #[test]
    fn document_replaced_by_hand_is_never_rolled_back() {
        let hand = FileId { ino: 99, size: 7 };
        let found = leftovers(Some(NEW), true, Some(hand));
        assert_eq!(
            recovery(Some(Recorded::Placed(NEW)), found),
            Recovery::DropLinks
        );
        assert_eq!(
            recovery(Some(Recorded::Placed(OLD)), found),
            Recovery::DropLinks
        );
    }

    #[test]
    fn nothing_in_flight_does_nothing() {
        let found = leftovers(None, false, Some(OLD));
        assert_eq!(
            recovery(Some(Recorded::Placed(OLD)), found),
            Recovery::Nothing
        );
    }
}
