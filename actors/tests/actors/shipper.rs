//! The journal shipper on the paused clock, against the in-memory history store: segments
//! every interval, nothing shipped twice, an idle journal left alone, a failing store
//! costing only lag, a second writer stopping it, and a replica that lost the Lease storing
//! nothing more.

use karpenter_actors::actor::shipper::{Shipper, Shipping};
use karpenter_core::ports::history::{HistoryError, HistoryStore, MemoryHistory};
use karpenter_journal::history::{Listing, remote_history};

use super::*;

fn shipping(store: &MemoryHistory) -> Arc<Shipping> {
    Arc::new(Shipping::new(Arc::new(store.clone()), 0))
}

#[tokio::test(start_paused = true)]
async fn the_journal_reaches_the_store_every_interval_and_only_once() {
    let store = MemoryHistory::new("memory://journals/t");
    let shipping = shipping(&store);
    let clock = Arc::new(keeper::PausedClock(tokio::time::Instant::now()));
    let system = start_shipping(
        "t-shipper",
        |_| None,
        vec![nodepool()],
        (Settings::default(), Some(clock)),
        Some(shipping.clone()),
    )
    .await;
    pending(&system, "p0");
    tokio::time::sleep(Duration::from_secs(61)).await;
    settle().await;
    let last = system.journal.last_seq().unwrap().unwrap();
    assert!(shipping.shipped() > 0, "nothing shipped");
    // The pass journaled how far it got, after what it shipped.
    let shipped: Vec<u64> = system
        .journal
        .read_from(0)
        .filter_map(|e| match e.unwrap().event {
            DomainEvent::JournalShipped { through, .. } => Some(through),
            _ => None,
        })
        .collect();
    assert_eq!(shipped, vec![shipping.shipped()]);
    assert_eq!(last, shipping.shipped() + 1, "only the marker is left");
    // An idle journal: the next passes ship nothing and journal nothing.
    let objects = store.objects().len();
    tokio::time::sleep(Duration::from_secs(180)).await;
    settle().await;
    assert_eq!(store.objects().len(), objects);
    assert_eq!(system.journal.last_seq().unwrap().unwrap(), last);

    // A store that fails costs lag, not records; the next pass catches up.
    store.fail_next([HistoryError::Throttled {
        location: store.location().to_owned(),
    }]);
    pending(&system, "p1");
    tokio::time::sleep(Duration::from_secs(61)).await;
    settle().await;
    assert!(system.metrics.journal_upload_lag_seconds() > 0.0);
    tokio::time::sleep(Duration::from_secs(60)).await;
    settle().await;
    assert_eq!(system.metrics.journal_upload_lag_seconds(), 0.0);

    // The store's history is one chain, and every record is in it once.
    let remote = remote_history(&Listing::parse(store.objects().keys()))
        .unwrap()
        .unwrap();
    assert_eq!(remote.readable_from, 0);
    assert_eq!(remote.end, shipping.shipped());

    // A clean stop ships the rest, its own marker included.
    let ctx = system.actors_context();
    let mut last_pass = Shipper::new(ctx, shipping.clone());
    let through = last_pass.finish().await.unwrap();
    assert_eq!(Some(through), system.journal.last_seq().unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_second_writer_stops_the_shipper_and_keeps_the_records() {
    let store = MemoryHistory::new("memory://journals/t2");
    let shipping = shipping(&store);
    let clock = Arc::new(keeper::PausedClock(tokio::time::Instant::now()));
    let system = start_shipping(
        "t-shipper-2",
        |_| None,
        vec![nodepool()],
        (Settings::default(), Some(clock)),
        Some(shipping.clone()),
    )
    .await;
    // Someone else stored the history's first segment.
    store
        .put_new(
            "segments/00000000000000000000-00000000000000000003.kjseg",
            vec![1, 2, 3],
        )
        .await
        .unwrap();
    pending(&system, "p0");
    tokio::time::sleep(Duration::from_secs(61)).await;
    settle().await;
    assert_eq!(shipping.shipped(), 0);
    let mut shipper = Shipper::new(system.actors_context(), shipping.clone());
    let error = shipper.ship().await.unwrap_err().to_string();
    assert!(error.contains("another writer"), "{error}");
    assert!(system.journal.last_seq().unwrap().unwrap() > 0);
}

#[tokio::test(start_paused = true)]
async fn a_replica_that_stopped_leading_stores_nothing_more() {
    let store = MemoryHistory::new("memory://journals/t3");
    let (lead, leading) = tokio::sync::watch::channel(true);
    let mut fenced = Shipping::new(Arc::new(store.clone()), 0);
    fenced.leading = Some(leading);
    let shipping = Arc::new(fenced);
    let clock = Arc::new(keeper::PausedClock(tokio::time::Instant::now()));
    let system = start_shipping(
        "t-shipper-3",
        |_| None,
        vec![nodepool()],
        (Settings::default(), Some(clock)),
        Some(shipping.clone()),
    )
    .await;
    pending(&system, "p0");
    tokio::time::sleep(Duration::from_secs(61)).await;
    settle().await;
    let shipped = shipping.shipped();
    assert!(shipped > 0, "the leader ships");
    let objects = store.objects();

    // The Lease is lost: what was recorded since stays local, and no pass stores it.
    lead.send(false).unwrap();
    pending(&system, "p1");
    settle().await;
    let mut shipper = Shipper::new(system.actors_context(), shipping.clone());
    let error = shipper.ship().await.unwrap_err().to_string();
    assert!(error.contains("no longer leads"), "{error}");
    assert_eq!(shipper.finish().await.unwrap(), shipped);
    tokio::time::sleep(Duration::from_secs(120)).await;
    settle().await;
    assert_eq!(
        store.objects(),
        objects,
        "nothing stored after the Lease was lost"
    );
    assert_eq!(shipping.shipped(), shipped);
    assert!(system.journal.last_seq().unwrap().unwrap() > shipped);
}
