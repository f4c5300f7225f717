//! Request mixes over a [`FileSet`]: per-file probabilities, request streams and URL
//! lists for the load generator.
//!
//! The bucket of a request follows Table 1's access counts; the file inside a bucket
//! follows a Zipf law over the files' popularity ranks (their order in
//! [`FileSet::files`], which [`super::file_set`] decouples from size). Buckets without
//! files give their share to the others in proportion.

use std::io::{self, Write};

use rand::distributions::{Distribution, WeightedIndex};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::Exp;

use super::{FileSet, BUCKETS, HOT_FILES};
use crate::Request;

/// Request mix.
#[derive(Debug, Clone, PartialEq)]
pub struct Mix {
    /// `None`: the "current" workload (Table 1 percentages). `Some(x)`: the "modified"
    /// workload of 002 §5.4: a fraction `x` (clamped to 0..=1, NaN counts as 0) of
    /// requests goes uniformly to the three largest files, the rest follows Table 1
    /// over the other files.
    pub hot_share: Option<f64>,
    /// Zipf exponent of popularity within a bucket (default 0.8; 0 is uniform;
    /// a negative or non-finite value counts as 0).
    pub zipf_alpha: f64,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            hot_share: None,
            zipf_alpha: 0.8,
        }
    }
}

impl FileSet {
    /// Per-file request probability under `mix`, indexed like `files`; sums to 1
    /// (all zeros for an empty set).
    pub fn probabilities(&self, mix: &Mix) -> Vec<f64> {
        let n = self.files.len();
        let mut p = vec![0.0; n];
        if n == 0 {
            return p;
        }
        let hot_share = mix
            .hot_share
            .map(|x| if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) });
        let alpha = if mix.zipf_alpha.is_finite() && mix.zipf_alpha > 0.0 {
            mix.zipf_alpha
        } else {
            0.0
        };
        let mut is_hot = vec![false; n];
        let hot = match hot_share {
            Some(_) => self.largest_indices(HOT_FILES),
            None => Vec::new(),
        };
        for &i in &hot {
            is_hot[i] = true;
        }

        // Zipf weight of each non-hot file by its rank among its bucket's non-hot files.
        let mut rank = [0usize; BUCKETS.len()];
        let mut bucket_weight = [0.0f64; BUCKETS.len()];
        for (i, f) in self.files.iter().enumerate() {
            let b = f.bucket.min(BUCKETS.len() - 1);
            if is_hot[i] {
                continue;
            }
            rank[b] += 1;
            let w = (rank[b] as f64).powf(-alpha);
            p[i] = w;
            bucket_weight[b] += w;
        }
        let share_total: f64 = (0..BUCKETS.len())
            .filter(|&b| bucket_weight[b] > 0.0)
            .map(|b| BUCKETS[b].2 as f64)
            .sum();
        let cold_share = if share_total > 0.0 {
            1.0 - hot_share.unwrap_or(0.0)
        } else {
            0.0
        };
        for (i, f) in self.files.iter().enumerate() {
            if is_hot[i] {
                continue;
            }
            let b = f.bucket.min(BUCKETS.len() - 1);
            p[i] *= cold_share * (BUCKETS[b].2 as f64 / share_total) / bucket_weight[b];
        }
        let hot_each = (1.0 - cold_share) / hot.len().max(1) as f64;
        for &i in &hot {
            p[i] = hot_each;
        }
        // Guard against rounding and the corner where every file is hot.
        let sum: f64 = p.iter().sum();
        if sum > 0.0 {
            p.iter_mut().for_each(|x| *x /= sum);
        }
        p
    }
}

/// `n` requests drawn from `mix`, deterministic per seed, with Poisson arrivals at
/// `rate_per_s` (exponential gaps; the first request comes after one gap). A rate
/// that is not positive and finite puts every request at time 0. An empty file set
/// gives no requests.
pub fn requests(fs: &FileSet, mix: &Mix, n: usize, rate_per_s: f64, seed: u64) -> Vec<Request> {
    let Ok(pick) = WeightedIndex::new(fs.probabilities(mix)) else {
        return Vec::new();
    };
    let gap = if rate_per_s.is_finite() && rate_per_s > 0.0 {
        Exp::new(rate_per_s).ok()
    } else {
        None
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut t = 0.0;
    (0..n)
        .map(|_| {
            if let Some(g) = &gap {
                t += g.sample(&mut rng);
            }
            let f = &fs.files[pick.sample(&mut rng)];
            Request {
                time_s: t,
                key: f.key.clone(),
                size_bytes: f.size_bytes,
            }
        })
        .collect()
}

/// Writes `weight<TAB>key` lines (a URL list for the load generator), heaviest first
/// (ties by key). Weights are the probabilities of [`FileSet::probabilities`]; files
/// with weight 0 are left out.
pub fn write_url_list<W: Write>(fs: &FileSet, mix: &Mix, mut w: W) -> io::Result<()> {
    let p = fs.probabilities(mix);
    let mut order: Vec<usize> = (0..p.len()).filter(|&i| p[i] > 0.0).collect();
    order.sort_by(|&a, &b| {
        p[b].total_cmp(&p[a])
            .then_with(|| fs.files[a].key.cmp(&fs.files[b].key))
    });
    for i in order {
        writeln!(w, "{}\t{}", p[i], fs.files[i].key)?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::super::{file_set, FileSetParams};
    use super::*;

    fn small() -> FileSet {
        file_set(&FileSetParams {
            scale: 0.01,
            ..FileSetParams::default()
        })
    }

    #[test]
    fn probabilities_sum_to_one() {
        let fs = small();
        for hot_share in [None, Some(0.0), Some(0.3), Some(1.0), Some(f64::NAN)] {
            let mix = Mix {
                hot_share,
                ..Mix::default()
            };
            let p = fs.probabilities(&mix);
            assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{hot_share:?}");
            assert!(p.iter().all(|&x| x >= 0.0));
        }
    }

    #[test]
    fn bucket_shares_match_table1() {
        let fs = small();
        let p = fs.probabilities(&Mix::default());
        for (b, bucket) in BUCKETS.iter().enumerate() {
            let share: f64 = fs
                .files
                .iter()
                .zip(&p)
                .filter(|(f, _)| f.bucket == b)
                .map(|(_, x)| x)
                .sum();
            assert!(
                (share * 100.0 - bucket.3).abs() < 0.06,
                "bucket {b}: {share}"
            );
        }
    }

    #[test]
    fn zipf_prefers_low_ranks() {
        let fs = small();
        let p = fs.probabilities(&Mix::default());
        // Files 0 and 1 are ranks 1 and 2 of bucket 0.
        assert!(p[0] > p[1]);
        let uniform = fs.probabilities(&Mix {
            zipf_alpha: 0.0,
            ..Mix::default()
        });
        assert!((uniform[0] - uniform[1]).abs() < 1e-15);
    }

    #[test]
    fn url_list_is_sorted_and_parsable() {
        let fs = small();
        let mut out = Vec::new();
        write_url_list(&fs, &Mix::default(), &mut out).expect("write to vec");
        let text = String::from_utf8(out).expect("utf-8");
        let weights: Vec<f64> = text
            .lines()
            .map(|l| {
                l.split('\t')
                    .next()
                    .and_then(|w| w.parse().ok())
                    .expect("weight")
            })
            .collect();
        assert_eq!(weights.len(), fs.files.len());
        assert!(weights.windows(2).all(|w| w[0] >= w[1]));
    }

    #[test]
    fn empty_set_and_odd_rates() {
        assert!(requests(&FileSet::default(), &Mix::default(), 10, 1.0, 1).is_empty());
        let r = requests(&small(), &Mix::default(), 5, 0.0, 1);
        assert_eq!(r.len(), 5);
        assert!(r.iter().all(|q| q.time_s == 0.0));
    }
}
