//! A journal's history in object storage, read from a listing of its objects, and where a
//! local journal stands against it: pure decisions, carried out by whoever holds the store
//! (the shipper uploading, a new leader taking the history over, the `journal` tools
//! reading it).
//!
//! A store holds segments (see [`crate::segment`]) and snapshots. The history it holds runs
//! from the oldest point a chain of segments can be followed from, unbroken, to its newest
//! segment: the beginning (seq 0) when nothing was deleted, else a stored snapshot (a
//! lifecycle rule deletes the oldest objects first). A new leader needs less: the newest
//! snapshot the chain reaches on from. Two segments covering the same records mean two
//! writers, and the history is refused until someone removes the stray one.

use crate::segment::{
    ChainError, SegmentRange, chain_from, parse_segment_name, parse_snapshot_name,
};

/// A store's objects, sorted by what they are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// Segments, by range.
    pub segments: Vec<SegmentRange>,
    /// Snapshots, by sequence number.
    pub snapshots: Vec<u64>,
    /// Names that are neither (left alone, and reported).
    pub other: Vec<String>,
}

impl Listing {
    /// Sorts names (relative to the history's prefix) into segments, snapshots and others.
    pub fn parse<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Listing {
        let mut listing = Listing::default();
        for name in names {
            let name = name.as_ref();
            if let Some(range) = parse_segment_name(name) {
                listing.segments.push(range);
            } else if let Some(seq) = parse_snapshot_name(name) {
                listing.snapshots.push(seq);
            } else {
                listing.other.push(name.to_owned());
            }
        }
        listing.segments.sort();
        listing.segments.dedup();
        listing.snapshots.sort();
        listing.snapshots.dedup();
        listing
    }
}

/// The history a store holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// The last sequence number it holds.
    pub end: u64,
    /// The oldest point it can be read from: 0, or a snapshot's seq.
    pub readable_from: u64,
    /// The segments from `readable_from` on, in order.
    pub chain: Vec<SegmentRange>,
    /// The newest snapshot the chain goes on from (what a new leader starts from).
    pub latest_snapshot: Option<u64>,
    /// Ranges before `readable_from` no segment covers although older segments exist:
    /// history lost other than by deleting the oldest objects first.
    pub holes: Vec<SegmentRange>,
}

impl Remote {
    /// The segments a journal that holds everything up to `from` needs to reach the end.
    pub fn chain_after(&self, from: u64) -> Vec<SegmentRange> {
        self.chain
            .iter()
            .copied()
            .filter(|r| r.last > from)
            .collect()
    }

    /// Whether seq `seq` (and everything after it) can be read from the store.
    pub fn reaches_back_to(&self, seq: u64) -> bool {
        seq >= self.readable_from
    }
}

/// The history `listing` holds; `None` when it holds no segment and no snapshot.
pub fn remote_history(listing: &Listing) -> Result<Option<Remote>, ChainError> {
    if listing.segments.is_empty() && listing.snapshots.is_empty() {
        return Ok(None);
    }
    // Overlaps anywhere, not only on the chain followed: a second writer is an error.
    check_overlaps(&listing.segments)?;
    let segments_end = listing.segments.iter().map(|r| r.last).max().unwrap_or(0);
    let end = segments_end.max(listing.snapshots.last().copied().unwrap_or(0));
    // Starting points, oldest first: the beginning, then each snapshot.
    let mut first_error = None;
    for start in std::iter::once(0).chain(listing.snapshots.iter().copied()) {
        match chain_from(start, &listing.segments) {
            Ok(chain) => {
                return Ok(Some(Remote {
                    end,
                    readable_from: start,
                    chain,
                    latest_snapshot: listing.snapshots.last().copied().filter(|s| *s >= start),
                    holes: holes_before(start, &listing.segments),
                }));
            }
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    // The last start tried was the newest snapshot (or the beginning), and it failed.
    Err(first_error.unwrap_or(ChainError::Gap {
        from: 0,
        next: SegmentRange {
            after: 0,
            last: end,
        },
    }))
}

fn check_overlaps(segments: &[SegmentRange]) -> Result<(), ChainError> {
    for pair in segments.windows(2) {
        if pair[1].after < pair[0].last {
            return Err(ChainError::Overlap {
                first: pair[0],
                second: pair[1],
            });
        }
    }
    Ok(())
}

/// The ranges before `start` that no segment covers, from the oldest segment on to where
/// the chain followed from `start` begins.
fn holes_before(start: u64, segments: &[SegmentRange]) -> Vec<SegmentRange> {
    let mut holes = Vec::new();
    let mut at: Option<u64> = None;
    for range in segments.iter().take_while(|r| r.last <= start) {
        if let Some(at) = at
            && range.after > at
        {
            holes.push(SegmentRange {
                after: at,
                last: range.after,
            });
        }
        at = Some(range.last);
    }
    let chain_begins = segments
        .iter()
        .find(|r| r.last > start)
        .map_or(start, |r| r.after.min(start));
    if let Some(at) = at
        && at < chain_begins
    {
        holes.push(SegmentRange {
            after: at,
            last: chain_begins,
        });
    }
    holes
}

/// Where a local journal holding records up to `local_last` (0 when empty; its oldest
/// record `local_first`) stands against the store's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// The store holds nothing: upload everything after `after` (0, or the local journal's
    /// oldest snapshot when retention removed the records before it).
    Fresh {
        /// The position to upload from.
        after: u64,
    },
    /// The local journal reaches the store's end or beyond: upload after `after` (the
    /// store's end), once the store's last segment is found to agree with the local
    /// records (else the two diverged: see [`Standing::Adopt`]).
    Ahead {
        /// The store's end.
        after: u64,
        /// The store's last segment, to compare with the local records.
        check: Option<SegmentRange>,
    },
    /// The local journal is behind: import these segments (the first one holds the local
    /// journal's last record, and importing checks that the overlap agrees).
    Behind {
        /// What to import, in order.
        chain: Vec<SegmentRange>,
    },
    /// The local journal cannot be continued from the store (empty, or older than anything
    /// the store still holds): start from the store's newest snapshot, then these segments.
    Adopt {
        /// The snapshot to start from (`None`: from the beginning).
        snapshot: Option<u64>,
        /// The segments after it.
        chain: Vec<SegmentRange>,
    },
}

/// Decides how a local journal continues the store's history (see [`Standing`]).
/// `local_first` is the oldest record held and `local_snapshot` the newest snapshot.
pub fn standing(
    remote: Option<&Remote>,
    local_first: Option<u64>,
    local_last: u64,
    local_snapshot: Option<u64>,
) -> Standing {
    let Some(remote) = remote else {
        let after = match local_first {
            Some(first) if first > 1 => local_snapshot.unwrap_or(first - 1),
            _ => 0,
        };
        return Standing::Fresh { after };
    };
    if local_last == 0 {
        return adopt(remote);
    }
    if local_last >= remote.end {
        return Standing::Ahead {
            after: remote.end,
            check: remote.chain.last().copied(),
        };
    }
    if remote.reaches_back_to(local_last) {
        // From the segment holding the local journal's last record, so that importing
        // compares at least that record with the store's.
        let chain = remote.chain_after(local_last - 1);
        if chain.first().is_some_and(|first| first.after <= local_last) {
            return Standing::Behind { chain };
        }
    }
    adopt(remote)
}

/// Starting over from the store: its newest snapshot, then the segments after it. What a
/// journal does when it cannot continue the store's history, or when its records were found
/// to disagree with the store's (it then sets its own aside first).
pub fn adopt(remote: &Remote) -> Standing {
    Standing::Adopt {
        snapshot: remote.latest_snapshot,
        chain: remote.chain_after(remote.latest_snapshot.unwrap_or(remote.readable_from)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{segment_name, snapshot_name};

    fn range(after: u64, last: u64) -> SegmentRange {
        SegmentRange { after, last }
    }

    fn listing(segments: &[(u64, u64)], snapshots: &[u64]) -> Listing {
        let names = segments
            .iter()
            .map(|(a, l)| segment_name(range(*a, *l)))
            .chain(snapshots.iter().map(|s| snapshot_name(*s)))
            .chain(["README.txt".to_owned()]);
        Listing::parse(names)
    }

    #[test]
    fn a_listing_sorts_its_names() {
        let l = listing(&[(10, 20), (0, 10)], &[15, 5]);
        assert_eq!(l.segments, vec![range(0, 10), range(10, 20)]);
        assert_eq!(l.snapshots, vec![5, 15]);
        assert_eq!(l.other, vec!["README.txt".to_owned()]);
    }

    #[test]
    fn the_history_runs_from_the_oldest_unbroken_start() {
        assert_eq!(remote_history(&listing(&[], &[])), Ok(None));
        let whole = remote_history(&listing(&[(0, 10), (10, 20), (20, 30)], &[15]))
            .unwrap()
            .unwrap();
        assert_eq!(whole.readable_from, 0);
        assert_eq!(whole.end, 30);
        assert_eq!(whole.latest_snapshot, Some(15));
        assert!(whole.holes.is_empty());
        assert_eq!(whole.chain_after(15), vec![range(10, 20), range(20, 30)]);

        // A lifecycle rule deleted the oldest segments: readable from the snapshot.
        let trimmed = remote_history(&listing(&[(10, 20), (20, 30)], &[15]))
            .unwrap()
            .unwrap();
        assert_eq!(trimmed.readable_from, 15);
        assert!(trimmed.holes.is_empty());

        // A segment missing in the middle: readable from the snapshot after it, the hole
        // reported.
        let holed = remote_history(&listing(&[(0, 10), (20, 30), (30, 40)], &[25]))
            .unwrap()
            .unwrap();
        assert_eq!(holed.readable_from, 25);
        assert_eq!(holed.holes, vec![range(10, 20)]);

        // A gap after the newest snapshot loses records the state needs.
        assert_eq!(
            remote_history(&listing(&[(0, 10), (20, 30)], &[5])),
            Err(ChainError::Gap {
                from: 10,
                next: range(20, 30)
            })
        );
        assert!(matches!(
            remote_history(&listing(&[(0, 10), (5, 30)], &[])),
            Err(ChainError::Overlap { .. })
        ));
    }

    #[test]
    fn a_local_journal_continues_catches_up_or_adopts() {
        let remote = remote_history(&listing(&[(0, 10), (10, 20), (20, 30)], &[15]))
            .unwrap()
            .unwrap();
        assert_eq!(standing(None, None, 0, None), Standing::Fresh { after: 0 });
        assert_eq!(
            standing(None, Some(41), 60, Some(40)),
            Standing::Fresh { after: 40 },
            "retention removed the records before the snapshot"
        );
        assert_eq!(
            standing(Some(&remote), Some(1), 34, Some(15)),
            Standing::Ahead {
                after: 30,
                check: Some(range(20, 30))
            }
        );
        assert_eq!(
            standing(Some(&remote), Some(1), 12, None),
            Standing::Behind {
                chain: vec![range(10, 20), range(20, 30)]
            }
        );
        assert_eq!(
            standing(Some(&remote), None, 0, None),
            Standing::Adopt {
                snapshot: Some(15),
                chain: vec![range(10, 20), range(20, 30)]
            }
        );
        // A segment ends exactly at the local end: the chain starts at the one holding it,
        // so the local last record is compared with the store's.
        let seam = remote_history(&listing(&[(0, 5), (5, 6), (6, 8)], &[]))
            .unwrap()
            .unwrap();
        assert_eq!(
            standing(Some(&seam), Some(1), 6, None),
            Standing::Behind {
                chain: vec![range(5, 6), range(6, 8)]
            }
        );
        // Older than anything the store still holds.
        let trimmed = remote_history(&listing(&[(20, 30)], &[25]))
            .unwrap()
            .unwrap();
        assert_eq!(
            standing(Some(&trimmed), Some(1), 12, None),
            Standing::Adopt {
                snapshot: Some(25),
                chain: vec![range(20, 30)]
            }
        );
    }
}
