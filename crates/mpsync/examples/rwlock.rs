//! Getting started: a reader-writer lock.
//!
//! `mpsync::RwLock<T>` is the recommended RW lock (RW-TAS-B) with lock_api's
//! guards: read, write, upgradable read, downgrade, timed attempts. Any other
//! RW lock is one type parameter away (`rwlock::RwLock<L, T>`).
//!
//! `cargo run -p mpsync --example rwlock`

use std::collections::HashMap;
use std::time::Duration;

use mpsync::lock_api::{RwLockUpgradableReadGuard, RwLockWriteGuard};
use mpsync::rwlock::{self, RwSmartQ};

fn main() {
    let config = mpsync::RwLock::new(HashMap::from([("threads", 4u32)]));
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| assert_eq!(config.read()["threads"], 4)); // readers share
        }
    });

    // Write, then keep reading without letting another writer in between.
    let mut w = config.write();
    w.insert("quantum_ms", 20);
    let r = RwLockWriteGuard::downgrade(w);
    assert!(config.try_write_for(Duration::from_millis(1)).is_none());
    drop(r);

    // Read, and upgrade to a write only if needed.
    let u = config.upgradable_read();
    if !u.contains_key("seed") {
        RwLockUpgradableReadGuard::upgrade(u).insert("seed", 7);
    }

    // A fair lock: readers and writers in arrival order, never handed to a
    // preempted waiter.
    let fair: rwlock::RwLock<RwSmartQ, u32> = rwlock::RwLock::new(0);
    *fair.write() += 1;
    println!("config = {:?}, fair = {}", *config.read(), *fair.read());
}
