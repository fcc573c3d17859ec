#!/bin/sh
# pip inside an image build: `pip_install.sh ARGS...` runs /opt/parley's pip with
#  - the extra CA certificates of the build secret `ca` trusted (an intercepting HTTPS proxy), when given;
#  - the wheelhouse (`make wheelhouse`) as a source of wheels, when it holds any;
#  - no package index at all when PARLEY_OFFLINE=1 (the air-gapped build: the wheelhouse must be complete).
# The index itself is pip's default or PIP_INDEX_URL / PIP_EXTRA_INDEX_URL, passed as build arguments.
set -eu
if [ -s /run/secrets/ca ]; then
  export PIP_CERT=/run/secrets/ca SSL_CERT_FILE=/run/secrets/ca
fi
flags=""
if ls /wheelhouse/*.whl >/dev/null 2>&1; then
  flags="--find-links /wheelhouse"
fi
if [ "${PARLEY_OFFLINE:-0}" = 1 ]; then
  flags="$flags --no-index"
fi
# shellcheck disable=SC2086  # the flags are words without spaces
exec /opt/parley/bin/pip install --disable-pip-version-check $flags "$@"
