//! What went wrong in a database call, in the words an operator acts on: the call ran out of
//! time, lost a race with another transaction, was refused, or found the server gone. The
//! error itself (its SQLSTATE, its source) is kept by whoever holds it; this only names it.

use std::fmt;
use std::io;

use tokio_postgres::error::SqlState;

/// The kind of a failed database call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No answer in time: a client-side deadline, or the server's `statement_timeout`.
    Timeout,
    /// A serialization failure or a deadlock: the same call may succeed when tried again.
    Serialization,
    /// The server refused: the connection, the credentials, or the right to do it.
    Refused,
    /// The connection is gone, or the server is shutting down.
    Gone,
    /// Anything else the server or the client said.
    Other,
}

impl Failure {
    /// How a log line names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Serialization => "serialization",
            Failure::Refused => "refused",
            Failure::Gone => "gone",
            Failure::Other => "error",
        }
    }

    /// The kind of `error`, from its SQLSTATE or, without one, from what the client saw.
    pub fn of(error: &tokio_postgres::Error) -> Self {
        match error.code() {
            Some(code) => Self::of_state(code),
            None if error.is_closed() => Failure::Gone,
            None => Self::of_io(error),
        }
    }

    fn of_state(code: &SqlState) -> Self {
        let class = &code.code()[..2];
        match code {
            c if *c == SqlState::QUERY_CANCELED => Failure::Timeout,
            c if *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED =>
            {
                Failure::Serialization
            }
            c if *c == SqlState::INSUFFICIENT_PRIVILEGE => Failure::Refused,
            _ if class == "28" || class == "3D" => Failure::Refused,
            _ if class == "08" || class == "57" => Failure::Gone,
            _ => Failure::Other,
        }
    }

    fn of_io(error: &tokio_postgres::Error) -> Self {
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            if let Some(io) = cause.downcast_ref::<io::Error>() {
                return match io.kind() {
                    io::ErrorKind::ConnectionRefused => Failure::Refused,
                    io::ErrorKind::TimedOut => Failure::Timeout,
                    _ => Failure::Gone,
                };
            }
            source = cause.source();
        }
        // The client's own timeouts (connect_timeout) carry no io error.
        if error.to_string().contains("timeout") {
            Failure::Timeout
        } else {
            Failure::Other
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_name_what_happened() {
        assert_eq!(
            Failure::of_state(&SqlState::QUERY_CANCELED),
            Failure::Timeout
        );
        assert_eq!(
            Failure::of_state(&SqlState::T_R_SERIALIZATION_FAILURE),
            Failure::Serialization
        );
        assert_eq!(
            Failure::of_state(&SqlState::INVALID_PASSWORD),
            Failure::Refused
        );
        assert_eq!(Failure::of_state(&SqlState::ADMIN_SHUTDOWN), Failure::Gone);
        assert_eq!(
            Failure::of_state(&SqlState::UNDEFINED_TABLE),
            Failure::Other
        );
    }
}
