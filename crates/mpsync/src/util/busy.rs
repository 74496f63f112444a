//! Calibrated busy work: "work between operations" that costs a fixed amount of
//! *computation*, never a fixed amount of wall time. A thread preempted in the
//! middle of its work finishes it later, exactly as in the papers' synthetic
//! programs; a clock-based wait would instead count the preempted time as work.
//!
//! ```
//! use mpsync::util::busy::BusyWork;
//! let w = BusyWork::global();
//! w.run_ns(1_000); // about one microsecond of computation on this machine
//! assert!(w.iters_per_us() > 0.0);
//! ```

use std::hint::black_box;
use std::sync::OnceLock;

use super::clock::now_ns;

static GLOBAL: OnceLock<BusyWork> = OnceLock::new();

/// A calibrated busy-work loop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BusyWork {
    iters_per_us: f64,
}

/// The unit of work: one iteration of a loop the optimizer cannot remove.
#[inline(never)]
fn spin_iters(n: u64) {
    let mut x = 0u64;
    for i in 0..n {
        x = black_box(x.wrapping_add(i));
    }
    black_box(x);
}

impl BusyWork {
    /// Measures this machine's loop rate: the fastest of 25 samples of about 1 ms
    /// spread over some 40 ms, so that neither a preempted sample nor a short slow
    /// spell of a virtual machine's host lowers the rate.
    pub fn calibrate() -> Self {
        // Under Miri a timing loop is meaningless and would take hours: use a nominal rate.
        if cfg!(miri) {
            return Self { iters_per_us: 1.0 };
        }
        let mut n = 1_000u64;
        // Grow the sample until it takes about 1 ms.
        loop {
            let t0 = now_ns();
            spin_iters(n);
            let dt = now_ns() - t0;
            if dt >= 1_000_000 || n >= 1 << 36 {
                break;
            }
            n *= 2;
        }
        let best = (0..25)
            .map(|_| {
                let t0 = now_ns();
                spin_iters(n);
                (now_ns() - t0).max(1)
            })
            .min()
            .unwrap_or(1);
        Self {
            iters_per_us: n as f64 * 1_000.0 / best as f64,
        }
    }

    /// A work loop with a known rate, e.g. one recorded by an earlier run.
    pub fn from_rate(iters_per_us: f64) -> Option<Self> {
        (iters_per_us.is_finite() && iters_per_us > 0.0).then_some(Self { iters_per_us })
    }

    /// The process-wide calibration, measured on first use (about 40 ms: call it
    /// where that does not matter, e.g. at start-up).
    pub fn global() -> &'static BusyWork {
        GLOBAL.get_or_init(BusyWork::calibrate)
    }

    /// The process-wide calibration if something has measured it already;
    /// never measures.
    pub fn calibrated() -> Option<&'static BusyWork> {
        GLOBAL.get()
    }

    /// The process-wide calibration if measured, else [`NOMINAL`](Self::NOMINAL):
    /// for code that must never pay the calibration itself, such as a lock's
    /// first contended acquisition (its backoff is then within a small factor
    /// of what was asked until something calibrates).
    #[inline]
    pub fn global_or_nominal() -> &'static BusyWork {
        GLOBAL.get().unwrap_or(&Self::NOMINAL)
    }

    /// A rate assumed before calibration: 2000 iterations per µs, about one
    /// iteration per cycle of a 2 GHz core (measured here: ~4200 per µs on a
    /// 4 GHz x86 core, release build), so within ~2x on common machines.
    /// Under Miri the calibrated rate, 1 per µs: a backoff of thousands of
    /// interpreted iterations made one counter test take 7 minutes there.
    pub const NOMINAL: BusyWork = BusyWork {
        iters_per_us: if cfg!(miri) { 1.0 } else { 2000.0 },
    };

    /// Loop iterations per microsecond on this machine.
    pub fn iters_per_us(&self) -> f64 {
        self.iters_per_us
    }

    /// Iterations that make up `ns` nanoseconds of work.
    pub fn iters_for_ns(&self, ns: u64) -> u64 {
        (ns as f64 * self.iters_per_us / 1_000.0).round() as u64
    }

    /// Performs `ns` nanoseconds' worth of computation.
    #[inline]
    pub fn run_ns(&self, ns: u64) {
        spin_iters(self.iters_for_ns(ns));
    }

    /// Performs exactly `iters` iterations of the work loop.
    #[inline]
    pub fn run_iters(&self, iters: u64) {
        spin_iters(iters);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_is_positive_and_rejects_nonsense() {
        let w = BusyWork::from_rate(100.0).unwrap();
        assert_eq!(w.iters_for_ns(1_000), 100);
        assert!(BusyWork::from_rate(0.0).is_none());
        assert!(BusyWork::from_rate(f64::NAN).is_none());
    }

    #[test]
    #[cfg_attr(miri, ignore = "timing loop, meaningless under the interpreter")]
    fn calibrated_work_takes_about_its_time() {
        let w = BusyWork::calibrate();
        // The fastest of several runs of 1 ms must not be far shorter than 1 ms: a
        // removed loop or a unit error would make it 10-1000x shorter. The bound is
        // loose because a virtual machine's host can change its speed by over 2x
        // between calibration and measurement (seen here: the same C loop took
        // 63-142 ms from one run to the next).
        let best = (0..5)
            .map(|_| {
                let t0 = now_ns();
                w.run_ns(1_000_000);
                now_ns() - t0
            })
            .min()
            .unwrap();
        assert!(best > 250_000, "1 ms of work took only {best} ns");
    }
}
