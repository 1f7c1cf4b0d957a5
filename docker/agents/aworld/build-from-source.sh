#!/bin/sh
# Build aworld + aworld-cli from an AWorld source tree (a checkout of
# github.com/inclusionAI/AWorld: setup.py, aworld/, aworld-cli/) into a venv under /opt/aworld,
# written to OUT_DIR on the host, for an `aworld` agent to mount read-only at /opt/aworld:
#
#   docker/agents/aworld/build-from-source.sh ~/src/AWorld ./aworld-dist [IMAGE]
#
# Like arbiter's mini-swe-agent/aider installs: wheels are fetched on the host (PyPI only;
# the two AWorld packages are built from the source tree), then the venv is built inside IMAGE
# (default arbiter/debian:bookworm) with network none, for IMAGE's python3. The tree runs in
# task images that have the same python3 at the same path (`/usr/bin/python3.11` for
# bookworm). Needs: python3 with pip on the host, docker, PyPI access (GitHub is not needed).
#
# AWORLD_CONSTRAINTS=<file>: pip constraints for the dependencies (default: constraints.txt
# next to this script — AWorld's requirements leave some upper bounds open, and today's
# releases of those break it at import).
set -eu
src=${1:?usage: build-from-source.sh AWORLD_SRC_DIR OUT_DIR [IMAGE]}
out=${2:?usage: build-from-source.sh AWORLD_SRC_DIR OUT_DIR [IMAGE]}
image=${3:-arbiter/debian:bookworm}
[ -f "$src/setup.py" ] && [ -d "$src/aworld" ] && [ -f "$src/aworld-cli/pyproject.toml" ] || {
    echo "$src is not an AWorld source tree (want setup.py, aworld/, aworld-cli/pyproject.toml)" >&2
    exit 2
}
[ -d "$src/aworld_gateway" ] || {
    echo "$src has no aworld_gateway/: aworld-cli imports it (without it every plugin command, run included, is missing); use the whole checkout" >&2
    exit 2
}
[ -f "$src/examples/gaia/mcp_collections/tools/terminal.py" ] && [ -f "$src/examples/gaia/utils.py" ] || {
    echo "$src has no examples/gaia/mcp_collections/tools/terminal.py (or examples/gaia/utils.py): the Aworld agent's shell is that MCP server (python -m examples.gaia.mcp_collections.tools.terminal); without it the agent has no tool that runs commands" >&2
    exit 2
}
src=$(cd "$src" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wheels="$work/wheels"
mkdir -p "$wheels"
here=$(cd "$(dirname "$0")" && pwd)
constraints=${AWORLD_CONSTRAINTS:-$here/constraints.txt}
cp "$constraints" "$wheels/constraints.txt"

py=$(docker run --rm --network none --label arbiter.managed=true "$image" \
    python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
echo "building for python $py of $image" >&2

# 1. The AWorld packages themselves, from the source tree (pure Python).
python3 -m pip wheel --disable-pip-version-check --no-deps -w "$wheels" "$src" "$src/aworld-cli" >&2
# 2. Their dependencies (and pip) as wheels for the image's Python.
set -- --platform manylinux_2_36_x86_64 --platform manylinux_2_35_x86_64 \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64
python3 -m pip download --disable-pip-version-check --dest "$wheels" --only-binary=:all: \
    --implementation cp --python-version "$py" "$@" -c "$wheels/constraints.txt" \
    "$wheels"/aworld-*.whl "$wheels"/aworld_cli-*.whl pip >&2

# 3. The venv, built where it will be mounted (its scripts carry absolute shebangs).
# The terminal MCP server the Aworld agent starts is not in either package: it is imported
# as `examples.gaia.mcp_collections...` from the source tree; the venv gets just that part.
mkdir -p "$work/examples/gaia"
cp "$src/examples/__init__.py" "$work/examples/" 2>/dev/null || : > "$work/examples/__init__.py"
cp "$src/examples/gaia/__init__.py" "$work/examples/gaia/" 2>/dev/null || : > "$work/examples/gaia/__init__.py"
cp "$src/examples/gaia/utils.py" "$work/examples/gaia/"
cp -R "$src/examples/gaia/mcp_collections" "$work/examples/gaia/"
docker run --rm --network none --label arbiter.managed=true \
    -v "$wheels:/wheels:ro" -v "$work/examples:/examples:ro" -v "$out:/opt/aworld" "$image" sh -c '
set -eu
rm -rf /opt/aworld/* 2>/dev/null || true
python3 -m venv --without-pip /opt/aworld
pip_wheel=$(ls /wheels/pip-*.whl | head -n 1)
/opt/aworld/bin/python "$pip_wheel/pip" install --no-index --find-links /wheels \
    --no-cache-dir --disable-pip-version-check --no-warn-script-location \
    -c /wheels/constraints.txt aworld-cli aworld
/opt/aworld/bin/python "$pip_wheel/pip" freeze --path /opt/aworld/lib/python*/site-packages \
    > /opt/aworld/requirements.lock
cp -R /examples /opt/aworld/lib/python*/site-packages/
/opt/aworld/bin/python -m compileall -q -j 0 /opt/aworld/lib >/dev/null 2>&1 || true
chmod -R a+rX /opt/aworld
'
git -C "$src" rev-parse HEAD > "$out/SOURCE_COMMIT" 2>/dev/null || echo "unknown (not a git checkout)" > "$out/SOURCE_COMMIT"
echo "aworld-cli venv in $out (mount it read-only at /opt/aworld; binary /opt/aworld/bin/aworld-cli)" >&2
