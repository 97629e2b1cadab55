//! Journal throughput: single appends, group-committed batches, durable (flushed) appends and
//! replay. Run with `cargo bench -p karpenter-journal --bench journal`; criterion prints time
//! per iteration and events per second for each case.

#[path = "../tests/common/mod.rs"]
mod common;

use common::{CounterEvent, Counters, added};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use karpenter_journal::{Journal, Until};
use std::time::Duration;

fn open() -> (tempfile::TempDir, Journal<CounterEvent>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let journal = Journal::open(dir.path()).expect("open journal");
    (dir, journal)
}

fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("journal/append");
    group.throughput(Throughput::Elements(1));
    let (_dir, journal) = open();
    let event = added("default-x7k2p", 1);
    group.bench_function("single", |b| {
        b.iter(|| journal.append(&event).expect("append"))
    });
    group.bench_function("single+flush", |b| {
        b.iter(|| {
            journal.append(&event).expect("append");
            journal.flush().expect("flush");
        })
    });
    for size in [10u64, 100, 1000] {
        let batch: Vec<_> = (0..size).map(|i| added(&format!("nc-{i}"), 1)).collect();
        group.throughput(Throughput::Elements(size));
        group.bench_function(format!("batch-{size}"), |b| {
            b.iter(|| journal.append_batch(&batch).expect("append"))
        });
        group.bench_function(format!("batch-{size}+flush"), |b| {
            b.iter(|| {
                journal.append_batch(&batch).expect("append");
                journal.flush().expect("flush");
            })
        });
    }
    group.finish();
}

fn replay(c: &mut Criterion) {
    let mut group = c.benchmark_group("journal/replay");
    const EVENTS: u64 = 100_000;
    let (_dir, journal) = open();
    let batch: Vec<_> = (0..1000)
        .map(|i| added(&format!("nc-{}", i % 500), 1))
        .collect();
    for _ in 0..EVENTS / 1000 {
        journal.append_batch(&batch).expect("append");
    }
    group.throughput(Throughput::Elements(EVENTS));
    group.bench_function("fold-100k", |b| {
        b.iter_batched(
            || (),
            |()| journal.replay::<Counters>(Until::End).expect("replay"),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = append, replay
}
criterion_main!(benches);
