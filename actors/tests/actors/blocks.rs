//! Capacity Blocks ending under a cloud that finds their instances itself (AWS): the
//! interruption actor asks every minute and drains each instance once.

use super::*;

/// Upstream's expiration controller drains the nodes of an expiring Capacity Block: the
/// instance the cloud names is drained as `capacity_block_expiring`, once however often it
/// is named again, and the cloud keeps being asked every minute.
#[tokio::test(start_paused = true)]
async fn instances_in_an_expiring_capacity_block_are_drained_once() {
    use karpenter_actors::actor::messages::InterruptionMsg;
    let system = start("t-blocks").await;
    pending(&system, "p1");
    tokio::time::sleep(Duration::from_secs(2)).await;
    settle().await;
    let asked = system.cloud.expiring_asked.load(Ordering::SeqCst);
    assert!(asked >= 1, "asked at start");
    *system.cloud.expiring.lock().unwrap() = vec!["i-0".to_owned()];
    tokio::time::sleep(Duration::from_secs(61)).await;
    settle().await;
    tokio::time::sleep(Duration::from_secs(61)).await;
    settle().await;
    assert!(system.cloud.expiring_asked.load(Ordering::SeqCst) >= asked + 2);
    assert_eq!(draining_reasons(&system), vec!["capacity_block_expiring"]);
    let status =
        ractor::call_t!(system.actors.interruption, InterruptionMsg::GetStatus, 1000).unwrap();
    assert_eq!((status.received, status.delivered), (1, 1));
}
