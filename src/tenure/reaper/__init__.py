"""The reaper: conservative, auditable recovery of expired leases (R7)."""
