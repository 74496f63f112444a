//! Hostile-user unit tests of the non-blocking structures (small, so Miri runs
//! them): borrowed values in structures whose domain outlives them, a value
//! whose `Drop` — run by reclamation — uses the same structure through the
//! registration that is reclaiming, and values that panic in `Drop` while
//! reclamation frees them. The integration suite (`tests/hostile.rs`) runs the
//! same at scale, with threads and through `Auto`.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as StdOrdering};

use super::heap::HerlihySkewHeap;
use super::lscq::LscqQueue;
use super::ms_queue::MsQueue;
use super::plj_queue::PljQueue;
use super::treiber::TreiberStack;
use crate::reclaim::{Ebr, Guard, HazardPointers, Leak, Local, Qsbr, Reclaimer};
use crate::sync::Arc;

/// A value that reads what it borrows when dropped: if a domain dropped it
/// after the borrow ended, Miri would see the read of freed memory.
struct Loud<'a>(&'a String, &'a AtomicUsize);

impl Drop for Loud<'_> {
    fn drop(&mut self) {
        assert_eq!(self.0.as_str(), "borrowed");
        self.1.fetch_add(1, StdOrdering::Relaxed);
    }
}

/// The queues and Treiber's stack accept borrowed values (`T` need not be
/// `'static`): their domain never drops a value — a removed value is moved out
/// before its node is retired, and values still inside are dropped by the
/// structure's own `Drop`. Here the domain outlives both the structures and
/// the borrowed string, and frees the retired nodes after both are gone.
#[test]
fn borrowed_values_never_reach_the_domain() {
    let d = Arc::new(Ebr::with_advance_every(1).unwrap());
    let mut l = Ebr::register(&d);
    {
        let s = String::from("borrowed");
        let drops = AtomicUsize::new(0);
        {
            let q: MsQueue<Loud<'_>> = MsQueue::with_domain(d.clone());
            let p: PljQueue<Loud<'_>> = PljQueue::with_domain(d.clone());
            let t: TreiberStack<Loud<'_>> = TreiberStack::with_domain(d.clone());
            // Segments of 2: its first segment is retired by the third dequeue.
            let c: LscqQueue<Loud<'_>> =
                LscqQueue::with_domain_and_segment_capacity(d.clone(), 2).unwrap();
            for _ in 0..3 {
                q.enqueue(&l, Loud(&s, &drops));
                p.enqueue(&l, Loud(&s, &drops));
                t.push(&l, Loud(&s, &drops));
            }
            for _ in 0..5 {
                c.enqueue(&l, Loud(&s, &drops));
            }
            drop((q.dequeue(&l), p.dequeue(&l), t.pop(&l)));
            drop((c.dequeue(&l), c.dequeue(&l), c.dequeue(&l)));
            assert_eq!(drops.load(StdOrdering::Relaxed), 6);
        } // the 8 values left are dropped here, by the structures
        assert_eq!(drops.load(StdOrdering::Relaxed), 14);
    } // the string is gone; retired nodes are still pending in the domain
    assert!(d.stats().pending > 0);
    for _ in 0..6 {
        l.try_reclaim();
    }
    assert_eq!(d.stats().freed, 4, "3 nodes and the LSCQ's first segment");
}

/// A heap value that, when dropped, inserts a plain value into the same heap
/// through the registration that is reclaiming it (reached through a weak
/// reference, as a thread-local would hold it). Its clones (the heap's copies
/// along merge paths) are plain: only the values inserted echo.
struct Echo {
    key: u32,
    /// Echoes left (0: a plain value).
    echo: u32,
    target: Option<Target>,
}

/// What an [`Echo`] re-enters, erased to a closure (the scheme is generic).
type Echoed = Box<dyn Fn(Echo)>;

/// Where an [`Echo`] finds what it re-enters (none once the test is done).
type Target = Rc<RefCell<Option<Echoed>>>;

impl Clone for Echo {
    fn clone(&self) -> Echo {
        Echo {
            key: self.key,
            echo: 0,
            target: None,
        }
    }
}

impl PartialEq for Echo {
    fn eq(&self, o: &Echo) -> bool {
        self.key == o.key
    }
}
impl Eq for Echo {}
impl PartialOrd for Echo {
    fn partial_cmp(&self, o: &Echo) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Echo {
    fn cmp(&self, o: &Echo) -> std::cmp::Ordering {
        self.key.cmp(&o.key)
    }
}

// SAFETY (test only): an `Echo` never leaves the thread that made it (the
// tests are single-threaded), so its `Rc` is never shared across threads; the
// heap only requires `Send + Sync` of its values because other uses may be
// multi-threaded.
unsafe impl Send for Echo {}
// SAFETY: as above.
unsafe impl Sync for Echo {}

impl Drop for Echo {
    fn drop(&mut self) {
        if self.echo == 0 {
            return;
        }
        if let Some(t) = &self.target
            && let Some(f) = t.borrow().as_ref()
        {
            f(Echo {
                key: self.key + 1_000,
                echo: self.echo - 1,
                target: self.target.clone(),
            });
        }
    }
}

/// Herlihy's heap: values dropped by reclamation (replaced nodes) insert into
/// the same heap through the same registration, from inside its `enter`, a
/// retire or a scan. The heap stays a heap and holds what was inserted.
fn heap_values_reenter_the_heap<R: Reclaimer>(d: Arc<R>) {
    let h: Rc<HerlihySkewHeap<Echo, R>> = Rc::new(HerlihySkewHeap::with_domain(d.clone()));
    let l = Rc::new(RefCell::new(R::register(&d)));
    let mut w = R::register(&d);
    let target: Target = Rc::new(RefCell::new(None));
    let (h2, weak): (_, Weak<RefCell<R::Local>>) = (h.clone(), Rc::downgrade(&l));
    *target.borrow_mut() = Some(Box::new(move |e| {
        if let Some(l) = weak.upgrade()
            && let Ok(l) = l.try_borrow()
        {
            h2.insert(&l, e);
        }
    }));
    for k in 0..8 {
        let e = Echo {
            key: k,
            echo: 2,
            target: Some(target.clone()),
        };
        h.insert(&l.borrow(), e);
        if k % 2 == 1 {
            drop(h.delete_min(&l.borrow()));
        }
        // Another registration moves the epoch on while this one is offline
        // (QSBR); this one's next `enter` then frees what expired.
        l.borrow_mut().park();
        w.enter().defer(|| ());
        w.quiescent();
        drop(l.borrow().enter());
    }
    let mut prev = 0;
    let mut n = 0;
    while let Some(e) = h.delete_min(&l.borrow()) {
        assert!(e.key >= prev, "{}: heap order", R::NAME);
        prev = e.key;
        n += 1;
        std::mem::forget(e); // no more echoes
    }
    assert!(n > 4, "{}: echoes were inserted ({n} values)", R::NAME);
    *target.borrow_mut() = None;
    drop((l, w, h));
}

#[test]
fn heap_values_dropped_by_reclamation_may_use_the_heap() {
    heap_values_reenter_the_heap(Arc::new(Qsbr::new()));
    heap_values_reenter_the_heap(Arc::new(Ebr::with_advance_every(1).unwrap()));
    heap_values_reenter_the_heap(Arc::new(HazardPointers::with_threshold(1, 2).unwrap()));
}

/// Counts drops; the armed one panics in its `Drop` (its clones do not).
#[derive(Debug)]
struct Mine(
    u32,
    bool,
    std::sync::Arc<AtomicUsize>,
    std::sync::Arc<AtomicBool>,
);

impl Clone for Mine {
    fn clone(&self) -> Mine {
        self.2.fetch_add(1, StdOrdering::Relaxed);
        Mine(self.0, false, self.2.clone(), self.3.clone())
    }
}
impl Drop for Mine {
    fn drop(&mut self) {
        self.2.fetch_sub(1, StdOrdering::Relaxed);
        if self.1 {
            self.3.store(true, StdOrdering::Relaxed);
            panic!("a hostile Drop panics");
        }
    }
}
impl PartialEq for Mine {
    fn eq(&self, o: &Mine) -> bool {
        self.0 == o.0
    }
}
impl Eq for Mine {}
impl PartialOrd for Mine {
    fn partial_cmp(&self, o: &Mine) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Mine {
    fn cmp(&self, o: &Mine) -> std::cmp::Ordering {
        self.0.cmp(&o.0)
    }
}

/// Herlihy's heap frees replaced versions in chain order: a value that panics
/// in its `Drop` as its version is freed must not stop the chain — every
/// later version and every value is still freed.
fn a_panicking_value_does_not_stop_the_chain<R: Reclaimer>(d: Arc<R>) {
    let live = std::sync::Arc::new(AtomicUsize::new(0));
    let went_off = std::sync::Arc::new(AtomicBool::new(false));
    let mine = |k, armed| {
        live.fetch_add(1, StdOrdering::Relaxed);
        Mine(k, armed, live.clone(), went_off.clone())
    };
    {
        let h = HerlihySkewHeap::with_domain(d.clone());
        let mut l = R::register(&d);
        h.insert(&l, mine(0, true));
        for k in 1..12 {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                h.insert(&l, mine(k, false));
                drop(h.delete_min(&l));
                l.quiescent();
            }));
        }
        while let Some(v) = h.delete_min(&l) {
            drop(v);
        }
        let _ = catch_unwind(AssertUnwindSafe(|| drop(l)));
    }
    let _ = catch_unwind(AssertUnwindSafe(|| drop(d)));
    assert!(
        went_off.load(StdOrdering::Relaxed),
        "{}: the armed value",
        R::NAME
    );
    assert_eq!(
        live.load(StdOrdering::Relaxed),
        0,
        "{}: values never freed after a Drop panicked in the version chain",
        R::NAME
    );
}

#[test]
fn a_panicking_value_does_not_stop_the_version_chain() {
    a_panicking_value_does_not_stop_the_chain(Arc::new(Qsbr::new()));
    a_panicking_value_does_not_stop_the_chain(Arc::new(Ebr::with_advance_every(1).unwrap()));
    a_panicking_value_does_not_stop_the_chain(Arc::new(
        HazardPointers::with_threshold(1, 2).unwrap(),
    ));
    a_panicking_value_does_not_stop_the_chain(Arc::new(Leak::new()));
}
