//! The shared-memory segment of one endpoint: a `shm_open` object created 0600,
//! a validated header, two queues laid out at offsets computed from the
//! geometry (nothing in the segment is a pointer), and the claim locks.

use super::ring::{BlockHdr, ClaimLock, Doorbell, Env, Packet, QueueCtl, QueueRef, SpaceBell};
use super::{Claim, Error, Options};
use crate::lock::{AndersonN, Tas, TasB, Ticket};
use crate::sync::{AtomicU64, Ordering};
use lock_api::RawMutex;
use std::ffi::CString;
use std::mem::{align_of, size_of};

/// "MPSYNCMQ".
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"MPSYNCMQ");
/// Bumped whenever the layout changes.
pub(crate) const VERSION: u32 = 3;
/// Longest endpoint name (it travels in two packet words for replies).
pub const MAX_NAME: usize = 16;

/// Anderson's slot count for the claim lock.
pub(crate) type AndersonClaim = AndersonN<16>;

/// Bytes reserved per queue for its claim lock (any kind).
const LOCK_BYTES: usize = 4096;
const _: () = {
    assert!(size_of::<Tas>() <= LOCK_BYTES && align_of::<Tas>() <= 128);
    assert!(size_of::<TasB>() <= LOCK_BYTES && align_of::<TasB>() <= 128);
    assert!(size_of::<Ticket>() <= LOCK_BYTES && align_of::<Ticket>() <= 128);
    assert!(size_of::<AndersonClaim>() <= LOCK_BYTES && align_of::<AndersonClaim>() <= 128);
    assert!(size_of::<libc::pthread_mutex_t>() <= LOCK_BYTES);
};

/// The header at offset 0. Written by the creator before `magic` (Release).
#[repr(C, align(128))]
struct Header {
    magic: AtomicU64,
    version: u32,
    claim: u32,
    packets: u32,
    blocks: u32,
    block_bytes: u32,
    owner_pid: u32,
    size: u64,
    checksum: u64,
}

/// A validated copy of the header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    pub claim: Claim,
    pub packets: u32,
    pub blocks: u32,
    pub block_bytes: u32,
    pub owner_pid: u32,
}

/// FNV-1a over the geometry fields.
fn checksum(
    version: u32,
    claim: u32,
    packets: u32,
    blocks: u32,
    block_bytes: u32,
    size: u64,
) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for v in [version, claim, packets, blocks, block_bytes] {
        eat(&v.to_le_bytes());
    }
    eat(&size.to_le_bytes());
    h
}

/// Offsets of one queue's parts, relative to the segment start.
#[derive(Debug, Clone, Copy)]
struct QueueLayout {
    ctl: usize,
    lock: usize,
    packets: usize,
    blocks: usize,
    data: usize,
}

fn round_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// Offset of the receiver's doorbell (since version 2): the line after the header.
const DOORBELL: usize = round_up_const(size_of::<Header>(), 128);

/// Offset of the two queues' space bells (version 3): the lines after the
/// doorbell, requests' first.
const SPACE_BELLS: usize = round_up_const(DOORBELL + size_of::<Doorbell>(), 128);

const fn round_up_const(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// The two queues' layouts and the total size.
fn layout(packets: u32, blocks: u32, block_bytes: u32) -> ([QueueLayout; 2], usize) {
    let mut off = round_up(SPACE_BELLS + 2 * size_of::<SpaceBell>(), 128);
    let mut q = [QueueLayout {
        ctl: 0,
        lock: 0,
        packets: 0,
        blocks: 0,
        data: 0,
    }; 2];
    for l in &mut q {
        l.ctl = off;
        off = round_up(off + size_of::<QueueCtl>(), 128);
        l.lock = off;
        off += LOCK_BYTES;
        l.packets = off;
        off += packets as usize * size_of::<Packet>();
        l.blocks = off;
        off += blocks as usize * size_of::<BlockHdr>();
        l.data = off;
        off += blocks as usize * block_bytes as usize;
        off = round_up(off, 128);
    }
    (q, round_up(off, 4096))
}

/// Checks an endpoint name: 1..=16 bytes of `[A-Za-z0-9._-]`, not `.`/`..`.
pub fn validate_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "endpoint name {name:?}: must be 1..={MAX_NAME} characters of A-Z a-z 0-9 . _ - \
             (e.g. \"server-1\")"
        )))
    }
}

/// The name packed into two words (for a request's reply address).
pub(crate) fn pack_name(name: &str) -> [u64; 2] {
    let mut b = [0u8; 16];
    b[..name.len()].copy_from_slice(name.as_bytes());
    [
        u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
        u64::from_le_bytes(b[8..].try_into().expect("8 bytes")),
    ]
}

/// Unpacks and validates a name from two (untrusted) words.
pub(crate) fn unpack_name(w: [u64; 2]) -> Result<String, Error> {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&w[0].to_le_bytes());
    b[8..].copy_from_slice(&w[1].to_le_bytes());
    let len = b.iter().position(|&c| c == 0).unwrap_or(16);
    let s = std::str::from_utf8(&b[..len])
        .map_err(|_| Error::Corrupt("reply address is not a valid endpoint name".into()))?;
    validate_name(s)
        .map_err(|_| Error::Corrupt(format!("reply address {s:?} is not a valid endpoint name")))?;
    Ok(s.to_string())
}

fn shm_path(name: &str) -> CString {
    CString::new(format!("/mpsync.{name}")).expect("validated names hold no NUL")
}

/// Whether process `pid` exists and is not a zombie (a killed process whose
/// parent has not reaped it yet can no longer write to the segment).
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            // The state is the field after the last ')' (the command may hold ')').
            let state = s
                .rsplit(')')
                .next()
                .and_then(|r| r.trim_start().chars().next());
            !matches!(state, Some('Z') | Some('X') | Some('x'))
        }
        Err(_) => false,
    }
}

/// `Env` of real endpoints.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RealEnv {
    pub lease_ns: u64,
}

impl Env for RealEnv {
    fn now_ns(&self) -> u64 {
        crate::util::clock::now_ns()
    }
    fn alive(&self, pid: u32) -> bool {
        pid_alive(pid)
    }
    fn lease_ns(&self) -> u64 {
        self.lease_ns
    }
}

/// One mapping of a segment.
#[derive(Debug)]
pub(crate) struct Segment {
    base: *mut u8,
    len: usize,
    geom: Geometry,
    queues: [QueueLayout; 2],
    /// The owner unlinks the name on drop.
    owner_name: Option<CString>,
}

// SAFETY: the mapping is process-wide memory accessed only through atomics
// (and the process-shared locks), so any thread may use it.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

fn os(what: impl Into<String>) -> Error {
    Error::Os(what.into(), std::io::Error::last_os_error())
}

impl Segment {
    /// Creates the segment `name` with geometry `o`. A segment of that name
    /// whose owner is dead is removed first.
    pub fn create(name: &str, o: &Options) -> Result<Self, Error> {
        validate_name(name)?;
        o.validate()?;
        let path = shm_path(name);
        let fd = loop {
            // SAFETY: a valid C string; O_EXCL so we never reuse someone's object.
            let fd = unsafe {
                libc::shm_open(
                    path.as_ptr(),
                    libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
                    0o600,
                )
            };
            if fd >= 0 {
                break fd;
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
                return Err(os(format!("shm_open(/mpsync.{name}) to create")));
            }
            // Exists: stale (owner dead, or never finished initializing) or live?
            match Self::open(name) {
                Ok(s) if pid_alive(s.geom.owner_pid) => {
                    return Err(Error::Exists(format!(
                        "endpoint {name:?} exists and its owner (pid {}) is alive; choose another name",
                        s.geom.owner_pid
                    )));
                }
                Err(Error::NotFound(_)) => continue,
                Err(Error::Corrupt(_)) | Ok(_) => {
                    // Dead owner, or a half-made segment: remove it and retry.
                    // SAFETY: a valid C string.
                    unsafe { libc::shm_unlink(path.as_ptr()) };
                }
                Err(e) => return Err(e),
            }
        };
        let (queues, size) = layout(o.packets, o.blocks, o.block_bytes);
        let unlink_close = |e: Error| {
            // SAFETY: our own object and descriptor.
            unsafe {
                libc::shm_unlink(path.as_ptr());
                libc::close(fd);
            }
            e
        };
        // SAFETY: our own descriptor.
        if unsafe { libc::ftruncate(fd, size as libc::off_t) } != 0 {
            return Err(unlink_close(os("ftruncate of the new segment")));
        }
        // SAFETY: a fresh shared mapping of the whole object; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(unlink_close(os("mmap of the new segment")));
        }
        // SAFETY: the mapping holds its own reference to the object.
        unsafe { libc::close(fd) };
        let geom = Geometry {
            claim: o.claim,
            packets: o.packets,
            blocks: o.blocks,
            block_bytes: o.block_bytes,
            owner_pid: std::process::id(),
        };
        let seg = Segment {
            base: p.cast(),
            len: size,
            geom,
            queues,
            owner_name: Some(path.clone()),
        };
        // SAFETY: the mapping is ours alone until the magic is published
        // (openers reject a segment without it), page-aligned, zero-filled and
        // `size` bytes long, which `layout` computed to hold every part.
        unsafe { seg.init(o, size) };
        Ok(seg)
    }

    /// Writes every structure of a fresh segment, then the header's magic.
    ///
    /// # Safety
    /// Only the creator, before anyone else can validate the segment.
    unsafe fn init(&self, o: &Options, size: usize) {
        // SAFETY: offsets of `layout`'s reserved lines (the doorbell and the
        // two space bells), inside the mapping, 128-aligned; nobody else uses
        // them yet.
        unsafe {
            self.base
                .add(DOORBELL)
                .cast::<Doorbell>()
                .write(Doorbell::new());
            // Likewise the space bells' two lines (`SPACE_BELLS`).
            let bells = self.base.add(SPACE_BELLS).cast::<SpaceBell>();
            bells.write(SpaceBell::new());
            bells.add(1).write(SpaceBell::new());
        };
        for q in &self.queues {
            // SAFETY (all writes): offsets from `layout`, inside the mapping and
            // aligned (every offset is a multiple of 128); nobody else uses them yet.
            unsafe {
                self.base
                    .add(q.ctl)
                    .cast::<QueueCtl>()
                    .write(QueueCtl::new());
                for i in 0..o.packets as usize {
                    self.base
                        .add(q.packets)
                        .cast::<Packet>()
                        .add(i)
                        .write(Packet::new(i as u64));
                }
                for i in 0..o.blocks as usize {
                    self.base
                        .add(q.blocks)
                        .cast::<BlockHdr>()
                        .add(i)
                        .write(BlockHdr::new(i as u64));
                }
                let lock = self.base.add(q.lock);
                match o.claim {
                    Claim::LockFree => {}
                    Claim::Tas => drop(crate::lock::init_shared(lock.cast::<Tas>())),
                    Claim::Tatas => drop(crate::lock::init_shared(lock.cast::<TasB>())),
                    Claim::Ticket => drop(crate::lock::init_shared(lock.cast::<Ticket>())),
                    Claim::Anderson => {
                        lock.cast::<AndersonClaim>().write(AndersonClaim::new());
                    }
                    Claim::PosixRobust => init_robust(lock.cast()),
                }
            }
        }
        let h = self.base.cast::<Header>();
        // SAFETY: the header lies at offset 0 of our mapping; plain fields
        // first, the magic last (Release).
        unsafe {
            (*h).version = VERSION;
            (*h).claim = o.claim.code();
            (*h).packets = o.packets;
            (*h).blocks = o.blocks;
            (*h).block_bytes = o.block_bytes;
            (*h).owner_pid = std::process::id();
            (*h).size = size as u64;
            (*h).checksum = checksum(
                VERSION,
                o.claim.code(),
                o.packets,
                o.blocks,
                o.block_bytes,
                size as u64,
            );
            // Release: publishes the header fields and every structure above to
            // an opener's Acquire load of the magic.
            (*h).magic.store(MAGIC, Ordering::Release);
        }
    }

    /// Maps the existing segment `name` and validates its header.
    pub fn open(name: &str) -> Result<Self, Error> {
        validate_name(name)?;
        let path = shm_path(name);
        // SAFETY: a valid C string.
        let fd = unsafe { libc::shm_open(path.as_ptr(), libc::O_RDWR, 0) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(if e.raw_os_error() == Some(libc::ENOENT) {
                Error::NotFound(format!(
                    "no endpoint named {name:?} (is its owner running?)"
                ))
            } else {
                Error::Os(format!("shm_open(/mpsync.{name})"), e)
            });
        }
        // SAFETY: a zeroed stat buffer for our descriptor.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            let e = os("fstat of the segment");
            // SAFETY: our descriptor.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        let file_len = st.st_size.max(0) as usize;
        if file_len < size_of::<Header>() {
            // SAFETY: our descriptor.
            unsafe { libc::close(fd) };
            return Err(Error::Corrupt(format!(
                "segment {name:?} is {file_len} bytes, smaller than a header (not initialized?)"
            )));
        }
        // SAFETY: mapping the object's current length; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                file_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        // SAFETY: the mapping (if any) holds its own reference.
        unsafe { libc::close(fd) };
        if p == libc::MAP_FAILED {
            return Err(os("mmap of the segment"));
        }
        let unmap = |e: Error| {
            // SAFETY: the mapping just made, not yet shared with anything.
            unsafe { libc::munmap(p, file_len) };
            e
        };
        let h = p.cast::<Header>();
        // Acquire: pairs with the creator's Release store of the magic.
        // SAFETY: the mapping is at least a header long and page-aligned.
        let magic = unsafe { (*h).magic.load(Ordering::Acquire) };
        if magic != MAGIC {
            return Err(unmap(Error::Corrupt(format!(
                "segment {name:?}: bad magic {magic:#018x} (not an mpsync endpoint, or not initialized yet)"
            ))));
        }
        // One volatile copy of each field: a peer may change them any time; we
        // validate and use only this copy.
        // SAFETY: inside the mapped header; plain integers, any bit pattern valid.
        let (version, claim, packets, blocks, block_bytes, owner_pid, size, sum) = unsafe {
            (
                std::ptr::addr_of!((*h).version).read_volatile(),
                std::ptr::addr_of!((*h).claim).read_volatile(),
                std::ptr::addr_of!((*h).packets).read_volatile(),
                std::ptr::addr_of!((*h).blocks).read_volatile(),
                std::ptr::addr_of!((*h).block_bytes).read_volatile(),
                std::ptr::addr_of!((*h).owner_pid).read_volatile(),
                std::ptr::addr_of!((*h).size).read_volatile(),
                std::ptr::addr_of!((*h).checksum).read_volatile(),
            )
        };
        let g = Self::validate_header(
            name,
            version,
            claim,
            packets,
            blocks,
            block_bytes,
            owner_pid,
            size,
            sum,
            file_len,
        )
        .map_err(unmap)?;
        let (queues, _) = layout(g.packets, g.blocks, g.block_bytes);
        Ok(Segment {
            base: p.cast(),
            len: file_len,
            geom: g,
            queues,
            owner_name: None,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn validate_header(
        name: &str,
        version: u32,
        claim: u32,
        packets: u32,
        blocks: u32,
        block_bytes: u32,
        owner_pid: u32,
        size: u64,
        sum: u64,
        file_len: usize,
    ) -> Result<Geometry, Error> {
        let bad = |why: String| Error::Corrupt(format!("segment {name:?}: {why}"));
        if version != VERSION {
            return Err(bad(format!(
                "layout version {version}, this library reads version {VERSION}"
            )));
        }
        if checksum(version, claim, packets, blocks, block_bytes, size) != sum {
            return Err(bad("header checksum mismatch (geometry overwritten)".into()));
        }
        let claim =
            Claim::from_code(claim).ok_or_else(|| bad(format!("unknown claim code {claim}")))?;
        let o = Options {
            claim,
            packets,
            blocks,
            block_bytes,
            ..Options::default()
        };
        o.validate()
            .map_err(|e| bad(format!("invalid geometry: {e}")))?;
        let (_, want) = layout(packets, blocks, block_bytes);
        if size != want as u64 || file_len < want {
            return Err(bad(format!(
                "size {size} in the header, {file_len} mapped; the geometry needs {want}"
            )));
        }
        Ok(Geometry {
            claim,
            packets,
            blocks,
            block_bytes,
            owner_pid,
        })
    }

    pub fn geometry(&self) -> Geometry {
        self.geom
    }

    /// The receiver's doorbell, which every send to this segment rings.
    pub fn doorbell(&self) -> &Doorbell {
        // SAFETY: the reserved line of `layout`, inside the mapping (which is
        // at least the layout's size), 128-aligned, initialized by the
        // creator before it published the magic, accessed only atomically.
        unsafe { &*self.base.add(DOORBELL).cast::<Doorbell>() }
    }

    /// The space bell of queue `i` (0: requests, 1: replies), which senders
    /// that find it full sleep on and its receiver rings.
    pub fn space_bell(&self, i: usize) -> &SpaceBell {
        assert!(i < 2, "two queues");
        // SAFETY: the reserved lines of `layout` (two bells from
        // SPACE_BELLS), inside the mapping (at least the layout's size),
        // 128-aligned, initialized by the creator before it published the
        // magic, accessed only atomically.
        unsafe { &*self.base.add(SPACE_BELLS).cast::<SpaceBell>().add(i) }
    }

    /// Queue `i` (0: requests, 1: replies), with the doorbell and its space bell.
    pub fn queue(&self, i: usize) -> QueueRef<'_> {
        let q = &self.queues[i];
        let g = &self.geom;
        // SAFETY: offsets and lengths from `layout` for the validated geometry,
        // inside the mapping (its length was checked against the layout),
        // aligned; the structures were initialized by the creator before it
        // published the magic, and are only accessed through atomics.
        unsafe {
            QueueRef::new(
                &*self.base.add(q.ctl).cast::<QueueCtl>(),
                std::slice::from_raw_parts(
                    self.base.add(q.packets).cast::<Packet>(),
                    g.packets as usize,
                ),
                std::slice::from_raw_parts(
                    self.base.add(q.blocks).cast::<BlockHdr>(),
                    g.blocks as usize,
                ),
                std::slice::from_raw_parts(
                    self.base.add(q.data).cast::<AtomicU64>(),
                    g.blocks as usize * g.block_bytes as usize / 8,
                ),
            )
        }
        .expect("validated geometry")
        .with_doorbell(self.doorbell())
        .with_space_bell(self.space_bell(i))
    }

    /// The claim lock of queue `i` (`None` for the lock-free claim).
    pub fn lock(&self, i: usize) -> Option<SegLock<'_>> {
        if self.geom.claim == Claim::LockFree {
            return None;
        }
        Some(SegLock {
            claim: self.geom.claim,
            // SAFETY: inside the mapping (layout), 128-aligned.
            at: unsafe { self.base.add(self.queues[i].lock) },
            _seg: std::marker::PhantomData,
        })
    }

    /// Raw bytes of the mapping, for fault-injection tests.
    pub fn raw(&self) -> (*mut u8, usize) {
        (self.base, self.len)
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if let Some(path) = &self.owner_name {
            // SAFETY: a valid C string; the name is ours (we created it).
            unsafe { libc::shm_unlink(path.as_ptr()) };
        }
        // SAFETY: our mapping; nothing borrows it past `self`.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Initializes a process-shared robust `pthread_mutex_t` at `m`.
///
/// # Safety
/// `m` is valid for writes of a `pthread_mutex_t`, unused by anyone.
unsafe fn init_robust(m: *mut libc::pthread_mutex_t) {
    // SAFETY: standard attribute initialization on a local, then the mutex at
    // `m` (the caller's contract). Failures leave a default mutex, which the
    // lock calls still report through their return codes.
    unsafe {
        let mut a: libc::pthread_mutexattr_t = std::mem::zeroed();
        libc::pthread_mutexattr_init(&mut a);
        libc::pthread_mutexattr_setpshared(&mut a, libc::PTHREAD_PROCESS_SHARED);
        libc::pthread_mutexattr_setrobust(&mut a, libc::PTHREAD_MUTEX_ROBUST);
        libc::pthread_mutex_init(m, &a);
        libc::pthread_mutexattr_destroy(&mut a);
    }
}

/// The claim lock of one queue inside a segment.
#[derive(Debug)]
pub(crate) struct SegLock<'a> {
    claim: Claim,
    at: *mut u8,
    _seg: std::marker::PhantomData<&'a Segment>,
}

fn run<L: RawMutex>(l: &L, f: &mut dyn FnMut()) {
    let g = l.lock();
    f();
    // SAFETY: acquired just above on this thread.
    unsafe { l.unlock(g) };
}

impl ClaimLock for SegLock<'_> {
    fn with_lock(&self, f: &mut dyn FnMut()) -> Result<(), Error> {
        // SAFETY (casts): the creator initialized a lock of exactly this kind at
        // this 128-aligned offset (the kind is in the validated header); the
        // locks are pointer-free `ProcessShared` types.
        match self.claim {
            Claim::LockFree => f(),
            // SAFETY: as above (casts).
            Claim::Tas => run(unsafe { &*self.at.cast::<Tas>() }, f),
            // SAFETY: as above (casts).
            Claim::Tatas => run(unsafe { &*self.at.cast::<TasB>() }, f),
            // SAFETY: as above (casts).
            Claim::Ticket => run(unsafe { &*self.at.cast::<Ticket>() }, f),
            Claim::Anderson => {
                // SAFETY: as above.
                let l = unsafe { &*self.at.cast::<AndersonClaim>() };
                let g = l.lock_checked().map_err(|e| Error::Lock(e.to_string()))?;
                f();
                // SAFETY: acquired just above on this thread.
                unsafe { l.unlock(g) };
            }
            Claim::PosixRobust => {
                let m = self.at.cast::<libc::pthread_mutex_t>();
                // SAFETY: a process-shared robust mutex initialized by the creator.
                let r = unsafe { libc::pthread_mutex_lock(m) };
                if r == libc::EOWNERDEAD {
                    // The previous holder died inside the critical section; the
                    // claim code repairs a tail it left behind.
                    // SAFETY: we hold the mutex (EOWNERDEAD grants it).
                    unsafe { libc::pthread_mutex_consistent(m) };
                } else if r != 0 {
                    return Err(Error::Lock(format!(
                        "pthread_mutex_lock on the claim mutex failed: {}",
                        std::io::Error::from_raw_os_error(r)
                    )));
                }
                f();
                // SAFETY: we hold it.
                unsafe { libc::pthread_mutex_unlock(m) };
            }
        }
        Ok(())
    }
}
