//! Fenced writes by the server's own commands, where it has them.
//!
//! Valkey 8.1 and Redis 8.4 take `SET key value IFEQ expected PX ms`: when the key holds exactly
//! `expected` it is written, value and expiry, and the answer is `OK`; otherwise the answer is
//! nil and the key (or its absence) and its expiry stay as they were. Valkey 9.0 has
//! `DELIFEQ key expected` and Redis 8.4 `DELEX key IFEQ expected`: the key is deleted only on an
//! exact match, answering 1, else 0. All of them compare the whole value, where the scripts
//! compare the holder's ten-byte prefix, so a holder presents the exact in-flight record its
//! reservation wrote (kept in `held`). That record names the holder's token, so it matches only
//! while the reservation is still the holder's: neither a completed record nor another holder's
//! reservation is ever equal to it. `IFEQ` without `PX` would drop the key's expiry, so every
//! native write sends one.
//!
//! What the server offers is learned from its answers, as the store learns `SET ... NX GET`:
//! each kind of fenced write tries the best command first and moves down its list of candidates
//! when the server refuses one (a `SET` that does not know `IFEQ` answers `syntax error`; a
//! missing `DELIFEQ` or `DELEX` answers `unknown command`), down to the script, which every
//! server runs. A refused command has written nothing, so the write is simply made again with
//! the next candidate, in the same operation. What worked is kept for the store's lifetime, and
//! a refusal later (a failover to an older server behind the same address) moves it down again.
//! A store never moves back up: scripts are exact on every server, only dearer.

use std::sync::atomic::{AtomicU8, Ordering};

use bytes::Bytes;
use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};

use crate::held::HeldRecords;
use crate::scripts::{Lua, COMPLETE, RELEASE, RENEW};
use idempotency_core::backend::Fenced;
use idempotency_core::backend::FencingToken;

/// A command a fenced write can be made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceCommand {
    /// `SET key value IFEQ held PX ms` (Valkey 8.1+, Redis 8.4+), for renewals and completions.
    SetIfEq,
    /// `DELIFEQ key held` (Valkey 9.0+), for releases.
    DelIfEq,
    /// `DELEX key IFEQ held` (Redis 8.4+), for releases.
    DelEx,
    /// A Lua script comparing the holder's prefix, on any server.
    Script,
}

/// What a store makes its fenced writes with, as learned from the server's answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenceCommands {
    /// Renewals and completions: `SetIfEq` or `Script`; `None` until a server has answered one.
    pub write: Option<FenceCommand>,
    /// Releases: `DelIfEq`, `DelEx` or `Script`; `None` until a server has answered one.
    pub release: Option<FenceCommand>,
}

const WRITES: &[FenceCommand] = &[FenceCommand::SetIfEq, FenceCommand::Script];
const RELEASES: &[FenceCommand] = &[
    FenceCommand::DelIfEq,
    FenceCommand::DelEx,
    FenceCommand::Script,
];

/// One fenced write, as the native commands need it.
#[derive(Clone, Copy)]
pub(crate) enum FencedWrite<'a> {
    /// The held record again, with a fresh expiry.
    Renew {
        lease: &'a str,
    },
    /// The outcome in place of the held record.
    Complete {
        encoded: &'a [u8],
        ttl: &'a str,
    },
    Release,
}

impl FencedWrite<'_> {
    /// The write by its script, which answers 1 when the holder's prefix was still there.
    async fn by_script<C: ConnectionLike + Send>(
        self,
        conn: &mut C,
        name: String,
        token: FencingToken,
    ) -> RedisResult<Fenced> {
        let holder = token.in_flight_prefix();
        let (script, args): (&'static Lua, Vec<&[u8]>) = match self {
            FencedWrite::Renew { lease } => (&RENEW, vec![&holder, lease.as_bytes()]),
            FencedWrite::Complete { encoded, ttl } => {
                (&COMPLETE, vec![&holder, encoded, ttl.as_bytes()])
            }
            FencedWrite::Release => (&RELEASE, vec![&holder]),
        };
        let applied: i64 = script.on(name, &args).run(conn).await?;
        Ok(if applied == 1 {
            Fenced::Applied
        } else {
            Fenced::LeaseLost
        })
    }
}

/// What the store's fenced writes use, and the records they compare against.
pub(crate) struct Fencing {
    writes: Candidates,
    releases: Candidates,
    held: HeldRecords,
}

impl Default for Fencing {
    fn default() -> Self {
        Self {
            writes: Candidates::new(WRITES),
            releases: Candidates::new(RELEASES),
            held: HeldRecords::default(),
        }
    }
}

impl Fencing {
    pub(crate) fn commands(&self) -> FenceCommands {
        FenceCommands {
            write: self.writes.learned(),
            release: self.releases.learned(),
        }
    }

    /// Keeps the record a reservation wrote, unless every fenced write is down to the script.
    pub(crate) fn hold(&self, token: FencingToken, encoded: &Bytes) {
        let scripts = [&self.writes, &self.releases]
            .iter()
            .all(|candidates| candidates.current().1 == FenceCommand::Script);
        if !scripts {
            self.held.hold(token, encoded.clone());
        }
    }

    /// The holder's record, when a native command may make this write.
    pub(crate) fn held(&self, token: FencingToken, write: FencedWrite<'_>) -> Option<Bytes> {
        if self.candidates(write).current().1 == FenceCommand::Script {
            return None;
        }
        self.held.get(token)
    }

    /// The holder has completed or released: its record cannot match any more.
    pub(crate) fn forget(&self, token: FencingToken) {
        self.held.forget(token);
    }

    /// Makes the write on `name`, natively when the holder's record is `held` and the server
    /// has a command for it, else with the script.
    pub(crate) async fn write<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        name: String,
        token: FencingToken,
        held: Option<Bytes>,
        write: FencedWrite<'_>,
    ) -> RedisResult<Fenced> {
        if let Some(held) = held {
            if let Some(fenced) = self.native(conn, &name, &held, write).await? {
                return Ok(fenced);
            }
        }
        write.by_script(conn, name, token).await
    }

    /// Makes the write with the best command the server takes: `None` when that is the script.
    async fn native<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        name: &str,
        held: &[u8],
        write: FencedWrite<'_>,
    ) -> RedisResult<Option<Fenced>> {
        let candidates = self.candidates(write);
        loop {
            let (rung, command) = candidates.current();
            let cmd = match (command, write) {
                (FenceCommand::Script, _) => return Ok(None),
                (_, FencedWrite::Renew { lease }) => set_if_held(name, held, held, lease),
                (_, FencedWrite::Complete { encoded, ttl }) => {
                    set_if_held(name, encoded, held, ttl)
                }
                (_, FencedWrite::Release) => delete_if_held(command, name, held),
            };
            match cmd.query_async::<Value>(conn).await {
                Err(e) if refused(&e) => candidates.refused(rung, &e),
                Err(e) => return Err(e),
                Ok(answer) => {
                    candidates.answered(rung);
                    return fenced(command, answer).map(Some);
                }
            }
        }
    }

    fn candidates(&self, write: FencedWrite<'_>) -> &Candidates {
        match write {
            FencedWrite::Release => &self.releases,
            _ => &self.writes,
        }
    }
}

/// The commands one kind of fenced write may use, best first, and where it stands among them.
struct Candidates {
    list: &'static [FenceCommand],
    /// The index of the candidate in use, times two, plus one once a server has answered it.
    state: AtomicU8,
}

impl Candidates {
    const fn new(list: &'static [FenceCommand]) -> Self {
        Self {
            list,
            state: AtomicU8::new(0),
        }
    }

    /// The candidate in use, with its index.
    fn current(&self) -> (u8, FenceCommand) {
        let rung = self.state.load(Ordering::Relaxed) / 2;
        (rung, self.list[usize::from(rung)])
    }

    /// The candidate in use, once a server has answered it (the last needs no answer).
    fn learned(&self) -> Option<FenceCommand> {
        let state = self.state.load(Ordering::Relaxed);
        let rung = usize::from(state / 2);
        (state % 2 == 1 || rung + 1 == self.list.len()).then(|| self.list[rung])
    }

    fn answered(&self, rung: u8) {
        let fresh = rung * 2;
        let confirmed =
            self.state
                .compare_exchange(fresh, fresh + 1, Ordering::Relaxed, Ordering::Relaxed);
        if confirmed.is_ok() {
            let command = self.list[usize::from(rung)];
            tracing::info!(
                ?command,
                "fenced writes: the Redis server takes the native command"
            );
        }
    }

    /// The server refused candidate `rung`: the next one is used from now on.
    fn refused(&self, rung: u8, error: &RedisError) {
        let moved = self
            .state
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |state| {
                (state / 2 == rung).then_some((rung + 1) * 2)
            });
        if moved.is_ok() {
            let refused = self.list[usize::from(rung)];
            let next = self.list[usize::from(rung) + 1];
            tracing::info!(?refused, ?next, %error, "fenced writes: the Redis server refused a command; using the next from now on");
        }
    }
}

/// `SET name value IFEQ held PX ms`.
fn set_if_held(name: &str, value: &[u8], held: &[u8], expiry: &str) -> Cmd {
    let words = "SET".len() + "IFEQ".len() + "PX".len();
    let size = words + name.len() + value.len() + held.len() + expiry.len();
    let mut cmd = Cmd::with_capacity(6, size);
    cmd.arg("SET").arg(name).arg(value).arg("IFEQ").arg(held);
    cmd.arg("PX").arg(expiry);
    cmd
}

/// `DELIFEQ name held`, or `DELEX name IFEQ held`.
fn delete_if_held(command: FenceCommand, name: &str, held: &[u8]) -> Cmd {
    let mut cmd = Cmd::with_capacity(4, "DELEX".len() + "IFEQ".len() + name.len() + held.len());
    match command {
        FenceCommand::DelEx => cmd.arg("DELEX").arg(name).arg("IFEQ").arg(held),
        _ => cmd.arg("DELIFEQ").arg(name).arg(held),
    };
    cmd
}

/// Whether the server refused the command itself, rather than failing to run it: it does not
/// know the command or this form of it, or the operator's ACL does not let the proxy use it.
fn refused(error: &RedisError) -> bool {
    match error.kind() {
        ErrorKind::Server(ServerErrorKind::NoPerm) => true,
        ErrorKind::Server(ServerErrorKind::ResponseError) => {
            let message = error.to_string();
            [
                "syntax error",
                "unknown command",
                "wrong number of arguments",
            ]
            .iter()
            .any(|refusal| message.contains(refusal))
        }
        _ => false,
    }
}

/// What a native command's answer says of the write.
fn fenced(command: FenceCommand, answer: Value) -> RedisResult<Fenced> {
    let set = command == FenceCommand::SetIfEq;
    match answer {
        Value::Okay if set => Ok(Fenced::Applied),
        Value::Nil if set => Ok(Fenced::LeaseLost),
        Value::Int(1) if !set => Ok(Fenced::Applied),
        Value::Int(0) if !set => Ok(Fenced::LeaseLost),
        other => Err(RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "unexpected answer to a fenced write",
            format!("{command:?} answered {other:?}"),
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error(message: &'static str) -> RedisError {
        RedisError::from((ErrorKind::Server(ServerErrorKind::ResponseError), message))
    }

    #[test]
    fn the_native_writes_go_out_as_the_commands_they_name() {
        let mut set = redis::cmd("SET");
        set.arg("idem:k").arg(&b"\x01\x01done"[..]).arg("IFEQ");
        set.arg(&b"\x01\x00held"[..]).arg("PX").arg("86400000");
        let sized = set_if_held("idem:k", b"\x01\x01done", b"\x01\x00held", "86400000");
        assert_eq!(sized.get_packed_command(), set.get_packed_command());
        let mut delifeq = redis::cmd("DELIFEQ");
        delifeq.arg("idem:k").arg(&b"held"[..]);
        let sized = delete_if_held(FenceCommand::DelIfEq, "idem:k", b"held");
        assert_eq!(sized.get_packed_command(), delifeq.get_packed_command());
        let mut delex = redis::cmd("DELEX");
        delex.arg("idem:k").arg("IFEQ").arg(&b"held"[..]);
        let sized = delete_if_held(FenceCommand::DelEx, "idem:k", b"held");
        assert_eq!(sized.get_packed_command(), delex.get_packed_command());
    }

    #[test]
    fn only_a_refused_command_moves_on_to_the_next() {
        assert!(refused(&server_error("syntax error")));
        let unknown = "unknown command 'delifeq', with args beginning with: 'k' 'v'";
        assert!(refused(&server_error(unknown)));
        let denied = (ErrorKind::Server(ServerErrorKind::NoPerm), "no permissions");
        assert!(refused(&RedisError::from(denied)));
        let wrong_type = "WRONGTYPE Operation against a key holding the wrong kind of value";
        assert!(!refused(&server_error(wrong_type)));
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(!refused(&RedisError::from(io)));
    }

    #[test]
    fn answers_say_whether_the_holder_was_still_there() {
        use FenceCommand::{DelEx, DelIfEq, SetIfEq};
        assert_eq!(fenced(SetIfEq, Value::Okay).unwrap(), Fenced::Applied);
        assert_eq!(fenced(SetIfEq, Value::Nil).unwrap(), Fenced::LeaseLost);
        assert_eq!(fenced(DelIfEq, Value::Int(1)).unwrap(), Fenced::Applied);
        assert_eq!(fenced(DelEx, Value::Int(0)).unwrap(), Fenced::LeaseLost);
        assert!(fenced(SetIfEq, Value::Int(1)).is_err());
        assert!(fenced(DelIfEq, Value::Okay).is_err());
        assert!(fenced(DelIfEq, Value::Int(2)).is_err());
    }

    #[test]
    fn refusals_walk_down_the_candidates_and_answers_confirm_them() {
        let releases = Candidates::new(RELEASES);
        assert_eq!(releases.current(), (0, FenceCommand::DelIfEq));
        assert_eq!(releases.learned(), None, "nothing answered yet");
        releases.refused(0, &server_error("unknown command"));
        // A second refusal of the same candidate, by a write that raced the first, is no step.
        releases.refused(0, &server_error("unknown command"));
        assert_eq!(releases.current(), (1, FenceCommand::DelEx));
        releases.answered(1);
        assert_eq!(releases.learned(), Some(FenceCommand::DelEx));
        // A server that no longer takes it (an older one after a failover) moves it down again.
        releases.refused(1, &server_error("unknown command"));
        assert_eq!(releases.current(), (2, FenceCommand::Script));
        assert_eq!(releases.learned(), Some(FenceCommand::Script));
    }

    #[test]
    fn records_are_held_only_while_a_native_write_may_use_them() {
        let fencing = Fencing::default();
        let (token, record) = (FencingToken::from_u64(7), Bytes::from_static(b"held"));
        fencing.hold(token, &record);
        let renew = FencedWrite::Renew { lease: "1000" };
        assert_eq!(fencing.held(token, renew), Some(record.clone()));
        fencing.writes.refused(0, &server_error("syntax error"));
        assert_eq!(fencing.held(token, renew), None, "renewals are scripts now");
        assert!(fencing.held(token, FencedWrite::Release).is_some());
        fencing.forget(token);
        assert_eq!(fencing.held(token, FencedWrite::Release), None);
        for rung in 0..2 {
            fencing
                .releases
                .refused(rung, &server_error("unknown command"));
        }
        fencing.hold(token, &record);
        assert!(fencing.held.get(token).is_none(), "nothing native is left");
    }
}
