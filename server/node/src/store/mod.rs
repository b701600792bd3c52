//! The stores under one name: the storage contract (`rebound-store`, re-exported here whole)
//! and its two implementations, Cassandra (`rebound-store-cassandra`, with its migrations)
//! and embedded (`rebound-store-embedded`, redb, one node). Nothing in this crate knows CQL
//! exists. See docs/architecture.md, "Stores".

pub use rebound_store::*;

pub use rebound_store_cassandra as cassandra;
pub use rebound_store_embedded as embedded;
