//! Spreading per-thread state over a fixed number of slots: the upstream pool's idle lists, the
//! metrics recorder's counts and samples and each route's activity on the status page keep one
//! per slot, so that worker threads neither contend for a lock nor share a cache line.
//!
//! The cache line matters as much as the lock: two slots on one line make each thread's write
//! take the line from the other core, even though neither ever waits for the other's lock.

use std::sync::atomic::{AtomicUsize, Ordering};

/// How many slots per-thread state keeps: one per worker thread on machines of up to this many
/// cores; threads beyond it share slots.
pub(crate) const SLOTS: usize = 8;

/// This thread's slot among `count`, the same for every caller: threads are numbered in the
/// order they first ask, so the first `count` threads each get a slot of their own.
pub(crate) fn slot_of_this_thread(count: usize) -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static ORDINAL: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    ORDINAL.with(|ordinal| *ordinal % count)
}

/// One `T` per thread slot, each on cache lines of its own.
#[derive(Debug)]
pub(crate) struct PerThread<T> {
    slots: Box<[OwnLines<T>]>,
}

/// Aligned to two cache lines: the prefetcher on x86 pulls lines in pairs.
#[derive(Debug, Default)]
#[repr(align(128))]
struct OwnLines<T>(T);

impl<T: Default> PerThread<T> {
    /// [`SLOTS`] slots, each holding `T::default()`.
    pub(crate) fn new() -> Self {
        Self {
            slots: (0..SLOTS).map(|_| OwnLines::default()).collect(),
        }
    }
}

impl<T> PerThread<T> {
    /// The slot of the calling thread.
    pub(crate) fn mine(&self) -> &T {
        self.slot(self.mine_at())
    }

    /// Where the calling thread's slot is, for [`slot`](Self::slot).
    pub(crate) fn mine_at(&self) -> usize {
        slot_of_this_thread(self.slots.len())
    }

    /// The slot at `at`, as [`mine_at`](Self::mine_at) gave it.
    pub(crate) fn slot(&self, at: usize) -> &T {
        &self.slots[at].0
    }

    /// Every slot, as a reader that sums them needs.
    pub(crate) fn all(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().map(|slot| &slot.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_its_slot_and_another_thread_gets_another() {
        let mine = slot_of_this_thread(usize::MAX);
        assert_eq!(slot_of_this_thread(usize::MAX), mine);
        let theirs = std::thread::spawn(|| slot_of_this_thread(usize::MAX))
            .join()
            .unwrap();
        assert_ne!(theirs, mine);
        assert_eq!(slot_of_this_thread(1), 0);
    }

    #[test]
    fn slots_never_share_a_cache_line() {
        let slots: PerThread<u8> = PerThread::new();
        let addresses: Vec<usize> = slots
            .all()
            .map(|s| std::ptr::from_ref(s) as usize)
            .collect();
        for pair in addresses.windows(2) {
            assert!(pair[1] - pair[0] >= 128, "{addresses:?}");
        }
    }
}
