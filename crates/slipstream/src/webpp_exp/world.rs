//! The emulated world of paper 001 §6.1: three client sites and three replica servers in
//! different time zones, the WAN link between each pair (base RTT, jitter, bandwidth), and each
//! replica's load over a compressed day, all drawn from one seed and recorded.
//!
//! The day clock is US Eastern time (the paper's "noon EST" and "6pm EST"); hour 0 is the start
//! of the run and hour 24 its end, `day` of wall-clock time later. Latencies are not
//! compressed: a link's RTT or a server's service delay is the same in every hour of the
//! compressed day; only the *schedule* of the load (when it rises and falls) is.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The replicas, as 001 §6.1 places its servers: Stanford (US west coast), the University of
/// Kentucky (US east) and Saarbrücken (Germany).
pub const REPLICAS: [&str; 3] = ["us-west", "us-east", "eu"];
/// Their UTC offsets in hours, which place each one's office-hours load in the day.
const REPLICA_UTC_H: [f64; 3] = [-8.0, -5.0, 1.0];
/// The client sites of 001 §6.1: Santa Barbara, Murray Hill (Bell Labs) and Prague.
pub const SITES: [&str; 3] = ["santa-barbara", "murray-hill", "prague"];
/// The replica the `single` policy always uses: us-east (Kentucky), the server in the paper's
/// own time zone and the nearest on average to the three sites.
pub const SINGLE: usize = 1;
/// The resource sizes of 001 §6.1 (K = 1,000 bytes).
pub const SIZES: [u64; 4] = [500, 5_000, 50_000, 500_000];
/// Files per size; a request picks one by the lane's seeded sequence.
pub const FILES_PER_SIZE: usize = 8;

/// Base round-trip times in ms, `[site][replica]`: of the order of late-1990s paths (same
/// coast, across the US, across the Atlantic).
const RTT_MS: [[f64; 3]; 3] = [
    [20.0, 70.0, 170.0],
    [75.0, 25.0, 110.0],
    [180.0, 120.0, 30.0],
];
/// Per-flow bandwidth in Mbit/s, `[site][replica]`: what one TCP flow gets on the path.
const BANDWIDTH_MBIT: [[f64; 3]; 3] = [[10.0, 5.0, 2.0], [5.0, 10.0, 3.0], [2.0, 3.0, 10.0]];
/// Each connection adds a uniform draw from [0, this share of the base RTT].
const JITTER_SHARE: f64 = 0.2;

/// One emulated WAN path, as the relay applies it.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Link {
    /// Base round-trip time.
    pub rtt_ms: f64,
    /// Upper bound of the uniform extra RTT drawn per connection.
    pub jitter_ms: f64,
    /// Bytes per second, server to client (requests are small and not limited).
    pub bandwidth_bytes_per_s: f64,
}

/// A temporary rise of a replica's service delay.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Spike {
    /// Start and end, in day hours (EST).
    pub from_h: f64,
    pub to_h: f64,
    /// Added to the service delay meanwhile.
    pub extra_ms: f64,
}

/// A window in which a replica's link accepts connections and never answers.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Outage {
    pub from_h: f64,
    pub to_h: f64,
}

/// One replica's load over the day: a base service delay, an office-hours bump centred on its
/// local early afternoon, random spikes and perhaps an outage.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Load {
    pub replica: &'static str,
    pub base_ms: f64,
    /// Added at the top of the bump.
    pub peak_ms: f64,
    /// The bump's centre, in day hours (EST).
    pub peak_h: f64,
    /// The bump's standard deviation in hours.
    pub width_h: f64,
    pub spikes: Vec<Spike>,
    pub outage: Option<Outage>,
}

/// The hour distance between `a` and `b` on a 24-hour circle.
fn circular(a: f64, b: f64) -> f64 {
    let d = (a - b).rem_euclid(24.0);
    d.min(24.0 - d)
}

impl Load {
    /// The mean service delay at day hour `h` (before the per-request noise), unscaled.
    pub fn service_ms(&self, h: f64) -> f64 {
        let d = circular(h, self.peak_h) / self.width_h;
        let spikes: f64 = self
            .spikes
            .iter()
            .filter(|s| s.from_h <= h && h < s.to_h)
            .map(|s| s.extra_ms)
            .sum();
        self.base_ms + self.peak_ms * (-0.5 * d * d).exp() + spikes
    }

    /// Whether the replica is out at day hour `h`.
    pub fn down(&self, h: f64) -> bool {
        self.outage.is_some_and(|o| o.from_h <= h && h < o.to_h)
    }
}

/// Everything the servers, relays and clients share.
#[derive(Debug)]
pub struct World {
    pub seed: u64,
    /// Wall-clock start of the day.
    pub start: Instant,
    /// Wall-clock length of the day.
    pub day: Duration,
    /// Multiplies every latency (RTTs, jitter, service delays, timeouts) and divides every
    /// bandwidth: 1 for the real run, smaller for `--quick`.
    pub scale: f64,
    pub loads: Vec<Load>,
    /// `[site][replica]`, scaled.
    pub links: Vec<Vec<Link>>,
}

impl World {
    /// Draws the load schedule from `seed`.
    pub fn new(seed: u64, day: Duration, scale: f64, start: Instant) -> World {
        let mut rng = StdRng::seed_from_u64(seed);
        let loads = (0..REPLICAS.len())
            .map(|r| {
                // Office hours peak at 13:00 local time, in EST: this harness's assumption (001
                // §6.1 only calls noon EST "peak office hours").
                let peak_h = (13.0 - (REPLICA_UTC_H[r] - REPLICA_UTC_H[SINGLE])).rem_euclid(24.0);
                let spikes = (0..rng.gen_range(2..=5))
                    .map(|_| {
                        let from_h = rng.gen_range(0.0..23.0);
                        Spike {
                            from_h,
                            to_h: from_h + rng.gen_range(0.25..1.0),
                            extra_ms: rng.gen_range(300.0..1200.0),
                        }
                    })
                    .collect();
                Load {
                    replica: REPLICAS[r],
                    base_ms: rng.gen_range(5.0..15.0),
                    peak_ms: rng.gen_range(200.0..400.0),
                    peak_h,
                    width_h: rng.gen_range(2.5..4.0),
                    spikes,
                    outage: None,
                }
            })
            .collect::<Vec<Load>>();
        let mut loads = loads;
        // One replica other than the single server goes out once; the single server never
        // does, so `single` measures load, not availability.
        let out = if rng.gen_bool(0.5) { 0 } else { 2 };
        let from_h = rng.gen_range(6.0..20.0);
        loads[out].outage = Some(Outage {
            from_h,
            to_h: from_h + rng.gen_range(0.75..1.5),
        });
        let links = (0..SITES.len())
            .map(|s| {
                (0..REPLICAS.len())
                    .map(|r| Link {
                        rtt_ms: RTT_MS[s][r] * scale,
                        jitter_ms: RTT_MS[s][r] * JITTER_SHARE * scale,
                        bandwidth_bytes_per_s: BANDWIDTH_MBIT[s][r] * 1e6 / 8.0 / scale,
                    })
                    .collect()
            })
            .collect();
        World {
            seed,
            start,
            day,
            scale,
            loads,
            links,
        }
    }

    /// The day hour (EST) at `now`; 24 or more once the day is over.
    pub fn hour(&self, now: Instant) -> f64 {
        now.saturating_duration_since(self.start).as_secs_f64() / self.day.as_secs_f64() * 24.0
    }

    /// The mean service delay of `replica` at `now`, scaled.
    pub fn service(&self, replica: usize, now: Instant) -> Duration {
        let ms = self.loads[replica].service_ms(self.hour(now)) * self.scale;
        Duration::from_secs_f64(ms / 1e3)
    }

    /// Whether `replica` is out at `now`.
    pub fn down(&self, replica: usize, now: Instant) -> bool {
        self.loads[replica].down(self.hour(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_a_function_of_the_seed_and_spares_the_single_server() {
        let t0 = Instant::now();
        let a = World::new(7, Duration::from_secs(60), 1.0, t0);
        let b = World::new(7, Duration::from_secs(60), 1.0, t0);
        assert_eq!(format!("{:?}", a.loads), format!("{:?}", b.loads));
        for seed in 0..50 {
            let w = World::new(seed, Duration::from_secs(60), 1.0, t0);
            assert!(w.loads[SINGLE].outage.is_none());
            assert_eq!(w.loads.iter().filter(|l| l.outage.is_some()).count(), 1);
        }
        // us-east peaks at 13:00 EST, us-west three hours later, eu six hours earlier.
        assert_eq!(a.loads[1].peak_h, 13.0);
        assert_eq!(a.loads[0].peak_h, 16.0);
        assert_eq!(a.loads[2].peak_h, 7.0);
        assert!((circular(23.0, 1.0) - 2.0).abs() < 1e-9);
    }
}
