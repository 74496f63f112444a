//! Named stall points: the windows a protocol's safety argument depends on,
//! where a test can force a chosen thread to stop.
//!
//! The bugs that survive torture, linearizability checks and bounded model
//! checking are the ones that need a thread to stall at one exact point — between
//! reading the global epoch and publishing the pin, right after a releaser's
//! withdrawal, between a successful CAS and the read that follows it. Algorithms
//! mark those windows with [`point`]; a test arms a [`Trap`] on a point, waits
//! until the victim thread is stopped there, makes the other threads do what the
//! interleaving needs, and releases the victim:
//!
//! ```
//! use mpsync::reclaim::{Ebr, Local, Reclaimer};
//! use mpsync::sched::{self, stall::{self, Trap}};
//! use mpsync::sync::Arc;
//! use std::sync::mpsc::channel;
//! use std::time::Duration;
//!
//! let ebr = Arc::new(Ebr::new());
//! std::thread::scope(|s| {
//!     let (id_tx, id_rx) = channel();
//!     let (go_tx, go_rx) = channel::<()>();
//!     let d = &ebr;
//!     let victim = s.spawn(move || {
//!         let mut local = Ebr::register(d);
//!         id_tx.send(sched::current().id()).unwrap();
//!         go_rx.recv().unwrap();
//!         drop(local.enter()); // stops inside `pin`, at stall::EPOCH_PIN
//!     });
//!     let trap = Trap::at(stall::EPOCH_PIN).thread(id_rx.recv().unwrap()).arm();
//!     go_tx.send(()).unwrap();
//!     trap.wait_hit(Duration::from_secs(10)).unwrap();
//!     // ... the other threads advance the epoch while the victim is stopped ...
//!     trap.release();
//!     victim.join().unwrap();
//! });
//! ```
//!
//! Traps and `fork`: the registry is a process-wide lock. A child forked while
//! another thread of the parent holds it (arming or releasing a trap, or
//! passing a point while any trap is armed) inherits it held by a thread the
//! child does not have, and blocks for good at its first point. Tests that fork
//! must not run beside tests that arm traps (measured: 36 of 300 children hung
//! when forked while another thread armed and dropped traps in a loop).
//!
//! Cost when no trap is armed: one relaxed load of a process-wide counter and a
//! predictable branch. Under `cfg(loom)` a point is nothing (loom explores
//! interleavings itself); in the chaos build (`--cfg mpsync_chaos`, see
//! [`crate::sync`]) a point also stalls its thread at random, far more often than
//! a plain atomic operation does, so the windows the points name are the ones
//! chaos hits hardest.

#[cfg(not(loom))]
pub use imp::*;

/// A named window in a protocol. The names are stable: tests, the planted-bug
/// catalogue (`TESTING.md`) and [`ALL`] refer to them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Point {
    name: &'static str,
    what: &'static str,
    /// How many times more often the chaos build stalls here than at a point
    /// passed on every operation (1): windows that open rarely (a withdrawal, a
    /// contended enqueue) are stalled at most of their few passages.
    boost: u32,
}

impl Point {
    /// The point's short name (`"epoch.pin"`).
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// Where exactly the window is.
    pub const fn description(&self) -> &'static str {
        self.what
    }

    /// How many times more often the chaos build stalls a thread here than at
    /// a point passed on every operation.
    pub const fn chaos_boost(&self) -> u32 {
        self.boost
    }
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name, self.what)
    }
}

macro_rules! points {
    ($($(#[$doc:meta])* $id:ident = $name:literal, $what:literal $(, boost $boost:literal)?;)*) => {
        $(
            $(#[$doc])*
            pub const $id: Point = Point { name: $name, what: $what, boost: 1 $(* $boost)? };
        )*
        /// Every named point.
        pub const ALL: &[Point] = &[$($id),*];
    };
}

points! {
    /// `reclaim`'s epoch machinery, `pin`: the global epoch has been read, the pin
    /// that announces it is not yet published (the thread is invisible to
    /// advancers here).
    EPOCH_PIN = "epoch.pin",
        "reclaim epoch pin: global epoch read, pin not yet published";
    /// Ticket-np's releaser, right after a withdrawal CAS succeeded (the number it
    /// withdrew may be retaken and claimed at once).
    TICKET_NP_WITHDRAWN = "ticket_np.withdrawn",
        "Ticket-np hand_over: a withdrawal CAS just succeeded", boost 32;
    /// Ticket-np's acquirer, after taking a number, before watching for its offer.
    TICKET_NP_TAKEN = "ticket_np.taken",
        "Ticket-np acquire: number taken, offer not yet watched", boost 4;
    /// Ticket-np's acquirer, after seeing its number offered, before the CAS that
    /// claims it (the releaser may withdraw the offer here: the claim must fail).
    TICKET_NP_CLAIMING = "ticket_np.claiming",
        "Ticket-np acquire: own number seen offered, claim CAS not yet made", boost 8;
    /// A timed Ticket-np taker giving up has seen its own number on offer and
    /// not yet claimed it (the releaser may withdraw it here: the claim must
    /// fail, and the taker then holds nothing).
    TICKET_NP_DEPART_CLAIMING = "ticket_np.depart_claiming",
        "Ticket-np depart: own number seen offered on the way out, claim CAS not yet made", boost 8;
    /// Ticket-np's releaser: a number that was taken is on offer, and the
    /// releaser has not yet begun to watch for its claim (nor to withdraw it).
    TICKET_NP_OFFER_WATCH = "ticket_np.offer_watch",
        "Ticket-np offer_taken: a taken number on offer, its claim not yet watched for", boost 4;
    /// A queue lock's acquirer between swapping itself into the tail and linking
    /// its node behind its predecessor (the releaser waits on that link).
    QUEUE_LOCK_LINK = "queue_lock.link",
        "MCS-style queue lock: tail swapped, predecessor not yet linked", boost 4;
    /// Michael & Scott queue, dequeue: `head` was swung by this thread's CAS; the
    /// value is not yet read from the new dummy.
    MS_DEQUEUE_SWUNG = "ms_queue.dequeue.swung",
        "MS queue dequeue: head CAS succeeded, value not yet read";
    /// Michael & Scott queue, enqueue: the node is linked; `tail` not yet swung.
    MS_ENQUEUE_LINKED = "ms_queue.enqueue.linked",
        "MS queue enqueue: node linked, tail not yet swung";
    /// Treiber stack, pop: the top was read and protected, its `next` not yet read.
    TREIBER_POP_READ = "treiber.pop.read",
        "Treiber pop: top protected, next not yet read";
    /// Hazard pointers, `protect`: the hazard is published, the source not yet
    /// re-read to validate it.
    HP_PROTECT_PUBLISHED = "hp.protect.published",
        "hazard pointer published, source not yet re-validated";
    // reclaim and ds (reclaim-fixes):
    /// Hazard pointers, `protect`: the candidate pointer is loaded, the hazard not
    /// yet published (the node may be unlinked and freed here: the validating
    /// re-read is what catches that).
    HP_PROTECT_LOADED = "hp.protect.loaded",
        "hazard pointer candidate loaded, hazard not yet published";
    /// Prakash-Lee-Johnson queue, dequeue: `head` was swung by this thread's CAS;
    /// the value is not yet read from the new dummy.
    PLJ_DEQUEUE_SWUNG = "plj_queue.dequeue.swung",
        "PLJ queue dequeue: head CAS succeeded, value not yet read";
    /// Epoch schemes, `try_advance`: every record was scanned, the CAS that
    /// advances the global epoch not yet done.
    EPOCH_ADVANCE_SCANNED = "epoch.advance.scanned",
        "reclaim epoch advance: records scanned, global epoch not yet advanced", boost 4;
    // ds hash tables (issue 14):
    /// Harris–Michael list, remove: the node is marked (logically deleted), not
    /// yet unlinked from its predecessor.
    HM_MARKED = "hm_list.remove.marked",
        "Harris-Michael remove: node marked, not yet unlinked", boost 4;
    /// Harris–Michael list, search: stepped onto a node (now protected as the
    /// predecessor), its successor not yet loaded and protected.
    HM_FIND_STEPPED = "hm_list.find.stepped",
        "Harris-Michael search: predecessor protected, successor not yet protected";
    /// Concurrently-readable hash table, reader: stepped onto a node (now
    /// protected as the predecessor), its successor not yet loaded and protected.
    CR_READ_STEPPED = "cr_hash.read.stepped",
        "CR table reader: node protected, successor not yet protected";
    // rwlock and barrier (issue 15):
    /// A queued reader-writer lock's reader has counted itself in but still
    /// holds the admission queue (the writer behind it is still blocked).
    RW_READER_ADMITTED = "rwlock.reader.admitted",
        "queued RW lock: reader counted in, admission not yet released", boost 4;
    /// A queued reader-writer lock's timed writer has given up its drain (its
    /// deadline passed with readers inside) and has not yet cleared its
    /// parked bit: the last reader out may see the bit here.
    RW_WRITER_DRAIN_GAVE_UP = "rwlock.writer.drain_gave_up",
        "queued RW lock: timed writer's drain gave up, parked bit not yet cleared", boost 4;
    /// A barrier's last arriver, before it releases the others (everyone else
    /// has arrived and waits here).
    BARRIER_LAST_ARRIVED = "barrier.last_arrived",
        "barrier: the last thread arrived, the episode not yet released", boost 4;
    /// BRAVO's reader has seen the bias on and has not yet published its slot
    /// (a writer may revoke here: the reader's re-check must send it to the
    /// slow path).
    BRAVO_BIAS_SEEN = "bravo.reader.bias_seen",
        "BRAVO reader: bias seen on, slot not yet published and re-checked", boost 8;
    // waiting (issue 13):
    /// A waiter announced that it sleeps (a queue node marked sleeping, a lock
    /// word marked "head parked") and has not yet parked: its waker may run here.
    WAITER_PARK = "waiter.park",
        "waiter: sleep announced, not yet parked", boost 4;
    /// A waker made its wakee able to proceed (a bounded-steal successor made
    /// head) and has not yet woken it: the wakee may run, finish and recycle its node.
    WAITER_WAKE = "waiter.wake",
        "waker: condition made true, wakee not yet woken", boost 4;
    // msgq:
    /// Shared-memory message queue: a ticket is taken and the sender's record
    /// submitted for it, the slot not yet published (a sender killed here
    /// leaves a ticket the receiver must revoke; a peer that writes the slot
    /// here takes the record).
    MSGQ_TICKET = "msgq.ticket",
        "msgq claim: ticket taken, record submitted, slot not yet published", boost 4;
    /// Shared-memory message queue: the sender's record is claimed, its
    /// payload not yet written.
    MSGQ_FILL = "msgq.fill",
        "msgq send: record claimed, payload not yet written", boost 4;
    /// Shared-memory message queue, receiver: the record is copied out and
    /// freed, the slot not yet released for its next lap.
    MSGQ_RELEASE = "msgq.release",
        "msgq poll: record copied out, slot not yet released";
    /// Shared-memory message queue, receiver: the head slot was seen READY,
    /// its record not yet copied out.
    MSGQ_TAKE = "msgq.take",
        "msgq poll: head slot READY, record not yet copied";
    /// Shared-memory message queue, sender: the ring was full (or its
    /// records all in flight), the sender announced on the space bell and
    /// looked once more, and has not yet parked (the receiver's ring may come
    /// here: the sleep must end at once).
    MSGQ_SPACE_SLEEP = "msgq.space_sleep",
        "msgq send: ring full, sleep announced, not yet parked", boost 4;
    // lock_api completeness (issue 13 §4):
    /// A timed lock acquisition (`try_lock_for`/`try_lock_until`) has seen its
    /// deadline pass and is about to return `None`: nothing may be held or
    /// handed to it from here on.
    TIMED_GAVE_UP = "timed_lock.gave_up",
        "timed lock: deadline passed, about to give up", boost 4;
    /// A native CLH-TP waiter has stopped spinning: its node is withdrawn
    /// (ABANDONED) and it has not yet napped (the lock must not wait for it
    /// from here on).
    CLH_TP_NAP = "clh_tp.nap",
        "CLH-TP wait: node withdrawn to nap, nap not yet taken", boost 4;
    /// A condition-variable waiter has released the mutex and not yet parked: a
    /// notification that comes here must still end its wait.
    CONDVAR_WAIT = "condvar.wait",
        "condvar wait: mutex released, not yet parked", boost 4;
    // sched: initialisation points a fork may hit (sound-sched):
    /// The process's first registration has begun loading the eBPF program
    /// and has installed neither the fork handler nor the loader yet.
    SCHED_EBPF_START = "sched.ebpf.start",
        "sched: eBPF loading begun, fork handler and loader not yet installed";
    /// The eBPF loader thread, before it loads the program.
    SCHED_EBPF_LOADING = "sched.ebpf.loading",
        "sched: eBPF loader about to load the program";
    /// The eBPF loader has loaded the program and not yet handed out the
    /// slots of the threads that registered meanwhile, nor said ready.
    SCHED_EBPF_LOADED = "sched.ebpf.loaded",
        "sched: eBPF program loaded, waiting registrations not yet attached";
    /// A registration holds the registry's lock (a block being taken).
    SCHED_REGISTER_LOCKED = "sched.register.locked",
        "sched: registry lock held by a registering thread";
    /// The emulated scheduler's signal and fork handlers are being installed
    /// (the process's first `Emulated::start`).
    SCHED_EMU_HANDLER = "sched.emulated.handler",
        "sched: emulated scheduler's handlers being installed";
    /// A thread attaching to the emulated scheduler holds the scheduler's lock.
    SCHED_EMU_ATTACH = "sched.emulated.attach",
        "sched: attaching thread holds the emulated scheduler's lock";
    // maps (sound-maps):
    /// Concurrently-readable hash table, remove: the node is marked (its
    /// successor link frozen), not yet unlinked; the writer holds the bucket's
    /// lock (readers must step over the node, not wait for the unlink).
    CR_MARKED = "cr_hash.remove.marked",
        "CR remove: node marked, not yet unlinked (bucket lock held)", boost 4;
    /// Concurrently-readable hash table, resize: every bucket lock of the old
    /// table is held and the copy is being made; the new table is not yet
    /// published (readers must go on in the old table).
    CR_RESIZE_FROZEN = "cr_hash.resize.frozen",
        "CR resize: old table frozen (every bucket lock held), new table not yet published", boost 4;
    // reclaim (soundness: progress matrix of the non-blocking structures):
    /// Prakash-Lee-Johnson queue, enqueue: the node is linked after the tail;
    /// `tail` not yet swung (others must complete the enqueue, not wait).
    PLJ_ENQUEUE_LINKED = "plj_queue.enqueue.linked",
        "PLJ queue enqueue: node linked, tail not yet swung";
    /// Treiber stack, push: the top was read into the new node, the CAS that
    /// publishes it not yet made.
    TREIBER_PUSH_READ = "treiber.push.read",
        "Treiber push: top read into the new node, CAS not yet made";
    /// Herlihy's objects (stack, skew heap): the current version is protected
    /// and its successor built, the CAS that installs it not yet made.
    HERLIHY_BUILT = "herlihy.built",
        "Herlihy object: successor version built, CAS not yet made";
    /// Herlihy's objects: the CAS installed the successor version; the old one
    /// not yet retired.
    HERLIHY_SWUNG = "herlihy.swung",
        "Herlihy object: successor installed, old version not yet retired";
    /// Elimination stack, push: the node is offered in a collision slot, the
    /// bounded wait for a popper not yet begun.
    ELIMINATION_OFFERED = "elimination.offered",
        "elimination push: node offered in a slot, not yet waiting";
    /// Elimination stack, pop: an offer was taken (slot `TAKEN`), the slot not
    /// yet freed.
    ELIMINATION_TAKEN = "elimination.taken",
        "elimination pop: offer taken, slot not yet freed";
    /// SCQ, enqueue: a free cell was taken and written, its index not yet put
    /// in the ring of full cells.
    SCQ_CELL_WRITTEN = "scq.enqueue.cell_written",
        "SCQ enqueue: cell written, index not yet queued";
    /// SCQ ring, enqueue: a position was taken (`fetch_add` on the tail),
    /// its entry not yet written.
    SCQ_POSITION_TAKEN = "scq.ring.position_taken",
        "SCQ ring enqueue: position taken, entry not yet written";
    /// LSCQ, enqueue: a new segment (holding the value) was linked after the
    /// full one, the queue's tail not yet swung to it.
    LSCQ_LINKED = "lscq.enqueue.linked",
        "LSCQ enqueue: new segment linked, tail not yet swung";
    /// LSCQ, dequeue: the head moved past an empty, finalized segment, which
    /// is not yet retired.
    LSCQ_HEAD_PASSED = "lscq.dequeue.head_passed",
        "LSCQ dequeue: head moved past a spent segment, not yet retired";
    /// Flat combining, claim: a publication record read free, the CAS that
    /// takes it not yet made.
    FC_CLAIM_SEEN_FREE = "fc.claim.seen_free",
        "flat combining claim: record read free, not yet taken";
}

/// Marks the calling thread's passage through `p`. Stops here if a [`Trap`] armed
/// on `p` matches this thread; in the chaos build, maybe stalls at random.
#[inline(always)]
pub fn point(p: Point) {
    #[cfg(not(loom))]
    {
        imp::check(p);
        #[cfg(mpsync_chaos)]
        crate::sync::chaos::at_point(p.boost);
    }
    #[cfg(loom)]
    let _ = p;
}

#[cfg(not(loom))]
mod imp {
    use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use super::Point;
    use crate::sync::{AtomicU32, Ordering};

    /// Traps armed and not yet spent: the fast path's only read. A std atomic on
    /// purpose: this is test machinery, never perturbed or modelled.
    static ARMED: AtomicUsize = AtomicUsize::new(0);
    static TRAPS: Mutex<Vec<Arc<TrapState>>> = Mutex::new(Vec::new());

    const WAITING: u32 = 0;
    const HOLDING: u32 = 1;
    const RELEASED: u32 = 2;

    /// | `state`  | set by                         | meaning                               |
    /// |----------|--------------------------------|---------------------------------------|
    /// | WAITING  | `arm`                          | armed; no matching thread arrived yet |
    /// | HOLDING  | the victim, under `TRAPS` lock | a thread is stopped at the point      |
    /// | RELEASED | the test (`release`, drop)     | spent: the victim may go on           |
    #[derive(Debug)]
    struct TrapState {
        point: Point,
        /// Only this thread (its context-block id) is stopped; any if `None`.
        thread: Option<u64>,
        /// Matching passages still to let through before stopping one.
        skip: std::sync::atomic::AtomicU64,
        state: AtomicU32,
        /// Context-block id of the stopped thread (0 if not registered).
        victim: std::sync::atomic::AtomicU64,
    }

    #[inline(always)]
    pub(super) fn check(p: Point) {
        // Relaxed: `arm` publishes the trap under the TRAPS lock, which `slow`
        // takes; a passage that misses a trap being armed right now is simply
        // before it.
        if ARMED.load(StdOrdering::Relaxed) != 0 {
            slow(p);
        }
    }

    #[cold]
    #[inline(never)]
    fn slow(p: Point) {
        let _quiet = crate::sync::Exempt::new();
        let me = super::super::current_if_registered().map_or(0, |cb| cb.id());
        let trap = {
            let traps = TRAPS.lock().unwrap_or_else(|e| e.into_inner());
            traps
                .iter()
                .find(|t| {
                    t.point == p
                        && t.thread.is_none_or(|id| id == me)
                        && t.state.load(Ordering::Relaxed) == WAITING
                        && t.skip
                            .fetch_update(StdOrdering::Relaxed, StdOrdering::Relaxed, |s| {
                                s.checked_sub(1)
                            })
                            .is_err()
                })
                .cloned()
        };
        let Some(t) = trap else { return };
        t.victim.store(me, StdOrdering::Relaxed);
        // Release: the victim's work up to the point is visible to the test
        // (its Acquire load in `wait_hit`).
        if t.state
            .compare_exchange(WAITING, HOLDING, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            return; // disarmed meanwhile
        }
        super::super::unpark_all(&t.state);
        // Acquire: pairs with the Release store in `release`, so what the test
        // made the others do is visible to the victim when it goes on.
        while t.state.load(Ordering::Acquire) == HOLDING {
            let _ = super::super::park(&t.state, HOLDING, Some(Duration::from_millis(50)));
        }
    }

    /// Which passages of a point a [`Trap`] stops: see [`Trap::at`].
    #[derive(Debug, Clone, Copy)]
    #[must_use = "arm it with .arm()"]
    pub struct TrapSpec {
        point: Point,
        thread: Option<u64>,
        skip: u64,
    }

    impl TrapSpec {
        /// Stop only the thread whose context block has this id
        /// ([`ContextBlock::id`](crate::sched::ContextBlock::id), from
        /// [`sched::current`](crate::sched::current) on that thread).
        pub fn thread(mut self, id: u64) -> Self {
            self.thread = Some(id);
            self
        }

        /// Stop only the calling thread.
        pub fn this_thread(self) -> Self {
            let id = super::super::current().id();
            self.thread(id)
        }

        /// Let `n` matching passages through first; stop the next one.
        pub fn skip(mut self, n: u64) -> Self {
            self.skip = n;
            self
        }

        /// Arms the trap: the next matching passage stops until the trap is
        /// released or dropped.
        pub fn arm(self) -> Trap {
            let st = Arc::new(TrapState {
                point: self.point,
                thread: self.thread,
                skip: std::sync::atomic::AtomicU64::new(self.skip),
                state: AtomicU32::new(WAITING),
                victim: std::sync::atomic::AtomicU64::new(0),
            });
            let mut traps = TRAPS.lock().unwrap_or_else(|e| e.into_inner());
            traps.push(st.clone());
            // Relaxed: see `check`.
            ARMED.fetch_add(1, StdOrdering::Relaxed);
            Trap { st }
        }
    }

    /// A one-shot trap on a stall [`Point`]: the first matching passage stops
    /// there until [`release`](Self::release) (or drop — a failing test never
    /// leaves a thread stuck).
    #[derive(Debug)]
    pub struct Trap {
        st: Arc<TrapState>,
    }

    /// No thread reached the point in time.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct StallTimeout(pub String);

    impl std::fmt::Display for StallTimeout {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for StallTimeout {}

    impl Trap {
        /// A trap on `p` for any thread, stopping the first passage (refine with
        /// [`TrapSpec::thread`], [`TrapSpec::skip`], then [`TrapSpec::arm`]).
        pub fn at(p: Point) -> TrapSpec {
            TrapSpec {
                point: p,
                thread: None,
                skip: 0,
            }
        }

        /// Waits until a thread is stopped at the point (at most `timeout`).
        pub fn wait_hit(&self, timeout: Duration) -> Result<(), StallTimeout> {
            let deadline = Instant::now() + timeout;
            loop {
                // Acquire: pairs with the victim's Release CAS in `slow`.
                match self.st.state.load(Ordering::Acquire) {
                    HOLDING => return Ok(()),
                    RELEASED => {
                        return Err(StallTimeout(format!(
                            "trap at {} was released before any thread reached it",
                            self.st.point
                        )));
                    }
                    _ => {}
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(StallTimeout(format!(
                        "no thread reached stall point {} within {timeout:?}",
                        self.st.point
                    )));
                }
                let _ = super::super::park(
                    &self.st.state,
                    WAITING,
                    Some(left.min(Duration::from_millis(10))),
                );
            }
        }

        /// Whether a thread is stopped at the point now.
        pub fn holding(&self) -> bool {
            self.st.state.load(Ordering::Acquire) == HOLDING
        }

        /// Context-block id of the thread the trap stopped (0 if none yet, or
        /// the thread was not registered with `sched`).
        pub fn victim(&self) -> u64 {
            self.st.victim.load(StdOrdering::Relaxed)
        }

        /// Lets the stopped thread go on (or, if none arrived, disarms the trap).
        pub fn release(&self) {
            // Release: the test's work is visible to the victim (its Acquire load).
            if self.st.state.swap(RELEASED, Ordering::Release) != RELEASED {
                super::super::unpark_all(&self.st.state);
            }
        }
    }

    impl Drop for Trap {
        fn drop(&mut self) {
            self.release();
            let mut traps = TRAPS.lock().unwrap_or_else(|e| e.into_inner());
            traps.retain(|t| !Arc::ptr_eq(t, &self.st));
            // Relaxed: see `check`.
            ARMED.fetch_sub(1, StdOrdering::Relaxed);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    /// A point no algorithm uses, so parallel tests never pass it.
    const TEST_POINT: Point = Point {
        name: "test.only",
        what: "unit tests of the trap machinery",
        boost: 1,
    };

    #[test]
    #[cfg_attr(miri, ignore)] // futex syscalls with timeouts
    fn trap_stops_the_chosen_thread_until_released() {
        let past = &AtomicBool::new(false);
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::channel();
            let victim = s.spawn(move || {
                tx.send(crate::sched::current().id()).unwrap();
                point(TEST_POINT); // not yet armed: passes
                std::thread::park();
                point(TEST_POINT);
                past.store(true, Ordering::SeqCst);
            });
            let id = rx.recv().unwrap();
            // Another thread passing the point is not stopped.
            let trap = Trap::at(TEST_POINT).thread(id).arm();
            point(TEST_POINT);
            victim.thread().unpark();
            trap.wait_hit(Duration::from_secs(10)).unwrap();
            assert_eq!(trap.victim(), id);
            std::thread::sleep(Duration::from_millis(20));
            assert!(!past.load(Ordering::SeqCst), "the victim is held");
            trap.release();
            victim.join().unwrap();
            assert!(past.load(Ordering::SeqCst));
        });
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn skip_lets_passages_through_and_timeouts_say_which_point() {
        let trap = Trap::at(TEST_POINT).this_thread().skip(2).arm();
        point(TEST_POINT);
        point(TEST_POINT);
        assert!(!trap.holding());
        let e = trap.wait_hit(Duration::from_millis(5)).unwrap_err();
        assert!(e.to_string().contains("test.only"), "{e}");
        drop(trap);
        point(TEST_POINT); // disarmed: passes
    }

    #[test]
    fn every_point_has_a_distinct_name() {
        let mut names: Vec<_> = ALL.iter().map(|p| p.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }
}
