//! Getting started: a mutex.
//!
//! `mpsync::Mutex<T>` is the recommended lock (bounded-steal) with lock_api's
//! guards; any other lock is one type parameter away (`lock::Mutex<L, T>`).
//!
//! `cargo run -p mpsync --example mutex`

use std::time::Duration;

use mpsync::lock::{self, TicketNp};

fn main() {
    // The default: no type parameters.
    let counter = mpsync::Mutex::new(0u64);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..1000 {
                    *counter.lock() += 1;
                }
            });
        }
    });
    assert_eq!(*counter.lock(), 4000);

    // Timed locking (bounded-steal can always withdraw: it never queues a
    // timed acquirer).
    let held = counter.lock();
    std::thread::scope(|s| {
        s.spawn(|| assert!(counter.try_lock_for(Duration::from_millis(1)).is_none()));
    });
    drop(held);

    // Another lock: the scheduler-conscious FIFO ticket lock, which also
    // works in memory shared between processes.
    let fifo: lock::Mutex<TicketNp, Vec<u32>> = lock::Mutex::new(Vec::new());
    fifo.lock().push(1);
    println!("counter = {}, fifo = {:?}", counter.lock(), *fifo.lock());
}
