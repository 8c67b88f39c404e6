//! Everything the store holds in memory (the records' index, the inbox queues, each segment's
//! counts), and the three ways it changes: an operation applied by the writer thread, a change
//! read back from the log at open, a retired segment's put moved on to the head.

use std::hash::RandomState;
use std::io;

use super::batch::{Answer, Batch, Op};
use super::change::{Change, Malformed, Reader};
use super::journal::Loc;
use super::queue::{id_key, Queues};
use super::records::Records;
use super::retire::Item;
use super::space::Space;

pub(super) struct State {
    pub(super) records: Records,
    pub(super) queues: Queues,
    pub(super) space: Space,
}

impl State {
    pub(super) fn new() -> Self {
        let secret = RandomState::new();
        Self {
            records: Records::new(&secret),
            queues: Queues::default(),
            space: Space::default(),
        }
    }

    /// Applies one operation in `b`.
    pub(super) fn apply(
        records: &mut Records,
        queues: &mut Queues,
        b: &mut Batch<'_>,
        op: Op,
    ) -> io::Result<Answer> {
        Ok(match op {
            Op::Reserve { key, value, lease } => {
                let wait = b.guard.wait(b.now, lease);
                let expiry = b.until(lease);
                records.reserve(b, &key, value, expiry, wait)?
            }
            Op::Renew { key, token, lease } => records.renew(b, &key, token, lease),
            Op::Complete {
                key,
                token,
                value,
                ttl,
            } => records.settle(b, &key, token, Some((value, ttl))),
            Op::Release { key, token } => records.settle(b, &key, token, None),
            Op::Remove { key, removal } => records.remove(b, &key, removal)?,
            Op::Get { key } => Answer::Record(records.get(b, &key)?),
            Op::Accept {
                key,
                value,
                ttl,
                id,
                due,
                delivery,
            } => {
                let expiry = b.until(ttl);
                let answer = records.reserve(b, &key, value, expiry, None)?;
                if let Answer::Acquired = answer {
                    queues.push(b, key.route().as_str(), id_key(id), due, &delivery);
                }
                answer
            }
            Op::Queue(op) => Answer::Queue(queues.apply(b, op)?),
            Op::Count => Answer::Count(records.len() as u64),
            Op::Ping => Answer::Pong,
        })
    }

    /// Moves on what is still current of a retired segment's puts.
    pub(super) fn retire(
        records: &mut Records,
        queues: &mut Queues,
        b: &mut Batch<'_>,
        items: &[Item],
    ) {
        for item in items {
            match item {
                Item::Record { key, loc, value } => {
                    records.retire(b, key, *loc, value.as_deref());
                }
                Item::Delivery {
                    queue,
                    id,
                    loc,
                    value,
                    dead,
                } => queues.retire(b, queue, *id, *loc, value, *dead),
            }
        }
    }

    /// Applies again the changes of an entry whose payload starts at `payload_at` in `segment`.
    pub(super) fn replay(
        &mut self,
        segment: u32,
        payload_at: u64,
        payload: &[u8],
    ) -> Result<(), Malformed> {
        let mut reader = Reader::new(payload);
        loop {
            let loc = Loc::new(segment, payload_at + (payload.len() - reader.left()) as u64);
            let Some(change) = reader.next_change()? else {
                return Ok(());
            };
            let space = &mut self.space;
            match change {
                Change::RecordPut { key, value } => self.records.replay_put(space, loc, key, value),
                Change::RecordDelete { key } => self.records.replay_delete(space, segment, key),
                Change::LivePut { queue, id, value } => {
                    self.queues.replay_put(space, loc, queue, id, value, false);
                }
                Change::DeadPut { queue, id, value } => {
                    self.queues.replay_put(space, loc, queue, id, value, true);
                }
                Change::LiveDelete { queue, id } => {
                    self.queues.replay_delete(space, segment, queue, id, false);
                }
                Change::DeadDelete { queue, id } => {
                    self.queues.replay_delete(space, segment, queue, id, true);
                }
            }
        }
    }
}
