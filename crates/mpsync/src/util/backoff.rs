//! Bounded exponential backoff, as the TATAS locks and non-blocking algorithms of
//! paper 000 use it (cap 30 µs by default). The wait is calibrated busy work, not
//! a sleep, so it never enters the OS; under loom it is a single model yield.

use super::busy::BusyWork;

/// Default first backoff interval.
pub const DEFAULT_MIN_NS: u64 = 100;
/// Default cap (paper 000 §4: 30 µs).
pub const DEFAULT_CAP_NS: u64 = 30_000;

/// Exponential backoff state for one waiting episode.
#[derive(Debug, Clone)]
pub struct Backoff {
    cur_iters: u64,
    cap_iters: u64,
}

impl Backoff {
    /// Backoff from `min_ns` doubling up to `cap_ns` (both in nanoseconds of work).
    pub fn new(min_ns: u64, cap_ns: u64) -> Self {
        let w = BusyWork::global();
        let cap_iters = w.iters_for_ns(cap_ns).max(1);
        Self {
            cur_iters: w.iters_for_ns(min_ns).clamp(1, cap_iters),
            cap_iters,
        }
    }

    /// Backoff with precomputed iteration counts (see [`BusyWork::iters_for_ns`]);
    /// cheap enough for a lock's acquire path.
    pub const fn from_iters(min_iters: u64, cap_iters: u64) -> Self {
        let cap = if cap_iters == 0 { 1 } else { cap_iters };
        let cur = if min_iters == 0 {
            1
        } else if min_iters > cap {
            cap
        } else {
            min_iters
        };
        Self {
            cur_iters: cur,
            cap_iters: cap,
        }
    }

    /// Waits for the current interval, then doubles it up to the cap.
    #[inline]
    pub fn spin(&mut self) {
        #[cfg(loom)]
        crate::sync::spin_loop();
        // (`run_iters` needs no rate: never calibrate here.)
        #[cfg(not(loom))]
        BusyWork::global_or_nominal().run_iters(self.cur_iters);
        self.cur_iters = (self.cur_iters * 2).min(self.cap_iters);
    }

    /// As [`spin`](Self::spin), but in pieces of at most `slice_iters`
    /// iterations with a call of `stop` after each (so at least once), ending
    /// early when it answers `true`; whether it did. The interval doubles
    /// either way. Under loom a single model yield, then `stop`.
    #[inline]
    pub(crate) fn spin_or_stop(
        &mut self,
        slice_iters: u64,
        stop: &mut dyn FnMut() -> bool,
    ) -> bool {
        let (mut left, slice) = (self.cur_iters, slice_iters.max(1));
        self.cur_iters = self.cur_iters.saturating_mul(2).min(self.cap_iters);
        if cfg!(loom) {
            crate::sync::spin_loop();
            return stop();
        }
        // (`run_iters` needs no rate: never calibrate here.)
        let w = BusyWork::global_or_nominal();
        while left > slice {
            w.run_iters(slice);
            left -= slice;
            if stop() {
                return true;
            }
        }
        w.run_iters(left);
        stop()
    }

    /// Back to the first interval.
    pub fn reset(&mut self, min_iters: u64) {
        self.cur_iters = min_iters.clamp(1, self.cap_iters);
    }

    /// The interval the next [`spin`](Self::spin) will wait, in work-loop iterations.
    pub fn current_iters(&self) -> u64 {
        self.cur_iters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_cap() {
        let mut b = Backoff::from_iters(1, 5);
        let seen: Vec<u64> = (0..5)
            .map(|_| {
                let c = b.current_iters();
                b.spin();
                c
            })
            .collect();
        assert_eq!(seen, [1, 2, 4, 5, 5]);
        b.reset(2);
        assert_eq!(b.current_iters(), 2);
    }

    #[test]
    fn spin_or_stop_asks_after_every_slice_and_doubles() {
        let mut b = Backoff::from_iters(10, 100);
        let mut asked = 0;
        assert!(!b.spin_or_stop(3, &mut || {
            asked += 1;
            false
        }));
        assert_eq!((asked, b.current_iters()), (4, 20)); // 3 + 3 + 3 + 1
        let mut asked = 0;
        assert!(b.spin_or_stop(3, &mut || {
            asked += 1;
            asked == 2
        }));
        assert_eq!((asked, b.current_iters()), (2, 40));
        assert!(!Backoff::from_iters(5, 5).spin_or_stop(0, &mut || false));
    }
}
