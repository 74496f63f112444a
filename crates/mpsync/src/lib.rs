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
//! - [`ds`]: concurrent collections — [`HashMap`], [`Queue`], [`Stack`] and
//!   [`PriorityQueue`] are the defaults (`&self` methods, no handles), and
//!   the papers' queues, stacks, heaps, counters and hash tables underneath;
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

pub use ds::PriorityQueue;
/// The default concurrent collections ([`ds`'s start](ds#start-here)).
#[cfg(not(loom))]
pub use ds::{HashMap, Queue, Stack};

/// The `lock_api` version mpsync's locks implement (for `RawMutex` bounds).
pub use lock_api;

/// A mutex over any mpsync raw lock: `Mutex<SmartQ, T>`, `Mutex<TasB, T>`, ….
pub type Mutex<R, T> = lock_api::Mutex<R, T>;
/// The guard of a [`Mutex`].
pub type MutexGuard<'a, R, T> = lock_api::MutexGuard<'a, R, T>;
/// A reader-writer lock over any mpsync raw RW lock: `RwLock<RwSmartQ, T>`, ….
pub type RwLock<R, T> = lock_api::RwLock<R, T>;
/// A read guard of an [`RwLock`].
pub type RwLockReadGuard<'a, R, T> = lock_api::RwLockReadGuard<'a, R, T>;
/// A write guard of an [`RwLock`].
pub type RwLockWriteGuard<'a, R, T> = lock_api::RwLockWriteGuard<'a, R, T>;
