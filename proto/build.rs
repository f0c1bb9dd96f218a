//! Generates the tonic/prost code from `proto/sluice.proto` with the vendored protoc,
//! so a fresh machine needs no system protoc.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY-free: build scripts are single-threaded; PROTOC is read by prost-build.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto/sluice.proto");
    tonic_prost_build::configure()
        // Tensor payloads and byte slices decode into `bytes::Bytes`: no copy per hop.
        .bytes(".")
        .compile_protos(&["proto/sluice.proto"], &["proto"])?;
    Ok(())
}
