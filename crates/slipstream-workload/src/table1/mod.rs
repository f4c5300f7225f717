//! Paper 002's workload (§5.1.2, Table 1) as a synthetic file set and request mix.
//!
//! The paper's site had 3022 files, 281 Mbytes in total, and 34 372 accesses whose
//! distribution over file sizes is Table 1. The paper gives neither the number of
//! files per size bucket nor the sizes inside a bucket, so [`file_set`] chooses them
//! (see [`BASE_FILE_COUNTS`] and the notes on [`file_set`]). [`Mix`] then draws the
//! bucket of each request from Table 1 and the file inside the bucket by Zipf rank;
//! the "modified workload" of §5.4 sends a chosen share of requests to the three
//! largest files instead.
//!
//! "K" and "M" in Table 1 are read as 1000 and 1 000 000 bytes: the paper does not
//! say, and decimal bounds keep the bucket edges round numbers in logs.
//!
//! Everything is deterministic per seed (`StdRng::seed_from_u64`, rand 0.8).

mod materialize;
mod mix;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

pub use materialize::content;
pub use mix::{requests, write_url_list, Mix};

/// Paper 002 Table 1: (lower bound bytes, upper bound bytes, access count, access
/// percent). Lower bounds are inclusive, upper bounds exclusive; "K" = 1000 and
/// "M" = 1 000 000 (the paper is ambiguous). The last bucket ("> 10M") has no upper
/// bound, written as `u64::MAX`.
pub const BUCKETS: [(u64, u64, u64, f64); 6] = [
    (0, 1_000, 3748, 10.9),
    (1_000, 10_000, 16_367, 47.6),
    (10_000, 100_000, 13_419, 39.1),
    (100_000, 1_000_000, 443, 1.3),
    (1_000_000, 10_000_000, 208, 0.6),
    (10_000_000, u64::MAX, 187, 0.5),
];

/// Files per bucket for the paper's 3022 files (our choice; the paper gives none).
/// Small files dominate, as on any 1997 web site, and the counts are chosen so that
/// the expected total of log-uniform sizes plus three files above 32 MB is ≈ 281 MB.
pub const BASE_FILE_COUNTS: [usize; 6] = [620, 1530, 793, 60, 12, 7];

/// Smallest size drawn for the 0–1K bucket, so that no file is empty.
const MIN_FILE_BYTES: f64 = 64.0;
/// The three largest files are drawn from `[HOT_MIN_BYTES, 1.25 * HOT_MIN_BYTES)`,
/// above the 32 MiB cache of the paper's Fig. 11.
const HOT_MIN_BYTES: f64 = 34_000_000.0;
/// How many of the largest files the modified workload favours (§5.4).
pub const HOT_FILES: usize = 3;

/// One file of the synthetic site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSpec {
    /// The URL path, e.g. `/t1/b3/0042.bin` (bucket 3, popularity rank 42).
    pub key: String,
    /// The file size in bytes (after [`FileSetParams::scale`]).
    pub size_bytes: u64,
    /// The index into [`BUCKETS`] the file was generated for.
    pub bucket: usize,
}

/// The synthetic site: files ordered by bucket and, within a bucket, by popularity
/// rank (most popular first). Sizes within a bucket are shuffled, so rank is not
/// correlated with size.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileSet {
    /// All files; see the type's doc for the order.
    pub files: Vec<FileSpec>,
}

/// Parameters of [`file_set`].
#[derive(Debug, Clone, PartialEq)]
pub struct FileSetParams {
    /// Number of files (paper: 3022).
    pub files: usize,
    /// Target total size in bytes before scaling (paper: 281 Mbytes).
    pub total_bytes: u64,
    /// Seed of the size draws and the popularity permutation.
    pub seed: u64,
    /// Multiplies every size (minimum 1 byte); 1.0 is the paper's site, tests use ~0.01.
    pub scale: f64,
}

impl Default for FileSetParams {
    fn default() -> Self {
        FileSetParams {
            files: 3022,
            total_bytes: 281_000_000,
            seed: 0,
            scale: 1.0,
        }
    }
}

/// Builds the file set; the same params give the same set.
///
/// * Files per bucket are [`BASE_FILE_COUNTS`] scaled to `p.files` (largest-remainder
///   rounding), with at least three files in the "> 10M" bucket when `p.files >= 3`.
/// * Sizes in buckets 0–4 are log-uniform within the bucket, stratified so the total
///   varies little between seeds.
/// * In the "> 10M" bucket the three largest files lie in 34–42.5 MB (each larger than
///   the 32 MB cache of Fig. 11); the others, between 10 MB and the smallest of those
///   three, absorb the rest of `total_bytes`.
/// * Only if that cannot reach the target within 2% (unusual params) are all sizes
///   multiplied by one factor, which may move files across bucket bounds.
pub fn file_set(p: &FileSetParams) -> FileSet {
    let mut rng = StdRng::seed_from_u64(p.seed);
    let counts = bucket_counts(p.files);
    let mut sizes: Vec<Vec<f64>> = Vec::with_capacity(BUCKETS.len());
    for (b, &count) in counts.iter().enumerate().take(BUCKETS.len() - 1) {
        let lo = (BUCKETS[b].0 as f64).max(MIN_FILE_BYTES);
        let hi = BUCKETS[b].1 as f64;
        let s = (0..count)
            .map(|i| {
                let u = (i as f64 + rng.gen::<f64>()) / count as f64;
                (lo * (hi / lo).powf(u)).floor().clamp(lo, hi - 1.0)
            })
            .collect();
        sizes.push(s);
    }
    let big = largest_bucket_sizes(&mut rng, counts[5], p.total_bytes as f64, &sizes);
    sizes.push(big);

    let total: f64 = sizes.iter().flatten().sum();
    let target = p.total_bytes as f64;
    let fix = if total > 0.0 && ((total / target) - 1.0).abs() > 0.02 {
        target / total
    } else {
        1.0
    };
    let scale = if p.scale.is_finite() && p.scale > 0.0 {
        p.scale
    } else {
        1.0
    };
    let mut files = Vec::with_capacity(p.files);
    for (b, mut bucket) in sizes.into_iter().enumerate() {
        // Decouple popularity rank (position) from size order.
        bucket.shuffle(&mut rng);
        for (rank, s) in bucket.into_iter().enumerate() {
            files.push(FileSpec {
                key: format!("/t1/b{b}/{rank:04}.bin"),
                size_bytes: ((s * fix * scale).round() as u64).max(1),
                bucket: b,
            });
        }
    }
    FileSet { files }
}

/// Files per bucket for `n` files: [`BASE_FILE_COUNTS`] scaled by largest remainder.
fn bucket_counts(n: usize) -> [usize; 6] {
    let base_total: usize = BASE_FILE_COUNTS.iter().sum();
    let exact: Vec<f64> = BASE_FILE_COUNTS
        .iter()
        .map(|&c| c as f64 * n as f64 / base_total as f64)
        .collect();
    let mut counts = [0usize; 6];
    for (c, e) in counts.iter_mut().zip(&exact) {
        *c = e.floor() as usize;
    }
    let mut order: Vec<usize> = (0..6).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    let assigned: usize = counts.iter().sum();
    for &b in order.iter().take(n - assigned) {
        counts[b] += 1;
    }
    // The modified workload needs three files in the largest bucket.
    while counts[5] < HOT_FILES.min(n) {
        let donor = (0..5).max_by_key(|&b| counts[b]).unwrap_or(0);
        counts[donor] -= 1;
        counts[5] += 1;
    }
    counts
}

/// Sizes for the "> 10M" bucket: three hot-sized files, then fillers that bring the
/// total of `others` plus this bucket close to `target`.
fn largest_bucket_sizes(
    rng: &mut StdRng,
    count: usize,
    target: f64,
    others: &[Vec<f64>],
) -> Vec<f64> {
    let lo = BUCKETS[5].0 as f64;
    let n_hot = count.min(HOT_FILES);
    let mut out: Vec<f64> = (0..n_hot)
        .map(|_| (HOT_MIN_BYTES * (1.0 + 0.25 * rng.gen::<f64>())).floor())
        .collect();
    let fillers = count - n_hot;
    if fillers == 0 {
        return out;
    }
    let ceiling = out.iter().copied().fold(f64::INFINITY, f64::min) - 1.0;
    let used: f64 = others.iter().flatten().sum::<f64>() + out.iter().sum::<f64>();
    let mean = (target - used) / fillers as f64;
    for i in 0..fillers {
        // Spread ±20% around the mean, evenly, so fillers are not all one size.
        let spread = 0.8 + 0.4 * (i as f64 + 0.5) / fillers as f64;
        out.push((mean * spread).floor().clamp(lo, ceiling.max(lo)));
    }
    out
}

impl FileSet {
    /// The `n` largest files, largest first (ties by key). With `n` = 3 these are the
    /// files the paper's "modified workload" (§5.4) makes popular.
    pub fn largest(&self, n: usize) -> Vec<&FileSpec> {
        self.largest_indices(n)
            .into_iter()
            .map(|i| &self.files[i])
            .collect()
    }

    /// Indices into `files` of the `n` largest files, largest first.
    fn largest_indices(&self, n: usize) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..self.files.len()).collect();
        idx.sort_by(|&a, &b| {
            let (fa, fb) = (&self.files[a], &self.files[b]);
            fb.size_bytes
                .cmp(&fa.size_bytes)
                .then_with(|| fa.key.cmp(&fb.key))
        });
        idx.truncate(n);
        idx
    }

    /// The sum of all file sizes.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size_bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_counts_match_paper() {
        assert_eq!(BASE_FILE_COUNTS.iter().sum::<usize>(), 3022);
        assert_eq!(bucket_counts(3022), BASE_FILE_COUNTS);
        let total: u64 = BUCKETS.iter().map(|b| b.2).sum();
        assert_eq!(total, 34_372);
    }

    #[test]
    fn counts_for_small_sets() {
        for n in [0, 1, 2, 3, 5, 10, 100, 5000] {
            let c = bucket_counts(n);
            assert_eq!(c.iter().sum::<usize>(), n, "n={n}");
            assert!(c[5] >= n.min(3), "n={n}: {c:?}");
        }
    }

    #[test]
    fn sizes_stay_in_their_bucket() {
        // At scale 1 the default params never need the global correction factor.
        for seed in 0..50 {
            let fs = file_set(&FileSetParams {
                seed,
                ..FileSetParams::default()
            });
            assert_eq!(fs.files.len(), 3022);
            for f in &fs.files {
                let (lo, hi, _, _) = BUCKETS[f.bucket];
                assert!(
                    f.size_bytes >= lo && f.size_bytes < hi,
                    "seed {seed}: {f:?}"
                );
            }
            let total = fs.total_bytes() as f64;
            assert!((total / 281e6 - 1.0).abs() < 0.02, "seed {seed}: {total}");
        }
    }

    #[test]
    fn tiny_and_empty_sets() {
        let empty = file_set(&FileSetParams {
            files: 0,
            ..FileSetParams::default()
        });
        assert!(empty.files.is_empty());
        assert!(empty.largest(3).is_empty());
        let two = file_set(&FileSetParams {
            files: 2,
            ..FileSetParams::default()
        });
        assert_eq!(two.files.len(), 2);
    }
}
