"""Static checks of `deploy/` (manifests, rules, dashboard, Dockerfiles, compose) for CI.

`python -m deploy.checks` runs them all (deploy.checks.runner); the tools they call are
installed by `python -m deploy.tools.install`. `make check-deploy` does both.
"""
