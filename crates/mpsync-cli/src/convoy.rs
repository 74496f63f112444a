//! A discrete-event model of the papers' synthetic lock program (papers/003
//! §4.1–4.3, papers/001 §4): `P` workers, one per processor, each looping
//! {lock; critical section; unlock; non-critical section}, every processor
//! time-sliced round-robin between its worker and `m − 1` other applications
//! (the emulated pseudo-scheduler's rule, fractional `m` included), and a lock
//! that is one of the six of Fig. 2–5. It predicts each lock's completion time
//! from the quantities the convoy depends on — processors, MP level, quantum,
//! section lengths, hand-off latency — without running anything, so that the
//! 11- and 63-processor machines of the papers can be predicted on a 2-core
//! machine (`wks94-convoy` validates it against this machine first).
//!
//! What each lock does to a preempted thread, as modelled:
//!
//! | lock | holder preempted in its critical section | lock handed to a preempted waiter |
//! |---|---|---|
//! | TAS-B | yes: every other worker spins until it is back | never (any running spinner takes the lock) |
//! | TAS-B-np | no: the preemption waits for the release | never |
//! | Queued | yes | yes: the lock waits out the waiter's time off the processor |
//! | Queued-np | no | yes |
//! | Queued-Handshaking | no | no: the releaser skips it, paying a handshake per skip |
//! | Smart-Q | no | no: skips it at the cost of a read |
//!
//! A skipped waiter re-enqueues at the tail when it runs again (as
//! `mpsync::lock::skipq` does). A no-preempt holder whose quantum ends is
//! warned, runs to its release, then gives the processor away; the extension
//! is deducted from its next quantum (at least a tenth of a quantum is left),
//! as the emulated scheduler does.
//!
//! **Phases.** The emulated scheduler starts every virtual processor's first
//! round when its worker attaches, so all workers start their first quantum
//! together and drift apart only by the ±10% jitter ([`Phase::Synchronized`]).
//! On a machine whose other applications are scheduled independently per
//! processor, each processor is at a random point of its round
//! ([`Phase::Independent`]). The difference matters: a FIFO hand-off convoy
//! forms when a waiter is preempted *while others keep running* — with
//! synchronized phases the queue's waiters are preempted and resumed nearly
//! together.
//!
//! ```ignore
//! // (The harness is a binary crate: its doc examples are not compiled.)
//! use crate::convoy::{simulate, Costs, Lock, Phase, Program};
//!
//! let prog = Program { procs: 11, mp: 2.0, phase: Phase::Independent, iters: 200, ..Program::WKS94 };
//! let np = simulate(&prog, Lock::TasBNp, &Costs::default());
//! let q = simulate(&prog, Lock::Queued, &Costs::default());
//! assert!(np.completed && q.completed);
//! println!("Queued / TAS-B-np = {:.2}", q.time_ns as f64 / np.time_ns as f64);
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use mpsync::util::rng::SplitMix64;

/// A lock of the papers' synthetic program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    /// Test-and-set with bounded exponential backoff.
    TasB,
    /// TAS-B whose holder is not preempted in its critical section.
    TasBNp,
    /// The MCS list lock.
    Queued,
    /// MCS whose holder is not preempted in its critical section.
    QueuedNp,
    /// Queued-np that skips a waiter that does not answer a handshake.
    Handshaking,
    /// Queued-np that skips a waiter the scheduler says is preempted.
    SmartQ,
}

impl Lock {
    /// Every lock, in the papers' order.
    pub const ALL: [Lock; 6] = [
        Lock::TasB,
        Lock::TasBNp,
        Lock::Queued,
        Lock::QueuedNp,
        Lock::Handshaking,
        Lock::SmartQ,
    ];

    /// The name the experiments print.
    pub fn name(self) -> &'static str {
        match self {
            Lock::TasB => "TAS-B",
            Lock::TasBNp => "TAS-B-np",
            Lock::Queued => "Queued",
            Lock::QueuedNp => "Queued-np",
            Lock::Handshaking => "Queued-Handshaking",
            Lock::SmartQ => "Smart-Q",
        }
    }

    /// The lock called `name`.
    pub fn named(name: &str) -> Option<Lock> {
        Self::ALL.into_iter().find(|l| l.name() == name)
    }

    /// Whether its holder's preemption waits for the release.
    fn no_preempt(self) -> bool {
        !matches!(self, Lock::TasB | Lock::Queued)
    }

    /// Whether waiters queue in FIFO order.
    fn queued(self) -> bool {
        !matches!(self, Lock::TasB | Lock::TasBNp)
    }

    /// The cost of skipping a preempted waiter, if it skips them.
    fn skip_ns(self, c: &Costs) -> Option<u64> {
        match self {
            Lock::Handshaking => Some(c.handshake_ns),
            Lock::SmartQ => Some(c.skip_ns),
            _ => None,
        }
    }
}

/// Where each processor's round starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Every processor's first round starts at time 0 with its worker's
    /// quantum (mpsync's emulated scheduler).
    Synchronized,
    /// Each processor starts at a uniformly random point of its first round
    /// (other applications scheduled independently per processor).
    Independent,
}

/// The synthetic program and its machine.
#[derive(Debug, Clone, Copy)]
pub struct Program {
    /// Processors, one worker each.
    pub procs: u32,
    /// Multiprogramming level (≥ 1): `m − 1` other applications per
    /// processor, fractional levels as the emulated scheduler splits them.
    pub mp: f64,
    /// Scheduling quantum, ns.
    pub quantum_ns: u64,
    /// Uniform jitter on quanta and on section lengths (0.1 = ±10%).
    pub jitter: f64,
    /// Critical section, ns.
    pub cs_ns: u64,
    /// Non-critical section, ns.
    pub ncs_ns: u64,
    /// Loop iterations per worker.
    pub iters: u64,
    /// Where each processor's round starts.
    pub phase: Phase,
    /// Seed of the schedule and the section jitter.
    pub seed: u64,
    /// The simulation stops (censored) at this many times one worker's
    /// time alone.
    pub cap_factor: f64,
}

impl Program {
    /// Paper 003's SGI program (§4.2): 11 processors, quantum 20 ms, CS
    /// 15 µs, NCS 210 µs, 4000 iterations a worker, MP 2.
    pub const WKS94: Program = Program {
        procs: 11,
        mp: 2.0,
        quantum_ns: 20_000_000,
        jitter: 0.1,
        cs_ns: 15_000,
        ncs_ns: 210_000,
        iters: 4000,
        phase: Phase::Independent,
        seed: 1,
        cap_factor: 400.0,
    };

    /// The lock's utilisation with every worker running and no waiting:
    /// processors × CS / (CS + NCS) (≥ 1 means the lock is a bottleneck).
    pub fn utilisation(&self) -> f64 {
        f64::from(self.procs) * self.cs_ns as f64 / (self.cs_ns + self.ncs_ns) as f64
    }

    /// The non-critical section that gives `procs` processors the lock
    /// utilisation of `paper_procs` processors with this program's sections.
    pub fn matched_ncs_ns(&self, procs: u32, paper_procs: u32) -> u64 {
        let per = (self.cs_ns + self.ncs_ns) as f64 * f64::from(procs) / f64::from(paper_procs);
        (per - self.cs_ns as f64).max(0.0).round() as u64
    }

    fn others_on(&self, v: u32) -> u32 {
        let base = self.mp.floor();
        let extra = ((self.mp - base) * f64::from(self.procs)).round() as u32;
        (base as u32).saturating_sub(1) + u32::from(v < extra)
    }
}

/// Latencies of the locks' own steps.
#[derive(Debug, Clone, Copy)]
pub struct Costs {
    /// Passing a queued lock to a running waiter.
    pub handoff_ns: u64,
    /// Mean time a backing-off TAS-B spinner takes to notice a free lock.
    pub tas_notice_ns: u64,
    /// Smart-Q's skip of a preempted waiter.
    pub skip_ns: u64,
    /// Queued-Handshaking's skip (an unanswered handshake).
    pub handshake_ns: u64,
}

impl Default for Costs {
    /// A modern machine's cache-line transfers (≈ 0.2–0.5 µs) and TAS-B's
    /// backoff (cap 30 µs, mostly short under light contention).
    fn default() -> Self {
        Self {
            handoff_ns: 500,
            tas_notice_ns: 2_000,
            skip_ns: 500,
            handshake_ns: 3_000,
        }
    }
}

/// What one simulated run did.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Outcome {
    /// Completion time (the last worker's finish), ns; at the cap, the
    /// cap extrapolated by the fraction done.
    pub time_ns: u64,
    /// Whether every worker finished before the cap.
    pub completed: bool,
    /// Lock acquisitions.
    pub acquisitions: u64,
    /// Hand-offs to a waiter that was not running.
    pub handoffs_to_preempted: u64,
    /// Times a holder lost its processor inside its critical section.
    pub holder_preemptions: u64,
    /// Waiters skipped by a releaser.
    pub skips: u64,
    /// Time the lock was held by a worker off its processor, ns.
    pub held_off_cpu_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ncs,
    Wait,
    /// Owns the lock, its critical section not started.
    Granted,
    Cs,
    Done,
}

#[derive(Debug)]
struct Worker {
    state: State,
    /// Work left in the current section.
    rem: u64,
    /// When it last started running its section.
    seg_start: u64,
    /// Invalidates scheduled events when it stops.
    epoch: u64,
    left: u64,
    /// Skipped while off its processor: re-enqueues when it runs.
    skipped: bool,
    finished_at: u64,
}

#[derive(Debug)]
struct Vproc {
    on: bool,
    others: u32,
    /// This round's planned off time.
    off: u64,
    /// Extension to take off the next quantum.
    deduct: u64,
    /// Its quantum ended while its worker held a no-preempt lock.
    warned_at: Option<u64>,
    rng: SplitMix64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Switch(usize),
    Finish(usize, u64),
    Start(usize, u64),
    Contest(u64),
}

/// The simulation's state.
struct Sim<'a> {
    prog: &'a Program,
    lock: Lock,
    costs: &'a Costs,
    now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    workers: Vec<Worker>,
    vprocs: Vec<Vproc>,
    owner: Option<usize>,
    owner_off_since: Option<u64>,
    queue: VecDeque<usize>,
    contest_gen: u64,
    contest_pending: bool,
    rng: SplitMix64,
    out: Outcome,
    done: usize,
}

/// Runs `prog` with `lock` and returns what it did.
pub fn simulate(prog: &Program, lock: Lock, costs: &Costs) -> Outcome {
    let mut s = Sim::new(prog, lock, costs);
    let solo = prog.iters as f64 * (prog.cs_ns + prog.ncs_ns) as f64;
    let cap = (solo * prog.cap_factor.max(1.0)) as u64;
    while s.done < s.workers.len() {
        let Some(Reverse((t, _, ev))) = s.events.pop() else {
            break;
        };
        if t > cap {
            s.now = cap;
            break;
        }
        s.now = t;
        s.handle(ev);
    }
    let total = prog.iters * u64::from(prog.procs);
    if s.done == s.workers.len() {
        s.out.completed = true;
        s.out.time_ns = s.workers.iter().map(|w| w.finished_at).max().unwrap_or(0);
    } else {
        let frac = (s.out.acquisitions as f64 / total.max(1) as f64).max(1e-9);
        s.out.time_ns = (s.now as f64 / frac) as u64;
    }
    s.out
}

impl<'a> Sim<'a> {
    fn new(prog: &'a Program, lock: Lock, costs: &'a Costs) -> Self {
        let n = prog.procs as usize;
        let mut s = Sim {
            prog,
            lock,
            costs,
            now: 0,
            seq: 0,
            events: BinaryHeap::new(),
            workers: Vec::with_capacity(n),
            vprocs: Vec::with_capacity(n),
            owner: None,
            owner_off_since: None,
            queue: VecDeque::new(),
            contest_gen: 0,
            contest_pending: false,
            rng: SplitMix64::stream(prog.seed, 0),
            out: Outcome::default(),
            done: 0,
        };
        for v in 0..n {
            let mut rng = SplitMix64::stream(prog.seed, 1 + v as u64);
            let others = prog.others_on(v as u32);
            let q = prog.quantum_ns as f64;
            let run = rng.jitter(q, prog.jitter) as u64;
            let off: u64 = (0..others).map(|_| rng.jitter(q, prog.jitter) as u64).sum();
            // Where in its first round the processor is at time 0.
            let at = match prog.phase {
                Phase::Synchronized => 0,
                Phase::Independent => (rng.next_f64() * (run + off) as f64) as u64,
            };
            let on = others == 0 || at < run;
            s.vprocs.push(Vproc {
                on,
                others,
                off,
                deduct: 0,
                warned_at: None,
                rng,
            });
            s.workers.push(Worker {
                state: State::Ncs,
                rem: 0,
                seg_start: 0,
                epoch: 0,
                left: prog.iters,
                skipped: false,
                finished_at: 0,
            });
            if others > 0 {
                let next = if on { run - at } else { run + off - at };
                s.push(next, Ev::Switch(v));
            }
        }
        for w in 0..n {
            if s.workers[w].left == 0 {
                s.workers[w].state = State::Done;
                s.done += 1;
                continue;
            }
            let ncs = s.section(prog.ncs_ns);
            s.workers[w].rem = ncs;
            if s.vprocs[w].on {
                s.run_section(w);
            }
        }
        s
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, ev)));
    }

    fn section(&mut self, base: u64) -> u64 {
        self.rng.jitter(base as f64, self.prog.jitter).max(0.0) as u64
    }

    /// Its section runs from now (it is on its processor).
    fn run_section(&mut self, w: usize) {
        assert!(self.vprocs[w].on, "worker {w} ran off its processor");
        let wk = &mut self.workers[w];
        wk.seg_start = self.now;
        let (at, epoch) = (self.now + wk.rem, wk.epoch);
        self.push(at, Ev::Finish(w, epoch));
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Switch(v) => self.switch(v),
            Ev::Finish(w, epoch) if self.workers[w].epoch == epoch => self.finish(w),
            Ev::Start(w, epoch) if self.workers[w].epoch == epoch => self.start_cs(w),
            Ev::Contest(epoch) if epoch == self.contest_gen => self.contest(),
            _ => {}
        }
    }

    /// A quantum boundary of processor `v`.
    fn switch(&mut self, v: usize) {
        if self.vprocs[v].on {
            let w = &self.workers[v];
            let holding = matches!(w.state, State::Cs | State::Granted) && self.owner == Some(v);
            if holding && self.lock.no_preempt() {
                // Warned: it gives the processor away at its release.
                self.vprocs[v].warned_at = Some(self.now);
                return;
            }
            self.go_off(v);
        } else {
            self.go_on(v);
        }
    }

    fn go_off(&mut self, v: usize) {
        let off = self.vprocs[v].off;
        self.vprocs[v].on = false;
        self.push(self.now + off, Ev::Switch(v));
        let w = &mut self.workers[v];
        if matches!(w.state, State::Ncs | State::Cs) {
            w.rem = w.rem.saturating_sub(self.now - w.seg_start);
        }
        w.epoch += 1;
        if self.owner == Some(v) {
            if w.state == State::Cs {
                self.out.holder_preemptions += 1;
            }
            self.owner_off_since = Some(self.now);
        }
    }

    fn go_on(&mut self, v: usize) {
        let q = self.prog.quantum_ns as f64;
        let vp = &mut self.vprocs[v];
        let run = vp.rng.jitter(q, self.prog.jitter) as u64;
        vp.off = (0..vp.others)
            .map(|_| vp.rng.jitter(q, self.prog.jitter) as u64)
            .sum();
        let run = run.saturating_sub(vp.deduct).max(run / 10);
        vp.deduct = 0;
        vp.on = true;
        self.push(self.now + run, Ev::Switch(v));
        if self.owner == Some(v)
            && let Some(since) = self.owner_off_since.take()
        {
            self.out.held_off_cpu_ns += self.now - since;
        }
        match self.workers[v].state {
            State::Ncs | State::Cs => self.run_section(v),
            State::Granted => {
                let epoch = self.workers[v].epoch;
                self.push(self.now + self.costs.handoff_ns, Ev::Start(v, epoch));
            }
            State::Wait if self.workers[v].skipped => {
                self.workers[v].skipped = false;
                self.arrive(v);
            }
            State::Wait if !self.lock.queued() && self.owner.is_none() => self.schedule_contest(),
            State::Wait | State::Done => {}
        }
    }

    /// A section of `w` ended.
    fn finish(&mut self, w: usize) {
        match self.workers[w].state {
            State::Ncs => self.arrive(w),
            State::Cs => self.release(w),
            _ => {}
        }
    }

    /// `w` (running) wants the lock.
    fn arrive(&mut self, w: usize) {
        if self.owner.is_none() && self.queue.is_empty() {
            self.acquire(w);
            return;
        }
        self.workers[w].state = State::Wait;
        if self.lock.queued() {
            self.queue.push_back(w);
        }
    }

    fn acquire(&mut self, w: usize) {
        self.owner = Some(w);
        self.out.acquisitions += 1;
        let cs = self.section(self.prog.cs_ns);
        let wk = &mut self.workers[w];
        wk.state = State::Cs;
        wk.rem = cs;
        wk.epoch += 1;
        self.run_section(w);
    }

    /// A granted owner, on its processor, starts its critical section.
    fn start_cs(&mut self, w: usize) {
        if self.workers[w].state != State::Granted || !self.vprocs[w].on {
            return;
        }
        self.acquire(w);
    }

    fn release(&mut self, w: usize) {
        self.owner = None;
        let ncs = self.section(self.prog.ncs_ns);
        let wk = &mut self.workers[w];
        wk.left -= 1;
        wk.epoch += 1;
        wk.seg_start = self.now;
        if wk.left == 0 {
            wk.state = State::Done;
            wk.finished_at = self.now;
            self.done += 1;
        } else {
            wk.state = State::Ncs;
            wk.rem = ncs;
        }
        if self.lock.queued() {
            self.hand_over();
        } else {
            self.schedule_contest();
        }
        // A warned holder gives its processor away now.
        if let Some(at) = self.vprocs[w].warned_at.take() {
            self.vprocs[w].deduct = self.now - at;
            self.go_off(w);
        } else if self.workers[w].state == State::Ncs {
            self.run_section(w);
        }
    }

    /// The queued locks' release: the next waiter (skipping preempted ones
    /// where the lock does).
    fn hand_over(&mut self) {
        let mut delay = self.costs.handoff_ns;
        while let Some(next) = self.queue.pop_front() {
            let running = self.vprocs[next].on;
            if !running && let Some(skip) = self.lock.skip_ns(self.costs) {
                self.workers[next].skipped = true;
                self.out.skips += 1;
                delay += skip;
                continue;
            }
            self.owner = Some(next);
            let wk = &mut self.workers[next];
            wk.state = State::Granted;
            wk.epoch += 1;
            let epoch = wk.epoch;
            if running {
                self.push(self.now + delay, Ev::Start(next, epoch));
            } else {
                self.out.handoffs_to_preempted += 1;
                self.owner_off_since = Some(self.now);
            }
            return;
        }
    }

    /// TAS-B: a free lock is taken by a running spinner after it notices.
    fn schedule_contest(&mut self) {
        if self.contest_pending {
            return;
        }
        self.contest_pending = true;
        self.contest_gen += 1;
        let notice = (self.rng.next_f64() * 2.0 * self.costs.tas_notice_ns as f64) as u64;
        self.push(self.now + notice, Ev::Contest(self.contest_gen));
    }

    fn contest(&mut self) {
        self.contest_pending = false;
        if self.owner.is_some() {
            return;
        }
        let spinning: Vec<usize> = (0..self.workers.len())
            .filter(|&w| self.workers[w].state == State::Wait && self.vprocs[w].on)
            .collect();
        if spinning.is_empty() {
            return;
        }
        let k = (self.rng.next_f64() * spinning.len() as f64) as usize;
        self.acquire(spinning[k.min(spinning.len() - 1)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prog(procs: u32, mp: f64, phase: Phase) -> Program {
        Program {
            procs,
            mp,
            phase,
            iters: 2000,
            ..Program::WKS94
        }
    }

    fn ratio(p: &Program, a: Lock, b: Lock) -> f64 {
        let c = Costs::default();
        simulate(p, a, &c).time_ns as f64 / simulate(p, b, &c).time_ns as f64
    }

    #[test]
    fn one_dedicated_worker_takes_its_sections_time() {
        let p = prog(1, 1.0, Phase::Synchronized);
        for lock in Lock::ALL {
            let o = simulate(&p, lock, &Costs::default());
            assert!(o.completed);
            assert_eq!(o.acquisitions, 2000);
            let ideal = 2000.0 * 225_000.0;
            let r = o.time_ns as f64 / ideal;
            assert!((0.95..1.05).contains(&r), "{lock:?}: {r}");
        }
    }

    #[test]
    fn mp_2_on_one_processor_halves_the_share() {
        let p = Program {
            iters: 4000,
            ..prog(1, 2.0, Phase::Synchronized)
        };
        let o = simulate(&p, Lock::TasBNp, &Costs::default());
        let r = o.time_ns as f64 / (4000.0 * 225_000.0);
        assert!((1.8..2.2).contains(&r), "{r}");
    }

    #[test]
    fn every_acquisition_is_counted_and_no_lock_is_held_at_the_end() {
        for lock in Lock::ALL {
            for phase in [Phase::Synchronized, Phase::Independent] {
                let p = prog(5, 2.5, phase);
                let costs = Costs::default();
                let mut s = Sim::new(&p, lock, &costs);
                while let Some(Reverse((t, _, ev))) = s.events.pop() {
                    s.now = t;
                    s.handle(ev);
                    if s.done == s.workers.len() {
                        break;
                    }
                }
                assert_eq!(s.done, 5, "{lock:?} {phase:?}");
                assert_eq!(s.out.acquisitions, 5 * 2000, "{lock:?} {phase:?}");
                assert_eq!(s.owner, None);
                assert!(s.queue.is_empty());
            }
        }
    }

    #[test]
    fn independent_phases_form_the_papers_convoy_at_11_processors() {
        let p = prog(11, 2.0, Phase::Independent);
        let q = ratio(&p, Lock::Queued, Lock::TasBNp);
        let qnp = ratio(&p, Lock::QueuedNp, Lock::TasBNp);
        let smart = ratio(&p, Lock::SmartQ, Lock::TasBNp);
        assert!(q > 1.5 && qnp > 1.5, "Queued {q}, Queued-np {qnp}");
        assert!(smart < 1.5, "Smart-Q {smart}");
    }

    #[test]
    fn two_processors_cannot_form_a_convoy() {
        let p = prog(2, 2.0, Phase::Independent);
        assert!(ratio(&p, Lock::Queued, Lock::TasBNp) < 1.5);
    }

    #[test]
    fn the_holders_preemption_is_avoided_only_by_the_np_locks() {
        let p = prog(4, 2.0, Phase::Independent);
        let c = Costs::default();
        assert!(simulate(&p, Lock::TasB, &c).holder_preemptions > 0);
        for lock in [Lock::TasBNp, Lock::QueuedNp, Lock::SmartQ] {
            assert_eq!(simulate(&p, lock, &c).holder_preemptions, 0, "{lock:?}");
        }
        assert_eq!(simulate(&p, Lock::SmartQ, &c).handoffs_to_preempted, 0);
    }

    #[test]
    fn a_capped_run_is_extrapolated_and_marked() {
        let p = Program {
            cap_factor: 1.0,
            ..prog(11, 3.0, Phase::Independent)
        };
        let o = simulate(&p, Lock::Queued, &Costs::default());
        assert!(!o.completed);
        assert!(o.time_ns as f64 >= 2000.0 * 225_000.0);
    }

    #[test]
    fn matched_ncs_gives_the_papers_utilisation() {
        let p = Program::WKS94;
        let ncs = p.matched_ncs_ns(2, 11);
        let two = Program {
            procs: 2,
            ncs_ns: ncs,
            ..p
        };
        assert!((two.utilisation() - p.utilisation()).abs() < 1e-3);
    }
}
