//! Monotonic nanosecond clock shared by heartbeats, the pseudo-scheduler and the
//! harness. Reading it is a vDSO `clock_gettime(CLOCK_MONOTONIC)`, which is also
//! async-signal-safe, so the preemption signal handler may call it.

/// Nanoseconds of `CLOCK_MONOTONIC`. Comparable across threads and processes.
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time consumed by the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: as in `now_ns`; CLOCK_THREAD_CPUTIME_ID is supported by every Linux kernel.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A waiting episode with a time limit: "has `limit` passed since [`start`](Self::start)?".
///
/// Locks use it for handshake and staleness timeouts. Under loom, where real time
/// is meaningless and every spin is a model step, the limit is a fixed number of
/// checks (3), so models stay finite and deterministic.
#[derive(Debug, Clone, Copy)]
pub struct Patience {
    #[cfg(not(loom))]
    deadline_ns: u64,
    #[cfg(loom)]
    checks_left: u32,
}

impl Patience {
    /// Starts an episode that runs out after `limit_ns` nanoseconds.
    #[inline]
    pub fn start(limit_ns: u64) -> Self {
        #[cfg(not(loom))]
        {
            Self {
                deadline_ns: now_ns().saturating_add(limit_ns),
            }
        }
        #[cfg(loom)]
        {
            let _ = limit_ns;
            Self { checks_left: 3 }
        }
    }

    /// Whether the limit has passed.
    #[inline]
    pub fn exhausted(&mut self) -> bool {
        #[cfg(not(loom))]
        {
            now_ns() >= self.deadline_ns
        }
        #[cfg(loom)]
        {
            if self.checks_left == 0 {
                return true;
            }
            self.checks_left -= 1;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a);
    }

    #[test]
    fn patience_runs_out() {
        // The clock is read before the episode starts: read after, the episode's
        // own start may be up to one clock read earlier than `t0` (it failed so).
        let t0 = now_ns();
        let mut p = Patience::start(1_000);
        while !p.exhausted() {}
        assert!(now_ns() - t0 >= 1_000);
        assert!(Patience::start(0).exhausted());
    }
}
