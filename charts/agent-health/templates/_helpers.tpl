{{/*
agent-health.name: the chart's name, or nameOverride; the app.kubernetes.io/name label.
*/}}
{{- define "agent-health.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
agent-health.fullname: the prefix of every resource name, "<release>-<chart>" (just the
release name when it already contains the chart name), at most 63 characters, or
fullnameOverride. Kept short enough that "-judge" and "-metrics" suffixes still fit.
*/}}
{{- define "agent-health.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 55 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
agent-health.chart: "<chart>-<version>" for the helm.sh/chart label.
*/}}
{{- define "agent-health.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
agent-health.selectorLabels: the labels that select the operator pod (Deployment selector,
Services, the cell NetworkPolicy's judge egress). Immutable once installed.
*/}}
{{- define "agent-health.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agent-health.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
agent-health.labels: the common labels of every object the chart renders. The chart's
objects are managed by Helm; app.kubernetes.io/managed-by: agent-health is reserved for the
cells the operator creates (the cell NetworkPolicy selects on it).
*/}}
{{- define "agent-health.labels" -}}
helm.sh/chart: {{ include "agent-health.chart" . }}
{{ include "agent-health.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agent-health
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
agent-health.serviceAccountName: the operator's ServiceAccount, created or named.
*/}}
{{- define "agent-health.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "agent-health.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
agent-health.image: an image reference from {repository, tag, digest} and the chart: the
digest wins ("repo@sha256:..."), else the tag, else the chart's appVersion.
Call as (include "agent-health.image" (dict "image" .Values.image.operator "chart" .Chart)).
*/}}
{{- define "agent-health.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .chart.AppVersion .image.tag) }}
{{- end }}
{{- end }}

{{/*
agent-health.judgeServiceUrl: the URL cells call the judge at: operator.judgeServiceUrl, or
this release's judge Service by its cluster DNS name.
*/}}
{{- define "agent-health.judgeServiceUrl" -}}
{{- if .Values.operator.judgeServiceUrl }}
{{- .Values.operator.judgeServiceUrl }}
{{- else }}
{{- printf "http://%s-judge.%s.svc:%d" (include "agent-health.fullname" .) .Release.Namespace (int .Values.service.judge.port) }}
{{- end }}
{{- end }}

{{/*
agent-health.judgeCacheClaim: the PersistentVolumeClaim holding the judge cache when
judge.cache.volume is persistentVolumeClaim (an existing claim, or the one the chart makes).
*/}}
{{- define "agent-health.judgeCacheClaim" -}}
{{- default (printf "%s-judge-cache" (include "agent-health.fullname" .)) .Values.judge.cache.existingClaim }}
{{- end }}

{{/*
agent-health.historyClaim: the PersistentVolumeClaim holding a SQLite history when
history.persistence.enabled (an existing claim, or the one the chart makes).
*/}}
{{- define "agent-health.historyClaim" -}}
{{- default (printf "%s-history" (include "agent-health.fullname" .)) .Values.history.persistence.existingClaim }}
{{- end }}

{{/*
agent-health.historyUrl: the history the operator records into: history.url, else the SQLite
file on the history claim (history.persistence.enabled), else empty (no history).
*/}}
{{- define "agent-health.historyUrl" -}}
{{- if .Values.history.url }}
{{- .Values.history.url }}
{{- else if .Values.history.persistence.enabled }}
{{- printf "sqlite:///%s/history.db" (trimSuffix "/" .Values.history.persistence.path) }}
{{- end }}
{{- end }}

{{/*
agent-health.serverHistoryUrl: the history agent-health serve reads: server.history.url, else
the operator's (agent-health.historyUrl) — one place names the database.
*/}}
{{- define "agent-health.serverHistoryUrl" -}}
{{- default (include "agent-health.historyUrl" .) .Values.server.history.url }}
{{- end }}

{{/*
agent-health.serverHistorySecret: the Secret holding the server's history password:
server.history.existingSecret with server.history.url, else the operator's history.existingSecret.
*/}}
{{- define "agent-health.serverHistorySecret" -}}
{{- if .Values.server.history.url }}
{{- .Values.server.history.existingSecret }}
{{- else }}
{{- .Values.history.existingSecret }}
{{- end }}
{{- end }}

{{/*
agent-health.serverHistoryPasswordKey: the password's key inside agent-health.serverHistorySecret.
*/}}
{{- define "agent-health.serverHistoryPasswordKey" -}}
{{- if .Values.server.history.url }}
{{- .Values.server.history.passwordKey }}
{{- else }}
{{- .Values.history.passwordKey }}
{{- end }}
{{- end }}

{{/*
agent-health.operatorEnv: the operator container's environment: the judge settings
(AGENT_HEALTH_JUDGE_*, the API key from its Secret, whether it is offered to all runs, the
token ceiling), the history (its URL, its password's file), insecure registries, Agent
Sandbox watching, RuntimeClass, queueing and warm replicas cap, and operator.extraEnv.
*/}}
{{- define "agent-health.operatorEnv" -}}
{{- with .Values.judge.provider }}
- name: AGENT_HEALTH_JUDGE_PROVIDER
  value: {{ . | quote }}
{{- end }}
{{- with .Values.judge.model }}
- name: AGENT_HEALTH_JUDGE_MODEL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.judge.baseUrl }}
- name: AGENT_HEALTH_JUDGE_BASE_URL
  value: {{ . | quote }}
{{- end }}
{{- if .Values.judge.offerToAllRuns }}
- name: AGENT_HEALTH_JUDGE_FOR_ALL_RUNS
  value: "1"
{{- end }}
- name: AGENT_HEALTH_JUDGE_MAX_TOKENS
  value: {{ .Values.judge.maxTokens | quote }}
{{- if .Values.judge.apiKey.existingSecret }}
- name: AGENT_HEALTH_JUDGE_API_KEY_ENV
  value: {{ .Values.judge.apiKey.env | quote }}
- name: {{ .Values.judge.apiKey.env }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.judge.apiKey.existingSecret }}
      key: {{ .Values.judge.apiKey.key }}
{{- end }}
{{- with include "agent-health.historyUrl" . }}
- name: AGENT_HEALTH_HISTORY
  value: {{ . | quote }}
{{- end }}
{{- if .Values.history.existingSecret }}
- name: AGENT_HEALTH_HISTORY_PASSWORD_FILE
  value: /etc/agent-health/history/password
{{- end }}
{{- with .Values.operator.insecureRegistries }}
- name: AGENT_HEALTH_INSECURE_REGISTRIES
  value: {{ join "," . | quote }}
{{- end }}
{{- if .Values.sandbox.enabled }}
- name: AGENT_HEALTH_SANDBOXES
  value: "1"
{{- end }}
{{- if .Values.sandbox.warmPools }}
- name: AGENT_HEALTH_WARM_POOLS
  value: "1"
{{- end }}
{{- with .Values.sandbox.runtimeClassName }}
- name: AGENT_HEALTH_SANDBOX_RUNTIME_CLASS
  value: {{ . | quote }}
{{- end }}
- name: AGENT_HEALTH_SANDBOX_QUEUEING
  value: {{ .Values.sandbox.queueing | quote }}
- name: AGENT_HEALTH_MAX_WARM_REPLICAS
  value: {{ if kindIs "invalid" .Values.sandbox.maxWarmReplicas }}"none"{{ else }}{{ .Values.sandbox.maxWarmReplicas | int | quote }}{{ end }}
{{- with .Values.kueue.defaultQueue }}
- name: AGENT_HEALTH_DEFAULT_QUEUE
  value: {{ . | quote }}
{{- end }}
{{- with .Values.operator.extraEnv }}
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end }}

{{/*
agent-health.cellNamespaces: the namespaces cells run in, comma-separated: the release
namespace, operator.watchNamespace and cells.namespaces, each once. Split with (splitList ",").
*/}}
{{- define "agent-health.cellNamespaces" -}}
{{- $found := prepend .Values.cells.namespaces .Release.Namespace }}
{{- with .Values.operator.watchNamespace }}
{{- $found = append $found . }}
{{- end }}
{{- $found | uniq | join "," }}
{{- end }}

{{/*
agent-health.gatewayServiceAccountName: the ServiceAccount cells run as (its token reaches
the gateway only): cells.gatewayServiceAccount.name, or "<fullname>-cell-gateway" when the
chart creates it; empty when none is created or named.
*/}}
{{- define "agent-health.gatewayServiceAccountName" -}}
{{- if .Values.cells.gatewayServiceAccount.name }}
{{- .Values.cells.gatewayServiceAccount.name }}
{{- else if .Values.cells.gatewayServiceAccount.create }}
{{- printf "%s-cell-gateway" (include "agent-health.fullname" .) }}
{{- end }}
{{- end }}

{{/*
agent-health.serverName: the name of agent-health serve's objects (Deployment, Service,
ServiceAccount, RBAC, NetworkPolicy).
*/}}
{{- define "agent-health.serverName" -}}
{{- printf "%s-server" (include "agent-health.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/*
agent-health.serverSelectorLabels: the labels that select agent-health serve's pods (never
the operator's: another component).
*/}}
{{- define "agent-health.serverSelectorLabels" -}}
app.kubernetes.io/name: {{ include "agent-health.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end }}

{{/*
agent-health.serverLabels: the common labels of agent-health serve's objects.
*/}}
{{- define "agent-health.serverLabels" -}}
helm.sh/chart: {{ include "agent-health.chart" . }}
{{ include "agent-health.serverSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agent-health
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}
