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

{{/* The agent needs the host network namespace (and NET_ADMIN) to bring up the ERI netdevs:
     always in Regular mode, in Local mode with agent.bringUpLocalERIs (true in values.yaml; a
     release of a chart version without the value, kept by `helm upgrade --reuse-values`, keeps
     the privileges it had and its agent leaves the netdevs alone). It also keeps the host's SMC
     pnet table, per network namespace, while preparing the node for SMC-R in PreStartContainer. */}}
{{- define "erdma.agentHostNetwork" -}}
{{- $prestart := eq (include "erdma.smcrMode" .) "prestart" -}}
{{- $bringUp := eq (toString .Values.agent.bringUpLocalERIs) "true" -}}
{{- if or (not .Values.config.localERIDiscovery) $bringUp (and $prestart .Values.agent.prepareNode) }}true{{ end -}}
{{- end -}}

{{/* Whether the agent installs a missing driver, which it does while preparing the node:
     agent.driverInstaller.enabled (true in values.yaml, as in the reference). A release of a
     chart version without the value (kept by `helm upgrade --reuse-values`) never installed
     drivers and keeps not doing so, with the privileges it had. */}}
{{- define "erdma.driverInstaller" -}}
{{- $i := .Values.agent.driverInstaller | default dict -}}
{{- if and .Values.agent.prepareNode (eq (toString $i.enabled) "true") }}true{{ end -}}
{{- end -}}

{{/* The agent runs host commands in PID 1's namespaces when asked to (agent.hostNamespace) and
     whenever it may install the driver: the installer uses the host's package manager and
     builds for the host's kernel. */}}
{{- define "erdma.agentHostNamespace" -}}
{{- if or .Values.agent.hostNamespace (include "erdma.driverInstaller" .) }}true{{ end -}}
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
