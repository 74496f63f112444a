//! The two kinds of shared memory of an endpoint, each a sealed memfd
//! ([`SharedMap`]) whose layout is computed from a validated geometry (nothing
//! in them is a pointer; a segment's geometry comes from its owner over the
//! rendezvous socket, never from the segment, which every peer can write):
//! - the **segment** ([`Segment`]), one per endpoint, mapped by the receiver
//!   and every connected sender: the header, the doorbell, the space bell, the
//!   tail, the claim lock and the request ring's slots;
//! - a **connection area** ([`ConnArea`]), one per connection, mapped by the
//!   receiver and that connection's process only: its records, bulk blocks,
//!   reply ring and the reply bell.

use super::memfd::SharedMap;
use super::ring::{
    BlockHdr, ClaimLock, ConnRef, Doorbell, QueueCtl, QueueRef, Record, ReplyRef, ReplySlot, Slot,
    SpaceBell,
};
use super::{Claim, Error, Options};
use crate::lock::{AndersonN, SharedClaimLock, Tas, TasB, Ticket};
use crate::sync::{AtomicU64, Ordering};
use std::mem::{align_of, size_of};
use std::time::Duration;

/// "MPSYNCMQ".
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"MPSYNCMQ");
/// "MPSYNCCN".
pub(crate) const CONN_MAGIC: u64 = u64::from_le_bytes(*b"MPSYNCCN");
/// Bumped whenever a layout changes.
pub(crate) const VERSION: u32 = 4;
/// Longest endpoint name.
pub const MAX_NAME: usize = 16;
/// Largest mapping a peer may hand us (a segment of 65536 slots is 8 MiB; a
/// connection area of 1024 records and 1024 blocks of 8 KiB about 9 MiB).
pub(crate) const MAX_MAP: usize = 64 << 20;

/// Anderson's slot count for the claim lock.
pub(crate) type AndersonClaim = AndersonN<16>;

/// Bytes reserved for the claim lock (any kind).
const LOCK_BYTES: usize = 4096;
const _: () = {
    assert!(size_of::<Tas>() <= LOCK_BYTES && align_of::<Tas>() <= 128);
    assert!(size_of::<TasB>() <= LOCK_BYTES && align_of::<TasB>() <= 128);
    assert!(size_of::<Ticket>() <= LOCK_BYTES && align_of::<Ticket>() <= 128);
    assert!(size_of::<AndersonClaim>() <= LOCK_BYTES && align_of::<AndersonClaim>() <= 128);
    assert!(size_of::<libc::pthread_mutex_t>() <= LOCK_BYTES);
};

fn round_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// FNV-1a over header fields.
fn checksum(fields: &[u64]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in fields {
        for b in v.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// One volatile copy of a header word: a peer may change the header any time,
/// so each field is read once and only the copy is validated and used.
///
/// # Safety
/// `p` is inside a live mapping and 8-aligned.
unsafe fn read_word(p: *const u64) -> u64 {
    // SAFETY: the caller's contract; any bit pattern is a valid u64.
    unsafe { p.read_volatile() }
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

// ---------------------------------------------------------------------------
// The segment.

/// The segment header at offset 0: `words` are magic, version | claim << 32,
/// packets, size, owner pid, checksum of the four before it. Written for
/// people and tools that inspect a segment; no process reads it to use the
/// segment (see [`Segment::open`]).
#[repr(C, align(128))]
struct Header {
    words: [AtomicU64; 6],
}

/// Offsets within a segment.
const DOORBELL: usize = 128;
const SPACE_BELL: usize = 256;
const CTL: usize = 384;
const LOCK: usize = 640;
const SLOTS: usize = LOCK + LOCK_BYTES;
const _: () = {
    assert!(size_of::<Header>() <= DOORBELL);
    assert!(size_of::<Doorbell>() <= SPACE_BELL - DOORBELL);
    assert!(size_of::<SpaceBell>() <= CTL - SPACE_BELL);
    assert!(size_of::<QueueCtl>() <= LOCK - CTL);
    assert!(size_of::<Slot>() == 128);
};

fn segment_size(packets: u32) -> usize {
    round_up(SLOTS + packets as usize * size_of::<Slot>(), 4096)
}

/// A validated copy of the segment header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    pub claim: Claim,
    pub packets: u32,
}

/// One mapping of an endpoint's segment.
#[derive(Debug)]
pub(crate) struct Segment {
    map: SharedMap,
    geom: Geometry,
    lock_lease: Duration,
}

impl Segment {
    /// Creates the segment of endpoint `name` with geometry `o`.
    pub fn create(name: &str, o: &Options) -> Result<Self, Error> {
        validate_name(name)?;
        o.validate()?;
        let size = segment_size(o.packets);
        let map = SharedMap::create(&format!("mpsync.{name}"), size)?;
        let geom = Geometry {
            claim: o.claim,
            packets: o.packets,
        };
        let seg = Segment {
            map,
            geom,
            lock_lease: lock_lease(o.lease),
        };
        // SAFETY: the mapping is ours alone until we send its fd (nobody can
        // see it before), zero-filled, and `size` bytes long, which
        // `segment_size` computed to hold every part.
        unsafe { seg.init(o, size) };
        Ok(seg)
    }

    /// Writes every structure of a fresh segment, then the header.
    ///
    /// # Safety
    /// Only the creator, before the fd is handed to anyone.
    unsafe fn init(&self, o: &Options, size: usize) {
        let base = self.map.base();
        // SAFETY (all writes): offsets of the layout above, inside the
        // mapping and 128-aligned; nobody else maps it yet.
        unsafe {
            base.add(DOORBELL).cast::<Doorbell>().write(Doorbell::new());
            base.add(SPACE_BELL)
                .cast::<SpaceBell>()
                .write(SpaceBell::new());
            base.add(CTL).cast::<QueueCtl>().write(QueueCtl::new());
            for i in 0..o.packets as usize {
                base.add(SLOTS)
                    .cast::<Slot>()
                    .add(i)
                    .write(Slot::new(i as u64));
            }
            let lock = base.add(LOCK);
            match o.claim {
                Claim::LockFree => {}
                Claim::Tas => drop(crate::lock::init_shared(lock.cast::<Tas>())),
                Claim::Tatas => drop(crate::lock::init_shared(lock.cast::<TasB>())),
                Claim::Ticket => drop(crate::lock::init_shared(lock.cast::<Ticket>())),
                Claim::Anderson => drop(crate::lock::init_shared(lock.cast::<AndersonClaim>())),
                Claim::PosixRobust => init_robust(lock.cast()),
            }
            let h = &*base.cast::<Header>();
            let fields = [
                MAGIC,
                VERSION as u64 | ((o.claim.code() as u64) << 32),
                o.packets as u64,
                size as u64,
                std::process::id() as u64,
            ];
            for (w, v) in h.words.iter().zip(fields) {
                // Relaxed: the mapping is handed to others only through a
                // socket, after this (the system calls order it).
                w.store(v, Ordering::Relaxed);
            }
            h.words[5].store(checksum(&fields), Ordering::Relaxed);
        }
    }

    /// A segment received from an endpoint's owner, whose geometry `geom`
    /// came with it (the hello): checks that geometry against the mapping's
    /// (sealed, unchangeable) size. The header in the segment is not read:
    /// any connected peer can write it, and one that did would otherwise keep
    /// every later connector out, or send it into the wrong slots, long after
    /// that peer is gone.
    pub fn open(name: &str, map: SharedMap, geom: Geometry, o: &Options) -> Result<Self, Error> {
        let bad = |why: String| Error::Corrupt(format!("segment of endpoint {name:?}: {why}"));
        let Geometry { claim, packets } = geom;
        let geom_o = Options {
            claim,
            packets,
            trust_peers: true,
            ..Options::default()
        };
        geom_o
            .validate()
            .map_err(|e| bad(format!("invalid geometry: {e}")))?;
        let want = segment_size(packets);
        if map.len() != want {
            return Err(bad(format!(
                "{} bytes mapped; {packets} slots need {want}",
                map.len()
            )));
        }
        if claim == Claim::PosixRobust && !o.trust_peers {
            return Err(Error::Refused(format!(
                "endpoint {name:?} claims slots with a POSIX robust mutex, which trusts every \
                 peer (glibc follows list pointers kept inside the shared mutex); connect with \
                 Options::trust_peers = true only if every process that may connect is trusted"
            )));
        }
        Ok(Segment {
            map,
            geom: Geometry { claim, packets },
            lock_lease: lock_lease(o.lease),
        })
    }

    pub fn geometry(&self) -> Geometry {
        self.geom
    }

    /// The memfd, to hand to a connecting process.
    pub fn map(&self) -> &SharedMap {
        &self.map
    }

    /// The receiver's doorbell, which every send to this segment rings.
    pub fn doorbell(&self) -> &Doorbell {
        // SAFETY: the reserved line of the layout, inside the mapping (its
        // size was checked against the layout), 128-aligned, initialized by
        // the creator, accessed only atomically.
        unsafe { &*self.map.base().add(DOORBELL).cast::<Doorbell>() }
    }

    /// The request queue, with the doorbell and the space bell.
    pub fn queue(&self) -> QueueRef<'_> {
        let base = self.map.base();
        // SAFETY: offsets and lengths of the layout for the validated
        // geometry, inside the mapping (its size was checked), aligned; the
        // structures were initialized by the creator and are only accessed
        // through atomics.
        unsafe {
            QueueRef::new(
                &*base.add(CTL).cast::<QueueCtl>(),
                std::slice::from_raw_parts(
                    base.add(SLOTS).cast::<Slot>(),
                    self.geom.packets as usize,
                ),
            )
            .expect("validated geometry")
            .with_doorbell(self.doorbell())
            .with_space_bell(&*base.add(SPACE_BELL).cast::<SpaceBell>())
        }
    }

    /// The claim lock (`None` for the lock-free claim).
    pub fn lock(&self) -> Option<SegLock<'_>> {
        if self.geom.claim == Claim::LockFree {
            return None;
        }
        Some(SegLock {
            claim: self.geom.claim,
            // SAFETY: inside the mapping (layout), 128-aligned.
            at: unsafe { self.map.base().add(LOCK) },
            lease_ns: self.lock_lease.as_nanos() as u64,
            _seg: std::marker::PhantomData,
        })
    }

    /// Raw bytes of the mapping, for fault-injection tests.
    pub fn raw(&self) -> (*mut u8, usize) {
        (self.map.base(), self.map.len())
    }
}

/// How long a claim lock may show no hand-over before a waiter breaks it:
/// long against any honest critical section (a few loads and CASes, even
/// with its holder preempted for a few time slices).
fn lock_lease(lease: Duration) -> Duration {
    (lease * 100).max(Duration::from_millis(100))
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

/// The claim lock of the request queue inside a segment.
#[derive(Debug)]
pub(crate) struct SegLock<'a> {
    claim: Claim,
    at: *mut u8,
    lease_ns: u64,
    _seg: std::marker::PhantomData<&'a Segment>,
}

/// Runs `f` under `l`, waiting at most until `deadline_ns`; breaks the lock
/// (resets it and runs `f` without it) once it has shown no hand-over for
/// `lease_ns`. Returns whether it broke it.
fn with_shared<L: SharedClaimLock>(
    l: &L,
    f: &mut dyn FnMut(),
    deadline_ns: u64,
    lease_ns: u64,
) -> Result<bool, Error> {
    let mut last = l.progress();
    let mut since = crate::util::clock::now_ns();
    let mut timed_out = false;
    let g = l.lock_or_give_up(&mut || {
        let now = crate::util::clock::now_ns();
        if now >= deadline_ns {
            timed_out = true;
            return true;
        }
        let p = l.progress();
        if p != last {
            last = p;
            since = now;
            return false;
        }
        now.saturating_sub(since) >= lease_ns
    });
    match g {
        Some(g) => {
            f();
            // SAFETY: acquired just above on this thread.
            unsafe { l.unlock(g) };
            Ok(false)
        }
        None if timed_out => Err(Error::Timeout(
            "a send still waited for the claim lock at its deadline".into(),
        )),
        None => {
            // Stuck for a lock lease: a holder that died inside, or a peer
            // that wrote the lock.
            // SAFETY: the claim under this lock stays correct with several
            // holders at once (every step is a CAS from an exact word, and a
            // lost tail store is repaired: `QueueRef::locked_step`).
            unsafe { l.reset() };
            f();
            Ok(true)
        }
    }
}

impl ClaimLock for SegLock<'_> {
    fn with_lock(&self, f: &mut dyn FnMut(), deadline_ns: u64) -> Result<bool, Error> {
        // SAFETY (casts): the creator initialized a lock of exactly this kind
        // at this 128-aligned offset (the kind is in the validated header);
        // the locks are pointer-free `ProcessShared` types, for which any bit
        // pattern is a valid (if odd) state.
        match self.claim {
            Claim::LockFree => {
                f();
                Ok(false)
            }
            // SAFETY: as above (casts).
            Claim::Tas => with_shared(
                unsafe { &*self.at.cast::<Tas>() },
                f,
                deadline_ns,
                self.lease_ns,
            ),
            // SAFETY: as above (casts).
            Claim::Tatas => with_shared(
                unsafe { &*self.at.cast::<TasB>() },
                f,
                deadline_ns,
                self.lease_ns,
            ),
            // SAFETY: as above (casts).
            Claim::Ticket => with_shared(
                unsafe { &*self.at.cast::<Ticket>() },
                f,
                deadline_ns,
                self.lease_ns,
            ),
            // SAFETY: as above (casts).
            Claim::Anderson => with_shared(
                unsafe { &*self.at.cast::<AndersonClaim>() },
                f,
                deadline_ns,
                self.lease_ns,
            ),
            Claim::PosixRobust => self.with_robust(f, deadline_ns),
        }
    }
}

impl SegLock<'_> {
    /// The POSIX robust mutex (only with `trust_peers`: see `Segment::open`),
    /// waiting at most until `deadline_ns`.
    fn with_robust(&self, f: &mut dyn FnMut(), deadline_ns: u64) -> Result<bool, Error> {
        let m = self.at.cast::<libc::pthread_mutex_t>();
        // pthread_mutex_timedlock takes an absolute CLOCK_REALTIME time.
        let left = deadline_ns.saturating_sub(crate::util::clock::now_ns());
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid, writable timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
        let abs_ns = (now.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(now.tv_nsec as u64)
            .saturating_add(left);
        let abs = libc::timespec {
            tv_sec: (abs_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (abs_ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: a process-shared robust mutex initialized by the creator
        // (peers are trusted not to write it: `trust_peers`).
        let r = unsafe { libc::pthread_mutex_timedlock(m, &abs) };
        if r == libc::EOWNERDEAD {
            // The previous holder died inside the critical section; the
            // claim repairs a tail it left behind.
            // SAFETY: we hold the mutex (EOWNERDEAD grants it).
            unsafe { libc::pthread_mutex_consistent(m) };
        } else if r == libc::ETIMEDOUT {
            return Err(Error::Timeout(
                "a send still waited for the claim mutex at its deadline".into(),
            ));
        } else if r != 0 {
            return Err(Error::Lock(format!(
                "pthread_mutex_timedlock on the claim mutex failed: {}",
                std::io::Error::from_raw_os_error(r)
            )));
        }
        f();
        // SAFETY: we hold it.
        unsafe { libc::pthread_mutex_unlock(m) };
        Ok(false)
    }
}

// ---------------------------------------------------------------------------
// Connection areas.

/// The geometry of one connection's area (chosen by the receiver).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnGeometry {
    /// The connection's index at the receiver.
    pub sid: u32,
    /// Records: messages in flight at once.
    pub records: u32,
    /// Request bulk blocks.
    pub blocks: u32,
    /// Bytes per bulk block (requests and replies).
    pub block_bytes: u32,
    /// Reply slots (a power of two), each with its own block.
    pub replies: u32,
}

/// Reply slots per connection: a connection has one request in flight per
/// requesting thread and drains stale replies at its next request.
pub(crate) const REPLY_SLOTS: u32 = 4;

/// Offsets within a connection area.
#[derive(Debug, Clone, Copy)]
struct ConnLayout {
    bell: usize,
    records: usize,
    blocks: usize,
    data: usize,
    replies: usize,
    reply_data: usize,
    size: usize,
}

fn conn_layout(g: &ConnGeometry) -> ConnLayout {
    let bell = 128;
    let records = 256;
    let blocks = records + g.records as usize * size_of::<Record>();
    let data = blocks + g.blocks as usize * size_of::<BlockHdr>();
    let replies = round_up(data + g.blocks as usize * g.block_bytes as usize, 128);
    let reply_data = replies + g.replies as usize * size_of::<ReplySlot>();
    let size = round_up(
        reply_data + g.replies as usize * g.block_bytes as usize,
        4096,
    );
    ConnLayout {
        bell,
        records,
        blocks,
        data,
        replies,
        reply_data,
        size,
    }
}

const _: () = {
    assert!(size_of::<Doorbell>() <= 128);
    assert!(size_of::<Record>() == 128);
    assert!(size_of::<BlockHdr>() == 128);
    assert!(size_of::<ReplySlot>() == 128);
};

impl ConnGeometry {
    fn check(&self) -> Result<ConnLayout, String> {
        if self.sid as usize >= super::word::MAX_SIDS {
            return Err(format!("connection index {} out of range", self.sid));
        }
        if self.records == 0 || self.records as usize > super::word::MAX_RECORDS {
            return Err(format!("{} records (1..=1024)", self.records));
        }
        if !(1..=1024).contains(&self.blocks) {
            return Err(format!("{} bulk blocks (1..=1024)", self.blocks));
        }
        if !self.block_bytes.is_multiple_of(128) || !(128..=8192).contains(&self.block_bytes) {
            return Err(format!("{} bytes per block", self.block_bytes));
        }
        if !self.replies.is_power_of_two() || self.replies > 64 {
            return Err(format!("{} reply slots", self.replies));
        }
        Ok(conn_layout(self))
    }

    fn fields(&self, size: usize) -> [u64; 6] {
        [
            CONN_MAGIC,
            VERSION as u64 | ((self.sid as u64) << 32),
            self.records as u64 | ((self.blocks as u64) << 32),
            self.block_bytes as u64 | ((self.replies as u64) << 32),
            size as u64,
            0,
        ]
    }
}

/// One mapping of a connection's area.
#[derive(Debug)]
pub(crate) struct ConnArea {
    map: SharedMap,
    geom: ConnGeometry,
    layout: ConnLayout,
}

impl ConnArea {
    /// Creates the area of a new connection (the receiver, on accept).
    pub fn create(name: &str, g: ConnGeometry) -> Result<Self, Error> {
        let layout = g.check().map_err(Error::InvalidArgument)?;
        let map = SharedMap::create(&format!("mpsync.{name}.{}", g.sid), layout.size)?;
        let a = ConnArea {
            map,
            geom: g,
            layout,
        };
        let base = a.map.base();
        // SAFETY (all writes): offsets of `conn_layout`, inside the mapping,
        // 128-aligned; nobody else maps it before its fd is sent.
        unsafe {
            base.add(layout.bell)
                .cast::<Doorbell>()
                .write(Doorbell::new());
            for i in 0..g.records as usize {
                base.add(layout.records)
                    .cast::<Record>()
                    .add(i)
                    .write(Record::new());
            }
            for i in 0..g.blocks as usize {
                base.add(layout.blocks)
                    .cast::<BlockHdr>()
                    .add(i)
                    .write(BlockHdr::new());
            }
            for i in 0..g.replies as usize {
                base.add(layout.replies)
                    .cast::<ReplySlot>()
                    .add(i)
                    .write(ReplySlot::new(i as u64));
            }
            let h = &*base.cast::<Header>();
            let mut f = g.fields(layout.size);
            f[5] = checksum(&f[..5]);
            for (w, v) in h.words.iter().zip(f) {
                // Relaxed: handed to the peer through a socket, after this.
                w.store(v, Ordering::Relaxed);
            }
        }
        Ok(a)
    }

    /// The area of connection `sid`, received from the endpoint's owner.
    pub fn open(name: &str, map: SharedMap, sid: u32) -> Result<Self, Error> {
        let bad =
            |why: String| Error::Corrupt(format!("connection area from endpoint {name:?}: {why}"));
        if map.len() < 4096 {
            return Err(bad(format!("{} bytes", map.len())));
        }
        let h = map.base().cast::<u64>();
        // SAFETY: the mapping is at least a page long; each word read once.
        let f: [u64; 6] = std::array::from_fn(|i| unsafe { read_word(h.add(i)) });
        if f[0] != CONN_MAGIC || f[1] as u32 != VERSION || checksum(&f[..5]) != f[5] {
            return Err(bad("bad magic, version or checksum".into()));
        }
        let g = ConnGeometry {
            sid: (f[1] >> 32) as u32,
            records: f[2] as u32,
            blocks: (f[2] >> 32) as u32,
            block_bytes: f[3] as u32,
            replies: (f[3] >> 32) as u32,
        };
        if g.sid != sid {
            return Err(bad(format!("made for connection {}, not {sid}", g.sid)));
        }
        let layout = g.check().map_err(bad)?;
        if f[4] != layout.size as u64 || map.len() != layout.size {
            return Err(bad(format!(
                "size {} in the header, {} mapped; the geometry needs {}",
                f[4],
                map.len(),
                layout.size
            )));
        }
        Ok(ConnArea {
            map,
            geom: g,
            layout,
        })
    }

    /// The memfd, to hand to the connecting process.
    pub fn map(&self) -> &SharedMap {
        &self.map
    }

    /// The records and request blocks.
    pub fn area(&self) -> ConnRef<'_> {
        let (b, l, g) = (self.map.base(), &self.layout, &self.geom);
        // SAFETY: offsets and lengths of `conn_layout` for the validated
        // geometry, inside the mapping (size checked), aligned, initialized
        // by the creator, only accessed through atomics.
        unsafe {
            ConnRef::new(
                std::slice::from_raw_parts(b.add(l.records).cast::<Record>(), g.records as usize),
                std::slice::from_raw_parts(b.add(l.blocks).cast::<BlockHdr>(), g.blocks as usize),
                std::slice::from_raw_parts(
                    b.add(l.data).cast::<AtomicU64>(),
                    g.blocks as usize * g.block_bytes as usize / 8,
                ),
            )
        }
        .expect("validated geometry")
    }

    /// The reply ring and the client's reply bell.
    pub fn replies(&self) -> ReplyRef<'_> {
        let (b, l, g) = (self.map.base(), &self.layout, &self.geom);
        // SAFETY: as in `area`.
        unsafe {
            ReplyRef::new(
                std::slice::from_raw_parts(
                    b.add(l.replies).cast::<ReplySlot>(),
                    g.replies as usize,
                ),
                std::slice::from_raw_parts(
                    b.add(l.reply_data).cast::<AtomicU64>(),
                    g.replies as usize * g.block_bytes as usize / 8,
                ),
                &*b.add(l.bell).cast::<Doorbell>(),
            )
        }
        .expect("validated geometry")
    }

    /// Raw bytes of the mapping, for fault-injection tests.
    pub fn raw(&self) -> (*mut u8, usize) {
        (self.map.base(), self.map.len())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::util::clock::now_ns;
    use lock_api::RawMutex;

    const MS: u64 = 1_000_000;

    /// A claim lock left held (its holder died inside, or a peer wrote it)
    /// never holds a send past its deadline; once it has shown no hand-over
    /// for the lock lease it is broken — reset, and the claim runs without
    /// it — and the next claim gets the reset lock at once, without a break.
    #[test]
    fn with_shared_breaks_a_stuck_lock_and_keeps_deadlines() {
        let l = <Tas as RawMutex>::INIT;
        let _stuck = l.lock();
        let mut ran = 0;
        // The deadline comes long before the lease: a timeout, at the deadline.
        let t0 = now_ns();
        let r = with_shared(&l, &mut || ran += 1, t0 + 20 * MS, 5_000 * MS);
        assert!(matches!(r, Err(Error::Timeout(_))), "{r:?}");
        assert_eq!(ran, 0, "no claim without the lock before its lease");
        let took = now_ns() - t0;
        assert!(
            took < 2_000 * MS,
            "gave up after {took} ns, not at the deadline"
        );
        // The lease comes first: broken, reset, the claim runs.
        let r = with_shared(&l, &mut || ran += 1, now_ns() + 5_000 * MS, 20 * MS);
        assert!(r.unwrap(), "a stuck lock is broken after its lease");
        assert_eq!(ran, 1);
        // Reset: the next claim takes the lock at once (it would otherwise
        // wait out a lease of a minute, past its deadline).
        let r = with_shared(&l, &mut || ran += 1, now_ns() + 2_000 * MS, 60_000 * MS);
        assert!(!r.unwrap(), "the broken lock was reset");
        assert_eq!(ran, 2);
    }
}
