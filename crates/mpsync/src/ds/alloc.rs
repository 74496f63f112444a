//! Node allocation for the lock-free structures: the system allocator, or Hart's
//! per-thread magazines over a locked global pool.
//!
//! Hart, *Practical lock-free memory reclamation*, §5.1.3 (papers/002_…): "Each
//! thread can have two freelists of 100 nodes each at any given time. Threads
//! which exhaust their freelists can acquire more memory from a spinlock-protected
//! global pool" — the slab allocator's magazines (Bonwick & Adams 2001). The pool
//! matters to the reclamation experiments: a scheme that holds more nodes
//! unreclaimed goes to the locked global pool more often, and a thread preempted
//! holding that lock stalls every allocating thread.
//!
//! [`MagazineAlloc`] serves blocks of one cache line (64 bytes, 64-aligned; a node
//! type larger than that is a compile-time error). Blocks come from the system in
//! chunks of [`MAGAZINE`] and are never returned to it (a slab); they are reused
//! forever. [`SystemAlloc`] is `Box`.
//!
//! Neither allocator runs `T`'s destructor on [`free`](NodeAlloc::free): the
//! structures move values out of their nodes (or drop them) first.
//!
//! ```
//! use mpsync::ds::alloc::{MagazineAlloc, NodeAlloc, SystemAlloc};
//!
//! fn round_trip<A: NodeAlloc>() {
//!     let p = A::alloc((7u64, 8u64));
//!     // SAFETY: `p` came from `A::alloc` and is freed once, not used after.
//!     unsafe {
//!         assert_eq!(*p.as_ptr(), (7, 8));
//!         A::free::<(u64, u64)>(p.as_ptr().cast());
//!     }
//! }
//! round_trip::<SystemAlloc>();
//! round_trip::<MagazineAlloc>();
//! ```

use std::mem::MaybeUninit;
use std::ptr::NonNull;

/// Blocks per magazine (Hart: freelists of 100 nodes).
pub const MAGAZINE: usize = 100;
/// The size and alignment of a [`MagazineAlloc`] block.
pub const BLOCK_BYTES: usize = 64;

/// How a structure gets and gives back its nodes.
pub trait NodeAlloc: Send + Sync + 'static {
    /// Short name for figures: `"system"`, `"magazines"`.
    const NAME: &'static str;

    /// A node holding `value`.
    fn alloc<T>(value: T) -> NonNull<T>;

    /// Gives the node back without dropping its contents. Has the shape of a
    /// reclaimer's free function (`unsafe fn(*mut u8)`), so `A::free::<Node>` can
    /// be handed to [`Guard::retire_raw`](crate::reclaim::Guard::retire_raw).
    ///
    /// # Safety
    /// `p` came from `Self::alloc::<T>`, is freed once and not used afterwards.
    unsafe fn free<T>(p: *mut u8);
}

/// The system allocator (`Box`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemAlloc;

impl NodeAlloc for SystemAlloc {
    const NAME: &'static str = "system";

    fn alloc<T>(value: T) -> NonNull<T> {
        NonNull::from(Box::leak(Box::new(value)))
    }

    unsafe fn free<T>(p: *mut u8) {
        // SAFETY: the contract: `p` came from `Box::new` of a `T` (as
        // `MaybeUninit<T>`, the same layout), so its contents are not dropped.
        drop(unsafe { Box::from_raw(p.cast::<MaybeUninit<T>>()) });
    }
}

#[cfg(not(loom))]
pub use magazine::MagazineAlloc;

/// Hart's magazines (not under loom: the depot is a static behind a TAS-B lock).
#[cfg(not(loom))]
mod magazine {
    use super::*;
    use crate::lock::TasB;
    use std::cell::RefCell;
    use std::mem;

    /// Hart's allocator: two magazines of [`MAGAZINE`] blocks per thread over a
    /// global pool behind a spinlock (TAS-B). See the module doc.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct MagazineAlloc;

    #[repr(C, align(64))]
    struct Block(#[allow(dead_code)] MaybeUninit<[u8; BLOCK_BYTES]>);

    /// A block's address. Blocks are plain memory owned by whoever holds the address.
    #[derive(Clone, Copy)]
    struct BlockPtr(NonNull<Block>);
    // SAFETY: a block is untyped memory; holding its address is owning it.
    unsafe impl Send for BlockPtr {}

    type Magazine = Vec<BlockPtr>;

    struct Depot {
        /// Magazines with blocks in them.
        full: Vec<Magazine>,
        /// Empty magazines (their capacity is kept).
        empty: Vec<Magazine>,
        /// Every chunk ever taken from the system, so the blocks stay reachable.
        chunks: Vec<ChunkPtr>,
        /// Blocks taken from the system.
        blocks: usize,
    }

    struct ChunkPtr(#[allow(dead_code)] *mut [Block]);
    // SAFETY: only kept to keep the memory reachable; never dereferenced.
    unsafe impl Send for ChunkPtr {}

    static DEPOT: crate::lock::Mutex<TasB, Depot> = crate::lock::Mutex::new(Depot {
        full: Vec::new(),
        empty: Vec::new(),
        chunks: Vec::new(),
        blocks: 0,
    });

    impl Depot {
        /// A magazine of fresh blocks from the system.
        fn grow(&mut self) -> Magazine {
            let chunk: &'static mut [Block] = Box::leak(
                (0..MAGAZINE)
                    .map(|_| Block(MaybeUninit::uninit()))
                    .collect::<Vec<_>>()
                    .into_boxed_slice(),
            );
            let mut m = self.empty.pop().unwrap_or_default();
            m.reserve(MAGAZINE);
            m.extend(chunk.iter_mut().map(|b| BlockPtr(NonNull::from(b))));
            self.chunks.push(ChunkPtr(chunk));
            self.blocks += MAGAZINE;
            m
        }

        /// A magazine with blocks (from the pool, or fresh).
        fn take_full(&mut self) -> Magazine {
            self.full.pop().unwrap_or_else(|| self.grow())
        }
    }

    /// A thread's two magazines.
    struct Cache {
        loaded: Magazine,
        previous: Magazine,
    }

    impl Drop for Cache {
        fn drop(&mut self) {
            let mut d = DEPOT.lock();
            for m in [mem::take(&mut self.loaded), mem::take(&mut self.previous)] {
                if m.is_empty() {
                    d.empty.push(m);
                } else {
                    d.full.push(m);
                }
            }
        }
    }

    thread_local! {
        static CACHE: RefCell<Cache> = const {
            RefCell::new(Cache { loaded: Vec::new(), previous: Vec::new() })
        };
    }

    impl Cache {
        fn get(&mut self) -> BlockPtr {
            if let Some(b) = self.loaded.pop() {
                return b;
            }
            if !self.previous.is_empty() {
                mem::swap(&mut self.loaded, &mut self.previous);
            } else {
                // Both empty: trade the loaded (empty) magazine for a full one.
                let mut d = DEPOT.lock();
                let full = d.take_full();
                d.empty.push(mem::replace(&mut self.loaded, full));
            }
            self.loaded
                .pop()
                .expect("a magazine from the depot has blocks")
        }

        fn put(&mut self, b: BlockPtr) {
            if self.loaded.len() < MAGAZINE {
                self.loaded.push(b);
                return;
            }
            if self.previous.len() == MAGAZINE {
                // Both full: hand the previous one to the depot for an empty one.
                let mut d = DEPOT.lock();
                let empty = d.empty.pop().unwrap_or_default();
                d.full.push(mem::replace(&mut self.previous, empty));
            }
            mem::swap(&mut self.loaded, &mut self.previous);
            self.loaded.push(b);
        }
    }

    impl MagazineAlloc {
        /// Takes `n` blocks from the system into the pool now (Hart: "all nodes are
        /// pre-allocated by the parent before the test begins").
        pub fn preallocate(n: usize) {
            let mut d = DEPOT.lock();
            for _ in 0..n.div_ceil(MAGAZINE) {
                let m = d.grow();
                d.full.push(m);
            }
        }

        /// Blocks taken from the system so far (all of them are in use or pooled).
        pub fn blocks_allocated() -> usize {
            DEPOT.lock().blocks
        }
    }

    impl NodeAlloc for MagazineAlloc {
        const NAME: &'static str = "magazines";

        fn alloc<T>(value: T) -> NonNull<T> {
            const {
                assert!(
                    mem::size_of::<T>() <= BLOCK_BYTES && mem::align_of::<T>() <= BLOCK_BYTES,
                    "MagazineAlloc serves nodes of at most 64 bytes and 64-byte alignment"
                )
            };
            let b = CACHE
                .try_with(|c| c.borrow_mut().get())
                // Thread exiting (its cache is gone): straight from the depot.
                .unwrap_or_else(|_| {
                    let mut d = DEPOT.lock();
                    let mut m = d.take_full();
                    let b = m.pop().expect("a magazine from the depot has blocks");
                    if m.is_empty() {
                        d.empty.push(m);
                    } else {
                        d.full.push(m);
                    }
                    b
                });
            let p = b.0.cast::<T>();
            // SAFETY: the block is ours, large and aligned enough for `T` (the
            // assertion above), and holds no live value.
            unsafe { p.as_ptr().write(value) };
            p
        }

        unsafe fn free<T>(p: *mut u8) {
            // SAFETY: the contract: `p` came from `alloc`, which hands out blocks.
            let b = BlockPtr(unsafe { NonNull::new_unchecked(p.cast::<Block>()) });
            if CACHE.try_with(|c| c.borrow_mut().put(b)).is_err() {
                // Thread exiting: straight to the depot.
                let mut d = DEPOT.lock();
                let mut m = d.empty.pop().unwrap_or_default();
                m.push(b);
                d.full.push(m);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn system_round_trip_does_not_drop_contents() {
        let p = SystemAlloc::alloc(std::mem::ManuallyDrop::new(String::from("x")));
        // SAFETY: from `alloc`; the string is taken out before the free.
        unsafe {
            let s = std::mem::ManuallyDrop::into_inner(p.as_ptr().read());
            assert_eq!(s, "x");
            SystemAlloc::free::<std::mem::ManuallyDrop<String>>(p.as_ptr().cast());
        }
    }

    #[test]
    fn magazines_reuse_blocks_across_threads() {
        struct Sent(NonNull<u64>);
        // SAFETY: the test hands each block to one thread at a time.
        unsafe impl Send for Sent {}
        MagazineAlloc::preallocate(MAGAZINE);
        let before = MagazineAlloc::blocks_allocated();
        // Allocate more than two magazines' worth on one thread, then free them
        // on another: every block goes back to the pool and is reused.
        let ptrs: Vec<Sent> = (0..(2 * MAGAZINE + 7) as u64)
            .map(|i| Sent(MagazineAlloc::alloc(i)))
            .collect();
        for (i, p) in ptrs.iter().enumerate() {
            // SAFETY: written by `alloc` above and not freed yet.
            assert_eq!(unsafe { *p.0.as_ptr() }, i as u64);
        }
        std::thread::scope(|s| {
            s.spawn(move || {
                for p in ptrs {
                    // SAFETY: each from `alloc::<u64>`, freed once.
                    unsafe { MagazineAlloc::free::<u64>(p.0.as_ptr().cast()) };
                }
            });
        });
        let again: Vec<NonNull<u64>> = (0..(2 * MAGAZINE + 7) as u64)
            .map(MagazineAlloc::alloc)
            .collect();
        // Other tests may allocate concurrently, so only a bound is checked: the
        // pool grew by at most what is live now plus a few magazines.
        assert!(MagazineAlloc::blocks_allocated() <= before + 8 * MAGAZINE);
        for p in again {
            // SAFETY: from `alloc::<u64>`, freed once.
            unsafe { MagazineAlloc::free::<u64>(p.as_ptr().cast()) };
        }
    }
}
