{{/* The chart's name, and the prefix of every object's name (45 characters at most, so that
"<fullname>-adapter-grpc-tls" stays a valid name). */}}
{{- define "rightsizer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 45 | trimSuffix "-" -}}
{{- end -}}

{{- define "rightsizer.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 45 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; call with (dict "root" $ "component" "exporter"|"adapter"|""). */}}
{{- define "rightsizer.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{ include "rightsizer.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: rightsizer
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels of the prometheus-operator objects: every object's, and monitoring.labels. */}}
{{- define "rightsizer.monitoringLabels" -}}
{{ include "rightsizer.labels" . }}
{{- with .root.Values.monitoring.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* What a component's selectors match: name, instance and component. */}}
{{- define "rightsizer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rightsizer.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end -}}

{{/* <registry>/<repository>:<tag>, the tag defaulting to appVersion; @<digest> when one is given. */}}
{{- define "rightsizer.image" -}}
{{- $name := .Values.image.repository -}}
{{- if .Values.image.registry -}}
{{- $name = printf "%s/%s" .Values.image.registry .Values.image.repository -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $name .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $name (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The pod spec fields both workloads share: pull secrets, scheduling, priority. */}}
{{- define "rightsizer.podScheduling" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The adapter's Service in DNS: <service>.<namespace>.svc */}}
{{- define "rightsizer.adapterHost" -}}
{{- printf "%s-adapter.%s.svc" (include "rightsizer.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* The Secret holding the adapter's serving certificate (tls.source certManager or secret). */}}
{{- define "rightsizer.servingSecret" -}}
{{- if eq .Values.adapter.tls.source "secret" -}}
{{- .Values.adapter.tls.secretName -}}
{{- else -}}
{{- printf "%s-adapter-tls" (include "rightsizer.fullname" .) -}}
{{- end -}}
{{- end -}}
