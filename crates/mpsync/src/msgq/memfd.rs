//! Sealed shared memory: a `memfd_create` object whose size no process can change.
//!
//! A mapping of an ordinary shared file dies of `SIGBUS` when another process
//! shrinks the file under it. A memfd sealed with `F_SEAL_SHRINK | F_SEAL_GROW`
//! cannot change size again, by anyone, and the seals cannot be removed; a
//! receiver that checks the seals and maps exactly the sealed size can never
//! fault. (A peer may still punch holes: that only zeroes pages, as writing
//! zeros would.) Creating it: [`SharedMap::create`]. Mapping one received from
//! an untrusted process over a Unix socket: [`SharedMap::from_received`], which
//! asks the kernel, not the sender, what the object is.

use super::Error;
use std::ffi::CString;
#[cfg(test)]
use std::os::fd::{AsFd, BorrowedFd};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// An `Error::Os` for the system call that just failed.
pub(crate) fn os(what: impl Into<String>) -> Error {
    Error::Os(what.into(), std::io::Error::last_os_error())
}

/// The system's page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// A shared read-write mapping of a whole sealed memfd.
///
/// The memory is shared with other processes that may write any byte at any
/// time: users access it only through atomics, never through references to
/// plain data.
pub(crate) struct SharedMap {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is process-wide memory that stays mapped for the life of
// the value (unmapped only in Drop), and every user accesses it only through
// atomics (other processes write it concurrently anyway), so any thread may
// hold and use it.
unsafe impl Send for SharedMap {}
// SAFETY: as above; `&SharedMap` hands out only the base pointer and the fd.
unsafe impl Sync for SharedMap {}

impl std::fmt::Debug for SharedMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMap")
            .field("fd", &self.fd.as_raw_fd())
            .field("base", &self.base)
            .field("len", &self.len)
            .finish()
    }
}

/// Seals that make the size final.
const SIZE_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;

impl SharedMap {
    /// Creates a zero-filled memfd of `len` bytes rounded up to the page size,
    /// seals its size (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`) and maps it
    /// read-write, shared. `name` only labels it (in `/proc/<pid>/fd`).
    pub(crate) fn create(name: &str, len: usize) -> Result<Self, Error> {
        let page = page_size();
        let size = len
            .checked_next_multiple_of(page)
            .filter(|&s| s > 0 && s <= i64::MAX as usize)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "shared map {name:?} of {len} bytes: must be at least 1 byte and fit in off_t"
                ))
            })?;
        let cname = CString::new(name).map_err(|_| {
            Error::InvalidArgument(format!("shared map name {name:?}: must not hold NUL"))
        })?;
        // SAFETY: a valid C string; the flags are plain bits.
        let raw = unsafe {
            libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if raw < 0 {
            return Err(os(format!("memfd_create({name:?})")));
        }
        // SAFETY: memfd_create just returned this descriptor, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: our own descriptor; size checked to fit in off_t above.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } != 0 {
            return Err(os(format!("ftruncate of memfd {name:?} to {size} bytes")));
        }
        // SAFETY: our own descriptor; F_ADD_SEALS takes an int argument.
        if unsafe {
            libc::fcntl(
                fd.as_raw_fd(),
                libc::F_ADD_SEALS,
                SIZE_SEALS | libc::F_SEAL_SEAL,
            )
        } != 0
        {
            return Err(os(format!("sealing memfd {name:?}")));
        }
        Self::map(fd, size).map_err(|e| match e {
            Error::Os(_, io) => Error::Os(format!("mmap of memfd {name:?} ({size} bytes)"), io),
            e => e,
        })
    }

    /// Maps a memfd received from another, untrusted process, after asking the
    /// kernel that its size can never change and lies in `[min_len, max_len]`.
    ///
    /// `Error::Refused`: not a memfd (no seals to ask about), not sealed against
    /// both shrinking and growing, sealed against writing, not a regular file,
    /// a hugetlb memfd (a fault on a punched hole may find no huge page free:
    /// SIGBUS), or not open read-write. `Error::Corrupt`: a sealed memfd whose
    /// size is not a page multiple or lies outside the bounds.
    pub(crate) fn from_received(
        fd: OwnedFd,
        min_len: usize,
        max_len: usize,
    ) -> Result<Self, Error> {
        let raw = fd.as_raw_fd();
        // SAFETY: F_GET_SEALS takes no argument; fails (EINVAL) for anything that
        // is not a shmem/hugetlbfs file.
        let seals = unsafe { libc::fcntl(raw, libc::F_GET_SEALS) };
        if seals < 0 {
            let e = std::io::Error::last_os_error();
            return Err(Error::Refused(format!(
                "received descriptor is not a sealable memfd (F_GET_SEALS: {e})"
            )));
        }
        if seals & SIZE_SEALS != SIZE_SEALS {
            return Err(Error::Refused(format!(
                "received memfd is not sealed against both shrinking and growing (seals {seals:#x})"
            )));
        }
        if seals & (libc::F_SEAL_WRITE | libc::F_SEAL_FUTURE_WRITE) != 0 {
            return Err(Error::Refused(format!(
                "received memfd is sealed against writing (seals {seals:#x})"
            )));
        }
        // SAFETY: F_GETFL takes no argument.
        let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
        if flags < 0 || flags & libc::O_ACCMODE != libc::O_RDWR {
            return Err(Error::Refused(
                "received memfd is not open for reading and writing".into(),
            ));
        }
        // SAFETY: an all-zero `stat` is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is a valid, writable stat buffer; `raw` is open.
        if unsafe { libc::fstat(raw, &mut st) } != 0 {
            return Err(os("fstat of a received memfd"));
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(Error::Refused(format!(
                "received descriptor is not a regular file (mode {:#o})",
                st.st_mode
            )));
        }
        // SAFETY: an all-zero `statfs` is a valid value to be overwritten.
        let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: `sfs` is a valid, writable statfs buffer; `raw` is open.
        if unsafe { libc::fstatfs(raw, &mut sfs) } != 0 {
            return Err(os("fstatfs of a received memfd"));
        }
        // Compared as u32: the field's type differs between targets.
        if sfs.f_type as u32 != libc::TMPFS_MAGIC as u32 {
            return Err(Error::Refused(format!(
                "received memfd is not on shmem (file system {:#x}; hugetlb memfds are refused)",
                sfs.f_type as u32
            )));
        }
        let page = page_size();
        let size = usize::try_from(st.st_size)
            .ok()
            .filter(|&s| s > 0 && s.is_multiple_of(page) && s >= min_len && s <= max_len);
        let Some(size) = size else {
            return Err(Error::Corrupt(format!(
                "received memfd has {} bytes; expected a multiple of {page} in {min_len}..={max_len}",
                st.st_size
            )));
        };
        Self::map(fd, size).map_err(|e| match e {
            Error::Os(_, io) => Error::Os(format!("mmap of a received memfd ({size} bytes)"), io),
            e => e,
        })
    }

    /// Maps all `len` bytes of `fd` shared, read-write.
    fn map(fd: OwnedFd, len: usize) -> Result<Self, Error> {
        // SAFETY: a fresh mapping chosen by the kernel, of an open descriptor;
        // the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os("mmap"));
        }
        Ok(Self {
            fd,
            base: p.cast(),
            len,
        })
    }

    /// The start of the mapping (page-aligned).
    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }

    /// Its length in bytes (a page multiple, never zero).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The memfd (for tests).
    #[cfg(test)]
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// A new descriptor of the same memfd (close-on-exec), e.g. to send it.
    pub(crate) fn try_clone_fd(&self) -> Result<OwnedFd, Error> {
        self.fd
            .try_clone()
            .map_err(|e| Error::Os("dup of a shared map's memfd".into(), e))
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: our own mapping of exactly `len` bytes, unmapped once; users
        // cannot hold pointers into it past the value's life (they borrow it).
        unsafe { libc::munmap(self.base.cast(), self.len) };
        // The fd closes with the OwnedFd.
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn word(m: &SharedMap, i: usize) -> &AtomicU64 {
        assert!((i + 1) * 8 <= m.len());
        // SAFETY: in bounds, 8-aligned (page-aligned base), mapped while `m` lives.
        unsafe { &*m.base().add(i * 8).cast::<AtomicU64>() }
    }

    /// A memfd with `size` bytes and the given seals, not mapped.
    fn raw_memfd(size: usize, seals: libc::c_int, flags: libc::c_uint) -> std::io::Result<OwnedFd> {
        // SAFETY: a valid C string literal.
        let raw = unsafe { libc::memfd_create(c"mpsync-test".as_ptr(), flags) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: just returned, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: our descriptor.
        if unsafe { libc::ftruncate(raw, size as libc::off_t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: our descriptor.
        if seals != 0 && unsafe { libc::fcntl(raw, libc::F_ADD_SEALS, seals) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(fd)
    }

    fn sealable(size: usize, seals: libc::c_int) -> OwnedFd {
        raw_memfd(size, seals, libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING).expect("memfd")
    }

    /// The text of an `Error::Refused` (panics on anything else).
    pub(crate) fn refused<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
        match r {
            Err(Error::Refused(m)) => m,
            other => panic!("expected Refused, got {other:?}"),
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "memfd system calls")]
    fn create_rounds_up_zero_fills_and_seals() {
        let m = SharedMap::create("mpsync-test", 100).unwrap();
        assert_eq!(m.len(), page_size());
        assert_eq!(word(&m, 0).load(Ordering::Relaxed), 0);
        // SAFETY: F_GET_SEALS takes no argument.
        let seals = unsafe { libc::fcntl(m.fd().as_raw_fd(), libc::F_GET_SEALS) };
        assert_eq!(seals, SIZE_SEALS | libc::F_SEAL_SEAL);
        assert!(format!("{m:?}").contains("len: 4096") || page_size() != 4096);
        assert!(matches!(
            SharedMap::create("x", 0),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            SharedMap::create("x\0y", 1),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    #[cfg_attr(miri, ignore = "memfd system calls")]
    fn received_map_sees_writes_and_cannot_be_resized() {
        let page = page_size();
        let a = SharedMap::create("mpsync-test", 2 * page).unwrap();
        word(&a, 3).store(0xfeed, Ordering::Relaxed);
        let b = SharedMap::from_received(a.try_clone_fd().unwrap(), page, 4 * page).unwrap();
        assert_eq!(b.len(), 2 * page);
        assert_eq!(word(&b, 3).load(Ordering::Relaxed), 0xfeed);
        word(&b, 4).store(7, Ordering::Relaxed);
        assert_eq!(word(&a, 4).load(Ordering::Relaxed), 7);
        let last = b.len() / 8 - 1;
        for size in [0, page, 4 * page] {
            // SAFETY: our descriptor.
            let r = unsafe { libc::ftruncate(b.fd().as_raw_fd(), size as libc::off_t) };
            assert_eq!(r, -1, "ftruncate to {size} succeeded on a sealed memfd");
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EPERM)
            );
        }
        // Punching a hole is allowed: it zeroes the page, nothing more.
        // SAFETY: our descriptor; a range inside the file.
        let r = unsafe {
            libc::fallocate(
                b.fd().as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                0,
                page as libc::off_t,
            )
        };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
        assert_eq!(word(&b, 3).load(Ordering::Relaxed), 0);
        word(&b, last).store(9, Ordering::Relaxed);
        word(&b, 3).store(5, Ordering::Relaxed);
        assert_eq!(word(&a, last).load(Ordering::Relaxed), 9);
        assert_eq!(word(&a, 3).load(Ordering::Relaxed), 5);
        // Adding seals is refused (F_SEAL_SEAL).
        // SAFETY: our descriptor.
        let r = unsafe { libc::fcntl(b.fd().as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_WRITE) };
        assert_eq!(r, -1);
    }

    #[test]
    #[cfg_attr(miri, ignore = "memfd system calls")]
    fn from_received_refuses_what_could_change_size() {
        let page = page_size();
        let (lo, hi) = (page, 16 * page);
        let m = refused(SharedMap::from_received(sealable(page, 0), lo, hi));
        assert!(m.contains("not sealed"), "{m}");
        let m = refused(SharedMap::from_received(
            sealable(page, libc::F_SEAL_GROW),
            lo,
            hi,
        ));
        assert!(m.contains("not sealed"), "{m}");
        let m = refused(SharedMap::from_received(
            sealable(page, libc::F_SEAL_SHRINK),
            lo,
            hi,
        ));
        assert!(m.contains("not sealed"), "{m}");
        // Without MFD_ALLOW_SEALING the memfd carries F_SEAL_SEAL only.
        let fd = raw_memfd(page, 0, libc::MFD_CLOEXEC).unwrap();
        let m = refused(SharedMap::from_received(fd, lo, hi));
        assert!(m.contains("not sealed"), "{m}");
        let m = refused(SharedMap::from_received(
            sealable(page, SIZE_SEALS | libc::F_SEAL_WRITE),
            lo,
            hi,
        ));
        assert!(m.contains("writing"), "{m}");

        // A regular file.
        let path = std::env::temp_dir().join(format!("mpsync-memfd-test.{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(page as u64).unwrap();
        std::fs::remove_file(&path).unwrap();
        let m = refused(SharedMap::from_received(f.into(), lo, hi));
        assert!(m.contains("not"), "{m}");

        // A pipe.
        let mut p = [0; 2];
        // SAFETY: `p` has room for two descriptors.
        assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: pipe2 just returned both; each owned once.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
        let m = refused(SharedMap::from_received(r, lo, hi));
        assert!(m.contains("not a sealable memfd"), "{m}");
        drop(w);

        // A read-only descriptor of a sealed memfd.
        let fd = sealable(page, SIZE_SEALS);
        let ro = std::fs::File::open(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
        let m = refused(SharedMap::from_received(ro.into(), lo, hi));
        assert!(m.contains("reading and writing"), "{m}");

        // Sizes outside the bounds, or not a page multiple.
        for (size, lo, hi) in [
            (page, 2 * page, hi),
            (32 * page, lo, hi),
            (page + 100, lo, hi),
            (0, 0, hi),
        ] {
            match SharedMap::from_received(sealable(size, SIZE_SEALS), lo, hi) {
                Err(Error::Corrupt(m)) => assert!(m.contains(&format!("has {size} bytes")), "{m}"),
                other => panic!("size {size} in {lo}..={hi}: expected Corrupt, got {other:?}"),
            }
        }
        // The bounds are inclusive.
        let ok = SharedMap::from_received(sealable(2 * page, SIZE_SEALS), 2 * page, 2 * page);
        assert_eq!(ok.unwrap().len(), 2 * page);

        // A hugetlb memfd (where the kernel has them).
        let huge = 2 << 20;
        match raw_memfd(
            huge,
            SIZE_SEALS,
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING | libc::MFD_HUGETLB,
        ) {
            Ok(fd) => {
                let m = refused(SharedMap::from_received(fd, lo, 2 * huge));
                assert!(m.contains("hugetlb"), "{m}");
            }
            Err(e) => eprintln!("hugetlb memfd case not run: this kernel refuses one ({e})"),
        }
    }
}
