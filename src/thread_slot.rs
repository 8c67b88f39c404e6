//! Spreading per-thread state over a fixed number of slots: the upstream pool's idle lists and
//! the recorder's histogram buffers each keep one per slot, so that worker threads neither
//! contend for a lock nor share a cache line.

use std::sync::atomic::{AtomicUsize, Ordering};

/// This thread's slot among `count`, the same for every caller: threads are numbered in the
/// order they first ask, so the first `count` threads each get a slot of their own.
pub(crate) fn slot_of_this_thread(count: usize) -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static ORDINAL: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    ORDINAL.with(|ordinal| *ordinal % count)
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
}
