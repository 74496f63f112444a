//! Getting started: a barrier.
//!
//! `mpsync::Barrier` has `std::sync::Barrier`'s interface: `new(n)`, then
//! `wait()` from any `n` threads, one of which is told it is the leader. The
//! papers' barriers that number their participants (trees, dissemination,
//! the scheduler-conscious Scalable-SC) implement `barrier::Barrier`,
//! `wait(id)`.
//!
//! `cargo run -p mpsync --example barrier`

use std::sync::atomic::{AtomicU64, Ordering};

use mpsync::barrier::{Barrier as _, ScalableSc};

fn main() {
    const THREADS: usize = 4;
    let barrier = mpsync::Barrier::new(THREADS);
    let sum = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS as u64 {
            let (barrier, sum) = (&barrier, &sum);
            s.spawn(move || {
                for phase in 0..10u64 {
                    sum.fetch_add(t + phase, Ordering::Relaxed);
                    if barrier.wait().is_leader() {
                        // One thread per phase checks everyone's work so far:
                        // the threads' ids (0+1+2+3) and 4 × phase, per phase.
                        let want: u64 = (0..=phase).map(|p| 6 + 4 * p).sum();
                        assert_eq!(sum.load(Ordering::Relaxed), want);
                    }
                    barrier.wait(); // nobody starts the next phase before the check
                }
            });
        }
    });

    // The scheduler-conscious barrier: ids 0..n, one per thread.
    let sc = ScalableSc::new(2).expect("2 participants");
    std::thread::scope(|s| {
        s.spawn(|| sc.wait(0));
        sc.wait(1);
    });
    println!("sum = {}", sum.load(Ordering::Relaxed));
}
