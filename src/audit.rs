//! The audit log's events and how they are shown: the record a scheduler's dashboard
//! lacks when it says one worker finished and the document says another.
//!
//! Every change (claim, takeover, renew, complete, release, write, replay) is logged in
//! the same transaction as the change; every refusal (held, lost, stale, conflict,
//! unissued) in a transaction of its own. Pure data and rendering; the store keeps them.

use serde::Serialize;
use unicode_width::UnicodeWidthStr;

use crate::clock::{ClockKind, show};
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
    /// A write whose COMMIT returned an error; recovery decided what stands.
    CommitFailed,
    /// A refusal: held, lost, stale, conflict, unissued.
    Refused(RefusalKind),
    /// A kind this fencepost does not know (written by a newer one), kept as stored.
    Other(String),
}

impl EventKind {
    /// The word stored in the state file and shown by `log`.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            EventKind::Claim => "claim",
            EventKind::Takeover => "takeover",
            EventKind::Renew => "renew",
            EventKind::Complete => "complete",
            EventKind::Release => "release",
            EventKind::Write => "write",
            EventKind::Replay => "replay",
            EventKind::CommitFailed => "commit-failed",
            EventKind::Refused(kind) => kind.outcome(),
            EventKind::Other(word) => word,
        }
    }

    /// The kind a stored word names.
    pub(crate) fn parse(word: &str) -> EventKind {
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
}

impl Event {
    /// A new event from this process.
    pub(crate) fn new(at: i64, resource: &str, kind: EventKind) -> Event {
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
        }
    }

    pub(crate) fn owner(mut self, owner: Option<&str>) -> Event {
        self.owner = owner.map(str::to_string);
        self
    }

    pub(crate) fn epoch(mut self, epoch: Option<i64>) -> Event {
        self.epoch = epoch;
        self
    }

    pub(crate) fn previous(mut self, owner: Option<&str>, epoch: Option<i64>) -> Event {
        self.prev_owner = owner.map(str::to_string);
        self.prev_epoch = epoch;
        self
    }

    pub(crate) fn sha256(mut self, sha: Option<&str>) -> Event {
        self.sha256 = sha.map(str::to_string);
        self
    }

    pub(crate) fn detail(mut self, detail: impl Into<String>) -> Event {
        self.detail = Some(detail.into());
        self
    }

    /// True for the refusals.
    pub(crate) fn is_refusal(&self) -> bool {
        matches!(self.kind, EventKind::Refused(_))
    }

    /// A short description for tables and lanes: `write e2`, `STALE e1 (fence 2)`.
    pub(crate) fn summary(&self) -> String {
        let epoch = self.epoch.map(|e| format!(" e{e}")).unwrap_or_default();
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
            _ => String::new(),
        };
        format!("{kind}{epoch}{extra}")
    }
}

/// The events as a table, one per line.
pub(crate) fn table(events: &[Event], clock: ClockKind) -> String {
    if events.is_empty() {
        return "no events".to_string();
    }
    let mut rows = vec![["AT", "RESOURCE", "EVENT", "OWNER", "EPOCH", "DETAIL"].map(String::from)];
    for e in events {
        rows.push([
            show(clock, e.at),
            crate::text::display_name(&e.resource),
            e.kind.as_str().to_string(),
            e.owner.clone().unwrap_or_else(|| "-".into()),
            e.epoch.map_or_else(|| "-".into(), |x| x.to_string()),
            e.detail
                .as_deref()
                .map(|d| show_detail(d, clock))
                .unwrap_or_default(),
        ]);
    }
    align(&rows)
}

/// A stored detail for the table: the deadline that claims and renewals record (as an
/// integer, like every stored time) shown the way [`show`] shows times.
fn show_detail(detail: &str, clock: ClockKind) -> String {
    let Some(rest) = detail.strip_prefix("deadline ") else {
        return detail.to_string();
    };
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    match rest[..digits].parse::<i64>() {
        Ok(deadline) => format!("deadline {}{}", show(clock, deadline), &rest[digits..]),
        Err(_) => detail.to_string(),
    }
}

/// How wide the timeline may grow before its lanes give way to one OWNER column.
const TIMELINE_WIDTH: usize = 100;

/// The story as lanes: one column per owner (in order of first appearance), one row
/// per event, so a takeover and a refused late write stand out at a glance. With more
/// owners than fit in [`TIMELINE_WIDTH`] columns (each run of a job under its own name),
/// one row per event with the owner in a column of its own.
pub(crate) fn timeline(events: &[Event], clock: ClockKind) -> String {
    let lanes = lanes(events, clock);
    if lanes.lines().all(|l| l.width() <= TIMELINE_WIDTH) {
        return lanes;
    }
    let several = events.iter().any(|e| e.resource != events[0].resource);
    let mut header = vec!["AT".to_string()];
    if several {
        header.push("RESOURCE".into());
    }
    header.extend(["OWNER".to_string(), "EVENT".to_string()]);
    let mut rows = vec![header];
    for e in events {
        let mut row = vec![show(clock, e.at)];
        if several {
            row.push(crate::text::display_name(&e.resource));
        }
        row.push(e.owner.clone().unwrap_or_else(|| "?".into()));
        row.push(e.summary());
        rows.push(row);
    }
    align(&rows)
}

/// The timeline with a lane per owner.
fn lanes(events: &[Event], clock: ClockKind) -> String {
    if events.is_empty() {
        return "no events".to_string();
    }
    let mut owners: Vec<String> = Vec::new();
    for e in events {
        let owner = e.owner.clone().unwrap_or_else(|| "?".into());
        if !owners.contains(&owner) {
            owners.push(owner);
        }
    }
    let several = events.iter().any(|e| e.resource != events[0].resource);
    let mut header = vec!["AT".to_string()];
    if several {
        header.push("RESOURCE".into());
    }
    header.extend(owners.iter().cloned());
    let mut rows = vec![header];
    for e in events {
        let owner = e.owner.clone().unwrap_or_else(|| "?".into());
        let mut row = vec![show(clock, e.at)];
        if several {
            row.push(crate::text::display_name(&e.resource));
        }
        row.extend(owners.iter().map(|o| {
            if *o == owner {
                e.summary()
            } else {
                String::new()
            }
        }));
        rows.push(row);
    }
    align(&rows)
}

/// Left-aligned columns separated by two spaces (the plain-text tables of `status`
/// and `log`), measured in terminal columns: `工人甲` takes six, not three.
pub(crate) fn align<R: AsRef<[String]>>(rows: &[R]) -> String {
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
pub(crate) fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(at: i64, kind: &str, owner: &str, epoch: i64) -> Event {
        Event::new(at, "doc.md", EventKind::parse(kind))
            .owner(Some(owner))
            .epoch(Some(epoch))
    }

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
    fn timeline_puts_each_owner_in_its_own_lane() {
        let events = vec![
            ev(0, "claim", "A", 1),
            ev(10, "takeover", "B", 2).previous(Some("A"), Some(1)),
            ev(11, "stale", "A", 1).previous(None, Some(2)),
        ];
        let text = timeline(&events, ClockKind::Logical);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["AT", "A", "B"]
        );
        assert!(lines[2].contains("takeover e2 (from A e1)"));
        let b_col = lines[0].find('B').unwrap_or(0);
        assert!(lines[2].find("takeover").unwrap_or(0) >= b_col);
        assert!(lines[3].contains("STALE e1 (fence 2)"));
        assert!(lines[3].find("STALE").unwrap_or(usize::MAX) < b_col);
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

    #[test]
    fn many_owners_fall_back_to_an_owner_column_within_100_columns() {
        let events: Vec<Event> = (0..8)
            .map(|i| ev(i, "claim", &format!("worker-host-{}", 40_000 + i), i + 1))
            .collect();
        let text = timeline(&events, ClockKind::Wall);
        assert!(text.lines().all(|l| l.width() <= TIMELINE_WIDTH), "{text}");
        let header: Vec<&str> = text
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert_eq!(header, ["AT", "OWNER", "EVENT"]);
        assert!(text.contains("worker-host-40007  claim e8"), "{text}");
        // Two owners still get lanes.
        let text = timeline(&events[..2], ClockKind::Wall);
        assert!(
            text.lines()
                .next()
                .unwrap_or_default()
                .contains("worker-host-40001")
        );
    }
}
