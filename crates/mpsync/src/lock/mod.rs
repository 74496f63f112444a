//! Mutual-exclusion locks. Every one implements `lock_api::RawMutex`, so
//! `mpsync::Mutex<L, T>` works with guards:
//!
//! | type        | paper name   | waits by                   | source                      |
//! |-------------|--------------|----------------------------|-----------------------------|
//! | [`Tas`]     | TAS          | swapping                   | all papers' baseline        |
//! | [`TasB`]    | TAS-B        | test, backoff (cap 30 µs)  | 003 §4.1, 000 §4            |
//! | [`Native`]  | Native       | futex (`sched::park`)      | 003 §4.1, 001 §4            |
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
mod tas;
mod tas_b;

pub use native::Native;
pub use np::{Np, NpGuard};
pub use tas::Tas;
pub use tas_b::TasB;

/// TAS-B with its critical section marked no-preempt (paper 003 §4.1).
pub type TasBNp = Np<TasB>;
/// The native (futex) lock with its critical section marked no-preempt.
pub type NativeNp = Np<Native>;

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
