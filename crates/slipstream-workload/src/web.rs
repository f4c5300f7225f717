//! A synthetic proxy workload in the manner of ProWGen (Busari and Williamson), the generator
//! behind paper 003's WebTraff traces: a fixed population of objects with Zipf-like
//! popularity and heavy-tailed sizes (a lognormal body with a Pareto tail), requested at
//! Poisson times.
//!
//! Sizes are drawn per object, independently of popularity (ProWGen's default of no
//! size-popularity correlation), so the same object always has the same size.

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal, Zipf};

use crate::Request;

/// Object sizes: a lognormal body with the given mean and standard deviation (bytes); a draw
/// above `tail_k` is replaced by a Pareto(`tail_k`, `tail_alpha`) draw; everything is capped at
/// `max_bytes` and at least 1 byte.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizeModel {
    /// Mean of the lognormal body, bytes.
    pub body_mean: f64,
    /// Standard deviation of the lognormal body, bytes.
    pub body_sd: f64,
    /// Where the Pareto tail starts, bytes.
    pub tail_k: f64,
    /// The tail's shape.
    pub tail_alpha: f64,
    /// Largest size, bytes.
    pub max_bytes: f64,
}

impl SizeModel {
    /// Calibrated to paper 003's Table 2 (median 3,958 B, mean 9,624 B, largest 1,494,900 B):
    /// a median near 3.9 KB and a mean near 10 KB.
    pub fn paper003() -> SizeModel {
        SizeModel {
            body_mean: 7000.0,
            body_sd: 11000.0,
            tail_k: 10000.0,
            tail_alpha: 1.2,
            max_bytes: 1_490_000.0,
        }
    }

    /// A sampler for this model.
    pub fn sampler(&self) -> Result<SizeSampler, WebError> {
        let fields = [
            self.body_mean,
            self.body_sd,
            self.tail_k,
            self.tail_alpha,
            self.max_bytes,
        ];
        if fields.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(WebError::Sizes(*self));
        }
        let sig2 = (1.0 + (self.body_sd / self.body_mean).powi(2)).ln();
        let body = LogNormal::new(self.body_mean.ln() - sig2 / 2.0, sig2.sqrt())
            .map_err(|_| WebError::Sizes(*self))?;
        Ok(SizeSampler { model: *self, body })
    }
}

/// Draws sizes from a [`SizeModel`].
#[derive(Debug, Clone, Copy)]
pub struct SizeSampler {
    model: SizeModel,
    body: LogNormal<f64>,
}

impl SizeSampler {
    /// One size in bytes. Uses one draw from `rng`, or two when the tail is taken.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let mut size = self.body.sample(rng);
        if size > self.model.tail_k {
            let v: f64 = rng.gen_range(1e-12..1.0);
            size = self.model.tail_k * v.powf(-1.0 / self.model.tail_alpha);
        }
        (size as u64).clamp(1, self.model.max_bytes.max(1.0) as u64)
    }
}

/// A synthetic web workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WebConfig {
    /// Distinct objects.
    pub objects: u64,
    /// Zipf exponent of popularity (web proxies: about 0.6–0.9, Breslau et al.).
    pub zipf_alpha: f64,
    /// Requests to generate.
    pub requests: usize,
    /// Poisson arrival rate, requests per second.
    pub rate: f64,
    /// Object sizes.
    pub sizes: SizeModel,
    /// Seed: the same seed gives the same workload.
    pub seed: u64,
}

/// Why a configuration cannot generate.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WebError {
    /// No objects.
    #[error("objects must be at least 1")]
    NoObjects,
    /// A Zipf exponent that is not a positive number.
    #[error("zipf_alpha must be a positive number, not {0}")]
    Alpha(f64),
    /// A size model with a parameter that is not a positive number.
    #[error("every size-model parameter must be a positive number: {0:?}")]
    Sizes(SizeModel),
    /// A rate that is not a positive number.
    #[error("rate must be a positive number of requests per second, not {0}")]
    Rate(f64),
}

/// Generates the requests, in time order. Object `k` is named `/obj/k`; `k = 0` is the most
/// popular.
pub fn generate(cfg: &WebConfig) -> Result<Vec<Request>, WebError> {
    if cfg.objects == 0 {
        return Err(WebError::NoObjects);
    }
    if !(cfg.zipf_alpha.is_finite() && cfg.zipf_alpha > 0.0) {
        return Err(WebError::Alpha(cfg.zipf_alpha));
    }
    if !(cfg.rate.is_finite() && cfg.rate > 0.0) {
        return Err(WebError::Rate(cfg.rate));
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
    let sampler = cfg.sizes.sampler()?;
    let sizes: Vec<u64> = (0..cfg.objects).map(|_| sampler.sample(&mut rng)).collect();
    let zipf =
        Zipf::new(cfg.objects, cfg.zipf_alpha).map_err(|_| WebError::Alpha(cfg.zipf_alpha))?;
    let gaps = Exp::new(cfg.rate).map_err(|_| WebError::Rate(cfg.rate))?;
    let mut t = 0.0;
    Ok((0..cfg.requests)
        .map(|_| {
            t += gaps.sample(&mut rng);
            // Zipf draws ranks 1..=objects.
            let k = (zipf.sample(&mut rng) as u64).clamp(1, cfg.objects) - 1;
            Request {
                time_s: t,
                key: format!("/obj/{k}"),
                size_bytes: sizes[k as usize],
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> WebConfig {
        WebConfig {
            objects: 20_000,
            zipf_alpha: 0.8,
            requests: 50_000,
            rate: 10.0,
            sizes: SizeModel::paper003(),
            seed: 1,
        }
    }

    #[test]
    fn popularity_is_skewed_and_sizes_belong_to_objects() {
        let reqs = generate(&config()).expect("valid");
        assert_eq!(reqs.len(), 50_000);
        let mut count = std::collections::HashMap::new();
        let mut size_of = std::collections::HashMap::new();
        for r in &reqs {
            *count.entry(r.key.as_str()).or_insert(0u32) += 1;
            assert_eq!(
                *size_of.entry(r.key.as_str()).or_insert(r.size_bytes),
                r.size_bytes
            );
        }
        // Zipf(0.8) over 20,000 objects: the top object gets 1/H(20000, 0.8) = 3.1 % of
        // the requests.
        let h: f64 = (1..=20_000).map(|k| f64::from(k).powf(-0.8)).sum();
        let top = f64::from(count["/obj/0"]) / 50_000.0;
        assert!(
            (top - 1.0 / h).abs() < 0.004,
            "top object share {top}, expected {}",
            1.0 / h
        );
        assert!(count["/obj/0"] > count.get("/obj/100").copied().unwrap_or(0) * 10);
        assert!(reqs.windows(2).all(|w| w[0].time_s <= w[1].time_s));
        let rate = reqs.len() as f64 / reqs.last().expect("requests").time_s;
        assert!((rate - 10.0).abs() < 0.3, "rate {rate}");
    }

    #[test]
    fn sizes_follow_table_2() {
        let sampler = SizeModel::paper003().sampler().expect("valid model");
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut sizes: Vec<u64> = (0..20_000).map(|_| sampler.sample(&mut rng)).collect();
        sizes.sort_unstable();
        let median = sizes[10_000];
        assert!(
            (3_000..5_000).contains(&median),
            "median {median} (Table 2: 3,958)"
        );
        assert!(*sizes.last().expect("sizes") <= 1_490_000);
    }

    #[test]
    fn bad_parameters_are_errors() {
        let bad = WebConfig {
            objects: 0,
            ..config()
        };
        assert_eq!(generate(&bad), Err(WebError::NoObjects));
        let bad = WebConfig {
            zipf_alpha: -1.0,
            ..config()
        };
        assert!(generate(&bad).is_err());
        let bad = WebConfig {
            rate: f64::NAN,
            ..config()
        };
        assert!(generate(&bad).is_err());
    }
}
