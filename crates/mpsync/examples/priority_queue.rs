//! Getting started: a priority queue.
//!
//! `mpsync::PriorityQueue<T>` is a min-priority skew heap under a
//! spin-then-park lock (waiters spin while the holder runs, park once it is
//! preempted); `PriorityQueueWith<T, L>` takes another lock.
//!
//! `cargo run -p mpsync --example priority_queue`

fn main() {
    let tasks = mpsync::PriorityQueue::new();
    std::thread::scope(|s| {
        for (priority, name) in [(3, "close"), (1, "open"), (2, "write"), (2, "flush")] {
            let tasks = &tasks;
            s.spawn(move || tasks.insert((priority, name)));
        }
    });
    // The smallest first; equal priorities in the order of their names (the
    // tuple's `Ord`).
    let order: Vec<&str> = std::iter::from_fn(|| tasks.delete_min())
        .map(|(_, n)| n)
        .collect();
    assert_eq!(order, ["open", "flush", "write", "close"]);
    println!("{order:?}");
}
