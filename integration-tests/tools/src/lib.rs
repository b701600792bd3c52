//! Rebound's test tools, beside the end-to-end harness they build on
//! (`rebound-integration-tests`): the chaos history checker and the soak ([`chaos`]), and the
//! binaries `bench`, `chaos`, `drain_bench`, `node_loss`, `soak` and `upgrade` (src/bin). The
//! tests in tests/ run one chaos round and a short soak against the real Cassandra.

pub mod chaos;
