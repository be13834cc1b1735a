#!/bin/sh
# The consistent-hash front of docs/fleet.md for the DaemonSet: nginx with
# nginx-pulsys.conf (a copy of docs/fleet/nginx-pulsys.conf), its server lines replaced
# by one line per address $PULSYS_NODES resolves to (the DaemonSet's headless Service),
# and `listen 80;` by $PULSYS_FRONT_LISTEN. Resolved again every $PULSYS_FRONT_INTERVAL
# seconds; nginx reloads when the set changes. Why a script: nginx (before 1.27.3)
# resolves a server name once, when it loads its configuration, and a DaemonSet's pods
# have no names of their own. tests/deploy/test_k8s_front.py runs it with nginx.
set -eu
: "${PULSYS_NODES:=pulsys-nodes}" "${PULSYS_NODE_PORT:=8080}" "${PULSYS_FRONT_LISTEN:=8080}"
: "${PULSYS_FRONT_TEMPLATE:=/etc/pulsys-front/nginx-pulsys.conf}"
: "${PULSYS_FRONT_CONF:=/etc/nginx/conf.d/pulsys.conf}" "${PULSYS_FRONT_INTERVAL:=10}"
: "${NGINX:=nginx}"

nodes() {
    getent ahostsv4 "$PULSYS_NODES" | awk '{print $1}' | sort -u || true
}

# $1: addresses, one a line -> the configuration on stdout. Sorted addresses give every
# front replica the same ring. No address yet: one server marked down (nginx needs one;
# clients get 502 until a node appears).
render() {
    printf '%s\n' "$1" | awk -v port="$PULSYS_NODE_PORT" -v listen="$PULSYS_FRONT_LISTEN" \
                             -v tpl="$PULSYS_FRONT_TEMPLATE" '
        NF { ips[n++] = $1 }
        END {
            while ((getline line < tpl) > 0) {
                if (line ~ /^    server [^ ]+ max_fails=1 fail_timeout=10s;$/) {
                    if (written++) continue
                    for (i = 0; i < n; i++)
                        printf "    server %s:%s max_fails=1 fail_timeout=10s;\n", ips[i], port
                    if (!n) printf "    server 127.0.0.1:%s down;\n", port
                    continue
                }
                sub(/^    listen 80;/, "    listen " listen ";", line)
                print line
            }
        }'
}

current=$(nodes)
render "$current" > "$PULSYS_FRONT_CONF"
$NGINX -g 'daemon off;' &
nginx_pid=$!
trap 'kill -QUIT "$nginx_pid" 2>/dev/null || true' TERM INT
while kill -0 "$nginx_pid" 2>/dev/null; do
    sleep "$PULSYS_FRONT_INTERVAL" & wait $! || true
    now=$(nodes)
    if [ "$now" != "$current" ]; then
        render "$now" > "$PULSYS_FRONT_CONF.new" && mv "$PULSYS_FRONT_CONF.new" "$PULSYS_FRONT_CONF"
        $NGINX -s reload && current=$now
        echo "pulsys-front: nodes now: $(echo $now)" >&2
    fi
done
wait "$nginx_pid"
