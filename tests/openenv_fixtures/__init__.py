"""Programs run with the separate openenv venv's python (never imported by the test process)."""
