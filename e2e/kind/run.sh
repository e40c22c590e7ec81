#!/usr/bin/env bash
# The whole Kubernetes user story on a real kind cluster (needs a Docker engine):
#   1. cluster "tenure-e2e" (context kind-tenure-e2e): one control-plane node, two workers;
#   2. image tenure:dev built from the repository's Dockerfile, and the SQS clients' image
#      (e2e/kind/sqs-clients: boto3, celery[sqs]), loaded on every node;
#   3. PostgreSQL (Deployment + Service "postgres", PVC from the default storage class) in
#      namespace tenure-demo; DSN postgresql://tenure:tenure@postgres:5432/tenure;
#   4. the Helm chart in tenure-system, then `helm test`;
#   5. the scenarios in e2e/kind/test_kind.py (pytest), asserted from the database and the API:
#      apply + drain + scaling, pod SIGKILL, node freeze, rolling update, bad manifests,
#      in-cluster Prometheus/Alertmanager. Figures go to $ARTIFACTS/figures.json.
#
# Usage: e2e/kind/run.sh                 (KEEP=1 leaves the cluster running)
# Env:   TENURE_KIND_IMAGES=local|public  local (default): images built by scripts/tools/kind.sh
#                                         without a registry; public: kind's public node image
#                                         and public base images (a machine with registry access)
#        KEEP=1, CLUSTER, PYTEST_ARGS (e.g. "-k drain"), ARTIFACTS (default /tmp/tenure-kind-e2e),
#        REUSE=1 (keep an existing cluster instead of recreating it; default: recreate)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CLUSTER="${CLUSTER:-tenure-e2e}"
CONTEXT="kind-${CLUSTER}"
IMAGE="${IMAGE:-tenure:dev}"
CLIENTS_IMAGE="${CLIENTS_IMAGE:-tenure-e2e/sqs-clients:dev}"
NAMESPACE="${NAMESPACE:-tenure-demo}"
OPERATOR_NAMESPACE="${OPERATOR_NAMESPACE:-tenure-system}"
KEEP="${KEEP:-0}"
MODE="${TENURE_KIND_IMAGES:-local}"
ARTIFACTS="${ARTIFACTS:-/tmp/tenure-kind-e2e}"
PY="${PY:-${ROOT}/.venv/bin/python}"
# shellcheck source=/dev/null
. "${ROOT}/scripts/tools/env.sh"
export DOCKER_BUILDKIT=0   # the classic builder: BuildKit fetches its frontend from a registry

log() { printf '\n==> [%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { printf 'e2e/kind: %s\n' "$*" >&2; exit 1; }
k() { kubectl --context "${CONTEXT}" "$@"; }
start=${SECONDS}
mkdir -p "${ARTIFACTS}"

for tool in docker kind kubectl helm; do
  command -v "${tool}" >/dev/null 2>&1 || die "${tool} is required: run 'make tools' (see e2e/kind/README.md)"
done
docker info >/dev/null 2>&1 || die "no Docker engine answers (DOCKER_HOST=${DOCKER_HOST:-unset}); run scripts/tools/docker.sh"
[[ -x "${PY}" ]] || die "no ${PY}: run 'make install'"

case "${MODE}" in
  local)
    NODE_IMAGE="$(bash "${ROOT}/scripts/tools/kind.sh" | tail -n 1)"
    PYTHON_IMAGE="tenure/python:bookworm"
    PG_IMAGE="tenure/postgres:15"
    PROM_IMAGE="tenure/prometheus:local"
    AM_IMAGE="tenure/alertmanager:bookworm"
    ;;
  public)
    NODE_IMAGE=""
    PYTHON_IMAGE="python:3.13-slim-bookworm"
    PG_IMAGE="postgres:17-alpine"
    PROM_IMAGE="prom/prometheus:v3.5.0"
    AM_IMAGE="prom/alertmanager:v0.28.1"
    ;;
  *) die "TENURE_KIND_IMAGES must be local or public, not '${MODE}'" ;;
esac

diagnostics() {
  log "diagnostics (also in ${ARTIFACTS})"
  {
    k get nodes -o wide
    k get pods -A -o wide
    k -n "${NAMESPACE}" get jobqueues,deploy,cronjob,jobs,pvc,svc -o wide
    k -n "${NAMESPACE}" describe jobqueues
    k -n "${NAMESPACE}" get events --sort-by=.lastTimestamp | tail -n 60
    k -n "${OPERATOR_NAMESPACE}" logs deploy/tenure --tail=200
  } > "${ARTIFACTS}/cluster-state.txt" 2>&1 || true
  tail -n 120 "${ARTIFACTS}/cluster-state.txt" >&2 || true
  kind export logs "${ARTIFACTS}/kind-logs" --name "${CLUSTER}" >/dev/null 2>&1 || true
}

cleanup() {
  local rc=$?
  if [[ ${rc} -ne 0 ]]; then
    log "FAILED (exit ${rc}) after $((SECONDS - start)) s"
    diagnostics
  fi
  if [[ "${KEEP}" == "1" ]]; then
    log "KEEP=1: cluster ${CLUSTER} left running (context ${CONTEXT}; kind delete cluster --name ${CLUSTER})"
  else
    timeout 180 kind delete cluster --name "${CLUSTER}" >/dev/null 2>&1 || true
  fi
  exit "${rc}"
}
trap cleanup EXIT

log "kind cluster ${CLUSTER} (images: ${MODE}${NODE_IMAGE:+, node image ${NODE_IMAGE}})"
if kind get clusters 2>/dev/null | grep -qx "${CLUSTER}"; then
  if [[ "${REUSE:-0}" == "1" ]]; then
    log "REUSE=1: keeping the existing cluster ${CLUSTER}"
  else
    log "deleting a leftover cluster ${CLUSTER}"
    timeout 180 kind delete cluster --name "${CLUSTER}"
  fi
fi
if ! kind get clusters 2>/dev/null | grep -qx "${CLUSTER}"; then
  t0=${SECONDS}
  timeout 600 kind create cluster --name "${CLUSTER}" --config "${ROOT}/e2e/kind/cluster.yaml" \
    ${NODE_IMAGE:+--image "${NODE_IMAGE}"} --wait 300s
  echo "{\"cluster_create_seconds\": $((SECONDS - t0))}" > "${ARTIFACTS}/cluster.json"
fi
k wait --for=condition=Ready nodes --all --timeout=300s >/dev/null

log "build ${IMAGE} and load it (and the in-cluster service images) on every node"
t0=${SECONDS}
timeout 900 docker build -q --network host --build-arg "PYTHON_IMAGE=${PYTHON_IMAGE}" -t "${IMAGE}" "${ROOT}" >/dev/null
# The SQS clients of the tenure-sqs rolling restart (boto3, celery[sqs]): an image of their own,
# so the tenure image stays as shipped; its pip layer is cached until requirements.txt changes.
timeout 900 docker build -q --network host --build-arg "PYTHON_IMAGE=${PYTHON_IMAGE}" -t "${CLIENTS_IMAGE}" \
  "${ROOT}/e2e/kind/sqs-clients" >/dev/null
for img in "${PG_IMAGE}" "${PROM_IMAGE}" "${AM_IMAGE}"; do
  docker image inspect "${img}" >/dev/null 2>&1 || docker pull -q "${img}" >/dev/null
done
timeout 600 kind load docker-image --name "${CLUSTER}" "${IMAGE}" "${CLIENTS_IMAGE}" "${PG_IMAGE}" "${PROM_IMAGE}" "${AM_IMAGE}"
log "image built and loaded in $((SECONDS - t0)) s"

if [[ "${REUSE:-0}" == "1" ]] && k get namespace "${NAMESPACE}" >/dev/null 2>&1; then
  log "REUSE=1: deleting namespace ${NAMESPACE} from the previous run (JobQueues, Postgres, monitoring)"
  k delete jobqueues --all -n "${NAMESPACE}" --wait=true --timeout=180s || true
  k delete namespace "${NAMESPACE}" --wait=true --timeout=300s
fi
log "PostgreSQL in ${NAMESPACE}"
k create namespace "${NAMESPACE}" --dry-run=client -o yaml | k apply -f - >/dev/null
sed "s#\${PG_IMAGE}#${PG_IMAGE}#" "${ROOT}/e2e/kind/manifests/postgres.yaml" | k -n "${NAMESPACE}" apply -f - >/dev/null
k -n "${NAMESPACE}" rollout status deploy/postgres --timeout=300s

log "Helm chart (operator in ${OPERATOR_NAMESPACE}), then helm test"
timeout 600 helm upgrade --install tenure "${ROOT}/charts/tenure" --kube-context "${CONTEXT}" \
  --namespace "${OPERATOR_NAMESPACE}" --create-namespace \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" \
  --set image.pullPolicy=Never --set operator.intervalSeconds=5 \
  --wait --timeout 300s
# A rebuilt tenure:dev keeps its tag: restart the operator so that it runs the new image.
k -n "${OPERATOR_NAMESPACE}" rollout restart deployment/tenure >/dev/null
k -n "${OPERATOR_NAMESPACE}" rollout status deployment/tenure --timeout=300s
timeout 300 helm test tenure --kube-context "${CONTEXT}" --namespace "${OPERATOR_NAMESPACE}" --timeout 240s

log "scenarios (e2e/kind/test_kind.py)"
export TENURE_KIND_CONTEXT="${CONTEXT}" TENURE_KIND_CLUSTER="${CLUSTER}" TENURE_KIND_NAMESPACE="${NAMESPACE}"
export TENURE_KIND_IMAGE="${IMAGE}" TENURE_KIND_CLIENTS_IMAGE="${CLIENTS_IMAGE}" TENURE_KIND_PROM_IMAGE="${PROM_IMAGE}" TENURE_KIND_AM_IMAGE="${AM_IMAGE}"
export TENURE_KIND_OPERATOR_NAMESPACE="${OPERATOR_NAMESPACE}" TENURE_KIND_ARTIFACTS="${ARTIFACTS}"
cd "${ROOT}"
# shellcheck disable=SC2086
"${PY}" -m pytest e2e/kind/test_kind.py -p no:cacheprovider -x -v ${PYTEST_ARGS:-}
log "OK: every scenario passed in $((SECONDS - start)) s; figures in ${ARTIFACTS}/figures.json"
cat "${ARTIFACTS}/figures.json" >&2 || true
