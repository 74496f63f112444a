//! The pointer-free locks work across processes: a lock and a plain counter in an
//! anonymous `MAP_SHARED` mapping, three forked processes incrementing it under
//! the lock. A lost update would show as a short count.

use mpsync::lock::{
    AndersonN, ProcessShared, Tas, TasB, Ticket, TicketNp, TicketSplit, init_shared,
};

#[repr(C)]
struct Region<L> {
    lock: L,
    counter: u64,
}

const CHILDREN: usize = 2;
const ITERS: u64 = 4_000;

/// One test at a time: three processes per test already oversubscribe 2 cores,
/// and FIFO locks (Ticket, Anderson) convoy behind preempted processes.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn across_processes<L: ProcessShared>() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Calibrate busy work (TAS-B's backoff) before forking.
    mpsync::util::busy::BusyWork::global();
    let size = std::mem::size_of::<Region<L>>();
    // SAFETY: a fresh anonymous shared mapping; checked for failure below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap failed");
    let region = p.cast::<Region<L>>();
    // SAFETY: the mapping is page-aligned, large enough, and not yet in use.
    let lock: &L = unsafe { init_shared(std::ptr::addr_of_mut!((*region).lock)) };
    // SAFETY: as above; the counter is only touched under the lock from now on.
    unsafe { std::ptr::addr_of_mut!((*region).counter).write(0) };
    let work = |lock: &L| {
        for _ in 0..ITERS {
            let g = lock.lock();
            // SAFETY: we hold the lock; volatile so the compiler keeps each access.
            unsafe {
                let c = std::ptr::addr_of_mut!((*region).counter);
                c.write_volatile(c.read_volatile() + 1);
            }
            // SAFETY: acquired just above on this thread.
            unsafe { lock.unlock(g) };
        }
    };
    let mut pids = Vec::new();
    for _ in 0..CHILDREN {
        // SAFETY: the child only runs the loop above (atomics, plain memory) and
        // `_exit`s; it touches no lock held by another thread of the parent.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            work(lock);
            // SAFETY: leaving the child without running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        pids.push(pid);
    }
    work(lock);
    for pid in pids {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(r, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
    // SAFETY: every process finished; we are alone.
    let total = unsafe { std::ptr::addr_of!((*region).counter).read_volatile() };
    // SAFETY: unmapping what we mapped; nothing refers to it any more.
    unsafe { libc::munmap(p, size) };
    assert_eq!(total, ITERS * (CHILDREN as u64 + 1), "lost updates");
}

#[test]
fn tas() {
    across_processes::<Tas>();
}
#[test]
fn tas_b() {
    across_processes::<TasB>();
}
#[test]
fn ticket() {
    across_processes::<Ticket>();
}
#[test]
fn ticket_split() {
    across_processes::<TicketSplit>();
}
#[test]
fn ticket_np() {
    across_processes::<TicketNp>();
}
#[test]
fn anderson() {
    across_processes::<AndersonN<8>>();
}
