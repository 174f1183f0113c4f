"""Object storage adapters (obstore): local directories (`file:///DIR`) and S3 (`s3://bucket/prefix`)."""
