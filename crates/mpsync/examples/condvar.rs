//! Getting started: a condition variable.
//!
//! `mpsync::Condvar` works with `mpsync::Mutex<T>` and with every
//! `lock::Mutex<L, T>`: `wait`, `wait_while`, `wait_for` (a timeout),
//! `notify_one`, `notify_all`.
//!
//! `cargo run -p mpsync --example condvar`

use std::collections::VecDeque;
use std::time::Duration;

use mpsync::{Condvar, Mutex};

fn main() {
    let queue = Mutex::new(VecDeque::new());
    let not_empty = Condvar::new();
    let total = std::thread::scope(|s| {
        s.spawn(|| {
            for i in 1..=100u64 {
                queue.lock().push_back(Some(i));
                not_empty.notify_one();
            }
            queue.lock().push_back(None); // done
            not_empty.notify_one();
        });
        let mut total = 0;
        loop {
            let mut q = queue.lock();
            not_empty.wait_while(&mut q, |q| q.is_empty());
            match q.pop_front().unwrap() {
                Some(i) => total += i,
                None => break total,
            }
        }
    });
    assert_eq!(total, 5050);

    // A wait with a timeout: nobody notifies, so it times out.
    let mut q = queue.lock();
    assert!(
        not_empty
            .wait_for(&mut q, Duration::from_millis(1))
            .timed_out()
    );
    println!("total = {total}");
}
