#!/usr/bin/env bash
# The telnet habit over TLS: openssl s_client, the token as the first line.
set -euo pipefail
out=$({ printf 'auth %s\r\nlist-tube-used\r\nstats\r\nquit\r\n' "$TLS_TOKEN"; sleep 2; } |
    timeout 10 openssl s_client -quiet -connect "$TLS_ADDR" -CAfile "$TLS_CA" 2>/dev/null || true)
want=$'AUTHENTICATED\r\nUSING default\r\nFORBIDDEN\r'
if [[ $out != "$want" ]]; then
    echo "openssl s_client: got $(printf '%q' "$out")" >&2
    exit 1
fi
echo "openssl s_client with a token: ok"
