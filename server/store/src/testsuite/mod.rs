//! The storage conformance suite: one set of tests of the store traits (this crate), written
//! once against `&dyn Fixture` and run against every store by `store_test_suite!` in that
//! store's own tests, so each test shows as `<store>::<test>`. What these tests assert is the
//! storage contract: a new store passes them all, and a test that only one store passes is a
//! bug in the contract or in that store. Compiled with the `testsuite` feature only.
//!
//! Against Cassandra each test gets a keyspace of its own, migrated, dropped after (it needs
//! the Cassandra of `scripts/cassandra start`, or `REBOUND_TEST_CASSANDRA`). TTLs are
//! Cassandra's whole seconds, so the TTL tests write TTLs of 1 to 4 s and let time pass with
//! `Fixture::advance`: a real sleep against Cassandra, a manual clock's step for a store
//! that follows an injected clock.
//!
//! To add a store: a fixture (an implementation of `fixture::Setup`, see
//! `server/store-cassandra/tests/conformance.rs`) and one `store_test_suite!` invocation in
//! the store's own tests, whose crate has a dev-dependency on rebound-store with the
//! `testsuite` feature. The Cassandra store runs the suite twice: alone, and behind the
//! coalescing layer as the node runs it.
//!
//! What the suite pins down that is easy to get wrong in a new store:
//! - every listing is ascending by its key: years, days, windows (from `from`, inclusive),
//!   buckets, pointers by transaction id, members by node id, services by name, dead letters
//!   by (dead_at, transaction id); Tier 3 by (token, service, instance), both range ends
//!   inclusive, an empty range (start above end) reads nothing;
//! - an expired row is no row (None, or left out of a listing), never a row of defaults;
//! - `get_state` returns rows with the settle cells applied (`TxState::apply_settled`), and
//!   the cells themselves: a SUCCEEDED write sets `succeeded_generation` to its generation,
//!   `cancel_state` sets `cancelled_generation`, and no other write clears either; each cell
//!   expires with its own TTL, and a cancel cell that outlives its row reads as
//!   `TxState::cancelled_ghost`;
//! - a read state row carries its write time (`TxState::written`), and `settle_state` writes
//!   just above it: it lands on a row nothing changed since the read, and loses to every write
//!   made after the read (a cancel, a fresh start, a derived schedule) in any order;
//! - `put_state_if` and `cancel_state_if` write only over the SCHEDULED row of the generation
//!   they name (an LWT in Cassandra), and a terminal row written so expires whole with its TTL;
//! - a rejected `create_lease` carries the current owner, epoch, expiry and address; a
//!   rejected `replace_lease` only its epoch (Cassandra answers nothing else), and one on a
//!   slot never created carries None;
//! - every write of a SUCCEEDED or CANCELLED state row is logged in the finished log under
//!   the second of its `updated_at_ms`, read in (second, transaction id) order after a
//!   position, in pages that cover it once;
//! - settings and heartbeats are upserts: a setting for a service never touched makes its
//!   row, resuming keeps `paused_at`, a heartbeat replaces the last one and its TTL.

pub mod dead_letters;
pub mod directory;
pub mod finished;
pub mod fixture;
pub mod leases;
pub mod migrations;
pub mod services;
pub mod state;

/// What `store_test_suite!`'s expansion names through `$crate`, so that a store's tests need
/// no dependency of their own for it (they need tokio, for `#[tokio::test]`).
#[doc(hidden)]
pub mod __private {
    pub use futures::FutureExt;
}

/// `store_test_suite!(module, FixtureType)`: the whole suite for one store, a module of
/// `#[tokio::test]`s, one per suite test, each on a fresh fixture that is torn down after the
/// test, pass or fail. `FixtureType` implements `fixture::Setup` and is named by a path that
/// resolves inside the module (`crate::MyFixture`); the invoking crate depends on tokio.
#[macro_export]
macro_rules! store_test_suite {
    ($store:ident, $fixture:ty) => {
        $crate::store_test_suite!(@tests $store, $fixture;
            // Directory: days, windows, Tier 3, buckets, Tier 5, low water.
            directory::days_are_listed_ascending_by_year,
            directory::windows_are_listed_ascending_from_a_window,
            directory::low_water_defaults_to_zero_and_is_a_plain_upsert,
            directory::instances_are_read_in_token_order_within_an_inclusive_range,
            directory::window_instances_delete_leaves_other_windows_alone,
            directory::buckets_are_listed_ascending_and_deleted_one_by_one,
            directory::pointers_are_upserts_streamed_in_transaction_order,
            directory::pointer_groups_land_in_their_own_buckets,
            directory::pointers_stream_to_the_end_over_many_pages,
            directory::pointer_partition_delete_leaves_neighbours_alone,
            directory::late_pointer_delete_removes_one_row_only,
            directory::namespaces_do_not_see_each_other,
            // State rows.
            state::state_rows_round_trip,
            state::a_succeeded_write_sets_the_success_cell,
            state::cancel_state_writes_the_row_and_the_cancel_cell,
            state::a_cancel_wins_over_an_ack_that_raced_it,
            state::a_settle_lands_on_the_row_it_read,
            state::a_settle_loses_to_every_write_after_its_read,
            state::a_settle_never_ties_with_a_write_in_the_same_millisecond,
            state::conditional_writes_land_only_on_the_scheduled_row_they_name,
            state::a_conditional_write_lands_above_the_plain_write_it_follows,
            state::terminal_state_rows_expire_with_their_ttl,
            state::a_row_rewritten_without_ttl_lives_on_and_its_cells_expire,
            state::a_cancel_cell_outlives_its_row_as_a_ghost,
            state::get_states_answers_in_order_with_none_for_missing,
            state::put_states_gives_one_result_per_row,
            state::settle_states_gives_one_result_per_row,
            state::concurrent_single_state_calls_each_get_their_own_row,
            finished::finished_rows_are_logged_in_the_order_they_finished,
            // Leases, members, the store's clock.
            leases::server_time_follows_the_store_clock,
            leases::members_heartbeat_are_listed_and_expire,
            leases::leases_are_created_once_read_and_peeked,
            leases::leases_are_renewed_taken_and_released_by_epoch,
            leases::concurrent_create_lease_exactly_one_wins,
            leases::concurrent_replace_lease_exactly_one_wins,
            // Services.
            services::services_are_touched_paused_resumed_and_configured,
            services::push_targets_are_set_replaced_and_cleared,
            services::dependency_holds_are_put_replaced_listed_and_expire,
            services::a_dependency_probe_is_claimed_by_one_node,
            // Dead letters.
            dead_letters::dead_letters_stream_in_order_within_a_range,
            dead_letters::dead_letters_stream_to_the_end_over_many_pages,
            dead_letters::dead_letter_day_delete_leaves_neighbours_alone,
            dead_letters::dead_letter_range_delete_removes_the_range_only,
            dead_letters::dead_letters_expire_with_their_ttl,
            dead_letters::a_redrive_mark_expires_with_its_letter_and_makes_no_row_of_its_own,
            // Migrations.
            migrations::migrations_re_run_as_a_no_op,
            migrations::shared_settings_are_recorded_once,
        );
    };
    (@tests $store:ident, $fixture:ty; $($group:ident::$test:ident),* $(,)?) => {
        mod $store {
            use $crate::testsuite::__private::FutureExt as _;
            use $crate::testsuite::fixture::Setup as _;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let started = std::time::Instant::now();
                    let f = <$fixture>::setup(stringify!($test)).await;
                    let set_up = started.elapsed();
                    let outcome =
                        std::panic::AssertUnwindSafe($crate::testsuite::$group::$test(&f))
                            .catch_unwind()
                            .await;
                    let ran = started.elapsed() - set_up;
                    f.teardown().await;
                    // Shown with --nocapture: where a store's suite spends its time.
                    eprintln!(
                        "conformance {}::{}: setup {} ms, test {} ms, teardown {} ms",
                        stringify!($store),
                        stringify!($test),
                        set_up.as_millis(),
                        ran.as_millis(),
                        (started.elapsed() - set_up - ran).as_millis(),
                    );
                    if let Err(panic) = outcome {
                        std::panic::resume_unwind(panic);
                    }
                }
            )*
        }
    };
}
