//! Compiles `rebound/v1/*.proto` with protox (pure Rust), so no protoc install is needed, and
//! writes the encoded descriptor set that server reflection serves.
use std::{env, fs, path::PathBuf};

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "rebound/v1/types.proto",
        "rebound/v1/retry.proto",
        "rebound/v1/executor.proto",
        "rebound/v1/admin.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["."])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(out.join("rebound_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
