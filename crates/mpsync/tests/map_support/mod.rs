//! Helpers shared by the maps' hostile-user suite (`tests/map_hostile.rs`) and
//! progress matrix (`tests/map_progress.rs`).

#![allow(dead_code)] // each test binary uses its own part

use std::hash::{BuildHasher, Hasher};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long an operation that must complete may take: generous (a loaded
/// 2-core CI machine, the chaos build's stalls), since a test fails only when
/// it is exceeded and the operations themselves take microseconds.
pub fn bound() -> Duration {
    Duration::from_secs(if mpsync::sync::CHAOS { 30 } else { 10 })
}

/// A call still running past its bound: its thread, to join once whatever
/// held it up is released.
pub struct Overdue<T>(pub JoinHandle<T>);

/// Runs `f` on a thread of its own and waits at most `limit` for it: its value,
/// or [`Overdue`] (a hang turned into a bounded failure). A panic in `f` is
/// re-raised here.
pub fn within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Overdue<T>> {
    let (tx, rx) = mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        let v = f();
        let _ = tx.send(());
        v
    });
    match rx.recv_timeout(limit) {
        // Sent, or the thread ended (a panic: dropped the sender).
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Ok(v) => Ok(v),
            Err(p) => std::panic::resume_unwind(p),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => Err(Overdue(h)),
    }
}

/// Runs `f` within [`bound`], or fails the test with `what` (the thread that
/// hangs is left behind: nothing can stop it).
pub fn must_complete<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    match within(bound(), f) {
        Ok(v) => v,
        Err(_) => panic!(
            "{what} did not complete within {:?}: a deadlock or livelock",
            bound()
        ),
    }
}

/// A hasher that puts keys below 100 in a table's first bucket and the others
/// in its last (multiply-shift bucket index of hash 0 and hash `u64::MAX`),
/// whatever the bucket count: tests choose which keys share a chain.
#[derive(Debug, Default, Clone, Copy)]
pub struct Split;

/// [`Split`]'s hasher: the last `u64` written decides.
#[derive(Debug, Default)]
pub struct SplitHasher(u64);

impl Hasher for SplitHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut b = [0u8; 8];
        let n = bytes.len().min(8);
        b[..n].copy_from_slice(&bytes[..n]);
        self.0 = u64::from_le_bytes(b);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
    fn finish(&self) -> u64 {
        if self.0 >= 100 { u64::MAX } else { 0 }
    }
}

impl BuildHasher for Split {
    type Hasher = SplitHasher;
    fn build_hasher(&self) -> SplitHasher {
        SplitHasher::default()
    }
}

// ---- hostile keys and values ---------------------------------------------------

use std::cell::{Cell, RefCell};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// What a [`Hostile`] runs from one of its trait methods: any code at all (it
/// may re-enter the map that called it, or panic).
pub type HookFn = std::sync::Arc<dyn Fn(u64) + Send + Sync>;

/// Keeps the panics the hooks make on purpose (their message says so) out of
/// the test output; any other panic is reported as usual.
pub fn quiet_deliberate_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str))
                .unwrap_or("");
            if !msg.contains("(on purpose)") {
                default(info)
            }
        }));
    });
}

/// One hook slot.
#[derive(Default)]
pub struct Hook(Mutex<Option<HookFn>>);

thread_local! {
    /// A hook is running on this thread: hooks do not fire again inside it
    /// (an `Eq` hook that reads the map would otherwise compare keys and fire
    /// itself forever).
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

impl Hook {
    /// Runs `f(arg)` from now on.
    pub fn set(&self, f: impl Fn(u64) + Send + Sync + 'static) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::sync::Arc::new(f));
    }

    /// Runs `f(arg)` from now on, the first `budget` times only (a hook whose
    /// work makes more values, whose hooks would do the same, without end).
    pub fn set_budgeted(&self, budget: usize, f: impl Fn(u64) + Send + Sync + 'static) {
        let left = AtomicU64::new(budget as u64);
        self.set(move |arg| {
            if left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
                .is_ok()
            {
                f(arg)
            }
        });
    }

    /// Panics (with `msg`) at the next firing, once; inert after.
    pub fn panic_once(&self, msg: &'static str) {
        quiet_deliberate_panics();
        let armed = AtomicBool::new(true);
        self.set(move |_| {
            if armed.swap(false, Ordering::SeqCst) {
                panic!("{msg}");
            }
        });
    }

    /// Inert from now on (breaks the cycle a hook that holds its map makes).
    pub fn clear(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn fire(&self, arg: u64) {
        if IN_HOOK.get() {
            return;
        }
        // Cloned out: the hook runs without the slot's mutex held.
        let f = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(f) = f {
            struct Out;
            impl Drop for Out {
                fn drop(&mut self) {
                    IN_HOOK.set(false);
                }
            }
            IN_HOOK.set(true);
            let _out = Out;
            f(arg);
        }
    }
}

/// The hooks of a family of [`Hostile`]s, and their census.
#[derive(Default)]
pub struct Hooks {
    pub on_drop: Hook,
    pub on_clone: Hook,
    pub on_hash: Hook,
    pub on_eq: Hook,
    /// Made (new or cloned) minus dropped: 0 once everything is dropped,
    /// whatever ran in between (a double drop or a leak shows here).
    pub live: AtomicI64,
    next_id: AtomicU64,
}

impl Hooks {
    pub fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self::default())
    }

    pub fn clear(&self) {
        for h in [&self.on_drop, &self.on_clone, &self.on_hash, &self.on_eq] {
            h.clear();
        }
    }

    pub fn live(&self) -> i64 {
        self.live.load(Ordering::SeqCst)
    }
}

/// A key or value whose `Drop`, `Clone`, `Hash` and `Eq`/`Ord` run its
/// family's hooks. `k` is the key (or, for a value, the key it belongs to);
/// `id` is unique in the family (a clone gets a new one).
pub struct Hostile {
    pub k: u64,
    pub id: u64,
    hooks: std::sync::Arc<Hooks>,
}

impl Hostile {
    pub fn new(k: u64, hooks: &std::sync::Arc<Hooks>) -> Self {
        hooks.live.fetch_add(1, Ordering::SeqCst);
        Hostile {
            k,
            id: hooks.next_id.fetch_add(1, Ordering::SeqCst),
            hooks: hooks.clone(),
        }
    }
}

impl Hostile {
    /// Its family's hooks (to make more of the family).
    pub fn hooks(&self) -> std::sync::Arc<Hooks> {
        self.hooks.clone()
    }
}

impl std::fmt::Debug for Hostile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hostile({}#{})", self.k, self.id)
    }
}

impl Clone for Hostile {
    fn clone(&self) -> Self {
        self.hooks.on_clone.fire(self.k);
        Hostile::new(self.k, &self.hooks)
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.hooks.live.fetch_sub(1, Ordering::SeqCst);
        self.hooks.on_drop.fire(self.id);
    }
}

impl std::hash::Hash for Hostile {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.hooks.on_hash.fire(self.k);
        self.k.hash(h);
    }
}

impl PartialEq for Hostile {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o).is_eq()
    }
}
impl Eq for Hostile {}
impl PartialOrd for Hostile {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Hostile {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.hooks.on_eq.fire(self.k);
        o.hooks.on_eq.fire(o.k);
        self.k.cmp(&o.k)
    }
}

// ---- a registration kept in a thread_local! -------------------------------------

use mpsync::reclaim::Reclaimer;

thread_local! {
    /// This thread's registrations, by domain address (as a user keeps one in
    /// a `thread_local!` and uses it from anywhere, `Drop`s included).
    static REGS: RefCell<Vec<(usize, Box<dyn std::any::Any>)>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's registration in `d` kept in a `thread_local!`
/// (made on first use; the same one for nested calls).
pub fn tls_local<R: Reclaimer, T>(d: &mpsync::sync::Arc<R>, f: impl FnOnce(&R::Local) -> T) -> T
where
    R::Local: 'static,
{
    let key = mpsync::sync::Arc::as_ptr(d) as usize;
    if !REGS.with(|r| r.borrow().iter().any(|(k, _)| *k == key)) {
        let l = R::register(d);
        REGS.with(|r| r.borrow_mut().push((key, Box::new(l))));
    }
    REGS.with(|r| {
        let r = r.borrow();
        let l = r
            .iter()
            .find(|(k, _)| *k == key)
            .expect("made above")
            .1
            .downcast_ref();
        f(l.expect("a registration of this scheme"))
    })
}

/// As [`tls_local`], with the registration exclusively (for `quiescent`): it
/// is taken out of the store meanwhile (an operation `f` runs on this thread
/// — a drop reclamation runs — registers anew), then put back.
pub fn tls_local_mut<R: Reclaimer, T>(
    d: &mpsync::sync::Arc<R>,
    f: impl FnOnce(&mut R::Local) -> T,
) -> T
where
    R::Local: 'static,
{
    tls_local(d, |_| ());
    let key = mpsync::sync::Arc::as_ptr(d) as usize;
    let mut entry = REGS.with(|r| {
        let mut r = r.borrow_mut();
        let i = r.iter().position(|(k, _)| *k == key).expect("made above");
        r.remove(i)
    });
    let out = f(entry
        .1
        .downcast_mut()
        .expect("a registration of this scheme"));
    REGS.with(|r| r.borrow_mut().insert(0, entry));
    out
}

/// Drops this thread's `thread_local!` registration in `d` (it keeps `d` alive).
pub fn tls_forget<R: Reclaimer>(d: &mpsync::sync::Arc<R>) {
    let key = mpsync::sync::Arc::as_ptr(d) as usize;
    let gone: Vec<_> = REGS.with(|r| {
        let mut r = r.borrow_mut();
        let (gone, kept) = std::mem::take(&mut *r)
            .into_iter()
            .partition(|(k, _)| *k == key);
        *r = kept;
        gone
    });
    drop(gone); // outside the borrow: leaving may run drops that use the store
}
