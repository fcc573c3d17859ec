#!/bin/sh
# torch's CPU build for the `torch` image target: an unpinned or PyPI-default torch would pull gigabytes
# of CUDA libraries. The version and the sha256 are scripts/torch-cpu-requirements.txt's
# (`torch_install.sh scripts/torch-cpu-requirements.txt`). From the wheelhouse when it holds the wheel,
# else from TORCH_INDEX_URL (PyTorch's CPU index by default; a mirror of it as a build argument).
# Without its dependencies: those come with the others, from the package index, checked against the lock.
set -eu
pin=$1
if ls /wheelhouse/torch-*.whl >/dev/null 2>&1; then
  exec sh /opt/parley/deploy/pip_install.sh --no-index --no-deps --require-hashes -r "$pin"
fi
exec sh /opt/parley/deploy/pip_install.sh --index-url "${TORCH_INDEX_URL:?}" --no-deps --require-hashes -r "$pin"
