//! What every rule set of a chaos history reports, and the slack all of them allow: shared by
//! the checker, `saga::check` and `hold::check`. A module of its own, below all three, so that
//! the checker may name the services of the other two without an import circle.

/// Time the test process itself may take between a message arriving and it being stamped
/// (two cores, three debug nodes and Cassandra), and a node between reading a state row and
/// sending the delivery it decided on.
pub const SLACK_MS: i64 = 500;

#[derive(Debug)]
pub struct Violation {
    pub kind: &'static str,
    pub subject: String,
    /// History lines (indices) that show it.
    pub lines: Vec<usize>,
}
