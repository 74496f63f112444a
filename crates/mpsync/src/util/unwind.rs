//! Running a batch of user callbacks (values' `Drop`s, deferred closures) so that
//! one that panics stops neither the others nor the caller's bookkeeping.
//!
//! [`each`] calls a function on every item of a batch; a panic is caught, the
//! rest of the batch still runs, and the first panic comes back as a [`Caught`],
//! which the caller [resumes](Caught::resume) once its own state is consistent
//! (a record given back, a count updated). So a panicking `Drop` propagates to
//! the caller exactly once, and nothing of the batch is leaked or run twice.
//! Later panics of the same batch are dropped (reported by the panic hook as
//! they happen, like every panic).

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

/// The first panic of a batch run by [`each`] (or none), to be resumed by the
/// caller when its state is consistent again.
#[must_use = "a caught panic must be resumed (or it is silently swallowed)"]
pub(crate) struct Caught(Option<Box<dyn Any + Send>>);

impl Caught {
    /// No panic.
    #[inline]
    pub(crate) const fn none() -> Self {
        Self(None)
    }

    /// Whether a panic was caught.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn is_panic(&self) -> bool {
        self.0.is_some()
    }

    /// The first of two: `self` if it holds a panic, else `later` (whose own
    /// panic, if any, is then dropped).
    pub(crate) fn or(self, later: Caught) -> Caught {
        match self.0 {
            Some(_) => {
                later.discard();
                self
            }
            None => later,
        }
    }

    /// Resumes the caught panic, if any (without running the panic hook again).
    #[inline]
    pub(crate) fn resume(self) {
        if let Some(p) = self.0 {
            resume_unwind(p);
        }
    }

    /// Drops a panic payload that will not be resumed. A payload whose own
    /// `Drop` panics (`panic_any` of such a value) is leaked instead.
    fn discard(self) {
        if let Some(p) = self.0
            && let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(p)))
        {
            std::mem::forget(again);
        }
    }
}

impl std::fmt::Debug for Caught {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Caught(panic)"
        } else {
            "Caught(none)"
        })
    }
}

/// Calls `f` on every item of `items`, also on those after a call that
/// panicked; returns the first panic for the caller to resume. The item a
/// panicking call was given is consumed (not given again).
///
/// `f` must leave no state of the caller's inconsistent when it unwinds (it is
/// called again after a panic): here it only ever frees what it is given.
pub(crate) fn each<I: Iterator>(mut items: I, mut f: impl FnMut(I::Item)) -> Caught {
    let mut first = Caught::none();
    loop {
        // AssertUnwindSafe: `items` has handed out the item whose call panicked
        // and goes on with the next; `f` keeps no state across calls that a
        // panic could leave half-changed (the contract above).
        match catch_unwind(AssertUnwindSafe(|| items.by_ref().for_each(&mut f))) {
            Ok(()) => return first,
            Err(p) => first = first.or(Caught(Some(p))),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_item_runs_and_the_first_panic_comes_back() {
        let mut seen = Vec::new();
        let c = each(0..6, |i| {
            seen.push(i);
            if i % 2 == 1 {
                panic!("item {i}");
            }
        });
        assert_eq!(seen, [0, 1, 2, 3, 4, 5]);
        assert!(c.is_panic());
        let p = catch_unwind(AssertUnwindSafe(|| c.resume())).unwrap_err();
        assert_eq!(
            p.downcast_ref::<String>().map(String::as_str),
            Some("item 1")
        );
        let c = each(0..3, |_| ());
        assert!(!c.is_panic());
        c.resume();
    }
}
