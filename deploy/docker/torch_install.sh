#!/bin/sh
# torch first, as its CPU build: an unpinned or PyPI-default torch would pull gigabytes of CUDA libraries.
# From the wheelhouse when it holds the pinned wheel, else from TORCH_INDEX_URL (PyTorch's CPU index by
# default; a mirror of it as a build argument).
set -eu
version=$1
if ls /wheelhouse/torch-"$version"*.whl >/dev/null 2>&1; then
  exec sh /opt/parley/deploy/pip_install.sh --no-index "torch==$version"
fi
exec sh /opt/parley/deploy/pip_install.sh --index-url "${TORCH_INDEX_URL:?}" "torch==$version"
