# Every image the registry-free kind path needs besides kind's base and node images, one build
# target each (scripts/tools/kind.sh builds them with --target and tags them with the names
# kubeadm, kind and e2e/kind expect). Context: a directory that kind.sh fills with the binaries
# (bin/), this folder's scripts, and the host's CA bundle. Debian packages come from apt.
ARG DEBIAN_IMAGE=tenure/debian:bookworm
FROM ${DEBIAN_IMAGE} AS debian

# registry.k8s.io/pause: a static C program (pause.c).
FROM scratch AS pause
COPY bin/pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]

# Control-plane component images for kubeadm's static pods, from the module-built binaries.
FROM debian AS kube-apiserver
COPY bin/kube-apiserver /usr/local/bin/kube-apiserver
FROM debian AS kube-controller-manager
COPY bin/kube-controller-manager /usr/local/bin/kube-controller-manager
FROM debian AS kube-scheduler
COPY bin/kube-scheduler /usr/local/bin/kube-scheduler
FROM debian AS kube-proxy
RUN DEBIAN_FRONTEND=noninteractive apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iptables conntrack kmod \
 && rm -rf /var/lib/apt/lists/*
COPY bin/kube-proxy /usr/local/bin/kube-proxy.bin
COPY iptables-select.sh /usr/local/bin/kube-proxy
FROM debian AS etcd
COPY bin/etcd /usr/local/bin/etcd
FROM scratch AS coredns
COPY bin/coredns /coredns
EXPOSE 53 53/udp
ENTRYPOINT ["/coredns"]

# kind's CNI and storage images.
FROM debian AS kindnetd
RUN DEBIAN_FRONTEND=noninteractive apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 curl jq ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY kindnetd.sh /bin/kindnetd
CMD ["/bin/kindnetd"]
FROM debian AS local-path-provisioner
COPY bin/local-path-provisioner /usr/local/bin/local-path-provisioner
ENTRYPOINT ["/usr/local/bin/local-path-provisioner"]
FROM debian AS local-path-helper

# Python base for the repository's Dockerfile (PYTHON_IMAGE): Debian's python3 plus the host's CA
# bundle, so pip inside `docker build` trusts a TLS-inspecting proxy.
FROM debian AS python
RUN DEBIAN_FRONTEND=noninteractive apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && ln -sf /usr/bin/python3 /usr/local/bin/python
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt

# In-cluster PostgreSQL, Prometheus and Alertmanager from Debian packages.
FROM debian AS postgres
RUN DEBIAN_FRONTEND=noninteractive apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/*
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]
FROM debian AS prometheus
RUN DEBIAN_FRONTEND=noninteractive apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
 && rm -rf /var/lib/apt/lists/*
USER 65534:65534
ENTRYPOINT ["/usr/bin/prometheus"]
FROM debian AS alertmanager
RUN DEBIAN_FRONTEND=noninteractive apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus-alertmanager \
 && rm -rf /var/lib/apt/lists/*
USER 65534:65534
ENTRYPOINT ["/usr/bin/prometheus-alertmanager"]
