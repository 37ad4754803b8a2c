"""The local stack: Apache Kafka (KRaft) and an S3 server on 127.0.0.1, no Docker."""
