//! Gauges read when `/metrics` is scraped.
//!
//! Some gauges count what the store holds: an inbox route's pending deliveries and the age of
//! the oldest (and, alike, any other queue kept in the store). Counted at moments of their own
//! (a worker's loop) they read 0 while a backlog waits, and disagree with the admin endpoints,
//! which count the same queues when asked. So nothing sets such a gauge as its queue changes:
//! its [`GaugeSource`] reads the queue and sets it right before `/metrics` renders, which makes
//! what a scrape says what the admin endpoint would have said at that moment, and costs one
//! store read per source per scrape, none between scrapes.
//!
//! Sources are registered by kind (`inbox`, one per inbox route); each generation of the config
//! replaces those of a kind whole, so a route that stops being an inbox is no longer read (its
//! gauges keep their last value). A scrape reads every source at once, each for at most
//! [`READ_TIMEOUT`], so a store that does not answer holds a scrape up that long at most; a
//! gauge whose source failed keeps its last value, and the failure is logged.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::task::JoinSet;

use crate::store::StoreError;

/// How long one source may take before a scrape renders without its new values.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(1);

/// Reads what some gauges count, now, and sets them.
#[async_trait]
pub(crate) trait GaugeSource: Send + Sync + 'static {
    /// Reads and sets; on an error the gauges keep their last value.
    async fn read(&self) -> Result<(), StoreError>;
}

/// A source and the name its failures are logged under (an inbox route's name).
#[derive(Clone)]
pub(crate) struct Named {
    pub(crate) name: String,
    pub(crate) source: Arc<dyn GaugeSource>,
}

impl fmt::Debug for Named {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Named").field("name", &self.name).finish()
    }
}

/// Every source of the running config, by kind. Clones share them.
#[derive(Debug, Clone, Default)]
pub(crate) struct ScrapedGauges {
    sources: Arc<Mutex<BTreeMap<&'static str, Vec<Named>>>>,
}

impl ScrapedGauges {
    fn sources(&self) -> MutexGuard<'_, BTreeMap<&'static str, Vec<Named>>> {
        // Each change is one insert, so a poisoned map is still whole.
        self.sources.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// From now on the sources of `kind` are `sources`, in place of those before.
    pub(crate) fn replace(&self, kind: &'static str, sources: Vec<Named>) {
        self.sources().insert(kind, sources);
    }

    /// Reads every source, all at once, each for at most [`READ_TIMEOUT`].
    pub(crate) async fn read(&self) {
        let all: Vec<(&'static str, Named)> = self
            .sources()
            .iter()
            .flat_map(|(kind, named)| named.iter().map(|n| (*kind, n.clone())))
            .collect();
        let mut reads = JoinSet::new();
        for (kind, named) in all {
            reads.spawn(async move {
                let read = tokio::time::timeout(READ_TIMEOUT, named.source.read()).await;
                (kind, named.name, read)
            });
        }
        while let Some(done) = reads.join_next().await {
            match done {
                Ok((_, _, Ok(Ok(())))) => {}
                Ok((kind, name, Ok(Err(error)))) => {
                    tracing::warn!(kind, name, %error, "metrics: a gauge could not be read; it keeps its last value");
                }
                Ok((kind, name, Err(_))) => {
                    tracing::warn!(kind, name, timeout = ?READ_TIMEOUT, "metrics: a gauge was not read in time; it keeps its last value");
                }
                Err(error) => tracing::warn!(%error, "metrics: reading a gauge failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[derive(Default)]
    struct Counted {
        reads: AtomicUsize,
        fails: bool,
    }

    #[async_trait]
    impl GaugeSource for Counted {
        async fn read(&self) -> Result<(), StoreError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            if self.fails {
                return Err(StoreError::unavailable("down"));
            }
            Ok(())
        }
    }

    fn named(name: &str, source: &Arc<Counted>) -> Named {
        Named {
            name: name.into(),
            source: source.clone(),
        }
    }

    #[tokio::test]
    async fn each_scrape_reads_the_sources_of_the_running_config_once() {
        let gauges = ScrapedGauges::default();
        let (old, new) = (Arc::new(Counted::default()), Arc::new(Counted::default()));
        let failing = Arc::new(Counted {
            fails: true,
            ..Counted::default()
        });
        gauges.replace("inbox", vec![named("a", &old)]);
        gauges.replace("other", vec![named("f", &failing)]);
        gauges.read().await;
        gauges.replace("inbox", vec![named("b", &new)]);
        gauges.read().await;
        gauges.read().await;
        let reads = |c: &Arc<Counted>| c.reads.load(Ordering::SeqCst);
        assert_eq!((reads(&old), reads(&new), reads(&failing)), (1, 2, 3));
    }
}
