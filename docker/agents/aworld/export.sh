#!/bin/sh
# Build the aworld-cli image and copy its /opt/aworld tree to a host directory that an
# `aworld` agent mounts read-only. Usage:
#   docker/agents/aworld/export.sh 'aworld-cli==<version>' ./aworld-dist
set -eu
spec=${1:?usage: export.sh AWORLD_PIP_SPEC DEST_DIR}
dest=${2:?usage: export.sh AWORLD_PIP_SPEC DEST_DIR}
here=$(cd "$(dirname "$0")" && pwd)
tag=arbiter/aworld-cli:local
docker build -t "$tag" --build-arg AWORLD_PIP_SPEC="$spec" "$here"
id=$(docker create --label arbiter.managed=true "$tag")
trap 'docker rm -f "$id" >/dev/null' EXIT
rm -rf "$dest"
mkdir -p "$dest"
docker cp "$id:/opt/aworld/." "$dest/"
echo "aworld-cli tree in $dest — mount it at /opt/aworld (see README.md)"
