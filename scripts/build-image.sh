#!/usr/bin/env bash
# Builds the Sluice container image here, with podman (Debian's `podman`), from the
# local release build: the Dockerfile at the repository's root needs its base images
# from a registry, which this machine cannot reach, so this assembles the same
# runtime image FROM scratch (deploy/image/Containerfile.local), then smoke-tests it:
#   1. the image runs as uid 65532, not root, with no shell in it;
#   2. `sluice local` (the README's first command) runs in it;
#   3. a dispatcher and a worker in two containers serve a reader outside them.
# Not part of CI (a release build takes minutes); run it by hand:
#   scripts/build-image.sh [TAG]          (default sluice:local)
# SLUICE_IMAGE_PROFILE=dev packs the debug build instead (faster, a bigger image).
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${1:-sluice:local}"
command -v podman >/dev/null || { echo "podman is missing: apt-get install -y podman runc"; exit 1; }
# How containers run on this machine (a Firecracker VM with cgroup v1 in "hybrid"
# mode, which crun refuses, and a process limit below podman's default): runc, and
# limits within the host's. Elsewhere plain `podman run` does.
run=(podman --runtime runc run --ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=4096:4096)

profile="${SLUICE_IMAGE_PROFILE:-release}"
echo "--- cargo build --profile $profile"
cargo build --profile "$profile" --locked --bin sluice
case "$profile" in dev) bin=target/debug/sluice ;; *) bin="target/$profile/sluice" ;; esac

echo "--- rootfs"
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
root="$ctx/rootfs"
install -D -m 0755 "$bin" "$root/usr/local/bin/sluice"
# The shared libraries the binary links (glibc, libgcc_s, the loader), at their paths.
ldd "$bin" | awk '$3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | while read -r lib; do
    install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
done
install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
mkdir -p "$root/etc" "$root/tmp" "$root/home/nonroot"
chmod 1777 "$root/tmp"
echo "root:x:0:0:root:/root:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin" > "$root/etc/passwd"
echo "root:x:0:
nonroot:x:65532:" > "$root/etc/group"
chown -R 65532:65532 "$root/home/nonroot"
cp deploy/image/Containerfile.local "$ctx/Containerfile"

echo "--- podman build -t $tag"
podman build --quiet -t "$tag" "$ctx"
podman image inspect "$tag" --format 'size {{.Size}} bytes, user {{.Config.User}}, entrypoint {{.Config.Entrypoint}}'

echo "--- smoke 1: not root, no shell"
user=$(podman image inspect "$tag" --format '{{.Config.User}}')
[ "$user" = "65532:65532" ] || { echo "the image runs as '$user', not 65532"; exit 1; }
if "${run[@]}" --rm --entrypoint /bin/sh "$tag" -c true 2>/dev/null; then
    echo "the image has a shell"; exit 1
fi

echo "--- smoke 2: sluice local in the image"
out=$("${run[@]}" --rm --network host "$tag" local)
echo "$out" | tail -n 2
echo "$out" | grep -q '^sluice local: 10 elements' || { echo "sluice local failed in the image"; exit 1; }

echo "--- smoke 3: a dispatcher and a worker in containers, a reader outside"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
d=$("${run[@]}" -d --rm --network host "$tag" dispatcher --port "$port")
w=$("${run[@]}" -d --rm --network host "$tag" worker --dispatcher "127.0.0.1:$port")
cleanup() { podman rm -f "$d" "$w" >/dev/null 2>&1 || true; rm -rf "$ctx"; }
trap cleanup EXIT
uid=$(podman top "$d" huser user | tail -n 1)
echo "dispatcher container process: $uid"
id=$(echo '{"stages": [{"range": {"stop": 50}}]}' | "$bin" register --dispatcher "127.0.0.1:$port" --timeout-secs 60 -)
n=$("$bin" read --dispatcher "127.0.0.1:$port" --dataset-id "$id" --mode distributed_epoch | wc -l)
[ "$n" = 50 ] || { echo "read $n elements through the containers, not 50"; exit 1; }
echo "read $n elements from a dispatcher and a worker running in $tag"
echo "image $tag built and smoke-tested"
