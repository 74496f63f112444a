//! CombiningTree: the arrival (combining) tree barrier — the paper's
//! Arrival-tree (always spin) and Heuristic-tree (spin, then block).
//!
//! Paper 001 §4, Figure 7's baselines (papers/001_…); the software combining
//! tree of Yew, Tzeng & Lawrie (1987). Participants arrive at the leaf for their
//! group of four; the last to arrive at a node climbs to its parent; the last at
//! the root is the leader and advances one episode word that everyone waits on.
//! Node counters only grow: an episode is complete at a node when its count
//! reaches a multiple of its arity, so nothing is reset.
//!
//! Uses `sched`: `park`/`unpark_all` in the heuristic mode.
//!
//! ```
//! use mpsync::barrier::{Barrier, CombiningTree, WaitMode};
//! let b = CombiningTree::new(3, WaitMode::HEURISTIC).unwrap();
//! assert_eq!(b.name(), "Heuristic-tree");
//! std::thread::scope(|s| {
//!     s.spawn(|| b.wait(0));
//!     s.spawn(|| b.wait(1));
//!     b.wait(2);
//! });
//! ```

use super::{
    Barrier, BarrierError, BarrierWaitResult, Release, WaitMode, check_id, check_participants,
};
use crate::sched::stall;
use crate::sync::{AtomicU32, Ordering};
use crate::util::CachePadded;

/// Children per tree node.
pub(crate) const FAN_IN: usize = 4;

#[derive(Debug)]
pub(crate) struct Node {
    count: CachePadded<AtomicU32>,
    arity: u32,
    parent: Option<usize>,
}

/// Where an arrival's climb stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// Not the last at its leaf.
    AtLeaf,
    /// The last at its leaf (a representative), not the last at a node above.
    Climbed,
    /// The episode's last arrival: completed the root.
    Last,
}

/// A combining tree over `leaves` arrival points: `nodes[..]` with the leaves
/// first; arriving at leaf `l` climbs until one arrival is not the last.
#[derive(Debug)]
pub(crate) struct Tree {
    nodes: Vec<Node>,
}

impl Tree {
    /// A tree whose leaf `i` (for `i < arrivals.len()`) expects `arrivals[i]`
    /// arrivals per episode.
    pub(crate) fn new(arrivals: &[u32]) -> Self {
        let mut nodes: Vec<Node> = arrivals
            .iter()
            .map(|&a| Node {
                count: CachePadded::new(AtomicU32::new(0)),
                arity: a.max(1),
                parent: None,
            })
            .collect();
        // Build levels upward until one node remains.
        let (mut lo, mut hi) = (0, nodes.len());
        while hi - lo > 1 {
            let parents = (hi - lo).div_ceil(FAN_IN);
            for p in 0..parents {
                let first = lo + p * FAN_IN;
                let last = (first + FAN_IN).min(hi);
                let idx = nodes.len();
                for c in &mut nodes[first..last] {
                    c.parent = Some(idx);
                }
                nodes.push(Node {
                    count: CachePadded::new(AtomicU32::new(0)),
                    arity: (last - first) as u32,
                    parent: None,
                });
            }
            (lo, hi) = (hi, nodes.len());
        }
        Self { nodes }
    }

    /// Arrives at `leaf`; says where the climb stopped.
    #[inline]
    pub(crate) fn arrive(&self, leaf: usize) -> Arrival {
        let mut at = leaf;
        loop {
            let node = &self.nodes[at];
            // AcqRel: Release hands our (and our subtree's) pre-barrier work to
            // whoever completes this node; Acquire gathers it if that is us.
            let prev = node.count.fetch_add(1, Ordering::AcqRel);
            if !prev.wrapping_add(1).is_multiple_of(node.arity) {
                return if at == leaf {
                    Arrival::AtLeaf
                } else {
                    Arrival::Climbed
                };
            }
            match node.parent {
                Some(p) => at = p,
                None => return Arrival::Last,
            }
        }
    }

    /// Leaves of the tree (the arrival points it was built for).
    pub(crate) fn nodes(&self) -> usize {
        self.nodes.len()
    }
}

/// Combining-tree barrier (fan-in 4).
#[derive(Debug)]
pub struct CombiningTree {
    n: u32,
    mode: WaitMode,
    tree: Tree,
    release: Release,
}

impl CombiningTree {
    /// A barrier for `n` participants; waiters wait as `mode` says
    /// ([`WaitMode::Spin`]: Arrival-tree; [`WaitMode::HEURISTIC`]: Heuristic-tree).
    pub fn new(n: usize, mode: WaitMode) -> Result<Self, BarrierError> {
        let n = check_participants("combining-tree barrier", n)?;
        let leaves: Vec<u32> = (0..n as usize)
            .step_by(FAN_IN)
            .map(|first| (n as usize - first).min(FAN_IN) as u32)
            .collect();
        // Node counters are compared modulo their arity; wrapping at 2^32 would
        // break that unless the arity divides 2^32. Arities are 1..=4: only 3
        // does not, and 2^32 arrivals at one node take longer than anyone runs.
        Ok(Self {
            n,
            mode,
            tree: Tree::new(&leaves),
            release: Release::new(),
        })
    }
}

impl Barrier for CombiningTree {
    fn name(&self) -> &'static str {
        match self.mode {
            WaitMode::Spin => "Arrival-tree",
            WaitMode::Block => "Tree-block",
            WaitMode::SpinThenBlock(_) => "Heuristic-tree",
        }
    }

    fn participants(&self) -> usize {
        self.n as usize
    }

    fn wait(&self, id: usize) -> BarrierWaitResult {
        check_id("combining-tree barrier", id, self.n);
        let seen = self.release.current();
        if self.tree.arrive(id / FAN_IN) == Arrival::Last {
            stall::point(stall::BARRIER_LAST_ARRIVED);
            self.release.release();
            BarrierWaitResult(true)
        } else {
            self.release.wait(seen, self.mode);
            BarrierWaitResult(false)
        }
    }
}
