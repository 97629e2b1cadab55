//! Version 1 conversions of the journal's records about its own history.

use super::v1;
use crate::events::history::{SetAside, Takeover};

/// The stored form of a takeover.
pub(super) fn takeover(t: &Takeover) -> v1::history::Takeover {
    v1::history::Takeover {
        holder: t.holder.clone(),
        location: t.location.clone(),
        through: t.through,
        snapshot: t.snapshot,
        imported: t.imported,
        segments: t.segments,
        set_aside: t.set_aside.as_ref().map(|s| v1::history::SetAside {
            path: s.path.clone(),
            last: s.last,
        }),
    }
}

/// A takeover from its stored form.
pub(super) fn from_takeover(t: v1::history::Takeover) -> Takeover {
    Takeover {
        holder: t.holder,
        location: t.location,
        through: t.through,
        snapshot: t.snapshot,
        imported: t.imported,
        segments: t.segments,
        set_aside: t.set_aside.map(|s| SetAside {
            path: s.path,
            last: s.last,
        }),
    }
}
