//! The scheduler thread: one pass ([`tick`]) over every virtual processor per
//! decision, then a sleep until the next slot ends or a thread kicks it.
//!
//! Each virtual processor runs rounds. A round has one slot per thread of ours
//! attached there (its quantum, less the extension it took last time), then — if
//! there are other applications on it — the others' slot (their quanta together).
//! A slot ends at its planned time or when its thread yields; the thread is then
//! stopped ([`stop_thread`]: preempted, or warned while unpreemptable, or forced
//! at the extension bound) and the next slot's thread resumed ([`resume`]).
//! Everything here runs under the scheduler's lock and must not allocate.

use crate::sched::context::ContextBlock;
use crate::sched::partition;
use crate::sched::state::{Actor, ThreadState};
use crate::sync::{AtomicU32, Ordering};
use crate::util::clock::{now_ns, thread_cpu_ns};
use crate::util::rng::SplitMix64;

use super::handler::preemption_signal;
use super::stats::push_capped;
use super::{
    EmulatedConfig, HandlerWait, Inner, MIN_SLEEP_NS, Sample, SchedStats, ScheduleEvent, Shared,
    WARN_POLL_NS, publish, refresh_alone,
};

/// Per attached thread.
#[derive(Debug)]
pub(super) struct Attached {
    pub(super) cb: &'static ContextBlock,
    /// Virtual processor it attached to (it runs on `home % available`).
    pub(super) home: u32,
    /// Extension to deduct from its next quantum (ns).
    deduct_ns: u64,
    /// When it was warned, if it is being warned now.
    warned_at: Option<u64>,
    /// When it last stopped running (ns), for off-time samples.
    stopped_at: Option<u64>,
    /// Planned off-time that began at `stopped_at`.
    planned_off_ns: u64,
}

impl Attached {
    /// `cb`'s thread, attached to virtual processor `home`.
    pub(super) fn new(cb: &'static ContextBlock, home: u32) -> Self {
        Self {
            cb,
            home,
            deduct_ns: 0,
            warned_at: None,
            stopped_at: None,
            planned_off_ns: 0,
        }
    }
}

/// One virtual processor's place in its round.
#[derive(Debug)]
pub(super) struct Vproc {
    rng: SplitMix64,
    /// Simulated other applications on it ([`EmulatedConfig::others_on`]).
    pub(super) others: u32,
    round: u64,
    run_ns: u64,
    off_ns: u64,
    /// Slot index in the round: `0..n` are our `n` threads, `n` is the others'
    /// turn (only when there are others).
    slot: usize,
    slot_start: u64,
    slot_end: u64,
    /// Whether a round is under way (false while no thread is attached).
    active: bool,
    /// Block id of the thread whose slot is running (0 = others / none).
    pub(super) running: u64,
}

impl Vproc {
    /// Virtual processor `v` of `cfg`, before its first round.
    pub(super) fn new(cfg: &EmulatedConfig, v: u32) -> Self {
        Self {
            rng: SplitMix64::stream(cfg.seed, u64::from(v)),
            others: cfg.others_on(v),
            round: 0,
            run_ns: 0,
            off_ns: 0,
            slot: 0,
            slot_start: 0,
            slot_end: 0,
            active: false,
            running: 0,
        }
    }

    /// Slots in a round with `n` threads of ours: theirs, then the others' turn
    /// if there are others.
    fn slots(&self, n: usize) -> usize {
        n + usize::from(self.others > 0)
    }

    /// The current slot starts at `now` and lasts `len`.
    fn begin_slot(&mut self, now: u64, len: u64) {
        self.slot_start = now;
        self.slot_end = now + len;
    }
}

/// The threads of one virtual processor `v` while `available` are in use: found
/// by position in the attached list (no Vec: nothing here may allocate).
#[derive(Debug, Clone, Copy)]
pub(super) struct Members {
    pub(super) v: u32,
    pub(super) available: u32,
}

impl Members {
    pub(super) fn has(self, t: &Attached) -> bool {
        self.v < self.available && t.home % self.available == self.v
    }

    pub(super) fn count(self, threads: &[Attached]) -> usize {
        threads.iter().filter(|t| self.has(t)).count()
    }

    /// Index in `threads` of the thread whose slot is `slot`; `None` for the
    /// others' slot (`slot` ≥ the number of members).
    fn in_slot(self, threads: &[Attached], slot: usize) -> Option<usize> {
        threads
            .iter()
            .enumerate()
            .filter(|(_, t)| self.has(t))
            .nth(slot)
            .map(|(i, _)| i)
    }
}

/// The state a resumed (or forcibly detached) thread gets back: what it had
/// when the scheduler preempted it.
pub(super) fn state_to_restore(cb: &ContextBlock) -> ThreadState {
    // Relaxed: written by the scheduler before its AcqRel CAS to `Preempted`,
    // which the caller has observed (or is the scheduler itself).
    ThreadState::from_u8(cb.sched.saved_state.load(Ordering::Relaxed) as u8)
        .filter(|s| *s != ThreadState::Preempted)
        .unwrap_or(ThreadState::Preemptable)
}

/// Takes the processor from `cb` now: preempt it if it is preemptable, warn it if
/// not, force it at the extension bound. Returns whether it has stopped.
pub(super) fn stop_thread(
    shared: &Shared,
    t: &mut Attached,
    stats: &mut SchedStats,
    now: u64,
) -> bool {
    let cb = t.cb;
    // Acquire: pairs with the Release store in `yield_attached`.
    if cb.owner.yielded.swap(false, Ordering::Acquire) {
        stats.voluntary_yields += 1;
        t.warned_at = None;
        cb.sched.warning.store(false, Ordering::Relaxed);
        return true;
    }
    match cb.state() {
        ThreadState::Preempted => true,
        // The request word from this thread is a hint: a request that begins
        // after this read is seen by the thread's handler, which undoes the
        // preemption (`ContextBlock::on_preemption_signal`); the thread, running
        // again outside its slot, is then warned at the next pass (`reconcile`).
        ThreadState::Preemptable if !cb.no_preempt_in_force() => {
            cb.sched.preempt_decided_ns.store(now, Ordering::Relaxed);
            if !cb.preempt_unless_requested() {
                return false; // it changed state; decide again at the next tick
            }
            signal(cb);
            stats.preemptions += 1;
            if let Some(w) = t.warned_at.take() {
                let ext = now.saturating_sub(w);
                t.deduct_ns += ext;
                stats.extension_ns += ext;
            }
            cb.sched.warning.store(false, Ordering::Relaxed);
            true
        }
        // A request in force (by the hint: one that ended just after this
        // read leaves a stale warning, and the thread preemptable; the next
        // look, `WARN_POLL_NS` later, preempts it and deducts the extension
        // from `warned_at` as for any warned thread), or a peer's hand-off.
        s => match t.warned_at {
            None => {
                t.warned_at = Some(now);
                cb.sched.warning.store(true, Ordering::Relaxed);
                stats.warnings += 1;
                false
            }
            Some(w) if now.saturating_sub(w) >= shared.cfg.extension_bound.as_nanos() as u64 => {
                cb.sched.preempt_decided_ns.store(now, Ordering::Relaxed);
                cb.sched.saved_state.store(s as u32, Ordering::Relaxed);
                // Relaxed: published by the AcqRel CAS below. The bound forces it.
                cb.sched.undoable.store(false, Ordering::Relaxed);
                if cb
                    .transition(s, ThreadState::Preempted, Actor::Kernel)
                    .is_err()
                {
                    return false;
                }
                signal(cb);
                stats.forced_preemptions += 1;
                let ext = now.saturating_sub(w);
                t.deduct_ns += ext;
                stats.extension_ns += ext;
                t.warned_at = None;
                cb.sched.warning.store(false, Ordering::Relaxed);
                true
            }
            Some(_) => false,
        },
    }
}

fn signal(cb: &ContextBlock) {
    let pt = cb.peer.pthread.load(Ordering::Relaxed) as libc::pthread_t;
    // SAFETY: `cb` is attached, so its thread is alive: a thread detaches (under the
    // lock we hold) before it exits, and signals are sent only under that lock.
    unsafe { libc::pthread_kill(pt, preemption_signal()) };
}

/// Gives the processor back to `cb` if we had taken it.
pub(super) fn resume(shared: &Shared, t: &mut Attached, stats: &mut SchedStats, now: u64) {
    let cb = t.cb;
    if cb.state() != ThreadState::Preempted {
        return;
    }
    let decided = cb.sched.preempt_decided_ns.load(Ordering::Relaxed);
    let stopped = cb.owner.preempt_stopped_ns.load(Ordering::Relaxed);
    if decided != 0 && stopped >= decided {
        push_capped(&mut stats.preempt_latency_ns, stopped - decided);
    }
    cb.sched.preempt_decided_ns.store(0, Ordering::Relaxed);
    let to = state_to_restore(cb);
    cb.sched
        .saved_state
        .store(ThreadState::Preemptable as u32, Ordering::Relaxed);
    if cb
        .transition(ThreadState::Preempted, to, Actor::Kernel)
        .is_ok()
    {
        // Release: pairs with the Acquire load in `wait_resumed`.
        cb.sched.resume.fetch_add(1, Ordering::Release);
        // Under Auto the thread may have chosen to sleep when more were attached.
        if shared.cfg.handler_wait != HandlerWait::Spin {
            crate::sched::futex::wake(&cb.sched.resume, 1);
        }
        if let Some(s) = t.stopped_at.take() {
            push_capped(
                &mut stats.off_times,
                Sample {
                    requested_ns: t.planned_off_ns,
                    actual_ns: now.saturating_sub(s),
                },
            );
        }
    }
}

/// One scheduling pass over every virtual processor; returns when to wake next.
pub(super) fn tick(shared: &Shared, inner: &mut Inner, now: u64) -> u64 {
    let q = shared.cfg.quantum.as_nanos() as u64;
    let mut wake = now + q;
    if let Some(r) = inner.next_repartition {
        if now >= r {
            repartition(shared, inner);
            inner.next_repartition = shared
                .cfg
                .repartition_every
                .map(|d| now + d.as_nanos() as u64);
        }
        wake = wake.min(inner.next_repartition.unwrap_or(u64::MAX));
    }
    let Inner {
        threads,
        vprocs,
        stats,
        log,
        available,
        ..
    } = inner;
    let mut pass = Pass {
        shared,
        threads,
        stats,
        log,
        q,
        now,
        wake,
    };
    for (v, vp) in vprocs.iter_mut().enumerate() {
        let members = Members {
            v: v as u32,
            available: *available,
        };
        pass.vproc(vp, members);
    }
    pass.wake.max(now + MIN_SLEEP_NS)
}

/// One pass: what every virtual processor's step reads and writes.
struct Pass<'a> {
    shared: &'a Shared,
    threads: &'a mut [Attached],
    stats: &'a mut SchedStats,
    log: &'a mut Vec<ScheduleEvent>,
    /// The configured quantum (ns).
    q: u64,
    now: u64,
    /// When to wake next, so far.
    wake: u64,
}

impl Pass<'_> {
    /// Brings one virtual processor up to `now`.
    fn vproc(&mut self, vp: &mut Vproc, members: Members) {
        let n = members.count(self.threads);
        if n == 0 {
            vp.active = false;
            vp.running = 0;
            return;
        }
        if !vp.active {
            self.start_round(vp, members.v);
            vp.active = true;
            vp.slot = 0;
            vp.begin_slot(self.now, vp.run_ns);
        }
        self.advance_slots(vp, members, n);
        self.reconcile(vp, members);
        // A slot end already past means its thread is finishing a no-preempt
        // section: the warn poll decides when to look again.
        if vp.slot_end > self.now {
            self.wake = self.wake.min(vp.slot_end);
        }
    }

    /// Ends every slot whose time is up (or whose thread yielded), round-robin.
    fn advance_slots(&mut self, vp: &mut Vproc, members: Members, n: usize) {
        let now = self.now;
        loop {
            // A thread detached since the last pass may have shortened the round.
            if vp.slot > n {
                vp.slot = 0;
            }
            let cur = members.in_slot(self.threads, vp.slot);
            let yielded =
                cur.is_some_and(|i| self.threads[i].cb.owner.yielded.load(Ordering::Acquire));
            if now < vp.slot_end && !yielded {
                return;
            }
            // End the current slot: a thread slot ends when its thread has stopped.
            if let Some(i) = cur {
                if n == 1 && vp.others == 0 {
                    // Nothing else competes: the thread just keeps running.
                    self.threads[i]
                        .cb
                        .owner
                        .yielded
                        .store(false, Ordering::Relaxed);
                    self.start_round(vp, members.v);
                    vp.begin_slot(now, vp.run_ns);
                    return;
                }
                if !stop_thread(self.shared, &mut self.threads[i], self.stats, now) {
                    self.wake = self.wake.min(now + WARN_POLL_NS);
                    return;
                }
                push_capped(
                    &mut self.stats.quanta,
                    Sample {
                        requested_ns: vp.run_ns,
                        actual_ns: now.saturating_sub(vp.slot_start),
                    },
                );
                let t = &mut self.threads[i];
                t.stopped_at = Some(now);
                t.planned_off_ns = vp.off_ns + vp.run_ns * (n as u64 - 1);
            }
            // The next slot; back to the first one starts a new round.
            vp.slot += 1;
            if vp.slot >= vp.slots(n) {
                vp.slot = 0;
                self.start_round(vp, members.v);
            }
            let len = match members.in_slot(self.threads, vp.slot) {
                // Its quantum, less the extension it took (at least a tenth of it).
                Some(i) => {
                    let t = &mut self.threads[i];
                    let run = vp.run_ns.saturating_sub(t.deduct_ns).max(vp.run_ns / 10);
                    t.deduct_ns = 0;
                    run
                }
                None => vp.off_ns,
            };
            vp.begin_slot(now, len);
        }
    }

    /// The slot's thread runs; every other thread of this vproc is off.
    fn reconcile(&mut self, vp: &mut Vproc, members: Members) {
        let now = self.now;
        vp.running = 0;
        for (slot, t) in self
            .threads
            .iter_mut()
            .filter(|t| members.has(t))
            .enumerate()
        {
            if slot == vp.slot {
                vp.running = t.cb.id();
                resume(self.shared, t, self.stats, now);
            } else if !stop_thread(self.shared, t, self.stats, now) {
                // (`stop_thread` of a `Preempted` thread only consumes a yield
                // it made outside its slot: a thread whose handler undid its
                // preemption runs there until its section ends.)
                self.wake = self.wake.min(now + WARN_POLL_NS);
            } else if t.stopped_at.is_none() {
                t.stopped_at = Some(now);
                t.planned_off_ns = vp.off_ns;
            }
        }
    }

    /// Plans `vp`'s next round from its seeded stream, and logs it.
    fn start_round(&mut self, vp: &mut Vproc, v: u32) {
        let (q, j) = (self.q as f64, self.shared.cfg.jitter);
        vp.run_ns = vp.rng.jitter(q, j) as u64;
        vp.off_ns = (0..vp.others).map(|_| vp.rng.jitter(q, j) as u64).sum();
        push_capped(
            self.log,
            ScheduleEvent {
                vproc: v,
                seq: vp.round,
                run_ns: vp.run_ns,
                off_ns: vp.off_ns,
                others: vp.others,
            },
        );
        vp.round += 1;
    }
}

/// Paper 001 §4: with probability 1/2 all processors, else 1/2, 1/3 or 1/4 of them.
fn repartition(shared: &Shared, inner: &mut Inner) {
    let p = shared.cfg.processors;
    let r = inner.part_rng.next_f64();
    let k = if r < 0.5 {
        p
    } else {
        let div = [2, 3, 4][((r - 0.5) * 6.0) as usize % 3];
        (p / div).max(1)
    };
    inner.stats.repartitions += 1;
    if k != inner.available {
        inner.available = k;
        for t in &inner.threads {
            t.cb.peer.processor.store(t.home % k, Ordering::Relaxed);
        }
        for vp in &mut inner.vprocs {
            vp.active = false;
        }
    }
    refresh_alone(shared, inner);
    publish(inner);
}

/// Sleeps while `*word == seen`, until the absolute `CLOCK_MONOTONIC` time
/// `deadline_ns` (the scale of [`now_ns`]): `FUTEX_WAIT_BITSET` takes an absolute
/// timeout, so time spent between deciding and sleeping does not shift the wake-up,
/// and a [`Shared::kick`] ends the sleep early.
#[cfg(not(loom))]
fn sleep_until(word: &AtomicU32, seen: u32, deadline_ns: u64) {
    /// Wake on any `FUTEX_WAKE` (the kernel's `FUTEX_BITSET_MATCH_ANY`).
    const MATCH_ANY: u32 = u32::MAX;
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned 32-bit atomic for the duration of the call;
    // FUTEX_WAIT_BITSET only reads it; `ts` is a live timespec; without
    // FUTEX_CLOCK_REALTIME the absolute timeout is on CLOCK_MONOTONIC. Every outcome
    // (woken, EAGAIN: the word moved, ETIMEDOUT, EINTR) just returns to the loop.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT_BITSET | libc::FUTEX_PRIVATE_FLAG,
            seen,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            MATCH_ANY,
        );
    }
}

/// Under loom (which never runs the scheduler thread) a model yield, as `park` is.
#[cfg(loom)]
fn sleep_until(word: &AtomicU32, seen: u32, _deadline_ns: u64) {
    let _ = crate::sched::futex::wait(word, seen, None);
}

fn try_realtime() -> bool {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: `param` is a valid sched_param; pthread_self is the calling thread.
    unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) == 0 }
}

pub(super) fn scheduler_main(shared: &Shared) {
    // The chaos build does not perturb the pseudo-scheduler's own thread: its
    // timing is the experiment.
    let _quiet = crate::sync::Exempt::new();
    let realtime = shared.cfg.realtime && try_realtime();
    let (t0, cpu0) = (now_ns(), thread_cpu_ns());
    shared.lock().stats.realtime = realtime;
    // Acquire: pairs with the Release store in `shutdown`.
    while !shared.stopping.load(Ordering::Acquire) {
        // Acquire: pairs with the Release bump in `Shared::kick`.
        let seen = shared.kick.load(Ordering::Acquire);
        let now = now_ns();
        let wake = {
            let mut inner = shared.lock();
            let w = tick(shared, &mut inner, now);
            inner.stats.wall_ns = now - t0;
            inner.stats.sched_cpu_ns = thread_cpu_ns() - cpu0;
            w
        };
        sleep_until(&shared.kick, seen, wake);
    }
    // Resume everyone and leave.
    let now = now_ns();
    let mut inner = shared.lock();
    shared.stopped.store(true, Ordering::Release);
    let Inner { threads, stats, .. } = &mut *inner;
    for t in threads.iter_mut() {
        t.warned_at = None;
        t.cb.sched.warning.store(false, Ordering::Relaxed);
        t.cb.owner.yielded.store(false, Ordering::Relaxed);
        resume(shared, t, stats, now);
    }
    stats.wall_ns = now - t0;
    stats.sched_cpu_ns = thread_cpu_ns() - cpu0;
    partition::withdraw_emulated();
    partition::bump();
}
