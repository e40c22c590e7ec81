#!/bin/sh
# kube-proxy entry for the registry-free kind path: use the iptables backend (legacy or nft) that
# already holds the node's rules, as upstream's iptables-wrapper does, then run kube-proxy.
legacy=$(iptables-legacy-save 2>/dev/null | grep -c '^-')
nft=$(iptables-nft-save 2>/dev/null | grep -c '^-')
if [ "${legacy:-0}" -gt "${nft:-0}" ]; then mode=legacy; else mode=nft; fi
update-alternatives --set iptables "/usr/sbin/iptables-$mode" >/dev/null
update-alternatives --set ip6tables "/usr/sbin/ip6tables-$mode" >/dev/null
exec /usr/local/bin/kube-proxy.bin "$@"
