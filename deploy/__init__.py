"""Deployment assets; `deploy.local` runs the loopback development stack."""
