//! Getting started: a queue and a stack shared by threads.
//!
//! `mpsync::Queue<T>` is Michael & Scott's non-blocking FIFO queue and
//! `mpsync::Stack<T>` Treiber's LIFO stack, both over epoch-based
//! reclamation and handle-free: every operation is a method on `&self`, each
//! thread's registration is made and cached for it. A thread that used one and
//! went idle holds nothing back. `QueueWith<T, R>` / `StackWith<T, R>` take
//! another reclaimer (e.g. `HazardPointers`, which bounds the backlog a stopped
//! thread can cause).
//!
//! `cargo run -p mpsync --example queue`

use std::sync::atomic::{AtomicU64, Ordering};

fn main() {
    let jobs = mpsync::Queue::new();
    let done = mpsync::Stack::new();
    let sum = AtomicU64::new(0);
    std::thread::scope(|s| {
        for producer in 0..2u64 {
            let jobs = &jobs;
            s.spawn(move || (0..1000).for_each(|i| jobs.enqueue(producer * 1000 + i)));
        }
        for _ in 0..2 {
            s.spawn(|| {
                let mut seen = 0;
                // Each consumer stops after 1000 jobs; together they take all.
                while seen < 1000 {
                    if let Some(job) = jobs.dequeue() {
                        sum.fetch_add(job, Ordering::Relaxed);
                        done.push(job);
                        seen += 1;
                    }
                }
            });
        }
    });
    assert!(jobs.is_empty());
    assert_eq!(sum.into_inner(), (0..2000).sum::<u64>());
    println!(
        "{} jobs done; the last one finished was {:?}",
        done.len(),
        done.pop()
    );
}
