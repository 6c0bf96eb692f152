{{/* The release's full name, DNS-1123 and at most 63 characters. */}}
{{- define "kubosh.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kubosh.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kubosh.labels" -}}
{{ include "kubosh.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: controller
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kubosh.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kubosh.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding director.yml. */}}
{{- define "kubosh.directorSecret" -}}
{{- default (printf "%s-director" (include "kubosh.fullname" .)) .Values.director.existingSecret -}}
{{- end -}}

{{/* The Secret holding the NATS certificates ("" when none is mounted). */}}
{{- define "kubosh.natsSecret" -}}
{{- if .Values.nats.certificatesSecret -}}
{{- .Values.nats.certificatesSecret -}}
{{- else if not .Values.director.existingSecret -}}
{{- printf "%s-nats" (include "kubosh.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The CPI command (strings, even where YAML or --set read a number or a boolean): the
given one, or kubosh's local cloud. */}}
{{- define "kubosh.cpiCommand" -}}
{{- if .Values.cpi.command -}}
{{- $command := list -}}
{{- range .Values.cpi.command -}}
{{- $command = append $command (toString .) -}}
{{- end -}}
{{- toJson $command -}}
{{- else if .Values.cpi.localCloud.ownPod -}}
{{- toJson (list "kubosh" "cpi" "--remote" (include "kubosh.cloudUrl" .) "--token-file" "/var/run/secrets/kubosh-cloud/token") -}}
{{- else -}}
{{- toJson (list "kubosh" "cpi" "--config" "/etc/kubosh/cpi/cpi.yml") -}}
{{- end -}}
{{- end -}}

{{/* "true" when the local cloud runs in a Pod of its own (`kubosh cpi serve`), "" otherwise. */}}
{{- define "kubosh.cloudPod" -}}
{{- if and (not .Values.cpi.command) .Values.cpi.localCloud.ownPod -}}true{{- end -}}
{{- end -}}

{{/* "true" when the local cloud's VMs are processes of the controller's Pod, "" otherwise. */}}
{{- define "kubosh.vmsInControllerPod" -}}
{{- if and (not .Values.cpi.command) (not .Values.cpi.localCloud.ownPod) -}}true{{- end -}}
{{- end -}}

{{/* The local cloud's own Pod: its name (Deployment, Service, ServiceAccount), the audience of
the controller's tokens for it, and the URL the controller calls. */}}
{{- define "kubosh.cloudName" -}}
{{- printf "%s-cloud" (include "kubosh.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kubosh.cloudUrl" -}}
{{- printf "http://%s.%s.svc:%v" (include "kubosh.cloudName" .) .Release.Namespace .Values.cpi.localCloud.port -}}
{{- end -}}

{{- define "kubosh.cloudSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-cloud
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The files of the CPI ConfigMap: `cpi.config`, plus the local cloud's cpi.yml. */}}
{{- define "kubosh.cpiFiles" -}}
{{- $files := deepCopy .Values.cpi.config -}}
{{- if and (not .Values.cpi.command) (not (hasKey $files "cpi.yml")) -}}
{{- /* Each VM's agent mounts its directory on /var/vcap, where releases' scripts look, in a user namespace of its own (see the container's seccomp profile). */ -}}
{{- $agent := dict "command" (list "{kubosh}" "agent" "--bind-base" "{root}" "-b" "/var/vcap" "-C" "{agent_config}") -}}
{{- $local := dict "state_dir" "/var/lib/kubosh/state/cloud" "mbus" .Values.nats.url "blobstore" (dict "provider" "local" "options" (dict "blobstore_path" "/var/lib/kubosh/blobs")) "agent" $agent -}}
{{- $_ := set $files "cpi.yml" (toYaml (merge (deepCopy .Values.cpi.localCloud.settings) $local)) -}}
{{- end -}}
{{- toYaml $files -}}
{{- end -}}

{{/* The generated director.yml. */}}
{{- define "kubosh.directorConfig" -}}
{{- $cpi := dict "command" (include "kubosh.cpiCommand" . | fromJsonArray) "timeout_seconds" .Values.cpi.timeoutSeconds "properties" .Values.cpi.properties -}}
{{- if .Values.cpi.credentialsSecret -}}
{{- $_ := set $cpi "properties_path" (printf "/etc/kubosh/cpi-credentials/%s" .Values.cpi.credentialsSecretKey) -}}
{{- end -}}
{{- $nats := dict "url" (required "nats.url is required" .Values.nats.url) "ca_certificate_path" "/etc/kubosh/nats/ca.crt" "ca_private_key_path" "/etc/kubosh/nats/ca.key" "director_certificate_path" "/etc/kubosh/nats/director.crt" "director_private_key_path" "/etc/kubosh/nats/director.key" -}}
{{- if .Values.nats.authorization.enabled -}}
{{- $_ := set $nats "authorization" (dict "file" (printf "/var/lib/kubosh/nats-authorization/%s" .Values.nats.authorization.file)) -}}
{{- end -}}
{{- $config := dict "state_dir" "/var/lib/kubosh/state" "cpi" $cpi "nats" $nats "blobstore" (dict "local" (dict "path" "/var/lib/kubosh/blobs")) "engine" .Values.engine -}}
{{- if .Values.cpi.types -}}
{{- $_ := set $config "cpi_types" .Values.cpi.types -}}
{{- end -}}
{{- toYaml (merge $config .Values.director.settings) -}}
{{- end -}}
