"""Alibaba Cloud ECS: Elastic RDMA Interfaces through the ECS OpenAPI (the default provider)."""
