//! What promises to allocate nothing, checked with a counting allocator:
//! its own test binary, so that the allocator counts for these tests alone.
//!
//! The count is per thread, so tests running beside each other (and the
//! harness's own threads) do not disturb it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use outbox_relay::routes::{Routes, Target, glob_match};

struct Counting;

thread_local! {
    /// Allocations made by this thread (a const thread-local without drop:
    /// reading it allocates nothing itself).
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call goes to the system allocator unchanged; the count
// beside it touches only a thread-local cell.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations this thread makes while `f` runs.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

#[test]
fn the_counter_sees_an_allocation() {
    assert!(allocations(|| drop(std::hint::black_box(vec![1u8; 16]))) >= 1);
}

/// Routing runs for every event: no glob match allocates, whatever the
/// characters, stars and backtracking.
#[test]
fn glob_matching_allocates_nothing() {
    let cases = [
        ("payment*", "payments.v2"),
        ("*.created", "order.created.v2"),
        ("a*b*c", "axxbyyc"),
        ("a*b*c", "axxbyy"),
        ("?lan", "élan"),
        ("*?n", "élan😀n"),
        ("*€*?", "₤€😀"),
        ("", ""),
        ("*", ""),
    ];
    let mut matched = 0;
    let count = allocations(|| {
        for (glob, text) in cases {
            matched += usize::from(glob_match(
                std::hint::black_box(glob),
                std::hint::black_box(text),
            ));
        }
    });
    assert_eq!(count, 0, "glob_match allocated");
    assert_eq!(matched, 7, "the cases match as they should");
}

#[test]
fn routing_an_event_allocates_nothing() {
    let routes = Routes::from_parts(
        vec![
            (Some("payment*".into()), Some("refund.*".into()), 0),
            (None, Some("audit".into()), 1),
        ],
        vec!["refunds".into(), "audit".into()],
    );
    let mut targets = [Target::Kafka; 3];
    let count = allocations(|| {
        targets = [
            routes.target("payment", "refund.issued"),
            routes.target("order", "audit"),
            routes.target("order", "created"),
        ];
    });
    assert_eq!(count, 0, "Routes::target allocated");
    assert_eq!(targets, [Target::Http(0), Target::Http(1), Target::Kafka]);
}
