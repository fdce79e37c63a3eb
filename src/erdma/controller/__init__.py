"""Regular-mode controller: Elastic RDMA Interfaces through the ECS OpenAPI."""
