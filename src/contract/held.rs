//! What a piece of work keeps: the bytes it allocated on its thread and did not free, counted by
//! a thin wrapper around the system allocator. The validator cache weighs a compiled schema by
//! this, not by its text (an 80 KB schema keeps several times that once compiled).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting each thread's allocations net of its frees.
pub struct Counting;

thread_local! {
    /// Bytes this thread allocated, less those it freed (memory freed on another thread than
    /// the one that allocated it makes each thread's count drift; only differences over a
    /// piece of work on one thread are read).
    static NET: Cell<i64> = const { Cell::new(0) };
}

fn count(bytes: i64) {
    // A thread being torn down has no count any more: nothing is measured there.
    let _ = NET.try_with(|net| net.set(net.get().wrapping_add(bytes)));
}

fn signed(bytes: usize) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

// SAFETY: every call is forwarded as it is to the system allocator, which upholds the
// contract; the count is a thread-local cell that neither allocates nor unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees are the system allocator's.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            count(signed(layout.size()));
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            count(signed(layout.size()));
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, so from the system one, with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        count(-signed(layout.size()));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`, and `new_size` is the caller's to guarantee.
        let moved = unsafe { System.realloc(ptr, layout, new_size) };
        if !moved.is_null() {
            count(signed(new_size).wrapping_sub(signed(layout.size())));
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `work`, giving its result and the bytes it allocated on this thread and kept.
pub fn kept<T>(work: impl FnOnce() -> T) -> (T, usize) {
    let before = NET.try_with(Cell::get).unwrap_or(0);
    let out = work();
    let after = NET.try_with(Cell::get).unwrap_or(before);
    (
        out,
        usize::try_from(after.wrapping_sub(before)).unwrap_or(0),
    )
}

/// Runs `work`, giving the bytes it freed on this thread, net of what it allocated.
pub fn freed(work: impl FnOnce()) -> usize {
    let before = NET.try_with(Cell::get).unwrap_or(0);
    work();
    let after = NET.try_with(Cell::get).unwrap_or(before);
    usize::try_from(before.wrapping_sub(after)).unwrap_or(0)
}

/// Hands memory freed in the allocator's heaps back to the system. glibc keeps what large
/// values (a call's compiled schemas, hundreds of megabytes) leave behind in each thread's
/// heap, so a server's resident size would settle at its largest moment; elsewhere this does
/// nothing.
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own heaps, under their locks.
    unsafe {
        libc::malloc_trim(0);
    }
}
