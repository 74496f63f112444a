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

macro_rules! wrap {
    ($name:ident, $inner:ty, $t:ty) => {
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
            /// As std's `swap`, modelled as a CAS loop. Swapping in the value
            /// already there is modelled as a load with the swap's load ordering.
            pub fn swap(&self, v: $t, o: Ordering) -> $t {
                loop {
                    let cur = self.0.load(load_order(o));
                    if cur == v {
                        return cur;
                    }
                    if self.0.compare_exchange(cur, v, o, load_order(o)).is_ok() {
                        return cur;
                    }
                }
            }
        }
    };
}

wrap!(AtomicBool, loom::sync::atomic::AtomicBool, bool);
wrap!(AtomicU32, loom::sync::atomic::AtomicU32, u32);

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
    /// As std's `swap`, modelled as a CAS loop (see the module doc).
    pub fn swap(&self, v: *mut T, o: Ordering) -> *mut T {
        loop {
            let cur = self.0.load(load_order(o));
            if cur == v {
                return cur;
            }
            if self.0.compare_exchange(cur, v, o, load_order(o)).is_ok() {
                return cur;
            }
        }
    }
    /// As std's `into_inner`.
    pub fn into_inner(self) -> *mut T {
        self.0.into_inner()
    }
}
