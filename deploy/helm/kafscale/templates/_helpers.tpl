{{- define "kafscale.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kafscale.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kafscale.labels" -}}
{{ include "kafscale.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kafscale.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kafscale.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The pod's grace: the drain, then the flush, then a margin; Kubernetes kills it after. */}}
{{- define "kafscale.terminationGrace" -}}
{{- add (div (add .Values.drainTimeoutMs .Values.shutdownTimeoutMs) 1000) .Values.terminationGraceExtraSeconds -}}
{{- end -}}
