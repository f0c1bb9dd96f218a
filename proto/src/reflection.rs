//! gRPC server reflection (`grpc.reflection.v1` and the older `v1alpha` that some
//! `grpcurl` builds still ask for) over Sluice's schema and the health service's, so
//! an operator can `grpcurl -plaintext HOST:PORT list` a dispatcher's or a worker's
//! client port. Each server advertises only the services it serves on that port;
//! the reflection service sits behind the same token guard as the others
//! (docs/security.md, "gRPC reflection").

use tonic_reflection::server::{v1, v1alpha, Builder};

/// Building fails only if a compiled-in descriptor set does not decode: a build
/// defect that tests/reflection.rs catches, not an operator's error.
const COMPILED_IN: &str = "the compiled-in file descriptor sets decode";

/// The standard health service, which every Sluice client port also serves.
const HEALTH_SERVICE: &str = "grpc.health.v1.Health";

fn builder(services: &[&str]) -> Builder<'static> {
    let mut b = Builder::configure()
        .register_encoded_file_descriptor_set(crate::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .with_service_name(HEALTH_SERVICE)
        .with_service_name("grpc.reflection.v1.ServerReflection");
    for s in services {
        b = b.with_service_name(*s);
    }
    b
}

/// The v1 reflection service advertising `services` (fully qualified, e.g.
/// `sluice.v1.Dispatcher`) plus health and reflection itself.
pub fn v1(services: &[&str]) -> v1::ServerReflectionServer<impl v1::ServerReflection> {
    builder(services).build_v1().expect(COMPILED_IN)
}

/// The same for clients that speak only `grpc.reflection.v1alpha`.
pub fn v1alpha(
    services: &[&str],
) -> v1alpha::ServerReflectionServer<impl v1alpha::ServerReflection> {
    builder(services).build_v1alpha().expect(COMPILED_IN)
}
