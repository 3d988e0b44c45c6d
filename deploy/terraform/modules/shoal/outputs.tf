output "namespace" {
  description = "Namespace shoal runs in."
  value       = kubernetes_namespace.shoal.metadata[0].name
}

output "release_name" {
  description = "Helm release name."
  value       = helm_release.shoal.name
}

output "gateway_service" {
  description = "In-cluster address of the gateway."
  value       = "http://${local.fullname}-gateway.${kubernetes_namespace.shoal.metadata[0].name}.svc:8080"
}
