//! The `rebound.v1` gRPC API: messages, clients and server traits generated from `proto/`.

#[allow(clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("rebound.v1");
}

/// Encoded `FileDescriptorSet` of the API, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/rebound_descriptor.bin"));

#[cfg(feature = "json")]
pub mod json;

/// Times and durations as the API's well-known types.
pub mod time {
    /// Milliseconds since the epoch as a protobuf timestamp.
    pub fn ts(ms: i64) -> prost_types::Timestamp {
        prost_types::Timestamp {
            seconds: ms.div_euclid(1000),
            nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
        }
    }

    /// A duration as a protobuf duration (seconds beyond `i64::MAX` do not occur here).
    pub fn dur(d: std::time::Duration) -> prost_types::Duration {
        prost_types::Duration {
            seconds: d.as_secs() as i64,
            nanos: d.subsec_nanos() as i32,
        }
    }
}
