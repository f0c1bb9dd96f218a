# The Sluice container image: one binary for every role (dispatcher, worker,
# client tools), on a small non-root runtime base. docs/operations.md,
# "Container image".
#
#   podman build -t sluice .                          # or: docker build -t sluice .
#   podman build -t sluice-python --target python .   # workers that run users' Python functions
#
# Where no registry is reachable (as on the machine these files are tested on),
# scripts/build-image.sh builds the same runtime image from a local build
# (deploy/image/Containerfile.local, FROM scratch).

ARG RUST_VERSION=1.95

# ---- build: the release binary ------------------------------------------------
FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
# protoc comes vendored through a crate: the toolchain is all this stage needs.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin sluice \
 && install -D -m 0755 target/release/sluice /out/sluice

# ---- runtime: glibc, libgcc, CA certificates, a non-root user; no shell ---------
FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
COPY --from=build /out/sluice /usr/local/bin/sluice
# 65532 = "nonroot" in distroless; the manifests run as this user too.
USER 65532:65532
# client gRPC, Raft (client port + 1000), metrics and status page, plain health.
EXPOSE 5050 6050 9090 5052
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["--help"]

# ---- python: a worker that may run users' Python functions (--allow-python) -------
# The interpreter must match the trainers' minor version (docs/python-stages.md).
FROM docker.io/library/python:3.11-slim-bookworm AS python
RUN pip install --no-cache-dir numpy==2.4.6 cloudpickle==3.1.2 \
 && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin nonroot
COPY --from=build /out/sluice /usr/local/bin/sluice
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["--help"]

# The default target is the plain runtime image.
FROM runtime
