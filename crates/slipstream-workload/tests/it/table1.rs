//! The Table 1 workload: determinism, sizes, bucket shares of a request stream, the
//! modified mix, and materializing files.

use std::collections::HashMap;

use slipstream_workload::table1::{self, FileSet, FileSetParams, Mix, BUCKETS};

const MB32: u64 = 32 * 1024 * 1024;

fn scaled(scale: f64) -> FileSet {
    table1::file_set(&FileSetParams {
        scale,
        ..FileSetParams::default()
    })
}

#[test]
fn file_set_is_deterministic_per_seed() {
    let p = FileSetParams {
        seed: 7,
        ..FileSetParams::default()
    };
    assert_eq!(table1::file_set(&p), table1::file_set(&p));
    let other = table1::file_set(&FileSetParams { seed: 8, ..p });
    assert_ne!(table1::file_set(&p), other);
}

#[test]
fn paper_sized_set() {
    for seed in 0..20 {
        let fs = table1::file_set(&FileSetParams {
            seed,
            ..FileSetParams::default()
        });
        assert_eq!(fs.files.len(), 3022);
        let largest = fs.largest(3);
        assert_eq!(largest.len(), 3);
        assert!(largest.iter().all(|f| f.size_bytes > MB32), "seed {seed}");
        // Everything else is smaller than the three, so they are well defined.
        let fourth = fs.largest(4)[3].size_bytes;
        assert!(fourth < largest[2].size_bytes);
        let total = fs.total_bytes() as f64;
        assert!((total / 281e6 - 1.0).abs() < 0.05, "seed {seed}: {total}");
        // Every bucket of Table 1 has files.
        for b in 0..BUCKETS.len() {
            assert!(fs.files.iter().any(|f| f.bucket == b), "bucket {b}");
        }
    }
}

#[test]
fn scaled_total_follows_scale() {
    let fs = scaled(0.01);
    let total = fs.total_bytes() as f64;
    assert!((total / 2.81e6 - 1.0).abs() < 0.05, "{total}");
}

fn bucket_percentages(fs: &FileSet, reqs: &[slipstream_workload::Request]) -> [f64; 6] {
    let bucket: HashMap<&str, usize> = fs
        .files
        .iter()
        .map(|f| (f.key.as_str(), f.bucket))
        .collect();
    let mut counts = [0usize; 6];
    for r in reqs {
        counts[bucket[r.key.as_str()]] += 1;
    }
    counts.map(|c| 100.0 * c as f64 / reqs.len() as f64)
}

#[test]
fn request_stream_follows_table1() {
    let fs = scaled(0.01);
    let reqs = table1::requests(&fs, &Mix::default(), 200_000, 100.0, 42);
    assert_eq!(reqs.len(), 200_000);
    let pct = bucket_percentages(&fs, &reqs);
    for (b, bucket) in BUCKETS.iter().enumerate() {
        assert!(
            (pct[b] - bucket.3).abs() <= 1.5,
            "bucket {b}: {} vs {}",
            pct[b],
            bucket.3
        );
    }
    // Poisson arrivals at 100/s: increasing times, mean gap ≈ 10 ms.
    assert!(reqs.windows(2).all(|w| w[0].time_s <= w[1].time_s));
    let span = reqs[reqs.len() - 1].time_s;
    assert!((span / 2000.0 - 1.0).abs() < 0.02, "{span}");
    // Deterministic per seed.
    assert_eq!(
        reqs[..100],
        table1::requests(&fs, &Mix::default(), 100, 100.0, 42)[..]
    );
}

#[test]
fn modified_mix_favours_the_largest_files() {
    let fs = scaled(0.01);
    let hot: Vec<&str> = fs.largest(3).iter().map(|f| f.key.as_str()).collect();
    for share in [0.02, 0.08, 0.3] {
        let mix = Mix {
            hot_share: Some(share),
            ..Mix::default()
        };
        let reqs = table1::requests(&fs, &mix, 100_000, 1.0, 3);
        let n_hot = reqs
            .iter()
            .filter(|r| hot.contains(&r.key.as_str()))
            .count();
        let got = n_hot as f64 / reqs.len() as f64;
        assert!((got - share).abs() < 0.01, "share {share}: {got}");
        // Each of the three gets about a third.
        for k in &hot {
            let n = reqs.iter().filter(|r| r.key == *k).count() as f64 / reqs.len() as f64;
            assert!((n - share / 3.0).abs() < 0.01, "{k}: {n}");
        }
        let p = fs.probabilities(&mix);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    }
}

#[test]
fn url_list_matches_probabilities() {
    let fs = scaled(0.01);
    let mix = Mix {
        hot_share: Some(0.5),
        ..Mix::default()
    };
    let mut out = Vec::new();
    table1::write_url_list(&fs, &mix, &mut out).expect("write");
    let text = String::from_utf8(out).expect("utf-8");
    let first: Vec<&str> = text
        .lines()
        .take(3)
        .map(|l| l.split('\t').nth(1).unwrap_or(""))
        .collect();
    let mut hot: Vec<&str> = fs.largest(3).iter().map(|f| f.key.as_str()).collect();
    let mut first_sorted = first.clone();
    hot.sort_unstable();
    first_sorted.sort_unstable();
    assert_eq!(first_sorted, hot);
}

#[test]
fn materialize_writes_the_right_sizes() {
    let fs = scaled(0.001);
    let dir = tempfile::tempdir().expect("tempdir");
    fs.materialize(dir.path()).expect("materialize");
    for f in &fs.files {
        let path = dir.path().join(f.key.trim_start_matches('/'));
        let meta = std::fs::metadata(&path).expect("file exists");
        assert_eq!(meta.len(), f.size_bytes, "{}", f.key);
    }
    let big = fs.largest(1)[0];
    let bytes = std::fs::read(dir.path().join(big.key.trim_start_matches('/'))).expect("read");
    assert_eq!(bytes, table1::content(&big.key, bytes.len()));
    assert!(bytes.iter().any(|&b| b != bytes[0]));
}
