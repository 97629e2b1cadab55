{{- define "karpenter.labels" -}}
app.kubernetes.io/name: karpenter-rs
app.kubernetes.io/instance: {{ .Values.name }}
{{- end }}
