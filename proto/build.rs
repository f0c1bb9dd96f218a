//! Generates the tonic/prost code from `proto/sluice.proto` with the vendored protoc,
//! so a fresh machine needs no system protoc.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY-free: build scripts are single-threaded; PROTOC is read by prost-build.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto/sluice.proto");
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        // Tensor payloads and byte slices decode into `bytes::Bytes`: no copy per hop.
        .bytes(".")
        // The schema the servers' gRPC reflection service serves (`grpcurl list`).
        .file_descriptor_set_path(out_dir.join("sluice_descriptor.bin"))
        .compile_protos(&["proto/sluice.proto"], &["proto"])?;
    Ok(())
}
