#!/usr/bin/env bash
# A long soak of `llmrt serve` (docs/reliability.md, "Soak"): compiles stories260K, serves it on
# a loopback port, runs llmrt-soak for DURATION seconds (default 600) and then SIGTERMs the
# server, which must exit 0.
#
#   bash bench/soak/soak.sh [BUILD_DIR (build)] [DURATION (600)]
#   env: CONCURRENCY=8 MAX_REQUESTS=10000000 SEED=1 WORK=/tmp/llmrt-soak
#        SERVER_FLAGS="--max-seqs 16 --max-queued 16 --max-body-bytes 65536"
# Exit 0 when every request got a valid answer, KV usage and RSS came back, and the server
# drained cleanly.
set -euo pipefail

BUILD=${1:-build}
DURATION=${2:-600}
CONCURRENCY=${CONCURRENCY:-8}
MAX_REQUESTS=${MAX_REQUESTS:-10000000}
SEED=${SEED:-1}
WORK=${WORK:-/tmp/llmrt-soak}
SERVER_FLAGS=${SERVER_FLAGS:---max-seqs 16 --max-queued 16 --max-body-bytes 65536}
SOURCE=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$WORK"

# stories260K ships no chat template; the soak's chat requests need one.
if [[ ! -f $WORK/stories.plan ]]; then
  rm -rf "$WORK/model"
  cp -r "$SOURCE/tests/data/stories260K" "$WORK/model"
  printf '%s' "{{ bos_token }}{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}
{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}" >"$WORK/model/chat_template.jinja"
  "$BUILD/bin/llmc" compile "$WORK/model" -o "$WORK/stories.plan"
fi

# shellcheck disable=SC2086
"$BUILD/bin/llmrt" serve "$WORK/stories.plan" --port 0 $SERVER_FLAGS 2>"$WORK/server.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
URL=
for _ in $(seq 1 300); do
  URL=$(grep -o 'http://[0-9.]*:[0-9]*' "$WORK/server.log" | head -1 || true)
  [[ -n $URL ]] && break
  sleep 0.1
done
[[ -n $URL ]] || { cat "$WORK/server.log"; exit 1; }

status=0
"$BUILD/bin/llmrt-soak" --url "$URL" --duration "$DURATION" --max-requests "$MAX_REQUESTS" \
  --concurrency "$CONCURRENCY" --seed "$SEED" --server-pid "$SERVER" --max-body-bytes 65536 \
  --json | tee "$WORK/soak.json" || status=$?
kill -TERM $SERVER
if ! wait $SERVER; then
  echo "the server did not exit 0 after SIGTERM"
  status=1
fi
trap - EXIT
exit $status
