//! # mpsync — synchronization for multiprogrammed machines
//!
//! When runnable threads outnumber cores, the OS preempts threads at the worst
//! moment: holding a lock, queued in a FIFO lock, short of a barrier. mpsync
//! implements the preemption-safe and scheduler-conscious algorithms of five
//! papers (see the repository's `shared/papers/README.md`) and the
//! *widened kernel/user interface* they rely on ([`sched`]).
//!
//! Layers, bottom up (nothing imports upward):
//!
//! - [`util`]: cache padding, backoff, calibrated busy work, clocks;
//! - [`sched`]: what the scheduler and threads tell each other — the per-thread
//!   context block with its four-valued state word, partition information, and
//!   `yield_now`/`park`/`unpark`, with an emulated (pseudo-scheduler) and a native
//!   Linux backend;
//! - [`lock`]: mutual-exclusion locks, all `lock_api::RawMutex`;
//! - [`rwlock`]: reader-writer locks, all `lock_api::RawRwLock`;
//! - [`barrier`]: barriers behind one [`barrier::Barrier`] trait;
//! - [`reclaim`]: safe memory reclamation for lock-free structures — QSBR, EBR,
//!   hazard pointers and a leaking baseline behind one `Reclaimer` trait;
//! - [`msgq`]: shared-memory active messages between processes (paper 004).
//!
//! ```
//! use mpsync::{Mutex, lock::TasB};
//!
//! let m: Mutex<TasB, Vec<u32>> = Mutex::new(Vec::new());
//! m.lock().push(7);
//! assert_eq!(*m.lock(), [7]);
//! ```
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod barrier;
pub mod ds;
pub mod lock;
pub mod msgq;
pub mod reclaim;
pub mod rwlock;
pub mod sched;
pub mod sync;
pub mod util;

/// The `lock_api` version mpsync's locks implement (for `RawMutex` bounds).
pub use lock_api;

/// The lock behind [`Mutex`]: [`lock::BoundedSteal`] (see the chooser above).
pub type DefaultRawMutex = lock::BoundedSteal;
/// The lock behind [`RwLock`]: [`rwlock::RwTasB`] (see the chooser above).
pub type DefaultRawRwLock = rwlock::RwTasB;

/// A mutex with the recommended lock, [`DefaultRawMutex`]:
/// `mpsync::Mutex::new(0)`. Any other lock is one type parameter away:
/// [`lock::Mutex<L, T>`](lock::Mutex).
///
/// ```
/// let m = mpsync::Mutex::new(0);
/// *m.lock() += 1;
/// assert_eq!(m.try_lock_for(std::time::Duration::from_millis(1)).map(|g| *g), Some(1));
/// ```
pub type Mutex<T> = lock_api::Mutex<DefaultRawMutex, T>;
/// The guard of a [`Mutex`].
pub type MutexGuard<'a, T> = lock_api::MutexGuard<'a, DefaultRawMutex, T>;
/// A reader-writer lock with the recommended lock, [`DefaultRawRwLock`]:
/// `mpsync::RwLock::new(0)`. Any other lock is one type parameter away:
/// [`rwlock::RwLock<L, T>`](rwlock::RwLock).
///
/// ```
/// use mpsync::RwLock;
/// let l = RwLock::new(vec![1]);
/// l.write().push(2);
/// let r = mpsync::lock_api::RwLockWriteGuard::downgrade(l.write());
/// assert_eq!(*r, [1, 2]);
/// ```
pub type RwLock<T> = lock_api::RwLock<DefaultRawRwLock, T>;
/// A read guard of an [`RwLock`].
pub type RwLockReadGuard<'a, T> = lock_api::RwLockReadGuard<'a, DefaultRawRwLock, T>;
/// A write guard of an [`RwLock`].
pub type RwLockWriteGuard<'a, T> = lock_api::RwLockWriteGuard<'a, DefaultRawRwLock, T>;
/// An upgradable read guard of an [`RwLock`].
pub type RwLockUpgradableReadGuard<'a, T> =
    lock_api::RwLockUpgradableReadGuard<'a, DefaultRawRwLock, T>;

pub use barrier::BarrierWaitResult;
pub use barrier::SimpleBarrier as Barrier;
pub use lock::{Condvar, WaitTimeoutResult};
