//! The one handle type of the non-blocking structures: a thread's registration
//! with a structure's reclamation domain, and Hart's automatic quiescent states.
//!
//! Every non-blocking structure ([`MsQueue`](super::ms_queue::MsQueue),
//! [`PljQueue`](super::plj_queue::PljQueue), [`TreiberStack`](super::treiber::TreiberStack),
//! [`HerlihyStack`](super::stack::HerlihyStack), [`HerlihySkewHeap`](super::heap::HerlihySkewHeap))
//! takes the caller's registration ([`Local`]) explicitly in its operations. A
//! [`Handle`] holds one for a thread, passes it to each operation, and announces
//! a quiescent state every [`QUIESCENT_EVERY`](super::lf::QUIESCENT_EVERY)
//! operations (Hart's test loop: needed by QSBR, harmless for the other
//! schemes). The structures' own handle names (`MsQueueHandle`, …) are aliases
//! of `Handle<'_, TheStructure>`; each structure implements its handle trait
//! ([`QueueHandle`](super::QueueHandle), …) for its `Handle` with
//! [`Handle::op`].
//!
//! ```
//! use mpsync::ds::handle::Handle;
//! use mpsync::ds::ms_queue::MsQueue;
//! use mpsync::ds::QueueHandle;
//! use mpsync::reclaim::Qsbr;
//!
//! let q: MsQueue<u32, Qsbr> = MsQueue::new();
//! let mut h: Handle<'_, MsQueue<u32, Qsbr>> = q.handle();
//! h.enqueue(7);
//! // Any explicit-registration operation, counted like the trait's.
//! assert!(!h.op(|q, local| q.is_empty(local)));
//! assert_eq!(h.dequeue(), Some(7));
//! ```

use std::fmt;

use super::lf::AutoQuiescent;
use crate::reclaim::Reclaimer;
use crate::sync::Arc;

/// A structure whose operations take the calling thread's registration with its
/// reclamation domain explicitly.
pub trait Registered {
    /// The reclamation scheme.
    type R: Reclaimer;
    /// The domain threads register with.
    fn domain(&self) -> &Arc<Self::R>;
}

/// One thread's access to a [`Registered`] structure `S`: its registration with
/// `S`'s domain (left when the handle drops) and a quiescent state every 100
/// operations.
pub struct Handle<'a, S: Registered> {
    ds: &'a S,
    local: <S::R as Reclaimer>::Local,
    auto: AutoQuiescent,
}

impl<'a, S: Registered> Handle<'a, S> {
    /// Registers the calling thread with `ds`'s domain.
    pub fn new(ds: &'a S) -> Self {
        Self {
            ds,
            local: <S::R as Reclaimer>::register(ds.domain()),
            auto: AutoQuiescent::new(),
        }
    }

    /// The structure.
    pub fn structure(&self) -> &'a S {
        self.ds
    }

    /// The thread's registration (for the structure's explicit-`local` methods).
    pub fn local(&mut self) -> &mut <S::R as Reclaimer>::Local {
        &mut self.local
    }

    /// Runs one operation `f` with the registration, then counts it (every
    /// 100th, a quiescent state: `f` must not return a reference into a node).
    #[inline]
    pub fn op<T>(&mut self, f: impl FnOnce(&'a S, &mut <S::R as Reclaimer>::Local) -> T) -> T {
        let r = f(self.ds, &mut self.local);
        self.auto.tick(&mut self.local);
        r
    }

    /// Announces a quiescent state now (and restarts the count).
    pub fn quiescent_now(&mut self) {
        self.auto.now(&mut self.local);
    }
}

impl<S: Registered + fmt::Debug> fmt::Debug for Handle<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("structure", self.ds)
            .field("auto", &self.auto)
            .finish_non_exhaustive()
    }
}
