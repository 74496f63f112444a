//! Helpers of the eBPF tests (`tests/ebpf.rs`, `tests/ebpf_pressure.rs`).

use mpsync::sched::native;

/// Whether the kernel answers here; prints `SKIPPED: <test>: <reason>` when it
/// may not (the program not built, not root, no BTF, or switched off by
/// `MPSYNC_EBPF=`). Any other reason fails the test, and so does every reason
/// under `MPSYNC_EBPF_REQUIRED=1`.
pub fn kernel_answers(test: &str) -> bool {
    match native::preemption_answers() {
        native::PreemptionAnswers::Ebpf => true,
        native::PreemptionAnswers::Heartbeat(why) => {
            let environmental = ["not built", "needs root", "MPSYNC_EBPF=", "BTF"]
                .iter()
                .any(|k| why.contains(k));
            assert!(
                environmental,
                "eBPF could not be used for a reason that is not the machine's: {why}"
            );
            assert!(
                std::env::var("MPSYNC_EBPF_REQUIRED").as_deref() != Ok("1"),
                "MPSYNC_EBPF_REQUIRED=1 but eBPF is not in use: {why}"
            );
            println!("SKIPPED: {test}: {why}");
            eprintln!("SKIPPED: {test}: {why}");
            false
        }
    }
}

/// Runs `f` when dropped — also while a failed assertion unwinds, so that the
/// threads of a scope are released and the failure is reported, not a hang.
pub struct OnDrop<F: FnMut()>(pub F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}
