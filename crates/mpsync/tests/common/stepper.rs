//! A thread driven step by step, for tests that force one interleaving with
//! `mpsync::sched::stall` traps.
#![allow(dead_code)] // each test binary uses what it needs

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use mpsync::sched;

/// One step: runs on the stepper's thread, on its state.
type Step<S> = Box<dyn FnOnce(&mut S) + Send>;

/// A thread that runs the steps a test sends it, one at a time, on its own state,
/// so that the test can interleave it with other threads exactly (with a
/// [`Trap`](mpsync::sched::stall::Trap) to stop it inside a step).
pub struct Stepper<S: 'static> {
    tx: Option<mpsc::Sender<Step<S>>>,
    done: mpsc::Receiver<()>,
    id: u64,
    thread: Option<thread::JoinHandle<()>>,
}

impl<S: 'static> Stepper<S> {
    pub fn spawn(state: impl FnOnce() -> S + Send + 'static) -> Self {
        let (tx, rx) = mpsc::channel::<Step<S>>();
        let (done_tx, done) = mpsc::channel();
        let (id_tx, id_rx) = mpsc::channel();
        let thread = thread::spawn(move || {
            id_tx.send(sched::current().id()).unwrap();
            let mut s = state();
            for step in rx {
                step(&mut s);
                done_tx.send(()).unwrap();
            }
        });
        Self {
            tx: Some(tx),
            done,
            id: id_rx.recv().unwrap(),
            thread: Some(thread),
        }
    }

    /// Its `sched` context-block id, for `Trap`s.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Sends a step and returns at once (it may stop at a trap).
    pub fn start(&self, f: impl FnOnce(&mut S) + Send + 'static) {
        self.tx.as_ref().unwrap().send(Box::new(f)).unwrap();
    }

    /// Waits until the step started last has finished; a step that panicked
    /// panics here with its message.
    pub fn wait(&mut self) {
        match self.done.recv_timeout(Duration::from_secs(30)) {
            Ok(()) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let t = self.thread.take().expect("the stepper thread");
                let e = t.join().expect_err("the stepper thread ended early");
                std::panic::resume_unwind(e);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("the stepper's step took over 30 s"),
        }
    }

    pub fn run(&mut self, f: impl FnOnce(&mut S) + Send + 'static) {
        self.start(f);
        self.wait();
    }
}

impl<S: 'static> Drop for Stepper<S> {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take()
            && !thread::panicking()
        {
            t.join().unwrap();
        }
    }
}
