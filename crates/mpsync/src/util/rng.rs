//! SplitMix64: a tiny, seedable, portable PRNG. Used where a run must be
//! replayable from its seed (the pseudo-scheduler's schedule, workload jitter);
//! the sequence for a given seed never changes between versions or platforms.

/// A SplitMix64 generator (Steele, Lea & Flood 2014).
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose sequence is fixed by `seed`.
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// An independent stream derived from `seed` and a stream number.
    pub fn stream(seed: u64, stream: u64) -> Self {
        let mut g = Self::new(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        g.next_u64();
        g
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// `base` scaled by a uniform factor in `[1 - frac, 1 + frac]`.
    pub fn jitter(&mut self, base: f64, frac: f64) -> f64 {
        base * (1.0 + frac * (2.0 * self.next_f64() - 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replayable() {
        let a: Vec<u64> = (0..5)
            .scan(SplitMix64::new(42), |g, _| Some(g.next_u64()))
            .collect();
        let b: Vec<u64> = (0..5)
            .scan(SplitMix64::new(42), |g, _| Some(g.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(
            SplitMix64::stream(1, 0).next_u64(),
            SplitMix64::stream(1, 1).next_u64()
        );
    }

    #[test]
    fn jitter_in_range() {
        let mut g = SplitMix64::new(7);
        for _ in 0..1000 {
            let x = g.jitter(100.0, 0.1);
            assert!((90.0..=110.0).contains(&x));
        }
    }
}
