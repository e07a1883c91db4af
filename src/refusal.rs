//! The kinds of refusal: the protocol's defined answers that are not successes. Each has
//! its own outcome word; the command line gives each its own exit code.

/// The kinds of refusal, each with its own exit code and outcome word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// claim: someone else holds a live lease.
    Held,
    /// renew, complete, release: not your lease any more, or expired.
    Lost,
    /// write: a newer epoch has been accepted for this resource.
    Stale,
    /// write: same epoch, different bytes.
    Conflict,
    /// write: an epoch that `claim` never issued for this resource (or to this owner).
    Unissued,
}

impl RefusalKind {
    /// The word printed on stdout and in `outcome` of the JSON object.
    #[must_use]
    pub fn outcome(self) -> &'static str {
        match self {
            RefusalKind::Held => "held",
            RefusalKind::Lost => "lost",
            RefusalKind::Stale => "stale",
            RefusalKind::Conflict => "conflict",
            RefusalKind::Unissued => "unissued",
        }
    }
}
