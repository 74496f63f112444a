//! Loom 0.7.2 mis-models `swap`: in a two-thread test-and-set program that is
//! trivially correct, an RMW is allowed to read a value that is no longer the
//! latest in modification order, so the lock appears to stay held (and unbounded
//! swap spins overflow its store history). `compare_exchange` and `fetch_add` are
//! modelled correctly. Under loom, the atomics whose `swap` mpsync uses are
//! wrapped so that `swap` is a CAS loop with the same outcomes and orderings.
use loom::sync::atomic::Ordering;

fn load_order(o: Ordering) -> Ordering {
    match o {
        Ordering::Release | Ordering::Relaxed => Ordering::Relaxed,
        Ordering::SeqCst => Ordering::SeqCst,
        _ => Ordering::Acquire,
    }
}

/// Whether `o` has a release half.
fn releases(o: Ordering) -> bool {
    matches!(o, Ordering::Release | Ordering::AcqRel | Ordering::SeqCst)
}

/// `swap(v, o)` as a CAS loop. `load` guesses the current value; `cas(e)` is
/// `compare_exchange(e, v, o, load_order(o))`; `other` is any value `!= v`.
///
/// Every exit reads the *latest* value in modification order, through an RMW,
/// as a swap does; a plain load may return an older one. (Returning the loaded
/// value when it equalled `v` — once a shortcut here — let a queue lock's tail
/// swap return a stale tail: a thread whose fresh node had the address of a
/// node freed at another thread's exit found "itself" as its predecessor, and
/// the MCS/Smart-Q models in which threads lock twice spun forever.)
///
/// A swap that would replace `v` by `v` without a release half (TAS spinning on
/// `swap(true, Acquire)`) is made a failing CAS that expects `other`: it reads
/// the latest value, and skips a write that nobody could tell from no write —
/// so spinning swaps do not flood the model's store history.
fn swap_by_cas<T: Copy + PartialEq>(
    v: T,
    other: T,
    o: Ordering,
    load: impl Fn() -> T,
    cas: impl Fn(T) -> Result<T, T>,
) -> T {
    let mut guess = load();
    loop {
        let expect = if guess == v && !releases(o) {
            other
        } else {
            guess
        };
        match cas(expect) {
            Ok(prev) => return prev,
            Err(now) if now == v && !releases(o) => return now,
            Err(now) => guess = now,
        }
    }
}

macro_rules! wrap {
    ($name:ident, $inner:ty, $t:ty, $other:expr) => {
        /// Loom atomic with a correctly modelled `swap` (see the module doc).
        #[derive(Debug, Default)]
        pub struct $name($inner);

        impl $name {
            /// As std's `new`.
            pub fn new(v: $t) -> Self {
                Self(<$inner>::new(v))
            }
            /// As std's `load`.
            pub fn load(&self, o: Ordering) -> $t {
                self.0.load(o)
            }
            /// As std's `store`.
            pub fn store(&self, v: $t, o: Ordering) {
                self.0.store(v, o)
            }
            /// As std's `compare_exchange`.
            pub fn compare_exchange(
                &self,
                c: $t,
                n: $t,
                s: Ordering,
                f: Ordering,
            ) -> Result<$t, $t> {
                self.0.compare_exchange(c, n, s, f)
            }
            /// As std's `compare_exchange_weak`.
            pub fn compare_exchange_weak(
                &self,
                c: $t,
                n: $t,
                s: Ordering,
                f: Ordering,
            ) -> Result<$t, $t> {
                self.0.compare_exchange_weak(c, n, s, f)
            }
            /// As std's `swap`, modelled as a CAS loop (see [`swap_by_cas`]).
            pub fn swap(&self, v: $t, o: Ordering) -> $t {
                swap_by_cas(
                    v,
                    $other(v),
                    o,
                    || self.0.load(load_order(o)),
                    |e| self.0.compare_exchange(e, v, o, load_order(o)),
                )
            }
        }
    };
}

wrap!(
    AtomicBool,
    loom::sync::atomic::AtomicBool,
    bool,
    |v: bool| !v
);
wrap!(AtomicU32, loom::sync::atomic::AtomicU32, u32, |v: u32| v
    ^ 1);

impl AtomicU32 {
    /// As std's `fetch_add`.
    pub fn fetch_add(&self, v: u32, o: Ordering) -> u32 {
        self.0.fetch_add(v, o)
    }
    /// As std's `fetch_sub`.
    pub fn fetch_sub(&self, v: u32, o: Ordering) -> u32 {
        self.0.fetch_sub(v, o)
    }
    /// As std's `fetch_and`.
    pub fn fetch_and(&self, v: u32, o: Ordering) -> u32 {
        self.0.fetch_and(v, o)
    }
    /// As std's `fetch_or`.
    pub fn fetch_or(&self, v: u32, o: Ordering) -> u32 {
        self.0.fetch_or(v, o)
    }
}

/// Loom `AtomicPtr` with a correctly modelled `swap` (see the module doc): every
/// queue lock's tail is swapped, so the MCS/CLH/Smart-Q models need it.
#[derive(Debug)]
pub struct AtomicPtr<T>(loom::sync::atomic::AtomicPtr<T>);

impl<T> Default for AtomicPtr<T> {
    fn default() -> Self {
        Self::new(std::ptr::null_mut())
    }
}

impl<T> AtomicPtr<T> {
    /// As std's `new`.
    pub fn new(v: *mut T) -> Self {
        Self(loom::sync::atomic::AtomicPtr::new(v))
    }
    /// As std's `load`.
    pub fn load(&self, o: Ordering) -> *mut T {
        self.0.load(o)
    }
    /// As std's `store`.
    pub fn store(&self, v: *mut T, o: Ordering) {
        self.0.store(v, o)
    }
    /// As std's `compare_exchange`.
    pub fn compare_exchange(
        &self,
        c: *mut T,
        n: *mut T,
        s: Ordering,
        f: Ordering,
    ) -> Result<*mut T, *mut T> {
        self.0.compare_exchange(c, n, s, f)
    }
    /// As std's `compare_exchange_weak`.
    pub fn compare_exchange_weak(
        &self,
        c: *mut T,
        n: *mut T,
        s: Ordering,
        f: Ordering,
    ) -> Result<*mut T, *mut T> {
        self.0.compare_exchange_weak(c, n, s, f)
    }
    /// As std's `swap`, modelled as a CAS loop (see [`swap_by_cas`]).
    pub fn swap(&self, v: *mut T, o: Ordering) -> *mut T {
        swap_by_cas(
            v,
            v.map_addr(|a| a ^ 1),
            o,
            || self.0.load(load_order(o)),
            |e| self.0.compare_exchange(e, v, o, load_order(o)),
        )
    }
    /// As std's `into_inner`.
    pub fn into_inner(self) -> *mut T {
        self.0.into_inner()
    }
}
