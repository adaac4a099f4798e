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
app.kubernetes.io/instance: {{ .root.Release.Name }}
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

{{/* What a component's selectors match: name and component, exactly as deploy/'s kustomizations,
so an install moves between the chart and kustomize without touching an immutable spec.selector
(every object still carries app.kubernetes.io/instance as a label). */}}
{{- define "rightsizer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rightsizer.name" .root }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end -}}

{{/* A workload's spec.selector.matchLabels (immutable): the selector of the object already in
the cluster when there is one, else selectorLabels. Releases installed when the selectors also
held app.kubernetes.io/instance keep it, so helm upgrade does not fail on an immutable field;
their pods carry every label of either selector. Call with (dict "root" $ "component" C "kind"
"Deployment"|"DaemonSet" "name" NAME); lookup finds nothing under helm template. */}}
{{- define "rightsizer.workloadSelector" -}}
{{- $existing := lookup "apps/v1" .kind .root.Release.Namespace .name -}}
{{- $kept := dig "spec" "selector" "matchLabels" dict $existing -}}
{{- if $kept -}}
{{ toYaml $kept }}
{{- else -}}
{{ include "rightsizer.selectorLabels" . }}
{{- end -}}
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
