//! SCQ: a bounded lock-free FIFO queue built on fetch-and-add rings, with no
//! double-width CAS.
//!
//! Nikolaev, *A Scalable, Portable, and Memory-Efficient Lock-Free FIFO Queue*,
//! DISC 2019, §4 (Figure 8, the SCQ ring; Figure 9, the queue over two rings of
//! indices). A value lives in one of `n` cells; two rings of `2n` entries hand
//! the cells' indices around: `fq` holds the free cells, `aq` the cells that
//! hold values. An enqueue takes a free index from `fq`, writes its cell and
//! puts the index in `aq`; a dequeue takes an index from `aq`, reads its cell and
//! gives the index back to `fq`. Each ring operation is one `fetch_add` on the
//! ring's head or tail — threads contend on a counter, not on a CAS loop — and
//! one single-word CAS (or OR) on the entry it lands on; an entry is a cycle
//! number, a "safe" bit and an index packed into 64 bits. The threshold counter
//! (3n − 1 after an enqueue) bounds how far dequeuers may run on an empty ring,
//! which makes the ring lock-free.
//!
//! **A preempted thread holding an index** blocks nobody: an enqueuer stopped
//! between taking a free cell and publishing it, or a dequeuer stopped between
//! taking a full cell and freeing it, only takes that one cell out of the
//! capacity until it runs again (the queue reports full one value early; a
//! unit test stops an enqueuer there and checks exactly that).
//! Progress: lock-free, every operation.
//!
//! The unbounded LSCQ (§5: SCQs linked into a list, each closed to enqueues
//! once full) is [`lscq::LscqQueue`](super::lscq::LscqQueue), on the same rings.
//!
//! **What a put + take costs, and why `ArrayQueue` is faster** (issue 29,
//! measured on 2 cores): a pair is four ring operations (`fq` dequeue, `aq`
//! enqueue, `aq` dequeue, `fq` enqueue), each one `fetch_add` on a head or
//! tail and one CAS or OR on an entry: 8 locked RMWs on 8 different lines
//! (two heads, two tails, four entries) plus the thresholds' loads.
//! crossbeam's `ArrayQueue` does 2 CAS (its head, its tail) and 2 plain stamp
//! stores on about 3 lines. One thread alone: 18.6 to 19.2 M pairs/s here
//! (`pairs_per_second`, an ignored test: `cargo test -p mpsync --release
//! --lib scq::bench -- --ignored --nocapture`), about 52 ns a pair, about
//! 6.5 ns an uncontended RMW at most; at 2 threads 7.5 to 9.9 M pairs/s, every RMW a
//! line transfer. The avoidable costs the issue listed are not the cause: the
//! threshold is stored only when it is not already 3n − 1 (Figure 8), the
//! entries are cache-remapped (below; with the remap off, 2 threads ran 8.7
//! and 8.9 M pairs/s against 10.3 and 11.5 with it), head, tail and threshold are on lines
//! of their own, `each` runs only in `Drop`, and the stall point is one
//! relaxed load of a process-wide counter. A dequeuer overtaking an enqueuer
//! (the slow path: an extra CAS, a threshold `fetch_sub`, the enqueuer's
//! retry) was counted at 0.3% to 1.7% of the pairs at 2 and 4 threads, too
//! rare to matter; `SeqCst` costs nothing extra on x86 beyond the RMWs
//! themselves (the loads are plain). `ds-oversub` also shows how the peers
//! win: `ArrayQueue` and `SegQueue` pairs run at fairness 0.38 (one thread
//! keeps the lines and does many pairs in a row), SCQ at 0.99 (every
//! operation alternates). Halving the work needs the value in the ring entry
//! itself (no `fq`); a 64-bit value beside a cycle number needs a double-width
//! CAS, which this queue exists to avoid. Not done here, nor a per-handle cache
//! of a freed index (it would hide cells from other threads' `try_enqueue`).
//!
//! Uses `sync`, and `sched` only for a named stall point: no reclamation (the
//! cells are the queue's), nobody waits.
//!
//! ```
//! use mpsync::ds::scq::ScqQueue;
//!
//! let q: ScqQueue<&str> = ScqQueue::new(2).unwrap();
//! assert_eq!(q.capacity(), 2);
//! q.try_enqueue("a").unwrap();
//! q.try_enqueue("b").unwrap();
//! assert_eq!(q.try_enqueue("c"), Err("c"), "full: the value comes back");
//! assert_eq!(q.len(), 2);
//! assert_eq!((q.dequeue(), q.dequeue(), q.dequeue()), (Some("a"), Some("b"), None));
//! assert!(q.is_empty());
//! ```

use std::fmt;

use crossbeam_utils::CachePadded;

use super::lf::ValueCell;
use super::{ConcurrentQueue, QueueHandle};
use crate::sched::stall;
use crate::sync::{AtomicI64, AtomicU64, Ordering};
use crate::util::unwind::each;

/// The most values an SCQ (or an LSCQ segment) holds: 2³², about 100 GiB
/// of cells for `u64`s. Beyond it the capacity's power of two would also
/// overflow or crowd out the cycle bits of a ring entry.
pub const MAX_CAPACITY: usize = 1 << 32;

/// A capacity an SCQ queue (or an LSCQ segment) cannot have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadCapacity {
    /// 0: a queue must hold at least one value.
    Zero,
    /// Above [`MAX_CAPACITY`] (the capacity asked for).
    TooLarge(usize),
}

impl fmt::Display for BadCapacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Zero => f.write_str(
                "capacity 0: an SCQ queue holds at least 1 value (e.g. ScqQueue::new(1024))",
            ),
            Self::TooLarge(c) => write!(
                f,
                "capacity {c}: an SCQ queue holds at most 2^32 values, its cells allocated up \
                 front (e.g. ScqQueue::new(1 << 20))"
            ),
        }
    }
}

impl std::error::Error for BadCapacity {}

/// The top bit of a ring's `tail`: once set ([`Ring::finalize`], LSCQ's
/// closing of a full segment) every enqueue fails, and it stays set — the
/// enqueuers' `fetch_add`s only change the bits below it.
const FINALIZED: u64 = 1 << 63;

/// Cells of the smallest SCQ (see [`Scq::order_for`]).
const MIN_CELLS: usize = 2;

/// An enqueue into a ring that was [finalized](Ring::finalize).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Finalized;

/// One SCQ ring of `2n` entries holding indices below `n` (Figure 8), `n ≥ 2`.
///
/// An entry is `cycle << (order + 2) | safe << (order + 1) | index`, where
/// `2n = 1 << (order + 1)`:
///
/// | index         | meaning                                                    |
/// |---------------|------------------------------------------------------------|
/// | `< n`         | holds an index, put there by the enqueue of its cycle      |
/// | `⊥ = 2n − 1`  | empty                                                      |
/// | `⊥c = 2n − 2` (OR-ed in) | consumed by the dequeue of its cycle (empty too) |
///
/// A dequeuer that overtakes an enqueuer clears `safe` on an entry it cannot
/// empty (or moves an empty one to its own cycle), so the late enqueuer does not
/// put an index where no dequeuer will look.
///
/// Every ring operation is `SeqCst`: the paper's argument (§4) relies on one
/// total order over `head`, `tail`, `threshold` and the entries (its x86
/// target's locked instructions give it), e.g. an enqueuer's read of `head`
/// against a dequeuer's read of `tail`.
struct Ring {
    head: CachePadded<AtomicU64>,
    tail: CachePadded<AtomicU64>,
    threshold: CachePadded<AtomicI64>,
    entries: Box<[AtomicU64]>,
    /// log2 of `n`.
    order: u32,
}

impl Ring {
    fn n(&self) -> u64 {
        1 << self.order
    }
    fn bottom(&self) -> u64 {
        2 * self.n() - 1
    }
    fn bottom_c(&self) -> u64 {
        2 * self.n() - 2
    }
    fn cycle(&self, x: u64) -> u64 {
        x >> (self.order + 1)
    }
    fn entry_cycle(&self, e: u64) -> u64 {
        e >> (self.order + 2)
    }
    fn safe(&self, e: u64) -> bool {
        e >> (self.order + 1) & 1 == 1
    }
    fn index(&self, e: u64) -> u64 {
        e & self.bottom()
    }
    fn entry(&self, cycle: u64, safe: bool, index: u64) -> u64 {
        cycle << (self.order + 2) | u64::from(safe) << (self.order + 1) | index
    }
    /// Where ring position `pos` (taken mod 2n) lives: its `order + 1` bits
    /// rotated left by 4 (§4's cache remap), so that consecutive positions —
    /// threads that just did `fetch_add` one after another — touch entries 16
    /// apart, on different 128-byte line pairs (rings of 32 entries or more).
    fn remap(&self, pos: u64) -> usize {
        let bits = self.order + 1;
        let p = pos & self.bottom();
        if bits < 5 {
            return p as usize;
        }
        (((p << 4) | (p >> (bits - 4))) & self.bottom()) as usize
    }
    fn is_empty_index(&self, i: u64) -> bool {
        i == self.bottom() || i == self.bottom_c()
    }

    /// An empty ring (Figure 8's initial state).
    fn empty(order: u32) -> Self {
        let mut r = Self {
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(AtomicU64::new(0)),
            threshold: CachePadded::new(AtomicI64::new(-1)),
            entries: Box::new([]),
            order,
        };
        let two_n = 2 * r.n();
        let e = r.entry(0, true, r.bottom());
        r.entries = (0..two_n).map(|_| AtomicU64::new(e)).collect();
        r.head = CachePadded::new(AtomicU64::new(two_n));
        r.tail = CachePadded::new(AtomicU64::new(two_n));
        r
    }

    /// A ring holding every index `0..n` (the free-cell ring at the start):
    /// the empty ring after `n` enqueues of cycle 1 (so the entries past them
    /// keep cycle 0, below every dequeuer's).
    fn full(order: u32) -> Self {
        let r = Self::empty(order);
        let n = r.n();
        for i in 0..n {
            // SeqCst: see the type's doc (no other thread yet).
            r.entries[r.remap(i)].store(r.entry(1, true, i), Ordering::SeqCst);
        }
        r.tail.store(3 * n, Ordering::SeqCst);
        r.threshold.store(3 * n as i64 - 1, Ordering::SeqCst);
        r
    }

    /// Puts `index` (< n) in the ring. Fails only once the ring is
    /// [finalized](Self::finalize): there is always room, since a queue puts
    /// at most `n` indices in a ring of `2n` entries.
    fn enqueue(&self, index: u64) -> Result<(), Finalized> {
        loop {
            let t = self.tail.fetch_add(1, Ordering::SeqCst);
            if t & FINALIZED != 0 {
                return Err(Finalized);
            }
            stall::point(stall::SCQ_POSITION_TAKEN);
            let j = self.remap(t);
            let mut e = self.entries[j].load(Ordering::SeqCst);
            loop {
                let fits = self.entry_cycle(e) < self.cycle(t)
                    && self.is_empty_index(self.index(e))
                    && (self.safe(e) || self.head.load(Ordering::SeqCst) <= t);
                if !fits {
                    break;
                }
                let new = self.entry(self.cycle(t), true, index);
                match self.entries[j].compare_exchange(e, new, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(_) => {
                        let full = 3 * self.n() as i64 - 1;
                        if self.threshold.load(Ordering::SeqCst) != full {
                            self.threshold.store(full, Ordering::SeqCst);
                        }
                        return Ok(());
                    }
                    Err(now) => e = now,
                }
            }
        }
    }

    /// Takes an index out of the ring, or `None` if it is empty.
    fn dequeue(&self) -> Option<u64> {
        if self.threshold.load(Ordering::SeqCst) < 0 {
            return None;
        }
        loop {
            let h = self.head.fetch_add(1, Ordering::SeqCst);
            let j = self.remap(h);
            let mut e = self.entries[j].load(Ordering::SeqCst);
            loop {
                if self.entry_cycle(e) == self.cycle(h) {
                    // Consume: the index becomes ⊥c (an OR leaves the cycle
                    // and the safe bit as they are).
                    self.entries[j].fetch_or(self.bottom_c(), Ordering::SeqCst);
                    return Some(self.index(e));
                }
                let new = if self.is_empty_index(self.index(e)) {
                    self.entry(self.cycle(h), self.safe(e), self.bottom())
                } else {
                    self.entry(self.entry_cycle(e), false, self.index(e))
                };
                if self.entry_cycle(e) < self.cycle(h) {
                    match self.entries[j].compare_exchange(
                        e,
                        new,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    ) {
                        Ok(_) => {}
                        Err(now) => {
                            e = now;
                            continue;
                        }
                    }
                }
                break;
            }
            let t = self.tail.load(Ordering::SeqCst);
            if t & !FINALIZED <= h + 1 {
                self.catchup(t, h + 1);
                self.threshold.fetch_sub(1, Ordering::SeqCst);
                return None;
            }
            if self.threshold.fetch_sub(1, Ordering::SeqCst) <= 0 {
                return None;
            }
        }
    }

    /// Moves `tail` (as loaded, its [`FINALIZED`] bit included, which stays)
    /// up to `head` after dequeuers ran past it.
    fn catchup(&self, mut tail: u64, mut head: u64) {
        while self
            .tail
            .compare_exchange(
                tail,
                head | tail & FINALIZED,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_err()
        {
            head = self.head.load(Ordering::SeqCst);
            tail = self.tail.load(Ordering::SeqCst);
            if tail & !FINALIZED >= head {
                break;
            }
        }
    }

    /// Closes the ring to enqueues, for good (LSCQ, §5: an enqueuer that
    /// found its segment full). An enqueue whose `fetch_add` came before
    /// still completes.
    fn finalize(&self) {
        self.tail.fetch_or(FINALIZED, Ordering::SeqCst);
    }

    /// Whether [`finalize`](Self::finalize) ran.
    fn is_finalized(&self) -> bool {
        self.tail.load(Ordering::SeqCst) & FINALIZED != 0
    }

    /// Lets dequeuers look again (LSCQ, §5): a dequeuer that found the
    /// threshold spent on a segment that has a successor resets it before
    /// its last look, so an enqueue still completing there is not missed.
    fn reset_threshold(&self) {
        self.threshold
            .store(3 * self.n() as i64 - 1, Ordering::SeqCst);
    }

    /// Entries holding an index (a snapshot; exact when no thread operates).
    fn count(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| self.index(e.load(Ordering::SeqCst)) < self.n())
            .count()
    }
}

/// The rings and cells of one SCQ: [`ScqQueue`]'s, and each segment's of an
/// [`LscqQueue`](super::lscq::LscqQueue). It has no `Drop` of its values (the
/// cells are `MaybeUninit`): its owner drains it, so that a segment freed by a
/// reclaimer never drops a `T`.
pub(super) struct Scq<T> {
    /// Indices of the cells holding values, in FIFO order.
    aq: Ring,
    /// Indices of the free cells.
    fq: Ring,
    cells: Box<[ValueCell<T>]>,
}

// SAFETY: values move between threads whole (`T: Send`); a cell is written by
// the enqueuer that took its index from `fq` and read by the dequeuer that took
// it from `aq`, one at a time (the rings hand each index to one thread).
unsafe impl<T: Send> Send for Scq<T> {}
// SAFETY: as above; `&Scq` gives out no `&T`.
unsafe impl<T: Send> Sync for Scq<T> {}

impl<T> Scq<T> {
    /// log2 of the cell count for `capacity` values: rounded up to a power of
    /// two, and at least 2 — with one cell, `⊥c = 2n − 2` would be index 0,
    /// so a consumed entry would still read as holding it (values came out
    /// twice or never: found by 8 threads on `ScqQueue::new(1)`).
    pub(super) fn order_for(capacity: usize) -> Result<u32, BadCapacity> {
        if capacity == 0 {
            return Err(BadCapacity::Zero);
        }
        if capacity > MAX_CAPACITY {
            return Err(BadCapacity::TooLarge(capacity));
        }
        Ok(capacity.max(MIN_CELLS).next_power_of_two().trailing_zeros())
    }

    /// An empty SCQ of `1 << order` cells.
    pub(super) fn new(order: u32) -> Self {
        Self {
            aq: Ring::empty(order),
            fq: Ring::full(order),
            cells: (0..1usize << order).map(|_| ValueCell::empty()).collect(),
        }
    }

    pub(super) fn capacity(&self) -> usize {
        self.cells.len()
    }

    /// [`ScqQueue::try_enqueue`]: for an SCQ that is never finalized.
    pub(super) fn try_enqueue(&self, value: T) -> Result<(), T> {
        let Some(i) = self.fq.dequeue() else {
            return Err(value);
        };
        // SAFETY: `fq` handed index `i` to us alone; its cell is empty (its
        // last value was taken before the index went back to `fq`, ordered by
        // the rings' SeqCst operations).
        unsafe { self.cells[i as usize].write(value) };
        stall::point(stall::SCQ_CELL_WRITTEN);
        self.aq
            .enqueue(i)
            .expect("only an LSCQ segment's ring is finalized, and it uses enqueue_or_finalize");
        Ok(())
    }

    /// An LSCQ segment's enqueue (§5): appends `value`, or gives it back when
    /// the SCQ is closed — finalizing it if it was full, so that no enqueue
    /// after this one lands here.
    pub(super) fn enqueue_or_finalize(&self, value: T) -> Result<(), T> {
        if self.aq.is_finalized() {
            return Err(value);
        }
        let Some(i) = self.fq.dequeue() else {
            self.aq.finalize();
            return Err(value);
        };
        // SAFETY: as in `try_enqueue`.
        unsafe { self.cells[i as usize].write(value) };
        stall::point(stall::SCQ_CELL_WRITTEN);
        if self.aq.enqueue(i) == Err(Finalized) {
            // Closed meanwhile: the value comes back out of the cell nobody
            // else can reach (its index is in no ring), and the index goes
            // back to the free ring, which is never finalized.
            // SAFETY: we wrote this cell above and own its index.
            let v = unsafe { self.cells[i as usize].take() };
            self.fq
                .enqueue(i)
                .expect("the free-cell ring is never finalized");
            return Err(v);
        }
        Ok(())
    }

    /// [`ScqQueue::dequeue`].
    pub(super) fn dequeue(&self) -> Option<T> {
        let i = self.aq.dequeue()?;
        // SAFETY: `aq` handed index `i` to us alone; its cell holds the value
        // written before the index was put in `aq` (ordered by the rings'
        // SeqCst operations).
        let v = unsafe { self.cells[i as usize].take() };
        self.fq
            .enqueue(i)
            .expect("the free-cell ring is never finalized");
        Some(v)
    }

    /// [`Ring::reset_threshold`] of the value ring.
    pub(super) fn reset_threshold(&self) {
        self.aq.reset_threshold();
    }

    /// Leaves the state of an enqueuer preempted right after its `fetch_add`
    /// on the value ring's tail: a free cell taken, a position claimed, its
    /// entry never written (for measuring what such a thread costs the
    /// others without stopping one: a stall-point trap slows every thread's
    /// passages while it holds).
    #[cfg(all(test, not(loom)))]
    pub(super) fn abandon_a_claimed_position(&self) {
        self.fq.dequeue().expect("a free cell");
        self.aq.tail.fetch_add(1, Ordering::SeqCst);
    }

    /// Values queued (a walk of the ring, O(capacity)).
    pub(super) fn len(&self) -> usize {
        self.aq.count()
    }

    /// Takes out and drops every value left (`&mut`: nobody else operates);
    /// one whose `Drop` panics stops none of the others, and the first panic
    /// comes back.
    pub(super) fn drain(&mut self) -> crate::util::unwind::Caught {
        // A finalized segment's dequeuers may have spent its threshold.
        self.aq.reset_threshold();
        each(std::iter::from_fn(|| self.dequeue()), drop)
    }
}

/// Nikolaev's SCQ: a bounded lock-free FIFO queue of at least `capacity` values
/// (see the [module documentation](self)); `&self` operations, no handles, no
/// reclamation.
pub struct ScqQueue<T>(Scq<T>);

impl<T> ScqQueue<T> {
    /// An empty queue of `capacity` values, rounded up to a power of two and
    /// to at least 2 ([`capacity`](Self::capacity) says what it is). Memory:
    /// 24 bytes and a `T` per value.
    ///
    /// # Errors
    /// [`BadCapacity`] for 0 or above [`MAX_CAPACITY`].
    pub fn new(capacity: usize) -> Result<Self, BadCapacity> {
        Ok(Self(Scq::new(Scq::<T>::order_for(capacity)?)))
    }

    /// How many values it holds when full.
    pub fn capacity(&self) -> usize {
        self.0.capacity()
    }

    /// Appends `value` at the tail, or gives it back if the queue is full.
    ///
    /// # Errors
    /// `Err(value)` when the queue is full.
    pub fn try_enqueue(&self, value: T) -> Result<(), T> {
        self.0.try_enqueue(value)
    }

    /// Removes the value at the head, or `None` if the queue is empty.
    pub fn dequeue(&self) -> Option<T> {
        self.0.dequeue()
    }

    /// The number of values (a walk of the ring, O(capacity); exact when no
    /// thread operates meanwhile).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the queue is empty (as [`len`](Self::len), O(capacity)).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Drop for ScqQueue<T> {
    /// Drops the values still queued; one whose `Drop` panics stops none of
    /// the others (then the first panic goes on).
    fn drop(&mut self) {
        self.0.drain().resume();
    }
}

impl<T> fmt::Debug for ScqQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScqQueue")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

impl<T: Send> ConcurrentQueue<T> for ScqQueue<T> {
    type Handle<'a>
        = &'a Self
    where
        Self: 'a;

    fn handle(&self) -> &Self {
        self
    }
}

/// Through the handle trait, `enqueue` cannot fail: it waits while the queue is
/// full (spinning; for tests and benchmarks that never fill it).
impl<T> QueueHandle<T> for &ScqQueue<T> {
    fn enqueue(&mut self, mut value: T) {
        while let Err(v) = self.try_enqueue(value) {
            value = v;
            crate::sync::spin_loop();
        }
    }
    fn dequeue(&mut self) -> Option<T> {
        ScqQueue::dequeue(self)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_full_and_empty_many_times_over() {
        assert_eq!(ScqQueue::<u8>::new(3).unwrap().capacity(), 4);
        assert_eq!(ScqQueue::<u8>::new(0).unwrap_err(), BadCapacity::Zero);
        // Above the largest power of two a usize holds, too: no wrapped size.
        for c in [MAX_CAPACITY + 1, usize::MAX] {
            assert_eq!(
                ScqQueue::<u8>::new(c).unwrap_err(),
                BadCapacity::TooLarge(c)
            );
        }
        // The smallest queue has 2 cells; each size is filled and emptied.
        for asked in [1, 3] {
            fill_and_empty(ScqQueue::new(asked).unwrap());
        }
    }

    fn fill_and_empty(q: ScqQueue<u32>) {
        let cap = q.capacity();
        assert!(cap >= 2, "capacity {cap}: an SCQ has at least 2 cells");
        let mut next = 0u32;
        let mut expect = 0u32;
        // Wraps the rings' cycles many times, full and empty each round.
        for round in 0..200 {
            while q.try_enqueue(next).is_ok() {
                next += 1;
            }
            assert_eq!(q.len(), cap, "round {round}");
            let k = 1 + round % cap;
            for _ in 0..k {
                assert_eq!(q.dequeue(), Some(expect), "capacity {cap}, round {round}");
                expect += 1;
            }
            if round % 3 == 0 {
                while let Some(v) = q.dequeue() {
                    assert_eq!(v, expect);
                    expect += 1;
                }
                assert!(q.is_empty());
                assert_eq!(q.dequeue(), None);
            }
        }
    }

    #[test]
    fn a_panicking_drop_stops_no_other() {
        struct Boom(std::rc::Rc<std::cell::Cell<u32>>, bool);
        impl Drop for Boom {
            fn drop(&mut self) {
                self.0.set(self.0.get() + 1);
                if self.1 {
                    panic!("boom");
                }
            }
        }
        let n = std::rc::Rc::new(std::cell::Cell::new(0));
        let q = ScqQueue::new(4).unwrap();
        for i in 0..4 {
            assert!(q.try_enqueue(Boom(n.clone(), i == 1)).is_ok());
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(q)));
        assert!(r.is_err());
        assert_eq!(n.get(), 4, "every value dropped once");
    }

    /// What a preempted thread holding a ring index costs: an enqueuer stopped
    /// after writing its cell, before queueing its index, takes that one cell
    /// out of the capacity and stops nobody; its value arrives once it runs.
    #[test]
    fn a_stopped_enqueuer_costs_one_cell_and_stops_nobody() {
        use crate::sched::stall::Trap;
        use std::time::Duration;
        let q: ScqQueue<u32> = ScqQueue::new(4).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let q = &q;
            s.spawn(move || {
                tx.send(Trap::at(stall::SCQ_CELL_WRITTEN).this_thread().arm())
                    .unwrap();
                q.try_enqueue(99).unwrap();
            });
            let trap = rx.recv().unwrap();
            trap.wait_hit(Duration::from_secs(20))
                .expect("the enqueuer stops");
            for i in 0..3 {
                q.try_enqueue(i).unwrap();
            }
            assert_eq!(
                q.try_enqueue(3),
                Err(3),
                "the stopped enqueuer holds one cell"
            );
            for i in 0..3 {
                assert_eq!(q.dequeue(), Some(i));
            }
            assert_eq!(q.dequeue(), None, "its value is not queued yet");
            for i in 0..1_000 {
                q.try_enqueue(i).unwrap();
                assert_eq!(q.dequeue(), Some(i));
            }
            trap.release();
        });
        assert_eq!((q.dequeue(), q.dequeue()), (Some(99), None));
    }

    /// An enqueuer never puts an index in an entry a dequeuer marked unsafe
    /// once a dequeuer has passed its position (no dequeuer would look there
    /// again: the value would be lost); it takes the next position. Where no
    /// dequeuer has passed yet, the unsafe entry is used. (The ring's state is
    /// set by hand: an overtaken enqueuer's leftover, consumed, at the tail.)
    #[test]
    fn an_enqueuer_skips_an_unsafe_entry_a_dequeuer_passed() {
        for passed in [true, false] {
            let r = Ring::empty(3);
            let t = r.tail.load(Ordering::SeqCst);
            let leftover = r.entry(r.cycle(t) - 1, false, r.bottom_c());
            r.entries[r.remap(t)].store(leftover, Ordering::SeqCst);
            if passed {
                // A dequeuer took position t (and found nothing there).
                r.head.store(t + 1, Ordering::SeqCst);
            }
            r.enqueue(5).unwrap();
            let at_t = r.entries[r.remap(t)].load(Ordering::SeqCst);
            assert_eq!(
                at_t == leftover,
                passed,
                "passed {passed}: the entry at the tail is {at_t:#x} (the unsafe leftover {leftover:#x})"
            );
            assert_eq!(
                r.dequeue(),
                Some(5),
                "passed {passed}: the enqueued index is not where a dequeuer looks"
            );
            assert_eq!(r.dequeue(), None);
        }
    }

    #[test]
    fn the_remap_is_a_permutation() {
        for order in 0..8 {
            let r = Ring::empty(order);
            let mut seen: Vec<usize> = (0..2 << order).map(|p| r.remap(p)).collect();
            seen.sort_unstable();
            assert_eq!(
                seen,
                (0..2usize << order).collect::<Vec<_>>(),
                "order {order}"
            );
        }
        let big: ScqQueue<u32> = ScqQueue::new(64).unwrap();
        for i in 0..200 {
            big.try_enqueue(i).unwrap();
            assert_eq!(big.dequeue(), Some(i));
        }
    }

    #[test]
    fn debug_and_error_say_what_they_are() {
        let q: ScqQueue<u8> = ScqQueue::new(2).unwrap();
        q.try_enqueue(1).unwrap();
        assert_eq!(format!("{q:?}"), "ScqQueue { capacity: 2, len: 1 }");
        assert!(BadCapacity::Zero.to_string().starts_with("capacity 0:"));
        assert!(
            BadCapacity::TooLarge(usize::MAX)
                .to_string()
                .starts_with(&format!("capacity {}: ", usize::MAX))
        );
    }
}

#[cfg(all(test, not(loom)))]
mod bench {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64 as StdU64, Ordering as O};

    /// Pairs of put + take per second at 1, 2 and 4 threads, for profiling
    /// (`cargo test -p mpsync --release --lib scq::bench -- --ignored
    /// --nocapture`); prints, asserts nothing about speed.
    #[test]
    #[ignore]
    fn pairs_per_second() {
        for threads in [1usize, 2, 4] {
            let q: ScqQueue<u64> = ScqQueue::new(1024).unwrap();
            let (stop, total) = (AtomicBool::new(false), StdU64::new(0));
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(|| {
                        let mut n = 0u64;
                        while !stop.load(O::Relaxed) {
                            for _ in 0..100 {
                                q.try_enqueue(n).unwrap();
                                let _ = q.dequeue();
                                n += 1;
                            }
                        }
                        total.fetch_add(n, O::Relaxed);
                    });
                }
                std::thread::sleep(std::time::Duration::from_secs(1));
                stop.store(true, O::Relaxed);
            });
            let m = total.load(O::Relaxed) as f64 / 1e6;
            eprintln!("threads {threads}: {m:.1} M pairs/s");
        }
    }
}
