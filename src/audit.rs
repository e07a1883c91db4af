//! The audit log's events: the record a scheduler's dashboard lacks when it says one
//! worker finished and the document says another.
//!
//! Every change (claim, takeover, renew, complete, release, write, replay) is logged in
//! the same transaction as the change; every refusal (held, lost, stale, conflict,
//! unissued) in a transaction of its own. Pure data, an event's short description and
//! the aligned columns of plain tables; the store keeps the events, `log` draws them.

use serde::Serialize;
use unicode_width::UnicodeWidthStr;

use crate::refusal::RefusalKind;

/// What an event records: a change, or a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// A claim of a resource with no live lease.
    Claim,
    /// A claim that replaced an expired holder.
    Takeover,
    Renew,
    Complete,
    Release,
    /// An accepted write that replaced the document.
    Write,
    /// An accepted write of the bytes already written under this epoch.
    Replay,
    /// An accepted removal (`fencepost remove`): the document is gone, its fence kept.
    Remove,
    /// A write whose COMMIT returned an error; recovery decided what stands.
    CommitFailed,
    /// A refusal: held, lost, stale, conflict, unissued.
    Refused(RefusalKind),
    /// A kind this fencepost does not know (written by a newer one), kept as stored.
    Other(String),
}

impl EventKind {
    /// The word stored in the state file and shown by `log`.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match self {
            EventKind::Claim => "claim",
            EventKind::Takeover => "takeover",
            EventKind::Renew => "renew",
            EventKind::Complete => "complete",
            EventKind::Release => "release",
            EventKind::Write => "write",
            EventKind::Replay => "replay",
            EventKind::Remove => "remove",
            EventKind::CommitFailed => "commit-failed",
            EventKind::Refused(kind) => kind.outcome(),
            EventKind::Other(word) => word,
        }
    }

    /// The kind a stored word names.
    #[must_use]
    pub fn parse(word: &str) -> EventKind {
        let refused = [
            RefusalKind::Held,
            RefusalKind::Lost,
            RefusalKind::Stale,
            RefusalKind::Conflict,
            RefusalKind::Unissued,
        ]
        .into_iter()
        .find(|kind| kind.outcome() == word);
        match (word, refused) {
            (_, Some(kind)) => EventKind::Refused(kind),
            ("claim", _) => EventKind::Claim,
            ("takeover", _) => EventKind::Takeover,
            ("renew", _) => EventKind::Renew,
            ("complete", _) => EventKind::Complete,
            ("release", _) => EventKind::Release,
            ("write", _) => EventKind::Write,
            ("replay", _) => EventKind::Replay,
            ("remove", _) => EventKind::Remove,
            ("commit-failed", _) => EventKind::CommitFailed,
            (other, None) => EventKind::Other(other.to_string()),
        }
    }
}

impl Serialize for EventKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// One logged event (serialized, an event of `log --json` but for `refused`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Sequence number in the state file (0 before it is stored).
    pub id: i64,
    /// Time on the state file's clock.
    pub at: i64,
    pub resource: String,
    #[serde(rename = "event")]
    pub kind: EventKind,
    pub owner: Option<String>,
    pub epoch: Option<i64>,
    /// For a takeover, the holder it replaced; for a refusal, who or what refused it.
    pub prev_owner: Option<String>,
    pub prev_epoch: Option<i64>,
    /// Content hash, for writes.
    pub sha256: Option<String>,
    pub pid: u32,
    pub host: String,
    pub detail: Option<String>,
    /// The version's seq within its epoch (`write --seq`), for writes, removals and
    /// their refusals; absent when 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<i64>,
}

impl Event {
    /// A new event from this process.
    #[must_use]
    pub fn new(at: i64, resource: &str, kind: EventKind) -> Event {
        Event {
            id: 0,
            at,
            resource: resource.to_string(),
            kind,
            owner: None,
            epoch: None,
            prev_owner: None,
            prev_epoch: None,
            sha256: None,
            pid: std::process::id(),
            host: hostname(),
            detail: None,
            seq: None,
        }
    }

    /// The version's seq, kept only when it is not 0.
    #[must_use]
    pub fn seq(mut self, seq: i64) -> Event {
        self.seq = (seq != 0).then_some(seq);
        self
    }

    pub fn owner(mut self, owner: Option<&str>) -> Event {
        self.owner = owner.map(str::to_string);
        self
    }

    #[must_use]
    pub fn epoch(mut self, epoch: Option<i64>) -> Event {
        self.epoch = epoch;
        self
    }

    pub fn previous(mut self, owner: Option<&str>, epoch: Option<i64>) -> Event {
        self.prev_owner = owner.map(str::to_string);
        self.prev_epoch = epoch;
        self
    }

    pub fn sha256(mut self, sha: Option<&str>) -> Event {
        self.sha256 = sha.map(str::to_string);
        self
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Event {
        self.detail = Some(detail.into());
        self
    }

    /// True for the refusals.
    #[must_use]
    pub fn is_refusal(&self) -> bool {
        matches!(self.kind, EventKind::Refused(_))
    }

    /// A short description for tables and lanes: `write e2`, `STALE e1 (fence 2)`.
    #[must_use]
    pub fn summary(&self) -> String {
        let seq = self.seq.map(|s| format!(" seq {s}")).unwrap_or_default();
        let epoch = self
            .epoch
            .map(|e| format!(" e{e}{seq}"))
            .unwrap_or_default();
        let word = self.kind.as_str();
        let kind = if self.is_refusal() {
            word.to_uppercase()
        } else {
            word.to_string()
        };
        let extra = match (&self.kind, &self.prev_owner, self.prev_epoch) {
            (EventKind::Takeover, Some(o), Some(e)) => format!(" (from {o} e{e})"),
            (EventKind::Refused(RefusalKind::Stale), _, Some(e)) => format!(" (fence {e})"),
            (EventKind::Refused(RefusalKind::Held | RefusalKind::Lost), Some(o), Some(e)) => {
                format!(" (holder {o} e{e})")
            }
            // `write --tree`: a folder published as one version.
            (EventKind::Write, _, _)
                if self
                    .detail
                    .as_deref()
                    .is_some_and(|d| d.starts_with("tree")) =>
            {
                " tree".to_string()
            }
            // `write --unfenced`: accepted without the fence's check, over a newer epoch
            // when the fence was past its own.
            (EventKind::Write, _, fence) if self.detail.as_deref() == Some("unfenced") => {
                match (fence, self.epoch) {
                    (Some(f), Some(e)) if f > e => format!(" unfenced (fence {f})"),
                    _ => " unfenced".to_string(),
                }
            }
            _ => String::new(),
        };
        format!("{kind}{epoch}{extra}")
    }
}

/// Left-aligned columns separated by two spaces (the plain-text tables of `status`
/// and `log`), measured in terminal columns: `工人甲` takes six, not three.
pub fn align<R: AsRef<[String]>>(rows: &[R]) -> String {
    let cols = rows.iter().map(|r| r.as_ref().len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.as_ref().get(i))
                .map(|c| c.width())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r
                .as_ref()
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c}{}", " ".repeat(w.saturating_sub(c.width()))))
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// This machine's name, for the log (`?` if the system will not say, or it is not
/// UTF-8).
#[must_use]
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_kind_is_stored_as_its_word_and_read_back_as_itself() {
        let kinds = [
            EventKind::Claim,
            EventKind::Takeover,
            EventKind::Renew,
            EventKind::Complete,
            EventKind::Release,
            EventKind::Write,
            EventKind::Replay,
            EventKind::CommitFailed,
            EventKind::Refused(RefusalKind::Held),
            EventKind::Refused(RefusalKind::Lost),
            EventKind::Refused(RefusalKind::Stale),
            EventKind::Refused(RefusalKind::Conflict),
            EventKind::Refused(RefusalKind::Unissued),
        ];
        let words: Vec<&str> = kinds.iter().map(EventKind::as_str).collect();
        assert_eq!(
            words,
            [
                "claim",
                "takeover",
                "renew",
                "complete",
                "release",
                "write",
                "replay",
                "commit-failed",
                "held",
                "lost",
                "stale",
                "conflict",
                "unissued"
            ]
        );
        for kind in kinds {
            assert_eq!(EventKind::parse(kind.as_str()), kind);
        }
        // A word a newer fencepost may write is shown as stored, never dropped.
        let later = EventKind::parse("handover");
        assert_eq!(later, EventKind::Other("handover".into()));
        assert_eq!(later.as_str(), "handover");
    }

    #[test]
    fn columns_line_up_by_display_width() {
        let rows = [
            ["OWNER", "EPOCH"].map(String::from),
            ["工人甲", "1"].map(String::from),
            ["bob", "2"].map(String::from),
        ];
        let text = align(&rows);
        let starts: Vec<usize> = text
            .lines()
            .map(|l| {
                let at = l.rfind("  ").expect("two columns") + 2;
                l[..at].width()
            })
            .collect();
        assert_eq!(starts, [8, 8, 8], "{text}");
    }
}
