{{/* How SMC-R is configured: smcr.mode (a bare YAML `off` reads as false). Values of a chart
     version without smcr.mode keep what its keys chose: the webhook's injection when
     config.enableWebhook with enableInitContainerInject and enableDevicePlugin (both default
     true), else PreStartContainer, which the ofed driver mode never had. */}}
{{- define "erdma.smcrMode" -}}
{{- $mode := (.Values.smcr | default dict).mode -}}
{{- $c := .Values.config | default dict -}}
{{- if kindIs "bool" $mode -}}off
{{- else if $mode -}}{{ $mode }}
{{- else if and $c.enableWebhook (include "erdma.legacyInject" .) (not $c.localERIDiscovery) -}}webhook
{{- else if ne .Values.agent.preferDriver "ofed" -}}prestart
{{- else -}}off
{{- end -}}
{{- end -}}

{{/* Whether the reference keys config.enableInitContainerInject and enableDevicePlugin (absent:
     true) let the webhook inject smcr-init. */}}
{{- define "erdma.legacyInject" -}}
{{- $c := .Values.config | default dict -}}
{{- if and (ne (toString $c.enableInitContainerInject) "false") (ne (toString $c.enableDevicePlugin) "false") }}true{{ end -}}
{{- end -}}

{{/* The agent needs the host network namespace to bring up the ERI netdevs (Regular mode) and
     to keep the host's SMC pnet table, which it does while preparing the node
     (agent.prepareNode) for SMC-R in PreStartContainer. With the webhook path, Regular mode
     already gives it the host network. */}}
{{- define "erdma.agentHostNetwork" -}}
{{- $prestart := eq (include "erdma.smcrMode" .) "prestart" -}}
{{- if or (not .Values.config.localERIDiscovery) (and $prestart .Values.agent.prepareNode) }}true{{ end -}}
{{- end -}}

{{/* The CRI socket file mounted for PreStartContainer: agent.runtimeSocket, or for values of a
     chart version that mounted a directory (agent.criSocketDir), that runtime's socket in it. */}}
{{- define "erdma.criSocket" -}}
{{- $a := .Values.agent -}}
{{- if $a.runtimeSocket -}}{{ $a.runtimeSocket }}
{{- else -}}
{{- $dir := $a.criSocketDir | default "/run/containerd" | trimSuffix "/" -}}
{{- $name := get (dict "containerd" "containerd.sock" "crio" "crio.sock") (base $dir) -}}
{{- if not $name -}}
{{- fail (printf "agent.runtimeSocket is empty and agent.criSocketDir %q is not a containerd or CRI-O socket directory: set agent.runtimeSocket to the runtime's CRI socket file, e.g. /run/containerd/containerd.sock" $dir) -}}
{{- end -}}
{{- printf "%s/%s" $dir $name -}}
{{- end -}}
{{- end -}}

{{/* Volumes every agent-style pod has: plugin sockets, sysfs and /dev of the host, and a
     writable /tmp under the read-only root filesystem. */}}
{{- define "erdma.nodeVolumes" -}}
- name: device-plugins
  hostPath: {path: {{ printf "%s/device-plugins" .Values.agent.kubeletDir }}, type: Directory}
- name: sys
  hostPath: {path: /sys, type: Directory}
- name: dev
  hostPath: {path: /dev, type: Directory}
- name: tmp
  emptyDir: {medium: Memory, sizeLimit: 16Mi}
{{- end -}}

{{- define "erdma.nodeVolumeMounts" -}}
- {name: device-plugins, mountPath: {{ printf "%s/device-plugins" .Values.agent.kubeletDir }}}
- {name: sys, mountPath: /sys, readOnly: true}
- {name: dev, mountPath: /dev, readOnly: true, mountPropagation: HostToContainer}
- {name: tmp, mountPath: /tmp}
{{- end -}}
