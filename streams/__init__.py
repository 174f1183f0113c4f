"""Topics (declared in topics.yaml), event schemas and the processor topology/runtime."""
