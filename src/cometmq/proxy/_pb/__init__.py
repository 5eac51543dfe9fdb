"""Code generated from src/cometmq/proxy/protos by scripts/generate-grpc.sh: do not edit."""
