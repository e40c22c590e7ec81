# kind base image built without a registry (scripts/tools/kind.sh, local-build path only).
# Mirrors sigs.k8s.io/kind's images/base/Dockerfile: containerd v2 (ctr, the runc shim) and
# crictl are built from the Go module proxy by kind.sh, at kind's versions; Debian bookworm
# packages give systemd, runc (1.1) and the CNI plugins. The build context holds kind's own
# images/base/files (entrypoint, systemd units, containerd config) from the kind module.
# containerd's runc is the wrapper runc-wrapper.py (needs python3 with its stdlib, not
# python3-minimal, which lacks json; a no-op where CAP_SYS_RESOURCE is in the
# bounding set; see scripts/tools/runc-wrapper.py). Built with the classic builder (no BuildKit,
# whose frontend image would come from a registry), hence no COPY --chmod.
ARG DEBIAN_IMAGE=tenure/debian:bookworm
FROM ${DEBIAN_IMAGE}
COPY files/usr/local/bin/ /usr/local/bin/
RUN chmod 0755 /usr/local/bin/* \
 && DEBIAN_FRONTEND=noninteractive clean-install \
      systemd conntrack iptables nftables iproute2 ethtool util-linux mount kmod \
      libseccomp2 pigz e2fsprogs bash ca-certificates curl jq procps \
      runc containernetworking-plugins python3 \
 && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \
 && rm -f /lib/systemd/system/multi-user.target.wants/* \
 && rm -f /etc/systemd/system/*.wants/* \
 && rm -f /lib/systemd/system/local-fs.target.wants/* \
 && rm -f /lib/systemd/system/sockets.target.wants/*udev* \
 && rm -f /lib/systemd/system/sockets.target.wants/*initctl* \
 && rm -f /lib/systemd/system/basic.target.wants/* \
 && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \
 && ln -sf /usr/lib/systemd/systemd /sbin/init
COPY files/kind/ /kind/
COPY files/etc/ /etc/
COPY crictl containerd ctr containerd-shim-runc-v2 /usr/local/bin/
COPY runc-wrapper.py /usr/local/sbin/tenure-runc
RUN chmod 755 /kind /kind/bin /kind/bin/* /usr/local/bin/crictl /usr/local/sbin/tenure-runc \
 && mkdir -p /opt/cni/bin \
 && for p in host-local loopback ptp portmap bridge; do cp /usr/lib/cni/$p /opt/cni/bin/; done \
 && sed -i 's#^\(\s*\)SystemdCgroup = true#&\n\1BinaryName = "/usr/local/sbin/tenure-runc"#' /etc/containerd/config.toml \
 && grep -q 'BinaryName = "/usr/local/sbin/tenure-runc"' /etc/containerd/config.toml \
 && ctr oci spec \
      | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
      | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \
 && containerd --version && runc --version && crictl --version \
 && /usr/local/sbin/tenure-runc --version \
 && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \
 && systemctl mask systemd-binfmt.service \
 && mkdir -p /etc/kubernetes/manifests
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]
