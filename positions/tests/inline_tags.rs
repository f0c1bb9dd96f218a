//! Tags of one run cost no allocation: making one, coalescing consecutive
//! records into it (a batch of one unit's records) and writing it into a
//! message's columns sized for the message. Counted with an allocator that
//! counts the allocations of the test's own thread while asked to.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use sluice_positions::{Origin, PositionColumns, Tag};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: forwarded as received.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as received.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The allocations `f` makes on this thread.
fn allocations<T>(f: impl FnOnce() -> T) -> (u64, T) {
    COUNT.with(|c| c.set(0));
    COUNTING.with(|c| c.set(true));
    let out = std::hint::black_box(f());
    COUNTING.with(|c| c.set(false));
    (COUNT.with(Cell::get), out)
}

#[test]
fn one_run_tags_and_their_columns_allocate_nothing() {
    let (n, _) = allocations(|| Origin::record(1, 0));
    assert!(n >= 1, "the counter sees an Origin's vector");

    let mut columns = PositionColumns::with_capacity(1000);
    let (n, tags) = allocations(|| {
        let mut batch = Tag::record(5, 0);
        for k in 1..64 {
            batch.append(Tag::record(5, k));
        }
        let mut tags = [Tag::record(0, 0), batch];
        for u in 1..1000 {
            tags[0] = Tag::record(u, 0);
            columns.push(Some(&tags[0]));
        }
        columns.push(Some(&tags[1]));
        tags
    });
    assert_eq!(n, 0, "no allocation for 1000 inline tags");
    assert_eq!(tags[1].runs()[0].count, 64);
    let p = columns.finish(Origin::default());
    assert_eq!(p.runs_per_element.len(), 1001);
}
