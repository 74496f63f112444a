//! # mpsync-pthread — mpsync's locks behind the pthread ABI
//!
//! `libmpsync_pthread.so` gives unmodified C (and C++, Python, …) programs
//! mpsync's scheduler-conscious locks: loaded with `LD_PRELOAD`, it takes
//! over the program's pthread mutexes and condition variables.
//!
//! ```text
//! cargo build --release -p mpsync-pthread
//! LD_PRELOAD=target/release/libmpsync_pthread.so MPSYNC_LOCK=smart-q ./prog
//! ```
//!
//! ## Choosing the lock
//!
//! `MPSYNC_LOCK` names the lock every interposed mutex uses, read once, at
//! the first mutex operation: `bounded-steal` (the default: the lock behind
//! `mpsync::Mutex`, the recommended general lock), `tas-b-np`, `smart-q`,
//! `mcs-tp`, `ticket-np`, `spin-then-park` or `native` (see
//! [`mpsync::lock`]). An unknown value is said in one line on stderr, naming
//! the valid ones, and the default is used: the program is never stopped.
//! `MPSYNC_PTHREAD_VERBOSE=1` says the choice on stderr.
//! [`mpsync_pthread_lock_name`] returns it (a program can ask
//! `dlsym(RTLD_DEFAULT, "mpsync_pthread_lock_name")` whether the interposer
//! is loaded). mpsync's `sched` works as in any mpsync program: on its
//! first use it may start loading its eBPF program on a thread of its own
//! where the process may (`MPSYNC_EBPF=off` keeps it from trying).
//!
//! ## What is interposed
//!
//! `pthread_mutex_{init,lock,trylock,timedlock,clocklock,unlock,destroy}` and
//! `pthread_cond_{init,wait,timedwait,clockwait,signal,broadcast,destroy}`.
//! Normal, default and adaptive mutexes are mpsync's; condition variables are
//! the interposer's own (mpsync's `Condvar` protocol, see below) and work with
//! every mutex, mpsync's or glibc's.
//!
//! **Go to glibc**, said once per kind on stderr: mutexes made with an
//! attribute this crate does not implement — recursive, error-checking,
//! robust, priority-inheritance, priority-protect, process-shared — including
//! glibc's static initializers for them (`PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP`,
//! …, recognized by glibc's `__kind` field), and process-shared condition
//! variables. Such a mutex is glibc's for its whole life: every call on it
//! goes to glibc's function. A process-shared condvar must be waited on with a
//! process-shared mutex (the wait says `EINVAL` otherwise). C11 `mtx_*`/`cnd_*`
//! are glibc's untouched (glibc calls its own mutex internally).
//!
//! ## Static initialization, and what a mutex holds
//!
//! `PTHREAD_MUTEX_INITIALIZER` and `PTHREAD_COND_INITIALIZER` (all zero bytes)
//! work. A mutex's 40 bytes hold a handle to a *slot* — mpsync's lock, its
//! holder, the holder's guard — which the first lock installs (by CAS) and
//! `pthread_mutex_destroy` gives back. Slots come from `mmap`ed memory that is
//! never unmapped, not from `malloc`: the interposer never calls the
//! allocator to lock a mutex, so an allocator that uses pthread mutexes
//! does not recurse into it that way. A mutex never destroyed (a static
//! one, or one freed without `destroy`) keeps its slot, 128 bytes, for the
//! life of the process (128 bytes; 256 with `ticket-np`). A condvar lives in
//! its own 48 bytes.
//!
//! ## Errors, and mistakes
//!
//! As POSIX: `EBUSY` from `trylock` of a held mutex; `ETIMEDOUT` from
//! `timedlock`/`timedwait` at the absolute deadline (`CLOCK_REALTIME`, or the
//! condvar's clock from `pthread_condattr_setclock`); `EINVAL` for a
//! `tv_nsec` outside 0..10⁹. Mistakes get defined answers and never corrupt
//! memory: unlock by a thread that does not hold the mutex: `EPERM`;
//! relocking a mutex one holds: `EDEADLK` (not a deadlock); destroying a held
//! mutex: `EBUSY`; any use of a destroyed mutex or condvar, and destroying it
//! twice: `EINVAL` (until it is initialized again); a waiter on a condvar
//! that does not hold the mutex: `EPERM`. Destroying a condvar wakes any
//! thread still waiting on it and returns once every waiter has stopped
//! touching its memory, so it may be freed at once (POSIX's broadcast-then-
//! destroy pattern). A thread that locks a mutex while another destroys it
//! (undefined behaviour) may end up holding a slot nobody else gets again;
//! it touches only that slot's memory.
//!
//! ## Fork
//!
//! A child of `fork` may lock and unlock every mutex that was unlocked, with
//! nobody waiting, at the fork — those the parent never touched included —
//! and make new ones; mutexes the forking thread held it still holds. Slots
//! are atomics in private memory (the child has its copy), and mpsync's
//! `sched` registers the child's threads afresh. As with glibc, a mutex
//! another thread held at the fork stays held in the child.
//!
//! ## Process start and exit
//!
//! Nothing waits for initialization: the lock choice is one `getenv`, glibc's
//! functions are found with `dlsym` when first needed, and a thread's first
//! lock registers it with `sched`. Mutexes work in constructors, `atexit`
//! handlers, thread-local and thread-specific-data destructors, and in threads
//! still running after `main` returns.
//!
//! ## Limits
//!
//! - **Unlock by another thread.** A program that unlocks a normal mutex
//!   from a thread other than the one that locked it (undefined for POSIX,
//!   tolerated by glibc) gets `EPERM`, and the mutex stays locked.
//! - **Allocators that lock pthread mutexes.** A thread's first lock
//!   registers it with mpsync's `sched`, which may allocate (its context
//!   block, the first time so many threads are alive; thread-local
//!   destructors). glibc's `malloc` takes no pthread mutex; an allocator that
//!   does on that path (jemalloc, tcmalloc on their slow paths) would re-enter
//!   the interposer in the middle of the registration. That combination is
//!   not supported yet.
//! - **Mutexes freed without `pthread_mutex_destroy`.** Their slot (128
//!   or 256 bytes, taken at the first lock) is not given back: a program that makes
//!   and frees many such objects grows by that much per mutex it locked, and
//!   after 16 M live slots a first lock says `EAGAIN`. (`pthread_mutex_init`
//!   cannot take the slot back: the bytes it overwrites may be a copy of a
//!   live mutex.)
//! - **Relocking a normal mutex** one holds says `EDEADLK` rather than
//!   deadlocking as POSIX's `PTHREAD_MUTEX_NORMAL` would.
//! - Deadlines of timed calls are turned into a time left when the call
//!   starts; a later jump of `CLOCK_REALTIME` does not move them.
//!
//! ## Linking it directly
//!
//! `include/mpsync_pthread.h` declares `mpsync_mutex_t`, `mpsync_cond_t` and
//! `mpsync_mutex_*`/`mpsync_cond_*` (always mpsync's, whatever their bytes)
//! for programs that link `-lmpsync_pthread` rather than preload it.
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![deny(unsafe_op_in_unsafe_fn)]

mod capi;
mod cond;
pub mod config;
mod mutex;
mod real;
mod slab;
mod time;

pub use capi::*;
