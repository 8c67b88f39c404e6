//! The macros that turn the suite's cases into tests, one module of tests per backend.
//!
//! A backend is an `async fn(test: &str) -> Option<Arc<dyn Store>>` in the calling test file:
//! `None` skips (a Redis that is not there, with a loud message), and `test` names the case,
//! for a backend that keeps each case's records apart (a file per test, a key prefix).

/// One test per record case, in a module named after `$backend`.
#[macro_export]
macro_rules! store_suite {
    ($backend:ident) => {
        $crate::store_suite!(@named $backend, $backend, [
            fresh_reserve_acquires,
            second_reserve_sees_the_holder,
            completion_is_replayed_byte_for_byte,
            strangers_are_fenced_off,
            release_by_the_holder_frees_the_key,
            an_expired_lease_frees_the_key_and_fences_the_old_holder,
            renew_keeps_a_short_lease_alive,
            a_completed_record_expires_after_its_ttl,
            get_reports_the_time_left,
            remove_deletes_and_reports_whether_it_existed,
            removing_an_in_flight_record_needs_force,
            scoped_keys_never_collide,
            concurrent_reserves_admit_exactly_one,
        ]);
    };
    (@named $module:ident, $backend:ident, [$($case:ident),* $(,)?]) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let test = concat!(stringify!($backend), "-", stringify!($case));
                    if let Some(store) = super::$backend(test).await {
                        $crate::suite::$case(store).await;
                    }
                }
            )*
        }
    };
}

/// One test per inbox case, in a module named `$module`, over `$backend`.
#[macro_export]
macro_rules! inbox_suite {
    ($module:ident => $backend:ident) => {
        $crate::store_suite!(@named $module, $backend, [
            accept_records_the_ack_and_queues_once,
            claims_lease_deliveries_until_their_lease_runs_out,
            a_late_settlement_is_fenced_off,
            a_retry_is_due_again_with_its_failure,
            dead_deliveries_page_revive_and_go,
            queues_report_the_oldest_waiting,
            concurrent_claims_hand_each_delivery_out_once,
        ]);
    };
}
