//! The linearizability checker itself: it accepts correct structures and
//! catches deliberately broken ones (a test that cannot fail is no test).

mod common;

use common::lincheck::{Event, Fifo, Lifo, MinPq, Op, check, check_rounds, value};
use std::collections::VecDeque;
use std::sync::Mutex;

fn ev(thread: usize, invoke: u64, response: u64, op: Op) -> Event {
    Event {
        thread,
        invoke,
        response,
        op,
    }
}

#[test]
fn sequential_histories() {
    let h = [
        ev(0, 0, 1, Op::Put(1)),
        ev(0, 2, 3, Op::Put(2)),
        ev(0, 4, 5, Op::Take(Some(1))),
    ];
    assert!(check::<Fifo>(&h).is_ok());
    assert!(check::<Lifo>(&h).is_err(), "a stack pops 2 first");
    assert!(check::<MinPq>(&h).is_ok());
    let empty_lie = [ev(0, 0, 1, Op::Put(1)), ev(0, 2, 3, Op::Take(None))];
    assert!(check::<Fifo>(&empty_lie).is_err());
}

#[test]
fn overlapping_operations_may_take_effect_in_either_order() {
    // Two overlapping enqueues; the dequeues after both may see either first.
    let h = [
        ev(0, 0, 3, Op::Put(1)),
        ev(1, 1, 2, Op::Put(2)),
        ev(0, 4, 5, Op::Take(Some(2))),
        ev(1, 6, 7, Op::Take(Some(1))),
    ];
    assert!(check::<Fifo>(&h).is_ok());
    // But not when the enqueues did not overlap.
    let h2 = [
        ev(0, 0, 1, Op::Put(1)),
        ev(1, 2, 3, Op::Put(2)),
        ev(0, 4, 5, Op::Take(Some(2))),
    ];
    assert!(check::<Fifo>(&h2).is_err());
    // A take concurrent with the only put may return nothing or the value.
    let h3 = [ev(0, 0, 3, Op::Put(9)), ev(1, 1, 2, Op::Take(None))];
    assert!(check::<Fifo>(&h3).is_ok());
}

/// A correct queue passes thousands of real concurrent histories.
#[test]
fn a_locked_deque_is_linearizable() {
    let n = check_rounds::<_, Fifo, _, _>(
        2_000,
        3,
        || Mutex::new(VecDeque::new()),
        |q: &Mutex<VecDeque<u64>>, t, round, rec| {
            for i in 0..3 {
                rec.put(value(t, round, i, false), |v| {
                    q.lock().unwrap().push_back(v)
                });
                rec.take(|| q.lock().unwrap().pop_front());
            }
        },
    )
    .expect("linearizable");
    assert_eq!(n, 2_000);
}

/// A queue whose dequeue reads the head and removes it in two critical
/// sections (so two dequeuers can return the same value) is caught.
#[test]
fn a_racy_dequeue_is_caught() {
    let r = check_rounds::<_, Fifo, _, _>(
        20_000,
        3,
        || Mutex::new(VecDeque::new()),
        |q: &Mutex<VecDeque<u64>>, t, round, rec| {
            rec.put(value(t, round, 0, false), |v| {
                q.lock().unwrap().push_back(v)
            });
            for _ in 0..2 {
                rec.take(|| {
                    let front = q.lock().unwrap().front().copied();
                    // Give the other dequeuers the window the bug leaves open.
                    std::thread::yield_now();
                    let mut g = q.lock().unwrap();
                    if g.front().copied() == front {
                        g.pop_front();
                    }
                    front
                });
            }
        },
    );
    assert!(r.is_err(), "the racy queue passed 20,000 histories");
}
