//! Waiting for a state the test cannot be told about: it is asked for again and again until it
//! holds, for at most a limit. Never a sleep that assumes it holds by then, which a slow
//! machine proves wrong.

use std::fmt::Display;
use std::time::Duration;

use tokio::time::Instant;

/// How long between two looks at the state.
const EVERY: Duration = Duration::from_millis(20);

/// What a look at the state answers: whether it holds, and with what.
pub trait Reached {
    /// What the state holds when it is reached.
    type Value;
    /// The value, once the state holds; `None` until then.
    fn reached(self) -> Option<Self::Value>;
}

impl Reached for bool {
    type Value = ();
    fn reached(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Reached for Option<T> {
    type Value = T;
    fn reached(self) -> Option<T> {
        self
    }
}

/// Looks at the state with `check` until it holds, and returns what the last look saw; fails
/// the test, naming `what` was waited for, when it does not hold within `limit`.
pub async fn until<R: Reached>(
    limit: Duration,
    what: impl Display,
    mut check: impl AsyncFnMut() -> R,
) -> R::Value {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await.reached() {
            return value;
        }
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        tokio::time::sleep(EVERY).await;
    }
}
