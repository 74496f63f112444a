//! Mutual-exclusion locks. Every one implements `lock_api::RawMutex`, so
//! `mpsync::Mutex<L, T>` works with guards:
//!
//! | type        | paper name   | waits by                   | source                      |
//! |-------------|--------------|----------------------------|-----------------------------|
//! | [`Tas`]     | TAS          | swapping                   | all papers' baseline        |
//! | [`TasB`]    | TAS-B        | test, backoff (cap 30 µs)  | 003 §4.1, 000 §4            |
//! | [`Native`]  | Native       | futex (`sched::park`)      | 003 §4.1, 001 §4            |
//! | [`Queued`]  | Queued (MCS) | spinning on its own node   | 003 §4.1                    |
//! | [`Np<L>`]   | L-np         | as `L`, CS no-preempt      | 003 §3, 001 §3 (Symunix)    |
//!
//! ```
//! use mpsync::{Mutex, lock::{TasBNp, NativeNp}};
//! let a: Mutex<TasBNp, u8> = Mutex::new(1);
//! let b: Mutex<NativeNp, u8> = Mutex::new(2);
//! assert_eq!(*a.lock() + *b.lock(), 3);
//! ```

mod native;
mod np;
mod queued;
mod tas;
mod tas_b;

pub use native::Native;
pub use np::{Np, NpGuard};
pub use queued::{Queued, QueuedGuard};
pub use tas::Tas;
pub use tas_b::TasB;

/// TAS-B with its critical section marked no-preempt (paper 003 §4.1).
pub type TasBNp = Np<TasB>;
/// The native (futex) lock with its critical section marked no-preempt.
pub type NativeNp = Np<Native>;
/// The MCS queue lock with its critical section marked no-preempt (003 "Queued-no-preempt").
pub type QueuedNp = Np<Queued>;

/// Invalid lock parameters supplied by the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockError {
    /// What was wrong and what would be right.
    InvalidParameter(String),
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidParameter(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for LockError {}

#[cfg(all(test, not(loom)))]
mod tests {
    //! Small enough for Miri: single-thread protocol and a two-thread handoff.
    use super::*;
    use crate::Mutex;
    use lock_api::RawMutex;

    fn protocol<L: RawMutex>() {
        let l = L::INIT;
        assert!(!l.is_locked());
        let g = l.lock();
        assert!(l.is_locked());
        assert!(l.try_lock().is_none());
        // SAFETY: `g` came from `l.lock()` on this thread.
        unsafe { l.unlock(g) };
        let g = l.try_lock().expect("free lock");
        // SAFETY: as above.
        unsafe { l.unlock(g) };
        assert!(!l.is_locked());
        assert_eq!(crate::sched::current().depth(), 0);
    }

    fn two_threads<L: RawMutex + Sync>() {
        let m: Mutex<L, u64> = Mutex::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..50 {
                        *m.lock() += 1;
                    }
                });
            }
        });
        assert_eq!(m.into_inner(), 100);
    }

    macro_rules! lock_tests {
        ($($name:ident: $l:ty),*) => {$(
            mod $name {
                use super::*;
                #[test]
                fn single_thread_protocol() { protocol::<$l>() }
                #[test]
                fn two_thread_counter() { two_threads::<$l>() }
            }
        )*};
    }

    lock_tests!(
        tas: Tas,
        tas_b: TasB,
        native: Native,
        tas_b_np: TasBNp,
        native_np: NativeNp,
        queued: Queued,
        queued_np: QueuedNp
    );

    #[test]
    fn lock_error_displays_its_message() {
        let e = LockError::InvalidParameter("x must be > 0".into());
        assert_eq!(e.to_string(), "x must be > 0");
    }
}
