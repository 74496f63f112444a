//! The data structures of the papers: queues, stacks, priority queues and
//! counters, lock-based (generic over the lock) and non-blocking (generic over
//! the [`reclaim`](crate::reclaim) scheme and the node allocator).
//!
//! Michael & Scott, PODC 1996 / JPDC 1998 (papers/000_…) and Hart 2005
//! (papers/002_…).

pub mod alloc;
