{{/* How SMC-R is configured: smcr.mode (a bare YAML `off` reads as false; auto: the webhook in
     Regular mode, off in Local mode, with the ofed driver mode, which has no SMC-R, and where the
     reference keys forbid the injection). Values of a chart
     version without smcr.mode keep what its keys chose: the webhook's injection when
     config.enableWebhook with enableInitContainerInject and enableDevicePlugin (both default
     true), else PreStartContainer, which the ofed driver mode never had. */}}
{{- define "erdma.smcrMode" -}}
{{- $mode := (.Values.smcr | default dict).mode -}}
{{- $c := .Values.config | default dict -}}
{{- if kindIs "bool" $mode -}}off
{{- else if eq $mode "auto" -}}{{ ternary "webhook" "off" (and (not $c.localERIDiscovery) (ne .Values.agent.preferDriver "ofed") (include "erdma.legacyInject" . | eq "true")) }}
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

{{/* Whether the driver DaemonSet installs a missing driver while preparing the node:
     agent.driverInstaller.enabled (true in values.yaml, as in the reference). A release of a
     chart version without the value (kept by `helm upgrade --reuse-values`) never installed
     drivers and keeps not doing so. */}}
{{- define "erdma.driverInstaller" -}}
{{- $i := .Values.agent.driverInstaller | default dict -}}
{{- if and .Values.agent.prepareNode (eq (toString $i.enabled) "true") }}true{{ end -}}
{{- end -}}

{{/* The driver DaemonSet runs host commands in PID 1's namespaces when asked to
     (agent.hostNamespace) and whenever it may install the driver: the installer uses the
     host's package manager and builds for the host's kernel. The agent never does. */}}
{{- define "erdma.driverHostNamespace" -}}
{{- if or .Values.agent.hostNamespace (include "erdma.driverInstaller" .) }}true{{ end -}}
{{- end -}}

{{/* The Secret (name and key) holding driverInstallCommand, when one is named: the command may
     carry a token, which then never enters the ConfigMap or Helm's release values. */}}
{{- define "erdma.driverInstallCommandSecret" -}}
{{- $s := .Values.agent.driverInstallCommandSecret | default dict -}}
{{- if $s.name }}{{ toJson (dict "name" $s.name "key" ($s.key | default "command")) }}{{ end -}}
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

{{/* Whether the API server serves ValidatingAdmissionPolicy. Where Helm asks the cluster
     (install, upgrade: its capabilities then list every served kind, webhook configurations
     included), the cluster's answer; where it cannot (`helm template`), the version: GA from
     Kubernetes 1.30, so the default or a given --kube-version decides. */}}
{{- define "erdma.admissionPolicyServed" -}}
{{- $live := .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration" -}}
{{- $listed := .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy" -}}
{{- $ga := semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version -}}
{{- if or $listed (and (not $live) $ga) }}true{{ end -}}
{{- end -}}

{{/* The capabilities the agent's container adds (JSON list). NET_ADMIN: ERI netdev bring-up
     and the SMC pnet table in the host network (Regular mode, Local mode with
     bringUpLocalERIs). smcr.mode=prestart makes the container privileged instead. */}}
{{- define "erdma.agentCapabilities" -}}
{{- $caps := list -}}
{{- if include "erdma.agentHostNetwork" . }}{{ $caps = append $caps "NET_ADMIN" }}{{ end -}}
{{- toJson $caps -}}
{{- end -}}

{{/* The capabilities the driver DaemonSet's init container adds (JSON list). SYS_MODULE:
     modprobe erdma / smc, rmmod erdma to switch compat_mode. SYS_ADMIN, SYS_CHROOT, SYS_PTRACE:
     nsenter into PID 1's mount namespace. CHOWN, DAC_OVERRIDE, FOWNER, FSETID, SETUID, SETGID:
     the host's package manager and DKMS install files of other owners and drop to their own
     users (driverInstaller). */}}
{{- define "erdma.driverCapabilities" -}}
{{- $caps := list "SYS_MODULE" -}}
{{- if include "erdma.driverHostNamespace" . }}{{ $caps = concat $caps (list "SYS_ADMIN" "SYS_CHROOT" "SYS_PTRACE") }}{{ end -}}
{{- if include "erdma.driverInstaller" . }}{{ $caps = concat $caps (list "CHOWN" "DAC_OVERRIDE" "FOWNER" "FSETID" "SETUID" "SETGID") }}{{ end -}}
{{- toJson $caps -}}
{{- end -}}

{{/* Every right this release's node pods hold (JSON list, sorted): capabilities, privileged,
     hostNetwork, hostPID, whichever pod holds them. NOTES.txt compares it with the release
     it upgrades. */}}
{{- define "erdma.nodePrivileges" -}}
{{- $all := list -}}
{{- if eq (include "erdma.smcrMode" .) "prestart" }}{{ $all = append $all "privileged" }}{{ else }}{{ $all = concat $all (include "erdma.agentCapabilities" . | fromJsonArray) }}{{ end -}}
{{- if include "erdma.agentHostNetwork" . }}{{ $all = append $all "hostNetwork" }}{{ end -}}
{{- if .Values.agent.prepareNode -}}
{{- $all = concat $all (include "erdma.driverCapabilities" . | fromJsonArray) -}}
{{- if include "erdma.driverHostNamespace" . }}{{ $all = append $all "hostPID" }}{{ end -}}
{{- end -}}
{{- if and .Values.sharedRdma.enabled .Values.sharedRdma.nonHostNetworkRdma }}{{ $all = append $all "hostNetwork" }}{{ end -}}
{{- $all | uniq | sortAlpha | toJson -}}
{{- end -}}

{{/* The same rights, read from the node DaemonSets the cluster runs now (JSON list, sorted;
     empty where Helm cannot ask the cluster, as in `helm template`). */}}
{{- define "erdma.livePrivileges" -}}
{{- $all := list -}}
{{- range $name := list (include "erdma.agentName" .) (include "erdma.driverName" .) "ack-rdma-dp-ds" -}}
{{- $ds := lookup "apps/v1" "DaemonSet" $.Release.Namespace $name -}}
{{- if $ds -}}
{{- $pod := $ds.spec.template.spec -}}
{{- if $pod.hostNetwork }}{{ $all = append $all "hostNetwork" }}{{ end -}}
{{- if $pod.hostPID }}{{ $all = append $all "hostPID" }}{{ end -}}
{{- range $c := concat ($pod.containers | default list) ($pod.initContainers | default list) -}}
{{- $context := $c.securityContext | default dict -}}
{{- if $context.privileged }}{{ $all = append $all "privileged" }}{{ end -}}
{{- $all = concat $all (($context.capabilities | default dict).add | default list) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $all | uniq | sortAlpha | toJson -}}
{{- end -}}
