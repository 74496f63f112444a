//! Which lock the interposer uses (`MPSYNC_LOCK`), read once, and its
//! one-line messages on stderr.
//!
//! Nothing here allocates or takes a lock: the variable is read with
//! `getenv` (no copy) on the first mutex operation that needs a lock, and
//! messages go to file descriptor 2 with one `write` each, so this runs safely
//! from the first `pthread_mutex_lock` of a program (before `main`, inside an
//! allocator, in an `atexit` handler).

use std::ffi::CStr;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

/// The locks `MPSYNC_LOCK` may name, in the order of the error message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// `bounded-steal`: [`mpsync::lock::BoundedSteal`], the lock behind
    /// `mpsync::Mutex` (the default).
    BoundedSteal = 1,
    /// `tas-b-np`: [`mpsync::lock::TasBNp`].
    TasBNp,
    /// `smart-q`: [`mpsync::lock::SmartQ`].
    SmartQ,
    /// `mcs-tp`: [`mpsync::lock::McsTp`].
    McsTp,
    /// `ticket-np`: [`mpsync::lock::TicketNp`].
    TicketNp,
    /// `spin-then-park`: [`mpsync::lock::SpinThenPark`].
    SpinThenPark,
    /// `native`: [`mpsync::lock::Native`] (a futex lock, as glibc's).
    Native,
}

impl Kind {
    /// Every kind, in the order the error message names them.
    pub const ALL: [Kind; 7] = [
        Kind::BoundedSteal,
        Kind::TasBNp,
        Kind::SmartQ,
        Kind::McsTp,
        Kind::TicketNp,
        Kind::SpinThenPark,
        Kind::Native,
    ];

    /// The name `MPSYNC_LOCK` uses, NUL-terminated for C.
    pub const fn c_name(self) -> &'static CStr {
        match self {
            Kind::BoundedSteal => c"bounded-steal",
            Kind::TasBNp => c"tas-b-np",
            Kind::SmartQ => c"smart-q",
            Kind::McsTp => c"mcs-tp",
            Kind::TicketNp => c"ticket-np",
            Kind::SpinThenPark => c"spin-then-park",
            Kind::Native => c"native",
        }
    }

    /// The name `MPSYNC_LOCK` uses.
    pub fn name(self) -> &'static str {
        // The names are ASCII literals.
        self.c_name().to_str().unwrap_or("?")
    }

    fn from_u8(v: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| *k as u8 == v)
    }

    /// The kind `value` names, if any.
    pub fn parse(value: &[u8]) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.c_name().to_bytes() == value)
    }
}

/// The default: what `mpsync::Mutex` uses.
pub const DEFAULT: Kind = Kind::BoundedSteal;

/// 0 until decided, then a `Kind`.
static KIND: AtomicU8 = AtomicU8::new(0);

/// The lock in use: `MPSYNC_LOCK`, read at the first call. An unknown value is
/// said once on stderr, naming the valid ones, and the default is used.
#[inline]
pub fn kind() -> Kind {
    // Relaxed: the value is a pure function of the environment; nothing else
    // is published with it.
    match Kind::from_u8(KIND.load(Ordering::Relaxed)) {
        Some(k) => k,
        None => decide(),
    }
}

#[cold]
fn decide() -> Kind {
    // SAFETY: the name is NUL-terminated; `getenv` returns null or a pointer to
    // a NUL-terminated string in the environment, which we only read here.
    let raw = unsafe { libc::getenv(c"MPSYNC_LOCK".as_ptr()) };
    let value = if raw.is_null() {
        None
    } else {
        // SAFETY: see above: a NUL-terminated string.
        Some(unsafe { CStr::from_ptr(raw) }.to_bytes())
    };
    let (kind, bad) = match value {
        None | Some(b"") => (DEFAULT, false),
        Some(v) => match Kind::parse(v) {
            Some(k) => (k, false),
            None => (DEFAULT, true),
        },
    };
    // Relaxed: see `kind`. Only the thread that decides first speaks.
    if KIND
        .compare_exchange(0, kind as u8, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
    {
        if bad {
            let mut line = Line::new();
            line.push(b"mpsync-pthread: MPSYNC_LOCK=");
            line.push(value.unwrap_or_default());
            line.push(b" is not a lock; use one of ");
            for (i, k) in Kind::ALL.into_iter().enumerate() {
                if i > 0 {
                    line.push(b", ");
                }
                line.push(k.c_name().to_bytes());
            }
            line.push(b" (using ");
            line.push(DEFAULT.c_name().to_bytes());
            line.push(b")\n");
            line.write();
        }
        if verbose() {
            let mut line = Line::new();
            line.push(b"mpsync-pthread: interposing pthread mutexes and condvars with ");
            line.push(kind.c_name().to_bytes());
            line.push(b"\n");
            line.write();
        }
    }
    // Relaxed: as above.
    Kind::from_u8(KIND.load(Ordering::Relaxed)).unwrap_or(kind)
}

/// Whether `MPSYNC_PTHREAD_VERBOSE=1` (read each time it is asked: rarely).
fn verbose() -> bool {
    // SAFETY: as in `decide`.
    let raw = unsafe { libc::getenv(c"MPSYNC_PTHREAD_VERBOSE".as_ptr()) };
    // SAFETY: as in `decide`.
    !raw.is_null() && unsafe { CStr::from_ptr(raw) }.to_bytes() == b"1"
}

/// Kinds of mutex and condvar that go to glibc, each said once.
#[derive(Debug, Clone, Copy)]
#[repr(u32)]
pub enum Delegated {
    /// `PTHREAD_MUTEX_RECURSIVE`.
    Recursive = 1,
    /// `PTHREAD_MUTEX_ERRORCHECK`.
    ErrorCheck = 2,
    /// `PTHREAD_MUTEX_ROBUST`.
    Robust = 4,
    /// `PTHREAD_PRIO_INHERIT`.
    PrioInherit = 8,
    /// `PTHREAD_PRIO_PROTECT`.
    PrioProtect = 16,
    /// `PTHREAD_PROCESS_SHARED` mutexes.
    SharedMutex = 32,
    /// `PTHREAD_PROCESS_SHARED` condition variables.
    SharedCond = 64,
    /// A process-shared condvar waited on with an interposed mutex (refused).
    SharedCondPrivateMutex = 128,
}

impl Delegated {
    fn what(self) -> &'static [u8] {
        match self {
            Delegated::Recursive => b"recursive mutexes go to glibc's implementation",
            Delegated::ErrorCheck => b"error-checking mutexes go to glibc's implementation",
            Delegated::Robust => b"robust mutexes go to glibc's implementation",
            Delegated::PrioInherit => {
                b"priority-inheritance mutexes go to glibc's implementation"
            }
            Delegated::PrioProtect => b"priority-protect mutexes go to glibc's implementation",
            Delegated::SharedMutex => b"process-shared mutexes go to glibc's implementation",
            Delegated::SharedCond => {
                b"process-shared condition variables go to glibc's implementation"
            }
            Delegated::SharedCondPrivateMutex => {
                b"a process-shared condition variable waited on with a non-shared mutex: EINVAL (make the mutex process-shared too)"
            }
        }
    }
}

/// The kinds said so far.
static SAID: AtomicU32 = AtomicU32::new(0);

/// Says on stderr, once per kind and process, that `d` goes to glibc.
#[inline]
pub fn note(d: Delegated) {
    // Relaxed: a message flag; nothing is published with it.
    if SAID.load(Ordering::Relaxed) & d as u32 == 0 {
        note_slow(d);
    }
}

#[cold]
fn note_slow(d: Delegated) {
    // Relaxed: as above; the fetch_or makes one thread the speaker.
    if SAID.fetch_or(d as u32, Ordering::Relaxed) & d as u32 == 0 {
        let mut line = Line::new();
        line.push(b"mpsync-pthread: ");
        line.push(d.what());
        line.push(b"\n");
        line.write();
    }
}

/// One line of stderr, built without allocating and written with one `write`.
struct Line {
    buf: [u8; 512],
    len: usize,
}

impl Line {
    fn new() -> Self {
        Self {
            buf: [0; 512],
            len: 0,
        }
    }

    /// Appends `b`, cut short if the line is full.
    fn push(&mut self, b: &[u8]) {
        let n = b.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
    }

    fn write(&self) {
        // SAFETY: `buf[..len]` is initialized memory we own; a short or failed
        // write of a diagnostic is ignored.
        let _ = unsafe { libc::write(2, self.buf.as_ptr().cast(), self.len) };
    }
}
