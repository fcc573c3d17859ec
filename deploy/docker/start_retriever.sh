#!/bin/sh
# The retriever container's start: build the passage index on first start (kept in the volume, so later
# starts and upgrades reuse it), then serve. Works on the embedded store (PARLEY_RETRIEVER_QDRANT_URL
# empty) and on a Qdrant server alike; `parley index build` continues an interrupted build.
#   PARLEY_INDEX_BUILD_ARGS   extra arguments of the first build, e.g. "--limit 200 --no-bm25" (tests)
set -eu
if [ -z "${PARLEY_RETRIEVER_QDRANT_URL:-}" ]; then
  unset PARLEY_RETRIEVER_QDRANT_URL  # empty means the embedded store
else
  # A Qdrant server that is still starting: wait for its port rather than fail the first build.
  python3 - <<'EOF'
import os, socket, sys, time, urllib.parse
u = urllib.parse.urlsplit(os.environ["PARLEY_RETRIEVER_QDRANT_URL"])
deadline = time.monotonic() + 120
while True:
    try:
        socket.create_connection((u.hostname, u.port or 6333), timeout=3).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(f"Qdrant at {u.geturl()} did not answer within 120 s")
        time.sleep(2)
EOF
fi
marker="${PARLEY_RETRIEVER_DATA_DIR:-/data/parley}/.compose-index-built"
if [ ! -f "$marker" ]; then
  echo "no index yet: building it (first start only)"
  # shellcheck disable=SC2086  # PARLEY_INDEX_BUILD_ARGS is a list of words
  parley index build ${PARLEY_INDEX_BUILD_ARGS:-}
  touch "$marker"
fi
exec parley retriever --host 0.0.0.0 --port "${PARLEY_RETRIEVER_PORT:-8001}"
