//! The stores: the storage contract (`rebound-store`, re-exported here whole) and its two
//! implementations, Cassandra (`cassandra/`, its migrations in `migrate.rs`) and embedded
//! (`rebound-store-embedded`, redb, one node). Nothing outside `store` knows CQL exists. See
//! docs/architecture.md, "Stores".

pub use rebound_store::*;

pub mod cassandra;
pub use rebound_store_embedded as embedded;
