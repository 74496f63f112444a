//! `sched` against hostile users: what a program around the library may do at
//! any moment, not only the schedules the torture tests explore.
//!
//! - **Fork at every point of initialisation**: before anything, while the
//!   first registration starts loading the eBPF program, while the loader
//!   loads, after it loaded and before it said ready, after it is ready, while
//!   another thread registers (holding the registry's lock), while the
//!   emulated scheduler's handlers are installed, while a thread attaches to
//!   an emulated scheduler. Each point is reached by a stall point, in a fresh
//!   process (the first registration happens once per process); the child of
//!   the fork must answer at once (heartbeats in a child of a process that
//!   loads or loaded the program), register new threads, start and use its
//!   own emulated scheduler — within a deadline (its own alarm), never hang.
//! - **Registrations from thread-exit destructors**, also after the C
//!   library's last destructor round: the block is taken back once the thread
//!   is gone, the kernel stops answering for it as it exits, and a task that
//!   later gets the same tid (a forked child) is not tracked into its slot.
//! - **Threads that exit while registered** (in a no-preempt section, attached
//!   to an emulated scheduler, mid-wait): their blocks come back and the
//!   kernel's counts return to 0.
//! - **`MPSYNC_EBPF=off`**: every kernel answer is `None`, the heartbeats
//!   answer, and all of the above still holds.
//!
//! Each scenario runs in a fresh copy of this test binary (`role`), one at a
//! time there. Where eBPF cannot be loaded the scenarios still run (they then
//! check the heartbeat paths); `MPSYNC_EBPF_REQUIRED=1` makes that a failure.

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::time::{Duration, Instant};

use mpsync::sched::emulated::{Emulated, EmulatedConfig};
use mpsync::sched::stall::{self, Point, Trap};
use mpsync::sched::{self, ContextBlock, native};

/// The environment variable naming the role a fresh process plays.
const ROLE: &str = "MPSYNC_HOSTILE_ROLE";

/// The environment of a role without the kernel's answers (the emulated
/// scheduler's and the registry's own paths, alone).
const NO_EBPF: &[(&str, &str)] = &[("MPSYNC_EBPF", "off"), ("MPSYNC_EBPF_REQUIRED", "0")];

/// How long a forked child may take before its alarm ends it (a hang).
const CHILD_ALARM_S: u32 = 20;

/// Runs `test` again in a fresh process as `role` (with `env`), and fails
/// with its output if it failed. Returns `true` in that fresh process, where
/// the caller then plays the role.
fn in_fresh_process(test: &str, role: &str, env: &[(&str, &str)]) -> bool {
    if std::env::var(ROLE).as_deref() == Ok(role) {
        return true;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .envs(env.iter().copied())
        .output()
        .expect("re-run this test in a fresh process");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for line in text
        .lines()
        .filter_map(|l| l.find("role ").map(|i| &l[i..]))
    {
        println!("{line}");
    }
    assert!(
        out.status.success() && text.contains(&format!("role {role}: ok")),
        "role {role} in a fresh process failed ({}):\n{text}",
        out.status
    );
    false
}

/// Reports a role done (the parent looks for this line).
fn role_ok(role: &str, what: &str) {
    println!("role {role}: ok ({what})");
}

/// Whether eBPF is required here (then a heartbeat-only run is a failure).
fn ebpf_required() -> bool {
    std::env::var("MPSYNC_EBPF_REQUIRED").as_deref() == Ok("1")
}

/// Forks; the child runs `child` under a `CHILD_ALARM_S` alarm (a hang ends
/// it by SIGALRM) and leaves with `_exit`; the parent waits for it. Err with
/// what the child said, or that it hung.
fn fork_child(child: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid out-array of two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: the child runs `child` and leaves with _exit; what it calls is
    // what this suite checks works in a child of fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: alarm has no preconditions; SIGALRM's default action ends
        // the process.
        unsafe { libc::alarm(CHILD_ALARM_S) };
        let r = child();
        let msg = match &r {
            Ok(()) => "ok".to_string(),
            Err(e) => e.clone(),
        };
        // SAFETY: writes a buffer we own to the pipe's write end; ends the
        // child without running the parent's destructors.
        unsafe {
            libc::write(fds[1], msg.as_ptr().cast(), msg.len());
            libc::_exit(if r.is_ok() { 0 } else { 1 });
        }
    }
    // SAFETY: closes our copy of the write end.
    unsafe { libc::close(fds[1]) };
    let mut status = 0;
    // SAFETY: waits for the child forked above; it ends by its alarm at worst.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    let mut buf = vec![0u8; 4096];
    // SAFETY: reads into a buffer we own from the pipe's read end.
    let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: closes the read end.
    unsafe { libc::close(fds[0]) };
    let said = String::from_utf8_lossy(&buf[..n.max(0) as usize]).into_owned();
    if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGALRM {
        return Err(format!(
            "the child hung: ended by its {CHILD_ALARM_S} s alarm (it said: {said:?})"
        ));
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else {
        Err(format!("the child failed (status {status:#x}): {said}"))
    }
}

/// What a child of fork must be able to do: answer at once (heartbeats where
/// its parent loads or loaded the program: `expect_heartbeats`), register new
/// threads and use them, start and use an emulated scheduler of its own.
fn child_works(expect_heartbeats: bool) -> Result<(), String> {
    let answers = native::preemption_answers().clone();
    if expect_heartbeats && !matches!(answers, native::PreemptionAnswers::Heartbeat(_)) {
        return Err(format!(
            "a child of fork of a process that loads the eBPF program says: {answers:?} (want the heartbeats)"
        ));
    }
    let me = sched::current();
    if sched::is_preempted(me) {
        return Err("the child's own thread reads preempted".into());
    }
    if expect_heartbeats
        && (native::kernel_state(me).is_some()
            || native::cpu_pressure().is_some()
            || native::kernel_key(me).is_some())
    {
        return Err("the kernel answers in a child of fork".into());
    }
    // New threads register and wait.
    let seen: Vec<u64> = (0..3)
        .map(|_| {
            std::thread::spawn(|| {
                let cb = sched::current();
                let w = mpsync::sync::AtomicU32::new(0);
                let _ = sched::park(&w, 0, Some(Duration::from_micros(100)));
                assert!(!sched::is_preempted(cb));
                cb.id()
            })
            .join()
            .unwrap()
        })
        .collect();
    if seen.len() != 3 {
        return Err("threads did not register".into());
    }
    // An emulated scheduler of its own.
    let emu = Emulated::start(
        EmulatedConfig::new(1, 2.0)
            .map_err(|e| e.to_string())?
            .quantum(Duration::from_millis(2))
            .seed(7),
    )
    .map_err(|e| format!("the child could not start an emulated scheduler: {e}"))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            let _a = emu.attach(0).expect("attach in the child");
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(20) {
                std::hint::spin_loop();
            }
        });
    });
    emu.stop();
    Ok(())
}

/// Stops a thread at `point` (it runs `victim`), forks while it is stopped
/// (from `forker`'s thread), checks the child, releases the victim, and
/// checks that the parent goes on. `forker_waits`: the fork itself waits for
/// the victim (it takes the lock the victim holds), so the victim is released
/// while the forker waits.
fn fork_while_stopped_at(
    point: Point,
    victim: impl FnOnce() + Send,
    expect_heartbeats: bool,
    forker_waits: bool,
) -> Result<(), String> {
    let trap = Trap::at(point).arm();
    std::thread::scope(|s| {
        let v = s.spawn(victim);
        trap.wait_hit(Duration::from_secs(30))
            .map_err(|e| e.to_string())?;
        let forked = AtomicBool::new(false);
        let r = std::thread::scope(|s2| {
            let f = s2.spawn(|| {
                let r = fork_child(|| child_works(expect_heartbeats));
                forked.store(true, Ordering::Release);
                r
            });
            if forker_waits {
                std::thread::sleep(Duration::from_millis(100));
                trap.release();
            }
            f.join().unwrap()
        });
        trap.release();
        v.join().map_err(|_| "the victim panicked".to_string())?;
        r
    })
}

/// The parent goes on after the fork: the program loads (where it can) and
/// answers for its threads.
fn parent_goes_on() -> Result<(), String> {
    let answers = native::preemption_answers();
    if ebpf_required() && *answers != native::PreemptionAnswers::Ebpf {
        return Err(format!("the parent has no eBPF answers: {answers:?}"));
    }
    let me = sched::current();
    if *answers == native::PreemptionAnswers::Ebpf
        && native::kernel_state(me) != Some(native::KernelState::Running)
    {
        return Err(format!(
            "the parent's kernel answer: {:?}",
            native::kernel_state(me)
        ));
    }
    Ok(())
}

/// Registers the calling thread (the process's first registration when
/// nothing else registered).
fn register() {
    let _ = sched::current();
}

macro_rules! role_test {
    ($name:ident, $role:literal, $env:expr, $body:expr) => {
        #[test]
        fn $name() {
            if !in_fresh_process(stringify!($name), $role, $env) {
                return;
            }
            let body: fn() -> Result<String, String> = $body;
            match body() {
                Ok(what) => role_ok($role, &what),
                Err(e) => panic!("role {}: {e}", $role),
            }
        }
    };
}

role_test!(fork_before_anything, "fork-before-anything", &[], || {
    // Nothing registered, nothing loading: the child is a process of its own.
    fork_child(|| child_works(false))?;
    parent_goes_on()?;
    Ok("child and parent".into())
});

role_test!(
    fork_while_the_ebpf_program_starts_loading,
    "fork-ebpf-start",
    &[],
    || {
        fork_while_stopped_at(stall::SCHED_EBPF_START, register, true, false)?;
        parent_goes_on()?;
        Ok("forked between the first registration and the loader's start".into())
    }
);

role_test!(
    fork_while_the_ebpf_program_loads,
    "fork-ebpf-loading",
    &[],
    || {
        fork_while_stopped_at(stall::SCHED_EBPF_LOADING, register, true, false)?;
        parent_goes_on()?;
        Ok("forked while the loader loads".into())
    }
);

role_test!(
    fork_after_the_ebpf_program_loaded_before_ready,
    "fork-ebpf-loaded",
    &[],
    || {
        fork_while_stopped_at(stall::SCHED_EBPF_LOADED, register, true, false)?;
        parent_goes_on()?;
        Ok("forked after the load, before ready".into())
    }
);

role_test!(
    fork_after_the_ebpf_program_is_ready,
    "fork-ebpf-ready",
    &[],
    || {
        let answers = native::preemption_answers().clone();
        let loaded = answers == native::PreemptionAnswers::Ebpf;
        fork_child(|| child_works(loaded))?;
        parent_goes_on()?;
        Ok(format!("forked after ready ({})", answers.describe()))
    }
);

/// A registration holds the registry's lock while another thread forks: the
/// fork waits for it (the fork handlers hold the lock across the fork), and
/// the child registers its threads.
fn fork_while_registering() -> Result<String, String> {
    // The forking thread registers first (so the fork handlers are in).
    let loaded = *native::preemption_answers() == native::PreemptionAnswers::Ebpf;
    fork_while_stopped_at(stall::SCHED_REGISTER_LOCKED, register, loaded, true)?;
    parent_goes_on()?;
    Ok("forked while a registration held the registry's lock".into())
}

role_test!(
    fork_while_another_thread_registers,
    "fork-registering",
    &[],
    fork_while_registering
);

role_test!(
    fork_while_another_thread_registers_without_ebpf,
    "fork-registering-no-ebpf",
    NO_EBPF,
    fork_while_registering
);

role_test!(
    fork_while_the_emulated_handlers_are_installed,
    "fork-emu-handler",
    NO_EBPF,
    || {
        let emu = AtomicPtr::<Emulated>::new(std::ptr::null_mut());
        fork_while_stopped_at(
            stall::SCHED_EMU_HANDLER,
            || {
                let e = Emulated::start(EmulatedConfig::new(1, 2.0).unwrap().seed(1)).unwrap();
                emu.store(Box::into_raw(Box::new(e)), Ordering::Release);
            },
            false,
            false,
        )?;
        // SAFETY: made by the victim above, which has finished.
        let e = unsafe { Box::from_raw(emu.load(Ordering::Acquire)) };
        e.stop();
        Ok("forked while the emulated scheduler's handlers were installed".into())
    }
);

role_test!(
    fork_while_a_thread_attaches_to_an_emulated_scheduler,
    "fork-emu-attach",
    NO_EBPF,
    || {
        let emu = Emulated::start(EmulatedConfig::new(1, 2.0).unwrap().seed(2)).unwrap();
        fork_while_stopped_at(
            stall::SCHED_EMU_ATTACH,
            || {
                let _a = emu.attach(0).unwrap();
            },
            false,
            false,
        )?;
        emu.stop();
        Ok("forked while a thread attached (scheduler's lock held)".into())
    }
);

// ---- registrations from thread-exit destructors ----

/// Rounds of thread-specific-data destructors the C library runs
/// (`PTHREAD_DESTRUCTOR_ITERATIONS`, 4 in glibc).
const DESTRUCTOR_ROUNDS: usize = 4;

/// The block a late destructor registered, and its thread's tid.
static LATE_CB: AtomicPtr<ContextBlock> = AtomicPtr::new(std::ptr::null_mut());

/// A key destructor that keeps the rounds going (its value counts them) and,
/// in the C library's last round, uses `sched` — after `sched`'s own exit
/// destructor has run.
extern "C" fn late_user(v: *mut libc::c_void) {
    let round = v as usize;
    if round < DESTRUCTOR_ROUNDS {
        // SAFETY: sets this key (its number is in LATE_KEY) to a non-null
        // value: the C library runs another round.
        unsafe {
            libc::pthread_setspecific(
                late_key(),
                std::ptr::without_provenance::<libc::c_void>(round + 1),
            )
        };
        return;
    }
    let cb = sched::current();
    let w = mpsync::sync::AtomicU32::new(0);
    let _ = sched::park(&w, 0, Some(Duration::from_micros(50)));
    LATE_CB.store(
        cb as *const ContextBlock as *mut ContextBlock,
        Ordering::Release,
    );
}

fn late_key() -> libc::pthread_key_t {
    static KEY: std::sync::OnceLock<libc::pthread_key_t> = std::sync::OnceLock::new();
    *KEY.get_or_init(|| {
        let mut k = 0;
        // SAFETY: `k` is a valid out-pointer; `late_user` accepts our values.
        assert_eq!(
            unsafe { libc::pthread_key_create(&mut k, Some(late_user)) },
            0
        );
        k
    })
}

/// Runs a thread whose last destructor round registers with `sched`; returns
/// the block it took and its tid.
fn a_thread_registering_after_its_last_destructor_round() -> (&'static ContextBlock, u32) {
    LATE_CB.store(std::ptr::null_mut(), Ordering::Relaxed);
    let key = late_key();
    let tid = std::thread::spawn(move || {
        let _ = sched::current();
        // SAFETY: a live key; the value counts destructor rounds.
        unsafe { libc::pthread_setspecific(key, std::ptr::without_provenance::<libc::c_void>(1)) };
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() as u32 }
    })
    .join()
    .unwrap();
    let p = LATE_CB.load(Ordering::Acquire);
    assert!(!p.is_null(), "the last destructor round did not register");
    // SAFETY: registry blocks are never freed.
    (unsafe { &*p }, tid)
}

/// Forks a child that gets `tid` (via `ns_last_pid`, root only); the child
/// runs and sleeps a few ms. Returns `false` where the tid could not be had.
fn fork_with_tid(tid: u32) -> bool {
    for _ in 0..20 {
        if std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", tid - 1)).is_err() {
            return false;
        }
        // SAFETY: the child only spins, sleeps and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(20) {
                std::hint::spin_loop();
            }
            // SAFETY: usleep and _exit have no preconditions.
            unsafe {
                libc::usleep(20_000);
                libc::_exit(0);
            }
        }
        let mut st = 0;
        // SAFETY: waits for that child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        if pid as u32 == tid {
            return true;
        }
    }
    false
}

fn late_registration_is_taken_back() -> Result<String, String> {
    let kernel = *native::preemption_answers() == native::PreemptionAnswers::Ebpf;
    if ebpf_required() && !kernel {
        return Err(format!(
            "MPSYNC_EBPF_REQUIRED=1 but: {}",
            native::preemption_answers().describe()
        ));
    }
    let (cb, tid) = a_thread_registering_after_its_last_destructor_round();
    // The thread has exited. The kernel must not answer for it any more …
    let deadline = Instant::now() + Duration::from_secs(10);
    while native::kernel_state(cb).is_some() {
        if Instant::now() > deadline {
            return Err(format!(
                "the kernel still answers for a thread that exited holding its registration: {:?}",
                native::kernel_view(cb)
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // … nor track into its slot a task that gets its tid later.
    let mut note = String::new();
    if kernel {
        let before = native::kernel_view(cb);
        if fork_with_tid(tid) {
            let after = native::kernel_view(cb);
            if after != before {
                return Err(format!(
                    "a forked child with the exited thread's tid {tid} was tracked into its slot: {before:?} -> {after:?}"
                ));
            }
            note = format!("; a child with tid {tid} was not tracked");
        } else {
            note = format!("; tid {tid} could not be had again (ns_last_pid): not checked");
        }
    }
    // The block comes back once the thread is gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        sched::reclaim_exited_threads();
        if !sched::live_threads().iter().any(|b| std::ptr::eq(*b, cb)) {
            break;
        }
        if Instant::now() > deadline {
            return Err("the block of a thread that exited holding it was never taken back".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // And a new thread can have it.
    let reused = (0..64)
        .map(|_| {
            std::thread::spawn(|| sched::current() as *const ContextBlock as usize)
                .join()
                .unwrap()
        })
        .any(|p| p == cb as *const ContextBlock as usize);
    if !reused {
        return Err("the block taken back was not given to a new thread".into());
    }
    Ok(format!("taken back and reused{note}"))
}

role_test!(
    a_registration_after_the_last_destructor_round_is_taken_back,
    "late-registration",
    &[],
    late_registration_is_taken_back
);

role_test!(
    a_registration_after_the_last_destructor_round_is_taken_back_without_ebpf,
    "late-registration-no-ebpf",
    NO_EBPF,
    late_registration_is_taken_back
);

// ---- threads that exit while registered ----

role_test!(
    threads_that_exit_while_registered_give_everything_back,
    "exit-registered",
    &[],
    || {
        let _ = native::preemption_answers();
        let before = sched::live_threads().len();
        let emu = Emulated::start(EmulatedConfig::new(1, 2.0).unwrap().seed(5)).unwrap();
        let blocks: Vec<usize> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..6)
                .map(|i| {
                    let emu = &emu;
                    s.spawn(move || {
                        let cb = sched::current();
                        match i % 3 {
                            // Exits inside a no-preempt section it never left.
                            0 => std::mem::forget(sched::NoPreempt::new()),
                            // Exits attached (the guard forgotten).
                            1 => std::mem::forget(emu.attach(0).unwrap()),
                            // Exits right after a wait.
                            _ => {
                                let w = mpsync::sync::AtomicU32::new(0);
                                let _ = sched::park(&w, 0, Some(Duration::from_micros(200)));
                            }
                        }
                        cb as *const ContextBlock as usize
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        emu.stop();
        let live = sched::live_threads();
        for b in &blocks {
            if live
                .iter()
                .any(|l| *l as *const ContextBlock as usize == *b)
            {
                return Err("an exited thread's block is still registered".into());
            }
            // SAFETY: registry blocks are never freed.
            let cb = unsafe { &*(*b as *const ContextBlock) };
            if native::kernel_state(cb).is_some() {
                return Err("the kernel still answers for an exited thread".into());
            }
        }
        if sched::live_threads().len() > before {
            return Err("blocks leaked".into());
        }
        if *native::preemption_answers() == native::PreemptionAnswers::Ebpf {
            let deadline = Instant::now() + Duration::from_secs(10);
            while (native::threads_preempted_now(), native::threads_woken_now())
                != (Some(0), Some(0))
            {
                if Instant::now() > deadline {
                    return Err("the counts did not return to 0".into());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok("blocks back, kernel silent, counts 0".into())
    }
);

// ---- MPSYNC_EBPF=off ----

role_test!(
    with_ebpf_off_every_kernel_answer_is_none,
    "ebpf-off",
    NO_EBPF,
    || {
        let a = native::preemption_answers();
        match a {
            // Off, and said so; or not even built (`MPSYNC_CLANG=none
            // MPSYNC_BPF_OBJECT=none`, which .ci/run builds; or no clang and a
            // stale committed object), which the library says first: either way
            // no kernel answers.
            native::PreemptionAnswers::Heartbeat(why)
                if why.contains("MPSYNC_EBPF=off") || why.contains("eBPF not built") => {}
            other => return Err(format!("MPSYNC_EBPF=off, yet: {other:?}")),
        }
        let me = sched::current();
        let none = native::kernel_state(me).is_none()
            && native::kernel_view(me).is_none()
            && native::kernel_key(me).is_none()
            && (0..64).all(|k| native::kernel_state_at(k).is_none())
            && native::threads_preempted_now().is_none()
            && native::threads_woken_now().is_none()
            && native::cpu_pressure().is_none()
            && native::switch_ins_repaired().is_none()
            && !native::hide_next_switch_in(me, false);
        if !none {
            return Err("a kernel answer with MPSYNC_EBPF=off".into());
        }
        // A lock that asks the kernel works without it.
        let m: mpsync::lock::Mutex<mpsync::lock::TicketNp, u64> = mpsync::lock::Mutex::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        *m.lock() += 1;
                    }
                });
            }
        });
        if *m.lock() != 4000 {
            return Err("Ticket-np lost an increment".into());
        }
        fork_child(|| child_works(false))?;
        Ok("no kernel answers; heartbeats; Ticket-np and fork work".into())
    }
);

/// A thread-local's destructor that uses `sched` (a lock's node cache, a
/// reclaimer's registration) runs on the thread's own block, which goes back
/// after it: nothing leaks, nothing waits.
#[test]
fn a_thread_local_destructor_may_use_sched() {
    struct UsesSched(std::sync::mpsc::Sender<usize>);
    impl Drop for UsesSched {
        fn drop(&mut self) {
            let cb = sched::current();
            let w = mpsync::sync::AtomicU32::new(0);
            let _ = sched::park(&w, 0, Some(Duration::from_micros(50)));
            assert!(!sched::is_preempted(cb));
            let _ = self.0.send(cb as *const ContextBlock as usize);
        }
    }
    thread_local! {
        static HOLD: std::cell::RefCell<Option<UsesSched>> = const { std::cell::RefCell::new(None) };
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let during = std::thread::spawn(move || {
        HOLD.with(|h| *h.borrow_mut() = Some(UsesSched(tx)));
        sched::current() as *const ContextBlock as usize
    })
    .join()
    .unwrap();
    let in_destructor = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(
        in_destructor, during,
        "the destructor registered anew instead of using the thread's block"
    );
    assert!(
        !sched::live_threads()
            .iter()
            .any(|b| *b as *const ContextBlock as usize == during),
        "the block of a thread whose thread-local destructor used sched was not given back"
    );
}
