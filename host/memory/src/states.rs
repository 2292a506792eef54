//! The review states of a knowledge item and the moves between them. The graph is enforced:
//! a move it does not hold is refused with the current state and the moves it does hold.

use serde::Serialize;
use svc_core::Error;

/// Where an item stands in review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Contributed, not yet reviewed (every item starts here).
    Pending,
    /// Reviewed and shared: budgeted into the agents' bundle.
    Approved,
    /// Always in the bundle, for its audience.
    Mandatory,
    /// Refused.
    Rejected,
    /// Withdrawn after being mandatory.
    Revoked,
    /// Past its validity.
    Expired,
}

impl Status {
    /// Every state, in review order.
    pub const ALL: [Self; 6] = [
        Self::Pending,
        Self::Approved,
        Self::Mandatory,
        Self::Rejected,
        Self::Revoked,
        Self::Expired,
    ];

    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Mandatory => "mandatory",
            Self::Rejected => "rejected",
            Self::Revoked => "revoked",
            Self::Expired => "expired",
        }
    }

    /// Reads a stored or requested spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// The states an administrator may move an item to from this one.
    pub fn moves(self) -> &'static [Status] {
        use Status::*;
        match self {
            Pending => &[Approved, Mandatory, Rejected],
            Approved => &[Mandatory, Rejected],
            Mandatory => &[Approved, Revoked],
            Rejected => &[Approved],
            Revoked => &[Approved, Mandatory],
            Expired => &[Approved, Mandatory, Rejected],
        }
    }
}

/// A review decision an administrator takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// To `approved`.
    Approve,
    /// To `mandatory` (optionally for an audience).
    Mandate,
    /// To `rejected`.
    Reject,
    /// To `revoked`.
    Revoke,
}

impl Decision {
    /// The state the decision moves an item to.
    pub fn target(self) -> Status {
        match self {
            Self::Approve => Status::Approved,
            Self::Mandate => Status::Mandatory,
            Self::Reject => Status::Rejected,
            Self::Revoke => Status::Revoked,
        }
    }

    /// Its name, as in the audit action `corporate_memory.<name>`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Mandate => "mandate",
            Self::Reject => "reject",
            Self::Revoke => "revoke",
        }
    }

    /// Reads a decision's name.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Approve, Self::Mandate, Self::Reject, Self::Revoke]
            .into_iter()
            .find(|d| d.name() == s)
    }
}

/// What a decision does to an item in state `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// The item is already there: nothing changes and nothing is audited.
    Stay,
    /// A legal move.
    To(Status),
}

/// The move `decision` makes from `from`, or a 409 naming the state and its legal moves.
pub fn plan(from: Status, decision: Decision) -> Result<Move, Error> {
    let to = decision.target();
    if from == to {
        return Ok(Move::Stay);
    }
    if from.moves().contains(&to) {
        return Ok(Move::To(to));
    }
    let allowed: Vec<&str> = from.moves().iter().map(|s| s.as_str()).collect();
    Err(Error::conflict(format!(
        "cannot {} an item that is {}: from {} it may become {}",
        decision.name(),
        from.as_str(),
        from.as_str(),
        allowed.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_graph_is_enforced_and_every_move_can_be_undone() {
        assert_eq!(
            plan(Status::Pending, Decision::Approve).unwrap(),
            Move::To(Status::Approved)
        );
        assert_eq!(
            plan(Status::Approved, Decision::Approve).unwrap(),
            Move::Stay
        );
        let e = plan(Status::Rejected, Decision::Mandate).unwrap_err();
        assert_eq!(e.status(), 409);
        assert!(e.to_string().contains("rejected"), "{e}");
        assert!(e.to_string().contains("approved"), "{e}");
        assert!(plan(Status::Pending, Decision::Revoke).is_err());
        // A decision between the reviewed states is undone by one legal move back
        // (pending and expired are never returned to: no decision targets them).
        for from in [Status::Approved, Status::Mandatory, Status::Rejected] {
            for &to in from.moves() {
                assert!(to.moves().contains(&from), "{from:?} -> {to:?} is one-way");
            }
        }
        assert!(Status::Mandatory.moves().contains(&Status::Revoked));
    }

    #[test]
    fn spellings_round_trip() {
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
        }
        assert_eq!(Status::parse("approve"), None);
        assert_eq!(Decision::parse("mandate"), Some(Decision::Mandate));
    }
}
