//! Requests per second of trace replay through the cache engine (`slipstream cachesim`).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use slipstream_cache::{sim, Config, Policy};

/// A deterministic Zipf-like trace over 10,000 objects with sizes from 100 B to 1 MB.
fn trace(n: usize) -> Vec<(String, u64)> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            // Inverse-power sampling gives a heavy head of popular objects.
            let rank = ((10_000f64).powf(u) - 1.0) as u64;
            let size = 100 + (rank * 7919) % 1_000_000;
            (format!("/obj/{rank}"), size)
        })
        .collect()
}

fn replay(c: &mut Criterion) {
    let trace = trace(200_000);
    let mut group = c.benchmark_group("cachesim");
    group.throughput(Throughput::Elements(trace.len() as u64));
    group.sample_size(10);
    for policy in ["adaptive", "total", "lru", "sieve"] {
        let config = Config::new(64 << 20, policy.parse::<Policy>().expect("policy"));
        group.bench_function(policy, |b| {
            b.iter(|| sim::replay(config, trace.iter().map(|(k, s)| (k.as_str(), *s))))
        });
    }
    group.finish();
}

criterion_group!(benches, replay);
criterion_main!(benches);
