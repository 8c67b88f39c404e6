//! The inbox queues as the log changes them without an operation: each delivery's put or delete
//! read back at open, and a retired segment's current deliveries written again at the head.

use super::batch::Batch;
use super::journal::Loc;
use super::queue::{split_live, Live, Queues};
use super::space::Space;

/// The log read again at open, and retired segments' deliveries moved on.
impl Queues {
    /// A put of a live (or, with `dead`, a dead) delivery found in the log at `loc`.
    pub(super) fn replay_put(
        &mut self,
        space: &mut Space,
        loc: Loc,
        queue: &str,
        id: u128,
        value: &[u8],
        dead: bool,
    ) {
        space.changed(loc.segment());
        space.delivery_current(loc);
        let queue = self.queue(queue);
        let old = if dead {
            queue.dead.insert(id, loc)
        } else {
            let (due, claim, _) = split_live(value).unwrap_or((0, None, &[]));
            queue
                .set_live(id, Live { due, claim, loc })
                .map(|old| old.loc)
        };
        if let Some(old) = old {
            space.delivery_replaced(old);
        }
    }

    /// A delete of a live (or dead) delivery found in the log.
    pub(super) fn replay_delete(
        &mut self,
        space: &mut Space,
        segment: u32,
        queue: &str,
        id: u128,
        dead: bool,
    ) {
        space.changed(segment);
        let queue = self.queue(queue);
        let old = match dead {
            true => queue.dead.remove(&id),
            false => queue.take_live(id).map(|old| old.loc),
        };
        if let Some(old) = old {
            space.delivery_replaced(old);
        }
    }

    /// The put at `loc` of a segment being retired: written again at the head if it is still
    /// the delivery's current value.
    pub(super) fn retire(
        &mut self,
        b: &mut Batch<'_>,
        queue: &str,
        id: u128,
        loc: Loc,
        value: &[u8],
        dead: bool,
    ) {
        let Some(found) = self.queues.get_mut(queue) else {
            return;
        };
        let current = match dead {
            true => found.dead.get(&id).copied(),
            false => found.live.get(&id).map(|live| live.loc),
        };
        if current != Some(loc) {
            return;
        }
        let moved = b.put_delivery(queue, id, value, dead);
        let found = self.queue(queue);
        match dead {
            true => {
                found.dead.insert(id, moved);
            }
            false => {
                if let Some(live) = found.live.get_mut(&id) {
                    live.loc = moved;
                }
            }
        }
    }
}
