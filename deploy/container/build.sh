#!/bin/sh
# Build batchcrop's container images without an image registry (docs/operations.md,
# "Containers"): debootstrap a Debian bookworm root filesystem, import it as the base image,
# build wheels from this source tree, then build the Containerfile's three targets.
# Idempotent: an existing root filesystem and base image are reused, the wheels are rebuilt,
# and podman's layer cache skips unchanged steps. Run as root on a Debian host with
# `apt-get install podman debootstrap`.
#
# Environment: BATCHCROP_BUILD_DIR (default /var/tmp/batchcrop-build: rootfs and build
# context, outside the repository), PYTHON (default python3, with pip: builds the wheels),
# DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -eu

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
build_dir="${BATCHCROP_BUILD_DIR:-/var/tmp/batchcrop-build}"
python="${PYTHON:-python3}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
rootfs="$build_dir/rootfs"
context="$build_dir/context"
base=batchcrop-base:bookworm
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/pyproject.toml")"

# 1. The root filesystem. debootstrap leaves debootstrap/ behind until it has finished, so a
#    folder without it and with a dpkg status file is complete.
if [ ! -s "$rootfs/var/lib/dpkg/status" ] || [ -d "$rootfs/debootstrap" ]; then
    rm -rf "$rootfs"
    mkdir -p "$build_dir"
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror"
fi

# 2. The base image: the root filesystem as one layer.
if ! podman image exists "$base"; then
    tar -C "$rootfs" --numeric-owner -c . | podman import \
        --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$base"
fi

# 3. The build context: wheels of batchcrop (from this tree) and its dependencies, of the
#    demonstration S3 server, and the scripts. The images install from these offline.
#    The wheel is built from a copy of the packaged files (the build writes build/ and
#    *.egg-info beside its sources), dated by the last commit that changed them so that an
#    unchanged tree gives the same wheel and podman's layer cache holds.
packaged="pyproject.toml README.md batchcrop leases storage"
rm -rf "$context" "$build_dir/source"
mkdir -p "$context/wheels/batchcrop" "$context/wheels/s3" "$build_dir/source"
for path in $packaged; do
    cp -R "$repo/$path" "$build_dir/source/"
done
find "$build_dir/source" -name __pycache__ -prune -exec rm -rf {} +
# shellcheck disable=SC2086 # the list is meant to split
SOURCE_DATE_EPOCH="$(git -C "$repo" log -1 --format=%ct -- $packaged 2>/dev/null || echo 315532800)" \
    "$python" -m pip wheel --quiet --no-deps --wheel-dir "$context/wheels/batchcrop" \
    "$build_dir/source"
"$python" -m pip wheel --quiet --wheel-dir "$context/wheels/batchcrop" \
    "$context"/wheels/batchcrop/batchcrop-*.whl
"$python" -m pip wheel --quiet --wheel-dir "$context/wheels/s3" "moto[server]>=5.1.11"
cp "$here/migrate.sh" "$here/postgres-start.sh" "$here/s3-demo-server.py" "$context/"

# 4. The images.
for target in batchcrop postgres s3; do
    name="batchcrop-$target"
    [ "$target" = batchcrop ] && name=batchcrop
    # Docker format: OCI images have no HEALTHCHECK.
    podman build --format docker --target "$target" \
        --tag "$name:$version" --tag "$name:latest" --file "$here/Containerfile" "$context"
done
podman images --filter reference='batchcrop*'
