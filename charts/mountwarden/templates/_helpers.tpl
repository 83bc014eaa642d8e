{{/* Names: <release>-mountwarden, or the release name when it already says mountwarden. Short enough for
every suffix below to stay within 63 characters. */}}
{{- define "mountwarden.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 45 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "mountwarden.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mountwarden
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "operator"). */}}
{{- define "mountwarden.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "mountwarden.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "mountwarden.operatorServiceAccount" -}}{{ include "mountwarden.fullname" . }}-operator{{- end -}}
{{- define "mountwarden.agentServiceAccount" -}}{{ include "mountwarden.fullname" . }}-agent{{- end -}}
{{- define "mountwarden.webhookService" -}}{{ include "mountwarden.fullname" . }}-webhook{{- end -}}
{{- define "mountwarden.webhookSecret" -}}{{ include "mountwarden.fullname" . }}-webhook-tls{{- end -}}
{{- define "mountwarden.enforceConfiguration" -}}{{ include "mountwarden.fullname" . }}-enforce{{- end -}}
{{/* The username the API server gives the agent's tokens: the NodeMountReport webhook checks its writes. */}}
{{- define "mountwarden.agentUsername" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "mountwarden.agentServiceAccount" . }}
{{- end -}}

{{/* A namespace labelled with it "true" calls none of the PVC webhooks (webhookconfig.EXEMPT_LABEL). */}}
{{- define "mountwarden.exemptLabel" -}}mountwarden.io/exempt{{- end -}}

{{/* The namespaces every PVC webhook leaves out, as a JSON list: kube-system, the release's, webhook.exemptNamespaces
(the operator's excluded_namespaces, in the same order). */}}
{{- define "mountwarden.excludedNamespaces" -}}
{{- concat (list "kube-system" .Release.Namespace) (.Values.webhook.exemptNamespaces | default list) | uniq | toJson -}}
{{- end -}}

{{/* The label the active operator replica puts on its own pod; the webhook Service selects it. */}}
{{- define "mountwarden.activeLabel" -}}mountwarden.io/active{{- end -}}

{{/* Where the webhook's TLS Secret (tls.crt, tls.key, ca.crt) is mounted: the operator's default in a cluster. */}}
{{- define "mountwarden.webhookCertDir" -}}/etc/mountwarden/webhook-certs{{- end -}}

{{- define "mountwarden.imagePullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
The agent's capabilities: exactly what its enabled features need (docs/security.md).
- readOtherProcesses (SQLite detection): other processes' /proc/<pid>/fd, fdinfo and maps need ptrace read
  access (SYS_PTRACE), and their fd directories, mode 0500 of the process's user, DAC_READ_SEARCH.
- probeServers (serverResponding): statvfs() of each mount through /proc/1/root, a link only ptrace read
  access to pid 1 may follow (SYS_PTRACE).
*/}}
{{- define "mountwarden.agentCapabilities" -}}
{{- $caps := list -}}
{{- if and .Values.agent.root (or .Values.agent.readOtherProcesses .Values.agent.probeServers) -}}
{{- $caps = append $caps "SYS_PTRACE" -}}
{{- end -}}
{{- if .Values.agent.readOtherProcesses -}}
{{- $caps = append $caps "DAC_READ_SEARCH" -}}
{{- end -}}
{{- toJson $caps -}}
{{- end -}}

{{/*
The agent's affinity: agent.affinity, with agent.unsupportedNodes added to every required node selector
term (terms are ORed, a term's expressions ANDed: each term must exclude those nodes).
*/}}
{{- define "mountwarden.agentAffinity" -}}
{{- $affinity := deepCopy (default (dict) .Values.agent.affinity) -}}
{{- $excluded := default (list) .Values.agent.unsupportedNodes -}}
{{- if not .Values.agent.controlPlaneNodes -}}
{{- $excluded = append $excluded (dict "key" "node-role.kubernetes.io/control-plane" "operator" "DoesNotExist") -}}
{{- end -}}
{{- if $excluded -}}
{{- $node := default (dict) (get $affinity "nodeAffinity") -}}
{{- $required := default (dict) (get $node "requiredDuringSchedulingIgnoredDuringExecution") -}}
{{- $terms := default (list (dict)) (get $required "nodeSelectorTerms") -}}
{{- $merged := list -}}
{{- range $terms -}}
{{- $expressions := concat (default (list) (get . "matchExpressions")) $excluded -}}
{{- $merged = append $merged (merge (dict "matchExpressions" $expressions) .) -}}
{{- end -}}
{{- $_ := set $required "nodeSelectorTerms" $merged -}}
{{- $_ := set $node "requiredDuringSchedulingIgnoredDuringExecution" $required -}}
{{- $_ := set $affinity "nodeAffinity" $node -}}
{{- end -}}
{{- toYaml $affinity -}}
{{- end -}}

{{/* The operator's username, as the API server authenticates its service account's tokens. */}}
{{- define "mountwarden.operatorUsername" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "mountwarden.operatorServiceAccount" . }}
{{- end -}}

{{/*
CEL: the maps (list NEW OLD FREE) are equal but for the keys k for which the CEL expression FREE holds (an absent
key and a present one differ). Used by the admission policies (admission-policies.yaml) to say "nothing else
changed" without naming every field, so that a field added to an API later is covered too.
*/}}
{{- define "mountwarden.celSameBut" -}}
{{- $new := index . 0 -}}{{- $old := index . 1 -}}{{- $free := index . 2 -}}
({{ $new }}.all(k, {{ $free }} || (k in {{ $old }} && {{ $old }}[k] == {{ $new }}[k])) && {{ $old }}.all(k, {{ $free }} || k in {{ $new }}))
{{- end -}}
