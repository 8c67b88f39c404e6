//! Whether the contract allows a second run of an operation, judged from the fault log alone.
//!
//! The contract lets a key run again once its reservation is gone without an outcome stored.
//! Here (upstream 503s and refused connections record no run; `on_ambiguous = "keep"`) that
//! happens in three ways, each with a window in which it must have happened:
//!
//! - **paused holder** (allowed): the proxy that ran it was stopped (SIGSTOP) long enough for its
//!   lease to run out while it held the key (working on it, or reserved and about to forward
//!   it), before any client had the first answer. Or, the other way round, a proxy that
//!   reserved the key was stopped before forwarding, the key was taken and run elsewhere, and
//!   the stopped proxy forwarded it when it woke.
//! - **killed holder** (allowed): the proxy that ran it was killed while it held the key, before
//!   any client had the first answer: a proxy that dies stops renewing, and the key becomes
//!   free again when the lease runs out (docs/reference.md#leases).
//! - **store outage** (unsure): the store was unreachable (killed, paused, stalled or cut) while
//!   the first run held the key: renewals could not reach it, so the lease ran out, or the
//!   outcome could not be stored, and the proxy answered anyway. The reference does not say what
//!   a proxy must do then; the campaign counts these apart.
//!
//! Anything else is a forbidden second run.

use crate::history::{Attempt, Execution, Fault, FaultKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    PausedHolder,
    KilledHolder,
    StoreOutage,
    Forbidden,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::PausedHolder => "allowed: paused holder",
            Class::KilledHolder => "allowed: killed holder",
            Class::StoreOutage => "unsure: store outage",
            Class::Forbidden => "forbidden",
        }
    }
}

/// One fault's window, in microseconds.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: u64,
    end: u64,
}

impl Window {
    fn len(self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    fn overlaps(self, from: u64, to: u64) -> bool {
        self.start <= to && self.end >= from
    }
}

/// The faults, indexed the way the judgements need them.
pub struct Faults {
    /// Per proxy: SIGSTOPs and SIGKILLs (a kill's window ends when the proxy listens again).
    pauses: Vec<Vec<Window>>,
    kills: Vec<Vec<Window>>,
    /// Every time the store (any node) could not be reached, widened by the time a client
    /// takes to reconnect.
    outages: Vec<Window>,
    lease: u64,
    upstream_timeout: u64,
}

/// Timers run late on a loaded machine, and a process sees a signal a little after it is sent.
pub const SLACK: u64 = 500_000;
/// After a store comes back, its clients take a moment to reconnect (the redis client backs off
/// up to a second between attempts).
const RECONNECT: u64 = 2_000_000;

impl Faults {
    pub fn new(faults: &[Fault], proxies: usize, lease: u64, upstream_timeout: u64) -> Self {
        let mut pauses = vec![Vec::new(); proxies];
        let mut kills = vec![Vec::new(); proxies];
        let mut outages = Vec::new();
        for fault in faults {
            let window = Window {
                start: fault.start,
                end: fault.end,
            };
            let proxy = fault.target.trim_start_matches("proxy-").parse::<usize>();
            let list = match fault.kind {
                FaultKind::ProxyPause => proxy.ok().and_then(|p| pauses.get_mut(p)),
                FaultKind::ProxyKill => proxy.ok().and_then(|p| kills.get_mut(p)),
                FaultKind::StoreKill
                | FaultKind::StorePause
                | FaultKind::RelayStall
                | FaultKind::RelayCut => {
                    let end = window.end + RECONNECT;
                    outages.push(Window { end, ..window });
                    None
                }
                _ => None,
            };
            if let Some(list) = list {
                list.push(window);
            }
        }
        Self {
            pauses,
            kills,
            outages,
            lease,
            upstream_timeout,
        }
    }

    /// How a run (`later`) after an `earlier` run of the same operation is judged, given the
    /// operation's requests. `answered` is when a client first had the earlier run's answer, if
    /// it had it before.
    pub fn rerun(
        &self,
        earlier: &Execution,
        later: &Execution,
        answered: Option<u64>,
        requests: &[&Attempt],
    ) -> Class {
        let answered = answered.unwrap_or(u64::MAX);
        if self.paused_holder(earlier, later, answered, requests) {
            Class::PausedHolder
        } else if self.killed_holder(earlier, later, answered) {
            Class::KilledHolder
        } else if self.outage_while_held(earlier, later.t) {
            Class::StoreOutage
        } else {
            Class::Forbidden
        }
    }

    /// Could a pause have let the lease run out: the earlier run's proxy paused while it held
    /// the key, before its answer reached anyone and long enough before the later run; or the
    /// later run's proxy paused between reserving and forwarding, and the earlier run took
    /// the key meanwhile.
    fn paused_holder(
        &self,
        earlier: &Execution,
        later: &Execution,
        answered: u64,
        requests: &[&Attempt],
    ) -> bool {
        let expired_by = |pause: Window, t: u64| pause.start + self.lease / 2 <= t + SLACK;
        let mut holder = self.holding_pauses(earlier, requests);
        let mut late = self
            .holding_pauses(later, requests)
            .filter(|p| self.forwarded_on_waking(later, *p, requests));
        holder.any(|p| p.start < answered && expired_by(p, later.t))
            || late.any(|p| expired_by(p, earlier.t))
    }

    /// The pauses, long enough to let a lease run out, of the proxy that ran `run`, during
    /// which it held the key: it had forwarded the run and not answered yet, or it had
    /// reserved the key and forwarded the run on waking.
    fn holding_pauses<'a>(
        &'a self,
        run: &'a Execution,
        requests: &'a [&'a Attempt],
    ) -> impl Iterator<Item = Window> + 'a {
        self.pauses_of(run.via).filter(move |p| {
            let while_working =
                p.start + SLACK >= run.t && p.start <= run.t + self.upstream_timeout + SLACK;
            p.len() + SLACK >= self.lease / 2
                && (while_working || self.forwarded_on_waking(run, *p, requests))
        })
    }

    /// The run went upstream as its proxy woke, for a request that was in that proxy when it
    /// was stopped (sent before, unanswered then; its client may have given up since, but the
    /// proxy carries on with it).
    fn forwarded_on_waking(&self, run: &Execution, pause: Window, requests: &[&Attempt]) -> bool {
        let on_waking = run.t + SLACK >= pause.end && run.t <= pause.end + SLACK;
        on_waking
            && requests.iter().any(|a| {
                a.replica == run.via && a.start <= pause.start + SLACK && a.end >= pause.start
            })
    }

    /// The earlier run's proxy was killed while it held the key, before anyone had the answer.
    fn killed_holder(&self, earlier: &Execution, later: &Execution, answered: u64) -> bool {
        self.kills_of(earlier.via).any(|k| {
            k.start + SLACK >= earlier.t
                && k.start <= earlier.t + self.upstream_timeout + SLACK
                && k.start < answered
                && k.start <= later.t
        })
    }

    /// The store was out at some time while the earlier run held the key, and before `until`.
    pub fn outage_while_held(&self, earlier: &Execution, until: u64) -> bool {
        let held_until = earlier.t + self.upstream_timeout + SLACK;
        self.outages
            .iter()
            .any(|o| o.start <= until && o.overlaps(earlier.t.saturating_sub(SLACK), held_until))
    }

    /// Whether the proxy that ran `run` was paused past the lease while it held the key,
    /// before the run's answer was given at `answered` (it woke to find its lease gone, and
    /// answered with what it had).
    pub fn paused_before_answer(
        &self,
        run: &Execution,
        answered: u64,
        requests: &[&Attempt],
    ) -> bool {
        self.holding_pauses(run, requests)
            .any(|p| p.start <= answered)
    }

    fn pauses_of(&self, proxy: usize) -> impl Iterator<Item = Window> + '_ {
        self.pauses.get(proxy).into_iter().flatten().copied()
    }

    fn kills_of(&self, proxy: usize) -> impl Iterator<Item = Window> + '_ {
        self.kills.get(proxy).into_iter().flatten().copied()
    }
}
