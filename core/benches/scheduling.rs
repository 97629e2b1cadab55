//! One scheduling round against the full embedded us-east-1 catalog (every priced type),
//! at 1,000 and 10,000 pending pods. Run with
//! `cargo bench -p karpenter-core --bench scheduling`; it first prints, for each size, the
//! NodeClaims planned and their $/h at each claim's cheapest option, then criterion's timings.
//!
//! Pods: requests drawn with a fixed seed from CPU {100m, 250m, 500m, 1, 1.5} × memory
//! {100Mi, 256Mi, 512Mi, 1Gi, 2Gi, 4Gi} (upstream's benchmark distribution); one in five
//! pins zone us-east-1a, one in ten must run on-demand. Two NodePools: default (spot and
//! on-demand) and a tainted on-demand pool of weight 10 that only tolerating pods use. A third
//! case puts 1,000 of those pods, half of them zone-spread, beside 1,000 full existing nodes.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use karpenter_core::model::catalog::{Catalog, assumed_spot_price};
use karpenter_core::model::pod::TopologySpread;
use karpenter_core::model::{
    KubeletSettings, Pod, Requirement, Requirements, Resources, Taint, Toleration,
};
use karpenter_core::scheduling::{ExistingNode, Limits, NodePoolTemplate, SchedulingInput, solve};
use karpenter_core::vocab::labels;

fn pods(n: usize) -> Vec<Pod> {
    const CPU: [i64; 5] = [100, 250, 500, 1000, 1500];
    const MEM_MIB: [i64; 6] = [100, 256, 512, 1024, 2048, 4096];
    let mut state: u64 = 42;
    let mut next = |m: usize| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 33) as usize) % m
    };
    (0..n)
        .map(|i| {
            let mut p = Pod::simple(&format!("pod-{i:05}"), CPU[next(5)], MEM_MIB[next(6)] << 20);
            if i % 5 == 0 {
                p.node_selector
                    .add(labels::ZONE, Requirement::is_in(["us-east-1a"]));
            }
            if i % 10 == 3 {
                p.node_selector
                    .add(labels::CAPACITY_TYPE, Requirement::is_in(["on-demand"]));
            }
            if i % 20 == 7 {
                p.tolerations.push(Toleration {
                    key: "dedicated".into(),
                    exists: true,
                    value: String::new(),
                    effect: String::new(),
                });
            }
            p
        })
        .collect()
}

fn input(n: usize) -> SchedulingInput {
    let catalog = Catalog::embedded().expect("embedded catalog");
    let types: Vec<_> = catalog
        .instance_types(
            "us-east-1",
            &KubeletSettings::default(),
            &assumed_spot_price,
        )
        .into_iter()
        .map(Arc::new)
        .collect();
    let mut dedicated = Requirements::new();
    dedicated.add(labels::CAPACITY_TYPE, Requirement::is_in(["on-demand"]));
    let pool = |name: &str, weight, requirements, taints| NodePoolTemplate {
        name: name.into(),
        weight,
        requirements,
        taints,
        startup_taints: Vec::new(),
        instance_types: types.clone(),
        limits: Limits::default(),
        usage: Resources::ZERO,
        node_count: 0,
    };
    SchedulingInput {
        pods: pods(n),
        nodepools: vec![
            pool("default", 0, Requirements::new(), Vec::new()),
            pool(
                "dedicated",
                10,
                dedicated,
                vec![Taint::new("dedicated", "true", "NoSchedule")],
            ),
        ],
        existing: Vec::new(),
        daemonsets: vec![Pod::simple("daemonset", 100, 128 << 20)],
        ..Default::default()
    }
}

fn rounds(c: &mut Criterion) {
    let mut group = c.benchmark_group("scheduling/full-catalog");
    for n in [1_000usize, 10_000] {
        let input = input(n);
        let started = Instant::now();
        let result = solve(&input);
        let elapsed = started.elapsed();
        let cost: f64 = result
            .new_claims
            .iter()
            .map(|c| c.instance_types[0].price)
            .sum();
        let options: usize = result
            .new_claims
            .iter()
            .map(|c| c.instance_types.len())
            .sum();
        println!(
            "{n} pods, {} types: {} NodeClaims, {} unschedulable, ${cost:.2}/h at the cheapest options, {:.0} options per claim on average, first round {elapsed:?} ({:.0} pods/s)",
            input.nodepools[0].instance_types.len(),
            result.new_claims.len(),
            result.unschedulable.len(),
            options as f64 / result.new_claims.len().max(1) as f64,
            n as f64 / elapsed.as_secs_f64(),
        );
        assert!(
            result.unschedulable.is_empty(),
            "{:?}",
            result.unschedulable.first()
        );
        group.bench_function(format!("{n}-pods"), |b| {
            b.iter(|| black_box(solve(black_box(&input))))
        });
    }
    // The same 1,000 pods, half of them zone-spread, next to 1,000 full existing nodes: every
    // pod looks at every node, and every spread counts their zones.
    let mut crowded = input(1_000);
    for (i, pod) in crowded
        .pods
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
    {
        pod.labels.insert("app".into(), format!("app-{}", i % 7));
        pod.spread.push(TopologySpread {
            topology_key: labels::ZONE.into(),
            max_skew: 1,
            selector: pod.labels.clone(),
            ..Default::default()
        });
    }
    crowded.existing = (0..1_000)
        .map(|i| ExistingNode {
            name: format!("node-{i:04}"),
            labels: [
                (
                    labels::ZONE.to_owned(),
                    format!("us-east-1{}", ['a', 'b', 'c'][i % 3]),
                ),
                (labels::HOSTNAME.to_owned(), format!("node-{i:04}")),
            ]
            .into(),
            taints: Vec::new(),
            allocatable: Resources::cpu_memory(3_920, 7 << 30),
            requested: Resources::cpu_memory(3_920, 7 << 30),
            pods: vec![(
                "default".into(),
                [("app".to_owned(), format!("app-{}", i % 7))].into(),
            )],
            anti_affinity: Vec::new(),
            host_ports: Vec::new(),
            attach_limits: Default::default(),
            attached: Vec::new(),
        })
        .map(std::sync::Arc::new)
        .collect();
    let started = Instant::now();
    let result = solve(&crowded);
    println!(
        "1000 pods beside 1000 full nodes: {} NodeClaims, {} unschedulable, first round {:?}",
        result.new_claims.len(),
        result.unschedulable.len(),
        started.elapsed()
    );
    group.bench_function("1000-pods-1000-nodes", |b| {
        b.iter(|| black_box(solve(black_box(&crowded))))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5));
    targets = rounds
}
criterion_main!(benches);
