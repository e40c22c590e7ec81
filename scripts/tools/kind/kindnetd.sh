#!/bin/bash
# Local stand-in for kindnetd (kind's default CNI daemon), for the registry-free build only
# (scripts/tools/kind.sh tags it as kind's kindnetd image, so kind's own manifest runs it).
# On every node, every 10 s: read the Nodes from the API server; write a ptp + host-local CNI
# config for this node's podCIDR (the config kindnetd writes), and route every other node's
# podCIDR via that node's InternalIP. No masquerading and no network policies: cluster traffic
# only, which is all a registry-free cluster has.
set -u
api="https://${KUBERNETES_SERVICE_HOST}:${KUBERNETES_SERVICE_PORT}"
sa=/var/run/secrets/kubernetes.io/serviceaccount
conf=/etc/cni/net.d/10-kindnet.conflist
while :; do
    if nodes="$(curl -sf --max-time 10 --cacert "$sa/ca.crt" \
            -H "Authorization: Bearer $(cat "$sa/token")" "$api/api/v1/nodes")"; then
        while IFS=$'\t' read -r ip cidr; do
            [[ -n "$ip" && -n "$cidr" ]] || continue
            if [[ "$ip" == "$HOST_IP" ]]; then
                want="$(printf '{"cniVersion":"0.3.1","name":"kindnet","plugins":[{"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","dataDir":"/run/cni-ipam-state","routes":[{"dst":"0.0.0.0/0"}],"ranges":[[{"subnet":"%s"}]]},"mtu":1500},{"type":"portmap","capabilities":{"portMappings":true}}]}' "$cidr")"
                if [[ "$(cat "$conf" 2>/dev/null)" != "$want" ]]; then
                    printf '%s' "$want" > "$conf.tmp" && mv "$conf.tmp" "$conf"
                    echo "kindnetd: wrote $conf for $cidr"
                fi
            elif ! ip route show "$cidr" | grep -q "via $ip "; then
                ip route replace "$cidr" via "$ip" && echo "kindnetd: route $cidr via $ip"
            fi
        done < <(jq -r '.items[] | [(.status.addresses[]? | select(.type == "InternalIP") | .address | select(test("^[0-9.]+$"))), (.spec.podCIDR // "")] | @tsv' <<<"$nodes")
    else
        echo "kindnetd: cannot list nodes yet" >&2
    fi
    sleep 10
done
