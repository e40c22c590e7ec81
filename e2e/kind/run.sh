#!/usr/bin/env bash
# End-to-end on kind, as a user would run it (needs Docker; it cannot run without a Docker
# engine):
#   1. create a kind cluster, build the image and load it into the cluster;
#   2. install a throwaway PostgreSQL and the Helm chart, run `helm test`;
#   3. migrate, apply examples/jobqueue.yaml, enqueue JOBS jobs;
#   4. wait until the operator has scaled the workers and every job completed.
#
# Usage: e2e/kind/run.sh            (env: CLUSTER, IMAGE, NAMESPACE, JOBS, TIMEOUT, KEEP=1)
# Needs: docker, kind, kubectl, helm (scripts/tools/helm.sh installs helm).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CLUSTER="${CLUSTER:-tenure-e2e}"
IMAGE="${IMAGE:-tenure:dev}"
NAMESPACE="${NAMESPACE:-tenure-demo}"
OPERATOR_NAMESPACE="${OPERATOR_NAMESPACE:-tenure-system}"
JOBS="${JOBS:-200}"
TIMEOUT="${TIMEOUT:-600}"
KEEP="${KEEP:-0}"
QUEUE="emails"
DSN="postgresql://tenure:tenure@postgres:5432/tenure"
export PATH="${HOME}/.cache/tenure-tools/bin:${PATH}"

log() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'e2e/kind: %s\n' "$*" >&2; exit 1; }

for tool in docker kind kubectl helm; do
  command -v "${tool}" >/dev/null 2>&1 || die "${tool} is required (see e2e/kind/README.md)"
done
docker info >/dev/null 2>&1 || die "no Docker engine reachable"

cleanup() {
  local rc=$?
  if [[ ${rc} -ne 0 ]]; then
    log "failed (exit ${rc}); state for debugging:"
    kubectl -n "${NAMESPACE}" get jobqueues,deploy,cronjob,pods -o wide || true
    kubectl -n "${NAMESPACE}" describe jobqueue "${QUEUE}" || true
    kubectl -n "${OPERATOR_NAMESPACE}" logs deploy/tenure --tail=100 || true
  fi
  if [[ "${KEEP}" == "1" ]]; then
    log "KEEP=1: cluster ${CLUSTER} left running (kind delete cluster --name ${CLUSTER})"
  else
    kind delete cluster --name "${CLUSTER}" >/dev/null 2>&1 || true
  fi
  exit "${rc}"
}
trap cleanup EXIT

# Run one `tenure ...` command in a pod of the image (the DSN from the environment) and wait.
tenure_pod() {
  local name="$1"
  shift
  kubectl -n "${NAMESPACE}" delete pod "${name}" --ignore-not-found >/dev/null
  kubectl -n "${NAMESPACE}" run "${name}" --image="${IMAGE}" --image-pull-policy=Never \
    --restart=Never --env="TENURE_DATABASE_URL=${DSN}" --env="TENURE_HOME=/tmp/tenure" \
    "$@" >/dev/null
  kubectl -n "${NAMESPACE}" wait --for=jsonpath='{.status.phase}'=Succeeded \
    "pod/${name}" --timeout=180s >/dev/null
  kubectl -n "${NAMESPACE}" logs "${name}"
}

log "kind cluster ${CLUSTER}"
if ! kind get clusters 2>/dev/null | grep -qx "${CLUSTER}"; then
  kind create cluster --name "${CLUSTER}" --wait 120s
fi
kubectl config use-context "kind-${CLUSTER}" >/dev/null

log "build ${IMAGE} and load it into the cluster"
docker build -t "${IMAGE}" "${ROOT}"
kind load docker-image "${IMAGE}" --name "${CLUSTER}"

log "PostgreSQL in ${NAMESPACE}"
kubectl create namespace "${NAMESPACE}" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n "${NAMESPACE}" apply -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: postgres
spec:
  replicas: 1
  selector:
    matchLabels: {app: postgres}
  template:
    metadata:
      labels: {app: postgres}
    spec:
      containers:
        - name: postgres
          image: postgres:17-alpine
          env:
            - {name: POSTGRES_USER, value: tenure}
            - {name: POSTGRES_PASSWORD, value: tenure}
            - {name: POSTGRES_DB, value: tenure}
          ports:
            - containerPort: 5432
          readinessProbe:
            exec:
              command: [pg_isready, -U, tenure, -d, tenure]
            periodSeconds: 2
---
apiVersion: v1
kind: Service
metadata:
  name: postgres
spec:
  selector: {app: postgres}
  ports:
    - port: 5432
YAML
kubectl -n "${NAMESPACE}" rollout status deploy/postgres --timeout=180s

log "Helm chart (operator in ${OPERATOR_NAMESPACE})"
helm upgrade --install tenure "${ROOT}/charts/tenure" \
  --namespace "${OPERATOR_NAMESPACE}" --create-namespace \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" \
  --set image.pullPolicy=Never --set operator.intervalSeconds=5 \
  --wait --timeout 180s
helm test tenure --namespace "${OPERATOR_NAMESPACE}" --timeout 120s

log "migrate the schema"
tenure_pod tenure-migrate -- migrate

log "apply examples/jobqueue.yaml"
kubectl -n "${NAMESPACE}" apply -f "${ROOT}/examples/jobqueue.yaml"
kubectl -n "${NAMESPACE}" patch jobqueue "${QUEUE}" --type=merge \
  -p "{\"spec\":{\"image\":\"${IMAGE}\",\"imagePullPolicy\":\"Never\"}}"
kubectl -n "${NAMESPACE}" wait --for=condition=Ready "jobqueue/${QUEUE}" --timeout=120s

log "let the idle queue scale to zero (so the backlog below must scale it up)"
kubectl -n "${NAMESPACE}" patch jobqueue "${QUEUE}" --type=merge \
  -p '{"spec":{"scaling":{"minReplicas":0,"allowScaleToZero":true,"scaleDownStabilizationSeconds":0}}}'
kubectl -n "${NAMESPACE}" wait --for=jsonpath='{.status.replicas}'=0 "jobqueue/${QUEUE}" --timeout=120s

log "enqueue ${JOBS} jobs"
# The script is expanded by the pod's sh, not here; its arguments follow it.
# shellcheck disable=SC2016
tenure_pod tenure-enqueue --command -- sh -c '
  i=0
  while [ "$i" -lt "$1" ]; do
    printf "{\"task\": \"send_invoice_email\", \"queue\": \"%s\", \"payload\": {\"invoice_id\": %s}}\n" "$2" "$i"
    i=$((i + 1))
  done > /tmp/jobs.jsonl
  tenure enqueue --from-file /tmp/jobs.jsonl' sh "${JOBS}" "${QUEUE}"

log "wait until all ${JOBS} jobs completed (timeout ${TIMEOUT}s)"
# The operator's status carries the queue figures (refreshed every intervalSeconds).
deadline=$((SECONDS + TIMEOUT))
max_replicas=0
while :; do
  IFS=, read -r ready running completed replicas < <(kubectl -n "${NAMESPACE}" \
    get jobqueue "${QUEUE}" \
    -o jsonpath='{.status.ready},{.status.running},{.status.completed},{.status.replicas}{"\n"}')
  if [[ "${replicas:-}" =~ ^[0-9]+$ ]] && ((replicas > max_replicas)); then
    max_replicas="${replicas}"
  fi
  printf '  ready=%s running=%s completed=%s replicas=%s\n' \
    "${ready:-?}" "${running:-?}" "${completed:-?}" "${replicas:-?}" >&2
  if [[ "${completed:-}" =~ ^[0-9]+$ ]] && ((completed >= JOBS)) && [[ "${running:-}" == "0" ]]; then
    break
  fi
  ((SECONDS < deadline)) || die "jobs not done after ${TIMEOUT}s"
  sleep 5
done
((max_replicas > 1)) || die "the operator never scaled the workers above 1 replica"
tenure_pod tenure-stats -- stats --queue "${QUEUE}"

log "scale events"
kubectl -n "${NAMESPACE}" get events --field-selector involvedObject.kind=JobQueue \
  -o custom-columns=REASON:.reason,MESSAGE:.message
log "OK: ${JOBS} jobs completed; the operator scaled the workers up to ${max_replicas} replicas"
