variable "namespace" {
  description = "Kubernetes namespace created for shoal."
  type        = string
  default     = "shoal"
}

variable "release_name" {
  description = "Helm release name."
  type        = string
  default     = "shoal"
}

variable "chart_path" {
  description = "Path (or repository chart reference) of the shoal Helm chart; defaults to deploy/helm/shoal in this repository."
  type        = string
  default     = null
}

variable "image_repository" {
  description = "Registry path of the shoal image built from deploy/docker."
  type        = string
}

variable "image_tag" {
  description = "Tag of the CPU image (gateway, CPU pools)."
  type        = string
}

variable "cuda_image_tag" {
  description = "Tag of the CUDA image, used by pools with gpu_count > 0."
  type        = string
  default     = null
}

variable "worker_pools" {
  description = "Worker pools: each a Deployment of shoal workers with a model allow-list, node placement and KEDA bounds."
  type = list(object({
    name                     = string
    models                   = list(string)
    min_replicas             = optional(number, 0)
    max_replicas             = optional(number, 4)
    lag_threshold            = optional(number, 64)
    activation_lag_threshold = optional(number, 0)
    preload                  = optional(list(string), [])
    gpu_count                = optional(number, 0)
    gpu_resource             = optional(string, "nvidia.com/gpu")
    device_budget            = optional(string, "")
    node_selector            = optional(map(string), {})
    tolerations = optional(list(object({
      key      = string
      operator = optional(string, "Equal")
      value    = optional(string)
      effect   = optional(string, "NoSchedule")
    })), [])
    cpu_request    = optional(string, "1")
    memory_request = optional(string, "2Gi")
    cpu_limit      = optional(string, "2")
    memory_limit   = optional(string, "4Gi")
  }))
  validation {
    condition     = alltrue([for p in var.worker_pools : p.min_replicas <= p.max_replicas && length(p.models) > 0])
    error_message = "Every pool needs min_replicas <= max_replicas and a non-empty model allow-list (KEDA scales on its models' consumers)."
  }
}

variable "models" {
  description = "Extra model cards for the catalogue ConfigMap: file name (ending .yaml) to card."
  type        = any
  default     = {}
}

variable "api_keys" {
  description = "Gateway API keys; empty leaves the gateway open (put it behind your own auth then)."
  type        = list(string)
  default     = []
  sensitive   = true
}

variable "monitoring" {
  description = "Create the ServiceMonitor, PrometheusRule and Grafana dashboard ConfigMaps (needs the Prometheus Operator CRDs)."
  type        = bool
  default     = true
}

variable "extra_values" {
  description = "More chart values, merged last (see deploy/helm/shoal/values.yaml)."
  type        = any
  default     = {}
}
