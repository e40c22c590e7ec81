{{/* Chart name. */}}
{{- define "tenure.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name (release-scoped). */}}
{{- define "tenure.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tenure.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tenure.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tenure.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "tenure.labels" -}}
helm.sh/chart: {{ include "tenure.chart" . }}
{{ include "tenure.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tenure
{{- end }}

{{- define "tenure.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tenure.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tenure.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Namespaces the operator watches when rbac.scope=namespace. */}}
{{- define "tenure.watchNamespaces" -}}
{{- if .Values.rbac.namespaces }}
{{- join "," .Values.rbac.namespaces }}
{{- else }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
The operator's permissions, written once and used by the ClusterRole or by each Role.
Every rule is a call in src/tenure/operator (kube.py, through engine.py, migration.py and
exporter.py) or in kopf itself:
- jobqueues list/watch: kopf's watch stream (and its exporter index); patch: kopf's annotations
  (progress, diff base).
- jobqueues/status patch: status figures and conditions.
- deployments get: current replicas (workers; an exporter held for a migration);
  deployments/cronjobs/jobs/services/poddisruptionbudgets/
  servicemonitors create+patch: server-side apply of the children.
- cronjobs get: left as they are while a migration runs (held).
- jobs get/list/delete: the migration Job's state; older ones retired, failed ones re-run.
- pods list: a failed migration pod's termination message (schema newer than the code?).
- deployments/services delete: an exporter no JobQueue uses any more.
- servicemonitors delete: metrics.serviceMonitor switched off.
- secrets get: the DSN for reading queue stats.
- events create: kopf.info/warn on scale decisions and failures.
*/}}
{{- define "tenure.rbacRules" -}}
- apiGroups: ["tenure.dev"]
  resources: ["jobqueues"]
  verbs: ["list", "watch", "patch"]
- apiGroups: ["tenure.dev"]
  resources: ["jobqueues/status"]
  verbs: ["patch"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["batch"]
  resources: ["cronjobs"]
  verbs: ["get", "create", "patch"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["create", "patch"]
- apiGroups: ["monitoring.coreos.com"]
  resources: ["servicemonitors"]
  verbs: ["create", "patch", "delete"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end }}

{{/*
Labels of an optional component (ui, sqs): the operator's selector labels with another
app.kubernetes.io/component, so that neither Service selects the other's (or the operator's) pods.
Call with (dict "ctx" $ "component" "ui").
*/}}
{{- define "tenure.componentSelectorLabels" -}}
app.kubernetes.io/name: {{ include "tenure.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "tenure.componentLabels" -}}
helm.sh/chart: {{ include "tenure.chart" .ctx }}
{{ include "tenure.componentSelectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: tenure
{{- end }}

{{/* The UI's path prefix without a trailing slash ("" serves at /). */}}
{{- define "tenure.ui.prefix" -}}
{{- .Values.ui.prefix | trimSuffix "/" }}
{{- end }}

{{/*
TENURE_DATABASE_URL from the Secret a component names (ui.databaseUrlSecret,
sqs.databaseUrlSecret), and TENURE_SCHEMA when set. Without a Secret `tenure` would start an
embedded PostgreSQL in the pod, so rendering fails instead. Call with
(dict "ctx" $ "component" "ui" "values" .Values.ui).
*/}}
{{- define "tenure.componentDatabaseEnv" -}}
{{- $secret := .values.databaseUrlSecret | default dict }}
{{- if not $secret.name }}
{{- fail (printf "%s.enabled=true needs %s.databaseUrlSecret.name: a Secret whose key %s.databaseUrlSecret.key (default url) holds the PostgreSQL DSN" .component .component .component) }}
{{- end -}}
- name: TENURE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret.name | quote }}
      key: {{ $secret.key | default "url" | quote }}
{{- with .values.schema }}
- name: TENURE_SCHEMA
  value: {{ . | quote }}
{{- end }}
- name: TENURE_HOME
  value: /tmp/tenure
- name: PYTHONUNBUFFERED
  value: "1"
{{- end }}
