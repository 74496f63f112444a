//! The native backend on this machine: heartbeats, affinity, quota parsing,
//! partition generation, slice-extension detection.

use std::time::Duration;

use mpsync::sched::{self, ContextBlock, native};

#[test]
fn heartbeat_staleness() {
    let cb = ContextBlock::new();
    assert!(
        !native::presumed_preempted(&cb),
        "never published: no opinion"
    );
    cb.publish_heartbeat();
    assert!(!native::presumed_preempted(&cb));
    assert!(!sched::is_preempted(&cb));
    std::thread::sleep(native::heartbeat_threshold() * 3);
    assert!(native::presumed_preempted(&cb));
    assert!(sched::is_preempted(&cb));
}

#[test]
fn threshold_is_settable_and_clamped() {
    let old = native::heartbeat_threshold();
    native::set_heartbeat_threshold(Duration::ZERO);
    assert_eq!(native::heartbeat_threshold(), Duration::from_micros(1));
    native::set_heartbeat_threshold(Duration::from_secs(5));
    assert_eq!(native::heartbeat_threshold(), Duration::from_secs(1));
    native::set_heartbeat_threshold(old);
}

#[test]
fn affinity_and_pinning() {
    let cpus = native::available_cpus().unwrap();
    assert_eq!(
        cpus.len(),
        std::thread::available_parallelism().unwrap().get()
    );
    std::thread::spawn(move || {
        for &c in &cpus {
            native::pin_current_thread(c).unwrap();
            // SAFETY: sched_getcpu has no preconditions.
            let now = unsafe { libc::sched_getcpu() };
            assert_eq!(now as usize, c);
            assert_eq!(sched::current().processor(), Some(c as u32));
        }
        let e = native::pin_current_thread(100_000).unwrap_err();
        assert!(e.to_string().contains("not available"), "{e}");
    })
    .join()
    .unwrap();
}

#[test]
fn cpu_max_parsing() {
    assert_eq!(native::parse_cpu_max("max 100000"), None);
    assert_eq!(native::parse_cpu_max("50000 100000\n"), Some(0.5));
    assert_eq!(native::parse_cpu_max("200000 100000"), Some(2.0));
    assert_eq!(native::parse_cpu_max("garbage"), None);
    assert_eq!(native::parse_cpu_max(""), None);
    assert_eq!(native::parse_cpu_max("0 100000"), None);
}

#[test]
fn partition_reflects_the_machine() {
    let p = native::poll_partition();
    assert_eq!(p.source, "native");
    assert_eq!(
        p.processors as usize,
        native::available_cpus().unwrap().len()
    );
    assert!(!native::partition_changed((2, None), (2, None)));
    assert!(native::partition_changed((2, None), (1, None)));
    assert!(native::partition_changed((2, None), (2, Some(1.5))));
    // Polling an unchanged machine does not advance the generation.
    let g = sched::generation();
    std::thread::sleep(Duration::from_millis(15));
    let _ = native::poll_partition();
    assert_eq!(sched::generation(), g);
}

#[test]
fn slice_extension_detection_says_why() {
    match native::slice_extension() {
        native::SliceExtension::Available => {
            // A 7.0+ kernel: nothing more to check here.
        }
        native::SliceExtension::Unavailable(why) => {
            assert!(why.contains(&native::kernel_release()), "{why}");
            assert!(why.contains("7.0"), "{why}");
        }
    }
}
