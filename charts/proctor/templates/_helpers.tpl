{{/*
The chart's name, or nameOverride.
*/}}
{{- define "proctor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object name: fullnameOverride, else the release name, followed
by the chart's name unless the release name already contains it (release
"proctor" gives "proctor-controller-manager", the names `make deploy` uses).
Truncated to 63 characters, the longest DNS label.
*/}}
{{- define "proctor.fullname" -}}
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

{{/*
The chart label: name and version.
*/}}
{{- define "proctor.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object.
*/}}
{{- define "proctor.labels" -}}
helm.sh/chart: {{ include "proctor.chart" . }}
{{ include "proctor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: proctor
{{- end }}

{{/*
Labels that select the manager's pods. The instance keeps two releases in one
namespace apart; they are immutable in a Deployment's selector, so never change
them.
*/}}
{{- define "proctor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "proctor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The manager's ServiceAccount.
*/}}
{{- define "proctor.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-controller-manager" (include "proctor.fullname" .)) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The manager's image, repository:tag.
*/}}
{{- define "proctor.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
The runner pods' default image: runner.image, else the manager's own.
*/}}
{{- define "proctor.runnerImage" -}}
{{- .Values.runner.image | default (include "proctor.image" .) }}
{{- end }}

{{/*
Whether the manager elects a leader ("true" or empty): always with more than one
replica, since two unelected managers would reconcile the same Evaluations.
*/}}
{{- define "proctor.leaderElect" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicaCount) 1) }}true{{ end }}
{{- end }}

{{/*
The subject of the manager's bindings.
*/}}
{{- define "proctor.subject" -}}
- kind: ServiceAccount
  name: {{ include "proctor.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}

{{/*
A resource list as the manager's flags take it: cpu=50m,memory=64Mi (sorted).
*/}}
{{- define "proctor.resourceList" -}}
{{- $parts := list }}
{{- range $k, $v := . }}
{{- $parts = append $parts (printf "%s=%v" $k $v) }}
{{- end }}
{{- join "," $parts }}
{{- end }}

{{/*
The pacer's Service: a DNS label, 63 characters at most.
*/}}
{{- define "proctor.pacerService" -}}
{{- printf "%s-pacer" (include "proctor.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
