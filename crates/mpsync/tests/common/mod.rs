//! Helpers shared by the integration tests.

#[allow(dead_code)] // only the eBPF tests use it
pub mod ebpf;
pub mod lincheck;
pub mod stepper;

/// `n`, divided by `chaos_divisor` in the chaos build (`--cfg mpsync_chaos`).
/// There every atomic operation is perturbed (seeded spins, yields, stalls): the
/// perturbations, not the iteration count, produce the interleavings, and each
/// iteration costs many times more (a yield inside a spin lock's critical section
/// costs the oversubscribed spinners whole quanta). Thread counts and
/// oversubscription stay the same.
#[allow(dead_code)] // not every test binary sizes loops
pub fn sized(n: u64, chaos_divisor: u64) -> u64 {
    if mpsync::sync::CHAOS {
        (n / chaos_divisor).max(1)
    } else {
        n
    }
}
