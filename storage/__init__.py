"""Generic object store port with put-if-absent: S3-compatible (boto3) and local folder."""
