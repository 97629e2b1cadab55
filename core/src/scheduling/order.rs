//! The order a round places pods in.

use crate::model::{Pod, ResourceName};
use crate::vocab::labels;

use super::SchedulingInput;
use super::pools::PoolState;
use super::topology::KeyRef;

/// The order pods are placed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Order {
    /// Pods needing a node of their own, then by dominant share, largest first.
    Largest,
    /// As [`Order::Largest`], but CPU-heavy and memory-heavy pods interleaved so that what
    /// has been placed keeps the instance types' memory per vCPU: by size alone, a round of
    /// many small pods fills its first nodes with one shape and strands the other resource.
    Balanced,
}

/// The order pods are placed in: pods that need a node of their own first (they decide how
/// many nodes there are, and later pods fill them), then by dominant share (CPU or memory,
/// whichever is the larger fraction of a typical instance type), largest first, so pods heavy
/// in either resource are placed while there is still room to balance them. Deterministic
/// whatever the input order.
pub(super) fn placement_order(
    input: &SchedulingInput,
    order: Order,
    bytes_per_core: f64,
) -> Vec<usize> {
    let own_node = |p: &Pod| {
        p.pod_affinity.iter().any(|t| {
            t.anti
                && t.topology_key == labels::HOSTNAME
                && KeyRef::affinity(t, &p.namespace).matches(&p.namespace, &p.labels)
        })
    };
    let dominant = |p: &Pod| {
        let cpu = p.requests.get(ResourceName::Cpu) as f64 / 1000.0;
        let memory = p.requests.get(ResourceName::Memory) as f64 / bytes_per_core;
        cpu.max(memory)
    };
    let mut keyed: Vec<(bool, f64, usize)> = input
        .pods
        .iter()
        .enumerate()
        .map(|(i, p)| (own_node(p), dominant(p), i))
        .collect();
    keyed.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(b.1.total_cmp(&a.1))
            .then_with(|| larger_first(&input.pods[a.2], &input.pods[b.2]))
    });
    if order == Order::Largest {
        return keyed.into_iter().map(|(_, _, i)| i).collect();
    }
    let own_nodes = keyed.iter().take_while(|k| k.0).count();
    let mut order: Vec<usize> = keyed[..own_nodes].iter().map(|k| k.2).collect();
    // Of the rest, the next pod is the largest of whichever shape brings the placed pods'
    // CPU and memory (at the typical memory per vCPU) closer to even.
    let excess = |p: &Pod| {
        p.requests.get(ResourceName::Cpu) as f64 / 1000.0
            - p.requests.get(ResourceName::Memory) as f64 / bytes_per_core
    };
    let (cpu_heavy, memory_heavy): (Vec<usize>, Vec<usize>) = keyed[own_nodes..]
        .iter()
        .map(|k| k.2)
        .partition(|i| excess(&input.pods[*i]) > 0.0);
    let (mut cpu_next, mut memory_next) =
        (cpu_heavy.iter().peekable(), memory_heavy.iter().peekable());
    let mut balance = 0.0;
    loop {
        let next = match (cpu_next.peek(), memory_next.peek()) {
            (Some(_), Some(_)) if balance > 0.0 => memory_next.next(),
            (Some(_), _) => cpu_next.next(),
            (None, Some(_)) => memory_next.next(),
            (None, None) => break,
        };
        if let Some(&i) = next {
            balance += excess(&input.pods[i]);
            order.push(i);
        }
    }
    order
}

/// Upstream's order: CPU, then memory, largest first.
pub(super) fn first_fit_decreasing_order(input: &SchedulingInput) -> Vec<usize> {
    let mut order: Vec<usize> = (0..input.pods.len()).collect();
    order.sort_by(|a, b| larger_first(&input.pods[*a], &input.pods[*b]));
    order
}

/// CPU, then memory, largest first; then by UID, so the order never depends on the input's.
pub(super) fn larger_first(a: &Pod, b: &Pod) -> std::cmp::Ordering {
    let cpu = |p: &Pod| p.requests.get(ResourceName::Cpu);
    let memory = |p: &Pod| p.requests.get(ResourceName::Memory);
    cpu(b)
        .cmp(&cpu(a))
        .then_with(|| memory(b).cmp(&memory(a)))
        .then_with(|| a.uid.cmp(&b.uid))
}

/// The median memory per vCPU of the round's instance types (4 GiB when there are none),
/// from each pool's sorted ratios.
pub(super) fn typical_memory_per_core(pools: &[PoolState]) -> f64 {
    let median = |ratios: &[f64]| ratios.get(ratios.len() / 2).copied();
    let found = match pools {
        [one] => median(one.catalog.memory_per_core()),
        _ => {
            let mut ratios: Vec<f64> = pools
                .iter()
                .flat_map(|p| p.catalog.memory_per_core())
                .copied()
                .collect();
            ratios.sort_by(f64::total_cmp);
            median(&ratios)
        }
    };
    found.unwrap_or(4.0 * (1u64 << 30) as f64)
}
