//! Simulated time: integer nanoseconds, so that time itself never drifts with float rounding
//! (events at exactly the same nanosecond are ordered as ns-2 orders them: see `net`).

/// Nanoseconds since the start of a run.
pub type Nanos = u64;

/// One second.
pub const SECOND: Nanos = 1_000_000_000;

/// One millisecond.
pub const MILLI: Nanos = 1_000_000;

/// Seconds as nanoseconds, rounded to the nearest nanosecond.
pub fn from_secs_f64(s: f64) -> Nanos {
    (s * SECOND as f64).round().max(0.0) as Nanos
}

/// Nanoseconds as seconds: the double nearest the exact value, as ns-2 holds its times.
pub fn to_secs_f64(n: Nanos) -> f64 {
    n as f64 / SECOND as f64
}

/// Time to put `bytes` on a link of `bits_per_second`, rounded up to a whole nanosecond.
pub fn transmission(bytes: u32, bits_per_second: u64) -> Nanos {
    let bits = u128::from(bytes) * 8 * u128::from(SECOND);
    bits.div_ceil(u128::from(bits_per_second.max(1))) as Nanos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transmission_time_of_a_packet_on_10_mbps() {
        // 552 bytes (512 payload + 40 header) at 10 Mb/s: 441.6 µs.
        assert_eq!(transmission(552, 10_000_000), 441_600);
        assert_eq!(from_secs_f64(0.03), 30 * MILLI);
    }
}
