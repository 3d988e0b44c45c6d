{{/* Names, labels and shared pieces of the shoal chart. */}}

{{- define "shoal.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "shoal.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "shoal.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "shoal.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shoal.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "shoal.labels" -}}
helm.sh/chart: {{ include "shoal.chart" . }}
{{ include "shoal.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: shoal
{{- end -}}

{{- define "shoal.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "shoal.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* image: call with (dict "root" $ "override" $pool.image) */}}
{{- define "shoal.image" -}}
{{- $override := .override | default dict -}}
{{- $repo := $override.repository | default .root.Values.image.repository -}}
{{- $tag := $override.tag | default .root.Values.image.tag | default (printf "%s-cpu" .root.Chart.AppVersion) -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}

{{/* the NATS client URL and the monitoring endpoint KEDA reads */}}
{{- define "shoal.natsUrl" -}}
{{- if .Values.nats.enabled -}}
{{- printf "nats://%s-nats.%s.svc:4222" (include "shoal.fullname" .) .Release.Namespace -}}
{{- else -}}
{{- required "nats.externalUrl is required when nats.enabled is false" .Values.nats.externalUrl -}}
{{- end -}}
{{- end -}}

{{- define "shoal.natsMonitoringEndpoint" -}}
{{- if .Values.nats.enabled -}}
{{- printf "%s-nats.%s.svc.cluster.local:8222" (include "shoal.fullname" .) .Release.Namespace -}}
{{- else -}}
{{- required "nats.externalMonitoringEndpoint is required for autoscaling with an external NATS" .Values.nats.externalMonitoringEndpoint -}}
{{- end -}}
{{- end -}}

{{/*
The durable JetStream consumer of one model, exactly as engine/queue/nats/subjects.py names it:
"work-" + the model id with runs of other characters than [A-Za-z0-9_-] made "_", "_" trimmed at both
ends, its last 40 characters (or "model" when nothing is left), "-", the first 10 hex digits of its SHA-1.
*/}}
{{- define "shoal.consumerName" -}}
{{- $readable := regexReplaceAll "[^A-Za-z0-9_-]+" . "_" | trimAll "_" | trunc -40 | default "model" -}}
{{- printf "work-%s-%s" $readable (sha1sum . | trunc 10) -}}
{{- end -}}

{{/* SHOAL_* settings shared by the gateway and every worker */}}
{{- define "shoal.commonEnv" -}}
- name: SHOAL_QUEUE_URL
  value: {{ include "shoal.natsUrl" . | quote }}
- name: SHOAL_QUEUE_REPLICAS
  value: {{ ternary .Values.nats.replicas 1 .Values.nats.enabled | quote }}
- name: SHOAL_QUEUE_STREAM
  value: {{ .Values.nats.stream | quote }}
- name: SHOAL_QUEUE_DEAD_STREAM
  value: {{ .Values.nats.deadStream | quote }}
- name: SHOAL_QUEUE_ACK_WAIT_S
  value: {{ .Values.config.queueAckWaitS | quote }}
- name: SHOAL_QUEUE_MAX_DELIVER
  value: {{ .Values.config.queueMaxDeliver | quote }}
- name: SHOAL_QUEUE_PENDING_LIMIT
  value: {{ .Values.config.queuePendingLimit | quote }}
- name: SHOAL_REQUEST_TIMEOUT_S
  value: {{ .Values.config.requestTimeoutS | quote }}
- name: SHOAL_OFFLINE
  value: {{ .Values.config.offline | quote }}
- name: HF_HUB_OFFLINE
  value: {{ ternary "1" "0" .Values.config.offline | quote }}
{{- if .Values.models }}
- name: SHOAL_MODEL_DIR
  value: /etc/shoal/models
{{- end }}
- name: XDG_CACHE_HOME
  value: /tmp/cache
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* volumes shared by every shoal pod: model cache, catalogue, /tmp */}}
{{- define "shoal.volumes" -}}
- name: models
{{- if .Values.modelCache.existingClaim }}
  persistentVolumeClaim:
    claimName: {{ .Values.modelCache.existingClaim }}
{{- else }}
  emptyDir:
    sizeLimit: {{ .Values.modelCache.sizeLimit }}
{{- end }}
- name: tmp
  emptyDir: {}
{{- if .Values.models }}
- name: catalogue
  configMap:
    name: {{ include "shoal.fullname" . }}-models
{{- end }}
{{- end -}}

{{- define "shoal.volumeMounts" -}}
- name: models
  mountPath: /models
- name: tmp
  mountPath: /tmp
{{- if .Values.models }}
- name: catalogue
  mountPath: /etc/shoal/models
  readOnly: true
{{- end }}
{{- end -}}

{{/* checkov suppressions shared by the shoal workloads, each with its reason */}}
{{- define "shoal.checkovSkips" -}}
checkov.io/skip1: CKV_K8S_43=images are referenced by tag so that a values change picks a release; pin a digest in image.tag for immutable rollouts
checkov.io/skip2: CKV_K8S_15=IfNotPresent keeps node-local image caches useful for multi-GB CUDA images; set image.pullPolicy Always where tags are mutable
{{- end -}}
