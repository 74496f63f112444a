//! # mpsync — synchronization for multiprogrammed machines
//!
//! When runnable threads outnumber cores — containers with CPU quotas, busy
//! servers, VMs whose vCPUs are themselves preempted — the OS preempts threads
//! at the worst moment: holding a lock, queued in a FIFO lock, short of a
//! barrier. mpsync implements the preemption-safe and scheduler-conscious
//! algorithms of five papers (Michael & Scott 1997; Wisniewski, Kontothanassis
//! & Scott 1994 and 1995; Hart 2005; Lumetta & Culler 1998) and the *widened
//! kernel/user interface* they rely on ([`sched`]), and measures them against
//! the crates people use today (the `mpsync` command, crate `mpsync-cli`).
//!
//! ## Getting started
//!
//! ```
//! use mpsync::{Barrier, Condvar, Mutex, RwLock};
//!
//! let counter = Mutex::new(0);                 // the recommended lock
//! let config = RwLock::new(String::from("a")); // the recommended RW lock
//! let ready = Condvar::new();
//! let barrier = Barrier::new(2);               // std::sync::Barrier's interface
//! std::thread::scope(|s| {
//!     s.spawn(|| {
//!         *counter.lock() += 1;
//!         ready.notify_one();
//!         barrier.wait();
//!     });
//!     let mut c = counter.lock();
//!     ready.wait_while(&mut c, |c| *c == 0);
//!     drop(c);
//!     barrier.wait();
//! });
//! config.write().push('b');
//! assert_eq!((*counter.lock(), config.read().as_str()), (1, "ab"));
//! ```
//!
//! Every other lock is one type parameter away — `lock::Mutex<SmartQ, T>`,
//! `rwlock::RwLock<RwSmartQ, T>` — with the same guards (they are all
//! `lock_api` locks). The examples in `crates/mpsync/examples/` (`mutex`,
//! `rwlock`, `condvar`, `barrier`) show each kind's common path.
//!
#![doc = include_str!("chooser.md")]
//!
//! ## Layers
//!
//! Bottom up (nothing imports upward):
//!
//! - [`util`]: cache padding, backoff, calibrated busy work, clocks;
//! - [`sync`]: the atomics shim (loom's types under `cfg(loom)`, std's
//!   otherwise; perturbed in the chaos build);
//! - [`sched`]: what the scheduler and threads tell each other — the per-thread
//!   context block with its four-valued state word, partition information, and
//!   `yield_now`/`park`/`unpark`, with an emulated (pseudo-scheduler) and a native
//!   Linux backend;
//! - [`lock`]: mutual-exclusion locks, all `lock_api::RawMutex`, and [`Condvar`];
//! - [`rwlock`]: reader-writer locks, all `lock_api::RawRwLock`;
//! - [`barrier`]: barriers — [`Barrier`] (std's interface) and the papers'
//!   barriers behind one [`barrier::Barrier`] trait;
//! - [`reclaim`]: safe memory reclamation for lock-free structures — QSBR, EBR,
//!   hazard pointers and a leaking baseline behind one `Reclaimer` trait;
//! - [`ds`]: concurrent collections — [`HashMap`], [`Queue`], [`Stack`] and
//!   [`PriorityQueue`] are the defaults (`&self` methods, no handles), and
//!   the papers' queues, stacks, heaps, counters and hash tables underneath
//!   (lock-based ones generic over the lock, non-blocking ones over the reclaimer);
//! - [`msgq`]: shared-memory active messages between processes.
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

/// The README's Rust examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;

#[cfg(all(test, not(loom)))]
mod front_page_tests {
    /// The README carries the chooser of the front page word for word, so
    /// the two cannot drift apart.
    #[test]
    fn readme_carries_the_chooser() {
        let readme = include_str!("../../../README.md");
        let chooser = include_str!("chooser.md");
        assert!(
            readme.contains(chooser.trim_end()),
            "README.md must contain crates/mpsync/src/chooser.md verbatim (copy it over)"
        );
    }
}
