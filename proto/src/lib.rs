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
