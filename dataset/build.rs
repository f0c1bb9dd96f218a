//! Generates the `tf.train.Example` messages from `proto/tensorflow/example.proto`
//! with the vendored protoc (no system protoc needed).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // Build scripts are single-threaded; PROTOC is read by prost-build.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto/tensorflow/example.proto");
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        // `bytes_list` values decode as slices of the record: no copy per value.
        .bytes(".")
        // A BTreeMap (not a HashMap) so encoding is deterministic: the same
        // features always give the same bytes.
        .btree_map(".")
        .compile_protos(&["proto/tensorflow/example.proto"], &["proto"])?;
    Ok(())
}
