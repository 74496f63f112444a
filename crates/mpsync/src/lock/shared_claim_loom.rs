//! Loom models of the [`SharedClaimLock`] paths (crate-internal, so here and
//! not in `tests/loom_locks.rs`): two threads that each acquire twice by
//! `lock_or_give_up` exclude each other (the hand-overs are `lock`'s), and a
//! waiter behind a holder that never releases (a dead peer) gets the lock
//! when another thread resets it, whichever of the waiter's steps the reset
//! falls between (Ticket's and Anderson's waiter then finds its number passed
//! and queues again). A waiter that hung would spin past loom's branch bound.
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p mpsync --lib --release --target-dir target/loom lock::shared_claim_loom -- --test-threads=1`

use super::*;
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

fn exclusive_twice<L: SharedClaimLock + Send + 'static>(make: fn() -> L) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(move || {
        let s = Arc::new((make(), UnsafeCell::new(0u32)));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                thread::spawn(move || {
                    for _ in 0..2 {
                        let g = s.0.lock_or_give_up(&mut || false).expect("never gives up");
                        // SAFETY: the lock is held.
                        s.1.with_mut(|p| unsafe { *p += 1 });
                        // SAFETY: `g` came from this lock on this thread.
                        unsafe { s.0.unlock(g) };
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        // SAFETY: all threads joined.
        assert_eq!(s.1.with(|p| unsafe { *p }), 4);
    });
}

fn reset_frees_a_dead_holders_lock_for_a_waiter<L: SharedClaimLock + Send + 'static>(
    make: fn() -> L,
) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(move || {
        let l = Arc::new(make());
        let _dead = l.lock(); // a holder that never releases
        let w = {
            let l = l.clone();
            thread::spawn(move || {
                let g = l.lock_or_give_up(&mut || false).expect("never gives up");
                // SAFETY: `g` came from this lock on this thread.
                unsafe { l.unlock(g) };
            })
        };
        // SAFETY: the dead holder's critical section never runs again.
        unsafe { l.reset() };
        w.join().unwrap();
    });
}

macro_rules! shared_claim_models {
    ($($name:ident: $l:ty;)*) => {$(
        mod $name {
            use super::*;
            #[test]
            fn lock_or_give_up_excludes_two_threads_acquiring_twice() {
                exclusive_twice(<$l>::new)
            }
            #[test]
            fn a_reset_frees_a_dead_holders_lock_for_a_waiter() {
                reset_frees_a_dead_holders_lock_for_a_waiter(<$l>::new)
            }
        }
    )*};
}

shared_claim_models! {
    tas: Tas;
    tas_b: TasB;
    ticket: Ticket;
    anderson: AndersonN<2>;
}
