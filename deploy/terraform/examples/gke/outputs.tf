output "cluster_name" {
  description = "GKE cluster name (gcloud container clusters get-credentials NAME --region REGION)."
  value       = google_container_cluster.shoal.name
}

output "gateway_service" {
  description = "In-cluster address of the shoal gateway."
  value       = module.shoal.gateway_service
}
