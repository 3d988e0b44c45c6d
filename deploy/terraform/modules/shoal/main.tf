# Creates a namespace and installs the shoal chart in it, with worker pools for GPU node pools.

locals {
  # the chart's fullname: the release name when it already contains "shoal"
  fullname   = strcontains(var.release_name, "shoal") ? var.release_name : "${var.release_name}-shoal"
  chart_path = coalesce(var.chart_path, "${path.module}/../../../helm/shoal")
  pools = [for p in var.worker_pools : {
    name                   = p.name
    models                 = p.models
    preload                = p.preload
    minReplicas            = p.min_replicas
    maxReplicas            = p.max_replicas
    lagThreshold           = p.lag_threshold
    activationLagThreshold = p.activation_lag_threshold
    device                 = p.gpu_count > 0 ? "cuda" : "cpu"
    deviceBudget           = p.device_budget
    gpu                    = { count = p.gpu_count, resource = p.gpu_resource }
    image                  = p.gpu_count > 0 && var.cuda_image_tag != null ? { tag = var.cuda_image_tag } : {}
    nodeSelector           = p.node_selector
    tolerations            = [for t in p.tolerations : { for k, v in t : k => v if v != null }]
    resources = {
      requests = { cpu = p.cpu_request, memory = p.memory_request }
      limits   = { cpu = p.cpu_limit, memory = p.memory_limit }
    }
  }]
  values = {
    image       = { repository = var.image_repository, tag = var.image_tag }
    workerPools = local.pools
    models      = var.models
    auth = {
      enabled        = length(var.api_keys) > 0
      existingSecret = length(var.api_keys) > 0 ? kubernetes_secret.api_keys[0].metadata[0].name : ""
    }
    metrics = {
      serviceMonitor    = { enabled = var.monitoring }
      prometheusRule    = { enabled = var.monitoring }
      grafanaDashboards = { enabled = var.monitoring }
    }
  }
}

resource "kubernetes_namespace" "shoal" {
  metadata {
    name = var.namespace
    labels = {
      "app.kubernetes.io/part-of" = "shoal"
    }
  }
}

resource "kubernetes_secret" "api_keys" {
  count = length(var.api_keys) > 0 ? 1 : 0
  metadata {
    name      = "${var.release_name}-api-keys"
    namespace = kubernetes_namespace.shoal.metadata[0].name
  }
  data = {
    "api-key"  = var.api_keys[0]
    "api-keys" = join("\n", var.api_keys)
  }
  type = "Opaque"
}

resource "helm_release" "shoal" {
  name             = var.release_name
  namespace        = kubernetes_namespace.shoal.metadata[0].name
  chart            = local.chart_path
  create_namespace = false
  atomic           = true
  wait             = true
  timeout          = 900
  values           = [yamlencode(local.values), yamlencode(var.extra_values)]
}
