"""Bundled providers: `process`, `podman` and `docker`, registered through entry points like
anyone else's. The contract they keep is `ecotone.providers.contract`."""
