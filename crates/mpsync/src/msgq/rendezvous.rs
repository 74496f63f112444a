//! Rendezvous: the Unix socket through which a process connects to an endpoint
//! and learns from the kernel, not from the other side's words, who that side is.
//!
//! An endpoint's name is an *abstract* Unix stream socket,
//! `"\0mpsync.<euid>.<name>"`. Binding it is exclusive by the kernel (a second
//! binder gets `EADDRINUSE`: [`Error::Exists`]), and the name vanishes when the
//! last descriptor of the socket closes — no stale names, nothing to unlink.
//! One thread per [`Listener`] ("mpsync-msgq") blocks in `poll(2)` on a stop
//! eventfd, the listening socket and every open connection. It accepts a
//! connection, asks the kernel who connected (`SO_PEERCRED`), refuses other
//! users, lets the [`ConnHandler`] set the connection up, and sends the client
//! ONE message (the hello and up to [`MAX_FDS`] descriptors); from then on it
//! only watches the socket: its hang-up (the client's process is gone — the
//! kernel closed its descriptors — or it closed the connection) or any byte
//! from the client (a client never writes) closes the connection, reported by
//! [`ConnHandler::closed`]. Nothing a client does can block the thread: it
//! never reads more than a byte and never waits to send.
//!
//! The client ([`connect`]) checks the server's `SO_PEERCRED` uid too (anyone
//! can bind a name in the abstract namespace, even ours), then waits, up to its
//! timeout, for the one message, and keeps the socket open for as long as the
//! [`Connection`] lives: that is its liveness signal to the server.
//!
//! # The message (server → client, once per connection)
//!
//! | bytes | field   | value                                           |
//! |-------|---------|-------------------------------------------------|
//! | 0..8  | magic   | `"MPSYNCRV"`                                    |
//! | 8..10 | version | 1, little-endian                                |
//! | 10    | status  | 0 = ok, 1 = refused                             |
//! | 11    | fds     | descriptors attached (`SCM_RIGHTS`), ≤ 4; 0 when refused |
//! | 12..16| len     | body bytes, little-endian, ≤ [`MAX_HELLO`]      |
//! | 16..  | body    | ok: the hello; refused: a one-line reason (UTF-8) |
//!
//! It is sent with one `sendmsg(MSG_DONTWAIT | MSG_NOSIGNAL)`; a send that
//! would block or fails closes the connection.

use super::Error;
use super::memfd::os;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest hello (and refusal text), in bytes.
pub(crate) const MAX_HELLO: usize = 512;
/// Most descriptors one hello carries.
pub(crate) const MAX_FDS: usize = 4;
/// Most connections one listener watches at once; beyond, it refuses.
pub(crate) const MAX_CONNS: usize = 4096;

const MAGIC: [u8; 8] = *b"MPSYNCRV";
const VERSION: u16 = 1;
const HEADER: usize = 16;
const STATUS_OK: u8 = 0;
const STATUS_REFUSED: u8 = 1;
/// The listening socket's backlog.
const BACKLOG: libc::c_int = 128;
/// How long the listener stops accepting after `accept` ran out of
/// descriptors or memory (so that it does not spin on a readable listener).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// Who is on the other side of a connection, as the kernel saw it
/// (`SO_PEERCRED`): a client's at `connect`, a server's at `listen`.
///
/// `pid` is 0 if that process is in a pid namespace this one cannot see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credentials {
    /// Process id.
    pub pid: u32,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
}

/// What a [`ConnHandler`] offers a client it accepts.
#[derive(Debug)]
pub(crate) struct Offer {
    /// At most [`MAX_HELLO`] bytes, delivered to the client as they are.
    pub hello: Vec<u8>,
    /// At most [`MAX_FDS`] descriptors, sent with the hello (the listener
    /// closes these copies once sent).
    pub fds: Vec<OwnedFd>,
    /// Names the connection in [`ConnHandler::closed`].
    pub key: u64,
}

/// The endpoint's side of connection set-up, run on the listener's thread.
pub(crate) trait ConnHandler: Send {
    /// A client of this user connected: set up the connection, or refuse it
    /// with a one-line reason (sent to the client). An offer larger than
    /// [`MAX_HELLO`] / [`MAX_FDS`] is refused and then reported `closed`.
    fn opened(&mut self, cred: Credentials) -> Result<Offer, String>;
    /// A connection set up by `opened` is gone: its client hung up or died,
    /// misbehaved, could not be sent its hello, or the listener stopped.
    /// Called exactly once per accepted offer.
    fn closed(&mut self, key: u64);
}

fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The abstract address `"\0mpsync.<euid>.<name>"` and its length.
fn address(euid: u32, name: &str) -> Result<(libc::sockaddr_un, libc::socklen_t), Error> {
    let path = format!("mpsync.{euid}.{name}");
    // SAFETY: an all-zero sockaddr_un is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { zeroed() };
    if name.is_empty() || name.bytes().any(|b| b == 0) || path.len() >= addr.sun_path.len() {
        return Err(Error::InvalidArgument(format!(
            "endpoint name {name:?}: must be 1..=16 characters of A-Z a-z 0-9 . _ -"
        )));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // sun_path[0] stays 0: the abstract namespace. The name is not NUL-terminated.
    for (d, &s) in addr.sun_path[1..].iter_mut().zip(path.as_bytes()) {
        *d = s as libc::c_char;
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + 1 + path.len();
    Ok((addr, len as libc::socklen_t))
}

/// A new Unix stream socket, close-on-exec and non-blocking.
fn unix_socket() -> Result<OwnedFd, Error> {
    // SAFETY: plain flags; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return Err(os("socket(AF_UNIX, SOCK_STREAM)"));
    }
    // SAFETY: socket just returned it; owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `connect(2)` to `addr`; Unix stream connects never return EINPROGRESS
/// (a full backlog on a non-blocking socket is EAGAIN).
fn connect_to(sock: BorrowedFd<'_>, addr: &(libc::sockaddr_un, libc::socklen_t)) -> io::Result<()> {
    loop {
        // SAFETY: `addr.0` is a valid sockaddr_un of length `addr.1`.
        let r = unsafe { libc::connect(sock.as_raw_fd(), (&raw const addr.0).cast(), addr.1) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `bind(2)` of `sock` to `addr`.
fn bind_to(sock: BorrowedFd<'_>, addr: &(libc::sockaddr_un, libc::socklen_t)) -> io::Result<()> {
    // SAFETY: `addr.0` is a valid sockaddr_un of length `addr.1`.
    let r = unsafe { libc::bind(sock.as_raw_fd(), (&raw const addr.0).cast(), addr.1) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The credentials the kernel recorded for the other end of `sock`.
fn peer_cred(sock: BorrowedFd<'_>) -> io::Result<Credentials> {
    // SAFETY: an all-zero ucred is a valid value.
    let mut c: libc::ucred = unsafe { zeroed() };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `c` is writable for `len` bytes, the size SO_PEERCRED writes.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut c).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Credentials {
        pid: c.pid as u32,
        uid: c.uid,
        gid: c.gid,
    })
}

/// The 16-byte header of the one message.
fn header(status: u8, nfds: u8, len: u32) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(&MAGIC);
    h[8..10].copy_from_slice(&VERSION.to_le_bytes());
    h[10] = status;
    h[11] = nfds;
    h[12..].copy_from_slice(&len.to_le_bytes());
    h
}

/// Room for the control message of [`MAX_FDS`] descriptors (u64s: aligned for
/// `cmsghdr`).
const CMSG_WORDS: usize = 8;
const _: () = {
    // SAFETY: CMSG_SPACE is pure arithmetic.
    let need = unsafe { libc::CMSG_SPACE((MAX_FDS * size_of::<RawFd>()) as u32) } as usize;
    assert!(need <= CMSG_WORDS * 8);
};

/// One `sendmsg(MSG_DONTWAIT | MSG_NOSIGNAL)` of `bytes` with `fds` attached;
/// the number of bytes sent.
fn send_with_fds(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<usize> {
    let mut cmsg = [0u64; 2 * CMSG_WORDS];
    let fd_bytes = size_of::<RawFd>() * fds.len();
    // SAFETY: pure arithmetic.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    if space > size_of::<[u64; 2 * CMSG_WORDS]>() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: an all-zero msghdr is a valid value.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = cmsg.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: [1] msg_control points at `space` writable, aligned bytes, so
        // CMSG_FIRSTHDR is a valid cmsghdr in it; [2] CMSG_DATA of it has room
        // for `fd_bytes` (CMSG_SPACE counted them), written unaligned.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            let data = libc::CMSG_DATA(c).cast::<RawFd>();
            for (i, fd) in fds.iter().enumerate() {
                data.add(i).write_unaligned(fd.as_raw_fd());
            }
        }
    }
    loop {
        // SAFETY: `msg` points at `iov` (valid for `bytes.len()` bytes, only
        // read) and at the control buffer, all live across the call.
        let r = unsafe {
            libc::sendmsg(
                sock.as_raw_fd(),
                &msg,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sends the one message, whole, or fails.
fn send_message(sock: BorrowedFd<'_>, status: u8, body: &[u8], fds: &[OwnedFd]) -> io::Result<()> {
    debug_assert!(body.len() <= MAX_HELLO && fds.len() <= MAX_FDS);
    let mut bytes = Vec::with_capacity(HEADER + body.len());
    bytes.extend_from_slice(&header(status, fds.len() as u8, body.len() as u32));
    bytes.extend_from_slice(body);
    let fds: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
    let n = send_with_fds(sock, &bytes, &fds)?;
    if n != bytes.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short send"));
    }
    Ok(())
}

/// Sends a refusal (best effort: the connection is closed next anyway).
fn refuse(sock: BorrowedFd<'_>, text: &str) {
    let mut end = text.len().min(MAX_HELLO);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let _ = send_message(sock, STATUS_REFUSED, &text.as_bytes()[..end], &[]);
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One watched connection.
struct Conn {
    sock: OwnedFd,
    key: u64,
}

/// The descriptors of a listener, shared by the `Listener` and its thread.
///
/// In the process that bound it, only the thread closes the listening socket
/// and the connections (when it stops); the `Listener` only signals `stop` and
/// lets go of its reference, so the thread may poll the raw descriptors
/// without the lock. A forked child has copies of all of them and no thread:
/// its `Listener::drop` closes them, the socket and the connections under the
/// mutex (which the thread holds only while it handles events).
struct Shared {
    stop: OwnedFd,
    state: Mutex<State>,
}

struct State {
    sock: Option<OwnedFd>,
    conns: Vec<Conn>,
}

/// A bound endpoint name and the thread that serves it.
///
/// Dropping it stops the thread (every open connection is then reported
/// [`ConnHandler::closed`]) and frees the name. A forked child that inherited
/// it keeps the name bound (the kernel frees it when the last descriptor of the
/// socket closes) until the child drops its copy or exits; dropping it in the
/// child only closes the child's descriptors: the thread and the handler stay
/// the parent's.
pub(crate) struct Listener {
    name: String,
    owner: u32,
    /// `None` only inside `drop`.
    shared: Option<Arc<Shared>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("name", &self.name)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl Listener {
    /// Binds endpoint `name` (validated by the caller) and starts its thread,
    /// which calls `handler` for every connection. `Error::Exists` if the name
    /// is bound, naming the holder's pid and uid when it answers.
    pub(crate) fn bind(name: &str, handler: Box<dyn ConnHandler>) -> Result<Self, Error> {
        Self::bind_limited(name, handler, MAX_CONNS)
    }

    fn bind_limited(
        name: &str,
        handler: Box<dyn ConnHandler>,
        max_conns: usize,
    ) -> Result<Self, Error> {
        let euid = geteuid();
        let addr = address(euid, name)?;
        let sock = unix_socket()?;
        if let Err(e) = bind_to(sock.as_fd(), &addr) {
            if e.raw_os_error() == Some(libc::EADDRINUSE) {
                return Err(Error::Exists(exists_text(name, &addr)));
            }
            return Err(Error::Os(format!("bind of endpoint name {name:?}"), e));
        }
        // SAFETY: our bound socket.
        if unsafe { libc::listen(sock.as_raw_fd(), BACKLOG) } != 0 {
            return Err(os(format!("listen on endpoint name {name:?}")));
        }
        // SAFETY: plain flags; the result is checked.
        let stop = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if stop < 0 {
            return Err(os("eventfd"));
        }
        // SAFETY: eventfd just returned it; owned by nobody else.
        let stop = unsafe { OwnedFd::from_raw_fd(stop) };
        let shared = Arc::new(Shared {
            stop,
            state: Mutex::new(State {
                sock: Some(sock),
                conns: Vec::new(),
            }),
        });
        let server = Server {
            name: name.to_string(),
            euid,
            max_conns,
            handler,
            shared: shared.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("mpsync-msgq".into())
            .spawn(move || server.run())
            .map_err(|e| Error::Os("spawning the mpsync-msgq thread".into(), e))?;
        Ok(Self {
            name: name.to_string(),
            owner: std::process::id(),
            shared: Some(shared),
            thread: Some(thread),
        })
    }
}

/// The text of `Error::Exists` for a bound name: asks the holder who it is.
fn exists_text(name: &str, addr: &(libc::sockaddr_un, libc::socklen_t)) -> String {
    let holder = unix_socket()
        .map_err(|e| io::Error::other(e.to_string()))
        .and_then(|s| {
            connect_to(s.as_fd(), addr)?;
            peer_cred(s.as_fd())
        });
    match holder {
        Ok(c) => format!(
            "endpoint {name:?} exists: pid {} (uid {}) holds the name; choose another name",
            c.pid, c.uid
        ),
        Err(e) => format!(
            "endpoint {name:?} exists (its holder did not say who it is: {e}); choose another name"
        ),
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let thread = self.thread.take();
        let Some(shared) = self.shared.take() else {
            return;
        };
        if std::process::id() != self.owner {
            // A forked child: the thread, the handler and the eventfd's other
            // users are the parent's. Close only this process's descriptors.
            std::mem::forget(thread);
            match Arc::try_unwrap(shared) {
                // The thread had already let go of it: nothing else refers to
                // these descriptors, drop them all.
                Ok(shared) => drop(shared),
                Err(shared) => {
                    // The thread's reference lives in memory no code of this
                    // process will run again, so `Shared` is never dropped here:
                    // close our copies by hand, once. Under the lock (free unless
                    // the fork came while the thread handled an event, and then
                    // the copies stay open until this process exits).
                    if let Ok(mut st) = shared.state.try_lock() {
                        drop(st.sock.take());
                        drop(std::mem::take(&mut st.conns));
                    }
                    // SAFETY: our copy of the eventfd, closed once: its
                    // OwnedFd is never dropped in this process (see above).
                    unsafe { libc::close(shared.stop.as_raw_fd()) };
                    std::mem::forget(shared);
                }
            }
            return;
        }
        // SAFETY: writing 1 to our eventfd (non-blocking; cannot overflow).
        unsafe { libc::eventfd_write(shared.stop.as_raw_fd(), 1) };
        drop(shared);
        if let Some(t) = thread {
            if t.thread().id() == std::thread::current().id() {
                // Dropped by the handler, on the thread itself: it stops after
                // this event and closes everything when it lets go of `shared`.
                return;
            }
            let _ = t.join();
        }
    }
}

/// The listener thread's state.
struct Server {
    name: String,
    euid: u32,
    max_conns: usize,
    handler: Box<dyn ConnHandler>,
    shared: Arc<Shared>,
}

impl Server {
    fn run(mut self) {
        let shared = self.shared.clone();
        let stop = shared.stop.as_raw_fd();
        let mut pfds: Vec<libc::pollfd> = Vec::new();
        let mut paused_until: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if paused_until.is_some_and(|t| now >= t) {
                paused_until = None;
            }
            {
                let st = lock(&shared.state);
                pfds.clear();
                let listen = match (&st.sock, paused_until) {
                    (Some(s), None) => s.as_raw_fd(),
                    _ => -1, // poll ignores negative descriptors
                };
                for fd in [stop, listen] {
                    pfds.push(libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    });
                }
                pfds.extend(st.conns.iter().map(|c| libc::pollfd {
                    fd: c.sock.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }));
            }
            let timeout = paused_until.map_or(-1, |t| ms_until(t, Instant::now()));
            // SAFETY: `pfds` is a valid array of `pfds.len()` pollfds; the
            // descriptors stay open: only this thread closes them (see Shared).
            let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout) };
            if r < 0 {
                if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                    // ENOMEM, or more entries than RLIMIT_NOFILE: wait on the
                    // stop fd alone for a while, then try again.
                    paused_until = Some(Instant::now() + ACCEPT_PAUSE);
                    if wait_readable(stop, ACCEPT_PAUSE) {
                        break;
                    }
                }
                continue;
            }
            if pfds[0].revents != 0 {
                break;
            }
            let mut st = lock(&shared.state);
            // Connections first, from the back, so that swap_remove leaves the
            // entries still to be looked at where they were.
            for i in (0..pfds.len() - 2).rev() {
                let re = pfds[i + 2].revents;
                if re != 0 && hung_up_or_wrote(st.conns[i].sock.as_fd(), re) {
                    let c = st.conns.swap_remove(i);
                    drop(c.sock);
                    self.closed(c.key);
                }
            }
            if pfds[1].revents != 0 {
                self.accept_some(&mut st, &mut paused_until);
            }
        }
        let mut st = lock(&shared.state);
        for c in std::mem::take(&mut st.conns) {
            drop(c.sock);
            self.closed(c.key);
        }
        st.sock = None;
    }

    /// Accepts the connections waiting (a bounded number per round).
    fn accept_some(&mut self, st: &mut State, paused_until: &mut Option<Instant>) {
        let Some(sock) = st.sock.as_ref().map(|s| s.as_raw_fd()) else {
            return;
        };
        for _ in 0..64 {
            // SAFETY: our listening socket; no address wanted.
            let fd = unsafe {
                libc::accept4(
                    sock,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EAGAIN) => return,
                    Some(libc::EINTR | libc::ECONNABORTED | libc::EPROTO) => continue,
                    // Out of descriptors or memory (or anything else): stop
                    // looking at the listener for a while rather than spin on it.
                    _ => {
                        *paused_until = Some(Instant::now() + ACCEPT_PAUSE);
                        return;
                    }
                }
            }
            // SAFETY: accept4 just returned it; owned by nobody else.
            let conn = unsafe { OwnedFd::from_raw_fd(fd) };
            self.admit(conn, st);
        }
    }

    /// Checks a new connection, offers it the handler's hello, and watches it.
    fn admit(&mut self, conn: OwnedFd, st: &mut State) {
        let Ok(cred) = peer_cred(conn.as_fd()) else {
            return;
        };
        let name = &self.name;
        if cred.uid != self.euid {
            return refuse(
                conn.as_fd(),
                &format!(
                    "endpoint {name:?} serves uid {} only; uid {} (pid {}) may not connect",
                    self.euid, cred.uid, cred.pid
                ),
            );
        }
        if st.conns.len() >= self.max_conns {
            return refuse(
                conn.as_fd(),
                &format!(
                    "endpoint {name:?} has {} connections, its most; try again later",
                    st.conns.len()
                ),
            );
        }
        let offer = match catch_unwind(AssertUnwindSafe(|| self.handler.opened(cred))) {
            Ok(Ok(offer)) => offer,
            Ok(Err(text)) => return refuse(conn.as_fd(), &text),
            Err(_) => {
                return refuse(
                    conn.as_fd(),
                    &format!("endpoint {name:?} failed to set up the connection (it panicked)"),
                );
            }
        };
        if offer.hello.len() > MAX_HELLO || offer.fds.len() > MAX_FDS {
            refuse(
                conn.as_fd(),
                &format!(
                    "endpoint {name:?} failed to set up the connection (an offer of {} bytes \
                     and {} descriptors; at most {MAX_HELLO} and {MAX_FDS})",
                    offer.hello.len(),
                    offer.fds.len()
                ),
            );
            return self.closed(offer.key);
        }
        match send_message(conn.as_fd(), STATUS_OK, &offer.hello, &offer.fds) {
            Ok(()) => st.conns.push(Conn {
                sock: conn,
                key: offer.key,
            }),
            Err(_) => {
                drop(conn);
                self.closed(offer.key);
            }
        }
        // `offer.fds` close here: the client's copies travel in the message.
    }

    fn closed(&mut self, key: u64) {
        // A panic was reported by the hook; the thread goes on serving.
        let _ = catch_unwind(AssertUnwindSafe(|| self.handler.closed(key)));
    }
}

/// Whether a watched connection with poll events `re` is done: hung up, in
/// error, or it sent something (a client never writes).
fn hung_up_or_wrote(sock: BorrowedFd<'_>, re: libc::c_short) -> bool {
    if re & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        return true;
    }
    let mut byte = 0u8;
    // SAFETY: one writable byte; non-blocking.
    let r = unsafe {
        libc::recv(
            sock.as_raw_fd(),
            (&raw mut byte).cast(),
            1,
            libc::MSG_DONTWAIT,
        )
    };
    if r >= 0 {
        return true; // 0: EOF; 1: a byte from a client that must not write
    }
    !matches!(
        io::Error::last_os_error().raw_os_error(),
        Some(libc::EAGAIN | libc::EINTR)
    )
}

/// `d` in whole milliseconds for `poll`, rounded up (so a poll does not
/// return just before a deadline), at most `i32::MAX`.
fn poll_ms(d: Duration) -> libc::c_int {
    d.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int
}

/// [`poll_ms`] of the time from `now` until `t` (0 if past).
fn ms_until(t: Instant, now: Instant) -> libc::c_int {
    poll_ms(t.saturating_duration_since(now))
}

/// Polls one descriptor for input for up to `d`; whether it became readable.
fn wait_readable(fd: RawFd, d: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, poll_ms(d)) > 0 }
}

/// A client's connection to an endpoint; open for as long as it lives (the
/// server takes its hang-up for the client's going away).
#[derive(Debug)]
pub(crate) struct Connection {
    sock: OwnedFd,
    server: Credentials,
}

impl Connection {
    /// Who serves the endpoint, as the kernel recorded at its `listen`.
    pub(crate) fn server(&self) -> Credentials {
        self.server
    }

    /// The socket (readable with a hang-up once the server closed the
    /// connection or stopped; it never sends anything after the hello).
    #[cfg(test)]
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Whether the server has closed the connection (its process exited,
    /// it dropped its endpoint, or it sent something it never sends): a
    /// look, not a wait.
    pub(crate) fn server_gone(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN | libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd; a zero timeout never blocks.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        r > 0 && p.revents != 0
    }
}

/// Connects to endpoint `name` (validated by the caller) of this user and
/// receives its hello and descriptors, waiting at most `timeout` for them.
///
/// `NotFound`: nobody binds the name. `Refused`: it is served by another uid,
/// its backlog is full, it refused (its text), it hung up without answering,
/// or it speaks another version. `Timeout`: no (whole) hello in time.
/// `Corrupt`: anything else it sent that is not one well-formed message.
pub(crate) fn connect(
    name: &str,
    timeout: Duration,
) -> Result<(Connection, Vec<u8>, Vec<OwnedFd>), Error> {
    let deadline = Instant::now().checked_add(timeout);
    let euid = geteuid();
    let addr = address(euid, name)?;
    let sock = unix_socket()?;
    if let Err(e) = connect_to(sock.as_fd(), &addr) {
        return Err(match e.raw_os_error() {
            Some(libc::ECONNREFUSED | libc::ENOENT) => Error::NotFound(format!(
                "no endpoint named {name:?} (is its owner running?)"
            )),
            Some(libc::EAGAIN) => Error::Refused(format!(
                "endpoint {name:?} is not accepting connections (its backlog is full); try again later"
            )),
            _ => Error::Os(format!("connect to endpoint {name:?}"), e),
        });
    }
    let server = peer_cred(sock.as_fd())
        .map_err(|e| Error::Os(format!("SO_PEERCRED of endpoint {name:?}"), e))?;
    if server.uid != euid {
        return Err(Error::Refused(format!(
            "endpoint {name:?} is served by pid {} of uid {}, not this user (uid {euid})",
            server.pid, server.uid
        )));
    }
    let (hello, fds) = receive_hello(sock.as_fd(), name, timeout, deadline)?;
    Ok((Connection { sock, server }, hello, fds))
}

/// Receives the one message (possibly in pieces) until `deadline`.
fn receive_hello(
    sock: BorrowedFd<'_>,
    name: &str,
    timeout: Duration,
    deadline: Option<Instant>,
) -> Result<(Vec<u8>, Vec<OwnedFd>), Error> {
    let mut buf = [0u8; HEADER + MAX_HELLO + 1];
    let mut got = 0;
    let mut fds: Vec<OwnedFd> = Vec::new();
    loop {
        if got >= HEADER {
            let h = parse_header(&buf[..HEADER], name)?;
            let total = HEADER + h.len;
            if got > total {
                return Err(Error::Corrupt(format!(
                    "endpoint {name:?} sent more than its hello ({total} bytes)"
                )));
            }
            if got == total {
                return finish(h, &buf[HEADER..total], fds, name);
            }
        }
        let ms = deadline.map_or(-1, |d| ms_until(d, Instant::now()));
        let mut p = libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(os(format!("poll for the hello of endpoint {name:?}")));
        }
        if r == 0 {
            return Err(Error::Timeout(format!(
                "endpoint {name:?} sent no hello within {timeout:?} ({got} bytes came)"
            )));
        }
        let n = recv_with_fds(sock, &mut buf[got..], &mut fds).map_err(|e| match e {
            RecvError::Io(e) => Error::Os(format!("receiving the hello of endpoint {name:?}"), e),
            RecvError::Truncated => Error::Corrupt(format!(
                "endpoint {name:?} sent more than {MAX_FDS} descriptors"
            )),
        })?;
        if fds.len() > MAX_FDS {
            return Err(Error::Corrupt(format!(
                "endpoint {name:?} sent more than {MAX_FDS} descriptors"
            )));
        }
        match n {
            None => {} // EAGAIN: woken for nothing
            Some(0) if got == 0 => {
                return Err(Error::Refused(format!(
                    "endpoint {name:?} closed the connection without answering"
                )));
            }
            Some(0) => {
                return Err(Error::Corrupt(format!(
                    "endpoint {name:?} closed the connection in the middle of its hello \
                     ({got} bytes came)"
                )));
            }
            Some(n) => got += n,
        }
    }
}

/// A checked header.
struct Header {
    status: u8,
    nfds: usize,
    len: usize,
}

fn parse_header(h: &[u8], name: &str) -> Result<Header, Error> {
    if h[..8] != MAGIC {
        return Err(Error::Corrupt(format!(
            "endpoint {name:?} answered with something that is not an mpsync hello"
        )));
    }
    let version = u16::from_le_bytes([h[8], h[9]]);
    if version != VERSION {
        return Err(Error::Refused(format!(
            "endpoint {name:?} speaks rendezvous version {version}, this process {VERSION}"
        )));
    }
    let (status, nfds) = (h[10], h[11] as usize);
    let len = u32::from_le_bytes([h[12], h[13], h[14], h[15]]) as usize;
    if !(status == STATUS_OK || status == STATUS_REFUSED) || nfds > MAX_FDS || len > MAX_HELLO {
        return Err(Error::Corrupt(format!(
            "endpoint {name:?} sent a malformed hello header (status {status}, {nfds} \
             descriptors, {len} bytes; at most {MAX_FDS} and {MAX_HELLO})"
        )));
    }
    Ok(Header { status, nfds, len })
}

fn finish(
    h: Header,
    body: &[u8],
    mut fds: Vec<OwnedFd>,
    name: &str,
) -> Result<(Vec<u8>, Vec<OwnedFd>), Error> {
    if h.status == STATUS_REFUSED {
        // One line of text, whatever was sent.
        let text: String = String::from_utf8_lossy(body)
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        return Err(Error::Refused(text));
    }
    if fds.len() < h.nfds {
        return Err(Error::Corrupt(format!(
            "endpoint {name:?} announced {} descriptors and sent {}",
            h.nfds,
            fds.len()
        )));
    }
    fds.truncate(h.nfds); // closes any beyond the announced
    Ok((body.to_vec(), fds))
}

enum RecvError {
    Io(io::Error),
    Truncated,
}

/// One non-blocking `recvmsg(MSG_CMSG_CLOEXEC)` into `buf`; descriptors that
/// came are pushed onto `fds` (even when the call reports an error, so that
/// they are closed). `None`: nothing to read yet.
fn recv_with_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> Result<Option<usize>, RecvError> {
    let mut cmsg = [0u64; CMSG_WORDS];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid value.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; CMSG_WORDS]>() as _;
    // SAFETY: `msg` points at `iov` (valid for `buf.len()` writable bytes) and
    // at the control buffer, all live across the call.
    let r = unsafe {
        libc::recvmsg(
            sock.as_raw_fd(),
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EINTR) => Ok(None),
            _ => Err(RecvError::Io(e)),
        };
    }
    // SAFETY: [1] the kernel wrote `msg.msg_controllen` bytes of well-formed
    // control messages into `cmsg`, and CMSG_FIRSTHDR/CMSG_NXTHDR stay inside
    // them; [2] an SCM_RIGHTS message's data holds (cmsg_len - CMSG_LEN(0)) / 4
    // descriptors, each newly installed in this process and owned by nobody
    // else; read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                let bytes = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                for i in 0..bytes / size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(RecvError::Truncated);
    }
    Ok(Some(r as usize))
}

#[cfg(test)]
mod tests {
    use super::super::memfd::SharedMap;
    use super::super::memfd::tests::refused as refused_text;
    use super::*;
    use std::sync::Condvar;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// What `connect` returns.
    type Connected = Result<(Connection, Vec<u8>, Vec<OwnedFd>), Error>;

    /// How long a test waits for something that should happen at once.
    const PATIENCE: Duration = Duration::from_secs(10);

    /// A name no other test (or concurrent test process) uses: `tag` ≤ 8 bytes.
    fn uname(tag: &str) -> String {
        assert!(tag.len() <= 8);
        format!("{tag}{}", std::process::id())
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Ev {
        Opened(Credentials, u64),
        Closed(u64),
    }

    #[derive(Default)]
    struct Log {
        events: Mutex<Vec<Ev>>,
        cv: Condvar,
    }

    impl Log {
        fn push(&self, e: Ev) {
            lock(&self.events).push(e);
            self.cv.notify_all();
        }
        fn events(&self) -> Vec<Ev> {
            lock(&self.events).clone()
        }
        /// Waits until `f` holds of the events (bounded by PATIENCE).
        fn wait(&self, what: &str, f: impl Fn(&[Ev]) -> bool) {
            let g = lock(&self.events);
            let (g, r) = self
                .cv
                .wait_timeout_while(g, PATIENCE, |e| !f(e))
                .unwrap_or_else(PoisonError::into_inner);
            assert!(
                !r.timed_out(),
                "waited {PATIENCE:?} for {what}; events: {:?}",
                *g
            );
        }
        fn wait_closed(&self, key: u64) {
            self.wait(&format!("closed({key})"), |e| e.contains(&Ev::Closed(key)));
        }
        fn opened(&self) -> Vec<u64> {
            self.events()
                .iter()
                .filter_map(|e| match e {
                    Ev::Opened(_, k) => Some(*k),
                    _ => None,
                })
                .collect()
        }
    }

    type OfferFn = Box<dyn FnMut(Credentials, u64) -> Result<Offer, String> + Send>;

    struct TestHandler {
        log: Arc<Log>,
        next: u64,
        offer: OfferFn,
    }

    impl ConnHandler for TestHandler {
        fn opened(&mut self, cred: Credentials) -> Result<Offer, String> {
            self.next += 1;
            let offer = (self.offer)(cred, self.next)?;
            self.log.push(Ev::Opened(cred, offer.key));
            Ok(offer)
        }
        fn closed(&mut self, key: u64) {
            self.log.push(Ev::Closed(key));
        }
    }

    /// A listener whose handler answers with `offer` and logs what happens.
    fn listen_with(
        name: &str,
        offer: impl FnMut(Credentials, u64) -> Result<Offer, String> + Send + 'static,
    ) -> (Listener, Arc<Log>) {
        let log = Arc::new(Log::default());
        let h = TestHandler {
            log: log.clone(),
            next: 0,
            offer: Box::new(offer),
        };
        (Listener::bind(name, Box::new(h)).unwrap(), log)
    }

    /// A listener offering the hello "hi" and no descriptors.
    fn listen(name: &str) -> (Listener, Arc<Log>) {
        listen_with(name, |_, key| {
            Ok(Offer {
                hello: b"hi".to_vec(),
                fds: Vec::new(),
                key,
            })
        })
    }

    fn me() -> Credentials {
        // SAFETY: no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Credentials {
            pid: std::process::id(),
            uid,
            gid,
        }
    }

    fn word(m: &SharedMap, i: usize) -> &AtomicU64 {
        assert!((i + 1) * 8 <= m.len());
        // SAFETY: in bounds, 8-aligned (page-aligned base), mapped while `m` lives.
        unsafe { &*m.base().add(i * 8).cast::<AtomicU64>() }
    }

    /// A listening socket bound by hand at `addr`.
    fn raw_listen(
        addr: &(libc::sockaddr_un, libc::socklen_t),
        backlog: libc::c_int,
    ) -> io::Result<OwnedFd> {
        let l = unix_socket().map_err(|e| io::Error::other(e.to_string()))?;
        bind_to(l.as_fd(), addr)?;
        // SAFETY: our bound socket.
        if unsafe { libc::listen(l.as_raw_fd(), backlog) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(l)
    }

    /// A raw client socket connected to `name` (no hello read). Blocking: it
    /// waits for room in the listener's backlog.
    fn raw_connect(name: &str) -> OwnedFd {
        // SAFETY: plain flags; checked.
        let s = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        assert!(s >= 0);
        // SAFETY: just created; ours.
        let s = unsafe { OwnedFd::from_raw_fd(s) };
        connect_to(s.as_fd(), &address(geteuid(), name).unwrap()).unwrap();
        s
    }

    /// Whether the server hung up on `sock` within PATIENCE.
    fn hung_up(sock: BorrowedFd<'_>) -> bool {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let mut p = libc::pollfd {
                fd: sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut p, 1, ms_until(deadline, Instant::now())) };
            if r <= 0 {
                return false;
            }
            if p.revents & libc::POLLHUP != 0 {
                return true;
            }
            // Readable: drain (the hello) and look again.
            let mut b = [0u8; 1024];
            // SAFETY: a writable buffer of its length.
            let n = unsafe { libc::recv(p.fd, b.as_mut_ptr().cast(), b.len(), libc::MSG_DONTWAIT) };
            if n == 0 {
                return true;
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets and memfds")]
    fn round_trip_passes_hello_and_two_memfds() {
        let name = uname("rt");
        let page = super::super::memfd::page_size();
        let seg = Arc::new(SharedMap::create("mpsync-test-seg", page).unwrap());
        let conn_area = Arc::new(SharedMap::create("mpsync-test-conn", 2 * page).unwrap());
        word(&seg, 0).store(0x5e9, Ordering::Relaxed);
        word(&conn_area, 1).store(0xc0, Ordering::Relaxed);
        let (s, c) = (seg.clone(), conn_area.clone());
        let (l, log) = listen_with(&name, move |_, key| {
            Ok(Offer {
                hello: format!("hello {key}").into_bytes(),
                fds: vec![s.try_clone_fd().unwrap(), c.try_clone_fd().unwrap()],
                key,
            })
        });
        let (conn, hello, mut fds) = connect(&name, PATIENCE).unwrap();
        assert_eq!(hello, b"hello 1");
        assert_eq!(conn.server(), me());
        assert_eq!(fds.len(), 2);
        // Received descriptors are close-on-exec.
        for fd in &fds {
            // SAFETY: F_GETFD takes no argument.
            let fl = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
            assert_eq!(fl & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        }
        let c2 = SharedMap::from_received(fds.pop().unwrap(), page, 4 * page).unwrap();
        let s2 = SharedMap::from_received(fds.pop().unwrap(), page, 4 * page).unwrap();
        assert_eq!((s2.len(), c2.len()), (page, 2 * page));
        assert_eq!(word(&s2, 0).load(Ordering::Relaxed), 0x5e9);
        assert_eq!(word(&c2, 1).load(Ordering::Relaxed), 0xc0);
        word(&seg, 2).store(11, Ordering::Relaxed);
        assert_eq!(word(&s2, 2).load(Ordering::Relaxed), 11);
        word(&c2, 3).store(12, Ordering::Relaxed);
        assert_eq!(word(&conn_area, 3).load(Ordering::Relaxed), 12);
        assert_eq!(log.events(), [Ev::Opened(me(), 1)]);

        // The client hangs up: closed.
        drop(conn);
        log.wait_closed(1);

        // Stopping the listener closes the open connections, reports them,
        // and frees the name.
        let (conn, _, _) = connect(&name, PATIENCE).unwrap();
        let (conn3, _, _) = connect(&name, PATIENCE).unwrap();
        drop(l);
        let ev = log.events();
        assert!(
            ev.contains(&Ev::Closed(2)) && ev.contains(&Ev::Closed(3)),
            "{ev:?}"
        );
        assert!(hung_up(conn.fd()) && hung_up(conn3.fd()));
        assert!(matches!(connect(&name, PATIENCE), Err(Error::NotFound(_))));
        let (_l2, _) = listen(&name);
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets")]
    fn second_bind_is_exists_naming_the_holder() {
        let name = uname("ex");
        let (_l, _log) = listen(&name);
        let r = Listener::bind(&name, Box::new(Refuser));
        let Err(Error::Exists(m)) = r else {
            panic!("expected Exists, got {r:?}");
        };
        let me = me();
        assert_eq!(
            m,
            format!(
                "endpoint {name:?} exists: pid {} (uid {}) holds the name; choose another name",
                me.pid, me.uid
            )
        );
    }

    /// A handler that refuses everyone.
    struct Refuser;
    impl ConnHandler for Refuser {
        fn opened(&mut self, _: Credentials) -> Result<Offer, String> {
            Err("no".into())
        }
        fn closed(&mut self, _: u64) {}
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets")]
    fn connect_to_nobody_is_not_found() {
        let name = uname("nf");
        match connect(&name, PATIENCE) {
            Err(Error::NotFound(m)) => {
                assert_eq!(
                    m,
                    format!("no endpoint named {name:?} (is its owner running?)")
                )
            }
            other => panic!("expected NotFound, got {other:?}"),
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets")]
    fn misbehaving_clients_do_not_stop_the_listener() {
        let name = uname("mb");
        let (_l, log) = listen(&name);
        // 1: connects and never reads (its hello waits in its socket).
        let silent = raw_connect(&name);
        log.wait("opened(1)", |e| e.len() == 1);
        // 2: writes bytes.
        let writer = raw_connect(&name);
        log.wait("opened(2)", |e| e.len() == 2);
        // SAFETY: a readable buffer of its length.
        let n = unsafe {
            libc::send(
                writer.as_raw_fd(),
                b"hey".as_ptr().cast(),
                3,
                libc::MSG_NOSIGNAL,
            )
        };
        assert_eq!(n, 3);
        log.wait_closed(2);
        assert!(
            hung_up(writer.as_fd()),
            "the server did not hang up on a writer"
        );
        // 3: connects and closes at once (maybe before it was accepted).
        drop(raw_connect(&name));
        log.wait("closed(3)", |e| e.contains(&Ev::Closed(3)));
        // 4: an honest client is served.
        let (conn, hello, fds) = connect(&name, PATIENCE).unwrap();
        assert_eq!((hello.as_slice(), fds.len()), (&b"hi"[..], 0));
        assert_eq!(log.opened(), [1, 2, 3, 4]);
        let ev = log.events();
        assert!(
            !ev.contains(&Ev::Closed(1)) && !ev.contains(&Ev::Closed(4)),
            "{ev:?}"
        );
        drop(silent);
        log.wait_closed(1);
        drop(conn);
        log.wait_closed(4);
        // Each closed exactly once.
        let closes = log
            .events()
            .iter()
            .filter(|e| matches!(e, Ev::Closed(_)))
            .count();
        assert_eq!(closes, 4);
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets")]
    fn many_silent_clients_do_not_block_the_thread() {
        let name = uname("sl");
        let (_l, log) = listen_with(&name, |_, key| {
            Ok(Offer {
                hello: vec![7; MAX_HELLO],
                fds: Vec::new(),
                key,
            })
        });
        let silent: Vec<OwnedFd> = (0..200).map(|_| raw_connect(&name)).collect();
        let (_c, hello, _) = connect(&name, PATIENCE).unwrap();
        assert_eq!(hello, vec![7; MAX_HELLO]);
        assert_eq!(log.opened().len(), 201);
        drop(silent);
        log.wait("200 closes", |e| {
            e.iter().filter(|e| matches!(e, Ev::Closed(_))).count() == 200
        });
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets")]
    fn handler_refusal_and_panic_reach_the_client() {
        let name = uname("rf");
        let (_l, log) = listen_with(&name, |_, key| match key {
            1 => Err("endpoint is full: 64 peers\nsecond line".into()),
            2 => panic!("a handler bug (this panic is expected by the test)"),
            3 => Ok(Offer {
                hello: vec![0; MAX_HELLO + 1],
                fds: Vec::new(),
                key,
            }),
            _ => Ok(Offer {
                hello: b"ok".to_vec(),
                fds: Vec::new(),
                key,
            }),
        });
        assert_eq!(
            refused_text(connect(&name, PATIENCE)),
            "endpoint is full: 64 peers second line"
        );
        let m = refused_text(connect(&name, PATIENCE));
        assert!(m.contains("panicked"), "{m}");
        let m = refused_text(connect(&name, PATIENCE));
        assert!(m.contains("at most 512"), "{m}");
        let (_c, hello, _) = connect(&name, PATIENCE).unwrap();
        assert_eq!(hello, b"ok");
        // The offer too large was reported closed; the refused ones never opened.
        let ev = log.events();
        assert_eq!(ev[..2], [Ev::Opened(me(), 3), Ev::Closed(3)], "{ev:?}");
        assert_eq!(ev.len(), 3, "{ev:?}");
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets")]
    fn connections_beyond_the_bound_are_refused() {
        let name = uname("bd");
        let log = Arc::new(Log::default());
        let h = TestHandler {
            log: log.clone(),
            next: 0,
            offer: Box::new(|_, key| {
                Ok(Offer {
                    hello: Vec::new(),
                    fds: Vec::new(),
                    key,
                })
            }),
        };
        let _l = Listener::bind_limited(&name, Box::new(h), 2).unwrap();
        let a = connect(&name, PATIENCE).unwrap();
        let _b = connect(&name, PATIENCE).unwrap();
        let m = refused_text(connect(&name, PATIENCE));
        assert!(m.contains("has 2 connections, its most"), "{m}");
        drop(a);
        log.wait_closed(1);
        connect(&name, PATIENCE).unwrap();
    }

    /// A "server" bound by hand at `name`'s address, which accepts one
    /// connection (unless `accept` is false) and does `f` with it, then holds
    /// it until `release` is dropped.
    fn evil_server(
        name: &str,
        accept: bool,
        f: impl FnOnce(BorrowedFd<'_>) + Send + 'static,
    ) -> (JoinHandle<()>, std::sync::mpsc::Sender<()>) {
        let l = raw_listen(&address(geteuid(), name).unwrap(), 8).unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            if accept {
                assert!(wait_readable(l.as_raw_fd(), PATIENCE), "no client came");
                // SAFETY: our listening socket.
                let c = unsafe {
                    libc::accept4(
                        l.as_raw_fd(),
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        libc::SOCK_CLOEXEC,
                    )
                };
                assert!(c >= 0);
                // SAFETY: just accepted; ours.
                let c = unsafe { OwnedFd::from_raw_fd(c) };
                f(c.as_fd());
                let _ = rx.recv_timeout(PATIENCE);
            } else {
                let _ = rx.recv_timeout(PATIENCE);
            }
        });
        (t, tx)
    }

    fn send_raw(c: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) {
        assert_eq!(send_with_fds(c, bytes, fds).unwrap(), bytes.len());
    }

    /// Runs `connect` against an evil server doing `f`; its result and how
    /// long it took. The client's timeout is `t`.
    fn against(
        tag: &str,
        accept: bool,
        t: Duration,
        f: impl FnOnce(BorrowedFd<'_>) + Send + 'static,
    ) -> (Connected, Duration) {
        let name = uname(tag);
        let (th, release) = evil_server(&name, accept, f);
        let start = Instant::now();
        let r = connect(&name, t);
        let took = start.elapsed();
        drop(release);
        th.join().unwrap();
        assert!(
            took < t + Duration::from_secs(2),
            "{tag}: took {took:?}, timeout {t:?}"
        );
        (r, took)
    }

    fn corrupt(tag: &str, r: Connected, has: &str) {
        match r {
            Err(Error::Corrupt(m)) => assert!(m.contains(has), "{tag}: {m}"),
            other => panic!("{tag}: expected Corrupt({has:?}…), got {other:?}"),
        }
    }

    fn memfd() -> OwnedFd {
        SharedMap::create("mpsync-test", 1)
            .unwrap()
            .try_clone_fd()
            .unwrap()
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets")]
    fn evil_servers_give_errors_in_time() {
        let short = Duration::from_millis(300);
        let (r, _) = against("ev1", true, PATIENCE, |c| {
            send_raw(c, b"GARBAGE! not a hello at all", &[])
        });
        corrupt("garbage", r, "not an mpsync hello");

        let (r, _) = against("ev2", true, PATIENCE, |c| {
            let fds: Vec<OwnedFd> = (0..6).map(|_| memfd()).collect();
            let b: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
            send_raw(c, &header(STATUS_OK, 1, 0), &b);
        });
        corrupt("six fds", r, "more than 4 descriptors");

        let (r, took) = against("ev3", true, short, |_| {});
        assert!(matches!(r, Err(Error::Timeout(_))), "silent: {r:?}");
        assert!(took >= short, "silent: gave up after {took:?}");

        let (r, _) = against("ev4", false, short, |_| {});
        assert!(matches!(r, Err(Error::Timeout(_))), "never accepts: {r:?}");

        let (r, _) = against("ev5", true, short, |c| {
            send_raw(c, &header(STATUS_OK, 0, 100), &[]);
            send_raw(c, &[1; 10], &[]);
        });
        assert!(matches!(r, Err(Error::Timeout(_))), "too little: {r:?}");

        let (r, _) = against("ev6", true, PATIENCE, |c| {
            send_raw(c, &header(STATUS_OK, 0, 100), &[]);
            send_raw(c, &[1; 10], &[]);
            // SAFETY: our socket; closing its write side ends the stream.
            unsafe { libc::shutdown(c.as_raw_fd(), libc::SHUT_WR) };
        });
        corrupt("too little, then EOF", r, "in the middle");

        let (r, _) = against("ev7", true, PATIENCE, |c| {
            let mut m = header(STATUS_OK, 0, 5).to_vec();
            m.extend_from_slice(&[2; 50]);
            send_raw(c, &m, &[]);
        });
        corrupt("too much", r, "more than its hello");

        let (r, _) = against("ev8", true, PATIENCE, |c| {
            send_raw(c, &header(STATUS_OK, 2, 0), &[])
        });
        corrupt("fds missing", r, "announced 2 descriptors and sent 0");

        let (r, _) = against("ev9", true, PATIENCE, |c| {
            let fds: Vec<OwnedFd> = (0..3).map(|_| memfd()).collect();
            let b: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
            let mut m = header(STATUS_OK, 1, 3).to_vec();
            m.extend_from_slice(b"abc");
            send_raw(c, &m, &b);
        });
        let (_c, hello, fds) = r.unwrap();
        assert_eq!(
            (hello.as_slice(), fds.len()),
            (&b"abc"[..], 1),
            "extras are closed"
        );

        for (tag, h) in [
            ("ev10", header(STATUS_OK, 0, u32::MAX)),
            ("ev11", header(STATUS_OK, 9, 0)),
            ("ev12", header(7, 0, 0)),
        ] {
            let (r, _) = against(tag, true, PATIENCE, move |c| send_raw(c, &h, &[]));
            corrupt(tag, r, "malformed hello header");
        }

        let (r, _) = against("ev13", true, PATIENCE, |c| {
            let text = "go\naway\x1b[2J";
            let mut m = header(STATUS_REFUSED, 0, text.len() as u32).to_vec();
            m.extend_from_slice(text.as_bytes());
            send_raw(c, &m, &[]);
        });
        assert_eq!(refused_text(r), "go away [2J");

        // In pieces: still one hello.
        let (r, _) = against("ev14", true, PATIENCE, |c| {
            let fd = memfd();
            send_raw(c, &header(STATUS_OK, 1, 4)[..5], &[]);
            send_raw(c, &header(STATUS_OK, 1, 4)[5..], &[fd.as_fd()]);
            send_raw(c, b"ab", &[]);
            send_raw(c, b"cd", &[]);
        });
        let (_c, hello, fds) = r.unwrap();
        assert_eq!((hello.as_slice(), fds.len()), (&b"abcd"[..], 1));

        let (r, _) = against("ev15", true, PATIENCE, |c| {
            // SAFETY: our socket; the client sees the end of the stream.
            unsafe { libc::shutdown(c.as_raw_fd(), libc::SHUT_RDWR) };
        });
        assert!(refused_text(r).contains("without answering"));

        let (r, _) = against("ev16", true, PATIENCE, |c| {
            let mut h = header(STATUS_OK, 0, 0);
            h[8] = 9;
            send_raw(c, &h, &[]);
        });
        assert!(refused_text(r).contains("version 9"));
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets")]
    fn a_full_backlog_is_refused_at_once() {
        let name = uname("bl");
        let addr = address(geteuid(), &name).unwrap();
        // Backlog 0: the kernel queues one connection, and refuses the next.
        let _l = raw_listen(&addr, 0).unwrap();
        let _queued = raw_connect(&name);
        let start = Instant::now();
        let m = refused_text(connect(&name, PATIENCE));
        assert!(m.contains("backlog is full"), "{m}");
        assert!(start.elapsed() < Duration::from_secs(2));
    }

    /// Forks; the child runs `f` and `_exit`s with its result (101 if it
    /// panicked): it never returns into the test harness.
    fn fork_child(f: impl FnOnce() -> i32) -> libc::pid_t {
        // SAFETY: the child runs only `f` (system calls, allocation) and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            let code = catch_unwind(AssertUnwindSafe(f)).unwrap_or(101);
            // SAFETY: ends the child without running the parent's atexit work.
            unsafe { libc::_exit(code) };
        }
        pid
    }

    /// The child's exit code (1000 + signal if killed); kills it after PATIENCE.
    fn wait_child(pid: libc::pid_t) -> i32 {
        // SAFETY: pidfd_open of our own child; checked.
        let pfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as RawFd;
        if pfd >= 0 {
            // SAFETY: just opened; ours.
            let pfd = unsafe { OwnedFd::from_raw_fd(pfd) };
            if !wait_readable(pfd.as_raw_fd(), PATIENCE) {
                // SAFETY: our child, not yet reaped.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let mut st = 0;
        // SAFETY: our child; `st` is writable.
        assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid);
        if libc::WIFEXITED(st) {
            libc::WEXITSTATUS(st)
        } else {
            1000 + libc::WTERMSIG(st)
        }
    }

    fn pipe() -> (OwnedFd, OwnedFd) {
        let mut p = [0; 2];
        // SAFETY: room for two descriptors.
        assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: just created; each owned once.
        unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) }
    }

    /// Writes one byte. (Children signal each other with bytes, never with
    /// EOF: a child forked by another test at the same time holds copies of
    /// the write ends.)
    fn write_byte(fd: BorrowedFd<'_>) {
        // SAFETY: one readable byte.
        assert_eq!(
            unsafe { libc::write(fd.as_raw_fd(), b"x".as_ptr().cast(), 1) },
            1
        );
    }

    /// Reads one byte (false on EOF, error, or after PATIENCE).
    fn read_byte(fd: BorrowedFd<'_>) -> bool {
        let mut b = 0u8;
        // SAFETY: one writable byte.
        wait_readable(fd.as_raw_fd(), PATIENCE)
            && unsafe { libc::read(fd.as_raw_fd(), (&raw mut b).cast(), 1) } == 1
    }

    #[test]
    #[cfg_attr(miri, ignore = "fork and sockets")]
    fn forked_child_dropping_the_listener_leaves_the_parent_serving() {
        let name = uname("fk");
        let (l, log) = listen(&name);
        let (conn, _, _) = connect(&name, PATIENCE).unwrap();
        let parent = std::process::id();
        let mut slot = Some(l);
        let child = fork_child(|| {
            drop(slot.take());
            // The parent's listener still serves, and says it is the parent.
            match connect(&name, PATIENCE) {
                Ok((c, hello, _)) if hello == b"hi" && c.server().pid == parent => 0,
                Ok(_) => 2,
                Err(_) => 3,
            }
        });
        assert_eq!(
            wait_child(child),
            0,
            "the child could not connect after dropping its copy"
        );
        log.wait_closed(2);
        // SO_PEERCRED named the child as the client.
        let ev = log.events();
        assert!(
            ev.iter()
                .any(|e| matches!(e, Ev::Opened(c, 2) if c.pid == child as u32)),
            "{ev:?}"
        );
        let (conn3, hello, _) = connect(&name, PATIENCE).unwrap();
        assert_eq!(hello, b"hi");
        drop(conn);
        log.wait_closed(1);
        drop(conn3);
        log.wait_closed(3);
        drop(slot);
        assert!(matches!(connect(&name, PATIENCE), Err(Error::NotFound(_))));
    }

    /// The kernel's behaviour the Listener's docs rely on: a forked child that
    /// keeps an inherited listening socket keeps the name bound, and
    /// SO_PEERCRED still names the process that called `listen`.
    #[test]
    #[cfg_attr(miri, ignore = "fork and sockets")]
    fn an_inherited_listening_socket_keeps_the_name_and_its_creds() {
        let name = uname("ih");
        let addr = address(geteuid(), &name).unwrap();
        let l = raw_listen(&addr, 8).unwrap();
        let (release_r, release_w) = pipe();
        let mut release_w = Some(release_w);
        let child = fork_child(|| {
            drop(release_w.take());
            read_byte(release_r.as_fd());
            0
        });
        drop(release_r);
        drop(l);
        let s = raw_connect(&name);
        assert_eq!(peer_cred(s.as_fd()).unwrap().pid, std::process::id());
        write_byte(release_w.as_ref().unwrap().as_fd());
        assert_eq!(wait_child(child), 0);
        assert!(matches!(connect(&name, PATIENCE), Err(Error::NotFound(_))));
    }

    fn needs_root(test: &str) -> bool {
        if geteuid() != 0 {
            eprintln!("{test}: not run: needs root (to setuid a child)");
            return false;
        }
        true
    }

    const NOBODY: u32 = 65534;

    /// Leaves root for uid/gid 65534.
    fn become_nobody() -> bool {
        // SAFETY: plain system calls on this (single-threaded) child.
        unsafe { libc::setgid(NOBODY) == 0 && libc::setuid(NOBODY) == 0 }
    }

    #[test]
    #[cfg_attr(miri, ignore = "fork and sockets")]
    fn another_uid_is_refused_by_the_server() {
        if !needs_root("another_uid_is_refused_by_the_server") {
            return;
        }
        let name = uname("ua");
        let (_l, log) = listen(&name);
        let addr = address(geteuid(), &name).unwrap();
        let child = fork_child(|| {
            if !become_nobody() {
                return 2;
            }
            // Names are per user: this user's "name" is another endpoint.
            if !matches!(connect(&name, PATIENCE), Err(Error::NotFound(_))) {
                return 3;
            }
            // Addressing root's endpoint by hand: the server refuses.
            let s = unix_socket().unwrap();
            if connect_to(s.as_fd(), &addr).is_err() {
                return 4;
            }
            match receive_hello(s.as_fd(), &name, PATIENCE, Some(Instant::now() + PATIENCE)) {
                Err(Error::Refused(m))
                    if m.contains(&format!("uid {NOBODY} (pid {})", std::process::id()))
                        && m.contains("may not connect") =>
                {
                    0
                }
                _ => 5,
            }
        });
        assert_eq!(wait_child(child), 0);
        assert!(log.events().is_empty(), "{:?}", log.events());
        connect(&name, PATIENCE).unwrap();
    }

    #[test]
    #[cfg_attr(miri, ignore = "fork and sockets")]
    fn a_name_squatted_by_another_uid_is_refused_by_the_client() {
        if !needs_root("a_name_squatted_by_another_uid_is_refused_by_the_client") {
            return;
        }
        let name = uname("sq");
        let addr = address(geteuid(), &name).unwrap();
        let (ready_r, ready_w) = pipe();
        let (release_r, release_w) = pipe();
        let (mut ready_r, mut release_w) = (Some(ready_r), Some(release_w));
        let child = fork_child(|| {
            drop((ready_r.take(), release_w.take()));
            if !become_nobody() {
                return 2;
            }
            let Ok(_l) = raw_listen(&addr, 8) else {
                return 3;
            };
            write_byte(ready_w.as_fd());
            read_byte(release_r.as_fd());
            0
        });
        drop((ready_w, release_r));
        assert!(
            read_byte(ready_r.as_ref().unwrap().as_fd()),
            "the squatter did not bind"
        );
        let euid = geteuid();
        assert_eq!(
            refused_text(connect(&name, PATIENCE)),
            format!(
                "endpoint {name:?} is served by pid {child} of uid {NOBODY}, not this user (uid {euid})"
            )
        );
        match Listener::bind(&name, Box::new(Refuser)) {
            Err(Error::Exists(m)) => assert!(
                m.contains(&format!("pid {child} (uid {NOBODY}) holds the name")),
                "{m}"
            ),
            other => panic!("expected Exists, got {other:?}"),
        }
        write_byte(release_w.as_ref().unwrap().as_fd());
        assert_eq!(wait_child(child), 0);
    }
}
