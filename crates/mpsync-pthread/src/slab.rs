//! Where interposed mutexes keep their lock: slots in `mmap`ed chunks, named
//! by index, handed out and taken back without `malloc` and without a lock.
//!
//! A `pthread_mutex_t` is 40 bytes and mpsync's locks do not fit in it with
//! all-zero bytes meaning "unlocked" (their parameters, bounded-steal's four
//! words), so a mutex's storage holds a *handle* to a slot instead: see
//! `mutex.rs`. Slots are **type-stable**: a chunk is never unmapped and a
//! slot's lock is written once, when the slot is first made, never again (a
//! freed slot keeps its unlocked lock for its next user). So a stale or forged
//! handle can name the wrong lock, never memory that is not a lock.
//!
//! - `CHUNKS`: the chunk table, `MAX_CHUNKS` pointers, each to `CHUNK_SLOTS`
//!   slots (null until first needed; mapped by whoever needs it first, by CAS);
//! - `FRESH`: slots ever handed out (the next fresh index);
//! - `FREE`: a Treiber stack of freed slots, `(tag << 32) | (index + 1)` (0
//!   in the low half: empty), the tag bumped by every push and pop against ABA;
//!   a slot's `next_free` links it.
//!
//! Every slot's `generation` counts its lives: a fresh slot starts at 1, a free adds
//! one (never 0). A handle carries the generation it was made in; one whose
//! generation is not the slot's (a mutex used after `destroy`, a copy of a
//! destroyed mutex, garbage) is refused with `EINVAL`.
//!
//! The process has one lock kind (`MPSYNC_LOCK`, decided once), so every slot
//! is a `Slot<L>` of the same `L`, and index arithmetic uses its size.
//!
//! Fork: everything here is atomics in private memory, so a child of `fork`
//! sees a copy and carries on; no lock can be held by a thread it lacks.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

use mpsync::lock_api::RawMutex;
use mpsync::sched::ContextBlock;

/// Slots per chunk.
const CHUNK_SLOTS: u32 = 1024;
/// Chunks at most: 16 M slots (mutexes alive at once).
const MAX_CHUNKS: u32 = 16 * 1024;
/// Slots at most.
pub const MAX_SLOTS: u32 = CHUNK_SLOTS * MAX_CHUNKS;

static CHUNKS: [AtomicPtr<u8>; MAX_CHUNKS as usize] =
    [const { AtomicPtr::new(ptr::null_mut()) }; MAX_CHUNKS as usize];
static FRESH: AtomicU32 = AtomicU32::new(0);
static FREE: AtomicU64 = AtomicU64::new(0);

/// One interposed mutex's lock, its holder and the holder's guard.
/// Cache-line aligned: two mutexes never share a line.
#[repr(C, align(128))]
pub struct Slot<L: RawMutex> {
    /// Written once, when the slot is made (see the module doc).
    pub lock: L,
    /// The holder's guard, between its lock and its unlock. Only the holder
    /// (the thread named by `owner`) touches it.
    guard: UnsafeCell<MaybeUninit<L::Guard>>,
    /// The holder's context block (null: none); set after acquiring, cleared
    /// before releasing, by the holder itself. Compared only with the calling
    /// thread's own block, so Relaxed throughout: a thread always sees its own
    /// last store, and any other value is "not mine".
    pub owner: AtomicPtr<ContextBlock>,
    /// This slot's generation (module doc).
    generation: AtomicU32,
    /// The next free slot's index + 1 (0: none), while on `FREE`.
    next_free: AtomicU32,
}

// SAFETY: `lock` is a `Sync` lock; `guard` is touched only by the thread that
// holds the lock (`owner` is checked before every access, see `mutex.rs`), so
// a guard that is not `Send` never leaves its thread; the rest are atomics.
unsafe impl<L: RawMutex + Sync> Sync for Slot<L> {}

impl<L: RawMutex> Slot<L> {
    /// Keeps the guard of the acquisition just made by the calling thread.
    ///
    /// # Safety
    /// The calling thread has just acquired `lock` and holds it.
    pub unsafe fn keep_guard(&self, g: L::Guard) {
        // SAFETY: only the holder touches `guard` (the caller's contract).
        unsafe { (*self.guard.get()).write(g) };
    }

    /// Takes back the guard kept by `keep_guard`.
    ///
    /// # Safety
    /// The calling thread holds `lock` and kept its guard with `keep_guard`.
    pub unsafe fn take_guard(&self) -> L::Guard {
        // SAFETY: as above; `keep_guard` initialized it and nobody took it since.
        unsafe { (*self.guard.get()).assume_init_read() }
    }
}

/// A handle: what a mutex's storage holds. 0 is "no slot yet".
pub fn handle(index: u32, generation: u32) -> u64 {
    (u64::from(generation) << 32) | u64::from(index + 1)
}

/// The slot `h` names, if it names a live one.
#[inline]
pub fn lookup<L: RawMutex>(h: u64) -> Option<&'static Slot<L>> {
    let index = (h as u32).checked_sub(1)?;
    let p = slot_ptr::<L>(index)?;
    // SAFETY: `p` points into a mapped chunk (never unmapped); `generation` is an
    // atomic, valid in a zeroed (not yet made) slot too.
    let generation = unsafe { &*ptr::addr_of!((*p).generation) };
    // Acquire: pairs with the Release store of `make` (the lock is written)
    // and of `free` (a stale handle is refused).
    if generation.load(Ordering::Acquire) != (h >> 32) as u32 {
        return None;
    }
    // SAFETY: the slot is made (its generation is non-zero and current), and
    // its lock is never written again.
    Some(unsafe { &*p })
}

/// The address of slot `index`, if its chunk is mapped.
#[inline]
fn slot_ptr<L: RawMutex>(index: u32) -> Option<*const Slot<L>> {
    let chunk = CHUNKS.get((index / CHUNK_SLOTS) as usize)?;
    // Acquire: pairs with the Release CAS of `map_chunk`.
    let base = chunk.load(Ordering::Acquire);
    if base.is_null() {
        return None;
    }
    // SAFETY: the chunk holds CHUNK_SLOTS slots of this process's one `L`.
    Some(unsafe { base.cast::<Slot<L>>().add((index % CHUNK_SLOTS) as usize) })
}

/// A slot with an unlocked lock, and its handle; `None` if all `MAX_SLOTS`
/// are in use or memory cannot be mapped.
pub fn alloc<L: RawMutex>() -> Option<(&'static Slot<L>, u64)> {
    // Acquire: pairs with the Release CAS of `free` (the pushed slot's
    // `next_free` and generation).
    let mut head = FREE.load(Ordering::Acquire);
    while head as u32 != 0 {
        let index = head as u32 - 1;
        let p = slot_ptr::<L>(index)?;
        // SAFETY: a freed slot is made, and its lock is never written again.
        let s = unsafe { &*p };
        // Relaxed: ordered by the Acquire load of `head`; a stale value only
        // fails the tagged CAS below.
        let next = s.next_free.load(Ordering::Relaxed);
        let tag = (head >> 32).wrapping_add(1);
        match FREE.compare_exchange_weak(
            head,
            (tag << 32) | u64::from(next),
            // Acquire on success, Acquire on failure: as the load above.
            Ordering::Acquire,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                // A slot whose lock is still held (a thread locked the mutex
                // while another destroyed it) is never reused: it stays with
                // that thread (whose unlock is refused) and is lost.
                // Relaxed: see `owner`; a racing late locker is the program's
                // undefined behaviour, and only shares this lock with the
                // slot's next user.
                if s.lock.is_locked() || !s.owner.load(Ordering::Relaxed).is_null() {
                    head = FREE.load(Ordering::Acquire);
                    continue;
                }
                // Relaxed: the slot is ours now; `free` published the value.
                let generation = s.generation.load(Ordering::Relaxed);
                return Some((s, handle(index, generation)));
            }
            Err(h) => head = h,
        }
    }
    // Relaxed: a counter; the index is ours alone.
    let index = FRESH
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < MAX_SLOTS).then_some(n + 1)
        })
        .ok()?;
    let p = map_chunk::<L>(index)?.cast_mut();
    // SAFETY: slot `index` is ours alone (from FRESH) and its memory is mapped
    // and zeroed; `lock` is written once, here, before the Release store of
    // `generation` makes the slot visible to `lookup`.
    unsafe {
        ptr::addr_of_mut!((*p).lock).write(L::INIT);
        // Release: pairs with `lookup`'s Acquire load (the lock is written).
        (*ptr::addr_of!((*p).generation)).store(1, Ordering::Release);
        Some((&*p, handle(index, 1)))
    }
}

/// Maps slot `index`'s chunk if nobody has yet; the slot's address.
fn map_chunk<L: RawMutex>(index: u32) -> Option<*const Slot<L>> {
    if let Some(p) = slot_ptr::<L>(index) {
        return Some(p);
    }
    let chunk = &CHUNKS[(index / CHUNK_SLOTS) as usize];
    let bytes = CHUNK_SLOTS as usize * std::mem::size_of::<Slot<L>>();
    // SAFETY: a fresh private anonymous mapping; no memory of ours is touched.
    let m = unsafe {
        libc::mmap(
            ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if m == libc::MAP_FAILED {
        return None;
    }
    // Release: publishes the (zeroed) chunk to `slot_ptr`'s Acquire load;
    // Acquire on failure: reads the winner's chunk.
    if chunk
        .compare_exchange(
            ptr::null_mut(),
            m.cast(),
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        // SAFETY: our mapping, never published.
        unsafe { libc::munmap(m, bytes) };
    }
    slot_ptr::<L>(index)
}

/// Gives a slot back: its handle stops working, and it is reused.
///
/// # Safety
/// `s` came from `alloc`, and is not freed twice in one generation (the
/// caller took its handle out of the mutex by CAS first).
pub unsafe fn free<L: RawMutex>(s: &'static Slot<L>, h: u64) {
    let index = (h as u32) - 1;
    // Relaxed: the value is ours to bump (see the safety contract); the
    // Release store publishes it.
    let g = s.generation.load(Ordering::Relaxed).wrapping_add(1).max(1);
    // Release: pairs with `lookup`'s Acquire load: a handle of the old
    // generation is refused from now on.
    s.generation.store(g, Ordering::Release);
    // Relaxed: the list head is read again by the CAS.
    let mut head = FREE.load(Ordering::Relaxed);
    loop {
        // Relaxed: published by the Release CAS below.
        s.next_free.store(head as u32, Ordering::Relaxed);
        let tag = (head >> 32).wrapping_add(1);
        match FREE.compare_exchange_weak(
            head,
            (tag << 32) | u64::from(index + 1),
            // Release: pairs with `alloc`'s Acquire load (next_free, generation).
            Ordering::Release,
            Ordering::Relaxed,
        ) {
            Ok(_) => return,
            Err(x) => head = x,
        }
    }
}
