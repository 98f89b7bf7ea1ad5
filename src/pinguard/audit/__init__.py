"""The audit: replaying layers into per-step states, and diffing those states with causes."""
