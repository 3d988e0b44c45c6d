variable "project" {
  description = "Google Cloud project id."
  type        = string
}

variable "region" {
  description = "Region of the cluster."
  type        = string
  default     = "us-central1"
}

variable "zones" {
  description = "Zones for the node pools (pick ones with L4 GPUs)."
  type        = list(string)
  default     = ["us-central1-a", "us-central1-b"]
}

variable "cluster_name" {
  description = "Name of the GKE cluster."
  type        = string
  default     = "shoal"
}

variable "master_authorized_cidr" {
  description = "CIDR allowed to reach the Kubernetes API (your office or CI runner)."
  type        = string
}

variable "image_repository" {
  description = "Artifact Registry path of the shoal image, e.g. us-central1-docker.pkg.dev/PROJECT/shoal/shoal."
  type        = string
}

variable "image_tag" {
  description = "Tag of the CPU image."
  type        = string
  default     = "0.1.0-cpu"
}

variable "cuda_image_tag" {
  description = "Tag of the CUDA image."
  type        = string
  default     = "0.1.0-cuda"
}

variable "api_keys" {
  description = "Gateway API keys."
  type        = list(string)
  default     = []
  sensitive   = true
}
