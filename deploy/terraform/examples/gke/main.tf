# shoal on Google Kubernetes Engine: a private regional cluster with a system node pool and two L4 GPU
# pools (on-demand and spot), KEDA, and the shoal module with one worker pool per GPU node pool.

provider "google" {
  project = var.project
  region  = var.region
}

data "google_client_config" "current" {}

resource "google_service_account" "nodes" {
  account_id   = "${var.cluster_name}-nodes"
  display_name = "shoal GKE nodes"
}

resource "google_project_iam_member" "nodes" {
  for_each = toset(["roles/logging.logWriter", "roles/monitoring.metricWriter", "roles/artifactregistry.reader"])
  project  = var.project
  role     = each.value
  member   = "serviceAccount:${google_service_account.nodes.email}"
}

resource "google_container_cluster" "shoal" {
  # checkov:skip=CKV_GCP_65:Google Groups for RBAC needs a Google Workspace domain this example cannot assume; set authenticator_groups_config where you have one
  name                        = var.cluster_name
  location                    = var.region
  node_locations              = var.zones
  remove_default_node_pool    = true
  initial_node_count          = 1
  networking_mode             = "VPC_NATIVE"
  enable_intranode_visibility = true
  enable_shielded_nodes       = true
  deletion_protection         = true
  resource_labels = {
    app = "shoal"
  }

  ip_allocation_policy {}

  release_channel {
    channel = "REGULAR"
  }

  workload_identity_config {
    workload_pool = "${var.project}.svc.id.goog"
  }

  private_cluster_config {
    enable_private_nodes    = true
    enable_private_endpoint = false
    master_ipv4_cidr_block  = "172.16.0.16/28"
  }

  master_authorized_networks_config {
    cidr_blocks {
      cidr_block   = var.master_authorized_cidr
      display_name = "operators"
    }
  }

  network_policy {
    enabled = true
  }

  addons_config {
    network_policy_config {
      disabled = false
    }
  }

  binary_authorization {
    evaluation_mode = "PROJECT_SINGLETON_POLICY_ENFORCE"
  }

  master_auth {
    client_certificate_config {
      issue_client_certificate = false
    }
  }

  logging_service    = "logging.googleapis.com/kubernetes"
  monitoring_service = "monitoring.googleapis.com/kubernetes"

  node_config {
    service_account = google_service_account.nodes.email
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
    metadata = {
      disable-legacy-endpoints = "true"
    }
  }
}

locals {
  # what every node pool shares: the node service account, shielded boot, workload identity, no legacy metadata
  node_defaults = {
    oauth_scopes = ["https://www.googleapis.com/auth/cloud-platform"]
  }
  gpu_pools = {
    gpu-ondemand = { spot = false, min = 1, max = 4 }
    gpu-spot     = { spot = true, min = 0, max = 16 }
  }
}

resource "google_container_node_pool" "system" {
  name     = "system"
  cluster  = google_container_cluster.shoal.id
  location = var.region

  autoscaling {
    min_node_count = 1
    max_node_count = 3
  }

  management {
    auto_repair  = true
    auto_upgrade = true
  }

  node_config {
    machine_type    = "e2-standard-4"
    image_type      = "COS_CONTAINERD"
    service_account = google_service_account.nodes.email
    oauth_scopes    = local.node_defaults.oauth_scopes
    labels = {
      "shoal.dev/node-pool" = "system"
    }
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
    metadata = {
      disable-legacy-endpoints = "true"
    }
  }
}

resource "google_container_node_pool" "gpu" {
  for_each = local.gpu_pools
  name     = each.key
  cluster  = google_container_cluster.shoal.id
  location = var.region

  autoscaling {
    total_min_node_count = each.value.min
    total_max_node_count = each.value.max
  }

  management {
    auto_repair  = true
    auto_upgrade = true
  }

  node_config {
    machine_type    = "g2-standard-8"
    image_type      = "COS_CONTAINERD"
    spot            = each.value.spot
    service_account = google_service_account.nodes.email
    oauth_scopes    = local.node_defaults.oauth_scopes
    labels = {
      "shoal.dev/node-pool" = each.key
    }
    guest_accelerator {
      type  = "nvidia-l4"
      count = 1
      gpu_driver_installation_config {
        gpu_driver_version = "LATEST"
      }
    }
    # GKE taints GPU nodes with nvidia.com/gpu; spot nodes get a taint of ours so only spot-tolerant pools land there
    dynamic "taint" {
      for_each = each.value.spot ? [1] : []
      content {
        key    = "cloud.google.com/gke-spot"
        value  = "true"
        effect = "NO_SCHEDULE"
      }
    }
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
    metadata = {
      disable-legacy-endpoints = "true"
    }
  }
}

provider "kubernetes" {
  host                   = "https://${google_container_cluster.shoal.endpoint}"
  token                  = data.google_client_config.current.access_token
  cluster_ca_certificate = base64decode(google_container_cluster.shoal.master_auth[0].cluster_ca_certificate)
}

provider "helm" {
  kubernetes {
    host                   = "https://${google_container_cluster.shoal.endpoint}"
    token                  = data.google_client_config.current.access_token
    cluster_ca_certificate = base64decode(google_container_cluster.shoal.master_auth[0].cluster_ca_certificate)
  }
}

# KEDA scales the worker pools on their NATS JetStream consumers' lag.
resource "helm_release" "keda" {
  name             = "keda"
  namespace        = "keda"
  create_namespace = true
  repository       = "https://kedacore.github.io/charts"
  chart            = "keda"
  version          = "2.16.1"
  depends_on       = [google_container_node_pool.system]
}

module "shoal" {
  source           = "../../modules/shoal"
  image_repository = var.image_repository
  image_tag        = var.image_tag
  cuda_image_tag   = var.cuda_image_tag
  api_keys         = var.api_keys
  monitoring       = false # true once the Prometheus Operator (kube-prometheus-stack) is installed

  worker_pools = [
    {
      name           = "gpu-ondemand"
      models         = ["sentence-transformers/all-MiniLM-L6-v2", "BAAI/bge-reranker-v2-m3"]
      preload        = ["sentence-transformers/all-MiniLM-L6-v2"]
      min_replicas   = 1
      max_replicas   = 4
      lag_threshold  = 256
      gpu_count      = 1
      device_budget  = "18GB"
      node_selector  = { "shoal.dev/node-pool" = "gpu-ondemand" }
      tolerations    = [{ key = "nvidia.com/gpu", operator = "Exists" }]
      cpu_request    = "4"
      cpu_limit      = "7"
      memory_request = "16Gi"
      memory_limit   = "24Gi"
    },
    {
      name                     = "gpu-spot"
      models                   = ["naver/splade-v3", "BAAI/bge-m3"]
      min_replicas             = 0
      max_replicas             = 16
      lag_threshold            = 256
      activation_lag_threshold = 1
      gpu_count                = 1
      device_budget            = "18GB"
      node_selector            = { "shoal.dev/node-pool" = "gpu-spot" }
      tolerations = [
        { key = "nvidia.com/gpu", operator = "Exists" },
        { key = "cloud.google.com/gke-spot", value = "true" },
      ]
      cpu_request    = "4"
      cpu_limit      = "7"
      memory_request = "16Gi"
      memory_limit   = "24Gi"
    },
  ]

  depends_on = [helm_release.keda, google_container_node_pool.gpu]
}
